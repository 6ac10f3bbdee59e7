/* onnx.c - an ONNX model lowered to a graph of batchfit's layers.
 *
 * The file is mapped and read (onnx_pb.c); its values are named in a hash
 * table; the nodes the graph's output depends on are put in topological
 * order (a cycle is an error naming a node on it); then each node is
 * lowered by its op's handler (onnx_ops.c) into layers, aliases of its
 * input, or host constants. The file's initializers become the layers'
 * starting weights (wsrc.h), checked against the shapes the layers give
 * their parameters. Anything unsupported is refused at load with the node,
 * its op, the opset and its inputs' shapes, and nothing is left built. */
#include "base/err.h"
#include "base/hash.h"
#include "base/text.h"
#include "nn/onnx_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- values by name ------------------------------------------------------- */

static uint64_t hash(bfit_onnx_str s)
{
    return bfit_fnv1a(1469598103934665603ull, s.p, s.n);
}

static int str_eq(bfit_onnx_str a, bfit_onnx_str b) { return a.n == b.n && (!a.n || !memcmp(a.p, b.p, a.n)); }

oval *bfit_onnx_val(onnx_lower *L, bfit_onnx_str name)
{
    for (uint64_t i = hash(name) & (uint64_t)(L->nslot - 1);; i = (i + 1) & (uint64_t)(L->nslot - 1)) {
        int k = L->slot[i];
        if (k < 0)
            return NULL;
        if (str_eq(L->v[k].name, name))
            return &L->v[k];
    }
}

/* A new value of that name; a name given twice is an error. */
static int add_value(onnx_lower *L, bfit_onnx_str name, int producer, oval **out)
{
    uint64_t i;
    char nm[128];
    if (bfit_onnx_val(L, name))
        return bfit_fail(BFIT_EFORMAT, "%s: the value '%s' is defined twice (by two nodes, or a node and an "
                                       "initializer): the graph is not valid ONNX",
                         L->om->source, bfit_onnx_cstr(name, nm, sizeof nm));
    for (i = hash(name) & (uint64_t)(L->nslot - 1); L->slot[i] >= 0; i = (i + 1) & (uint64_t)(L->nslot - 1))
        ;
    L->slot[i] = L->nv;
    *out = &L->v[L->nv++];
    memset(*out, 0, sizeof **out);
    (*out)->name = name;
    (*out)->producer = producer;
    (*out)->init = -1;
    return BFIT_OK;
}

/* Every initializer, graph input and node output, named. */
static int collect(onnx_lower *L)
{
    const bfit_onnx_model *om = L->om;
    int64_t n = (int64_t)om->ninit + om->ninputs;
    oval *v;
    int rc;

    for (int i = 0; i < om->nnodes; i++)
        n += om->nodes[i].nout;
    for (L->nslot = 64; L->nslot < 2 * n; L->nslot *= 2)
        ;
    L->v = calloc((size_t)n + 1, sizeof *L->v);
    L->slot = malloc(sizeof *L->slot * (size_t)L->nslot);
    L->param_used = calloc((size_t)om->ninit + 1, sizeof *L->param_used);
    if (!L->v || !L->slot || !L->param_used)
        return bfit_fail(BFIT_ENOMEM, "onnx: out of host memory");
    memset(L->slot, 0xff, sizeof *L->slot * (size_t)L->nslot);
    for (int i = 0; i < om->ninit; i++) {
        if ((rc = add_value(L, om->init[i].name, -1, &v)) != BFIT_OK)
            return rc;
        v->kind = OV_HOST;
        v->t = &om->init[i];
        v->init = i;
    }
    for (int i = 0; i < om->ninputs; i++)
        if (!bfit_onnx_val(L, om->inputs[i].name) && (rc = add_value(L, om->inputs[i].name, -1, &v)) != BFIT_OK)
            return rc;
    for (int i = 0; i < om->nnodes; i++)
        for (int k = 0; k < om->nodes[i].nout; k++)
            if (om->nodes[i].out[k].n && (rc = add_value(L, om->nodes[i].out[k], i, &v)) != BFIT_OK)
                return rc;
    return BFIT_OK;
}

/* ---- order ---------------------------------------------------------------- */

static int node_fail(const onnx_lower *L, int i, const char *what)
{
    char nm[128], op[64];
    return bfit_fail(BFIT_EFORMAT, "%s: node '%s' (%s): %s", L->om->source,
                     bfit_onnx_cstr(L->om->nodes[i].name, nm, sizeof nm),
                     bfit_onnx_cstr(L->om->nodes[i].op, op, sizeof op), what);
}

/* The producer of every node input (-1: none), in a flat array by node
 * (pin_off[i] is node i's first); an undefined name is an error. */
static int producers(onnx_lower *L, int **pin, int **pin_off)
{
    const bfit_onnx_model *om = L->om;
    int64_t n = 0;
    char msg[256], nm[128];

    for (int i = 0; i < om->nnodes; i++)
        n += om->nodes[i].nin;
    *pin = malloc(sizeof **pin * (size_t)(n + 1));
    *pin_off = malloc(sizeof **pin_off * (size_t)(om->nnodes + 1));
    if (!*pin || !*pin_off)
        return bfit_fail(BFIT_ENOMEM, "onnx: out of host memory");
    n = 0;
    for (int i = 0; i < om->nnodes; i++) {
        (*pin_off)[i] = (int)n;
        for (int k = 0; k < om->nodes[i].nin; k++) {
            oval *v = om->nodes[i].in[k].n ? bfit_onnx_val(L, om->nodes[i].in[k]) : NULL;
            if (om->nodes[i].in[k].n && !v) {
                snprintf(msg, sizeof msg, "input %d reads '%s', which no node, initializer or graph input defines",
                         k + 1, bfit_onnx_cstr(om->nodes[i].in[k], nm, sizeof nm));
                return node_fail(L, i, msg);
            }
            (*pin)[n++] = v ? v->producer : -1;
        }
    }
    (*pin_off)[om->nnodes] = (int)n;
    return BFIT_OK;
}

/* Mark the nodes the output depends on (want[i] = 1), without recursion. */
static void ancestors(const onnx_lower *L, int out, const int *pin, const int *off, unsigned char *want, int *stack)
{
    int sp = 0;
    if (out < 0)
        return;
    want[out] = 1;
    stack[sp++] = out;
    while (sp) {
        int i = stack[--sp];
        for (int k = off[i]; k < off[i + 1]; k++)
            if (pin[k] >= 0 && !want[pin[k]]) {
                want[pin[k]] = 1;
                stack[sp++] = pin[k];
            }
    }
    (void)L;
}

/* The wanted nodes in file order if that puts every node after its inputs'
 * producers (ONNX asks for it; the layers then come in the order the
 * module's forward ran them): 1, else 0. */
