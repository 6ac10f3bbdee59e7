/* layer.c - what every layer shares: construction, preparation for a
 * micro-batch, the per-category memory answer, seeded init helpers. */
#include "base/err.h"
#include "base/hash.h"
#include "base/rand.h"
#include "nn/layer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const bfit_layer_vt *const vts[BFIT_L_COUNT] = {
    [BFIT_L_LINEAR] = &bfit_linear_vt,       [BFIT_L_CONV] = &bfit_conv_vt,
    [BFIT_L_MAXPOOL] = &bfit_maxpool_vt,     [BFIT_L_AVGPOOL] = &bfit_avgpool_vt,
    [BFIT_L_GAP] = &bfit_gap_vt,             [BFIT_L_RELU] = &bfit_relu_vt,
    [BFIT_L_GELU] = &bfit_gelu_vt,           [BFIT_L_FLATTEN] = &bfit_flatten_vt,
    [BFIT_L_DROPOUT] = &bfit_dropout_vt,     [BFIT_L_BATCHNORM] = &bfit_batchnorm_vt,
    [BFIT_L_LAYERNORM] = &bfit_layernorm_vt, [BFIT_L_ADD] = &bfit_add_vt,
    [BFIT_L_XENT] = &bfit_xent_vt,           [BFIT_L_EMBED] = &bfit_embed_vt,
    [BFIT_L_ATTENTION] = &bfit_attention_vt, [BFIT_L_CLIP] = &bfit_clip_vt,
    [BFIT_L_CONCAT] = &bfit_concat_vt,       [BFIT_L_RESHAPE] = &bfit_reshape_vt,
    [BFIT_L_TRANSPOSE] = &bfit_transpose_vt, [BFIT_L_CLS] = &bfit_cls_vt,
    [BFIT_L_ADDP] = &bfit_addp_vt,           [BFIT_L_SELECT] = &bfit_select_vt,
    [BFIT_L_SIGMOID] = &bfit_sigmoid_vt,     [BFIT_L_SILU] = &bfit_silu_vt,
    [BFIT_L_TANH] = &bfit_tanh_vt,           [BFIT_L_HARDSIGMOID] = &bfit_hardsigmoid_vt,
    [BFIT_L_HARDSWISH] = &bfit_hardswish_vt, [BFIT_L_SCALE] = &bfit_chscale_vt,
    [BFIT_L_LEAKYRELU] = &bfit_leakyrelu_vt, [BFIT_L_ELU] = &bfit_elu_vt,
    [BFIT_L_SOFTPLUS] = &bfit_softplus_vt,  [BFIT_L_SELU] = &bfit_selu_vt,
    [BFIT_L_CELU] = &bfit_celu_vt,           [BFIT_L_PRELU] = &bfit_prelu_vt,
    [BFIT_L_LAYERSCALE] = &bfit_layerscale_vt, [BFIT_L_GROUPNORM] = &bfit_groupnorm_vt,
    [BFIT_L_RMSNORM] = &bfit_rmsnorm_vt,     [BFIT_L_MUL] = &bfit_mul_vt,
    [BFIT_L_ROPE] = &bfit_rope_vt,           [BFIT_L_REPEAT] = &bfit_repeat_vt,
    [BFIT_L_GATHER] = &bfit_gather_vt,
};

