/* test_token_budget.c - the effective batch counted in tokens
 * (bfit_train_cfg.batch_tokens): a step takes whole sequences until their
 * tokens that have a label reach E; the micro-batch counts tokens, planned
 * at the longest length, and takes more sequences where they are shorter;
 * the loss is normalised by the step's tokens, so the split does not
 * change the training; fixed windows train exactly as the same batch in
 * sequences; out-of-memory recovery, a memory schedule and the adaptive E
 * all work in tokens; what cannot be a token budget is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "batchfit.h"
#include "internal.h"
#include "tdev.h"
#include "tfiles.h"
#include "ttok.h"

static int setup(void **st)
{
    (void)st;
    return tmp_setup("tokbudget");
}

static int teardown(void **st)
{
    (void)st;
    return tmp_teardown();
}

#define T 40
#define NSEQ 96
static const char *spec = "input tokens=40\n"
                          "embed 16 vocab=13 positions=40\n"
                          "residual {\n layernorm\n linear 48\n attention 2\n linear 16\n}\n"
                          "residual {\n layernorm\n linear 32\n gelu\n linear 16\n}\n"
                          "layernorm\n"
                          "linear 13 tie=1 bias=0\n";

/* Sequence i has 4 to 40 real tokens of the pattern 0 1 .. 12 0 .., then
 * padding (id 0, label -1); `full`: all 40 real. */
static ttok tokens(int64_t n, int full)
{
    return (ttok){.n = n, .seq = T, .vocab = 13, .lo = 4, .mul = 7, .mod = 37, .full = full};
}

/* What the run did, step by step and micro-batch by micro-batch. */
typedef struct seen {
    int n;
    double loss[2048];
    int tokens[2048], seqs[2048], k[2048], m[2048];
    int most_in_micro;         /* the most sequences one micro-batch ran */
    int changes, ooms, shrinks, noise_changes;
    int min_E, max_E;          /* the E the controller decided */
    double lr_scale_ok;        /* 1 while every decision's lr scale is sqrt(E / E0) */
    int E0;
} seen;

static void on_step(void *ud, const struct bfit_step_info *s)
{
    seen *v = ud;
    assert_true(v->n < 2048);
    v->loss[v->n] = s->loss;
    v->tokens[v->n] = s->batch;
    v->seqs[v->n] = s->sequences;
    v->k[v->n] = s->k;
    v->m[v->n] = s->m;
    v->n++;
}

static void on_samples(void *ud, const float *x, const int32_t *y, int n)
{
    seen *v = ud;
    (void)x, (void)y;
    if (n > v->most_in_micro)
        v->most_in_micro = n;
}

static void on_change(void *ud, const bfit_batch_decision *d, int64_t step)
{
    seen *v = ud;
    (void)step;
    v->changes++;
    v->ooms += d->reason == BFIT_REASON_OOM;
    v->shrinks += d->reason == BFIT_REASON_MEM_SHRANK;
    v->noise_changes += d->reason == BFIT_REASON_NOISE;
    if (d->reason == BFIT_REASON_OOM || d->reason == BFIT_REASON_MEM_SHRANK)
        assert_true(d->m < d->prev_m);
    if (d->batch < v->min_E)
        v->min_E = d->batch;
    if (d->batch > v->max_E)
        v->max_E = d->batch;
    if (v->E0 && d->reason == BFIT_REASON_NOISE && d->batch < d->prev_batch &&
        fabs(d->lr_scale - sqrt((double)d->batch / v->E0)) > 1e-9)
        v->lr_scale_ok = 0; /* a lower scale applies at once (a higher one ramps) */
}

typedef struct opts {
    int tokens, batch, micro, seq_max, full, epochs;
    uint64_t memory, fail_nth;
    const bfit_mem_point *sched;
    int nsched;
    int adaptive, bmin, bmax;
    int64_t max_steps;
    const bfit_batch_point *bsched;
    int nbsched;
} opts;

static char spec_path[300];

