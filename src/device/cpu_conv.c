/* cpu_conv.c - 2-d convolution on oneDNN: forward (optional bias), backward
 * data, backward weights (optional bias gradient). The caller's tensors are
 * plain nchw/oihw.
 *
 * oneDNN's direct convolutions want blocked layouts (nChw16c, OIhw16i16o...):
 * with plain ones it falls back to im2col + gemm, about half as fast here.
 * So each op lets oneDNN choose its layouts ("any") and reorders the
 * arguments that differ: inputs from plain into blocked buffers in the op's
 * workspace before, the output back to plain after. The buffers are part of
 * the workspace the op reports, so the plan counts them. bf16 activations
 * in whole blocks of 16 channels are transposed by our own loops
 * (cpu_blk16.c: oneDNN's bf16 reorder here is slower than its f32 one).
 *
 * oneDNN overwrites diff_weights/diff_bias; with desc.accumulate the weight
 * gradient's reorder back to oihw adds into the caller's buffer (a sum
 * post-op), or, where there is no reorder, the primitive writes temporaries
 * in the workspace that are then added, as is the bias gradient, so
 * gradients sum over micro-batches. Backward primitives need the forward pd
 * as a hint: it sits in pd[P_FWD] (no primitive), the backward one in
 * pd/prim[P_BWD]. */
#include "base/err.h"
#include "base/par.h"
#include "base/testctl.h"
#include "device/cpu.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* pd/prim slots: the convolution, then the reorders of its two inputs and
 * its output (absent where oneDNN keeps the plain layout) */
enum { P_FWD = 0, P_BWD = 1, R_IN0 = 2, R_IN1 = 3, R_OUT = 4 };
#define NONE SIZE_MAX

/* Workspace map: [scratchpad (the largest of all the op's primitives')]
 * then, from base, the blocked buffers and the accumulation temporaries. */
typedef struct conv_ws {
    size_t base;
    size_t off[3];   /* R_IN0, R_IN1, R_OUT buffers, relative to base; NONE: no reorder */
    /* bf16 arguments computed in f32 (cpu_bf16.c): their f32 plain copy,
     * relative to base (NONE: same dtype), converted by our own loop, as
     * oneDNN's bf16 <-> f32 reorder into a blocked layout is its generic
     * one (its 136 reorders took 7.1 s of a 7.6 s bf16 cnn epoch) */
    size_t cast[3];
    size_t cast_n[3]; /* their elements */
    size_t dw, db;   /* accumulation temporaries (backward weights), relative to base; NONE: unused */
    /* a bf16 nchw <-> nChw16c reorder of our own (cpu_blk16.c) instead of
     * oneDNN's: its sizes and direction, per slot */
    struct { int on, to_plain; int64_t n, c, hw; } own[3];
    bfit_conv_split *split; /* backward weights: the samples split among the threads (NULL: not) */
} conv_ws;

static const dnnl_memory_desc_t *qmd(const_dnnl_primitive_desc_t pd, dnnl_query_t what, int i)
{
    return dnnl_primitive_desc_query_md(pd, what, i);
}

/* dst[i] += src[i]; parallel only where it pays. */
static void add_into(float *dst, const float *src, int64_t n)
{
    BFIT_PAR_FOR_IF(n > 65536, for (int64_t i = 0; i < n; i++) dst[i] += src[i];);
}

static int64_t groups(const bfit_op_desc *d) { return d->u.conv.groups > 1 ? d->u.conv.groups : 1; }

/* A blocked layout's width (device.h's blk_src, blk_dst) for c channels */
static int blk_ok(int block, int64_t c) { return !block || ((block == 8 || block == 16) && c % block == 0); }

/* The channel block a 3x3 convolution of 64 channels computes in when oneDNN
 * chooses (format any): 16 with AVX-512, 8 with AVX2, 0 for another layout.
 * The CPU's (and $ONEDNN_MAX_CPU_ISA's), so probed once per process and
 * compute dtype. Chains of layers kept in it need no reorder between them;
 * kept in another block, each convolution reorders twice (16 on AVX2: a
 * sixth of the cnn's oneDNN time). */
