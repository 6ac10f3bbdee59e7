/* model.c - the graph executor: builds layers, lays out a step's buffers with
 * their lifetimes, reserves them all-or-nothing, runs forward and backward. */
#include "base/err.h"
#include "base/testctl.h"
#include "device/half.h"
#include "nn/model.h"
#include "nn/wsrc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- building ------------------------------------------------------------ */

/* A layer's error at its place in the spec: BFIT_EFORMAT, or the code
 * given where it is not the spec's fault (out of host memory). */
static int node_error_rc(int rc, const bfit_graph_desc *g, const bfit_node_desc *d, const char *msg)
{
    if (d && d->line)
        return bfit_fail(rc, "%s:%d:%d: %s", g->source, d->line, d->col, msg);
    return bfit_fail(rc, "%s%s%s", g->source, g->source[0] ? ": " : "", msg);
}

static int node_error(const bfit_graph_desc *g, const bfit_node_desc *d, const char *msg)
{
    return node_error_rc(BFIT_EFORMAT, g, d, msg);
}

/* Token ids (an int32 input) go to embedding layers and nowhere else; an
 * embedding reads token ids. */
static int check_tokens_wiring(const bfit_graph_desc *g, const bfit_node_desc *d)
{
    int tokens = g->input_dtype == BFIT_I32, embed = d->cfg.kind == BFIT_L_EMBED;
    for (int k = 0; k < d->nin; k++) {
        if (embed && (d->in[k] != 0 || !tokens))
            return node_error(g, d, "embed reads the model's token ids: it must come right after `input tokens=T`");
        if (!embed && d->in[k] == 0 && tokens)
            return node_error(g, d, "the model input is token ids: the first layer must be `embed`");
    }
    return BFIT_OK;
}

/* Layers for the graph's nodes, in order; val[v] gets value v's shape. */
static int build_nodes(bfit_model *M, const bfit_graph_desc *g, bfit_shape *val)
{
    char err[512];
    int rc, inserted = 0;

    val[0] = g->input;
    for (int i = 0; i < g->nnodes; i++) {
        const bfit_node_desc *d = &g->nodes[i];
        M->nodes[i].id = i - inserted;
        inserted += d->inserted;
        if (d->cfg.kind == BFIT_L_GATHER)
            M->gather = i + 1;
        bfit_shape in[BFIT_LAYER_MAXIN];
        for (int k = 0; k < d->nin; k++) {
            if (d->in[k] < 0 || d->in[k] > i)
                return node_error(g, d, "layer input refers to a later or missing value");
            in[k] = val[d->in[k]];
        }
        if ((rc = check_tokens_wiring(g, d)) != BFIT_OK)
            return rc;
        rc = bfit_layer_new(&d->cfg, M->dev, in, d->nin, &M->nodes[i].l, err, sizeof err);
        if (rc != BFIT_OK)
            return node_error_rc(rc == BFIT_ENOMEM ? rc : BFIT_EFORMAT, g, d, err);
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

    if ((!bfit_shape_is_vector(last) && last.nd != 2) || (last.nd == 2 ? last.d[1] : last.c) < 2) {
        snprintf(err, sizeof err,
                 "the last layer must output a vector of at least 2 class scores (or a sequence of them), got %s: "
                 "end the model with `flatten` and `linear N`",
                 bfit_shape_str(last, sh, sizeof sh));
        return node_error(g, &g->nodes[g->nnodes - 1], err);
    }
    rc = bfit_layer_new(&c, M->dev, &last, 1, &M->nodes[g->nnodes].l, err, sizeof err);
    if (rc != BFIT_OK)
        return node_error(g, &g->nodes[g->nnodes - 1], err);
    M->nodes[g->nnodes].in[0] = g->nnodes;
    M->nodes[g->nnodes].id = g->nnodes > 0 ? M->nodes[g->nnodes - 1].id + 1 : 0;
    for (int k = 1; k < BFIT_LAYER_MAXIN; k++)
        M->nodes[g->nnodes].in[k] = -1;
    M->n = g->nnodes + 1;
    M->nclasses = last.nd == 2 ? last.d[1] : last.c; /* a vector may be Cx1x1 */
    /* a label a token of the input, gathered or not */
    M->labels_per_sample = last.nd == 2 ? M->gather ? M->input.d[0] : last.d[0] : 1;
    M->per_token = last.nd == 2;
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
    for (int i = 0; i < M->n; i++) {
        np += M->nodes[i].l->nparams;
        /* a token model's padding (an image's tokens are all real: a ViT from ONNX): the keys of a
           bidirectional attention, the tokens of a mean, where each sequence ends */
        M->seq_lens |= ((M->nodes[i].l->cfg.kind == BFIT_L_ATTENTION && !M->nodes[i].l->cfg.causal) ||
                        (M->nodes[i].l->cfg.kind == BFIT_L_GAP && M->nodes[i].l->in[0].nd == 2) ||
                        (M->nodes[i].l->cfg.kind == BFIT_L_SELECT && M->nodes[i].l->cfg.units == -1)) &&
                       M->input_dtype == BFIT_I32;
    }
    M->params = calloc((size_t)np + 1, sizeof *M->params);
    M->trainable = calloc((size_t)np + 1, sizeof *M->trainable);
    M->cast = calloc((size_t)np + 1, sizeof *M->cast);
    M->needs_grad = calloc((size_t)M->n + 1, 1);
    M->regen = calloc((size_t)M->n + 1, 1);
    M->cut = calloc((size_t)M->n + 1, 1);
    M->keep = calloc((size_t)M->n + 1, 1);
    if (!M->params || !M->trainable || !M->cast || !M->needs_grad || !M->regen || !M->cut || !M->keep)
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
            if (p->shared)
                continue; /* counted, stored and updated as its owner (tie_params) */
            M->params[M->nparams++] = p;
            M->master_bytes += BFIT_ALIGN_UP(bfit_param_bytes(p));
            if (p->trainable) {
                M->trainable[M->ntrainable++] = p;
                M->grad_bytes += BFIT_ALIGN_UP(bfit_param_bytes(p));
            }
        }
    return BFIT_OK;
}