/* One run of the tiny model on the source; rc its return. */
static int run(const opts *o, seen *v, bfit_train_result *res)
{
    ttok train = tokens(NSEQ, o->full), test = tokens(32, o->full);
    int E0 = v->E0; /* the caller's */
    bfit_source ts = ttok_source(&train), vs = ttok_source(&test);
    bfit_train_cfg c = bfit_train_cfg_default();
    FILE *f = fopen(spec_path, "w");
    c.device_name = "cpu"; /* the CPU is meant: --device auto could take a GPU */
    assert_non_null(f);
    fputs(spec, f);
    fclose(f);
    memset(v, 0, sizeof *v);
    v->E0 = E0;
    v->min_E = 1 << 30;
    v->lr_scale_ok = 1;
    c.model = spec_path;
    c.train_source = &ts;
    c.test_source = &vs;
    c.batch_tokens = o->tokens;
    c.batch = o->batch;
    c.micro_batch = o->micro;
    c.seq_max = o->seq_max;
    c.epochs = o->epochs ? o->epochs : 2;
    c.threads = 2;
    c.opt = bfit_optim_cfg_default(BFIT_OPT_ADAMW);
    c.lr = 1e-2;
    c.prefetch = 0;
    c.margin = 0;
    c.memory = o->memory;
    c.fail_nth_alloc = o->fail_nth;
    c.memory_schedule = o->sched;
    c.nmemory_schedule = o->nsched;
    c.adaptive = o->adaptive;
    c.max_steps = o->max_steps;
    c.batch_schedule = o->bsched;
    c.nbatch_schedule = o->nbsched;
    c.batch_min = o->bmin;
    c.batch_max = o->bmax;
    c.on_step = on_step;
    c.on_batch_change = on_change;
    c.cb_ud = v;
    c.on_samples = on_samples;
    c.on_samples_ud = v;
    return bfit_train_from(&c, res);
}

static void run_ok(const opts *o, seen *v, bfit_train_result *res)
{
    if (run(o, v, res) != BFIT_OK)
        fail_msg("train: %s", bfit_errmsg());
}

/* The losses of two runs agree to float rounding (the split differs). */
static void same_training(const seen *a, const seen *b, const char *what)
{
    assert_int_equal(a->n, b->n);
    for (int i = 0; i < a->n; i++)
        if (!(fabs(a->loss[i] - b->loss[i]) < 1e-4 * a->loss[i]))
            fail_msg("%s: step %d: loss %.7f against %.7f", what, i + 1, b->loss[i], a->loss[i]);
}

/* Each step takes the sequences, in the source's order, up to and
 * including the one whose tokens reach E; an epoch's last step takes what
 * is left. Worked out here from the lengths, step by step, both epochs. */
static void test_steps_reach_budget(void **st)
{
    opts o = {.tokens = 1, .batch = 150, .seq_max = T};
    ttok s = tokens(NSEQ, 0);
    seen v = {0};
    bfit_train_result res;
    int step = 0;
    (void)st;
    run_ok(&o, &v, &res);
    for (int epoch = 0; epoch < 2; epoch++) {
        int64_t i = 0;
        while (i < NSEQ) {
            int tok = 0, n = 0;
            while (i < NSEQ && tok < 150)
                tok += ttok_len(&s, i++), n++;
            assert_true(step < v.n);
            if (v.tokens[step] != tok || v.seqs[step] != n)
                fail_msg("epoch %d step %d: %d tokens in %d sequences, expected %d in %d", epoch + 1, step + 1,
                         v.tokens[step], v.seqs[step], tok, n);
            step++;
        }
    }
    assert_int_equal(v.n, step);
    assert_int_equal(res.samples, 2 * NSEQ);
    print_message("  %d steps of at least 150 tokens (first: %d tokens in %d sequences)\n", v.n, v.tokens[0],
                  v.seqs[0]);
}

/* Windows of T real tokens each: a budget of 8 T tokens is the batch of 8
 * sequences, and trains exactly as it does (the same micro-batches, the
 * same normalisation: every loss bit for bit). */
static void test_windows_match_samples(void **st)
{
    opts a = {.batch = 8, .full = 1}, b = {.tokens = 1, .batch = 8 * T, .full = 1};
    seen va = {0}, vb = {0};
    bfit_train_result ra, rb;
    (void)st;
    run_ok(&a, &va, &ra);
    run_ok(&b, &vb, &rb);
    assert_int_equal(va.n, 24);
    assert_int_equal(vb.n, 24);
    for (int i = 0; i < va.n; i++) {
        assert_int_equal(vb.tokens[i], 8 * T);
        assert_int_equal(vb.seqs[i], 8);
        if (va.loss[i] != vb.loss[i])
            fail_msg("step %d: %.9g in sequences, %.9g in tokens", i + 1, va.loss[i], vb.loss[i]);
    }
    assert_true(ra.test_loss == rb.test_loss);
    assert_true(va.loss[va.n - 1] < 0.7 * va.loss[0]); /* it trains */
}

/* The split does not change the training: the whole step in one
 * micro-batch, or micro-batches capped at 40 or 120 tokens (one sequence of
 * 40, more of shorter ones), give the same losses to float rounding. */
