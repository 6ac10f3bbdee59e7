/* test_control.c - the batch controller driven by made-up observations, no
 * tensors: the micro-batch from an affine plan (fixed + per_sample * m) and a
 * capacity; OOM recovery to exactly the largest fitting m with E unchanged;
 * accumulation that covers E exactly; shrinking when capacity drops and
 * growing back only after the hysteresis and only when throughput favours
 * it; no flapping; batch schedules with lr scaling and re-warmup; adaptive E
 * following a made-up noise scale within bounds; a reason for every change;
 * config and schedule-string errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batchfit.h"
#include "internal.h"
#include "batch/control_state.h"

/* ---- a made-up plan and a simulated trainer -------------------------------- */

typedef struct plan {
    uint64_t fixed, per;
    int bump_at;      /* nonzero: m % bump_at == 0 costs `bump` more (a oneDNN algorithm) */
    uint64_t bump;
} plan;

static uint64_t plan_bytes(void *ud, int m)
{
    plan *p = ud;
    return p->fixed + p->per * (uint64_t)m + (p->bump_at && m % p->bump_at == 0 ? p->bump : 0);
}

/* The step cost in seconds per sample at micro-batch m: the per-test knob
 * that makes a larger m faster or slower. */
static double (*cost)(int m);
static double cost_big_fast(int m) { return m >= 90 ? 1e-3 : 1.5e-3; }
static double cost_big_slow(int m) { return m >= 90 ? 2e-3 : 1.5e-3; }
static double cost_flat(int m) { return 1e-3; }
/* timing noise: each step's time off by up to +-jitter, from a fixed sequence */
static double step_jitter;
static uint64_t jitter_state = 88172645463325252ull;
static double noisy(void)
{
    jitter_state ^= jitter_state << 13;
    jitter_state ^= jitter_state >> 7;
    jitter_state ^= jitter_state << 17;
    return 1.0 + step_jitter * (2.0 * (double)(jitter_state >> 11) / 9007199254740992.0 - 1.0);
}

typedef struct sim {
    plan p;
    bfit_controller_config cfg;
    bfit_controller *c;
    int64_t step;
    int epoch;
    uint64_t cap, other;          /* capacity for the next observation; bytes held by others */
    uint64_t seen_cap, seen_free; /* what the controller last observed */
    bfit_batch_decision prev;
    int nchanges;                 /* decisions that changed m */
    int64_t change_step[256];
    int change_m[256];
    double noise_g2, noise_s;     /* nonzero: report norms for this |G|^2 and tr(Sigma) */
    double loader;                /* the loader's samples/s each step reports (0: not known) */
    int nheld;                    /* decisions that said the loader held a change */
    char held[240];               /*   and the last one's sentence */
} sim;

static uint64_t sim_free(const sim *s) { return s->cap > s->p.fixed + s->other ? s->cap - s->p.fixed - s->other : 0; }

static void sim_config(sim *s, int E, uint64_t cap)
{
    memset(s, 0, sizeof *s);
    s->prev.size = sizeof s->prev;
    s->p.fixed = 1000;
    s->p.per = 100;
    bfit_controller_config_default(&s->cfg);
    s->cfg.plan_bytes = plan_bytes;
    s->cfg.plan_ud = &s->p;
    s->cfg.fixed_bytes = s->p.fixed;
    s->cfg.capacity = cap;
    s->cfg.batch = E;
    s->cap = cap;
    cost = cost_flat;
    step_jitter = 0;
}

static void sim_start(sim *s)
{
    assert_int_equal(bfit_controller_new(&s->cfg, &s->c), BFIT_OK);
    s->seen_cap = s->cfg.capacity;
    s->seen_free = s->cfg.capacity - s->cfg.fixed_bytes;
}

static int fits_seen(const sim *s, int m)
{
    uint64_t need = plan_bytes((void *)&s->p, m);
    return need <= (uint64_t)((double)s->seen_cap * (1 - s->cfg.margin)) && need - s->p.fixed <= s->seen_free;
}

/* What every decision must satisfy: k micro-batches of m, the last one
 * 1..m, cover E exactly; it fits what was last observed; a change has a
 * reason and a text, no change has none. */
static void check_decision(sim *s, const bfit_batch_decision *d, int first)
{
    int changed = first || d->m != s->prev.m || d->batch != s->prev.batch;

    assert_true(d->m >= 1 && d->m <= d->batch);
    assert_int_equal((int64_t)(d->k - 1) * d->m + d->last, d->batch);
    assert_true(d->last >= 1 && d->last <= d->m);
    assert_int_equal(d->split, d->m < d->batch);
    assert_true(fits_seen(s, d->m));
    if (changed) {
        assert_int_not_equal(d->reason, BFIT_REASON_NONE);
        assert_true(strlen(d->why) > 0);
        assert_int_equal(d->prev_m, first ? 0 : s->prev.m);
        assert_int_equal(d->prev_batch, first ? 0 : s->prev.batch);
    } else {
        assert_int_equal(d->reason, BFIT_REASON_NONE);
        assert_string_equal(d->why, "");
    }
    if (first)
        assert_int_equal(d->reason, BFIT_REASON_START);
    if (d->held[0]) {
        assert_true(d->loader_rate > 0);
        s->nheld++;
        snprintf(s->held, sizeof s->held, "%s", d->held);
    } else {
        assert_true(d->loader_rate == 0);
    }
    if (!first && d->m != s->prev.m && s->nchanges < 256) {
        s->change_step[s->nchanges] = s->step;
        s->change_m[s->nchanges++] = d->m;
    }
}

/* One optimizer step: decide, check, observe. */
static bfit_batch_decision sim_step(sim *s)
{
    bfit_batch_decision d = BFIT_SIZED(bfit_batch_decision);
    bfit_step_stats st = BFIT_SIZED(bfit_step_stats);
    double g2m[1024];
    int size[1024];

    assert_int_equal(bfit_controller_next(s->c, s->step, s->epoch, &d), BFIT_OK);
    check_decision(s, &d, s->step == 0);
    s->prev = d;
    st.step = s->step;
    st.epoch = s->epoch;
    st.samples = d.batch;
    st.data_seconds = 0.25; /* not compute: must not count */
    st.seconds = d.batch * cost(d.m) * noisy() + st.data_seconds;
    st.capacity = s->cap;
    st.free_bytes = sim_free(s);
    st.loader_rate = s->loader;
    if (s->noise_g2 > 0) {
        /* the expected squared norms for this |G|^2 and tr(Sigma) */
        assert_true(d.k >= 2 && d.k <= 1024);
        for (int j = 0; j < d.k; j++) {
            size[j] = j == d.k - 1 ? d.last : d.m;
            g2m[j] = s->noise_g2 + s->noise_s / size[j];
        }
        st.nmicro = d.k;
        st.micro_sqnorm = g2m;
        st.micro_size = size;
        st.full_sqnorm = s->noise_g2 + s->noise_s / d.batch;
    }
    assert_int_equal(bfit_controller_observe(s->c, &st), BFIT_OK);
    s->seen_cap = st.capacity;
    s->seen_free = st.free_bytes;
    s->step++;
    return d;
}

static void sim_run(sim *s, int64_t until)
{
    while (s->step < until)
        sim_step(s);
}

/* ---- the micro-batch from the plan ----------------------------------------- */

static void test_auto_micro_batch(void **st)
{
    static const struct {
        int E, fixed_m;
        double margin;
        int m, k, last;
    } cases[] = {
        { 256, 0, 0.0, 90, 3, 76 },   /* 1000 + 100 * 90 = 10000 exactly */
        { 256, 0, 0.1, 80, 4, 16 },   /* budget 9000 */
        { 64, 0, 0.0, 64, 1, 64 },    /* E fits whole */
        { 256, 32, 0.0, 32, 8, 32 },  /* fixed micro-batch */
        { 256, 128, 0.0, 90, 3, 76 }, /* fixed but too big: what fits */
        { 91, 0, 0.0, 90, 2, 1 },     /* last micro-batch of 1 */
    };
    (void)st;
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sim s;
        bfit_batch_decision d = BFIT_SIZED(bfit_batch_decision);
        sim_config(&s, cases[i].E, 10000);
        s.cfg.margin = cases[i].margin;
        s.cfg.micro_batch = cases[i].fixed_m;
        sim_start(&s);
        d = sim_step(&s);
        assert_int_equal(d.m, cases[i].m);
        assert_int_equal(d.k, cases[i].k);
        assert_int_equal(d.last, cases[i].last);
        assert_int_equal(d.batch, cases[i].E);
        assert_true(d.lr_scale == 1.0);
        /* the largest: one more does not fit the budget */
        if (d.m < cases[i].E && d.m != cases[i].fixed_m)
            assert_false(fits_seen(&s, d.m + 1));
        bfit_controller_free(s.c);
    }
}

