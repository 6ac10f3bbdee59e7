/* onnx_mhsa.c - self-attention written out by hand, as PyTorch 1.13
 * exports it (opset 17, a dynamic batch), mapped onto batchfit's attention
 * layer. Two ways of writing it, both common in users' code:
 *
 * - timm's Attention: qkv(x).reshape(B, T, 3, H, d).permute(2, 0, 3, 1, 4),
 *   then q, k, v = qkv.unbind(0) (a Split and three Squeezes) or qkv[0],
 *   qkv[1], qkv[2] (Gathers);
 * - minGPT's: q, k, v = c_attn(x).split(C, dim=2), each .view(B, T, H, d)
 *   .transpose(1, 2);
 *
 * - LLaMA's and Hugging Face's: q, k, v each a projection of its own
 *   (wq(x), wk(x), wv(x)), each .view(B, T, H, d).transpose(1, 2), or
 *   .view(bs, -1, H, d) as DistilBERT's (the -1 is T);
 *
 * then (q @ k.transpose(-2, -1)) scaled by 1/sqrt(d) (a Mul or Div of the
 * scores, or of q before, or of q and k^T by its square root as PyTorch 2
 * exports F.scaled_dot_product_attention), softmax over the keys, @ v,
 * .transpose(1, 2).reshape(B, T, C). A mask on the scores is read if it is
 * the causal one (a GPT's: masked_fill of a tril buffer, or an additive
 * -inf mask) or the padding's keys from an attention_mask input
 * (onnx_keymask.c); any other is refused where it meets them.
 *
 * The tensors between the projection and the final Reshape have the heads
 * or the batch where batchfit keeps neither, so each becomes a view
 * (OV_VIEW: att[] says which stage, how many heads, which of q, k, v) of the
 * projection's tokens [T, 3C], whose columns are q | k | v with head h in
 * columns h d .. (h + 1) d of each: the attention layer's input. The MatMul
 * by v emits the layer; its output [T, C] is then viewed as [N, H, T, d]
 * until the Reshape back, which is that output. A view read by any other
 * node, or in another order, is refused there, saying what batchfit reads.
 * The projections themselves are MatMuls by transposed initializers:
 * linear layers, as elsewhere. Separate projections are views of their
 * own [T, C] each (att_sep), whose roles the MatMuls tell; the MatMul by v
 * then concatenates the three into the layer's [T, 3C]. */
#include "base/err.h"
#include "nn/onnx_int.h"

#include <math.h>
#include <stdint.h>

enum {
    S_QKV5 = 1, /* [N, T, 3, H, d]: the projection reshaped (timm) */
    S_QKV3,     /* [3, N, H, T, d]: permuted */
    S_PART,     /* [1, N, H, T, d]: one of the three, split */
    S_TOK,      /* [N, T, C]: one of q, k, v split from the projection's columns (minGPT) */
    S_TOK4,     /* [N, T, H, d]: reshaped */
    S_HEADS,    /* [N, H, T, d]: q, k or v by heads (BFIT_ATT_HEADS: rotary embeddings start here) */
    S_KT,       /* [N, H, d, T]: k transposed */
    S_SCORES,   /* [N, H, T, T]: q k^T (times att_scale) */
    S_PROBS,    /* [N, H, T, T]: the softmax */
    S_OUT,      /* [N, H, T, d]: the attention layer's output [T, C] as heads */
    S_OUT_T     /* [N, T, H, d]: transposed back */
};

_Static_assert((int)S_HEADS == (int)BFIT_ATT_HEADS && (int)S_SCORES == (int)BFIT_ATT_SCORES &&
                   (int)S_OUT_T < (int)BFIT_ATT_ROPE, "onnx_rope.c's and onnx_keymask.c's stages");

#define BATCH BFIT_ONNX_BATCH /* a view's dimension that is the batch */

