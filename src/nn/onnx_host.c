/* onnx_host.c - integer shape arithmetic on the host: what an export with a
 * dynamic batch computes from Shape to size its Reshapes and Expands, and
 * what PyTorch's F.pad export computes to give Pad its pads list (Shape,
 * Gather, Unsqueeze, Squeeze, Concat, Reshape, Cast, Add, Sub, Mul, Div,
 * Slice (negative steps too), ConstantOfShape, Equal, Where, Expand, and
 * Transpose of integers, on host values; Pow and Sqrt of floats: a
 * hand-written attention's k.size(-1) ** 0.5, PyTorch 2's export of
 * scaled_dot_product_attention; MatMul, Cos and Sin of floats: rotary
 * embeddings' tables made in forward).
 *
 * The batch is free, so an integer is kept as a * m + b for the
 * micro-batch m, and every result holds for every m at once: Shape of a
 * device tensor gives m for its first dimension. What is not affine in m (m
 * times m, m divided unevenly, a comparison whose answer depends on m) is
 * refused at load, naming the node. Floats (constants) are plain numbers. */
#include "base/err.h"
#include "base/values.h"
#include "device/half.h"
#include "nn/onnx_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

hval *bfit_onnx_hval_new(onnx_lower *L, int isf, int nd, const int64_t *dim)
{
    hval *h;
    int64_t n = 1;
    /* the product of the non-zero dimensions is bounded, so that every
     * product of some of them (strides, outer and inner counts) is too */
    for (int d = 0; d < nd && n <= BFIT_ONNX_MAXHOST; d++) {
        if (dim[d] < 0) {
            bfit_onnx_refuse(L, "a host value with the dimension %lld", (long long)dim[d]);
            return NULL;
        }
        if (dim[d] > BFIT_ONNX_MAXHOST)
            n = BFIT_ONNX_MAXHOST + 1;
        else if (dim[d] > 0)
            n *= dim[d];
    }
    for (int d = 0; d < nd && n <= BFIT_ONNX_MAXHOST; d++)
        if (dim[d] == 0)
            n = 0;
    if (n > BFIT_ONNX_MAXHOST || nd > BFIT_ONNX_MAXD) {
        char why[128] = "";
        if (L->g->input_dtype == BFIT_I32)
            snprintf(why, sizeof why, " (a token model's masks grow with its length, %d tokens here: a shorter "
                     "--seq makes them smaller)", L->g->input.d[0]);
        L->attn_miss = 0; /* the size is the cause, not a Softmax the attention matcher left */
        bfit_onnx_refuse(L, "a host value of %lld elements in %d dimensions is more than batchfit computes "
                            "on the host (%d)%s", (long long)n, nd, BFIT_ONNX_MAXHOST, why);
        return NULL;
    }
    if (L->host_total + n > BFIT_ONNX_HOSTTOTAL) {
        bfit_onnx_refuse(L, "the host values so far and this one hold more than %d elements, more than batchfit "
                            "computes on the host for one model", BFIT_ONNX_HOSTTOTAL);
        return NULL;
    }
    L->host_total += n;
    if (L->nhv == L->caphv) {
        int cap = L->caphv ? 2 * L->caphv : 64;
        hval **p = realloc(L->hv, sizeof *p * (size_t)cap);
        if (!p)
            goto oom;
        L->hv = p;
        L->caphv = cap;
    }
    if (!(h = calloc(1, sizeof *h)))
        goto oom;
    L->hv[L->nhv++] = h;
    h->isf = isf;
    h->nd = nd;
    memcpy(h->dim, dim, sizeof *dim * (size_t)nd);
    h->n = n;
    if (isf ? !(h->f = calloc((size_t)n + 1, sizeof *h->f))
            : !(h->a = calloc((size_t)n + 1, sizeof *h->a)) || !(h->b = calloc((size_t)n + 1, sizeof *h->b)))
        goto oom;
    return h;
oom:
    bfit_fail(BFIT_ENOMEM, "onnx: out of host memory");
    return NULL;
}

hval *bfit_onnx_host(onnx_lower *L, oval *v, int k)
{
    const bfit_onnx_tensor *t;
    hval *h;
    int isf;

    if (v && v->h)
        return v->h;
    if (!v || v->kind != OV_HOST || !v->t) {
        bfit_onnx_refuse(L, "input %d must be a constant or shape arithmetic (batchfit computes this op on the "
                            "host only)", k + 1);
        return NULL;
    }
    t = v->t;
    isf = t->dtype == BFIT_ONNX_FLOAT || t->dtype == BFIT_ONNX_DOUBLE || t->dtype == BFIT_ONNX_FLOAT16 ||
          t->dtype == BFIT_ONNX_BFLOAT16;
    if (!(h = bfit_onnx_hval_new(L, isf, t->ndim, t->dim)))
        return NULL;
    if (isf) { /* as doubles: a double's Cast to float16 rounds once, from it */
        if (bfit_onnx_tensor_f64(t, h->f) != BFIT_OK)
            return NULL;
    } else if (bfit_onnx_tensor_i64(t, h->b) != BFIT_OK) {
        return NULL;
    }
    v->h = h;
    return h;
}

int bfit_onnx_affine_is(const onnx_lower *L, int64_t a, int64_t b, int64_t wa, int64_t wb)
{
    int64_t c;
    if (a == wa && b == wb)
        return 1;
    return L->fixed_batch > 0 && a == 0 && wa != 0 && !__builtin_mul_overflow(wa, L->fixed_batch, &c) &&
           !__builtin_add_overflow(c, wb, &c) && b == c;
}

void bfit_onnx_set_rank(const onnx_lower *L, oval *v, const bfit_shape *s)
{
    v->rank = 1 + s->nd;
    v->ra[0] = 1, v->rb[0] = 0;
    for (int d = 0; d < s->nd; d++)
        v->ra[d + 1] = 0, v->rb[d + 1] = s->d[d];
    if (L->seq_first && s->nd == 2) /* tokens [T, batch, C] */
        v->ra[0] = 0, v->rb[0] = s->d[0], v->ra[1] = 1, v->rb[1] = 0;
    v->cl[0] = v->cl[1] = 0;
}

void bfit_onnx_set_dims(oval *v, int rank, const int64_t *dims)
{
    v->rank = rank;
    for (int d = 0; d < rank; d++)
        v->ra[d] = dims[d] == BFIT_ONNX_BATCH, v->rb[d] = dims[d] == BFIT_ONNX_BATCH ? 0 : dims[d];
}

void bfit_onnx_set_cl(oval *v, int h, int w)
{
    v->rank = 4;
    v->ra[0] = 1, v->rb[0] = 0;
    v->ra[1] = v->ra[2] = v->ra[3] = 0;
    v->rb[1] = h, v->rb[2] = w, v->rb[3] = v->shape.d[1];
    v->cl[0] = h, v->cl[1] = w;
}