static const char *const kind_names[BFIT_L_COUNT] = {
    [BFIT_L_LINEAR] = "linear",   [BFIT_L_CONV] = "conv",        [BFIT_L_MAXPOOL] = "maxpool",
    [BFIT_L_AVGPOOL] = "avgpool", [BFIT_L_GAP] = "gap",          [BFIT_L_RELU] = "relu",
    [BFIT_L_GELU] = "gelu",       [BFIT_L_FLATTEN] = "flatten",  [BFIT_L_DROPOUT] = "dropout",
    [BFIT_L_BATCHNORM] = "batchnorm", [BFIT_L_LAYERNORM] = "layernorm", [BFIT_L_ADD] = "add",
    [BFIT_L_XENT] = "xent",       [BFIT_L_EMBED] = "embed",      [BFIT_L_ATTENTION] = "attention",
    [BFIT_L_CLIP] = "clip",       [BFIT_L_CONCAT] = "concat",    [BFIT_L_RESHAPE] = "reshape",
    [BFIT_L_TRANSPOSE] = "transpose", [BFIT_L_CLS] = "cls",      [BFIT_L_ADDP] = "addp",
    [BFIT_L_SELECT] = "select",   [BFIT_L_SIGMOID] = "sigmoid",  [BFIT_L_SILU] = "silu",
    [BFIT_L_TANH] = "tanh",       [BFIT_L_HARDSIGMOID] = "hardsigmoid", [BFIT_L_HARDSWISH] = "hardswish",
    [BFIT_L_SCALE] = "scale",     [BFIT_L_LEAKYRELU] = "leakyrelu", [BFIT_L_ELU] = "elu",
    [BFIT_L_SOFTPLUS] = "softplus", [BFIT_L_SELU] = "selu",    [BFIT_L_CELU] = "celu",
    [BFIT_L_PRELU] = "prelu",     [BFIT_L_LAYERSCALE] = "layerscale", [BFIT_L_GROUPNORM] = "groupnorm",
    [BFIT_L_RMSNORM] = "rmsnorm", [BFIT_L_MUL] = "mul",         [BFIT_L_ROPE] = "rope",
    [BFIT_L_REPEAT] = "repeat",   [BFIT_L_GATHER] = "gather",
};

static void unprepare(bfit_layer *l);

void bfit_layer_set_dtype(bfit_layer *l, bfit_dtype t)
{
    if (l->dtype == t)
        return;
    unprepare(l);
    l->dtype = t;
    l->out_dtype = l->cfg.kind == BFIT_L_XENT ? BFIT_F32 : t;
}

void bfit_layer_set_blocked(bfit_layer *l, int in, int out)
{
    if (l->blk_in == in && l->blk_out == out)
        return;
    unprepare(l);
    l->blk_in = in;
    l->blk_out = out;
}

void bfit_layer_flops(const bfit_layer *l, int m, double *fwd, double *bwd)
{
    double out = (double)m * (double)bfit_shape_numel(l->out), in = (double)m * (double)bfit_shape_numel(l->in[0]);
    const bfit_layer_cfg *c = &l->cfg;
    switch (c->kind) {
    case BFIT_L_LINEAR:
        /* per output element: a dot product over the input features */
        *fwd = 2.0 * out * (double)l->params[0].dim[1];
        *bwd = 2.0 * *fwd; /* weight gradient and input gradient */
        return;
    case BFIT_L_CONV:
        *fwd = 2.0 * out * (double)l->in[0].c / (c->groups > 1 ? c->groups : 1) * c->kh * c->kw;
        *bwd = 2.0 * *fwd;
        return;
    case BFIT_L_ATTENTION: {
        /* Q K^T and P V: 2 T^2 C multiply-adds a sample (about half when causal);
         * backward four such products, with the scores again when lean */
        double T = l->in[0].d[0], C = l->out.d[1], f = 4.0 * m * T * T * C * (c->causal ? 0.5 : 1.0);
        *fwd = f;
        *bwd = (c->lean ? 3.0 : 2.0) * f;
        return;
    }
    case BFIT_L_BATCHNORM:
    case BFIT_L_LAYERNORM:
    case BFIT_L_RMSNORM:
        *fwd = 5.0 * in;
        *bwd = 8.0 * in;
        return;
    case BFIT_L_MAXPOOL:
    case BFIT_L_AVGPOOL:
        *fwd = in > out * c->kh * c->kw ? in : out * c->kh * c->kw;
        *bwd = *fwd;
        return;
    default:
        *fwd = in > out ? in : out;
        *bwd = *fwd;
        return;
    }
}

bfit_bwd_mode bfit_layer_default_mode(const bfit_layer_vt *vt)
{
    for (int m = 0; m < BFIT_NMODES; m++)
        if (vt->modes & BFIT_MODE(m))
            return (bfit_bwd_mode)m;
    return BFIT_MODE_NONE;
}

