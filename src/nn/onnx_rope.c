/* onnx_rope.c - rotary position embeddings on q and k of a self-attention
 * written out by hand (onnx_mhsa.c's views), as Hugging Face's LLaMA and
 * lit-gpt apply them: q * cos + rotate_half(q) * sin, rotate_half(x) =
 * cat(-x[..., d/2:], x[..., :d/2]), the tables [T, d] (or [1, 1, T, d])
 * constants of the file (buffers cut to the sequence).
 *
 * Exported (opset 17) from q by heads [N, H, T, d]: Mul(q, cos), two
 * Slices of q along the last axis (the halves), Neg of the second, Concat
 * (-x2, x1), Mul by sin, Add. Each node's output is a view of q at a stage
 * (att[0] from BFIT_ATT_ROPE on), lowered in the graph's order as the other
 * views are; each table is checked where its Mul is, against the angles
 * t theta^(-2j/d) (device/rope.h), theta read from it. The Add emits one
 * `rope` layer on q's projection [T, C]: its output is q by heads again.
 * Separate projections only (LLaMA's wq, wk): q and k of one projection to
 * 3C are refused. */
#include "base/err.h"
#include "device/rope.h"
#include "nn/onnx_int.h"

#include <math.h>
#include <stdio.h>

enum { R_COS = BFIT_ATT_ROPE, R_LO, R_HI, R_NEG, R_ROT, R_SIN };

static const char *const WANT =
    "batchfit reads rotary embeddings as q * cos + rotate_half(q) * sin on q and k by heads [N, H, T, d], "
    "rotate_half(x) = torch.cat((-x[..., d // 2:], x[..., :d // 2]), dim=-1), cos and sin tables [T, d] of the "
    "angles t * theta^(-2j/d), constants of the file (Hugging Face's LLaMA, lit-gpt)";

/* Output 0 is view v at a rope stage; theta noted (0: none yet). */
static void rview(onnx_lower *L, const oval *v, int stage, float theta)
{
    bfit_onnx_alias(L, v);
    bfit_onnx_out(L, 0)->att[0] = stage;
    if (theta > 0)
        bfit_onnx_out(L, 0)->att_theta = theta;
}

static int64_t head_dim(const oval *v) { return v->shape.d[1] / v->att[1]; }

/* Input k of the node being lowered: host ints without the batch, *n of
 * them (at most 4) into out; 0 where not. */
static int host_ints(onnx_lower *L, int k, int64_t *out, int *n)
{
    oval *v = k < L->nd->nin && L->nd->in[k].n ? bfit_onnx_in(L, k) : NULL;
    hval *h = v && v->kind == OV_HOST ? bfit_onnx_host(L, v, k) : NULL;
    if (!h || h->isf || h->n < 1 || h->n > 4)
        return 0;
    for (int64_t j = 0; j < h->n; j++) {
        if (h->a[j])
            return 0;
        out[j] = h->b[j];
    }
    *n = (int)h->n;
    return 1;
}

/* The Slice being lowered takes columns [lo, hi) of the last of 4 axes
 * (hi clamped to d). 0 where it is not such a slice. */
static int half_of(onnx_lower *L, int64_t d, int64_t *lo, int64_t *hi)
{
    int64_t s[4], e[4], ax[4], st[4] = {1};
    int n[4] = {0};

    if (L->nd->nin < 4 || !host_ints(L, 1, s, &n[0]) || !host_ints(L, 2, e, &n[1]) || !host_ints(L, 3, ax, &n[2]) ||
        (L->nd->nin > 4 && !host_ints(L, 4, st, &n[3])))
        return 0;
    if (n[0] != 1 || n[1] != 1 || n[2] != 1 || (ax[0] != 3 && ax[0] != -1) || st[0] != 1)
        return 0;
    *lo = s[0] < 0 ? s[0] + d : s[0];
    *hi = e[0] > d ? d : e[0] < 0 ? e[0] + d : e[0];
    return 1;
}

