/* test_plan.c - the plan is the allocation: for every shipped model and
 * small preset, at several micro-batches and with each optimizer, a real
 * training step's measured arena peak equals the plan to the byte, in total
 * and per category (the model's statistics block in "other" included), and
 * the step, its input upload and its loss download allocate nothing after
 * the reserve. The arena is the device's, so this holds for the memory the
 * device really hands out (BFIT_DEVICE_CHECK=1 maps every block apart). The
 * solver is tight (its m runs within the capacity, m + 1 is refused without
 * a trace), eval plans less than training, reuse saves memory, and planning
 * the big presets allocates nothing. */
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>
#include "internal.h"

#include "base/testctl.h"
#include "batch/plan.h"
#include "batch/solve.h"
#include "nn/spec.h"
#include "nn/zoo.h"
#include "tfiles.h"
#include "trig.h"

#define BIG ((uint64_t)16 << 30) /* accounting only: the arena allocates on demand */

static char models_dir[512];

static int setup(void **st)
{
    (void)st;
    src_path(models_dir, sizeof models_dir, "models");
    return 0;
}

/* Device (2 threads), an arena over its memory and a model. */
typedef trig rig;

/* A rig for a preset name, a file under models/ or one under the source
 * tree (a path with a '/'). */
static void rig_new(rig *r, const char *model, uint64_t capacity)
{
    char path[600];
    const char *src = model;
    if (strchr(model, '/')) {
        src_path(path, sizeof path, model);
        src = path;
    } else if (strstr(model, ".cfg")) {
        snprintf(path, sizeof path, "%s/%s", models_dir, model);
        src = path;
    }
    trig_open(r, 2, capacity);
    trig_load(r, src);
}

static uint64_t rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* Random samples and valid labels, uploaded into the reserved input block. */
static void fill_input(bfit_model *M, int m, uint64_t seed)
{
    int64_t n = (int64_t)m * bfit_shape_numel(M->input);
    float *x = malloc((size_t)n * sizeof *x);
    int32_t *lab = malloc((size_t)m * sizeof *lab);
    assert_true(x && lab);
    assert_true(bfit_dtype_is_float(M->input_dtype)); /* 16-bit inputs are converted from f32 */
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)((double)rnd(&seed) / 2147483648.0 - 0.5);
    for (int i = 0; i < m; i++)
        lab[i] = (int32_t)(rnd(&seed) % (uint64_t)M->nclasses);
    assert_int_equal(bfit_model_set_input(M, x, lab, m), BFIT_OK);
    free(x);
    free(lab);
}

/* The summed loss of the forwards since the statistics were last reset. */
static double loss_sum(bfit_model *M)
{
    double loss = -1;
    assert_int_equal(bfit_model_stats_read(M, &loss, NULL), BFIT_OK);
    return loss;
}

static void assert_measured_is_planned(const char *what, const bfit_arena_stats *s, const bfit_step_plan *p)
{
    if (s->peak != p->peak)
        print_message("%s: measured peak %llu, planned %llu\n", what, (unsigned long long)s->peak,
                      (unsigned long long)p->peak);
    assert_int_equal(s->peak, p->peak);
    assert_int_equal(p->bytes[BFIT_MEM_OTHER], BFIT_MODEL_STATS_BYTES);
    for (int c = 0; c < BFIT_MEM_NCAT; c++) {
        uint64_t want = p->bytes[c];
        if (s->peak_cat[c] != want)
            print_message("%s: %s measured %llu, planned %llu\n", what, bfit_mem_cat_name((bfit_mem_cat)c),
                          (unsigned long long)s->peak_cat[c], (unsigned long long)want);
        assert_int_equal(s->peak_cat[c], want);
    }
}

/* One training step (forward, backward, optimizer) at micro-batch m, from
 * an empty arena, stored as st says (NULL: the default; auto for target
 * within budget, target 0: auto's largest batch); returns after checking
 * measured against planned. */
static void measured_step_st(const char *model, const bfit_optim_cfg *oc, int m, const bfit_storage *st,
                             uint64_t budget, int target)
{
    rig r;
    bfit_step_plan p;
    bfit_arena_stats s0, s1;
    double loss;
    char what[160];

    snprintf(what, sizeof what, "%s %s(momentum %g) m=%d", model, bfit_optim_kind_name(oc->kind), oc->momentum,
             m);
    rig_new(&r, model, BIG);
    if (st) {
        bfit_storage got;
        assert_int_equal(bfit_model_set_storage(r.M, st, oc, budget, target), BFIT_OK);
        got = bfit_model_storage(r.M);
        snprintf(what + strlen(what), sizeof what - strlen(what), " %s%s recompute %s->%s",
                 bfit_dtype_name(got.precision), got.lean ? " lean" : "", bfit_recompute_name(st->recompute),
                 bfit_recompute_name(got.recompute));
    }
    bfit_arena_reset_peak(r.arena);
    bfit_arena_stats_get(r.arena, &s0);
    assert_int_equal(s0.current, 0);
    assert_int_equal(s0.peak, 0);

    assert_int_equal(bfit_plan_compute(r.M, oc, m, 1, &p), BFIT_OK);
    assert_int_equal(p.peak, p.fixed + p.step);
    assert_int_equal(bfit_model_alloc_params(r.M, 1), BFIT_OK);
    assert_int_equal(bfit_model_init_params(r.M, 7), BFIT_OK);
    assert_int_equal(bfit_optim_new(oc, r.M->trainable, r.M->ntrainable, r.dev, r.arena, &r.opt), BFIT_OK);
    assert_int_equal(bfit_model_reserve(r.M, m, 1), BFIT_OK);
    bfit_arena_stats_get(r.arena, &s0);
    /* everything is held once reserved */
    assert_int_equal(s0.current, p.peak);

    fill_input(r.M, m, 99 + (uint64_t)m);
    assert_int_equal(bfit_model_forward(r.M, 5), BFIT_OK);
    loss = loss_sum(r.M);
    assert_true(loss > 0 && loss < 1e9);
    assert_int_equal(bfit_model_backward(r.M, 1.0f / (float)m), BFIT_OK);
    assert_int_equal(bfit_optim_step(r.opt, 0.01), BFIT_OK);

    bfit_arena_stats_get(r.arena, &s1);
    if (s1.nalloc != s0.nalloc)
        print_message("%s: the step made %llu allocations after the reserve\n", what,
                      (unsigned long long)(s1.nalloc - s0.nalloc));
    assert_int_equal(s1.nalloc, s0.nalloc);
    assert_int_equal(s1.nfree, s0.nfree);
    assert_measured_is_planned(what, &s1, &p);
    trig_free(&r);
}

static void measured_step(const char *model, const bfit_optim_cfg *oc, int m)
{
    measured_step_st(model, oc, m, NULL, 0, m);
}

/* The planned peak of model at m stored as st (auto: at its largest). */
static uint64_t planned_peak(const char *model, const bfit_optim_cfg *oc, int m, bfit_storage st)
{
    rig r;
    bfit_step_plan p;
    rig_new(&r, model, BIG);
    assert_int_equal(bfit_model_set_storage(r.M, &st, oc, BIG, 0), BFIT_OK);
    assert_int_equal(bfit_plan_compute(r.M, oc, m, 1, &p), BFIT_OK);
    trig_free(&r);
    return p.peak;
}

/* Every way of storing a step (precision, lean or not, each recomputation,
 * auto between keeping all and keeping least) is planned to the byte. */
static void test_measured_equals_planned_storage(void **st)
{
    static const char *models[] = {"cnn.cfg", "resnet-mini.cfg"};
    static const bfit_dtype prec[] = {BFIT_F32, BFIT_BF16};
    static const bfit_recompute_kind rk[] = {BFIT_RECOMPUTE_NONE, BFIT_RECOMPUTE_BLOCKS, BFIT_RECOMPUTE_SQRT,
                                             BFIT_RECOMPUTE_AUTO};
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
    (void)st;
    for (unsigned i = 0; i < 2; i++)
        for (unsigned p = 0; p < 2; p++)
            for (int lean = 0; lean <= 1; lean++)
                for (unsigned k = 0; k < sizeof rk / sizeof rk[0]; k++) {
                    bfit_storage s = {prec[p], lean, rk[k]}, none = s, least = s;
                    uint64_t budget = 0;
                    none.recompute = BFIT_RECOMPUTE_NONE;
                    least.recompute = BFIT_RECOMPUTE_AUTO;
                    if (rk[k] == BFIT_RECOMPUTE_AUTO) /* halfway: some recomputation, not all */
                        budget = (planned_peak(models[i], &oc, 24, none) + planned_peak(models[i], &oc, 24, least)) / 2;
                    measured_step_st(models[i], &oc, 24, &s, budget, 24);
                }
}

