/* cpu_rope.c - ROPE_FWD/BWD: a rotary position embedding on the tokens of
 * [n, T, C], each head of d columns turning its pairs (j, j + d/2) by the
 * token's angles (rope.h), in any float dtype.
 *
 * The cos and sin of the T x d/2 angles are made once per call into the
 * workspace (the op's, in the arena), then every sample's tokens read them:
 * a table of T d floats against n T C rotations. */
#include "base/err.h"
#include "device/cpu.h"
#include "device/half.h"
#include "device/rope.h"

/* cs: per token t, the d/2 cos, then the d/2 sin (rope.h's angles: the
 * frequencies once, then t times each, as Hugging Face's float32 outer) */
static void table(const bfit_op_desc *d, float *cs)
{
    int64_t T = d->u.rope.T, h = d->u.rope.d / 2;
    float inv[4096];
    for (int64_t j = 0; j < h; j++)
        inv[j] = bfit_rope_inv(j, d->u.rope.d, d->u.rope.theta);
    BFIT_PAR_ROWS_IF(T * h > BFIT_PAR_MIN, for (int64_t t = 0; t < T; t++) {
        for (int64_t j = 0; j < h; j++) {
            double a = (float)t * inv[j];
            cs[t * 2 * h + j] = (float)cos(a);
            cs[t * 2 * h + h + j] = (float)sin(a);
        }
    });
}

/* y = x turned by +angle (forward) or -angle (back: the transpose); f32 and
 * bf16 in plain loops the compiler vectorises, f16 through bfit_ld/st */
static void turn(const bfit_op_desc *d, const float *cs, const void *x, void *y, float sign)
{
    bfit_dtype dt = d->dtype;
    int64_t T = d->u.rope.T, C = d->u.rope.C, D = d->u.rope.d, h = D / 2, rows = d->u.rope.n * T;
    BFIT_PAR_ROWS_IF(rows * C > BFIT_PAR_MIN, for (int64_t r = 0; r < rows; r++) {
        const float *co = cs + (r % T) * 2 * h, *si = co + h;
        for (int64_t k = r * C; k < (r + 1) * C; k += D) {
            if (dt == BFIT_F32) {
                const float *xa = (const float *)x + k, *xb = xa + h;
                float *ya = (float *)y + k, *yb = ya + h;
                for (int64_t j = 0; j < h; j++) {
                    float a = xa[j], b = xb[j], s = sign * si[j];
                    ya[j] = a * co[j] - b * s;
                    yb[j] = b * co[j] + a * s;
                }
            } else if (dt == BFIT_BF16) {
                const uint16_t *xa = (const uint16_t *)x + k, *xb = xa + h;
                uint16_t *ya = (uint16_t *)y + k, *yb = ya + h;
                for (int64_t j = 0; j < h; j++) {
                    float a = bfit_bf16_to_f32(xa[j]), b = bfit_bf16_to_f32(xb[j]), s = sign * si[j];
                    ya[j] = bfit_f32_to_bf16(a * co[j] - b * s);
                    yb[j] = bfit_f32_to_bf16(b * co[j] + a * s);
                }
            } else {
                for (int64_t j = 0; j < h; j++) {
                    float a = bfit_ld(x, dt, k + j), b = bfit_ld(x, dt, k + j + h), s = sign * si[j];
                    bfit_st(y, dt, k + j, a * co[j] - b * s);
                    bfit_st(y, dt, k + j + h, b * co[j] + a * s);
                }
            }
        }
    });
}

static int run(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int fwd = d->kind == BFIT_OP_ROPE_FWD;
    const void *x = fwd ? a->src : a->diff_dst;
    void *y = fwd ? a->dst : a->diff_src;

    if (!x || !y || !a->workspace)
        return bfit_fail(BFIT_EINVAL, "rotary embedding: %s and a workspace are required",
                         fwd ? "src, dst" : "diff_dst, diff_src");
    table(d, a->workspace);
    turn(d, a->workspace, x, y, fwd ? 1.0f : -1.0f);
    return BFIT_OK;
}

int bfit_cpu_rope_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;

    if (!bfit_rope_ok(d))
        return bfit_fail(BFIT_EINVAL, BFIT_ROPE_BAD, BFIT_ROPE_BAD_ARGS(d));
    op->ws = BFIT_ALIGN_UP((size_t)(d->u.rope.T * d->u.rope.d) * sizeof(float));
    op->saved = 0;
    op->run = run;
    return BFIT_OK;
}
