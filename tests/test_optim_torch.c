/* test_optim_torch.c - SGD, AdamW, learning-rate schedules and gradient
 * clipping compared with PyTorch (torch.optim, torch.optim.lr_scheduler,
 * clip_grad_norm_) on identical weights and gradients. Parameters,
 * gradients and optimizer state live on the device: the oracle's values are
 * uploaded, ours downloaded after every step and compared on the host.
 *
 * tests/oracle/optim_oracle.py writes the inputs and PyTorch's results; see
 * its docstring for the files. Without Python or torch every test FAILS with
 * a message saying so: the oracle is part of the project's setup. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "batchfit.h"
#include "internal.h"
#include "optim/gradnorm.h"
#include "optim/optim.h"
#include "optim/schedule.h"
#include "tdev.h"

extern char **environ;

/* Tolerances. Both sides compute in float32 with the same operation order
 * (src/device/cpu_optim.c mirrors torch.optim's kernels, fused multiply-adds
 * included). With gcc on AVX-512, SGD and the moments are bit-identical and
 * so are AdamW's parameters without weight decay; with decoupled decay they
 * drift by about an ulp a step (6 ulps after 8 steps, measured). Another
 * compiler or CPU may fuse or round one operation differently, an ulp per
 * operation and step (~1e-7 relative), compounded over 8 steps: 1e-6
 * relative allows ~8 ulps. The absolute floor covers values that pass near
 * zero, where relative error means nothing (values here are O(0.1..1), so
 * 1e-6 is again a few ulps of their scale). Adam's second moment is O(g^2),
 * ~0.01..0.3: the same relative bound and a floor 100x smaller. */
#define RTOL 1e-6
#define ATOL 1e-6
#define ATOL_SQ 1e-8
/* Schedules are double on both sides; PyTorch's chainable forms update the
 * lr recursively, which drifts by a few 1e-16 per step. */
#define SCHED_RTOL 1e-12
/* Clipping: PyTorch takes the norm in float32, we in double; the norm agrees
 * to float32 precision (~6e-8), the scaled gradients to an ulp or two. */
#define CLIP_RTOL 1e-6

#define MAXP 16
#define MAXREC 64
#define MAXTOK 64

typedef struct rec {
    char *line;
    int ntok;
    char *tok[MAXTOK];
} rec;

static struct {
    int ok;
    char why[10000];
    char dir[4096];
    int steps, np;
    int64_t numel[MAXP], off[MAXP], total;
    int trainable[MAXP], decay[MAXP];
    char name[MAXP][64];
    float *init, *grads;
    int nrec;
    rec recs[MAXREC];
} O;

/* ---- reading the oracle's output ---------------------------------------- */

static const char *kv(const rec *r, const char *key)
{
    for (int i = 1; i + 1 < r->ntok; i += 2)
        if (strcmp(r->tok[i], key) == 0)
            return r->tok[i + 1];
    return NULL;
}

static const char *kv_need(const rec *r, const char *key)
{
    const char *v = kv(r, key);
    if (!v)
        fail_msg("oracle index: record '%s' lacks '%s'", r->tok[0], key);
    return v;
}

static double kv_num(const rec *r, const char *key) { return strtod(kv_need(r, key), NULL); }

/* Parse a comma-separated list into out[0..max); returns the count. */
static int kv_list(const rec *r, const char *key, double *out, int max)
{
    const char *s = kv_need(r, key);
    int n = 0;
    while (*s && n < max) {
        char *end;
        out[n++] = strtod(s, &end);
        s = *end == ',' ? end + 1 : end;
        if (end == s && *s)
            break;
    }
    return n;
}

static float *read_f32(const char *file, int64_t count)
{
    char path[4200];
    FILE *f;
    float *buf;
    long size;

    snprintf(path, sizeof path, "%s/%s", O.dir, file);
    f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (size != (long)(count * 4)) {
        fclose(f);
        fail_msg("%s has %ld bytes, expected %lld floats", path, size, (long long)count);
    }
    buf = malloc((size_t)(count ? count : 1) * 4);
    assert_non_null(buf);
    if (count && fread(buf, 4, (size_t)count, f) != (size_t)count) {
        fclose(f);
        fail_msg("short read from %s", path);
    }
    fclose(f);
    return buf;
}

