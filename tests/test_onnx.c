/* test_onnx.c - the ONNX reader and importer on models written here byte by
 * byte (a small protobuf writer), and the layers ONNX imports brought:
 *
 * - a good model loads: its graph, its input and classes, its initializers
 *   as the parameters' starting values under their own names;
 * - damaged files are refused with a message saying what and where, and
 *   leave nothing built: every truncation, fields of the wrong wire type,
 *   dimensions that overflow or are negative, data kept in an external file,
 *   a graph with a cycle, an initializer whose data disagrees with its
 *   shape, an undefined input, an operator batchfit lacks (named with its
 *   node, its inputs' shapes and the opset), a model that ends in Softmax;
 * - a dynamic batch's shape arithmetic evaluated on the host: what holds for
 *   every batch loads, batch times batch, an uneven division and a reshape
 *   that moves the batch are refused at their nodes;
 * - a Pad of zeros becomes the Conv's padding, its pads an attribute
 *   (opsets 7 to 10) or computed on the host as PyTorch's F.pad export
 *   computes them (a reversing Slice, a Transpose); padding batchfit
 *   cannot fold is refused at the Pad, saying why;
 * - grouped convolution, clip and concatenation against finite differences
 *   (PyTorch checks them too: tests/oracle/layer_oracle.py), a
 *   concatenation's backward adding into a gradient another consumer wrote,
 *   and a DenseNet-like graph whose features feed several concatenations
 *   training without temporaries and planned to the byte;
 * - a vision transformer's token layers (reshape, transpose, class token,
 *   position embedding, select) against finite differences. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "batch/plan.h"
#include "gradcheck.h"
#include "nn/model.h"
#include "nn/onnx.h"
#include "nn/wsrc.h"
#include "nn/zoo.h"
#include "tdev.h"
#include "train/weights.h"

/* ---- a protobuf writer ------------------------------------------------------ */

typedef struct pbw {
    uint8_t *b;
    size_t n, cap;
} pbw;

static pbw *pb_new(void)
{
    pbw *w = calloc(1, sizeof *w);
    assert_non_null(w);
    w->cap = 1 << 16;
    w->b = malloc(w->cap);
    assert_non_null(w->b);
    return w;
}

static void pb_free(pbw *w)
{
    if (w)
        free(w->b);
    free(w);
}

static void put(pbw *w, const void *p, size_t n)
{
    while (w->n + n > w->cap) {
        w->cap *= 2;
        w->b = realloc(w->b, w->cap);
        assert_non_null(w->b);
    }
    memcpy(w->b + w->n, p, n);
    w->n += n;
}

static void pv(pbw *w, uint64_t v)
{
    do {
        uint8_t c = (uint8_t)(v & 0x7f);
        v >>= 7;
        c |= v ? 0x80 : 0;
        put(w, &c, 1);
    } while (v);
}

static void ptag(pbw *w, int f, int wt) { pv(w, (uint64_t)f << 3 | (uint64_t)wt); }
static void pint(pbw *w, int f, int64_t v) { ptag(w, f, 0), pv(w, (uint64_t)v); }
static void pbytes(pbw *w, int f, const void *p, size_t n) { ptag(w, f, 2), pv(w, n), put(w, p, n); }
static void pstr(pbw *w, int f, const char *s) { pbytes(w, f, s, strlen(s)); }
static void pfloat(pbw *w, int f, float v) { ptag(w, f, 5), put(w, &v, 4); }

/* Field f holding message m, which is freed. */
static void pmsg(pbw *w, int f, pbw *m)
{
    pbytes(w, f, m->b, m->n);
    pb_free(m);
}

/* ---- ONNX messages ------------------------------------------------------------ */

/* TensorProto: float values as raw_data (n of them, NULL: 0.1 * i). */
static pbw *tensor(const char *name, const int64_t *dims, int nd, const float *vals, int64_t n)
{
    pbw *t = pb_new();
    float *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    assert_non_null(v);
    for (int d = 0; d < nd; d++)
        pint(t, 1, dims[d]);
    pint(t, 2, 1);
    pstr(t, 8, name);
    for (int64_t i = 0; i < n; i++)
        v[i] = vals ? vals[i] : 0.1f * (float)(i % 17) - 0.8f;
    pbytes(t, 9, v, sizeof *v * (size_t)n);
    free(v);
    return t;
}

/* ValueInfoProto of a tensor of ONNX type elem (1 float, 7 int64); a dimension of -1 is the symbolic "N", one
 * of -2 the symbolic "T", one of -3 the symbolic "batch". */
static pbw *value_info_t(const char *name, const int64_t *dims, int nd, int elem)
{
    pbw *v = pb_new(), *type = pb_new(), *tt = pb_new(), *shape = pb_new();
    for (int d = 0; d < nd; d++) {
        pbw *dim = pb_new();
        if (dims[d] < 0)
            pstr(dim, 2, dims[d] == -2 ? "T" : dims[d] == -3 ? "batch" : "N");
        else
            pint(dim, 1, dims[d]);
        pmsg(shape, 1, dim);
    }
    pint(tt, 1, elem);
    pmsg(tt, 2, shape);
    pmsg(type, 1, tt);
    pstr(v, 1, name);
    pmsg(v, 2, type);
    return v;
}

static pbw *value_info(const char *name, const int64_t *dims, int nd) { return value_info_t(name, dims, nd, 1); }

static pbw *node(const char *op, const char *name, const char *const *in, int nin, const char *const *out, int nout)
{
    pbw *n = pb_new();
    for (int i = 0; i < nin; i++)
        pstr(n, 1, in[i]);
    for (int i = 0; i < nout; i++)
        pstr(n, 2, out[i]);
    pstr(n, 3, name);
    pstr(n, 4, op);
    return n;
}

/* AttributeProto: its name, then (attr_put) its type (INT 2, INTS 7, FLOAT 1)
 * after the value, and onto node n. */
static pbw *attr_new(const char *name)
{
    pbw *a = pb_new();
    pstr(a, 1, name);
    return a;
}

static void attr_put(pbw *n, pbw *a, int type)
{
    pint(a, 20, type);
    pmsg(n, 5, a);
}

static void attr_int(pbw *n, const char *name, int64_t v)
{
    pbw *a = attr_new(name);
    pint(a, 3, v);
    attr_put(n, a, 2);
}

static void attr_ints(pbw *n, const char *name, const int64_t *v, int k)
{
    pbw *a = attr_new(name);
    for (int i = 0; i < k; i++)
        pint(a, 8, v[i]);
    attr_put(n, a, 7);
}

static void attr_str(pbw *n, const char *name, const char *v)
{
    pbw *a = attr_new(name);
    pstr(a, 4, v);
    attr_put(n, a, 3);
}

static void attr_float(pbw *n, const char *name, float v)
{
    pbw *a = attr_new(name);
    pfloat(a, 2, v);
    attr_put(n, a, 1);
}

/* ModelProto: ir_version, the opset, then the graph (so a cut before the
 * graph's end is never a whole model). */
static pbw *model_op(pbw *graph, int opset)
{
    pbw *m = pb_new(), *op = pb_new();
    pint(m, 1, 8);
    pstr(m, 2, "test_onnx");
    pint(op, 2, opset);
    pmsg(m, 8, op);
    pmsg(m, 7, graph);
    return m;
}

static pbw *model(pbw *graph) { return model_op(graph, 17); }

/* A node `name`: Gemm(x, W, B) -> out, the weights fc.weight and fc.bias. */
static void gemm_node(pbw *g, const char *name, const char *out)
{
    const char *gi[3] = {"x", "fc.weight", "fc.bias"}, *go[1] = {out};
    if (!strcmp(name, "fc2")) /* another layer: weights of its own (a shared weight is refused) */
        gi[1] = "fc2.weight", gi[2] = "fc2.bias";
    pbw *n = node("Gemm", name, gi, 3, go, 1);
    attr_int(n, "transB", 1);
    pmsg(g, 1, n);
}

/* The rest of a graph of gemm_node: its name, W [3,4] and B [3], the
 * input x [N,4] and the output logits [N,3]. */
static pbw *gemm_rest(pbw *g)
{
    static const int64_t in[2] = {-1, 4}, out[2] = {-1, 3}, wd[2] = {3, 4}, bd[1] = {3};
    pstr(g, 2, "g");
    pmsg(g, 5, tensor("fc.weight", wd, 2, NULL, 12));
    pmsg(g, 5, tensor("fc.bias", bd, 1, NULL, 3));
    pmsg(g, 11, value_info("x", in, 2));
    pmsg(g, 12, value_info("logits", out, 2));
    return g;
}

/* The classifier at a graph's end: logits [N,3] = Gemm(in [N,4], W [3,4],
 * B [3]) (the last node), the graph's name, W and B, and the output. */
static void fc_head(pbw *g, const char *in)
{
    static const int64_t out[2] = {-1, 3}, wd[2] = {3, 4}, bd[1] = {3};
    const char *gi[3] = {in, "fc.weight", "fc.bias"}, *go[1] = {"logits"};
    pbw *n = node("Gemm", "fc", gi, 3, go, 1);
    attr_int(n, "transB", 1);
    pmsg(g, 1, n);
    pstr(g, 2, "g");
    pmsg(g, 5, tensor("fc.weight", wd, 2, NULL, 12));
    pmsg(g, 5, tensor("fc.bias", bd, 1, NULL, 3));
    pmsg(g, 12, value_info("logits", out, 2));
}

/* x [N,4] -> Gemm(W [3,4], B [3]) -> (op2) -> logits [N,3]; op2 NULL: none. */
static pbw *gemm_graph(const char *op2)
{
    const char *si[1] = {"h"}, *so[1] = {"logits"};
    pbw *g = pb_new();
    gemm_node(g, "fc", op2 ? "h" : "logits");
    if (op2)
        pmsg(g, 1, node(op2, "last", si, 1, so, 1));
    return gemm_rest(g);
}

/* TensorProto of int64 values (raw_data). */
static pbw *tensor_i64(const char *name, const int64_t *dims, int nd, const int64_t *vals, int64_t n)
{
    pbw *t = pb_new();
    for (int d = 0; d < nd; d++)
        pint(t, 1, dims[d]);
    pint(t, 2, 7);
    pstr(t, 8, name);
    pbytes(t, 9, vals, sizeof *vals * (size_t)n);
    return t;
}

/* A dynamic batch's shape arithmetic: x [N,4]; s = Shape(x); t = op(s, b)
 * where b is "s" or the initializer k (int64 [2]); Reshape(x, t) -> Gemm ->
 * logits. op NULL: t = s. */
static pbw *shape_graph(const char *op, const char *b, const int64_t k[2])
{
    static const int64_t in[2] = {-1, 4}, kd[1] = {2};
    const char *si[1] = {"x"}, *so[1] = {"s"}, *oi[2] = {"s", b}, *oo[1] = {"t"};
    const char *ri[2] = {"x", op ? "t" : "s"}, *ro[1] = {"r"};
    pbw *g = pb_new();
    pmsg(g, 1, node("Shape", "shape", si, 1, so, 1));
    if (op)
        pmsg(g, 1, node(op, "arith", oi, 2, oo, 1));
    pmsg(g, 1, node("Reshape", "reshape", ri, 2, ro, 1));
    fc_head(g, "r");
    pmsg(g, 5, tensor_i64("k", kd, 1, k, 2));
    pmsg(g, 11, value_info("x", in, 2));
    return g;
}

/* x [N,4] -> Shape -> Cast(to) -> Reshape(x, that) -> the classifier. */
static pbw *cast_graph(int64_t to)
{
    static const int64_t in[2] = {-1, 4};
    const char *si[1] = {"x"}, *so[1] = {"s"}, *co[1] = {"t"}, *ri[2] = {"x", "t"}, *ro[1] = {"r"};
    pbw *g = pb_new(), *n = node("Cast", "cast", so, 1, co, 1);
    pmsg(g, 1, node("Shape", "shape", si, 1, so, 1));
    attr_int(n, "to", to);
    pmsg(g, 1, n);
    pmsg(g, 1, node("Reshape", "reshape", ri, 2, ro, 1));
    fc_head(g, "r");
    pmsg(g, 11, value_info("x", in, 2));
    return g;
}

/* x [N,4] -> Reshape(x, Cast(c, to)) -> the classifier, c the initializer
 * [0, v] (int64, or float when f is given: [0, f]); it loads when the cast
 * gives [0, 4] (0: the batch kept). */
static pbw *cast_const_graph(int64_t to, int64_t v, const float *f)
{
    static const int64_t in[2] = {-1, 4}, d2[1] = {2};
    const int64_t iv[2] = {0, v};
    const float fv[2] = {0, f ? *f : 0};
    const char *ci[1] = {"c"}, *co[1] = {"t"}, *ri[2] = {"x", "t"}, *ro[1] = {"r"};
    pbw *g = pb_new(), *n = node("Cast", "cast", ci, 1, co, 1);
    attr_int(n, "to", to);
    pmsg(g, 1, n);
    pmsg(g, 1, node("Reshape", "reshape", ri, 2, ro, 1));
    fc_head(g, "r");
    pmsg(g, 5, f ? tensor("c", d2, 1, fv, 2) : tensor_i64("c", d2, 1, iv, 2));
    pmsg(g, 11, value_info("x", in, 2));
    return g;
}

/* x [N,4] -> Reshape(x, Cast(Cast(c, to), int64) - k) -> the classifier,
 * c the initializer [0, v] (message c), k = [0, want - 4]: it loads when
 * the casts give want. */
static pbw *cast_round_graph_c(int64_t to, pbw *c, int64_t want)
{
    static const int64_t in[2] = {-1, 4}, d2[1] = {2};
    const int64_t kv[2] = {0, want - 4};
    const char *ci[1] = {"c"}, *fo[1] = {"f"}, *io[1] = {"i"}, *si[2] = {"i", "k"}, *so[1] = {"t"};
    const char *ri[2] = {"x", "t"}, *ro[1] = {"r"};
    pbw *g = pb_new(), *n = node("Cast", "tofloat", ci, 1, fo, 1);
    attr_int(n, "to", to);
    pmsg(g, 1, n);
    n = node("Cast", "back", fo, 1, io, 1);
    attr_int(n, "to", BFIT_ONNX_INT64);
    pmsg(g, 1, n);
    pmsg(g, 1, node("Sub", "sub", si, 2, so, 1));
    pmsg(g, 1, node("Reshape", "reshape", ri, 2, ro, 1));
    fc_head(g, "r");
    pmsg(g, 5, c);
    pmsg(g, 5, tensor_i64("k", d2, 1, kv, 2));
    pmsg(g, 11, value_info("x", in, 2));
    return g;
}

/* The same with c = [0, v] int64: it loads when the cast to `to` rounds v
 * down by r. */
static pbw *cast_round_graph(int64_t to, int64_t v, int64_t r)
{
    static const int64_t d2[1] = {2};
    const int64_t cv[2] = {0, v};
    return cast_round_graph_c(to, tensor_i64("c", d2, 1, cv, 2), v - r);
}

/* The same with c = [0, v] a double initializer (raw_data): it loads when
 * v cast to `to`, then to int64, is want. */
static pbw *cast_round_graph_f64(int64_t to, double v, int64_t want)
{
    static const int64_t d2[1] = {2};
    const double cv[2] = {0, v};
    pbw *t = pb_new();
    pint(t, 1, d2[0]);
    pint(t, 2, BFIT_ONNX_DOUBLE);
    pstr(t, 8, "c");
    pbytes(t, 9, cv, sizeof cv);
    return cast_round_graph_c(to, t, want);
}

/* x [N,4] -> Reshape(x, Where(Cast(Shape(x) - [d, 0], bool), [0, 4], [1, 4]))
 * -> the classifier: [0, 4] where N - d is never 0. */
