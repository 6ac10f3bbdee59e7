/* cpu_concat.c - ops on rows and columns, plain loops in any float dtype:
 * CONCAT_FWD/BWD, inputs side by side in the rows of the output (torch.cat
 * along a dimension: each row is everything before that dimension, each
 * input's columns everything from it on). The backward hands each input its
 * columns of the output's gradient, overwriting or adding (an input that
 * feeds several concatenations, as in DenseNet, gets its gradient summed
 * without a temporary); a broadcast input (a learned token prepended to
 * every sample) gets the sum over the rows. TRANSPOSE of each sample's
 * matrix, ADD_ROWS of a row to every row, SLICE_FWD/BWD of a column range. */
#include "base/err.h"
#include "device/cpu.h"
#include "device/half.h"

#include <string.h>

static int run_fwd(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t rows = d->u.concat.rows, ld = bfit_op_concat_cols(d);
    size_t es = bfit_dtype_size(d->dtype);

    if (!a->srcs || !a->dst)
        return bfit_fail(BFIT_EINVAL, "concat forward: srcs and dst are required");
    for (int k = 0, off = 0; k < d->u.concat.n; off += (int)d->u.concat.cols[k], k++) {
        const char *x = a->srcs[k];
        char *y = (char *)a->dst + (size_t)off * es;
        size_t len = (size_t)d->u.concat.cols[k] * es;
        if (!x)
            return bfit_fail(BFIT_EINVAL, "concat forward: input %d is missing", k);
        size_t xs = (d->u.concat.bcast >> k & 1) ? 0 : len; /* a broadcast input: one row for all */
        BFIT_PAR_FOR_IF(rows * d->u.concat.cols[k] > BFIT_PAR_MIN, for (int64_t r = 0; r < rows; r++)
                                                                      memcpy(y + (size_t)r * (size_t)ld * es,
                                                                             x + (size_t)r * xs, len););
    }
    return BFIT_OK;
}

/* dx[r, 0:cols] (+)= dy[r, off:off+cols] over the rows. */
static void slice_back(bfit_dtype t, const void *dy, void *dx, int64_t rows, int64_t ld, int64_t off, int64_t cols,
                       int add)
{
    size_t es = bfit_dtype_size(t);
    if (!add) {
        BFIT_PAR_FOR_IF(rows * cols > BFIT_PAR_MIN, for (int64_t r = 0; r < rows; r++)
                                                        memcpy((char *)dx + (size_t)(r * cols) * es,
                                                               (const char *)dy + (size_t)(r * ld + off) * es,
                                                               (size_t)cols * es););
    } else if (t == BFIT_F32) {
        const float *s = dy;
        float *o = dx;
        BFIT_PAR_FOR_IF(rows * cols > BFIT_PAR_MIN, for (int64_t r = 0; r < rows; r++) for (int64_t j = 0; j < cols;
                                                                                             j++)
                                                        o[r * cols + j] += s[r * ld + off + j];);
    } else if (t == BFIT_BF16) { /* bfit_ld/st's sum, in loops the compiler vectorizes (DenseNet's
                                    * concatenations' backward took 6 times f32's through them) */
        const uint16_t *s = dy;
        uint16_t *o = dx;
        BFIT_PAR_ROWS_IF(rows * cols > BFIT_PAR_MIN, for (int64_t r = 0; r < rows; r++) {
            uint16_t *orow = o + r * cols;
            const uint16_t *srow = s + r * ld + off;
            _Pragma("omp simd") for (int64_t j = 0; j < cols; j++)
                orow[j] = bfit_f32_to_bf16(bfit_bf16_to_f32(orow[j]) + bfit_bf16_to_f32(srow[j]));
        });
    } else {
        BFIT_PAR_FOR_IF(rows * cols > BFIT_PAR_MIN, for (int64_t r = 0; r < rows; r++) for (int64_t j = 0; j < cols;
                                                                                             j++)
                                                        bfit_st(dx, t, r * cols + j,
                                                                bfit_ld(dx, t, r * cols + j) +
                                                                    bfit_ld(dy, t, r * ld + off + j)););
    }
}

/* g[j] += sum over the rows of dy[r, off + j]: a broadcast input's gradient
 * (a parameter: f32), summed in double in a fixed order. */
static void sum_rows(const void *dy, float *g, bfit_dtype t, int64_t rows, int64_t ld, int64_t off, int64_t cols)
{
    BFIT_PAR_FOR_IF(rows * cols > BFIT_PAR_MIN, for (int64_t j = 0; j < cols; j++) {
        double s = 0;
        for (int64_t r = 0; r < rows; r++)
            s += bfit_ld(dy, t, r * ld + off + j);
        g[j] += (float)s;
    });
}

static int run_bwd(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t ld = bfit_op_concat_cols(d), off = 0;

    if (!a->dsts || !a->diff_dst)
        return bfit_fail(BFIT_EINVAL, "concat backward: dsts and diff_dst are required");
    for (int k = 0; k < d->u.concat.n; off += d->u.concat.cols[k], k++) {
        if (!a->dsts[k])
            continue;
        if (d->u.concat.bcast >> k & 1)
            sum_rows(a->diff_dst, a->dsts[k], d->dtype, d->u.concat.rows, ld, off, d->u.concat.cols[k]);
        else
            slice_back(d->dtype, a->diff_dst, a->dsts[k], d->u.concat.rows, ld, off, d->u.concat.cols[k],
                       (a->add_mask >> k) & 1u);
    }
    return BFIT_OK;
}

