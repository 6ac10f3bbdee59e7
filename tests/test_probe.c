/* test_probe.c - the finder: its largest batch runs and the next size up is
 * refused at exactly the budget, with two step attempts against the many of
 * a doubling-then-bisecting search (counted exactly); the model's weights,
 * batch-norm statistics and gradients are as before; nothing fitting, a bad
 * margin and a plan contradicted by the arena are each reported as such; and
 * the throughput analysis picks the smallest size within the tolerance. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "internal.h"

#include "base/testctl.h"
#include "batch/probe.h"
#include "nn/spec.h"
#include "nn/zoo.h"

#define BIG ((uint64_t)16 << 30) /* accounting only: the arena allocates on demand */
#define MiB ((uint64_t)1 << 20)

/* A small image model with everything that keeps state or randomness:
 * batch norm (running statistics), dropout, a residual add. */
static const char bn_spec[] = "input 1x12x12\n"
                              "conv 4 k=3 pad=1\n"
                              "batchnorm\n"
                              "relu\n"
                              "residual {\n"
                              "  conv 4 k=3 pad=1\n"
                              "  batchnorm\n"
                              "}\n"
                              "maxpool 2\n"
                              "flatten\n"
                              "dropout 0.2\n"
                              "linear 5\n";

typedef struct rig {
    bfit_arena *arena;
    bfit_device *dev;
    bfit_model *M;
    bfit_dataset *d;
    bfit_stream_cfg sc;
} rig;

static uint64_t rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* Random samples of the model's shape, labels below its class count. */
static void make_data(rig *r, int count)
{
    int64_t numel = bfit_shape_numel(r->M->input);
    float *x = malloc(sizeof *x * (size_t)(numel * count));
    int32_t *y = malloc(sizeof *y * (size_t)count);
    uint64_t s = 42;
    assert_non_null(x);
    assert_non_null(y);
    for (int64_t i = 0; i < numel * count; i++)
        x[i] = (float)((double)rnd(&s) / 2147483648.0 - 0.5);
    for (int i = 0; i < count; i++)
        y[i] = (int32_t)(rnd(&s) % (uint64_t)r->M->nclasses);
    assert_int_equal(bfit_dataset_from_floats(r->M->input, count, r->M->nclasses, x, y, &r->d), BFIT_OK);
    free(x);
    free(y);
    memset(&r->sc, 0, sizeof r->sc);
    r->sc.seed = 3;
    r->sc.shuffle = 1;
    r->sc.max_take = 1;
    r->sc.prefetch = 1;
}

/* The CPU device on one thread and an arena of capacity over it. */
static void rig_device(rig *r, uint64_t capacity)
{
    bfit_device_cfg cc = bfit_device_cfg_default();
    memset(r, 0, sizeof *r);
    cc.threads = 1;
    assert_int_equal(bfit_device_cpu_new(&cc, &r->dev), BFIT_OK);
    r->arena = bfit_device_arena_new(r->dev, capacity);
    assert_non_null(r->arena);
}

/* A preset, or the spec text above when model is NULL; parameters and
 * gradients allocated on an arena of capacity. */
static void rig_new(rig *r, const char *model, uint64_t capacity)
{
    bfit_graph_desc g;
    rig_device(r, capacity);
    if (model)
        assert_int_equal(bfit_model_source_load(model, 0, &g), BFIT_OK);
    else if (bfit_spec_parse(bn_spec, sizeof bn_spec - 1, "bn.cfg", &g) != BFIT_OK)
        fail_msg("%s", bfit_errmsg());
    assert_int_equal(bfit_model_new(&g, r->dev, r->arena, &r->M), BFIT_OK);
    bfit_graph_fini(&g);
    assert_int_equal(bfit_model_alloc_params(r->M, 1), BFIT_OK);
    assert_int_equal(bfit_model_init_params(r->M, 11), BFIT_OK);
    make_data(r, 300);
}