static int file_order(const onnx_lower *L, const unsigned char *want, const int *pin, const int *off, int *order,
                      int *n)
{
    int nn = L->om->nnodes;
    *n = 0;
    for (int i = 0; i < nn; i++)
        for (int k = off[i]; want[i] && k < off[i + 1]; k++)
            if (pin[k] >= i)
                return 0;
    for (int i = 0; i < nn; i++)
        if (want[i])
            order[(*n)++] = i;
    return 1;
}

/* Each node's consumers (a node reading two of its outputs counts twice):
 * L->cons[L->coff[i] .. L->coff[i + 1]). */
static int consumers(onnx_lower *L, const int *pin, const int *off)
{
    int nn = L->om->nnodes;
    L->coff = calloc((size_t)nn + 2, sizeof *L->coff);
    L->cons = malloc(sizeof *L->cons * (size_t)(off[nn] + 1));
    if (!L->coff || !L->cons)
        return bfit_fail(BFIT_ENOMEM, "onnx: out of host memory");
    for (int k = 0; k < off[nn]; k++)
        if (pin[k] >= 0)
            L->coff[pin[k] + 2]++;
    for (int i = 0; i < nn; i++)
        L->coff[i + 2] += L->coff[i + 1];
    for (int i = 0; i < nn; i++)
        for (int k = off[i]; k < off[i + 1]; k++)
            if (pin[k] >= 0)
                L->cons[L->coff[pin[k] + 1]++] = i;
    return BFIT_OK;
}

int bfit_onnx_consumers(onnx_lower *L, int node, int k, int *out, int max)
{
    int n = 0;
    bfit_onnx_str name = L->om->nodes[node].out[k];
    for (int c = L->coff[node]; c < L->coff[node + 1]; c++) {
        const bfit_onnx_node *nd = &L->om->nodes[L->cons[c]];
        int reads = 0;
        if (bfit_onnx_streq(nd->op, "Shape") || (c > L->coff[node] && L->cons[c] == L->cons[c - 1]))
            continue;
        for (int j = 0; j < nd->nin; j++)
            reads |= nd->in[j].n == name.n && name.n && !memcmp(nd->in[j].p, name.p, name.n);
        if (!reads)
            continue;
        if (n == max)
            return -1;
        out[n++] = L->cons[c];
    }
    return n;
}

/* The wanted nodes in an order where each comes after its inputs' producers:
 * the file's if it is one, else Kahn's; what cannot be ordered lies on a
 * cycle. */
static int topo(onnx_lower *L, const unsigned char *want, const int *pin, const int *off, int *order, int *n)
{
    int nn = L->om->nnodes, head = 0, tail = 0, rc = BFIT_OK, *deg;

    if (file_order(L, want, pin, off, order, n))
        return BFIT_OK;
    if (!(deg = calloc((size_t)nn + 1, sizeof *deg)))
        return bfit_fail(BFIT_ENOMEM, "onnx: out of host memory");
    for (int i = 0; i < nn; i++)
        for (int k = off[i]; want[i] && k < off[i + 1]; k++)
            deg[i] += pin[k] >= 0;
    for (int i = 0; i < nn; i++)
        if (want[i] && !deg[i])
            order[tail++] = i;
    while (head < tail) {
        int i = order[head++];
        for (int c = L->coff[i]; c < L->coff[i + 1]; c++)
            if (want[L->cons[c]] && --deg[L->cons[c]] == 0)
                order[tail++] = L->cons[c];
    }
    for (int i = 0; i < nn && rc == BFIT_OK; i++)
        if (want[i] && deg[i])
            rc = node_fail(L, i, "the graph has a cycle through this node: it depends on its own output");
    *n = tail;
    free(deg);
    return rc;
}

/* ---- what handlers use ------------------------------------------------------- */

oval *bfit_onnx_in(onnx_lower *L, int k)
{
    return k < L->nd->nin && L->nd->in[k].n ? bfit_onnx_val(L, L->nd->in[k]) : NULL;
}

oval *bfit_onnx_out(onnx_lower *L, int k) { return bfit_onnx_val(L, L->nd->out[k]); }

/* "'x' [N,64,8,8]" for a device value, "'w' [64,3,3,3]" on the host. */
static void describe(const oval *v, char *buf, size_t len)
{
    char nm[96];
    size_t u;
    if (!v) {
        snprintf(buf, len, "(none)");
        return;
    }
    u = (size_t)snprintf(buf, len, "'%s' ", bfit_onnx_cstr(v->name, nm, sizeof nm));
    if (u >= len)
        return;
    if (v->kind == OV_DEVICE && v->cl[0]) { /* as ONNX has it: [N,H,W,C] */
        snprintf(buf + u, len - u, "[N,%d,%d,%d]", v->cl[0], v->cl[1], v->shape.d[1]);
    } else if (v->kind == OV_DEVICE && v->rows) { /* tokens flattened into rows: [N*T,C] */
        snprintf(buf + u, len - u, "[N*%d,%d]", v->shape.d[0], v->shape.d[1]);
    } else if (v->kind == OV_DEVICE) {
        u += (size_t)snprintf(buf + u, len - u, "[N");
        for (int d = 0; d < v->shape.nd && u < len; d++)
            u += (size_t)snprintf(buf + u, len - u, ",%d", v->shape.d[d]);
        if (u < len)
            snprintf(buf + u, len - u, "]");
    } else if (v->kind == OV_HOST && v->t) {
        u += (size_t)snprintf(buf + u, len - u, "[");
        for (int d = 0; d < v->t->ndim && u < len; d++)
            u += (size_t)snprintf(buf + u, len - u, "%s%lld", d ? "," : "", (long long)v->t->dim[d]);
        if (u < len)
            snprintf(buf + u, len - u, "] %s", bfit_onnx_dtype_name(v->t->dtype));
    } else {
        snprintf(buf + u, len - u, "(%s)", v->kind == OV_HOST && v->why ? v->why
                                           : v->kind == OV_HOST  ? "computed on the host"
                                           : v->kind == OV_VIEW && v->shuf[0] ? "a channel shuffle's 5-d view"
                                           : v->kind == OV_VIEW && v->gn[0]   ? "inside a group norm"
                                           : v->kind == OV_VIEW  ? "inside an attention block"
                                           : v->kind == OV_WT    ? "a transposed initializer"
                                           : v->kind == OV_BCAST ? "an initializer broadcast over the batch"
                                           : v->kind == OV_ROWS && v->typerow ? "row 0 of a table for every token"
                                           : v->kind == OV_ROWS  ? "rows of a position table"
                                           : v->kind == OV_KEYMASK ? "the attention mask, or made from it"
                                           : v->kind == OV_PADID ? bfit_onnx_padid_what(v)
                                           : v->kind == OV_POOL  ? "a part of the mean of the real tokens"
                                                                 : "not computed");
    }
}

