/* model.c - the graph executor: builds layers, lays out a step's buffers with
 * their lifetimes, reserves them all-or-nothing, runs forward and backward. */
#include "base/err.h"
#include "nn/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- building ------------------------------------------------------------ */

static int node_error(const bfit_graph_desc *g, const bfit_node_desc *d, const char *msg)
{
    if (d && d->line)
        return bfit_fail(BFIT_EFORMAT, "%s:%d:%d: %s", g->source, d->line, d->col, msg);
    return bfit_fail(BFIT_EFORMAT, "%s%s%s", g->source, g->source[0] ? ": " : "", msg);
}

/* Layers for the graph's nodes, in order; val[v] gets value v's shape. */
static int build_nodes(bfit_model *M, const bfit_graph_desc *g, bfit_shape *val)
{
    char err[512];
    int rc;

    val[0] = g->input;
    for (int i = 0; i < g->nnodes; i++) {
        const bfit_node_desc *d = &g->nodes[i];
        bfit_shape in[BFIT_LAYER_MAXIN];
        for (int k = 0; k < d->nin; k++) {
            if (d->in[k] < 0 || d->in[k] > i)
                return node_error(g, d, "layer input refers to a later or missing value");
            in[k] = val[d->in[k]];
        }
        rc = bfit_layer_new(&d->cfg, M->dev, in, d->nin, &M->nodes[i].l, err, sizeof err);
        if (rc != BFIT_OK)
            return node_error(g, d, err);
        for (int k = 0; k < BFIT_LAYER_MAXIN; k++)
            M->nodes[i].in[k] = k < d->nin ? d->in[k] : -1;
        M->n = i + 1;
        val[i + 1] = M->nodes[i].l->out;
    }
    return BFIT_OK;
}

/* The softmax cross-entropy loss closes the graph. */
static int add_loss(bfit_model *M, const bfit_graph_desc *g, bfit_shape last)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_XENT);
    char err[512], sh[32];
    int rc;

    if (!bfit_shape_is_vector(last) || last.c < 2) {
        snprintf(err, sizeof err,
                 "the last layer must output a vector of at least 2 class scores, got %s: end the model with "
                 "`flatten` and `linear N`",
                 bfit_shape_str(last, sh, sizeof sh));
        return node_error(g, &g->nodes[g->nnodes - 1], err);
    }
    rc = bfit_layer_new(&c, M->dev, &last, 1, &M->nodes[g->nnodes].l, err, sizeof err);
    if (rc != BFIT_OK)
        return node_error(g, &g->nodes[g->nnodes - 1], err);
    M->nodes[g->nnodes].in[0] = g->nnodes;
    for (int k = 1; k < BFIT_LAYER_MAXIN; k++)
        M->nodes[g->nnodes].in[k] = -1;
    M->n = g->nnodes + 1;
    M->nclasses = last.c;
    return BFIT_OK;
}

/* Consumers of each value, which values need a gradient, and the parameter
 * lists with their block sizes. */
static int wire(bfit_model *M)
{
    int np = 0;

    for (int i = 0; i < M->n; i++)
        for (int k = 0; k < M->nodes[i].l->nin; k++) {
            int v = M->nodes[i].in[k];
            if (v == 0)
                M->in0_consumers++;
            else if (v > 0)
                M->nodes[v - 1].nconsumers++;
        }
    for (int i = 0; i < M->n; i++)
        np += M->nodes[i].l->nparams;
    M->params = calloc((size_t)np + 1, sizeof *M->params);
    M->trainable = calloc((size_t)np + 1, sizeof *M->trainable);
    M->needs_grad = calloc((size_t)M->n + 1, 1);
    if (!M->params || !M->trainable || !M->needs_grad)
        return bfit_fail(BFIT_ENOMEM, "model: out of host memory");
    /* nodes are in topological order: one pass decides which values' gradients
     * anything needs (a first layer's input gradient is wasted work) */
    for (int i = 0; i < M->n; i++) {
        const bfit_layer *L = M->nodes[i].l;
        for (int k = 0; k < L->nparams; k++)
            M->needs_grad[i + 1] |= L->params[k].trainable != 0;
        for (int k = 0; k < L->nin; k++)
            M->needs_grad[i + 1] |= M->needs_grad[M->nodes[i].in[k]];
    }
    for (int i = 0; i < M->n; i++)
        for (int k = 0; k < M->nodes[i].l->nparams; k++) {
            bfit_param *p = &M->nodes[i].l->params[k];
            M->params[M->nparams++] = p;
            M->param_bytes += BFIT_ALIGN_UP(bfit_param_bytes(p));
            if (p->trainable) {
                M->trainable[M->ntrainable++] = p;
                M->grad_bytes += BFIT_ALIGN_UP(bfit_param_bytes(p));
            }
        }
    return BFIT_OK;
}

