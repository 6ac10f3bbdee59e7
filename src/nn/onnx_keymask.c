/* onnx_keymask.c - a language model's attention_mask, the second graph input
 * transformers' exports have (1 for a token, 0 for padding, [batch, T]),
 * followed to the attention scores it masks.
 *
 * batchfit does not feed it: it knows each sequence's length from its
 * labels (exec.c), and its attention layer masks the keys of padding where
 * padding could reach a real token (bidirectional attention; causal
 * attention needs no mask, padding coming after every real token). So the
 * mask is read only to check that it is that: the padding's keys hidden from
 * every query, by the forms transformers and hand-written models use:
 *
 * - GPT-2's and BERT's: mask[:, None, None, :].to(float), (1.0 - m) times
 *   float32's lowest number (or -10000.0), added to the scores;
 * - DistilBERT's: (mask == 0).view(bs, 1, 1, T).expand_as(scores), then
 *   scores.masked_fill(that, lowest);
 * - BART's _expand_mask: mask[:, None, None, :].expand(B, 1, T, T), cast
 *   to float, inverted = 1.0 - it, inverted.masked_fill(inverted.to(bool),
 *   lowest) added to the scores;
 * - nn.MultiheadAttention's key_padding_mask (nn.TransformerEncoderLayer's
 *   src_key_padding_mask, True at padding), as torch 1.13 writes it:
 *   .view(B, 1, 1, T).expand(-1, H, -1, -1).reshape(B * H, 1, T), a float
 *   mask made of it (zeros_like, masked_fill_ with -inf), or a causal
 *   attn_mask masked_fill'ed with it, added to the scores (onnx_attn.c).
 *
 * Each value on the way is an OV_KEYMASK: its form (what it holds at a
 * token and at padding) and its ONNX shape, the batch first (ra[0] sample's
 * rows of it where the heads went into it, else 1) and the keys last.
 * Anything else reading it is refused, saying what batchfit reads. */
#include "base/err.h"
#include "nn/onnx_int.h"

#include <math.h>

enum { KM_KEEP = 1, KM_PAD, KM_BKEEP, KM_BPAD, KM_ADD, KM_ZERO, KM_TOK }; /* numbers 1 at a token, 1 at
                                                                      padding, the booleans, 0 at a token and -inf
                                                                      or at most -1e4 at padding, zeros of its
                                                                      shape; 1 at a token [B, T, 1 or C], the
                                                                      weights of a mean (onnx_pool.c) */

static const char *const WANT =
    "batchfit reads a model's attention_mask (1 for a token, 0 for padding, [batch, T]) only as the mask of the "
    "padding's keys on the attention scores, written as transformers writes it: mask[:, None, None, :], cast to "
    "float, (1.0 - mask) * torch.finfo(float).min added to the scores (GPT-2, BERT), or scores.masked_fill((mask "
    "== 0).view(B, 1, 1, T).expand_as(scores), min) (DistilBERT); batchfit masks those keys itself, from each "
    "sequence's length";

static int pad_value(int form) { return form == KM_PAD || form == KM_BPAD; } /* at padding; 1 - it at a token */
static int is_bool(int form) { return form == KM_BKEEP || form == KM_BPAD; }

/* Output 0 is mask x in form, its ONNX shape dims[0..rank) (dims[0]: the
 * batch, as many rows a sample as x's). */
static void km_out(onnx_lower *L, const oval *x, int form, int rank, const int64_t *dims)
{
    oval *o = bfit_onnx_out(L, 0);
    bfit_onnx_str name = o->name;
    int producer = o->producer;

    *o = *x;
    o->name = name, o->producer = producer;
    o->km[0] = form;
    bfit_onnx_set_dims(o, rank, dims);
    o->ra[0] = x->ra[0], o->rb[0] = 0;
}

/* x's dimensions, the batch BFIT_ONNX_BATCH. */
static int dims_of(const oval *x, int64_t *d)
{
    for (int k = 0; k < x->rank; k++)
        d[k] = x->ra[k] ? BFIT_ONNX_BATCH : x->rb[k];
    return x->rank;
}