static void test_accumulation_covers_E(void **st)
{
    (void)st;
    for (int E = 1; E <= 300; E += 7) {
        for (uint64_t cap = 1100; cap <= 40000; cap += 3100) {
            sim s;
            bfit_batch_decision d = BFIT_SIZED(bfit_batch_decision);
            sim_config(&s, E, cap);
            sim_start(&s);
            d = sim_step(&s); /* check_decision asserts (k-1)m + last = E */
            assert_int_equal(d.m, E < (int)((cap - 1000) / 100) ? E : (int)((cap - 1000) / 100));
            bfit_controller_free(s.c);
        }
    }
}

static void test_non_affine_plan_fits(void **st)
{
    sim s;
    bfit_batch_decision d = BFIT_SIZED(bfit_batch_decision);
    (void)st;
    /* every 16th size needs 2000 bytes more: 80 (9000 + 2000) does not fit,
     * the bisection may land low, the probes find 90 */
    sim_config(&s, 256, 10000);
    s.p.bump_at = 16;
    s.p.bump = 2000;
    sim_start(&s);
    d = sim_step(&s);
    assert_int_equal(d.m, 90);
    assert_true(fits_seen(&s, d.m));
    bfit_controller_free(s.c);
    sim_config(&s, 256, 9500);
    s.p.bump_at = 16;
    s.p.bump = 2000;
    sim_start(&s);
    d = sim_step(&s);
    assert_int_equal(d.m, 85);
    bfit_controller_free(s.c);
}

/* ---- out of memory ------------------------------------------------------- */

static void test_oom_shrinks_to_largest_fitting(void **st)
{
    sim s;
    bfit_batch_decision d = BFIT_SIZED(bfit_batch_decision), o = BFIT_SIZED(bfit_batch_decision);
    (void)st;
    sim_config(&s, 256, 10000);
    s.cfg.rule = BFIT_LR_LINEAR;
    s.cfg.lr_ref_batch = 128;
    sim_start(&s);
    sim_run(&s, 3);
    assert_int_equal(bfit_controller_next(s.c, 3, 0, &d), BFIT_OK);
    assert_int_equal(d.m, 90);
    assert_true(d.lr_scale == 2.0);
    /* a co-tenant took memory: 4000 bytes free for the step blocks */
    assert_int_equal(bfit_controller_on_oom(s.c, 90, 4000, 10000, &o), BFIT_OK);
    assert_int_equal(o.m, 40); /* 40 * 100 = 4000 <= 4000 < 4100 */
    assert_int_equal(o.batch, 256);
    assert_int_equal(o.k, 7);
    assert_int_equal(o.last, 16);
    assert_int_equal(o.reason, BFIT_REASON_OOM);
    assert_int_equal(o.prev_m, 90);
    assert_true(o.lr_scale == d.lr_scale);
    assert_non_null(strstr(o.why, "out of memory"));
    /* asking again for the same step gives the shrunk decision */
    assert_int_equal(bfit_controller_next(s.c, 3, 0, &d), BFIT_OK);
    assert_int_equal(d.m, 40);
    /* the last, smaller micro-batch can fail too: below it, even with room */
    assert_int_equal(bfit_controller_on_oom(s.c, 16, 100000, 1000000, &o), BFIT_OK);
    assert_int_equal(o.m, 15);
    assert_int_equal(o.batch, 256);
    /* nothing fits: an error and m = 0 */
    assert_int_equal(bfit_controller_on_oom(s.c, 15, 50, 10000, &o), BFIT_ENOMEM);
    assert_int_equal(o.m, 0);
    assert_non_null(strstr(bfit_errmsg(), "even micro-batch 1"));
    assert_int_equal(bfit_controller_on_oom(s.c, 1, 1000000, 10000000, &o), BFIT_ENOMEM);
    bfit_controller_free(s.c);
}

/* ---- capacity changes, growth, hysteresis, throughput ---------------------- */

/* 90 at 10000 bytes; capacity 6000 drops it to 50 at step 20; capacity comes
 * back in the observation of step `back`. G = 5, N = 10. Returns the step m
 * grew back at (-1: never within 300 steps). */
static int64_t drop_and_return_fed(double (*c)(int), int64_t back, double loader, sim *s)
{
    int64_t grew = -1;

    sim_config(s, 256, 10000);
    s->loader = loader;
    s->cfg.grow_after = 5;
    s->cfg.shrink_holdoff = 10;
    sim_start(s);
    cost = c;
    sim_run(s, 19);
    s->cap = 6000; /* observed after step 19 */
    sim_run(s, 20);
    {
        bfit_batch_decision d = sim_step(s); /* step 20 */
        assert_int_equal(d.m, 50);
        assert_int_equal(d.reason, BFIT_REASON_MEM_SHRANK);
        assert_int_equal(d.batch, 256);
        assert_non_null(strstr(d.why, "memory shrank"));
    }
    sim_run(s, back);
    s->cap = 10000;
    while (s->step < 300) {
        bfit_batch_decision d = sim_step(s);
        if (d.m != 50 && grew < 0) {
            assert_int_equal(d.m, 90);
            assert_int_equal(d.reason, BFIT_REASON_MEM_FREED);
            grew = s->step - 1;
        }
    }
    return grew;
}

static int64_t drop_and_return(double (*c)(int), int64_t back, sim *s) { return drop_and_return_fed(c, back, 0, s); }

/* The loader bounds the speed. At 600 samples/s it is slower than the
 * compute at 50 (667) and at 90 (1000): 90 is no faster, so m stays at 50
 * when memory comes back, and the hold is said once, with the numbers. At
 * 800 samples/s 90 is still 20% faster than 50 (800 vs 667): it grows back
 * at the step it does with no loader figure; at 2000 the loader does not
 * bound at all. */
static void test_loader_bounds_micro_batch_growth(void **st)
{
    sim s;
    double r50, r90;
    (void)st;
    assert_int_equal(drop_and_return_fed(cost_big_fast, 24, 600, &s), -1);
    assert_int_equal(s.prev.m, 50);
    assert_int_equal(s.nchanges, 1);
    assert_int_equal(s.nheld, 1);
    assert_string_equal(s.held, "the loader bounds the speed at 600 samples/s: staying at micro-batch 50 "
                                "(micro-batch 90 computes 1000 vs 666.7 samples/s)");
    /* what it measured is the compute's rate, the data time excluded */
    assert_int_equal(bfit_controller_throughput(s.c, 50, &r50), BFIT_OK);
    assert_int_equal(bfit_controller_throughput(s.c, 90, &r90), BFIT_OK);
    assert_true(fabs(r90 - 1000) < 1e-6 && fabs(r50 - 1000 / 1.5) < 1e-6);
    bfit_controller_free(s.c);
    assert_int_equal(drop_and_return_fed(cost_big_fast, 24, 800, &s), 30);
    assert_int_equal(s.nheld, 0);
    assert_int_equal(s.nchanges, 2);
    bfit_controller_free(s.c);
    assert_int_equal(drop_and_return_fed(cost_big_fast, 24, 2000, &s), 30);
    assert_int_equal(s.nheld, 0);
    bfit_controller_free(s.c);
}

static void test_capacity_drop_shrinks_and_grows_back_when_faster(void **st)
{
    sim s;
    double r50, r90;
    (void)st;
    /* back early: the holdoff (shrink at 20, N = 10) binds */
    assert_int_equal(drop_and_return(cost_big_fast, 24, &s), 30);
    assert_int_equal(bfit_controller_throughput(s.c, 50, &r50), BFIT_OK);
    assert_int_equal(bfit_controller_throughput(s.c, 90, &r90), BFIT_OK);
    assert_true(fabs(r90 - 1000) < 1e-6 && fabs(r50 - 1000 / 1.5) < 1e-6); /* data time excluded */
    assert_int_equal(s.nchanges, 2);
    bfit_controller_free(s.c);
    /* back late: G = 5 observations with room (steps 40..44) */
    assert_int_equal(drop_and_return(cost_big_fast, 40, &s), 45);
    bfit_controller_free(s.c);
}

