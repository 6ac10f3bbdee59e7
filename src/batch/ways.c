/* ways.c - the "ways to increase the batch" table for a model and a memory
 * (`batchfit plan --ways`): the largest micro-batch and its peak for f32 as
 * stored plainly, lean f32, bf16, bf16 with recomputation at block
 * boundaries and auto, and auto with two-step accumulation (the effective
 * batch doubles, the micro-batch does not); the modelled extra work of each
 * (recomputed FLOPs over the step's own), and on request the measured step
 * time of a few real steps on random samples. */
#include "base/clock.h"
#include "base/median.h"
#include "base/err.h"
#include "batch/plan.h"
#include "batch/ways.h"
#include "nn/needs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    bfit_storage st;
    int accum;
} rows[BFIT_WAYS] = {
    {"f32", {BFIT_F32, 0, BFIT_RECOMPUTE_NONE}, 1},
    {"lean f32", {BFIT_F32, 1, BFIT_RECOMPUTE_NONE}, 1},
    {"bf16", {BFIT_BF16, 1, BFIT_RECOMPUTE_NONE}, 1},
    {"bf16 + recompute blocks", {BFIT_BF16, 1, BFIT_RECOMPUTE_BLOCKS}, 1},
    {"bf16 + recompute auto", {BFIT_BF16, 1, BFIT_RECOMPUTE_AUTO}, 1},
    {"bf16 + recompute auto + accumulation x2", {BFIT_BF16, 1, BFIT_RECOMPUTE_AUTO}, 2},
};

/* The median seconds of `steps` training steps (forward, backward, update)
 * of m random samples, after one unmeasured; on a model of its own. */
static int measure(const bfit_graph_desc *g, bfit_device *dev, bfit_arena *arena, const bfit_storage *st,
                   const bfit_optim_cfg *opt, uint64_t budget, int m, int steps, double *secs)
{
    bfit_model *M = NULL;
    bfit_optim *o = NULL;
    double t[16];
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    int rc;

    steps = steps < 1 ? 1 : steps > 16 ? 16 : steps;
    if ((rc = bfit_model_new(g, dev, arena, &M)) != BFIT_OK)
        return rc;
    rc = bfit_model_set_storage(M, st, opt, budget, m);
    if (rc == BFIT_OK)
        rc = bfit_model_alloc_params(M, 1);
    if (rc == BFIT_OK)
        rc = bfit_model_init_params(M, 1);
    if (rc == BFIT_OK)
        rc = bfit_optim_new(opt, M->trainable, M->ntrainable, dev, arena, &o);
    if (rc == BFIT_OK)
        rc = bfit_model_reserve(M, m, 1);
    if (rc == BFIT_OK) /* once: the steps read the same input */
        rc = bfit_model_random_input(M, m, 0, &seed);
    for (int s = -1; rc == BFIT_OK && s < steps; s++) {
        double t0 = bfit_clock_mono();
        rc = bfit_model_forward(M, (uint64_t)s + 2);
        if (rc == BFIT_OK)
            rc = bfit_model_backward(M, 1.0f / (float)m);
        if (rc == BFIT_OK)
            rc = bfit_optim_step(o, 1e-3);
        if (rc == BFIT_OK)
            rc = bfit_model_refresh_copies(M);
        if (rc == BFIT_OK)
            rc = bfit_model_zero_grads(M);
        if (rc == BFIT_OK)
            rc = bfit_device_sync(dev);
        if (s >= 0)
            t[s] = bfit_clock_mono() - t0;
    }
    if (rc == BFIT_OK)
        *secs = bfit_median(t, steps);
    bfit_optim_free(o);
    bfit_model_free(M);
    return rc;
}

/* Row i, or its error in w->error (the row left without figures). */
static void way_row(const bfit_graph_desc *g, bfit_model *M, bfit_device *dev, bfit_arena *arena,
                    const bfit_optim_cfg *opt, uint64_t budget, int measure_steps, bfit_way *out, int i)
{
    bfit_way *w = &out[i];
    bfit_op_needs nd;
    bfit_step_plan p;
    char why[256];
    int rc;

    rc = bfit_graph_op_needs(g, rows[i].st.precision, &nd);
    if (rc == BFIT_OK && !bfit_device_supports_needs(dev, &nd, why, sizeof why)) {
        snprintf(w->error, sizeof w->error, "unsupported on %s: %s", bfit_device_name(dev), why);
        return;
    }
    if (rc == BFIT_OK)
        rc = bfit_model_set_storage(M, &rows[i].st, opt, budget, 0);
    if (rc == BFIT_OK)
        rc = bfit_plan_max_batch(M, opt, 1, budget, BFIT_PLAN_LIMIT, &w->m, NULL);
    if (rc == BFIT_OK && w->m > 0) {
        w->batch = w->m * w->accum;
        rc = bfit_plan_compute(M, opt, w->m, 1, &p);
    }
    if (rc == BFIT_OK && w->m > 0) {
        w->peak = p.peak;
        w->extra = p.flops > p.regen_flops ? p.regen_flops / (p.flops - p.regen_flops) : 0;
        if (measure_steps > 0 && w->accum == 1) {
            rc = measure(g, dev, arena, &rows[i].st, opt, budget, w->m, measure_steps, &w->step_secs);
            if (rc == BFIT_ENOMEM) { /* measured memory is the plan's: say so, do not hide it */
                w->measure_failed = 1;
                rc = BFIT_OK;
            }
        } else if (measure_steps > 0 && i > 0) {
            w->step_secs = out[i - 1].step_secs * w->accum; /* the same micro-steps, twice */
        }
        if (w->step_secs > 0)
            w->samples_per_sec = w->batch / w->step_secs;
    }
    if (rc != BFIT_OK) {
        snprintf(w->error, sizeof w->error, "failed: %s", bfit_errmsg());
        w->m = w->batch = 0;
        w->step_secs = w->samples_per_sec = 0;
        bfit_clear_error();
    }
}

int bfit_plan_ways(const bfit_graph_desc *g, bfit_device *dev, bfit_arena *arena, const bfit_optim_cfg *opt,
                   uint64_t budget, int measure_steps, bfit_way out[BFIT_WAYS])
{
    bfit_model *M = NULL;
    int rc = bfit_model_new(g, dev, arena, &M);

    for (int i = 0; rc == BFIT_OK && i < BFIT_WAYS; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].name = rows[i].name;
        out[i].storage = rows[i].st;
        out[i].accum = rows[i].accum;
        out[i].conv_algo = -1;
        way_row(g, M, dev, arena, opt, budget, measure_steps, out, i);
    }
    bfit_model_free(M);
    return rc;
}
