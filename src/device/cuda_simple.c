/* cuda_simple.c - the ops the CUDA backend runs on its own kernels
 * (cuda_*.cu): pooling, layer norm, activations, REDUCE_ROWS, ADD, dropout,
 * softmax cross-entropy, SCALE, NORMS, CAST, the optimizer updates and
 * embeddings (attention: cuda_attn.c). Here: argument checks as the CPU device makes
 * them, workspace and saved sizes, and the launch. Data is f32, bf16 or
 * f16 (desc.dtype, dt below), with the f32 arguments device.h lists. */
#include "base/err.h"
#include "base/rand.h"
#include "device/cuda.h"

#include <math.h>

#define WS_PAD(n) ((n) ? (size_t)(n) + CUDA_WS_ALIGN : 0)

static cudaStream_t stream(const cuda_op *op) { return cuda_dev(op)->stream; }
static int dt(const cuda_op *op) { return (int)op->base.desc.dtype; }

static int need_ws(const cuda_op *op, const bfit_op_args *a, const char *what)
{
    if (op->ws && !a->workspace)
        return bfit_fail(BFIT_EINVAL, "%s: the workspace (%zu bytes) is required", what, op->ws);
    return BFIT_OK;
}

/* ---- pooling ------------------------------------------------------------------- */

static bk_pool pool_geom(const bfit_op_desc *d)
{
    bk_pool g = {d->u.pool.n,  d->u.pool.c,  d->u.pool.ih, d->u.pool.iw, d->u.pool.oh, d->u.pool.ow,
                 d->u.pool.kh, d->u.pool.kw, d->u.pool.sh, d->u.pool.sw, d->u.pool.ph, d->u.pool.pw};
    return g;
}

static int run_pool_fwd(cuda_op *op, const bfit_op_args *a)
{
    if (!a->src || !a->dst || (op->saved && !a->saved))
        return bfit_fail(BFIT_EINVAL, "pool forward: src, dst (and saved for training max) are required");
    return cuda_launched(bk_pool_fwd(stream(op), dt(op), pool_geom(&op->base.desc), op->base.desc.u.pool.max, a->src,
                                     a->dst, op->saved ? a->saved : NULL), "pooling forward");
}

static int run_pool_bwd(cuda_op *op, const bfit_op_args *a)
{
    if (!a->diff_dst || !a->diff_src || (op->saved && !a->saved))
        return bfit_fail(BFIT_EINVAL, "pool backward: diff_dst, diff_src (and saved for max) are required");
    return cuda_launched(bk_pool_bwd(stream(op), dt(op), pool_geom(&op->base.desc), op->base.desc.u.pool.max,
                                     a->diff_dst, a->saved, a->diff_src), "pooling backward");
}

static int pool_init(cuda_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t ih = d->u.pool.ih, iw = d->u.pool.iw, kh = d->u.pool.kh, kw = d->u.pool.kw;
    int64_t sh = d->u.pool.sh, sw = d->u.pool.sw, ph = d->u.pool.ph, pw = d->u.pool.pw;

    if (d->u.pool.blk_src || d->u.pool.blk_dst)
        return bfit_fail(BFIT_EINVAL, "cuda pool: nChw16c tensors are the cpu's; ours here are nchw");
    if (d->u.pool.n < 1 || d->u.pool.c < 1 || ih < 1 || iw < 1 || kh < 1 || kw < 1 || sh < 1 || sw < 1 || ph < 0 ||
        pw < 0 || ph >= kh || pw >= kw || ih * iw > INT32_MAX)
        return bfit_fail(BFIT_EINVAL, "cuda pool: bad sizes (input %lldx%lld kernel %lldx%lld stride %lldx%lld "
                         "padding %lldx%lld; padding must be below the kernel)",
                         (long long)ih, (long long)iw, (long long)kh, (long long)kw, (long long)sh, (long long)sw,
                         (long long)ph, (long long)pw);
    if (ih + 2 * ph < kh || iw + 2 * pw < kw || !bfit_pool_out_ok(d))
        return bfit_fail(BFIT_EINVAL, "cuda pool: output %lldx%lld does not match input %lldx%lld, kernel %lldx%lld, "
                         "stride %lldx%lld, padding %lldx%lld (floor, or ceil_mode for a max pool)",
                         (long long)d->u.pool.oh, (long long)d->u.pool.ow, (long long)ih, (long long)iw, (long long)kh,
                         (long long)kw, (long long)sh, (long long)sw, (long long)ph, (long long)pw);
    /* training max: each output's argmax position (int32), forward to backward */
    op->saved = d->u.pool.max && (d->kind == BFIT_OP_POOL_BWD || d->u.pool.training)
                    ? (size_t)(d->u.pool.n * d->u.pool.c * d->u.pool.oh * d->u.pool.ow) * sizeof(int32_t)
                    : 0;
    op->run = d->kind == BFIT_OP_POOL_FWD ? run_pool_fwd : run_pool_bwd;
    return BFIT_OK;
}