/* Output 0 is h. */
static int put_out(onnx_lower *L, hval *h)
{
    oval *o = bfit_onnx_out(L, 0);
    o->kind = OV_HOST;
    o->h = h;
    o->t = NULL;
    o->init = -1;
    return BFIT_OK;
}

/* Copy element i of s into element j of d (same kind). */
static void take(hval *d, int64_t j, const hval *s, int64_t i)
{
    if (d->isf)
        d->f[j] = s->isf ? s->f[i] : (double)s->b[i];
    else
        d->a[j] = s->a[i], d->b[j] = s->b[i];
}

/* An integer that does not depend on m, or refuse. */
static int constant_int(onnx_lower *L, const hval *h, int64_t i, int64_t *out)
{
    *out = 0;
    if (h->isf || h->a[i])
        return bfit_onnx_refuse(L, "this needs a number that does not depend on the batch size");
    *out = h->b[i];
    return BFIT_OK;
}

/* A host input's values as plain integers (all of them constant). */
static int ints_of(onnx_lower *L, int k, int64_t *out, int max, int *n)
{
    hval *h = bfit_onnx_host(L, bfit_onnx_in(L, k), k);
    int rc;
    if (!h)
        return BFIT_EINVAL;
    if (h->n > max)
        return bfit_onnx_refuse(L, "input %d has %lld values, at most %d expected", k + 1, (long long)h->n, max);
    for (int64_t i = 0; i < h->n; i++)
        if ((rc = constant_int(L, h, i, &out[i])) != BFIT_OK)
            return rc;
    *n = (int)h->n;
    return BFIT_OK;
}

static int64_t norm_axis(int64_t a, int nd) { return a < 0 ? a + nd : a; }

/* ---- elementwise with broadcasting ------------------------------------------ */

enum { E_ADD, E_SUB, E_MUL, E_DIV, E_EQ, E_POW, E_LT, E_GT }; /* E_EQ, E_LT, E_GT: booleans out */

static int overflow(onnx_lower *L) { return bfit_onnx_refuse(L, "shape arithmetic beyond 64-bit integers"); }

/* out = x op y for one element (integers affine in m). */
static int affine(onnx_lower *L, int op, int64_t xa, int64_t xb, int64_t ya, int64_t yb, int64_t *oa, int64_t *ob)
{
    int64_t p, q;
    switch (op) {
    case E_ADD:
        return __builtin_add_overflow(xa, ya, oa) || __builtin_add_overflow(xb, yb, ob) ? overflow(L) : BFIT_OK;
    case E_SUB:
        return __builtin_sub_overflow(xa, ya, oa) || __builtin_sub_overflow(xb, yb, ob) ? overflow(L) : BFIT_OK;
    case E_MUL:
        if (xa && ya)
            return bfit_onnx_refuse(L, "the batch size times itself is not shape arithmetic batchfit follows");
        if (__builtin_mul_overflow(xa, yb, &p) || __builtin_mul_overflow(ya, xb, &q) ||
            __builtin_add_overflow(p, q, oa) || __builtin_mul_overflow(xb, yb, ob))
            return overflow(L);
        return BFIT_OK;
    case E_DIV:
        if (ya || !yb)
            return bfit_onnx_refuse(L, "a division by the batch size (or by 0)");
        if (yb == -1 && (xa == INT64_MIN || xb == INT64_MIN))
            return overflow(L);
        if (xa % yb)
            return bfit_onnx_refuse(L, "the batch size times %lld is divided by %lld, which it does not divide for "
                                       "every batch size", (long long)xa, (long long)yb);
        *oa = xa / yb, *ob = xb / yb; /* C truncates toward 0, as ONNX's integer Div */
        if (xa && xb % yb)
            return bfit_onnx_refuse(L, "an uneven division of a size that depends on the batch");
        return BFIT_OK;
    case E_LT:
    case E_GT: /* an order that holds for every m or for none (xa == ya), else it depends */
        if (xa != ya)
            return bfit_onnx_refuse(L, "a comparison whose answer depends on the batch size");
        *oa = 0, *ob = op == E_LT ? xb < yb : xb > yb;
        return BFIT_OK;
    default: /* E_EQ: m >= 1; equal for every m, for none, or it depends */
        *oa = 0;
        if (xa == ya) {
            *ob = xb == yb;
            return BFIT_OK;
        }
        if (__builtin_sub_overflow(yb, xb, &p) || __builtin_sub_overflow(xa, ya, &q) || (p == INT64_MIN && q == -1))
            return overflow(L);
        if (p % q == 0 && p / q >= 1)
            return bfit_onnx_refuse(L, "a comparison whose answer depends on the batch size");
        *ob = 0;
        return BFIT_OK;
    }
}

static double fop(int op, double x, double y)
{
    switch (op) {
    case E_ADD: return x + y;
    case E_SUB: return x - y;
    case E_MUL: return x * y;
    case E_DIV: return x / y;
    case E_POW: return pow(x, y);
    default: return x == y;
    }
}

/* The broadcast shape of x and y (numpy's rules), or refuse. */
static int bshape(onnx_lower *L, const hval *x, const hval *y, int *nd, int64_t *dim)
{
    *nd = x->nd > y->nd ? x->nd : y->nd;
    for (int d = 0; d < *nd; d++) {
        int64_t a = d - (*nd - x->nd) >= 0 ? x->dim[d - (*nd - x->nd)] : 1;
        int64_t b = d - (*nd - y->nd) >= 0 ? y->dim[d - (*nd - y->nd)] : 1;
        if (a != b && a != 1 && b != 1)
            return bfit_onnx_refuse(L, "shapes that do not broadcast (%lld against %lld)", (long long)a, (long long)b);
        dim[d] = a == 1 ? b : a;
    }
    return BFIT_OK;
}

/* The index into s of element j of an output of shape (nd, dim) it broadcasts to. */
static int64_t bindex(const hval *s, int nd, const int64_t *dim, int64_t j)
{
    int64_t idx = 0, stride = 1;
    for (int d = nd - 1; d >= 0; d--) {
        int64_t c = j % dim[d];
        int sd = d - (nd - s->nd);
        j /= dim[d];
        if (sd >= 0) {
            idx += (s->dim[sd] == 1 ? 0 : c) * stride;
            stride *= s->dim[sd];
        }
    }
    return idx;
}