static pbw *cast_bool_graph(int64_t d)
{
    static const int64_t in[2] = {-1, 4}, d2[1] = {2}, av[2] = {0, 4}, bv[2] = {1, 4};
    const int64_t kv[2] = {d, 0};
    const char *x[1] = {"x"}, *so[1] = {"s"}, *si[2] = {"s", "k"}, *mo[1] = {"m"}, *co[1] = {"c"};
    const char *wi[3] = {"c", "a", "b"}, *wo[1] = {"t"}, *ri[2] = {"x", "t"}, *ro[1] = {"r"};
    pbw *g = pb_new(), *n;
    pmsg(g, 1, node("Shape", "shape", x, 1, so, 1));
    pmsg(g, 1, node("Sub", "sub", si, 2, mo, 1));
    n = node("Cast", "cast", mo, 1, co, 1);
    attr_int(n, "to", BFIT_ONNX_BOOL);
    pmsg(g, 1, n);
    pmsg(g, 1, node("Where", "where", wi, 3, wo, 1));
    pmsg(g, 1, node("Reshape", "reshape", ri, 2, ro, 1));
    fc_head(g, "r");
    pmsg(g, 5, tensor_i64("k", d2, 1, kv, 2));
    pmsg(g, 5, tensor_i64("a", d2, 1, av, 2));
    pmsg(g, 5, tensor_i64("b", d2, 1, bv, 2));
    pmsg(g, 11, value_info("x", in, 2));
    return g;
}

/* x [N,4] -> Reshape(x, Cast(Shape(x) * k, to)) -> the classifier. */
static pbw *scaled_cast_graph(const int64_t k[2], int64_t to)
{
    static const int64_t in[2] = {-1, 4}, d2[1] = {2};
    const char *x[1] = {"x"}, *so[1] = {"s"}, *mi[2] = {"s", "k"}, *mo[1] = {"m"}, *co[1] = {"t"};
    const char *ri[2] = {"x", "t"}, *ro[1] = {"r"};
    pbw *g = pb_new(), *n;
    pmsg(g, 1, node("Shape", "shape", x, 1, so, 1));
    pmsg(g, 1, node("Mul", "mul", mi, 2, mo, 1));
    n = node("Cast", "cast", mo, 1, co, 1);
    attr_int(n, "to", to);
    pmsg(g, 1, n);
    pmsg(g, 1, node("Reshape", "reshape", ri, 2, ro, 1));
    fc_head(g, "r");
    pmsg(g, 5, tensor_i64("k", d2, 1, k, 2));
    pmsg(g, 11, value_info("x", in, 2));
    return g;
}

/* Load the bytes; on failure check the graph is left empty and, if want is
 * given, that the message says it. Returns the status. */
static int load_seq(const pbw *m, int seq, bfit_graph_desc *g, const char *want)
{
    int rc = bfit_onnx_load_buffer(m->b, m->n, "t.onnx", seq, g);
    if (rc == BFIT_OK)
        return rc;
    assert_int_equal(g->nnodes, 0);
    assert_null(g->nodes);
    assert_null(g->wsrc);
    if (want && !strstr(bfit_errmsg(), want))
        fail_msg("expected \"%s\" in: %s", want, bfit_errmsg());
    return rc;
}

static int load(const pbw *m, bfit_graph_desc *g, const char *want) { return load_seq(m, 0, g, want); }

/* ---- good models -------------------------------------------------------------- */

/* A Gemm becomes a linear layer whose weights start as the file's, named as
 * the file names them; --init random draws them instead. */
static void test_good_model(void **st)
{
    pbw *m = model(gemm_graph(NULL));
    bfit_graph_desc g;
    bfit_model *M;
    tdev t;
    float w[12], b[3];

    (void)st;
    assert_int_equal(load(m, &g, NULL), BFIT_OK);
    assert_int_equal(g.nnodes, 1);
    assert_int_equal(g.nodes[0].cfg.kind, BFIT_L_LINEAR);
    assert_int_equal(g.nodes[0].cfg.units, 3);
    assert_true(bfit_shape_eq(g.input, bfit_shape_vec(4)));
    tdev_open(&t, 1);
    assert_int_equal(bfit_model_new(&g, t.dev, t.arena, &M), BFIT_OK);
    bfit_graph_fini(&g); /* the model keeps the file's weights alive */
    pb_free(m);          /* and they are the loader's copy, not the caller's buffer */
    assert_int_equal(M->nclasses, 3);
    assert_string_equal(bfit_model_param_name(M, 0, 0), "fc.weight");
    assert_string_equal(bfit_model_param_name(M, 0, 1), "fc.bias");
    assert_int_equal(bfit_model_alloc_params(M, 1), BFIT_OK);
    assert_int_equal(bfit_model_init_params(M, 3), BFIT_OK);
    assert_int_equal(bfit_device_download(t.dev, w, M->nodes[0].l->params[0].data, sizeof w), BFIT_OK);
    assert_int_equal(bfit_device_download(t.dev, b, M->nodes[0].l->params[1].data, sizeof b), BFIT_OK);
    for (int i = 0; i < 12; i++)
        assert_true(w[i] == 0.1f * (float)(i % 17) - 0.8f);
    for (int i = 0; i < 3; i++)
        assert_true(b[i] == 0.1f * (float)i - 0.8f);
    bfit_model_set_init_random(M, 1);
    assert_int_equal(bfit_model_init_params(M, 3), BFIT_OK);
    assert_int_equal(bfit_device_download(t.dev, w, M->nodes[0].l->params[0].data, sizeof w), BFIT_OK);
    assert_true(w[0] != -0.8f || w[1] != 0.1f - 0.8f);
    bfit_model_free(M);
    /* the public call, from a buffer */
    m = model(gemm_graph(NULL));
    assert_int_equal(bfit_model_load_onnx(m->b, m->n, "buffer.onnx", t.dev, &M), BFIT_OK);
    assert_int_equal(bfit_model_classes(M), 3);
    assert_int_equal(bfit_model_param_count(M), 15);
    bfit_model_free(M);
    m->n = 10;
    assert_int_equal(bfit_model_load_onnx(m->b, m->n, "buffer.onnx", t.dev, &M), BFIT_EFORMAT);
    assert_null(M);
    assert_non_null(strstr(bfit_errmsg(), "buffer.onnx: byte"));
    pb_free(m);
    tdev_close(&t);
}

/* ---- damaged files -------------------------------------------------------------- */

/* Every proper prefix of a model is refused, and says so. */
static void test_truncated(void **st)
{
    pbw *m = model(gemm_graph(NULL));
    bfit_graph_desc g;
    int truncated = 0;
    (void)st;
    for (size_t k = 0; k < m->n; k++) {
        int rc = bfit_onnx_load_buffer(m->b, k, "t.onnx", 0, &g);
        if (rc == BFIT_OK)
            fail_msg("the first %zu of %zu bytes loaded as a model", k, m->n);
        assert_int_equal(g.nnodes, 0);
        assert_null(g.wsrc);
        truncated += strstr(bfit_errmsg(), "truncated") != NULL;
    }
    print_message("%zu prefixes refused, %d of them as truncated; e.g.: %s\n", m->n, truncated, bfit_errmsg());
    assert_true(truncated > (int)m->n / 2);
    pb_free(m);
}

static void test_wrong_wire_types(void **st)
{
    bfit_graph_desc g;
    pbw *m = pb_new(), *gr, *n, *t;
    static const int64_t out[2] = {-1, 3};
    (void)st;
    /* the graph as a varint */
    pint(m, 1, 8);
    pint(m, 7, 5);
    assert_int_equal(load(m, &g, "field 7 is a varint but onnx.proto declares it length-delimited"), BFIT_EFORMAT);
    pb_free(m);
    /* a node's op_type as a varint */
    gr = pb_new();
    n = pb_new();
    pstr(n, 1, "x");
    pint(n, 4, 1);
    pmsg(gr, 1, n);
    pmsg(gr, 12, value_info("logits", out, 2));
    m = model(gr);
    assert_int_equal(load(m, &g, "graph.node[0]: field 4 is a varint"), BFIT_EFORMAT);
    pb_free(m);
    /* a tensor's data type as 32-bit */
    gr = gemm_graph(NULL);
    t = pb_new();
    pint(t, 1, 3);
    ptag(t, 2, 5);
    put(t, "\1\0\0\0", 4);
    pstr(t, 8, "odd");
    pmsg(gr, 5, t);
    m = model(gr);
    assert_int_equal(load(m, &g, "field 2 is 32-bit but onnx.proto declares it a varint"), BFIT_EFORMAT);
    pb_free(m);
    /* a group, which ONNX never writes */
    m = pb_new();
    ptag(m, 7, 3);
    assert_int_equal(load(m, &g, "field 7 is a group start but onnx.proto declares it length-delimited"), BFIT_EFORMAT);
    pb_free(m);
}

static pbw *graph_with_init(pbw *t)
{
    pbw *g = gemm_graph(NULL);
    pmsg(g, 5, t);
    return g;
}

static void test_bad_dimensions(void **st)
{
    bfit_graph_desc g;
    pbw *t, *m;
    static const int64_t huge[3] = {1 << 20, 1 << 20, 1 << 20};
    (void)st;
    t = tensor("huge", huge, 3, NULL, 1);
    m = model(graph_with_init(t));
    assert_int_equal(load(m, &g, "tensor 'huge' has more than 2^40 elements (dimension 2"), BFIT_EFORMAT);
    pb_free(m);
    /* -1 as a dimension (a varint of 2^64 - 1) */
    t = pb_new();
    pint(t, 1, -1);
    pint(t, 2, 1);
    pstr(t, 8, "negative");
    m = model(graph_with_init(t));
    assert_int_equal(load(m, &g, "tensor 'negative' has the negative dimension -1"), BFIT_EFORMAT);
    pb_free(m);
    /* more dimensions than ONNX models have */
    t = pb_new();
    for (int i = 0; i < 9; i++)
        pint(t, 1, 1);
    m = model(graph_with_init(t));
    assert_int_equal(load(m, &g, "more than 8 dimensions"), BFIT_EFORMAT);
    pb_free(m);
}

/* Data kept in another file (onnx's save_as_external_data). */
static void test_external_data(void **st)
{
    bfit_graph_desc g;
    pbw *t = pb_new(), *kv = pb_new(), *m;
    (void)st;
    pint(t, 1, 4);
    pint(t, 2, 1);
    pstr(t, 8, "big.weight");
    pstr(kv, 1, "location");
    pstr(kv, 2, "weights.bin");
    pmsg(t, 13, kv);
    pint(t, 14, 1);
    m = model(graph_with_init(t));
    assert_int_equal(load(m, &g, "tensor 'big.weight' keeps its data in an external file"), BFIT_EFORMAT);
    pb_free(m);
}

/* Raw data of another size than the shape says, and typed values too few. */
static void test_size_mismatch(void **st)
{
    static const int64_t d[2] = {3, 4};
    bfit_graph_desc g;
    pbw *t, *m;
    (void)st;
    t = tensor("short", d, 2, NULL, 11);
    m = model(graph_with_init(t));
    assert_int_equal(load(m, &g, "tensor 'short' holds 44 bytes of raw data"), BFIT_EFORMAT);
    pb_free(m);
    t = pb_new();
    pint(t, 1, 3);
    pint(t, 2, 1);
    pstr(t, 8, "typed");
    pfloat(t, 4, 1.0f);
    pfloat(t, 4, 2.0f);
    m = model(graph_with_init(t));
    assert_int_equal(load(m, &g, "tensor 'typed' holds 2 values, its shape wants 3"), BFIT_EFORMAT);
    pb_free(m);
}

/* a = Relu(b), b = Relu(a), logits = Gemm(a): no order computes it. */
static void test_cycle(void **st)
{
    static const int64_t in[2] = {-1, 4}, out[2] = {-1, 3}, wd[2] = {3, 4};
    const char *ga[1] = {"b"}, *oa[1] = {"a"}, *gb[1] = {"a"}, *ob[1] = {"b"}, *gi[2] = {"a", "w"}, *go[1] = {"logits"};
    bfit_graph_desc g;
    pbw *gr = pb_new(), *m, *n;
    (void)st;
    pmsg(gr, 1, node("Relu", "first", ga, 1, oa, 1));
    pmsg(gr, 1, node("Relu", "second", gb, 1, ob, 1));
    n = node("Gemm", "fc", gi, 2, go, 1);
    attr_int(n, "transB", 1);
    pmsg(gr, 1, n);
    pmsg(gr, 5, tensor("w", wd, 2, NULL, 12));
    pmsg(gr, 11, value_info("x", in, 2));
    pmsg(gr, 12, value_info("logits", out, 2));
    m = model(gr);
    assert_int_equal(load(m, &g, "node 'first' (Relu): the graph has a cycle through this node"), BFIT_EFORMAT);
    pb_free(m);
}

static void test_undefined_input(void **st)
{
    static const int64_t in[2] = {-1, 4}, out[2] = {-1, 3};
    const char *gi[1] = {"nope"}, *go[1] = {"logits"};
    bfit_graph_desc g;
    pbw *gr = pb_new(), *m;
    (void)st;
    pmsg(gr, 1, node("Relu", "r", gi, 1, go, 1));
    pmsg(gr, 11, value_info("x", in, 2));
    pmsg(gr, 12, value_info("logits", out, 2));
    m = model(gr);
    assert_int_equal(load(m, &g, "input 1 reads 'nope', which no node, initializer or graph input defines"),
                     BFIT_EFORMAT);
    pb_free(m);
}

/* Gemm -> h; s = Sigmoid(h); logits = Mul(a, b) of two of h, s and x2
 * (x2 = Gemm of the input again, another tensor, made when a is x2). */
static pbw *silu_graph(const char *a, const char *b)
{
    const char *si[1] = {"h"}, *so[1] = {"s"}, *mi[2] = {a, b}, *mo[1] = {"logits"};
    pbw *g = pb_new();
    gemm_node(g, "fc", "h");
    if (!strcmp(a, "x2")) {
        static const int64_t wd[2] = {3, 4}, bd[1] = {3};
        gemm_node(g, "fc2", "x2");
        pmsg(g, 5, tensor("fc2.weight", wd, 2, NULL, 12));
        pmsg(g, 5, tensor("fc2.bias", bd, 1, NULL, 3));
    }
    pmsg(g, 1, node("Sigmoid", "sig", si, 1, so, 1));
    pmsg(g, 1, node("Mul", "mul", mi, 2, mo, 1));
    return gemm_rest(g);
}

/* One Linear applied twice (its weight and bias read by two Gemms): the
 * second layer shares the first's parameters (cfg.share); read through an
 * Identity's other name (an exporter's merged equal constants) each is a
 * parameter of its own; the weight shared and the bias not is refused. */
static void test_shared_weight(void **st)
{
    const char *go[1] = {"x2"}, *si[1] = {"h"}, *so[1] = {"s"}, *mi[2] = {"x2", "s"}, *mo[1] = {"logits"};
    const char *ii[2] = {"fc.weight", "fc.bias"}, *io[2] = {"fc2.weight", "fc2.bias"};
    static const int64_t bd[1] = {3};
    bfit_graph_desc g;
    pbw *m, *n;
    (void)st;
    for (int form = 0; form < 3; form++) { /* shared, aliased, half shared */
        const char *gi[3] = {"x", form == 1 ? "fc2.weight" : "fc.weight", form ? "fc2.bias" : "fc.bias"};
        pbw *gr = pb_new();
        gemm_node(gr, "fc", "h");
        if (form == 1) {
            pmsg(gr, 1, node("Identity", "same", ii, 1, io, 1));
            pmsg(gr, 1, node("Identity", "same_b", ii + 1, 1, io + 1, 1));
        }
        if (form == 2)
            pmsg(gr, 5, tensor("fc2.bias", bd, 1, NULL, 3));
        n = node("Gemm", "fc_again", gi, 3, go, 1);
        attr_int(n, "transB", 1);
        pmsg(gr, 1, n);
        pmsg(gr, 1, node("Sigmoid", "sig", si, 1, so, 1));
        pmsg(gr, 1, node("Mul", "mul", mi, 2, mo, 1));
        m = model(gemm_rest(gr));
        if (form < 2) {
            assert_int_equal(load(m, &g, NULL), BFIT_OK);
            assert_int_equal(g.nnodes, 4); /* two linears, the sigmoid, the product */
            assert_int_equal(g.nodes[1].cfg.kind, BFIT_L_LINEAR);
            assert_int_equal(g.nodes[1].cfg.share, form ? 0 : 1); /* the first node's parameters */
            assert_int_equal(bfit_wsrc_count(g.wsrc), form ? 4 : 2);
            bfit_graph_fini(&g);
        } else {
            assert_int_equal(load(m, &g, "node 'fc_again' (Gemm, opset 17) with inputs 'x' [N,4], 'fc.weight' [3,4] "
                                         "float, 'fc2.bias' [3] float: the parameter 'fc.weight' is another "
                                         "layer's too, and this layer's others are not that layer's"),
                             BFIT_EINVAL);
        }
        pb_free(m);
    }
}

