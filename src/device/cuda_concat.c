/* cuda_concat.c - the ops on rows and columns on the GPU, as cpu_concat.c
 * has them: CONCAT_FWD/BWD (inputs side by side in the output's rows; the
 * backward sets or adds each input's columns, and sums a broadcast input's
 * over the rows), TRANSPOSE, ADD_ROWS, SLICE_FWD/BWD. Here: the argument
 * checks, and the launches of cuda_concat.cu's kernels. None has a
 * workspace or keeps anything.
 *
 * A concatenation runs input by input, in order, as the CPU's loop does:
 * an input fed twice (concat(x, x)) has the same gradient buffer twice,
 * the second adding (add_mask), and launches in order on the one stream
 * keep the first's copy before the second's add. Copies are exact and the
 * broadcast sums are the CPU's order: results equal the CPU's bit for
 * bit. */
#include "base/err.h"
#include "device/cuda.h"

static cudaStream_t stream(const cuda_op *op) { return cuda_dev(op)->stream; }
static int dt(const cuda_op *op) { return (int)op->base.desc.dtype; }

static int run_concat_fwd(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t ld = bfit_op_concat_cols(d), off = 0;
    cudaError_t e;

    if (!a->srcs || !a->dst)
        return bfit_fail(BFIT_EINVAL, "concat forward: srcs and dst are required");
    for (int k = 0; k < d->u.concat.n; k++)
        if (!a->srcs[k])
            return bfit_fail(BFIT_EINVAL, "concat forward: input %d is missing", k);
    for (int k = 0; k < d->u.concat.n; off += d->u.concat.cols[k], k++) {
        int64_t cols = d->u.concat.cols[k];
        /* a broadcast input: one row for all */
        bk_copy2d c = {d->u.concat.rows, cols, (d->u.concat.bcast >> k & 1) ? 0 : cols, 0, ld, off};
        if ((e = bk_copy2d_run(stream(op), dt(op), &c, a->srcs[k], a->dst, 0)) != cudaSuccess)
            return cuda_fail(e, "concatenation forward");
    }
    return BFIT_OK;
}

static int run_concat_bwd(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t ld = bfit_op_concat_cols(d), off = 0, rows = d->u.concat.rows;
    cudaError_t e;

    if (!a->dsts || !a->diff_dst)
        return bfit_fail(BFIT_EINVAL, "concat backward: dsts and diff_dst are required");
    for (int k = 0; k < d->u.concat.n; off += d->u.concat.cols[k], k++) {
        int64_t cols = d->u.concat.cols[k];
        bk_copy2d c = {rows, cols, ld, off, cols, 0};
        if (!a->dsts[k])
            continue;
        if (d->u.concat.bcast >> k & 1) /* a parameter's gradient (f32), always added */
            e = bk_col_sum_rows(stream(op), dt(op), a->diff_dst, a->dsts[k], rows, ld, off, cols);
        else
            e = bk_copy2d_run(stream(op), dt(op), &c, a->diff_dst, a->dsts[k], (a->add_mask >> k) & 1u);
        if (e != cudaSuccess)
            return cuda_fail(e, "concatenation backward");
    }
    return BFIT_OK;
}

/* ---- transpose, broadcast add, slices ------------------------------------------ */

static int run_transpose(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    if (!a->src || !a->dst)
        return bfit_fail(BFIT_EINVAL, "transpose: src and dst are required");
    return cuda_launched(bk_transpose(stream(op), dt(op), a->src, a->dst, d->u.tr.n, d->u.tr.a, d->u.tr.b,
                                      d->u.tr.inner > 1 ? d->u.tr.inner : 1),
                         "transpose");
}

static int run_add_rows(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    if (!a->src || !a->bias || !a->dst)
        return bfit_fail(BFIT_EINVAL, "broadcast add: src, bias and dst are required");
    return cuda_launched(bk_add_rows(stream(op), dt(op), a->src, a->bias, a->dst, d->u.rows.M, d->u.rows.N),
                         "broadcast add");
}

static int run_slice(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t rows = d->u.slice.rows, ld = d->u.slice.ld, off = d->u.slice.off, len = d->u.slice.len;
    bk_copy2d c = {rows, len, ld, off, len, 0};

    if (d->kind == BFIT_OP_SLICE_FWD) {
        if (!a->src || !a->dst)
            return bfit_fail(BFIT_EINVAL, "slice: src and dst are required");
        return cuda_launched(bk_copy2d_run(stream(op), dt(op), &c, a->src, a->dst, 0), "slice");
    }
    if (!a->diff_dst || !a->diff_src)
        return bfit_fail(BFIT_EINVAL, "slice backward: diff_dst and diff_src are required");
    return cuda_launched(bk_slice_bwd(stream(op), dt(op), a->diff_dst, a->diff_src, rows, ld, off, len),
                         "slice backward");
}

/* the shapes were checked by bfit_op_new (device.c) */
static int rows_init(cuda_op *op)
{
    const bfit_op_kind k = op->base.desc.kind;
    op->run = k == BFIT_OP_TRANSPOSE ? run_transpose : k == BFIT_OP_ADD_ROWS ? run_add_rows : run_slice;
    return BFIT_OK;
}

int cuda_concat_init(cuda_op *op)
{
    const bfit_op_desc *d = &op->base.desc;

    op->ws = op->saved = 0;
    if (d->kind != BFIT_OP_CONCAT_FWD && d->kind != BFIT_OP_CONCAT_BWD)
        return rows_init(op);
    /* the shape was checked by bfit_op_new (device.c) */
    op->run = d->kind == BFIT_OP_CONCAT_FWD ? run_concat_fwd : run_concat_bwd;
    return BFIT_OK;
}