#define KM_MAXDIM (1 << 16) /* a dimension of a mask: heads or tokens (a file's numbers stay far from overflow) */

/* The mask's shape: the batch first, the keys (T) last, ones between or not. */
static int well_formed(const oval *x, const int64_t *d, int rank)
{
    if (rank < 2 || rank > 4 || d[0] != BFIT_ONNX_BATCH || d[rank - 1] != x->km[1])
        return 0;
    for (int k = 1; k < rank - 1; k++)
        if (d[k] < 1 || d[k] > KM_MAXDIM)
            return 0;
    return 1;
}

/* The rows a sample the target's first dimension a * m + b gives (the
 * batch times the heads merged into it), 0 if it is none. */
static int64_t rows_of(const onnx_lower *L, int64_t a, int64_t b)
{
    if (a > 0 && a <= KM_MAXDIM && b == 0)
        return a;
    if (a == 0 && L->fixed_batch > 0 && b > 0 && b % L->fixed_batch == 0 && b / L->fixed_batch <= KM_MAXDIM)
        return b / L->fixed_batch; /* the batch baked in */
    return 0;
}

/* mask.view(B, -1), .view(B, 1, 1, T); nn.MultiheadAttention's
 * .reshape(B * H, 1, T) of [B, H, 1, T], the heads merged into the batch */
static int reshape(onnx_lower *L, const oval *x)
{
    hval *t = bfit_onnx_host(L, bfit_onnx_in(L, 1), 1);
    int64_t d[BFIT_ONNX_MAXD], known = 1, per = x->ra[0], rows, lead = x->ra[0];
    int n, at = -1;

    if (!t)
        return BFIT_EINVAL;
    for (int k = 1; k < x->rank; k++) /* numbers a sample */
        if (__builtin_mul_overflow(per, x->rb[k], &per))
            return bfit_onnx_refuse(L, "%s", WANT);
    n = (int)t->n;
    if (t->isf || t->nd != 1 || n < 2 || n > 4)
        return bfit_onnx_refuse(L, "%s", WANT);
    rows = t->a[0] == 0 && t->b[0] == 0 ? x->ra[0] : rows_of(L, t->a[0], t->b[0]); /* 0: x's (allowzero 0) */
    for (int k = 1; k < x->rank && lead < rows; k++) /* merging x's leading dimensions into the batch */
        lead *= x->rb[k];
    if (rows < 1 || lead != rows)
        return bfit_onnx_refuse(L, "%s", WANT);
    for (int k = 1; k < n; k++) {
        if (t->a[k])
            return bfit_onnx_refuse(L, "%s", WANT);
        d[k] = t->b[k] == 0 && k < x->rank ? x->rb[k] : t->b[k]; /* 0: x's there (allowzero 0) */
        if (d[k] == -1 && at < 0)
            at = k;
        else if (d[k] < 1 || d[k] > per || __builtin_mul_overflow(known, d[k], &known) || known > per)
            return bfit_onnx_refuse(L, "%s", WANT);
    }
    if (rows > per || known > per / rows || per % (rows * known))
        return bfit_onnx_refuse(L, "%s", WANT);
    if (at > 0)
        d[at] = per / rows / known;
    d[0] = BFIT_ONNX_BATCH;
    if (!well_formed(x, d, n) || (at < 0 && rows * known != per))
        return bfit_onnx_refuse(L, "%s", WANT);
    km_out(L, x, x->km[0], n, d);
    bfit_onnx_out(L, 0)->ra[0] = rows;
    return BFIT_OK;
}

