/* layer_linear.c - fully connected layer, PyTorch's nn.Linear:
 * y[rows,out] = x[rows,in] W[out,in]^T + b, over the last dimension: a
 * vector sample is one row, a sequence of T tokens T rows. With cfg.wt the
 * weight is stored [in, out] and y = x W + b (transformers' Conv1D, GPT-2's
 * layers): the same matmuls with the weight's operand the other way round,
 * so the file's tensor is used and saved as it is.
 *
 * Three matmuls and a row reduction, all on oneDNN/OpenMP ops prepared for
 * the micro-batch. Weight and bias gradients are accumulated by the ops
 * themselves (sum post-op), so no temporary is needed; the first write of a
 * step sets them through ops of their own (bfit_bwd_args.grad_set). */
#include "base/err.h"
#include "nn/layer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { OP_FWD, OP_DW, OP_DX, OP_DB, OP_DW_SET, OP_DB_SET };
/* what a matmul does with its dst: writes it, adds a gradient to it, sets a gradient */
enum { MM_OUT, MM_ADD, MM_SET };

/* in features per row, and rows per sample */
static int64_t features(const bfit_layer *l) { return l->in[0].nd == 2 ? l->in[0].d[1] : l->in[0].c; }
static int64_t rows(const bfit_layer *l) { return l->in[0].nd == 2 ? l->in[0].d[0] : 1; }

static int init(bfit_layer *l, char *err, size_t errlen)
{
    bfit_shape in = l->in[0];
    char buf[48];

    if (in.nd != 2 && !bfit_shape_is_vector(in)) {
        snprintf(err, errlen, "linear expects a vector or a sequence, got %s: add `flatten` before it",
                 bfit_shape_str(in, buf, sizeof buf));
        return BFIT_EINVAL;
    }
    if (l->cfg.units < 1) {
        snprintf(err, errlen, "linear needs a positive number of output features, got %d", l->cfg.units);
        return BFIT_EINVAL;
    }
    if (l->cfg.wt && l->cfg.tie) {
        snprintf(err, errlen, "linear: a weight stored [in, out] (wt) cannot be the token table [vocab, C] (tie)");
        return BFIT_EINVAL;
    }
    l->out = in.nd == 2 ? bfit_shape_seq(in.d[0], l->cfg.units) : bfit_shape_vec(l->cfg.units);
    l->nparams = l->cfg.bias ? 2 : 1;
    /* tie: the model points the weight at the embedding's [vocab, C] table */
    l->params[0] = (bfit_param){.name = "weight", .ndim = 2, .dim = {l->cfg.units, features(l)}, .trainable = 1,
                                .decay = 1, .multiplies = 1, .shared = l->cfg.tie};
    if (l->cfg.wt)
        l->params[0].dim[0] = features(l), l->params[0].dim[1] = l->cfg.units;
    if (l->cfg.bias)
        l->params[1] = (bfit_param){.name = "bias", .ndim = 1, .dim = {l->cfg.units}, .trainable = 1};
    return BFIT_OK;
}

static bfit_op_desc mm_desc(const bfit_layer *l, int64_t M, int64_t N, int64_t K, int ts, int tw, int bias, int dst)
{
    bfit_op_desc d = {.kind = BFIT_OP_MATMUL, .dtype = l->dtype, .accumulate = dst == MM_ADD};
    d.u.mm.M = M;
    d.u.mm.N = N;
    d.u.mm.K = K;
    d.u.mm.trans_src = ts;
    d.u.mm.trans_weights = tw;
    d.u.mm.bias = bias;
    d.u.mm.grad = dst == MM_SET;
    return d;
}

static int new_mm(bfit_layer *l, int slot, int64_t M, int64_t N, int64_t K, int ts, int tw, int bias, int dst)
{
    bfit_op_desc d = mm_desc(l, M, N, K, ts, tw, bias, dst);
    return bfit_op_new(l->dev, &d, &l->ops[slot]);
}

/* dW[out,in] (+)= dy^T x: dy is stored [m,out] = [K,M]; wt: dW[in,out] (+)= x^T dy */
static bfit_op_desc dw_desc(const bfit_layer *l, int m, int dst)
{
    if (l->cfg.wt)
        return mm_desc(l, features(l), l->cfg.units, m * rows(l), 1, 0, 0, dst);
    return mm_desc(l, l->cfg.units, features(l), m * rows(l), 1, 0, 0, dst);
}

static bfit_op_desc db_desc(const bfit_layer *l, int m, int acc)
{
    bfit_op_desc d = {.kind = BFIT_OP_REDUCE_ROWS, .dtype = l->dtype, .accumulate = acc};
    d.u.reduce.M = m * rows(l);
    d.u.reduce.N = l->cfg.units;
    return d;
}