/* ---- layer norm ---------------------------------------------------------------- */

static int run_lnorm_fwd(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    if (!a->src || !a->dst || !a->scale || (!a->shift && !d->u.lnorm.noshift) || !a->mean || !a->var)
        return bfit_fail(BFIT_EINVAL, "layer norm forward: src, dst, scale, shift, mean and var are required");
    return cuda_launched(bk_lnorm_fwd(stream(op), dt(op), a->src, a->dst, a->scale,
                                      d->u.lnorm.noshift ? NULL : a->shift, a->mean, a->var,
                                      d->u.lnorm.rows, d->u.lnorm.cols, d->u.lnorm.eps, d->u.lnorm.rms,
                                      d->u.lnorm.goff),
                         "layer norm forward");
}

static int run_lnorm_bwd(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    if (!a->src || !a->mean || !a->var || !a->diff_dst || !a->scale || !a->diff_src || !a->diff_scale ||
        (!a->diff_shift && !d->u.lnorm.noshift) || !a->workspace)
        return bfit_fail(BFIT_EINVAL, "layer norm backward: src, mean, var, diff_dst, scale, diff_src, "
                                      "diff_scale, diff_shift and a workspace are required");
    /* without a shift its column sums are made and not written (k_colfin skips a NULL output) */
    return cuda_launched(bk_lnorm_bwd(stream(op), dt(op), a->src, a->mean, a->var, a->diff_dst, a->scale, a->diff_src,
                                      a->diff_scale, d->u.lnorm.noshift ? NULL : a->diff_shift, d->u.lnorm.rows, d->u.lnorm.cols, d->u.lnorm.eps,
                                      d->u.lnorm.rms, d->u.lnorm.goff, d->accumulate, cuda_ws(op, a)),
                         "layer norm backward");
}

/* ---- activations, add, scale, dropout ------------------------------------------------ */

static int run_elt_fwd(cuda_op *op, const bfit_op_args *a)
{
    if (!a->src || !a->dst)
        return bfit_fail(BFIT_EINVAL, "eltwise forward: src and dst are required");
    if (op->base.desc.u.elt.bits) {
        if (!a->saved)
            return bfit_fail(BFIT_EINVAL, "relu forward (bits): saved (the bits) is required");
        return cuda_launched(bk_relu_bits_fwd(stream(op), dt(op), a->src, a->dst, a->saved, op->base.desc.u.elt.n),
                             "relu forward (bits)");
    }
    return cuda_launched(bk_eltwise_fwd(stream(op), dt(op), (int)op->base.desc.u.elt.alg, op->base.desc.u.elt.lo,
                                        op->base.desc.u.elt.hi, a->src, a->dst, op->base.desc.u.elt.n),
                         "eltwise forward");
}

/* relu and clip from their output: y > 0 exactly where x > 0, lo < y < hi
 * where lo < x < hi, so the same kernel */
