/* gradcheck.c - finite-difference gradient checks through the layer API. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gradcheck.h"
#include "tdev.h"

typedef struct gc_ctx {
    tdev t;
    bfit_layer *l;
    int m, nin;
    tbuf x[BFIT_LAYER_MAXIN], dx[BFIT_LAYER_MAXIN], y, dy, labels, stats, lens;
    tbuf pdata[BFIT_LAYER_MAXP], pgrad[BFIT_LAYER_MAXP];
    float *r;                /* the random weights of the checked sum */
    void *saved, *ws_f, *ws_b;
    int64_t nx[BFIT_LAYER_MAXIN], ny;
    uint64_t seed;
} gc_ctx;

/* Upload inputs and parameters as the host has them, forward, and return
 * the checked scalar. */
static double forward_loss(gc_ctx *c, int *ok)
{
    bfit_fwd_args a;
    double s = 0;

    for (int i = 0; i < c->nin; i++)
        tbuf_up(&c->t, &c->x[i]);
    for (int i = 0; i < c->l->nparams; i++)
        tbuf_up(&c->t, &c->pdata[i]);
    memset(TB_F(c->stats), 0, 16);
    tbuf_up(&c->t, &c->stats);
    memset(&a, 0, sizeof a);
    a.m = c->m;
    a.training = 1;
    for (int i = 0; i < c->nin; i++)
        a.x[i] = c->x[i].d;
    a.y = c->y.d;
    a.saved = c->saved;
    a.ws = c->ws_f;
    a.seed = c->seed;
    a.labels = c->labels.d;
    a.lens = c->lens.d;
    a.stats = c->stats.d;
    *ok = bfit_layer_forward(c->l, &a) == BFIT_OK;
    if (c->l->cfg.kind == BFIT_L_XENT) {
        tbuf_down(&c->t, &c->stats);
        return ((double *)c->stats.h)[0];
    }
    tbuf_down(&c->t, &c->y);
    for (int64_t j = 0; j < c->ny; j++)
        s += (double)TB_F(c->y)[j] * c->r[j];
    return s;
}

static double rel_err(double a, double f)
{
    double d = fabs(a - f), s = fmax(fmax(fabs(a), fabs(f)), 1e-2);
    return d / s;
}

/* Check one tensor: v (host values, perturbed), g (analytic gradient). */
static void check_tensor(gc_ctx *c, const gc_case *k, float *v, const float *g, int64_t n,
                         const char *what, gc_result *r)
{
    double h = k->h > 0 ? k->h : 1e-2;
    int samples = k->samples > 0 ? k->samples : 40;
    uint64_t s = c->seed * 7919 + 17;
    for (int t = 0; t < samples && t < n; t++) {
        int64_t i;
        float old;
        double lp, lm, fd, e;
        int ok1, ok2;
        if (n <= samples) {
            i = t;
        } else {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            i = (int64_t)((s >> 17) % (uint64_t)n);
        }
        if (k->kink_gap > 0 && fabsf(v[i]) < k->kink_gap)
            continue;
        old = v[i];
        v[i] = (float)(old + h);
        lp = forward_loss(c, &ok1);
        v[i] = (float)(old - h);
        lm = forward_loss(c, &ok2);
        v[i] = old;
        fd = (lp - lm) / (2 * h);
        e = rel_err(g[i], fd);
        r->checked++;
        if (e > r->max_rel_err) {
            r->max_rel_err = e;
            snprintf(r->worst, sizeof r->worst, "%s[%lld]: backward %.6g, finite difference %.6g", what,
                     (long long)i, (double)g[i], fd);
        }
    }
}

/* Parameters: PyTorch-style init on the host, then moved off it (gamma=1,
 * beta=0) so the check exercises them; gradients zeroed on the device. */