static void test_split_invariant(void **st)
{
    opts a = {.tokens = 1, .batch = 200, .seq_max = T}, b = a, c = a;
    seen va = {0}, vb = {0}, vc = {0};
    bfit_train_result r;
    int kb = 0, kc = 0;
    (void)st;
    b.micro = 40;
    c.micro = 120;
    run_ok(&a, &va, &r);
    run_ok(&b, &vb, &r);
    run_ok(&c, &vc, &r);
    same_training(&va, &vb, "micro-batch 40 tokens");
    same_training(&va, &vc, "micro-batch 120 tokens");
    for (int i = 0; i < va.n; i++) {
        /* memory to spare: the micro-batches only end where lengths halve */
        assert_true(va.k[i] <= vc.k[i] && vc.k[i] <= vb.k[i]);
        kb = vb.k[i] > kb ? vb.k[i] : kb;
        kc = vc.k[i] > kc ? vc.k[i] : kc;
    }
    print_message("  most micro-batches in a step: %d at 40 tokens, %d at 120 tokens\n", kb, kc);
    assert_true(kb > kc && kc > 1);
    assert_true(vb.most_in_micro > 1); /* 40 tokens: one of 40, two of 16 or fewer */
}

/* Memory for 4 sequences of 40: the micro-batch is 160 tokens, and where
 * the sequences are shorter it runs more of them in the same bytes (the
 * plan at their length); the arena never holds more than the memory. The
 * training is that of the run with memory to spare. */
static void test_more_of_shorter(void **st)
{
    opts a = {.tokens = 1, .batch = 400, .seq_max = T}, b = a;
    seen va = {0}, vb = {0};
    bfit_train_result ra, rb;
    (void)st;
    run_ok(&a, &va, &ra);
    b.memory = tdev_plan_peak(spec_path, BFIT_OPT_ADAMW, 4);
    run_ok(&b, &vb, &rb);
    same_training(&va, &vb, "memory for 4 sequences");
    print_message("  memory %llu bytes: micro-batch %d tokens, up to %d sequences in one, peak %llu\n",
                  (unsigned long long)b.memory, vb.m[0], vb.most_in_micro, (unsigned long long)rb.peak_bytes);
    assert_int_equal(vb.m[0], 4 * T);
    assert_true(vb.most_in_micro > 4);
    assert_true(rb.peak_bytes <= b.memory);
    assert_int_equal(rb.ooms, 0);
}

/* An allocation fails at each of the first reservations in turn: the run
 * recovers with a smaller micro-batch (in tokens), retries the same
 * sequences, and trains as the undisturbed run. Failures in the set-up
 * (parameters, optimizer) end the run before its first step instead. */
static void test_oom_in_tokens(void **st)
{
    opts a = {.tokens = 1, .batch = 200, .seq_max = T};
    seen va = {0}, vb = {0};
    bfit_train_result ra, rb;
    int recovered = 0;
    (void)st;
    run_ok(&a, &va, &ra);
    for (uint64_t nth = 1; nth <= 14; nth++) {
        opts b = a;
        b.fail_nth = nth;
        if (run(&b, &vb, &rb) != BFIT_OK) {
            assert_int_equal(vb.n, 0); /* the set-up's allocations: no step ran */
            continue;
        }
        if (!rb.ooms)
            continue;
        recovered++;
        assert_int_equal(vb.ooms, rb.ooms);
        assert_int_equal(rb.samples, ra.samples);
        same_training(&va, &vb, "after an out-of-memory");
        for (int i = 0; i < vb.n; i++)
            assert_int_equal(vb.tokens[i], va.tokens[i]); /* E unchanged: the same sequences */
    }
    print_message("  %d of the first 14 allocations failing were recovered from in the run\n", recovered);
    assert_true(recovered >= 2);
}

/* Memory falls at step 3 to what 2 sequences of 40 need and comes back at
 * step 6: the micro-batch (tokens) shrinks before anything fails; the steps
 * keep their tokens; the training is the same. (Whether m grows back
 * depends on measured speed: test_control holds those rules.) */
static void test_memory_schedule(void **st)
{
    opts a = {.tokens = 1, .batch = 300, .seq_max = T, .memory = 1ull << 30}, b = a;
    bfit_mem_point mp[2] = {{3, 0}, {6, 1ull << 30}};
    seen va = {0}, vb = {0};
    bfit_train_result ra, rb;
    (void)st;
    mp[0].capacity = tdev_plan_peak(spec_path, BFIT_OPT_ADAMW, 2);
    run_ok(&a, &va, &ra);
    b.sched = mp;
    b.nsched = 2;
    run_ok(&b, &vb, &rb);
    same_training(&va, &vb, "memory schedule");
    print_message("  micro-batch %d -> %d tokens (k %d -> %d)\n", vb.m[2], vb.m[3], vb.k[2], vb.k[3]);
    assert_int_equal(rb.ooms, 0);
    assert_true(vb.shrinks >= 1);
    assert_true(vb.m[3] <= 2 * T && vb.m[3] < vb.m[2]);
    assert_true(vb.k[3] > 1);
    for (int i = 0; i < vb.n; i++)
        assert_int_equal(vb.tokens[i], va.tokens[i]);
}