/* The arena goes before its device. */
static void rig_free(rig *r)
{
    bfit_model_free(r->M);
    bfit_dataset_free(r->d);
    bfit_arena_free(r->arena);
    bfit_device_free(r->dev);
}

/* A host copy of the model's parameter (or gradient) block. */
static void *download_block(const rig *r, const void *block, uint64_t bytes)
{
    void *h = malloc(bytes ? bytes : 1);
    assert_non_null(h);
    assert_int_equal(bfit_device_download(r->dev, h, block, bytes), BFIT_OK);
    return h;
}

/* The model's parameters (or gradients) equal a host copy, bit for bit. */
static void assert_block_equal(const rig *r, const void *block, const void *copy, uint64_t bytes)
{
    void *now = download_block(r, block, bytes);
    assert_memory_equal(now, copy, bytes);
    free(now);
}

static bfit_probe_cfg quick_cfg(uint64_t capacity)
{
    bfit_probe_cfg c = bfit_probe_cfg_default();
    c.capacity = capacity;
    c.ladder = 0;
    c.warmup = 1;
    c.repeats = 1;
    return c;
}

/* The doubling-then-bisecting search, written out on its own: trials to
 * find the largest m whose plan fits budget. */
static int search_trials(bfit_model *M, const bfit_optim_cfg *oc, uint64_t budget, int limit, int *answer)
{
    bfit_step_plan p;
    int trials = 0, good = 0, bad = 0;
    for (int64_t m = 1;; m *= 2) {
        if (m > limit)
            m = limit;
        trials++;
        assert_int_equal(bfit_plan_compute(M, oc, (int)m, 1, &p), BFIT_OK);
        if (p.peak > budget) {
            bad = (int)m;
            break;
        }
        good = (int)m;
        if (m == limit)
            break;
    }
    while (bad && bad - good > 1) {
        int mid = good + (bad - good) / 2;
        trials++;
        assert_int_equal(bfit_plan_compute(M, oc, mid, 1, &p), BFIT_OK);
        if (p.peak > budget)
            bad = mid;
        else
            good = mid;
    }
    *answer = good;
    return trials;
}

/* The largest batch is the plan's, it ran, the next one up was refused, and
 * find used at most a third of the search's steps (exactly counted). */
static void check_largest(const char *model, uint64_t capacity)
{
    rig r;
    bfit_probe_cfg c = quick_cfg(capacity);
    bfit_probe_result *res = calloc(1, sizeof *res);
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
    bfit_optim *o;
    int plan_m, answer, trials;

    assert_non_null(res);
    rig_new(&r, model, BIG);
    c.limit = 1 << 16;
    if (bfit_probe_run(r.M, r.d, &r.sc, &oc, &c, res) != BFIT_OK)
        fail_msg("%s: %s", model, bfit_errmsg());
    assert_int_equal(res->budget, bfit_plan_budget(capacity, 0.1));
    assert_int_equal(res->held_other, 0);
    assert_true(res->plan_agrees);
    assert_int_equal(bfit_plan_max_batch(r.M, &oc, 1, res->budget, c.limit, &plan_m, NULL), BFIT_OK);
    assert_true(plan_m > 1);
    assert_int_equal(res->plan_m, plan_m);
    assert_int_equal(res->largest, plan_m);
    assert_true(res->plan_largest.peak <= res->budget);
    assert_true(res->plan_next.peak > res->budget);
    assert_int_equal(res->measured_largest, res->plan_largest.peak);
    assert_true(res->next_refused);
    /* the search, counted independently */
    trials = search_trials(r.M, &oc, res->budget, c.limit, &answer);
    assert_int_equal(res->search_trials, trials);
    assert_int_equal(res->search_steps, 3 * trials);
    assert_int_equal(res->search_m, answer);
    assert_int_equal(res->largest_steps, 2);
    assert_true(3 * res->largest_steps <= res->search_steps);
    print_message("%s at %llu MiB: largest %d, %d steps; a doubling search: %d trials, %d steps\n", model,
                  (unsigned long long)(capacity / MiB), res->largest, res->largest_steps, trials,
                  res->search_steps);
    /* the arena is as before: its capacity, and nothing of the probe held
     * (the model's parameters, gradients and statistics block only) */
    assert_int_equal(bfit_arena_capacity(r.arena), BIG);
    assert_int_equal(r.M->m, 0);
    {
        bfit_arena_stats st;
        bfit_arena_stats_get(r.arena, &st);
        assert_int_equal(st.current, r.M->param_bytes + r.M->grad_bytes + BFIT_MODEL_STATS_BYTES);
    }
    /* and once more by hand, at exactly the budget */
    bfit_arena_set_capacity(r.arena, res->budget);
    assert_int_equal(bfit_optim_new(&oc, r.M->trainable, r.M->ntrainable, r.dev, r.arena, &o), BFIT_OK);
    assert_int_equal(bfit_model_reserve(r.M, res->largest, 1), BFIT_OK);
    bfit_model_unreserve(r.M);
    assert_int_equal(bfit_model_reserve(r.M, res->largest + 1, 1), BFIT_ENOMEM);
    bfit_optim_free(o);
    rig_free(&r);
    free(res);
}