int bfit_model_new(const bfit_graph_desc *g, bfit_device *dev, bfit_arena *arena, bfit_model **out)
{
    bfit_model *M;
    bfit_shape *val = NULL;
    int rc;

    *out = NULL;
    if (g->nnodes == 0)
        return node_error(g, NULL, "the model has no layers");
    M = calloc(1, sizeof *M);
    val = calloc((size_t)g->nnodes + 2, sizeof *val);
    if (!M || !val || !(M->nodes = calloc((size_t)g->nnodes + 1, sizeof *M->nodes))) {
        rc = bfit_fail(BFIT_ENOMEM, "model: out of host memory");
        goto fail;
    }
    M->dev = dev;
    M->arena = arena;
    M->input = g->input;
    M->input_dtype = g->input_dtype;
    snprintf(M->source, sizeof M->source, "%s", g->source);
    if ((rc = build_nodes(M, g, val)) != BFIT_OK || (rc = add_loss(M, g, val[g->nnodes])) != BFIT_OK ||
        (rc = wire(M)) != BFIT_OK)
        goto fail;
    free(val);
    *out = M;
    return BFIT_OK;
fail:
    free(val);
    bfit_model_free(M);
    return rc;
}

void bfit_model_free(bfit_model *M)
{
    if (!M)
        return;
    bfit_model_unreserve(M);
    if (M->arena) {
        bfit_arena_release(M->arena, M->param_block);
        bfit_arena_release(M->arena, M->grad_block);
        bfit_arena_release(M->arena, M->stats);
    }
    for (int i = 0; i < M->n; i++)
        bfit_layer_free(M->nodes[i].l);
    free(M->nodes);
    free(M->params);
    free(M->trainable);
    free(M->needs_grad);
    free(M);
}

uint64_t bfit_model_param_bytes(const bfit_model *M) { return M->param_bytes; }
uint64_t bfit_model_grad_bytes(const bfit_model *M) { return M->grad_bytes; }

int64_t bfit_model_param_count(const bfit_model *M)
{
    int64_t n = 0;
    for (int i = 0; i < M->ntrainable; i++)
        n += bfit_param_numel(M->trainable[i]);
    return n;
}

int bfit_model_alloc_params(bfit_model *M, int with_grads)
{
    char *p = NULL, *g = NULL;
    void *st = NULL;
    int rc;

    if (!M->arena)
        return bfit_fail(BFIT_ESTATE, "model: no device memory (a shape-only model)");
    if (M->param_block)
        return bfit_fail(BFIT_ESTATE, "model: parameters are already allocated");
    rc = bfit_arena_alloc(M->arena, M->param_bytes, BFIT_MEM_PARAMS, (void **)&p);
    if (rc != BFIT_OK)
        return bfit_fail_prefix(rc, "model parameters: ");
    if (with_grads && M->grad_bytes && (rc = bfit_arena_alloc(M->arena, M->grad_bytes, BFIT_MEM_GRADS, (void **)&g))) {
        bfit_fail_prefix(rc, "model gradients: ");
        goto fail;
    }
    if ((rc = bfit_arena_alloc(M->arena, BFIT_MODEL_STATS_BYTES, BFIT_MEM_OTHER, &st)) != BFIT_OK) {
        bfit_fail_prefix(rc, "model statistics: ");
        goto fail;
    }
    M->param_block = p;
    M->grad_block = g;
    M->stats = st;
    for (int i = 0; i < M->nparams; i++) {
        bfit_param *q = M->params[i];
        uint64_t b = BFIT_ALIGN_UP(bfit_param_bytes(q));
        q->data = p;
        p += b;
        if (q->trainable && g) {
            q->grad = g;
            g += b;
        }
    }
    if ((rc = bfit_model_zero_grads(M)) == BFIT_OK)
        rc = bfit_model_stats_reset(M);
    return rc;
fail:
    bfit_arena_release(M->arena, g);
    bfit_arena_release(M->arena, p);
    return rc;
}