int bfit_cpu_conv_block(cpu_device *dev, bfit_dtype t)
{
    static int known[2] = {-1, -1}; /* f32, bf16; two first callers probe alike */
    bfit_dtype ct = bfit_cpu_compute_dt(dev, t);
    int k = ct == BFIT_BF16, block = __atomic_load_n(&known[k], __ATOMIC_RELAXED);
    dnnl_dims_t sd = {8, 64, 14, 14}, wd = {64, 64, 3, 3}, one = {1, 1}, pad = {1, 1};
    dnnl_memory_desc_t src, w, dst, b8, b16;
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd;

    if (block >= 0 || (ct != BFIT_F32 && ct != BFIT_BF16))
        return block < 0 ? 0 : block;
    block = 0;
    if (dnnl_memory_desc_init_by_tag(&src, 4, sd, bfit_cpu_dt(ct), dnnl_format_tag_any) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&w, 4, wd, bfit_cpu_dt(ct), dnnl_format_tag_any) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&dst, 4, sd, bfit_cpu_dt(ct), dnnl_format_tag_any) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&b8, 4, sd, bfit_cpu_dt(ct), dnnl_nChw8c) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&b16, 4, sd, bfit_cpu_dt(ct), dnnl_nChw16c) == dnnl_success &&
        dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_direct, &src, &w, NULL,
                                           &dst, one, pad, pad) == dnnl_success &&
        dnnl_primitive_desc_create(&pd, &cd, NULL, dev->eng, NULL) == dnnl_success) {
        const dnnl_memory_desc_t *chosen = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
        block = dnnl_memory_desc_equal(chosen, &b16) ? 16 : dnnl_memory_desc_equal(chosen, &b8) ? 8 : 0;
        dnnl_primitive_desc_destroy(pd);
    }
    __atomic_store_n(&known[k], block, __ATOMIC_RELAXED);
    return block;
}

/* Whether slot r reorders (oneDNN's or our own). */
static int has_reorder(const cpu_op *op, int r)
{
    const conv_ws *m = op->extra;
    return op->pd[r] || m->own[r - R_IN0].on;
}

/* Reorder slot r from `from` to `to` (mds from the reorder's pd). */
static int reorder(cpu_op *op, int r, const void *from, void *to, void *ws)
{
    const conv_ws *m = op->extra;
    if (m->own[r - R_IN0].on) {
        bfit_cpu_blk16_run(from, to, m->own[r - R_IN0].n, m->own[r - R_IN0].c, m->own[r - R_IN0].hw,
                      m->own[r - R_IN0].to_plain);
        return BFIT_OK;
    }
    const cpu_arg args[] = {
        {DNNL_ARG_FROM, from, qmd(op->pd[r], dnnl_query_src_md, 0)},
        {DNNL_ARG_TO, to, qmd(op->pd[r], dnnl_query_dst_md, 0)},
    };
    return bfit_cpu_exec(op, r, args, 2, ws, "convolution layout reorder");
}

/* Slot r's f32 copy of a bf16 argument, or NULL. */
static char *cast_buf(const cpu_op *op, int r, void *ws)
{
    const conv_ws *m = op->extra;
    return m->cast[r - R_IN0] == NONE ? NULL : (char *)ws + m->base + m->cast[r - R_IN0];
}

/* An input of the convolution: the caller's plain buffer, or (converted to
 * f32, then) its blocked copy in the workspace after reorder slot r. */
static int input(cpu_op *op, int r, const void *plain, void *ws, const void **out)
{
    const conv_ws *m = op->extra;
    char *f = cast_buf(op, r, ws);
    *out = plain;
    if (f) {
        bfit_cpu_bf16_cast(plain, f, (int64_t)(m->cast_n[r - R_IN0]), 0);
        *out = plain = f;
    }
    if (!has_reorder(op, r))
        return BFIT_OK;
    *out = (char *)ws + m->base + m->off[r - R_IN0];
    return reorder(op, r, plain, (void *)*out, ws);
}

/* Where the convolution writes its output: the caller's buffer, or the
 * blocked one that R_OUT then reorders into the caller's (finish_output),
 * or the f32 copy then converted. */
static void *output(cpu_op *op, void *plain, void *ws)
{
    const conv_ws *m = op->extra;
    char *f = cast_buf(op, R_OUT, ws);
    return has_reorder(op, R_OUT) ? (char *)ws + m->base + m->off[2] : f ? f : plain;
}

/* The output, written where output() said, into the caller's buffer. */
static int finish_output(cpu_op *op, void *from, void *plain, void *ws)
{
    const conv_ws *m = op->extra;
    char *f = cast_buf(op, R_OUT, ws);
    int rc = BFIT_OK;
    if (has_reorder(op, R_OUT))
        rc = reorder(op, R_OUT, from, f ? f : plain, ws);
    if (rc == BFIT_OK && f)
        bfit_cpu_bf16_cast(f, plain, (int64_t)m->cast_n[2], 1);
    return rc;
}

static int need_ws(const cpu_op *op, const bfit_op_args *a, const char *what)
{
    if (op->ws && !a->workspace)
        return bfit_fail(BFIT_EINVAL, "%s: the workspace is required", what);
    return BFIT_OK;
}

