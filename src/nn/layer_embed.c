/* layer_embed.c - token embeddings: a sequence of T token ids (the model's
 * int32 input) -> [T, C], the sum of the token's row of a [vocab, C] table,
 * the position's row of a [positions, C] table (GPT-2's wpe, BERT's
 * position embeddings; none when positions is 0) and, for BERT, the row of
 * its segment in a token-type table (0, or a sentence pair's 1: each id's
 * type in its high bits, BFIT_TOKEN_TYPE_SHIFT).
 *
 * PyTorch: nn.Embedding(vocab, C)(ids) + nn.Embedding(positions, C)(arange(T))
 * (+ nn.Embedding(types, C)(token_type_ids)). The backward reads the ids (its input)
 * and adds each token's gradient row into the rows it read.
 *
 * From ONNX also the Transformer tutorial's form, nn.Embedding(vocab, C)(ids)
 * * sqrt(C) + pe[:, :T]: the token rows scaled (escale), and the positions a
 * sinusoidal buffer (pos_fixed: a parameter that is not trained, whose
 * values are the file's). */
#include "base/err.h"
#include "nn/layer.h"

#include <math.h>
#include <stdio.h>

enum { OP_FWD, OP_BWD };

static int init(bfit_layer *l, char *err, size_t errlen)
{
    bfit_shape in = l->in[0];
    const bfit_layer_cfg *c = &l->cfg;
    char buf[48];
    int k = 0;

    if (in.nd != 2 || in.d[1] != 1) {
        snprintf(err, errlen, "embed expects the token ids of the model input (`input tokens=T`), got %s",
                 bfit_shape_str(in, buf, sizeof buf));
        return BFIT_EINVAL;
    }
    if (c->units < 1 || c->vocab < 1 || c->positions < 0 || c->types < 0 || c->pos_off < 0) {
        snprintf(err, errlen, "embed needs a width and a vocabulary of at least 1 (got %d and %d), and positions and "
                              "types of at least 0",
                 c->units, c->vocab);
        return BFIT_EINVAL;
    }
    if (c->positions && in.d[0] > c->positions - c->pos_off) {
        snprintf(err, errlen, "embed has %d positions%s but the input has %d tokens: give positions=%d or more, or a "
                              "shorter input",
                 c->positions - c->pos_off, c->pos_off ? " after its first rows" : "", in.d[0],
                 in.d[0] + c->pos_off);
        return BFIT_EINVAL;
    }
    l->out = bfit_shape_seq(in.d[0], c->units);
    l->params[k++] = (bfit_param){.name = "weight", .ndim = 2, .dim = {c->vocab, c->units}, .trainable = 1, .decay = 1};
    if (c->positions)
        l->params[k++] = (bfit_param){.name = "pos_weight", .ndim = 2, .dim = {c->positions, c->units},
                                      .trainable = !c->pos_fixed, .decay = !c->pos_fixed};
    if (c->types)
        l->params[k++] =
            (bfit_param){.name = "type_weight", .ndim = 2, .dim = {c->types, c->units}, .trainable = 1, .decay = 1};
    l->nparams = k;
    return BFIT_OK;
}

static int prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    bfit_op_desc d = {.kind = BFIT_OP_EMBED_FWD, .dtype = l->dtype, .accumulate = 1};

    d.u.embed.n = m;
    d.u.embed.T = l->in[0].d[0];
    d.u.embed.C = l->cfg.units;
    d.u.embed.V = l->cfg.vocab;
    d.u.embed.P = l->cfg.positions ? l->cfg.positions - l->cfg.pos_off : 0; /* the rows from pos_off on */
    d.u.embed.types = l->cfg.types;
    d.u.embed.pos_fixed = l->cfg.pos_fixed;
    d.u.embed.scale = l->cfg.escale != 0.0f ? l->cfg.escale : 1.0f;
    return bfit_layer_op_pair(l, &d, BFIT_OP_EMBED_BWD, training, need);
}

/* GPT-2's init, std 0.02 (here uniform with that spread) for every table */
static void init_params(bfit_layer *l, uint64_t seed, float *const *host)
{
    for (int i = 0; i < l->nparams; i++)
        bfit_fill_uniform(host[i], bfit_param_numel(&l->params[i]), 0.02f * sqrtf(3.0f), seed * 3 + (uint64_t)i);
}

static const bfit_param *pos_table(const bfit_layer *l) { return l->cfg.positions ? &l->params[1] : NULL; }
/* Position row pos_off of the table p (data or grad), where token 0's is. */
static void *pos_rows(const bfit_layer *l, void *p) { return (float *)p + (size_t)l->cfg.pos_off * l->cfg.units; }
static const bfit_param *type_table(const bfit_layer *l) { return l->cfg.types ? &l->params[l->nparams - 1] : NULL; }

static int forward(bfit_layer *l, const bfit_fwd_args *a)
{
    bfit_op_args o = {0};

    o.src = a->x[0];
    o.weights = l->params[0].data;
    o.bias = pos_table(l) ? pos_rows(l, pos_table(l)->data) : NULL;
    o.shift = type_table(l) ? type_table(l)->data : NULL;
    o.dst = a->y;
    return bfit_op_run(l->ops[OP_FWD], &o);
}

static int backward(bfit_layer *l, const bfit_bwd_args *a)
{
    bfit_op_args o = {0};

    o.src = a->x[0];
    o.diff_dst = a->dy;
    o.diff_weights = l->params[0].grad;
    o.diff_bias = pos_table(l) && !l->cfg.pos_fixed ? pos_rows(l, pos_table(l)->grad) : NULL;
    o.diff_shift = type_table(l) ? type_table(l)->grad : NULL;
    return bfit_op_run(l->ops[OP_BWD], &o);
}

const bfit_layer_vt bfit_embed_vt = {
    .kind = BFIT_L_EMBED,
    .nin = 1,
    .modes = BFIT_MODE(BFIT_MODE_X),
    .init = init,
    .prepare = prepare,
    .init_params = init_params,
    .forward = forward,
    .backward = backward,
    .unprepare = NULL,
};