int bfit_model_init_params(bfit_model *M, uint64_t seed)
{
    int64_t most = 1;
    float *host[BFIT_LAYER_MAXP] = {0}, *buf;
    int rc = BFIT_OK;

    for (int i = 0; i < M->nparams; i++)
        if (bfit_param_numel(M->params[i]) > most)
            most = bfit_param_numel(M->params[i]);
    for (int i = 0; i < M->n && rc == BFIT_OK; i++) {
        bfit_layer *L = M->nodes[i].l;
        if (!L->vt->init_params || !L->nparams)
            continue;
        /* one host buffer per parameter of this layer, filled then uploaded */
        buf = malloc(sizeof(float) * (size_t)most * (size_t)L->nparams);
        if (!buf)
            return bfit_fail(BFIT_ENOMEM, "model: out of host memory initialising parameters");
        for (int k = 0; k < L->nparams; k++)
            host[k] = buf + (size_t)most * (size_t)k;
        L->vt->init_params(L, seed * 1000003ull + (uint64_t)i * 7919ull, host);
        for (int k = 0; k < L->nparams && rc == BFIT_OK; k++)
            rc = bfit_device_upload(M->dev, L->params[k].data, host[k], bfit_param_bytes(&L->params[k]));
        free(buf);
    }
    return rc;
}

int bfit_model_zero_grads(bfit_model *M)
{
    if (!M->grad_block)
        return BFIT_OK;
    return bfit_device_zero(M->dev, M->grad_block, M->grad_bytes);
}

int bfit_model_stats_reset(bfit_model *M)
{
    if (!M->stats)
        return bfit_fail(BFIT_ESTATE, "model: parameters are not allocated");
    return bfit_device_zero(M->dev, M->stats, 2 * sizeof(double));
}

int bfit_model_stats_read(bfit_model *M, double *loss, double *correct)
{
    double v[2];
    int rc;
    if (!M->stats)
        return bfit_fail(BFIT_ESTATE, "model: parameters are not allocated");
    rc = bfit_device_download(M->dev, v, M->stats, sizeof v);
    if (rc != BFIT_OK)
        return rc;
    if (loss)
        *loss = v[0];
    if (correct)
        *correct = v[1];
    return BFIT_OK;
}

/* ---- layout -------------------------------------------------------------- */

/* A buffer with a lifetime [t0, t1] (inclusive) to be placed in a block. */
typedef struct lbuf {
    uint64_t size, off;
    int t0, t1;
    uint64_t *dst; /* where to write the offset */
} lbuf;

static int by_size_desc(const void *a, const void *b)
{
    const lbuf *x = a, *y = b;
    if (x->size != y->size)
        return x->size < y->size ? 1 : -1;
    return x->t0 - y->t0; /* deterministic */
}

/* Greedy placement (largest first, lowest offset that clashes with no placed
 * buffer alive at the same time): buffers whose lifetimes do not overlap
 * share bytes. Returns the block size. */
static uint64_t place(lbuf *b, int n)
{
    uint64_t total = 0;
    qsort(b, (size_t)n, sizeof *b, by_size_desc);
    for (int i = 0; i < n; i++) {
        uint64_t off = 0;
        int moved = 1;
        while (moved) {
            moved = 0;
            for (int j = 0; j < i; j++) {
                if (b[j].t1 < b[i].t0 || b[i].t1 < b[j].t0)
                    continue;
                if (off < b[j].off + b[j].size && b[j].off < off + b[i].size) {
                    off = b[j].off + b[j].size;
                    moved = 1;
                }
            }
        }
        b[i].off = off;
        *b[i].dst = off;
        if (off + b[i].size > total)
            total = off + b[i].size;
    }
    return total;
}

void bfit_layout_fini(bfit_layout *lay)
{
    free(lay->y_off);
    free(lay->saved_off);
    free(lay->dy_off);
    free(lay->tmp_off);
    free(lay->tmp_input);
    memset(lay, 0, sizeof *lay);
}

