/* dist_run.c - a run's data-parallel side (docs/distributed.md).
 *
 * Every rank has its own device, arena, plan and controller; the effective
 * batch E is global. A step has two exchanges of a small status word
 * (dist.h) and one collective on the gradients:
 *   1. at the boundary, after each controller decided: every rank's
 *      outcome, micro-batch and measured throughput. A failure or a stop
 *      anywhere ends the step everywhere (no rank is left waiting); the
 *      ranks check that they decided the same E and lr scale, and split E
 *      into shares (shares.c) which every rank computes alike.
 *   2. after each rank's micro-steps over its contiguous slice of the
 *      step's samples (the loss normalised by the global E; an
 *      out-of-memory there shrinks and retries that rank's micro-batch
 *      only): outcomes, losses, local gradient norms. Then the gradients
 *      are summed (MPI on the CPU device, NCCL on GPUs), and every rank's
 *      optimizer takes the same step.
 * Rank 0 writes the log, the report, the weights and the checkpoints, and
 * logs every rank's micro-batch changes and the shares with their reasons. */
#include "base/clock.h"
#include "base/err.h"
#include "train/run_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SHARE_GAIN 0.1  /* new shares must end the step this much sooner, */
#define SHARE_CONFIRM 5 /* at this many step boundaries in a row */

int bfit_dist_available(void) { return bfit_comm_available(); }
void bfit_dist_finalize(void) { bfit_comm_finalize(); }
void bfit_dist_abort(int code) { bfit_comm_abort(code); }

static int world_size, world_rank = -1; /* once MPI is set up */

void bfit_dist_info(int *size, int *rank)
{
    if (world_rank >= 0) {
        *size = world_size;
        *rank = world_rank;
        return;
    }
    bfit_comm_launched(size, rank);
}

int bfit_dist_mode_parse(const char *name, bfit_dist_mode *out)
{
    static const char *const names[] = {"off", "on", "auto"};
    for (int i = 0; i < 3; i++)
        if (name && !strcmp(name, names[i])) {
            *out = (bfit_dist_mode)i;
            return BFIT_OK;
        }
    return bfit_fail(BFIT_EINVAL, "unknown data-parallel mode '%s' (valid: off, on, auto)", name ? name : "");
}

/* Whether c asks for data-parallel training; refused when it cannot be. */
static int wanted(const bfit_train_cfg *c, int *on)
{
    int size, rank;
    bfit_comm_launched(&size, &rank);
    *on = c->dist == BFIT_DIST_ON || (c->dist == BFIT_DIST_AUTO && size > 1);
    if (*on && !bfit_comm_available()) {
        if (size > 1)
            return bfit_fail_field(BFIT_EINVAL, "dist", "this batchfit was built without MPI, but the launcher "
                                   "started %d processes, which would each train alone: rebuild with -DBFIT_MPI=ON "
                                   "(libopenmpi-dev), or run one process without mpirun", size);
        return bfit_fail_field(BFIT_EINVAL, "dist", "this batchfit was built without MPI, so it cannot train "
                               "data-parallel: rebuild with -DBFIT_MPI=ON (libopenmpi-dev)");
    }
    return BFIT_OK;
}

/* The processes on one machine share it: with --device cuda each takes
 * the GPU numbered as its rank there (cuda:N names one for all, as asked),
 * and without --threads each its part of the cores. */
static int resources_of_rank(bfit_train_cfg *c)
{
    static char name[32];
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int local, nlocal, rc;
    if ((rc = bfit_comm_local(&local, &nlocal)) != BFIT_OK)
        return rc;
    if (!c->device && c->device_name && !strcmp(c->device_name, "cuda")) {
        snprintf(name, sizeof name, "cuda:%d", local);
        c->device_name = name;
    }
    if (c->threads == 0 && nlocal > 1)
        c->threads = cores / nlocal > 1 ? (int)(cores / nlocal) : 1;
    return BFIT_OK;
}