/* Recompute auto's walk takes the best pair of moves where no single one
 * frees memory (dropping two adjacent cuts: one segment regenerated from
 * further back): on ResNet-50's shape its largest batch is larger than with
 * single moves alone, and the values it keeps are planned to the byte. */
static void test_auto_pair_moves(void **st)
{
    static const char *model = "tests/fixtures/bottleneck-mini.cfg";
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
    bfit_storage sto = {BFIT_BF16, 1, BFIT_RECOMPUTE_AUTO};
    uint64_t budget = (uint64_t)64 << 20;
    int m[2];
    (void)st;
    for (int single = 0; single < 2; single++) {
        rig r;
        bfit_test_control(BFIT_TC_SINGLE_MOVES, single);
        rig_new(&r, model, BIG);
        assert_int_equal(bfit_model_set_storage(r.M, &sto, &oc, budget, 0), BFIT_OK);
        assert_int_equal(bfit_plan_max_batch(r.M, &oc, 1, budget, BFIT_PLAN_LIMIT, &m[single], NULL), BFIT_OK);
        trig_free(&r);
    }
    bfit_test_control(BFIT_TC_SINGLE_MOVES, 0);
    print_message("bottleneck-mini bf16 auto in 64 MiB: %d with pairs, %d with single moves\n", m[0], m[1]);
    assert_true(m[0] > m[1]);
    measured_step_st(model, &oc, 32, &sto, budget, 0);
}

static const char *small_models[] = {"mlp.cfg", "cnn.cfg", "mlp", "cnn"};
static const int sizes[] = {1, 7, 32, 128};

static void test_measured_equals_planned_sgd(void **st)
{
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD); /* momentum 0.9: one state tensor */
    (void)st;
    assert_true(oc.momentum > 0);
    for (unsigned i = 0; i < sizeof small_models / sizeof small_models[0]; i++)
        for (unsigned j = 0; j < sizeof sizes / sizeof sizes[0]; j++)
            measured_step(small_models[i], &oc, sizes[j]);
}

static void test_measured_equals_planned_adamw(void **st)
{
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_ADAMW);
    (void)st;
    for (unsigned i = 0; i < sizeof small_models / sizeof small_models[0]; i++)
        for (unsigned j = 0; j < sizeof sizes / sizeof sizes[0]; j++)
            measured_step(small_models[i], &oc, sizes[j]);
}

/* Plain SGD has no state: the plan's optimizer category is 0 and so is the
 * arena's. */
static void test_measured_equals_planned_plain_sgd(void **st)
{
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
    rig r;
    bfit_step_plan p;
    (void)st;
    oc.momentum = 0;
    measured_step("cnn", &oc, 7);
    rig_new(&r, "mlp", BIG);
    assert_int_equal(bfit_plan_compute(r.M, &oc, 3, 1, &p), BFIT_OK);
    assert_int_equal(p.bytes[BFIT_MEM_OPTIMIZER], 0);
    trig_free(&r);
}

/* ResNet-18 at 3x224x224 (batch norm, residual adds with and without a
 * projection, strided convs): one small micro-batch keeps it a few seconds. */
static void test_measured_equals_planned_resnet18(void **st)
{
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
    (void)st;
    measured_step("resnet18", &oc, 2);
}

/* An eval step (no gradients, no optimizer) is planned too, and less. */
static void test_eval_measured_and_smaller(void **st)
{
    const char *models[] = {"mlp.cfg", "cnn.cfg", "mlp", "cnn"};
    (void)st;
    for (unsigned i = 0; i < 4; i++)
        for (unsigned j = 0; j < sizeof sizes / sizeof sizes[0]; j++) {
            rig r;
            bfit_step_plan pe, pt;
            bfit_arena_stats s0, s1;
            bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
            int m = sizes[j];
            char what[64];
            snprintf(what, sizeof what, "%s eval m=%d", models[i], m);
            rig_new(&r, models[i], BIG);
            assert_int_equal(bfit_plan_compute(r.M, NULL, m, 0, &pe), BFIT_OK);
            assert_int_equal(bfit_plan_compute(r.M, &oc, m, 1, &pt), BFIT_OK);
            assert_true(pe.peak < pt.peak);
            assert_int_equal(pe.bytes[BFIT_MEM_GRADS], 0);
            assert_int_equal(pe.bytes[BFIT_MEM_OPTIMIZER], 0);
            assert_int_equal(pe.bytes[BFIT_MEM_ACT_GRADS], 0);
            assert_true(pe.bytes[BFIT_MEM_ACTIVATIONS] <= pt.bytes[BFIT_MEM_ACTIVATIONS]);

            bfit_arena_reset_peak(r.arena);
            assert_int_equal(bfit_model_alloc_params(r.M, 0), BFIT_OK);
            assert_int_equal(bfit_model_init_params(r.M, 3), BFIT_OK);
            assert_int_equal(bfit_model_reserve(r.M, m, 0), BFIT_OK);
            bfit_arena_stats_get(r.arena, &s0);
            fill_input(r.M, m, 5);
            assert_int_equal(bfit_model_forward(r.M, 1), BFIT_OK);
            assert_true(loss_sum(r.M) > 0);
            bfit_arena_stats_get(r.arena, &s1);
            assert_int_equal(s1.nalloc, s0.nalloc);
            assert_measured_is_planned(what, &s1, &pe);
            trig_free(&r);
        }
}

/* Sharing buffers whose lifetimes do not overlap saves memory. */
static void test_reuse_saves(void **st)
{
    rig r;
    bfit_step_plan p;
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
    (void)st;
    rig_new(&r, "mlp", BIG);
    for (int m = 1; m <= 128; m *= 4) {
        assert_int_equal(bfit_plan_compute(r.M, &oc, m, 1, &p), BFIT_OK);
        assert_true(p.no_reuse > p.peak);
        /* the fixed part is never shared: all the saving is in the step */
        assert_true(p.no_reuse - p.fixed > p.step);
    }
    /* eval reuses activations down the network */
    assert_int_equal(bfit_plan_compute(r.M, NULL, 64, 0, &p), BFIT_OK);
    assert_true(p.no_reuse > p.peak);
    trig_free(&r);
}

/* The solver at a capacity that binds: the plan at m = 37 plus a few bytes.
 * It answers 37; a real step at 37 runs in that capacity (the arena refuses
 * anything more, so success proves it); 38 is refused with the arena as it
 * was. */
static void solver_tight(const char *model, const bfit_optim_cfg *oc)
{
    rig r;
    bfit_step_plan p37, p38, p1;
    bfit_arena_stats before, after;
    uint64_t cap;
    int m = 0;

    rig_new(&r, model, BIG);
    assert_int_equal(bfit_plan_compute(r.M, oc, 37, 1, &p37), BFIT_OK);
    assert_int_equal(bfit_plan_compute(r.M, oc, 38, 1, &p38), BFIT_OK);
    cap = p37.peak + 5;
    assert_true(p38.peak > cap);
    assert_int_equal(bfit_plan_max_batch(r.M, oc, 1, cap, 1 << 20, &m, &p1), BFIT_OK);
    assert_int_equal(m, 37);
    assert_int_equal(p1.m, 1);
    /* exactly at the plan fits too; a byte less does not */
    assert_int_equal(bfit_plan_max_batch(r.M, oc, 1, p37.peak, 1 << 20, &m, NULL), BFIT_OK);
    assert_int_equal(m, 37);
    assert_int_equal(bfit_plan_max_batch(r.M, oc, 1, p37.peak - 1, 1 << 20, &m, NULL), BFIT_OK);
    assert_int_equal(m, 36);
    /* and the fraction form: 37 for this capacity as a fraction of twice it */
    assert_int_equal(bfit_plan_max_batch_fraction(r.M, oc, 1, 2 * cap, 0.5, 1 << 20, &m, NULL), BFIT_OK);
    assert_int_equal(m, 37);

    bfit_arena_set_capacity(r.arena, cap);
    assert_int_equal(bfit_model_alloc_params(r.M, 1), BFIT_OK);
    assert_int_equal(bfit_model_init_params(r.M, 1), BFIT_OK);
    assert_int_equal(bfit_optim_new(oc, r.M->trainable, r.M->ntrainable, r.dev, r.arena, &r.opt), BFIT_OK);

    /* 38 first, from a state with no step held: refused, nothing changes */
    bfit_arena_stats_get(r.arena, &before);
    assert_int_equal(bfit_model_reserve(r.M, 38, 1), BFIT_ENOMEM);
    bfit_arena_stats_get(r.arena, &after);
    assert_int_equal(after.current, before.current);
    assert_int_equal(after.nalloc - after.nfree, before.nalloc - before.nfree);
    assert_true(after.nfail > before.nfail);
    for (int c = 0; c < BFIT_MEM_NCAT; c++)
        assert_int_equal(after.cur[c], before.cur[c]);
    assert_int_equal(r.M->m, 0);

    /* 37 runs a whole step within the capacity */
    assert_int_equal(bfit_model_reserve(r.M, 37, 1), BFIT_OK);
    fill_input(r.M, 37, 11);
    assert_int_equal(bfit_model_forward(r.M, 2), BFIT_OK);
    assert_true(loss_sum(r.M) > 0);
    assert_int_equal(bfit_model_backward(r.M, 1.0f / 37), BFIT_OK);
    assert_int_equal(bfit_optim_step(r.opt, 0.01), BFIT_OK);
    bfit_arena_stats_get(r.arena, &after);
    assert_int_equal(after.peak, p37.peak);
    assert_true(after.peak <= cap);
    trig_free(&r);
}

