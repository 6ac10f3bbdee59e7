/* test_layers_torch.c - every layer against PyTorch on identical inputs and
 * weights.
 *
 * tests/oracle/layer_oracle.py (run by the CTest fixture oracle_layers_gen)
 * writes one safetensors file per case into $BFIT_BINARY_DIR/oracle/layers
 * (or $BFIT_ORACLE_DIR): inputs, PyTorch-named parameters, dy, and torch's
 * float64 results. Each case becomes one cmocka test: build the layer from
 * the metadata (in0 "TxF" is a token sequence, "F" or "CxHxW" a vector or
 * an image), upload the weights, forward, compare y (and the loss, the
 * samples right and the running statistics), backward, compare dx and the
 * parameter gradients. Every buffer the layer sees is device memory
 * (tdev.h); results are downloaded before they are compared.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batchfit.h"
#include "internal.h"
#include "nn/layer.h"
#include "tdev.h"
#include "tensor/safetensors.h"

/* Tolerance. The expected values are torch's float64 results from the very
 * float32 inputs and weights the layer gets, so every difference is our
 * float32 arithmetic. A float32 sum of K terms is off by about
 * sqrt(K) * 2^-24 of the terms' magnitudes, K * 2^-24 at worst; for the
 * K <= ~300 of these cases that is at most ~2e-5. Each element's error is
 * measured against |expected| + S, S the rms of the expected tensor, so an
 * element that is small by cancellation is judged by the size of what was
 * summed, not by its own size; where a whole tensor cancels (batch norm's
 * dx at m=2 is eps/(var+eps) of its terms) the oracle names the terms' size
 * in "scale_<tensor>" metadata and S is the larger of the two. 1e-4 is five
 * times the worst case and still far below any indexing or formula mistake,
 * which shows up at 1e-2 or more. Do not widen it to make a case pass: a
 * case that fails is a bug in a layer. */
#define TOL 1e-4
#define NIN 4 /* inputs of a case: in0..in3 (a concatenation) */

typedef struct buf {
    float *p;
    int64_t n;
} buf;

/* Host buffers (buf) hold what the file says; device buffers (tbuf) what
 * the layer reads and writes, with host copies to fill and to check. */
typedef struct casectx {
    const char *path;
    bfit_st_file *f;
    tdev t;
    int dev_open;
    bfit_layer *l;
    int m, training, nin;
    tbuf x[NIN], dx[NIN], y, dy, pdata[BFIT_LAYER_MAXP], pgrad[BFIT_LAYER_MAXP], labels, stats, lens;
    buf prefill[BFIT_LAYER_MAXP];
    void *saved, *ws_f, *ws_b;
    char fail[2048];     /* what went wrong, reported after cleanup */
    size_t nfail;
} casectx;

/* Prefilled statistics: the loss layer adds to them */
static const double STATS0[2] = {0.5, 2.0};

static void *xalloc(size_t n)
{
    size_t sz = BFIT_ALIGN_UP(n ? n : 1);
    void *p = aligned_alloc(64, sz);
    if (p)
        memset(p, 0xff, sz); /* NaN-filled floats: a value the layer did not write shows up */
    return p;
}