int bfit_run_dist_prepare(bfit_train_cfg *c, int *on, int *rank)
{
    int rc = wanted(c, on), size = 1;

    *rank = 0;
    if (rc == BFIT_OK && *on)
        rc = bfit_comm_world(&size, rank);
    if (rc != BFIT_OK)
        return rc;
    if (*on) {
        world_size = size;
        world_rank = *rank;
        if ((rc = resources_of_rank(c)) != BFIT_OK)
            return rc;
    }
    if (c->memory_schedule_rank >= size && (*on || c->memory_schedule_rank > 0))
        return bfit_fail_field(BFIT_EINVAL, "memory_schedule_rank", "rank %d does not exist: there %s %d",
                               c->memory_schedule_rank, size == 1 ? "is" : "are", size);
    if (c->memory_schedule_rank >= 0 && c->memory_schedule_rank != *rank) {
        c->memory_schedule = NULL; /* the simulated memory events are the one rank's */
        c->nmemory_schedule = 0;
        c->fail_nth_alloc = 0;
    }
    if (*on && c->auto_batch)
        return bfit_fail_field(BFIT_EINVAL, "batch", "auto is not supported data-parallel yet (its ladder times "
                               "one device): give E, a batch schedule or adaptive");
    if (*rank != 0) { /* rank 0 writes for everyone; the others are quiet */
        c->log = c->report = c->save = NULL;
        c->human = NULL;
    }
    return BFIT_OK;
}

int bfit_run_dist_writer(const bfit_run *r) { return !r->dp || r->dp->rank == 0; }

void bfit_run_dist_sample_sums(const bfit_run *r, uint64_t *sum, int64_t *n)
{
    *sum = 0;
    *n = 0;
    for (int q = 0; q < r->dp->size; q++) {
        *sum += r->dp->words[q].hsum;
        *n += r->dp->words[q].hn;
    }
}

/* ---- set-up ------------------------------------------------------------------ */

/* What each rank brings to a checkpoint sync: rank 0's decision, and its
 * own state. Exchanged as bytes, as the status word is. */
typedef struct sync_rec {
    int32_t due;
    run_rank rs;
} sync_rec;

int bfit_run_dist_new(bfit_run *r)
{
    run_dist *dp = calloc(1, sizeof *dp);
    int rc;

    if (!dp)
        return bfit_fail(BFIT_ENOMEM, "out of host memory");
    r->dp = dp;
    if ((rc = bfit_dist_new(&dp->d)) != BFIT_OK)
        return rc;
    dp->rank = bfit_dist_rank(dp->d);
    dp->size = bfit_dist_size(dp->d);
    dp->sq = calloc((size_t)dp->size, sizeof *dp->sq);
    dp->n = calloc((size_t)dp->size, sizeof *dp->n);
    dp->group.share = calloc((size_t)dp->size, sizeof *dp->group.share);
    dp->group.ranks = calloc((size_t)dp->size, sizeof *dp->group.ranks);
    dp->gather = calloc((size_t)dp->size, sizeof(sync_rec));
    if (!dp->sq || !dp->n || !dp->group.share || !dp->group.ranks || !dp->gather)
        return bfit_fail(BFIT_ENOMEM, "out of host memory for %d ranks", dp->size);
    return BFIT_OK;
}

void bfit_run_dist_free(bfit_run *r)
{
    run_dist *dp = r->dp;
    if (!dp)
        return;
    bfit_dist_free(dp->d);
    free(dp->sq);
    free(dp->n);
    free(dp->host);
    free(dp->group.share);
    free(dp->group.ranks);
    free(dp->gather);
    free(dp);
    r->dp = NULL;
}