static void test_solver_tight(void **st)
{
    bfit_optim_cfg sgd = bfit_optim_cfg_default(BFIT_OPT_SGD), adamw = bfit_optim_cfg_default(BFIT_OPT_ADAMW);
    (void)st;
    solver_tight("mlp.cfg", &sgd);
    solver_tight("cnn.cfg", &adamw);
}

/* Edges of the solver: nothing fits, everything fits up to the limit, and
 * the answer is the largest over a sweep of budgets. */
static void test_solver_edges(void **st)
{
    rig r;
    bfit_step_plan p1, p;
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
    int m;
    (void)st;
    rig_new(&r, "cnn", BIG);
    assert_int_equal(bfit_plan_compute(r.M, &oc, 1, 1, &p), BFIT_OK);
    assert_int_equal(bfit_plan_max_batch(r.M, &oc, 1, p.peak - 1, 1000, &m, &p1), BFIT_OK);
    assert_int_equal(m, 0);
    assert_int_equal(p1.peak, p.peak);
    assert_int_equal(bfit_plan_max_batch(r.M, &oc, 1, BIG, 300, &m, NULL), BFIT_OK);
    assert_int_equal(m, 300);
    assert_int_equal(bfit_plan_max_batch(r.M, &oc, 1, BIG, 0, &m, NULL), BFIT_EINVAL);
    assert_int_equal(bfit_plan_max_batch_fraction(r.M, &oc, 1, BIG, 0, 10, &m, NULL), BFIT_EINVAL);
    assert_int_equal(bfit_plan_max_batch_fraction(r.M, &oc, 1, BIG, 1.5, 10, &m, NULL), BFIT_EINVAL);
    for (uint64_t budget = 8 << 20; budget < (64 << 20); budget += 5 << 20) {
        bfit_step_plan pm, pn;
        assert_int_equal(bfit_plan_max_batch(r.M, &oc, 1, budget, 1 << 20, &m, NULL), BFIT_OK);
        assert_true(m >= 1);
        assert_int_equal(bfit_plan_compute(r.M, &oc, m, 1, &pm), BFIT_OK);
        assert_int_equal(bfit_plan_compute(r.M, &oc, m + 1, 1, &pn), BFIT_OK);
        assert_true(pm.peak <= budget);
        assert_true(pn.peak > budget);
    }
    trig_free(&r);
}

/* oneDNN's scratch can shrink as m grows (a plain-layout backward-weights
 * convolution on 2 threads took half as much at odd m as at even m), and
 * then the peak goes down from m to m + 1. On a model where the scratch is
 * a large part of the step, the solver's answer must be the largest m that
 * fits, found by brute force, for budgets at every plan; where the scratch
 * does not oscillate (the message says), this checks the monotonic case. */
static void test_solver_nonmonotonic_scratch(void **st)
{
    const char *text = "input 64x112x112\nconv 64 k=3 pad=1\ngap\nlinear 10\n";
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
    bfit_graph_desc g;
    rig r;
    uint64_t peak[41];
    int downs = 0;
    (void)st;
    trig_open(&r, 2, BIG);
    assert_int_equal(bfit_spec_parse(text, strlen(text), "t.cfg", &g), BFIT_OK);
    assert_int_equal(bfit_model_new(&g, r.dev, r.arena, &r.M), BFIT_OK);
    bfit_graph_fini(&g);
    for (int m = 1; m <= 40; m++) {
        bfit_step_plan p;
        assert_int_equal(bfit_plan_compute(r.M, &oc, m, 1, &p), BFIT_OK);
        peak[m] = p.peak;
        downs += m > 1 && peak[m] < peak[m - 1];
    }
    print_message("  the peak goes down %d times over m = 1..40\n", downs);
    for (int k = 1; k <= 30; k++) {
        int m, best = 0;
        assert_int_equal(bfit_plan_max_batch(r.M, &oc, 1, peak[k], 40, &m, NULL), BFIT_OK);
        for (int j = 1; j <= 40; j++)
            if (peak[j] <= peak[k])
                best = j;
        if (m != best)
            print_message("budget = peak(%d): solver %d, largest that fits %d\n", k, m, best);
        assert_int_equal(m, best);
    }
    trig_free(&r);
}

/* bfit_largest_under on needs of known shape: its answer fits, m + 1 and
 * the probes above do not (the guarantee bfit_largest_fit gives), and on
 * an affine need it asks far fewer sizes than bisection from [0, hi]. */
typedef struct synth {
    int kind, calls;
} synth;

static uint64_t synth_need(void *ud, int m)
{
    synth *s = ud;
    s->calls++;
    switch (s->kind) {
    case 0: return 1000 + 37 * (uint64_t)m;                              /* affine */
    case 1: return 5000 + 40 * (uint64_t)m + (m % 5 == 0 ? 0 : 300);     /* down at every fifth */
    case 2: return m > 5000 ? UINT64_MAX : 10 * (uint64_t)m;             /* cannot be made past 5000 */
    case 3: return 100;                                                  /* flat */
    default: return 800000 + 9000 * (uint64_t)m + 3 * (uint64_t)m * m / 1000; /* curving up */
    }
}

typedef struct synth_b {
    synth s;
    uint64_t budget;
} synth_b;

static int synth_b_fits(void *ud, int m)
{
    synth_b *b = ud;
    return synth_need(&b->s, m) <= b->budget;
}

static void test_solver_secant(void **st)
{
    const uint64_t budgets[] = {1037, 1100, 50000, 3700000, 123456789};
    const int hi = BFIT_PLAN_LIMIT;
    (void)st;
    for (int kind = 0; kind <= 4; kind++)
        for (unsigned bi = 0; bi < sizeof budgets / sizeof budgets[0]; bi++) {
            uint64_t budget = kind == 3 ? 100 : budgets[bi];
            synth s = {kind, 0};
            synth_b b = {{kind, 0}, budget};
            int lim = kind == 3 ? 300 : hi, m, mb;
            if (synth_need(&s, 1) > budget)
                continue;
            s.calls = 0;
            m = bfit_largest_under(synth_need, &s, budget, lim, 1, synth_need(&(synth){kind, 0}, 1));
            mb = bfit_largest_fit(synth_b_fits, &b, lim);
            assert_true(m >= 1 && m <= lim);
            assert_true(synth_need(&(synth){kind, 0}, m) <= budget);
            for (int k = m + 1; k <= m + BFIT_SOLVE_PROBE && k <= lim; k++)
                if (synth_need(&(synth){kind, 0}, k) <= budget)
                    fail_msg("need %d, budget %llu: answer %d, but %d fits", kind, (unsigned long long)budget, m, k);
            if (kind != 1) /* monotonic: one answer */
                assert_int_equal(m, mb);
            print_message("  need %d, budget %llu: %d in %d asks (bisection: %d in %d)\n", kind,
                          (unsigned long long)budget, m, s.calls, mb, b.s.calls);
            if (kind == 0 || kind == 4)
                assert_true(s.calls <= BFIT_SOLVE_PROBE + 4);
        }
    {
        synth s = {0, 0};
        /* no m0 that fits: bisection as bfit_largest_fit */
        assert_int_equal(bfit_largest_under(synth_need, &s, 1000 + 37 * 500, hi, 1, UINT64_MAX), 500);
        assert_int_equal(bfit_largest_under(synth_need, &s, 1000 + 37 * 500, 0, 1, 1037), 0);
        assert_int_equal(bfit_largest_under(synth_need, &s, 1000 + 37 * 500, 1, 1, 1037), 1);
        /* the whole int range: no overflow above it */
        assert_int_equal(bfit_largest_under(synth_need, &s, 1000 + 37 * 500, INT_MAX, 1, 1037), 500);
    }
}

