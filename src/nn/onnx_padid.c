/* onnx_padid.c - what a model computes by comparing its ids with the pad
 * token: RoBERTa's positions, and the scores of each sequence's last real
 * token.
 *
 * RoBERTa's create_position_ids_from_input_ids numbers the tokens after its
 * padding_idx, padding_idx + 1 .. (padding_idx at padding):
 *
 *     mask = input_ids.ne(padding_idx).int()
 *     (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + padding_idx
 *
 * (Equal, Not, Cast, CumSum, Mul, Cast, Add): the rows of the position table
 * from padding_idx + 1 on, the embed layer's pos_off; a padding's own row
 * is read by nothing a loss reads (its keys are masked, its labels -1).
 *
 * transformers' GPT2ForSequenceClassification (and LLaMA's, Mistral's) picks
 * the last real token's scores, up to 4.44:
 *
 *     sequence_lengths = torch.eq(input_ids, pad_token_id).int().argmax(-1) - 1
 *     sequence_lengths = sequence_lengths % input_ids.shape[-1]
 *     pooled_logits = logits[torch.arange(batch_size), sequence_lengths]
 *
 * exported as Equal, Cast, ArgMax, Sub, Mod on the ids, Range over the batch
 * times T, Add, and a Gather of the scores flattened to rows [N*T, K]; and
 * from 4.45 on, the last token that is not the pad token:
 *
 *     non_pad_mask = (input_ids != pad_token_id).int()
 *     last_non_pad_token = (torch.arange(T) * non_pad_mask).argmax(-1)
 *
 * (Equal, Not, Cast, Mul by a Range over the tokens, ArgMax).
 * batchfit knows where each sequence ends (its ids end in -1s: padding), so
 * the chain is followed, checked to be that one, and becomes `select last`;
 * the ids are not compared with the pad token (a text holding the pad
 * token's id is read to its end). Each value on the way is an OV_PADID, its
 * stage in `padid`; anything else reading one is refused. */
#include "base/err.h"
#include "nn/onnx_int.h"

/* A refusal here knows its cause: no Softmax the attention matcher left is blamed for it. */
#define REFUSE(L, ...) ((L)->attn_miss = 0, bfit_onnx_refuse((L), __VA_ARGS__))

#include <string.h>

enum {
    LS_PAD = 1, /* [B, T]: 1 where the id is the pad token (Equal, and its Cast) */
    LS_REAL,    /* [B, T]: 1 where it is not (Not, and its Cast) */
    LS_REALIX,  /* [B, T]: each token's place where it is not, else 0 (times arange(T)) */
    LS_CUM,     /* [B, T]: the real tokens up to each (CumSum over the tokens): t + 1 at a real token */
    LS_POS1,    /* [B, T]: that times LS_REAL: t + 1 at a real token, 0 at padding */
    LS_POS,     /* [B, T]: that plus padding_idx: RoBERTa's positions, t + pos_off at a real token */
    LS_FIRST,   /* [B]: the first pad token's place, 0 where none (ArgMax) */
    LS_FIRST1,  /* [B]: that - 1 */
    LS_END,     /* [B]: that modulo T: the last real token's place */
    LS_BATCH,   /* [B]: each sequence's number (Range(0, batch)) */
    LS_BATCHT,  /* [B]: that times T: its first row in the flattened scores */
    LS_ROW,     /* [B]: the last real token's row there */
    LS_ROWS     /* [N*T, K]: the scores (a device value's id and shape) flattened into rows */
};

static const char *const WANT =
    "batchfit reads each sequence's last token as transformers' GPT2ForSequenceClassification picks it: "
    "sequence_lengths = torch.eq(input_ids, pad_token_id).int().argmax(-1) - 1, sequence_lengths % "
    "input_ids.shape[-1], logits[torch.arange(batch_size), sequence_lengths] (or, from transformers 4.45 on, "
    "sequence_lengths = (torch.arange(T) * (input_ids != pad_token_id).int()).argmax(-1))";

/* The token models' T: the ids' length. */
static int64_t ids_T(const onnx_lower *L) { return L->g->input.d[0]; }

/* Output 0 at stage st, rank 1 [B] (rank 2 [B, T] for LS_PAD). */
static void last_out(onnx_lower *L, int st)
{
    oval *o = bfit_onnx_out(L, 0);
    o->kind = OV_PADID;
    o->padid = st;
    o->rank = st == LS_PAD || st == LS_REAL || st == LS_REALIX || st == LS_CUM || st == LS_POS1 || st == LS_POS
                  ? 2 : 1;
    o->ra[0] = 1, o->rb[0] = 0;
    o->ra[1] = 0, o->rb[1] = ids_T(L);
}

static int at(const oval *v, int st) { return v && v->kind == OV_PADID && v->padid == st; }