/* nn.SiLU's export, x * Sigmoid(x) (either order), is one silu layer; a
 * Sigmoid alone is a sigmoid layer; a Sigmoid gating another vector is a
 * sigmoid and a `scale` (each feature by its gate: the image's case with
 * H = W = 1, test_squeeze_excitation). HardSwish is one layer too. */
static void test_silu(void **st)
{
    static const char *const ab[2][2] = {{"h", "s"}, {"s", "h"}};
    bfit_graph_desc g;
    pbw *m;
    (void)st;
    for (int i = 0; i < 2; i++) {
        m = model(silu_graph(ab[i][0], ab[i][1]));
        assert_int_equal(load(m, &g, NULL), BFIT_OK);
        assert_int_equal(g.nnodes, 2);
        assert_int_equal(g.nodes[0].cfg.kind, BFIT_L_LINEAR);
        assert_int_equal(g.nodes[1].cfg.kind, BFIT_L_SILU);
        bfit_graph_fini(&g);
        pb_free(m);
    }
    m = model(gemm_graph("Sigmoid"));
    assert_int_equal(load(m, &g, NULL), BFIT_OK);
    assert_int_equal(g.nnodes, 2);
    assert_int_equal(g.nodes[1].cfg.kind, BFIT_L_SIGMOID);
    bfit_graph_fini(&g);
    pb_free(m);
    m = model(gemm_graph("Tanh"));
    assert_int_equal(load(m, &g, NULL), BFIT_OK);
    assert_int_equal(g.nodes[1].cfg.kind, BFIT_L_TANH);
    bfit_graph_fini(&g);
    pb_free(m);
    m = model(gemm_graph("HardSwish"));
    assert_int_equal(load(m, &g, NULL), BFIT_OK);
    assert_int_equal(g.nodes[1].cfg.kind, BFIT_L_HARDSWISH);
    bfit_graph_fini(&g);
    pb_free(m);
    m = model(silu_graph("x2", "s"));
    assert_int_equal(load(m, &g, NULL), BFIT_OK);
    assert_int_equal(g.nnodes, 4);
    assert_int_equal(g.nodes[2].cfg.kind, BFIT_L_SIGMOID);
    assert_int_equal(g.nodes[3].cfg.kind, BFIT_L_SCALE);
    assert_int_equal(g.nodes[3].in[0], 2); /* x2 (fc2's output), then the gate */
    assert_int_equal(g.nodes[3].in[1], 3);
    bfit_graph_fini(&g);
    pb_free(m);
}

/* x [N,4] -> Gemm -> Gelu (its approximate attribute `approx`, NULL: none) -> logits. */
static pbw *gelu_graph(const char *approx)
{
    const char *si[1] = {"h"}, *so[1] = {"logits"};
    pbw *g = pb_new(), *n = node("Gelu", "gelu", si, 1, so, 1);
    gemm_node(g, "fc", "h");
    if (approx)
        attr_str(n, "approximate", approx);
    pmsg(g, 1, n);
    return gemm_rest(g);
}

/* ONNX's Gelu (opset 20, PyTorch 2.x's nn.GELU()) is the gelu layer, as the
 * erf pattern of opset 17 is, and with approximate='tanh' the gelu layer's
 * tanh form (since 2026-12-05; refused before); another approximate, or a
 * Gelu in a model of an opset before 20, is refused at the node. */
static void test_gelu_op(void **st)
{
    static const char *const bad[2][2] = {
        {"erf", "node 'gelu' (Gelu, opset 20) with inputs 'h' [N,3]: approximate='erf' is not a GELU ONNX defines"},
        {NULL, "node 'gelu' (Gelu, opset 17) with inputs 'h' [N,3]: Gelu is a standard operator from opset 20 on, "
               "and the model imports opset 17"}};
    const char *const good[3] = {NULL, "none", "tanh"};
    bfit_graph_desc g;
    pbw *m;
    (void)st;
    for (int i = 0; i < 3; i++) {
        m = model_op(gelu_graph(good[i]), 20);
        assert_int_equal(load(m, &g, NULL), BFIT_OK);
        assert_int_equal(g.nnodes, 2);
        assert_int_equal(g.nodes[1].cfg.kind, BFIT_L_GELU);
        assert_int_equal(g.nodes[1].cfg.tanh, i == 2);
        bfit_graph_fini(&g);
        pb_free(m);
    }
    for (int i = 0; i < 2; i++) {
        m = model_op(gelu_graph(bad[i][0]), i < 1 ? 20 : 17);
        assert_int_equal(load(m, &g, bad[i][1]), BFIT_EINVAL);
        pb_free(m);
    }
}

/* x [N,4] -> Gemm -> op (its alpha attribute, unless NAN) -> logits [N,3]. */
static pbw *alpha_graph(const char *op, float alpha)
{
    const char *si[1] = {"h"}, *so[1] = {"logits"};
    pbw *g = pb_new(), *n = node(op, "act", si, 1, so, 1);
    gemm_node(g, "fc", "h");
    if (!isnan(alpha))
        attr_float(n, "alpha", alpha);
    pmsg(g, 1, n);
    return gemm_rest(g);
}

/* x [N,4] -> Gemm -> h; Mul(h, b) (swap: Mul(b, h)), Softplus, Div by d ->
 * logits: nn.Softplus(beta=b)'s export, b and d scalar initializers. */
static pbw *softplus_beta_graph(float b, float d, int swap)
{
    const char *mi[2] = {swap ? "b" : "h", swap ? "h" : "b"}, *mo[1] = {"hb"}, *so[1] = {"sp"},
               *di[2] = {"sp", "d"}, *dout[1] = {"logits"};
    pbw *g = pb_new();
    gemm_node(g, "fc", "h");
    pmsg(g, 1, node("Mul", "scale", mi, 2, mo, 1));
    pmsg(g, 1, node("Softplus", "softplus", mo, 1, so, 1));
    pmsg(g, 1, node("Div", "unscale", di, 2, dout, 1));
    pmsg(g, 5, tensor("b", NULL, 0, &b, 1));
    pmsg(g, 5, tensor("d", NULL, 0, &d, 1));
    return gemm_rest(g);
}

/* LeakyRelu, Elu and Celu keep their alpha, ONNX's default (0.01, 1, 1)
 * when it is absent; Selu is selu with its defaults (nn.SELU's; torch.onnx
 * writes no attribute) given or absent, and refused with others; Softplus is softplus with beta 1 and PyTorch's threshold 20 (the
 * same function in f32); Mul by b, Softplus, Div by b (either order of the
 * Mul) is one softplus of beta b; a Div by another number, and an alpha
 * that is not finite (or celu's 0), are refused at the node. */
static void test_param_activations(void **st)
{
    static const struct {
        const char *op;
        float alpha, want;
        bfit_layer_kind kind;
    } ok[] = {{"LeakyRelu", NAN, 0.01f, BFIT_L_LEAKYRELU}, {"LeakyRelu", -0.2f, -0.2f, BFIT_L_LEAKYRELU},
              {"Elu", NAN, 1.0f, BFIT_L_ELU}, {"Elu", 0.5f, 0.5f, BFIT_L_ELU},
              {"Celu", NAN, 1.0f, BFIT_L_CELU}, {"Celu", -0.5f, -0.5f, BFIT_L_CELU}};
    bfit_graph_desc g;
    pbw *m;
    (void)st;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        m = model(alpha_graph(ok[i].op, ok[i].alpha));
        assert_int_equal(load(m, &g, NULL), BFIT_OK);
        assert_int_equal(g.nnodes, 2);
        assert_int_equal(g.nodes[1].cfg.kind, ok[i].kind);
        assert_true(g.nodes[1].cfg.alpha == ok[i].want);
        bfit_graph_fini(&g);
        pb_free(m);
    }
    for (int i = 0; i < 2; i++) { /* alpha absent, or ONNX's default: the float of PyTorch's */
        m = model(alpha_graph("Selu", i ? 1.67326319217681884765625f : NAN));
        assert_int_equal(load(m, &g, NULL), BFIT_OK);
        assert_int_equal(g.nnodes, 2);
        assert_int_equal(g.nodes[1].cfg.kind, BFIT_L_SELU);
        bfit_graph_fini(&g);
        pb_free(m);
    }
    m = model(alpha_graph("Selu", 2.0f));
    assert_int_equal(load(m, &g, "node 'act' (Selu, opset 17) with inputs 'h' [N,3]: alpha 2, gamma 1.05070102: "
                                 "batchfit reads only nn.SELU's (ONNX's defaults, 1.67326319 and 1.05070102)"),
                     BFIT_EINVAL);
    pb_free(m);
    m = model(alpha_graph("Celu", 0.0f));
    assert_int_equal(load(m, &g, "node 'act' (Celu, opset 17) with inputs 'h' [N,3]: alpha 0: batchfit needs a "
                                 "finite, nonzero alpha"),
                     BFIT_EINVAL);
    pb_free(m);
    m = model(gemm_graph("Softplus"));
    assert_int_equal(load(m, &g, NULL), BFIT_OK);
    assert_int_equal(g.nodes[1].cfg.kind, BFIT_L_SOFTPLUS);
    assert_true(g.nodes[1].cfg.beta == 1.0f && g.nodes[1].cfg.threshold == 20.0f);
    bfit_graph_fini(&g);
    pb_free(m);
    for (int swap = 0; swap < 2; swap++) {
        m = model(softplus_beta_graph(2.0f, 2.0f, swap));
        assert_int_equal(load(m, &g, NULL), BFIT_OK);
        assert_int_equal(g.nnodes, 2);
        assert_int_equal(g.nodes[1].cfg.kind, BFIT_L_SOFTPLUS);
        assert_true(g.nodes[1].cfg.beta == 2.0f && g.nodes[1].cfg.threshold == 20.0f);
        bfit_graph_fini(&g);
        pb_free(m);
    }
    m = model(softplus_beta_graph(2.0f, 3.0f, 0));
    assert_int_equal(load(m, &g, "node 'scale' (Mul, opset 17) with inputs 'h' [N,3], 'b' [] float: this Mul by 2 feeds "
                                 "a Softplus, but the Softplus's output is not then divided by 2 alone"),
                     BFIT_EINVAL);
    pb_free(m);
    m = model(alpha_graph("Elu", INFINITY));
    assert_int_equal(load(m, &g, "node 'act' (Elu, opset 17) with inputs 'h' [N,3]: alpha inf: batchfit needs a "
                                 "finite alpha"),
                     BFIT_EINVAL);
    pb_free(m);
}

/* x [N,4,3,3]; p = GlobalAveragePool(x), or ReduceMean(x) over `axes`
 * (naxes of them, keepdims 1) when naxes > 0; s = HardSigmoid(p) (alpha);
 * y = Mul(a, b) of two of x and s; GlobalAveragePool, Flatten, Gemm ->
 * logits [N,3]. */
static pbw *se_graph_axes(float alpha, const char *a, const char *b, const int64_t *axes, int naxes)
{
    static const int64_t in[4] = {-1, 4, 3, 3};
    const char *x[1] = {"x"}, *p[1] = {"p"}, *s[1] = {"s"}, *mi[2] = {a, b}, *y[1] = {"y"}, *q[1] = {"q"},
               *f[1] = {"f"};
    pbw *g = pb_new(), *n;
    n = node(naxes ? "ReduceMean" : "GlobalAveragePool", "squeeze", x, 1, p, 1);
    if (naxes)
        attr_ints(n, "axes", axes, naxes);
    pmsg(g, 1, n);
    n = node("HardSigmoid", "gate", p, 1, s, 1);
    attr_float(n, "alpha", alpha);
    pmsg(g, 1, n);
    pmsg(g, 1, node("Mul", "excite", mi, 2, y, 1));
    pmsg(g, 1, node("GlobalAveragePool", "pool", y, 1, q, 1));
    pmsg(g, 1, node("Flatten", "flat", q, 1, f, 1));
    fc_head(g, "f");
    pmsg(g, 11, value_info("x", in, 4));
    return g;
}

static pbw *se_graph(float alpha, const char *a, const char *b) { return se_graph_axes(alpha, a, b, NULL, 0); }

/* Squeeze-and-excitation: a GlobalAveragePool that something other than
 * Flatten reads is an average over the whole image (Cx1x1), a Mul of the
 * image by it (either order) a `scale`; HardSigmoid keeps its alpha (and
 * ONNX's beta 0.5); a falling hardsigmoid and a Mul of equal shapes are
 * refused, saying what is supported. */
static void test_squeeze_excitation(void **st)
{
    static const char *const ab[2][2] = {{"x", "s"}, {"s", "x"}};
    bfit_graph_desc g;
    pbw *m;
    (void)st;
    for (int i = 0; i < 2; i++) {
        m = model(se_graph(0.25f, ab[i][0], ab[i][1]));
        assert_int_equal(load(m, &g, NULL), BFIT_OK);
        assert_int_equal(g.nnodes, 5);
        assert_int_equal(g.nodes[0].cfg.kind, BFIT_L_AVGPOOL);
        assert_int_equal(g.nodes[0].cfg.kh, 3);
        assert_int_equal(g.nodes[0].cfg.kw, 3);
        assert_int_equal(g.nodes[1].cfg.kind, BFIT_L_HARDSIGMOID);
        assert_true(g.nodes[1].cfg.alpha == 0.25f && g.nodes[1].cfg.beta == 0.5f);
        assert_int_equal(g.nodes[2].cfg.kind, BFIT_L_SCALE);
        assert_int_equal(g.nodes[2].in[0], 0); /* the image first, whichever order the Mul had */
        assert_int_equal(g.nodes[2].in[1], 2);
        assert_int_equal(g.nodes[3].cfg.kind, BFIT_L_GAP);
        assert_int_equal(g.nodes[4].cfg.kind, BFIT_L_LINEAR);
        bfit_graph_fini(&g);
        pb_free(m);
    }
    {
        static const int64_t hw[2] = {2, 3}, wh[2] = {-1, -2}, c[1] = {1};
        for (int i = 0; i < 2; i++) { /* x.mean((2, 3), keepdim=True), the squeeze written by hand */
            m = model(se_graph_axes(0.25f, "x", "s", i ? wh : hw, 2));
            assert_int_equal(load(m, &g, NULL), BFIT_OK);
            assert_int_equal(g.nodes[0].cfg.kind, BFIT_L_AVGPOOL);
            assert_int_equal(g.nodes[2].cfg.kind, BFIT_L_SCALE);
            bfit_graph_fini(&g);
            pb_free(m);
        }
        m = model(se_graph_axes(0.25f, "x", "s", c, 1));
        assert_int_equal(load(m, &g, "node 'squeeze' (ReduceMean, opset 17) with inputs 'x' [N,4,3,3]: only the "
                                     "mean over H and W of an image [N,C,H,W] (axes 2 and 3), or over the tokens "
                                     "of [N,T,C] (axis 1), is supported"),
                         BFIT_EINVAL);
        pb_free(m);
    }
    m = model(se_graph(-1.0f, "x", "s"));
    assert_int_equal(load(m, &g, "node 'gate' (HardSigmoid, opset 17) with inputs 'p' [N,4,1,1]: alpha -1: "
                                 "batchfit's hardsigmoid rises (alpha > 0)"),
                     BFIT_EINVAL);
    pb_free(m);
    m = model(se_graph(0.25f, "x", "x"));
    assert_int_equal(load(m, &g, "node 'excite' (Mul, opset 17) with inputs 'x' [N,4,3,3], 'x' [N,4,3,3]: only an "
                                 "image [N,C,H,W] times [N,C,1,1] (a gate per channel, as squeeze-and-excitation's), "
                                 "or two different tensors of one shape, is supported"),
                     BFIT_EINVAL);
    pb_free(m);
}

/* A Cast in the host's shape arithmetic: to int64 it loads; to a type the
 * host does not compute in (FLOAT8E4M3FN, 17, from opset 19; INT4, 22,
 * from 21) it is refused at the Cast, not computed as an integer. */