static void test_budget_and_line(void **st)
{
    rig r;
    bfit_step_plan p[3];
    bfit_plan_line l;
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
    (void)st;
    assert_int_equal(bfit_plan_budget(1000, 0), 1000);
    assert_int_equal(bfit_plan_budget(1000, 0.1), 900);
    assert_int_equal(bfit_plan_budget(UINT64_MAX, 0), UINT64_MAX);

    rig_new(&r, "mlp", BIG);
    assert_int_equal(bfit_plan_compute(r.M, &oc, 16, 1, &p[0]), BFIT_OK);
    assert_int_equal(bfit_plan_line_fit(p, 1, &l), BFIT_EINVAL);
    assert_int_equal(bfit_plan_compute(r.M, &oc, 64, 1, &p[1]), BFIT_OK);
    assert_int_equal(bfit_plan_compute(r.M, &oc, 32, 1, &p[2]), BFIT_OK);
    assert_int_equal(bfit_plan_line_fit(p, 3, &l), BFIT_OK);
    assert_int_equal(l.m1, 16);
    assert_int_equal(l.m2, 64);
    assert_true(l.slope == ((double)p[1].peak - (double)p[0].peak) / 48);
    /* the mlp's per-sample bytes: its activations, their gradients and the input */
    assert_true(l.cat_slope[BFIT_MEM_PARAMS] == 0 && l.cat_slope[BFIT_MEM_OPTIMIZER] == 0);
    assert_true(l.cat_slope[BFIT_MEM_ACTIVATIONS] > 0 && l.cat_slope[BFIT_MEM_INPUT] >= 784 * 4);
    /* 16, 32, 64 are multiples of 16 floats' alignment: exactly on the line */
    assert_int_equal(l.max_dev, 0);
    trig_free(&r);
}

/* Planning the big presets allocates nothing and is quick. */
static void test_plan_big_presets_allocates_nothing(void **st)
{
    const char *names[] = {"resnet50", "vgg16"};
    (void)st;
    for (int i = 0; i < 2; i++) {
        rig r;
        bfit_step_plan p;
        bfit_arena_stats s;
        bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
        struct timespec t0, t1;
        int m;
        rig_new(&r, names[i], (uint64_t)11 << 30);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        assert_int_equal(bfit_plan_compute(r.M, &oc, 64, 1, &p), BFIT_OK);
        assert_int_equal(bfit_plan_max_batch(r.M, &oc, 1, bfit_plan_budget((uint64_t)11 << 30, 0.1), 1 << 20, &m,
                                             NULL),
                         BFIT_OK);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        print_message("  %s: m=64 peak %llu bytes; largest batch in 11 GiB less 10%%: %d; %.2f s\n", names[i],
                      (unsigned long long)p.peak, m,
                      (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
        assert_true(m > 1 && m < 1000);
        bfit_arena_stats_get(r.arena, &s);
        assert_int_equal(s.nalloc, 0);
        assert_int_equal(s.peak, 0);
        assert_int_equal(r.M->m, 0);
        trig_free(&r);
    }
}

/* The gradients of one step of resnet-mini (relu, batch norm, dropout,
 * residual adds: every in-place backward) at m, downloaded. */
static float *step_grads(rig *r, int m, int64_t *n)
{
    int64_t total = 0, at = 0;
    float *g;
    assert_int_equal(bfit_model_reserve(r->M, m, 1), BFIT_OK);
    assert_int_equal(bfit_model_zero_grads(r->M), BFIT_OK);
    fill_input(r->M, m, 5);
    assert_int_equal(bfit_model_forward(r->M, 9), BFIT_OK);
    assert_int_equal(bfit_model_backward(r->M, 1.0f / (float)m), BFIT_OK);
    for (int i = 0; i < r->M->ntrainable; i++)
        total += (int64_t)(bfit_param_bytes(r->M->trainable[i]) / sizeof(float));
    g = malloc((size_t)total * sizeof *g);
    assert_non_null(g);
    for (int i = 0; i < r->M->ntrainable; i++) {
        size_t b = bfit_param_bytes(r->M->trainable[i]);
        assert_int_equal(bfit_device_download(r->dev, g + at, r->M->trainable[i]->grad, b), BFIT_OK);
        at += (int64_t)(b / sizeof(float));
    }
    *n = total;
    return g;
}

/* A model configured as sc, its parameters made (seed 3), its plan at m and
 * the parameter gradients of a step. */
static float *fresh_grads(rig *r, const bfit_store_cfg *sc, int m, bfit_step_plan *plan, int64_t *n)
{
    assert_int_equal(bfit_model_configure(r->M, sc), BFIT_OK);
    assert_int_equal(bfit_model_alloc_params(r->M, 1), BFIT_OK);
    assert_int_equal(bfit_model_init_params(r->M, 3), BFIT_OK);
    assert_int_equal(bfit_plan_compute(r->M, NULL, m, 1, plan), BFIT_OK);
    return step_grads(r, m, n);
}

/* The plans at m = 16 before and after *flag is set (a test switch of the
 * layout), and the parameter gradients of a step under each, which must be
 * the same bit for bit (test builds poison new arena memory, so a buffer
 * written while another still needed its bytes would show). */
static void same_grads_when(rig *r, int *flag, bfit_step_plan *before, bfit_step_plan *after)
{
    int64_t n1, n2;
    float *a, *b;
    assert_int_equal(bfit_model_alloc_params(r->M, 1), BFIT_OK);
    assert_int_equal(bfit_model_init_params(r->M, 3), BFIT_OK);
    assert_int_equal(bfit_plan_compute(r->M, NULL, 16, 1, before), BFIT_OK);
    a = step_grads(r, 16, &n1);
    bfit_model_unreserve(r->M);
    *flag = 1;
    assert_int_equal(bfit_plan_compute(r->M, NULL, 16, 1, after), BFIT_OK);
    b = step_grads(r, 16, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, (size_t)n1 * sizeof *a);
    free(a);
    free(b);
}

/* Activation gradients written in place (relu, dropout, batch norm, add's
 * first input take their output gradient's bytes) give the same gradients,
 * bit for bit, as every gradient in bytes of its own, in less memory. */
static void test_inplace_gradients(void **st)
{
    rig r;
    bfit_step_plan pin, pout;
    (void)st;
    rig_new(&r, "resnet-mini.cfg", BIG);
    same_grads_when(&r, &r.M->no_inplace, &pin, &pout);
    assert_true(pin.no_reuse < pout.no_reuse); /* fewer gradient buffers: some were shared in place */
    trig_free(&r);
}

/* Activation gradients take bytes that activations no longer need: the step
 * block is smaller than with the gradients placed apart, and the parameter
 * gradients are the same bit for bit. Also with regenerated segments, whose
 * copies live only in backward. */
static void test_grads_share_activations(void **st)
{
    static const bfit_recompute_kind rk[] = {BFIT_RECOMPUTE_NONE, BFIT_RECOMPUTE_SQRT};
    (void)st;
    for (int i = 0; i < 2; i++) {
        rig r;
        bfit_step_plan joint, apart;
        bfit_storage sto = bfit_storage_default();
        rig_new(&r, "resnet-mini.cfg", BIG);
        sto.recompute = rk[i];
        assert_int_equal(bfit_model_set_storage(r.M, &sto, NULL, BIG, 16), BFIT_OK);
        same_grads_when(&r, &r.M->grads_apart, &joint, &apart);
        assert_int_equal(joint.bytes[BFIT_MEM_ACTIVATIONS], apart.bytes[BFIT_MEM_ACTIVATIONS]);
        assert_true(joint.bytes[BFIT_MEM_ACT_GRADS] < apart.bytes[BFIT_MEM_ACT_GRADS]);
        assert_int_equal(joint.no_reuse, apart.no_reuse);
        trig_free(&r);
    }
}

/* model at 16 in precision prec, configured to keep cheap layers' outputs
 * and then (lean) not: the parameter gradients of a step must be the same
 * bit for bit and the peak smaller; returns how many regenerated values
 * are outputs of a layer of one of the n kinds k. */
static int regen_against_kept(const char *model, bfit_dtype prec, const bfit_layer_kind *k, int n)
{
    bfit_store_cfg sc = bfit_store_cfg_default();
    bfit_step_plan kept, regen;
    bfit_layout lay;
    int64_t n1, n2;
    int count = 0;
    float *a, *b;
    rig r;
    rig_new(&r, model, BIG);
    sc.precision = prec;
    sc.keep_cheap = 1;
    assert_int_equal(bfit_model_configure(r.M, &sc), BFIT_OK);
    assert_int_equal(bfit_model_alloc_params(r.M, 1), BFIT_OK);
    assert_int_equal(bfit_model_init_params(r.M, 3), BFIT_OK);
    assert_int_equal(bfit_plan_compute(r.M, NULL, 16, 1, &kept), BFIT_OK);
    a = step_grads(&r, 16, &n1);
    bfit_model_unreserve(r.M);
    sc.keep_cheap = 0;
    assert_int_equal(bfit_model_configure(r.M, &sc), BFIT_OK);
    assert_int_equal(bfit_plan_compute(r.M, NULL, 16, 1, &regen), BFIT_OK);
    b = step_grads(&r, 16, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, (size_t)n1 * sizeof *a);
    assert_true(regen.peak < kept.peak);
    assert_int_equal(bfit_model_layout(r.M, 16, 1, &lay), BFIT_OK);
    for (int t = 0; t < lay.nact; t++) {
        for (int j = 0; j < n && lay.act[t].kind == BFIT_ACT_REGEN; j++)
            count += r.M->nodes[lay.act[t].node].l->cfg.kind == k[j];
    }
    print_message("%s %s at 16: peak %llu kept, %llu regenerated; %d regenerated of the kinds asked\n", model,
                  bfit_dtype_name(prec), (unsigned long long)kept.peak, (unsigned long long)regen.peak, count);
    bfit_layout_fini(&lay);
    free(a);
    free(b);
    trig_free(&r);
    return count;
}

/* Lean regenerates in backward what cheap layers compute from values kept
 * anyway (block outputs relu(bn(conv) + shortcut), max pools): the
 * gradients are the same bit for bit as keeping those values, the step is
 * smaller, and the schedule regenerates residual adds. resnet-mini at 16,
 * f32 and bf16 (measured = planned for it: the storage test above). */
static void test_cheap_regen_same_grads(void **st)
{
    static const bfit_layer_kind add = BFIT_L_ADD;
    (void)st;
    assert_true(regen_against_kept("resnet-mini.cfg", BFIT_F32, &add, 1) >= 2);
    assert_true(regen_against_kept("resnet-mini.cfg", BFIT_BF16, &add, 1) >= 2);
}

/* The same with silu, sigmoid and tanh after batch norms
 * (tests/fixtures/smooth-mini.cfg): lean regenerates their outputs, the
 * gradients are those of keeping them bit for bit, the step is smaller and
 * measured = planned; f32 and bf16. */
static void test_cheap_regen_smooth(void **st)
{
    static const char *model = "tests/fixtures/smooth-mini.cfg";
    static const bfit_dtype prec[] = {BFIT_F32, BFIT_BF16};
    static const bfit_layer_kind smooth[] = {BFIT_L_SILU, BFIT_L_SIGMOID, BFIT_L_TANH};
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
    (void)st;
    for (int i = 0; i < 2; i++) {
        bfit_storage sto = {prec[i], 1, BFIT_RECOMPUTE_NONE};
        assert_true(regen_against_kept(model, prec[i], smooth, 3) >= 1);
        measured_step_st(model, &oc, 16, &sto, 0, 16);
    }
}

/* The same with leakyrelu, elu, softplus, selu and celu (their parameters not
 * PyTorch's defaults) after batch norms (tests/fixtures/param-act-mini.cfg):
 * each output regenerated from its input, kept for the backward anyway;
 * measured = planned, lean or not, each recomputation; f32 and bf16. */
static void test_cheap_regen_param_act(void **st)
{
    static const char *model = "tests/fixtures/param-act-mini.cfg";
    static const bfit_dtype prec[] = {BFIT_F32, BFIT_BF16};
    static const bfit_layer_kind kinds[] = {BFIT_L_LEAKYRELU, BFIT_L_ELU, BFIT_L_SOFTPLUS, BFIT_L_SELU, BFIT_L_CELU};
    static const bfit_recompute_kind rk[] = {BFIT_RECOMPUTE_NONE, BFIT_RECOMPUTE_BLOCKS, BFIT_RECOMPUTE_SQRT};
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
    (void)st;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(regen_against_kept(model, prec[i], kinds, 5), 5);
        for (int lean = 0; lean <= 1; lean++)
            for (unsigned k = 0; k < sizeof rk / sizeof rk[0]; k++) {
                bfit_storage sto = {prec[i], lean, rk[k]};
                measured_step_st(model, &oc, 16, &sto, 0, 16);
            }
    }
}

/* A transformer's MLP block: lean regenerates gelu's output (fc2's input)
 * from fc1's, which gelu's backward reads anyway; the same gradients bit
 * for bit as keeping it, a smaller step, measured = planned; f32 and bf16
 * (tests/fixtures/gelu-mini.cfg). */
static void test_cheap_regen_gelu(void **st)
{
    static const char *model = "tests/fixtures/gelu-mini.cfg";
    static const bfit_dtype prec[] = {BFIT_F32, BFIT_BF16};
    static const bfit_layer_kind gelu = BFIT_L_GELU;
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_ADAMW);
    (void)st;
    for (int i = 0; i < 2; i++) {
        bfit_storage sto = {prec[i], 1, BFIT_RECOMPUTE_NONE};
        assert_int_equal(regen_against_kept(model, prec[i], &gelu, 1), 2);
        measured_step_st(model, &oc, 16, &sto, 0, 16);
    }
}

