/* exec.c - running a step's schedule on the reserved blocks: the forward
 * actions, then the backward ones (regenerations and backwards), with
 * every buffer where the layout placed it. */
#include "base/err.h"
#include "nn/model.h"

#include <stdlib.h>
#include <string.h>

static void *at(bfit_model *M, bfit_mem_cat c, uint64_t off)
{
    return off == BFIT_OFF_NONE ? NULL : (char *)M->block[c] + off;
}

/* Value v as forward writes and reads it. */
static void *fwd_loc(bfit_model *M, int v)
{
    return v == 0 ? M->block[BFIT_MEM_INPUT] : at(M, BFIT_MEM_ACTIVATIONS, M->lay.y_off[v]);
}

/* Value v as backward reads it: its regenerated copy if it has one. */
static void *bwd_loc(bfit_model *M, int v)
{
    if (v > 0 && M->lay.r_off[v] != BFIT_OFF_NONE)
        return at(M, BFIT_MEM_ACTIVATIONS, M->lay.r_off[v]);
    return fwd_loc(M, v);
}

/* Activation gradients share the activations' block (layout.c). */
static void *grad_at(bfit_model *M, uint64_t off) { return at(M, BFIT_MEM_ACTIVATIONS, off); }

const int32_t *bfit_model_labels(bfit_model *M)
{
    return (const int32_t *)((char *)M->block[BFIT_MEM_INPUT] + M->lay.labels_off);
}

const int32_t *bfit_model_lens(bfit_model *M)
{
    return M->lay.lens_off == BFIT_OFF_NONE ? NULL : (const int32_t *)at(M, BFIT_MEM_INPUT, M->lay.lens_off);
}

static const int32_t *gathered_rows(bfit_model *M) { return (const int32_t *)at(M, BFIT_MEM_INPUT, M->lay.rows_off); }

/* One forward of node i: the first (writing the forward buffers and moving
 * running statistics) or a regeneration (the same output into its copy). */
static int run_forward(bfit_model *M, int i, uint64_t seed, int regen)
{
    bfit_layer *L = M->nodes[i].l;
    bfit_fwd_args a;
    int rc;

    memset(&a, 0, sizeof a);
    a.m = M->m;
    a.training = M->training;
    a.regen = regen;
    for (int k = 0; k < L->nin; k++)
        a.x[k] = regen ? bwd_loc(M, M->nodes[i].in[k]) : fwd_loc(M, M->nodes[i].in[k]);
    a.y = regen ? bwd_loc(M, i + 1) : fwd_loc(M, i + 1);
    a.saved = at(M, BFIT_MEM_ACTIVATIONS, regen ? M->lay.rsaved_off[i] : M->lay.saved_off[i]);
    a.ws = M->block[BFIT_MEM_WORKSPACE];
    a.seed = seed * 0x9E3779B97F4A7C15ull + (uint64_t)i; /* regenerations redraw the same dropout */
    a.labels = bfit_model_labels(M);
    a.lens = bfit_model_lens(M);
    a.rows = gathered_rows(M);
    a.stats = regen ? NULL : M->stats;
    rc = bfit_layer_forward(L, &a);
    if (rc != BFIT_OK)
        return bfit_fail_prefix(rc, "%s of layer %d (%s): ", regen ? "recomputation" : "forward", i + 1,
                                bfit_layer_kind_name(L->cfg.kind));
    return BFIT_OK;
}

/* Node i's backward; a value with several consumers gets this one's share
 * through a temp, added in at once. */
