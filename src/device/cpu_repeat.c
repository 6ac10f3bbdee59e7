/* cpu_repeat.c - REPEAT_FWD/BWD: grouped-query attention's key and value
 * heads, each repeated r times (Hugging Face's repeat_kv), in any float
 * dtype. Backward sums a head's r gradients in f32, in order, so the result
 * does not depend on the threads. */
#include "base/err.h"
#include "device/cpu.h"
#include "device/half.h"

#include <string.h>

static int run(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t rows = d->u.rep.rows, g = d->u.rep.g, r = d->u.rep.r, D = d->u.rep.d;
    bfit_dtype t = d->dtype;

    if (d->kind == BFIT_OP_REPEAT_FWD) {
        if (!a->src || !a->dst)
            return bfit_fail(BFIT_EINVAL, "head repeat: src and dst are required");
        size_t es = bfit_dtype_size(t), head = (size_t)D * es; /* a copy: the bytes, whatever the dtype */
        const char *x = a->src;
        char *y = a->dst;
        BFIT_PAR_ROWS_IF(rows * g * r * D > BFIT_PAR_MIN, for (int64_t i = 0; i < rows; i++) {
            for (int64_t h = 0; h < g * r; h++)
                memcpy(y + (size_t)(i * g * r + h) * head, x + (size_t)(i * g + h / r) * head, head);
        });
        return BFIT_OK;
    }
    if (!a->diff_dst || !a->diff_src)
        return bfit_fail(BFIT_EINVAL, "head repeat backward: diff_dst and diff_src are required");
    if (t == BFIT_F32) { /* the same sums, in vectors across a head's columns */
        const float *dy = a->diff_dst;
        float *dx = a->diff_src;
        BFIT_PAR_ROWS_IF(rows * g * r * D > BFIT_PAR_MIN, for (int64_t i = 0; i < rows; i++) {
            for (int64_t h = 0; h < g; h++) {
                float *o = dx + (i * g + h) * D;
                const float *c0 = dy + (i * g * r + h * r) * D;
                for (int64_t j = 0; j < D; j++)
                    o[j] = c0[j];
                for (int64_t c = 1; c < r; c++)
                    for (int64_t j = 0; j < D; j++)
                        o[j] += c0[c * D + j];
            }
        });
        return BFIT_OK;
    }
    BFIT_PAR_ROWS_IF(rows * g * r * D > BFIT_PAR_MIN, for (int64_t i = 0; i < rows; i++) {
        for (int64_t h = 0; h < g; h++)
            for (int64_t j = 0; j < D; j++) {
                float s = 0.0f;
                for (int64_t c = 0; c < r; c++)
                    s += bfit_ld(a->diff_dst, t, (i * g * r + h * r + c) * D + j);
                bfit_st(a->diff_src, t, (i * g + h) * D + j, s);
            }
    });
    return BFIT_OK;
}

int bfit_cpu_repeat_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;

    if (d->u.rep.rows < 1 || d->u.rep.g < 1 || d->u.rep.r < 1 || d->u.rep.d < 1)
        return bfit_fail(BFIT_EINVAL, "head repeat: rows %lld, heads %lld, copies %lld and head size %lld must be "
                         "positive", (long long)d->u.rep.rows, (long long)d->u.rep.g, (long long)d->u.rep.r,
                         (long long)d->u.rep.d);
    op->ws = op->saved = 0;
    op->run = run;
    return BFIT_OK;
}
