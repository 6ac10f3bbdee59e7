/* step.c - one optimizer step of a run.
 *
 * An optimizer step consumes exactly E samples (the last of an epoch may
 * have fewer) in micro-batches of m; the loss is normalised by the samples
 * in the step, so the gradient does not depend on the split. Every
 * micro-step reserves its memory before it computes (OOM-atomic); on an
 * out-of-memory the micro-batch shrinks to what the plan says fits now and
 * the same samples are taken again: they are still in the host staging, so
 * the stream is not rewound. A step that fails before its update puts the
 * run back where it was (snap.c); the memory it may use is memsched.c's, and
 * when not even micro-batch 1 fits it waits for memory (memwait.c). */
#include "base/clock.h"
#include "base/err.h"
#include "base/hash.h"
#include "base/sized.h"
#include "base/text.h"
#include "train/run_int.h"

#include <math.h>
#include <string.h>

/* Inputs beyond this (as the model sees them): a product of two such
 * values, an input by a weight an update of them made, is past 1e30, a
 * step away from a float's 3.4e38. */
#define HUGE_INPUT 1e15

/* A decision that changed m or E: counted, logged, told to the caller. */
void bfit_run_log_change(bfit_run *r, const bfit_batch_decision *d, int prev_m, uint64_t free_now)
{
    r->pos.res.batch_changes++;
    char gp[160] = "";
    if (d->reason == BFIT_REASON_GOODPUT) /* the numbers behind the choice */
        snprintf(gp, sizeof gp, ",\"noise_scale\":%.6g,\"tput\":[%.6g,%.6g],\"efficiency\":[%.6g,%.6g]",
                 d->noise_scale, d->tput_old, d->tput_new, d->eff_old, d->eff_new);
    bfit_log_event(&r->lg, "batch_change",
                   "\"step\":%lld,\"reason\":\"%s\",\"m\":%d,\"prev_m\":%d,\"E\":%d,\"prev_E\":%d,"
                   "\"lr_scale\":%.6g,\"free\":%llu%s,\"why\":\"%s\"",
                   (long long)r->pos.step, bfit_batch_reason_name(d->reason), d->m, prev_m, d->batch,
                   d->reason == BFIT_REASON_OOM ? d->batch : d->prev_batch, d->lr_scale,
                   (unsigned long long)free_now, gp, d->why);
    bfit_log_say(&r->lg, "batchfit: step %lld: %s", (long long)r->pos.step, d->why);
    if (r->cfg.on_batch_change)
        r->cfg.on_batch_change(r->cfg.cb_ud, d, r->pos.step);
}

/* The controller's decision for this step, logged when it changed. When
 * not even micro-batch 1 fits, wait for memory (nothing has changed yet). */
static int decide(bfit_run *r)
{
    bfit_batch_decision *d = &r->pos.d;
    int rc;
    d->size = sizeof *d;
    while ((rc = bfit_controller_next(r->ctl, r->pos.step, r->pos.epoch, d)) == BFIT_ENOMEM)
        if ((rc = bfit_run_wait_for_memory(r)) != BFIT_OK)
            return rc;
    if (rc != BFIT_OK)
        return rc;
    if (d->reason != BFIT_REASON_NONE && d->reason != BFIT_REASON_START)
        bfit_run_log_change(r, d, d->prev_m, bfit_run_free_for_step(r));
    if (d->held[0]) { /* a change the compute alone would have made */
        bfit_log_event(&r->lg, "batch_hold", "\"step\":%lld,\"m\":%d,\"E\":%d,\"loader_rate\":%.6g,\"why\":\"%s\"",
                       (long long)r->pos.step, d->m, d->batch, d->loader_rate, d->held);
        bfit_log_say(&r->lg, "batchfit: step %lld: %s", (long long)r->pos.step, d->held);
    }
    if (d->m != r->pos.m)
        bfit_model_unreserve(r->s.M); /* blocks sized for the new m, not kept from the old */
    r->pos.m = d->m;
    if (d->split && !r->pos.warned_bn && bfit_run_has_batchnorm(r->s.M)) {
        r->pos.warned_bn = 1;
        bfit_log_event(&r->lg, "warning",
                       "\"step\":%lld,\"what\":\"batch norm sees micro-batches of %d, not the effective batch %d\"",
                       (long long)r->pos.step, r->pos.m, d->batch);
        bfit_log_say(&r->lg, "batchfit: warning: batch norm computes its statistics over micro-batches of %d, "
                             "not over the effective batch of %d (see docs/dynamic.md)", r->pos.m, d->batch);
    }
    return BFIT_OK;
}