/* The checksum crc, on: the numbers fmt prints. */
static uint64_t crc_fmt(uint64_t crc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static uint64_t crc_fmt(uint64_t crc, const char *fmt, ...)
{
    char b[1024]; /* numbers only: a few dozen, each under 32 characters */
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    return bfit_dist_crc(crc, b, n < 0 ? 0 : (size_t)n < sizeof b ? (size_t)n : sizeof b - 1);
}

/* a name whole, however long, with its end (so "ab","c" differs from "a","bc") */
static uint64_t crc_str(uint64_t crc, const char *s) { return bfit_dist_crc(crc, s ? s : "", s ? strlen(s) + 1 : 1); }

/* What every rank must have been given alike, as a checksum: what decides
 * the samples, the evaluation and the steps. Resources (memory, threads,
 * device, micro-batch, recomputation) may differ from rank to rank; whether
 * to checkpoint may not: every rank takes part in the exchange that brings
 * its state to rank 0 at a checkpoint. An option that differed would train
 * silently on other samples (the summed gradient keeps the weights alike),
 * or be found only at the epoch's weights check. */
static uint64_t config_check(const bfit_run *r)
{
    const bfit_train_cfg *c = &r->cfg;
    const bfit_lr_schedule *s = &c->sched;
    uint64_t crc = crc_str(crc_str(crc_str(crc_str(0, c->model), c->data), c->test_data), c->init_weights);

    crc = crc_fmt(crc, "%lld|%lld|%lld|%llu|%d|%d|%d|%d|%d|%d|%lld|%d|%d|%d|%d|%d|%d|%dx%d|%dx%d|%d", (long long)r->per_epoch,
                  (long long)c->eval_samples, (long long)bfit_model_param_count(r->s.M), (unsigned long long)c->seed,
                  c->batch, c->batch_tokens, c->adaptive, c->batch_min, c->batch_max, c->epochs,
                  (long long)c->max_steps, c->normalize, c->augment, c->seq_max, c->init_random, (int)c->csv_header,
                  c->img.resize, c->img.center_crop[0], c->img.center_crop[1], c->img.rrc[0], c->img.rrc[1],
                  c->checkpoint != NULL);
    crc = crc_fmt(crc, "|%d|%.17g|%.17g|%.17g|%.17g|%d|%.17g|%.17g|%.17g|%d|%lld|%.17g|%lld|%.17g|%lld|%.17g|%.17g|%d|"
                  "%d|%d|%lld|%d|%d|%.17g|%lld", (int)c->opt.kind, c->lr, c->opt.momentum, c->opt.dampening,
                  c->opt.weight_decay, c->opt.nesterov, c->opt.beta1, c->opt.beta2, c->opt.eps, (int)s->kind,
                  (long long)s->warmup_steps, s->warmup_start, (long long)s->step_size, s->gamma,
                  (long long)s->total_steps, s->min_factor, c->clip, c->lr_rule, c->lr_ref_batch,
                  c->batch_instead_of_decay, (long long)c->rewarmup_steps, (int)c->storage.precision, c->loss_scale,
                  c->loss_scale_init, (long long)c->loss_scale_interval);
    for (int i = 0; i < c->img.nmean; i++)
        crc = crc_fmt(crc, "|m%a", (double)c->img.mean[i]);
    for (int i = 0; i < c->img.nstd; i++)
        crc = crc_fmt(crc, "|s%a", (double)c->img.std[i]);
    for (int i = 0; i < c->nbatch_schedule && c->batch_schedule; i++)
        crc = crc_fmt(crc, "|%lld:%d:%d", (long long)c->batch_schedule[i].at, c->batch_schedule[i].by_epoch,
                      c->batch_schedule[i].batch);
    return crc;
}

/* A word saying this rank's outcome rc (and message). */
static void put_status(bfit_run *r, bfit_dist_word *w, int rc)
{
    memset(w, 0, sizeof *w);
    w->code = rc;
    w->stopped = rc == BFIT_ESTOPPED ? BFIT_ESTOPPED : rc == BFIT_ENOMEM ? r->pos.res.stopped : 0;
    w->flag = rc == BFIT_ESTOPPED && r->cfg.stop ? (int32_t)*r->cfg.stop : 0;
    w->hsum = r->ep_hsum; /* bfit_run_dist_sync's exchange brings them to rank 0 */
    w->hn = r->ep_hn;
    if (rc != BFIT_OK)
        snprintf(w->msg, sizeof w->msg, "%s", bfit_errmsg());
}

/* After an exchange: this rank's own failure, or another's as this rank's
 * (a stop or memory that did not come back stops every rank alike, so
 * rank 0 checkpoints the boundary). Either way every rank knows. */
static int peer_failure(bfit_run *r, const bfit_dist_word *all, const char *where)
{
    int f = bfit_dist_failed(all, r->dp->size);
    if (f < 0)
        return BFIT_OK;
    r->dp->together = 1;
    if (r->dp->mine.code != BFIT_OK)
        return r->dp->mine.code;
    if (all[f].code == BFIT_ESTOPPED || (all[f].code == BFIT_ENOMEM && all[f].stopped)) {
        r->pos.res.stopped = all[f].stopped;
        r->dp->peer_flag = all[f].flag;
        r->dp->peer_rank = f;
        return bfit_fail(all[f].code, "rank %d %s: %s", f, where, all[f].msg);
    }
    return bfit_fail(BFIT_EPEER, "rank %d failed %s: %s", f, where, all[f].msg);
}

/* Every rank shows its outcome rc and its checksum `check` of `what`: a
 * failure anywhere fails every rank, and the checksums must agree. */
static int agree(bfit_run *r, int rc, uint64_t check, const char *where, const char *what)
{
    run_dist *dp = r->dp;
    const bfit_dist_word *all;
    int q;

    put_status(r, &dp->mine, rc);
    dp->mine.check = check;
    if ((rc = bfit_dist_exchange(dp->d, &dp->mine, &all)) != BFIT_OK ||
        (rc = peer_failure(r, all, where)) != BFIT_OK)
        return rc;
    dp->words = all;
    if ((q = bfit_dist_disagree(all, dp->size)) >= 0) {
        dp->together = 1;
        return bfit_fail(BFIT_ESTATE, "rank %d and rank 0 differ in %s (checksums %08llx and %08llx)", q, what,
                         (unsigned long long)all[q].check, (unsigned long long)all[0].check);
    }
    return BFIT_OK;
}

/* Every rank gets here, also after a failure of its own set-up (rc), so
 * that no rank waits for one that has given up. */
int bfit_run_dist_setup(bfit_run *r, int rc)
{
    run_dist *dp = r->dp;
    bfit_model *M = r->s.M;

    /* refused here, where every rank learns of it, before the group trains */
    if (rc == BFIT_OK && M->per_token)
        rc = bfit_fail(BFIT_EINVAL, "data-parallel training of token models is not supported yet: train them in one "
                       "process");
    rc = agree(r, rc, rc == BFIT_OK ? config_check(r) : 0, "setting up", "the training options");
    if (rc == BFIT_ESTATE && dp->together)
        return bfit_fail_prefix(BFIT_EINVAL, "data-parallel: every process must be given the same model, data and "
                                "its treatment (normalisation, augmentation, test data, evaluation samples), batch, "
                                "optimizer and lr schedule, seed, and whether to checkpoint (--checkpoint); only "
                                "resources (memory, threads, device, micro-batch) may differ: ");
    if (rc != BFIT_OK)
        return rc;
    for (int i = 0; i < M->nparams; i++)
        dp->host_bytes += bfit_param_bytes(M->params[i]);
    if (!(dp->host = malloc(dp->host_bytes ? dp->host_bytes : 1)))
        rc = bfit_fail(BFIT_ENOMEM, "out of host memory");
    dp->norms = r->cfg.adaptive;
    if (!dp->resumed) /* a resumed rank has its own from the checkpoint */
        dp->prev_m = r->pos.m;
    if (rc == BFIT_OK)
        rc = bfit_dist_attach(dp->d, r->s.dev);
    if (rc == BFIT_OK)
        rc = bfit_model_zero_grads(M);
    if ((rc = agree(r, rc, 0, "opening the collectives", "nothing")) != BFIT_OK || (rc = bfit_run_dist_sync(r)) != BFIT_OK)
        return rc;
    bfit_log_event(&r->lg, "dist", "\"ranks\":%d,\"transport\":\"MPI\",\"collective\":\"%s\"", dp->size,
                   strncmp(bfit_device_name(r->s.dev), "cuda", 4) ? "MPI_Allreduce" : "NCCL");
    bfit_log_say(&r->lg, "batchfit: data-parallel over %d processes: rank 0 writes the log, weights and checkpoints",
                 dp->size);
    return BFIT_OK;
}

/* ---- the same weights everywhere -------------------------------------------- */

/* Batch norm's running statistics see each rank's own samples: their mean
 * over the ranks (sum on the device, scaled on the host). */
static int average_stats(bfit_run *r)
{
    run_dist *dp = r->dp;
    bfit_model *M = r->s.M;
    int rc = BFIT_OK;

    for (int i = 0; i < M->nparams && rc == BFIT_OK; i++) {
        bfit_param *p = M->params[i];
        size_t bytes = bfit_param_bytes(p), n = bytes / bfit_dtype_size(BFIT_F32);
        float *h = dp->host; /* f32 statistics, checked below */
        if (p->trainable || p->dtype != BFIT_F32)
            continue;
        rc = bfit_dist_sum(dp->d, p->data, n);
        if (rc == BFIT_OK)
            rc = bfit_device_download(r->s.dev, h, p->data, bytes);
        for (size_t k = 0; rc == BFIT_OK && k < n; k++)
            h[k] /= (float)dp->size;
        if (rc == BFIT_OK)
            rc = bfit_device_upload(r->s.dev, p->data, h, bytes);
    }
    return rc;
}

int bfit_run_dist_sync(bfit_run *r)
{
    run_dist *dp = r->dp;
    bfit_model *M = r->s.M;
    uint64_t crc = 0;
    int rc = average_stats(r);

    for (int i = 0; i < M->nparams && rc == BFIT_OK; i++) {
        size_t n = bfit_param_bytes(M->params[i]);
        rc = bfit_device_download(r->s.dev, dp->host, M->params[i]->data, n);
        crc = bfit_dist_crc(crc, dp->host, n);
    }
    if ((rc = agree(r, rc, crc, "checking the weights", "their parameters")) != BFIT_OK)
        return bfit_fail_prefix(rc, "after step %lld: ", (long long)r->pos.step);
    if (rc == BFIT_OK)
        bfit_log_event(&r->lg, "weights_check", "\"step\":%lld,\"ranks\":%d,\"crc32\":\"%08llx\"",
                       (long long)r->pos.step, dp->size, (unsigned long long)crc);
    return rc;
}

/* ---- a step ----------------------------------------------------------------- */

/* This rank's measured samples/s at its micro-batch, in 1/1024ths (0: not
 * measured yet). */
static int64_t rate_now(bfit_run *r)
{
    double v = 0;
    if (bfit_controller_throughput(r->ctl, r->pos.m, &v) != BFIT_OK || !(v > 0))
        return 0;
    return v * 1024 < 1e15 ? (int64_t)(v * 1024) : (int64_t)1e15;
}

/* Rank 0 says what changed another rank's micro-batch (its own changes it
 * logged when it made them). */
static void log_rank_changes(bfit_run *r, const bfit_dist_word *all)
{
    for (int q = 1; q < r->dp->size; q++) {
        if (all[q].m == all[q].prev_m)
            continue;
        bfit_log_event(&r->lg, "rank_batch_change", "\"step\":%lld,\"rank\":%d,\"reason\":\"%s\",\"m\":%d,"
                       "\"prev_m\":%d,\"ooms\":%d,\"why\":\"%s\"", (long long)r->pos.step, q,
                       bfit_batch_reason_name((bfit_batch_reason)all[q].reason), all[q].m, all[q].prev_m,
                       all[q].ooms, all[q].msg);
        bfit_log_say(&r->lg, "batchfit: step %lld: rank %d: %s", (long long)r->pos.step, q, all[q].msg);
    }
}

/* The ranks decided alike what only depends on what they share. */
static int same_decision(bfit_run *r, const bfit_dist_word *all)
{
    for (int q = 1; q < r->dp->size; q++)
        if (all[q].E != all[0].E || all[q].lr_scale != all[0].lr_scale)
            return bfit_fail(BFIT_ESTATE, "step %lld: rank %d decided E %d and lr scale %.17g, rank 0 E %d and "
                             "%.17g: their controllers saw different things", (long long)r->pos.step + 1, q, all[q].E,
                             all[q].lr_scale, all[0].E, all[0].lr_scale);
    return BFIT_OK;
}

static void log_shares(bfit_run *r, const char *why)
{
    const int *sh = bfit_dist_shares_of_E(r->dp->d);
    char list[512];
    size_t len = 0;
    for (int q = 0; q < r->dp->size && len < sizeof list; q++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%d", q ? "," : "", sh[q]);
    bfit_log_event(&r->lg, "shares", "\"step\":%lld,\"E\":%d,\"shares\":[%s],\"why\":\"%s\"", (long long)r->pos.step,
                   r->pos.d.batch, list, why);
    bfit_log_say(&r->lg, "batchfit: step %lld: %s", (long long)r->pos.step, why); /* as bfit_run_log_change counts */
}

int bfit_run_dist_begin(bfit_run *r, int rc, int E)
{
    run_dist *dp = r->dp;
    bfit_dist_word *w = &dp->mine;
    const bfit_dist_word *all;
    double t0 = bfit_clock_mono();
    char why[BFIT_DIST_MSG + 200];

    dp->comm = dp->sum_secs = 0;
    if (rc == BFIT_OK && bfit_run_stop_requested(r))
        rc = bfit_fail(BFIT_ESTOPPED, "stopped on request at step %lld", (long long)r->pos.step);
    put_status(r, w, rc);
    if (rc == BFIT_OK) {
        w->m = r->pos.m;
        w->prev_m = dp->prev_m;
        w->E = r->pos.d.batch;
        w->lr_scale = r->pos.d.lr_scale;
        w->rate = rate_now(r);
        w->reason = r->pos.m != dp->prev_m ? (int32_t)r->pos.d.reason : 0;
        if (w->reason)
            snprintf(w->msg, sizeof w->msg, "%.*s", (int)sizeof w->msg - 1, r->pos.d.why);
    }
    rc = bfit_dist_exchange(dp->d, w, &all);
    dp->comm += bfit_clock_mono() - t0;
    if (rc != BFIT_OK || (rc = peer_failure(r, all, "at the start of the step")) != BFIT_OK ||
        (rc = same_decision(r, all)) != BFIT_OK)
        return rc;
    dp->words = all;
    log_rank_changes(r, all);
    if (bfit_dist_plan(dp->d, all[0].E, E, all, SHARE_GAIN, SHARE_CONFIRM, why, sizeof why))
        log_shares(r, why);
    dp->share = bfit_dist_shares(dp->d)[dp->rank];
    dp->off = bfit_dist_offset(dp->d);
    dp->prev_m = r->pos.m;
    dp->ooms = r->pos.res.ooms;
    return BFIT_OK;
}

int bfit_run_dist_take(bfit_run *r, int E, int *n)
{
    run_dist *dp = r->dp;
    int64_t numel = bfit_shape_numel(r->s.M->input);
    int got = 0, rc = BFIT_OK;

    *n = dp->share;
    if (r->tr.s) { /* the stream: just this rank's slice, then past the step */
        bfit_cursor c = bfit_stream_tell(r->tr.s), at = {c.epoch, c.pos + dp->off}, end = {c.epoch, c.pos + E};
        if (dp->share && (rc = bfit_stream_seek(r->tr.s, at)) == BFIT_OK)
            rc = bfit_stream_take(r->tr.s, dp->share, r->stage_x, r->stage_y, &got);
        if (rc == BFIT_OK)
            rc = bfit_stream_seek(r->tr.s, end);
    } else { /* a caller's source gives every rank the whole step */
        rc = bfit_feed_take(&r->tr, E, r->stage_x, r->stage_y, &got);
        if (rc == BFIT_OK && got == E) {
            memmove(r->stage_x, r->stage_x + (size_t)dp->off * (size_t)numel,
                    (size_t)dp->share * (size_t)numel * sizeof *r->stage_x);
            memmove(r->stage_y, r->stage_y + dp->off, (size_t)dp->share * sizeof *r->stage_y);
            got = dp->share;
        }
    }
    if (rc == BFIT_OK && got != dp->share)
        rc = bfit_fail(BFIT_ESTATE, "the training stream gave %d samples, expected %d (rank %d's share of %d)", got,
                       dp->share, dp->rank, E);
    return rc;
}

/* The local part of the status after the micro-steps: loss, norm, time. */
static int local_status(bfit_run *r, int rc, int E)
{
    run_dist *dp = r->dp;
    bfit_dist_word *w = &dp->mine;
    double loss = 0, sq = -1;

    if (rc == BFIT_OK)
        rc = bfit_model_stats_read(r->s.M, &loss, NULL);
    if (rc == BFIT_OK && dp->norms && dp->share > 0) {
        /* the local mean gradient is the local sum (normalised by E) times E / share */
        rc = bfit_gradnorm_sq(r->gn, &sq);
        sq *= ((double)E / dp->share) * ((double)E / dp->share);
    }
    put_status(r, w, rc);
    w->m = r->pos.m;
    w->prev_m = dp->prev_m;
    w->E = r->pos.d.batch;
    w->lr_scale = r->pos.d.lr_scale;
    w->samples = dp->share;
    w->ooms = r->pos.res.ooms - dp->ooms;
    w->loss = loss;
    w->sq = sq;
    w->secs = r->micro_secs;
    w->reason = r->pos.m != dp->prev_m ? BFIT_REASON_OOM : 0;
    if (rc == BFIT_OK && w->reason)
        snprintf(w->msg, sizeof w->msg, "%.*s", (int)sizeof w->msg - 1, r->pos.d.why);
    return rc;
}

/* The ranks' local norms for the noise scale (those with samples). */
static void gather_norms(run_dist *dp, const bfit_dist_word *all)
{
    dp->k = 0;
    for (int q = 0; q < dp->size; q++)
        if (all[q].samples > 0 && all[q].sq >= 0) {
            dp->sq[dp->k] = all[q].sq;
            dp->n[dp->k] = all[q].samples;
            dp->k++;
        }
}

int bfit_run_dist_end(bfit_run *r, int rc, int E)
{
    run_dist *dp = r->dp;
    bfit_model *M = r->s.M;
    const bfit_dist_word *all;
    double t0;

    rc = local_status(r, rc, E);
    t0 = bfit_clock_mono();
    rc = bfit_dist_exchange(dp->d, &dp->mine, &all);
    dp->comm += bfit_clock_mono() - t0;
    if (rc != BFIT_OK || (rc = peer_failure(r, all, "in the step")) != BFIT_OK)
        return rc;
    dp->words = all;
    log_rank_changes(r, all);
    dp->prev_m = r->pos.m;
    dp->loss = 0;
    for (int q = 0; q < dp->size; q++)
        dp->loss += all[q].loss;
    t0 = bfit_clock_mono();
    /* no backward ran here (a share of 0 samples): the block still holds the
     * last step's sum, since backward sets a step's gradients and zeroing
     * only marks them (nn/gradset.c); this rank adds nothing */
    if (M->grads_stale)
        rc = bfit_device_zero(r->s.dev, M->grad_block, M->grad_bytes);
    if (rc == BFIT_OK)
        rc = bfit_dist_sum(dp->d, M->grad_block, M->grad_bytes / bfit_dtype_size(BFIT_F32));
    if (rc == BFIT_OK)
        rc = bfit_device_sync(r->s.dev); /* the sum's time is the sum's, not the update's */
    dp->sum_secs = bfit_clock_mono() - t0;
    dp->comm += dp->sum_secs;
    dp->comm_total += dp->comm;
    dp->sum_total += dp->sum_secs;
    dp->steps++;
    if (rc == BFIT_OK && dp->norms) {
        gather_norms(dp, all);
        rc = bfit_gradnorm_sq(r->gn, &dp->full_sq);
    }
    return rc;
}

void bfit_run_dist_observe(bfit_run *r, bfit_step_stats *ss)
{
    run_dist *dp = r->dp;

    /* this rank's throughput: its samples over its own compute, not over
     * the time it waited for the others */
    ss->samples = dp->share;
    ss->seconds = ss->seconds - dp->comm > ss->micro_seconds ? ss->seconds - dp->comm : ss->micro_seconds;
    ss->nmicro = 0;
    ss->step_norms = 0;
    if (dp->norms && dp->k >= 2) {
        /* McCandlish et al.: the ranks' local means are the small batches,
         * the global mean the big one; every rank sees the same numbers */
        ss->nmicro = dp->k;
        ss->micro_sqnorm = dp->sq;
        ss->micro_size = dp->n;
        ss->full_sqnorm = dp->full_sq;
        ss->step_norms = 1;
        ss->diff_sqnorm = -1;
    }
}

/* Rank q's micro-steps in the last step, and their size. */
static int steps_of(const bfit_dist_word *w) { return w->m > 0 ? (w->samples + w->m - 1) / w->m : 0; }
static int micro_of(const bfit_dist_word *w) { return w->samples < w->m ? w->samples : w->m; }

void bfit_run_dist_progress(const bfit_run *r, char *buf, size_t n)
{
    const run_dist *dp = r->dp;
    size_t len = (size_t)snprintf(buf, n, "E %d =", r->pos.d.batch);
    for (int q = 0; q < dp->size && q < 8 && len < n; q++)
        len += (size_t)snprintf(buf + len, n - len, "%s r%d %d (m %d x %d)", q ? " +" : "", q,
                                dp->words[q].samples, micro_of(&dp->words[q]), steps_of(&dp->words[q]));
    if (dp->size > 8 && len < n)
        snprintf(buf + len, n - len, " + %d more ranks", dp->size - 8);
}

void bfit_run_dist_step_json(const bfit_run *r, char *buf, size_t n)
{
    const run_dist *dp = r->dp;
    size_t len = (size_t)snprintf(buf, n, ",\"comm_seconds\":%.6f,\"allreduce_seconds\":%.6f,\"ranks\":[", dp->comm,
                                  dp->sum_secs);
    for (int q = 0; q < dp->size && len < n; q++) {
        char one[160];
        size_t k = (size_t)snprintf(one, sizeof one, "%s{\"share\":%d,\"m\":%d,\"k\":%d,\"seconds\":%.6f,\"ooms\":%d}",
                                    q ? "," : "", dp->words[q].samples, micro_of(&dp->words[q]), steps_of(&dp->words[q]),
                                    dp->words[q].secs, dp->words[q].ooms);
        if (len + k + 2 > n)
            break; /* the JSON stays whole: the ranks that fit */
        memcpy(buf + len, one, k + 1);
        len += k;
    }
    if (len + 2 <= n)
        memcpy(buf + len, "]", 2);
}

/* ---- evaluation -------------------------------------------------------------- */

void bfit_run_dist_eval_slice(const bfit_run *r, int64_t n, int64_t *from, int64_t *to)
{
    *from = n * r->dp->rank / r->dp->size;
    *to = n * (r->dp->rank + 1) / r->dp->size;
}

int bfit_run_dist_eval_sums(bfit_run *r, int rc, bfit_eval_info *ev)
{
    run_dist *dp = r->dp;
    const bfit_dist_word *all;
    int m = ev->m;

    put_status(r, &dp->mine, rc);
    dp->mine.loss = ev->test_loss;
    dp->mine.sq = ev->test_acc;
    dp->mine.hn = ev->samples;
    dp->mine.hsum = (uint64_t)ev->counted; /* the samples scored */
    if ((rc = bfit_dist_exchange(dp->d, &dp->mine, &all)) != BFIT_OK ||
        (rc = peer_failure(r, all, "in the evaluation")) != BFIT_OK)
        return rc;
    memset(ev, 0, sizeof *ev);
    for (int q = 0; q < dp->size; q++) { /* in rank order: every rank adds alike */
        ev->test_loss += all[q].loss;
        ev->test_acc += all[q].sq;
        ev->samples += all[q].hn;
        ev->counted += (int64_t)all[q].hsum;
    }
    ev->m = m;
    return BFIT_OK;
}

/* ---- checkpoints: every rank's own state ------------------------------------ */

int bfit_run_dist_ckpt_sync(bfit_run *r, int *due)
{
    run_dist *dp = r->dp;
    sync_rec mine, *all = dp->gather;
    const int *sh;
    int rc;

    memset(&mine, 0, sizeof mine);
    mine.due = *due;
    mine.rs.m = r->pos.m;
    mine.rs.prev_m = dp->prev_m;
    mine.rs.micro = r->pos.micro;
    mine.rs.d = r->pos.d;
    bfit_controller_state_get(r->ctl, &mine.rs.ctl);
    if ((rc = bfit_dist_allgather(dp->d, &mine, all, sizeof mine)) != BFIT_OK)
        return bfit_fail_prefix(rc, "after step %lld, bringing the ranks' state together: ", (long long)r->pos.step);
    *due = all[0].due; /* rank 0 keeps the time */
    dp->group.n = dp->size;
    dp->group.step = r->pos.step;
    bfit_dist_state_get(dp->d, &dp->group.E, &dp->group.streak, &sh);
    memcpy(dp->group.share, sh, (size_t)dp->size * sizeof *sh);
    for (int q = 0; q < dp->size; q++)
        dp->group.ranks[q] = all[q].rs;
    return BFIT_OK;
}

int bfit_run_dist_resume(bfit_run *r, const run_group *g, const char *path)
{
    run_dist *dp = r->dp;
    const run_rank *mine;
    bfit_controller_state cs;
    int rc;

    if (!g || g->n != dp->size) {
        /* the controller every rank resumed is the checkpoint's, rank 0's
         * of another group: its throughput records are no rank's here */
        bfit_controller_state_get(r->ctl, &cs);
        memset(cs.tp, 0, sizeof cs.tp);
        if ((rc = bfit_controller_state_set(r->ctl, &cs)) != BFIT_OK)
            return bfit_fail_prefix(BFIT_EFORMAT, "%s: rank %d's controller: ", path, dp->rank);
        bfit_log_say(&r->lg, "batchfit: the checkpoint %s %s: the shares start equal, and each rank measures "
                     "its speed afresh", path, g ? "is of another number of ranks" : "keeps no ranks' state");
        return BFIT_OK;
    }
    if ((rc = bfit_dist_state_set(dp->d, g->E, g->streak, g->share)) != BFIT_OK)
        return bfit_fail_prefix(BFIT_EFORMAT, "%s: ", path);
    mine = &g->ranks[dp->rank];
    cs = mine->ctl;
    /* the memory now, as for the run's own controller (ckpt.c) */
    cs.capacity = bfit_arena_capacity(r->s.arena);
    cs.free = bfit_arena_available(r->s.arena) + bfit_model_step_bytes(r->s.M);
    if ((rc = bfit_controller_state_set(r->ctl, &cs)) != BFIT_OK)
        return bfit_fail_prefix(BFIT_EFORMAT, "%s: rank %d's controller: ", path, dp->rank);
    r->pos.m = mine->m;
    r->pos.d = mine->d;
    r->pos.micro = mine->micro;
    dp->prev_m = mine->prev_m;
    dp->resumed = 1;
    return BFIT_OK;
}