static const char *const WANT =
    "batchfit reads self-attention written out the way timm's Attention (qkv(x).reshape(B, T, 3, H, d).permute(2, "
    "0, 3, 1, 4), then unbind or [0], [1], [2]) or minGPT (c_attn(x).split(C, dim=2), each .view(B, T, H, d)"
    ".transpose(1, 2)) writes it: softmax(q @ k.transpose(-2, -1) / sqrt(d), dim=-1) @ v, then .transpose(1, 2)"
    ".reshape(B, T, C), with no mask or a causal one; or q, k, v each from its own projection, each .view(B, T, "
    "H, d).transpose(1, 2), as LLaMA's wq, wk, wv";

/* Output k is a view of device value x at a stage, its ONNX dimensions
 * dims[0..rank) (BATCH: the batch). */
static void mview(onnx_lower *L, int k, const oval *x, int stage, int heads, int part, double scale, int rank,
                  const int64_t *dims)
{
    oval *o = bfit_onnx_out(L, k);
    bfit_onnx_str name = o->name;
    int producer = o->producer;

    *o = *x;
    o->name = name, o->producer = producer;
    o->kind = OV_VIEW;
    o->att[0] = stage, o->att[1] = heads, o->att[2] = part;
    o->att_scale = scale;
    bfit_onnx_set_dims(o, rank, dims);
}

/* Output 0 is view v again, its scores' factor now scale. */
static void same(onnx_lower *L, const oval *v, double scale)
{
    bfit_onnx_alias(L, v);
    bfit_onnx_out(L, 0)->att_scale = scale;
}

/* -1 in d[0..n) is what the others leave of total (one at most). */
static int infer(int64_t *d, int n, int64_t total)
{
    int64_t known = 1;
    int at = -1;
    for (int k = 0; k < n; k++) {
        if (d[k] == -1 && at < 0)
            at = k;
        else if (d[k] < 1 || d[k] > total || known > total / d[k]) /* no product past the tensor's size */
            return 0;
        else
            known *= d[k];
    }
    if (at >= 0 && known > 0 && total % known == 0)
        d[at] = total / known;
    return at < 0 ? known == total : total % known == 0;
}

/* A reshape target [-1, a, b] of tokens [T, total] (DistilBERT's
 * x.view(bs, -1, H, d)) with a b = total: the -1 is T. */
static void t_first(int64_t *d, int n, int64_t T, int64_t total)
{
    int64_t p = 1;
    for (int k = 1; k < n; k++)
        if (d[k] < 1 || d[k] > total || (p *= d[k]) > total)
            return;
    if (d[0] == -1 && p == total)
        d[0] = T;
}

/* The attribute's ints are exactly p[0..n). */
static int perm_is(onnx_lower *L, const int64_t *p, int n)
{
    int64_t v[BFIT_ONNX_MAXATTR];
    int got = 0;
    if (bfit_onnx_attr_ints(L, "perm", v, 0, &got) != BFIT_OK || got != n)
        return 0;
    for (int k = 0; k < n; k++)
        if (v[k] != p[k])
            return 0;
    return 1;
}

/* Node i is a Transpose whose perm is a or b (4 numbers each); read from
 * the node itself, not the one being lowered, so nothing is refused. */
static int perm_of(onnx_lower *L, int i, const int64_t *a, const int64_t *b)
{
    const bfit_onnx_attr *at = bfit_onnx_node_attr(&L->om->nodes[i], "perm");
    int ea = 1, eb = 1;
    if (!at || at->type != BFIT_ONNX_A_INTS || at->nints != 4)
        return 0;
    for (int j = 0; j < 4; j++)
        ea &= at->ints[j] == a[j], eb &= at->ints[j] == b[j];
    return ea || eb;
}

/* The columns of the view's tokens per head's q, k or v: C of [T, C]
 * (separate projections) or of [T, 3C] (one projection). */
static int64_t qkv_cols(const oval *v) { return v->shape.d[1] / (v->att_sep ? 1 : 3); }