/* Reserve a micro-batch of want; on out-of-memory the controller shrinks m
 * (nothing of this micro-batch ran) and *retry is set. */
/* Reservations the plan says fit that a step may see refused before it
 * fails: a shared device's memory can go between a look and a take. */
#define REFUSED_FITTING_MAX 8

static int reserve(bfit_run *r, int want, int *retry)
{
    uint64_t free_now;
    int rc = bfit_model_reserve(r->s.M, want, 1);
    /* what failed, in E's units: the micro-batch m whose bytes a length's
     * sequences were sized by (seq_max, tokens), else the samples */
    int failed = r->fit_seqs ? r->pos.m : want;

    *retry = 0;
    if (rc != BFIT_ENOMEM)
        return rc;
    free_now = bfit_arena_available(r->s.arena);
    r->pos.d.size = sizeof r->pos.d;
    rc = bfit_controller_on_oom(r->ctl, failed, free_now, bfit_arena_capacity(r->s.arena), &r->pos.d);
    if (rc != BFIT_OK) {
        /* not even 1 fits in the free: wait for memory, then try the same samples again */
        if ((rc = bfit_run_wait_for_memory(r)) != BFIT_OK)
            return rc;
        /* it returned at once: the plan fits, yet the allocator refused. Again
         * and again, that is no shortage to wait out: say so, not spin */
        if (++r->refused_fitting > REFUSED_FITTING_MAX)
            return bfit_fail_field(BFIT_ENOMEM, "memory", "step %lld: micro-batch %d was refused %d times in a row "
                                   "though the plan says it fits (%llu bytes free by the arena's count): the device's "
                                   "allocator refuses memory it reports free", (long long)r->pos.step + 1, failed,
                                   r->refused_fitting, (unsigned long long)bfit_arena_available(r->s.arena));
        *retry = 1;
        return BFIT_OK;
    }
    r->pos.res.ooms++;
    bfit_run_log_change(r, &r->pos.d, failed, free_now);
    r->pos.m = r->pos.d.m;
    *retry = 1;
    return BFIT_OK;
}

/* cfg.sample_check: FNV-1a 64 of a sample's floats, then of its label. */
static uint64_t sample_hash(const float *x, int64_t numel, int32_t y)
{
    uint64_t h = bfit_fnv1a(1469598103934665603ull, x, (size_t)numel * sizeof *x);
    for (int i = 0; i < 4; i++)
        h = bfit_fnv1a_byte(h, (unsigned char)(((uint32_t)y >> (8 * i)) & 0xff));
    return h;
}

/* Samples [done, done + want) of the step, already staged at done; the
 * step has U units of E (samples, or with a token budget tokens). */
static int micro_step(bfit_run *r, int64_t U, int done, int want, int k)
{
    int64_t numel = bfit_shape_numel(r->s.M->input);
    const float *x = r->stage_x + (size_t)done * (size_t)numel;
    const int32_t *y = r->stage_y + (size_t)done * (size_t)r->s.M->labels_per_sample;
    int rc;

    if (r->cfg.seq_max)
        bfit_run_pack(r, done, want, &x, &y);
    else if (r->cls_T)
        bfit_run_pack_cls(r, done, want, &x);
    else if (r->s.M->per_token)
        r->pos.res.tokens_computed += (int64_t)want * r->s.M->labels_per_sample;

    if (r->cfg.on_samples)
        r->cfg.on_samples(r->cfg.on_samples_ud, x, y, want);
    for (int i = 0; r->cfg.sample_check && i < want; i++)
        r->step_hsum += sample_hash(x + (size_t)i * (size_t)numel, numel, y[i]);
    r->step_hn += r->cfg.sample_check ? want : 0;
    rc = bfit_model_set_input(r->s.M, x, y, want);
    if (rc == BFIT_OK)
        rc = bfit_model_forward(r->s.M, r->cfg.seed * 1000003ull + r->pos.micro++);
    if (rc == BFIT_OK)
        rc = bfit_model_backward(r->s.M, (float)(r->step_scale / r->step_count)); /* E, or the step's tokens */
    if (rc == BFIT_OK && r->track && k < MAX_MICRO) {
        /* this micro-batch's mean gradient is its increment times U/u (its
         * units: samples, or its tokens). The copy still holds the previous
         * step's gradient, so the first increment is the sum itself, and in
         * a step of one micro-batch the difference is that of consecutive
         * steps. */
        double acc, dsq, u = r->cfg.batch_tokens ? (double)bfit_run_counted(r->s.M, y, want) : want;
        u = u < 1 ? 1 : u; /* a micro-batch of padding only: no tokens */
        r->track_dirty = 1;
        rc = bfit_gradnorm_track(r->gn, &acc, &dsq);
        r->full_sq = acc; /* after the last micro-batch: the step's mean gradient */
        r->step_gnorm = sqrt(acc);
        r->diff_sq = k == 0 && !r->pos.track_stale ? dsq : -1;
        r->micro_sq[k] = (k == 0 ? acc : dsq) * ((double)U / u) * ((double)U / u);
        r->micro_n[k] = (int)u;
    }
    return rc;
}