static int run_fwd(cpu_op *op, const bfit_op_args *a)
{
    dnnl_primitive_desc_t pd = op->pd[P_FWD];
    const void *src, *w;
    void *dst;
    int rc;

    if (!a->src || !a->weights || !a->dst || (op->base.desc.u.conv.bias && !a->bias))
        return bfit_fail(BFIT_EINVAL, "conv forward: src, weights, dst (and bias) are required");
    if ((rc = need_ws(op, a, "conv forward")) != BFIT_OK || (rc = input(op, R_IN0, a->src, a->workspace, &src)) ||
        (rc = input(op, R_IN1, a->weights, a->workspace, &w)))
        return rc;
    dst = output(op, a->dst, a->workspace);
    {
        const cpu_arg args[] = {
            {DNNL_ARG_SRC, src, qmd(pd, dnnl_query_src_md, 0)},
            {DNNL_ARG_WEIGHTS, w, qmd(pd, dnnl_query_weights_md, 0)},
            {DNNL_ARG_BIAS, op->base.desc.u.conv.bias ? a->bias : NULL, qmd(pd, dnnl_query_weights_md, 1)},
            {DNNL_ARG_DST, dst, qmd(pd, dnnl_query_dst_md, 0)},
        };
        rc = bfit_cpu_exec(op, P_FWD, args, 4, a->workspace, "convolution forward");
    }
    return rc == BFIT_OK ? finish_output(op, dst, a->dst, a->workspace) : rc;
}

static int run_bwd_data(cpu_op *op, const bfit_op_args *a)
{
    dnnl_primitive_desc_t pd = op->pd[P_BWD];
    const void *dd, *w;
    void *ds;
    int rc;

    if (!a->diff_dst || !a->weights || !a->diff_src)
        return bfit_fail(BFIT_EINVAL, "conv backward data: diff_dst, weights, diff_src are required");
    if ((rc = need_ws(op, a, "conv backward data")) != BFIT_OK ||
        (rc = input(op, R_IN0, a->diff_dst, a->workspace, &dd)) ||
        (rc = input(op, R_IN1, a->weights, a->workspace, &w)))
        return rc;
    ds = output(op, a->diff_src, a->workspace);
    {
        const cpu_arg args[] = {
            {DNNL_ARG_DIFF_DST, dd, qmd(pd, dnnl_query_diff_dst_md, 0)},
            {DNNL_ARG_WEIGHTS, w, qmd(pd, dnnl_query_weights_md, 0)},
            {DNNL_ARG_DIFF_SRC, ds, qmd(pd, dnnl_query_diff_src_md, 0)},
        };
        rc = bfit_cpu_exec(op, P_BWD, args, 3, a->workspace, "convolution backward data");
    }
    return rc == BFIT_OK ? finish_output(op, ds, a->diff_src, a->workspace) : rc;
}

static int run_bwd_weights(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    const conv_ws *m = op->extra;
    dnnl_primitive_desc_t pd = op->pd[P_BWD];
    int bias = d->u.conv.bias, rc;
    const void *src, *dd;
    char *tmp = (char *)a->workspace + m->base;
    void *dw, *db = bias ? a->diff_bias : NULL;

    if (!a->src || !a->diff_dst || !a->diff_weights || (bias && !a->diff_bias))
        return bfit_fail(BFIT_EINVAL,
                         "conv backward weights: src, diff_dst, diff_weights (and diff_bias) are required");
    if ((rc = need_ws(op, a, "conv backward weights")) != BFIT_OK)
        return rc;
    if (m->split)
        return bfit_cpu_conv_split_run(op, m->split, a);
    if ((rc = input(op, R_IN0, a->src, a->workspace, &src)) ||
        (rc = input(op, R_IN1, a->diff_dst, a->workspace, &dd)))
        return rc;
    /* the blocked gradient (its reorder accumulates), or a temporary to add */
    dw = output(op, m->dw != NONE ? tmp + m->dw : a->diff_weights, a->workspace);
    if (bias && m->db != NONE)
        db = tmp + m->db;
    {
        const cpu_arg args[] = {
            {DNNL_ARG_SRC, src, qmd(pd, dnnl_query_src_md, 0)},
            {DNNL_ARG_DIFF_DST, dd, qmd(pd, dnnl_query_diff_dst_md, 0)},
            {DNNL_ARG_DIFF_WEIGHTS, dw, qmd(pd, dnnl_query_diff_weights_md, 0)},
            {DNNL_ARG_DIFF_BIAS, db, qmd(pd, dnnl_query_diff_weights_md, 1)},
        };
        rc = bfit_cpu_exec(op, P_BWD, args, 4, a->workspace, "convolution backward weights");
    }
    if (rc != BFIT_OK)
        return rc;
    if (has_reorder(op, R_OUT) && (rc = reorder(op, R_OUT, dw, a->diff_weights, a->workspace)) != BFIT_OK)
        return rc;
    if (m->dw != NONE)
        add_into(a->diff_weights, (const float *)(tmp + m->dw), bfit_cpu_conv_wnumel(d));
    if (bias && m->db != NONE)
        add_into(a->diff_bias, (const float *)(tmp + m->db), d->u.conv.oc);
    return BFIT_OK;
}