const char *bfit_layer_kind_name(bfit_layer_kind kind)
{
    return (unsigned)kind < BFIT_L_COUNT ? kind_names[kind] : "?";
}

bfit_layer_cfg bfit_layer_cfg_default(bfit_layer_kind kind)
{
    bfit_layer_cfg c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.kh = c.kw = 1;
    c.sh = c.sw = 1;
    c.bias = 1;
    c.eps = kind == BFIT_L_RMSNORM ? 1e-6f : 1e-5f; /* LLaMA's RMSNorm(dim, eps=1e-6) */
    c.momentum = 0.1f;
    c.p = kind == BFIT_L_DROPOUT ? 0.5f : 0.0f; /* attention's dropout on its weights: none unless asked */
    c.causal = 1;
    c.alpha = kind == BFIT_L_LEAKYRELU ? 0.01f : kind == BFIT_L_ELU || kind == BFIT_L_CELU ? 1.0f
              : kind == BFIT_L_PRELU ? 0.25f : kind == BFIT_L_LAYERSCALE ? 1e-5f : 1.0f / 6.0f; /* PyTorch's, timm's */
    if (kind == BFIT_L_PRELU)
        c.units = 1; /* nn.PReLU(): one slope */
    c.beta = kind == BFIT_L_SOFTPLUS ? 1.0f : 0.5f;
    c.threshold = 20.0f;
    c.theta = 10000.0f; /* RoPE's base in LLaMA and GPT-NeoX */
    return c;
}

int bfit_layer_new(const bfit_layer_cfg *cfg, bfit_device *dev, const bfit_shape *in, int nin,
                   bfit_layer **out, char *err, size_t errlen)
{
    bfit_layer *l;
    int rc;

    *out = NULL;
    if ((unsigned)cfg->kind >= BFIT_L_COUNT || !vts[cfg->kind]) {
        snprintf(err, errlen, "unknown layer kind %d", (int)cfg->kind);
        return bfit_fail(BFIT_EINVAL, "%s", err);
    }
    if (vts[cfg->kind]->nin ? nin != vts[cfg->kind]->nin : nin < 1) {
        snprintf(err, errlen, "%s takes %d input(s), got %d", kind_names[cfg->kind], vts[cfg->kind]->nin, nin);
        return bfit_fail(BFIT_EINVAL, "%s", err);
    }
    l = calloc(1, sizeof *l);
    if (!l) {
        snprintf(err, errlen, "out of host memory");
        return bfit_fail(BFIT_ENOMEM, "%s", err);
    }
    l->vt = vts[cfg->kind];
    l->cfg = *cfg;
    l->dev = dev;
    l->nin = nin;
    if (nin > BFIT_LAYER_MAXIN) {
        free(l);
        snprintf(err, errlen, "%s takes at most %d inputs", kind_names[cfg->kind], BFIT_LAYER_MAXIN);
        return bfit_fail(BFIT_EINVAL, "%s", err);
    }
    for (int i = 0; i < nin; i++)
        l->in[i] = in[i];
    l->dtype = l->out_dtype = BFIT_F32;
    err[0] = '\0';
    rc = l->vt->init(l, err, errlen);
    if (rc != BFIT_OK) {
        free(l);
        return bfit_fail(rc, "%s", err);
    }
    for (int i = 0; i < l->nparams; i++)
        l->params[i].dtype = BFIT_F32; /* parameters are the f32 master copy */
    l->mode = bfit_layer_default_mode(l->vt);
    *out = l;
    return BFIT_OK;
}

/* The current ops go (the layer's own state first), the cache stays. */
static void unprepare_current(bfit_layer *l)
{
    if (l->vt->unprepare)
        l->vt->unprepare(l);
    for (int i = 0; i < BFIT_LAYER_MAXOPS; i++) {
        bfit_op_free(l->ops[i]);
        l->ops[i] = NULL;
    }
    l->prep_m = 0;
    memset(&l->need, 0, sizeof l->need);
}

static void cache_drop(bfit_layer_prep *e)
{
    for (int i = 0; i < BFIT_LAYER_MAXOPS; i++)
        bfit_op_free(e->ops[i]);
    memset(e, 0, sizeof *e);
}

