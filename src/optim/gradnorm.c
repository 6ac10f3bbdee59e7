/* gradnorm.c - gradient norms and clipping through device ops. */
#include "base/err.h"
#include "optim/gradnorm.h"

#include <math.h>
#include <stdlib.h>

typedef struct gn_tensor {
    bfit_param *p;
    int64_t numel;
    bfit_op *norms, *scale;
    char *copy;          /* track: the gradients as they were at the last call */
} gn_tensor;

struct bfit_gradnorm {
    bfit_device *dev;
    bfit_arena *arena;
    int n, track;
    gn_tensor *t;
    void *block;         /* results [n][2] f64, then the copies */
    uint64_t bytes;
    double *host;        /* the downloaded results */
};

static int counted(const bfit_param *p) { return p && p->trainable && bfit_param_numel(p) > 0; }
static uint64_t results_bytes(int n) { return BFIT_ALIGN_UP((uint64_t)(n ? n : 1) * 2 * sizeof(double)); }

uint64_t bfit_gradnorm_bytes(bfit_param *const *params, int n, int track)
{
    uint64_t b = 0;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (counted(params[i])) {
            k++;
            if (track)
                b += BFIT_ALIGN_UP((uint64_t)bfit_param_numel(params[i]) * bfit_dtype_size(BFIT_F32));
        }
    return b + results_bytes(k);
}

static int make_ops(bfit_gradnorm *g)
{
    for (int i = 0; i < g->n; i++) {
        bfit_op_desc d = {.kind = BFIT_OP_NORMS, .dtype = BFIT_F32};
        int rc;
        d.u.norms.n = g->t[i].numel;
        if ((rc = bfit_op_new(g->dev, &d, &g->t[i].norms)) != BFIT_OK)
            return rc;
        d = (bfit_op_desc){.kind = BFIT_OP_SCALE, .dtype = BFIT_F32};
        d.u.scale.n = g->t[i].numel;
        if ((rc = bfit_op_new(g->dev, &d, &g->t[i].scale)) != BFIT_OK)
            return rc;
    }
    return BFIT_OK;
}

int bfit_gradnorm_new(bfit_param *const *params, int n, int track, bfit_device *dev, bfit_arena *arena,
                      bfit_gradnorm **out)
{
    bfit_gradnorm *g = calloc(1, sizeof *g);
    char *cur;
    int rc = BFIT_ENOMEM;

    *out = NULL;
    if (!g || !(g->t = calloc((size_t)n + 1, sizeof *g->t)) || !(g->host = calloc((size_t)n + 1, 2 * sizeof(double)))) {
        rc = bfit_fail(BFIT_ENOMEM, "gradient norms: out of host memory");
        goto fail;
    }
    g->dev = dev;
    g->arena = arena;
    g->track = track;
    for (int i = 0; i < n; i++)
        if (counted(params[i])) {
            g->t[g->n].p = params[i];
            g->t[g->n++].numel = bfit_param_numel(params[i]);
        }
    g->bytes = bfit_gradnorm_bytes(params, n, track);
    if ((rc = bfit_arena_alloc(arena, (size_t)g->bytes, BFIT_MEM_OTHER, &g->block)) != BFIT_OK) {
        bfit_fail_prefix(rc, "gradient norms: ");
        goto fail;
    }
    cur = (char *)g->block + results_bytes(g->n);
    for (int i = 0; track && i < g->n; i++) {
        g->t[i].copy = cur;
        cur += BFIT_ALIGN_UP((uint64_t)g->t[i].numel * bfit_dtype_size(BFIT_F32));
    }
    if ((rc = make_ops(g)) != BFIT_OK || (track && (rc = bfit_gradnorm_track_reset(g)) != BFIT_OK))
        goto fail;
    *out = g;
    return BFIT_OK;
fail:
    bfit_gradnorm_free(g);
    return rc;
}

void bfit_gradnorm_free(bfit_gradnorm *g)
{
    if (!g)
        return;
    for (int i = 0; g->t && i < g->n; i++) {
        bfit_op_free(g->t[i].norms);
        bfit_op_free(g->t[i].scale);
    }
    if (g->block)
        bfit_arena_release(g->arena, g->block);
    free(g->t);
    free(g->host);
    free(g);
}

