/* cpu_concat.c - CONCAT_FWD/BWD: inputs side by side in the rows of the
 * output (torch.cat along a dimension: each row is everything before that
 * dimension, each input's columns everything from it on). The backward hands
 * each input its columns of the output's gradient, overwriting or adding
 * (an input that feeds several concatenations, as in DenseNet, gets its
 * gradient summed without a temporary). Plain loops, any float dtype. */
#include "base/err.h"
#include "device/cpu.h"
#include "device/half.h"

#include <string.h>

static int64_t total_cols(const bfit_op_desc *d)
{
    int64_t c = 0;
    for (int k = 0; k < d->u.concat.n; k++)
        c += d->u.concat.cols[k];
    return c;
}

static int run_fwd(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t rows = d->u.concat.rows, ld = total_cols(d);
    size_t es = bfit_dtype_size(d->dtype);

    if (!a->srcs || !a->dst)
        return bfit_fail(BFIT_EINVAL, "concat forward: srcs and dst are required");
    for (int k = 0, off = 0; k < d->u.concat.n; off += (int)d->u.concat.cols[k], k++) {
        const char *x = a->srcs[k];
        char *y = (char *)a->dst + (size_t)off * es;
        size_t len = (size_t)d->u.concat.cols[k] * es;
        if (!x)
            return bfit_fail(BFIT_EINVAL, "concat forward: input %d is missing", k);
        BFIT_PAR_FOR_IF(rows * d->u.concat.cols[k] > BFIT_PAR_MIN, for (int64_t r = 0; r < rows; r++)
                                                                      memcpy(y + (size_t)r * (size_t)ld * es,
                                                                             x + (size_t)r * len, len););
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
    } else {
        BFIT_PAR_FOR_IF(rows * cols > BFIT_PAR_MIN, for (int64_t r = 0; r < rows; r++) for (int64_t j = 0; j < cols;
                                                                                             j++)
                                                        bfit_st(dx, t, r * cols + j,
                                                                bfit_ld(dx, t, r * cols + j) +
                                                                    bfit_ld(dy, t, r * ld + off + j)););
    }
}

static int run_bwd(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t ld = total_cols(d), off = 0;

    if (!a->dsts || !a->diff_dst)
        return bfit_fail(BFIT_EINVAL, "concat backward: dsts and diff_dst are required");
    for (int k = 0; k < d->u.concat.n; off += d->u.concat.cols[k], k++)
        if (a->dsts[k])
            slice_back(d->dtype, a->diff_dst, a->dsts[k], d->u.concat.rows, ld, off, d->u.concat.cols[k],
                       (a->add_mask >> k) & 1u);
    return BFIT_OK;
}

int bfit_cpu_concat_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;

    if (d->u.concat.rows < 1 || d->u.concat.n < 1 || d->u.concat.n > BFIT_OP_MAXCAT)
        return bfit_fail(BFIT_EINVAL, "concat: %lld rows of %d inputs (1 to %d inputs)", (long long)d->u.concat.rows,
                         d->u.concat.n, BFIT_OP_MAXCAT);
    for (int k = 0; k < d->u.concat.n; k++)
        if (d->u.concat.cols[k] < 1)
            return bfit_fail(BFIT_EINVAL, "concat: input %d has %lld columns", k, (long long)d->u.concat.cols[k]);
    op->ws = op->saved = 0;
    op->run = d->kind == BFIT_OP_CONCAT_FWD ? run_fwd : run_bwd;
    return BFIT_OK;
}
