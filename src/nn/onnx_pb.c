/* onnx_pb.c - an ONNX ModelProto read straight from protobuf's wire format
 * (onnx.h says why not protobuf-c): varints, fixed 32/64-bit values and
 * length-delimited fields, every length checked against what is left of
 * its message. Repeated messages are counted, then read into arrays of that
 * size. Strings and tensor data stay in the buffer. */
#include "base/err.h"
#include "nn/onnx.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

/* A message being read: [p, end) of the buffer that starts at base. */
typedef struct pb {
    const uint8_t *p, *end, *base;
    const char *src;
    const char *what; /* the message's path, for errors: "graph.node[3]" */
} pb;

static int bad(const pb *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(const pb *r, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return bfit_fail(BFIT_EFORMAT, "%s: byte %llu: %s: %s", r->src, (unsigned long long)(r->p - r->base), r->what,
                     msg);
}

static const char *const wt_names[8] = {"a varint", "64-bit", "length-delimited", "a group start", "a group end",
                                         "32-bit", "wire type 6", "wire type 7"};

static int varint(pb *r, uint64_t *v)
{
    uint64_t x = 0;
    *v = 0;
    for (int s = 0; s < 64; s += 7) {
        uint8_t b;
        if (r->p >= r->end)
            return bad(r, "the file ends inside a number (truncated?)");
        b = *r->p++;
        if (s == 63 && b > 1)
            return bad(r, "a varint overflows 64 bits");
        x |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) {
            *v = x;
            return BFIT_OK;
        }
    }
    return bad(r, "a varint is longer than 10 bytes");
}

static int fixed(pb *r, int bytes, uint64_t *v)
{
    uint64_t x = 0;
    *v = 0;
    if (r->end - r->p < bytes)
        return bad(r, "the file ends inside a %d-byte value (truncated?)", bytes);
    for (int i = 0; i < bytes; i++)
        x |= (uint64_t)r->p[i] << (8 * i);
    r->p += bytes;
    *v = x;
    return BFIT_OK;
}

static int tag(pb *r, uint32_t *field, int *wt)
{
    uint64_t t = 0;
    int rc = varint(r, &t);
    if (rc != BFIT_OK)
        return rc;
    *field = (uint32_t)(t >> 3);
    *wt = (int)(t & 7);
    if (t >> 3 == 0 || t >> 3 > 0x1fffffff)
        return bad(r, "field number %llu is not valid", (unsigned long long)(t >> 3));
    return BFIT_OK;
}

/* A length-delimited field's bytes. */
static int bytes(pb *r, const uint8_t **p, size_t *n)
{
    uint64_t len;
    int rc = varint(r, &len);
    *p = NULL;
    *n = 0;
    if (rc != BFIT_OK)
        return rc;
    if (len > (uint64_t)(r->end - r->p))
        return bad(r, "a field of %llu bytes runs past the end of its message (truncated?)", (unsigned long long)len);
    *p = r->p;
    *n = (size_t)len;
    r->p += len;
    return BFIT_OK;
}

static int skip(pb *r, int wt)
{
    uint64_t v;
    const uint8_t *p;
    size_t n;
    switch (wt) {
    case WT_VARINT: return varint(r, &v);
    case WT_I64: return fixed(r, 8, &v);
    case WT_I32: return fixed(r, 4, &v);
    case WT_LEN: return bytes(r, &p, &n);
    default: return bad(r, "%s is not a wire type ONNX files use", wt_names[wt & 7]);
    }
}

/* The field has the wire type its declaration in onnx.proto gives. */
static int want(pb *r, uint32_t field, int wt, int expected)
{
    if (wt == expected)
        return BFIT_OK;
    return bad(r, "field %u is %s but onnx.proto declares it %s (a damaged file, or not ONNX)", field,
               wt_names[wt & 7], wt_names[expected & 7]);
}

static pb sub(const pb *r, const uint8_t *p, size_t n, const char *what)
{
    pb s = {p, p + n, r->base, r->src, what};
    return s;
}

static bfit_onnx_str str_of(const uint8_t *p, size_t n)
{
    bfit_onnx_str s = {(const char *)p, n};
    return s;
}

/* How many times field f occurs (length-delimited) in the message. */
static int count_field(pb r, uint32_t f, int *n)
{
    uint32_t field;
    int wt, rc;
    *n = 0;
    while (r.p < r.end) {
        if ((rc = tag(&r, &field, &wt)) != BFIT_OK)
            return rc;
        if (field == f && wt == WT_LEN)
            ++*n;
        if ((rc = skip(&r, wt)) != BFIT_OK)
            return rc;
    }
    return BFIT_OK;
}