static int run_elt_bwd(cuda_op *op, const bfit_op_args *a)
{
    if (op->base.desc.u.elt.bits) {
        if (!a->saved || !a->diff_dst || !a->diff_src)
            return bfit_fail(BFIT_EINVAL, "relu backward (bits): diff_dst, diff_src and saved are required");
        return cuda_launched(bk_relu_bits_bwd(stream(op), dt(op), a->saved, a->diff_dst, a->diff_src,
                                              op->base.desc.u.elt.n), "relu backward (bits)");
    }
    if (!a->src || !a->diff_dst || !a->diff_src)
        return bfit_fail(BFIT_EINVAL, "eltwise backward: src, diff_dst and diff_src are required");
    return cuda_launched(bk_eltwise_bwd(stream(op), dt(op), (int)op->base.desc.u.elt.alg, op->base.desc.u.elt.lo,
                                        op->base.desc.u.elt.hi, a->src, a->diff_dst, a->diff_src,
                                        op->base.desc.u.elt.n),
                         "eltwise backward");
}

static int run_reduce(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int rc;
    if (!a->src || !a->dst)
        return bfit_fail(BFIT_EINVAL, "reduce rows: src and dst are required");
    if ((rc = need_ws(op, a, "reduce rows")) != BFIT_OK)
        return rc;
    return cuda_launched(bk_reduce_rows(stream(op), dt(op), a->src, a->dst, d->u.reduce.M, d->u.reduce.N, d->accumulate,
                                        cuda_ws(op, a)), "reduce rows");
}

static int run_add(cuda_op *op, const bfit_op_args *a)
{
    int acc = op->base.desc.accumulate;
    const void *y = acc ? a->dst : a->src2;
    if (!a->src || !y || !a->dst)
        return bfit_fail(BFIT_EINVAL, "add: src, %s and dst are required", acc ? "dst (accumulating)" : "src2");
    return cuda_launched(bk_add(stream(op), dt(op), a->src, y, a->dst, op->base.desc.u.add.n), "add");
}

static int run_scale(cuda_op *op, const bfit_op_args *a)
{
    if (!a->dst)
        return bfit_fail(BFIT_EINVAL, "scale: dst is required");
    return cuda_launched(bk_scale(stream(op), a->dst, a->alpha, op->base.desc.u.scale.n), "scale");
}

static int run_drop_fwd(cuda_op *op, const bfit_op_args *a)
{
    float p = op->base.desc.u.drop.p, scale = 1.0f / (1.0f - p);
    /* cpu_simple.c's threshold and seed: the same mask */
    uint64_t thresh = (uint64_t)((double)p * 4294967296.0);
    if (!a->src || !a->dst || !a->saved)
        return bfit_fail(BFIT_EINVAL, "dropout forward: src, dst and saved (the mask) are required");
    return cuda_launched(bk_dropout_fwd(stream(op), dt(op), a->src, a->dst, a->saved, op->base.desc.u.drop.n,
                                        bfit_mix64(a->seed), thresh, scale), "dropout forward");
}

static int run_drop_bwd(cuda_op *op, const bfit_op_args *a)
{
    float scale = 1.0f / (1.0f - op->base.desc.u.drop.p);
    if (!a->diff_dst || !a->diff_src || !a->saved)
        return bfit_fail(BFIT_EINVAL, "dropout backward: diff_dst, diff_src and saved (the mask) are required");
    return cuda_launched(bk_dropout_bwd(stream(op), dt(op), a->diff_dst, a->saved, a->diff_src, op->base.desc.u.drop.n,
                                        scale), "dropout backward");
}

/* ---- cross-entropy, norms -------------------------------------------------------------- */

/* Labels are device memory here, so they are not checked against N before
 * the launch as on the CPU: bfit_model_set_input checks them on the host,
 * and a bad one that gets here gives a NaN loss (never a stray read). A
 * negative label (a padding token, desc.u.xent.ignore) adds nothing, as on
 * the CPU. */