/* MobileNetV3's and EfficientNet's parts (tests/fixtures/se-mini.onnx:
 * hardswish, squeeze-and-excitation gates by hardsigmoid and sigmoid, SiLU):
 * lean regenerates the gated outputs x * s and the hardswish outputs (the
 * gate's input) from values kept anyway; the same gradients bit for bit as
 * keeping them, a smaller step, measured = planned; f32 and bf16. */
static void test_cheap_regen_se(void **st)
{
    static const char *model = "tests/fixtures/se-mini.onnx";
    static const bfit_dtype prec[] = {BFIT_F32, BFIT_BF16};
    static const bfit_layer_kind kinds[] = {BFIT_L_HARDSWISH, BFIT_L_SCALE};
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
    (void)st;
    for (int i = 0; i < 2; i++) {
        bfit_storage sto = {prec[i], 1, BFIT_RECOMPUTE_NONE};
        assert_true(regen_against_kept(model, prec[i], kinds, 2) >= 3);
        measured_step_st(model, &oc, 16, &sto, 0, 16);
    }
}

/* prelu after convolutions and between linear layers
 * (tests/fixtures/prelu-mini.cfg): lean regenerates each prelu's output
 * from its input, which its backward reads anyway; the same gradients bit
 * for bit as keeping them, a smaller step, and measured = planned, lean or
 * not, each recomputation; f32 and bf16. */
static void test_cheap_regen_prelu(void **st)
{
    static const char *model = "tests/fixtures/prelu-mini.cfg";
    static const bfit_dtype prec[] = {BFIT_F32, BFIT_BF16};
    static const bfit_layer_kind prelu = BFIT_L_PRELU;
    static const bfit_recompute_kind rk[] = {BFIT_RECOMPUTE_NONE, BFIT_RECOMPUTE_BLOCKS, BFIT_RECOMPUTE_SQRT};
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_ADAMW);
    (void)st;
    for (int i = 0; i < 2; i++) {
        assert_true(regen_against_kept(model, prec[i], &prelu, 1) >= 3);
        for (int lean = 0; lean <= 1; lean++)
            for (unsigned k = 0; k < sizeof rk / sizeof rk[0]; k++) {
                bfit_storage sto = {prec[i], lean, rk[k]};
                measured_step_st(model, &oc, 16, &sto, 0, 16);
            }
    }
}

/* The device's own block can be none: with AVX-512's bf16 instructions
 * oneDNN's bf16 convolutions take plain or channels-last data, not nChw16c
 * (the H200's host, 2026-12-04), so no layer chains in a block there, and a
 * test cannot force one either (store.c's choose_layouts). */
static void no_block(const char *model, bfit_dtype prec)
{
    print_message("%s %s: the device's convolutions want no block here: no layer marked\n", model,
                  bfit_dtype_name(prec));
}

/* The block M's chains are marked with: the forced one, else the device's
 * as bfit_model_pick_block takes it for M */