/* Everything prepared goes: shapes, dtype or layer changed. */
static void unprepare(bfit_layer *l)
{
    unprepare_current(l);
    for (int i = 0; i < BFIT_LAYER_CACHE; i++)
        cache_drop(&l->cache[i]);
}

static int cacheable(const bfit_layer *l) { return !l->vt->unprepare; }

void bfit_layer_forget(bfit_layer *l)
{
    unprepare(l);
    memset(l->memo, 0, sizeof l->memo);
}

/* The current set and entry e trade places (either may be empty). */
static void swap_current(bfit_layer *l, bfit_layer_prep *e)
{
    bfit_layer_prep cur = {l->prep_m, l->prep_training, l->prep_mode, {{0}}, l->need, {0}, l->tick};
    memcpy(cur.in, l->in, sizeof cur.in);
    memcpy(cur.ops, l->ops, sizeof cur.ops);
    l->prep_m = e->m;
    l->prep_training = e->training;
    l->prep_mode = e->mode;
    l->need = e->need;
    memcpy(l->ops, e->ops, sizeof l->ops);
    *e = cur;
}

/* The entry prepared for (m, training, mode) at the current input shapes
 * (entries of other shapes are stale: a token model's length moved the
 * current set elsewhere, src/nn/seq.c), or NULL. */
static bfit_layer_prep *cache_find(bfit_layer *l, int m, int training)
{
    for (int i = 0; i < BFIT_LAYER_CACHE; i++) {
        bfit_layer_prep *e = &l->cache[i];
        if (e->m == m && e->training == training && e->mode == l->mode &&
            !memcmp(e->in, l->in, sizeof e->in))
            return e;
    }
    return NULL;
}

/* The current set into the cache (an empty entry, else the least recently
 * used, dropped), leaving none current. */
static void park(bfit_layer *l)
{
    bfit_layer_prep *e = &l->cache[0];
    if (!l->prep_m || !cacheable(l)) {
        unprepare_current(l);
        return;
    }
    for (int i = 1; i < BFIT_LAYER_CACHE && e->m; i++)
        if (!l->cache[i].m || l->cache[i].used < e->used)
            e = &l->cache[i];
    cache_drop(e);
    swap_current(l, e);
}

int bfit_layer_reshape(bfit_layer *l, const bfit_shape *in, char *err, size_t errlen)
{
    bfit_param keep[BFIT_LAYER_MAXP];
    bfit_shape old[BFIT_LAYER_MAXIN];
    int n = l->nparams, rc;

    memcpy(keep, l->params, sizeof keep);
    memcpy(old, l->in, sizeof old);
    unprepare(l);
    for (int k = 0; k < l->nin; k++)
        l->in[k] = in[k];
    err[0] = '\0';
    rc = l->vt->init(l, err, errlen);
    for (int i = 0; rc == BFIT_OK && i < n; i++)
        if (l->nparams != n || memcmp(l->params[i].dim, keep[i].dim, sizeof keep[i].dim) != 0) {
            snprintf(err, errlen, "%s: its parameters would change shape", kind_names[l->cfg.kind]);
            rc = BFIT_EINVAL;
        }
    /* the parameters are the same tensors (their memory, flags, sharing) */
    memcpy(l->params, keep, sizeof keep);
    l->nparams = n;
    if (rc != BFIT_OK) {
        char ignore[8];
        memcpy(l->in, old, sizeof old);
        l->vt->init(l, ignore, sizeof ignore);
        memcpy(l->params, keep, sizeof keep);
        return bfit_fail(rc, "%s", err);
    }
    return BFIT_OK;
}

void bfit_layer_free(bfit_layer *l)
{
    if (!l)
        return;
    unprepare(l);
    free(l);
}

static uint64_t shapes_hash(const bfit_layer *l)
{
    return bfit_fnv1a(BFIT_FNV_OFFSET, l->in, sizeof l->in[0] * (size_t)l->nin);
}

/* The memo's entry for (m, training) in the layer's present mode, dtype,
 * layouts and shapes, or NULL. */