static int run_backward(bfit_model *M, int i, float loss_scale)
{
    bfit_layer *L = M->nodes[i].l;
    bfit_bwd_args a;
    int rc, k = M->lay.tmp_input[i], regen = M->lay.r_off[i + 1] != BFIT_OFF_NONE;

    memset(&a, 0, sizeof a);
    a.m = M->m;
    for (int j = 0; j < L->nin; j++) {
        int v = M->nodes[i].in[j];
        a.x[j] = bwd_loc(M, v);
        if (v > 0 && M->needs_grad[v])
            a.dx[j] = k == j ? grad_at(M, M->lay.tmp_off[i]) : grad_at(M, M->lay.dy_off[v]);
    }
    a.y = bwd_loc(M, i + 1);
    a.dy = grad_at(M, M->lay.dy_off[i + 1]);
    a.saved = at(M, BFIT_MEM_ACTIVATIONS, regen ? M->lay.rsaved_off[i] : M->lay.saved_off[i]);
    a.ws = M->block[BFIT_MEM_WORKSPACE];
    a.labels = bfit_model_labels(M);
    a.lens = bfit_model_lens(M);
    a.rows = gathered_rows(M);
    a.loss_scale = loss_scale;
    a.seed = M->seed * 0x9E3779B97F4A7C15ull + (uint64_t)i; /* the forward's: run_forward */
    a.dx_add = M->lay.dx_add ? M->lay.dx_add[i] : 0;
    a.grad_set = M->grads_stale && M->nodes[i].grad_set;
    rc = bfit_layer_backward(L, &a);
    if (rc == BFIT_OK && k >= 0 && a.dx[k]) {
        bfit_op_args o = {0};
        o.src = a.dx[k];
        o.dst = grad_at(M, M->lay.dy_off[M->nodes[i].in[k]]);
        rc = bfit_op_run(M->nodes[i].acc, &o);
    }
    if (rc != BFIT_OK)
        return bfit_fail_prefix(rc, "backward of layer %d (%s): ", i + 1, bfit_layer_kind_name(L->cfg.kind));
    return BFIT_OK;
}

/* The key of a forward's or a backward's span of device calls (device.h):
 * what the places of its arguments and its branches depend on. */
static uint64_t span_key(const bfit_model *M, int backward, float loss_scale)
{
    uint32_t scale;
    uint64_t h = 14695981039346656037ull, v[8 + BFIT_SHAPE_MAXD];
    int n = 0;

    memcpy(&scale, &loss_scale, sizeof scale);
    v[n++] = (uintptr_t)M;
    v[n++] = (uintptr_t)M->lay.act; /* a layout of its own per sequence length (seq.c) */
    v[n++] = (uintptr_t)M->block[BFIT_MEM_ACTIVATIONS];
    v[n++] = (uintptr_t)M->block[BFIT_MEM_INPUT];
    v[n++] = (uint64_t)M->m << 2 | (uint64_t)M->training << 1 | (uint64_t)backward;
    v[n++] = (uint64_t)M->grads_stale << 32 | scale;
    for (int i = 0; i < BFIT_SHAPE_MAXD; i++)
        v[n++] = (uint64_t)(uint32_t)M->input.d[i];
    for (int i = 0; i < n; i++)
        h = (h ^ v[i]) * 1099511628211ull;
    return h;
}

int bfit_model_forward(bfit_model *M, uint64_t seed)
{
    int rc;

    if (!M->m)
        return bfit_fail(BFIT_ESTATE, "model: forward without a reserved micro-batch");
    M->seed = seed;
    if ((rc = bfit_device_span_begin(M->dev, span_key(M, 0, 1.0f))) != BFIT_OK)
        return rc;
    for (int t = 0; t < M->n && rc == BFIT_OK; t++)
        rc = run_forward(M, M->lay.act[t].node, seed, 0);
    bfit_device_span_end(M->dev);
    return rc;
}

int bfit_model_backward(bfit_model *M, float loss_scale)
{
    int rc;

    if (!M->m || !M->training)
        return bfit_fail(BFIT_ESTATE, "model: backward needs a micro-batch reserved for training");
    if ((rc = bfit_device_span_begin(M->dev, span_key(M, 1, loss_scale))) != BFIT_OK)
        return rc;
    for (int t = M->n; t < M->lay.nact && rc == BFIT_OK; t++) {
        const bfit_act *a = &M->lay.act[t];
        rc = a->kind == BFIT_ACT_REGEN ? run_forward(M, a->node, M->seed, 1) : run_backward(M, a->node, loss_scale);
    }
    bfit_device_span_end(M->dev);
    if (rc != BFIT_OK)
        return rc; /* stale stays: a retry of the step sets them again */
    M->grads_stale = 0; /* set: the next micro-batches add */
    return BFIT_OK;
}

/* A host staging of ints that grows with the largest micro-batch, then stays. */
static int stage_grow(int32_t **buf, int64_t *have, int64_t need, const char *what)
{
    int32_t *p;
    if (need <= *have)
        return BFIT_OK;
    if (!(p = realloc(*buf, sizeof *p * (size_t)need)))
        return bfit_fail(BFIT_ENOMEM, "model: out of host memory for %lld %s", (long long)need, what);
    *buf = p;
    *have = need;
    return BFIT_OK;
}