static void note(casectx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(casectx *c, const char *fmt, ...)
{
    va_list ap;
    if (c->nfail + 2 >= sizeof c->fail)
        return;
    if (c->nfail)
        c->fail[c->nfail++] = '\n';
    va_start(ap, fmt);
    vsnprintf(c->fail + c->nfail, sizeof c->fail - c->nfail, fmt, ap);
    va_end(ap);
    c->nfail += strlen(c->fail + c->nfail);
}

static int meta_int(const bfit_st_file *f, const char *key, int dflt)
{
    const char *v = bfit_st_meta(f, key);
    return v ? atoi(v) : dflt;
}

static float meta_float(const bfit_st_file *f, const char *key, float dflt)
{
    const char *v = bfit_st_meta(f, key);
    return v ? strtof(v, NULL) : dflt;
}

/* "F" a vector, "TxF" a sequence of T tokens, "CxHxW" an image */
static int parse_shape(const char *s, bfit_shape *out)
{
    int c, h = 1, w = 1, k;
    if (!s)
        return 0;
    k = sscanf(s, "%dx%dx%d", &c, &h, &w);
    if (k == 1)
        *out = bfit_shape_vec(c);
    else if (k == 2)
        *out = bfit_shape_seq(c, h);
    else if (k == 3)
        *out = bfit_shape_chw(c, h, w);
    else
        return 0;
    return 1;
}

/* A float tensor of the case file into a fresh aligned buffer of n floats. */
static int load(casectx *c, const char *name, int64_t n, buf *out)
{
    const bfit_st_tensor *t = bfit_st_find(c->f, name);
    if (!t) {
        note(c, "case file has no tensor \"%s\"", name);
        return 0;
    }
    if (bfit_st_numel(t) != n) {
        note(c, "\"%s\": file has %lld elements, the layer wants %lld", name, (long long)bfit_st_numel(t),
             (long long)n);
        return 0;
    }
    out->p = xalloc((size_t)n * sizeof(float));
    out->n = n;
    if (!out->p || bfit_st_to_f32(t, out->p, n) != BFIT_OK) {
        note(c, "\"%s\": %s", name, bfit_errmsg());
        return 0;
    }
    return 1;
}

/* A float tensor of the case file into a device buffer (and its host side). */
static int load_dev(casectx *c, const char *name, int64_t n, tbuf *out)
{
    buf b = {0};
    if (!load(c, name, n, &b))
        return 0;
    *out = tbuf_new(&c->t, (size_t)n * sizeof(float));
    memcpy(out->h, b.p, (size_t)n * sizeof(float));
    free(b.p);
    tbuf_up(&c->t, out);
    return 1;
}

/* n floats of device output, NaN-filled on both sides (the host side by
 * tbuf_new, the device side by an upload of it), so a value the layer did
 * not write shows up */
static tbuf nan_dev(casectx *c, int64_t n)
{
    tbuf b = tbuf_new(&c->t, (size_t)n * sizeof(float));
    tbuf_up(&c->t, &b);
    return b;
}

/* Compare got[0..n) with the file's tensor `name` (minus sub[] if given),
 * print the errors, note a failure past TOL. */
static void compare(casectx *c, const char *name, const float *got, const float *sub, int64_t n)
{
    buf e = {0};
    double ss = 0, rms, max_abs = 0, max_rel = 0;
    int64_t worst = 0;
    char key[80];
    if (!load(c, name, n, &e))
        return;
    for (int64_t i = 0; i < n; i++)
        ss += (double)e.p[i] * e.p[i];
    rms = n ? sqrt(ss / (double)n) : 0;
    snprintf(key, sizeof key, "scale_%s", name);
    if (bfit_st_meta(c->f, key) && strtod(bfit_st_meta(c->f, key), NULL) > rms)
        rms = strtod(bfit_st_meta(c->f, key), NULL);
    for (int64_t i = 0; i < n; i++) {
        double g = sub ? (double)got[i] - sub[i] : got[i];
        double d = fabs(g - e.p[i]), r = d / (fabs(e.p[i]) + rms + 1e-30);
        if (!(d <= max_abs)) /* NaN lands here too, and sticks */
            max_abs = d;
        if (!(r <= max_rel)) {
            max_rel = r;
            worst = i;
        }
    }
    printf("    %-22s n=%-6lld max abs err %.2e  max rel err %.2e\n", name, (long long)n, max_abs, max_rel);
    if (!(max_rel <= TOL))
        note(c, "%s: max rel err %.3g > %.0e at [%lld]: got %.8g, torch %.8g", name, max_rel, TOL, (long long)worst,
             sub ? (double)got[worst] - sub[worst] : (double)got[worst], (double)e.p[worst]);
    free(e.p);
}

static bfit_layer_kind kind_of(const char *name)
{
    for (int k = 0; k < BFIT_L_COUNT; k++)
        if (name && strcmp(bfit_layer_kind_name((bfit_layer_kind)k), name) == 0)
            return (bfit_layer_kind)k;
    return BFIT_L_COUNT;
}

/* The layer config from the metadata: defaults, then every key given. */
static int config(casectx *c, bfit_layer_cfg *cfg, bfit_shape *in)
{
    const bfit_st_file *f = c->f;
    bfit_layer_kind k = kind_of(bfit_st_meta(f, "kind"));
    if (k == BFIT_L_COUNT) {
        note(c, "unknown kind \"%s\"", bfit_st_meta(f, "kind") ? bfit_st_meta(f, "kind") : "(none)");
        return 0;
    }
    *cfg = bfit_layer_cfg_default(k);
    cfg->units = meta_int(f, "units", cfg->units);
    cfg->kh = meta_int(f, "kh", cfg->kh);
    cfg->kw = meta_int(f, "kw", cfg->kw);
    cfg->sh = meta_int(f, "sh", cfg->sh);
    cfg->sw = meta_int(f, "sw", cfg->sw);
    cfg->ph = meta_int(f, "ph", cfg->ph);
    cfg->pw = meta_int(f, "pw", cfg->pw);
    cfg->bias = meta_int(f, "bias", cfg->bias);
    cfg->eps = meta_float(f, "eps", cfg->eps);
    cfg->momentum = meta_float(f, "momentum", cfg->momentum);
    cfg->p = meta_float(f, "p", cfg->p);
    cfg->vocab = meta_int(f, "vocab", cfg->vocab);
    cfg->positions = meta_int(f, "positions", cfg->positions);
    cfg->pos_fixed = meta_int(f, "pos_fixed", cfg->pos_fixed);
    cfg->pos_off = meta_int(f, "pos_off", cfg->pos_off);
    cfg->escale = meta_float(f, "escale", cfg->escale);
    cfg->types = meta_int(f, "types", cfg->types);
    cfg->causal = meta_int(f, "causal", cfg->causal);
    cfg->lean = meta_int(f, "lean", cfg->lean);
    cfg->tanh = meta_int(f, "tanh", cfg->tanh);
    cfg->offset = meta_int(f, "offset", cfg->offset);
    cfg->wt = meta_int(f, "wt", cfg->wt);
    cfg->theta = meta_float(f, "theta", cfg->theta);
    cfg->groups = meta_int(f, "groups", cfg->groups);
    cfg->lo = meta_float(f, "lo", cfg->lo);
    cfg->hi = meta_float(f, "hi", cfg->hi);
    cfg->alpha = meta_float(f, "alpha", cfg->alpha);
    cfg->beta = meta_float(f, "beta", cfg->beta);
    cfg->threshold = meta_float(f, "threshold", cfg->threshold);
    cfg->axis = meta_int(f, "axis", cfg->axis);
    c->m = meta_int(f, "m", 0);
    c->training = meta_int(f, "training", 1);
    for (c->nin = 0; c->nin < NIN; c->nin++) {
        char key[16];
        snprintf(key, sizeof key, "in%d", c->nin);
        if (!bfit_st_meta(f, key))
            break;
        if (!parse_shape(bfit_st_meta(f, key), &in[c->nin])) {
            note(c, "metadata %s is not F, TxF or CxHxW", key);
            return 0;
        }
    }
    if (!c->nin || c->m < 1) {
        note(c, "metadata needs in0 (F, TxF or CxHxW) and m >= 1");
        return 0;
    }
    return 1;
}

/* Parameters: the layer's names must be exactly the file's ("params"
 * metadata), with equal element counts; torch's values are uploaded. */
static int load_params(casectx *c)
{
    bfit_layer *l = c->l;
    const char *list = bfit_st_meta(c->f, "params");
    char names[256], *save = NULL;
    int nlisted = 0;

    snprintf(names, sizeof names, "%s", list ? list : "");
    for (char *tok = strtok_r(names, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int i = 0; i < l->nparams; i++)
            found |= strcmp(l->params[i].name, tok) == 0;
        if (!found)
            note(c, "torch has parameter \"%s\", the layer does not", tok);
        nlisted++;
    }
    if (nlisted != l->nparams)
        note(c, "torch has %d parameters, the layer %d", nlisted, l->nparams);
    for (int i = 0; i < l->nparams; i++) {
        bfit_param *p = &l->params[i];
        int64_t n = bfit_param_numel(p);
        if (!load_dev(c, p->name, n, &c->pdata[i]))
            return 0;
        p->data = c->pdata[i].d;
        if (p->trainable) {
            char dn[64];
            c->pgrad[i] = nan_dev(c, n);
            p->grad = c->pgrad[i].d;
            /* backward adds into grad: start from a known non-zero pattern
             * of the expected gradient's size and compare grad - pattern */
            snprintf(dn, sizeof dn, "d%s", p->name);
            if (c->training && !load(c, dn, n, &c->prefill[i]))
                return 0;
            if (c->training) {
                double ss = 0;
                for (int64_t j = 0; j < n; j++)
                    ss += (double)c->prefill[i].p[j] * c->prefill[i].p[j];
                bfit_fill_uniform(c->prefill[i].p, n, (float)sqrt(ss / (double)(n ? n : 1)) + 1e-3f, 4242 + i);
                memcpy(c->pgrad[i].h, c->prefill[i].p, (size_t)n * sizeof(float));
                tbuf_up(&c->t, &c->pgrad[i]);
            }
        }
    }
    return c->nfail == 0;
}

/* An I32 tensor of the case file (labels, token ids) of n elements into a
 * device buffer. */
static int load_ints(casectx *c, const char *name, int64_t n, tbuf *out)
{
    const bfit_st_tensor *t = bfit_st_find(c->f, name);
    if (!t || strcmp(t->dtype, "I32") != 0 || bfit_st_numel(t) != n) {
        note(c, "case file needs %s: I32 [%lld]", name, (long long)n);
        return 0;
    }
    *out = tbuf_new(&c->t, (size_t)n * sizeof(int32_t));
    memcpy(out->h, t->data, (size_t)n * sizeof(int32_t));
    tbuf_up(&c->t, out);
    return 1;
}

/* The loss layer's labels (one per token of a sequence), and its statistics
 * prefilled with STATS0. */
static int load_labels(casectx *c)
{
    int64_t n = (int64_t)c->m * (c->l->in[0].nd == 2 ? c->l->in[0].d[0] : 1);
    if (!load_ints(c, "labels", n, &c->labels))
        return 0;
    c->stats = tbuf_new(&c->t, sizeof STATS0);
    memcpy(c->stats.h, STATS0, sizeof STATS0);
    tbuf_up(&c->t, &c->stats);
    return 1;
}

/* Forward, then compare y, the loss statistics and any new_<param>
 * (batch norm's running statistics, moved by the forward op). */
static int run_forward(casectx *c)
{
    bfit_layer *l = c->l;
    bfit_fwd_args a;
    int is_xent = l->cfg.kind == BFIT_L_XENT;

    memset(&a, 0, sizeof a);
    a.m = c->m;
    a.training = c->training;
    for (int i = 0; i < c->nin; i++)
        a.x[i] = c->x[i].d;
    a.y = c->y.d;
    a.saved = c->training ? c->saved : NULL;
    a.ws = c->ws_f;
    a.seed = 12345;
    a.labels = is_xent ? c->labels.d : NULL;
    a.lens = c->lens.d;
    a.stats = is_xent ? c->stats.d : NULL;
    if (bfit_layer_forward(l, &a) != BFIT_OK) {
        note(c, "forward: %s", bfit_errmsg());
        return 0;
    }
    tbuf_down(&c->t, &c->y);
    /* the loss layer's output is the softmax; compared when it is shaped so */
    if (!is_xent || bfit_shape_eq(l->out, l->in[0]))
        compare(c, "y", TB_F(c->y), NULL, c->y.bytes / sizeof(float));
    if (is_xent) {
        const double *st;
        float got[2];
        tbuf_down(&c->t, &c->stats);
        st = c->stats.h;
        got[0] = (float)(st[0] - STATS0[0]); /* added to what was there */
        got[1] = (float)(st[1] - STATS0[1]);
        compare(c, "loss", &got[0], NULL, 1);
        compare(c, "correct", &got[1], NULL, 1);
    }
    for (int i = 0; i < l->nparams; i++) {
        char nn[64];
        snprintf(nn, sizeof nn, "new_%s", l->params[i].name);
        if (bfit_st_find(c->f, nn)) {
            tbuf_down(&c->t, &c->pdata[i]);
            compare(c, nn, TB_F(c->pdata[i]), NULL, bfit_param_numel(&l->params[i]));
        }
    }
    return 1;
}

static void run_backward(casectx *c)
{
    bfit_layer *l = c->l;
    bfit_bwd_args b;
    int is_xent = l->cfg.kind == BFIT_L_XENT;

    memset(&b, 0, sizeof b);
    b.m = c->m;
    b.seed = 12345; /* the forward's: attention draws its dropout's mask again */
    for (int i = 0; i < c->nin; i++)
        b.x[i] = c->x[i].d;
    b.y = c->y.d;
    if (!is_xent) {
        if (!load_dev(c, "grad_out", (int64_t)(c->y.bytes / sizeof(float)), &c->dy))
            return;
        b.dy = c->dy.d;
    }
    for (int i = 0; i < c->nin && l->cfg.kind != BFIT_L_EMBED; i++) { /* token ids have no gradient */
        c->dx[i] = nan_dev(c, (int64_t)(c->x[i].bytes / sizeof(float))); /* dx must be overwritten */
        b.dx[i] = c->dx[i].d;
    }
    b.saved = c->saved;
    b.ws = c->ws_b;
    b.labels = is_xent ? c->labels.d : NULL;
    b.lens = c->lens.d;
    b.loss_scale = meta_float(c->f, "loss_scale", 1.0f);
    if (bfit_layer_backward(l, &b) != BFIT_OK) {
        note(c, "backward: %s", bfit_errmsg());
        return;
    }
    for (int i = 0; i < c->nin && l->cfg.kind != BFIT_L_EMBED; i++) {
        char nn[16];
        snprintf(nn, sizeof nn, "dx%d", i);
        tbuf_down(&c->t, &c->dx[i]);
        compare(c, nn, TB_F(c->dx[i]), NULL, c->dx[i].bytes / sizeof(float));
    }
    for (int i = 0; i < l->nparams; i++) {
        char nn[64];
        if (!l->params[i].trainable)
            continue;
        snprintf(nn, sizeof nn, "d%s", l->params[i].name);
        tbuf_down(&c->t, &c->pgrad[i]);
        compare(c, nn, TB_F(c->pgrad[i]), c->prefill[i].p, bfit_param_numel(&l->params[i]));
    }
}

static void run_forward_backward(casectx *c)
{
    bfit_layer *l = c->l;
    int64_t ny = (int64_t)c->m * bfit_shape_numel(l->out);

    if (bfit_layer_prepare(l, c->m, c->training) != BFIT_OK) {
        note(c, "prepare(m=%d, training=%d): %s", c->m, c->training, bfit_errmsg());
        return;
    }
    c->y = nan_dev(c, ny);
    c->saved = tdev_alloc(&c->t, l->need.saved);
    c->ws_f = tdev_alloc(&c->t, l->need.ws_fwd);
    c->ws_b = tdev_alloc(&c->t, l->need.ws_bwd);
    if (l->cfg.kind == BFIT_L_XENT && !load_labels(c))
        return;
    /* attention with a key-padding mask: the sequences' real lengths */
    if (bfit_st_find(c->f, "lens") && !load_ints(c, "lens", c->m, &c->lens))
        return;
    if (run_forward(c) && c->training)
        run_backward(c);
}

static void drop(casectx *c, tbuf *b)
{
    if (b->h)
        tbuf_free(&c->t, b);
}

static void cleanup(casectx *c)
{
    for (int i = 0; i < NIN; i++) {
        drop(c, &c->x[i]);
        drop(c, &c->dx[i]);
    }
    for (int i = 0; i < BFIT_LAYER_MAXP; i++) {
        drop(c, &c->pdata[i]);
        drop(c, &c->pgrad[i]);
        free(c->prefill[i].p);
    }
    drop(c, &c->y);
    drop(c, &c->dy);
    drop(c, &c->labels);
    drop(c, &c->stats);
    drop(c, &c->lens);
    bfit_layer_free(c->l);
    if (c->dev_open)
        tdev_close(&c->t); /* releases saved and the workspaces */
    bfit_st_free(c->f);
}

static void run_case(void **state)
{
    casectx c;
    bfit_layer_cfg cfg;
    bfit_shape in[NIN];
    const bfit_st_tensor *ty;
    char err[256];

    memset(&c, 0, sizeof c);
    c.path = *state;
    if (bfit_st_read(c.path, &c.f) != BFIT_OK) {
        note(&c, "%s", bfit_errmsg());
        goto out;
    }
    if (!config(&c, &cfg, in))
        goto out;
    printf("  %s: %s m=%d %s\n", bfit_st_meta(c.f, "label"), bfit_st_meta(c.f, "kind"), c.m,
           c.training ? "training" : "eval");
    tdev_open(&c.t, 0);
    c.dev_open = 1;
    if (bfit_layer_new(&cfg, c.t.dev, in, c.nin, &c.l, err, sizeof err) != BFIT_OK) {
        note(&c, "bfit_layer_new: %s", err);
        goto out;
    }
    ty = bfit_st_find(c.f, "y");
    if (cfg.kind != BFIT_L_XENT && (!ty || bfit_st_numel(ty) != (int64_t)c.m * bfit_shape_numel(c.l->out))) {
        char s[32];
        note(&c, "output shape %s does not match torch's y", bfit_shape_str(c.l->out, s, sizeof s));
        goto out;
    }
    for (int i = 0; i < c.nin; i++) {
        char nn[16];
        int64_t n = (int64_t)c.m * bfit_shape_numel(in[i]);
        snprintf(nn, sizeof nn, "x%d", i);
        if (!(cfg.kind == BFIT_L_EMBED ? load_ints(&c, nn, n, &c.x[i]) : load_dev(&c, nn, n, &c.x[i])))
            goto out;
    }
    if (!load_params(&c))
        goto out;
    run_forward_backward(&c);
out:
    cleanup(&c);
    if (c.nfail)
        fail_msg("%s:\n%s", c.path, c.fail);
}

static int is_case(const struct dirent *e)
{
    size_t n = strlen(e->d_name);
    return strncmp(e->d_name, "case_", 5) == 0 && n > 12 && strcmp(e->d_name + n - 12, ".safetensors") == 0;
}

int main(void)
{
    const char *env = getenv("BFIT_ORACLE_DIR"), *bin = getenv("BFIT_BINARY_DIR");
    char dir[PATH_MAX];
    struct dirent **list = NULL;
    struct CMUnitTest *tests;
    char **paths;
    int n, rc;

    if (env && *env)
        snprintf(dir, sizeof dir, "%s", env);
    else
        snprintf(dir, sizeof dir, "%s/oracle/layers", bin && *bin ? bin : ".");
    n = scandir(dir, &list, is_case, alphasort);
    if (n <= 0) {
        fprintf(stderr, "test_layers_torch: no case files in %s: the oracle_layers_gen test writes them "
                        "(ctest runs it first as a fixture; it needs /usr/bin/python3 with torch)\n", dir);
        free(list);
        return 1;
    }
    tests = calloc((size_t)n, sizeof *tests);
    paths = calloc((size_t)n, sizeof *paths);
    for (int i = 0; i < n; i++) {
        size_t len = strlen(dir) + strlen(list[i]->d_name) + 2;
        paths[i] = malloc(len);
        snprintf(paths[i], len, "%s/%s", dir, list[i]->d_name);
        tests[i].name = list[i]->d_name;
        tests[i].test_func = run_case;
        tests[i].initial_state = paths[i];
    }
    printf("test_layers_torch: %d cases from %s, tolerance %.0e relative\n", n, dir, TOL);
    rc = _cmocka_run_group_tests("layers_vs_torch", tests, (size_t)n, NULL, NULL);
    for (int i = 0; i < n; i++) {
        free(paths[i]);
        free(list[i]);
    }
    free(paths);
    free(tests);
    free(list);
    return rc;
}