/* The node reads a hand-written attention's view (onnx_mhsa.c), a
 * position table's rows (onnx_tokens.c) or the attention mask
 * (onnx_keymask.c): its refusal says what is wrong there, the note about
 * unmatched Softmaxes would not. */
static int in_mhsa(onnx_lower *L)
{
    for (int k = 0; k < L->nd->nin; k++) {
        const oval *v = bfit_onnx_in(L, k);
        if (v && ((v->kind == OV_VIEW && v->att[0]) || v->kind == OV_ROWS || v->kind == OV_KEYMASK))
            return 1;
    }
    return 0;
}

int bfit_onnx_refuse(onnx_lower *L, const char *fmt, ...)
{
    char msg[1024], ins[1024] = "", nm[128], op[64], one[192];
    size_t u = 0;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (L->attn_miss && !in_mhsa(L)) { /* the likely cause: an attention the matcher did not take whole */
        size_t n = strlen(msg);
        snprintf(msg + n, sizeof msg - n, " (the graph's Softmax '%s' is not an attention block batchfit knows: "
                 "nn.MultiheadAttention batch first, without a mask other than "
                 "the causal one, or one written out as timm's or minGPT's)",
                 bfit_onnx_cstr(L->om->nodes[L->attn_miss - 1].name, nm, sizeof nm));
    }
    for (int k = 0; k < L->nd->nin && u < sizeof ins; k++) {
        describe(bfit_onnx_in(L, k), one, sizeof one);
        u += (size_t)snprintf(ins + u, sizeof ins - u, "%s%s", k ? ", " : "", one);
    }
    return bfit_fail(BFIT_EINVAL, "%s: node '%s' (%s, opset %lld) with inputs %s: %s", L->om->source,
                     bfit_onnx_cstr(L->nd->name, nm, sizeof nm), bfit_onnx_cstr(L->nd->op, op, sizeof op),
                     (long long)L->om->opset, L->nd->nin ? ins : "(none)", msg);
}

const bfit_onnx_attr *bfit_onnx_node_attr(const bfit_onnx_node *nd, const char *name)
{
    for (int i = 0; i < nd->nattr; i++)
        if (bfit_onnx_streq(nd->attr[i].name, name))
            return &nd->attr[i];
    return NULL;
}

const bfit_onnx_attr *bfit_onnx_attr_get(onnx_lower *L, const char *name) { return bfit_onnx_node_attr(L->nd, name); }

int bfit_onnx_attr_int(onnx_lower *L, const char *name, int64_t dflt, int64_t *out)
{
    const bfit_onnx_attr *a = bfit_onnx_attr_get(L, name);
    *out = dflt;
    if (!a)
        return BFIT_OK;
    if (a->type != BFIT_ONNX_A_INT)
        return bfit_onnx_refuse(L, "attribute %s should be an int (type %d), the file has type %d", name,
                                BFIT_ONNX_A_INT, a->type);
    *out = a->i;
    return BFIT_OK;
}

int bfit_onnx_attr_float(onnx_lower *L, const char *name, float dflt, float *out)
{
    const bfit_onnx_attr *a = bfit_onnx_attr_get(L, name);
    *out = dflt;
    if (!a)
        return BFIT_OK;
    if (a->type != BFIT_ONNX_A_FLOAT)
        return bfit_onnx_refuse(L, "attribute %s should be a float (type %d), the file has type %d", name,
                                BFIT_ONNX_A_FLOAT, a->type);
    *out = a->f;
    return BFIT_OK;
}

int bfit_onnx_attr_ints(onnx_lower *L, const char *name, int64_t *out, int n, int *got)
{
    const bfit_onnx_attr *a = bfit_onnx_attr_get(L, name);
    *got = 0;
    if (!a)
        return BFIT_OK;
    if (a->type != BFIT_ONNX_A_INTS)
        return bfit_onnx_refuse(L, "attribute %s should be a list of ints (type %d), the file has type %d", name,
                                BFIT_ONNX_A_INTS, a->type);
    if (n && a->nints != n)
        return bfit_onnx_refuse(L, "attribute %s has %d values, %d expected for 2-d images", name, a->nints, n);
    memcpy(out, a->ints, sizeof *out * (size_t)a->nints);
    *got = a->nints;
    return BFIT_OK;
}

/* A host value's numbers (constants) into a buffer of max. */
static int host_read(onnx_lower *L, int k, void *out, int max, int *n, int f32)
{
    hval *h = bfit_onnx_host(L, bfit_onnx_in(L, k), k);
    if (!h)
        return BFIT_EINVAL;
    if (h->n > max)
        return bfit_onnx_refuse(L, "input %d has %lld values, at most %d are expected", k + 1, (long long)h->n, max);
    for (int64_t i = 0; i < h->n; i++) {
        if (!h->isf && h->a[i])
            return bfit_onnx_refuse(L, "input %d depends on the batch size; a constant is expected", k + 1);
        if (f32)
            ((float *)out)[i] = h->isf ? (float)h->f[i] : (float)h->b[i];
        else
            ((int64_t *)out)[i] = h->isf ? (int64_t)h->f[i] : h->b[i];
    }
    *n = (int)h->n;
    return BFIT_OK;
}

int bfit_onnx_host_i64(onnx_lower *L, int k, int64_t *out, int max, int *n) { return host_read(L, k, out, max, n, 0); }
int bfit_onnx_host_f32(onnx_lower *L, int k, float *out, int max, int *n) { return host_read(L, k, out, max, n, 1); }

int bfit_onnx_dev_in(onnx_lower *L, int k, oval **out)
{
    oval *v = bfit_onnx_in(L, k);
    *out = v;
    if (!v || v->kind != OV_DEVICE)
        return bfit_onnx_refuse(L, "input %d must be a tensor computed from the model's input (batchfit does not "
                                   "run this op on constants)", k + 1);
    if (v->pad[0] || v->pad[1])
        return bfit_onnx_refuse(L, "input %d comes from a Pad, which batchfit folds only into a Conv or "
                                   "AveragePool right after it", k + 1);
    return BFIT_OK;
}

void bfit_onnx_alias(onnx_lower *L, const oval *x)
{
    oval *o = bfit_onnx_out(L, 0);
    bfit_onnx_str name = o->name;
    int producer = o->producer;
    *o = *x;
    o->name = name;
    o->producer = producer;
    o->preads = 0; /* another name: an exporter's merged constants are parameters of their own */
}