/* The start of a block: a Reshape of the projection's tokens [T, 3C] to
 * [N, T, 3, H, d] (timm), or a Split of them into three [T, C] along the
 * last axis (minGPT), or a Reshape of a separate projection [T, C] to
 * [N, T, H, d] that a Transpose takes to heads (LLaMA's). 0 where the
 * node is none of these (another handler's). */
static int entry(onnx_lower *L, oval *x, int *rc)
{
    int64_t T = x->shape.d[0], C3 = x->shape.d[1], d[4];

    if (bfit_onnx_streq(L->nd->op, "Reshape") && bfit_onnx_reshape_target(L, x, d, 4) == 4) {
        if (d[0] != T || d[1] != 3 || !infer(d + 2, 2, C3 / 3) || C3 % 3)
            return 0;
        mview(L, 0, x, S_QKV5, (int)d[2], -1, 1, 5, (int64_t[]){BATCH, T, 3, d[2], d[3]});
    } else if (bfit_onnx_streq(L->nd->op, "Reshape")) { /* one of separate q, k, v to [N, T, H, d] */
        int tr = bfit_onnx_next(L, L->ndi, "Transpose");
        if (tr < 0 || bfit_onnx_reshape_target(L, x, d, 3) != 3 || (t_first(d, 3, T, C3), d[0] != T) ||
            !infer(d + 1, 2, C3) ||
            !perm_of(L, tr, (int64_t[]){0, 2, 1, 3}, (int64_t[]){0, 2, 3, 1}))
            return 0;
        mview(L, 0, x, S_TOK4, (int)d[1], -1, 1, 4, (int64_t[]){BATCH, T, d[1], d[2]});
        bfit_onnx_out(L, 0)->att_sep = 1;
    } else { /* Split */
        int64_t axis = 0, s[3];
        int n = 0;
        if (L->nd->nout != 3 || bfit_onnx_attr_int(L, "axis", 0, &axis) != BFIT_OK || (axis != 2 && axis != -1) ||
            C3 % 3)
            return 0;
        if (bfit_onnx_in(L, 1) && (bfit_onnx_host_i64(L, 1, s, 3, &n) != BFIT_OK || n != 3 || s[0] != C3 / 3 ||
                                   s[1] != C3 / 3 || s[2] != C3 / 3))
            return 0;
        for (int k = 0; k < 3; k++)
            mview(L, k, x, S_TOK, 0, k, 1, 3, (int64_t[]){BATCH, T, C3 / 3});
    }
    *rc = BFIT_OK;
    return 1;
}

/* From the projection's 5-d view to q, k, v by heads (timm). */
static int qkv_parts(onnx_lower *L, oval *v)
{
    int64_t T = v->shape.d[0], H = v->att[1], hd = v->shape.d[1] / 3 / H;
    int64_t heads[4] = {BATCH, H, T, hd}, axis = 0;
    hval *h;
    int n = 0;

    if (v->att[0] == S_QKV5 && bfit_onnx_streq(L->nd->op, "Transpose") && perm_is(L, (int64_t[]){2, 0, 3, 1, 4}, 5)) {
        mview(L, 0, v, S_QKV3, (int)H, -1, 1, 5, (int64_t[]){3, BATCH, H, T, hd});
        return BFIT_OK;
    }
    if (v->att[0] == S_QKV3 && bfit_onnx_streq(L->nd->op, "Split") && L->nd->nout == 3 &&
        bfit_onnx_attr_int(L, "axis", 0, &axis) == BFIT_OK && axis == 0) {
        for (int k = 0; k < 3; k++)
            mview(L, k, v, S_PART, (int)H, k, 1, 5, (int64_t[]){1, BATCH, H, T, hd});
        return BFIT_OK;
    }
    if (v->att[0] == S_QKV3 && bfit_onnx_streq(L->nd->op, "Gather") &&
        bfit_onnx_attr_int(L, "axis", 0, &axis) == BFIT_OK && axis == 0 && (h = bfit_onnx_host(L, bfit_onnx_in(L, 1), 1)) &&
        !h->isf && h->nd == 0 && h->n == 1 && !h->a[0] && h->b[0] >= -3 && h->b[0] <= 2) {
        mview(L, 0, v, S_HEADS, (int)H, (int)(h->b[0] < 0 ? h->b[0] + 3 : h->b[0]), 1, 4, heads); /* qkv[i] */
        return BFIT_OK;
    }
    if (v->att[0] == S_PART && bfit_onnx_streq(L->nd->op, "Squeeze") &&
        (!bfit_onnx_in(L, 1) || (bfit_onnx_host_i64(L, 1, &axis, 1, &n) == BFIT_OK && n == 1 && axis == 0))) {
        mview(L, 0, v, S_HEADS, (int)H, v->att[2], 1, 4, heads);
        return BFIT_OK;
    }
    return bfit_onnx_refuse(L, "%s", WANT);
}