/* --batch-tokens adaptive: E moves with the noise scale measured in tokens
 * (this pattern is easy to predict: its noise scale is a few tokens), so
 * from 1024 tokens it falls to the bound of 128, by at most half every 100
 * steps; every step has at least two micro-batches (the noise scale's); a
 * lower lr scale is sqrt(E / E0) for AdamW at once. */
static void test_adaptive_in_tokens(void **st)
{
    opts o = {.tokens = 1, .adaptive = 1, .batch = 1024, .bmin = 128, .bmax = 1024, .seq_max = T, .epochs = 1000,
              .max_steps = 310};
    seen v = {0};
    bfit_train_result r;
    (void)st;
    v.E0 = 1024;
    run_ok(&o, &v, &r);
    print_message("  %d steps, E %d..%d tokens, %d noise-scale changes, noise scale %.1f tokens\n", v.n, v.min_E,
                  v.max_E, v.noise_changes, r.noise_scale);
    assert_true(r.noise_scale > 0);
    assert_true(v.noise_changes >= 1);
    assert_true(v.min_E == 128 && v.max_E <= 1024);
    assert_true(v.lr_scale_ok == 1);
    for (int i = 0; i < v.n; i++)
        if (v.k[i] < 2 && v.seqs[i] > 1)
            fail_msg("step %d: %d sequences in one micro-batch", i + 1, v.seqs[i]);
}

/* A batch schedule counts tokens too: 100 tokens a step, then 300 from
 * step 5; the steps reach them (the epoch's last takes what is left). */
static void test_schedule_in_tokens(void **st)
{
    bfit_batch_point pts[2];
    int n;
    opts o = {.tokens = 1, .batch = 100, .seq_max = T, .epochs = 1};
    seen v = {0};
    bfit_train_result r;
    (void)st;
    assert_int_equal(bfit_batch_schedule_parse("0:100,5:300", pts, 2, &n), BFIT_OK);
    o.bsched = pts;
    o.nbsched = n;
    run_ok(&o, &v, &r);
    assert_true(v.n > 6);
    for (int i = 0; i < v.n - 1; i++) {
        int E = i < 5 ? 100 : 300;
        if (v.tokens[i] < E || v.tokens[i] >= E + T)
            fail_msg("step %d: %d tokens for a budget of %d", i + 1, v.tokens[i], E);
    }
    assert_int_equal(r.samples, NSEQ);
}

/* A budget in tokens needs a token model, and auto is not one yet. */
static void test_refusals(void **st)
{
    opts o = {.tokens = 1, .batch = 100};
    bfit_train_cfg c = bfit_train_cfg_default();
    bfit_train_result r;
    seen v = {0};
    (void)st;
    c.device_name = "cpu"; /* the CPU is meant: --device auto could take a GPU */
    c.model = "mlp";
    c.batch_tokens = 1;
    c.max_steps = 1;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_EINVAL);
    assert_string_equal(bfit_errfield(), "batch_tokens");
    assert_non_null(strstr(bfit_errmsg(), "not a token model"));
    c.model = spec_path;
    c.auto_batch = 1;
    c.batch = 0;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_EINVAL);
    assert_string_equal(bfit_errfield(), "batch_tokens");
    o.tokens = 1;
    assert_int_equal(run(&o, &v, &r), BFIT_OK); /* the same model with a budget trains */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_steps_reach_budget),
        cmocka_unit_test(test_windows_match_samples),
        cmocka_unit_test(test_split_invariant),
        cmocka_unit_test(test_more_of_shorter),
        cmocka_unit_test(test_oom_in_tokens),
        cmocka_unit_test(test_memory_schedule),
        cmocka_unit_test(test_adaptive_in_tokens),
        cmocka_unit_test(test_schedule_in_tokens),
        cmocka_unit_test(test_refusals),
    };
    snprintf(spec_path, sizeof spec_path, "/tmp/bfit_tokbudget_spec_%d.cfg", (int)getpid());
    int rc = cmocka_run_group_tests(tests, setup, teardown);
    unlink(spec_path);
    return rc;
}