/* 1 where oneDNN's chosen implementation of pd is its gemm fallback */
static int impl_is_gemm(const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    return dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
           strstr(impl, "gemm") != NULL;
}

/* Groups with a blocked side: depthwise, or each group's channels in whole
 * blocks of that side (a block never spans two groups). */
static int blk_groups_ok(const bfit_op_desc *d)
{
    int64_t g = groups(d), ic = d->u.conv.ic, oc = d->u.conv.oc;
    if (g == 1 || (g == ic && oc == ic))
        return 1;
    return (ic / g) % (d->u.conv.blk_src ? d->u.conv.blk_src : 1) == 0 &&
           (oc / g) % (d->u.conv.blk_dst ? d->u.conv.blk_dst : 1) == 0;
}

/* Check the geometry: PyTorch's floor rule for the output size. */
static int check_desc(const bfit_op_desc *d)
{
    int64_t n = d->u.conv.n, ic = d->u.conv.ic, ih = d->u.conv.ih, iw = d->u.conv.iw;
    int64_t oc = d->u.conv.oc, kh = d->u.conv.kh, kw = d->u.conv.kw, sh = d->u.conv.sh, sw = d->u.conv.sw;
    int64_t ph = d->u.conv.ph, pw = d->u.conv.pw, lim = bfit_test_value(BFIT_TC_CONV_ELEMS);

    if (n < 1 || ic < 1 || ih < 1 || iw < 1 || oc < 1 || kh < 1 || kw < 1 || sh < 1 || sw < 1 ||
        ph < 0 || pw < 0)
        return bfit_fail(BFIT_EINVAL, "cpu conv: bad sizes (n %lld ic %lld %lldx%lld oc %lld k %lldx%lld s %lldx%lld)",
                         (long long)n, (long long)ic, (long long)ih, (long long)iw, (long long)oc,
                         (long long)kh, (long long)kw, (long long)sh, (long long)sw);
    if (d->u.conv.groups < 0 || ic % groups(d) || oc % groups(d))
        return bfit_fail(BFIT_EINVAL, "cpu conv: %d groups do not divide %lld input and %lld output channels",
                         d->u.conv.groups, (long long)ic, (long long)oc);
    if (ih + 2 * ph < kh || iw + 2 * pw < kw || d->u.conv.oh != (ih + 2 * ph - kh) / sh + 1 ||
        d->u.conv.ow != (iw + 2 * pw - kw) / sw + 1)
        return bfit_fail(BFIT_EINVAL, "cpu conv: output %lldx%lld does not match input %lldx%lld, kernel %lldx%lld, "
                         "stride %lldx%lld, padding %lldx%lld",
                         (long long)d->u.conv.oh, (long long)d->u.conv.ow, (long long)ih, (long long)iw,
                         (long long)kh, (long long)kw, (long long)sh, (long long)sw, (long long)ph,
                         (long long)pw);
    if (!blk_ok(d->u.conv.blk_src, ic) || !blk_ok(d->u.conv.blk_dst, oc) || !blk_groups_ok(d))
        return bfit_fail(BFIT_EINVAL, "cpu conv: blocked layouts take a block of 8 or 16 channels, whole blocks and "
                         "groups of whole blocks or depthwise (blocks %d in, %d out; %lld in, %lld out, %lld groups)",
                         d->u.conv.blk_src, d->u.conv.blk_dst, (long long)ic, (long long)oc, (long long)groups(d));
    if (lim > 0 && (n * oc * d->u.conv.oh * d->u.conv.ow > lim || n * ic * ih * iw > lim))
        return bfit_fail(BFIT_ENOMEM, "cpu conv: a tensor of over %lld elements (a test's limit, as cuDNN's 2^31 - 1): "
                         "use a smaller micro-batch", (long long)lim);
    return BFIT_OK;
}

/* Reorder slot r between the plain md and the one the convolution chose,
 * if they differ, with a buffer for the chosen layout at *cursor (relative
 * to the workspace's base). to_plain: an output (blocked -> plain); sum: add
 * into the destination instead of overwriting it. */