/* Whether v is the one number n (a host value, the batch not in it). */
static int is_num(onnx_lower *L, oval *v, int64_t n)
{
    hval *h = v && v->kind == OV_HOST ? bfit_onnx_host(L, v, 0) : NULL;
    return h && h->n == 1 && (h->isf ? h->f[0] == (double)n : !h->a[0] && h->b[0] == n);
}

/* Range(0, batch, 1) read by a Mul alone (times T) or a Gather alone (the
 * scores of every sequence, logits[torch.arange(B), -1]): each sequence's
 * number (the batch a constant in an export at a fixed batch). Another
 * Range over the batch is the host's to refuse. */
static int batch_range(onnx_lower *L)
{
    int g = bfit_onnx_next(L, L->ndi, "Gather");
    if (g >= 0) { /* the indices of samples' values (made later, or so far), not of a table (wpe(arange(B))) */
        const bfit_onnx_node *n = &L->om->nodes[g];
        oval *x = n->nin == 2 ? bfit_onnx_val(L, n->in[0]) : NULL;
        if (n->nin != 2 || (x && x->kind != OV_NONE && x->kind != OV_DEVICE) ||
            bfit_onnx_val(L, n->in[1]) != bfit_onnx_out(L, 0))
            g = -1;
    }
    if (bfit_onnx_next(L, L->ndi, "Mul") < 0 && g < 0)
        return 0;
    hval *h = bfit_onnx_in(L, 1) && bfit_onnx_in(L, 1)->kind == OV_HOST ? bfit_onnx_host(L, bfit_onnx_in(L, 1), 1)
                                                                        : NULL;
    if (!h || h->isf || h->n != 1 || !bfit_onnx_affine_is(L, h->a[0], h->b[0], 1, 0) ||
        !is_num(L, bfit_onnx_in(L, 0), 0) || !is_num(L, bfit_onnx_in(L, 2), 1))
        return 0;
    last_out(L, LS_BATCH);
    return 1;
}

/* Equal(ids, c) either way round, c one integer: the pad token's places.
 * 1 (rc set) if the ids are compared, else 0. */
static int pad_equal(onnx_lower *L, oval *a, oval *b, int *rc)
{
    oval *ids = a && a->kind == OV_DEVICE ? a : b, *c = ids == a ? b : a;
    hval *h = c && c->kind == OV_HOST ? bfit_onnx_host(L, c, 0) : NULL;
    if (!ids || ids->kind != OV_DEVICE || ids->id != 0 || L->g->input_dtype != BFIT_I32 || L->seq_first)
        return 0;
    if (!h || h->isf || h->n != 1 || h->a[0])
        *rc = REFUSE(L, "the token ids compared with something other than one number (the pad "
                                  "token's id): %s", WANT);
    else
        last_out(L, LS_PAD);
    return 1;
}

/* Whether v is the host's 0 .. T-1 (torch.arange(T)). */
static int is_arange(onnx_lower *L, oval *v)
{
    hval *h = v && v->kind == OV_HOST ? bfit_onnx_host(L, v, 0) : NULL;
    if (!h || h->isf || h->nd != 1 || h->n != ids_T(L))
        return 0;
    for (int64_t i = 0; i < h->n; i++)
        if (h->a[i] || h->b[i] != i)
            return 0;
    return 1;
}

/* ArgMax along the tokens, the first maximum: of the pad token's places
 * (the first one), or of the real tokens' places (the last real one). */
static int first_max(onnx_lower *L, int st)
{
    int64_t axis, keep, lastix;
    int rc;
    if ((rc = bfit_onnx_attr_int(L, "axis", 0, &axis)) != BFIT_OK ||
        (rc = bfit_onnx_attr_int(L, "keepdims", 1, &keep)) != BFIT_OK ||
        (rc = bfit_onnx_attr_int(L, "select_last_index", 0, &lastix)) != BFIT_OK)
        return rc;
    if ((axis != 1 && axis != -1) || keep || lastix)
        return REFUSE(L, "ArgMax of the %s places with axis %lld, keepdims %lld, select_last_index "
                                   "%lld: %s (axis -1, keepdims 0, the first)",
                                st == LS_FIRST ? "pad token's" : "real tokens'", (long long)axis, (long long)keep,
                                (long long)lastix, WANT);
    last_out(L, st);
    return BFIT_OK;
}

/* Gather(scores as rows, each sequence's last row): `select last` on the
 * scores [T, K] a sample. */
