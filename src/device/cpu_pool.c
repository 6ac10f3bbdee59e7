/* cpu_pool.c - 2-d average pooling on oneDNN, forward and backward, in
 * nchw or (f32 and bf16, a layout chain's) nChw8c/16c; max pools are our own (2x2 of stride 2: cpu_maxpool.c;
 * others: cpu_maxpool_k.c), but for windows of over 255 positions, and so
 * are global average pools (cpu_avgpool_g.c).
 *
 * Training max pooling keeps oneDNN's workspace (argmax indices) from forward
 * to backward: that is the op's `saved` buffer. Average pooling counts the
 * zero padding in the divisor like PyTorch's default (count_include_pad), so
 * it is oneDNN's avg_include_padding. The backward pd needs the forward pd as
 * a hint: it sits in pd[0] (no primitive), the backward one in pd[1]; bf16
 * computed in f32 (cpu_bf16.c) goes over chunks of samples (run). */
#include "base/err.h"
#include "device/cpu.h"

/* Slots: the forward pd (the backward's hint) and the backward one, for a
 * chunk of samples; those of the last, shorter chunk in 2 and 3. */
enum { P_FWD = 0, P_BWD = 1, P_TAIL = 2 };

/* bf16 computed in f32 (cpu_bf16.c) goes over the batch in chunks of
 * samples whose f32 copies fit this many bytes (ResNet-50's stem pool
 * backward: 3.8 MiB per sample, the largest workspace of its bf16 step
 * otherwise); else the whole batch at once. */
#define CHUNK_BYTES ((size_t)8 << 20)

/* A bf16 average pool in a block whose windows overlap is computed in f32
 * on any CPU: oneDNN's blocked bf16 kernel (jit:avx512_core_bf16) adds an
 * input's shares of overlapping windows in bf16 (Inception's 3x3/1: dx
 * 1.4% off the reference; its nchw kernel adds in f32). */
static int in_f32(const cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    return d->dtype == BFIT_BF16 && !d->u.pool.max && d->u.pool.blk_src &&
           (d->u.pool.kh > d->u.pool.sh || d->u.pool.kw > d->u.pool.sw);
}

static int64_t chunk_of(const cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    size_t per = (size_t)d->u.pool.c * (size_t)(d->u.pool.ih * d->u.pool.iw + d->u.pool.oh * d->u.pool.ow) * 4;
    int64_t c = (int64_t)(CHUNK_BYTES / per);
    if (bfit_cpu_compute_dt(cpu_dev(op), d->dtype) == d->dtype && !in_f32(op))
        return d->u.pool.n;
    return c < 1 ? 1 : c < d->u.pool.n ? c : d->u.pool.n;
}

static const dnnl_memory_desc_t *qmd(const_dnnl_primitive_desc_t pd, dnnl_query_t what)
{
    return dnnl_primitive_desc_query_md(pd, what, 0);
}

static size_t md_bytes(const dnnl_memory_desc_t *md) { return md ? dnnl_memory_desc_get_size(md) : 0; }

/* Samples [at, at + len) through slots base (forward) and base + 1. */
static int run_part(cpu_op *op, int base, const bfit_op_args *a, int64_t at, int64_t chunk)
{
    const bfit_op_desc *d = &op->base.desc;
    size_t es = bfit_dtype_size(d->dtype), in = (size_t)at * (size_t)(d->u.pool.c * d->u.pool.ih * d->u.pool.iw) * es;
    size_t out = (size_t)at * (size_t)(d->u.pool.c * d->u.pool.oh * d->u.pool.ow) * es;
    const dnnl_memory_desc_t *wmd = qmd(op->pd[base + P_FWD], dnnl_query_workspace_md);
    /* the indices of each chunk after those of the chunks before it */
    void *saved = op->saved ? (char *)a->saved + (size_t)(at / chunk) * md_bytes(qmd(op->pd[P_FWD],
                                                                                     dnnl_query_workspace_md))
                            : NULL;
    if (d->kind == BFIT_OP_POOL_FWD) {
        dnnl_primitive_desc_t pd = op->pd[base + P_FWD];
        const cpu_arg args[] = {
            {DNNL_ARG_SRC, (const char *)a->src + in, qmd(pd, dnnl_query_src_md)},
            {DNNL_ARG_DST, (char *)a->dst + out, qmd(pd, dnnl_query_dst_md)},
            {DNNL_ARG_WORKSPACE, saved, wmd},
        };
        return bfit_cpu_exec(op, base + P_FWD, args, 3, a->workspace, "pooling forward");
    } else {
        dnnl_primitive_desc_t pd = op->pd[base + P_BWD];
        const cpu_arg args[] = {
            {DNNL_ARG_DIFF_DST, (const char *)a->diff_dst + out, qmd(pd, dnnl_query_diff_dst_md)},
            {DNNL_ARG_DIFF_SRC, (char *)a->diff_src + in, qmd(pd, dnnl_query_diff_src_md)},
            /* the forward pd's workspace md: the indices forward wrote */
            {DNNL_ARG_WORKSPACE, saved, wmd},
        };
        return bfit_cpu_exec(op, base + P_BWD, args, 3, a->workspace, "pooling backward");
    }
}