/* Table h (cos, or sin) holds f(angle(t, j mod d/2)) for t < T and j < d
 * within float32's rounding of the angle, shaped [.., T, d] with 1s before.
 * *at: the first position that differs (t d + j), -1 for the shape. */
static int table_ok(const hval *h, int64_t T, int64_t d, float theta, int is_sin, int64_t *at)
{
    *at = -1;
    if (!h || !h->isf || h->n != T * d || h->nd < 2 || h->dim[h->nd - 1] != d || h->dim[h->nd - 2] != T)
        return 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < d; j++) {
            double a = bfit_rope_angle(t, j % (d / 2), d, theta), want = is_sin ? sin(a) : cos(a);
            /* PyTorch's inv_freq may be an ulp or two from ours: the angle's error grows with it */
            if (!(fabs(h->f[t * d + j] - want) <= 2e-6 + 3e-7 * a)) {
                *at = t * d + j;
                return 0;
            }
        }
    return 1;
}

/* The base of table h: from the angle of pair 1 at t = 1, theta^(-2/d),
 * then the first of it rounded to 3 significant digits, to an integer, or
 * as read, whose whole table checks (bases are round numbers: 10,000 in
 * LLaMA 1 and 2, 500,000 in LLaMA 3). 0 where none does. */
static float base_of(const hval *h, int64_t T, int64_t d, int is_sin, int64_t *at)
{
    int64_t half = d / 2;
    double a, th, p, cand[3];

    *at = -1;
    if (!h || !h->isf || h->n != T * d || h->nd < 2)
        return 0;
    if (half < 2 || T < 2) /* one pair turns by t whatever the base */
        return table_ok(h, T, d, 10000.0f, is_sin, at) ? 10000.0f : 0;
    a = is_sin ? asin(h->f[d + 1]) : acos(h->f[d + 1]);
    if (!(a > 0 && a < 1))
        return 0;
    th = pow(a, -(double)d / 2.0);
    p = pow(10.0, floor(log10(th)) - 2);
    cand[0] = nearbyint(th / p) * p, cand[1] = nearbyint(th), cand[2] = th;
    for (int i = 0; i < 3; i++)
        if (cand[i] > 0 && cand[i] < 3e38 && table_ok(h, T, d, (float)cand[i], is_sin, at))
            return (float)cand[i];
    return 0;
}

/* Mul of q by heads (or of rotate_half(q)) by a table: its view with the base read from the table. */
static int by_table(onnx_lower *L, const oval *v, int stage)
{
    int k = bfit_onnx_in(L, 0) == v ? 1 : 0;
    oval *t = bfit_onnx_in(L, k);
    hval *h = t && t->kind == OV_HOST ? bfit_onnx_host(L, t, k) : NULL;
    int64_t T = v->shape.d[0], d = head_dim(v), at;
    float theta;

    if (!h)
        return bfit_onnx_refuse(L, "%s", WANT);
    if (!(theta = base_of(h, T, d, stage == R_SIN, &at))) {
        char where[96] = "its shape, or its angles at token 1";
        if (at >= 0)
            snprintf(where, sizeof where, "its value at token %lld, column %lld", (long long)(at / d),
                     (long long)(at % d));
        return bfit_onnx_refuse(L, "the %s table is not a rotary embedding's of %lld tokens and %lld columns a "
                                   "head, for any base (%s): %s", stage == R_SIN ? "sin" : "cos", (long long)T,
                                (long long)d, where, WANT);
    }
    rview(L, v, stage, theta);
    return BFIT_OK;
}