static int elementwise(onnx_lower *L, int op)
{
    hval *x = bfit_onnx_host(L, bfit_onnx_in(L, 0), 0), *y = x ? bfit_onnx_host(L, bfit_onnx_in(L, 1), 1) : NULL, *o;
    int64_t dim[BFIT_ONNX_MAXD];
    int nd, isf, rc;

    if (!x || !y)
        return BFIT_EINVAL;
    if ((rc = bshape(L, x, y, &nd, dim)) != BFIT_OK)
        return rc;
    if (op == E_POW && !x->isf && !y->isf)
        return bfit_onnx_refuse(L, "a Pow of integers is not shape arithmetic batchfit follows (floats: it is)");
    isf = (x->isf || y->isf) && op != E_EQ && op != E_LT && op != E_GT;
    if (!(o = bfit_onnx_hval_new(L, isf, nd, dim)))
        return BFIT_EINVAL;
    for (int64_t j = 0; j < o->n; j++) {
        int64_t i = bindex(x, nd, dim, j), k = bindex(y, nd, dim, j);
        if (x->isf || y->isf) {
            double a = x->isf ? x->f[i] : (double)x->b[i], b = y->isf ? y->f[k] : (double)y->b[k];
            if ((!x->isf && x->a[i]) || (!y->isf && y->a[k]))
                return bfit_onnx_refuse(L, "arithmetic of a batch-dependent integer with a float");
            if (isf)
                o->f[j] = fop(op, a, b);
            else
                o->b[j] = op == E_LT ? a < b : op == E_GT ? a > b : a == b;
        } else if ((rc = affine(L, op, x->a[i], x->b[i], y->a[k], y->b[k], &o->a[j], &o->b[j])) != BFIT_OK) {
            return rc;
        }
    }
    return put_out(L, o);
}

/* ---- shapes ------------------------------------------------------------------ */

static int shape(onnx_lower *L)
{
    oval *x = bfit_onnx_in(L, 0);
    int64_t start, end, n;
    hval *h;
    int rc;

    if (!x || (x->kind != OV_DEVICE && x->kind != OV_VIEW && x->kind != OV_HOST && x->kind != OV_KEYMASK &&
               x->kind != OV_PADID && x->kind != OV_POOL))
        return bfit_onnx_refuse(L, "the input's shape is not known");
    if ((rc = bfit_onnx_attr_int(L, "start", 0, &start)) != BFIT_OK || (rc = bfit_onnx_attr_int(L, "end", 64, &end)))
        return rc;
    if (x->kind == OV_HOST) { /* a constant's shape */
        hval *v = bfit_onnx_host(L, x, 0);
        if (!v)
            return BFIT_EINVAL;
        x->rank = v->nd;
        for (int d = 0; d < v->nd; d++)
            x->ra[d] = 0, x->rb[d] = v->dim[d];
    }
    start = norm_axis(start, x->rank), end = end > x->rank ? x->rank : norm_axis(end, x->rank);
    start = start < 0 ? 0 : start > x->rank ? x->rank : start, end = end < 0 ? 0 : end;
    n = end - start > 0 ? end - start : 0;
    if (!(h = bfit_onnx_hval_new(L, 0, 1, &n)))
        return BFIT_EINVAL;
    for (int64_t d = 0; d < n; d++)
        h->a[d] = x->ra[start + d], h->b[d] = x->rb[start + d];
    return put_out(L, h);
}

static int gather(onnx_lower *L)
{
    hval *x = bfit_onnx_host(L, bfit_onnx_in(L, 0), 0), *ix = x ? bfit_onnx_host(L, bfit_onnx_in(L, 1), 1) : NULL, *o;
    int64_t axis, dim[BFIT_ONNX_MAXD], outer = 1, inner = 1;
    int nd = 0, rc;

    if (!x || !ix || (rc = bfit_onnx_attr_int(L, "axis", 0, &axis)) != BFIT_OK)
        return BFIT_EINVAL;
    axis = norm_axis(axis, x->nd);
    if (axis < 0 || axis >= x->nd || x->nd + ix->nd - 1 > BFIT_ONNX_MAXD)
        return bfit_onnx_refuse(L, "axis %lld is out of range", (long long)axis);
    for (int d = 0; d < axis; d++)
        dim[nd++] = x->dim[d], outer *= x->dim[d];
    for (int d = 0; d < ix->nd; d++)
        dim[nd++] = ix->dim[d];
    for (int d = (int)axis + 1; d < x->nd; d++)
        dim[nd++] = x->dim[d], inner *= x->dim[d];
    if (!(o = bfit_onnx_hval_new(L, x->isf, nd, dim)))
        return BFIT_EINVAL;
    for (int64_t p = 0, j = 0; p < outer; p++)
        for (int64_t q = 0; q < ix->n; q++) {
            int64_t i = 0;
            if ((rc = constant_int(L, ix, q, &i)) != BFIT_OK)
                return rc;
            i = i < 0 ? i + x->dim[axis] : i;
            if (i < 0 || i >= x->dim[axis])
                return bfit_onnx_refuse(L, "index %lld is out of range", (long long)i);
            for (int64_t r = 0; r < inner; r++)
                take(o, j++, x, (p * x->dim[axis] + i) * inner + r);
        }
    return put_out(L, o);
}

/* A copy of x with the shape (nd, dim) (same count). */
static int reshaped(onnx_lower *L, const hval *x, int nd, const int64_t *dim)
{
    hval *o = bfit_onnx_hval_new(L, x->isf, nd, dim);
    if (!o)
        return BFIT_EINVAL;
    if (o->n != x->n)
        return bfit_onnx_refuse(L, "%lld values cannot take a shape of %lld", (long long)x->n, (long long)o->n);
    for (int64_t j = 0; j < o->n; j++)
        take(o, j, x, j);
    return put_out(L, o);
}

/* Unsqueeze (squeeze 0) or Squeeze (1): axes from input 1 (opset 13) or the attribute. */
static int squeeze(onnx_lower *L, int sq)
{
    hval *x = bfit_onnx_host(L, bfit_onnx_in(L, 0), 0);
    int64_t axes[BFIT_ONNX_MAXATTR], dim[BFIT_ONNX_MAXD];
    int na = 0, nd, rc;
    unsigned mark = 0;

    if (!x)
        return BFIT_EINVAL;
    if (bfit_onnx_in(L, 1))
        rc = ints_of(L, 1, axes, BFIT_ONNX_MAXD, &na);
    else
        rc = bfit_onnx_attr_ints(L, "axes", axes, 0, &na);
    if (rc != BFIT_OK)
        return rc;
    nd = sq ? x->nd : x->nd + na;
    if (nd > BFIT_ONNX_MAXD)
        return bfit_onnx_refuse(L, "%d axes inserted into %d dimensions make %d: at most %d are supported", na, x->nd,
                                nd, BFIT_ONNX_MAXD);
    for (int i = 0; i < na; i++) {
        int64_t a = norm_axis(axes[i], nd);
        if (a < 0 || a >= nd || (sq && x->dim[a] != 1))
            return bfit_onnx_refuse(L, "axis %lld cannot be %s", (long long)axes[i], sq ? "squeezed" : "inserted");
        mark |= 1u << a;
    }
    if (sq && !na)
        for (int d = 0; d < x->nd; d++)
            mark |= (unsigned)(x->dim[d] == 1) << d;
    na = 0;
    if (sq) {
        for (int d = 0; d < x->nd; d++)
            if (!(mark >> d & 1))
                dim[na++] = x->dim[d];
    } else {
        for (int d = 0, k = 0; d < nd; d++)
            dim[na++] = mark >> d & 1 ? 1 : x->dim[k++];
    }
    return reshaped(L, x, na, dim);
}