static void test_capacity_return_no_growth_when_slower(void **st)
{
    sim s;
    (void)st;
    assert_int_equal(drop_and_return(cost_big_slow, 24, &s), -1);
    assert_int_equal(s.prev.m, 50);
    assert_int_equal(s.nchanges, 1);
    bfit_controller_free(s.c);
}

static void test_unmeasured_growth_then_fall_back(void **st)
{
    sim s;
    bfit_batch_decision d = BFIT_SIZED(bfit_batch_decision);
    (void)st;
    /* start small: 90 was never measured, so growth tries it ... */
    sim_config(&s, 256, 6000);
    s.cfg.grow_after = 3;
    sim_start(&s);
    cost = cost_big_slow;
    sim_run(&s, 10);
    assert_int_equal(s.prev.m, 50);
    s.cap = 10000; /* observed after step 10 */
    sim_run(&s, 13);  /* observations 10, 11, 12: streak 3 */
    d = sim_step(&s); /* step 13 */
    assert_int_equal(d.m, 90);
    assert_int_equal(d.reason, BFIT_REASON_MEM_FREED);
    assert_non_null(strstr(d.why, "50 -> 90"));
    /* ... finds it slower (step 13 not measured, 14 to 18 are: going back
     * undoes a change just made, which takes five measurements), goes back
     * to 50 for throughput, and stays there */
    sim_run(&s, 19);
    d = sim_step(&s);
    assert_int_equal(d.m, 50);
    assert_int_equal(d.reason, BFIT_REASON_THROUGHPUT);
    sim_run(&s, 400);
    assert_int_equal(s.prev.m, 50);
    assert_int_equal(s.nchanges, 2);
    bfit_controller_free(s.c);
}

/* Timing noise alone moves nothing: every size runs at the same rate, each
 * step's time off by up to +-25%. Memory drops (m shrinks) and comes back;
 * neither size is measurably faster, so m stays where memory put it. (With
 * a fixed 5% gain on the averages, the noise made m go back and forth.) */
static void test_noise_does_not_flap(void **st)
{
    sim s;
    (void)st;
    sim_config(&s, 256, 10000);
    s.cfg.grow_after = 3;
    s.cfg.shrink_holdoff = 10;
    sim_start(&s);
    step_jitter = 0.25;
    sim_run(&s, 40);
    assert_int_equal(s.prev.m, 90);
    s.cap = 6000;
    sim_run(&s, 80);
    assert_int_equal(s.prev.m, 50);
    s.cap = 10000;
    sim_run(&s, 600);
    if (s.nchanges > 1)
        fail_msg("%d micro-batch changes under timing noise (the second at step %lld, to %d)", s.nchanges,
                 (long long)s.change_step[1], s.change_m[1]);
    /* a real difference still moves it: 90 runs 1.5x as fast now */
    cost = cost_big_fast;
    sim_run(&s, 700);
    assert_int_equal(s.prev.m, 90);
    bfit_controller_free(s.c);
}

static void test_no_flapping(void **st)
{
    sim s;
    int64_t gap = 0;
    (void)st;
    /* capacity alternating every step: one shrink, never a growth */
    sim_config(&s, 256, 10000);
    s.cfg.grow_after = 5;
    s.cfg.shrink_holdoff = 10;
    sim_start(&s);
    cost = cost_big_fast;
    for (int i = 0; i < 500; i++) {
        s.cap = i % 2 ? 6000 : 10000;
        sim_step(&s);
    }
    assert_int_equal(s.nchanges, 1);
    assert_int_equal(s.change_m[0], 50);
    bfit_controller_free(s.c);

    /* a slow oscillation, 20 steps each way: memory forces every shrink, but
     * each growth that is undone soon doubles the wait before the next */
    sim_config(&s, 256, 10000);
    s.cfg.grow_after = 5;
    s.cfg.shrink_holdoff = 10;
    s.cfg.flap_window = 100;
    sim_start(&s);
    cost = cost_big_fast;
    for (int i = 0; i < 1000; i++) {
        s.cap = (i / 20) % 2 ? 6000 : 10000;
        sim_step(&s);
    }
    print_message("%d micro-batch changes in 1000 steps\n", s.nchanges);
    assert_true(s.nchanges >= 4 && s.nchanges <= 14);
    /* the gaps between growths grow */
    for (int i = 3; i < s.nchanges; i += 2) {
        assert_int_equal(s.change_m[i], 90);
        assert_true(s.change_step[i] - s.change_step[i - 2] >= gap);
        gap = s.change_step[i] - s.change_step[i - 2];
    }
    assert_true(gap >= 160);
    bfit_controller_free(s.c);
}

static void test_another_tenant_in_free_bytes(void **st)
{
    sim s;
    bfit_batch_decision d = BFIT_SIZED(bfit_batch_decision);
    (void)st;
    /* capacity unchanged, but someone else holds 3000 bytes: the step
     * blocks get what is free */
    sim_config(&s, 256, 10000);
    sim_start(&s);
    sim_run(&s, 4);
    s.other = 3000;
    sim_run(&s, 5);
    d = sim_step(&s);
    assert_int_equal(d.m, 60);
    assert_int_equal(d.reason, BFIT_REASON_MEM_SHRANK);
    /* capacity below the fixed part: nothing fits, an error */
    s.cap = 900;
    s.other = 0;
    sim_run(&s, 7);
    assert_int_equal(bfit_controller_next(s.c, 7, 0, &d), BFIT_ENOMEM);
    assert_int_equal(d.m, 0);
    assert_non_null(strstr(bfit_errmsg(), "memory shrank"));
    bfit_controller_free(s.c);
}

/* ---- schedules and learning-rate scaling ------------------------------------ */

static void expect_scale(double got, double want)
{
    if (fabs(got - want) > 1e-12)
        fail_msg("lr scale %.15g, expected %.15g", got, want);
}

static void test_schedule_and_lr_rules(void **st)
{
    const bfit_lr_rule rules[3] = { BFIT_LR_LINEAR, BFIT_LR_SQRT, BFIT_LR_NONE };
    bfit_batch_point pts[BFIT_BATCH_SCHEDULE_MAX];
    int n;
    (void)st;
    assert_int_equal(bfit_batch_schedule_parse("0:32,100:64,200:128,300:32", pts, BFIT_BATCH_SCHEDULE_MAX, &n),
                     BFIT_OK);
    assert_int_equal(n, 4);
    for (int r = 0; r < 3; r++) {
        sim s;
        double s2, s4;
        bfit_batch_decision d = BFIT_SIZED(bfit_batch_decision);
        sim_config(&s, 0, 1000000);
        s.cfg.schedule = pts;
        s.cfg.nschedule = n;
        s.cfg.micro_batch = 16;
        s.cfg.rule = rules[r];
        s.cfg.rewarmup_steps = 10;
        sim_start(&s);
        s2 = bfit_lr_rule_scale(rules[r], 2);
        s4 = bfit_lr_rule_scale(rules[r], 4);
        expect_scale(s2, r == 0 ? 2 : r == 1 ? sqrt(2) : 1);
        for (int64_t t = 0; t < 400; t++) {
            d = sim_step(&s);
            assert_int_equal(d.m, 16);
            if (t < 100) {
                assert_int_equal(d.batch, 32);
                expect_scale(d.lr_scale, 1);
            } else if (t < 200) {
                assert_int_equal(d.batch, 64);
                assert_int_equal(d.k, 4);
                /* the j-th step with the new E: old + (new - old) j / W */
                expect_scale(d.lr_scale, t < 110 ? 1 + (s2 - 1) * (double)(t - 99) / 10 : s2);
            } else if (t < 300) {
                assert_int_equal(d.batch, 128);
                expect_scale(d.lr_scale, t < 210 ? s2 + (s4 - s2) * (double)(t - 199) / 10 : s4);
            } else {
                /* down: at once */
                assert_int_equal(d.batch, 32);
                expect_scale(d.lr_scale, 1);
            }
            if (t == 100 || t == 200 || t == 300) {
                assert_int_equal(d.reason, BFIT_REASON_SCHEDULE);
                assert_non_null(strstr(d.why, "schedule"));
            }
        }
        assert_int_equal(s.nchanges, 0);
        bfit_controller_free(s.c);
    }
}

