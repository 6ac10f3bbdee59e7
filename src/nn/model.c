/* model.c - the graph executor: builds layers, lays out a step's buffers with
 * their lifetimes, reserves them all-or-nothing, runs forward and backward. */
#include "base/err.h"
#include "base/par.h"
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

int bfit_model_new(const bfit_graph_desc *g, bfit_device *dev, bfit_model **out)
{
    bfit_model *M;
    bfit_shape *val = NULL;
    char err[512], sh[32];
    int rc = BFIT_ENOMEM, np = 0;

    *out = NULL;
    if (g->nnodes == 0)
        return node_error(g, NULL, "the model has no layers");
    M = calloc(1, sizeof *M);
    val = calloc((size_t)g->nnodes + 2, sizeof *val);
    if (!M || !val)
        goto fail_nomem;
    M->dev = dev;
    M->input = g->input;
    snprintf(M->source, sizeof M->source, "%s", g->source);
    M->nodes = calloc((size_t)g->nnodes + 1, sizeof *M->nodes);
    if (!M->nodes)
        goto fail_nomem;
    val[0] = g->input;
    for (int i = 0; i < g->nnodes; i++) {
        const bfit_node_desc *d = &g->nodes[i];
        bfit_shape in[2];
        int nin = d->cfg.kind == BFIT_L_ADD ? 2 : 1;
        for (int k = 0; k < nin; k++) {
            if (d->in[k] < 0 || d->in[k] > i) {
                rc = node_error(g, d, "layer input refers to a later or missing value");
                goto fail;
            }
            in[k] = val[d->in[k]];
        }
        rc = bfit_layer_new(&d->cfg, dev, in, nin, &M->nodes[i].l, err, sizeof err);
        if (rc != BFIT_OK) {
            rc = node_error(g, d, err);
            goto fail;
        }
        M->nodes[i].in[0] = d->in[0];
        M->nodes[i].in[1] = nin == 2 ? d->in[1] : -1;
        M->n = i + 1;
        val[i + 1] = M->nodes[i].l->out;
    }
    /* the loss closes the graph */
    {
        bfit_shape last = val[g->nnodes];
        bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_XENT);
        if (last.h != 1 || last.w != 1 || last.c < 2) {
            snprintf(err, sizeof err,
                     "the last layer must output a vector of at least 2 class scores, got %s: end the model with `flatten` and `linear N`",
                     bfit_shape_str(last, sh, sizeof sh));
            rc = node_error(g, &g->nodes[g->nnodes - 1], err);
            goto fail;
        }
        rc = bfit_layer_new(&c, dev, &last, 1, &M->nodes[g->nnodes].l, err, sizeof err);
        if (rc != BFIT_OK) {
            rc = node_error(g, &g->nodes[g->nnodes - 1], err);
            goto fail;
        }
        M->nodes[g->nnodes].in[0] = g->nnodes;
        M->nodes[g->nnodes].in[1] = -1;
        M->n = g->nnodes + 1;
        M->nclasses = last.c;
    }
    for (int i = 0; i < M->n; i++)
        for (int k = 0; k < 2; k++) {
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
        goto fail_nomem;
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
            if (p->trainable)
                M->trainable[M->ntrainable++] = p;
            M->param_bytes += BFIT_ALIGN_UP(bfit_param_numel(p) * sizeof(float));
            if (p->trainable)
                M->grad_bytes += BFIT_ALIGN_UP(bfit_param_numel(p) * sizeof(float));
        }
    free(val);
    *out = M;
    return BFIT_OK;

fail_nomem:
    rc = bfit_fail(BFIT_ENOMEM, "model: out of host memory");
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
    if (M->dev) {
        bfit_device_release(M->dev, M->param_block);
        bfit_device_release(M->dev, M->grad_block);
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
    char *p, *g = NULL;
    int rc;

    if (M->param_block)
        return bfit_fail(BFIT_ESTATE, "model: parameters are already allocated");
    rc = bfit_device_alloc(M->dev, M->param_bytes, BFIT_MEM_PARAMS, (void **)&p);
    if (rc != BFIT_OK)
        return bfit_fail_prefix(rc, "model parameters: ");
    if (with_grads && M->grad_bytes) {
        rc = bfit_device_alloc(M->dev, M->grad_bytes, BFIT_MEM_GRADS, (void **)&g);
        if (rc != BFIT_OK) {
            bfit_device_release(M->dev, p);
            return bfit_fail_prefix(rc, "model gradients: ");
        }
    }
    M->param_block = p;
    M->grad_block = g;
    for (int i = 0; i < M->nparams; i++) {
        bfit_param *q = M->params[i];
        uint64_t b = BFIT_ALIGN_UP(bfit_param_numel(q) * sizeof(float));
        q->data = (float *)p;
        p += b;
        if (q->trainable && g) {
            q->grad = (float *)g;
            g += b;
        }
    }
    bfit_model_zero_grads(M);
    return BFIT_OK;
}