static int run_oracle(void)
{
    const char *py = getenv("BFIT_PYTHON"), *src = getenv("BFIT_SOURCE_DIR");
    const char *bin = getenv("BFIT_BINARY_DIR");
    char script[4200];
    char *argv[4];
    pid_t pid;
    int st, rc;

    if (!py || !*py || strstr(py, "NOTFOUND") || !src || !bin) {
        snprintf(O.why, sizeof O.why, "the PyTorch oracle needs python3 with torch "
                 "(apt-get install python3-torch); BFIT_PYTHON='%s', BFIT_SOURCE_DIR='%s'",
                 py ? py : "", src ? src : "");
        return -1;
    }
    snprintf(script, sizeof script, "%s/tests/oracle/optim_oracle.py", src);
    snprintf(O.dir, sizeof O.dir, "%s/tests/optim_oracle_out", bin);
    argv[0] = (char *)py;
    argv[1] = script;
    argv[2] = O.dir;
    argv[3] = NULL;
    rc = posix_spawn(&pid, py, NULL, NULL, argv, environ);
    if (rc != 0) {
        snprintf(O.why, sizeof O.why, "cannot run %s: %s (python3 with torch is required: "
                 "apt-get install python3-torch)", py, strerror(rc));
        return -1;
    }
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        snprintf(O.why, sizeof O.why, "%s %s failed (exit %d); python3 with torch is required "
                 "(apt-get install python3-torch); see its message above", py, script,
                 WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return -1;
    }
    return 0;
}

static void tokenize(rec *r)
{
    char *save = NULL;
    r->ntok = 0;
    for (char *t = strtok_r(r->line, " \t\n", &save); t && r->ntok < MAXTOK;
         t = strtok_r(NULL, " \t\n", &save))
        r->tok[r->ntok++] = t;
}

static int load_index(void)
{
    char path[4200];
    char *line = NULL;
    size_t cap = 0;
    FILE *f;

    snprintf(path, sizeof path, "%s/index.txt", O.dir);
    f = fopen(path, "r");
    if (!f) {
        snprintf(O.why, sizeof O.why, "cannot open %s", path);
        return -1;
    }
    if (getline(&line, &cap, f) < 0 || strncmp(line, "batchfit-optim-oracle 1", 23) != 0) {
        snprintf(O.why, sizeof O.why, "%s: not a version-1 oracle index", path);
        free(line);
        fclose(f);
        return -1;
    }
    while (getline(&line, &cap, f) > 0 && O.nrec < MAXREC) {
        rec *r = &O.recs[O.nrec];
        r->line = strdup(line);
        tokenize(r);
        if (r->ntok == 0) {
            free(r->line);
            continue;
        }
        O.nrec++;
        if (strcmp(r->tok[0], "steps") == 0) {
            O.steps = atoi(r->tok[1]);
        } else if (strcmp(r->tok[0], "param") == 0 && O.np < MAXP) {
            int i = O.np++;
            O.numel[i] = atoll(kv(r, "numel"));
            O.trainable[i] = atoi(kv(r, "trainable"));
            O.decay[i] = atoi(kv(r, "decay"));
            snprintf(O.name[i], sizeof O.name[i], "%s", kv(r, "name"));
            O.off[i] = O.total;
            O.total += O.numel[i];
        }
    }
    free(line);
    fclose(f);
    return 0;
}

static int setup(void **st)
{
    (void)st;
    if (run_oracle() == 0 && load_index() == 0)
        O.ok = 1;
    return 0; /* each test fails with O.why rather than a bare setup error */
}

static int teardown(void **st)
{
    (void)st;
    for (int i = 0; i < O.nrec; i++)
        free(O.recs[i].line);
    free(O.init);
    free(O.grads);
    return 0;
}