static void test_host_cast(void **st)
{
    static const int64_t bad[2] = {17, 22};
    bfit_graph_desc g;
    pbw *m = model_op(cast_graph(7), 19);
    (void)st;
    assert_int_equal(load(m, &g, NULL), BFIT_OK);
    bfit_graph_fini(&g);
    pb_free(m);
    for (int i = 0; i < 2; i++) {
        char want[160];
        snprintf(want, sizeof want, "node 'cast' (Cast, opset 21) with inputs 's' (computed on the host): Cast to the "
                                    "ONNX type %lld is not supported", (long long)bad[i]);
        m = model_op(cast_graph(bad[i]), 21);
        assert_int_equal(load(m, &g, want), BFIT_EINVAL);
        pb_free(m);
    }
}

/* to a float type, rounded to it (ties to even): 2^24 + 1 in float is 2^24, 2049 in float16 2048,
 * 257 in bfloat16 256, 2^53 + 1 in double 2^53; 70000 in float16 is infinity, out of int64's range */
static void host_cast_rounds(void)
{
    bfit_graph_desc g;
    pbw *m;
    static const struct { int64_t to, v, r; } rd[] = {
        {BFIT_ONNX_FLOAT, (1 << 24) + 1, 1}, {BFIT_ONNX_FLOAT16, 2049, 1}, {BFIT_ONNX_BFLOAT16, 257, 1},
        {BFIT_ONNX_FLOAT16, 2047, 0}, {BFIT_ONNX_DOUBLE, (INT64_C(1) << 53) + 1, 1}};
    for (size_t i = 0; i < sizeof rd / sizeof rd[0]; i++) {
        m = model(cast_round_graph(rd[i].to, rd[i].v, rd[i].r));
        if (load(m, &g, NULL) != BFIT_OK)
            fail_msg("%lld to type %lld: %s", (long long)rd[i].v, (long long)rd[i].to, bfit_errmsg());
        bfit_graph_fini(&g);
        pb_free(m);
    }
    /* once, from the double: 1026.5 + 2^-30 lies just above the tie between float16's 1026 and 1027,
     * so it is 1027; through float (which rounds it to the tie 1026.5), then to even, it was 1026.
     * Alike 2^30 + 2^22 + 1 in bfloat16 (2^30 + 2^23; through float 2^30 + 2^22, then 2^30). */
    m = model(cast_round_graph_f64(BFIT_ONNX_FLOAT16, 1026.5 + ldexp(1, -30), 1027));
    if (load(m, &g, NULL) != BFIT_OK)
        fail_msg("1026.5 + 2^-30 to float16: %s", bfit_errmsg());
    bfit_graph_fini(&g);
    pb_free(m);
    m = model(cast_round_graph(BFIT_ONNX_BFLOAT16, (1 << 30) + (1 << 22) + 1, 1 - (1 << 22)));
    if (load(m, &g, NULL) != BFIT_OK)
        fail_msg("2^30 + 2^22 + 1 to bfloat16: %s", bfit_errmsg());
    bfit_graph_fini(&g);
    pb_free(m);
    m = model(cast_round_graph(BFIT_ONNX_FLOAT16, 70000, 0));
    assert_int_equal(load(m, &g, "node 'back' (Cast, opset 17) with inputs 'f' (computed on the host): the "
                                 "float inf cast to the ONNX type 7 is out of its range"),
                     BFIT_EINVAL);
    pb_free(m);
}

/* casts of batch-dependent integers: to bool, and ones that wrap for large batches */
static void host_cast_batch(void)
{
    bfit_graph_desc g;
    pbw *m;
    /* to bool: the batch is never 0, so true for every batch; the batch less 2 is false at 2 only */
    m = model(cast_bool_graph(0));
    if (load(m, &g, NULL) != BFIT_OK)
        fail_msg("%s", bfit_errmsg());
    bfit_graph_fini(&g);
    pb_free(m);
    m = model(cast_bool_graph(2));
    assert_int_equal(load(m, &g, "node 'cast' (Cast, opset 17) with inputs 'm' (computed on the host): the "
                                 "batch-dependent integer 1 * batch + -2 cast to bool is false at the micro-batch 2 "
                                 "and true at the others"),
                     BFIT_EINVAL);
    pb_free(m);
    /* 2^40 times the batch leaves int64 for large batches: refused as int64, not uint64 */
    {
        static const int64_t k[2] = {INT64_C(1) << 40, 1};
        m = model(scaled_cast_graph(k, BFIT_ONNX_INT64));
        assert_int_equal(load(m, &g, "the batch-dependent integer 1099511627776 * batch + 0 cast to the ONNX type 7 "
                                     "(int64) wraps around"),
                         BFIT_EINVAL);
        pb_free(m);
    }
    m = model(cast_graph(BFIT_ONNX_INT32)); /* Shape [m, 4]: m up to 2^24 fits */
    assert_int_equal(load(m, &g, NULL), BFIT_OK);
    bfit_graph_fini(&g);
    pb_free(m);
    m = model(cast_graph(BFIT_ONNX_INT16));
    assert_int_equal(load(m, &g, "node 'cast' (Cast, opset 17) with inputs 's' (computed on the host): the "
                                 "batch-dependent integer 1 * batch + 0 cast to the ONNX type 5 (int16) wraps around "
                                 "for some micro-batches (1 to 16777216)"),
                     BFIT_EINVAL);
    pb_free(m);
}

/* Host casts to narrower integers wrap as ONNX (and numpy's astype) say:
 * the higher bits dropped, two's complement for the signed types; each of
 * these gives 4, the Reshape's width. A float out of the type's range is
 * undefined in ONNX and refused; a batch-dependent integer whose cast
 * would wrap for some micro-batch is refused, one that fits loads. A cast
 * to a float type rounds to that type; one to bool of a batch-dependent
 * integer is true for every batch or refused. */
static void test_host_cast_wrap(void **st)
{
    static const struct { int64_t to, v; } ok[] = {
        {BFIT_ONNX_INT8, 260},     {BFIT_ONNX_INT8, -252},     {BFIT_ONNX_UINT8, 260},
        {BFIT_ONNX_UINT8, -252},   {BFIT_ONNX_INT16, 65540},   {BFIT_ONNX_UINT16, -65532},
        {BFIT_ONNX_INT32, (INT64_C(1) << 32) + 4}, {BFIT_ONNX_UINT32, -(INT64_C(1) << 32) + 4},
        {BFIT_ONNX_INT64, 4},      {BFIT_ONNX_UINT64, 4}};
    const float f4 = 4.75f, big = 300.0f, huge = 1e30f;
    bfit_graph_desc g;
    pbw *m;
    (void)st;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        m = model(cast_const_graph(ok[i].to, ok[i].v, NULL));
        if (load(m, &g, NULL) != BFIT_OK)
            fail_msg("%lld to type %lld: %s", (long long)ok[i].v, (long long)ok[i].to, bfit_errmsg());
        bfit_graph_fini(&g);
        pb_free(m);
    }
    /* 252 is -4 in int8: a Reshape to [0, -4] */
    m = model(cast_const_graph(BFIT_ONNX_INT8, 252, NULL));
    assert_int_equal(load(m, &g, "node 'reshape'"), BFIT_EINVAL);
    pb_free(m);
    m = model(cast_const_graph(BFIT_ONNX_INT32, 0, &f4)); /* truncated toward zero */
    assert_int_equal(load(m, &g, NULL), BFIT_OK);
    bfit_graph_fini(&g);
    pb_free(m);
    m = model(cast_const_graph(BFIT_ONNX_INT8, 0, &big));
    assert_int_equal(load(m, &g, "node 'cast' (Cast, opset 17) with inputs 'c' [2] float: the float 300 cast to "
                                 "the ONNX type 3 is out of its range, which ONNX leaves undefined"),
                     BFIT_EINVAL);
    pb_free(m);
    m = model(cast_const_graph(BFIT_ONNX_INT64, 0, &huge));
    assert_int_equal(load(m, &g, "the float 1e+30 cast to the ONNX type 7 is out of its range"), BFIT_EINVAL);
    pb_free(m);
    host_cast_rounds();
    host_cast_batch();
}

/* nn.PReLU after a Linear, as torch 1.13 exports it: Gemm, then PRelu(h,
 * slope) with the slope a [1] initializer (fuzz/corpus/onnx/prelu_head.onnx
 * is such an export). */
static pbw *prelu_graph(void)
{
    static const int64_t sd[1] = {1};
    static const float slope = 0.25f;
    const char *si[2] = {"h", "slope"}, *so[1] = {"logits"};
    pbw *g = pb_new();
    gemm_node(g, "fc", "h");
    pmsg(g, 1, node("PRelu", "last", si, 2, so, 1));
    pmsg(g, 5, tensor("slope", sd, 1, &slope, 1));
    return gemm_rest(g);
}

/* x [N,4,3,3] -> PRelu(x, s) -> GlobalAveragePool, Flatten, Gemm -> logits.
 * The slope: the initializer act.weight of dims wd (nw of them) itself, or
 * with unsq (torch.onnx's export of nn.PReLU on an image) an Unsqueeze of
 * it by the constant axes [1, 2]; with constant, a Constant node's tensor
 * rather than an initializer. */
static pbw *prelu_image_graph(const int64_t *wd, int nw, int unsq, int constant)
{
    static const int64_t in[4] = {-1, 4, 3, 3}, ad[1] = {2}, axes[2] = {1, 2};
    const char *ui[2] = {"act.weight", "axes"}, *uo[1] = {"s"}, *pi[2] = {"x", unsq ? "s" : "act.weight"},
               *y[1] = {"y"}, *q[1] = {"q"}, *f[1] = {"f"}, *co[1] = {"act.weight"};
    pbw *g = pb_new();
    int64_t n = 1;
    for (int d = 0; d < nw; d++)
        n *= wd[d];
    if (constant) {
        pbw *c = node("Constant", "c", NULL, 0, co, 1), *a = attr_new("value");
        pmsg(a, 5, tensor("act.weight", wd, nw, NULL, n));
        attr_put(c, a, 4);
        pmsg(g, 1, c);
    }
    if (unsq)
        pmsg(g, 1, node("Unsqueeze", "unsq", ui, 2, uo, 1));
    pmsg(g, 1, node("PRelu", "act", pi, 2, y, 1));
    pmsg(g, 1, node("GlobalAveragePool", "pool", y, 1, q, 1));
    pmsg(g, 1, node("Flatten", "flat", q, 1, f, 1));
    fc_head(g, "f");
    if (!constant)
        pmsg(g, 5, tensor("act.weight", wd, nw, NULL, n));
    pmsg(g, 5, tensor_i64("axes", ad, 1, axes, 2));
    pmsg(g, 11, value_info("x", in, 4));
    return g;
}

/* The prelu layer of graph m's first node: its slopes and the name and
 * dims its starting weights have in the file. */
static void expect_prelu(const pbw *m, int node, int units, const char *name, int ndim)
{
    bfit_graph_desc g;
    const bfit_wsrc_entry *e;
    assert_int_equal(load(m, &g, NULL), BFIT_OK);
    assert_int_equal(g.nodes[node].cfg.kind, BFIT_L_PRELU);
    assert_int_equal(g.nodes[node].cfg.units, units);
    assert_non_null(e = bfit_wsrc_find(g.wsrc, node, 0));
    assert_string_equal(e->name, name);
    assert_int_equal(e->t->ndim, ndim);
    assert_int_equal(e->t->numel, units);
    bfit_graph_fini(&g);
}

/* PRelu (nn.PReLU): one slope or one per channel, from a [1], [C] or
 * [C,1,1] initializer or an Unsqueeze of one, named as the module's
 * state_dict; a slope ONNX broadcasts otherwise (along W), or one that is
 * no initializer, is refused saying what batchfit takes. */
static void test_prelu(void **st)
{
    static const int64_t c[1] = {4}, one[1] = {1}, c11[3] = {4, 1, 1}, w[1] = {3}, c1[2] = {4, 1};
    bfit_graph_desc g;
    pbw *m;
    (void)st;
    m = model(prelu_graph());
    expect_prelu(m, 1, 1, "slope", 1);
    pb_free(m);
    m = model(prelu_image_graph(c, 1, 1, 0)); /* nn.PReLU(4) on an image */
    expect_prelu(m, 0, 4, "act.weight", 1);
    pb_free(m);
    m = model(prelu_image_graph(one, 1, 1, 0)); /* nn.PReLU() on an image */
    expect_prelu(m, 0, 1, "act.weight", 1);
    pb_free(m);
    m = model(prelu_image_graph(c11, 3, 0, 0)); /* the Unsqueeze folded into the initializer */
    expect_prelu(m, 0, 4, "act.weight", 3);
    pb_free(m);
    m = model(prelu_image_graph(one, 1, 0, 0));
    expect_prelu(m, 0, 1, "act.weight", 1);
    pb_free(m);
    m = model(prelu_image_graph(w, 1, 0, 0));
    assert_int_equal(load(m, &g, "node 'act' (PRelu, opset 17) with inputs 'x' [N,4,3,3], 'act.weight' [3] float: "
                                 "the slope's shape [3] broadcasts over the input otherwise than batchfit's prelu: "
                                 "one slope, or one per channel of an image [N,C,H,W] ([C,1,1]) or of a vector "
                                 "[N,C] ([C]), as nn.PReLU(C) applies along dimension 1"),
                     BFIT_EINVAL);
    pb_free(m);
    m = model(prelu_image_graph(c1, 2, 0, 0)); /* [4,1]: along H */
    assert_int_equal(load(m, &g, "the slope's shape [4,1] broadcasts over the input otherwise"), BFIT_EINVAL);
    pb_free(m);
    m = model(prelu_image_graph(c11, 3, 0, 1));
    assert_int_equal(load(m, &g, "the slope must be an initializer, or an Unsqueeze of one (nn.PReLU's export): "
                                 "batchfit learns it as the layer's weight"),
                     BFIT_EINVAL);
    pb_free(m);
}

/* x [N,4,3,3] -> Transpose (perm p1) -> LayerNormalization over the last
 * axis -> Transpose (perm p2) -> Mul(ls.gamma of dims gd, nd of them, .)
 * -> GlobalAveragePool, Flatten, Gemm -> logits: torchvision's LayerNorm2d
 * and a ConvNeXt block's layer scale, with p1 [0,2,3,1] and p2 [0,3,1,2]. */
static pbw *channels_last_graph(const int64_t *p1, const int64_t *p2, const int64_t *gd, int nd)
{
    static const int64_t in[4] = {-1, 4, 3, 3}, cd[1] = {4};
    const char *x[1] = {"x"}, *t[1] = {"t"}, *li[3] = {"t", "ln.weight", "ln.bias"}, *n[1] = {"n"}, *u[1] = {"u"},
               *mi[2] = {"ls.gamma", "u"}, *y[1] = {"y"}, *q[1] = {"q"}, *f[1] = {"f"};
    pbw *g = pb_new(), *a = node("Transpose", "to_cl", x, 1, t, 1), *b = node("Transpose", "to_cf", n, 1, u, 1);
    int64_t k = 1;
    for (int d = 0; d < nd; d++)
        k *= gd[d];
    attr_ints(a, "perm", p1, 4);
    attr_ints(b, "perm", p2, 4);
    pmsg(g, 1, a);
    pmsg(g, 1, node("LayerNormalization", "ln", li, 3, n, 1));
    pmsg(g, 1, b);
    pmsg(g, 1, node("Mul", "ls", mi, 2, y, 1));
    pmsg(g, 1, node("GlobalAveragePool", "pool", y, 1, q, 1));
    pmsg(g, 1, node("Flatten", "flat", q, 1, f, 1));
    fc_head(g, "f");
    pmsg(g, 5, tensor("ln.weight", cd, 1, NULL, 4));
    pmsg(g, 5, tensor("ln.bias", cd, 1, NULL, 4));
    pmsg(g, 5, tensor("ls.gamma", gd, nd, NULL, k));
    pmsg(g, 11, value_info("x", in, 4));
    return g;
}

/* A permute to channels-last and back around a layer norm becomes
 * transposes to tokens [H*W, C] and back to the image, the layer norm over
 * C between them; a Mul by a learned [C,1,1] a layerscale whose weight is
 * that initializer (named and shaped as the file has it).
 * Other permutes, and a learned tensor that is no per-channel scale, are
 * refused saying what batchfit reads. */