static int chain_block(const bfit_model *M, bfit_device *dev, bfit_dtype prec, int force)
{
    int devB = bfit_device_layout_block(dev, prec), B = devB && force ? force : devB;
    if (devB && !force)
        assert_int_equal(bfit_model_pick_block(M, devB, &B), BFIT_OK);
    return B;
}

/* On the cpu the cnn's activations between its convolutions, relus and max
 * pools stay blocked (store.c), in the block the device's convolutions
 * compute in (8 with AVX2, 16 with AVX-512) or, as a test may force, the
 * other: the layers that chain so are marked with it, the gradients of a
 * step are those of plain nchw activations bit for bit (the same numbers
 * in another order), and no bytes are added: the plan at 32 is the plain
 * one's or smaller (no reorder scratch). f32 and bf16. */
static void test_blocked_same_grads(void **st)
{
    static const bfit_dtype prec[] = {BFIT_F32, BFIT_BF16};
    static const int force[] = {0, 8, 16}; /* the device's, then each */
    (void)st;
    for (int i = 0; i < 2; i++) {
        bfit_store_cfg sc = bfit_store_cfg_default();
        bfit_step_plan plain;
        int64_t n1;
        float *a;
        rig r;
        rig_new(&r, "cnn", BIG);
        sc.precision = prec[i];
        bfit_test_control(BFIT_TC_LAYOUT, 1);
        a = fresh_grads(&r, &sc, 32, &plain, &n1);
        for (int j = 0; j < r.M->n; j++)
            assert_false(r.M->nodes[j].l->blk_in || r.M->nodes[j].l->blk_out);
        bfit_model_unreserve(r.M);
        for (int f = 0; f < 3; f++) {
            int B = chain_block(r.M, r.dev, prec[i], force[f]), marked = 0;
            bfit_step_plan blocked;
            int64_t n2;
            float *b;
            assert_true(B == 8 || B == 16 || B == 0);
            bfit_test_control(BFIT_TC_LAYOUT, force[f]);
            assert_int_equal(bfit_model_configure(r.M, &sc), BFIT_OK);
            /* as it runs (model.c): conv 32 -> pool -> relu -> conv 64 -> pool (nchw out) -> relu -> flatten */
            for (int j = 0; j < r.M->n; j++) {
                const bfit_layer *l = r.M->nodes[j].l;
                assert_true((l->blk_in == 0 || l->blk_in == B) && (l->blk_out == 0 || l->blk_out == B));
                marked += (l->blk_in != 0) + (l->blk_out != 0);
            }
            if (B == 0) { /* no_block(): nothing chains */
                assert_int_equal(marked, 0);
                no_block("cnn", prec[i]);
                bfit_model_unreserve(r.M);
                continue;
            }
            /* conv1 out; pool1, relu1, conv2 in and out; pool2 in (its out is nchw: relu2 then flatten) */
            assert_int_equal(marked, 8);
            assert_int_equal(bfit_plan_compute(r.M, NULL, 32, 1, &blocked), BFIT_OK);
            b = step_grads(&r, 32, &n2);
            assert_int_equal(n1, n2);
            assert_memory_equal(a, b, (size_t)n1 * sizeof *a);
            assert_true(blocked.peak <= plain.peak);
            print_message("cnn %s at 32: peak %llu plain, %llu nChw%dc%s\n", bfit_dtype_name(prec[i]),
                          (unsigned long long)plain.peak, (unsigned long long)blocked.peak, B,
                          force[f] ? "" : " (the device's)");
            bfit_model_unreserve(r.M);
            free(b);
        }
        bfit_test_control(BFIT_TC_LAYOUT, 0);
        free(a);
        trig_free(&r);
    }
}

/* Checks a blocked configuration of block B (layers marked as the test
 * expects) and returns the largest relative difference from the plain
 * layout's gradients it allows. */
typedef double (*blk_check)(const bfit_model *M, int B, bfit_dtype prec);

/* Batch norms, residual adds and depthwise convolutions join the layout
 * chains: resnet-mini (batch norms, adds) and dw-mini (tests/fixtures:
 * MobileNetV2's inverted residual blocks), f32 and bf16, the device's
 * block and each forced one against nchw. A batch norm sums a channel's
 * values in another order in a block (and bf16's computes y in f32 where
 * nchw's does in double), so the gradients agree to rounding, not bit for
 * bit: within 1e-3 of each tensor's largest gradient in f32 (sums of
 * 16 x 28 x 28 terms err by far less). bf16's gradients carry bf16's
 * roundings through every layer, so there the yardstick is bf16's own
 * error: blocked within twice nchw bf16's distance from nchw f32 (and 1e-3)
 * per tensor. A value or gradient in the wrong place errs by the gradients'
 * own size. A tensor whose nchw gradients all stay below a thousandth of
 * the model's largest (a convolution's bias before a batch norm: zero but
 * for rounding, which the block's sums change) must stay below it blocked
 * too (bf16: below its yardstick). */
static void blocked_grads(const char *model, bfit_dtype prec, int min_bn, int min_add, int min_dw, int min_scale,
                          blk_check marks)
{
    static const int force[] = {0, 8, 16};
    bfit_store_cfg sc = bfit_store_cfg_default();
    bfit_step_plan plain;
    int64_t n1, n32;
    float *a, *a32 = NULL;
    rig r;
    rig_new(&r, model, BIG);
    bfit_test_control(BFIT_TC_LAYOUT, 1);
    if (prec != BFIT_F32) { /* the yardstick: nchw f32 on the same weights (seed 3) and data */
        rig r32;
        rig_new(&r32, model, BIG);
        a32 = fresh_grads(&r32, &sc, 16, &plain, &n32);
        trig_free(&r32);
    }
    sc.precision = prec;
    a = fresh_grads(&r, &sc, 16, &plain, &n1);
    bfit_model_unreserve(r.M);
    assert_true(!a32 || n32 == n1);
    for (int f = 0; f < 3; f++) {
        int B = chain_block(r.M, r.dev, prec, force[f]);
        int bn = 0, add = 0, dw = 0, scale = 0;
        int marked = 0;
        double worst = 0, all = 0;
        bfit_step_plan blocked;
        int64_t n2, at = 0;
        float *b;
        bfit_test_control(BFIT_TC_LAYOUT, force[f]);
        assert_int_equal(bfit_model_configure(r.M, &sc), BFIT_OK);
        for (int j = 0; j < r.M->n; j++) {
            const bfit_layer *l = r.M->nodes[j].l;
            bn += l->cfg.kind == BFIT_L_BATCHNORM && l->blk_in == B && l->blk_out == B;
            add += l->cfg.kind == BFIT_L_ADD && l->blk_in == B;
            dw += l->cfg.kind == BFIT_L_CONV && l->cfg.groups > 1 && l->blk_in == B && l->blk_out == B;
            scale += l->cfg.kind == BFIT_L_SCALE && l->blk_in == B && l->blk_out == B;
            marked += (l->blk_in != 0) + (l->blk_out != 0);
        }
        if (B == 0) { /* no_block(): nothing chains */
            assert_int_equal(marked, 0);
            no_block(model, prec);
            bfit_model_unreserve(r.M);
            continue;
        }
        if (marks)
            marks(r.M, B, prec); /* its tolerance is for the plain layout's bits; here the yardstick's */
        /* resnet-mini: the stem's and every block's but where a value leaves for the pool */
        assert_true(bn >= min_bn);
        assert_true(add >= min_add);
        assert_true(dw >= min_dw);
        assert_true(scale >= min_scale);
        assert_int_equal(bfit_plan_compute(r.M, NULL, 16, 1, &blocked), BFIT_OK);
        b = step_grads(&r, 16, &n2);
        assert_int_equal(n1, n2);
        for (int64_t e = 0; e < n1; e++)
            all = fmax(all, fabs(a[e]));
        for (int i = 0; i < r.M->ntrainable; i++) {
            int64_t k = (int64_t)(bfit_param_bytes(r.M->trainable[i]) / sizeof(float));
            double big = 0, bigb = 0, own = 0, tol;
            for (int64_t e = at; e < at + k; e++)
                big = fmax(big, fabs(a[e])), bigb = fmax(bigb, fabs(b[e])),
                own = a32 ? fmax(own, fabs((double)a[e] - a32[e])) : 0;
            tol = 1e-3 + 2 * own / fmax(big, 1e-30);
            if (big < 1e-3 * all) { /* zero but for rounding */
                if (bigb >= 1e-3 * all + 2 * own)
                    fail_msg("%s %s nChw%dc: gradient %d reaches %.3g blocked, %.3g in nchw (the model's "
                             "largest %.3g)", model, bfit_dtype_name(prec), B, i, bigb, big, all);
                at += k;
                continue;
            }
            for (int64_t e = at; e < at + k; e++) {
                double q = fabs((double)a[e] - b[e]) / big;
                worst = fmax(worst, q / tol);
                if (q > tol)
                    fail_msg("%s %s nChw%dc: gradient %d [%lld] = %.9g, nchw %.9g (largest %.3g)", model,
                             bfit_dtype_name(prec), B, i, (long long)(e - at), b[e], a[e], big);
            }
            at += k;
        }
        assert_true(blocked.peak <= plain.peak);
        print_message("%s %s at 16: %d batch norms, %d adds, %d depthwise, %d channel scales in nChw%dc%s; worst "
                      "gradient difference / allowed %.2g; peak %llu plain, %llu blocked\n",
                      model, bfit_dtype_name(prec), bn, add, dw, scale, B, force[f] ? "" : " (the device's)", worst,
                      (unsigned long long)plain.peak, (unsigned long long)blocked.peak);
        bfit_model_unreserve(r.M);
        free(b);
    }
    bfit_test_control(BFIT_TC_LAYOUT, 0);
    free(a), free(a32);
    trig_free(&r);
}

