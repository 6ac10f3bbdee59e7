/* layer_xent.c - softmax cross-entropy loss over a vector of N class scores,
 * or over each token of a sequence [T, N] (a language model's next-token
 * loss: one label per token, a negative label for a padding token, which
 * adds no loss, no gradient and no count; evaluating, a sample's negative
 * label leaves it out alike).
 *
 * The output y is the softmax probabilities (same shape as the input), which
 * is all the backward needs: dx = (p - onehot(label)) * loss_scale. The
 * forward adds the sum over the micro-batch of -log p[label], and the
 * samples whose arg-max is the label, into the device statistics; the
 * trainer divides by the effective batch through loss_scale. */
#include "base/err.h"
#include "nn/layer.h"

#include <stdio.h>

enum { OP_FWD, OP_BWD };

static int init(bfit_layer *l, char *err, size_t errlen)
{
    bfit_shape in = l->in[0];
    char buf[48];

    if (!bfit_shape_is_vector(in) && in.nd != 2) {
        snprintf(err, errlen, "xent expects a vector of class scores (or a sequence of them, one per token), got "
                              "%s: add `flatten` and a `linear` with one output per class before it",
                 bfit_shape_str(in, buf, sizeof buf));
        return BFIT_EINVAL;
    }
    l->out = in;
    return BFIT_OK;
}

static int prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    bfit_op_desc d = {.kind = BFIT_OP_XENT_FWD, .dtype = l->dtype};

    /* a sequence: one row (and one label) per token; padding tokens have label -1 */
    d.u.xent.M = (int64_t)m * (l->in[0].nd == 2 ? l->in[0].d[0] : 1);
    d.u.xent.N = l->in[0].nd == 2 ? l->in[0].d[1] : l->in[0].c;
    d.u.xent.ignore = l->in[0].nd == 2 || !training; /* evaluating: -1 is a sample left out */
    return bfit_layer_op_pair(l, &d, BFIT_OP_XENT_BWD, training, need);
}

/* labels and stats may both be NULL: probabilities only (prediction) */
static int forward(bfit_layer *l, const bfit_fwd_args *a)
{
    bfit_op_args o = {0};

    o.src = a->x[0];
    o.dst = a->y;
    o.labels = a->labels;
    o.stats = a->stats;
    o.workspace = a->ws;
    return bfit_op_run(l->ops[OP_FWD], &o);
}

static int backward(bfit_layer *l, const bfit_bwd_args *a)
{
    bfit_op_args o = {0};

    if (!a->dx[0])
        return BFIT_OK;
    o.src = a->y;
    o.labels = a->labels;
    o.diff_src = a->dx[0];
    o.loss_scale = a->loss_scale;
    o.workspace = a->ws;
    return bfit_op_run(l->ops[OP_BWD], &o);
}

const bfit_layer_vt bfit_xent_vt = {
    .kind = BFIT_L_XENT,
    .nin = 1,
    .modes = BFIT_MODE(BFIT_MODE_Y),
    .init = init,
    .prepare = prepare,
    .init_params = NULL,
    .forward = forward,
    .backward = backward,
    .unprepare = NULL,
};