static void need_oracle(void)
{
    if (!O.ok)
        fail_msg("%s", O.why);
    if (!O.init) {
        O.init = read_f32("init.f32", O.total);
        O.grads = read_f32("grads.f32", O.total * O.steps);
    }
}

/* ---- comparing ----------------------------------------------------------- */

typedef struct errs {
    double max_abs, max_rel;
} errs;

static void compare(const char *what, int step, const float *got, const float *want, int64_t n,
                    double rtol, double atol, errs *e)
{
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        double r = d / fmax(fabs((double)want[i]), 1e-30);
        if (d > e->max_abs)
            e->max_abs = d;
        if (fabs(want[i]) > 1e-3 && r > e->max_rel)
            e->max_rel = r;
        if (!(d <= atol + rtol * fabs((double)want[i])))
            fail_msg("%s, step %d, element %lld: got %.9g, PyTorch %.9g (diff %.3g)", what, step,
                     (long long)i, got[i], want[i], d);
    }
}

/* ---- optimizers ---------------------------------------------------------- */

/* Upload n floats to device memory at d. */
static void up(tdev *t, void *d, const float *h, int64_t n)
{
    assert_int_equal(bfit_device_upload(t->dev, d, h, (size_t)n * sizeof *h), BFIT_OK);
}

/* Device parameters of the oracle's shapes (data at init, grads unset). */
static void make_params(tdev *t, bfit_param *params, bfit_param **pp)
{
    memset(params, 0, MAXP * sizeof *params);
    for (int i = 0; i < O.np; i++) {
        bfit_param *p = &params[i];
        p->name = O.name[i];
        p->ndim = 1;
        p->dim[0] = O.numel[i];
        p->dtype = BFIT_F32;
        p->trainable = O.trainable[i];
        p->decay = O.decay[i];
        p->data = tdev_alloc(t, bfit_param_bytes(p));
        p->grad = tdev_alloc(t, bfit_param_bytes(p));
        up(t, p->data, O.init + O.off[i], O.numel[i]);
        pp[i] = p;
    }
}

/* Every parameter (grad: its gradient) downloaded into host[O.total]. */
static void download_all(tdev *t, const bfit_param *params, int grad, float *host)
{
    for (int i = 0; i < O.np; i++)
        assert_int_equal(bfit_device_download(t->dev, host + O.off[i], grad ? params[i].grad : params[i].data,
                                              bfit_param_bytes(&params[i])),
                         BFIT_OK);
}

static void free_params(tdev *t, bfit_param *params)
{
    for (int i = 0; i < O.np; i++) {
        tdev_release(t, params[i].data);
        tdev_release(t, params[i].grad);
    }
}

static void case_cfg(const rec *r, bfit_optim_cfg *cfg)
{
    assert_int_equal(bfit_optim_kind_parse(kv_need(r, "kind"), &cfg->kind), BFIT_OK);
    *cfg = bfit_optim_cfg_default(cfg->kind);
    cfg->momentum = kv_num(r, "momentum");
    cfg->dampening = kv_num(r, "dampening");
    cfg->nesterov = (int)kv_num(r, "nesterov");
    cfg->weight_decay = kv_num(r, "weight_decay");
    cfg->beta1 = kv_num(r, "beta1");
    cfg->beta2 = kv_num(r, "beta2");
    cfg->eps = kv_num(r, "eps");
}

