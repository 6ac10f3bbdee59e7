/* onnx_tokens.c - a language model's embeddings, as PyTorch exports a GPT
 * written with nn.Embedding (nanoGPT's, minGPT's), onto batchfit's embed
 * layer:
 *
 * - Gather(table [V, C], the model's token ids): the token embedding, an
 *   `embed C vocab=V` layer reading the ids;
 * - Gather(table [P, C], torch.arange(T)): rows 0 .. T-1 of a position
 *   table, held as a value of its own (OV_ROWS), no layer;
 * - Add of the two (either order): the embed layer takes the position table
 *   as its positions (`positions=P`), as GPT-2's wte + wpe is one layer in
 *   batchfit.
 *
 * A head tied to the token table (lm_head.weight = wte.weight: a MatMul by
 * the same initializer transposed) becomes `linear V tie=1` in onnx_vit.c;
 * the causal mask on the scores is read in onnx_mhsa.c. */
#include "base/err.h"
#include "nn/onnx_int.h"

#include <string.h>

static int is_table(const oval *v)
{
    return v && v->kind == OV_HOST && v->t && v->init >= 0 && v->t->ndim == 2 && v->t->dtype == BFIT_ONNX_FLOAT;
}

/* Gather(table, ids): the token embedding. */
static int token_table(onnx_lower *L, oval *table, oval *ids)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_EMBED);
    int64_t axis;
    int rc;

    if ((rc = bfit_onnx_attr_int(L, "axis", 0, &axis)) != BFIT_OK)
        return rc;
    if (axis != 0)
        return bfit_onnx_refuse(L, "batchfit reads a Gather of token ids as nn.Embedding's (rows of the table, axis "
                                   "0), not along axis %lld", (long long)axis);
    if (table->t->dim[0] > 0x7fffffff || table->t->dim[1] > 0x7fffffff)
        return bfit_onnx_refuse(L, "a token table of %lld x %lld is more than batchfit reads",
                                (long long)table->t->dim[0], (long long)table->t->dim[1]);
    c.units = (int)table->t->dim[1];
    c.vocab = (int)table->t->dim[0];
    if ((rc = bfit_onnx_emit(L, &c, &ids, 1, &table, 1)) == BFIT_OK)
        L->tok_table = table->init;
    return rc;
}

/* Gather(table, arange(T)): rows 0 .. T-1, a position table's. */
static int position_rows(onnx_lower *L, oval *table)
{
    hval *ix = bfit_onnx_host(L, bfit_onnx_in(L, 1), 1);
    oval *o = bfit_onnx_out(L, 0);
    int64_t axis;
    int rc;

    if (!ix || (rc = bfit_onnx_attr_int(L, "axis", 0, &axis)) != BFIT_OK)
        return ix ? rc : BFIT_EINVAL;
    if (axis != 0 || ix->isf || ix->nd != 1 || ix->n < 1)
        goto refuse;
    for (int64_t i = 0; i < ix->n; i++)
        if (ix->a[i] || ix->b[i] != i)
            goto refuse;
    if (ix->n > table->t->dim[0]) { /* a length past the table's: a T given to a symbolic one */
        L->attn_miss = 0; /* the length is the cause: the attentions' masks are too short for it as well */
        return bfit_onnx_refuse(L, "the positions 0 .. %lld run past the %lld rows of the position table: the model "
                                   "has %lld positions, the longest sequence it takes (--seq at most %lld)",
                                (long long)ix->n - 1, (long long)table->t->dim[0], (long long)table->t->dim[0],
                                (long long)table->t->dim[0]);
    }
    o->kind = OV_ROWS;
    o->t = table->t;
    o->init = table->init;
    o->rank = 2;
    o->ra[0] = o->ra[1] = 0;
    o->rb[0] = ix->n, o->rb[1] = table->t->dim[1];
    return BFIT_OK;
refuse:
    return bfit_onnx_refuse(L, "batchfit reads a Gather of a table by indices known at load as a position embedding "
                               "(nn.Embedding(P, C)(torch.arange(T)): the rows 0 .. T-1, along axis 0), not this");
}

/* Add(token embedding, position rows): the embed layer's positions. */
static int add_positions(onnx_lower *L, oval *x, oval *r)
{
    bfit_node_desc *d = x->id > 0 && x->id <= L->g->nnodes ? &L->g->nodes[x->id - 1] : NULL;
    int use;

    if (!d || d->cfg.kind != BFIT_L_EMBED || d->cfg.positions || x->shape.nd != 2 ||
        r->rb[0] != x->shape.d[0] || r->rb[1] != x->shape.d[1] || x->producer < 0 ||
        bfit_onnx_consumers(L, x->producer, 0, &use, 1) != 1)
        return bfit_onnx_refuse(L, "batchfit adds a position table's rows (nn.Embedding(P, C)(torch.arange(T))) to "
                                   "the token embeddings [N, T, C] right after the token table's Gather, and "
                                   "nowhere else");
    if (r->t->dim[0] > 0x7fffffff)
        return bfit_onnx_refuse(L, "a position table of %lld rows is more than batchfit reads",
                                (long long)r->t->dim[0]);
    d->cfg.positions = (int)r->t->dim[0];
    bfit_onnx_alias(L, x);
    return bfit_wsrc_add(L->w, x->id - 1, 1, r->t, L->param_used[r->init]++);
}

int bfit_onnx_lower_tokens(onnx_lower *L, int *rc)
{
    oval *a = bfit_onnx_in(L, 0), *b = bfit_onnx_in(L, 1);
    int gather = bfit_onnx_streq(L->nd->op, "Gather");

    if (gather && is_table(a) && b && b->kind == OV_DEVICE && b->id == 0 && L->g->input_dtype == BFIT_I32)
        *rc = token_table(L, a, b);
    else if (gather && is_table(a) && b && b->kind == OV_HOST && (!b->h || !b->h->isf) &&
             (!b->t || (b->t->dtype != BFIT_ONNX_FLOAT && b->t->dtype != BFIT_ONNX_DOUBLE)))
        *rc = position_rows(L, a);
    else if (bfit_onnx_streq(L->nd->op, "Add") && a && b && a->kind == OV_DEVICE && b->kind == OV_ROWS)
        *rc = add_positions(L, a, b);
    else if (bfit_onnx_streq(L->nd->op, "Add") && a && b && b->kind == OV_DEVICE && a->kind == OV_ROWS)
        *rc = add_positions(L, b, a);
    else {
        for (int k = 0; k < L->nd->nin; k++)
            if (bfit_onnx_in(L, k) && bfit_onnx_in(L, k)->kind == OV_ROWS) {
                *rc = bfit_onnx_refuse(L, "input %d is rows of a position table (a Gather by torch.arange): batchfit "
                                          "reads them only added to the token embeddings", k + 1);
                return 1;
            }
        return 0;
    }
    return 1;
}