static void test_channels_last(void **st)
{
    static const int64_t cl[4] = {0, 2, 3, 1}, cf[4] = {0, 3, 1, 2}, g3[3] = {4, 1, 1}, g4[4] = {1, 4, 1, 1},
                         g1[1] = {4}, g11[3] = {1, 1, 4};
    bfit_graph_desc g;
    const bfit_wsrc_entry *e;
    int64_t dim[BFIT_PARAM_MAXD];
    bfit_model *M;
    tdev t;
    pbw *m = model(channels_last_graph(cl, cf, g3, 3));
    (void)st;
    assert_int_equal(load(m, &g, NULL), BFIT_OK);
    assert_int_equal(g.nodes[0].cfg.kind, BFIT_L_TRANSPOSE);
    assert_int_equal(g.nodes[1].cfg.kind, BFIT_L_LAYERNORM);
    assert_int_equal(g.nodes[2].cfg.kind, BFIT_L_TRANSPOSE);
    assert_true(bfit_shape_eq(g.nodes[2].cfg.to, bfit_shape_chw(4, 3, 3)));
    assert_int_equal(g.nodes[3].cfg.kind, BFIT_L_LAYERSCALE);
    assert_int_equal(g.nodes[3].cfg.units, 4);
    assert_non_null(e = bfit_wsrc_find(g.wsrc, 3, 0));
    assert_string_equal(e->name, "ls.gamma");
    tdev_open(&t, 1);
    assert_int_equal(bfit_model_new(&g, t.dev, t.arena, &M), BFIT_OK);
    assert_true(bfit_shape_eq(M->nodes[0].l->out, bfit_shape_seq(9, 4)));
    assert_true(bfit_shape_eq(M->nodes[2].l->out, bfit_shape_chw(4, 3, 3)));
    assert_int_equal(M->nodes[3].l->params[0].ndim, 1); /* the layer's [4] */
    assert_int_equal(bfit_model_param_dims(M, 3, 0, dim), 3); /* files keep the [4,1,1] PyTorch has */
    assert_true(dim[0] == 4 && dim[1] == 1 && dim[2] == 1);
    bfit_model_free(M);
    tdev_close(&t);
    bfit_graph_fini(&g);
    pb_free(m);
    m = model(channels_last_graph(cl, cf, g4, 4)); /* [1,C,1,1] */
    assert_int_equal(load(m, &g, NULL), BFIT_OK);
    assert_int_equal(g.nodes[3].cfg.kind, BFIT_L_LAYERSCALE);
    bfit_graph_fini(&g);
    pb_free(m);
    m = model(channels_last_graph(cl, cf, g1, 1)); /* [C] broadcasts along W */
    assert_int_equal(load(m, &g, "node 'ls' (Mul, opset 17) with inputs 'ls.gamma' [4] float, 'u' [N,4,3,3]: a Mul "
                                 "by a learned tensor is read as a layer scale: an image [N,C,H,W] times [C,1,1] "
                                 "or [1,C,1,1] (ConvNeXt's); this is not one"),
                     BFIT_EINVAL);
    pb_free(m);
    m = model(channels_last_graph(cl, cf, g11, 3));
    assert_int_equal(load(m, &g, "this is not one"), BFIT_EINVAL);
    pb_free(m);
    m = model(channels_last_graph(cf, cl, g3, 3)); /* the other way round: not channels-last */
    assert_int_equal(load(m, &g, "node 'to_cl' (Transpose, opset 17) with inputs 'x' [N,4,3,3]: batchfit transposes "
                                 "the last two dimensions of [batch, a, b] (perm [0, 2, 1]), an image [batch, C, H, "
                                 "W] to channels-last (perm [0, 2, 3, 1]) and back (perm [0, 3, 1, 2])"),
                     BFIT_EINVAL);
    pb_free(m);
    m = model(channels_last_graph(cl, cl, g3, 3));
    assert_int_equal(load(m, &g, "node 'to_cf' (Transpose, opset 17) with inputs 'n' [N,3,3,4]"), BFIT_EINVAL);
    pb_free(m);
}

/* x [N,4,3,3] -> Transpose to channels-last -> LayerNormalization over C ->
 * Mul by a learned gd (the original ConvNeXt's gamma [C]) -> Transpose
 * back -> GlobalAveragePool, Flatten -> Mul by a learned [4] (a vector's
 * scale) -> Gemm -> logits. */
static pbw *token_scale_graph(const int64_t *gd, int nd)
{
    static const int64_t in[4] = {-1, 4, 3, 3}, cd[1] = {4}, cl[4] = {0, 2, 3, 1}, cf[4] = {0, 3, 1, 2};
    const char *x[1] = {"x"}, *t[1] = {"t"}, *li[3] = {"t", "ln.weight", "ln.bias"}, *n[1] = {"n"}, *u[1] = {"u"},
               *mi[2] = {"n", "gamma"}, *q[1] = {"q"}, *f[1] = {"f"}, *hi[2] = {"head.gamma", "f"},
               *s[1] = {"s"}, *fs[1] = {"fs"};
    pbw *g = pb_new(), *a = node("Transpose", "to_cl", x, 1, t, 1), *b = node("Transpose", "to_cf", s, 1, u, 1);
    int64_t k = 1;
    for (int d = 0; d < nd; d++)
        k *= gd[d];
    attr_ints(a, "perm", cl, 4);
    attr_ints(b, "perm", cf, 4);
    pmsg(g, 1, a);
    pmsg(g, 1, node("LayerNormalization", "ln", li, 3, n, 1));
    pmsg(g, 1, node("Mul", "ls", mi, 2, s, 1));
    pmsg(g, 1, b);
    pmsg(g, 1, node("GlobalAveragePool", "pool", u, 1, q, 1));
    pmsg(g, 1, node("Flatten", "flat", q, 1, f, 1));
    pmsg(g, 1, node("Mul", "hs", hi, 2, fs, 1));
    fc_head(g, "fs");
    pmsg(g, 5, tensor("ln.weight", cd, 1, NULL, 4));
    pmsg(g, 5, tensor("ln.bias", cd, 1, NULL, 4));
    pmsg(g, 5, tensor("gamma", gd, nd, NULL, k));
    pmsg(g, 5, tensor("head.gamma", cd, 1, NULL, 4));
    pmsg(g, 11, value_info("x", in, 4));
    return g;
}

/* x [N,4,3,3] -> Transpose to channels-last [N,3,3,4] -> ReduceMean over
 * axes ax (keepdims keep) -> Gemm -> logits. */
static pbw *cl_mean_graph(const int64_t *ax, int nax, int64_t keep)
{
    static const int64_t in[4] = {-1, 4, 3, 3}, cl[4] = {0, 2, 3, 1};
    const char *x[1] = {"x"}, *t[1] = {"t"}, *f[1] = {"f"};
    pbw *g = pb_new(), *a = node("Transpose", "to_cl", x, 1, t, 1), *r = node("ReduceMean", "mean", t, 1, f, 1);
    attr_ints(a, "perm", cl, 4);
    attr_ints(r, "axes", ax, nax);
    attr_int(r, "keepdims", keep);
    pmsg(g, 1, a);
    pmsg(g, 1, r);
    fc_head(g, "f");
    pmsg(g, 11, value_info("x", in, 4));
    return g;
}

/* The mean over a channels-last image's H and W (tokens [H*W, C]) is a
 * transpose of the tokens to an image [C, H*W, 1] and `gap` (mhsa_mini's
 * head checks the same over a ViT's tokens against PyTorch); over C, or
 * keeping the dimensions, it is refused. */
static void test_token_mean(void **st)
{
    static const int64_t hw[2] = {1, 2}, neg[2] = {-2, -3}, c[1] = {3};
    bfit_graph_desc g;
    pbw *m;
    (void)st;
    for (int k = 0; k < 2; k++) {
        m = model(cl_mean_graph(k ? neg : hw, 2, 0));
        assert_int_equal(load(m, &g, NULL), BFIT_OK);
        assert_int_equal(g.nodes[1].cfg.kind, BFIT_L_TRANSPOSE);
        assert_true(bfit_shape_eq(g.nodes[1].cfg.to, bfit_shape_chw(4, 9, 1)));
        assert_int_equal(g.nodes[2].cfg.kind, BFIT_L_GAP);
        assert_int_equal(g.nodes[3].cfg.kind, BFIT_L_LINEAR);
        bfit_graph_fini(&g);
        pb_free(m);
    }
    m = model(cl_mean_graph(c, 1, 0));
    assert_int_equal(load(m, &g, "node 'mean' (ReduceMean, opset 17) with inputs 't' [N,3,3,4]: batchfit averages "
                                 "tokens [N,T,C] over T"),
                     BFIT_EINVAL);
    pb_free(m);
    m = model(cl_mean_graph(hw, 2, 1));
    assert_int_equal(load(m, &g, "not this"), BFIT_EINVAL);
    pb_free(m);
}

/* A Mul of channels-last tokens or of a vector by a learned [C] (or [1,1,C]:
 * ones before C) is the layerscale layer, the initializer its weight, kept
 * in the file's shape; a learned tensor with more than C numbers, or of a
 * higher rank than the tokens, is refused saying what batchfit reads. */
static void test_token_scale(void **st)
{
    static const int64_t g1[1] = {4}, g3[3] = {1, 1, 4}, g2[2] = {3, 4}, g5[5] = {1, 1, 1, 1, 4}, one[1] = {1};
    bfit_graph_desc g;
    const bfit_wsrc_entry *e;
    int64_t dim[BFIT_PARAM_MAXD];
    bfit_model *M;
    tdev t;
    pbw *m = model(token_scale_graph(g1, 1));
    (void)st;
    assert_int_equal(load(m, &g, NULL), BFIT_OK);
    assert_int_equal(g.nodes[1].cfg.kind, BFIT_L_LAYERNORM);
    assert_int_equal(g.nodes[2].cfg.kind, BFIT_L_LAYERSCALE);
    assert_int_equal(g.nodes[2].cfg.units, 4);
    assert_non_null(e = bfit_wsrc_find(g.wsrc, 2, 0));
    assert_string_equal(e->name, "gamma");
    assert_int_equal(g.nodes[3].cfg.kind, BFIT_L_TRANSPOSE);
    assert_int_equal(g.nodes[5].cfg.kind, BFIT_L_LAYERSCALE);
    assert_non_null(e = bfit_wsrc_find(g.wsrc, 5, 0));
    assert_string_equal(e->name, "head.gamma");
    bfit_graph_fini(&g);
    pb_free(m);
    m = model(token_scale_graph(g3, 3)); /* [1,1,C]: files keep it so */
    assert_int_equal(load(m, &g, NULL), BFIT_OK);
    assert_int_equal(g.nodes[2].cfg.kind, BFIT_L_LAYERSCALE);
    tdev_open(&t, 1);
    assert_int_equal(bfit_model_new(&g, t.dev, t.arena, &M), BFIT_OK);
    assert_true(bfit_shape_eq(M->nodes[2].l->out, bfit_shape_seq(9, 4)));
    assert_int_equal(M->nodes[2].l->params[0].ndim, 1);
    assert_int_equal(bfit_model_param_dims(M, 2, 0, dim), 3);
    assert_true(dim[0] == 1 && dim[1] == 1 && dim[2] == 4);
    bfit_model_free(M);
    tdev_close(&t);
    bfit_graph_fini(&g);
    pb_free(m);
    m = model(token_scale_graph(g2, 2)); /* a number per token and feature: not a layer scale */
    assert_int_equal(load(m, &g, "node 'ls' (Mul, opset 17) with inputs 'n' [N,3,3,4], 'gamma' [3,4] float: a Mul "
                                 "by a learned tensor is read as a layer scale: tokens [N,T,C] or a vector [N,C] "
                                 "times [C] (timm's LayerScale), or an image [N,C,H,W] times [C,1,1] (torchvision's "
                                 "ConvNeXt); this is not one"),
                     BFIT_EINVAL);
    pb_free(m);
    m = model(token_scale_graph(g5, 5));
    assert_int_equal(load(m, &g, "this is not one"), BFIT_EINVAL);
    pb_free(m);
    m = model(token_scale_graph(one, 1)); /* one learned number: a scale for all */
    assert_int_equal(load(m, &g, NULL), BFIT_OK);
    assert_int_equal(g.nodes[2].cfg.kind, BFIT_L_LAYERSCALE);
    assert_int_equal(g.nodes[2].cfg.units, 1);
    bfit_graph_fini(&g);
    pb_free(m);
}

/* x [N,4,3,3] -> Slice channels [0, 2) and [2, end) (x.chunk(2, dim=1),
 * the second's step `step`) -> Concat of them the other way round ->
 * Reshape to [N, 2, 2, 3, 3] -> Transpose (perm p) -> Reshape to back
 * (N first) -> GlobalAveragePool, Flatten, Gemm -> logits: ShuffleNetV2's
 * channel operations. */
static pbw *shuffle_graph(const int64_t *p, const int64_t *back, int64_t step)
{
    static const int64_t in[4] = {-1, 4, 3, 3}, one[1] = {1}, five[1] = {5}, four[1] = {4}, z[1] = {0},
                         two[1] = {2}, end[1] = {INT64_MAX}, ax[1] = {1}, split[5] = {0, 2, 2, 3, 3};
    const char *a[4] = {"x", "zero", "two", "axis"}, *b[5] = {"x", "two", "end", "axis", "step"}, *x1[1] = {"x1"},
               *x2[1] = {"x2"}, *ci[2] = {"x2", "x1"}, *cat[1] = {"cat"}, *ri[2] = {"cat", "split"}, *v[1] = {"v"},
               *t[1] = {"t"}, *bi[2] = {"t", "back"}, *y[1] = {"y"}, *q[1] = {"q"}, *f[1] = {"f"};
    const int64_t stepv[1] = {step};
    pbw *g = pb_new(), *c = node("Concat", "cat", ci, 2, cat, 1), *tr = node("Transpose", "swap", v, 1, t, 1);
    pmsg(g, 1, node("Slice", "chunk0", a, 4, x1, 1));
    pmsg(g, 1, node("Slice", "chunk1", b, 5, x2, 1));
    attr_int(c, "axis", 1);
    pmsg(g, 1, c);
    pmsg(g, 1, node("Reshape", "split", ri, 2, v, 1));
    attr_ints(tr, "perm", p, 5);
    pmsg(g, 1, tr);
    pmsg(g, 1, node("Reshape", "merge", bi, 2, y, 1));
    pmsg(g, 1, node("GlobalAveragePool", "pool", y, 1, q, 1));
    pmsg(g, 1, node("Flatten", "flat", q, 1, f, 1));
    fc_head(g, "f");
    pmsg(g, 5, tensor_i64("zero", one, 1, z, 1));
    pmsg(g, 5, tensor_i64("two", one, 1, two, 1));
    pmsg(g, 5, tensor_i64("end", one, 1, end, 1));
    pmsg(g, 5, tensor_i64("axis", one, 1, ax, 1));
    pmsg(g, 5, tensor_i64("step", one, 1, stepv, 1));
    pmsg(g, 5, tensor_i64("split", five, 1, split, 5));
    pmsg(g, 5, tensor_i64("back", four, 1, back, 4));
    pmsg(g, 11, value_info("x", in, 4));
    return g;
}

/* Slices of an image's channels become select layers of those channels;
 * the 5-d Reshape, Transpose and Reshape back of a channel shuffle one
 * transpose of the channels in 2 groups. A step, another permutation or
 * another shape back is refused saying what batchfit reads. */