/* Add(q cos, rotate_half(q) sin): the rope layer on q's projection. */
static int turned(onnx_lower *L, oval *a, oval *b)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_ROPE);
    oval x, *o;
    int rc, heads;

    if (a->att[0] == R_SIN) {
        oval *t = a;
        a = b, b = t;
    }
    if (!a || !b || a->kind != OV_VIEW || b->kind != OV_VIEW || a->att[0] != R_COS || b->att[0] != R_SIN ||
        a->id != b->id || a->att_theta != b->att_theta)
        return bfit_onnx_refuse(L, "%s (q's cos and sin terms added, of one base)", WANT);
    c.units = (int)head_dim(a);
    c.theta = a->att_theta;
    x = *a;
    x.kind = OV_DEVICE;
    x.att[0] = x.att_sep = 0;
    heads = a->att[1];
    if ((rc = bfit_onnx_emit(L, &c, (oval *const[]){&x}, 1, NULL, 0)) != BFIT_OK)
        return rc;
    o = bfit_onnx_out(L, 0);
    {
        int id = o->id;
        bfit_onnx_alias(L, a); /* q by heads again (its view's fields), of the rotated projection */
        o->att[0] = BFIT_ATT_HEADS, o->att[1] = heads, o->id = id;
    }
    return BFIT_OK;
}

int bfit_onnx_rope(onnx_lower *L, oval *v, int *rc)
{
    const bfit_onnx_str op = L->nd->op;
    int64_t d = head_dim(v), lo, hi;

    if (v->att[0] == BFIT_ATT_HEADS) { /* a start: Mul by a table, or a Slice of a half */
        oval *t = bfit_onnx_in(L, bfit_onnx_in(L, 0) == v ? 1 : 0);
        double one;
        int mul = bfit_onnx_streq(op, "Mul") && t && t->kind == OV_HOST && !bfit_onnx_scalar(L, t->name, &one);
        if (!mul && !bfit_onnx_streq(op, "Slice"))
            return 0;
        if (!v->att_sep) /* a head's d is then a third of the view's columns over H */
            *rc = bfit_onnx_refuse(L, "rotary embeddings (or another %s of q or k by heads) on q and k of one "
                                      "projection to 3C: batchfit reads them on separate projections (LLaMA's wq, "
                                      "wk, wv)", mul ? "product" : "slice");
        else if (mul)
            *rc = by_table(L, v, R_COS);
        else if (half_of(L, d, &lo, &hi) && ((lo == 0 && hi == d / 2) || (lo == d / 2 && hi == d)))
            rview(L, v, lo ? R_HI : R_LO, 0), *rc = BFIT_OK;
        else
            *rc = bfit_onnx_refuse(L, "%s (a Slice of q or k by heads takes one half of the last axis)", WANT);
        return 1;
    }
    if (v->att[0] == R_HI && bfit_onnx_streq(op, "Neg"))
        rview(L, v, R_NEG, 0), *rc = BFIT_OK;
    else if (v->att[0] == R_NEG && bfit_onnx_streq(op, "Concat") && L->nd->nin == 2) {
        oval *x1 = bfit_onnx_in(L, 1);
        int64_t axis = 0;
        if ((*rc = bfit_onnx_attr_int(L, "axis", 0, &axis)) == BFIT_OK &&
            (bfit_onnx_in(L, 0) != v || !x1 || x1->kind != OV_VIEW || x1->att[0] != R_LO || x1->id != v->id ||
             (axis != -1 && axis != 3)))
            *rc = bfit_onnx_refuse(L, "%s (rotate_half's (-x2, x1) along the last axis)", WANT);
        else if (*rc == BFIT_OK)
            rview(L, v, R_ROT, 0);
    } else if (v->att[0] == R_ROT && bfit_onnx_streq(op, "Mul"))
        *rc = by_table(L, v, R_SIN);
    else if ((v->att[0] == R_COS || v->att[0] == R_SIN) && bfit_onnx_streq(op, "Add") && L->nd->nin == 2)
        *rc = turned(L, bfit_onnx_in(L, 0), bfit_onnx_in(L, 1));
    else
        *rc = bfit_onnx_refuse(L, "%s", WANT);
    return 1;
}