static void test_largest_mlp(void **st)
{
    (void)st;
    check_largest("mlp", 64 * MiB);
}

static void test_largest_cnn(void **st)
{
    (void)st;
    check_largest("cnn", 64 * MiB);
}

/* Parameters (batch-norm running statistics included) and gradients are
 * bit for bit as before a probe that ran many training steps. */
static void test_model_untouched(void **st)
{
    rig r;
    bfit_probe_cfg c = quick_cfg(0);
    bfit_probe_result *res = calloc(1, sizeof *res);
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_ADAMW);
    float *g, x[4 * 144], *after;
    int32_t labels[4];
    void *params, *grads;
    int64_t ng;
    int changed = 0;
    (void)st;

    assert_non_null(res);
    rig_new(&r, NULL, BIG);
    /* gradients the caller had accumulated must survive too */
    ng = (int64_t)(r.M->grad_bytes / bfit_dtype_size(BFIT_F32));
    g = malloc(r.M->grad_bytes);
    assert_non_null(g);
    for (int64_t i = 0; i < ng; i++)
        g[i] = (float)(i % 7) * 0.25f;
    assert_int_equal(bfit_device_upload(r.dev, r.M->grad_block, g, r.M->grad_bytes), BFIT_OK);
    r.M->grads_stale = 0; /* as after a backward: the next one adds to them (gradset.c) */
    free(g);
    params = download_block(&r, r.M->param_block, r.M->param_bytes);
    grads = download_block(&r, r.M->grad_block, r.M->grad_bytes);

    c.capacity = 4 * MiB;
    c.ladder = 1;
    c.limit = 64;
    if (bfit_probe_run(r.M, r.d, &r.sc, &oc, &c, res) != BFIT_OK)
        fail_msg("%s", bfit_errmsg());
    assert_true(res->largest >= 1);
    assert_true(res->nrungs >= 2);
    assert_true(res->ladder_steps >= 2 * res->nrungs);
    assert_block_equal(&r, r.M->param_block, params, r.M->param_bytes);
    assert_block_equal(&r, r.M->grad_block, grads, r.M->grad_bytes);
    assert_int_equal(r.M->grads_stale, 0); /* the probe's steps set and zeroed them; still to be added to */

    /* the check has teeth: a training forward does move the statistics */
    assert_int_equal(bfit_model_reserve(r.M, 4, 1), BFIT_OK);
    for (int i = 0; i < 4 * 144; i++)
        x[i] = (float)(i % 13) - 6.0f;
    for (int i = 0; i < 4; i++)
        labels[i] = i;
    assert_int_equal(bfit_model_set_input(r.M, x, labels, 4), BFIT_OK);
    assert_int_equal(bfit_model_forward(r.M, 1), BFIT_OK);
    after = download_block(&r, r.M->param_block, r.M->param_bytes);
    for (int i = 0; i < r.M->nparams; i++)
        if (!r.M->params[i]->trainable) {
            size_t off = (size_t)((char *)r.M->params[i]->data - (char *)r.M->param_block);
            changed |= memcmp((char *)after + off, (char *)params + off, bfit_param_bytes(r.M->params[i])) != 0;
        }
    assert_true(changed);
    free(after);
    free(params);
    free(grads);
    rig_free(&r);
    free(res);
}