/* ---- tensors ---------------------------------------------------------------- */

size_t bfit_onnx_dtype_size(int t)
{
    switch (t) {
    case BFIT_ONNX_UINT8: case BFIT_ONNX_INT8: case BFIT_ONNX_BOOL: return 1;
    case BFIT_ONNX_UINT16: case BFIT_ONNX_INT16: case BFIT_ONNX_FLOAT16: case BFIT_ONNX_BFLOAT16: return 2;
    case BFIT_ONNX_FLOAT: case BFIT_ONNX_INT32: case BFIT_ONNX_UINT32: return 4;
    case BFIT_ONNX_INT64: case BFIT_ONNX_DOUBLE: case BFIT_ONNX_UINT64: return 8;
    default: return 0;
    }
}

const char *bfit_onnx_dtype_name(int t)
{
    static const char *const n[] = {"undefined", "float", "uint8", "int8", "uint16", "int16", "int32", "int64",
                                    "string", "bool", "float16", "double", "uint32", "uint64", "complex64",
                                    "complex128", "bfloat16"};
    return t >= 0 && t <= 16 ? n[t] : "unknown";
}

/* The typed field that holds a dtype's values, and its scalar wire type. */
static void typed_field(int dtype, uint32_t *f, int *wt)
{
    switch (dtype) {
    case BFIT_ONNX_FLOAT: *f = 4, *wt = WT_I32; return;
    case BFIT_ONNX_INT64: *f = 7, *wt = WT_VARINT; return;
    case BFIT_ONNX_DOUBLE: *f = 10, *wt = WT_I64; return;
    case BFIT_ONNX_UINT32: case BFIT_ONNX_UINT64: *f = 11, *wt = WT_VARINT; return;
    default: *f = 5, *wt = WT_VARINT; return; /* int32_data: the small types, float16 and bool too */
    }
}

/* Visit the values of the typed field (packed or not): fn(ud, index, bits). */
typedef void (*val_fn)(void *ud, int64_t i, uint64_t bits);

static int each_typed(const bfit_onnx_tensor *t, const pb *outer, val_fn fn, void *ud, int64_t *count)
{
    pb r = sub(outer, t->msg, t->msg_len, outer->what);
    uint32_t f, field;
    int swt, wt, rc;
    int64_t k = 0;
    uint64_t v;

    typed_field(t->dtype, &f, &swt);
    while (r.p < r.end) {
        if ((rc = tag(&r, &field, &wt)) != BFIT_OK)
            return rc;
        if (field != f) {
            if ((rc = skip(&r, wt)) != BFIT_OK)
                return rc;
            continue;
        }
        if (wt == WT_LEN) { /* packed */
            const uint8_t *p;
            size_t n;
            pb q;
            if ((rc = bytes(&r, &p, &n)) != BFIT_OK)
                return rc;
            q = sub(&r, p, n, r.what);
            while (q.p < q.end) {
                rc = swt == WT_VARINT ? varint(&q, &v) : fixed(&q, swt == WT_I32 ? 4 : 8, &v);
                if (rc != BFIT_OK)
                    return rc;
                if (fn && k < t->numel)
                    fn(ud, k, v);
                k++;
            }
            continue;
        }
        if ((rc = want(&r, field, wt, swt)) != BFIT_OK)
            return rc;
        rc = swt == WT_VARINT ? varint(&r, &v) : fixed(&r, swt == WT_I32 ? 4 : 8, &v);
        if (rc != BFIT_OK)
            return rc;
        if (fn && k < t->numel)
            fn(ud, k, v);
        k++;
    }
    *count = k;
    return BFIT_OK;
}