/* A layer that shares node s's parameters (cfg.share = s + 1: a module
 * applied twice): each of them is s's, which must be of its kind and shapes. */
static int share_params(bfit_model *M, const bfit_graph_desc *g, int i)
{
    bfit_layer *L = M->nodes[i].l, *O;
    int s = L->cfg.share - 1, same;

    if (s < 0 || s >= i)
        return node_error(g, &g->nodes[i], "shares the parameters of a node that does not come before it");
    O = M->nodes[s].l;
    same = O->cfg.kind == L->cfg.kind && O->nparams == L->nparams && !O->cfg.share;
    for (int k = 0; k < L->nparams && same; k++)
        same = L->params[k].ndim == O->params[k].ndim && L->params[k].trainable == O->params[k].trainable &&
               !memcmp(L->params[k].dim, O->params[k].dim, sizeof L->params[k].dim);
    if (!same)
        return node_error(g, &g->nodes[i], "shares the parameters of a layer of another kind or shape");
    for (int k = 0; k < L->nparams; k++) {
        L->params[k].shared = 1;
        L->params[k].owner = &O->params[k];
    }
    return BFIT_OK;
}

/* A tied head's weight is the table of the nearest embedding before it,
 * which must have its shape; the table then multiplies (a compute copy
 * under mixed precision). A module applied twice shares its first place's. */
static int tie_params(bfit_model *M, const bfit_graph_desc *g)
{
    for (int i = 0; i < M->n; i++) {
        bfit_layer *L = M->nodes[i].l;
        int rc;
        if (L->cfg.share && (rc = share_params(M, g, i)) != BFIT_OK)
            return rc;
        for (int k = 0; k < L->nparams && !L->cfg.share; k++) {
            bfit_param *p = &L->params[k], *o = NULL;
            char msg[256];
            if (!p->shared)
                continue;
            for (int j = i - 1; j >= 0 && !o; j--)
                if (M->nodes[j].l->cfg.kind == BFIT_L_EMBED)
                    o = &M->nodes[j].l->params[0];
            if (!o || o->dim[0] != p->dim[0] || o->dim[1] != p->dim[1]) {
                snprintf(msg, sizeof msg, "tie=1: the weight [%lld, %lld] must be the token table of an `embed` "
                                          "before it (%s)",
                         (long long)p->dim[0], (long long)p->dim[1],
                         o ? "the nearest one has another shape: vocab and width must match" : "there is none");
                return node_error(g, &g->nodes[i], msg);
            }
            o->multiplies = 1;
            p->owner = o;
        }
    }
    return BFIT_OK;
}