static uint64_t value_bytes(const bfit_model *M, int v, int m)
{
    bfit_shape s = v == 0 ? M->input : M->nodes[v - 1].l->out;
    bfit_dtype t = v == 0 ? M->input_dtype : M->nodes[v - 1].l->dtype;
    return BFIT_ALIGN_UP((uint64_t)m * bfit_shape_numel(s) * bfit_dtype_size(t));
}

static int lay_alloc(bfit_layout *lay, int n)
{
    lay->nvalues = n + 1;
    lay->y_off = malloc(sizeof(uint64_t) * (size_t)(n + 1));
    lay->saved_off = malloc(sizeof(uint64_t) * (size_t)n);
    lay->dy_off = malloc(sizeof(uint64_t) * (size_t)(n + 1));
    lay->tmp_off = malloc(sizeof(uint64_t) * (size_t)n);
    lay->tmp_input = malloc(sizeof(int) * (size_t)n);
    if (!lay->y_off || !lay->saved_off || !lay->dy_off || !lay->tmp_off || !lay->tmp_input)
        return bfit_fail(BFIT_ENOMEM, "layout: out of host memory");
    for (int i = 0; i <= n; i++)
        lay->dy_off[i] = lay->y_off[i] = BFIT_OFF_NONE;
    for (int i = 0; i < n; i++) {
        lay->saved_off[i] = lay->tmp_off[i] = BFIT_OFF_NONE;
        lay->tmp_input[i] = -1;
    }
    return BFIT_OK;
}

/* Every layer's needs at m; the workspace is one region shared by all. */
static int lay_needs(bfit_model *M, bfit_layout *lay, bfit_layer_need *need)
{
    uint64_t ws = 0, ws_sum = 0;
    for (int i = 0; i < M->n; i++) {
        uint64_t w;
        int rc = bfit_layer_query(M->nodes[i].l, lay->m, lay->training, &need[i]);
        if (rc != BFIT_OK)
            return rc;
        w = BFIT_ALIGN_UP(need[i].ws_fwd > need[i].ws_bwd || !lay->training ? need[i].ws_fwd : need[i].ws_bwd);
        ws = w > ws ? w : ws;
        ws_sum += w;
    }
    lay->bytes[BFIT_MEM_WORKSPACE] = ws;
    lay->no_reuse[BFIT_MEM_WORKSPACE] = ws_sum;
    /* input block: the samples (value 0) then the labels */
    lay->y_off[0] = 0;
    lay->labels_off = value_bytes(M, 0, lay->m);
    lay->bytes[BFIT_MEM_INPUT] = lay->labels_off + BFIT_ALIGN_UP((uint64_t)lay->m * sizeof(int32_t));
    lay->no_reuse[BFIT_MEM_INPUT] = lay->bytes[BFIT_MEM_INPUT];
    return BFIT_OK;
}

/* Activations. Training: every output and saved region lives through
 * backward (t = whole step). Eval: a value lives from its producer to its
 * last consumer, so buffers are reused down the network. */
static void lay_activations(bfit_model *M, bfit_layout *lay, const bfit_layer_need *need, lbuf *b)
{
    int n = M->n, nb = 0, m = lay->m, training = lay->training;
    for (int i = 0; i < n; i++) {
        int last = i;
        if (!training)
            for (int j = i + 1; j < n; j++)
                for (int k = 0; k < M->nodes[j].l->nin; k++)
                    if (M->nodes[j].in[k] == i + 1)
                        last = j;
        if (i == n - 1)
            last = n; /* the probabilities are read after the forward */
        b[nb++] = (lbuf){value_bytes(M, i + 1, m), 0, training ? 0 : i, training ? n : last, &lay->y_off[i + 1]};
        lay->no_reuse[BFIT_MEM_ACTIVATIONS] += value_bytes(M, i + 1, m);
        if (training && need[i].saved) {
            b[nb++] = (lbuf){BFIT_ALIGN_UP(need[i].saved), 0, 0, n, &lay->saved_off[i]};
            lay->no_reuse[BFIT_MEM_ACTIVATIONS] += BFIT_ALIGN_UP(need[i].saved);
        }
    }
    lay->bytes[BFIT_MEM_ACTIVATIONS] = place(b, nb);
}