/* dims, data_type, name, raw_data, and what says where the data is. */
static int tensor_field(pb *r, bfit_onnx_tensor *t, uint32_t field, int wt, int *external)
{
    const uint8_t *p;
    size_t n;
    uint64_t v;
    int rc;

    switch (field) {
    case 1: /* dims: repeated int64, packed or not */
        if (wt == WT_LEN) {
            pb q;
            if ((rc = bytes(r, &p, &n)) != BFIT_OK)
                return rc;
            q = sub(r, p, n, r->what);
            while (q.p < q.end) {
                if ((rc = varint(&q, &v)) != BFIT_OK)
                    return rc;
                if (t->ndim == BFIT_ONNX_MAXD)
                    return bad(r, "a tensor has more than %d dimensions", BFIT_ONNX_MAXD);
                t->dim[t->ndim++] = (int64_t)v;
            }
            return BFIT_OK;
        }
        if ((rc = want(r, field, wt, WT_VARINT)) != BFIT_OK || (rc = varint(r, &v)) != BFIT_OK)
            return rc;
        if (t->ndim == BFIT_ONNX_MAXD)
            return bad(r, "a tensor has more than %d dimensions", BFIT_ONNX_MAXD);
        t->dim[t->ndim++] = (int64_t)v;
        return BFIT_OK;
    case 2:
        if ((rc = want(r, field, wt, WT_VARINT)) != BFIT_OK || (rc = varint(r, &v)) != BFIT_OK)
            return rc;
        t->dtype = (int)(v & 0x7fffffff);
        return BFIT_OK;
    case 8:
    case 9:
        if ((rc = want(r, field, wt, WT_LEN)) != BFIT_OK || (rc = bytes(r, &p, &n)) != BFIT_OK)
            return rc;
        if (field == 8)
            t->name = str_of(p, n);
        else
            t->raw = p, t->msg_len = n; /* msg_len holds raw's length until the end */
        return BFIT_OK;
    case 13: /* external_data */
        *external = 1;
        return skip(r, wt);
    case 14: /* data_location: 1 EXTERNAL */
        if ((rc = want(r, field, wt, WT_VARINT)) != BFIT_OK || (rc = varint(r, &v)) != BFIT_OK)
            return rc;
        *external |= v == 1;
        return BFIT_OK;
    default:
        return skip(r, wt);
    }
}

/* Element count, with every dimension checked. */
static int tensor_numel(pb *r, bfit_onnx_tensor *t, char *nm)
{
    t->numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->dim[d] < 0)
            return bad(r, "tensor '%s' has the negative dimension %lld", nm, (long long)t->dim[d]);
        if (t->dim[d] && t->numel > BFIT_ONNX_MAXNUMEL / t->dim[d])
            return bad(r, "tensor '%s' has more than 2^40 elements (dimension %d, %lld, overflows the count)", nm, d,
                       (long long)t->dim[d]);
        t->numel *= t->dim[d];
    }
    return BFIT_OK;
}

/* A TensorProto at [p, p+n): its shape and where its values are, checked
 * to be all there: raw_data of numel * element bytes, or numel typed values. */
static int parse_tensor(pb *outer, const uint8_t *p, size_t n, bfit_onnx_tensor *t)
{
    pb r = sub(outer, p, n, outer->what);
    uint32_t field;
    int wt, rc, external = 0;
    size_t raw_len = 0;
    int64_t cnt;
    char nm[128];

    memset(t, 0, sizeof *t);
    t->offset = (uint64_t)(p - outer->base);
    while (r.p < r.end) {
        if ((rc = tag(&r, &field, &wt)) != BFIT_OK || (rc = tensor_field(&r, t, field, wt, &external)) != BFIT_OK)
            return rc;
    }
    raw_len = t->raw ? t->msg_len : 0;
    t->msg = p;
    t->msg_len = n;
    bfit_onnx_cstr(t->name, nm, sizeof nm);
    if (external)
        return bad(outer, "tensor '%s' keeps its data in an external file: batchfit reads models whose weights "
                          "are inside the .onnx file (onnx.save(model, path, save_as_external_data=False), "
                          "under 2 GiB)", nm);
    if ((rc = tensor_numel(outer, t, nm)) != BFIT_OK)
        return rc;
    if (!bfit_onnx_dtype_size(t->dtype))
        return bad(outer, "tensor '%s' has data type %lld, which batchfit does not read (float, double, float16, "
                          "bfloat16 and the integer types)", nm, (long long)t->dtype);
    if (t->raw) {
        if ((uint64_t)raw_len != (uint64_t)t->numel * bfit_onnx_dtype_size(t->dtype))
            return bad(outer, "tensor '%s' holds %lld bytes of raw data, its shape and type want a different "
                              "count: %lld elements of %zu bytes are %lld", nm, (long long)raw_len, (long long)t->numel,
                       bfit_onnx_dtype_size(t->dtype), (long long)t->numel * (long long)bfit_onnx_dtype_size(t->dtype));
        return BFIT_OK;
    }
    if ((rc = each_typed(t, outer, NULL, NULL, &cnt)) != BFIT_OK)
        return rc;
    if (cnt != t->numel)
        return bad(outer, "tensor '%s' holds %lld values, its shape wants %lld", nm, (long long)cnt,
                   (long long)t->numel);
    return BFIT_OK;
}

/* ---- conversion -------------------------------------------------------------- */