/* ---- transpose, broadcast add, slices ------------------------------------------ */

/* One sample's [A, B] to [B, A] in tiles of TT x TT, so that both sides
 * stay in cache (ConvNeXt's [C, H*W] to [H*W, C]: one element at a time it
 * was 9% of the step); elements of 2 or 4 bytes, as the dtypes are. */
#define TT 32
#define TRANSPOSE_TILE(T)                                                                                          \
    static void tile_##T(const T *x, T *y, int64_t A, int64_t B, int64_t i0, int64_t j0)                         \
    {                                                                                                              \
        int64_t i1 = i0 + TT < A ? i0 + TT : A, j1 = j0 + TT < B ? j0 + TT : B;                                    \
        for (int64_t j = j0; j < j1; j++)                                                                          \
            for (int64_t i = i0; i < i1; i++)                                                                      \
                y[j * A + i] = x[i * B + j];                                                                       \
    }
TRANSPOSE_TILE(uint16_t)
TRANSPOSE_TILE(uint32_t)

static int run_transpose(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t n = d->u.tr.n, A = d->u.tr.a, B = d->u.tr.b, ti = (A + TT - 1) / TT, tj = (B + TT - 1) / TT;
    size_t es = bfit_dtype_size(d->dtype), q = d->u.tr.inner > 1 ? (size_t)d->u.tr.inner * es : 0;
    if (!a->src || !a->dst)
        return bfit_fail(BFIT_EINVAL, "transpose: src and dst are required");
    if (q) { /* blocks of q bytes (a channel shuffle's maps): a copy each */
        BFIT_PAR_FOR_IF(n * A * B * d->u.tr.inner > BFIT_PAR_MIN, for (int64_t e = 0; e < n * A * B; e++) {
            int64_t s = e / (A * B), j = e / A % B, i = e % A;
            memcpy((char *)a->dst + (size_t)e * q, (const char *)a->src + (size_t)((s * A + i) * B + j) * q, q);
        });
        return BFIT_OK;
    }
    if (es != 2 && es != 4)
        return bfit_fail(BFIT_EINVAL, "transpose: elements of %zu bytes", es);
    BFIT_PAR_FOR_IF(n * A * B > BFIT_PAR_MIN, for (int64_t t = 0; t < n * ti * tj; t++) {
        int64_t s = t / (ti * tj), i0 = t / tj % ti * TT, j0 = t % tj * TT;
        if (es == 4)
            tile_uint32_t((const uint32_t *)a->src + s * A * B, (uint32_t *)a->dst + s * A * B, A, B, i0, j0);
        else
            tile_uint16_t((const uint16_t *)a->src + s * A * B, (uint16_t *)a->dst + s * A * B, A, B, i0, j0);
    });
    return BFIT_OK;
}

static int run_add_rows(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t M = d->u.rows.M, N = d->u.rows.N;
    bfit_dtype t = d->dtype;
    const float *b = a->bias;
    if (!a->src || !a->bias || !a->dst)
        return bfit_fail(BFIT_EINVAL, "broadcast add: src, bias and dst are required");
    BFIT_PAR_FOR_IF(M * N > BFIT_PAR_MIN, for (int64_t r = 0; r < M; r++) for (int64_t j = 0; j < N; j++)
        bfit_st(a->dst, t, r * N + j, bfit_ld(a->src, t, r * N + j) + b[j]););
    return BFIT_OK;
}

static int run_slice(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t rows = d->u.slice.rows, ld = d->u.slice.ld, off = d->u.slice.off, len = d->u.slice.len;
    size_t es = bfit_dtype_size(d->dtype);
    if (d->kind == BFIT_OP_SLICE_FWD) {
        if (!a->src || !a->dst)
            return bfit_fail(BFIT_EINVAL, "slice: src and dst are required");
        for (int64_t r = 0; r < rows; r++)
            memcpy((char *)a->dst + (size_t)(r * len) * es, (const char *)a->src + (size_t)(r * ld + off) * es,
                   (size_t)len * es);
        return BFIT_OK;
    }
    if (!a->diff_dst || !a->diff_src)
        return bfit_fail(BFIT_EINVAL, "slice backward: diff_dst and diff_src are required");
    memset(a->diff_src, 0, (size_t)(rows * ld) * es);
    for (int64_t r = 0; r < rows; r++)
        memcpy((char *)a->diff_src + (size_t)(r * ld + off) * es, (const char *)a->diff_dst + (size_t)(r * len) * es,
               (size_t)len * es);
    return BFIT_OK;
}

/* the shapes were checked by bfit_op_new (device.c) */
static int rows_init(cpu_op *op)
{
    const bfit_op_kind k = op->base.desc.kind;
    op->ws = op->saved = 0;
    op->run = k == BFIT_OP_TRANSPOSE ? run_transpose : k == BFIT_OP_ADD_ROWS ? run_add_rows : run_slice;
    return BFIT_OK;
}

int bfit_cpu_concat_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;

    if (d->kind != BFIT_OP_CONCAT_FWD && d->kind != BFIT_OP_CONCAT_BWD)
        return rows_init(op);
    /* the shape was checked by bfit_op_new (device.c) */
    op->ws = op->saved = 0;
    op->run = d->kind == BFIT_OP_CONCAT_FWD ? run_fwd : run_bwd;
    return BFIT_OK;
}