static void setup_params(gc_ctx *c)
{
    float *host[BFIT_LAYER_MAXP];
    for (int i = 0; i < c->l->nparams; i++) {
        bfit_param *p = &c->l->params[i];
        int64_t n = bfit_param_numel(p);
        c->pdata[i] = tbuf_new(&c->t, (size_t)n * 4);
        p->data = c->pdata[i].d;
        host[i] = TB_F(c->pdata[i]);
        if (p->trainable) {
            c->pgrad[i] = tbuf_new(&c->t, (size_t)n * 4);
            memset(c->pgrad[i].h, 0, (size_t)n * 4);
            tbuf_up(&c->t, &c->pgrad[i]);
            p->grad = c->pgrad[i].d;
        }
    }
    if (c->l->vt->init_params)
        c->l->vt->init_params(c->l, c->seed, host);
    for (int i = 0; i < c->l->nparams; i++) {
        bfit_param *p = &c->l->params[i];
        int64_t n = bfit_param_numel(p);
        float *tmp;
        if (!p->trainable)
            continue;
        tmp = malloc((size_t)n * 4);
        bfit_fill_uniform(tmp, n, 0.3f, c->seed + 100 + (uint64_t)i);
        for (int64_t j = 0; j < n; j++)
            host[i][j] += tmp[j];
        free(tmp);
    }
}

static void setup_buffers(gc_ctx *c, const gc_case *k)
{
    int64_t nl;
    for (int i = 0; i < k->nin; i++) {
        c->nx[i] = (int64_t)c->m * bfit_shape_numel(k->in[i]);
        c->x[i] = tbuf_new(&c->t, (size_t)c->nx[i] * 4);
        c->dx[i] = tbuf_new(&c->t, (size_t)c->nx[i] * 4);
        bfit_fill_uniform(TB_F(c->x[i]), c->nx[i], 1.0f, c->seed + 10 + (uint64_t)i);
        for (int64_t j = 0; i == 0 && k->token_vocab > 0 && j < c->nx[i]; j++) /* ids, repeats included */
            TB_I(c->x[i])[j] = (int32_t)((c->seed * 31 + (uint64_t)j * 7) % (uint64_t)k->token_vocab);
    }
    c->ny = (int64_t)c->m * bfit_shape_numel(c->l->out);
    c->y = tbuf_new(&c->t, (size_t)c->ny * 4);
    c->dy = tbuf_new(&c->t, (size_t)c->ny * 4);
    c->r = malloc((size_t)c->ny * 4);
    bfit_fill_uniform(c->r, c->ny, 1.0f, c->seed + 20);
    memcpy(c->dy.h, c->r, (size_t)c->ny * 4);
    tbuf_up(&c->t, &c->dy);
    c->saved = tdev_alloc(&c->t, c->l->need.saved);
    c->ws_f = tdev_alloc(&c->t, c->l->need.ws_fwd);
    c->ws_b = tdev_alloc(&c->t, c->l->need.ws_bwd);
    /* a sequence's loss has a label per token, every fifth -1 (padding, ignored) */
    nl = (int64_t)c->m * (k->in[0].nd == 2 ? k->in[0].d[0] : 1);
    c->labels = tbuf_new(&c->t, (size_t)nl * 4);
    c->stats = tbuf_new(&c->t, 16);
    for (int64_t i = 0; i < nl; i++)
        TB_I(c->labels)[i] = k->cfg.kind != BFIT_L_XENT                  ? 0
                             : k->in[0].nd == 2 && i % 5 == 3            ? -1
                                                                        : (int32_t)((c->seed + (uint64_t)i * 7) %
                                                                                    (uint64_t)(k->in[0].nd == 2 ? k->in[0].d[1] : k->in[0].c));
    tbuf_up(&c->t, &c->labels);
    if (k->lens) {
        c->lens = tbuf_new(&c->t, (size_t)c->m * 4);
        memcpy(c->lens.h, k->lens, (size_t)c->m * 4);
        tbuf_up(&c->t, &c->lens);
    }
}