static bfit_layer_memo *memo_find(bfit_layer *l, int m, int training, uint64_t shapes)
{
    for (int i = 0; i < BFIT_LAYER_MEMO; i++) {
        bfit_layer_memo *e = &l->memo[i];
        if (e->m == m && e->training == training && e->shapes == shapes && e->mode == l->mode &&
            e->dtype == l->dtype && e->blk_in == l->blk_in && e->blk_out == l->blk_out)
            return e;
    }
    return NULL;
}

/* The needs just prepared, into their entry, else the least recently used
 * (an empty one's use is 0, a filled one's at least 1). */
static void memo_put(bfit_layer *l)
{
    uint64_t h = shapes_hash(l);
    bfit_layer_memo *e = memo_find(l, l->prep_m, l->prep_training, h);
    if (!e) {
        e = &l->memo[0];
        for (int i = 1; i < BFIT_LAYER_MEMO; i++)
            if (l->memo[i].used < e->used)
                e = &l->memo[i];
    }
    *e = (bfit_layer_memo){h, l->prep_m, l->prep_training, l->mode, l->dtype, l->blk_in, l->blk_out, l->need,
                           l->tick};
}

int bfit_layer_prepare(bfit_layer *l, int m, int training)
{
    bfit_layer_prep *e;
    int rc;
    if (m < 1)
        return bfit_fail(BFIT_EINVAL, "micro-batch must be at least 1, got %d", m);
    if (l->prep_m == m && l->prep_training == training && l->prep_mode == l->mode)
        return BFIT_OK;
    l->tick++;
    if (cacheable(l) && (e = cache_find(l, m, training))) {
        swap_current(l, e);
        return BFIT_OK;
    }
    park(l);
    rc = l->vt->prepare(l, m, training, &l->need);
    if (rc != BFIT_OK) {
        unprepare_current(l);
        return rc;
    }
    l->prep_m = m;
    l->prep_training = training;
    l->prep_mode = l->mode;
    memo_put(l);
    return BFIT_OK;
}

char *bfit_layer_stats_at(const bfit_layer *l, void *saved, void *ws)
{
    if (l->prep_training)
        return saved;
    return (char *)ws + BFIT_ALIGN_UP(bfit_op_workspace_bytes(l->ops[0]));
}

int bfit_layer_fwd1(bfit_layer *l, const bfit_fwd_args *a)
{
    bfit_op_args o = {0};
    o.src = a->x[0];
    o.dst = a->y;
    o.workspace = a->ws;
    return bfit_op_run(l->ops[0], &o);
}

int bfit_layer_bwd1(bfit_layer *l, const bfit_bwd_args *a)
{
    bfit_op_args o = {0};
    if (!a->dx[0])
        return BFIT_OK;
    o.diff_dst = a->dy;
    o.diff_src = a->dx[0];
    o.workspace = a->ws;
    return bfit_op_run(l->ops[1], &o);
}

int bfit_layer_op_pair(bfit_layer *l, bfit_op_desc *d, bfit_op_kind bwd, int training, bfit_layer_need *need)
{
    int rc = bfit_op_new(l->dev, d, &l->ops[0]);
    if (rc != BFIT_OK)
        return rc;
    need->saved = 0;
    need->ws_fwd = bfit_op_workspace_bytes(l->ops[0]);
    need->ws_bwd = 0;
    if (training) {
        d->kind = bwd;
        rc = bfit_op_new(l->dev, d, &l->ops[1]);
        if (rc != BFIT_OK)
            return rc;
        need->ws_bwd = bfit_op_workspace_bytes(l->ops[1]);
    }
    return BFIT_OK;
}

int bfit_layer_late_op(bfit_layer *l, int slot, const bfit_op_desc *d)
{
    size_t ws;
    int rc;
    if (l->ops[slot])
        return BFIT_OK;
    if ((rc = bfit_op_new(l->dev, d, &l->ops[slot])) != BFIT_OK)
        return rc;
    if ((ws = bfit_op_workspace_bytes(l->ops[slot])) <= l->need.ws_bwd)
        return BFIT_OK;
    bfit_op_free(l->ops[slot]);
    l->ops[slot] = NULL;
    return bfit_fail(BFIT_ESTATE, "%s: the op setting the gradients needs %zu bytes of workspace, more than the "
                     "%zu planned", bfit_layer_kind_name(l->cfg.kind), ws, (size_t)l->need.ws_bwd);
}