/* From minGPT's split q, k or v [N, T, C] to [N, H, T, d] (and a separate
 * projection's, which entry() has reshaped). */
static int tok_parts(onnx_lower *L, oval *v)
{
    int64_t T = v->shape.d[0], C = qkv_cols(v), d[3];

    if (v->att[0] == S_TOK && bfit_onnx_streq(L->nd->op, "Reshape") && bfit_onnx_reshape_target(L, v, d, 3) == 3 &&
        (t_first(d, 3, T, C), d[0] == T) && infer(d + 1, 2, C)) {
        mview(L, 0, v, S_TOK4, (int)d[1], v->att[2], 1, 4, (int64_t[]){BATCH, T, d[1], d[2]});
        return BFIT_OK;
    }
    if (v->att[0] == S_TOK4 && bfit_onnx_streq(L->nd->op, "Transpose") && perm_is(L, (int64_t[]){0, 2, 1, 3}, 4)) {
        mview(L, 0, v, S_HEADS, v->att[1], v->att[2], 1, 4, (int64_t[]){BATCH, v->att[1], T, C / v->att[1]});
        return BFIT_OK;
    }
    /* k.transpose(1, 2) then .transpose(-2, -1): the export makes them one */
    if (v->att[0] == S_TOK4 && (v->att[2] == 1 || v->att_sep) && bfit_onnx_streq(L->nd->op, "Transpose") &&
        perm_is(L, (int64_t[]){0, 2, 3, 1}, 4)) {
        mview(L, 0, v, S_KT, v->att[1], 1, 1, 4, (int64_t[]){BATCH, v->att[1], C / v->att[1], T});
        return BFIT_OK;
    }
    return bfit_onnx_refuse(L, "%s", WANT);
}

/* A Mul or Div of q or the scores by one constant: the factor noted. */
static int scaled(onnx_lower *L, oval *v)
{
    int div = bfit_onnx_streq(L->nd->op, "Div"), k = bfit_onnx_in(L, 0) == v ? 1 : 0;
    oval *c = bfit_onnx_in(L, k);
    double f = 0;

    if ((div && k == 0) || !c || !bfit_onnx_scalar(L, c->name, &f) || !(f != 0 && isfinite(f)) ||
        (v->att[0] == S_HEADS && v->att[2] != 0 && !v->att_sep))
        /* a separate projection's role shows at the MatMuls: a factor on v is refused there (attend) */
        return bfit_onnx_refuse(L, "%s (the scale a constant on q, k^T or the scores)", WANT);
    same(L, v, v->att_scale * (div ? 1 / f : f));
    return BFIT_OK;
}

/* Whether host value c, [.., T, T] with ones before, is the causal
 * pattern: (nonzero where key j > query i) == hide, for a boolean c; for a
 * float c (an additive mask), 0 where j <= i and -inf (or at most -1e4,
 * whose exponential is 0) where j > i. */