static void test_channel_shuffle(void **st)
{
    static const int64_t p[5] = {0, 2, 1, 3, 4}, other[5] = {0, 1, 2, 4, 3}, back[4] = {0, -1, 3, 3},
                         wrong[4] = {0, 4, 9, 1};
    bfit_graph_desc g;
    pbw *m = model(shuffle_graph(p, back, 1));
    (void)st;
    assert_int_equal(load(m, &g, NULL), BFIT_OK);
    assert_int_equal(g.nodes[0].cfg.kind, BFIT_L_SELECT);
    assert_int_equal(g.nodes[0].cfg.units, 0);
    assert_true(bfit_shape_eq(g.nodes[0].cfg.to, bfit_shape_chw(2, 3, 3)));
    assert_int_equal(g.nodes[1].cfg.kind, BFIT_L_SELECT);
    assert_int_equal(g.nodes[1].cfg.units, 2);
    assert_int_equal(g.nodes[2].cfg.kind, BFIT_L_CONCAT);
    assert_int_equal(g.nodes[3].cfg.kind, BFIT_L_TRANSPOSE);
    assert_int_equal(g.nodes[3].cfg.groups, 2);
    assert_int_equal(g.nodes[4].cfg.kind, BFIT_L_GAP);
    bfit_graph_fini(&g);
    pb_free(m);
    m = model(shuffle_graph(p, back, 2));
    assert_int_equal(load(m, &g, "node 'chunk1' (Slice, opset 17) with inputs 'x' [N,4,3,3], 'two' [1] int64, "
                                 "'end' [1] int64, 'axis' [1] int64, 'step' [1] int64: batchfit slices an image "
                                 "[N,C,H,W] along its channels (axis 1, step 1"),
                     BFIT_EINVAL);
    pb_free(m);
    m = model(shuffle_graph(other, back, 1));
    assert_int_equal(load(m, &g, "node 'swap' (Transpose, opset 17) with inputs 'v' (a channel shuffle's 5-d view): "
                                 "batchfit reads a 5-d view only as a channel shuffle"),
                     BFIT_EINVAL);
    pb_free(m);
    m = model(shuffle_graph(p, wrong, 1));
    assert_int_equal(load(m, &g, "node 'merge' (Reshape, opset 17)"), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "then reshaped to [N, C, H, W] (ShuffleNet's)"));
    pb_free(m);
}

/* x [N,4,3,3] -> op(x, scale, bias) -> GlobalAveragePool, Flatten, Gemm ->
 * logits: with op InstanceNormalization, nn.InstanceNorm2d(4, affine=True)'s
 * export; with LRN (local response normalisation, given the two
 * initializers it does not take), an operator batchfit does not read
 * (PRelu, Selu, then InstanceNormalization were the example until batchfit
 * read them). */
static pbw *norm_graph(const char *op)
{
    static const int64_t in[4] = {-1, 4, 3, 3}, cd[1] = {4};
    const char *ii[3] = {"x", "scale", "bias"}, *y[1] = {"y"}, *q[1] = {"q"}, *f[1] = {"f"};
    pbw *g = pb_new();
    pmsg(g, 1, node(op, "norm", ii, 3, y, 1));
    pmsg(g, 1, node("GlobalAveragePool", "pool", y, 1, q, 1));
    pmsg(g, 1, node("Flatten", "flat", q, 1, f, 1));
    fc_head(g, "f");
    pmsg(g, 5, tensor("scale", cd, 1, NULL, 4));
    pmsg(g, 5, tensor("bias", cd, 1, NULL, 4));
    pmsg(g, 11, value_info("x", in, 4));
    return g;
}

/* An operator batchfit lacks: named with its node, its inputs' shapes, the
 * opset. InstanceNormalization with learned scale and bias is groupnorm with
 * a group per channel, its parameters the initializers. */
static void test_unsupported_op(void **st)
{
    bfit_graph_desc g;
    const bfit_wsrc_entry *e;
    pbw *m = model(norm_graph("LRN"));
    (void)st;
    assert_int_equal(load(m, &g, "t.onnx: node 'norm' (LRN, opset 17) with inputs 'x' [N,4,3,3], 'scale' [4] float, "
                                 "'bias' [4] float: batchfit does not support the operator LRN"),
                     BFIT_EINVAL);
    pb_free(m);
    m = model(norm_graph("InstanceNormalization"));
    assert_int_equal(load(m, &g, NULL), BFIT_OK);
    assert_int_equal(g.nodes[0].cfg.kind, BFIT_L_GROUPNORM);
    assert_int_equal(g.nodes[0].cfg.units, 4);
    assert_non_null(e = bfit_wsrc_find(g.wsrc, 0, 0));
    assert_string_equal(e->name, "scale");
    assert_non_null(e = bfit_wsrc_find(g.wsrc, 0, 1));
    assert_string_equal(e->name, "bias");
    bfit_graph_fini(&g);
    pb_free(m);
    m = model(gemm_graph("Softmax"));
    assert_int_equal(load(m, &g, "ends in Softmax"), BFIT_EINVAL);
    pb_free(m);
}

/* A second output (GoogLeNet's auxiliary scores in training mode) is
 * refused, naming the outputs and the remedy. */
static void test_two_outputs(void **st)
{
    static const int64_t out[2] = {-1, 4};
    bfit_graph_desc g;
    pbw *gr = gemm_graph(NULL), *m;
    (void)st;
    pmsg(gr, 12, value_info("x", out, 2));
    m = model(gr);
    assert_int_equal(load(m, &g, "t.onnx: the graph has 2 outputs ('logits', 'x'): batchfit trains models with one "
                                 "output, the class scores (logits); export a module whose forward returns them "
                                 "alone (torchvision's GoogLeNet and Inception3: aux_logits=False)"),
                     BFIT_EINVAL);
    pb_free(m);
}

/* x [N,4] -> Reshape(x, Cast(op(c[, e]), int64)) -> the classifier: c the
 * float initializer [0, v], e a float scalar for Pow (NULL: Sqrt); with c
 * NULL, op of the integer Shape(x) instead. It loads when op gives [0, 4]. */
static pbw *float_arith_graph(const char *op, const float *c, const float *e)
{
    static const int64_t in[2] = {-1, 4}, d2[1] = {2};
    const char *oi[2] = {c ? "c" : "s", "e"}, *oo[1] = {"f"}, *co[1] = {"t"}, *ri[2] = {"x", "t"}, *ro[1] = {"r"},
               *si[1] = {"x"}, *so[1] = {"s"};
    pbw *g = pb_new(), *n = node("Cast", "cast", oo, 1, co, 1);
    if (!c)
        pmsg(g, 1, node("Shape", "shape", si, 1, so, 1));
    pmsg(g, 1, node(op, "arith", oi, e ? 2 : 1, oo, 1));
    attr_int(n, "to", 7);
    pmsg(g, 1, n);
    pmsg(g, 1, node("Reshape", "reshape", ri, 2, ro, 1));
    fc_head(g, "r");
    if (c)
        pmsg(g, 5, tensor("c", d2, 1, c, 2));
    if (e)
        pmsg(g, 5, tensor("e", NULL, 0, e, 1));
    pmsg(g, 11, value_info("x", in, 2));
    return g;
}

/* Pow and Sqrt of floats run on the host (a hand-written attention's
 * k.size(-1) ** 0.5, PyTorch 2's export of scaled_dot_product_attention);
 * of the integer shape they are refused. */
static void test_host_float_pow_sqrt(void **st)
{
    static const float sq[2] = {0, 16}, base[2] = {0, 2}, two = 2;
    bfit_graph_desc g;
    pbw *m;
    (void)st;
    m = model(float_arith_graph("Sqrt", sq, NULL));
    assert_int_equal(load(m, &g, NULL), BFIT_OK);
    assert_int_equal(g.nodes[0].cfg.kind, BFIT_L_LINEAR); /* the Reshape kept [4]: nothing computed */
    bfit_graph_fini(&g);
    pb_free(m);
    m = model(float_arith_graph("Pow", base, &two));
    assert_int_equal(load(m, &g, NULL), BFIT_OK);
    bfit_graph_fini(&g);
    pb_free(m);
    m = model(float_arith_graph("Pow", sq, &two)); /* [0, 256]: a sample of 4 cannot take it */
    assert_int_equal(load(m, &g, "node 'reshape' (Reshape, opset 17)"), BFIT_EINVAL);
    pb_free(m);
    m = model(float_arith_graph("Sqrt", NULL, NULL));
    assert_int_equal(load(m, &g, "node 'arith' (Sqrt, opset 17) with inputs 's' (computed on the host): a Sqrt of "
                                 "integers is not shape arithmetic batchfit follows (floats: it is)"),
                     BFIT_EINVAL);
    pb_free(m);
}

/* A language model's graph, as PyTorch exports nanoGPT's: ids int64 [N,4]
 * (rank ids_nd), te = Gather(wte [8,4], ids) (along axis tok_axis), pos =
 * Range(start, 4, 1) (start, or the batch when start is -1, is the limit
 * then; start -2: ids [N,T], T symbolic, and Range(0, T, 1) of their shape,
 * as an export with a dynamic sequence), pe = Gather(wpe [6,4], pos), h =
 * te + pe, logits [N,4,8] = h @ wte^T. */
static pbw *token_graph(int64_t start, int tok_axis, int ids_nd)
{
    static const int64_t ids3[3] = {-1, 4, 1}, td[2] = {8, 4}, pd[2] = {6, 4}, one = 1, four = 4, zero = 0;
    int64_t ids[2] = {-1, start == -2 ? -2 : 4}, out[3] = {-1, start == -2 ? -2 : 4, 8};
    const char *g1[2] = {"wte", "ids"}, *o1[1] = {"te"}, *ri[3] = {"r0", "r1", "r2"}, *ro[1] = {"pos"},
               *g2[2] = {"wpe", "pos"}, *o2[1] = {"pe"}, *ai[2] = {"te", "pe"}, *ao[1] = {"h"}, *ti[1] = {"wte"},
               *to[1] = {"wt"}, *mi[2] = {"h", "wt"}, *mo[1] = {"logits"}, *si[1] = {"ids"}, *so[1] = {"s"},
               *gi[2] = {"s", "zero"}, *go[1] = {"n"};
    pbw *g = pb_new(), *n = node("Gather", "tok", g1, 2, o1, 1), *t = node("Transpose", "wt", ti, 1, to, 1);
    if (tok_axis)
        attr_int(n, "axis", tok_axis);
    pmsg(g, 1, n);
    if (start < 0) { /* Range(0, N, 1): the batch; or T, dimension 1 */
        pmsg(g, 1, node("Shape", "shape", si, 1, so, 1));
        gi[1] = start == -2 ? "r2" : "zero";
        pmsg(g, 1, node("Gather", "batch", gi, 2, go, 1));
        ri[0] = "zero", ri[1] = "n";
    }
    pmsg(g, 1, node("Range", "range", ri, 3, ro, 1));
    pmsg(g, 1, node("Gather", "wpe", g2, 2, o2, 1));
    pmsg(g, 1, node("Add", "add", ai, 2, ao, 1));
    attr_ints(t, "perm", (int64_t[]){1, 0}, 2);
    pmsg(g, 1, t);
    pmsg(g, 1, node("MatMul", "head", mi, 2, mo, 1));
    pstr(g, 2, "g");
    pmsg(g, 5, tensor("wte", td, 2, NULL, 32));
    pmsg(g, 5, tensor("wpe", pd, 2, NULL, 24));
    pmsg(g, 5, tensor_i64("r0", NULL, 0, start < 0 ? &zero : &start, 1));
    pmsg(g, 5, tensor_i64("r1", NULL, 0, &four, 1));
    pmsg(g, 5, tensor_i64("r2", NULL, 0, &one, 1));
    pmsg(g, 5, tensor_i64("zero", NULL, 0, &zero, 1));
    pmsg(g, 11, value_info_t("ids", ids_nd == 3 ? ids3 : ids, ids_nd, 7));
    pmsg(g, 12, value_info("logits", out, 3));
    return g;
}

static pbw *token_model(int64_t start, int tok_axis, int ids_nd) { return model(token_graph(start, tok_axis, ids_nd)); }

/* A GPT's embeddings and tied head (onnx_tokens.c): token ids make an embed
 * layer, the position table's rows by torch.arange fold into it, the head by
 * the token table transposed is tied to it; a position table read from row
 * 1, a Range over the batch, a Gather of ids along axis 1 and ids of three
 * dimensions are refused, saying so. */
static void test_token_model(void **st)
{
    const bfit_wsrc_entry *e;
    bfit_graph_desc g;
    pbw *m;
    (void)st;
    m = token_model(0, 0, 2);
    if (load(m, &g, NULL) != BFIT_OK)
        fail_msg("%s", bfit_errmsg());
    assert_int_equal(g.input_dtype, BFIT_I32);
    assert_int_equal(g.input.nd, 2);
    assert_int_equal(g.input.d[0], 4);
    assert_int_equal(g.input.d[1], 1);
    assert_int_equal(g.nnodes, 2);
    assert_int_equal(g.nodes[0].cfg.kind, BFIT_L_EMBED);
    assert_int_equal(g.nodes[0].cfg.vocab, 8);
    assert_int_equal(g.nodes[0].cfg.units, 4);
    assert_int_equal(g.nodes[0].cfg.positions, 6);
    assert_int_equal(g.nodes[1].cfg.kind, BFIT_L_LINEAR);
    assert_int_equal(g.nodes[1].cfg.tie, 1);
    assert_int_equal(g.nodes[1].cfg.units, 8);
    assert_int_equal(g.nodes[1].cfg.bias, 0);
    assert_non_null(e = bfit_wsrc_find(g.wsrc, 0, 0));
    assert_string_equal(e->name, "wte");
    assert_non_null(e = bfit_wsrc_find(g.wsrc, 0, 1));
    assert_string_equal(e->name, "wpe");
    assert_null(bfit_wsrc_find(g.wsrc, 1, 0)); /* the head's weight is the table, not a copy */
    bfit_graph_fini(&g);
    pb_free(m);
    m = token_model(1, 0, 2);
    assert_int_equal(load(m, &g, "node 'wpe' (Gather, opset 17) with inputs 'wpe' [6,4] float, 'pos' (computed on "
                                 "the host): batchfit reads a Gather of a table by indices known at load as a "
                                 "position embedding"),
                     BFIT_EINVAL);
    pb_free(m);
    m = token_model(-1, 0, 2);
    assert_int_equal(load(m, &g, "node 'range' (Range, opset 17) with inputs 'zero' [] int64, 'n' (computed on the "
                                 "host), 'r2' [] int64: Range's input 2 must be one number that does not depend on "
                                 "the batch"),
                     BFIT_EINVAL);
    pb_free(m);
    m = token_model(0, 1, 2);
    assert_int_equal(load(m, &g, "node 'tok' (Gather, opset 17) with inputs 'wte' [8,4] float, 'ids' [N,4,1]: batchfit "
                                 "reads a Gather of token ids as nn.Embedding's (rows of the table, axis 0), not "
                                 "along axis 1"),
                     BFIT_EINVAL);
    pb_free(m);
    m = token_model(0, 0, 3);
    assert_int_equal(load(m, &g, "t.onnx: the input 'ids' is integers of 3 dimensions: batchfit reads integers as "
                                 "token ids [batch, T]"),
                     BFIT_EINVAL);
    pb_free(m);
}

/* An export with a dynamic sequence (ids [N,T], T symbolic): lowered at the
 * length given (--seq), its Range over T worked out there; without one, or
 * with one past the position table's rows, refused saying so. */