/* mask[:, None, None, :], mask.unsqueeze(1) */
static int unsqueeze(onnx_lower *L, const oval *x)
{
    int64_t axes[BFIT_ONNX_MAXD], d[BFIT_ONNX_MAXD];
    int na = 0, rank, rc;
    unsigned mark = 0;

    rc = bfit_onnx_in(L, 1) ? bfit_onnx_host_i64(L, 1, axes, BFIT_ONNX_MAXD, &na)
                            : bfit_onnx_attr_ints(L, "axes", axes, 0, &na);
    if (rc != BFIT_OK)
        return rc;
    if (x->rank == 2 && (x->km[0] == KM_KEEP || x->km[0] == KM_BKEEP) && na == 1 && (axes[0] == -1 || axes[0] == 2)) {
        km_out(L, x, KM_TOK, 3, (int64_t[]){BFIT_ONNX_BATCH, x->km[1], 1}); /* mask.unsqueeze(-1): a mean's */
        return BFIT_OK;
    }
    rank = x->rank + na;
    for (int i = 0; i < na && rank <= 4; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
        if (a <= 0 || a >= rank - 1) /* neither the batch's place nor the keys' */
            return bfit_onnx_refuse(L, "%s (here a dimension inserted %s: the mask would not be along the keys)",
                                    WANT, a <= 0 ? "before the batch" : "after the tokens");
        mark |= 1u << a;
    }
    if (rank > 4)
        return bfit_onnx_refuse(L, "%s", WANT);
    for (int k = 0, j = 0; k < rank; k++) {
        if (mark >> k & 1) {
            d[k] = 1;
            continue;
        }
        d[k] = x->ra[j] ? BFIT_ONNX_BATCH : x->rb[j];
        j++;
    }
    km_out(L, x, x->km[0], rank, d);
    return BFIT_OK;
}

/* .expand_as(scores), .expand(B, 1, T, T): ones grown, the batch and the keys kept */
static int expand(onnx_lower *L, const oval *x)
{
    hval *s = bfit_onnx_host(L, bfit_onnx_in(L, 1), 1);
    int64_t d[BFIT_ONNX_MAXD];
    int rank;

    if (!s)
        return BFIT_EINVAL;
    if (s->isf || s->nd != 1 || s->n != x->rank)
        return bfit_onnx_refuse(L, "%s (expanded to another rank)", WANT);
    if (x->km[0] == KM_TOK) { /* .expand(h.size()): [B, T, 1] to [B, T, C] */
        if (!bfit_onnx_affine_is(L, s->a[0], s->b[0], 1, 0) || s->a[1] || s->b[1] != x->km[1] || s->a[2] ||
            s->b[2] < 1 || s->b[2] > (1 << 24) || (x->rb[2] != 1 && x->rb[2] != s->b[2]))
            return bfit_onnx_refuse(L, "%s (expanded to another shape than [batch, %d, C])", WANT, x->km[1]);
        km_out(L, x, KM_TOK, 3, (int64_t[]){BFIT_ONNX_BATCH, x->km[1], s->b[2]});
        return BFIT_OK;
    }
    rank = dims_of(x, d);
    for (int k = 0; k < rank; k++) {
        int batch = bfit_onnx_affine_is(L, s->a[k], s->b[k], x->ra[0], 0);
        if (k == 0 ? !batch && !(s->a[k] == 0 && s->b[k] == 1) : s->a[k] != 0)
            return bfit_onnx_refuse(L, "%s", WANT);
        if (k > 0 && d[k] == 1 && s->b[k] > 1 && s->b[k] <= KM_MAXDIM)
            d[k] = s->b[k];
        else if (k > 0 && s->b[k] != 1 && s->b[k] != d[k])
            return bfit_onnx_refuse(L, "%s", WANT);
    }
    if (!well_formed(x, d, rank))
        return bfit_onnx_refuse(L, "%s", WANT);
    km_out(L, x, x->km[0], rank, d);
    return BFIT_OK;
}