static int run(cpu_op *op, const bfit_op_args *a)
{
    int64_t n = op->base.desc.u.pool.n, c = chunk_of(op);
    int rc = BFIT_OK;
    if (op->base.desc.kind == BFIT_OP_POOL_FWD && (!a->src || !a->dst || (op->saved && !a->saved)))
        return bfit_fail(BFIT_EINVAL, "pool forward: src, dst (and saved for training max) are required");
    if (op->base.desc.kind == BFIT_OP_POOL_BWD && (!a->diff_dst || !a->diff_src || (op->saved && !a->saved)))
        return bfit_fail(BFIT_EINVAL, "pool backward: diff_dst, diff_src (and saved for max) are required");
    for (int64_t at = 0; rc == BFIT_OK && at < n; at += c)
        rc = run_part(op, at + c <= n ? 0 : P_TAIL, a, at, c);
    return rc;
}

static int check_desc(const bfit_op_desc *d)
{
    int64_t ih = d->u.pool.ih, iw = d->u.pool.iw, kh = d->u.pool.kh, kw = d->u.pool.kw;
    int64_t sh = d->u.pool.sh, sw = d->u.pool.sw, ph = d->u.pool.ph, pw = d->u.pool.pw;

    if (d->u.pool.n < 1 || d->u.pool.c < 1 || ih < 1 || iw < 1 || kh < 1 || kw < 1 || sh < 1 || sw < 1 ||
        ph < 0 || pw < 0 || ph >= kh || pw >= kw)
        return bfit_fail(BFIT_EINVAL, "cpu pool: bad sizes (input %lldx%lld kernel %lldx%lld stride %lldx%lld "
                         "padding %lldx%lld; padding must be below the kernel)",
                         (long long)ih, (long long)iw, (long long)kh, (long long)kw, (long long)sh,
                         (long long)sw, (long long)ph, (long long)pw);
    if (ih + 2 * ph < kh || iw + 2 * pw < kw || !bfit_pool_out_ok(d))
        return bfit_fail(BFIT_EINVAL, "cpu pool: output %lldx%lld does not match input %lldx%lld, kernel %lldx%lld, "
                         "stride %lldx%lld, padding %lldx%lld (floor, or ceil_mode for a max pool)",
                         (long long)d->u.pool.oh, (long long)d->u.pool.ow, (long long)ih, (long long)iw,
                         (long long)kh, (long long)kw, (long long)sh, (long long)sw, (long long)ph,
                         (long long)pw);
    return BFIT_OK;
}

/* The primitives for n samples in slots base (forward, the backward's hint)
 * and base + 1 (backward); the workspace into *ws (a max), the forward's
 * indices' bytes into *saved. */