static uint64_t raw_bits(const uint8_t *p, size_t size)
{
    uint64_t x = 0;
    for (size_t i = 0; i < size; i++)
        x |= (uint64_t)p[i] << (8 * i);
    return x;
}

static double half_to_double(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? m / 16777216.0 : e == 31 ? (m ? NAN : INFINITY) : (1024 + m) * (double)(1u << e) / 33554432.0;
    return h & 0x8000 ? -v : v;
}

/* One value's bits (as stored) as a double. */
static double to_double(int dtype, uint64_t b)
{
    union { uint32_t u; float f; } f32;
    union { uint64_t u; double d; } f64;
    switch (dtype) {
    case BFIT_ONNX_FLOAT: f32.u = (uint32_t)b; return f32.f;
    case BFIT_ONNX_DOUBLE: f64.u = b; return f64.d;
    case BFIT_ONNX_FLOAT16: return half_to_double((uint16_t)b);
    case BFIT_ONNX_BFLOAT16: f32.u = (uint32_t)(b & 0xffff) << 16; return f32.f;
    case BFIT_ONNX_INT8: return (double)(int8_t)b;
    case BFIT_ONNX_INT16: return (double)(int16_t)b;
    case BFIT_ONNX_INT32: return (double)(int32_t)b;
    case BFIT_ONNX_INT64: return (double)(int64_t)b;
    default: return (double)b;
    }
}

static int64_t to_i64(int dtype, uint64_t b)
{
    switch (dtype) {
    case BFIT_ONNX_INT8: return (int8_t)b;
    case BFIT_ONNX_INT16: return (int16_t)b;
    case BFIT_ONNX_INT32: return (int32_t)b;
    case BFIT_ONNX_FLOAT: case BFIT_ONNX_DOUBLE: case BFIT_ONNX_FLOAT16: case BFIT_ONNX_BFLOAT16: {
        double d = to_double(dtype, b);
        return d != d ? 0 : d > 9.2e18 ? INT64_MAX : d < -9.2e18 ? INT64_MIN : (int64_t)d;
    }
    default: return (int64_t)b;
    }
}

enum { WANT_I64, WANT_F32, WANT_F64 };

typedef struct conv_ud {
    int dtype, want;
    void *out;
} conv_ud;

static void put(void *ud, int64_t i, uint64_t bits)
{
    conv_ud *c = ud;
    if (c->want == WANT_F32)
        ((float *)c->out)[i] = (float)to_double(c->dtype, bits);
    else if (c->want == WANT_F64)
        ((double *)c->out)[i] = to_double(c->dtype, bits);
    else
        ((int64_t *)c->out)[i] = to_i64(c->dtype, bits);
}

static int convert(const bfit_onnx_tensor *t, void *out, int want)
{
    conv_ud c = {t->dtype, want, out};
    size_t es = bfit_onnx_dtype_size(t->dtype);
    int64_t cnt;
    pb r = {t->msg, t->msg + t->msg_len, t->msg, "tensor", "tensor"};

    if (t->raw) {
        for (int64_t i = 0; i < t->numel; i++)
            put(&c, i, raw_bits(t->raw + (size_t)i * es, es));
        return BFIT_OK;
    }
    return each_typed(t, &r, put, &c, &cnt);
}

int bfit_onnx_tensor_f32(const bfit_onnx_tensor *t, float *out) { return convert(t, out, WANT_F32); }
int bfit_onnx_tensor_f64(const bfit_onnx_tensor *t, double *out) { return convert(t, out, WANT_F64); }
int bfit_onnx_tensor_i64(const bfit_onnx_tensor *t, int64_t *out) { return convert(t, out, WANT_I64); }

const char *bfit_onnx_cstr(bfit_onnx_str s, char *buf, size_t len)
{
    size_t n = s.n < len - 1 ? s.n : len - 1;
    memcpy(buf, s.p ? s.p : "", s.p ? n : 0);
    buf[s.p ? n : 0] = '\0';
    return buf;
}

int bfit_onnx_streq(bfit_onnx_str s, const char *c)
{
    return strlen(c) == s.n && (!s.n || memcmp(s.p, c, s.n) == 0);
}

/* ---- attributes, nodes, value infos -------------------------------------------- */