static int run_xent_fwd(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    if (!a->src || !a->dst)
        return bfit_fail(BFIT_EINVAL, "cross-entropy forward: src and dst are required");
    if (!a->labels != !a->stats)
        return bfit_fail(BFIT_EINVAL, "cross-entropy forward: labels and stats go together");
    if (a->labels && !a->workspace)
        return bfit_fail(BFIT_EINVAL, "cross-entropy forward: a workspace is required with labels");
    return cuda_launched(bk_xent_fwd(stream(op), dt(op), a->src, a->dst, a->labels, a->stats, d->u.xent.M, d->u.xent.N,
                                     a->labels ? cuda_ws(op, a) : NULL), "cross-entropy forward");
}

static int run_xent_bwd(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    if (!a->src || !a->diff_src || !a->labels)
        return bfit_fail(BFIT_EINVAL, "cross-entropy backward: src (the probabilities), labels and diff_src "
                                      "are required");
    return cuda_launched(bk_xent_bwd(stream(op), dt(op), a->src, a->labels, a->diff_src, d->u.xent.M, d->u.xent.N,
                                     a->loss_scale), "cross-entropy backward");
}

static int run_norms(cuda_op *op, const bfit_op_args *a)
{
    if (!a->src || !a->stats)
        return bfit_fail(BFIT_EINVAL, "norms: src and stats are required");
    return cuda_launched(bk_norms(stream(op), a->src, a->state0, a->stats, op->base.desc.u.norms.n,
                                  cuda_dev(op)->norm_part), "norms");
}

/* ---- optimizer updates ----------------------------------------------------------------- */

static int run_sgd(cuda_op *op, const bfit_op_args *a)
{
    bk_sgd_hyper h = {a->hyper[BFIT_SGD_LR_NEG], a->hyper[BFIT_SGD_WD], a->hyper[BFIT_SGD_MOM],
                      a->hyper[BFIT_SGD_DAMP1], a->hyper[BFIT_SGD_FIRST] != 0.0f, op->base.desc.u.sgd.nesterov};
    if (!a->dst || !a->src)
        return bfit_fail(BFIT_EINVAL, "sgd: dst (the parameters) and src (the gradients) are required");
    if (!a->state0 != !op->base.desc.u.sgd.momentum)
        return bfit_fail(BFIT_EINVAL, "sgd: state0 (the momentum buffer) is %s but the op was made %s momentum",
                         a->state0 ? "given" : "missing", op->base.desc.u.sgd.momentum ? "with" : "without");
    return cuda_launched(bk_sgd(stream(op), a->dst, a->src, a->state0, op->base.desc.u.sgd.n, h), "sgd update");
}

static int run_adamw(cuda_op *op, const bfit_op_args *a)
{
    const float *x = a->hyper;
    bk_adamw_hyper h = {x[BFIT_ADAMW_DECAY_MUL], x[BFIT_ADAMW_B1],       x[BFIT_ADAMW_C1],
                        x[BFIT_ADAMW_B2],        x[BFIT_ADAMW_C2],       x[BFIT_ADAMW_STEP_NEG],
                        x[BFIT_ADAMW_BC2_SQRT],  x[BFIT_ADAMW_EPS]};
    if (!a->dst || !a->src || !a->state0 || !a->state1)
        return bfit_fail(BFIT_EINVAL, "adamw: dst, src, state0 and state1 are required");
    return cuda_launched(bk_adamw(stream(op), a->dst, a->src, a->state0, a->state1, op->base.desc.u.adamw.n, h),
                         "adamw update");
}

/* ---- cast, embeddings, attention -------------------------------------------------------- */

static int run_cast(cuda_op *op, const bfit_op_args *a)
{
    if (!a->src || !a->dst)
        return bfit_fail(BFIT_EINVAL, "cast: src and dst are required");
    return cuda_launched(bk_cast(stream(op), dt(op), (int)op->base.desc.u.cast.to, a->src, a->dst,
                                 op->base.desc.u.cast.n), "cast");
}

static bk_embed embed_geom(const bfit_op_desc *d)
{
    bk_embed e = {d->u.embed.n, d->u.embed.T, d->u.embed.C, d->u.embed.V, d->u.embed.P, d->u.embed.types,
                  (int)d->dtype, d->u.embed.scale != 0.0f ? d->u.embed.scale : 1.0f};
    return e;
}