static int concat(onnx_lower *L)
{
    hval *in[BFIT_ONNX_MAXIO], *o;
    int64_t axis, dim[BFIT_ONNX_MAXD], outer = 1, inner = 1, j = 0;
    int rc;

    if (L->nd->nin < 1 || L->nd->nin > BFIT_ONNX_MAXIO || (rc = bfit_onnx_attr_int(L, "axis", 0, &axis)) != BFIT_OK)
        return bfit_onnx_refuse(L, "1 to %d inputs expected", BFIT_ONNX_MAXIO);
    for (int k = 0; k < L->nd->nin; k++)
        if (!(in[k] = bfit_onnx_host(L, bfit_onnx_in(L, k), k)))
            return BFIT_EINVAL;
    axis = norm_axis(axis, in[0]->nd);
    if (axis < 0 || axis >= in[0]->nd)
        return bfit_onnx_refuse(L, "axis %lld is out of range", (long long)axis);
    memcpy(dim, in[0]->dim, sizeof dim);
    dim[axis] = 0;
    for (int k = 0; k < L->nd->nin; k++) {
        if (in[k]->nd != in[0]->nd || in[k]->isf != in[0]->isf)
            return bfit_onnx_refuse(L, "inputs of different ranks or types");
        dim[axis] += in[k]->dim[axis];
    }
    for (int d = 0; d < axis; d++)
        outer *= dim[d];
    for (int d = (int)axis + 1; d < in[0]->nd; d++)
        inner *= dim[d];
    if (!(o = bfit_onnx_hval_new(L, in[0]->isf, in[0]->nd, dim)))
        return BFIT_EINVAL;
    for (int64_t p = 0; p < outer; p++)
        for (int k = 0; k < L->nd->nin; k++)
            for (int64_t r = 0; r < in[k]->dim[axis] * inner; r++)
                take(o, j++, in[k], p * in[k]->dim[axis] * inner + r);
    return put_out(L, o);
}

/* A Reshape's target for a tensor of the given dims (0 copies, -1 infers). */
static int target(onnx_lower *L, const int64_t *from, int nfrom, int64_t *dim, int *nd)
{
    int64_t t[BFIT_ONNX_MAXD], known = 1, total = 1;
    int infer = -1, allow;
    int64_t az;
    int rc;

    if ((rc = ints_of(L, 1, t, BFIT_ONNX_MAXD, nd)) != BFIT_OK || (rc = bfit_onnx_attr_int(L, "allowzero", 0, &az)))
        return rc;
    allow = az != 0;
    for (int d = 0; d < nfrom; d++)
        total *= from[d];
    for (int d = 0; d < *nd; d++) {
        dim[d] = t[d] == 0 && !allow ? (d < nfrom ? from[d] : 0) : t[d];
        if (dim[d] == -1 && infer < 0)
            infer = d;
        else if (dim[d] < 0)
            return bfit_onnx_refuse(L, "the target has the dimension %lld", (long long)dim[d]);
        else if (__builtin_mul_overflow(known, dim[d], &known))
            return overflow(L);
    }
    if (infer >= 0)
        dim[infer] = known ? total / known : 0;
    return BFIT_OK;
}

static int reshape_host(onnx_lower *L)
{
    hval *x = bfit_onnx_host(L, bfit_onnx_in(L, 0), 0);
    int64_t dim[BFIT_ONNX_MAXD];
    int nd, rc;
    if (!x || (rc = target(L, x->dim, x->nd, dim, &nd)) != BFIT_OK)
        return x ? rc : BFIT_EINVAL;
    return reshaped(L, x, nd, dim);
}

/* The width in bits of an ONNX integer type narrower than 64, 0 for the
 * rest; *sgn: signed. */
static int narrow_bits(int64_t to, int *sgn)
{
    *sgn = to == BFIT_ONNX_INT8 || to == BFIT_ONNX_INT16 || to == BFIT_ONNX_INT32 || to == BFIT_ONNX_INT64;
    return to == BFIT_ONNX_INT8 || to == BFIT_ONNX_UINT8     ? 8
           : to == BFIT_ONNX_INT16 || to == BFIT_ONNX_UINT16 ? 16
           : to == BFIT_ONNX_INT32 || to == BFIT_ONNX_UINT32 ? 32
                                                             : 0;
}

/* v in a type of `bits` bits: ONNX's integer-to-integer rule, the higher
 * bits dropped and the rest read in two's complement when signed (numpy's
 * astype: 260 to int8 is 4, -1 to uint8 255). */
static int64_t wrap(int64_t v, int bits, int sgn)
{
    uint64_t u = (uint64_t)v & ((UINT64_C(1) << bits) - 1);
    return sgn && u >> (bits - 1) ? (int64_t)u - (int64_t)(UINT64_C(1) << bits) : (int64_t)u;
}

/* An integer of x (a * m + b, m a micro-batch of 1 to BFIT_BATCH_MAX) cast
 * to `to`: wrapped, and refused where the wrap would depend on m (it is not
 * affine then) or where a uint64 would be beyond the host's int64. */
static int cast_int(onnx_lower *L, int64_t to, int64_t a, int64_t b, int64_t *oa, int64_t *ob)
{
    int sgn, bits = narrow_bits(to, &sgn);
    int64_t lo, hi; /* at m = 1 and the largest m: an affine value's extremes */
    int over = __builtin_add_overflow(b, a, &lo) || __builtin_mul_overflow(a, (int64_t)BFIT_BATCH_MAX, &hi) ||
               __builtin_add_overflow(hi, b, &hi);

    *oa = a, *ob = b;
    if (a && (over || (bits && (wrap(lo, bits, sgn) != lo || wrap(hi, bits, sgn) != hi)) ||
              (to == BFIT_ONNX_UINT64 && (lo < 0 || hi < 0))))
        return bfit_onnx_refuse(L, "the batch-dependent integer %lld * batch + %lld cast to the ONNX type %lld "
                                   "(%s%d) wraps around for some micro-batches (1 to %d): batchfit computes shapes "
                                   "that hold for every batch",
                                (long long)a, (long long)b, (long long)to, sgn ? "int" : "uint", bits ? bits : 64,
                                BFIT_BATCH_MAX);
    if (!a && to == BFIT_ONNX_UINT64 && b < 0)
        return bfit_onnx_refuse(L, "%lld cast to uint64 is %llu, beyond the host's 64-bit signed integers",
                                (long long)b, (unsigned long long)b);
    if (bits)
        *ob = wrap(b, bits, sgn);
    return BFIT_OK;
}

/* An integer a * m + b cast to bool: nonzero. True for every micro-batch
 * when no m from 1 to BFIT_BATCH_MAX makes it 0; else it depends on m. */