/* The step's samples, staged once: a retry after an out-of-memory takes
 * the very same ones (they stay in the staging, so the stream is not
 * rewound). E samples; with a token budget whole sequences until their
 * tokens reach E, at most what is left of the epoch; data-parallel, this
 * rank's share of E. *n gets how many this process stages. */
static int stage(bfit_run *r, int E, int *n)
{
    int64_t left = r->per_epoch - r->pos.taken;
    int got, rc;
    if (r->dp) /* token models are refused data-parallel (bfit_run_dist_setup) */
        return bfit_run_dist_take(r, E, n);
    if (r->cfg.batch_tokens)
        rc = bfit_feed_take_tokens(&r->tr, E, (int)(left < r->max_take ? left : r->max_take), r->stage_x,
                                   r->stage_y, &got);
    else
        rc = bfit_feed_take(&r->tr, E, r->stage_x, r->stage_y, &got);
    if (rc != BFIT_OK)
        return rc;
    if (r->cfg.batch_tokens ? got < 1 : got != E)
        return bfit_fail(BFIT_ESTATE, "the training stream gave %d samples, expected %d%s", got, E,
                         r->cfg.batch_tokens ? " tokens' worth" : "");
    *n = got;
    if (r->cfg.seq_max)
        bfit_run_sort_by_length(r, got);
    /* a classifier's step of several micro-batches: sorted, so that each is sized at its longest */
    r->cls_sorted = r->cls_T && r->fit_seqs && r->pos.m < got;
    if (r->cls_sorted)
        bfit_run_sort_cls(r, got);
    return BFIT_OK;
}

/* The micro-steps of a step of E (samples, or a token budget's tokens);
 * *n gets the samples this process took, *k the micro-steps. */
static int micro_steps(bfit_run *r, int E, int *n, int *k)
{
    int done = 0, rc;
    int64_t U;

    *k = 0;
    r->micro_secs = 0;
    r->step_hsum = 0;
    r->step_hn = 0;
    if ((rc = stage(r, E, n)) != BFIT_OK)
        return rc;
    /* the loss is normalised by the step's samples, or its tokens that count
     * (the model is at its longest here: whole rows) */
    r->step_count = r->dp ? E : bfit_run_counted(r->s.M, r->stage_y, *n);
    U = r->cfg.batch_tokens ? r->step_count : *n;
    if (r->s.M->per_token) /* its real tokens (a masked LM labels some of them) */
        r->pos.res.tokens += bfit_run_real_tokens(r->stage_y, (int64_t)*n * r->s.M->labels_per_sample);
    if (r->step_count < 1)
        return bfit_fail(BFIT_EINVAL, "step %lld: all %d sequences are padding: no token has a label",
                         (long long)r->pos.step + 1, *n);
    /* the ladder times whole staged rows: a classifier at its full length */
    if (r->cfg.auto_batch && r->cls_T && (rc = bfit_model_set_seq(r->s.M, r->cls_T)) != BFIT_OK)
        return rc;
    if (r->cfg.auto_batch && (rc = bfit_run_ladder(r, E)) != BFIT_OK)
        return rc;
    while (done < *n) {
        int want = 0, retry;
        double t0;
        if (bfit_run_stop_requested(r)) /* the step is abandoned; the caller puts the run back */
            return bfit_fail(BFIT_ESTOPPED, "stopped on request in step %lld after %d of its %d samples: the step "
                             "was abandoned, the run is at step %lld", (long long)r->pos.step + 1, done, *n,
                             (long long)r->pos.step);
        if (r->cfg.seq_max && (rc = bfit_run_trim(r, done)) != BFIT_OK)
            return rc;
        if (r->cls_sorted && (rc = bfit_run_trim_cls(r, done, 1)) != BFIT_OK) /* sorted: the longest */
            return rc;
        if ((rc = bfit_run_micro_size(r, done, *n - done, &want)) != BFIT_OK ||
            (r->cls_T && (rc = bfit_run_trim_cls(r, done, want)) != BFIT_OK) ||
            (rc = reserve(r, want, &retry)) != BFIT_OK)
            return rc;
        if (retry)
            continue;
        t0 = bfit_clock_mono();
        rc = micro_step(r, U, done, want, *k);
        r->micro_secs += bfit_clock_mono() - t0;
        if (rc != BFIT_OK)
            return rc;
        done += want;
        (*k)++;
    }
    return BFIT_OK;
}