/* Ids are device memory: bfit_model_check_tokens checked them on the host. */
static int run_embed_fwd(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    bk_embed e = embed_geom(d);
    if (!a->src || !a->weights || !a->dst || (d->u.embed.P && !a->bias) || (d->u.embed.types && !a->shift))
        return bfit_fail(BFIT_EINVAL, "embedding forward: src (the ids), weights, dst%s%s are required",
                         d->u.embed.P ? ", bias (positions)" : "", d->u.embed.types ? ", shift (token types)" : "");
    return cuda_launched(bk_embed_fwd(stream(op), &e, a->src, a->weights, d->u.embed.P ? a->bias : NULL,
                                      d->u.embed.types ? a->shift : NULL, a->dst), "embedding forward");
}

static int run_embed_bwd(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    bk_embed e = embed_geom(d);
    int dpos = d->u.embed.P && !d->u.embed.pos_fixed; /* a constant table gets no gradient */
    if (!a->src || !a->diff_dst || !a->diff_weights || (dpos && !a->diff_bias) ||
        (d->u.embed.types && !a->diff_shift))
        return bfit_fail(BFIT_EINVAL, "embedding backward: src (the ids), diff_dst, diff_weights%s%s are required",
                         dpos ? ", diff_bias" : "", d->u.embed.types ? ", diff_shift" : "");
    return cuda_launched(bk_embed_bwd(stream(op), &e, a->src, a->diff_dst, a->diff_weights,
                                      dpos ? a->diff_bias : NULL, d->u.embed.types ? a->diff_shift : NULL),
                         "embedding backward");
}

static int embed_init(cuda_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    if (d->u.embed.n < 1 || d->u.embed.T < 1 || d->u.embed.C < 1 || d->u.embed.V < 1 || d->u.embed.P < 0)
        return bfit_fail(BFIT_EINVAL, "embedding: sizes must be positive, got n=%lld T=%lld C=%lld V=%lld P=%lld",
                         (long long)d->u.embed.n, (long long)d->u.embed.T, (long long)d->u.embed.C,
                         (long long)d->u.embed.V, (long long)d->u.embed.P);
    if (d->u.embed.P && d->u.embed.T > d->u.embed.P)
        return bfit_fail(BFIT_EINVAL, "embedding: %lld tokens but only %lld positions", (long long)d->u.embed.T,
                         (long long)d->u.embed.P);
    op->run = d->kind == BFIT_OP_EMBED_FWD ? run_embed_fwd : run_embed_bwd;
    return BFIT_OK;
}

/* ---- set-up ------------------------------------------------------------------------------- */

static int positive(int64_t v, const char *what)
{
    if (v < 1)
        return bfit_fail(BFIT_EINVAL, "%s must be positive, got %lld", what, (long long)v);
    return BFIT_OK;
}

static int lnorm_init(cuda_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    int rc;
    if ((rc = positive(d->u.lnorm.rows, "layer norm: rows")) || (rc = positive(d->u.lnorm.cols, "layer norm: cols")))
        return rc;
    if (!(d->u.lnorm.eps > 0))
        return bfit_fail(BFIT_EINVAL, "layer norm: eps must be positive, got %g", (double)d->u.lnorm.eps);
    if (d->u.lnorm.rms && !d->u.lnorm.noshift)
        return bfit_fail(BFIT_EINVAL, "RMS norm: no shift (noshift)");
    if (d->u.lnorm.goff != 0 && !(d->u.lnorm.rms && isfinite(d->u.lnorm.goff)))
        return bfit_fail(BFIT_EINVAL, "layer norm: an offset of the scale (%g) is the RMS norm's only",
                         (double)d->u.lnorm.goff);
    op->ws = d->kind == BFIT_OP_LNORM_BWD ? WS_PAD(bk_lnorm_bwd_ws(d->u.lnorm.rows, d->u.lnorm.cols)) : 0;
    op->run = d->kind == BFIT_OP_LNORM_FWD ? run_lnorm_fwd : run_lnorm_bwd;
    return BFIT_OK;
}