/* Batch 1 does not fit: an error that says how many bytes are missing. */
static void test_batch1_too_big(void **st)
{
    rig r;
    bfit_probe_cfg c = quick_cfg(0);
    bfit_probe_result *res = calloc(1, sizeof *res);
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
    bfit_step_plan p1;
    char want[32];
    (void)st;

    assert_non_null(res);
    rig_new(&r, "cnn", BIG);
    assert_int_equal(bfit_plan_compute(r.M, &oc, 1, 1, &p1), BFIT_OK);
    c.margin = 0;
    c.capacity = p1.peak - 1000;
    assert_int_equal(bfit_probe_run(r.M, r.d, &r.sc, &oc, &c, res), BFIT_ENOMEM);
    assert_int_equal(res->no_fit, BFIT_PROBE_BATCH1_OVER_BUDGET);
    assert_int_equal(res->missing, 1000);
    assert_int_equal(res->largest, 0);
    assert_non_null(strstr(bfit_errmsg(), "not even batch 1 fits"));
    bfit_format_size(1000, want, sizeof want);
    assert_non_null(strstr(bfit_errmsg(), want));
    assert_non_null(strstr(bfit_errmsg(), "missing"));
    assert_int_equal(bfit_arena_capacity(r.arena), BIG);
    rig_free(&r);
    free(res);
}

/* The fixed part alone exceeds the capacity (or, with the margin, the
 * budget): by how much is said. */
static void test_model_never_fits(void **st)
{
    rig r;
    bfit_probe_cfg c = quick_cfg(0);
    bfit_probe_result *res = calloc(1, sizeof *res);
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_ADAMW);
    bfit_step_plan p1;
    char want[32];
    (void)st;

    assert_non_null(res);
    rig_new(&r, "mlp", BIG);
    assert_int_equal(bfit_plan_compute(r.M, &oc, 1, 1, &p1), BFIT_OK);
    c.capacity = p1.fixed - 5 * MiB;
    assert_int_equal(bfit_probe_run(r.M, r.d, &r.sc, &oc, &c, res), BFIT_ENOMEM);
    assert_int_equal(res->no_fit, BFIT_PROBE_FIXED_OVER_CAPACITY);
    assert_int_equal(res->missing, 5 * MiB);
    assert_non_null(strstr(bfit_errmsg(), "at any batch size"));
    assert_non_null(strstr(bfit_errmsg(), "exceeds the memory by 5.00 MiB"));

    c.capacity = p1.fixed + MiB;
    c.margin = 0.5;
    assert_int_equal(bfit_probe_run(r.M, r.d, &r.sc, &oc, &c, res), BFIT_ENOMEM);
    assert_int_equal(res->no_fit, BFIT_PROBE_FIXED_OVER_BUDGET);
    assert_int_equal(res->missing, p1.fixed - bfit_plan_budget(p1.fixed + MiB, 0.5));
    bfit_format_size(res->missing, want, sizeof want);
    assert_non_null(strstr(bfit_errmsg(), want));
    assert_non_null(strstr(bfit_errmsg(), "margin"));
    rig_free(&r);
    free(res);
}