static int gather_last(onnx_lower *L, oval *rows)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_SELECT);
    oval x = *rows;
    const oval *px = &x;
    int64_t axis;
    int rc;

    if ((rc = bfit_onnx_attr_int(L, "axis", 0, &axis)) != BFIT_OK)
        return rc;
    if (axis != 0)
        return REFUSE(L, "a Gather of the scores' rows along axis %lld: %s", (long long)axis, WANT);
    x.kind = OV_DEVICE;
    x.padid = 0;
    c.units = -1;
    return bfit_onnx_emit(L, &c, (oval *const *)&px, 1, NULL, 0);
}

/* Gather(x, each sequence's number, axis 0): x, every sample in its place
 * (GPT2ForSequenceClassification without a pad token: its token picked
 * before, logits[:, -1] as a `select`). */
static int gather_batch(onnx_lower *L, oval *x)
{
    int64_t axis;
    int rc;
    if ((rc = bfit_onnx_attr_int(L, "axis", 0, &axis)) != BFIT_OK)
        return rc;
    if (axis != 0 || !x || x->kind != OV_DEVICE)
        return REFUSE(L, "torch.arange(batch) as the indices of a Gather along axis %lld%s: batchfit reads it "
                         "only as the batch in its own order, the indices along axis 0 of the samples' values "
                         "(logits[torch.arange(batch_size), ...])", (long long)axis,
                      x && x->kind == OV_DEVICE ? "" : " of something not computed from the samples");
    bfit_onnx_alias(L, x);
    return BFIT_OK;
}

/* Flatten(axis 2) of per-token values [N, T, K] of a token model: rows. */
static int flatten_rows(onnx_lower *L, oval *x)
{
    int64_t axis;
    int rc;
    if (!x || x->kind != OV_DEVICE || x->shape.nd != 2 || x->shape.d[0] != ids_T(L) ||
        L->g->input_dtype != BFIT_I32 || x->cl[0] || x->rows)
        return 0;
    if ((rc = bfit_onnx_attr_int(L, "axis", 1, &axis)) != BFIT_OK || axis != 2)
        return 0; /* Flatten(axis 1) of tokens: the CNN handler's */
    bfit_onnx_alias(L, x);
    bfit_onnx_out(L, 0)->kind = OV_PADID;
    bfit_onnx_out(L, 0)->padid = LS_ROWS;
    return 1;
}

/* CumSum over the tokens (axis 1), inclusive, forward. */
static int cumsum_tokens(onnx_lower *L)
{
    int64_t ax[1], excl, rev;
    int n = 0, rc;
    if ((rc = bfit_onnx_host_i64(L, 1, ax, 1, &n)) != BFIT_OK || (rc = bfit_onnx_attr_int(L, "exclusive", 0, &excl)) ||
        (rc = bfit_onnx_attr_int(L, "reverse", 0, &rev)))
        return rc;
    if (n != 1 || (ax[0] != 1 && ax[0] != -1) || excl || rev)
        return REFUSE(L, "a CumSum of the real tokens other than over the tokens, inclusive and forward: "
                                   "batchfit reads RoBERTa's positions, torch.cumsum(input_ids.ne(padding_idx)."
                                   "int(), dim=1) * mask + padding_idx");
    last_out(L, LS_CUM);
    return BFIT_OK;
}

/* Add(t + 1 at the real tokens, padding_idx): RoBERTa's positions. */
static int positions(onnx_lower *L, oval *c)
{
    hval *h = c && c->kind == OV_HOST ? bfit_onnx_host(L, c, 1) : NULL;
    if (!h || h->isf || h->n != 1 || h->a[0] || h->b[0] < 0 || h->b[0] > (1 << 24))
        return REFUSE(L, "RoBERTa's positions plus something other than one number at least 0 (its "
                                   "padding_idx)");
    last_out(L, LS_POS);
    bfit_onnx_out(L, 0)->pos_off = (int)h->b[0] + 1;
    return BFIT_OK;
}

/* Gather(position table, RoBERTa's positions): rows pos_off .. pos_off + T - 1 of it. */
static int position_rows(onnx_lower *L, oval *table, const oval *pos)
{
    int64_t axis;
    int rc;
    if ((rc = bfit_onnx_attr_int(L, "axis", 0, &axis)) != BFIT_OK)
        return rc;
    if (axis != 0 || table->t->dim[0] > 0x7fffffff || table->t->dim[0] < ids_T(L) + pos->pos_off)
        return REFUSE(L, "the positions %d .. %lld run past the %lld rows of the position table (--seq at "
                                   "most %lld)", pos->pos_off, (long long)(ids_T(L) + pos->pos_off - 1),
                                (long long)table->t->dim[0], (long long)table->t->dim[0] - pos->pos_off);
    bfit_onnx_rows_out(L, table, ids_T(L), pos->pos_off);
    return BFIT_OK;
}