static void test_schedule_by_epoch_and_micro_batch(void **st)
{
    bfit_batch_point pts[BFIT_BATCH_SCHEDULE_MAX];
    bfit_batch_decision d = BFIT_SIZED(bfit_batch_decision);
    sim s;
    int n;
    (void)st;
    assert_int_equal(bfit_batch_schedule_parse(" e0:32 , e2:64 ", pts, BFIT_BATCH_SCHEDULE_MAX, &n), BFIT_OK);
    assert_int_equal(n, 2);
    assert_true(pts[1].by_epoch && pts[1].at == 2 && pts[1].batch == 64);
    /* memory for 48: E 32 runs whole, E 64 as 48 + 16 */
    sim_config(&s, 0, 1000 + 4800);
    s.cfg.schedule = pts;
    s.cfg.nschedule = n;
    s.cfg.rule = BFIT_LR_SQRT;
    s.cfg.rewarmup_steps = 0;
    sim_start(&s);
    for (int t = 0; t < 30; t++) {
        s.epoch = t / 10;
        d = sim_step(&s);
        assert_int_equal(d.batch, t < 20 ? 32 : 64);
        assert_int_equal(d.m, t < 20 ? 32 : 48);
        assert_int_equal(d.split, t >= 20);
        expect_scale(d.lr_scale, t < 20 ? 1 : sqrt(2));
        if (t == 20) {
            assert_int_equal(d.reason, BFIT_REASON_SCHEDULE);
            assert_int_equal(d.last, 16);
        }
    }
    bfit_controller_free(s.c);
}

/* ---- adaptive E from the noise scale ----------------------------------------- */

static void test_adaptive_follows_noise_scale(void **st)
{
    sim s;
    int E = 16, nchange = 0;
    int64_t last_change = 0;
    (void)st;
    sim_config(&s, 0, 100000000);
    s.cfg.adaptive = 1;
    s.cfg.batch_min = 16;
    s.cfg.batch_max = 256;
    s.cfg.adapt_interval = 10;
    s.cfg.noise_alpha = 1.0; /* the made-up norms are exact: no smoothing needed */
    s.cfg.noise_min_updates = 3;
    s.cfg.rule = BFIT_LR_SQRT;
    s.cfg.rewarmup_steps = 4;
    sim_start(&s);
    s.noise_g2 = 1.0;
    for (int t = 0; t < 400; t++) {
        bfit_batch_decision d = BFIT_SIZED(bfit_batch_decision);
        double bn;
        s.noise_s = t < 100 ? 100 : t < 250 ? 1000 : 4; /* B_noise 100, then 1000, then 4 */
        d = sim_step(&s);
        assert_true(d.batch >= 16 && d.batch <= 256);
        assert_true(d.k >= 2);                       /* two sizes for the estimator */
        assert_true(d.m <= (d.batch + 1) / 2);
        if (d.batch != E) {
            assert_int_equal(d.reason, BFIT_REASON_NOISE);
            assert_non_null(strstr(d.why, "noise scale"));
            assert_true(d.batch <= 2 * E && 2 * d.batch >= E); /* at most 2x a change */
            assert_true(t - last_change >= 10);
            last_change = t;
            E = d.batch;
            nchange++;
            assert_int_equal(bfit_controller_noise_scale(s.c, &bn), BFIT_OK);
            assert_true(fabs(bn - s.noise_s) < 1e-6 * s.noise_s);
        }
        assert_true(isfinite(d.lr_scale) && d.lr_scale > 0);
        if (t == 99)
            assert_int_equal(E, 100);  /* 16 -> 32 -> 64 -> 100 */
        if (t == 249)
            assert_int_equal(E, 256);  /* 100 -> 200 -> 256 (the bound) */
        if (t == 399) {
            assert_int_equal(E, 16);   /* down by halves to the bound */
            expect_scale(d.lr_scale, 1);
        }
        if (t == 120) /* sqrt rule, re-warmed, settled */
            expect_scale(d.lr_scale, sqrt(E / 16.0));
    }
    assert_int_equal(nchange, 3 + 2 + 4);
    bfit_controller_free(s.c);
}

/* ---- auto E: goodput -------------------------------------------------------- */

/* A device whose micro-step of m samples takes lat + m / peak seconds (a
 * GPU-like curve: samples/s rising with m toward peak), and a step's own
 * work of `over` seconds; noise: expected squared norms of a gradient with
 * |G|^2 = 1 and tr(Sigma) = B, so the noise scale is B. `jitter` > 0 makes
 * every timing and norm off by up to that fraction, at random. */
typedef struct dev_model {
    double lat, peak, over, B, jitter;
    int fast_upto;   /* nonzero: micro-batches above this run at half the peak */
    int dip_lo, dip_hi; /* micro-batches in [dip_lo, dip_hi] run at a fifth of the peak */
    double pace;        /* everything takes this many times as long (0: 1) */
    int pace_at;        /* ...from the pace_at-th ladder rung asked on (counting from 0), */
    double pace_to;     /* ...when pace becomes pace_to (0: never) */
    uint64_t rng;
    int ladder_asked[32], nasked;
    int loss_known;  /* the steps report `loss` as their mean training loss */
    double loss;
    double loader;   /* the loader's samples/s (0: not reported) */
} dev_model;

static double jitter(dev_model *dm)
{
    dm->rng = dm->rng * 6364136223846793005ull + 1442695040888963407ull;
    return 1.0 + dm->jitter * (2.0 * (double)(dm->rng >> 11) / 9007199254740992.0 - 1.0);
}

static double micro_secs(const dev_model *dm, int m)
{
    double p = dm->pace > 0 ? dm->pace : 1.0;

    if (m >= dm->dip_lo && m <= dm->dip_hi)
        return p * (dm->lat + m / (dm->peak / 5));
    return p * (dm->lat + m / (dm->fast_upto && m > dm->fast_upto ? dm->peak / 2 : dm->peak));
}

/* Auto mode within [bmin, bmax], the lr given for a batch of E0 (where auto
 * starts). */
static void auto_config(sim *s, int bmin, int bmax, int E0)
{
    sim_config(s, 0, 1000000000);
    s->cfg.auto_batch = 1;
    s->cfg.batch_min = bmin;
    s->cfg.batch_max = bmax;
    s->cfg.lr_ref_batch = E0;
    s->cfg.auto_interval = 1000;
    s->cfg.auto_confirm = 5;
    s->cfg.noise_alpha = 1.0; /* the norms are exact expectations: no smoothing needed */
    s->cfg.noise_min_updates = 3;
    s->cfg.rewarmup_steps = 10;
}

/* One step of auto mode: decide, check, run the ladder if asked, observe
 * the times and the consecutive-step norms (k = 1) or the micro-batches'. */
static bfit_batch_decision auto_step(sim *s, dev_model *dm)
{
    bfit_batch_decision d = BFIT_SIZED(bfit_batch_decision);
    bfit_step_stats st = BFIT_SIZED(bfit_step_stats);
    double g2m[1024], g2 = 1.0, B = dm->B;
    int size[1024], m;

    assert_int_equal(bfit_controller_next(s->c, s->step, s->epoch, &d), BFIT_OK);
    check_decision(s, &d, s->step == 0);
    s->prev = d;
    while ((m = bfit_controller_ladder_next(s->c)) > 0) {
        /* the trainer times each size a few times and keeps the best */
        double t;
        if (dm->pace_to > 0 && dm->nasked == dm->pace_at)
            dm->pace = dm->pace_to;
        t = micro_secs(dm, m) * jitter(dm);
        for (int i = 0; i < 2; i++)
            t = fmin(t, micro_secs(dm, m) * jitter(dm));
        if (dm->nasked < 32)
            dm->ladder_asked[dm->nasked++] = m;
        assert_int_equal(bfit_controller_ladder_record(s->c, m, t), BFIT_OK);
    }
    st.step = s->step;
    st.samples = d.batch;
    st.micro_seconds = ((d.k - 1) * micro_secs(dm, d.m) + micro_secs(dm, d.last)) * jitter(dm);
    st.data_seconds = 0.01;
    st.seconds = st.micro_seconds + dm->over * jitter(dm) + st.data_seconds;
    st.capacity = s->cap;
    st.free_bytes = sim_free(s);
    st.step_norms = 1;
    st.loss_known = dm->loss_known;
    st.loss = dm->loss;
    st.loader_rate = dm->loader;
    st.full_sqnorm = (g2 + B / d.batch) * jitter(dm);
    st.diff_sqnorm = -1;
    if (d.k >= 2) {
        assert_true(d.k <= 1024);
        for (int j = 0; j < d.k; j++) {
            size[j] = j == d.k - 1 ? d.last : d.m;
            g2m[j] = (g2 + B / size[j]) * jitter(dm);
        }
        st.nmicro = d.k;
        st.micro_sqnorm = g2m;
        st.micro_size = size;
    } else {
        /* two independent batches of the same gradient: E|G1 - G2|^2 = B/b1 + B/b2 */
        st.diff_sqnorm = (B / s->prev.batch + B / d.batch) * jitter(dm);
    }
    assert_int_equal(bfit_controller_observe(s->c, &st), BFIT_OK);
    s->step++;
    return d;
}