/* One value of a repeated scalar field (packed or not) appended to a list. */
static int scalars(pb *r, uint32_t field, int wt, int swt, int64_t *ints, float *floats, int *n)
{
    const uint8_t *p = NULL;
    size_t len = 0;
    pb q = *r;
    int rc;

    if (wt == WT_LEN) {
        if ((rc = bytes(r, &p, &len)) != BFIT_OK)
            return rc;
        q = sub(r, p, len, r->what);
    } else if ((rc = want(r, field, wt, swt)) != BFIT_OK) {
        return rc;
    }
    do {
        uint64_t v;
        pb *s = wt == WT_LEN ? &q : r;
        rc = swt == WT_VARINT ? varint(s, &v) : fixed(s, 4, &v);
        if (rc != BFIT_OK)
            return rc;
        if (*n == BFIT_ONNX_MAXATTR)
            return bad(r, "an attribute has more than %d values", BFIT_ONNX_MAXATTR);
        if (ints)
            ints[(*n)++] = (int64_t)v;
        else {
            union { uint32_t u; float f; } c = {(uint32_t)v};
            floats[(*n)++] = c.f;
        }
    } while (wt == WT_LEN && q.p < q.end);
    return BFIT_OK;
}

static int attr_field(pb *r, bfit_onnx_attr *a, uint32_t field, int wt)
{
    const uint8_t *p;
    size_t n;
    uint64_t v;
    int rc;

    switch (field) {
    case 1: case 4:
        if ((rc = want(r, field, wt, WT_LEN)) != BFIT_OK || (rc = bytes(r, &p, &n)) != BFIT_OK)
            return rc;
        if (field == 1)
            a->name = str_of(p, n);
        else
            a->s = str_of(p, n);
        return BFIT_OK;
    case 2:
        if ((rc = want(r, field, wt, WT_I32)) != BFIT_OK || (rc = fixed(r, 4, &v)) != BFIT_OK)
            return rc;
        {
            union { uint32_t u; float f; } c = {(uint32_t)v};
            a->f = c.f;
        }
        return BFIT_OK;
    case 3: case 20:
        if ((rc = want(r, field, wt, WT_VARINT)) != BFIT_OK || (rc = varint(r, &v)) != BFIT_OK)
            return rc;
        if (field == 3)
            a->i = (int64_t)v;
        else
            a->type = (int)(v & 0xff);
        return BFIT_OK;
    case 5:
        if ((rc = want(r, field, wt, WT_LEN)) != BFIT_OK || (rc = bytes(r, &p, &n)) != BFIT_OK)
            return rc;
        if (a->t)
            return bad(r, "an attribute holds two tensors");
        if (!(a->t = malloc(sizeof *a->t)))
            return bfit_fail(BFIT_ENOMEM, "onnx: out of host memory");
        return parse_tensor(r, p, n, a->t);
    case 7: return scalars(r, field, wt, WT_I32, NULL, a->floats, &a->nfloats);
    case 8: return scalars(r, field, wt, WT_VARINT, a->ints, NULL, &a->nints);
    default: return skip(r, wt); /* graphs, strings lists, sparse tensors: not read */
    }
}

static int parse_attr(pb *outer, const uint8_t *p, size_t n, bfit_onnx_attr *a)
{
    pb r = sub(outer, p, n, outer->what);
    uint32_t field;
    int wt, rc;
    while (r.p < r.end)
        if ((rc = tag(&r, &field, &wt)) != BFIT_OK || (rc = attr_field(&r, a, field, wt)) != BFIT_OK)
            return rc;
    return BFIT_OK;
}

/* The node's repeated fields, counted then filled. */
static int node_alloc(pb r, bfit_onnx_node *nd)
{
    int rc, nin, nout, nattr;
    if ((rc = count_field(r, 1, &nin)) != BFIT_OK || (rc = count_field(r, 2, &nout)) != BFIT_OK ||
        (rc = count_field(r, 5, &nattr)) != BFIT_OK)
        return rc;
    if (nin > BFIT_ONNX_MAXIO || nout > BFIT_ONNX_MAXIO || nattr > BFIT_ONNX_MAXIO)
        return bad(&r, "a node has more than %d inputs, outputs or attributes", BFIT_ONNX_MAXIO);
    nd->in = calloc((size_t)nin + 1, sizeof *nd->in);
    nd->out = calloc((size_t)nout + 1, sizeof *nd->out);
    nd->attr = calloc((size_t)nattr + 1, sizeof *nd->attr);
    if (!nd->in || !nd->out || !nd->attr)
        return bfit_fail(BFIT_ENOMEM, "onnx: out of host memory");
    return BFIT_OK;
}