static void test_token_dynamic_seq(void **st)
{
    bfit_graph_desc g;
    pbw *m = token_model(-2, 0, 2);
    (void)st;
    assert_int_equal(load(m, &g, "t.onnx: the sequence length of the input 'ids' (dimension 1, 'T') is not fixed "
                                 "in the export (a dynamic axis): give the length to train and plan at with --seq N"),
                     BFIT_EINVAL);
    for (int seq = 1; seq <= 6; seq++) {
        if (load_seq(m, seq, &g, NULL) != BFIT_OK)
            fail_msg("seq %d: %s", seq, bfit_errmsg());
        assert_int_equal(g.input_dtype, BFIT_I32);
        assert_int_equal(g.input.d[0], seq);
        assert_int_equal(g.nnodes, 2);
        assert_int_equal(g.nodes[0].cfg.kind, BFIT_L_EMBED);
        assert_int_equal(g.nodes[0].cfg.positions, 6);
        bfit_graph_fini(&g);
    }
    assert_int_equal(load_seq(m, 7, &g, "node 'wpe' (Gather, opset 17) with inputs 'wpe' [6,4] float, 'pos' "
                                        "(computed on the host): the positions 0 .. 6 run past the 6 rows of the "
                                        "position table: the model has 6 positions, the longest sequence it takes "
                                        "(--seq at most 6)"),
                     BFIT_EINVAL);
    pb_free(m);
    { /* float samples with the batch in dimension 1 ([T, batch, F]): refused saying so, --seq or not (token ids
         [T, batch], nn.Transformer's default layout, are read: onnx_torch tut_seqfirst) */
        static const int64_t sf[3] = {4, -3, 5};
        pbw *gr = pb_new();
        pmsg(gr, 11, value_info_t("x", sf, 3, 1));
        pstr(gr, 2, "g");
        m = model(gr);
        for (int seq = 0; seq <= 4; seq += 4)
            assert_int_equal(load_seq(m, seq, &g, "t.onnx: the input 'x' has its batch in dimension 1 ('batch'): "
                                                  "batchfit reads that layout for token ids [T, batch] only"),
                             BFIT_EINVAL);
        pb_free(m);
    }
    { /* token ids [T, batch] read, but an op whose meaning depends on where the batch is refused in them */
        static const int64_t ids[2] = {4, -3}, td[2] = {8, 4};
        const char *gi[2] = {"wte", "ids"}, *go[1] = {"te"}, *ti[1] = {"te"}, *to[1] = {"y"};
        pbw *gr = pb_new(), *t = node("Transpose", "swap", ti, 1, to, 1);
        pmsg(gr, 1, node("Gather", "tok", gi, 2, go, 1));
        attr_ints(t, "perm", (int64_t[]){1, 0, 2}, 3);
        pmsg(gr, 1, t);
        pstr(gr, 2, "g");
        pmsg(gr, 5, tensor("wte", td, 2, NULL, 32));
        pmsg(gr, 11, value_info_t("ids", ids, 2, 7));
        pmsg(gr, 12, value_info("y", (int64_t[]){4, -3, 4}, 3));
        m = model(gr);
        assert_int_equal(load(m, &g, "node 'swap' (Transpose, opset 17) with inputs 'te' [N,4,4]: a model of token "
                                     "ids [T, batch] (nn.Transformer's default layout): batchfit reads its "
                                     "element-wise ops, Linear, LayerNorm and nn.MultiheadAttention in that layout, "
                                     "not a Transpose of its tokens"),
                         BFIT_EINVAL);
        pb_free(m);
    }
    m = token_model(0, 0, 2); /* a T fixed in the file: the length given does not bind it */
    if (load_seq(m, 2, &g, NULL) != BFIT_OK)
        fail_msg("%s", bfit_errmsg());
    assert_int_equal(g.input.d[0], 4);
    bfit_graph_fini(&g);
    pb_free(m);
}

/* Integer shape arithmetic runs on the host, as a * batch + b: what holds
 * for every batch size loads (the Reshape then keeps the sample as it is
 * and computes nothing), what does not is refused at its node. */
static void test_shape_arithmetic(void **st)
{
    static const int64_t one[2] = {1, 1}, three[2] = {3, 1}, lead[2] = {2, 2};
    static const int64_t huge[2] = {1, INT64_MAX / 2}, big[2] = {1, (int64_t)1 << 60};
    bfit_graph_desc g, ref;
    pbw *m;
    (void)st;
    m = model(gemm_graph(NULL));
    assert_int_equal(load(m, &ref, NULL), BFIT_OK);
    pb_free(m);
    for (int k = 0; k < 2; k++) {
        m = model(k ? shape_graph("Div", "k", one) : shape_graph(NULL, "k", one));
        assert_int_equal(load(m, &g, NULL), BFIT_OK);
        assert_int_equal(g.nnodes, ref.nnodes); /* the Gemm's linear layer alone */
        assert_int_equal(g.nodes[0].cfg.kind, BFIT_L_LINEAR);
        bfit_graph_fini(&g);
        pb_free(m);
    }
    bfit_graph_fini(&ref);
    m = model(shape_graph("Mul", "s", one));
    assert_int_equal(load(m, &g, "node 'arith' (Mul, opset 17)"), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "the batch size times itself"));
    pb_free(m);
    m = model(shape_graph("Div", "k", three));
    assert_int_equal(load(m, &g, "node 'arith' (Div, opset 17)"), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "is divided by 3"));
    pb_free(m);
    /* [2, 2] for every batch: the batch is not first any more */
    m = model(shape_graph("Mul", "k", lead));
    assert_int_equal(load(m, &g, "node 'reshape' (Reshape, opset 17)"), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "the target shape must keep the batch first"));
    pb_free(m);
    /* 4 * 2^62 overflows; 4 * 2^60 does not, but is more than a sample's 4 elements (fuzz_onnx found both) */
    m = model(shape_graph("Mul", "k", huge));
    assert_int_equal(load(m, &g, "node 'arith' (Mul, opset 17)"), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "shape arithmetic beyond 64-bit integers"));
    pb_free(m);
    m = model(shape_graph("Mul", "k", big));
    assert_int_equal(load(m, &g, "node 'reshape' (Reshape, opset 17)"), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "the target has the dimension 4611686018427387904, a sample has 4 elements"));
    pb_free(m);
}

/* ---- padding ---------------------------------------------------------------------- */

enum { PAD_ATTR, PAD_TORCH, PAD_STEP2, PAD_SLICE9 };

/* The pads p (ONNX's order: the begins of N, C, H, W, then the ends) as
 * the Pad's input "p", computed on the host as an export computes them:
 * PAD_TORCH as PyTorch's F.pad export (from its list, last dimension
 * first, reshaped to [4, 2], the rows reversed by a Slice of step -1,
 * transposed, flattened); PAD_STEP2 every other value of 16, backwards
 * from a start past the end (step -2); PAD_SLICE9 values 1 to 8 of 10 by
 * an opset-9 Slice (starts and ends attributes). */
static void pads_input(pbw *g, int form, const int64_t p[8])
{
    static const int64_t d1[1] = {1}, d2[1] = {2}, d8[1] = {8}, d10[1] = {10}, d16[1] = {16}, perm[2] = {1, 0};
    static const int64_t rows[2] = {-1, 2}, flat[1] = {-1}, from[1] = {100}, to[1] = {-INT64_MAX}, ax[1] = {0};
    static const int64_t back[1] = {-1}, back2[1] = {-2}, st9[1] = {1}, en9[1] = {9};
    const int64_t torch[8] = {p[3], p[7], p[2], p[6], p[1], p[5], p[0], p[4]};
    int64_t k[16] = {0};
    const char *r[2] = {"pt", "rows"}, *rr[1] = {"r"}, *si[5] = {"r", "from", "to", "ax", "back"}, *so[1] = {"s"};
    const char *t[1] = {"t"}, *f[2] = {"t", "flat"}, *po[1] = {"p"};
    pbw *n;

    if (form == PAD_STEP2 || form == PAD_SLICE9) {
        for (int i = 0; i < 8; i++)
            k[form == PAD_STEP2 ? 15 - 2 * i : 1 + i] = p[i];
        si[0] = "k", si[4] = "back2";
        pmsg(g, 5, tensor_i64("k", form == PAD_STEP2 ? d16 : d10, 1, k, form == PAD_STEP2 ? 16 : 10));
        n = node("Slice", "slice", si, form == PAD_STEP2 ? 5 : 1, po, 1);
        if (form == PAD_SLICE9)
            attr_ints(n, "starts", st9, 1), attr_ints(n, "ends", en9, 1);
        pmsg(g, 1, n);
    } else {
        pmsg(g, 5, tensor_i64("pt", d8, 1, torch, 8));
        pmsg(g, 1, node("Reshape", "rows", r, 2, rr, 1));
        pmsg(g, 1, node("Slice", "reverse", si, 5, so, 1));
        n = node("Transpose", "transpose", so, 1, t, 1);
        attr_ints(n, "perm", perm, 2);
        pmsg(g, 1, n);
        pmsg(g, 1, node("Reshape", "flatten", f, 2, po, 1));
        pmsg(g, 5, tensor_i64("rows", d2, 1, rows, 2));
        pmsg(g, 5, tensor_i64("flat", d1, 1, flat, 1));
    }
    pmsg(g, 5, tensor_i64("from", d1, 1, from, 1));
    pmsg(g, 5, tensor_i64("to", d1, 1, to, 1));
    pmsg(g, 5, tensor_i64("ax", d1, 1, ax, 1));
    pmsg(g, 5, tensor_i64("back", d1, 1, back, 1));
    pmsg(g, 5, tensor_i64("back2", d1, 1, back2, 1));
}

/* x [N,2,4,4] -> Pad(p, mode) -> Conv 3x3 to 4 channels without pads ->
 * GlobalAveragePool -> Flatten -> Gemm -> logits [N,3]. PAD_ATTR: the
 * pads and value attributes (opset 9, the Pad's one input), else the pads
 * computed on the host (pads_input) and the value an input (opset 11 on). */
static pbw *pad_graph_axes(int form, const int64_t p[8], const char *mode, int axes)
{
    static const int64_t in[4] = {-1, 2, 4, 4}, wd[4] = {4, 2, 3, 3}, d4[1] = {4}, all[4] = {0, 1, 2, 3};
    const char *pi[4] = {"x", "p", "zero", "axes"}, *po[1] = {"xp"}, *ci[2] = {"xp", "conv.weight"}, *co[1] = {"c"};
    const char *q[1] = {"q"}, *fl[1] = {"f"};
    const float zero = 0;
    pbw *g = pb_new(), *n;

    if (form != PAD_ATTR)
        pads_input(g, form, p);
    n = node("Pad", "pad", pi, form == PAD_ATTR ? 1 : axes ? 4 : 3, po, 1);
    if (axes)
        pmsg(g, 5, tensor_i64("axes", d4, 1, all, 4));
    attr_str(n, "mode", mode);
    if (form == PAD_ATTR)
        attr_ints(n, "pads", p, 8), attr_float(n, "value", 0);
    pmsg(g, 1, n);
    pmsg(g, 1, node("Conv", "conv", ci, 2, co, 1));
    pmsg(g, 1, node("GlobalAveragePool", "pool", co, 1, q, 1));
    pmsg(g, 1, node("Flatten", "flat", q, 1, fl, 1));
    fc_head(g, "f");
    pmsg(g, 5, tensor("conv.weight", wd, 4, NULL, 72));
    pmsg(g, 5, tensor("zero", NULL, 0, &zero, 1));
    pmsg(g, 11, value_info("x", in, 4));
    return g;
}

static pbw *pad_graph(int form, const int64_t p[8], const char *mode) { return pad_graph_axes(form, p, mode, 0); }

/* A Pad of zeros before a Conv is the Conv's padding, whatever form the
 * pads come in: the attribute (opsets 7 to 10) or an input (11 on),
 * computed on the host as PyTorch computes them for nn.ZeroPad2d and F.pad
 * (a Slice of step -1 and a Transpose), or by other Slices (a step of -2
 * from a start past the end; an opset-9 Slice's attributes). Padding
 * batchfit cannot fold is refused at the Pad, saying what it is and what
 * is supported. */
static void test_pad(void **st)
{
    static const int64_t sym[8] = {0, 0, 1, 2, 0, 0, 1, 2}, asym[8] = {0, 0, 1, 2, 0, 0, 3, 4};
    static const int opset[4] = {9, 17, 17, 9};
    bfit_graph_desc g;
    pbw *m;
    (void)st;
    for (int form = PAD_ATTR; form <= PAD_SLICE9; form++) {
        m = model_op(pad_graph(form, sym, "constant"), opset[form]);
        if (load(m, &g, NULL) != BFIT_OK)
            fail_msg("form %d: %s", form, bfit_errmsg());
        assert_int_equal(g.nnodes, 3); /* conv, gap, linear */
        assert_int_equal(g.nodes[0].cfg.kind, BFIT_L_CONV);
        assert_int_equal(g.nodes[0].cfg.ph, 1);
        assert_int_equal(g.nodes[0].cfg.pw, 2);
        bfit_graph_fini(&g);
        pb_free(m);
        m = model_op(pad_graph(form, asym, "constant"), opset[form]);
        assert_int_equal(load(m, &g, "node 'pad' (Pad, opset"), BFIT_EINVAL);
        if (!strstr(bfit_errmsg(), "pads [0,0,1,2,0,0,3,4] pad H by 1 above and 3 below, W by 2 left and 4 right: "
                                   "batchfit folds only zero padding of H and W, the same on both sides"))
            fail_msg("form %d: %s", form, bfit_errmsg());
        pb_free(m);
        m = model_op(pad_graph(form, sym, "reflect"), opset[form]);
        assert_int_equal(load(m, &g, "mode reflect is not supported: batchfit pads with zeros only"), BFIT_EINVAL);
        pb_free(m);
    }
    /* opset 18's axes input (here all four, in order) is refused, saying what to give instead */
    m = model_op(pad_graph_axes(PAD_TORCH, sym, "constant", 1), 18);
    assert_int_equal(load(m, &g, "node 'pad' (Pad, opset 18) with inputs 'x' [N,2,4,4], 'p' (computed on the "
                                 "host), 'zero' [] float, 'axes' [4] int64: the axes input (opset 18 on: pads for "
                                 "the listed axes only) is not supported: give the pads of every dimension, without "
                                 "axes"),
                     BFIT_EINVAL);
    pb_free(m);
}

/* x [N,4,5,5] -> op (kernel k, stride s, pads p, ceil_mode c) -> GlobalAveragePool -> Flatten -> Gemm. */
static pbw *pool_graph(const char *op, int64_t k, int64_t s, int64_t p, int64_t c)
{
    static const int64_t in[4] = {-1, 4, 5, 5};
    const int64_t ks[2] = {k, k}, ss[2] = {s, s}, ps[4] = {p, p, p, p};
    const char *x[1] = {"x"}, *y[1] = {"y"}, *q[1] = {"q"}, *fl[1] = {"f"};
    pbw *g = pb_new(), *n = node(op, "pool", x, 1, y, 1);
    attr_ints(n, "kernel_shape", ks, 2);
    attr_ints(n, "strides", ss, 2);
    attr_ints(n, "pads", ps, 4);
    attr_int(n, "ceil_mode", c);
    pmsg(g, 1, n);
    pmsg(g, 1, node("GlobalAveragePool", "gap", y, 1, q, 1));
    pmsg(g, 1, node("Flatten", "flat", q, 1, fl, 1));
    fc_head(g, "f");
    pmsg(g, 11, value_info("x", in, 4));
    return g;
}

/* The output side of the model's first layer, loaded from m. */
static int first_out(const pbw *m, bfit_shape *out)
{
    bfit_model *M;
    tdev t;
    int rc;
    tdev_open(&t, 1);
    rc = bfit_model_load_onnx(m->b, m->n, "t.onnx", t.dev, &M);
    if (rc == BFIT_OK) {
        *out = M->nodes[0].l->out;
        bfit_model_free(M);
    }
    tdev_close(&t);
    return rc;
}

/* ceil_mode=1: a max pool's output rounded up as PyTorch rounds it (5x5
 * by 2x2/2: 3x3, floor 2x2; padded by 1: 3x3, not the 4x4 whose last
 * window would start in the padding); an average pool's only where the
 * sizes agree, else refused saying why (PyTorch's divisor at those
 * windows is not batchfit's). onnx_torch ceil_cnn checks the values. */
static void test_pool_ceil(void **st)
{
    static const struct { const char *op; int64_t k, s, p; int out; } ok[] = {
        {"MaxPool", 2, 2, 0, 3}, {"MaxPool", 2, 2, 1, 3}, {"MaxPool", 3, 2, 0, 2}, {"AveragePool", 3, 2, 0, 2}};
    bfit_shape out;
    pbw *m;
    (void)st;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        m = model(pool_graph(ok[i].op, ok[i].k, ok[i].s, ok[i].p, 1));
        if (first_out(m, &out) != BFIT_OK)
            fail_msg("%s %lld/%lld pad %lld: %s", ok[i].op, (long long)ok[i].k, (long long)ok[i].s,
                     (long long)ok[i].p, bfit_errmsg());
        assert_int_equal(out.h, ok[i].out);
        assert_int_equal(out.w, ok[i].out);
        pb_free(m);
    }
    m = model(pool_graph("AveragePool", 2, 2, 0, 1));
    assert_int_equal(first_out(m, &out), BFIT_EINVAL);
    if (!strstr(bfit_errmsg(), "node 'pool' (AveragePool, opset 17) with inputs 'x' [N,4,5,5]: ceil_mode=1 makes "
                               "the output 3x3 (floor: 2x2), and PyTorch averages those last windows over their "
                               "part inside the input and padding, where batchfit divides by the kernel: export "
                               "the AvgPool2d with ceil_mode=False"))
        fail_msg("%s", bfit_errmsg());
    pb_free(m);
}

/* Opsets 21 to 28 changed nothing batchfit reads but types (and Cast's
 * float-8 rules, and wrote down the ceil_mode rule it follows): a max pool
 * with ceil_mode and a host Cast load at each. A later opset is refused,
 * saying which opsets are read and what to export with. */