/* Run every tensor's NORMS (with its copy when tracking) and download. */
static int collect(bfit_gradnorm *g, int with_copy)
{
    int rc = bfit_device_span_begin(g->dev, (uintptr_t)g * 2 + (with_copy != 0)); /* device.h */

    for (int i = 0; i < g->n && rc == BFIT_OK; i++) {
        bfit_op_args a = {0};
        a.src = g->t[i].p->grad;
        a.state0 = with_copy ? g->t[i].copy : NULL;
        a.stats = (char *)g->block + (size_t)i * 2 * sizeof(double);
        rc = bfit_op_run(g->t[i].norms, &a);
    }
    bfit_device_span_end(g->dev);
    if (rc != BFIT_OK)
        return rc;
    return bfit_device_download(g->dev, g->host, g->block, (size_t)g->n * 2 * sizeof(double));
}

int bfit_gradnorm_sq(bfit_gradnorm *g, double *sq)
{
    double s = 0;
    int rc = collect(g, 0);
    if (rc != BFIT_OK)
        return rc;
    for (int i = 0; i < g->n; i++)
        s += g->host[2 * i];
    *sq = s;
    return BFIT_OK;
}

int bfit_gradnorm_clip(bfit_gradnorm *g, double max_norm, double *total_norm)
{
    double sq, total, c;
    int rc;

    if (!(max_norm > 0 && isfinite(max_norm)))
        return bfit_fail(BFIT_EINVAL, "clip: max norm %g must be finite and > 0", max_norm);
    if ((rc = bfit_gradnorm_sq(g, &sq)) != BFIT_OK)
        return rc;
    total = sqrt(sq);
    if (total_norm)
        *total_norm = total;
    if (!isfinite(total))
        return BFIT_OK;
    /* PyTorch's coefficient, with its 1e-6 guard against a zero norm. */
    c = max_norm / (total + 1e-6);
    for (int i = 0; c < 1.0 && i < g->n; i++) {
        bfit_op_args a = {0};
        a.dst = g->t[i].p->grad;
        a.alpha = (float)c;
        if ((rc = bfit_op_run(g->t[i].scale, &a)) != BFIT_OK)
            return rc;
    }
    return BFIT_OK;
}

int bfit_gradnorm_scale(bfit_gradnorm *g, double factor)
{
    for (int i = 0; i < g->n; i++) {
        bfit_op_args a = {0};
        int rc;
        a.dst = g->t[i].p->grad;
        a.alpha = (float)factor;
        if ((rc = bfit_op_run(g->t[i].scale, &a)) != BFIT_OK)
            return rc;
    }
    return BFIT_OK;
}

int bfit_gradnorm_track(bfit_gradnorm *g, double *acc_sq, double *delta_sq)
{
    double a = 0, d = 0;
    int rc;
    if (!g->track)
        return bfit_fail(BFIT_ESTATE, "gradient norms: made without tracking");
    if ((rc = collect(g, 1)) != BFIT_OK)
        return rc;
    for (int i = 0; i < g->n; i++) {
        a += g->host[2 * i];
        d += g->host[2 * i + 1];
    }
    *acc_sq = a;
    *delta_sq = d;
    return BFIT_OK;
}

int bfit_gradnorm_track_reset(bfit_gradnorm *g)
{
    uint64_t off = results_bytes(g->n);
    if (!g->track)
        return bfit_fail(BFIT_ESTATE, "gradient norms: made without tracking");
    return bfit_device_zero(g->dev, (char *)g->block + off, (size_t)(g->bytes - off));
}

int bfit_gradnorm_track_count(const bfit_gradnorm *g) { return g && g->track ? g->n : 0; }

int bfit_gradnorm_track_at(const bfit_gradnorm *g, int i, const bfit_param **p, void **copy, int64_t *numel)
{
    if (i < 0 || i >= bfit_gradnorm_track_count(g))
        return bfit_fail(BFIT_EINVAL, "gradient norms: no tracked copy %d", i);
    *p = g->t[i].p;
    *copy = g->t[i].copy;
    *numel = g->t[i].numel;
    return BFIT_OK;
}