/* A step's loss that is not finite, blamed on what caused it: the data
 * first (values so large that sums of their products overflow a float,
 * whatever the learning rate), then the first step (its loss is the
 * initial weights', before any update), and only then the learning rate. */
static int loss_not_finite(bfit_run *r, double loss)
{
    long long step = (long long)r->pos.step + 1; /* the step just taken */
    double v = 0;
    int64_t i = 0, e = 0;

    if (r->s.train)
        bfit_dataset_largest(r->s.train, r->s.mean, r->s.std, &v, &i, &e);
    if (!(fabs(v) < HUGE_INPUT))
        return bfit_fail_field(BFIT_EINVAL, "data", "the loss became %g at step %lld: the training data %s holds %g "
                               "(value %lld of sample %lld%s), too large for a float model's sums (inputs beyond "
                               "%.0e overflow), whatever the learning rate: check the data%s", loss, step,
                               bfit_dataset_source(r->s.train), v, (long long)e + 1, (long long)i + 1,
                               r->s.mean ? ", after normalisation" : "", HUGE_INPUT,
                               r->s.mean ? "" : ", or normalise it (leave out --no-normalize)");
    if (step == 1)
        return bfit_fail(BFIT_EINVAL, "the loss is %g at step 1, before any update, so not because of the learning "
                         "rate: the initial weights on the first samples give it (the largest input is %g); check "
                         "the data and the model", loss, v);
    return bfit_fail_field(BFIT_EINVAL, "lr", "the loss became %g at step %lld: lower the learning rate", loss, step);
}

/* Loss scaling: are the gradients finite? If not, the step is skipped
 * (gradients zeroed, the scale halved, said); else they are unscaled. */
static int unscale(bfit_run *r, int *apply)
{
    double sq, used = r->step_scale;
    int rc;
    *apply = 1;
    r->skipped_now = 0;
    if (!r->scaling)
        return BFIT_OK;
    if (r->cfg.poison_step && r->pos.step + 1 == r->cfg.poison_step)
        sq = NAN; /* fault injection: the overflow a test cannot otherwise make on f32-range hardware */
    else if ((rc = bfit_gradnorm_sq(r->gn, &sq)) != BFIT_OK)
        return rc;
    *apply = bfit_loss_scaler_update(&r->pos.ls, isfinite(sq));
    if (isfinite(sq) && used > 0)
        r->step_gnorm = sqrt(sq) / used;
    r->skipped_now = !*apply;
    if (!*apply) {
        bfit_log_event(&r->lg, "loss_scale", "\"step\":%lld,\"skipped\":1,\"scale\":%.9g,\"prev_scale\":%.9g,"
                       "\"skips\":%lld", (long long)r->pos.step, r->pos.ls.scale, used, (long long)r->pos.ls.skipped);
        bfit_log_say(&r->lg, "batchfit: step %lld: the gradients overflowed at loss scale %g: step skipped (its "
                     "samples count), scale now %g (%lld skipped so far)", (long long)r->pos.step + 1, used,
                     r->pos.ls.scale, (long long)r->pos.ls.skipped);
        return bfit_model_zero_grads(r->s.M);
    }
    if (r->pos.ls.scale != used)
        bfit_log_event(&r->lg, "loss_scale", "\"step\":%lld,\"skipped\":0,\"scale\":%.9g,\"prev_scale\":%.9g",
                       (long long)r->pos.step, r->pos.ls.scale, used);
    return used == 1.0 ? BFIT_OK : bfit_gradnorm_scale(r->gn, 1.0 / used);
}

