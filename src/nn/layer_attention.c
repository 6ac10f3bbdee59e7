/* layer_attention.c - multi-head self-attention over a sequence: the input
 * is [T, 3C], each token's query, key and value side by side (the output of
 * one linear layer, GPT-2's c_attn), the output [T, C] the heads' results
 * side by side (which a linear layer, c_proj, then mixes). H heads of
 * C / H features; scores scaled by 1/sqrt(C / H); causal by default (a
 * token sees itself and the tokens before it), bidirectional for encoders.
 *
 * PyTorch: q, k, v = x.split(C, -1), each viewed [m, H, T, hs];
 * F.scaled_dot_product_attention(q, k, v, is_causal=causal), back to [m, T, C].
 *
 * What backward keeps (the plan counts it): the attention probabilities,
 * [H, T, T] f32 a sample, or, lean, only each row's log-sum-exp [H, T] f32,
 * the probabilities being recomputed from the kept input in backward (more
 * work, T times less memory). The backward reads the input either way.
 *
 * With the sequences' real lengths (a->lens, which the model stages when it
 * has bidirectional attention) the keys of padding are masked, as PyTorch's
 * key_padding_mask does: a padded sequence trains as the unpadded one.
 *
 * cfg.p: dropout on the attention weights in training (nn.MultiheadAttention's
 * dropout), its mask drawn from the step's seed in forward and again in
 * backward: no memory. */
#include "base/err.h"
#include "nn/layer.h"

#include <stdio.h>

enum { OP_FWD, OP_BWD };

static int init(bfit_layer *l, char *err, size_t errlen)
{
    bfit_shape in = l->in[0];
    int H = l->cfg.units;
    char buf[48];

    if (in.nd != 2 || in.d[1] % 3 != 0) {
        snprintf(err, errlen, "attention expects a sequence of queries, keys and values [T, 3C] (a `linear 3C` "
                              "before it), got %s",
                 bfit_shape_str(in, buf, sizeof buf));
        return BFIT_EINVAL;
    }
    if (!(l->cfg.p >= 0.0f && l->cfg.p < 1.0f)) {
        snprintf(err, errlen, "attention's dropout probability must be in [0, 1), got %g", (double)l->cfg.p);
        return BFIT_EINVAL;
    }
    if (H < 1 || (in.d[1] / 3) % H != 0) {
        snprintf(err, errlen, "attention needs a number of heads that divides the width %d, got %d", in.d[1] / 3, H);
        return BFIT_EINVAL;
    }
    l->out = bfit_shape_seq(in.d[0], in.d[1] / 3);
    return BFIT_OK;
}

static int prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    bfit_op_desc d = {.kind = BFIT_OP_ATTN_FWD, .dtype = l->dtype};
    int rc;

    d.u.attn.n = m;
    d.u.attn.T = l->in[0].d[0];
    d.u.attn.H = l->cfg.units;
    d.u.attn.hs = l->out.d[1] / l->cfg.units;
    d.u.attn.causal = l->cfg.causal;
    d.u.attn.lean = l->cfg.lean;
    d.u.attn.training = training;
    d.u.attn.p = training ? l->cfg.p : 0.0f;
    if ((rc = bfit_layer_op_pair(l, &d, BFIT_OP_ATTN_BWD, training, need)) != BFIT_OK)
        return rc;
    need->saved = bfit_op_saved_bytes(l->ops[OP_FWD]); /* probabilities, or log-sum-exps */
    return BFIT_OK;
}

static int forward(bfit_layer *l, const bfit_fwd_args *a)
{
    bfit_op_args o = {0};

    o.src = a->x[0];
    o.dst = a->y;
    o.saved = l->prep_training ? a->saved : NULL;
    o.workspace = a->ws;
    o.lens = a->lens;
    o.seed = a->seed;
    return bfit_op_run(l->ops[OP_FWD], &o);
}

static int backward(bfit_layer *l, const bfit_bwd_args *a)
{
    bfit_op_args o = {0};

    if (!a->dx[0])
        return BFIT_OK; /* no parameters: nothing to do unless upstream wants a gradient */
    o.src = a->x[0];
    o.diff_dst = a->dy;
    o.saved = a->saved;
    o.diff_src = a->dx[0];
    o.workspace = a->ws;
    o.lens = a->lens;
    o.seed = a->seed;
    return bfit_op_run(l->ops[OP_BWD], &o);
}

const bfit_layer_vt bfit_attention_vt = {
    .kind = BFIT_L_ATTENTION,
    .nin = 1,
    .modes = BFIT_MODE(BFIT_MODE_X),
    .init = init,
    .prepare = prepare,
    .init_params = NULL,
    .forward = forward,
    .backward = backward,
    .unprepare = NULL,
};