/* The goodput the controller should predict, up to a constant: samples/s
 * of whole-E steps times the efficiency (B + E0) / (B + E), 1 at E0 and
 * below. */
static double model_goodput(const dev_model *dm, int E, int E0)
{
    return E / (micro_secs(dm, E) + dm->over) * (E <= E0 ? 1.0 : (dm->B + E0) / (dm->B + E));
}

/* E goes where goodput is highest, by moves of at most 2x, each worth at
 * least 10%, each logged with its numbers; the lr follows the linear rule;
 * the ladder doubles up to the micro-batch of the largest E a move can reach
 * (2E: 64 from 32), and after each move it is extended (its last rung timed
 * again, then the next); the noise scale comes from consecutive steps
 * (every step has one micro-batch). With pace_to, the machine runs that
 * much slower from the extension on (another job took part of it): the
 * extension puts its new rungs at the old ones' pace (the last rung timed
 * again says by how much), so 128 is compared with 64 as on one machine
 * and the moves are those of a steady machine. */
static void follows_goodput(double pace_to)
{
    static const int ladder[] = { 8, 16, 32, 64, 64, 128, 128, 256 };
    dev_model dm = { .lat = 0.002, .peak = 5000, .over = 0.003, .B = 200, .pace_at = 4, .pace_to = pace_to };
    int E = 32, nchange = 0;
    int64_t last_seen = 0, seen = 0;
    double bn;
    sim s;
    auto_config(&s, 16, 1024, 32); /* starts at E0 = 32 */
    sim_start(&s);
    for (int t = 0; t < 1200; t++) {
        bfit_batch_decision d = BFIT_SIZED(bfit_batch_decision);
        if (t == 600)
            dm.B = 2000; /* the noise scale grows as the loss falls */
        d = auto_step(&s, &dm);
        assert_int_equal(d.k, 1); /* everything fits: never accumulates */
        assert_int_equal(d.m, d.batch);
        if (d.batch != E) {
            assert_int_equal(d.reason, BFIT_REASON_GOODPUT);
            assert_non_null(strstr(d.why, "goodput: batch"));
            assert_true(d.batch <= 2 * E && 2 * d.batch >= E);
            assert_true(seen - last_seen >= 1000);
            assert_true(d.noise_scale == dm.B || fabs(d.noise_scale - dm.B) < 1e-9 * dm.B);
            assert_true(d.eff_old > 0 && d.eff_new > 0 && d.tput_old > 0 && d.tput_new > 0);
            assert_true(d.tput_new * d.eff_new >= 1.1 * d.tput_old * d.eff_old);
            /* the controller's prediction is the model's, the overhead and
             * the ladder being exact here */
            assert_true(fabs(d.tput_new * d.eff_new / (d.tput_old * d.eff_old) -
                             model_goodput(&dm, d.batch, 32) / model_goodput(&dm, E, 32)) < 1e-6);
            E = d.batch;
            last_seen = seen;
            nchange++;
        }
        seen += d.batch;
        if (t == 599) {
            /* B = 200: goodput at 16, 32, 48, 64, 96, 128: 2,000, 2,807, 3,076, 3,160, 3,109, 2,958
             * (16 has no efficiency credit below E0): 32 -> 64 (+12.6%), then nothing within 2x
             * is 10% better */
            assert_int_equal(E, 64);
            assert_int_equal(nchange, 1);
        }
        if (t == 1199) {
            /* B = 2000: 64 -> 128 (+12.8%); 192 and 256 would add 3% */
            assert_int_equal(E, 128);
            assert_int_equal(nchange, 2);
            expect_scale(d.lr_scale, 4.0); /* linear, E0 = 32, re-warmed */
        }
    }
    assert_int_equal(dm.nasked, 8);
    assert_memory_equal(dm.ladder_asked, ladder, sizeof ladder);
    assert_int_equal(bfit_controller_noise_scale(s.c, &bn), BFIT_OK);
    assert_true(fabs(bn - 2000) < 1e-6);
    bfit_controller_free(s.c);
}

static void test_auto_follows_goodput(void **st)
{
    (void)st;
    follows_goodput(0);
}

static void test_auto_ladder_extended_at_its_pace(void **st)
{
    (void)st;
    follows_goodput(1.3);
}

/* The loader bounds the speed. test_auto_follows_goodput's device moves
 * 32 -> 64 at B = 200 (goodput +12.6% by the compute: 2,807 -> 3,596
 * samples/s x efficiency 0.879). A loader of 2,500 samples/s is slower
 * than the compute at 32 and above: 64 would run 2,500 x 0.879, so E stays
 * at 32 and the hold is said once. When the loader speeds up to 10,000
 * (more threads), it no longer bounds: E moves to 64, the predicted rates
 * the compute's. */
static void test_auto_loader_bounds_goodput(void **st)
{
    dev_model dm = { .lat = 0.002, .peak = 5000, .over = 0.003, .B = 200, .loader = 2500 };
    int64_t moved = -1;
    sim s;
    (void)st;
    auto_config(&s, 16, 1024, 32);
    sim_start(&s);
    for (int t = 0; t < 600; t++)
        assert_int_equal(auto_step(&s, &dm).batch, 32);
    assert_int_equal(s.nheld, 1);
    assert_string_equal(s.held, "the loader bounds the speed at 2500 samples/s: staying at batch 32 (batch 64 "
                                "would compute 3596 samples/s, goodput +12.6% by the compute alone)");
    dm.loader = 10000;
    for (int t = 600; t < 1200; t++) {
        bfit_batch_decision d = auto_step(&s, &dm);
        if (d.batch != 32 && moved < 0) {
            moved = t;
            assert_int_equal(d.batch, 64);
            assert_int_equal(d.reason, BFIT_REASON_GOODPUT);
            assert_true(fabs(d.tput_old - 32 / 0.0114) < 1e-6 && fabs(d.tput_new - 64 / 0.0178) < 1e-6);
        }
    }
    assert_true(moved >= 600 && moved < 620); /* auto_confirm steps once the loader's rate is above 2,807 */
    assert_int_equal(s.nheld, 1);
    bfit_controller_free(s.c);
}

/* A loader faster than every size's compute changes nothing: the same
 * decisions, step for step, as with no loader figure at all. */
static void test_auto_loader_not_bounding(void **st)
{
    dev_model a = { .lat = 0.002, .peak = 5000, .over = 0.003, .B = 200 }, b = a;
    sim sa, sb;
    (void)st;
    b.loader = 8000; /* the compute peaks at 5,000 */
    auto_config(&sa, 16, 1024, 32);
    auto_config(&sb, 16, 1024, 32);
    sim_start(&sa);
    sim_start(&sb);
    for (int t = 0; t < 1200; t++) {
        bfit_batch_decision da, db;
        if (t == 600)
            a.B = b.B = 2000;
        da = auto_step(&sa, &a);
        db = auto_step(&sb, &b);
        assert_int_equal(da.batch, db.batch);
        assert_int_equal(da.m, db.m);
        assert_true(da.lr_scale == db.lr_scale && da.tput_new == db.tput_new);
    }
    assert_int_equal(sb.prev.batch, 128); /* as test_auto_follows_goodput */
    assert_int_equal(sb.nheld, 0);
    bfit_controller_free(sa.c);
    bfit_controller_free(sb.c);
}