static int node_field(pb *r, bfit_onnx_node *nd, uint32_t field, int wt)
{
    const uint8_t *p;
    size_t n;
    int rc;

    if (field != 1 && field != 2 && field != 3 && field != 4 && field != 5 && field != 7)
        return skip(r, wt);
    if ((rc = want(r, field, wt, WT_LEN)) != BFIT_OK || (rc = bytes(r, &p, &n)) != BFIT_OK)
        return rc;
    switch (field) {
    case 1: nd->in[nd->nin++] = str_of(p, n); return BFIT_OK;
    case 2: nd->out[nd->nout++] = str_of(p, n); return BFIT_OK;
    case 3: nd->name = str_of(p, n); return BFIT_OK;
    case 4: nd->op = str_of(p, n); return BFIT_OK;
    case 7: nd->domain = str_of(p, n); return BFIT_OK;
    default: return parse_attr(r, p, n, &nd->attr[nd->nattr++]);
    }
}

static int parse_node(pb *outer, const uint8_t *p, size_t n, bfit_onnx_node *nd)
{
    pb r = sub(outer, p, n, outer->what);
    uint32_t field;
    int wt, rc;

    nd->offset = (uint64_t)(p - outer->base);
    if ((rc = node_alloc(r, nd)) != BFIT_OK)
        return rc;
    while (r.p < r.end)
        if ((rc = tag(&r, &field, &wt)) != BFIT_OK || (rc = node_field(&r, nd, field, wt)) != BFIT_OK)
            return rc;
    return BFIT_OK;
}

/* TensorShapeProto.Dimension: dim_value, or dim_param (symbolic: -1, its
 * name kept for messages). */
static int parse_dim(pb *r, const uint8_t *p, size_t n, int64_t *d, bfit_onnx_str *name)
{
    pb q = sub(r, p, n, r->what);
    uint32_t field;
    int wt, rc;
    uint64_t v;
    *d = -1;
    while (q.p < q.end) {
        if ((rc = tag(&q, &field, &wt)) != BFIT_OK)
            return rc;
        if (field == 1) {
            if ((rc = want(&q, field, wt, WT_VARINT)) != BFIT_OK || (rc = varint(&q, &v)) != BFIT_OK)
                return rc;
            *d = (int64_t)v < 0 ? -1 : (int64_t)v;
        } else if (field == 2) {
            const uint8_t *b;
            size_t len;
            if ((rc = want(&q, field, wt, WT_LEN)) != BFIT_OK || (rc = bytes(&q, &b, &len)) != BFIT_OK)
                return rc;
            name->p = (const char *)b, name->n = len;
        } else if ((rc = skip(&q, wt)) != BFIT_OK) {
            return rc;
        }
    }
    return BFIT_OK;
}

/* The (last) length-delimited field f of the message [p, p+n), or p NULL. */
static int msg_in(pb *r, const uint8_t *p, size_t n, uint32_t f, pb *out)
{
    pb q = sub(r, p, n, r->what);
    uint32_t field;
    int wt, rc;
    const uint8_t *b;
    size_t len;
    out->p = out->end = NULL;
    while (q.p < q.end) {
        if ((rc = tag(&q, &field, &wt)) != BFIT_OK)
            return rc;
        if (field != f) {
            if ((rc = skip(&q, wt)) != BFIT_OK)
                return rc;
            continue;
        }
        if ((rc = want(&q, field, wt, WT_LEN)) != BFIT_OK || (rc = bytes(&q, &b, &len)) != BFIT_OK)
            return rc;
        *out = sub(r, b, len, r->what);
    }
    return BFIT_OK;
}

/* TypeProto.tensor_type: elem_type and shape. */
static int parse_tensor_type(pb *r, pb t, bfit_onnx_vi *v)
{
    uint32_t field;
    int wt, rc;
    uint64_t e;
    pb shape = {0};
    while (t.p < t.end) {
        if ((rc = tag(&t, &field, &wt)) != BFIT_OK)
            return rc;
        if (field == 1) {
            if ((rc = want(&t, field, wt, WT_VARINT)) != BFIT_OK || (rc = varint(&t, &e)) != BFIT_OK)
                return rc;
            v->elem = (int)(e & 0xff);
        } else if (field == 2) {
            const uint8_t *b;
            size_t len;
            if ((rc = want(&t, field, wt, WT_LEN)) != BFIT_OK || (rc = bytes(&t, &b, &len)) != BFIT_OK)
                return rc;
            shape = sub(r, b, len, r->what);
            v->ndim = 0;
        } else if ((rc = skip(&t, wt)) != BFIT_OK) {
            return rc;
        }
    }
    while (shape.p && shape.p < shape.end) {
        const uint8_t *b;
        size_t len;
        if ((rc = tag(&shape, &field, &wt)) != BFIT_OK)
            return rc;
        if (field != 1) {
            if ((rc = skip(&shape, wt)) != BFIT_OK)
                return rc;
            continue;
        }
        if ((rc = want(&shape, field, wt, WT_LEN)) != BFIT_OK || (rc = bytes(&shape, &b, &len)) != BFIT_OK)
            return rc;
        if (v->ndim == BFIT_ONNX_MAXD)
            return bad(&shape, "a value has more than %d dimensions", BFIT_ONNX_MAXD);
        if ((rc = parse_dim(&shape, b, len, &v->dim[v->ndim], &v->dim_name[v->ndim])) != BFIT_OK)
            return rc;
        v->ndim++;
    }
    return BFIT_OK;
}