/* .to(float), .to(bool), .long() */
static int cast(onnx_lower *L, const oval *x)
{
    int64_t to = 0, d[BFIT_ONNX_MAXD];
    int form = x->km[0], rc;

    if ((rc = bfit_onnx_attr_int(L, "to", 0, &to)) != BFIT_OK)
        return rc;
    if (form == KM_TOK && to == BFIT_ONNX_BOOL)
        return bfit_onnx_refuse(L, "%s (the mean's weights cast to bool)", WANT);
    if (to == BFIT_ONNX_BOOL)
        form = form == KM_KEEP ? KM_BKEEP : form == KM_PAD || form == KM_ADD ? KM_BPAD : form;
    else if (to == BFIT_ONNX_FLOAT || to == BFIT_ONNX_DOUBLE || (form != KM_ADD && (to == BFIT_ONNX_INT64 ||
                                                                                   to == BFIT_ONNX_INT32)))
        form = form == KM_BKEEP ? KM_KEEP : form == KM_BPAD ? KM_PAD : form;
    else
        return bfit_onnx_refuse(L, "%s (cast to the ONNX type %lld)", WANT, (long long)to);
    km_out(L, x, form, dims_of(x, d), d);
    return BFIT_OK;
}

/* The other input of a two-input node, a host scalar: 1 and *c, else 0. */
static int other_scalar(onnx_lower *L, const oval *x, double *c)
{
    oval *o = bfit_onnx_in(L, bfit_onnx_in(L, 0) == x ? 1 : 0);
    return L->nd->nin == 2 && o && o->kind == OV_HOST && bfit_onnx_scalar(L, o->name, c);
}

/* mask == 0, ~mask, 1.0 - mask, (1.0 - mask) * min */
static int arith(onnx_lower *L, const oval *x)
{
    int form = x->km[0], pv = pad_value(form);
    int64_t d[BFIT_ONNX_MAXD];
    double c = 0;

    if (form == KM_ZERO)
        return bfit_onnx_refuse(L, "%s", WANT);
    if (bfit_onnx_streq(L->nd->op, "Not") && is_bool(form))
        form = form == KM_BKEEP ? KM_BPAD : KM_BKEEP;
    else if (bfit_onnx_streq(L->nd->op, "Equal") && form != KM_ADD && other_scalar(L, x, &c) && (c == 0 || c == 1))
        form = c == pv ? KM_BPAD : KM_BKEEP; /* true where the value is c */
    else if (bfit_onnx_streq(L->nd->op, "Sub") && (form == KM_KEEP || form == KM_PAD) && bfit_onnx_in(L, 1) == x &&
             other_scalar(L, x, &c) && c == 1)
        form = form == KM_KEEP ? KM_PAD : KM_KEEP;
    else if (bfit_onnx_streq(L->nd->op, "Mul") && form == KM_PAD && other_scalar(L, x, &c) && isfinite(c) && c <= -1e4)
        form = KM_ADD;
    else if (bfit_onnx_streq(L->nd->op, "Mul") && form == KM_ADD && other_scalar(L, x, &c) && c == 1)
        ; /* baddbmm's beta on nn.MultiheadAttention's mask */
    else
        return bfit_onnx_refuse(L, "%s", WANT);
    km_out(L, x, form, dims_of(x, d), d);
    return BFIT_OK;
}

/* Whether value v holds 0 wherever mask m is at a token: a scalar 0, zeros
 * (torch.zeros_like in an export of a fixed batch: a constant), or a mask
 * 0 at its tokens. */
static int zero_at_tokens(onnx_lower *L, oval *v, int k)
{
    double c = 1;
    hval *h;
    if (v && v->kind == OV_KEYMASK)
        return v->km[0] == KM_PAD || v->km[0] == KM_ADD || v->km[0] == KM_ZERO;
    if (!v || v->kind != OV_HOST)
        return 0;
    if (bfit_onnx_scalar(L, v->name, &c))
        return c == 0;
    if (!(h = bfit_onnx_host(L, v, k)) || !h->isf)
        return 0;
    for (int64_t i = 0; i < h->n; i++)
        if (h->f[i] != 0)
            return 0;
    return 1;
}

/* The fill at padding: -inf or a number at most -1e4 (its exponential 0). */
static int hides(onnx_lower *L, oval *v)
{
    double c = 0;
    return v && v->kind == OV_HOST && bfit_onnx_scalar(L, v->name, &c) && c <= -1e4;
}