/* Point shared parameters at their owners' memory. */
static void point_tied(bfit_model *M)
{
    for (int i = 0; i < M->n; i++)
        for (int k = 0; k < M->nodes[i].l->nparams; k++) {
            bfit_param *p = &M->nodes[i].l->params[k];
            if (!p->shared || !p->owner)
                continue;
            p->data = p->owner->data;
            p->grad = p->owner->grad;
            p->cdata = p->owner->cdata;
        }
}

int bfit_model_new(const bfit_graph_desc *g, bfit_device *dev, bfit_arena *arena, bfit_model **out)
{
    bfit_model *M;
    bfit_shape *val = NULL;
    bfit_graph_desc local = {0};
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
    M->wsrc = g->wsrc;
    bfit_wsrc_retain(M->wsrc);
    /* the graph as it runs: the caller's, pools moved before relus (graph.c) */
    local = *g;
    if (!(local.nodes = malloc((size_t)g->nnodes * sizeof *local.nodes))) {
        rc = bfit_fail(BFIT_ENOMEM, "model: out of host memory");
        goto fail;
    }
    memcpy(local.nodes, g->nodes, (size_t)g->nnodes * sizeof *local.nodes);
    if (!bfit_test_value(BFIT_TC_KEEP_ORDER))
        bfit_graph_pool_before_relu(local.nodes, local.nnodes);
    if ((rc = build_nodes(M, &local, val)) != BFIT_OK || (rc = add_loss(M, &local, val[g->nnodes])) != BFIT_OK ||
        (rc = tie_params(M, &local)) != BFIT_OK || (rc = wire(M)) != BFIT_OK || (rc = bfit_gradset_plan(M)) != BFIT_OK)
        goto fail;
    {
        bfit_store_cfg sc = bfit_store_cfg_default();
        if ((rc = bfit_model_configure(M, &sc)) != BFIT_OK)
            goto fail;
    }
    free(val);
    free(local.nodes);
    *out = M;
    return BFIT_OK;
fail:
    free(val);
    free(local.nodes);
    bfit_model_free(M);
    return rc;
}