int bfit_onnx_causal_rows(const hval *c, int hide, int additive)
{
    int64_t R = c->nd >= 2 ? c->dim[c->nd - 2] : 0, K = c->nd >= 2 ? c->dim[c->nd - 1] : 0;
    if (R < 1 || K < R || c->n != R * K || additive != c->isf)
        return 0;
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < K; j++) {
            int64_t e = i * K + j;
            int on = additive ? c->f[e] <= -1e4 : (c->a[e] || c->b[e]);
            if ((additive && !on && c->f[e] != 0) || (!additive && c->a[e]) || on != (hide ? j > i : j <= i))
                return 0;
        }
    return 1;
}

int bfit_onnx_causal_mask(const hval *c, int64_t T, int hide, int additive)
{
    return c->nd >= 2 && c->dim[c->nd - 1] == T && c->dim[c->nd - 2] == T && bfit_onnx_causal_rows(c, hide, additive);
}

/* A causal mask on the scores: masked_fill(mask, -inf) (Where(mask, fill,
 * scores)), torch.where(keep, scores, fill), or scores + an additive mask
 * (nn.Transformer.generate_square_subsequent_mask's). The fill must make
 * the masked weights 0: -inf, or a number at most -1e4. */
static int masked(onnx_lower *L, oval *v)
{
    int64_t T = v->shape.d[0];
    int add = bfit_onnx_streq(L->nd->op, "Add"), k = add ? (bfit_onnx_in(L, 0) == v ? 1 : 0)
                                                         : (bfit_onnx_in(L, 2) == v ? 2 : 1);
    oval *m = bfit_onnx_in(L, add ? k : 0), *f = add ? NULL : bfit_onnx_in(L, 3 - k);
    hval *c = m && m->kind == OV_HOST ? bfit_onnx_host(L, m, add ? k : 0) : NULL;
    double fill = 0;

    if (!add && (bfit_onnx_in(L, k) != v || !f || !bfit_onnx_scalar(L, f->name, &fill) || !(fill <= -1e4)))
        return bfit_onnx_refuse(L, "batchfit reads a mask on the attention's scores only as a causal one that fills "
                                   "with -inf (masked_fill(mask, float('-inf')), or a number at most -1e4)");
    if (c && c->nd >= 2 && c->dim[c->nd - 1] == c->dim[c->nd - 2] && c->dim[c->nd - 1] < T)
        return bfit_onnx_refuse(L, "the mask on the attention's scores is %lld x %lld for %lld tokens: the model's "
                                   "mask (a buffer cut to the sequence) has %lld positions, the longest sequence it "
                                   "takes (--seq at most %lld)", (long long)c->dim[c->nd - 1],
                                (long long)c->dim[c->nd - 1], (long long)T, (long long)c->dim[c->nd - 1],
                                (long long)c->dim[c->nd - 1]);
    if (!c || !bfit_onnx_causal_mask(c, T, add || k == 2, add))
        return bfit_onnx_refuse(L, "the mask on the attention's scores is not the causal one (each token sees "
                                   "itself and the tokens before it: torch.tril(torch.ones(T, T)), here T = %lld), "
                                   "the only mask batchfit reads there", (long long)T);
    same(L, v, v->att_scale);
    bfit_onnx_out(L, 0)->att_causal = 1;
    return BFIT_OK;
}