/* Activation gradients. Backward runs node n-1 first: time t = n-1-i for
 * node i. The gradient of value v is written first by its last consumer and
 * read last by its producer (node v-1). A further consumer writes into a
 * temp that is added in at once. The model input needs no gradient. */
static int lay_act_grads(bfit_model *M, bfit_layout *lay, lbuf *b)
{
    int n = M->n, nb = 0;
    unsigned char *written = calloc((size_t)n + 1, 1);

    if (!written)
        return bfit_fail(BFIT_ENOMEM, "layout: out of host memory");
    for (int i = n - 1; i >= 0; i--) {
        int t = n - 1 - i;
        for (int k = 0; k < M->nodes[i].l->nin; k++) {
            int v = M->nodes[i].in[k];
            uint64_t sz;
            if (v <= 0)
                continue;
            sz = value_bytes(M, v, lay->m);
            if (!written[v]) {
                written[v] = 1;
                b[nb++] = (lbuf){sz, 0, t, n - 1 - (v - 1), &lay->dy_off[v]};
            } else if (lay->tmp_input[i] < 0) {
                b[nb++] = (lbuf){sz, 0, t, t, &lay->tmp_off[i]};
                lay->tmp_input[i] = k;
            } else {
                free(written);
                return bfit_fail(BFIT_EINVAL, "layout: layer %d (%s) takes two inputs whose values feed other layers "
                                              "too; one temporary gradient per layer is supported",
                                 i + 1, bfit_layer_kind_name(M->nodes[i].l->cfg.kind));
            }
            lay->no_reuse[BFIT_MEM_ACT_GRADS] += sz;
        }
    }
    free(written);
    lay->bytes[BFIT_MEM_ACT_GRADS] = place(b, nb);
    return BFIT_OK;
}

int bfit_model_layout(bfit_model *M, int m, int training, bfit_layout *lay)
{
    int n = M->n, rc;
    lbuf *b = NULL;
    bfit_layer_need *need = NULL;

    memset(lay, 0, sizeof *lay);
    if (m < 1)
        return bfit_fail(BFIT_EINVAL, "micro-batch must be at least 1, got %d", m);
    lay->m = m;
    lay->training = training;
    rc = lay_alloc(lay, n);
    b = calloc((size_t)((BFIT_LAYER_MAXIN + 1) * n + 2), sizeof *b);
    need = calloc((size_t)n, sizeof *need);
    if (rc == BFIT_OK && (!b || !need))
        rc = bfit_fail(BFIT_ENOMEM, "layout: out of host memory");
    if (rc == BFIT_OK)
        rc = lay_needs(M, lay, need);
    if (rc == BFIT_OK) {
        lay_activations(M, lay, need, b);
        if (training)
            rc = lay_act_grads(M, lay, b);
    }
    free(b);
    free(need);
    if (rc != BFIT_OK)
        bfit_layout_fini(lay);
    return rc;
}

/* ---- reserving ----------------------------------------------------------- */

static const bfit_mem_cat step_cats[] = {BFIT_MEM_ACTIVATIONS, BFIT_MEM_ACT_GRADS, BFIT_MEM_WORKSPACE,
                                         BFIT_MEM_INPUT};
#define NSTEP_CATS ((int)(sizeof step_cats / sizeof step_cats[0]))

void bfit_model_unreserve(bfit_model *M)
{
    for (int i = 0; i < NSTEP_CATS; i++) {
        bfit_mem_cat c = step_cats[i];
        if (M->block[c] && M->arena)
            bfit_arena_release(M->arena, M->block[c]);
        M->block[c] = NULL;
        M->block_bytes[c] = 0;
    }
    for (int i = 0; i < M->n; i++) {
        bfit_op_free(M->nodes[i].acc);
        M->nodes[i].acc = NULL;
    }
    bfit_layout_fini(&M->lay);
    M->m = 0;
}

uint64_t bfit_model_step_bytes(const bfit_model *M)
{
    uint64_t b = 0;
    for (int i = 0; i < NSTEP_CATS; i++)
        b += M->block_bytes[step_cats[i]];
    return b;
}

/* Take every step block of lay or none; the old step is released first so
 * its bytes count as free. */