static int plan_reorder(cpu_op *op, int r, const dnnl_memory_desc_t *plain, const dnnl_memory_desc_t *chosen,
                        int to_plain, int sum, size_t *cursor, size_t *scratch)
{
    conv_ws *m = op->extra;
    dnnl_primitive_attr_t attr;
    dnnl_post_ops_t po = NULL;
    dnnl_memory_desc_t pf;
    dnnl_status_t s;
    size_t sz;
    int rc;

    m->off[r - R_IN0] = m->cast[r - R_IN0] = NONE;
    if (plain->data_type != chosen->data_type) { /* bf16 computed in f32: an f32 copy first */
        pf = *plain;
        pf.data_type = chosen->data_type;
        m->cast[r - R_IN0] = *cursor;
        m->cast_n[r - R_IN0] = dnnl_memory_desc_get_size(&pf) / sizeof(float);
        *cursor += BFIT_ALIGN_UP(dnnl_memory_desc_get_size(&pf));
        plain = &pf;
    }
    if (dnnl_memory_desc_equal(plain, chosen))
        return BFIT_OK;
    if (!sum && bfit_cpu_blk16_match(plain, chosen, &m->own[r - R_IN0].n, &m->own[r - R_IN0].c, &m->own[r - R_IN0].hw)) {
        m->own[r - R_IN0].on = 1;
        m->own[r - R_IN0].to_plain = to_plain;
        m->off[r - R_IN0] = *cursor;
        *cursor += BFIT_ALIGN_UP(dnnl_memory_desc_get_size(chosen));
        return BFIT_OK;
    }
    if ((rc = bfit_cpu_attr_user_scratchpad(&attr)) != BFIT_OK)
        return rc;
    if (sum) {
        s = dnnl_post_ops_create(&po);
        if (s == dnnl_success)
            s = dnnl_post_ops_append_sum(po, 1.0f);
        if (s == dnnl_success)
            s = dnnl_primitive_attr_set_post_ops(attr, po);
        if (po)
            dnnl_post_ops_destroy(po);
        if (s != dnnl_success) {
            dnnl_primitive_attr_destroy(attr);
            return bfit_cpu_dnnl_check(s, "reorder sum post-op");
        }
    }
    s = dnnl_reorder_primitive_desc_create(&op->pd[r], to_plain ? chosen : plain, cpu_dev(op)->eng,
                                           to_plain ? plain : chosen, cpu_dev(op)->eng, attr);
    dnnl_primitive_attr_destroy(attr);
    if (s != dnnl_success)
        return bfit_cpu_dnnl_check(s, "convolution layout reorder");
    sz = bfit_cpu_pd_scratch(op->pd[r]);
    *scratch = sz > *scratch ? sz : *scratch;
    if (dnnl_memory_desc_get_size(chosen) < CPU_SMALL_BYTES) /* a convolution's weights, mostly */
        op->serial |= 1u << r;
    m->off[r - R_IN0] = *cursor;
    *cursor += BFIT_ALIGN_UP(dnnl_memory_desc_get_size(chosen));
    return BFIT_OK;
}

/* Memory descriptors of the op: plain ones (the caller's) and "any" ones
 * for oneDNN to choose from. */
typedef struct conv_mds {
    dnnl_memory_desc_t src, w, b, dst, dw;              /* plain; dw the weight gradient (f32) */
    dnnl_memory_desc_t src_any, w_any, dst_any, dw_any; /* format any, or plain where that is faster */
} conv_mds;