/* ValueInfoProto: name and type.tensor_type. */
static int parse_vi(pb *outer, const uint8_t *p, size_t n, bfit_onnx_vi *v)
{
    pb r = sub(outer, p, n, outer->what), type, tt;
    uint32_t field;
    int wt, rc;
    const uint8_t *b;
    size_t len;

    v->ndim = -1;
    while (r.p < r.end) {
        if ((rc = tag(&r, &field, &wt)) != BFIT_OK)
            return rc;
        if (field != 1) {
            if ((rc = skip(&r, wt)) != BFIT_OK)
                return rc;
            continue;
        }
        if ((rc = want(&r, field, wt, WT_LEN)) != BFIT_OK || (rc = bytes(&r, &b, &len)) != BFIT_OK)
            return rc;
        v->name = str_of(b, len);
    }
    if ((rc = msg_in(outer, p, n, 2, &type)) != BFIT_OK || !type.p)
        return rc;
    if ((rc = msg_in(outer, type.p, (size_t)(type.end - type.p), 1, &tt)) != BFIT_OK || !tt.p)
        return rc;
    return parse_tensor_type(outer, tt, v);
}

/* ---- graph and model ------------------------------------------------------------ */

static int graph_alloc(pb r, bfit_onnx_model *m)
{
    int rc;
    if ((rc = count_field(r, 1, &m->nnodes)) != BFIT_OK || (rc = count_field(r, 5, &m->ninit)) != BFIT_OK ||
        (rc = count_field(r, 11, &m->ninputs)) != BFIT_OK || (rc = count_field(r, 12, &m->noutputs)) != BFIT_OK)
        return rc;
    if (m->nnodes > BFIT_ONNX_MAXNODES)
        return bad(&r, "the graph has %d nodes, more than the %d batchfit reads", m->nnodes, BFIT_ONNX_MAXNODES);
    m->nodes = calloc((size_t)m->nnodes + 1, sizeof *m->nodes);
    m->init = calloc((size_t)m->ninit + 1, sizeof *m->init);
    m->inputs = calloc((size_t)m->ninputs + 1, sizeof *m->inputs);
    m->outputs = calloc((size_t)m->noutputs + 1, sizeof *m->outputs);
    if (!m->nodes || !m->init || !m->inputs || !m->outputs)
        return bfit_fail(BFIT_ENOMEM, "onnx: out of host memory for %d nodes", m->nnodes);
    m->nnodes = m->ninit = m->ninputs = m->noutputs = 0; /* counted again while filling */
    return BFIT_OK;
}

static int graph_field(pb *r, bfit_onnx_model *m, uint32_t field, int wt)
{
    char what[64];
    const uint8_t *p;
    size_t n;
    int rc;

    if (field == 15)
        return bad(r, "the graph has sparse initializers, which batchfit does not read");
    if (field != 1 && field != 5 && field != 11 && field != 12)
        return skip(r, wt);
    if ((rc = want(r, field, wt, WT_LEN)) != BFIT_OK || (rc = bytes(r, &p, &n)) != BFIT_OK)
        return rc;
    switch (field) {
    case 1:
        snprintf(what, sizeof what, "graph.node[%d]", m->nnodes);
        r->what = what;
        rc = parse_node(r, p, n, &m->nodes[m->nnodes++]);
        break;
    case 5:
        snprintf(what, sizeof what, "graph.initializer[%d]", m->ninit);
        r->what = what;
        rc = parse_tensor(r, p, n, &m->init[m->ninit++]);
        break;
    default:
        snprintf(what, sizeof what, "graph.%s[%d]", field == 11 ? "input" : "output",
                 field == 11 ? m->ninputs : m->noutputs);
        r->what = what;
        rc = parse_vi(r, p, n, field == 11 ? &m->inputs[m->ninputs++] : &m->outputs[m->noutputs++]);
        break;
    }
    r->what = "graph";
    return rc;
}