/* Hysteresis: with noisy timings and norms (every figure off by up to 25%)
 * and a noise scale at which 48, 64 and 96 are within 3% of each other, E
 * settles and stays: few changes, never back to a size it left. The ladder
 * is noisy too; the micro-batch changes only with E, or once when the
 * ladder is first measured. The noiseless device gains 12.6% from 32 to 64,
 * just past auto_gain, so a ladder that happens to time 32 fast keeps 32
 * (seed 1's: 32 at 0.77 of its mean time, 64 at 0.89), a right decision on
 * what it measured; most seeds move. */
static void test_auto_does_not_flip(void **st)
{
    int moved = 0;
    (void)st;
    for (uint64_t seed = 1; seed <= 5; seed++) {
        dev_model dm = { .lat = 0.002, .peak = 5000, .over = 0.003, .B = 200, .jitter = 0.25, .rng = seed };
        int left[64], nleft = 0, E = 32, nchange = 0, m = 32, mchange = 0;
        sim s;
        auto_config(&s, 16, 1024, 32);
        s.cfg.noise_alpha = 0.05; /* noisy norms want smoothing */
        s.cfg.noise_min_updates = 20;
        sim_start(&s);
        for (int t = 0; t < 4000; t++) {
            bfit_batch_decision d = auto_step(&s, &dm);
            if (d.m != m && d.batch == E)
                mchange++;
            m = d.m;
            if (d.batch != E) {
                for (int i = 0; i < nleft; i++)
                    if (left[i] == d.batch)
                        fail_msg("seed %llu: step %d: back to batch %d (%s)", (unsigned long long)seed, t, d.batch,
                                 d.why);
                left[nleft++] = E;
                E = d.batch;
                nchange++;
            }
        }
        printf("  seed %llu: %d changes of E, %d of m alone, E %d, m %d\n", (unsigned long long)seed, nchange,
               mchange, E, m);
        moved += nchange > 0;
        assert_true(nchange <= 4);
        assert_true(mchange <= 1);
        assert_true(E >= 32 && E <= 128);
        bfit_controller_free(s.c);
    }
    assert_true(moved >= 4);
}

/* A device where small micro-batches are much faster per sample (a CPU
 * whose caches hold them): the plan accumulates them, and the noise scale
 * then comes from the micro-batches. When they stop being faster (the
 * machine's caches taken), the ladder measured again takes the run back to
 * 64, for throughput (not "memory freed": no memory went away). */
static void test_auto_accumulates_when_faster(void **st)
{
    (void)st;
    for (int whole = 0; whole < 2; whole++) {
        dev_model dm = { .lat = 0.0, .peak = 5000, .over = 0.001, .B = 300, .fast_upto = 32 };
        double bn;
        sim s;
        auto_config(&s, 64, 64, 128); /* E is 64: the micro-batch is the only choice */
        s.cfg.keep_whole = whole; /* batch norm: split only for memory */
        sim_start(&s);
        for (int t = 0; t < 200; t++) {
            bfit_batch_decision d = auto_step(&s, &dm);
            assert_int_equal(d.batch, 64);
            /* the ladder (32 and 64) is measured after 50 steps, used at 51 */
            assert_int_equal(d.m, t <= 50 || whole ? 64 : 32);
            if (t == 51 && !whole) {
                assert_int_equal(d.reason, BFIT_REASON_THROUGHPUT);
                assert_non_null(strstr(d.why, "throughput: micro-batch 64 -> 32 (ladder: 5000 vs 2500"));
            }
        }
        /* 32 and 64, then (the rungs proposing 32) both again */
        assert_int_equal(dm.nasked, whole ? 2 : 4);
        assert_int_equal(bfit_controller_noise_scale(s.c, &bn), BFIT_OK);
        assert_true(fabs(bn - 300) < 1e-6);
        dm.fast_upto = 0; /* every size at 64's rate: 32's steps twice as slow, which calls a ladder */
        dm.peak /= 2;
        for (int t = 200; t < 3000 && !whole && s.prev.m == 32; t++) {
            bfit_batch_decision d = auto_step(&s, &dm);
            if (d.m == 64) {
                printf("  step %d: %s\n", t, d.why);
                assert_int_equal(d.reason, BFIT_REASON_THROUGHPUT);
                assert_non_null(strstr(d.why, "throughput: micro-batch 32 -> 64 (ladder:"));
            }
        }
        assert_int_equal(s.prev.m, 64);
        bfit_controller_free(s.c);
    }
}

/* Below the batch the lr is for, the efficiency gives no credit: with a
 * small noise scale (20) the formula (B + E0) / (B + E) would promise 16 a
 * sixth of 128's samples, which scaling the lr down does not deliver
 * (docs/performance.md), and smaller steps are slower here: E stays at 128.
 * A larger noise scale then moves it up. */
static void test_auto_no_credit_below_reference(void **st)
{
    dev_model dm = { .lat = 0.002, .peak = 5000, .over = 0.003, .B = 20 };
    sim s;
    (void)st;
    auto_config(&s, 16, 1024, 128);
    sim_start(&s);
    for (int t = 0; t < 1200; t++) {
        bfit_batch_decision d = auto_step(&s, &dm);
        assert_int_equal(d.batch, 128);
    }
    dm.B = 5000; /* 256: 4,555 x 0.976 against 4,183: +6%; 256 and 512 in two moves are not 10% each */
    for (int t = 0; t < 600; t++)
        assert_int_equal(auto_step(&s, &dm).batch, 128);
    dm.B = 1e6; /* efficiency ~1: 256 is 9% faster per sample... */
    dm.lat = 0.02; /* ...and with a slow step start, 31% */
    for (int t = 0; t < 600; t++)
        auto_step(&s, &dm);
    assert_true(s.prev.batch > 128);
    bfit_controller_free(s.c);
}

/* A machine whose pace changes between rungs does not move the run: the
 * device runs 64 faster per sample than 32 (4,324 against 3,810 samples/s),
 * but from the ladder's second rung on everything takes 1.3 times as long,
 * so the rungs time 32 at 3,810 and 64 at 3,326 and propose 32 (+15%).
 * Timed again one after the other at the new pace, 32 is slower (2,931
 * against 3,326): the micro-batch stays at 64. Before, the run moved to 32
 * on the rungs alone. A move that holds when timed again is made
 * (test_auto_accumulates_when_faster). */
static void test_auto_ladder_confirms_a_move(void **st)
{
    static const int asked[] = { 32, 64, 32, 64 };
    dev_model dm = { .lat = 0.002, .peak = 5000, .over = 0.003, .B = 200, .pace_at = 1, .pace_to = 1.3 };
    sim s;
    (void)st;
    auto_config(&s, 64, 64, 64); /* E is 64: the micro-batch is the only choice */
    sim_start(&s);
    for (int t = 0; t < 300; t++) {
        bfit_batch_decision d = auto_step(&s, &dm);
        assert_int_equal(d.batch, 64);
        if (d.m != 64)
            fail_msg("step %d: %s", t, d.why);
    }
    assert_int_equal(dm.nasked, 4);
    assert_memory_equal(dm.ladder_asked, asked, sizeof asked);
    bfit_controller_free(s.c);
}

/* The ladder is measured again when micro-steps run much slower than it
 * predicts (another process took the cores), not more often than every 4
 * auto_interval samples. */
static void test_auto_ladder_again_when_load_changes(void **st)
{
    dev_model dm = { .lat = 0.002, .peak = 5000, .over = 0.003, .B = 200 };
    sim s;
    (void)st;
    auto_config(&s, 16, 1024, 128);
    sim_start(&s);
    for (int t = 0; t < 300; t++)
        auto_step(&s, &dm);
    assert_int_equal(dm.nasked, 6); /* 8 to 256, the micro-batch of the largest E a move reaches */
    dm.lat *= 3;
    dm.peak /= 3;
    for (int t = 0; t < 300; t++)
        auto_step(&s, &dm);
    assert_int_equal(dm.nasked, 12); /* once more, then it agrees again */
    bfit_controller_free(s.c);
}