static int cast_bool(onnx_lower *L, int64_t a, int64_t b, int64_t *ob)
{
    /* zero at m = -b / a, when a divides b (INT64_MIN / -1 would trap) */
    int64_t q = a && !(a == -1 && b == INT64_MIN) && b % a == 0 ? b / a : 0;

    *ob = a || b;
    if (q <= -1 && q >= -(int64_t)BFIT_BATCH_MAX)
        return bfit_onnx_refuse(L, "the batch-dependent integer %lld * batch + %lld cast to bool is false at the "
                                   "micro-batch %lld and true at the others: batchfit computes shapes that hold for "
                                   "every batch",
                                (long long)a, (long long)b, (long long)-q);
    return BFIT_OK;
}

/* A float of x cast to an integer type: truncated toward zero; out of the
 * type's range (or NaN) ONNX leaves it undefined, so it is refused. */
static int cast_float_int(onnx_lower *L, int64_t to, double f, int64_t *ob)
{
    int sgn, bits = narrow_bits(to, &sgn);
    double t = trunc(f), lo = 0, hi = 18446744073709551616.0; /* [lo, hi): uint64 */

    if (bits)
        lo = sgn ? -ldexp(1, bits - 1) : 0, hi = ldexp(1, sgn ? bits - 1 : bits);
    else if (to == BFIT_ONNX_INT64)
        lo = -ldexp(1, 63), hi = ldexp(1, 63);
    if (to == BFIT_ONNX_UINT64)
        hi = ldexp(1, 63); /* the host's integers are int64 */
    if (!(t >= lo && t < hi))
        return bfit_onnx_refuse(L, "the float %g cast to the ONNX type %lld is out of its range, which ONNX leaves "
                                   "undefined", f, (long long)to);
    *ob = (int64_t)t;
    return BFIT_OK;
}

/* v rounded to a binary float of `frac` fraction bits, least normal
 * exponent emin and largest finite max: nearest, ties to even (the default
 * rounding mode's nearbyint), once from the double; past max, infinity. */
static double round_bits(double v, int frac, int emin, double max)
{
    int e;
    double r;

    if (!isfinite(v) || v == 0)
        return v;
    e = ilogb(v);
    e = (e < emin ? emin : e) - frac; /* the exponent of v's last place there (subnormals: emin's) */
    r = ldexp(nearbyint(ldexp(v, -e)), e);
    return fabs(r) > max ? copysign(INFINITY, v) : r;
}

/* v cast to a float type: rounded to it once (nearest, ties to even; past
 * its range, infinity), as ONNX's Cast does. Not through float: a double
 * just past a float16 tie (1026.5 + 2^-30) would become the tie there, then
 * round to even (1026, not 1027); alike int64 to bfloat16. */
static double round_to(int64_t to, double v)
{
    if (to == BFIT_ONNX_FLOAT)
        return (double)(float)v;
    if (to == BFIT_ONNX_FLOAT16)
        return round_bits(v, 10, -14, 65504.0);
    if (to == BFIT_ONNX_BFLOAT16)
        return round_bits(v, 7, -126, ldexp(255, 120)); /* (2 - 2^-7) 2^127 */
    return v;
}

/* Cast between integer types keeps a * m + b (wrapped into narrower
 * types); to or from float, constants only. */
/* f of floats, elementwise: Sqrt (PyTorch 2's scaled_dot_product_attention
 * export takes the square root of its 1/sqrt(d) scale), Cos and Sin (the
 * tables of rotary embeddings made in forward, Hugging Face's
 * LlamaRotaryEmbedding); of integers they are refused. */
static int unary(onnx_lower *L, double (*f)(double), const char *what)
{
    hval *x = bfit_onnx_host(L, bfit_onnx_in(L, 0), 0), *o;
    if (!x)
        return BFIT_EINVAL;
    if (!x->isf)
        return bfit_onnx_refuse(L, "a %s of integers is not shape arithmetic batchfit follows (floats: it is)", what);
    if (!(o = bfit_onnx_hval_new(L, 1, x->nd, x->dim)))
        return BFIT_EINVAL;
    for (int64_t i = 0; i < x->n; i++)
        o->f[i] = f(x->f[i]);
    return put_out(L, o);
}

static int sqrt_host(onnx_lower *L) { return unary(L, sqrt, "Sqrt"); }
static int cos_host(onnx_lower *L) { return unary(L, cos, "Cos"); }
static int sin_host(onnx_lower *L) { return unary(L, sin, "Sin"); }

#define HOST_MATMUL_MACS (1 << 26) /* multiply-adds a host MatMul may take: tables, not a model */

/* MatMul of floats [.., M, K] by [.., K, N], the dimensions before the
 * last two equal or 1 (broadcast): Hugging Face's rotary frequencies
 * inv_freq[None, :, None] @ position_ids[:, None, :], in double. */
static int matmul_host(onnx_lower *L)
{
    hval *x = bfit_onnx_host(L, bfit_onnx_in(L, 0), 0), *y = x ? bfit_onnx_host(L, bfit_onnx_in(L, 1), 1) : NULL, *o;
    int64_t dim[BFIT_ONNX_MAXD], M, K, N, batch = 1;
    int nd;

    if (!x || !y)
        return BFIT_EINVAL;
    nd = x->nd;
    if (!x->isf || !y->isf || nd < 2 || y->nd != nd || x->dim[nd - 1] != y->dim[nd - 2])
        return bfit_onnx_refuse(L, "batchfit multiplies host floats [.., M, K] by [.., K, N] of one rank only");
    M = x->dim[nd - 2], K = x->dim[nd - 1], N = y->dim[nd - 1];
    for (int d = 0; d < nd - 2; d++) {
        if (x->dim[d] != y->dim[d] && x->dim[d] != 1 && y->dim[d] != 1)
            return bfit_onnx_refuse(L, "the dimensions before the last two must be equal or 1");
        dim[d] = x->dim[d] > y->dim[d] ? x->dim[d] : y->dim[d];
        batch *= dim[d];
    }
    dim[nd - 2] = M, dim[nd - 1] = N;
    if ((double)batch * (double)M * (double)N * (double)K > HOST_MATMUL_MACS)
        return bfit_onnx_refuse(L, "a host MatMul of %g multiply-adds: more than batchfit computes at load",
                                (double)batch * (double)M * (double)N * (double)K);
    if (!(o = bfit_onnx_hval_new(L, 1, nd, dim)))
        return BFIT_EINVAL;
    for (int64_t b = 0; b < batch; b++) {
        int64_t xb = 0, yb = 0, rest = b, sx = 1, sy = 1;
        for (int d = nd - 3; d >= 0; d--) { /* the batch index b into each input's, broadcast */
            int64_t i = rest % dim[d];
            rest /= dim[d];
            xb += (x->dim[d] == 1 ? 0 : i) * sx, yb += (y->dim[d] == 1 ? 0 : i) * sy;
            sx *= x->dim[d], sy *= y->dim[d];
        }
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = 0;
                for (int64_t k = 0; k < K; k++)
                    acc += x->f[(xb * M + i) * K + k] * y->f[(yb * K + k) * N + j];
                o->f[(b * M + i) * N + j] = acc;
            }
    }
    return put_out(L, o);
}