/* Each sequence's real length: up to its last label that is not padding
 * (a label per token: a masked LM's unscored tokens are real), or, with one
 * label a sequence, up to its -1 padding ids (a text with a class); T where
 * neither says. */
static int upload_lens(bfit_model *M, const int32_t *ids, const int32_t *labels, int n)
{
    int T = M->input.d[0], per_token = M->per_token, rc;
    if ((rc = stage_grow(&M->stage_lens, &M->stage_lens_n, n, "sequence lengths")) != BFIT_OK)
        return rc;
    for (int i = 0; i < n; i++) {
        const int32_t *y = per_token ? labels ? labels + (size_t)i * (size_t)T : NULL : ids + (size_t)i * (size_t)T;
        int len = T;
        while (y && len > 0 && y[len - 1] == BFIT_LABEL_PAD) /* (-1 too as the ids' padding) */
            len--;
        M->stage_lens[i] = len;
    }
    return bfit_device_upload(M->dev, (void *)bfit_model_lens(M), M->stage_lens, (size_t)n * sizeof(int32_t));
}

/* A gathered head's labels: of each sample's T, the K that count (from 0) in
 * order, and the rows they were at, -1 past them (padding: no loss, a row of
 * zeros gathered). The data caps a masked LM's draws at K; more is refused. */
static int upload_gathered(bfit_model *M, const int32_t *labels, int n)
{
    int T = M->labels_per_sample, K = bfit_model_loss_rows(M);
    int32_t *lab, *rows;
    int rc;

    if ((rc = stage_grow(&M->stage_rows, &M->stage_rows_n, 2 * (int64_t)n * K, "gathered labels and rows")) != BFIT_OK)
        return rc;
    lab = M->stage_rows;
    rows = lab + (size_t)n * (size_t)K;
    for (int i = 0; i < n; i++) {
        int k = 0;
        for (int t = 0; t < T; t++) {
            if (labels[(size_t)i * (size_t)T + (size_t)t] < 0)
                continue;
            if (k == K)
                return bfit_fail_field(BFIT_EINVAL, "labels", "sample %d labels more than the %d tokens the "
                                                              "masked LM's head takes a sequence", i, K);
            lab[(size_t)i * (size_t)K + (size_t)k] = labels[(size_t)i * (size_t)T + (size_t)t];
            rows[(size_t)i * (size_t)K + (size_t)k++] = t;
        }
        for (; k < K; k++)
            lab[(size_t)i * (size_t)K + (size_t)k] = rows[(size_t)i * (size_t)K + (size_t)k] = BFIT_LABEL_PAD;
    }
    rc = bfit_device_upload(M->dev, (void *)bfit_model_labels(M), lab, (size_t)n * (size_t)K * sizeof(int32_t));
    if (rc == BFIT_OK)
        rc = bfit_device_upload(M->dev, (void *)gathered_rows(M), rows, (size_t)n * (size_t)K * sizeof(int32_t));
    return rc;
}

int bfit_model_set_input(bfit_model *M, const void *x, const int32_t *labels, int n)
{
    int rc;
    if (!M->m || n != M->m)
        return bfit_fail(BFIT_ESTATE, "model: %d samples given for a micro-batch of %d", n, M->m);
    if (M->gather && !labels) /* its labels say which rows its head runs at */
        return bfit_fail(BFIT_ESTATE, "model: a masked LM's head gathers the rows its labels score: give them");
    if ((rc = bfit_model_check_labels(M, labels, n)) != BFIT_OK ||
        (M->input_dtype == BFIT_I32 && (rc = bfit_model_check_tokens(M, x, n)) != BFIT_OK))
        return rc;
    rc = bfit_model_upload_samples(M, x, n);
    if (rc == BFIT_OK && labels && M->gather)
        rc = upload_gathered(M, labels, n);
    else if (rc == BFIT_OK && labels)
        rc = bfit_device_upload(M->dev, (void *)bfit_model_labels(M), labels,
                                (size_t)n * (size_t)M->labels_per_sample * sizeof(int32_t));
    if (rc == BFIT_OK && M->seq_lens)
        rc = upload_lens(M, x, labels, n);
    return rc;
}

int bfit_model_read_probs(bfit_model *M, float *host)
{
    if (!M->m)
        return bfit_fail(BFIT_ESTATE, "model: no micro-batch reserved");
    return bfit_device_download(M->dev, host, fwd_loc(M, M->n),
                                (size_t)M->m * (size_t)bfit_model_loss_rows(M) * (size_t)M->nclasses * sizeof(float));
}