/* Clip, update, zero the gradients. */
static int update(bfit_run *r, double *lr)
{
    int rc = BFIT_OK, apply;
    *lr = 0;
    if ((rc = unscale(r, &apply)) != BFIT_OK || !apply)
        return rc;
    if (r->cfg.clip > 0)
        rc = bfit_gradnorm_clip(r->gn, r->cfg.clip, &r->step_gnorm);
    /* auto: the schedule counts steps of E0 units (E changes) */
    *lr = bfit_lr_at(&r->sched, r->cfg.lr, r->cfg.auto_batch ? r->pos.sched_units / r->E0 : r->pos.step) *
          r->pos.d.lr_scale;
    if (rc == BFIT_OK)
        rc = bfit_optim_step(r->opt, *lr);
    if (rc == BFIT_OK)
        rc = bfit_model_refresh_copies(r->s.M); /* mixed precision: the compute copies follow the masters */
    if (rc == BFIT_OK)
        rc = bfit_model_zero_grads(r->s.M);
    return rc;
}

static int observe(bfit_run *r, int E, int k, double loss, double t0, double wait0, double *secs)
{
    bfit_step_stats ss;
    memset(&ss, 0, sizeof ss);
    ss.size = sizeof ss;
    ss.step = r->pos.step;
    ss.epoch = r->pos.epoch;
    ss.samples = E;
    ss.seconds = *secs = bfit_clock_mono() - t0 - r->step_waited; /* waiting for memory is not computing */
    ss.data_seconds = r->step_data_s = bfit_feed_wait(&r->tr) - wait0;
    ss.free_bytes = bfit_run_free_for_step(r);
    ss.capacity = bfit_arena_capacity(r->s.arena);
    ss.micro_seconds = r->micro_secs < ss.seconds ? r->micro_secs : ss.seconds;
    ss.loss_known = r->step_count > 0;
    ss.loss = ss.loss_known ? loss / (double)r->step_count : 0; /* per sample, or per token */
    ss.loader_rate = r->step_loader_rate = bfit_feed_loader_rate(&r->tr, &r->loader_made, &r->loader_busy);
    if (r->cfg.batch_tokens)
        ss.loader_rate = 0; /* samples/s, where the controller counts tokens */
    if (r->track && k >= 2 && k <= MAX_MICRO) {
        ss.nmicro = k;
        ss.micro_sqnorm = r->micro_sq;
        ss.micro_size = r->micro_n;
    }
    if (r->track && k <= MAX_MICRO) {
        ss.full_sqnorm = r->full_sq;
        ss.step_norms = 1;
        ss.diff_sqnorm = k == 1 ? r->diff_sq : -1;
    }
    r->pos.track_stale = 0;
    if (r->dp)
        bfit_run_dist_observe(r, &ss);
    return bfit_controller_observe(r->ctl, &ss);
}

/* The progress line: how far (steps, the share of the run's samples or
 * of max-steps, the training time and what is left at this pace), the
 * loss, the rate, the split and the memory. */
static void report_progress(bfit_run *r, const bfit_step_info *in, const char *split, const bfit_arena_stats *st,
                            double el)
{
    double total = (double)r->cfg.epochs * (double)r->per_epoch, done, p, left, rate;
    char s1[32], s2[32], t1[32], t2[32], of[48] = "", rs[32];

    done = (double)in->epoch * (double)r->per_epoch + (double)r->pos.taken;
    if (in->epoch_end)
        done = (double)(in->epoch + 1) * (double)r->per_epoch;
    p = total > 0 ? done / total : 0;
    if (r->cfg.max_steps && (double)(in->step + 1) / (double)r->cfg.max_steps > p)
        p = (double)(in->step + 1) / (double)r->cfg.max_steps;
    p = p > 1 ? 1 : p;
    left = p > 0 ? r->pos.train_time * (1 - p) / p : 0;
    if (p > 0)
        snprintf(of, sizeof of, " of ~%lld", (long long)((double)(in->step + 1) / p + 0.5));
    rate = (double)(r->cfg.batch_tokens ? r->pos.ep_count - r->ep_count0 : r->pos.taken - r->ep_taken0) /
           (el > 0 ? el : 1e-9);
    snprintf(rs, sizeof rs, rate >= 100 ? "%.0f" : "%.3g", rate); /* a slow step's 0.08/s is not 0 */
    bfit_log_progress(&r->lg, 0, "epoch %d/%d  step %lld%s  %.0f%% (%s, %s left)  loss %.4f  %s %s/s  %s  mem %s / %s",
                      in->epoch + 1, r->cfg.epochs, (long long)in->step + 1, of, 100 * p,
                      bfit_format_duration(r->pos.train_time, t1, sizeof t1), bfit_format_duration(left, t2, sizeof t2),
                      r->pos.ep_loss / (double)r->pos.ep_count, rs, r->cfg.batch_tokens ? "tokens" : "samples", split,
                      bfit_format_size(st->current, s1, sizeof s1), bfit_format_size(st->capacity, s2, sizeof s2));
}