static int make_mds(const cpu_op *op, conv_mds *md)
{
    const bfit_op_desc *d = &op->base.desc;
    bfit_dtype ct = bfit_cpu_compute_dt(cpu_dev(op), d->dtype);
    int64_t g = groups(d), sd[4] = {d->u.conv.n, d->u.conv.ic, d->u.conv.ih, d->u.conv.iw};
    int64_t dd[4] = {d->u.conv.n, d->u.conv.oc, d->u.conv.oh, d->u.conv.ow};
    int64_t bd[1] = {d->u.conv.oc};
    /* grouped: oneDNN's weights are [g, oc/g, ic/g, kh, kw], the same bytes as PyTorch's [oc, ic/g, kh, kw] */
    int64_t wd[5] = {g, d->u.conv.oc / g, d->u.conv.ic / g, d->u.conv.kh, d->u.conv.kw};
    int64_t *w = g > 1 ? wd : wd + 1, wn = g > 1 ? 5 : 4;
    dnnl_dims_t s4, w4, d4;
    int rc;

    if (g == 1)
        wd[2] = d->u.conv.ic;
    /* data and weights in the op's dtype; bias and the gradients of the
     * parameters in f32 */
    if ((rc = bfit_cpu_md_dt(&md->src, 4, sd, d->dtype)) != BFIT_OK ||
        (rc = bfit_cpu_md_dt(&md->w, (int)wn, w, d->dtype)) != BFIT_OK || (rc = bfit_cpu_md(&md->b, 1, bd)) != BFIT_OK ||
        (rc = bfit_cpu_md_dt(&md->dst, 4, dd, d->dtype)) != BFIT_OK || (rc = bfit_cpu_md(&md->dw, (int)wn, w)) != BFIT_OK ||
        (d->u.conv.blk_src && (rc = bfit_cpu_md_blocked(&md->src, sd, d->dtype, d->u.conv.blk_src)) != BFIT_OK) ||
        (d->u.conv.blk_dst && (rc = bfit_cpu_md_blocked(&md->dst, dd, d->dtype, d->u.conv.blk_dst)) != BFIT_OK))
        return rc;
    /* the layouts the convolution computes in: f32 for bf16 data where
     * oneDNN has no bf16 kernels (cpu_bf16.c), the reorders converting */
    md->src_any = md->src;
    md->w_any = md->w;
    md->dst_any = md->dst;
    md->dw_any = md->dw;
    md->src_any.data_type = md->w_any.data_type = md->dst_any.data_type = bfit_cpu_dt(ct);
    /* The gradient of a few-channel input in a 16-channel block is mostly
     * padding (6x slower than plain for one channel, measured): backward
     * data with ic < 16 stays plain. */
    if (d->kind == BFIT_OP_CONV_BWD_DATA && d->u.conv.ic < 16)
        return BFIT_OK;
    for (int i = 0; i < 4; i++)
        s4[i] = sd[i], d4[i] = dd[i];
    for (int i = 0; i < wn; i++)
        w4[i] = w[i];
    CPU_TRY(dnnl_memory_desc_init_by_tag(&md->src_any, 4, s4, bfit_cpu_dt(ct), dnnl_format_tag_any), "conv src md");
    CPU_TRY(dnnl_memory_desc_init_by_tag(&md->w_any, (int)wn, w4, bfit_cpu_dt(ct), dnnl_format_tag_any),
            "conv weights md");
    CPU_TRY(dnnl_memory_desc_init_by_tag(&md->dst_any, 4, d4, bfit_cpu_dt(ct), dnnl_format_tag_any), "conv dst md");
    CPU_TRY(dnnl_memory_desc_init_by_tag(&md->dw_any, (int)wn, w4, dnnl_f32, dnnl_format_tag_any),
            "conv weight gradient md");
    return BFIT_OK;
}

/* make_prims' weight gradient: oneDNN's, or one of our own paths. */
static int make_bwd_weights(cpu_op *op, const conv_mds *md, dnnl_primitive_attr_t attr, size_t *scratch,
                            size_t *cursor)
{
    const bfit_op_desc *d = &op->base.desc;
    conv_ws *m = op->extra;
    dnnl_dims_t strides = {d->u.conv.sh, d->u.conv.sw}, pad = {d->u.conv.ph, d->u.conv.pw};
    dnnl_convolution_desc_t bdesc;
    size_t bw_ws = 0;
    int bias = d->u.conv.bias, acc = d->accumulate, rc;
    const_dnnl_primitive_desc_t pd;

    CPU_TRY(dnnl_convolution_backward_weights_desc_init(&bdesc, dnnl_convolution_direct, &md->src_any,
                                                        &md->dw_any, bias ? &md->b : NULL, &md->dst_any,
                                                        strides, pad, pad),
            "convolution backward weights descriptor");
    if ((rc = bfit_cpu_pd_create(op, P_BWD, &bdesc, attr, op->pd[P_FWD], &bw_ws)))
        return rc;
    if (bfit_cpu_conv_dw_take(op, impl_is_gemm(op->pd[P_BWD])))
        return BFIT_OK; /* depthwise, where oneDNN would take its gemm: cpu_conv_dw.c */
    if (bfit_cpu_conv_c1_take(op, &md->src, qmd(op->pd[P_BWD], dnnl_query_src_md, 0)))
        return BFIT_OK; /* one input channel that oneDNN would pad to a block: cpu_conv_c1.c */
    if (bfit_cpu_conv_gemm_take(op, impl_is_gemm(op->pd[P_BWD]), scratch))
        return BFIT_OK; /* one product over the samples where oneDNN's is per sample: cpu_conv_gemm.c */
    if ((rc = bfit_cpu_conv_split_make(op, run_bwd_weights, &m->split, scratch)) != BFIT_OK || m->split) {
        op->run = run_bwd_weights; /* the samples split among the threads: cpu_conv_split.c */
        return rc;
    }
    *scratch = *scratch > bw_ws ? *scratch : bw_ws;
    pd = op->pd[P_BWD];
    if ((rc = plan_reorder(op, R_IN0, &md->src, qmd(pd, dnnl_query_src_md, 0), 0, 0, cursor, scratch)) ||
        (rc = plan_reorder(op, R_IN1, &md->dst, qmd(pd, dnnl_query_diff_dst_md, 0), 0, 0, cursor, scratch)) ||
        (rc = plan_reorder(op, R_OUT, &md->dw, qmd(pd, dnnl_query_diff_weights_md, 0), 1, acc, cursor,
                           scratch)))
        return rc;
    /* without a reorder to accumulate through, temporaries are added */
    m->dw = m->db = NONE;
    if (acc && !has_reorder(op, R_OUT)) {
        m->dw = *cursor;
        *cursor += BFIT_ALIGN_UP((size_t)bfit_cpu_conv_wnumel(d) * sizeof(float));
    }
    if (acc && bias) {
        m->db = *cursor;
        *cursor += BFIT_ALIGN_UP((size_t)d->u.conv.oc * sizeof(float));
    }
    op->run = run_bwd_weights;
    return BFIT_OK;
}