/* k^T, then q k^T: the scores (q and k of one projection). */
static int scores(onnx_lower *L, oval *v)
{
    int64_t T = v->shape.d[0], H = v->att[1], hd = qkv_cols(v) / H;
    oval *q = bfit_onnx_in(L, 0), *k = bfit_onnx_in(L, 1);
    int one, sep;

    if (v->att[0] == S_HEADS && (v->att[2] == 1 || v->att_sep) && bfit_onnx_streq(L->nd->op, "Transpose") &&
        perm_is(L, (int64_t[]){0, 1, 3, 2}, 4)) {
        mview(L, 0, v, S_KT, (int)H, 1, 1, 4, (int64_t[]){BATCH, H, hd, T});
        return BFIT_OK;
    }
    if (!bfit_onnx_streq(L->nd->op, "MatMul") || q != v || q->att[0] != S_HEADS || !k || k->kind != OV_VIEW ||
        k->att[0] != S_KT || k->att_sep != q->att_sep || k->att[1] != H)
        return bfit_onnx_refuse(L, "%s", WANT);
    one = !q->att_sep && q->att[2] == 0 && k->id == q->id;
    sep = q->att_sep && q->att[2] == -1 && k->id != q->id && bfit_shape_eq(k->shape, q->shape);
    if (!one && !sep)
        return bfit_onnx_refuse(L, "%s", WANT);
    mview(L, 0, v, S_SCORES, (int)H, -1, q->att_scale * k->att_scale, 4, (int64_t[]){BATCH, H, T, T});
    bfit_onnx_out(L, 0)->att_qk[0] = q->id, bfit_onnx_out(L, 0)->att_qk[1] = k->id;
    return BFIT_OK;
}

/* Softmax over the keys of scores scaled by 1/sqrt(d), the attention
 * layer's scale. */
static int softmax(onnx_lower *L, oval *v)
{
    int64_t T = v->shape.d[0], H = v->att[1], hd = qkv_cols(v) / H, axis = -1;
    double want = 1 / sqrt((double)hd);
    int rc;

    if ((rc = bfit_onnx_attr_int(L, "axis", -1, &axis)) != BFIT_OK)
        return rc;
    if (axis != -1 && axis != 3)
        return bfit_onnx_refuse(L, "the attention's softmax must run over the keys (the last axis)");
    if (fabs(v->att_scale - want) > 1e-6 * want)
        return bfit_onnx_refuse(L, "the scores are scaled by %g; batchfit's attention scales them by 1/sqrt(head "
                                   "size) = %g (head size %lld)", v->att_scale, want, (long long)hd);
    mview(L, 0, v, S_PROBS, (int)H, -1, 1, 4, (int64_t[]){BATCH, H, T, T});
    /* this Softmax is an attention batchfit knows: a refusal further on
     * names the next one no block took, if any (onnx.c's note) */
    if (L->attn_miss == L->ndi + 1) {
        L->attn_miss = 0;
        for (int i = L->ndi + 1; i < L->om->nnodes && !L->attn_miss; i++)
            if (bfit_onnx_streq(L->om->nodes[i].op, "Softmax") && !L->done[i])
                L->attn_miss = i + 1;
    }
    return BFIT_OK;
}

/* Separate projections q, k, v (ids), each of shape *base, side by side:
 * the attention layer's [T, 3C] input, into *x. */
static int concat_qkv(onnx_lower *L, const oval *base, int q, int k, int v, oval *x)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_CONCAT);
    oval part[3];
    int ids[3] = {q, k, v}, rc;

    if (q == k || q == v || k == v)
        return bfit_onnx_refuse(L, "q, k and v come from separate projections but two of them are one tensor: "
                                   "batchfit reads three projections, or one of 3C columns");
    for (int i = 0; i < 3; i++) {
        part[i] = *base;
        part[i].kind = OV_DEVICE;
        part[i].id = ids[i];
        part[i].att[0] = part[i].att_sep = 0;
    }
    c.axis = 1; /* a token's features */
    if ((rc = bfit_onnx_emit(L, &c, (oval *const[]){&part[0], &part[1], &part[2]}, 3, NULL, 0)) != BFIT_OK)
        return rc;
    *x = *bfit_onnx_out(L, 0);
    return BFIT_OK;
}

/* probs @ v: the attention layer over the projection's tokens (separate
 * projections concatenated first), its output [T, C] viewed as
 * [N, H, T, d] until the Reshape back. */