static void report_step(bfit_run *r, bfit_step_info *in)
{
    bfit_arena_stats st;
    double el = bfit_clock_mono() - r->ep_t0, bn = 0;
    char split[512], ranks[4096] = "", gnorm[48] = "", data[160];
    int have_bn = bfit_controller_noise_scale(r->ctl, &bn) == BFIT_OK;

    /* how the step was split: micro-batches, and with several ranks theirs */
    if (r->dp) {
        bfit_run_dist_progress(r, split, sizeof split);
        bfit_run_dist_step_json(r, ranks, sizeof ranks);
    } else if (r->cfg.batch_tokens) { /* the ranks' part is empty: reuse it for the sequences */
        snprintf(split, sizeof split, "m %d x %d = %d tokens in %d sequences", in->m, in->k, in->batch,
                 in->sequences);
        snprintf(ranks, sizeof ranks, ",\"sequences\":%d", in->sequences);
    } else {
        snprintf(split, sizeof split, "m %d x %d = %d", in->m, in->k, in->batch);
    }

    if (r->step_gnorm >= 0 && isfinite(r->step_gnorm))
        snprintf(gnorm, sizeof gnorm, ",\"grad_norm\":%.6g", r->step_gnorm);
    /* the share of the step spent waiting for samples: the loader's part */
    snprintf(data, sizeof data, ",\"data_wait\":%.6f,\"data_share\":%.4f", r->step_data_s,
             in->seconds > 0 ? r->step_data_s / in->seconds : 0);
    if (r->s.train && bfit_dataset_is_images(r->s.train))
        snprintf(data + strlen(data), sizeof data - strlen(data), ",\"images_skipped\":%lld",
                 (long long)bfit_dataset_images_skipped(r->s.train));
    if (r->step_loader_rate > 0) /* what the controller was told the loader makes */
        snprintf(data + strlen(data), sizeof data - strlen(data), ",\"loader_rate\":%.6g", r->step_loader_rate);
    bfit_arena_stats_get(r->s.arena, &st);
    in->noise_scale = have_bn ? bn : 0;
    in->mem = st.current;
    in->capacity = st.capacity;
    if (have_bn)
        r->pos.res.noise_scale = bn;
    bfit_log_event(&r->lg, "step",
                   "\"step\":%lld,\"epoch\":%d,\"loss\":%.6f,\"lr\":%.6g,\"samples\":%lld,\"m\":%d,\"k\":%d,\"E\":%d,"
                   "\"mem\":%llu,\"capacity\":%llu,\"seconds\":%.6f,\"noise_scale\":%.4g,\"loss_scale\":%.9g,"
                   "\"skipped\":%d%s%s%s",
                   (long long)in->step, in->epoch + 1, in->loss, in->lr, (long long)r->pos.samples, in->m, in->k,
                   in->batch, (unsigned long long)st.current, (unsigned long long)st.capacity, in->seconds,
                   in->noise_scale, in->loss_scale, in->skipped, data, gnorm, ranks);
    report_progress(r, in, split, &st, el);
}

/* cfg.sample_check: the epoch's samples (every rank's, from the weights'
 * check just exchanged) for a test to compare with the data set's. */
static void log_sample_check(bfit_run *r, int epoch)
{
    uint64_t sum = r->ep_hsum;
    int64_t n = r->ep_hn;
    if (r->dp)
        bfit_run_dist_sample_sums(r, &sum, &n);
    bfit_log_event(&r->lg, "sample_check", "\"epoch\":%d,\"samples\":%lld,\"hash_sum\":\"%016llx\"", epoch + 1,
                   (long long)n, (unsigned long long)sum);
}