/* The primitive for d->kind in its slot, its reorders, and the workspace
 * map: scratch is the largest scratchpad, cursor the bytes after it. */
static int make_prims(cpu_op *op, const conv_mds *md, dnnl_primitive_attr_t attr, size_t *scratch,
                      size_t *cursor)
{
    const bfit_op_desc *d = &op->base.desc;
    dnnl_dims_t strides = {d->u.conv.sh, d->u.conv.sw}, pad = {d->u.conv.ph, d->u.conv.pw};
    dnnl_convolution_desc_t fd, bdesc;
    size_t hint_ws = 0;
    int bias = d->u.conv.bias, rc;
    const_dnnl_primitive_desc_t pd;

    /* padding_r = padding_l: oneDNN checks the output size with PyTorch's
     * floor division, and windows never reach the unused right padding */
    CPU_TRY(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &md->src_any,
                                               &md->w_any, bias ? &md->b : NULL, &md->dst_any, strides, pad, pad),
            "convolution forward descriptor");
    rc = bfit_cpu_pd_create(op, P_FWD, &fd, attr, NULL,
                       d->kind == BFIT_OP_CONV_FWD ? scratch : &hint_ws);
    if (rc != BFIT_OK)
        return rc;
    switch (d->kind) {
    case BFIT_OP_CONV_FWD:
        pd = op->pd[P_FWD];
        if ((rc = plan_reorder(op, R_IN0, &md->src, qmd(pd, dnnl_query_src_md, 0), 0, 0, cursor, scratch)) ||
            (rc = plan_reorder(op, R_IN1, &md->w, qmd(pd, dnnl_query_weights_md, 0), 0, 0, cursor, scratch)) ||
            (rc = plan_reorder(op, R_OUT, &md->dst, qmd(pd, dnnl_query_dst_md, 0), 1, 0, cursor, scratch)))
            return rc;
        op->run = run_fwd;
        return BFIT_OK;
    case BFIT_OP_CONV_BWD_DATA:
        CPU_TRY(dnnl_convolution_backward_data_desc_init(&bdesc, dnnl_convolution_direct, &md->src_any, &md->w_any,
                                                         &md->dst_any, strides, pad, pad),
                "convolution backward data descriptor");
        if ((rc = bfit_cpu_pd_create(op, P_BWD, &bdesc, attr, op->pd[P_FWD], scratch)))
            return rc;
        pd = op->pd[P_BWD];
        if ((rc = plan_reorder(op, R_IN0, &md->dst, qmd(pd, dnnl_query_diff_dst_md, 0), 0, 0, cursor, scratch)) ||
            (rc = plan_reorder(op, R_IN1, &md->w, qmd(pd, dnnl_query_weights_md, 0), 0, 0, cursor, scratch)) ||
            (rc = plan_reorder(op, R_OUT, &md->src, qmd(pd, dnnl_query_diff_src_md, 0), 1, 0, cursor, scratch)))
            return rc;
        op->run = run_bwd_data;
        return BFIT_OK;
    case BFIT_OP_CONV_BWD_WEIGHTS:
        return make_bwd_weights(op, md, attr, scratch, cursor);
    default:
        return bfit_fail(BFIT_EINVAL, "cpu conv: op kind %d is not a convolution", (int)d->kind);
    }
}

static void fini(cpu_op *op)
{
    conv_ws *m = op->extra;
    if (m)
        bfit_cpu_conv_split_free(m->split);
    free(op->extra);
    op->extra = NULL;
}

/* ---- chunks of samples ---------------------------------------------------------
 * The blocked copies of a convolution's inputs and output grow with the
 * batch (ResNet-50: 4.6 MiB per sample in f32). Past CHUNK_BYTES of them,
 * the op runs over the batch in chunks of c samples through ops made for c
 * (and for the remainder), so its workspace stops growing with m; the
 * weight gradient accumulates over the chunks. */
#define CHUNK_BYTES ((size_t)32 << 20)

typedef struct conv_chunk {
    cpu_op *sub[2];          /* c samples, the remainder (NULL: none) */
    int64_t c, n;
    size_t in_bytes, out_bytes; /* per sample, of the input and the output images */
} conv_chunk;

static void chunk_fini(cpu_op *op)
{
    conv_chunk *k = op->extra;
    if (k) {
        bfit_cpu_op_destroy(k->sub[0]);
        bfit_cpu_op_destroy(k->sub[1]);
    }
    free(k);
    op->extra = NULL;
}