static int take_blocks(bfit_model *M, const bfit_layout *lay)
{
    void *nb[BFIT_MEM_NCAT] = {0};
    bfit_model_unreserve(M);
    for (int i = 0; i < NSTEP_CATS; i++) {
        bfit_mem_cat c = step_cats[i];
        int rc;
        if (!lay->bytes[c])
            continue;
        rc = bfit_arena_alloc(M->arena, lay->bytes[c], c, &nb[c]);
        if (rc != BFIT_OK) {
            for (int j = 0; j < i; j++)
                bfit_arena_release(M->arena, nb[step_cats[j]]);
            return rc;
        }
    }
    for (int i = 0; i < NSTEP_CATS; i++) {
        M->block[step_cats[i]] = nb[step_cats[i]];
        M->block_bytes[step_cats[i]] = lay->bytes[step_cats[i]];
    }
    return BFIT_OK;
}

/* Layers' ops for (m, training), and the adds of temp gradients. */
static int prepare_ops(bfit_model *M, const bfit_layout *lay)
{
    for (int i = 0; i < M->n; i++) {
        int rc = bfit_layer_prepare(M->nodes[i].l, lay->m, lay->training), k = lay->tmp_input ? lay->tmp_input[i] : -1;
        if (rc == BFIT_OK && lay->training && k >= 0) {
            int v = M->nodes[i].in[k];
            bfit_op_desc d = {.kind = BFIT_OP_ADD, .dtype = v ? M->nodes[v - 1].l->dtype : M->input_dtype,
                              .accumulate = 1};
            d.u.add.n = (int64_t)lay->m * bfit_shape_numel(v ? M->nodes[v - 1].l->out : M->input);
            rc = bfit_op_new(M->dev, &d, &M->nodes[i].acc);
        }
        if (rc != BFIT_OK)
            return rc;
    }
    return BFIT_OK;
}

int bfit_model_reserve(bfit_model *M, int m, int training)
{
    bfit_layout lay;
    int rc, fits = 1;

    if (!M->dev || !M->arena)
        return bfit_fail(BFIT_ESTATE, "model: no device");
    if (M->m == m && M->training == training)
        return BFIT_OK;
    rc = bfit_model_layout(M, m, training, &lay);
    if (rc != BFIT_OK)
        return rc;
    for (int i = 0; i < NSTEP_CATS; i++)
        if (lay.bytes[step_cats[i]] > M->block_bytes[step_cats[i]] ||
            (lay.bytes[step_cats[i]] && !M->block[step_cats[i]]))
            fits = 0;
    if (!fits) {
        rc = take_blocks(M, &lay);
        if (rc != BFIT_OK) {
            bfit_layout_fini(&lay);
            return rc;
        }
    } else {
        for (int i = 0; i < M->n; i++) {
            bfit_op_free(M->nodes[i].acc);
            M->nodes[i].acc = NULL;
        }
        bfit_layout_fini(&M->lay);
    }
    rc = prepare_ops(M, &lay);
    if (rc != BFIT_OK) {
        bfit_layout_fini(&lay);
        bfit_model_unreserve(M);
        return rc;
    }
    M->lay = lay;
    M->m = m;
    M->training = training;
    return BFIT_OK;
}

/* ---- running ------------------------------------------------------------- */

static void *yptr(bfit_model *M, int v)
{
    if (v == 0)
        return M->block[BFIT_MEM_INPUT];
    return (char *)M->block[BFIT_MEM_ACTIVATIONS] + M->lay.y_off[v];
}

static void *saved_ptr(bfit_model *M, int i)
{
    if (M->lay.saved_off[i] == BFIT_OFF_NONE)
        return NULL;
    return (char *)M->block[BFIT_MEM_ACTIVATIONS] + M->lay.saved_off[i];
}

static void *agrad(bfit_model *M, uint64_t off)
{
    return off == BFIT_OFF_NONE ? NULL : (char *)M->block[BFIT_MEM_ACT_GRADS] + off;
}

static int32_t *labels_ptr(bfit_model *M) { return (int32_t *)((char *)M->block[BFIT_MEM_INPUT] + M->lay.labels_off); }