static void test_bad_cfg(void **st)
{
    rig r;
    bfit_probe_cfg c;
    bfit_probe_result *res = calloc(1, sizeof *res);
    const double bad_margins[] = {1.0, 1.5, -0.1, NAN};
    (void)st;

    assert_non_null(res);
    rig_new(&r, "mlp", BIG);
    for (unsigned i = 0; i < sizeof bad_margins / sizeof bad_margins[0]; i++) {
        c = quick_cfg(64 * MiB);
        c.margin = bad_margins[i];
        assert_int_equal(bfit_probe_run(r.M, r.d, &r.sc, NULL, &c, res), BFIT_EINVAL);
        assert_non_null(strstr(bfit_errmsg(), "margin: must be in [0, 1)"));
        assert_string_equal(bfit_errfield(), "margin");
    }
    c = quick_cfg(64 * MiB);
    c.tolerance = 1;
    assert_int_equal(bfit_probe_run(r.M, r.d, &r.sc, NULL, &c, res), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "tolerance"));
    c = quick_cfg(64 * MiB);
    c.repeats = 0;
    assert_int_equal(bfit_probe_run(r.M, r.d, &r.sc, NULL, &c, res), BFIT_EINVAL);
    rig_free(&r);
    free(res);
}

/* When the arena contradicts the plan (here: a fault injected into the
 * confirming reserve), the result says so and the answer comes from a real
 * search, which finds what the arena allows. */
static void test_disagreement_falls_back(void **st)
{
    rig r;
    bfit_probe_cfg c = quick_cfg(48 * MiB);
    bfit_probe_result *res = calloc(1, sizeof *res);
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
    void *params;
    (void)st;

    assert_non_null(res);
    oc.momentum = 0; /* no optimizer state: the reserve is the first allocation */
    rig_new(&r, "mlp", BIG);
    params = download_block(&r, r.M->param_block, r.M->param_bytes);
    c.limit = 1 << 16;
    bfit_arena_fail_nth(r.arena, 1);
    if (bfit_probe_run(r.M, r.d, &r.sc, &oc, &c, res) != BFIT_OK)
        fail_msg("%s", bfit_errmsg());
    assert_false(res->plan_agrees);
    assert_non_null(strstr(res->disagreement, "reserving it failed"));
    assert_int_equal(res->largest, res->search_m);
    assert_true(res->next_refused);
    assert_true(res->largest_steps > 2);
    assert_true(res->largest_steps <= 2 + 2 + res->search_trials);
    assert_int_equal(res->measured_largest, res->plan_largest.peak);
    assert_block_equal(&r, r.M->param_block, params, r.M->param_bytes);
    free(params);
    rig_free(&r);
    free(res);
}

/* A batch the device cannot make (an op over a library's size limit: on an
 * H200, ResNet-50's first convolution at 2675 samples is over cuDNN's 2^31
 * - 1 elements) bounds the largest batch as memory does: find answers the
 * batch below it and says why the next one was refused. cnn's largest
 * convolution tensor is its first's output, 32 x 28 x 28 = 25088 elements a
 * sample (models/cnn.cfg); the cpu is made to refuse over 40 of them. */
static void test_device_limit(void **st)
{
    rig r;
    bfit_probe_cfg c = quick_cfg(BIG);
    bfit_probe_result *res = calloc(1, sizeof *res);
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
    (void)st;

    assert_non_null(res);
    rig_new(&r, "cnn", BIG);
    c.limit = 1 << 16;
    bfit_test_control(BFIT_TC_CONV_ELEMS, 40 * 25088 + 7);
    if (bfit_probe_run(r.M, r.d, &r.sc, &oc, &c, res) != BFIT_OK)
        fail_msg("%s", bfit_errmsg());
    bfit_test_control(BFIT_TC_CONV_ELEMS, 0);
    assert_true(res->plan_agrees);
    assert_int_equal(res->plan_m, 40);
    assert_int_equal(res->largest, 40);
    assert_int_equal(res->search_m, 40);
    assert_true(res->next_refused);
    assert_non_null(strstr(res->next_unmade, "elements"));
    assert_int_equal(res->measured_largest, res->plan_largest.peak);
    assert_true(res->plan_largest.peak < res->budget); /* memory was not the bound */
    rig_free(&r);
    free(res);
}