static int cast(onnx_lower *L)
{
    hval *x = bfit_onnx_host(L, bfit_onnx_in(L, 0), 0), *o;
    int64_t to;
    int isf, rc = BFIT_OK;
    if (!x || (rc = bfit_onnx_attr_int(L, "to", 1, &to)) != BFIT_OK)
        return BFIT_EINVAL;
    /* the 8-bit floats (opset 19), 4-bit types (21) and the rest would be
     * taken for integers below, their rounding and ranges lost */
    if (to < BFIT_ONNX_FLOAT || to == BFIT_ONNX_STRING || (to > BFIT_ONNX_UINT64 && to != BFIT_ONNX_BFLOAT16))
        return bfit_onnx_refuse(L, "Cast to the ONNX type %lld is not supported: batchfit casts host integers to "
                                   "float, double, float16, bfloat16, bool and the integer types only",
                                (long long)to);
    isf = to == BFIT_ONNX_FLOAT || to == BFIT_ONNX_DOUBLE || to == BFIT_ONNX_FLOAT16 || to == BFIT_ONNX_BFLOAT16;
    if (!(o = bfit_onnx_hval_new(L, isf, x->nd, x->dim)))
        return BFIT_EINVAL;
    for (int64_t i = 0; i < x->n && rc == BFIT_OK; i++) {
        if (isf && !x->isf && x->a[i])
            return bfit_onnx_refuse(L, "a batch-dependent integer cast to a float");
        if (isf)
            o->f[i] = round_to(to, x->isf ? x->f[i] : (double)x->b[i]);
        else if (to == BFIT_ONNX_BOOL && x->isf)
            o->b[i] = x->f[i] != 0;
        else if (to == BFIT_ONNX_BOOL)
            rc = cast_bool(L, x->a[i], x->b[i], &o->b[i]);
        else if (x->isf)
            rc = cast_float_int(L, to, x->f[i], &o->b[i]);
        else
            rc = cast_int(L, to, x->a[i], x->b[i], &o->a[i], &o->b[i]);
    }
    return rc != BFIT_OK ? rc : put_out(L, o);
}

/* Slice's starts, ends, axes and steps: inputs 1 to 4 (opset 10 and later),
 * or the attributes starts, ends and axes (opsets 7 to 9, steps of 1). */
static int slice_args(onnx_lower *L, int64_t (*arg)[BFIT_ONNX_MAXATTR], int *ns)
{
    static const char *const names[3] = {"starts", "ends", "axes"};
    int n[4], rc, attrs = !bfit_onnx_in(L, 1);

    for (int k = 0; k < 4; k++) {
        n[k] = 0, rc = BFIT_OK;
        if (attrs && k < 3)
            rc = bfit_onnx_attr_ints(L, names[k], arg[k], 0, &n[k]);
        else if (!attrs && bfit_onnx_in(L, k + 1))
            rc = ints_of(L, k + 1, arg[k], BFIT_ONNX_MAXD, &n[k]);
        if (rc != BFIT_OK)
            return rc;
    }
    if (n[0] > BFIT_ONNX_MAXD)
        return bfit_onnx_refuse(L, "%d axes sliced: at most %d are supported", n[0], BFIT_ONNX_MAXD);
    for (int i = 0; i < n[0]; i++) { /* axes and steps may be left out: every axis in order, steps of 1 */
        arg[2][i] = n[2] ? arg[2][i] : i;
        arg[3][i] = n[3] ? arg[3][i] : 1;
    }
    if (n[1] != n[0] || (n[2] && n[2] != n[0]) || (n[3] && n[3] != n[0]))
        return bfit_onnx_refuse(L, "starts, ends, axes and steps of different lengths");
    *ns = n[0];
    return BFIT_OK;
}

/* One axis of n elements sliced from start to end by step (ONNX's clamping:
 * a negative step walks back from start, which is clamped to n - 1, down to
 * end, clamped to -1): the first index and the count. */
static void slice_axis(int64_t n, int64_t start, int64_t end, int64_t step, int64_t *lo, int64_t *cnt)
{
    int64_t s = start < 0 ? start + n : start, e = end < 0 ? end + n : end;
    if (step > 0) {
        s = s < 0 ? 0 : s > n ? n : s, e = e < 0 ? 0 : e > n ? n : e;
        *cnt = e > s ? (e - s - 1) / step + 1 : 0;
    } else {
        s = s < 0 ? 0 : s > n - 1 ? n - 1 : s, e = e < -1 ? -1 : e > n - 1 ? n - 1 : e;
        *cnt = s > e ? (s - e - 1) / -step + 1 : 0;
    }
    *lo = s;
}

/* Slice(data, starts, ends, axes, steps) of a host value; a negative step
 * reverses (PyTorch's export of F.pad reverses its pads list so). */
static int slice_host(onnx_lower *L)
{
    hval *x = bfit_onnx_host(L, bfit_onnx_in(L, 0), 0), *o;
    int64_t arg[4][BFIT_ONNX_MAXATTR], lo[BFIT_ONNX_MAXD], step[BFIT_ONNX_MAXD], dim[BFIT_ONNX_MAXD];
    int ns = 0, rc;

    if (!x || (rc = slice_args(L, arg, &ns)) != BFIT_OK)
        return x ? rc : BFIT_EINVAL;
    for (int d = 0; d < x->nd; d++)
        lo[d] = 0, step[d] = 1, dim[d] = x->dim[d];
    for (int i = 0; i < ns; i++) {
        int64_t a = norm_axis(arg[2][i], x->nd), sp = arg[3][i];
        /* INT64_MIN has no negation: no tensor needs such a step */
        if (a < 0 || a >= x->nd || sp == 0 || sp == INT64_MIN)
            return bfit_onnx_refuse(L, "axis %lld or step %lld is out of range (%d dimensions, a step not 0)",
                                    (long long)arg[2][i], (long long)sp, x->nd);
        step[a] = sp;
        slice_axis(x->dim[a], arg[0][i], arg[1][i], sp, &lo[a], &dim[a]);
    }
    if (!(o = bfit_onnx_hval_new(L, x->isf, x->nd, dim)))
        return BFIT_EINVAL;
    for (int64_t j = 0; j < o->n; j++) {
        int64_t r = j, i = 0, stride = 1;
        for (int d = x->nd - 1; d >= 0; d--) {
            i += (lo[d] + (r % dim[d]) * step[d]) * stride;
            r /= dim[d];
            stride *= x->dim[d];
        }
        take(o, j, x, i);
    }
    return put_out(L, o);
}

