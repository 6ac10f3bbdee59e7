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
 * - Mul(token embedding, a number): the embed layer's scale (the PyTorch
 *   Transformer tutorial's `embedding(src) * math.sqrt(d_model)`);
 * - Add(token embedding, a table's first T rows cut on the host, `pe[:, :T]`,
 *   or an initializer [1, T, C] of sinusoids): the embed layer's positions;
 *   a table of sinusoids (the tutorial's PositionalEncoding buffer, in
 *   either layout) is a constant the layer does not train, any other table
 *   (minGPT's `pos_emb[:, :t, :]`) is learned.
 *
 * - Gather(table [K, C], zeros [1, T]) (BERT's token_type_ids, a buffer of
 *   zeros cut to the sequence and expanded over the batch): row 0 of a
 *   token type table for every token (OV_ROWS, typerow), and its Add to the
 *   token embeddings the embed layer's types (`types=K`, row 0 added).
 *
 * A head tied to the token table (lm_head.weight = wte.weight: a MatMul by
 * the same initializer transposed) becomes `linear V tie=1` in onnx_vit.c;
 * the causal mask on the scores is read in onnx_mhsa.c. */
#include "base/err.h"
#include "nn/onnx_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int bfit_onnx_is_table(const oval *v)
{
    return v && v->kind == OV_HOST && v->t && v->init >= 0 && v->t->ndim == 2 && v->t->dtype == BFIT_ONNX_FLOAT;
}

void bfit_onnx_rows_out(onnx_lower *L, const oval *table, int64_t n, int off)
{
    oval *o = bfit_onnx_out(L, 0);
    o->kind = OV_ROWS;
    o->t = table->t;
    o->init = table->init;
    o->rank = 2;
    o->ra[0] = o->ra[1] = 0;
    o->rb[0] = n, o->rb[1] = table->t->dim[1];
    o->pos_off = off;
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

/* Gather(table, arange(T)): rows 0 .. T-1, a position table's; the
 * indices [T], or [1, T] (GPT-2's position_ids, arange(T).unsqueeze(0)). */
static int position_rows(onnx_lower *L, oval *table)
{
    hval *ix = bfit_onnx_host(L, bfit_onnx_in(L, 1), 1);
    oval *o = bfit_onnx_out(L, 0);
    int64_t axis;
    int rc;

    if (!ix || (rc = bfit_onnx_attr_int(L, "axis", 0, &axis)) != BFIT_OK)
        return ix ? rc : BFIT_EINVAL;
    if (axis != 0 || ix->isf || !(ix->nd == 1 || (ix->nd == 2 && ix->dim[0] == 1)) || ix->n < 1)
        goto refuse;
    o->typerow = ix->n > 1; /* all 0: BERT's token types */
    for (int64_t i = 0; i < ix->n; i++) {
        if (ix->a[i] || (ix->b[i] != i && ix->b[i] != 0))
            goto refuse;
        o->typerow &= ix->b[i] == 0;
        if (ix->b[i] != i && !o->typerow)
            goto refuse;
    }
    if (ix->n > table->t->dim[0] && !o->typerow) { /* a length past the table's: a T given to a symbolic one */
        L->attn_miss = 0; /* the length is the cause: the attentions' masks are too short for it as well */
        return bfit_onnx_refuse(L, "the positions 0 .. %lld run past the %lld rows of the position table: the model "
                                   "has %lld positions, the longest sequence it takes (--seq at most %lld)",
                                (long long)ix->n - 1, (long long)table->t->dim[0], (long long)table->t->dim[0],
                                (long long)table->t->dim[0]);
    }
    bfit_onnx_rows_out(L, table, ix->n, 0);
    return BFIT_OK;
refuse:
    return bfit_onnx_refuse(L, "batchfit reads a Gather of a table by indices known at load as a position embedding "
                               "(nn.Embedding(P, C)(torch.arange(T)): the rows 0 .. T-1, along axis 0), or as "
                               "BERT's token types (all 0: row 0 for every token), not this");
}

/* Add(token embedding, row 0 of a type table for every token): the embed
 * layer's types, its last parameter (after the positions, which may come
 * later: onnx_tokens.c's add_positions moves it past them). */
static int add_types(onnx_lower *L, bfit_node_desc *d, oval *x, oval *r)
{
    if (d->cfg.types)
        return bfit_onnx_refuse(L, "a second token type table added to the token embeddings");
    if (r->init == L->tok_table) /* GPT-2's wte(token_type_ids): a copy of row 0 would train apart from it */
        return bfit_onnx_refuse(L, "the token types are rows of the token table itself (GPT-2's "
                                   "wte(token_type_ids)): batchfit reads a table of its own as the types; export "
                                   "without token_type_ids");
    if (r->t->dim[0] > 0x7fffffff)
        return bfit_onnx_refuse(L, "a token type table of %lld rows is more than batchfit reads",
                                (long long)r->t->dim[0]);
    d->cfg.types = (int)r->t->dim[0];
    bfit_onnx_alias(L, x);
    return bfit_wsrc_add(L->w, x->id - 1, d->cfg.positions ? 2 : 1, r->t, L->param_used[r->init]++);
}

/* Add(token embedding, position rows): the embed layer's positions (or,
 * rows of a type table, its types). */
static int add_positions(onnx_lower *L, oval *x, oval *r)
{
    bfit_node_desc *d = x->id > 0 && x->id <= L->g->nnodes ? &L->g->nodes[x->id - 1] : NULL;
    int use, rc;

    if (!d || d->cfg.kind != BFIT_L_EMBED || (d->cfg.positions && !r->typerow) || x->shape.nd != 2 ||
        r->rb[0] != x->shape.d[0] || r->rb[1] != x->shape.d[1] || x->producer < 0 ||
        bfit_onnx_consumers(L, x->producer, 0, &use, 1) != 1)
        return bfit_onnx_refuse(L, "batchfit adds a position table's rows (nn.Embedding(P, C)(torch.arange(T))), "
                                   "and BERT's token type rows, to the token embeddings [N, T, C] right after the "
                                   "token table's Gather, and nowhere else");
    if (r->typerow)
        return add_types(L, d, x, r);
    if (r->t->dim[0] > 0x7fffffff)
        return bfit_onnx_refuse(L, "a position table of %lld rows is more than batchfit reads",
                                (long long)r->t->dim[0]);
    if (d->cfg.types && (rc = bfit_wsrc_move(L->w, x->id - 1, 1, 2)) != BFIT_OK) /* the types after positions */
        return rc;
    d->cfg.positions = (int)r->t->dim[0];
    d->cfg.pos_off = r->pos_off; /* RoBERTa's, after its padding_idx (onnx_padid.c) */
    bfit_onnx_alias(L, x);
    return bfit_wsrc_add(L->w, x->id - 1, 1, r->t, L->param_used[r->init]++);
}

/* BERT's token_type_ids: a buffer's zeros [1, T] expanded over the batch,
 * read only by Gathers of a table: those rows are the same for every
 * sequence, so the Gather reads the zeros themselves (broadcast). 1 (rc
 * set) if so, else 0. */
static int types_over_batch(onnx_lower *L, oval *x, oval *s, int *rc)
{
    hval *h = x && x->kind == OV_HOST ? bfit_onnx_host(L, x, 0) : NULL;
    int c[4], n, batch;

    if (!h || h->isf || h->nd != 2)
        return 0;
    batch = bfit_onnx_over_batch(L, h, s);
    n = bfit_onnx_consumers(L, L->ndi, 0, c, 4);
    for (int k = 0; batch && k < n; k++)
        batch = bfit_onnx_streq(L->om->nodes[c[k]].op, "Gather") && L->om->nodes[c[k]].nin == 2 &&
                bfit_onnx_val(L, L->om->nodes[c[k]].in[1]) == bfit_onnx_out(L, 0) &&
                bfit_onnx_is_table(bfit_onnx_val(L, L->om->nodes[c[k]].in[0]));
    for (int64_t i = 0; batch && i < h->n; i++)
        batch = !h->a[i] && h->b[i] == 0;
    if (!batch || n < 1)
        return 0;
    bfit_onnx_alias(L, x);
    *rc = BFIT_OK;
    return 1;
}

/* The embed node whose output x is, read by the node being lowered alone and
 * without positions yet (what it adds or scales can fold into it); NULL if
 * not. */
static bfit_node_desc *bare_embed(onnx_lower *L, const oval *x)
{
    bfit_node_desc *d = x && x->kind == OV_DEVICE && x->id > 0 && x->id <= L->g->nnodes ? &L->g->nodes[x->id - 1]
                                                                                       : NULL;
    int use;
    if (!d || d->cfg.kind != BFIT_L_EMBED || d->cfg.positions || x->shape.nd != 2 || x->producer < 0 ||
        bfit_onnx_consumers(L, x->producer, 0, &use, 1) != 1)
        return NULL;
    return d;
}

/* Whether rows [0, T) of table [P, C] are sinusoids: each column pair (sin,
 * cos) one frequency w, as the Transformer tutorial's PositionalEncoding
 * (pairs 2i, 2i+1) or tensor2tensor's and fairseq's (i, i + C/2) make them,
 * w read from row 1. PyTorch rounds t w and the sines to float: the error
 * grows with t, bounded here by 1e-5 + 2.5e-7 t (a learned table is off by
 * far more). */
static int sinusoids(const float *tab, int64_t P, int64_t T, int64_t C)
{
    int64_t rows = T < 2 ? 2 : T;
    if (C % 2 || P < 2)
        return 0;
    if (rows > P)
        rows = P;
    for (int half = 0; half < 2; half++) {
        int ok = 1;
        for (int64_t i = 0; ok && i < C / 2; i++) {
            int64_t cs = half ? i : 2 * i, cc = half ? i + C / 2 : 2 * i + 1;
            double w = atan2(tab[C + cs], tab[C + cc]);
            for (int64_t t = 0; ok && t < rows; t++) {
                double tol = 1e-5 + 2.5e-7 * (double)t;
                ok = fabs(tab[t * C + cs] - sin(w * (double)t)) <= tol &&
                     fabs(tab[t * C + cc] - cos(w * (double)t)) <= tol;
            }
        }
        if (ok)
            return 1;
    }
    return 0;
}

/* P of a table [P, C], [1, P, C] (batch first) or [P, 1, C] ([T, batch],
 * the tutorial's pe as published): its rows in one run; -1 if not such. */
static int64_t rows_dim(const int64_t *dim, int nd, int64_t C)
{
    if (nd < 2 || nd > 3 || dim[nd - 1] != C)
        return -1;
    return nd == 2 ? dim[0] : dim[0] == 1 ? dim[1] : dim[1] == 1 ? dim[0] : -1;
}

/* The initializer (a table of P rows, rows_dim) whose first T rows host
 * value h (T rows, rows_dim) is: h's own, or the one a Slice cut it from
 * (pe[:, :T], pe[:T]), its numbers as floats into *tab (the caller frees
 * them); NULL if neither, or if the numbers differ. */
static oval *rows_of(onnx_lower *L, oval *h, int k, int64_t T, int64_t C, float **tab)
{
    oval *t = h->init >= 0 && h->t ? h : NULL;
    int64_t P;
    hval *hv;
    float *f;
    int ok;

    *tab = NULL;
    if (!t && h->producer >= 0 && bfit_onnx_streq(L->om->nodes[h->producer].op, "Slice"))
        t = bfit_onnx_val(L, L->om->nodes[h->producer].in[0]);
    if (!t || t->kind != OV_HOST || t->init < 0 || !t->t || t->t->dtype != BFIT_ONNX_FLOAT ||
        (P = rows_dim(t->t->dim, t->t->ndim, C)) < T || P > 0x7fffffff)
        return NULL;
    if (!(hv = bfit_onnx_host(L, h, k)) || !hv->isf || hv->n != T * C || rows_dim(hv->dim, hv->nd, C) != T)
        return NULL;
    if (!(f = malloc(sizeof *f * (size_t)t->t->numel)))
        return NULL;
    ok = bfit_onnx_tensor_f32(t->t, f) == BFIT_OK;
    for (int64_t i = 0; ok && i < T * C; i++)
        ok = (double)f[i] == hv->f[i];
    if (!ok) {
        free(f);
        return NULL;
    }
    *tab = f;
    return t;
}

/* Add(token embedding, the first T rows of a table): the embed layer's
 * positions, constant where the table is sinusoids. 0 where h is no such
 * rows (a learned [1, T, C] whole: addp, onnx_vit.c). */
static int table_positions(onnx_lower *L, bfit_node_desc *d, oval *x, oval *h, int k, int *rc)
{
    int64_t T = x->shape.d[0], C = x->shape.d[1], P;
    float *f;
    oval *t = rows_of(L, h, k, T, C, &f);
    int sin;

    if (!t)
        return 0;
    P = rows_dim(t->t->dim, t->t->ndim, C);
    sin = sinusoids(f, P, T, C);
    free(f);
    if (!sin && h == t) /* a learned table whole is addp's */
        return 0;
    d->cfg.positions = (int)P;
    d->cfg.pos_fixed = sin;
    bfit_onnx_alias(L, x);
    *rc = bfit_wsrc_add(L->w, x->id - 1, 1, t->t, L->param_used[t->init]++);
    return 1;
}

/* A Mul by a number, or an Add of a table's rows, on the token embedding:
 * folded into its embed layer, 1 (rc set); 0 if the node is no such thing. */
static int fold_into_embed(onnx_lower *L, oval *a, oval *b, int *rc)
{
    int hk = a && a->kind == OV_HOST ? 0 : 1; /* the host input's index */
    oval *x = hk ? a : b, *h = hk ? b : a;
    bfit_node_desc *d;
    double s;

    if (L->nd->nin != 2 || !a || !b || h->kind != OV_HOST || !(d = bare_embed(L, x)))
        return 0;
    if (bfit_onnx_streq(L->nd->op, "Mul")) { /* the tutorial's * sqrt(d_model), before the positions */
        if (d->cfg.escale != 0.0f || !bfit_onnx_scalar(L, h->name, &s) || !isfinite(s) || s == 0)
            return 0;
        d->cfg.escale = (float)s;
        bfit_onnx_alias(L, x);
        *rc = BFIT_OK;
        return 1;
    }
    return bfit_onnx_streq(L->nd->op, "Add") && table_positions(L, d, x, h, hk, rc);
}

int bfit_onnx_lower_tokens(onnx_lower *L, int *rc)
{
    oval *a = bfit_onnx_in(L, 0), *b = bfit_onnx_in(L, 1);
    int gather = bfit_onnx_streq(L->nd->op, "Gather");

    if (fold_into_embed(L, a, b, rc))
        return 1;
    if (bfit_onnx_streq(L->nd->op, "Expand") && types_over_batch(L, a, b, rc))
        return 1;
    if (gather && bfit_onnx_is_table(a) && b && b->kind == OV_DEVICE && b->id == 0 && L->g->input_dtype == BFIT_I32)
        *rc = token_table(L, a, b);
    else if (gather && bfit_onnx_is_table(a) && b && b->kind == OV_HOST && (!b->h || !b->h->isf) &&
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
