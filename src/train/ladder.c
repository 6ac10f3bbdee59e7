/* ladder.c - `--batch auto`: the find ladder inside a run. After its first
 * steps (and again when the load changed) the controller asks for
 * micro-batch sizes to be timed (doubling up
 * to the largest that fits, stopping once the rate levels off and the
 * micro-batch in use is measured; then, if they propose a move, the size
 * proposed and the size in use again, one after the other); each is a
 * forward and backward of real samples with no optimizer step (the best of
 * three, after one that sets the size up), and the run
 * goes on as if it had not happened: the parameters (batch-norm running
 * statistics included) are put back, the gradients zeroed, the step's
 * loss statistics reset. The time it takes counts as training time. */
#include "base/clock.h"
#include "base/err.h"
#include "train/run_int.h"

#include <stdlib.h>
#include <string.h>

#define LADDER_RUNS 4 /* the first sets up the size's primitives; the best of the others counts */
/* A ladder's time is kept within this share of the run's (estimated from
 * its pace so far), and at least LADDER_MIN_S: a rung predicted to go past
 * it (twice the last rung's time per sample, at least) is not measured, and
 * the ladder ends there. */
#define LADDER_SHARE 0.02
#define LADDER_MIN_S 0.25

int bfit_run_has_batchnorm(const bfit_model *M)
{
    for (int i = 0; i < M->n; i++)
        if (M->nodes[i].l->cfg.kind == BFIT_L_BATCHNORM)
            return 1;
    return 0;
}

/* The staging holds the step's E samples; a larger rung repeats them. */
static void stage_repeat(bfit_run *r, int E, int m)
{
    size_t numel = (size_t)bfit_shape_numel(r->s.M->input);

    for (int i = E; i < m; i++) {
        memcpy(r->stage_x + (size_t)i * numel, r->stage_x + (size_t)(i % E) * numel, numel * sizeof(float));
        memcpy(r->stage_y + (size_t)i * (size_t)r->s.M->labels_per_sample,
               r->stage_y + (size_t)(i % E) * (size_t)r->s.M->labels_per_sample,
               sizeof *r->stage_y * (size_t)r->s.M->labels_per_sample);
    }
}

/* One rung: *secs the best of the timed runs, 0 if m does not fit. */
static int time_rung(bfit_run *r, int m, double *secs)
{
    bfit_model *M = r->s.M;
    int rc = bfit_model_reserve(M, m, 1);

    *secs = 0;
    if (rc == BFIT_ENOMEM)
        return BFIT_OK;
    for (int i = 0; rc == BFIT_OK && i < LADDER_RUNS; i++) {
        double t0 = bfit_clock_mono(), t;
        rc = bfit_model_set_input(M, r->stage_x, r->stage_y, m);
        if (rc == BFIT_OK)
            rc = bfit_model_forward(M, r->cfg.seed * 7919ull + (uint64_t)m * 31u + (uint64_t)i);
        if (rc == BFIT_OK)
            rc = bfit_model_backward(M, 1.0f / (float)m);
        if (rc == BFIT_OK)
            rc = bfit_device_sync(r->s.dev);
        t = bfit_clock_mono() - t0;
        if (rc == BFIT_OK && i > 0 && (*secs == 0 || t < *secs))
            *secs = t;
    }
    return rc;
}

/* This ladder's time budget: LADDER_SHARE of the whole run's training time
 * as its pace so far predicts it. */
static double ladder_budget(const bfit_run *r)
{
    double total = (double)r->cfg.epochs * (double)r->per_epoch, done, b;
    done = (double)r->pos.epoch * (double)r->per_epoch + (double)r->pos.taken;
    if (r->cfg.max_steps && r->pos.step > 0 && (double)r->pos.step / (double)r->cfg.max_steps > done / total)
        done = total * (double)r->pos.step / (double)r->cfg.max_steps;
    b = done > 0 ? LADDER_SHARE * r->pos.train_time * total / done : 0;
    return b > LADDER_MIN_S ? b : LADDER_MIN_S;
}

int bfit_run_ladder(bfit_run *r, int E)
{
    bfit_model *M = r->s.M;
    void *params;
    char line[512] = "";
    size_t len = 0;
    double t0 = bfit_clock_mono(), budget = ladder_budget(r), per_sample = 0;
    int m, rc = BFIT_OK, cut = 0, last = 0, again = 0;

    if (bfit_controller_ladder_next(r->ctl) == 0)
        return BFIT_OK;
    params = malloc(M->param_bytes ? M->param_bytes : 1);
    if (!params)
        return bfit_fail(BFIT_ENOMEM, "out of host memory for a copy of the parameters");
    rc = bfit_device_download(r->s.dev, params, M->param_block, M->param_bytes);
    while (rc == BFIT_OK && (m = bfit_controller_ladder_next(r->ctl)) > 0) {
        double secs = 0, spent = bfit_clock_mono() - t0;
        if (per_sample > 0 && spent + LADDER_RUNS * per_sample * m > budget) {
            cut = m; /* not measured: the ladder ends at the last size that was */
        } else if (m <= r->max_take) { /* the staging's size; the controller keeps within batch_max */
            bfit_log_progress(&r->lg, 0, "ladder: timing micro-batch %d (%.2f s so far of at most %.2f s)", m,
                              spent, budget);
            stage_repeat(r, E, m);
            rc = time_rung(r, m, &secs);
            if (secs > 0)
                per_sample = secs / m;
        }
        if (rc == BFIT_OK)
            rc = bfit_controller_ladder_record(r->ctl, m, secs);
        if (rc != BFIT_OK)
            break;
        bfit_log_event(&r->lg, "ladder", "\"step\":%lld,\"m\":%d,\"seconds\":%.6f,\"samples_per_s\":%.6g",
                       (long long)r->pos.step, m, secs, secs > 0 ? m / secs : 0.0);
        /* a size again: the controller confirms the move the rungs propose */
        again += m <= last && !again;
        if (len < sizeof line)
            len += (size_t)snprintf(line + len, sizeof line - len, "%s%d: %.0f", !len ? "" : again == 1 ? "; again, "
                                    : ", ", m, secs > 0 ? m / secs : 0.0);
        again += again == 1;
        last = m;
    }
    if (cut)
        bfit_log_say(&r->lg, "batchfit: ladder (samples/s of forward and backward at micro-batch m): %s; %.2f s "
                     "(stopped before %d: a ladder takes at most %.0f%% of the run's time, %.2f s here)", line,
                     bfit_clock_mono() - t0, cut, 100 * LADDER_SHARE, budget);
    else
        bfit_log_say(&r->lg, "batchfit: ladder (samples/s of forward and backward at micro-batch m): %s; %.2f s",
                     line, bfit_clock_mono() - t0);
    bfit_model_unreserve(M);
    if (rc == BFIT_OK)
        rc = bfit_device_upload(r->s.dev, M->param_block, params, M->param_bytes);
    if (rc == BFIT_OK)
        rc = bfit_model_zero_grads(M);
    if (rc == BFIT_OK)
        rc = bfit_model_stats_reset(M);
    free(params);
    return rc;
}