/* One step of the chain, if the node is one (rc set); 0 if not. */
static int step(onnx_lower *L, const char *op, oval *a, oval *b, int *rc)
{
    *rc = BFIT_OK;
    if (!strcmp(op, "Equal"))
        return pad_equal(L, a, b, rc);
    if (!strcmp(op, "Cast") && (at(a, LS_PAD) || at(a, LS_REAL) || at(a, LS_CUM) || at(a, LS_POS1)))
        last_out(L, a->padid);
    else if (!strcmp(op, "CumSum") && at(a, LS_REAL))
        *rc = cumsum_tokens(L);
    else if (!strcmp(op, "Mul") && ((at(a, LS_CUM) && at(b, LS_REAL)) || (at(b, LS_CUM) && at(a, LS_REAL))))
        last_out(L, LS_POS1);
    else if (!strcmp(op, "Add") && (at(a, LS_POS1) || at(b, LS_POS1)))
        *rc = positions(L, at(a, LS_POS1) ? b : a);
    else if (!strcmp(op, "Gather") && bfit_onnx_is_table(a) && at(b, LS_POS))
        *rc = position_rows(L, a, b);
    else if (!strcmp(op, "Not") && at(a, LS_PAD))
        last_out(L, LS_REAL);
    else if (!strcmp(op, "Mul") && ((at(a, LS_REAL) && is_arange(L, b)) || (at(b, LS_REAL) && is_arange(L, a))))
        last_out(L, LS_REALIX);
    else if (!strcmp(op, "ArgMax") && (at(a, LS_PAD) || at(a, LS_REALIX)))
        *rc = first_max(L, at(a, LS_PAD) ? LS_FIRST : LS_END);
    else if (!strcmp(op, "Sub") && at(a, LS_FIRST) && is_num(L, b, 1))
        last_out(L, LS_FIRST1);
    else if (!strcmp(op, "Mod") && at(a, LS_FIRST1) && is_num(L, b, ids_T(L)))
        last_out(L, LS_END);
    else if (!strcmp(op, "Mul") && ((at(a, LS_BATCH) && is_num(L, b, ids_T(L))) ||
                                    (at(b, LS_BATCH) && is_num(L, a, ids_T(L)))))
        last_out(L, LS_BATCHT);
    else if (!strcmp(op, "Add") && ((at(a, LS_END) && at(b, LS_BATCHT)) || (at(b, LS_END) && at(a, LS_BATCHT))))
        last_out(L, LS_ROW);
    else if (!strcmp(op, "Gather") && at(a, LS_ROWS) && at(b, LS_ROW))
        *rc = gather_last(L, a);
    else if (!strcmp(op, "Gather") && at(b, LS_BATCH))
        *rc = gather_batch(L, a);
    else
        return 0;
    return 1;
}

const char *bfit_onnx_padid_what(const oval *v)
{
    return v->padid == LS_BATCH ? "torch.arange(batch)" : "made by comparing the ids with the pad token";
}

int bfit_onnx_lower_padid(onnx_lower *L, int *rc)
{
    oval *a = bfit_onnx_in(L, 0), *b = L->nd->nin > 1 ? bfit_onnx_in(L, 1) : NULL;
    char op[32];

    bfit_onnx_cstr(L->nd->op, op, sizeof op);
    if (!strcmp(op, "Range") && L->nd->nin == 3)
        return batch_range(L) ? (*rc = BFIT_OK, 1) : 0;
    if (!strcmp(op, "Flatten") && flatten_rows(L, a))
        return *rc = BFIT_OK, 1;
    if (!strcmp(op, "Shape"))
        return 0; /* the host's: a stage's shape */
    if (step(L, op, a, b, rc))
        return 1;
    for (int k = 0; k < L->nd->nin; k++)
        if (bfit_onnx_in(L, k) && bfit_onnx_in(L, k)->kind == OV_PADID) {
            if (bfit_onnx_in(L, k)->padid == LS_ROWS)
                *rc = REFUSE(L, "input %d is per-token values flattened into rows [N*T, C] (Flatten(axis="
                                          "2)): batchfit reads those only as a Gather of each sequence's last "
                                          "token: %s", k + 1, WANT);
            else if (bfit_onnx_in(L, k)->padid >= LS_CUM && bfit_onnx_in(L, k)->padid <= LS_POS)
                *rc = REFUSE(L, "input %d is part of RoBERTa's positions, read here otherwise: batchfit "
                                          "reads (torch.cumsum(mask, dim=1) * mask).long() + padding_idx, mask = "
                                          "input_ids.ne(padding_idx).int(), only as the indices of a position "
                                          "table's Gather", k + 1);
            else
                *rc = REFUSE(L, "input %d is part of picking each sequence's last token (its place so "
                                          "far), read here otherwise: %s", k + 1, WANT);
            return 1;
        }
    return 0;
}