static void test_opset_range(void **st)
{
    static const int ok[] = {21, 22, 23, 24, 25, 28};
    bfit_graph_desc g;
    bfit_shape out;
    pbw *m;
    (void)st;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        m = model_op(pool_graph("MaxPool", 2, 2, 0, 1), ok[i]);
        if (first_out(m, &out) != BFIT_OK)
            fail_msg("opset %d: %s", ok[i], bfit_errmsg());
        assert_int_equal(out.h, 3);
        pb_free(m);
        m = model_op(cast_const_graph(BFIT_ONNX_INT8, 260, NULL), ok[i]);
        if (load(m, &g, NULL) != BFIT_OK)
            fail_msg("opset %d: %s", ok[i], bfit_errmsg());
        bfit_graph_fini(&g);
        pb_free(m);
    }
    m = model_op(gemm_graph(NULL), 29);
    assert_int_equal(load(m, &g, "t.onnx: opset 29 is newer than batchfit reads (7 to 28: what later opsets change in "
                                 "the operators it reads has not been gone through): export the model with "
                                 "torch.onnx.export(..., opset_version=17), or another opset from 7 to 28"),
                     BFIT_EINVAL);
    pb_free(m);
}

/* Not a model at all, and models batchfit cannot train. */
static void test_not_a_model(void **st)
{
    static const char text[] = "input 1x28x28\nlinear 10\n";
    bfit_graph_desc g;
    pbw *m = pb_new();
    (void)st;
    put(m, text, sizeof text - 1); /* a spec file is not a model */
    assert_int_equal(load(m, &g, "t.onnx"), BFIT_EFORMAT);
    m->n = 0;
    assert_int_equal(load(m, &g, "holds no graph"), BFIT_EFORMAT);
    pb_free(m);
    m = model(gemm_graph("Identity")); /* fine: the output is the Gemm's */
    assert_int_equal(load(m, &g, NULL), BFIT_OK);
    bfit_graph_fini(&g);
    pb_free(m);
}

/* ---- the layers ONNX imports need ------------------------------------------------ */

static gc_case one(const char *label, bfit_layer_cfg cfg, bfit_shape in, int m)
{
    gc_case k;
    memset(&k, 0, sizeof k);
    k.label = label;
    k.cfg = cfg;
    k.nin = 1;
    k.in[0] = in;
    k.m = m;
    return k;
}

static bfit_layer_cfg conv_g(int units, int k, int s, int p, int groups, int bias)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_CONV);
    c.units = units;
    c.kh = c.kw = k;
    c.sh = c.sw = s;
    c.ph = c.pw = p;
    c.groups = groups;
    c.bias = bias;
    return c;
}

static void test_grouped_conv_gradcheck(void **st)
{
    gc_case cases[] = {
        one("conv groups=2 m=2 4x5x5 k3 p1", conv_g(6, 3, 1, 1, 2, 1), bfit_shape_chw(4, 5, 5), 2),
        one("conv depthwise m=3 6x7x7 k3 s2 p1", conv_g(6, 3, 2, 1, 6, 0), bfit_shape_chw(6, 7, 7), 3),
        one("conv depthwise x2 m=1 3x4x4 k1", conv_g(6, 1, 1, 0, 3, 1), bfit_shape_chw(3, 4, 4), 1),
    };
    bfit_layer *l;
    bfit_shape in = bfit_shape_chw(4, 5, 5);
    char err[256];
    bfit_layer_cfg bad = conv_g(6, 3, 1, 1, 4, 1);
    (void)st;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        gc_assert(&cases[i]);
    /* 4 groups do not divide 6 output channels */
    assert_int_equal(bfit_layer_new(&bad, NULL, &in, 1, &l, err, sizeof err), BFIT_EINVAL);
    assert_non_null(strstr(err, "with 4 groups needs input channels (4) and output channels (6) that the groups divide"));
}

static void test_clip_gradcheck(void **st)
{
    bfit_layer_cfg relu6 = bfit_layer_cfg_default(BFIT_L_CLIP), neg = relu6;
    gc_case a, b;
    (void)st;
    relu6.lo = 0, relu6.hi = 6;  /* the kink at 0 inside the inputs' range */
    neg.lo = -6, neg.hi = 0;     /* the upper bound at 0 */
    a = one("clip [0, 6] m=3 2x3x4", relu6, bfit_shape_chw(2, 3, 4), 3);
    b = one("clip [-6, 0] m=2 17", neg, bfit_shape_vec(17), 2);
    a.kink_gap = b.kink_gap = 0.05; /* a difference across the kink is not a derivative */
    gc_assert(&a);
    gc_assert(&b);
}

static void test_concat_gradcheck(void **st)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_CONCAT), h = c;
    gc_case a, b;
    (void)st;
    h.axis = 1;
    a = one("concat channels 2+3+1 x3x2 m=2", c, bfit_shape_chw(2, 3, 2), 2);
    a.nin = 3;
    a.in[1] = bfit_shape_chw(3, 3, 2);
    a.in[2] = bfit_shape_chw(1, 3, 2);
    b = one("concat height 2x1x3 + 2x4x3 m=3", h, bfit_shape_chw(2, 1, 3), 3);
    b.nin = 2;
    b.in[1] = bfit_shape_chw(2, 4, 3);
    gc_assert(&a);
    gc_assert(&b);
}

/* A vision transformer's layers around its blocks: the patch embedding's
 * channels to tokens (reshape, transpose), the class token and the position
 * embedding (learned: their gradients sum over the batch), and the head's
 * token (select: the other tokens get a zero gradient). */
static void test_token_layers_gradcheck(void **st)
{
    bfit_layer_cfg rs = bfit_layer_cfg_default(BFIT_L_RESHAPE), tr = bfit_layer_cfg_default(BFIT_L_TRANSPOSE);
    bfit_layer_cfg cls = bfit_layer_cfg_default(BFIT_L_CLS), addp = bfit_layer_cfg_default(BFIT_L_ADDP);
    bfit_layer_cfg sel = bfit_layer_cfg_default(BFIT_L_SELECT), back = tr, shuf = tr, chs = sel;
    gc_case k[10];
    bfit_layer *l;
    bfit_shape in = bfit_shape_seq(5, 4);
    char err[256];
    (void)st;
    rs.to = bfit_shape_seq(4, 6);
    addp.to = (bfit_shape){.nd = 3, .d = {1, 5, 4, 1}}; /* PyTorch's [1, T, C] */
    k[0] = one("reshape 4x2x3 -> 4x6 m=2", rs, bfit_shape_chw(4, 2, 3), 2);
    k[1] = one("transpose 4x6 -> 6x4 m=3", tr, bfit_shape_seq(4, 6), 3);
    k[2] = one("class token before 4x3 m=3", cls, bfit_shape_seq(4, 3), 3);
    k[3] = one("position embedding 5x4 m=3", addp, in, 3);
    sel.units = 0;
    k[4] = one("select token 0 of 5x4 m=2", sel, in, 2);
    sel.units = 3;
    k[5] = one("select token 3 of 5x4 m=3", sel, in, 3);
    k[6] = one("transpose 3x2x4 -> 8x3 m=2", tr, bfit_shape_chw(3, 2, 4), 2); /* to channels-last */
    back.to = bfit_shape_chw(3, 2, 4);
    k[7] = one("transpose 8x3 -> 3x2x4 m=2", back, bfit_shape_seq(8, 3), 2); /* and back */
    shuf.groups = 3;
    k[8] = one("channel shuffle 6x2x2 in 3 groups m=2", shuf, bfit_shape_chw(6, 2, 2), 2);
    chs.units = 1;
    chs.to = bfit_shape_chw(2, 2, 3);
    k[9] = one("select channels [1, 3) of 4x2x3 m=2", chs, bfit_shape_chw(4, 2, 3), 2);
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        gc_assert(&k[i]);
    sel.units = 5; /* one past the last token */
    assert_int_equal(bfit_layer_new(&sel, NULL, &in, 1, &l, err, sizeof err), BFIT_EINVAL);
    assert_non_null(strstr(err, "select takes token 5 of tokens [T, C]"));
    rs.to = bfit_shape_seq(4, 4);
    assert_int_equal(bfit_layer_new(&rs, NULL, &in, 1, &l, err, sizeof err), BFIT_EINVAL);
    assert_non_null(strstr(err, "the element counts differ"));
    back.to = bfit_shape_chw(4, 2, 2); /* [5, 4] is no [H*W, C] of that image */
    assert_int_equal(bfit_layer_new(&back, NULL, &in, 1, &l, err, sizeof err), BFIT_EINVAL);
    assert_non_null(strstr(err, "transpose of 5x4 to the image 4x2x2: the image wants a sample [H*W, C]"));
}

/* A concatenation's backward adds into an input's gradient when dx_add says
 * another consumer wrote it first; the others it overwrites. */
static void test_concat_adds(void **st)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_CONCAT);
    bfit_shape in[2] = {bfit_shape_chw(2, 1, 2), bfit_shape_chw(1, 1, 2)};
    bfit_layer *l;
    bfit_bwd_args a;
    tbuf dy, dx0, dx1;
    char err[128];
    tdev t;
    const int m = 2;

    (void)st;
    tdev_open(&t, 1);
    assert_int_equal(bfit_layer_new(&c, t.dev, in, 2, &l, err, sizeof err), BFIT_OK);
    assert_int_equal(bfit_layer_prepare(l, m, 1), BFIT_OK);
    dy = tbuf_new(&t, sizeof(float) * 12);
    dx0 = tbuf_new(&t, sizeof(float) * 8);
    dx1 = tbuf_new(&t, sizeof(float) * 4);
    for (int i = 0; i < 12; i++)
        TB_F(dy)[i] = (float)(i + 1);
    for (int i = 0; i < 4; i++)
        TB_F(dx1)[i] = 100.0f * (float)(i + 1);
    tbuf_up(&t, &dy);
    tbuf_up(&t, &dx0); /* NaN: must be overwritten */
    tbuf_up(&t, &dx1);
    memset(&a, 0, sizeof a);
    a.m = m;
    a.dy = dy.d;
    a.dx[0] = dx0.d;
    a.dx[1] = dx1.d;
    a.dx_add = 2;
    assert_int_equal(bfit_layer_backward(l, &a), BFIT_OK);
    tbuf_down(&t, &dx0);
    tbuf_down(&t, &dx1);
    /* dy rows [1..6] [7..12]: input 0 the first 4 of each, input 1 the last 2 */
    for (int r = 0; r < m; r++) {
        for (int j = 0; j < 4; j++)
            assert_true(TB_F(dx0)[r * 4 + j] == (float)(r * 6 + j + 1));
        for (int j = 0; j < 2; j++)
            assert_true(TB_F(dx1)[r * 2 + j] == 100.0f * (float)(r * 2 + j + 1) + (float)(r * 6 + 4 + j + 1));
    }
    tbuf_free(&t, &dy), tbuf_free(&t, &dx0), tbuf_free(&t, &dx1);
    bfit_layer_free(l);
    tdev_close(&t);
}

/* x -> conv a; concat(x, a) -> conv b; concat(x, a, b) -> gap -> linear:
 * x and a each feed two concatenations (DenseNet's pattern). Their second
 * gradient is added in by the concatenation itself (no temporary), and a
 * training step's measured peak is still the plan's. */
static void test_dense_graph(void **st)
{
    bfit_layer_cfg cv = conv_g(3, 3, 1, 1, 1, 1), cc = bfit_layer_cfg_default(BFIT_L_CONCAT);
    bfit_layer_cfg gap = bfit_layer_cfg_default(BFIT_L_GAP), fc = bfit_layer_cfg_default(BFIT_L_LINEAR);
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
    int c1[2] = {1, 2}, c2[3] = {1, 2, 4}, a, b;
    bfit_graph_desc g;
    bfit_model *M;
    bfit_optim *opt;
    bfit_step_plan p;
    bfit_arena_stats s;
    float x[4 * 3 * 6 * 6];
    int32_t y[4] = {0, 1, 2, 3};
    tdev t;

    (void)st;
    bfit_graph_init(&g, "dense");
    g.input = bfit_shape_chw(3, 6, 6);
    fc.units = 4;
    a = bfit_graph_add(&g, &cv, 0, -1, 0, 0);   /* 1 */
    (void)a;
    c1[0] = 0, c1[1] = 1;
    assert_int_equal(bfit_graph_add_n(&g, &cc, c1, 2, 0, 0), 2);
    b = bfit_graph_add(&g, &cv, 2, -1, 0, 0);   /* 3: conv of 6 channels -> 3 */
    (void)b;
    c2[0] = 0, c2[1] = 1, c2[2] = 3;
    assert_int_equal(bfit_graph_add_n(&g, &cc, c2, 3, 0, 0), 4);
    bfit_graph_add(&g, &gap, 4, -1, 0, 0);
    bfit_graph_add(&g, &fc, 5, -1, 0, 0);
    tdev_open(&t, 1);
    assert_int_equal(bfit_model_new(&g, t.dev, t.arena, &M), BFIT_OK);
    bfit_graph_fini(&g);
    bfit_arena_reset_peak(t.arena);
    assert_int_equal(bfit_plan_compute(M, &oc, 4, 1, &p), BFIT_OK);
    assert_int_equal(bfit_model_alloc_params(M, 1), BFIT_OK);
    assert_int_equal(bfit_model_init_params(M, 1), BFIT_OK);
    assert_int_equal(bfit_optim_new(&oc, M->trainable, M->ntrainable, t.dev, t.arena, &opt), BFIT_OK);
    assert_int_equal(bfit_model_reserve(M, 4, 1), BFIT_OK);
    /* the second concatenation adds into the gradient of value 1 (conv a's output) */
    assert_int_equal(M->lay.tmp_input[3], -1);
    assert_int_equal(M->lay.dx_add[1], 2u); /* written by the later concatenation first */
    for (int i = 0; i < (int)(sizeof x / sizeof x[0]); i++)
        x[i] = (float)((i * 37) % 11) / 11.0f - 0.5f;
    assert_int_equal(bfit_model_set_input(M, x, y, 4), BFIT_OK);
    assert_int_equal(bfit_model_forward(M, 1), BFIT_OK);
    assert_int_equal(bfit_model_backward(M, 0.25f), BFIT_OK);
    assert_int_equal(bfit_optim_step(opt, 0.1), BFIT_OK);
    bfit_arena_stats_get(t.arena, &s);
    assert_int_equal(s.peak, p.peak);
    bfit_optim_free(opt);
    bfit_model_free(M);
    tdev_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_model),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_wrong_wire_types),
        cmocka_unit_test(test_bad_dimensions),
        cmocka_unit_test(test_external_data),
        cmocka_unit_test(test_size_mismatch),
        cmocka_unit_test(test_cycle),
        cmocka_unit_test(test_undefined_input),
        cmocka_unit_test(test_prelu),
        cmocka_unit_test(test_channels_last), cmocka_unit_test(test_token_scale), cmocka_unit_test(test_token_mean),
        cmocka_unit_test(test_channel_shuffle),
        cmocka_unit_test(test_unsupported_op),
        cmocka_unit_test(test_two_outputs),
        cmocka_unit_test(test_silu),
        cmocka_unit_test(test_shared_weight),
        cmocka_unit_test(test_gelu_op),
        cmocka_unit_test(test_host_cast),
        cmocka_unit_test(test_param_activations),
        cmocka_unit_test(test_host_cast_wrap),
        cmocka_unit_test(test_squeeze_excitation),
        cmocka_unit_test(test_not_a_model),
        cmocka_unit_test(test_shape_arithmetic), cmocka_unit_test(test_host_float_pow_sqrt),
        cmocka_unit_test(test_token_model),
        cmocka_unit_test(test_token_dynamic_seq),
        cmocka_unit_test(test_pad),
        cmocka_unit_test(test_pool_ceil),
        cmocka_unit_test(test_opset_range),
        cmocka_unit_test(test_grouped_conv_gradcheck),
        cmocka_unit_test(test_clip_gradcheck),
        cmocka_unit_test(test_concat_gradcheck),
        cmocka_unit_test(test_concat_adds),
        cmocka_unit_test(test_token_layers_gradcheck),
        cmocka_unit_test(test_dense_graph),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