static void test_blocked_bnorm_grads(void **st)
{
    (void)st;
    blocked_grads("resnet-mini.cfg", BFIT_F32, 6, 2, 0, 0, NULL);
    blocked_grads("resnet-mini.cfg", BFIT_BF16, 6, 2, 0, 0, NULL);
    blocked_grads("tests/fixtures/dw-mini.onnx", BFIT_F32, 7, 1, 2, 0, NULL);
    blocked_grads("tests/fixtures/dw-mini.onnx", BFIT_BF16, 7, 1, 2, 0, NULL);
    /* squeeze-and-excitation gates (MobileNetV3's, EfficientNet's) between a dense and a depthwise convolution */
    blocked_grads("tests/fixtures/se-mini.onnx", BFIT_F32, 2, 0, 1, 2, NULL);
    blocked_grads("tests/fixtures/se-mini.onnx", BFIT_BF16, 2, 0, 1, 2, NULL);
}

/* The largest over M's parameters of max |a - b| / max |a| (gradients in
 * the parameters' order, as fresh_grads gives them). */
static double worst_rel(const bfit_model *M, const float *a, const float *b)
{
    double worst = 0;
    int64_t at = 0;
    for (int i = 0; i < M->ntrainable; i++) {
        int64_t k = (int64_t)(bfit_param_bytes(M->trainable[i]) / sizeof(float));
        double big = 0, diff = 0;
        for (int64_t e = at; e < at + k; e++) {
            double d = fabs((double)a[e] - b[e]);
            big = fmax(big, fabs(a[e]));
            diff = fmax(diff, isnan(d) ? INFINITY : d); /* fmax would pass a NaN over */
        }
        worst = fmax(worst, diff / fmax(big, 1e-30));
        at += k;
    }
    return worst;
}


/* model at 16, f32 (and bf16, nprec 2): the plain layout's gradients,
 * then for the device's block and each forced one, check()'s marks and a
 * step's gradients within what check() allows. */
static void blocked_runs(const char *model, blk_check check, int nprec)
{
    static const bfit_dtype prec[] = {BFIT_F32, BFIT_BF16};
    static const int force[] = {0, 8, 16};
    for (int i = 0; i < nprec; i++) {
        bfit_store_cfg sc = bfit_store_cfg_default();
        bfit_step_plan plain, blocked;
        int64_t n1, n2;
        float *a, *b;
        rig r;
        rig_new(&r, model, BIG);
        sc.precision = prec[i];
        bfit_test_control(BFIT_TC_LAYOUT, 1);
        a = fresh_grads(&r, &sc, 16, &plain, &n1);
        bfit_model_unreserve(r.M);
        for (int f = 0; f < 3; f++) {
            int B = chain_block(r.M, r.dev, prec[i], force[f]);
            double tol, worst;
            bfit_test_control(BFIT_TC_LAYOUT, force[f]);
            assert_int_equal(bfit_model_configure(r.M, &sc), BFIT_OK);
            if (B == 0) {
                no_block(model, prec[i]);
                continue;
            }
            tol = check(r.M, B, prec[i]);
            assert_int_equal(bfit_plan_compute(r.M, NULL, 16, 1, &blocked), BFIT_OK);
            b = step_grads(&r, 16, &n2);
            assert_int_equal(n1, n2);
            worst = worst_rel(r.M, a, b);
            print_message("%s %s at 16 in nChw%dc: peak %llu plain, %llu blocked; gradients within %.3g of the "
                          "plain layout's (allowed %.3g)\n", model, bfit_dtype_name(prec[i]), B,
                          (unsigned long long)plain.peak, (unsigned long long)blocked.peak, worst, tol);
            if (tol == 0)
                assert_memory_equal(a, b, (size_t)n1 * sizeof *a); /* the bits, signed zeros too */
            assert_true(worst <= tol);
            bfit_model_unreserve(r.M);
            free(b);
        }
        bfit_test_control(BFIT_TC_LAYOUT, 0);
        free(a);
        trig_free(&r);
    }
}

/* prelu-mini: its per-channel and one-slope layers after the first two
 * convolutions take and give the block; bit for bit. */
static double prelu_marks(const bfit_model *M, int B, bfit_dtype prec)
{
    int n = 0;
    (void)prec;
    for (int j = 0; j < M->n; j++) {
        const bfit_layer *l = M->nodes[j].l;
        n += l->cfg.kind == BFIT_L_PRELU && l->blk_in == B && l->blk_out == B;
    }
    assert_int_equal(n, 2);
    return 0;
}

/* prelu joins the layout chains (store.c): in prelu-mini (no batch norm)
 * its per-channel and one-slope layers after the first two convolutions
 * take and give the device's block (or a forced one), and the gradients
 * of a step are the plain layout's bit for bit: the slopes' sums go row by
 * row in one order in either layout (cpu_prelu.c). f32 and bf16. */
static void test_blocked_prelu_same_grads(void **st)
{
    (void)st;
    blocked_runs("tests/fixtures/prelu-mini.cfg", prelu_marks, 2);
}

/* concat-mini: the concatenations of whole blocks take and give the block,
 * the one of 8 + 24 channels only in blocks of 8; the max pools and the
 * average pools too. f32 bit for bit, but where oneDNN's average pools run
 * blocked: its kernels for the two layouts may add a window in other orders
 * (seen: 1.06e-7 in nChw8c, 0 in nChw16c). */
static double concat_marks(const bfit_model *M, int B, bfit_dtype prec)
{
    int cat = 0, cats = 0, maxp = 0, avgp = 0;
    for (int j = 0; j < M->n; j++) {
        const bfit_layer *l = M->nodes[j].l;
        int in_blk = l->blk_in == B && l->blk_out == B;
        cats += l->cfg.kind == BFIT_L_CONCAT;
        cat += l->cfg.kind == BFIT_L_CONCAT && in_blk;
        maxp += l->cfg.kind == BFIT_L_MAXPOOL && in_blk;
        avgp += l->cfg.kind == BFIT_L_AVGPOOL && in_blk;
    }
    assert_int_equal(cats, 4);
    /* GoogLeNet's, DenseNet's two; the last (8 + 24) in blocks of 8 only */
    assert_int_equal(cat, B == 8 ? 4 : 3);
    /* the branch's 3x3/1 pools and the transition's 2x2/2, f32 and bf16 */
    (void)prec;
    assert_true(maxp >= 1);
    assert_int_equal(avgp, 2);
    print_message("concat-mini %s: %d of 4 concatenations in nChw%dc\n", bfit_dtype_name(prec), cat, B);
    return avgp ? 1e-6 : 0;
}

/* Concatenations along the channels join the layout chains (store.c): in
 * concat-mini (tests/fixtures/concat_mini.py: GoogLeNet's block with
 * Inception's average pool branch, DenseNet's reuse and transition, no
 * batch norm) the gradients of an f32 step are the plain layout's bit for
 * bit (the same copies and sums; an input read by two concatenations gets
 * both gradients added as in nchw), or within 1e-6 where an average pool is
 * blocked. In bf16 a blocked average pool is another computation than its
 * nchw one (oneDNN's jit:avx512_core_bf16 against jit:avx512_core where the
 * CPU has bf16, or f32 for overlapping windows: cpu_pool.c), so bf16 is
 * held to blocked_grads' yardstick: within twice nchw bf16's own distance
 * from nchw f32. The device's block and each forced one. */