/* A mask made additive by masked_fill: Where(padding, fill, 0 at the
 * tokens) (BART's _expand_mask, nn.MultiheadAttention's zeros_like and
 * masked_fill_), or a causal attn_mask [T, T] or [1, T, T] masked_fill'ed
 * at padding (nn.MultiheadAttention given both masks), which the output
 * then carries (km[2]): 1 (the output made), else 0. */
static int fill_at_pad(onnx_lower *L)
{
    oval *a = bfit_onnx_in(L, 0), *b = bfit_onnx_in(L, 1), *c = bfit_onnx_in(L, 2), *rest;
    int64_t d[BFIT_ONNX_MAXD];
    int at_pad, rank;
    hval *h;

    if (L->nd->nin != 3 || !a || a->kind != OV_KEYMASK || !is_bool(a->km[0]))
        return 0;
    at_pad = a->km[0] == KM_BPAD; /* the condition true at padding: Where(cond, fill, rest) */
    rest = at_pad ? c : b;
    if (!hides(L, at_pad ? b : c))
        return 0;
    rank = dims_of(a, d);
    if (zero_at_tokens(L, rest, at_pad ? 2 : 1)) {
        km_out(L, a, KM_ADD, rank, d); /* a causal mask in the condition stays */
        bfit_onnx_out(L, 0)->km[2] |= rest->kind == OV_KEYMASK ? rest->km[2] : 0;
        return 1;
    }
    if (!rest || rest->kind != OV_HOST || !(h = bfit_onnx_host(L, rest, at_pad ? 2 : 1)) || h->nd > rank ||
        !bfit_onnx_causal_mask(h, a->km[1], 1, 1) || rank < 3 || (d[rank - 2] != 1 && d[rank - 2] != a->km[1]))
        return 0;
    d[rank - 2] = a->km[1]; /* [.., 1, T] with [T, T]: a row a query */
    km_out(L, a, KM_ADD, rank, d);
    bfit_onnx_out(L, 0)->km[2] = 1;
    return 1;
}

/* A boolean causal attn_mask (True where a key comes after the query),
 * [T, T] or [1, T, T], or'ed with the padding (nn.MultiheadAttention
 * given both): the padding's mask carrying the causal one, [.., T, T]. */
static int or_causal(onnx_lower *L, const oval *x)
{
    oval *o = bfit_onnx_in(L, bfit_onnx_in(L, 0) == x ? 1 : 0);
    int64_t d[BFIT_ONNX_MAXD];
    int rank = dims_of(x, d);
    hval *h;

    if (x->km[0] != KM_BPAD || L->nd->nin != 2 || !o || o->kind != OV_HOST ||
        !(h = bfit_onnx_host(L, o, bfit_onnx_in(L, 0) == x ? 1 : 0)) || h->nd > rank ||
        !bfit_onnx_causal_mask(h, x->km[1], 1, 0) || rank < 3 || d[rank - 2] != 1)
        return bfit_onnx_refuse(L, "%s", WANT);
    d[rank - 2] = x->km[1];
    km_out(L, x, KM_BPAD, rank, d);
    bfit_onnx_out(L, 0)->km[2] = 1;
    return BFIT_OK;
}

/* The scores [B, H, T, T] plus the additive mask, or filled where it is
 * padding: the attention's scores as they were (batchfit masks the keys),
 * causal if the mask brought a causal one. */