static int elt_init(cuda_op *op)
{
    const bfit_op_desc *d = &op->base.desc; /* checked in bfit_op_new */
    op->saved = d->u.elt.bits ? (size_t)(d->u.elt.n + 63) / 64 * 8 : 0;
    op->run = d->kind == BFIT_OP_ELTWISE_FWD ? run_elt_fwd : run_elt_bwd;
    return positive(d->u.elt.n, "eltwise: n");
}

static int drop_init(cuda_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    int rc = positive(d->u.drop.n, "dropout: n");
    if (rc == BFIT_OK && !(d->u.drop.p >= 0.0f && d->u.drop.p < 1.0f))
        rc = bfit_fail(BFIT_EINVAL, "dropout: p must be in [0, 1), got %g", (double)d->u.drop.p);
    op->saved = (size_t)(d->u.drop.n + 63) / 64 * 8; /* one mask bit per element, as on the CPU */
    op->run = d->kind == BFIT_OP_DROPOUT_FWD ? run_drop_fwd : run_drop_bwd;
    return rc;
}

static int xent_init(cuda_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    int rc;
    if ((rc = positive(d->u.xent.M, "cross-entropy: M")) || (rc = positive(d->u.xent.N, "cross-entropy: N")))
        return rc;
    /* per-row losses and hits */
    op->ws = d->kind == BFIT_OP_XENT_FWD ? WS_PAD(bk_xent_fwd_ws(d->u.xent.M)) : 0;
    op->run = d->kind == BFIT_OP_XENT_FWD ? run_xent_fwd : run_xent_bwd;
    return BFIT_OK;
}

int cuda_simple_init(cuda_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    int rc;

    op->ws = op->saved = 0;
    switch (d->kind) {
    case BFIT_OP_POOL_FWD:
    case BFIT_OP_POOL_BWD: return pool_init(op);
    case BFIT_OP_LNORM_FWD:
    case BFIT_OP_LNORM_BWD: return lnorm_init(op);
    case BFIT_OP_ELTWISE_FWD:
    case BFIT_OP_ELTWISE_BWD: return elt_init(op);
    case BFIT_OP_DROPOUT_FWD:
    case BFIT_OP_DROPOUT_BWD: return drop_init(op);
    case BFIT_OP_XENT_FWD:
    case BFIT_OP_XENT_BWD: return xent_init(op);
    case BFIT_OP_REDUCE_ROWS:
        if ((rc = positive(d->u.reduce.M, "reduce rows: M")) || (rc = positive(d->u.reduce.N, "reduce rows: N")))
            return rc;
        op->ws = WS_PAD(bk_reduce_rows_ws(d->u.reduce.M, d->u.reduce.N)); /* partial sums per chunk of rows */
        op->run = run_reduce;
        return BFIT_OK;
    case BFIT_OP_ADD: op->run = run_add; return positive(d->u.add.n, "add: n");
    case BFIT_OP_SCALE: op->run = run_scale; return positive(d->u.scale.n, "scale: n");
    case BFIT_OP_NORMS: op->run = run_norms; return positive(d->u.norms.n, "norms: n");
    case BFIT_OP_SGD: op->run = run_sgd; return positive(d->u.sgd.n, "optimizer update: n");
    case BFIT_OP_ADAMW: op->run = run_adamw; return positive(d->u.adamw.n, "optimizer update: n");
    case BFIT_OP_CAST:
        if ((rc = positive(d->u.cast.n, "cast: n")) != BFIT_OK)
            return rc;
        if ((unsigned)d->u.cast.to > BFIT_F16)
            return bfit_fail(BFIT_EINVAL, "cast: between float dtypes only, got %s to %s", bfit_dtype_name(d->dtype),
                             bfit_dtype_name(d->u.cast.to));
        op->run = run_cast;
        return BFIT_OK;
    case BFIT_OP_EMBED_FWD:
    case BFIT_OP_EMBED_BWD: return embed_init(op);
    default: return bfit_fail(BFIT_EINVAL, "cuda: op kind %d is not implemented", (int)d->kind);
    }
}