static int backward(gc_ctx *c, const gc_case *k)
{
    bfit_bwd_args b;
    memset(&b, 0, sizeof b);
    b.m = c->m;
    for (int i = 0; i < k->nin; i++) {
        b.x[i] = c->x[i].d;
        b.dx[i] = c->dx[i].d;
    }
    b.y = c->y.d;
    b.dy = k->cfg.kind == BFIT_L_XENT ? NULL : c->dy.d;
    b.saved = c->saved;
    b.ws = c->ws_b;
    b.labels = c->labels.d;
    b.lens = c->lens.d;
    b.loss_scale = 1.0f;
    b.seed = c->seed; /* the forward's: attention draws its dropout's mask again */
    if (bfit_layer_backward(c->l, &b) != BFIT_OK)
        return -1;
    /* the analytic gradients come to the host once; the forwards below
     * upload the host's values and leave these copies alone */
    for (int i = 0; i < k->nin; i++)
        tbuf_down(&c->t, &c->dx[i]);
    for (int i = 0; i < c->l->nparams; i++)
        if (c->l->params[i].trainable)
            tbuf_down(&c->t, &c->pgrad[i]);
    return 0;
}

static void cleanup(gc_ctx *c)
{
    for (int i = 0; i < BFIT_LAYER_MAXIN; i++) {
        if (c->x[i].d)
            tbuf_free(&c->t, &c->x[i]);
        if (c->dx[i].d)
            tbuf_free(&c->t, &c->dx[i]);
    }
    for (int i = 0; i < BFIT_LAYER_MAXP; i++) {
        if (c->pdata[i].d)
            tbuf_free(&c->t, &c->pdata[i]);
        if (c->pgrad[i].d)
            tbuf_free(&c->t, &c->pgrad[i]);
    }
    /* output, its gradient, labels and statistics have host sides too */
    if (c->y.d)
        tbuf_free(&c->t, &c->y);
    if (c->dy.d)
        tbuf_free(&c->t, &c->dy);
    if (c->labels.d)
        tbuf_free(&c->t, &c->labels);
    if (c->stats.d)
        tbuf_free(&c->t, &c->stats);
    if (c->lens.d)
        tbuf_free(&c->t, &c->lens);
    free(c->r);
    bfit_layer_free(c->l);
    tdev_close(&c->t); /* releases saved and the workspaces */
}

int gc_run(const gc_case *k, gc_result *res)
{
    gc_ctx c;
    char err[256];
    int rc = -1, ok;

    memset(&c, 0, sizeof c);
    memset(res, 0, sizeof *res);
    c.m = k->m;
    c.nin = k->nin;
    c.seed = k->seed ? k->seed : 1234;
    tdev_open(&c.t, 1);
    if (bfit_layer_new(&k->cfg, c.t.dev, k->in, k->nin, &c.l, err, sizeof err) != BFIT_OK) {
        printf("gradcheck %s: layer: %s\n", k->label, err);
        goto out;
    }
    setup_params(&c);
    if (bfit_layer_prepare(c.l, c.m, 1) != BFIT_OK) {
        printf("gradcheck %s: prepare: %s\n", k->label, bfit_errmsg());
        goto out;
    }
    setup_buffers(&c, k);
    forward_loss(&c, &ok);
    if (!ok || backward(&c, k) != 0) {
        printf("gradcheck %s: %s: %s\n", k->label, ok ? "backward" : "forward", bfit_errmsg());
        goto out;
    }
    for (int i = k->token_vocab > 0; i < k->nin; i++) {
        char what[32];
        snprintf(what, sizeof what, "d input%d", i);
        check_tensor(&c, k, TB_F(c.x[i]), TB_F(c.dx[i]), c.nx[i], what, res);
    }
    for (int i = 0; i < c.l->nparams; i++) {
        bfit_param *p = &c.l->params[i];
        char what[48];
        if (!p->trainable)
            continue;
        snprintf(what, sizeof what, "d %s", p->name);
        check_tensor(&c, k, TB_F(c.pdata[i]), TB_F(c.pgrad[i]), bfit_param_numel(p), what, res);
    }
    rc = 0;
out:
    cleanup(&c);
    return rc;
}

void gc_assert(const gc_case *k)
{
    gc_result r;
    double tol = k->tol > 0 ? k->tol : 2e-2;
    int rc = gc_run(k, &r);
    assert_int_equal(rc, 0);
    printf("  %-40s checked %4d  max rel err %.2e  (%s)\n", k->label, r.checked, r.max_rel_err, r.worst);
    assert_true(r.checked > 0);
    if (r.max_rel_err > tol)
        fail_msg("%s: max relative error %.3g > %.3g at %s", k->label, r.max_rel_err, tol, r.worst);
}