/* What others hold in the arena counts against the budget. */
static void test_others_holdings(void **st)
{
    rig r;
    bfit_probe_cfg c = quick_cfg(64 * MiB);
    bfit_probe_result *res = calloc(1, sizeof *res);
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
    void *other;
    int m;
    (void)st;

    assert_non_null(res);
    rig_new(&r, "mlp", BIG);
    assert_int_equal(bfit_arena_alloc(r.arena, 10 * MiB, BFIT_MEM_OTHER, &other), BFIT_OK);
    c.limit = 1 << 16;
    if (bfit_probe_run(r.M, r.d, &r.sc, &oc, &c, res) != BFIT_OK)
        fail_msg("%s", bfit_errmsg());
    assert_int_equal(res->held_other, 10 * MiB);
    assert_int_equal(bfit_plan_max_batch(r.M, &oc, 1, res->budget - 10 * MiB, c.limit, &m, NULL), BFIT_OK);
    assert_int_equal(res->largest, m);
    assert_true(res->plan_agrees);
    assert_true(res->next_refused);
    assert_int_equal(res->measured_largest, res->plan_largest.peak);
    bfit_arena_release(r.arena, other);
    rig_free(&r);
    free(res);
}

/* The fastest batch: the best when its lead over every other size is
 * larger than their spreads; a tie within the spread goes to the largest
 * size within the tolerance of the best. The data share is the chosen
 * size's. */
static void test_analyse(void **st)
{
    bfit_probe_result *r = calloc(1, sizeof *r);
    const double sps[] = {100, 190, 350, 560, 700, 720, 690, 650};
    (void)st;

    assert_non_null(r);
    r->nrungs = 8;
    for (int i = 0; i < 8; i++) {
        r->rungs[i].m = 1 << i;
        r->rungs[i].samples_per_s = sps[i];
        r->rungs[i].wait_share = 0.01 * i;
        r->rungs[i].spread = 0.01; /* +-0.5%: 720 leads 700 by 20, more than 3.6 + 3.5 */
    }
    bfit_probe_analyse(r, 0.05, 0.2);
    assert_int_equal(r->best, 5);
    assert_true(r->clear_best);
    assert_int_equal(r->recommended, 5);
    assert_false(r->data_bound);
    /* 64 ran noisily: its 690 may be 720, a tie */
    r->rungs[6].spread = 0.2; /* +-69 */
    bfit_probe_analyse(r, 0.05, 0.2);
    assert_false(r->clear_best);
    assert_int_equal(r->recommended, 6); /* the largest within 5%: 690 >= 684, 650 is not */
    bfit_probe_analyse(r, 0.0, 0.2);
    assert_int_equal(r->recommended, 5); /* no tolerance: the best itself */
    bfit_probe_analyse(r, 0.25, 0.06);
    assert_int_equal(r->recommended, 7); /* 650 >= 540 */
    assert_true(r->data_bound);          /* 0.07 > 0.06 */
    /* the noise that misled find before: a tiny size measured fastest by a
     * hair, inside everyone's spread, is not "the fastest" */
    for (int i = 0; i < 8; i++) {
        r->rungs[i].samples_per_s = i == 2 ? 1010 : 1000 - i;
        r->rungs[i].spread = 0.3;
    }
    bfit_probe_analyse(r, 0.05, 1);
    assert_int_equal(r->best, 2);
    assert_false(r->clear_best);
    assert_int_equal(r->recommended, 7);
    free(r);
}

/* Samples made on the step's thread, with augmentation, for a model that
 * computes almost nothing: the loader is the limit. */