static void test_blocked_concat_same_grads(void **st)
{
    (void)st;
    blocked_runs("tests/fixtures/concat-mini.onnx", concat_marks, 1);
    blocked_grads("tests/fixtures/concat-mini.onnx", BFIT_BF16, 0, 0, 0, 0, concat_marks);
}

/* grouped-mini: a convolution takes or gives the block where its groups'
 * channels are whole blocks on that side: in nChw8c all three grouped
 * convolutions both ways; in nChw16c the one of 16 a group both ways, the
 * one of 16 in and 32 out a group its input only (its output goes to the
 * relu before the one of 8 a group, which stays nchw). Bit for bit. */
static double grouped_marks(const bfit_model *M, int B, bfit_dtype prec)
{
    int n = 0, in = 0, out = 0;
    (void)prec;
    for (int j = 0; j < M->n; j++) {
        const bfit_layer *l = M->nodes[j].l;
        if (l->cfg.kind != BFIT_L_CONV || l->cfg.groups <= 1)
            continue;
        n++;
        in += l->blk_in == B;
        out += l->blk_out == B;
    }
    assert_int_equal(n, 3);
    assert_int_equal(in, B == 8 ? 3 : 2);
    assert_int_equal(out, B == 8 ? 3 : 1);
    return 0;
}

/* Grouped convolutions join the layout chains (store.c) where each group's
 * channels are whole blocks (ResNeXt's, RegNet's): the step's gradients are
 * the plain layout's bit for bit (oneDNN computes in the same blocked
 * layout either way, reordering the plain one). f32 and bf16, the device's
 * block and each forced. */
static void test_blocked_grouped_same_grads(void **st)
{
    (void)st;
    blocked_runs("tests/fixtures/grouped-mini.onnx", grouped_marks, 2);
}

/* regnet-mini (RegNet-Y's blocks, groups of 8 channels): in nChw8c the two
 * grouped convolutions take and give the block; in nChw16c neither. Bit for
 * bit. Where the device computes in 16, the model's chains use 8
 * (bfit_model_pick_block; chain_block expects it). */
static double regnet_marks(const bfit_model *M, int B, bfit_dtype prec)
{
    int n = 0, both = 0;
    (void)prec;
    for (int j = 0; j < M->n; j++) {
        const bfit_layer *l = M->nodes[j].l;
        if (l->cfg.kind != BFIT_L_CONV || l->cfg.groups <= 1)
            continue;
        n++;
        both += l->blk_in == B && l->blk_out == B;
        assert_true(B == 8 || (l->blk_in == 0 && l->blk_out == 0));
    }
    assert_int_equal(n, 2);
    assert_int_equal(both, B == 8 ? 2 : 0);
    return 0;
}

static void test_blocked_regnet_same_grads(void **st)
{
    (void)st;
    blocked_runs("tests/fixtures/regnet-mini.onnx", regnet_marks, 2);
}

/* The block per model (store.c bfit_model_pick_block): 16 halves to 8 where
 * blocks of 8 keep more than half of the convolutions' inputs and outputs
 * in chains that 16 leaves out (regnet-mini: about 60%), never with a
 * depthwise convolution (dw-mini); grouped-mini (one of three grouped
 * convolutions left out at 16), resnet-mini and the cnn keep 16; 8 and 0
 * (no blocks) stay. Whatever the machine: the device's own block is not asked. */
static void test_block_pick(void **st)
{
    static const struct {
        const char *model;
        int at16;
    } c[] = {{"tests/fixtures/regnet-mini.onnx", 8}, {"tests/fixtures/grouped-mini.onnx", 16},
             {"tests/fixtures/dw-mini.onnx", 16},    {"resnet-mini.cfg", 16},
             {"cnn", 16}};
    (void)st;
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        int pick = -1;
        rig r;
        rig_new(&r, c[i].model, BIG);
        assert_int_equal(bfit_model_pick_block(r.M, 16, &pick), BFIT_OK);
        assert_int_equal(pick, c[i].at16);
        assert_int_equal(bfit_model_pick_block(r.M, 8, &pick), BFIT_OK);
        assert_int_equal(pick, 8);
        assert_int_equal(bfit_model_pick_block(r.M, 0, &pick), BFIT_OK);
        assert_int_equal(pick, 0);
        trig_free(&r);
    }
}

/* The cnn's relus run after their max pools (graph.c): a step's loss and
 * gradients are those of the spec's order bit for bit, the relus cover the
 * pools' outputs, and the plan is smaller. f32 and bf16, at 32. */
static void test_pool_first_same_grads(void **st)
{
    static const bfit_dtype prec[] = {BFIT_F32, BFIT_BF16};
    (void)st;
    for (int i = 0; i < 2; i++) {
        bfit_store_cfg sc = bfit_store_cfg_default();
        bfit_step_plan spec_order, pool_first;
        int64_t n1, n2;
        float *a, *b;
        double la, lb;
        rig r;
        sc.precision = prec[i];
        bfit_test_control(BFIT_TC_KEEP_ORDER, 1);
        rig_new(&r, "cnn", BIG);
        bfit_test_control(BFIT_TC_KEEP_ORDER, 0);
        assert_int_equal(r.M->nodes[1].l->cfg.kind, BFIT_L_RELU);
        a = fresh_grads(&r, &sc, 32, &spec_order, &n1);
        la = loss_sum(r.M);
        trig_free(&r);
        rig_new(&r, "cnn", BIG);
        assert_int_equal(r.M->nodes[1].l->cfg.kind, BFIT_L_MAXPOOL);
        assert_int_equal(r.M->nodes[2].l->cfg.kind, BFIT_L_RELU);
        assert_int_equal(bfit_shape_numel(r.M->nodes[2].l->out) * 4, bfit_shape_numel(r.M->nodes[0].l->out));
        b = fresh_grads(&r, &sc, 32, &pool_first, &n2);
        lb = loss_sum(r.M);
        assert_int_equal(n1, n2);
        assert_memory_equal(&la, &lb, sizeof la);
        assert_memory_equal(a, b, (size_t)n1 * sizeof *a);
        assert_true(pool_first.peak < spec_order.peak);
        print_message("cnn %s at 32: peak %llu relu first, %llu pool first; loss %.6f\n", bfit_dtype_name(prec[i]),
                      (unsigned long long)spec_order.peak, (unsigned long long)pool_first.peak, lb);
        free(a);
        free(b);
        trig_free(&r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_measured_equals_planned_sgd),
        cmocka_unit_test(test_measured_equals_planned_storage),
        cmocka_unit_test(test_auto_pair_moves),
        cmocka_unit_test(test_inplace_gradients),
        cmocka_unit_test(test_grads_share_activations),
        cmocka_unit_test(test_cheap_regen_same_grads),
        cmocka_unit_test(test_cheap_regen_smooth),
        cmocka_unit_test(test_cheap_regen_param_act),
        cmocka_unit_test(test_cheap_regen_gelu),
        cmocka_unit_test(test_cheap_regen_se),
        cmocka_unit_test(test_cheap_regen_prelu),
        cmocka_unit_test(test_blocked_prelu_same_grads),
        cmocka_unit_test(test_blocked_same_grads),
        cmocka_unit_test(test_blocked_bnorm_grads),
        cmocka_unit_test(test_blocked_concat_same_grads),
        cmocka_unit_test(test_blocked_grouped_same_grads),
        cmocka_unit_test(test_blocked_regnet_same_grads),
        cmocka_unit_test(test_block_pick),
        cmocka_unit_test(test_pool_first_same_grads),
        cmocka_unit_test(test_measured_equals_planned_adamw),
        cmocka_unit_test(test_measured_equals_planned_plain_sgd),
        cmocka_unit_test(test_measured_equals_planned_resnet18),
        cmocka_unit_test(test_eval_measured_and_smaller),
        cmocka_unit_test(test_reuse_saves),
        cmocka_unit_test(test_solver_tight),
        cmocka_unit_test(test_solver_edges),
        cmocka_unit_test(test_solver_nonmonotonic_scratch),
        cmocka_unit_test(test_solver_secant),
        cmocka_unit_test(test_budget_and_line),
        cmocka_unit_test(test_plan_big_presets_allocates_nothing),
    };
    /* CTest runs the recompute search apart (test_plan_auto): under the
     * sanitizers it is most of this program's time */
    if (getenv("BFIT_TEST_ONLY"))
        cmocka_set_test_filter(getenv("BFIT_TEST_ONLY"));
    if (getenv("BFIT_TEST_SKIP"))
        cmocka_set_skip_filter(getenv("BFIT_TEST_SKIP"));
    return cmocka_run_group_tests(tests, setup, NULL);
}