static int parse_graph(pb *outer, const uint8_t *p, size_t n, bfit_onnx_model *m)
{
    pb r = sub(outer, p, n, "graph");
    uint32_t field;
    int wt, rc;

    if (m->nodes)
        return bad(outer, "the model has two graphs");
    if ((rc = graph_alloc(r, m)) != BFIT_OK)
        return rc;
    while (r.p < r.end)
        if ((rc = tag(&r, &field, &wt)) != BFIT_OK || (rc = graph_field(&r, m, field, wt)) != BFIT_OK)
            return rc;
    return BFIT_OK;
}

/* OperatorSetIdProto: the default domain's version is the opset. */
static int parse_opset(pb *outer, const uint8_t *p, size_t n, bfit_onnx_model *m)
{
    pb r = sub(outer, p, n, "opset_import");
    bfit_onnx_str domain = {"", 0};
    uint64_t version = 0;
    uint32_t field;
    int wt, rc;
    while (r.p < r.end) {
        if ((rc = tag(&r, &field, &wt)) != BFIT_OK)
            return rc;
        if (field == 1) {
            const uint8_t *b;
            size_t len;
            if ((rc = want(&r, field, wt, WT_LEN)) != BFIT_OK || (rc = bytes(&r, &b, &len)) != BFIT_OK)
                return rc;
            domain = str_of(b, len);
        } else if (field == 2) {
            if ((rc = want(&r, field, wt, WT_VARINT)) != BFIT_OK || (rc = varint(&r, &version)) != BFIT_OK)
                return rc;
        } else if ((rc = skip(&r, wt)) != BFIT_OK) {
            return rc;
        }
    }
    if (domain.n == 0 || bfit_onnx_streq(domain, "ai.onnx"))
        m->opset = (int64_t)(version & 0x7fffffff);
    return BFIT_OK;
}

static int model_field(pb *r, bfit_onnx_model *m, uint32_t field, int wt)
{
    const uint8_t *p;
    size_t n;
    uint64_t v;
    int rc;

    switch (field) {
    case 1:
        if ((rc = want(r, field, wt, WT_VARINT)) != BFIT_OK || (rc = varint(r, &v)) != BFIT_OK)
            return rc;
        m->ir_version = (int64_t)(v & 0x7fffffff);
        return BFIT_OK;
    case 2: case 3: case 7: case 8:
        if ((rc = want(r, field, wt, WT_LEN)) != BFIT_OK || (rc = bytes(r, &p, &n)) != BFIT_OK)
            return rc;
        if (field == 2)
            m->producer = str_of(p, n);
        else if (field == 3)
            m->producer_version = str_of(p, n);
        else if (field == 7)
            return parse_graph(r, p, n, m);
        else
            return parse_opset(r, p, n, m);
        return BFIT_OK;
    default:
        return skip(r, wt);
    }
}

void bfit_onnx_model_free(bfit_onnx_model *m)
{
    if (!m)
        return;
    for (int i = 0; m->nodes && i < m->nnodes; i++) {
        for (int k = 0; m->nodes[i].attr && k < m->nodes[i].nattr; k++)
            free(m->nodes[i].attr[k].t);
        free(m->nodes[i].in);
        free(m->nodes[i].out);
        free(m->nodes[i].attr);
    }
    free(m->nodes);
    free(m->init);
    free(m->inputs);
    free(m->outputs);
    free(m);
}

int bfit_onnx_parse(const void *buf, size_t len, const char *source, bfit_onnx_model **out)
{
    bfit_onnx_model *m = calloc(1, sizeof *m);
    pb r = {buf, (const uint8_t *)buf + len, buf, source ? source : "onnx", "model"};
    uint32_t field;
    int wt, rc = BFIT_OK;

    *out = NULL;
    if (!m)
        return bfit_fail(BFIT_ENOMEM, "onnx: out of host memory");
    snprintf(m->source, sizeof m->source, "%s", r.src);
    r.src = m->source;
    while (rc == BFIT_OK && r.p < r.end)
        if ((rc = tag(&r, &field, &wt)) == BFIT_OK)
            rc = model_field(&r, m, field, wt);
    if (rc == BFIT_OK && !m->nodes)
        rc = bfit_fail(BFIT_EFORMAT, "%s: the file holds no graph: it is not an ONNX model", m->source);
    if (rc != BFIT_OK) {
        bfit_onnx_model_free(m);
        return rc;
    }
    *out = m;
    return BFIT_OK;
}