/* A ladder measured again goes at least to the micro-batch in use, however
 * slow the sizes below it time: 16 and 32 timed at a fifth of the peak (the
 * load moved while they ran) stop the rate's rise after 8, but 64, the size
 * in use, is measured too and stays (before, the ladder stopped at 32, took
 * 64's rate from 32's, and moved the run to micro-batches of 8). */
static void test_auto_ladder_reaches_the_size_in_use(void **st)
{
    dev_model dm = { .lat = 0.002, .peak = 5000, .over = 0.003, .B = 200 };
    int first;
    sim s;
    (void)st;
    auto_config(&s, 16, 1024, 64);
    sim_start(&s);
    for (int t = 0; t < 300; t++)
        assert_int_equal(auto_step(&s, &dm).m, 64);
    first = dm.nasked;
    assert_true(first >= 4);
    dm.lat *= 3;
    dm.peak /= 3;
    dm.dip_lo = 16;
    dm.dip_hi = 32;
    for (int t = 0; t < 300; t++) {
        bfit_batch_decision d = auto_step(&s, &dm);
        assert_int_equal(d.batch, 64);
        assert_int_equal(d.m, 64);
    }
    assert_true(dm.nasked >= first + 4); /* measured again: 8, 16, 32 and 64 */
    assert_int_equal(dm.ladder_asked[first], 8);
    assert_int_equal(dm.ladder_asked[first + 3], 64);
    bfit_controller_free(s.c);
}

/* Plateaus: while the training loss falls 5% a window E stays; once it is
 * flat, E doubles at the same lr after two windows (1,000 samples each)
 * without 2% of progress, again two windows later, and stops where the
 * new E would pass the noise scale (200: 32 -> 64 -> 128, not 256).
 * Goodput is kept out of it (its gain is out of reach). */
static void test_auto_plateau(void **st)
{
    dev_model dm = { .lat = 0.002, .peak = 5000, .over = 0.003, .B = 200, .loss_known = 1, .loss = 2.0 };
    int E = 32, nchange = 0;
    int64_t seen = 0, last_seen = 0, flat_from = -1;
    sim s;
    (void)st;
    auto_config(&s, 16, 1024, 32);
    s.cfg.auto_gain = 100;
    sim_start(&s);
    for (int t = 0; t < 1500; t++) {
        bfit_batch_decision d = BFIT_SIZED(bfit_batch_decision);
        /* falling by 5% per 1,000 samples for 10,000 samples, then flat
         * (+-1%, alternating) */
        if (seen < 10000)
            dm.loss = 2.0 * exp(-0.05 * (double)seen / 1000.0);
        else
            dm.loss = t % 2 ? 1.01 * 1.3 : 0.99 * 1.3;
        if (seen >= 10000 && flat_from < 0)
            flat_from = seen;
        d = auto_step(&s, &dm);
        expect_scale(d.lr_scale, 1.0); /* the lr never moves: linear rule, E0 doubled with E */
        if (d.batch != E) {
            assert_int_equal(d.reason, BFIT_REASON_PLATEAU);
            assert_int_equal(d.batch, 2 * E);
            assert_non_null(strstr(d.why, "plateau: batch"));
            assert_true(seen >= 10000);                           /* never while the loss falls */
            assert_true(seen - (nchange ? last_seen : flat_from) >= 2000); /* two whole flat windows */
            assert_true(seen - (nchange ? last_seen : flat_from) <= 2000 + 1000 + 2 * E);
            E = d.batch;
            last_seen = seen;
            nchange++;
        }
        seen += d.batch;
    }
    assert_int_equal(E, 128); /* 256 > the noise scale */
    assert_int_equal(nchange, 2);
    bfit_controller_free(s.c);
}

/* AdaScale's gain: S (B + E0) / (B + E) with S = E / E0, between 1 and S. */
static void test_auto_adascale(void **st)
{
    dev_model dm = { .lat = 0.002, .peak = 5000, .over = 0.003, .B = 200 };
    sim s;
    bfit_batch_decision d = BFIT_SIZED(bfit_batch_decision);
    (void)st;
    auto_config(&s, 16, 1024, 32);
    s.cfg.rule = BFIT_LR_ADASCALE;
    sim_start(&s);
    for (int t = 0; t < 600; t++)
        d = auto_step(&s, &dm);
    assert_int_equal(d.batch, 64);
    expect_scale(d.lr_scale, 64.0 / 32 * (200 + 32) / (200 + 64));
    bfit_controller_free(s.c);
}

/* Checkpoints: the state of one controller, put into another made with the
 * same configuration, gives the same decisions from there on. */
static void test_auto_state_roundtrip(void **st)
{
    dev_model dm = { .lat = 0.002, .peak = 5000, .over = 0.003, .B = 200, .jitter = 0.1, .rng = 3 };
    dev_model dm2;
    bfit_controller_state cs, bad;
    sim a, b;
    (void)st;
    auto_config(&a, 16, 1024, 32);
    sim_start(&a);
    for (int t = 0; t < 150; t++)
        auto_step(&a, &dm);
    bfit_controller_state_get(a.c, &cs);
    assert_true(cs.au.lad.n > 0); /* the ladder ran and is part of the state */
    b = a;
    assert_int_equal(bfit_controller_new(&a.cfg, &b.c), BFIT_OK);
    bad = cs;
    bad.m = 0; /* a state no controller can have */
    assert_int_equal(bfit_controller_state_set(b.c, &bad), BFIT_EINVAL);
    assert_int_equal(bfit_controller_state_set(b.c, &cs), BFIT_OK);
    dm2 = dm;
    for (int t = 0; t < 600; t++) {
        bfit_batch_decision da = auto_step(&a, &dm), db = auto_step(&b, &dm2);
        assert_int_equal(da.batch, db.batch);
        assert_int_equal(da.m, db.m);
        assert_true(da.lr_scale == db.lr_scale);
        assert_string_equal(da.why, db.why);
    }
    assert_true(a.prev.batch > 32); /* it moved after the restore */
    bfit_controller_free(a.c);
    bfit_controller_free(b.c);
}

/* ---- API state and errors ----------------------------------------------------- */

static void test_state_errors(void **st)
{
    sim s;
    bfit_batch_decision d = BFIT_SIZED(bfit_batch_decision), d2 = BFIT_SIZED(bfit_batch_decision);
    bfit_step_stats ss = BFIT_SIZED(bfit_step_stats);
    (void)st;
    sim_config(&s, 64, 10000);
    sim_start(&s);
    ss.capacity = 10000;
    ss.free_bytes = 9000;
    assert_int_equal(bfit_controller_observe(s.c, &ss), BFIT_ESTATE);
    assert_int_equal(bfit_controller_on_oom(s.c, 8, 1, 1, &d), BFIT_ESTATE);
    assert_int_equal(bfit_controller_next(s.c, 5, 0, &d), BFIT_OK);
    assert_int_equal(bfit_controller_next(s.c, 5, 0, &d2), BFIT_OK);
    assert_int_equal(d.m, d2.m);
    assert_int_equal(d.k, d2.k);
    assert_int_equal(d.reason, BFIT_REASON_START);
    assert_int_equal(d2.reason, BFIT_REASON_START);
    assert_string_equal(d.why, d2.why);
    ss.step = 4;
    assert_int_equal(bfit_controller_observe(s.c, &ss), BFIT_EINVAL);
    ss.step = 5;
    ss.seconds = -1;
    assert_int_equal(bfit_controller_observe(s.c, &ss), BFIT_EINVAL);
    ss.seconds = 1;
    ss.nmicro = 1;
    assert_int_equal(bfit_controller_observe(s.c, &ss), BFIT_EINVAL);
    ss.nmicro = 0;
    assert_int_equal(bfit_controller_observe(s.c, &ss), BFIT_OK);
    assert_int_equal(bfit_controller_observe(s.c, &ss), BFIT_ESTATE);
    assert_int_equal(bfit_controller_next(s.c, 4, 0, &d), BFIT_EINVAL);
    assert_int_equal(bfit_controller_throughput(s.c, 64, &ss.seconds), BFIT_ESTATE);
    assert_int_equal(bfit_controller_noise_scale(s.c, &ss.seconds), BFIT_ESTATE);
    bfit_controller_free(s.c);
    bfit_controller_free(NULL);
}