int bfit_model_set_input(bfit_model *M, const void *x, const int32_t *labels, int n)
{
    int rc;
    if (!M->m || n != M->m)
        return bfit_fail(BFIT_ESTATE, "model: %d samples given for a micro-batch of %d", n, M->m);
    /* checked here, on the host: a GPU's loss op cannot refuse them */
    for (int i = 0; labels && i < n; i++)
        if (labels[i] < 0 || labels[i] >= M->nclasses)
            return bfit_fail(BFIT_EINVAL, "cross-entropy: label %d of sample %d is outside [0, %d)", (int)labels[i],
                             i, M->nclasses);
    rc = bfit_device_upload(M->dev, yptr(M, 0), x,
                            (size_t)n * (size_t)bfit_shape_numel(M->input) * bfit_dtype_size(M->input_dtype));
    if (rc == BFIT_OK && labels)
        rc = bfit_device_upload(M->dev, labels_ptr(M), labels, (size_t)n * sizeof(int32_t));
    return rc;
}

int bfit_model_read_probs(bfit_model *M, float *host)
{
    if (!M->m)
        return bfit_fail(BFIT_ESTATE, "model: no micro-batch reserved");
    return bfit_device_download(M->dev, host, yptr(M, M->n), (size_t)M->m * (size_t)M->nclasses * sizeof(float));
}

int bfit_model_forward(bfit_model *M, uint64_t seed)
{
    int rc;

    if (!M->m)
        return bfit_fail(BFIT_ESTATE, "model: forward without a reserved micro-batch");
    for (int i = 0; i < M->n; i++) {
        bfit_layer *L = M->nodes[i].l;
        bfit_fwd_args a;
        memset(&a, 0, sizeof a);
        a.m = M->m;
        a.training = M->training;
        for (int k = 0; k < L->nin; k++)
            a.x[k] = yptr(M, M->nodes[i].in[k]);
        a.y = yptr(M, i + 1);
        a.saved = saved_ptr(M, i);
        a.ws = M->block[BFIT_MEM_WORKSPACE];
        a.seed = seed * 0x9E3779B97F4A7C15ull + (uint64_t)i;
        a.labels = labels_ptr(M);
        a.stats = M->stats;
        rc = bfit_layer_forward(L, &a);
        if (rc != BFIT_OK)
            return bfit_fail_prefix(rc, "forward of layer %d (%s): ", i + 1, bfit_layer_kind_name(L->cfg.kind));
    }
    return BFIT_OK;
}

/* Node i's backward; a value with several consumers gets this one's share
 * through a temp, added in at once. */
static int backward_node(bfit_model *M, int i, float loss_scale)
{
    bfit_layer *L = M->nodes[i].l;
    bfit_bwd_args a;
    int rc, k = M->lay.tmp_input[i];

    memset(&a, 0, sizeof a);
    a.m = M->m;
    for (int j = 0; j < L->nin; j++) {
        int v = M->nodes[i].in[j];
        a.x[j] = yptr(M, v);
        if (v > 0 && M->needs_grad[v])
            a.dx[j] = k == j ? agrad(M, M->lay.tmp_off[i]) : agrad(M, M->lay.dy_off[v]);
    }
    a.y = yptr(M, i + 1);
    a.dy = agrad(M, M->lay.dy_off[i + 1]);
    a.saved = saved_ptr(M, i);
    a.ws = M->block[BFIT_MEM_WORKSPACE];
    a.labels = labels_ptr(M);
    a.loss_scale = loss_scale;
    rc = bfit_layer_backward(L, &a);
    if (rc == BFIT_OK && k >= 0 && a.dx[k]) {
        bfit_op_args o = {0};
        o.src = a.dx[k];
        o.dst = agrad(M, M->lay.dy_off[M->nodes[i].in[k]]);
        rc = bfit_op_run(M->nodes[i].acc, &o);
    }
    return rc;
}

int bfit_model_backward(bfit_model *M, float loss_scale)
{
    if (!M->m || !M->training)
        return bfit_fail(BFIT_ESTATE, "model: backward needs a micro-batch reserved for training");
    for (int i = M->n - 1; i >= 0; i--) {
        int rc;
        if (!M->needs_grad[i + 1])
            continue; /* no parameter here or upstream: nothing to compute */
        rc = backward_node(M, i, loss_scale);
        if (rc != BFIT_OK)
            return bfit_fail_prefix(rc, "backward of layer %d (%s): ", i + 1,
                                    bfit_layer_kind_name(M->nodes[i].l->cfg.kind));
    }
    return BFIT_OK;
}
