/* onnx_pool.c - the mean of a sequence's real tokens weighted by the
 * attention_mask, as sentence-transformers' mean pooling writes it:
 *
 *     m = attention_mask.unsqueeze(-1).expand(h.size()).float()
 *     torch.sum(h * m, 1) / torch.clamp(m.sum(1), min=1e-9)
 *
 * (or attention_mask[..., None] without the expand, and without the
 * clamp). The mask comes here as onnx_keymask.c's token mask [B, T, 1 or C];
 * h times it, summed over the tokens, divided by the mask's sum is `gap` on
 * the tokens, the mean of the real ones, which batchfit knows from each
 * sequence's length. Each value on the way is an OV_POOL, its stage in
 * `pool`; anything else reading one is refused. */
#include "base/err.h"
#include "nn/onnx_int.h"

/* A refusal here knows its cause: no Softmax the attention matcher left is blamed for it. */
#define REFUSE(L, ...) ((L)->attn_miss = 0, bfit_onnx_refuse((L), __VA_ARGS__))

enum {
    PS_H = 1, /* h [B, T, C] times the token mask: h's id and shape */
    PS_SUM,   /* [B, C]: that summed over the tokens (h's id and shape) */
    PS_COUNT  /* [B, 1 or C]: the token mask summed over the tokens, clamped or not */
};

static const char *const WANT =
    "batchfit reads an attention_mask unsqueezed after the tokens only as the weights of a mean over the real "
    "tokens, as sentence-transformers' mean pooling writes it: m = attention_mask.unsqueeze(-1).expand(h.size())"
    ".float(), torch.sum(h * m, 1) / torch.clamp(m.sum(1), min=1e-9)";

/* Output 0 is x (a device value or a stage) at stage st, its ONNX shape
 * [B, c] (PS_H: as x's). */
static void pool_out(onnx_lower *L, const oval *x, int st, int64_t c)
{
    oval *o = bfit_onnx_out(L, 0);
    bfit_onnx_str name = o->name;
    int producer = o->producer;

    *o = *x;
    o->name = name, o->producer = producer;
    o->kind = OV_POOL;
    o->pool = st;
    if (st != PS_H)
        o->rank = 2, o->ra[0] = 1, o->rb[0] = 0, o->ra[1] = 0, o->rb[1] = c;
}

/* ReduceSum over axis 1 of a rank-3 value, keepdims 0 (torch.sum(x, 1)). */
static int over_tokens(onnx_lower *L)
{
    int64_t ax[BFIT_ONNX_MAXATTR], keep;
    int got = 0, rc;

    if ((rc = bfit_onnx_attr_int(L, "keepdims", 1, &keep)) != BFIT_OK ||
        (rc = bfit_onnx_attr_ints(L, "axes", ax, 0, &got)) != BFIT_OK)
        return 0;
    if (!got && bfit_onnx_in(L, 1) && bfit_onnx_host_i64(L, 1, ax, 8, &got) != BFIT_OK)
        return 0;
    return got == 1 && (ax[0] == 1 || ax[0] == -2) && !keep;
}

int bfit_onnx_tokmask(onnx_lower *L, oval *m, int T)
{
    oval *h = bfit_onnx_in(L, bfit_onnx_in(L, 0) == m ? 1 : 0);
    int64_t c = m->rb[2];

    if (bfit_onnx_streq(L->nd->op, "Mul") && L->nd->nin == 2 && h && h->kind == OV_DEVICE && h->shape.nd == 2 &&
        h->shape.d[0] == T && !h->cl[0] && !h->rows && (c == 1 || c == h->shape.d[1])) {
        if (bfit_onnx_next(L, L->ndi, "ReduceSum") < 0) /* the padding zeroed and read on: not a mean */
            return REFUSE(L, "%s (here the tokens times the mask are read by another node than their "
                                       "sum over the tokens)", WANT);
        pool_out(L, h, PS_H, 0);
        return BFIT_OK;
    }
    if (bfit_onnx_streq(L->nd->op, "ReduceSum") && bfit_onnx_in(L, 0) == m && over_tokens(L)) {
        pool_out(L, m, PS_COUNT, c);
        return BFIT_OK;
    }
    return REFUSE(L, "%s", WANT);
}

/* Clip(count, min) with 0 < min <= 1 and no max: every sequence has a
 * token, so the count stays what it is. */
static int clamped(onnx_lower *L)
{
    double lo = 0;
    oval *mn = L->nd->nin > 1 ? bfit_onnx_in(L, 1) : NULL, *mx = L->nd->nin > 2 ? bfit_onnx_in(L, 2) : NULL;
    return mn && !mx && bfit_onnx_scalar(L, mn->name, &lo) && lo > 0 && lo <= 1;
}

int bfit_onnx_lower_pool(onnx_lower *L, int *rc)
{
    oval *a = bfit_onnx_in(L, 0), *b = L->nd->nin > 1 ? bfit_onnx_in(L, 1) : NULL, x;
    bfit_layer_cfg gap = bfit_layer_cfg_default(BFIT_L_GAP);
    const oval *px = &x;
    int any = 0;

    for (int k = 0; k < L->nd->nin; k++)
        any |= bfit_onnx_in(L, k) && bfit_onnx_in(L, k)->kind == OV_POOL;
    if (!any || bfit_onnx_streq(L->nd->op, "Shape"))
        return 0;
    *rc = BFIT_OK;
    if (bfit_onnx_streq(L->nd->op, "ReduceSum") && a->kind == OV_POOL && a->pool == PS_H && over_tokens(L))
        pool_out(L, a, PS_SUM, a->shape.d[1]);
    else if (bfit_onnx_streq(L->nd->op, "Clip") && a->kind == OV_POOL && a->pool == PS_COUNT && clamped(L))
        pool_out(L, a, PS_COUNT, a->rb[1]);
    else if (bfit_onnx_streq(L->nd->op, "Div") && a->kind == OV_POOL && a->pool == PS_SUM && b &&
             b->kind == OV_POOL && b->pool == PS_COUNT && (b->rb[1] == 1 || b->rb[1] == a->rb[1])) {
        x = *a; /* the mean of h's real tokens */
        x.kind = OV_DEVICE;
        x.pool = 0;
        bfit_onnx_set_rank(L, &x, &x.shape);
        *rc = bfit_onnx_emit(L, &gap, (oval *const *)&px, 1, NULL, 0);
    } else
        *rc = REFUSE(L, "%s (here the mean's parts read otherwise)", WANT);
    return 1;
}