void bfit_model_init_params(bfit_model *M, uint64_t seed)
{
    for (int i = 0; i < M->n; i++)
        if (M->nodes[i].l->vt->init_params)
            M->nodes[i].l->vt->init_params(M->nodes[i].l, seed * 1000003ull + (uint64_t)i * 7919ull);
}

void bfit_model_zero_grads(bfit_model *M)
{
    if (M->grad_block)
        bfit_device_zero(M->dev, M->grad_block, M->grad_bytes);
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
    return BFIT_ALIGN_UP((uint64_t)m * bfit_shape_numel(s) * sizeof(float));
}

int bfit_model_layout(bfit_model *M, int m, int training, bfit_layout *lay)
{
    int n = M->n, nb = 0, rc = BFIT_OK;
    lbuf *b = NULL;
    bfit_layer_need *need = NULL;
    uint64_t ws = 0, ws_sum = 0;

    memset(lay, 0, sizeof *lay);
    if (m < 1)
        return bfit_fail(BFIT_EINVAL, "micro-batch must be at least 1, got %d", m);
    lay->m = m;
    lay->training = training;
    lay->nvalues = n + 1;
    lay->y_off = malloc(sizeof(uint64_t) * (size_t)(n + 1));
    lay->saved_off = malloc(sizeof(uint64_t) * (size_t)n);
    lay->dy_off = malloc(sizeof(uint64_t) * (size_t)(n + 1));
    lay->tmp_off = malloc(sizeof(uint64_t) * (size_t)n);
    lay->tmp_input = malloc(sizeof(int) * (size_t)n);
    b = calloc((size_t)(3 * n + 2), sizeof *b);
    need = calloc((size_t)n, sizeof *need);
    if (!lay->y_off || !lay->saved_off || !lay->dy_off || !lay->tmp_off || !lay->tmp_input || !b || !need) {
        rc = bfit_fail(BFIT_ENOMEM, "layout: out of host memory");
        goto out;
    }
    for (int i = 0; i <= n; i++)
        lay->dy_off[i] = lay->y_off[i] = BFIT_OFF_NONE;
    for (int i = 0; i < n; i++) {
        lay->saved_off[i] = lay->tmp_off[i] = BFIT_OFF_NONE;
        lay->tmp_input[i] = -1;
        rc = bfit_layer_query(M->nodes[i].l, m, training, &need[i]);
        if (rc != BFIT_OK)
            goto out;
        {
            uint64_t w = BFIT_ALIGN_UP(need[i].ws_fwd > need[i].ws_bwd || !training ? need[i].ws_fwd : need[i].ws_bwd);
            if (w > ws)
                ws = w;
            ws_sum += w;
        }
    }

    /* input block: the samples (value 0) then the labels */
    lay->y_off[0] = 0;
    lay->labels_off = value_bytes(M, 0, m);
    lay->bytes[BFIT_MEM_INPUT] = lay->labels_off + BFIT_ALIGN_UP((uint64_t)m * sizeof(int32_t));
    lay->no_reuse[BFIT_MEM_INPUT] = lay->bytes[BFIT_MEM_INPUT];
    lay->bytes[BFIT_MEM_WORKSPACE] = ws;
    lay->no_reuse[BFIT_MEM_WORKSPACE] = ws_sum;

    /* activations. Training: every output and saved region lives through
     * backward (t = whole step). Eval: a value lives from its producer to
     * its last consumer, so buffers are reused down the network. */
    nb = 0;
    for (int i = 0; i < n; i++) {
        int last = i;
        if (!training)
            for (int j = i + 1; j < n; j++)
                if (M->nodes[j].in[0] == i + 1 || M->nodes[j].in[1] == i + 1)
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

    /* activation gradients. Backward runs node n-1 first: time t = n-1-i for
     * node i. The gradient of value v is written first by its last consumer
     * and read last by its producer (node v-1). A second consumer writes into
     * a temp that is added in at once. The model input needs no gradient. */
    if (training) {
        int *written = calloc((size_t)n + 1, sizeof *written);
        if (!written) {
            rc = bfit_fail(BFIT_ENOMEM, "layout: out of host memory");
            goto out;
        }
        nb = 0;
        for (int i = n - 1; i >= 0; i--) {
            int t = n - 1 - i;
            for (int k = 0; k < M->nodes[i].l->nin; k++) {
                int v = M->nodes[i].in[k];
                uint64_t sz;
                if (v <= 0)
                    continue;
                sz = value_bytes(M, v, m);
                if (!written[v]) {
                    written[v] = 1;
                    b[nb++] = (lbuf){sz, 0, t, n - 1 - (v - 1), &lay->dy_off[v]};
                } else {
                    /* two inputs of one node from the same value would need
                     * two temps; graphs from specs never do that */
                    b[nb++] = (lbuf){sz, 0, t, t, &lay->tmp_off[i]};
                    lay->tmp_input[i] = k;
                }
                lay->no_reuse[BFIT_MEM_ACT_GRADS] += sz;
            }
        }
        free(written);
        lay->bytes[BFIT_MEM_ACT_GRADS] = place(b, nb);
    }
out:
    free(b);
    free(need);
    if (rc != BFIT_OK)
        bfit_layout_fini(lay);
    return rc;
}

/* ---- reserving ----------------------------------------------------------- */

static const bfit_mem_cat step_cats[] = {BFIT_MEM_ACTIVATIONS, BFIT_MEM_ACT_GRADS, BFIT_MEM_WORKSPACE,
                                         BFIT_MEM_INPUT};

void bfit_model_unreserve(bfit_model *M)
{
    for (unsigned i = 0; i < sizeof step_cats / sizeof step_cats[0]; i++) {
        bfit_mem_cat c = step_cats[i];
        if (M->block[c])
            bfit_device_release(M->dev, M->block[c]);
        M->block[c] = NULL;
        M->block_bytes[c] = 0;
    }
    bfit_layout_fini(&M->lay);
    M->m = 0;
}

int bfit_model_reserve(bfit_model *M, int m, int training)
{
    bfit_layout lay;
    int rc, fits = 1;
    void *nb[BFIT_MEM_NCAT] = {0};

    if (!M->dev)
        return bfit_fail(BFIT_ESTATE, "model: no device");
    if (M->m == m && M->training == training)
        return BFIT_OK;
    rc = bfit_model_layout(M, m, training, &lay);
    if (rc != BFIT_OK)
        return rc;
    for (unsigned i = 0; i < sizeof step_cats / sizeof step_cats[0]; i++)
        if (lay.bytes[step_cats[i]] > M->block_bytes[step_cats[i]] ||
            (lay.bytes[step_cats[i]] && !M->block[step_cats[i]]))
            fits = 0;
    if (!fits) {
        /* all-or-nothing: release the old step first so its bytes count as
         * free, then take every block or none */
        bfit_model_unreserve(M);
        for (unsigned i = 0; i < sizeof step_cats / sizeof step_cats[0]; i++) {
            bfit_mem_cat c = step_cats[i];
            if (!lay.bytes[c])
                continue;
            rc = bfit_device_alloc(M->dev, lay.bytes[c], c, &nb[c]);
            if (rc != BFIT_OK) {
                for (unsigned j = 0; j < i; j++)
                    bfit_device_release(M->dev, nb[step_cats[j]]);
                bfit_layout_fini(&lay);
                return rc;
            }
        }
        for (unsigned i = 0; i < sizeof step_cats / sizeof step_cats[0]; i++) {
            M->block[step_cats[i]] = nb[step_cats[i]];
            M->block_bytes[step_cats[i]] = lay.bytes[step_cats[i]];
        }
    } else {
        bfit_layout_fini(&M->lay);
    }
    for (int i = 0; i < M->n; i++) {
        rc = bfit_layer_prepare(M->nodes[i].l, m, training);
        if (rc != BFIT_OK) {
            bfit_layout_fini(&lay);
            bfit_model_unreserve(M);
            return rc;
        }
    }
    M->lay = lay;
    M->m = m;
    M->training = training;
    return BFIT_OK;
}

float *bfit_model_input_x(bfit_model *M) { return (float *)M->block[BFIT_MEM_INPUT]; }

int32_t *bfit_model_input_labels(bfit_model *M)
{
    return (int32_t *)((char *)M->block[BFIT_MEM_INPUT] + M->lay.labels_off);
}

/* ---- running ------------------------------------------------------------- */

static float *yptr(bfit_model *M, int v)
{
    if (v == 0)
        return (float *)M->block[BFIT_MEM_INPUT];
    return (float *)((char *)M->block[BFIT_MEM_ACTIVATIONS] + M->lay.y_off[v]);
}

static void *saved_ptr(bfit_model *M, int i)
{
    if (M->lay.saved_off[i] == BFIT_OFF_NONE)
        return NULL;
    return (char *)M->block[BFIT_MEM_ACTIVATIONS] + M->lay.saved_off[i];
}

static float *agrad(bfit_model *M, uint64_t off)
{
    return off == BFIT_OFF_NONE ? NULL : (float *)((char *)M->block[BFIT_MEM_ACT_GRADS] + off);
}

const float *bfit_model_probs(bfit_model *M) { return yptr(M, M->n); }

int bfit_model_forward(bfit_model *M, uint64_t seed, double *loss, int *correct)
{
    double l = 0;
    int rc;

    if (!M->m)
        return bfit_fail(BFIT_ESTATE, "model: forward without a reserved micro-batch");
    for (int i = 0; i < M->n; i++) {
        bfit_layer *L = M->nodes[i].l;
        bfit_fwd_args a;
        memset(&a, 0, sizeof a);
        a.m = M->m;
        a.training = M->training;
        a.x[0] = yptr(M, M->nodes[i].in[0]);
        a.x[1] = M->nodes[i].in[1] >= 0 ? yptr(M, M->nodes[i].in[1]) : NULL;
        a.y = yptr(M, i + 1);
        a.saved = saved_ptr(M, i);
        a.ws = M->block[BFIT_MEM_WORKSPACE];
        a.seed = seed * 0x9E3779B97F4A7C15ull + (uint64_t)i;
        a.labels = bfit_model_input_labels(M);
        a.loss = &l;
        rc = bfit_layer_forward(L, &a);
        if (rc != BFIT_OK)
            return bfit_fail_prefix(rc, "forward of layer %d (%s): ", i + 1, bfit_layer_kind_name(L->cfg.kind));
    }
    if (loss)
        *loss = l;
    if (correct) {
        const float *p = bfit_model_probs(M);
        const int32_t *lab = bfit_model_input_labels(M);
        int c = 0;
        for (int s = 0; s < M->m; s++) {
            int best = 0;
            for (int k = 1; k < M->nclasses; k++)
                if (p[(int64_t)s * M->nclasses + k] > p[(int64_t)s * M->nclasses + best])
                    best = k;
            c += best == lab[s];
        }
        *correct = c;
    }
    return BFIT_OK;
}

int bfit_model_backward(bfit_model *M, float loss_scale)
{
    int rc;
    if (!M->m || !M->training)
        return bfit_fail(BFIT_ESTATE, "model: backward needs a micro-batch reserved for training");
    for (int i = M->n - 1; i >= 0; i--) {
        bfit_layer *L = M->nodes[i].l;
        bfit_bwd_args a;
        if (!M->needs_grad[i + 1])
            continue; /* no parameter here or upstream: nothing to compute */
        memset(&a, 0, sizeof a);
        a.m = M->m;
        for (int k = 0; k < L->nin; k++) {
            int v = M->nodes[i].in[k];
            a.x[k] = yptr(M, v);
            if (v > 0 && M->needs_grad[v])
                a.dx[k] = M->lay.tmp_input[i] == k ? agrad(M, M->lay.tmp_off[i]) : agrad(M, M->lay.dy_off[v]);
        }
        a.y = yptr(M, i + 1);
        a.dy = agrad(M, M->lay.dy_off[i + 1]);
        a.saved = saved_ptr(M, i);
        a.ws = M->block[BFIT_MEM_WORKSPACE];
        a.labels = bfit_model_input_labels(M);
        a.loss_scale = loss_scale;
        rc = bfit_layer_backward(L, &a);
        if (rc != BFIT_OK)
            return bfit_fail_prefix(rc, "backward of layer %d (%s): ", i + 1, bfit_layer_kind_name(L->cfg.kind));
        if (M->lay.tmp_input[i] >= 0 && M->needs_grad[M->nodes[i].in[M->lay.tmp_input[i]]]) {
            /* a value with two consumers: add this consumer's share in */
            int k = M->lay.tmp_input[i], v = M->nodes[i].in[k];
            float *dst = agrad(M, M->lay.dy_off[v]);
            const float *src = agrad(M, M->lay.tmp_off[i]);
            int64_t cnt = (int64_t)M->m * bfit_shape_numel(v == 0 ? M->input : M->nodes[v - 1].l->out);
            BFIT_PAR_FOR_IF(cnt >= BFIT_PAR_MIN, for (int64_t j = 0; j < cnt; j++) dst[j] += src[j];);
        }
    }
    return BFIT_OK;
}