void bfit_onnx_unavail(onnx_lower *L, int from, const char *why)
{
    for (int k = from; k < L->nd->nout; k++) {
        oval *o = L->nd->out[k].n ? bfit_onnx_out(L, k) : NULL;
        if (o) {
            o->kind = OV_UNAVAIL;
            o->why = why;
        }
    }
}


/* The same dimensions once those of 1 are left out. */
static int squeezed_eq(const int64_t *a, int na, const int64_t *b, int nb)
{
    int i = 0, j = 0;
    for (;;) {
        while (i < na && a[i] == 1)
            i++;
        while (j < nb && b[j] == 1)
            j++;
        if (i == na || j == nb)
            return i == na && j == nb;
        if (a[i++] != b[j++])
            return 0;
    }
}

/* Initializer p must be f32 and have the shape the layer gives its parameter. */
static int check_param(onnx_lower *L, const oval *p, const bfit_param *want, bfit_layer_kind kind)
{
    char nm[128], a[96], b[96];
    int same = p->t->ndim == want->ndim;
    for (int d = 0; same && d < want->ndim; d++)
        same = p->t->dim[d] == want->dim[d];
    /* PReLU's slopes and layer scales as ONNX broadcasts them ([C,1,1], [1,1,C]) for the layer's [C]:
       the handler has checked, the numbers are in the same order */
    same = same || ((kind == BFIT_L_PRELU || kind == BFIT_L_LAYERSCALE) &&
                    squeezed_eq(p->t->dim, p->t->ndim, want->dim, want->ndim));
    bfit_onnx_cstr(p->name, nm, sizeof nm);
    if (p->t->dtype != BFIT_ONNX_FLOAT)
        return bfit_onnx_refuse(L, "the %s '%s' is %s: batchfit trains f32 weights (export the model in float32)",
                                want->name, nm, bfit_onnx_dtype_name(p->t->dtype));
    if (!same)
        return bfit_onnx_refuse(L, "the %s '%s' has the shape %s, the layer wants %s", want->name, nm,
                                bfit_dims_str(p->t->dim, p->t->ndim, ",", a, sizeof a), bfit_dims_str(want->dim, want->ndim, ",", b, sizeof b));
    return BFIT_OK;
}

/* The node (1-based) whose parameters the layer's are, where a module is
 * applied twice (its parameters read by name a second time), all of them at
 * the same places; 0 where none is; < 0 (refused) where only some are. */
static int shared_with(onnx_lower *L, const bfit_layer *l, oval *const *params, int nparams)
{
    int share = 0, all = nparams >= l->nparams;
    const oval *read = NULL; /* a parameter another layer took */
    char nm[128];
    for (int k = 0; k < nparams; k++)
        if (params[k] && params[k]->preads)
            share = params[k]->pnode, read = params[k];
    for (int k = 0; share && k < l->nparams; k++)
        all &= params[k] && params[k]->preads && params[k]->pnode == share && params[k]->pk == k;
    if (share && !all)
        return bfit_onnx_refuse(L, "the parameter '%s' is another layer's too, and this layer's others are not "
                                   "that layer's: batchfit shares a module applied twice, all of its parameters",
                                bfit_onnx_cstr(read->name, nm, sizeof nm));
    return share;
}

int bfit_onnx_emit(onnx_lower *L, const bfit_layer_cfg *cfg, oval *const *in, int nin, oval *const *params,
                   int nparams)
{
    bfit_shape shp[BFIT_LAYER_MAXIN];
    int ids[BFIT_LAYER_MAXIN], id, rc = BFIT_OK, share;
    bfit_layer *l = NULL;
    bfit_layer_cfg c;
    char err[512];
    oval *o;

    if (nin > BFIT_LAYER_MAXIN)
        return bfit_onnx_refuse(L, "%d inputs: a layer takes at most %d", nin, BFIT_LAYER_MAXIN);
    for (int k = 0; k < nin; k++)
        shp[k] = in[k]->shape, ids[k] = in[k]->id;
    /* the layer's own shape inference, without a device */
    if (bfit_layer_new(cfg, NULL, shp, nin, &l, err, sizeof err) != BFIT_OK)
        return bfit_onnx_refuse(L, "%s", err);
    for (int k = 0; k < nparams && rc == BFIT_OK; k++)
        if (params[k] && (k >= l->nparams || !params[k]->t))
            rc = bfit_onnx_refuse(L, "input %d cannot be a parameter of this layer", k + 2);
        else if (params[k])
            rc = check_param(L, params[k], &l->params[k], cfg->kind);
    /* a second layer reading the names themselves: a module applied twice, its parameters the first's */
    if (rc == BFIT_OK && (share = shared_with(L, l, params, nparams)) < 0)
        rc = share;
    c = *cfg;
    c.share = rc == BFIT_OK ? share : 0;
    if (rc == BFIT_OK && (id = bfit_graph_add_n(L->g, &c, ids, nin, 0, 0)) < 0)
        rc = id;
    for (int k = 0; k < nparams && rc == BFIT_OK && !c.share; k++)
        if (params[k]) { /* a reader of another name (the exporter merges equal constants) gets a copy of its own */
            params[k]->preads++, params[k]->pnode = id, params[k]->pk = k;
            rc = bfit_wsrc_add(L->w, id - 1, k, params[k]->t, L->param_used[params[k]->init]++);
        }
    if (rc == BFIT_OK) {
        o = bfit_onnx_out(L, 0);
        o->kind = OV_DEVICE;
        o->id = id;
        o->shape = l->out;
        o->pad[0] = o->pad[1] = 0;
        bfit_onnx_set_rank(L, o, &l->out);
        /* channels-last stays so through layers over the last dimension (layer norm, linear, activations,
           adds): the tokens keep their positions */
        if (nin && in[0]->cl[0] && cfg->kind != BFIT_L_RESHAPE && cfg->kind != BFIT_L_TRANSPOSE &&
            l->out.nd == 2 && (int64_t)l->out.d[0] == (int64_t)in[0]->cl[0] * in[0]->cl[1])
            bfit_onnx_set_cl(o, in[0]->cl[0], in[0]->cl[1]);
    }
    bfit_layer_free(l);
    return rc;
}

/* ---- the graph's input and output -------------------------------------------- */

/* The input's sample dimensions into dim[1..): fixed in the file, or a
 * token model's T left symbolic by the export (dynamic_axes), which takes
 * the length asked for: the host's shape arithmetic (Range, the masks'
 * Slices, the Reshapes) then works it out at that T, as at a fixed one. */