static void test_data_bound(void **st)
{
    rig r;
    bfit_probe_cfg c = quick_cfg(16 * MiB);
    bfit_probe_result *res = calloc(1, sizeof *res);
    bfit_graph_desc g;
    static const char tiny[] = "input 1x28x28\nflatten\nlinear 10\n";
    (void)st;

    assert_non_null(res);
    rig_device(&r, BIG);
    assert_int_equal(bfit_spec_parse(tiny, sizeof tiny - 1, "tiny.cfg", &g), BFIT_OK);
    assert_int_equal(bfit_model_new(&g, r.dev, r.arena, &r.M), BFIT_OK);
    bfit_graph_fini(&g);
    assert_int_equal(bfit_model_alloc_params(r.M, 1), BFIT_OK);
    assert_int_equal(bfit_model_init_params(r.M, 1), BFIT_OK);
    make_data(&r, 300);
    r.sc.prefetch = 0;
    r.sc.aug_crop_pad = 2;
    r.sc.aug_hflip = 1;
    c.ladder = 1;
    c.limit = 256;
    c.repeats = 3;
    c.data_threshold = 0.01;
    if (bfit_probe_run(r.M, r.d, &r.sc, NULL, &c, res) != BFIT_OK)
        fail_msg("%s", bfit_errmsg());
    assert_int_equal(res->largest, 256);
    assert_false(res->next_refused); /* the limit, not memory */
    print_message("tiny model, no prefetch: %.0f%% of a step at %d waits for data\n", 100 * res->data_share,
                  res->rungs[res->recommended].m);
    assert_true(res->data_bound);
    bfit_probe_analyse(res, c.tolerance, 1.0);
    assert_false(res->data_bound);
    rig_free(&r);
    free(res);
}

/* Batch norm over vectors (BatchNorm1d after a linear layer) cannot train
 * on one sample: find plans every size (m = 1 too: the plan's intercept),
 * starts its ladder at 2, and confirms the largest with a real step. */
static void test_batchnorm_vectors(void **st)
{
    rig r;
    bfit_probe_cfg c = quick_cfg(BIG);
    bfit_probe_result *res = calloc(1, sizeof *res);
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
    bfit_graph_desc g;
    static const char bn1d[] = "input 33\nlinear 33\nbatchnorm\nrelu\nlinear 5\n";
    (void)st;

    assert_non_null(res);
    rig_device(&r, BIG);
    assert_int_equal(bfit_spec_parse(bn1d, sizeof bn1d - 1, "bn1d.cfg", &g), BFIT_OK);
    assert_int_equal(bfit_model_new(&g, r.dev, r.arena, &r.M), BFIT_OK);
    bfit_graph_fini(&g);
    assert_int_equal(bfit_model_alloc_params(r.M, 1), BFIT_OK);
    assert_int_equal(bfit_model_init_params(r.M, 1), BFIT_OK);
    assert_int_equal(bfit_model_min_batch(r.M), 2);
    make_data(&r, 300);
    c.ladder = 1;
    c.limit = 40;
    if (bfit_probe_run(r.M, r.d, &r.sc, &oc, &c, res) != BFIT_OK)
        fail_msg("%s", bfit_errmsg());
    assert_int_equal(res->largest, 40);
    assert_int_equal(res->nrungs, 6); /* 2, 4, 8, 16, 32, 40 */
    assert_int_equal(res->rungs[0].m, 2);
    assert_int_equal(res->rungs[5].m, 40);
    rig_free(&r);
    free(res);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_largest_mlp),
        cmocka_unit_test(test_largest_cnn),
        cmocka_unit_test(test_model_untouched),
        cmocka_unit_test(test_batch1_too_big),
        cmocka_unit_test(test_model_never_fits),
        cmocka_unit_test(test_bad_cfg),
        cmocka_unit_test(test_device_limit), cmocka_unit_test(test_disagreement_falls_back),
        cmocka_unit_test(test_others_holdings),
        cmocka_unit_test(test_analyse),
        cmocka_unit_test(test_data_bound),
        cmocka_unit_test(test_batchnorm_vectors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