/* The step up to and including the optimizer's update; *updated says
 * whether the update ran (after it there is no going back). *E gets the
 * step's size in E's units (samples, or a token budget's tokens), *taken
 * the samples it took of the epoch (every rank's). */
static int step_body(bfit_run *r, bfit_step_info *in, int *E, int *taken, int *k, double *loss, int *updated)
{
    int rc, n = 0;

    *updated = 0;
    /* decisions and the staging are at the longest length */
    if (r->cfg.seq_max && (rc = bfit_model_set_seq(r->s.M, r->cfg.seq_max)) != BFIT_OK)
        return rc;
    /* data-parallel: a failure goes through the ranks' exchanges, so that
     * every rank abandons the step (dist_run.c) */
    if ((rc = decide(r)) != BFIT_OK && !r->dp)
        return rc;
    *E = r->cfg.batch_tokens ? r->pos.d.batch
                             : (int)(r->per_epoch - r->pos.taken < r->pos.d.batch ? r->per_epoch - r->pos.taken
                                                                                  : r->pos.d.batch);
    r->step_scale = r->scaling ? r->pos.ls.scale : 1.0;
    in->loss_scale = r->scaling ? r->step_scale : 0;
    if (r->dp && (rc = bfit_run_dist_begin(r, rc, *E)) != BFIT_OK)
        return rc;
    if ((rc = bfit_model_stats_reset(r->s.M)) == BFIT_OK)
        rc = micro_steps(r, *E, &n, k);
    *taken = r->dp ? *E : n;
    if (r->cfg.batch_tokens)
        *E = (int)r->step_count;
    if (r->dp)
        rc = bfit_run_dist_end(r, rc, *E); /* and the gradients summed */
    if (rc != BFIT_OK)
        return rc;
    *updated = 1;
    if ((rc = update(r, &in->lr)) != BFIT_OK)
        return rc;
    if (r->dp)
        *loss = r->dp->loss;
    else if ((rc = bfit_model_stats_read(r->s.M, loss, NULL)) != BFIT_OK)
        return rc;
    in->skipped = r->skipped_now;
    r->pos.res.skipped_steps = r->pos.ls.skipped;
    r->pos.res.loss_scale = r->scaling ? r->pos.ls.scale : 0;
    if (!isfinite(*loss))
        return loss_not_finite(r, *loss);
    return BFIT_OK;
}

/* Where the step starts: its state, kept to go back to. */
static int step_start(bfit_run *r)
{
    if (r->pos.taken == 0) {
        r->ep_t0 = bfit_clock_mono();
        r->ep_taken0 = 0;
        r->ep_count0 = 0;
        r->pos.ep_loss = 0;
        r->pos.ep_count = 0;
        r->ep_hsum = 0;
        r->ep_hn = 0;
    }
    r->wait_until = 0;
    r->refused_fitting = 0;
    r->step_waited = 0;
    r->track_dirty = 0;
    return bfit_run_snap_step(r);
}

/* The finished step's figures into in and the run's position. */
static void step_account(bfit_run *r, bfit_step_info *in, int E, int taken, int k, double loss)
{
    r->pos.train_time += in->seconds;
    in->step = r->pos.step++;
    r->pos.res.evaluated = 0; /* the test figures were of the weights before this step */
    in->epoch = r->pos.epoch;
    in->batch = E;
    in->sequences = r->cfg.batch_tokens ? taken : 0;
    /* data-parallel: pos.m is the most this rank may run at once; what it
     * ran is its share in micro-batches of at most that (none: 0 x 0) */
    in->m = r->dp && r->dp->share < r->pos.m ? r->dp->share : r->pos.m;
    in->k = k;
    if (in->m) /* a rank that ran none this step keeps its last */
        r->pos.res.micro_batch = in->m;
    in->loss = loss / (double)r->step_count; /* per sample, or per token */
    r->pos.taken += taken;
    r->pos.samples += taken;
    r->pos.sched_units += r->pos.d.batch; /* the whole E, as a fixed batch counts a short step */
    r->pos.ep_loss += loss;
    r->pos.ep_count += r->step_count;
    r->ep_hsum += r->step_hsum;
    r->ep_hn += r->step_hn;
    r->pos.res.last_batch = r->pos.d.batch;
    in->epoch_end = r->pos.taken >= r->per_epoch;
    /* the epoch's mean so far: a run that stops inside an epoch (max steps,
     * a time limit) reports the loss of the steps it took, not 0 */
    if (r->pos.ep_count > 0)
        r->pos.res.train_loss = r->pos.ep_loss / (double)r->pos.ep_count;
}