/* The final state, downloaded tensor by tensor, against PyTorch's. */
static void compare_state(tdev *t, const bfit_optim *o, const char *cname, const float *state, int64_t nstate,
                          errs *es)
{
    char what[256];
    int64_t off = 0;
    for (int k = 0; k < bfit_optim_state_count(o); k++) {
        bfit_optim_state sv;
        float *got;
        int sq;
        assert_int_equal(bfit_optim_state_at(o, k, &sv), BFIT_OK);
        assert_true(off + sv.numel <= nstate);
        got = malloc((size_t)sv.numel * sizeof *got);
        assert_non_null(got);
        assert_int_equal(bfit_device_download(t->dev, got, sv.data, (size_t)sv.numel * sizeof *got), BFIT_OK);
        sq = strcmp(sv.kind, "exp_avg_sq") == 0;
        snprintf(what, sizeof what, "%s: state %s", cname, sv.name);
        compare(what, O.steps, got, state + off, sv.numel, RTOL, sq ? ATOL_SQ : ATOL, es);
        free(got);
        off += sv.numel;
    }
    assert_int_equal(off, nstate);
}

static void run_case(const rec *r)
{
    const char *cname = kv_need(r, "name");
    bfit_param params[MAXP], *pp[MAXP];
    bfit_optim_cfg cfg;
    bfit_optim *o;
    tdev t;
    double lrs[64];
    char file[256], what[256];
    float *hist, *state, *got;
    int64_t nstate = 0;
    errs ep = { 0, 0 }, es = { 0, 0 };

    case_cfg(r, &cfg);
    assert_int_equal(kv_list(r, "lrs", lrs, 64), O.steps);
    tdev_open(&t, 0);
    make_params(&t, params, pp);
    for (int i = 0; i < O.np; i++)
        if (params[i].trainable)
            nstate += O.numel[i];
    nstate *= cfg.kind == BFIT_OPT_ADAMW ? 2 : cfg.momentum != 0 ? 1 : 0;
    snprintf(file, sizeof file, "case_%s.params.f32", cname);
    hist = read_f32(file, O.total * O.steps);
    snprintf(file, sizeof file, "case_%s.state.f32", cname);
    state = read_f32(file, nstate);
    got = malloc((size_t)O.total * sizeof *got);
    assert_non_null(got);

    assert_int_equal(bfit_optim_new(&cfg, pp, O.np, t.dev, t.arena, &o), BFIT_OK);
    for (int s = 0; s < O.steps; s++) {
        for (int i = 0; i < O.np; i++)
            if (params[i].trainable)
                up(&t, params[i].grad, O.grads + (int64_t)s * O.total + O.off[i], O.numel[i]);
        assert_int_equal(bfit_optim_step(o, lrs[s]), BFIT_OK);
        download_all(&t, params, 0, got);
        for (int i = 0; i < O.np; i++) {
            snprintf(what, sizeof what, "%s: %s", cname, O.name[i]);
            compare(what, s, got + O.off[i], hist + (int64_t)s * O.total + O.off[i], O.numel[i], RTOL, ATOL, &ep);
        }
    }
    assert_int_equal(bfit_optim_steps(o), O.steps);
    compare_state(&t, o, cname, state, nstate, &es);
    print_message("%-18s params max abs %.2e rel %.2e | state max abs %.2e rel %.2e\n", cname,
                  ep.max_abs, ep.max_rel, es.max_abs, es.max_rel);

    bfit_optim_free(o);
    free_params(&t, params);
    tdev_close(&t);
    free(hist);
    free(state);
    free(got);
}

static void run_cases(const char *kind, int want)
{
    int n = 0;
    need_oracle();
    for (int i = 0; i < O.nrec; i++) {
        const rec *r = &O.recs[i];
        if (strcmp(r->tok[0], "case") == 0 && strcmp(kv_need(r, "kind"), kind) == 0) {
            run_case(r);
            n++;
        }
    }
    assert_int_equal(n, want);
}

static void test_sgd_matches_torch(void **st)
{
    (void)st;
    run_cases("sgd", 6);
}

static void test_adamw_matches_torch(void **st)
{
    (void)st;
    run_cases("adamw", 3);
}

/* ---- schedules and clipping ----------------------------------------------- */