static int attend(onnx_lower *L, oval *p)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_ATTENTION);
    oval *v = bfit_onnx_in(L, 1), x, y;
    int64_t T = p->shape.d[0], H = p->att[1], hd = qkv_cols(p) / H;
    int rc;

    if (bfit_onnx_in(L, 0) != p || !v || v->kind != OV_VIEW || v->att[0] != S_HEADS || v->att_sep != p->att_sep ||
        v->att[1] != H)
        return bfit_onnx_refuse(L, "%s", WANT);
    if (!p->att_sep && (v->att[2] != 2 || v->id != p->id))
        return bfit_onnx_refuse(L, "%s", WANT);
    if (p->att_sep && (v->att[2] != -1 || !bfit_shape_eq(v->shape, p->shape)))
        return bfit_onnx_refuse(L, "%s", WANT);
    if (v->att_scale != 1)
        return bfit_onnx_refuse(L, "%s (the scale a constant on q, k^T or the scores, not on v)", WANT);
    x = *p;
    x.kind = OV_DEVICE;
    if (p->att_sep && (rc = concat_qkv(L, p, p->att_qk[0], p->att_qk[1], v->id, &x)) != BFIT_OK)
        return rc;
    c.units = (int)H;
    c.causal = p->att_causal;
    c.p = p->att_drop;
    if ((rc = bfit_onnx_emit(L, &c, (oval *const[]){&x}, 1, NULL, 0)) != BFIT_OK)
        return rc;
    y = *bfit_onnx_out(L, 0);
    mview(L, 0, &y, S_OUT, (int)H, -1, 1, 4, (int64_t[]){BATCH, H, T, hd});
    return BFIT_OK;
}

/* The output's transpose back to [N, T, H, d] and reshape to [N, T, C]. */
static int back(onnx_lower *L, oval *v)
{
    int64_t T = v->shape.d[0], C = v->shape.d[1], H = v->att[1], d[2];

    if (v->att[0] == S_OUT && bfit_onnx_streq(L->nd->op, "Transpose") && perm_is(L, (int64_t[]){0, 2, 1, 3}, 4)) {
        mview(L, 0, v, S_OUT_T, (int)H, -1, 1, 4, (int64_t[]){BATCH, T, H, C / H});
        return BFIT_OK;
    }
    if (v->att[0] == S_OUT_T && bfit_onnx_streq(L->nd->op, "Reshape") && bfit_onnx_reshape_target(L, v, d, 2) == 2 &&
        (t_first(d, 2, T, C), d[0] == T) && (d[1] == C || d[1] == -1)) {
        oval y = *v;
        y.kind = OV_DEVICE;
        y.att[0] = y.att[1] = y.att[2] = 0;
        bfit_onnx_alias(L, &y);
        bfit_onnx_set_rank(L, bfit_onnx_out(L, 0), &y.shape);
        return BFIT_OK;
    }
    return bfit_onnx_refuse(L, "%s", WANT);
}

/* Dropout on a view: of ratio 0 (timm's attn_drop at its default p = 0.)
 * the view itself; on the probabilities (timm's attn_drop(attn), nanoGPT's
 * attn_dropout, before the product with v) the attention layer's dropout on
 * its weights; elsewhere inside the attention it has no place. */
static int dropout_in(onnx_lower *L, oval *v)
{
    float ratio = 0.5f;
    int n, rc;

    if ((rc = bfit_onnx_attr_float(L, "ratio", ratio, &ratio)) != BFIT_OK ||
        (bfit_onnx_in(L, 1) && (rc = bfit_onnx_host_f32(L, 1, &ratio, 1, &n)) != BFIT_OK))
        return rc;
    if (ratio != 0 && (v->att[0] != S_PROBS || v->att_drop != 0 || !(ratio > 0 && ratio < 1)))
        return bfit_onnx_refuse(L, "dropout of ratio %g inside the attention, not on its weights (the softmax's "
                                   "output): batchfit's attention layer drops only those (export the module with "
                                   "p = 0 there, dropout elsewhere is kept)", (double)ratio);
    same(L, v, v->att_scale);
    if (ratio != 0)
        bfit_onnx_out(L, 0)->att_drop = ratio;
    bfit_onnx_unavail(L, 1, "the mask output of Dropout");
    return BFIT_OK;
}