static int sample_dims(onnx_lower *L, const bfit_onnx_vi *in, int tokens, const char *nm, int64_t *dim)
{
    char sym[64];
    for (int d = 1; d < in->ndim; d++) {
        dim[d] = in->dim[d];
        if (dim[d] >= 1 && dim[d] <= 0x7fffffff)
            continue;
        bfit_onnx_cstr(in->dim_name[d], sym, sizeof sym);
        if (d == 1 && in->dim[0] >= 1 && strcasestr(sym, "batch")) { /* nn.Transformer's default, [T, batch] */
            if (!tokens || in->dim[0] > 0x7fffffff)
                return bfit_fail(BFIT_EINVAL, "%s: the input '%s' has its batch in dimension 1 ('%s'): batchfit "
                                              "reads that layout for token ids [T, batch] only; export the module "
                                              "batch first", L->om->source, nm, sym);
            L->seq_first = 1; /* T is dimension 0 */
            dim[1] = in->dim[0];
            continue;
        }
        if (tokens && d == 1 && L->seq > 0) {
            dim[d] = L->seq;
            continue;
        }
        if (tokens && d == 1)
            return bfit_fail(BFIT_EINVAL, "%s: the sequence length of the input '%s' (dimension 1%s%s%s) is not "
                                          "fixed in the export (a dynamic axis): give the length to train and plan "
                                          "at with --seq N",
                             L->om->source, nm, sym[0] ? ", '" : "", sym, sym[0] ? "'" : "");
        return bfit_fail(BFIT_EINVAL, "%s: dimension %d of the input '%s'%s%s%s is not a fixed size: export with a "
                                      "fixed sample shape (only the batch, dimension 0, may vary)",
                         L->om->source, d, nm, sym[0] ? " ('" : "", sym, sym[0] ? "')" : "");
    }
    return BFIT_OK;
}

/* A token model's second input, [batch, T] (transformers' attention_mask),
 * ids [batch, T] being the first: the padding mask onnx_keymask.c follows
 * to the attention's scores. Not fed: batchfit knows the padding. */
static int take_keymask(onnx_lower *L, const bfit_onnx_vi *in, const bfit_onnx_vi *ids, int64_t T)
{
    oval *v = bfit_onnx_val(L, in->name);
    char nm[128], idn[128];
    int type = in->elem == BFIT_ONNX_INT64 || in->elem == BFIT_ONNX_INT32 || in->elem == BFIT_ONNX_BOOL ||
               in->elem == BFIT_ONNX_FLOAT;

    bfit_onnx_cstr(in->name, nm, sizeof nm);
    bfit_onnx_cstr(ids->name, idn, sizeof idn);
    if (!type || in->ndim != 2 || (in->dim[0] > 0 && in->dim[0] != ids->dim[0]) || (in->dim[1] > 0 && in->dim[1] != T)
        || L->seq_first)
        return bfit_fail(BFIT_EINVAL, "%s: the second input '%s' is %s of %d dimensions: besides the token ids "
                                      "('%s' [batch, %lld]) batchfit reads one input, the attention mask "
                                      "(attention_mask: int64, int32, bool or float [batch, %lld], 1 for a token and "
                                      "0 for padding) of a batch-first model",
                         L->om->source, nm, bfit_onnx_dtype_name(in->elem), in->ndim, idn, (long long)T,
                         (long long)T);
    v->kind = OV_KEYMASK;
    v->km[0] = 1, v->km[1] = (int)T, v->km[2] = 0; /* KM_KEEP */
    L->keymask = 1;
    v->rank = 2;
    v->ra[0] = 1, v->rb[0] = 0, v->ra[1] = 0, v->rb[1] = T;
    return BFIT_OK;
}

/* A graph input's type and shape as the file has it: "int64 [batch, 16]". */
static const char *vi_str(const bfit_onnx_vi *in, char *buf, size_t len)
{
    char sym[48];
    size_t u = (size_t)snprintf(buf, len, "%s [", bfit_onnx_dtype_name(in->elem));
    for (int d = 0; d < in->ndim && u < len; d++)
        if (in->dim[d] > 0)
            u += (size_t)snprintf(buf + u, len - u, "%s%lld", d ? ", " : "", (long long)in->dim[d]);
        else
            u += (size_t)snprintf(buf + u, len - u, "%s%s", d ? ", " : "",
                                  bfit_onnx_cstr(in->dim_name[d], sym, sizeof sym)[0] ? sym : "?");
    if (u < len)
        snprintf(buf + u, len - u, "]");
    return buf;
}

/* A token model's inputs batchfit knows without feeding them, by
 * transformers' names: token_type_ids (one segment: 0 at every token) and
 * position_ids (0 .. T-1: batchfit pads after a sequence's tokens). Each
 * is the same for every sequence, so it is the host value [1, T] that
 * readers broadcast, as BERT's buffer of zeros and GPT-2's
 * arange(T).unsqueeze(0) made in forward are. 1 (rc set) if in is one. */
static int take_implied(onnx_lower *L, const bfit_onnx_vi *in, const bfit_onnx_vi *ids, int64_t T, int *rc)
{
    oval *v = bfit_onnx_val(L, in->name);
    int64_t dim[2] = {1, T};
    char nm[128], idn[128], sh[128];
    int types, ok;
    hval *h;

    bfit_onnx_cstr(in->name, nm, sizeof nm);
    bfit_onnx_cstr(ids->name, idn, sizeof idn);
    types = !strcmp(nm, "token_type_ids");
    if (!types && strcmp(nm, "position_ids"))
        return 0;
    ok = (in->elem == BFIT_ONNX_INT64 || in->elem == BFIT_ONNX_INT32) && in->ndim == 2 && !L->seq_first &&
         (in->dim[0] <= 0 || in->dim[0] == ids->dim[0]) && (in->dim[1] <= 0 || in->dim[1] == T);
    if (!ok || T > BFIT_ONNX_MAXHOST) {
        *rc = bfit_fail(BFIT_EINVAL, "%s: the input '%s' is %s: batchfit reads %s as integers [batch, %lld], as "
                                     "the token ids '%s' of a batch-first model (%s)",
                        L->om->source, nm, vi_str(in, sh, sizeof sh), nm, (long long)T, idn,
                        types ? "one segment: 0 at every token" : "0 .. T-1 at every sequence");
        return 1;
    }
    if (!(h = bfit_onnx_hval_new(L, 0, 2, dim))) {
        *rc = BFIT_ENOMEM;
        return 1;
    }
    for (int64_t i = 0; i < T; i++)
        h->b[i] = types ? 0 : i;
    v->kind = OV_HOST;
    v->h = h;
    v->init = -1;
    v->why = types ? "token_type_ids, read as 0 at every token" : "position_ids, read as 0 .. T-1";
    *rc = BFIT_OK;
    return 1;
}

/* A token model's inputs after its ids: the attention mask (any name,
 * one) and the inputs take_implied knows. */