static int run_chunks(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    conv_chunk *k = op->extra;
    int bwd_w = d->kind == BFIT_OP_CONV_BWD_WEIGHTS, rc = BFIT_OK;

    if (bwd_w && !d->accumulate && a->diff_weights) { /* the chunks accumulate: start from zero */
        memset(a->diff_weights, 0, (size_t)bfit_cpu_conv_wnumel(d) * sizeof(float));
        if (d->u.conv.bias && a->diff_bias)
            memset(a->diff_bias, 0, (size_t)d->u.conv.oc * sizeof(float));
    }
    for (int64_t i = 0; rc == BFIT_OK && i < k->n; i += k->c) {
        cpu_op *s = k->sub[i + k->c <= k->n ? 0 : 1];
        bfit_op_args b = *a;
        size_t in = (size_t)i * k->in_bytes, out = (size_t)i * k->out_bytes;
        if (b.src)
            b.src = (const char *)b.src + in;
        if (b.diff_src)
            b.diff_src = (char *)b.diff_src + in;
        if (d->kind == BFIT_OP_CONV_FWD)
            b.dst = (char *)b.dst + out;
        if (b.diff_dst)
            b.diff_dst = (const char *)b.diff_dst + out;
        rc = s->run(s, &b);
    }
    return rc;
}

/* Chunk the op if its blocked copies would pass CHUNK_BYTES; *done = 1 then. */
static int chunk_init(cpu_op *op, int *done)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t n = d->u.conv.n, c;
    bfit_dtype ct = bfit_cpu_compute_dt(cpu_dev(op), d->dtype);
    size_t es = bfit_dtype_size(d->dtype), in = (size_t)d->u.conv.ic * d->u.conv.ih * d->u.conv.iw * es,
           out = (size_t)d->u.conv.oc * d->u.conv.oh * d->u.conv.ow * es;
    /* the copies per sample: computing bf16 in f32, an f32 plain copy and
     * an f32 blocked one of each (4x the bf16 bytes) */
    size_t copies = (in + out) * (ct != d->dtype ? 4 : 1);
    bfit_op_desc sd = *d;
    conv_chunk *k;
    int rc;

    c = (int64_t)(CHUNK_BYTES / copies);
    c = c < 8 ? 8 : c; /* below 8 samples oneDNN's kernels lose more than the memory is worth */
    *done = 0;
    if (n <= c)
        return BFIT_OK;
    *done = 1;
    if (!(k = calloc(1, sizeof *k)))
        return bfit_fail(BFIT_ENOMEM, "cpu conv: cannot allocate the op's record");
    op->extra = k;
    op->fini = chunk_fini;
    k->c = c;
    k->n = n;
    k->in_bytes = in;
    k->out_bytes = out;
    sd.accumulate = d->kind == BFIT_OP_CONV_BWD_WEIGHTS ? 1 : d->accumulate;
    sd.u.conv.n = c;
    if ((rc = bfit_cpu_op_make(op->base.dev, &sd, &k->sub[0])) != BFIT_OK)
        return rc;
    op->ws = k->sub[0]->ws;
    if (n % c) {
        sd.u.conv.n = n % c;
        if ((rc = bfit_cpu_op_make(op->base.dev, &sd, &k->sub[1])) != BFIT_OK)
            return rc;
        op->ws = k->sub[1]->ws > op->ws ? k->sub[1]->ws : op->ws;
    }
    op->saved = 0;
    op->run = run_chunks;
    return BFIT_OK;
}

int bfit_cpu_conv_init(cpu_op *op)
{
    conv_mds md;
    conv_ws *m;
    dnnl_primitive_attr_t attr;
    size_t scratch = 0, cursor = 0;
    int rc, chunked;

    if ((rc = check_desc(&op->base.desc)) != BFIT_OK || (rc = chunk_init(op, &chunked)) != BFIT_OK)
        return rc;
    if (chunked)
        return BFIT_OK;
    if ((rc = make_mds(op, &md)) != BFIT_OK)
        return rc;
    m = calloc(1, sizeof *m);
    if (!m)
        return bfit_fail(BFIT_ENOMEM, "cpu conv: cannot allocate the op's record");
    m->dw = m->db = NONE;
    op->extra = m;
    op->fini = fini;
    if ((rc = bfit_cpu_attr_user_scratchpad(&attr)) != BFIT_OK)
        return rc;
    rc = make_prims(op, &md, attr, &scratch, &cursor);
    dnnl_primitive_attr_destroy(attr);
    if (rc != BFIT_OK)
        return rc;
    m->base = BFIT_ALIGN_UP(scratch);
    op->ws = cursor ? m->base + cursor : scratch;
    op->saved = 0;
    return BFIT_OK;
}