/* After a step that ended an epoch (or the run): the next epoch's data, the
 * ranks' weights checked equal, the samples' log. */
static int step_epoch_end(bfit_run *r, const bfit_step_info *in)
{
    int rc;
    if (in->epoch_end) {
        r->pos.epoch++;
        r->pos.taken = 0;
        if (!bfit_run_done(r) && (rc = bfit_feed_next_epoch(&r->tr)) != BFIT_OK)
            return rc;
    }
    /* data-parallel: the ranks hold the same weights (checked) before an
     * evaluation or the end */
    if (r->dp && (in->epoch_end || bfit_run_done(r)) && (rc = bfit_run_dist_sync(r)) != BFIT_OK)
        return rc;
    if (r->cfg.sample_check && (in->epoch_end || bfit_run_done(r)))
        log_sample_check(r, in->epoch);
    return BFIT_OK;
}

int bfit_run_step(bfit_run *r, bfit_step_info *info)
{
    bfit_step_info in;
    double t0, wait0, loss = 0;
    int E = 0, taken = 0, k = 0, rc, updated;

    if (!r)
        return bfit_fail(BFIT_EINVAL, "bfit_run_step needs a run");
    memset(&in, 0, sizeof in);
    in.size = sizeof in;
    /* the caller's struct carries its size (batchfit.h) */
    if (info && (info->size < BFIT_SIZED_MIN || info->size > BFIT_SIZED_MAX))
        return bfit_sized_out(info, &in, sizeof in, "bfit_step_info");
    if (bfit_run_done(r))
        return bfit_fail(BFIT_ESTATE, "the run has taken all its steps");
    if (r->broken)
        return bfit_fail(BFIT_ESTATE, "the run failed in step %lld and cannot go on", (long long)r->pos.step + 1);
    /* data-parallel, the stop goes through the step's first exchange
     * (bfit_run_dist_begin), so that every rank stops at this boundary */
    if (!r->dp && bfit_run_stop_requested(r)) {
        r->pos.res.stopped = BFIT_ESTOPPED; /* the result says so, as bfit_train's does */
        return bfit_fail(BFIT_ESTOPPED, "stopped on request at step %lld", (long long)r->pos.step);
    }
    if ((rc = step_start(r)) != BFIT_OK)
        return rc;
    t0 = bfit_clock_mono();
    wait0 = bfit_feed_wait(&r->tr);
    r->step_gnorm = -1;
    if ((rc = step_body(r, &in, &E, &taken, &k, &loss, &updated)) != BFIT_OK) {
        /* an abandoned step leaves the run at its start (but for why it
         * stopped); one that got past the update cannot be undone */
        int stopped = rc == BFIT_ESTOPPED ? BFIT_ESTOPPED : r->pos.res.stopped;
        uint64_t missing = r->pos.res.missing;
        if (updated || bfit_run_rollback(r) != BFIT_OK)
            r->broken = 1;
        r->pos.res.stopped = stopped;
        r->pos.res.missing = missing;
        return rc;
    }
    bfit_run_apply_memory_schedule(r, r->pos.step + 1);
    bfit_run_watch_device(r);
    bfit_run_monitor(r, 0);
    if ((rc = observe(r, E, k, loss, t0, wait0, &in.seconds)) != BFIT_OK) {
        r->broken = 1;
        return rc;
    }
    step_account(r, &in, E, taken, k, loss);
    report_step(r, &in);
    if ((rc = bfit_run_threads_step(r, in.seconds, taken)) != BFIT_OK) {
        r->broken = 1;
        return rc;
    }
    if ((rc = step_epoch_end(r, &in)) != BFIT_OK) {
        r->broken = 1;
        return rc;
    }
    if (r->cfg.on_step)
        r->cfg.on_step(r->cfg.cb_ud, &in);
    if (info)
        bfit_sized_out(info, &in, sizeof in, "bfit_step_info");
    return BFIT_OK;
}