static int take_more(onnx_lower *L, const bfit_onnx_vi *const *more, int n, const bfit_onnx_vi *ids, int64_t T)
{
    const bfit_onnx_vi *mask = NULL;
    char nm[128], two[128];
    int rc = BFIT_OK;

    for (int i = 0; i < n && rc == BFIT_OK; i++) {
        if (take_implied(L, more[i], ids, T, &rc))
            continue;
        if (mask)
            return bfit_fail(BFIT_EINVAL, "%s: the inputs '%s' and '%s' besides the token ids: batchfit reads one "
                                          "attention mask (attention_mask, 1 for a token and 0 for padding) and "
                                          "token_type_ids and position_ids by those names (each token's segment "
                                          "as the data gives it, its positions 0 .. T-1)",
                             L->om->source, bfit_onnx_cstr(mask->name, two, sizeof two),
                             bfit_onnx_cstr(more[i]->name, nm, sizeof nm));
        rc = take_keymask(L, mask = more[i], ids, T);
    }
    return rc;
}

/* The graph input that is not an initializer: the model's samples,
 * [batch, C, H, W], [batch, F] or [batch, T, F], whatever the batch says;
 * a token model's may be followed by its attention mask, token_type_ids
 * and position_ids. */
static int take_input(onnx_lower *L)
{
    const bfit_onnx_model *om = L->om;
    const bfit_onnx_vi *in = NULL, *more[4];
    oval *v;
    char nm[128];
    int64_t dim[BFIT_ONNX_MAXD];
    int n = 0, tokens, rc;

    for (int i = 0; i < om->ninputs; i++)
        if ((v = bfit_onnx_val(L, om->inputs[i].name)) && v->kind != OV_HOST) {
            if (!in)
                in = &om->inputs[i];
            else if (n <= 4)
                more[n - 1] = &om->inputs[i];
            n++;
        }
    tokens = in && (in->elem == BFIT_ONNX_INT64 || in->elem == BFIT_ONNX_INT32);
    if (n < 1 || (n > 1 && !tokens) || n > 4)
        return bfit_fail(BFIT_EINVAL, "%s: the graph has %d inputs besides its initializers: batchfit trains models "
                                      "of one input (the samples; a model of token ids may also have its attention "
                                      "mask, token_type_ids and position_ids)", om->source, n);
    bfit_onnx_cstr(in->name, nm, sizeof nm);
    if (in->elem != BFIT_ONNX_FLOAT && !tokens)
        return bfit_fail(BFIT_EINVAL, "%s: the input '%s' is %s: batchfit feeds float samples, or token ids (int64 "
                                      "or int32 [batch, T])", om->source, nm, bfit_onnx_dtype_name(in->elem));
    if (tokens && in->ndim != 2)
        return bfit_fail(BFIT_EINVAL, "%s: the input '%s' is integers of %d dimensions: batchfit reads integers as "
                                      "token ids [batch, T]", om->source, nm, in->ndim);
    if (in->ndim < 2 || in->ndim > 4)
        return bfit_fail(BFIT_EINVAL, "%s: the input '%s' has %d dimensions: batchfit takes [batch, C, H, W] images, "
                                      "[batch, F] vectors or [batch, T, F] sequences", om->source, nm, in->ndim);
    if ((rc = sample_dims(L, in, tokens, nm, dim)) != BFIT_OK)
        return rc;
    v = bfit_onnx_val(L, in->name);
    v->kind = OV_DEVICE;
    v->id = 0;
    if (tokens) /* T ids, as `input tokens=T` (an embedding reads them) */
        v->shape = bfit_shape_seq((int)dim[1], 1);
    else if (in->ndim == 4)
        v->shape = bfit_shape_chw((int)dim[1], (int)dim[2], (int)dim[3]);
    else if (in->ndim == 3)
        v->shape = bfit_shape_seq((int)dim[1], (int)dim[2]);
    else
        v->shape = bfit_shape_vec((int)dim[1]);
    v->rank = in->ndim;
    v->ra[0] = 1, v->rb[0] = 0;
    L->fixed_batch = in->dim[0] > 0 && !L->seq_first ? in->dim[0] : 0;
    for (int d = 1; d < in->ndim; d++)
        v->ra[d] = 0, v->rb[d] = dim[d];
    if (L->seq_first) /* the ids [T, batch] */
        v->ra[0] = 0, v->rb[0] = dim[1], v->ra[1] = 1, v->rb[1] = 0;
    L->g->input = v->shape;
    L->g->input_dtype = tokens ? BFIT_I32 : BFIT_F32;
    return take_more(L, more, n - 1, in, dim[1]);
}

/* The graph's one output and the node that makes it (-1: none). */
static int find_output(onnx_lower *L, oval **out)
{
    const bfit_onnx_model *om = L->om;
    char nm[128], names[400] = "";

    if (om->noutputs != 1) {
        for (int i = 0; i < om->noutputs && i < 4; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'%s", i ? ", " : "",
                     bfit_onnx_cstr(om->outputs[i].name, nm, sizeof nm), i == 3 && om->noutputs > 4 ? ", ..." : "");
        /* GoogLeNet and Inception3 in training mode return their auxiliary heads' scores beside the logits */
        return bfit_fail(BFIT_EINVAL, "%s: the graph has %d outputs (%s): batchfit trains models with one output, "
                                      "the class scores (logits); export a module whose forward returns them alone "
                                      "(torchvision's GoogLeNet and Inception3: aux_logits=False)",
                         om->source, om->noutputs, names);
    }
    if (!(*out = bfit_onnx_val(L, om->outputs[0].name)))
        return bfit_fail(BFIT_EFORMAT, "%s: the graph's output '%s' is not defined by any node", om->source,
                         bfit_onnx_cstr(om->outputs[0].name, nm, sizeof nm));
    return BFIT_OK;
}

/* The output must be the last layer's: [batch, classes] scores, before any softmax. */
static int check_output(onnx_lower *L, const oval *o)
{
    char nm[128], sh[48];
    bfit_onnx_cstr(o->name, nm, sizeof nm);
    if (o->kind != OV_DEVICE || o->id != L->g->nnodes || o->id == 0)
        return bfit_fail(BFIT_EINVAL, "%s: the output '%s' is not computed by the model's last layer (it is the "
                                      "input, a constant, or an output batchfit does not compute)", L->om->source, nm);
    /* a token model's scores are per token: [batch, T, vocab], the loss each token's */
    if (L->g->input_dtype == BFIT_I32 && o->shape.nd == 2 && o->shape.d[0] == L->g->input.d[0] && o->shape.d[1] >= 2)
        return BFIT_OK;
    if (!bfit_shape_is_vector(o->shape) || bfit_shape_numel(o->shape) < 2)
        return bfit_fail(BFIT_EINVAL, "%s: the output '%s' is [N,%s] per batch: batchfit adds softmax cross-entropy "
                                      "over class scores, so the output must be [batch, classes] logits with at least "
                                      "2 classes (a model of token ids: [batch, T, vocab], a score per token)",
                         L->om->source, nm, bfit_shape_str(o->shape, sh, sizeof sh));
    return BFIT_OK;
}