/* The gradients' ops: adding, or setting (made at their first use) */
static int grad_ops(bfit_layer *l, const bfit_bwd_args *a, bfit_op **dw, bfit_op **db)
{
    bfit_op_desc w, b;
    int rc;
    *dw = l->ops[OP_DW];
    *db = l->ops[OP_DB];
    if (!a->grad_set)
        return BFIT_OK;
    if (!l->ops[OP_DW_SET] || (l->cfg.bias && !l->ops[OP_DB_SET])) { /* the first step that sets: made now */
        w = dw_desc(l, a->m, MM_SET);
        b = db_desc(l, a->m, 0);
        if ((rc = bfit_layer_late_op(l, OP_DW_SET, &w)) != BFIT_OK ||
            (l->cfg.bias && (rc = bfit_layer_late_op(l, OP_DB_SET, &b)) != BFIT_OK))
            return rc;
    }
    *dw = l->ops[OP_DW_SET];
    *db = l->ops[OP_DB_SET];
    return BFIT_OK;
}

static size_t max_ws(const bfit_layer *l, int from, int to)
{
    size_t w = 0;
    for (int i = from; i <= to; i++)
        if (l->ops[i] && bfit_op_workspace_bytes(l->ops[i]) > w)
            w = bfit_op_workspace_bytes(l->ops[i]);
    return w;
}

static int prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    int64_t in = features(l), out = l->cfg.units, M = m * rows(l);
    int rc;

    /* y = x W^T: W is stored [out,in] = [N,K], hence trans_weights (wt: [in,out] = [K,N]) */
    if ((rc = new_mm(l, OP_FWD, M, out, in, 0, !l->cfg.wt, l->cfg.bias, MM_OUT)) != BFIT_OK)
        return rc;
    if (training) {
        bfit_op_desc w = dw_desc(l, m, MM_ADD), b = db_desc(l, m, 1);
        if ((rc = bfit_op_new(l->dev, &w, &l->ops[OP_DW])) != BFIT_OK)
            return rc;
        /* dx[m,in] = dy[m,out] W[out,in] (wt: W[in,out]^T) */
        if ((rc = new_mm(l, OP_DX, M, in, out, 0, l->cfg.wt, 0, MM_OUT)) != BFIT_OK)
            return rc;
        if (l->cfg.bias && (rc = bfit_op_new(l->dev, &b, &l->ops[OP_DB])) != BFIT_OK)
            return rc;
    }
    need->saved = 0;
    need->ws_fwd = max_ws(l, OP_FWD, OP_FWD);
    need->ws_bwd = training ? max_ws(l, OP_DW, OP_DB) : 0;
    return BFIT_OK;
}

static void init_params(bfit_layer *l, uint64_t seed, float *const *host)
{
    /* PyTorch: kaiming_uniform(a=sqrt 5) for W and U(+-1/sqrt(fan_in)) for b
     * both come to U(-1/sqrt(in), 1/sqrt(in)). With std (GPT-2, BERT): W
     * with that spread (uniform, as the embedding's tables), b zero. */
    float bound = l->cfg.std > 0 ? l->cfg.std * sqrtf(3.0f) : 1.0f / sqrtf((float)features(l));
    bfit_fill_uniform(host[0], bfit_param_numel(&l->params[0]), bound, seed * 2 + 0);
    if (l->cfg.bias && l->cfg.std > 0)
        memset(host[1], 0, sizeof(float) * (size_t)bfit_param_numel(&l->params[1]));
    else if (l->cfg.bias)
        bfit_fill_uniform(host[1], bfit_param_numel(&l->params[1]), bound, seed * 2 + 1);
}

static int forward(bfit_layer *l, const bfit_fwd_args *a)
{
    bfit_op_args o = {0};

    o.src = a->x[0];
    o.weights = bfit_param_compute(&l->params[0]);
    o.bias = l->cfg.bias ? l->params[1].data : NULL;
    o.dst = a->y;
    o.workspace = a->ws;
    return bfit_op_run(l->ops[OP_FWD], &o);
}

static int backward(bfit_layer *l, const bfit_bwd_args *a)
{
    bfit_op_args o = {0};
    bfit_op *dw, *db;
    int rc;

    if ((rc = grad_ops(l, a, &dw, &db)) != BFIT_OK)
        return rc;
    o.src = l->cfg.wt ? a->x[0] : a->dy; /* dW = dy^T x, or x^T dy */
    o.weights = l->cfg.wt ? a->dy : a->x[0];
    o.dst = l->params[0].grad;
    o.workspace = a->ws;
    if ((rc = bfit_op_run(dw, &o)) != BFIT_OK)
        return rc;
    if (l->cfg.bias) {
        o = (bfit_op_args){0};
        o.src = a->dy;
        o.dst = l->params[1].grad;
        o.workspace = a->ws; /* the CPU's sum needs none; the GPU's partial sums do */
        if ((rc = bfit_op_run(db, &o)) != BFIT_OK)
            return rc;
    }
    if (!a->dx[0])
        return BFIT_OK;
    o = (bfit_op_args){0};
    o.src = a->dy;
    o.weights = bfit_param_compute(&l->params[0]);
    o.dst = a->dx[0];
    o.workspace = a->ws;
    return bfit_op_run(l->ops[OP_DX], &o);
}

const bfit_layer_vt bfit_linear_vt = {
    .kind = BFIT_L_LINEAR,
    .nin = 1,
    .grad_set = 1,
    .modes = BFIT_MODE(BFIT_MODE_X),
    .init = init,
    .prepare = prepare,
    .init_params = init_params,
    .forward = forward,
    .backward = backward,
    .unprepare = NULL, /* ops are freed generically */
};