int bfit_layer_forward(bfit_layer *l, const bfit_fwd_args *a)
{
    if (!l->prep_m || a->m != l->prep_m || (a->training && !l->prep_training))
        return bfit_fail(BFIT_ESTATE, "%s: forward of %d samples (%s) on a layer prepared for %d (%s)",
                         bfit_layer_kind_name(l->cfg.kind), a->m, a->training ? "training" : "eval", l->prep_m,
                         l->prep_training ? "training" : "eval");
    return l->vt->forward(l, a);
}

int bfit_layer_backward(bfit_layer *l, const bfit_bwd_args *a)
{
    if (!l->prep_m || a->m != l->prep_m || !l->prep_training)
        return bfit_fail(BFIT_ESTATE, "%s: backward of %d samples on a layer prepared for %d (%s)",
                         bfit_layer_kind_name(l->cfg.kind), a->m, l->prep_m, l->prep_training ? "training" : "eval");
    return l->vt->backward(l, a);
}

int bfit_layer_min_batch(const bfit_layer *l) { return l->vt->min_batch ? l->vt->min_batch(l) : 1; }

int bfit_layer_query(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    int old_m = l->prep_m, old_t = l->prep_training, rc;
    bfit_bwd_mode old_mode = l->prep_mode, want = l->mode;
    bfit_layer_memo *e;

    if (old_m == m && old_t == training && old_mode == want) {
        *need = l->need;
        return BFIT_OK;
    }
    if (m >= 1 && (e = memo_find(l, m, training, shapes_hash(l)))) { /* no ops made to learn it again */
        e->used = ++l->tick;
        *need = e->need;
        return BFIT_OK;
    }
    rc = bfit_layer_prepare(l, m, training);
    if (rc == BFIT_OK)
        *need = l->need;
    if (old_m) {
        int rc2;
        l->mode = old_mode;
        rc2 = bfit_layer_prepare(l, old_m, old_t);
        l->mode = want;
        if (rc == BFIT_OK)
            rc = rc2;
    } else {
        park(l); /* kept: the plan asks for the same sizes again */
    }
    return rc;
}

int bfit_layer_memory(bfit_layer *l, int m, int training, uint64_t bytes[BFIT_MEM_NCAT])
{
    bfit_layer_need need = {0, 0, 0};
    uint64_t out_bytes = BFIT_ALIGN_UP((uint64_t)m * bfit_shape_numel(l->out) * bfit_dtype_size(l->out_dtype));
    int rc = bfit_layer_query(l, m, training, &need);

    if (rc != BFIT_OK)
        return rc;
    memset(bytes, 0, sizeof(uint64_t) * BFIT_MEM_NCAT);
    for (int i = 0; i < l->nparams; i++) {
        uint64_t b = BFIT_ALIGN_UP(bfit_param_bytes(&l->params[i]));
        bytes[BFIT_MEM_PARAMS] += b;
        if (l->params[i].trainable && training)
            bytes[BFIT_MEM_GRADS] += b;
    }
    bytes[BFIT_MEM_ACTIVATIONS] = out_bytes + (training ? BFIT_ALIGN_UP(need.saved) : 0);
    bytes[BFIT_MEM_ACT_GRADS] = training ? out_bytes : 0;
    bytes[BFIT_MEM_WORKSPACE] =
        BFIT_ALIGN_UP(need.ws_fwd > need.ws_bwd || !training ? need.ws_fwd : need.ws_bwd);
    return BFIT_OK;
}

void bfit_fill_uniform(float *x, int64_t n, float bound, uint64_t seed)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)((2.0 * bfit_rand_unit(seed, (uint64_t)i) - 1.0) * bound);
}

void bfit_fill_const(float *x, int64_t n, float v)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = v;
}