int bfit_onnx_lower_mhsa(onnx_lower *L, int *rc)
{
    oval *v = NULL;

    if (bfit_onnx_streq(L->nd->op, "Shape"))
        return 0;
    for (int k = 0; k < L->nd->nin && !v; k++) {
        oval *u = bfit_onnx_in(L, k);
        v = u && u->kind == OV_VIEW && u->att[0] ? u : NULL;
    }
    if (!v) {
        oval *x = bfit_onnx_in(L, 0);
        if (!x || x->kind != OV_DEVICE || x->shape.nd != 2 || x->cl[0] ||
            !(bfit_onnx_streq(L->nd->op, "Reshape") || bfit_onnx_streq(L->nd->op, "Split")))
            return 0;
        return entry(L, x, rc);
    }
    if (bfit_onnx_streq(L->nd->op, "Dropout") && bfit_onnx_in(L, 0) == v) {
        *rc = dropout_in(L, v);
        return 1;
    }
    if (bfit_onnx_streq(L->nd->op, "Cast") && bfit_onnx_in(L, 0) == v) { /* LLaMA's softmax(scores.float()) */
        int64_t to = 0;
        if ((*rc = bfit_onnx_attr_int(L, "to", 0, &to)) == BFIT_OK && to != 1)
            *rc = bfit_onnx_refuse(L, "a Cast inside the attention to the ONNX type %lld: batchfit reads casts to "
                                      "float there (export the model in float32)", (long long)to);
        else if (*rc == BFIT_OK)
            same(L, v, v->att_scale);
        return 1;
    }
    if (v->att[0] >= BFIT_ATT_GQA)
        return bfit_onnx_gqa(L, v, rc);
    if (v->att[0] >= BFIT_ATT_ROPE)
        return bfit_onnx_rope(L, v, rc);
    switch (v->att[0]) {
    case S_QKV5: case S_QKV3: case S_PART: *rc = qkv_parts(L, v); break;
    case S_TOK: case S_TOK4: *rc = tok_parts(L, v); break;
    case S_HEADS:
    case S_SCORES:
        if (v->att[0] == S_HEADS && (bfit_onnx_rope(L, v, rc) || bfit_onnx_gqa(L, v, rc)))
            break;
        if (v->att[0] == S_SCORES && (bfit_onnx_streq(L->nd->op, "Where") || bfit_onnx_streq(L->nd->op, "Add"))) {
            *rc = masked(L, v);
            break;
        }
        *rc = bfit_onnx_streq(L->nd->op, "Mul") || bfit_onnx_streq(L->nd->op, "Div") ? scaled(L, v)
              : v->att[0] == S_SCORES && bfit_onnx_streq(L->nd->op, "Softmax") ? softmax(L, v)
              : v->att[0] == S_HEADS && v->att[2] == 2 ? bfit_onnx_refuse(L, "%s", WANT)
                                                        : scores(L, v);
        break;
    case S_KT: /* PyTorch 2 exports scaled_dot_product_attention with sqrt(scale) on q and on k^T */
        *rc = bfit_onnx_streq(L->nd->op, "Mul") || bfit_onnx_streq(L->nd->op, "Div") ? scaled(L, v) : scores(L, v);
        break;
    case S_PROBS: *rc = bfit_onnx_streq(L->nd->op, "MatMul") ? attend(L, v) : bfit_onnx_refuse(L, "%s", WANT); break;
    default: *rc = back(L, v); break;
    }
    return 1;
}