static void expect_bad(const bfit_controller_config *cfg, const char *words)
{
    bfit_controller *c = (bfit_controller *)1;
    assert_int_equal(bfit_controller_new(cfg, &c), BFIT_EINVAL);
    assert_null(c);
    if (!strstr(bfit_errmsg(), words))
        fail_msg("message '%s' lacks '%s'", bfit_errmsg(), words);
}

static void test_bad_config(void **st)
{
    sim s;
    bfit_controller_config cfg;
    bfit_batch_point pts[2] = { { 10, 0, 32 }, { 5, 0, 64 } };
    bfit_controller *c;
    (void)st;
    sim_config(&s, 64, 10000);
    cfg = s.cfg;
    cfg.batch = 0;
    expect_bad(&cfg, "effective batch 0");
    cfg.batch = -3;
    expect_bad(&cfg, "effective batch -3");
    cfg = s.cfg;
    cfg.margin = 1.0;
    expect_bad(&cfg, "margin");
    cfg.margin = -0.1;
    expect_bad(&cfg, "margin");
    cfg = s.cfg;
    cfg.adaptive = 1;
    cfg.batch = 0;
    cfg.batch_min = 512;
    cfg.batch_max = 64;
    expect_bad(&cfg, "minimum <= maximum");
    cfg.batch_min = 1;
    expect_bad(&cfg, "2 <= minimum");
    cfg = s.cfg;
    cfg.rule = (bfit_lr_rule)7;
    expect_bad(&cfg, "unknown lr scaling rule");
    cfg = s.cfg;
    cfg.micro_batch = -1;
    expect_bad(&cfg, "micro-batch");
    cfg = s.cfg;
    cfg.plan_bytes = NULL;
    expect_bad(&cfg, "plan");
    cfg = s.cfg;
    cfg.schedule = pts;
    cfg.nschedule = 2;
    expect_bad(&cfg, "schedule point 2");
    cfg.nschedule = 1;
    cfg.batch = 0; /* the schedule starts at 10: no E before it */
    expect_bad(&cfg, "effective batch");
    cfg = s.cfg;
    cfg.tput_alpha = 0;
    expect_bad(&cfg, "EMA");
    cfg = s.cfg;
    cfg.adapt_factor = 1.0;
    expect_bad(&cfg, "factor");
    cfg = s.cfg;
    cfg.fixed_bytes = 5000;
    expect_bad(&cfg, "fixed bytes");
    /* not a config error but nothing fits: ENOMEM */
    cfg = s.cfg;
    cfg.capacity = 1050;
    assert_int_equal(bfit_controller_new(&cfg, &c), BFIT_ENOMEM);
    assert_non_null(strstr(bfit_errmsg(), "even micro-batch 1"));
}

static void test_parse_rules_and_reasons(void **st)
{
    bfit_lr_rule r;
    (void)st;
    assert_int_equal(bfit_lr_rule_parse("linear", &r), BFIT_OK);
    assert_int_equal(r, BFIT_LR_LINEAR);
    assert_int_equal(bfit_lr_rule_parse("SQRT", &r), BFIT_OK);
    assert_int_equal(r, BFIT_LR_SQRT);
    assert_int_equal(bfit_lr_rule_parse("none", &r), BFIT_OK);
    assert_int_equal(r, BFIT_LR_NONE);
    assert_int_equal(bfit_lr_rule_parse("cubic", &r), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "'cubic' (valid: linear, sqrt, none, adascale)"));
    assert_int_equal(bfit_lr_rule_parse("AdaScale", &r), BFIT_OK);
    assert_int_equal(r, BFIT_LR_ADASCALE);
    /* without a noise scale, the gain's lower bound */
    assert_true(bfit_lr_rule_scale(BFIT_LR_ADASCALE, 4) == 1 && bfit_lr_rule_scale(BFIT_LR_ADASCALE, 0.25) == 0.25);
    assert_int_equal(bfit_lr_rule_parse(NULL, &r), BFIT_EINVAL);
    assert_string_equal(bfit_lr_rule_name(BFIT_LR_SQRT), "sqrt");
    assert_true(fabs(bfit_lr_rule_scale(BFIT_LR_SQRT, 4) - 2) < 1e-15);
    assert_true(bfit_lr_rule_scale(BFIT_LR_LINEAR, 0.25) == 0.25);
    assert_true(bfit_lr_rule_scale(BFIT_LR_NONE, 8) == 1);
    assert_string_equal(bfit_batch_reason_name(BFIT_REASON_OOM), "out of memory");
    assert_string_equal(bfit_batch_reason_name(BFIT_REASON_NOISE), "noise scale");
    assert_string_equal(bfit_batch_reason_name(BFIT_REASON_GOODPUT), "goodput");
    assert_string_equal(bfit_batch_reason_name(BFIT_REASON_MEM_SHRANK), "memory shrank");
    for (int i = 1; i < BFIT_REASON_COUNT; i++)
        assert_true(strlen(bfit_batch_reason_name((bfit_batch_reason)i)) > 0);
}

static void test_parse_schedule(void **st)
{
    static const struct {
        const char *text, *words;
    } bad[] = {
        { "", "at character 1" },
        { "0:32,x:64", "at character 6" },
        { "0:32,100", "at character 9: expected ':'" },
        { "0:32;100:64", "at character 5: expected ','" },
        { "0:0", "at character 3: expected a batch size" },
        { "0:32,e1:64", "point 2 mixes epochs and steps" },
        { "100:32,50:64", "point 2: step 50 does not come after 100" },
        { "0:32,", "at character 6" },
        { "0:99999999999", "at character 3" },
        { "e:32", "at character 2" },
    };
    bfit_batch_point pts[3];
    int n;
    (void)st;
    assert_int_equal(bfit_batch_schedule_parse("0:32,1000:64,2000:128", pts, 3, &n), BFIT_OK);
    assert_int_equal(n, 3);
    assert_true(pts[2].at == 2000 && pts[2].batch == 128 && !pts[2].by_epoch);
    assert_int_equal(bfit_batch_schedule_parse("0:1,1:2,2:3,3:4", pts, 3, &n), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "more than 3 points"));
    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(bfit_batch_schedule_parse(bad[i].text, pts, 3, &n), BFIT_EINVAL);
        if (!strstr(bfit_errmsg(), bad[i].words))
            fail_msg("'%s': message '%s' lacks '%s'", bad[i].text, bfit_errmsg(), bad[i].words);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto_micro_batch),
        cmocka_unit_test(test_accumulation_covers_E),
        cmocka_unit_test(test_non_affine_plan_fits),
        cmocka_unit_test(test_oom_shrinks_to_largest_fitting),
        cmocka_unit_test(test_capacity_drop_shrinks_and_grows_back_when_faster),
        cmocka_unit_test(test_capacity_return_no_growth_when_slower),
        cmocka_unit_test(test_auto_loader_bounds_goodput),
        cmocka_unit_test(test_auto_loader_not_bounding),
        cmocka_unit_test(test_unmeasured_growth_then_fall_back),
        cmocka_unit_test(test_no_flapping),
        cmocka_unit_test(test_noise_does_not_flap),
        cmocka_unit_test(test_another_tenant_in_free_bytes),
        cmocka_unit_test(test_schedule_and_lr_rules),
        cmocka_unit_test(test_schedule_by_epoch_and_micro_batch),
        cmocka_unit_test(test_adaptive_follows_noise_scale),
        cmocka_unit_test(test_auto_follows_goodput),
        cmocka_unit_test(test_auto_ladder_extended_at_its_pace),
        cmocka_unit_test(test_auto_no_credit_below_reference),
        cmocka_unit_test(test_auto_does_not_flip),
        cmocka_unit_test(test_auto_accumulates_when_faster),
        cmocka_unit_test(test_auto_ladder_confirms_a_move),
        cmocka_unit_test(test_auto_ladder_again_when_load_changes),
        cmocka_unit_test(test_auto_ladder_reaches_the_size_in_use),
        cmocka_unit_test(test_auto_adascale),
        cmocka_unit_test(test_auto_plateau),
        cmocka_unit_test(test_auto_state_roundtrip),
        cmocka_unit_test(test_state_errors),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_parse_rules_and_reasons),
        cmocka_unit_test(test_parse_schedule),
        /* last: its steps draw from the timing noise's sequence, which test_noise_does_not_flap's figures are for */
        cmocka_unit_test(test_loader_bounds_micro_batch_growth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