static void test_schedules_match_torch(void **st)
{
    int n = 0;
    (void)st;
    need_oracle();
    for (int i = 0; i < O.nrec; i++) {
        const rec *r = &O.recs[i];
        bfit_lr_schedule s;
        double vals[256], base;
        int nv;
        if (strcmp(r->tok[0], "sched") != 0)
            continue;
        assert_int_equal(bfit_lr_sched_parse(kv_need(r, "kind"), &s.kind), BFIT_OK);
        s = bfit_lr_schedule_default(s.kind);
        s.warmup_steps = (int64_t)kv_num(r, "warmup_steps");
        s.warmup_start = kv_num(r, "warmup_start");
        s.step_size = (int64_t)kv_num(r, "step_size");
        s.gamma = kv_num(r, "gamma");
        s.total_steps = (int64_t)kv_num(r, "total_steps");
        s.min_factor = kv_num(r, "min_factor");
        base = kv_num(r, "base_lr");
        assert_int_equal(bfit_lr_schedule_check(&s), BFIT_OK);
        nv = kv_list(r, "values", vals, 256);
        assert_true(nv > 5);
        for (int k = 0; k < nv; k++) {
            double got = bfit_lr_at(&s, base, k);
            if (!(fabs(got - vals[k]) <= SCHED_RTOL * base))
                fail_msg("schedule %s, step %d: got %.17g, PyTorch %.17g", kv(r, "name"), k, got,
                         vals[k]);
        }
        n++;
    }
    assert_int_equal(n, 7);
}

/* One oracle clip case: the gradients (non-trainable ones too, which clipping
 * must leave untouched) uploaded, clipped on the device, downloaded. */
static void clip_case(const rec *r)
{
    bfit_param params[MAXP], *pp[MAXP];
    bfit_gradnorm *g;
    tdev t;
    char file[256], what[256];
    float *in, *want, *got;
    double max_norm, norm, sq, total = -1;
    errs e = { 0, 0 };

    snprintf(file, sizeof file, "clip_%s.in.f32", kv_need(r, "name"));
    in = read_f32(file, O.total);
    snprintf(file, sizeof file, "clip_%s.out.f32", kv_need(r, "name"));
    want = read_f32(file, O.total);
    got = malloc((size_t)O.total * sizeof *got);
    assert_non_null(got);
    tdev_open(&t, 0);
    make_params(&t, params, pp);
    for (int k = 0; k < O.np; k++)
        up(&t, params[k].grad, in + O.off[k], O.numel[k]);
    assert_int_equal(bfit_gradnorm_new(pp, O.np, 0, t.dev, t.arena, &g), BFIT_OK);
    max_norm = kv_num(r, "max_norm");
    norm = kv_num(r, "norm");
    assert_int_equal(bfit_gradnorm_sq(g, &sq), BFIT_OK);
    assert_true(fabs(sqrt(sq) - norm) <= CLIP_RTOL * norm);
    assert_int_equal(bfit_gradnorm_clip(g, max_norm, &total), BFIT_OK);
    if (!(fabs(total - norm) <= CLIP_RTOL * norm))
        fail_msg("clip %s: norm %.9g, PyTorch %.9g", kv(r, "name"), total, norm);
    download_all(&t, params, 1, got);
    snprintf(what, sizeof what, "clip %s", kv(r, "name"));
    compare(what, 0, got, want, O.total, CLIP_RTOL, 1e-9, &e);
    print_message("clip %-10s norm %.9g (torch %.9g), grads max rel %.2e\n", kv(r, "name"), total, norm,
                  e.max_rel);
    bfit_gradnorm_free(g);
    free_params(&t, params);
    tdev_close(&t);
    free(in);
    free(want);
    free(got);
}

static void test_clip_matches_torch(void **st)
{
    int n = 0;
    (void)st;
    need_oracle();
    for (int i = 0; i < O.nrec; i++)
        if (strcmp(O.recs[i].tok[0], "clip") == 0) {
            clip_case(&O.recs[i]);
            n++;
        }
    assert_int_equal(n, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_matches_torch),
        cmocka_unit_test(test_adamw_matches_torch),
        cmocka_unit_test(test_schedules_match_torch),
        cmocka_unit_test(test_clip_matches_torch),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