/* batchfit adds the softmax itself: a model that ends in one would apply it twice. */
static int not_softmax(onnx_lower *L, const oval *o)
{
    const bfit_onnx_node *nd = o->producer >= 0 ? &L->om->nodes[o->producer] : NULL;
    char op[32];
    if (nd && (bfit_onnx_streq(nd->op, "Softmax") || bfit_onnx_streq(nd->op, "LogSoftmax")))
        return bfit_fail(BFIT_EINVAL, "%s: the model ends in %s: batchfit adds softmax cross-entropy itself, so "
                                      "export the class scores before it (the logits; nn.CrossEntropyLoss's input)",
                         L->om->source, bfit_onnx_cstr(nd->op, op, sizeof op));
    return BFIT_OK;
}

/* ---- lowering ------------------------------------------------------------------ */

/* Ops whose meaning depends on which dimension is the batch: in a [T, batch]
 * model only the attention blocks' own (onnx_attn.c, lowered before this
 * check) are read. */
static int layout_op(const bfit_onnx_node *nd)
{
    static const char *const ops[] = {"Transpose", "Reshape", "Concat", "Split", "Slice", "Flatten", "Squeeze",
                                      "Unsqueeze", "ReduceMean", "ReduceSum", "Expand", "Tile", "Pad", "Softmax",
                                      "GlobalAveragePool", "Gather"};
    for (unsigned k = 0; k < sizeof ops / sizeof ops[0]; k++)
        if (bfit_onnx_streq(nd->op, ops[k]))
            return 1;
    return 0;
}

static int lower_node(onnx_lower *L, int i)
{
    const bfit_onnx_node *nd = &L->om->nodes[i];
    char op[64];
    int rc;

    L->nd = nd;
    L->ndi = i;
    if (bfit_onnx_lower_attention(L, &rc))
        return rc;
    if (L->done[i])
        return BFIT_OK;
    if (nd->domain.n && !bfit_onnx_streq(nd->domain, "ai.onnx"))
        return bfit_onnx_refuse(L, "the operator is from the domain '%.*s', batchfit reads the standard ONNX "
                                   "operators", (int)nd->domain.n, nd->domain.p);
    for (int k = 0; k < nd->nin; k++) {
        oval *v = bfit_onnx_in(L, k);
        if (v && v->kind == OV_UNAVAIL)
            return bfit_onnx_refuse(L, "input %d is %s, which batchfit does not compute", k + 1, v->why);
        if (k == 0 && v && v->kind == OV_DEVICE && L->seq_first && layout_op(nd))
            return bfit_onnx_refuse(L, "a model of token ids [T, batch] (nn.Transformer's default layout): batchfit "
                                       "reads its element-wise ops, Linear, LayerNorm and nn.MultiheadAttention in "
                                       "that layout, not a %.*s of its tokens: export the module batch first "
                                       "(batch_first=True, the ids [batch, T])", (int)nd->op.n, nd->op.p);
        if (v && v->kind == OV_DEVICE && v->rows && !bfit_onnx_streq(nd->op, "Gemm") &&
            !bfit_onnx_streq(nd->op, "Reshape") && !bfit_onnx_streq(nd->op, "Shape"))
            return bfit_onnx_refuse(L, "input %d is tokens flattened into rows [N*T, C] (x.view(-1, C)): batchfit "
                                       "reads them only as transformers' Conv1D does, into a Gemm (addmm) and viewed "
                                       "back to [N, T, C]", k + 1);
    }
    if (bfit_onnx_lower_keymask(L, &rc) || bfit_onnx_lower_mhsa(L, &rc) || bfit_onnx_lower_gnorm(L, &rc) ||
        bfit_onnx_lower_tokens(L, &rc) || bfit_onnx_lower_padid(L, &rc) || bfit_onnx_lower_pool(L, &rc) ||
        bfit_onnx_lower_host(L, &rc) || bfit_onnx_lower_gelu(L, &rc) || bfit_onnx_lower_rms(L, &rc) ||
        bfit_onnx_lower_shuffle(L, &rc) ||
        bfit_onnx_lower_act(L, &rc) ||
        bfit_onnx_lower_vit(L, &rc) || bfit_onnx_lower_cnn(L, &rc))
        return rc;
    if (bfit_onnx_streq(nd->op, "Loop") || bfit_onnx_streq(nd->op, "SequenceEmpty") ||
        bfit_onnx_streq(nd->op, "SplitToSequence") || bfit_onnx_streq(nd->op, "ConcatFromSequence"))
        return bfit_onnx_refuse(L, "batchfit does not run ONNX loops and sequences (%s), which torch 1.13 exports "
                                   "torch.repeat_interleave as: for grouped-query attention repeat the key and "
                                   "value heads as Hugging Face's repeat_kv does, x[:, :, None, :, :].expand(B, "
                                   "Hkv, r, T, d).reshape(B, Hkv * r, T, d) (the same heads in the same order)",
                                bfit_onnx_cstr(nd->op, op, sizeof op));
    return bfit_onnx_refuse(L, "batchfit does not support the operator %s: docs/onnx.md lists what it does and "
                               "what to do about the rest", bfit_onnx_cstr(nd->op, op, sizeof op));
}

/* ---- host values let go --------------------------------------------------- */

/* Host values as big as a causal mask are let go once every node that reads
 * them is lowered: a GPT's blocks each slice, compare and cast a [1, 1, T, T]
 * mask buffer, which kept together would pass the host's budget (12 blocks of
 * 1024 tokens: 60M elements). Small ones stay: look-aheads read constants. */
#define HOST_LET_GO 65536

/* Per value: the nodes of order[0, n) that read it (each node once). */
static int *readers(onnx_lower *L, const int *order, int n)
{
    int *left = calloc((size_t)L->nv + 1, sizeof *left);
    for (int i = 0; left && i < n; i++) {
        const bfit_onnx_node *nd = &L->om->nodes[order[i]];
        for (int k = 0; k < nd->nin; k++) {
            oval *v = bfit_onnx_val(L, nd->in[k]);
            int again = 0;
            for (int j = 0; j < k; j++)
                again |= bfit_onnx_val(L, nd->in[j]) == v;
            if (v && !again)
                left[v - L->v]++;
        }
    }
    return left;
}