static int make_prims(cpu_op *op, int base, int64_t n, size_t *ws, size_t *saved)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t sd[4] = {n, d->u.pool.c, d->u.pool.ih, d->u.pool.iw};
    int64_t dd[4] = {n, d->u.pool.c, d->u.pool.oh, d->u.pool.ow};
    dnnl_dims_t strides = {d->u.pool.sh, d->u.pool.sw}, kernel = {d->u.pool.kh, d->u.pool.kw};
    dnnl_dims_t pad = {d->u.pool.ph, d->u.pool.pw};
    /* the right and bottom padding that reaches the last window's end: the
     * left's, or more for a max pool's ceil_mode (which max pooling ignores) */
    dnnl_dims_t pad_r = {(d->u.pool.oh - 1) * d->u.pool.sh + d->u.pool.kh - d->u.pool.ih - d->u.pool.ph,
                         (d->u.pool.ow - 1) * d->u.pool.sw + d->u.pool.kw - d->u.pool.iw - d->u.pool.pw};
    dnnl_alg_kind_t alg = d->u.pool.max ? dnnl_pooling_max : dnnl_pooling_avg_include_padding;
    /* the backward pd's hint must be a training forward; an eval forward
     * keeps no indices */
    int train = d->kind == BFIT_OP_POOL_BWD || d->u.pool.training;
    int (*create)(cpu_op *, int, const void *, const_dnnl_primitive_attr_t, const_dnnl_primitive_desc_t,
                  size_t *) = in_f32(op) ? bfit_cpu_pd_create_f32 : bfit_cpu_pd_create;
    dnnl_memory_desc_t src, dst;
    dnnl_pooling_desc_t fd, bd;
    dnnl_primitive_attr_t attr;
    dnnl_status_t s;
    size_t hint_ws = 0;
    int rc;

    if (d->u.pool.blk_src) /* an average pool in a layout chain (init checked it) */
        rc = bfit_cpu_md_blocked(&src, sd, d->dtype, d->u.pool.blk_src);
    else
        rc = bfit_cpu_md_dt(&src, 4, sd, d->dtype);
    if (rc != BFIT_OK || (rc = d->u.pool.blk_dst ? bfit_cpu_md_blocked(&dst, dd, d->dtype, d->u.pool.blk_dst)
                                                 : bfit_cpu_md_dt(&dst, 4, dd, d->dtype)) != BFIT_OK)
        return rc;
    /* pad_r is at least pad: oneDNN checks the output size with a floor
     * division over the padding both sides */
    pad_r[0] = pad_r[0] > pad[0] ? pad_r[0] : pad[0], pad_r[1] = pad_r[1] > pad[1] ? pad_r[1] : pad[1];
    CPU_TRY(dnnl_pooling_forward_desc_init(&fd, train ? dnnl_forward_training : dnnl_forward_inference, alg, &src,
                                           &dst, strides, kernel, pad, pad_r),
            "pooling forward descriptor");
    if ((rc = bfit_cpu_attr_user_scratchpad(&attr)) != BFIT_OK)
        return rc;
    rc = create(op, base + P_FWD, &fd, attr, NULL, d->kind == BFIT_OP_POOL_FWD ? ws : &hint_ws);
    if (rc == BFIT_OK)
        *saved = md_bytes(qmd(op->pd[base + P_FWD], dnnl_query_workspace_md));
    if (rc == BFIT_OK && d->kind == BFIT_OP_POOL_BWD) {
        s = dnnl_pooling_backward_desc_init(&bd, alg, &src, &dst, strides, kernel, pad, pad_r);
        rc = s != dnnl_success ? bfit_cpu_dnnl_check(s, "pooling backward descriptor")
                               : create(op, base + P_BWD, &bd, attr, op->pd[base + P_FWD], ws);
    }
    dnnl_primitive_attr_destroy(attr);
    return rc;
}

int bfit_cpu_pool_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t n = d->u.pool.n, c;
    size_t saved = 0, tail = 0;
    int rc, own;

    if ((rc = check_desc(d)) != BFIT_OK)
        return rc;
    if (d->kind != BFIT_OP_POOL_FWD && d->kind != BFIT_OP_POOL_BWD)
        return bfit_fail(BFIT_EINVAL, "cpu pool: op kind %d is not a pooling", (int)d->kind);
    if ((rc = bfit_cpu_maxpool2_init(op, &own)) != BFIT_OK || own || (rc = bfit_cpu_maxpool_k_init(op, &own)) != BFIT_OK ||
        own || (rc = bfit_cpu_avgpool_g_init(op, &own)) != BFIT_OK || own)
        return rc;
    /* none of ours took it: oneDNN's take a block for average pools of f32
     * and bf16 (overlapping bf16 windows computed in f32: in_f32). A
     * sample's whole blocks are one run of bytes: chunks of samples (bf16
     * computed in f32) start where in nchw. */
    if ((d->u.pool.blk_src || d->u.pool.blk_dst) &&
        (d->u.pool.max || (d->dtype != BFIT_F32 && d->dtype != BFIT_BF16) ||
         d->u.pool.blk_src != d->u.pool.blk_dst || d->u.pool.c % d->u.pool.blk_src))
        return bfit_fail(BFIT_EINVAL, "cpu pool: nChw8c/16c only for 2x2/2 unpadded max pools of f32 or bf16, "
                                      "other max pools of f32 (in and out in one block) and average pools of "
                                      "f32 or bf16 (in and out in one block of whole blocks)");
    op->ws = 0;
    op->run = run;
    c = chunk_of(op);
    if ((rc = make_prims(op, 0, c, &op->ws, &saved)) != BFIT_OK ||
        (n % c && (rc = make_prims(op, P_TAIL, n % c, &op->ws, &tail)) != BFIT_OK))
        return rc;
    op->saved = saved * (size_t)(n / c) + tail;
    return BFIT_OK;
}