void bfit_model_free(bfit_model *M)
{
    if (!M)
        return;
    bfit_model_seq_forget(M);
    free(M->seq);
    free(M->seq_val);
    bfit_model_unreserve(M);
    if (M->arena) {
        bfit_arena_release(M->arena, M->param_block);
        bfit_arena_release(M->arena, M->grad_block);
        bfit_arena_release(M->arena, M->stats);
    }
    for (int i = 0; i < M->n; i++)
        bfit_layer_free(M->nodes[i].l);
    for (int i = 0; M->cast && i < M->nparams; i++)
        bfit_op_free(M->cast[i]);
    free(M->nodes);
    free(M->params);
    free(M->trainable);
    free(M->grad_zero);
    free(M->cast);
    free(M->needs_grad);
    free(M->regen);
    free(M->cut);
    free(M->keep);
    free(M->stage16);
    free(M->stage_lens);
    free(M->stage_rows);
    free(M->stage_ids);
    bfit_wsrc_release(M->wsrc);
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

uint64_t bfit_model_sample_host_bytes(const bfit_model *M)
{
    return sizeof(float) * (uint64_t)bfit_shape_numel(M->input) + sizeof(int32_t) * (uint64_t)M->labels_per_sample;
}

int bfit_model_min_batch(const bfit_model *M)
{
    int m = 1;
    for (int i = 0; i < M->n; i++) {
        int k = bfit_layer_min_batch(M->nodes[i].l);
        m = k > m ? k : m;
    }
    return m;
}

static int wants_copy(const bfit_model *M, const bfit_param *q)
{
    return q->multiplies && M->store.precision != BFIT_F32;
}

uint64_t bfit_model_copy_bytes(const bfit_model *M)
{
    uint64_t b = 0;
    for (int i = 0; i < M->nparams; i++)
        if (wants_copy(M, M->params[i]))
            b += BFIT_ALIGN_UP((uint64_t)bfit_param_numel(M->params[i]) * bfit_dtype_size(M->store.precision));
    return b;
}

/* The compute copies, after the masters in the params block, and the casts
 * that refresh them. */
static int make_copies(bfit_model *M, char *p)
{
    for (int i = 0; i < M->nparams; i++) {
        bfit_param *q = M->params[i];
        bfit_op_desc d = {.kind = BFIT_OP_CAST, .dtype = BFIT_F32};
        int rc;
        if (!wants_copy(M, q))
            continue;
        d.u.cast.n = bfit_param_numel(q);
        d.u.cast.to = M->store.precision;
        if ((rc = bfit_op_new(M->dev, &d, &M->cast[i])) != BFIT_OK)
            return rc;
        q->cdata = p;
        p += BFIT_ALIGN_UP((uint64_t)d.u.cast.n * bfit_dtype_size(M->store.precision));
    }
    return BFIT_OK;
}

int bfit_model_refresh_copies(bfit_model *M)
{
    for (int i = 0; i < M->nparams; i++) {
        bfit_op_args a = {0};
        int rc;
        if (!M->cast[i])
            continue;
        a.src = M->params[i]->data;
        a.dst = M->params[i]->cdata;
        if ((rc = bfit_op_run(M->cast[i], &a)) != BFIT_OK)
            return bfit_fail_prefix(rc, "refreshing the compute copy of %s: ", M->params[i]->name);
    }
    return BFIT_OK;
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
    /* all the gradients, alignment gaps included (no op writes those); the
     * first step sets them as every later one does */
    M->grads_stale = 1;
    if ((rc = make_copies(M, p)) == BFIT_OK &&
        (!M->grad_block || (rc = bfit_device_zero(M->dev, M->grad_block, M->grad_bytes)) == BFIT_OK))
        rc = bfit_model_stats_reset(M);
    point_tied(M);
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
        L->vt->init_params(L, seed * 1000003ull + (uint64_t)M->nodes[i].id * 7919ull, host);
        for (int k = 0; k < L->nparams && rc == BFIT_OK; k++) {
            if (L->params[k].shared) /* its owner's values stand */
                continue;
            /* a constant of the file (a buffer: not trained) is the file's even when the rest is drawn */
            rc = M->init_random && L->params[k].trainable ? 0
                                                          : bfit_wsrc_upload(M->wsrc, M->nodes[i].id, k, M->dev,
                                                                             L->params[k].data,
                                                                             bfit_param_bytes(&L->params[k]));
            if (rc == 0) /* not in the file: drawn */
                rc = bfit_device_upload(M->dev, L->params[k].data, host[k], bfit_param_bytes(&L->params[k]));
            else if (rc == 1)
                rc = BFIT_OK;
        }
        free(buf);
    }
    return rc == BFIT_OK ? bfit_model_refresh_copies(M) : rc;
}

void bfit_model_set_init_random(bfit_model *M, int random) { M->init_random = random != 0; }
int bfit_model_has_file_weights(const bfit_model *M) { return bfit_wsrc_count(M->wsrc) > 0; }

const char *bfit_model_param_name(const bfit_model *M, int node, int k)
{
    const bfit_wsrc_entry *e = bfit_wsrc_find(M->wsrc, M->nodes[node].id, k);
    return e ? e->name : NULL;
}

int bfit_model_param_dims(const bfit_model *M, int node, int k, int64_t *dim)
{
    const bfit_wsrc_entry *e = bfit_wsrc_find(M->wsrc, M->nodes[node].id, k);
    const bfit_param *p = &M->nodes[node].l->params[k];
    int file = e && e->t->ndim <= BFIT_PARAM_MAXD && e->t->numel == bfit_param_numel(p); /* 0-d: one number */
    int nd = file ? e->t->ndim : p->ndim;
    for (int d = 0; d < BFIT_PARAM_MAXD; d++)
        dim[d] = d >= nd ? 1 : file ? e->t->dim[d] : p->dim[d];
    return nd;
}

int bfit_model_zero_grads(bfit_model *M) { return M->grad_block ? bfit_gradset_zero(M) : BFIT_OK; }

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

/* ---- reserving ----------------------------------------------------------- */

/* The step's blocks; activation gradients live in the activations' block
 * (layout.c), which the arena counts to both categories. */
static const bfit_mem_cat step_cats[] = {BFIT_MEM_ACTIVATIONS, BFIT_MEM_WORKSPACE, BFIT_MEM_INPUT};
#define NSTEP_CATS ((int)(sizeof step_cats / sizeof step_cats[0]))

/* Bytes of category c's block in lay: the activations' holds the gradients too. */
static uint64_t block_need(const bfit_layout *lay, bfit_mem_cat c)
{
    return c == BFIT_MEM_ACTIVATIONS ? lay->bytes[c] + lay->bytes[BFIT_MEM_ACT_GRADS] : lay->bytes[c];
}