/* Transpose of host integers (PyTorch's F.pad export turns its [dims, 2]
 * pads into ONNX's [2, dims] so): perm, or reversed dimensions without one. */
static int transpose_host(onnx_lower *L)
{
    hval *x = bfit_onnx_host(L, bfit_onnx_in(L, 0), 0), *o;
    int64_t perm[BFIT_ONNX_MAXATTR], dim[BFIT_ONNX_MAXD], xs[BFIT_ONNX_MAXD], os[BFIT_ONNX_MAXD];
    unsigned seen = 0;
    int np, rc;

    if (!x || (rc = bfit_onnx_attr_ints(L, "perm", perm, 0, &np)) != BFIT_OK)
        return x ? rc : BFIT_EINVAL;
    if (!np)
        for (np = 0; np < x->nd; np++)
            perm[np] = x->nd - 1 - np;
    for (int d = 0; d < np; d++) {
        if (np != x->nd || perm[d] < 0 || perm[d] >= x->nd || seen >> perm[d] & 1)
            return bfit_onnx_refuse(L, "perm is not a permutation of the input's %d dimensions", x->nd);
        seen |= 1u << perm[d];
        dim[d] = x->dim[perm[d]];
    }
    if (!(o = bfit_onnx_hval_new(L, x->isf, x->nd, dim)))
        return BFIT_EINVAL;
    for (int d = x->nd - 1; d >= 0; d--) /* strides of the input and the output */
        xs[d] = os[d] = 1;
    for (int d = x->nd - 2; d >= 0; d--)
        xs[d] = xs[d + 1] * x->dim[d + 1], os[d] = os[d + 1] * dim[d + 1];
    for (int64_t j = 0; j < o->n; j++) {
        int64_t i = 0;
        for (int d = 0; d < x->nd; d++)
            i += (j / os[d] % dim[d]) * xs[perm[d]];
        take(o, j, x, i);
    }
    return put_out(L, o);
}

static int constant_of_shape(onnx_lower *L)
{
    const bfit_onnx_attr *v = bfit_onnx_attr_get(L, "value");
    int64_t dim[BFIT_ONNX_MAXD];
    int nd, rc, isf = 1;
    double val = 0;
    hval *o;

    if ((rc = ints_of(L, 0, dim, BFIT_ONNX_MAXD, &nd)) != BFIT_OK)
        return rc;
    if (v && v->t) {
        double f;
        int64_t i;
        if (v->t->numel != 1)
            return bfit_onnx_refuse(L, "value must hold one element");
        isf = v->t->dtype == BFIT_ONNX_FLOAT || v->t->dtype == BFIT_ONNX_DOUBLE;
        if ((isf ? bfit_onnx_tensor_f64(v->t, &f) : bfit_onnx_tensor_i64(v->t, &i)) != BFIT_OK)
            return BFIT_EFORMAT;
        val = isf ? f : (double)i;
    }
    if (!(o = bfit_onnx_hval_new(L, isf, nd, dim)))
        return BFIT_EINVAL;
    for (int64_t j = 0; j < o->n; j++) {
        if (isf)
            o->f[j] = val;
        else
            o->b[j] = (int64_t)val;
    }
    return put_out(L, o);
}

/* Where(cond, x, y) with a condition known at load. */
static int where(onnx_lower *L)
{
    hval *c = bfit_onnx_host(L, bfit_onnx_in(L, 0), 0), *x = c ? bfit_onnx_host(L, bfit_onnx_in(L, 1), 1) : NULL;
    hval *y = x ? bfit_onnx_host(L, bfit_onnx_in(L, 2), 2) : NULL, *o;
    int64_t dim[BFIT_ONNX_MAXD] = {0}, d2[BFIT_ONNX_MAXD] = {0}, cv = 0;
    int nd, nd2, rc;

    if (!y)
        return BFIT_EINVAL;
    if ((rc = bshape(L, x, y, &nd, dim)) != BFIT_OK)
        return rc;
    {
        hval t = *x;
        t.nd = nd;
        memcpy(t.dim, dim, sizeof dim);
        if ((rc = bshape(L, c, &t, &nd2, d2)) != BFIT_OK)
            return rc;
    }
    if (x->isf != y->isf || !(o = bfit_onnx_hval_new(L, x->isf, nd2, d2)))
        return x->isf != y->isf ? bfit_onnx_refuse(L, "x and y of different types") : BFIT_EINVAL;
    for (int64_t j = 0; j < o->n; j++) {
        if ((rc = constant_int(L, c, bindex(c, nd2, d2, j), &cv)) != BFIT_OK)
            return rc;
        take(o, j, cv ? x : y, bindex(cv ? x : y, nd2, d2, j));
    }
    return put_out(L, o);
}

/* Range(start, limit, delta) of constants: torch.arange(T), a position
 * embedding's indices. */
static int range_host(onnx_lower *L)
{
    hval *in[3], *o;
    double v[3], n;
    int isf = 0;

    for (int k = 0; k < 3; k++) {
        if (!(in[k] = bfit_onnx_host(L, bfit_onnx_in(L, k), k)))
            return BFIT_EINVAL;
        if (in[k]->n != 1 || (!in[k]->isf && in[k]->a[0]))
            return bfit_onnx_refuse(L, "Range's input %d must be one number that does not depend on the batch", k + 1);
        isf |= in[k]->isf;
        v[k] = in[k]->isf ? in[k]->f[0] : (double)in[k]->b[0];
    }
    if (v[2] == 0 || !isfinite(v[0]) || !isfinite(v[1]) || !isfinite(v[2]))
        return bfit_onnx_refuse(L, "Range with the delta 0 or a number that is not finite");
    n = ceil((v[1] - v[0]) / v[2]);
    if (!(o = bfit_onnx_hval_new(L, isf, 1, (int64_t[]){n > 0 ? (n < 1e12 ? (int64_t)n : INT64_C(1) << 40) : 0})))
        return BFIT_EINVAL;
    for (int64_t j = 0; j < o->n; j++) {
        if (isf)
            o->f[j] = v[0] + (double)j * v[2];
        else
            o->b[j] = in[0]->b[0] + j * in[2]->b[0];
    }
    return put_out(L, o);
}

/* Trilu(x, k) of a host value: its last two dimensions' lower (upper=0) or
 * upper triangle from diagonal k, the rest 0 (torch.tril(torch.ones(T, T))
 * written in forward, PyTorch 2's causal mask). */