static int on_scores(onnx_lower *L, oval *s, oval *m)
{
    int64_t d[BFIT_ONNX_MAXD], T = s->shape.d[0];
    int add = bfit_onnx_streq(L->nd->op, "Add"), rank = dims_of(m, d), ok;

    if (add)
        ok = m->km[0] == KM_ADD;
    else /* masked_fill(pad, fill): Where(pad, fill, scores); torch.where(keep, scores, fill) */
        ok = bfit_onnx_in(L, 0) == m && ((m->km[0] == KM_BPAD && bfit_onnx_in(L, 2) == s && hides(L, bfit_onnx_in(L, 1))) ||
                                          (m->km[0] == KM_BKEEP && bfit_onnx_in(L, 1) == s && hides(L, bfit_onnx_in(L, 2))));
    if (!ok && !add && !hides(L, bfit_onnx_in(L, 1)) && !hides(L, bfit_onnx_in(L, 2)))
        return bfit_onnx_refuse(L, "%s (here the fill leaves the padding's weights above 0: fill with -inf or a "
                                   "number at most -1e4)", WANT);
    if (!ok && !add && m->km[0] == KM_BKEEP && bfit_onnx_in(L, 0) == m && hides(L, bfit_onnx_in(L, 1)))
        return bfit_onnx_refuse(L, "%s (here the fill is where the mask is 1: it would hide the tokens and keep the "
                                   "padding)", WANT);
    if (!ok || rank != 4 || m->ra[0] != 1 || (d[1] != 1 && d[1] != s->att[1]) || (d[2] != 1 && d[2] != T) ||
        d[3] != T)
        return bfit_onnx_refuse(L, "%s", WANT);
    bfit_onnx_alias(L, s);
    bfit_onnx_out(L, 0)->att_causal |= m->km[2];
    return BFIT_OK;
}

int bfit_onnx_keymask_on(onnx_lower *L, const oval *m, int heads, int64_t T, int *causal)
{
    int64_t d[BFIT_ONNX_MAXD];
    int rank = dims_of(m, d);

    (void)L;
    *causal = m->km[2];
    return m->kind == OV_KEYMASK && m->km[0] == KM_ADD && rank == 3 && m->ra[0] == heads &&
           (d[1] == 1 || d[1] == T) && d[2] == T;
}

/* ConstantOfShape at a shape that holds the batch, which the host cannot
 * make (a tensor a batch long): torch.zeros_like(mask) where a model has
 * an attention mask, KM_ZERO of that shape; or torch.ones(B, T) of a
 * token model (BERT's attention mask when none is given, every token
 * kept), an attention mask of its own, KM_KEEP. 1 (rc set) if so, else 0. */
static int made_mask(onnx_lower *L, int *rc)
{
    oval *s = bfit_onnx_in(L, 0), z = {0};
    const bfit_onnx_attr *v = bfit_onnx_attr_get(L, "value");
    hval *h;
    double f = 0;
    int64_t d[BFIT_ONNX_MAXD];
    int ones;

    if (!s || s->kind != OV_HOST || !(h = s->h) || h->isf || h->nd != 1 || h->n < 2 || h->n > 4 || !h->a[0] ||
        h->b[0])
        return 0;
    if (v && v->t && (v->t->numel != 1 || bfit_onnx_tensor_f64(v->t, &f) != BFIT_OK))
        return 0;
    ones = f == 1 && h->n == 2 && h->a[0] == 1 && L->g->input_dtype == BFIT_I32 && !L->seq_first &&
           h->b[1] == L->g->input.d[0];
    if (!(f == 0 && L->keymask) && !ones)
        return 0;
    for (int k = 1; k < h->n; k++)
        if (h->a[k] || h->b[k] < 1 || h->b[k] > KM_MAXDIM)
            return 0;
    if (h->a[0] > KM_MAXDIM)
        return 0;
    z.kind = OV_KEYMASK, z.km[1] = (int)h->b[h->n - 1], z.ra[0] = h->a[0];
    d[0] = BFIT_ONNX_BATCH;
    for (int k = 1; k < h->n; k++)
        d[k] = h->b[k];
    km_out(L, &z, ones ? KM_KEEP : KM_ZERO, (int)h->n, d);
    *rc = BFIT_OK;
    return 1;
}

/* Whether h is a causal mask of some form: additive, or boolean either way
 * round (its rows may have keys past the queries: bfit_onnx_causal_rows). */
static int causal_any(const hval *h)
{
    return bfit_onnx_causal_rows(h, 1, h->isf) || bfit_onnx_causal_rows(h, 0, 0);
}

/* Whether the node's other input is a causal mask made on the host. */
static int plus_causal(onnx_lower *L, const oval *m)
{
    int k = bfit_onnx_in(L, 0) == m ? 1 : 0;
    oval *o = L->nd->nin == 2 ? bfit_onnx_in(L, k) : NULL;
    hval *h = o && o->kind == OV_HOST ? bfit_onnx_host(L, o, k) : NULL;
    return h && causal_any(h);
}