static void let_go(onnx_lower *L, int node, int *left)
{
    const bfit_onnx_node *nd = &L->om->nodes[node];
    for (int k = 0; k < nd->nin; k++) {
        oval *v = bfit_onnx_val(L, nd->in[k]);
        hval *h = v ? v->h : NULL;
        int again = 0, shared = 0;
        for (int j = 0; j < k; j++)
            again |= bfit_onnx_val(L, nd->in[j]) == v;
        if (!v || again || --left[v - L->v] > 0 || !h || h->n < HOST_LET_GO)
            continue;
        for (int w = 0; w < L->nv && !shared; w++) /* an alias (Identity of a constant) reads the same numbers */
            shared = &L->v[w] != v && L->v[w].h == h;
        if (shared)
            continue;
        free(h->a), free(h->b), free(h->f);
        h->a = h->b = NULL, h->f = NULL;
        L->host_total -= h->n;
        h->n = 0;
        v->h = NULL;
    }
}

static int lower(onnx_lower *L)
{
    const bfit_onnx_model *om = L->om;
    int *pin = NULL, *off = NULL, *order = NULL, *left = NULL, n = 0, rc;
    unsigned char *want = calloc((size_t)om->nnodes + 1, 1);
    oval *out = NULL;

    order = malloc(sizeof *order * ((size_t)om->nnodes + 1));
    L->done = calloc((size_t)om->nnodes + 1, 1);
    if (!want || !order || !L->done)
        rc = bfit_fail(BFIT_ENOMEM, "onnx: out of host memory");
    else if ((rc = collect(L)) == BFIT_OK && (rc = producers(L, &pin, &off)) == BFIT_OK &&
             (rc = take_input(L)) == BFIT_OK && (rc = find_output(L, &out)) == BFIT_OK &&
             (rc = not_softmax(L, out)) == BFIT_OK) {
        /* only what the output depends on: a BatchNormalization's unused statistics outputs, say, are not read */
        ancestors(L, out->producer, pin, off, want, order);
        if ((rc = consumers(L, pin, off)) == BFIT_OK && (rc = topo(L, want, pin, off, order, &n)) == BFIT_OK)
            rc = bfit_onnx_find_attention(L);
    }
    if (rc == BFIT_OK && !(left = readers(L, order, n)))
        rc = bfit_fail(BFIT_ENOMEM, "onnx: out of host memory");
    for (int i = 0; rc == BFIT_OK && i < n; i++)
        if ((rc = lower_node(L, order[i])) == BFIT_OK)
            let_go(L, order[i], left);
    if (rc == BFIT_OK)
        rc = check_output(L, out);
    free(left);
    free(want);
    free(order);
    free(pin);
    free(off);
    return rc;
}

/* Lower om (read from buf, which the graph's weight source takes over) into g. */
static int load(void *buf, size_t len, int mapped, const char *source, int seq, bfit_graph_desc *g)
{
    bfit_onnx_model *om = NULL;
    onnx_lower L;
    int rc;

    memset(&L, 0, sizeof L);
    bfit_graph_init(g, source);
    rc = bfit_onnx_parse(buf, len, source, &om);
    if (rc == BFIT_OK && om->opset && om->opset < BFIT_ONNX_OPSET_MIN)
        rc = bfit_fail(BFIT_EINVAL, "%s: opset %lld is older than batchfit reads (7 and later; torch.onnx.export "
                                    "with opset_version=17)", om->source, (long long)om->opset);
    if (rc == BFIT_OK && om->opset > BFIT_ONNX_OPSET_MAX)
        rc = bfit_fail(BFIT_EINVAL, "%s: opset %lld is newer than batchfit reads (%d to %d: what later opsets "
                                    "change in the operators it reads has not been gone through): export the model "
                                    "with torch.onnx.export(..., opset_version=17), or another opset from %d to %d",
                       om->source, (long long)om->opset, BFIT_ONNX_OPSET_MIN, BFIT_ONNX_OPSET_MAX,
                       BFIT_ONNX_OPSET_MIN, BFIT_ONNX_OPSET_MAX);
    if (rc == BFIT_OK)
        rc = bfit_wsrc_new(buf, len, mapped, om, &g->wsrc);
    if (rc != BFIT_OK) { /* the source did not take them */
        bfit_onnx_model_free(om);
        if (mapped)
            munmap(buf, len);
        else
            free(buf);
        bfit_graph_fini(g);
        return rc;
    }
    L.om = om;
    L.g = g;
    L.w = g->wsrc;
    L.tok_table = -1;
    L.seq = seq;
    rc = lower(&L);
    free(L.v);
    free(L.slot);
    free(L.param_used);
    free(L.done);
    free(L.cons);
    free(L.coff);
    bfit_onnx_attention_free(&L);
    for (int i = 0; i < L.nhv; i++) {
        free(L.hv[i]->a), free(L.hv[i]->b), free(L.hv[i]->f);
        free(L.hv[i]);
    }
    free(L.hv);
    if (rc != BFIT_OK)
        bfit_graph_fini(g); /* nothing half-built */
    return rc;
}

int bfit_onnx_load_file(const char *path, int seq, bfit_graph_desc *g)
{
    struct stat st;
    void *map;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    bfit_graph_init(g, path);
    if (fd < 0)
        return bfit_fail(BFIT_EIO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
        int e = errno;
        close(fd);
        return bfit_fail(BFIT_EIO, "%s: %s", path, st.st_size == 0 ? "the file is empty" : strerror(e));
    }
    /* the weights stay in the mapping until they are uploaded: no copy on the host */
    map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return bfit_fail(BFIT_EIO, "%s: cannot map %lld bytes: %s", path, (long long)st.st_size, strerror(errno));
    return load(map, (size_t)st.st_size, 1, path, seq, g);
}

int bfit_onnx_load_buffer(const void *buf, size_t len, const char *source, int seq, bfit_graph_desc *g)
{
    void *copy = malloc(len ? len : 1);
    if (!copy) {
        bfit_graph_init(g, source);
        return bfit_fail(BFIT_ENOMEM, "onnx: out of host memory for a model of %zu bytes", len);
    }
    memcpy(copy, buf, len);
    return load(copy, len, 0, source ? source : "onnx", seq, g);
}

int bfit_onnx_sniff(const char *path)
{
    size_t n = strlen(path);
    unsigned char b = 0;
    FILE *f;
    if (n >= 5 && !strcmp(path + n - 5, ".onnx"))
        return 1;
    if (!(f = fopen(path, "rb")))
        return 0;
    /* a ModelProto starts with ir_version (field 1, a varint): byte 0x08, never a spec file's */
    n = fread(&b, 1, 1, f);
    fclose(f);
    return n == 1 && b == 0x08;
}