int bfit_model_blocks_fit(const bfit_model *M, const bfit_layout *lay)
{
    for (int i = 0; i < NSTEP_CATS; i++)
        if (block_need(lay, step_cats[i]) > M->block_bytes[step_cats[i]] ||
            (block_need(lay, step_cats[i]) && !M->block[step_cats[i]]))
            return 0;
    return 1;
}

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

void bfit_model_forget_ops(bfit_model *M)
{
    bfit_model_unreserve(M);
    bfit_model_seq_forget(M);
    for (int i = 0; i < M->n; i++)
        bfit_layer_forget(M->nodes[i].l);
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
        if (!block_need(lay, c))
            continue;
        if (c == BFIT_MEM_ACTIVATIONS)
            rc = bfit_arena_alloc_shared(M->arena, lay->bytes[c], c, lay->bytes[BFIT_MEM_ACT_GRADS],
                                         BFIT_MEM_ACT_GRADS, &nb[c]);
        else
            rc = bfit_arena_alloc(M->arena, lay->bytes[c], c, &nb[c]);
        if (rc != BFIT_OK) {
            for (int j = 0; j < i; j++)
                bfit_arena_release(M->arena, nb[step_cats[j]]);
            return rc;
        }
    }
    for (int i = 0; i < NSTEP_CATS; i++) {
        M->block[step_cats[i]] = nb[step_cats[i]];
        M->block_bytes[step_cats[i]] = block_need(lay, step_cats[i]);
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
    int rc;

    if (!M->dev || !M->arena)
        return bfit_fail(BFIT_ESTATE, "model: no device");
    if (M->m == m && M->training == training)
        return BFIT_OK;
    if (bfit_model_seq_reserve(M, m, training))
        return BFIT_OK;
    rc = bfit_model_layout(M, m, training, &lay);
    if (rc != BFIT_OK)
        return rc;
    if (!bfit_model_blocks_fit(M, &lay)) {
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

/* ---- samples ---------------------------------------------------------------- */

/* n samples of f32 (or token ids) from the host into the input block, in the
 * model's input dtype: 16-bit inputs are converted here, on the host. */
int bfit_model_padded(const int32_t *ids, int n, int64_t T)
{
    for (int i = 0; i < n; i++) /* checked: -1 only after a sequence's last token */
        if (ids[(int64_t)(i + 1) * T - 1] < 0)
            return 1;
    return 0;
}

/* Ids with -1 padding (checked) uploaded with id 0 in its place. */
static int upload_unpadded(bfit_model *M, const int32_t *ids, int64_t cnt)
{
    if (cnt > M->stage_ids_n) { /* grows with the largest micro-batch, then stays */
        int32_t *p = realloc(M->stage_ids, sizeof *p * (size_t)cnt);
        if (!p)
            return bfit_fail(BFIT_ENOMEM, "model: out of host memory for %lld token ids", (long long)cnt);
        M->stage_ids = p;
        M->stage_ids_n = cnt;
    }
    for (int64_t i = 0; i < cnt; i++)
        M->stage_ids[i] = ids[i] < 0 ? 0 : ids[i];
    return bfit_device_upload(M->dev, M->block[BFIT_MEM_INPUT], M->stage_ids, (size_t)cnt * sizeof(int32_t));
}

int bfit_model_upload_samples(bfit_model *M, const void *x, int n)
{
    int64_t cnt = (int64_t)n * bfit_shape_numel(M->input);
    uint16_t *h;
    int rc;

    /* the embedding reads padding as id 0 */
    if (M->input_dtype == BFIT_I32 && bfit_model_padded(x, n, bfit_shape_numel(M->input)))
        return upload_unpadded(M, x, cnt);
    if (M->input_dtype == BFIT_F32 || M->input_dtype == BFIT_I32)
        return bfit_device_upload(M->dev, M->block[BFIT_MEM_INPUT], x, (size_t)cnt * bfit_dtype_size(M->input_dtype));
    h = M->stage16;
    if (!h || cnt > M->stage16_n) {
        uint16_t *p = realloc(M->stage16, sizeof *p * (size_t)cnt);
        if (!p)
            return bfit_fail(BFIT_ENOMEM, "model: out of host memory converting %d samples", n);
        M->stage16 = h = p;
        M->stage16_n = cnt;
    }
    for (int64_t i = 0; i < cnt; i++)
        h[i] = M->input_dtype == BFIT_BF16 ? bfit_f32_to_bf16(((const float *)x)[i])
                                           : bfit_f32_to_f16(((const float *)x)[i]);
    rc = bfit_device_upload(M->dev, M->block[BFIT_MEM_INPUT], h, (size_t)cnt * 2);
    return rc;
}

/* Labels are checked here, on the host: a GPU's loss op cannot refuse them.
 * -1 is a token's padding, and outside training a sample left out (an
 * unreadable test image): training a sample model on one is an error; -2
 * a real token not scored (a masked LM's). */
int bfit_model_check_labels(const bfit_model *M, const int32_t *labels, int n)
{
    int per = M->labels_per_sample, lo = per > 1 ? BFIT_LABEL_UNSCORED : !M->training ? BFIT_LABEL_PAD : 0;
    for (int64_t i = 0; labels && i < (int64_t)n * per; i++)
        if (labels[i] < lo || labels[i] >= M->nclasses) {
            if (per > 1)
                return bfit_fail(BFIT_EINVAL, "cross-entropy: label %d of token %lld of sample %lld is outside "
                                              "[0, %d) (and not -1, padding, nor -2, a token not scored)",
                                 (int)labels[i], (long long)(i % per), (long long)(i / per), M->nclasses);
            return bfit_fail(BFIT_EINVAL, "cross-entropy: label %d of sample %lld is outside [0, %d)", (int)labels[i],
                             (long long)i, M->nclasses);
        }
    return BFIT_OK;
}

int bfit_model_vocab(const bfit_model *M)
{
    const bfit_layer *E = M->n ? M->nodes[0].l : NULL;
    return M->input_dtype == BFIT_I32 && E && E->cfg.kind == BFIT_L_EMBED ? E->cfg.vocab : 0;
}

int bfit_model_types(const bfit_model *M)
{
    const bfit_layer *E = M->n ? M->nodes[0].l : NULL;
    return bfit_model_vocab(M) && E->cfg.types > 0 ? E->cfg.types : 1;
}

int bfit_model_causal(const bfit_model *M)
{
    for (int i = 0; i < M->n; i++)
        if (M->nodes[i].l->cfg.kind == BFIT_L_ATTENTION && M->nodes[i].l->cfg.causal)
            return 1;
    return 0;
}

/* Token ids of n samples, checked on the host (a GPU's lookup cannot refuse).
 * -1 is padding after a sequence's last token (a text with a class, whose
 * one label cannot say where it ends): only there, after one token at least. */
int bfit_model_check_tokens(const bfit_model *M, const int32_t *ids, int n)
{
    const bfit_layer *E = M->nodes[0].l;
    int64_t T = bfit_shape_numel(M->input);
    if (M->input_dtype != BFIT_I32 || E->cfg.kind != BFIT_L_EMBED)
        return BFIT_OK;
    for (int64_t k = 0; k < n; k++) {
        const int32_t *x = ids + k * T;
        int64_t len = T;
        while (len > 0 && x[len - 1] == -1)
            len--;
        if (!len)
            return bfit_fail(BFIT_EINVAL, "sample %lld has no token: its %lld ids are all -1 (padding)", (long long)k,
                             (long long)T);
        for (int64_t i = 0; i < len; i++) {
            int32_t id = BFIT_TOKEN_ID(x[i]), type = BFIT_TOKEN_TYPE(x[i]);
            if (x[i] < 0 || id >= E->cfg.vocab)
                return bfit_fail(BFIT_EINVAL, "token id %d at position %lld of sample %lld is outside the vocabulary "
                                 "[0, %d)%s", x[i] < 0 ? (int)x[i] : (int)id, (long long)i, (long long)k,
                                 E->cfg.vocab, x[i] == -1 ? " (-1 pads a sequence only after its last token)" : "");
            if (type >= (E->cfg.types > 0 ? E->cfg.types : 1))
                return bfit_fail(BFIT_EINVAL, "the token at position %lld of sample %lld is of type %d (a sentence "
                                 "pair's second segment, in its id's bits from %d), but the model %s", (long long)i,
                                 (long long)k, (int)type, BFIT_TOKEN_TYPE_SHIFT,
                                 E->cfg.types > 0 ? "has fewer token types" : "has no token types (BERT's "
                                 "token_type_embeddings): one segment a sequence");
        }
    }
    return BFIT_OK;
}