static int trilu_host(onnx_lower *L)
{
    hval *x = bfit_onnx_host(L, bfit_onnx_in(L, 0), 0), *o;
    int64_t k = 0, upper = 1, r, c;
    int n = 0, rc;

    if (!x || (rc = bfit_onnx_attr_int(L, "upper", 1, &upper)) != BFIT_OK)
        return x ? rc : BFIT_EINVAL;
    if (bfit_onnx_in(L, 1) && ((rc = ints_of(L, 1, &k, 1, &n)) != BFIT_OK || n != 1))
        return rc != BFIT_OK ? rc : bfit_onnx_refuse(L, "Trilu's k must be one number");
    if (x->nd < 2)
        return bfit_onnx_refuse(L, "Trilu of a value of %d dimensions: it takes matrices (2 or more)", x->nd);
    if (!(o = bfit_onnx_hval_new(L, x->isf, x->nd, x->dim)))
        return BFIT_EINVAL;
    r = x->dim[x->nd - 2], c = x->dim[x->nd - 1];
    for (int64_t j = 0; j < o->n; j++) {
        int64_t i = j / c % r, jj = j % c; /* row and column in the last two dimensions */
        int keep = upper ? jj - i >= k : jj - i <= k;
        if (keep)
            take(o, j, x, j);
    }
    return put_out(L, o);
}

/* Expand of a host value to a constant shape (numpy's broadcasting). */
static int expand_host(onnx_lower *L)
{
    hval *x = bfit_onnx_host(L, bfit_onnx_in(L, 0), 0), s = {0}, *o;
    int64_t dim[BFIT_ONNX_MAXD];
    int nd, rc;

    if (!x || (rc = ints_of(L, 1, s.dim, BFIT_ONNX_MAXD, &s.nd)) != BFIT_OK)
        return x ? rc : BFIT_EINVAL;
    if ((rc = bshape(L, x, &s, &nd, dim)) != BFIT_OK || !(o = bfit_onnx_hval_new(L, x->isf, nd, dim)))
        return rc != BFIT_OK ? rc : BFIT_EINVAL;
    for (int64_t j = 0; j < o->n; j++)
        take(o, j, x, bindex(x, nd, dim, j));
    return put_out(L, o);
}

/* Whether every input present is on the host. */
static int all_host(onnx_lower *L)
{
    for (int k = 0; k < L->nd->nin; k++) {
        oval *v = bfit_onnx_in(L, k);
        if (v && v->kind != OV_HOST)
            return 0;
    }
    return 1;
}

/* Whether host value v holds integers (shape arithmetic, not weights). */
static int host_ints(const oval *v)
{
    if (!v || v->kind != OV_HOST)
        return 0;
    if (v->h)
        return !v->h->isf;
    return v->t && v->t->dtype != BFIT_ONNX_FLOAT && v->t->dtype != BFIT_ONNX_DOUBLE &&
           v->t->dtype != BFIT_ONNX_FLOAT16 && v->t->dtype != BFIT_ONNX_BFLOAT16;
}

int bfit_onnx_over_batch(const onnx_lower *L, const hval *h, const oval *s)
{
    const hval *sh = s && s->kind == OV_HOST ? s->h : NULL;
    if (!h || h->nd < 1 || h->dim[0] != 1 || !sh || sh->isf || sh->nd != 1 || sh->n != h->nd ||
        !bfit_onnx_affine_is(L, sh->a[0], sh->b[0], 1, 0) || (!sh->a[0] && L->fixed_batch <= 0))
        return 0;
    for (int k = 1; k < sh->n; k++) /* h's own size, or 1: h's there (expand(B, 1, -1, -1)'s -1 made 1) */
        if (sh->a[k] || (sh->b[k] != h->dim[k] && sh->b[k] != 1))
            return 0;
    return 1;
}

int bfit_onnx_reshape_target(onnx_lower *L, const oval *x, int64_t *d, int max)
{
    hval *t = bfit_onnx_host(L, bfit_onnx_in(L, 1), 1);
    if (!t || t->isf || t->nd != 1 || t->n < 2 || t->n - 1 > max ||
        !(bfit_onnx_affine_is(L, t->a[0], t->b[0], 1, 0) || (t->a[0] == 0 && (t->b[0] == 0 || t->b[0] == -1))))
        return -1;
    for (int64_t k = 1; k < t->n; k++) {
        if (t->a[k])
            return -1;
        d[k - 1] = t->b[k] == 0 && k < x->rank ? x->rb[k] : t->b[k];
    }
    return (int)t->n - 1;
}

int bfit_onnx_lower_host(onnx_lower *L, int *rc)
{
    static const struct {
        const char *op;
        int (*fn)(onnx_lower *L);
    } ops[] = {{"Gather", gather},           {"Concat", concat},   {"Reshape", reshape_host},
               {"Cast", cast},               {"Slice", slice_host}, {"ConstantOfShape", constant_of_shape},
               {"Where", where},             {"Expand", expand_host},  {"Transpose", transpose_host},
               {"Sqrt", sqrt_host},          {"Range", range_host}, {"Trilu", trilu_host},
               {"Cos", cos_host},            {"Sin", sin_host},     {"MatMul", matmul_host}};
    static const char *const ew[] = {"Add", "Sub", "Mul", "Div", "Equal", "Pow", "Less", "Greater"};

    if (bfit_onnx_streq(L->nd->op, "Shape")) {
        *rc = shape(L);
        return 1;
    }
    if (!all_host(L))
        return 0;
    if (bfit_onnx_streq(L->nd->op, "Expand")) { /* over the batch: a device tensor (onnx_vit.c) */
        hval *s = bfit_onnx_host(L, bfit_onnx_in(L, 1), 1);
        oval *x = bfit_onnx_in(L, 0);
        for (int64_t i = 0; s && !s->isf && i < s->n; i++)
            if (s->a[i])
                return 0;
        /* a fixed batch's export expands a learned [1, ...] tensor to the constant [B, ...] */
        if (s && !s->isf && s->n >= 2 && L->fixed_batch > 0 && s->b[0] == L->fixed_batch && x && x->t &&
            x->init >= 0 && x->t->dtype == BFIT_ONNX_FLOAT && x->t->ndim == s->n && x->t->dim[0] == 1)
            return 0;
    }
    /* a float matrix's transpose is nn.Linear's weight before a MatMul (onnx_vit.c); floats computed on the
       host (rotary embeddings' frequencies) are transposed here */
    if (bfit_onnx_streq(L->nd->op, "Transpose") && !host_ints(bfit_onnx_in(L, 0)) &&
        (!bfit_onnx_in(L, 0) || bfit_onnx_in(L, 0)->t))
        return 0;
    for (unsigned i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (bfit_onnx_streq(L->nd->op, ops[i].op)) {
            *rc = ops[i].fn(L);
            return 1;
        }
    for (int i = 0; i < (int)(sizeof ew / sizeof ew[0]); i++)
        if (bfit_onnx_streq(L->nd->op, ew[i])) {
            *rc = elementwise(L, i);
            return 1;
        }
    if (bfit_onnx_streq(L->nd->op, "Unsqueeze") || bfit_onnx_streq(L->nd->op, "Squeeze")) {
        *rc = squeeze(L, bfit_onnx_streq(L->nd->op, "Squeeze"));
        return 1;
    }
    return 0;
}