/* A causal mask made on the host, [1, 1, T, T], expanded over the batch
 * (transformers' _make_causal_mask: mask[None, None].expand(bsz, 1, T, T);
 * 4.42's .expand(bsz, 1, -1, -1) of [T, T + 1]): the same for every
 * sequence, so the mask itself, which broadcasts alike where the scores
 * read it. 1 (rc set) if so, else 0. */
static int causal_over_batch(onnx_lower *L, int *rc)
{
    oval *x = bfit_onnx_in(L, 0);
    hval *h = x && x->kind == OV_HOST ? bfit_onnx_host(L, x, 0) : NULL;

    if (!h || h->nd < 2 || !bfit_onnx_over_batch(L, h, bfit_onnx_in(L, 1)))
        return 0;
    if (!causal_any(h))
        return 0;
    bfit_onnx_alias(L, x);
    *rc = BFIT_OK;
    return 1;
}

int bfit_onnx_lower_keymask(onnx_lower *L, int *rc)
{
    oval *m = NULL, *s = NULL;

    if (bfit_onnx_streq(L->nd->op, "ConstantOfShape"))
        return made_mask(L, rc);
    if (bfit_onnx_streq(L->nd->op, "Expand") && causal_over_batch(L, rc))
        return 1;

    for (int k = 0; k < L->nd->nin; k++) {
        oval *u = bfit_onnx_in(L, k);
        if (u && u->kind == OV_KEYMASK && !m)
            m = u;
        if (u && u->kind == OV_VIEW && u->att[0] == BFIT_ATT_SCORES)
            s = u;
    }
    if (!m || bfit_onnx_streq(L->nd->op, "Shape")) /* a mask's shape is the host's */
        return 0;
    if (m->km[0] == KM_TOK && !bfit_onnx_streq(L->nd->op, "Expand") && !bfit_onnx_streq(L->nd->op, "Cast")) {
        *rc = bfit_onnx_tokmask(L, m, m->km[1]);
        return 1;
    }
    if (s && (bfit_onnx_streq(L->nd->op, "Add") || bfit_onnx_streq(L->nd->op, "Where")))
        *rc = on_scores(L, s, m);
    else if (bfit_onnx_streq(L->nd->op, "Reshape"))
        *rc = reshape(L, m);
    else if (bfit_onnx_streq(L->nd->op, "Unsqueeze"))
        *rc = unsqueeze(L, m);
    else if (bfit_onnx_streq(L->nd->op, "Expand"))
        *rc = expand(L, m);
    else if (bfit_onnx_streq(L->nd->op, "Cast"))
        *rc = cast(L, m);
    else if (bfit_onnx_streq(L->nd->op, "Where") && !fill_at_pad(L))
        *rc = bfit_onnx_refuse(L, "%s%s", WANT, m == bfit_onnx_in(L, 0) && m->km[0] == KM_BKEEP &&
                                                        hides(L, bfit_onnx_in(L, 1))
                                                    ? " (here the fill is where the mask is 1: it would hide the "
                                                      "tokens and keep the padding)"
                                                    : "");
    else if (bfit_onnx_streq(L->nd->op, "Where"))
        *rc = BFIT_OK;
    else if (bfit_onnx_streq(L->nd->op, "Or"))
        *rc = or_causal(L, m);
    else if (bfit_onnx_streq(L->nd->op, "Add") && plus_causal(L, m))
        *rc = bfit_onnx_refuse(L, "the attention_mask added to a causal mask made on the host: transformers 4.42 "
                                  "and later make LLaMA's mask so (and models that copy its code) and write the "
                                  "padding into a copy of it by a slice assignment (a ScatterND), which batchfit "
                                  "does not read; "
                                  "export the model from input_ids alone (no attention_mask): in a causal model "
                                  "padding comes after every real token, and batchfit trains it the same");
    else
        *rc = arith(L, m);
    return 1;
}
