/* step.c - one optimizer step of a run.
 *
 * An optimizer step consumes exactly E samples (the last of an epoch may
 * have fewer) in micro-batches of m; the loss is normalised by the samples
 * in the step, so the gradient does not depend on the split. Every
 * micro-step reserves its memory before it computes (OOM-atomic); on an
 * out-of-memory the micro-batch shrinks to what the plan says fits now and
 * the same samples are taken again: they are still in the host staging, so
 * the stream is not rewound. */
#include "base/clock.h"
#include "base/err.h"
#include "base/text.h"
#include "train/run_int.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The step's blocks held now count as free: any m may take them. */
static uint64_t free_for_step(const bfit_run *r)
{
    return bfit_arena_available(r->s.arena) + bfit_model_step_bytes(r->s.M);
}

void bfit_run_log_change(bfit_run *r, const bfit_batch_decision *d, int prev_m, uint64_t free_now)
{
    r->res.batch_changes++;
    char gp[160] = "";
    if (d->reason == BFIT_REASON_GOODPUT) /* the numbers behind the choice */
        snprintf(gp, sizeof gp, ",\"noise_scale\":%.6g,\"tput\":[%.6g,%.6g],\"efficiency\":[%.6g,%.6g]",
                 d->noise_scale, d->tput_old, d->tput_new, d->eff_old, d->eff_new);
    bfit_log_event(&r->lg, "batch_change",
                   "\"step\":%lld,\"reason\":\"%s\",\"m\":%d,\"prev_m\":%d,\"E\":%d,\"prev_E\":%d,"
                   "\"lr_scale\":%.6g,\"free\":%llu%s,\"why\":\"%s\"",
                   (long long)r->step, bfit_batch_reason_name(d->reason), d->m, prev_m, d->batch,
                   d->reason == BFIT_REASON_OOM ? d->batch : d->prev_batch, d->lr_scale,
                   (unsigned long long)free_now, gp, d->why);
    bfit_log_say(&r->lg, "batchfit: step %lld: %s", (long long)r->step, d->why);
    if (r->cfg.on_batch_change)
        r->cfg.on_batch_change(r->cfg.cb_ud, d, r->step);
}

/* Apply the memory schedule's changes due by step `upto` (another tenant
 * taking or returning memory, simulated). The step's blocks are handed back
 * on a change, so the next reservation is made under the new capacity. */
int bfit_run_apply_memory_schedule(bfit_run *r, int64_t upto)
{
    const bfit_train_cfg *c = &r->cfg;
    int changed = 0;
    char s1[32];
    for (; r->nmem < c->nmemory_schedule && c->memory_schedule[r->nmem].step <= upto; r->nmem++) {
        uint64_t cap = c->memory_schedule[r->nmem].capacity;
        bfit_arena_set_capacity(r->s.arena, cap);
        changed = 1;
        bfit_log_event(&r->lg, "memory", "\"step\":%lld,\"capacity\":%llu", (long long)upto, (unsigned long long)cap);
        bfit_log_say(&r->lg, "batchfit: step %lld: device capacity is now %s", (long long)upto,
                     bfit_format_size(cap, s1, sizeof s1));
    }
    if (changed) {
        r->configured = bfit_arena_capacity(r->s.arena);
        bfit_model_unreserve(r->s.M);
    }
    return changed;
}

/* Changes of the device's free memory smaller than this are not followed:
 * a GPU's free memory moves by a few MiB with its own bookkeeping. */
#define WATCH_STEP (16ull << 20)

/* On a device shared with other processes, the capacity in force is no more
 * than this process holds plus what the device has free now, read every
 * step: another process taking memory makes the controller shrink the
 * micro-batch before an allocation fails, and giving it back lets it grow. */
void bfit_run_watch_device(bfit_run *r)
{
    bfit_device_info di;
    bfit_arena_stats st;
    uint64_t free_b, total, cap, now;
    char s1[32], s2[32];

    bfit_device_info_get(r->s.dev, &di);
    if (!di.shared || bfit_device_memory(r->s.dev, &free_b, &total) != BFIT_OK)
        return;
    bfit_arena_stats_get(r->s.arena, &st);
    cap = st.reserved + free_b < r->configured ? st.reserved + free_b : r->configured;
    now = bfit_arena_capacity(r->s.arena);
    if (cap == now || (cap > now ? cap - now : now - cap) < WATCH_STEP)
        return;
    bfit_arena_set_capacity(r->s.arena, cap);
    bfit_log_event(&r->lg, "memory", "\"step\":%lld,\"capacity\":%llu,\"device_free\":%llu,\"source\":\"device\"",
                   (long long)r->step, (unsigned long long)cap, (unsigned long long)free_b);
    bfit_log_say(&r->lg, "batchfit: step %lld: the device has %s free: capacity now %s", (long long)r->step,
                 bfit_format_size(free_b, s1, sizeof s1), bfit_format_size(cap, s2, sizeof s2));
}

/* ---- stopping, abandoning a step, waiting for memory ------------------------ */

int bfit_run_stop_requested(bfit_run *r)
{
    return atomic_load_explicit(&r->stop_req, memory_order_relaxed) || (r->cfg.stop && *r->cfg.stop);
}

void bfit_run_request_stop(bfit_run *r) { atomic_store(&r->stop_req, 1); }

void bfit_run_snap_take(bfit_run *r, run_snap *s)
{
    memset(s, 0, sizeof *s);
    s->step = r->step;
    s->samples = r->samples;
    s->taken = r->taken;
    s->ep_count = r->ep_count;
    s->per_epoch = r->per_epoch;
    s->epoch = r->epoch;
    s->m = r->m;
    s->warned_bn = r->warned_bn;
    s->nmem = r->nmem;
    s->micro = r->micro;
    s->train_time = r->train_time;
    s->ep_loss = r->ep_loss;
    s->res = r->res;
    s->d = r->d;
    bfit_controller_state_get(r->ctl, &s->ctl);
    if (r->tr.s) {
        bfit_cursor c = bfit_stream_tell(r->tr.s);
        s->cursor_epoch = c.epoch;
        s->cursor_pos = c.pos;
    }
    s->optim_steps = bfit_optim_steps(r->opt);
    s->ls = r->ls;
    s->track_stale = r->track_stale;
}

/* The running statistics (parameters that are not trained: batch norm's)
 * to (up 0) or from (up 1) the host snapshot: a forward in training mode
 * moves them, so an abandoned step must put them back. */
static int stats_io(bfit_run *r, int up)
{
    uint64_t off = 0;
    int rc = BFIT_OK;
    for (int i = 0; i < r->s.M->nparams && rc == BFIT_OK; i++) {
        bfit_param *p = r->s.M->params[i];
        size_t n = bfit_param_bytes(p);
        if (p->trainable)
            continue;
        rc = up ? bfit_device_upload(r->s.dev, p->data, (char *)r->stats_snap + off, n)
                : bfit_device_download(r->s.dev, (char *)r->stats_snap + off, p->data, n);
        off += n;
    }
    return rc;
}

/* Back to the step's start: nothing of the abandoned step remains. */
int bfit_run_rollback(bfit_run *r)
{
    const run_snap *s = &r->snap;
    int rc = bfit_model_zero_grads(r->s.M);
    if (rc == BFIT_OK && r->track && r->track_dirty) {
        rc = bfit_gradnorm_track_reset(r->gn);
        r->track_stale = 1; /* the copy no longer holds the last step's gradient */
    }
    if (rc == BFIT_OK && r->stats_bytes)
        rc = stats_io(r, 1);
    if (rc == BFIT_OK)
        rc = bfit_controller_state_set(r->ctl, &s->ctl);
    if (rc == BFIT_OK && r->tr.s) {
        bfit_cursor c = {s->cursor_epoch, s->cursor_pos};
        rc = bfit_stream_seek(r->tr.s, c);
    }
    if (rc != BFIT_OK)
        return rc;
    r->step = s->step;
    r->samples = s->samples;
    r->taken = s->taken;
    r->ep_count = s->ep_count;
    r->epoch = s->epoch;
    r->m = s->m;
    r->warned_bn = s->warned_bn;
    r->nmem = s->nmem;
    r->micro = s->micro;
    r->train_time = s->train_time;
    r->ep_loss = s->ep_loss;
    r->res = s->res;
    r->d = s->d;
    r->ls = s->ls;
    bfit_model_unreserve(r->s.M);
    return BFIT_OK;
}

/* Bytes micro-batch 1 lacks now (0: it fits), by the controller's rule: the
 * whole step within the budget, its blocks within what is free. */
static uint64_t missing_for_one(bfit_run *r, uint64_t *need)
{
    uint64_t budget = bfit_plan_budget(bfit_arena_capacity(r->s.arena), r->cfg.margin), free_now = free_for_step(r);
    uint64_t step_need, a, b;
    *need = bfit_run_plan_one(r);
    step_need = *need > r->fixed_bytes ? *need - r->fixed_bytes : 0;
    a = *need > budget ? *need - budget : 0;
    b = step_need > free_now ? step_need - free_now : 0;
    return a > b ? a : b;
}

/* Tell the controller what memory there is now (it learns it otherwise
 * only from a step it observed). */
static void controller_memory_now(bfit_run *r)
{
    bfit_controller_state cs;
    bfit_controller_state_get(r->ctl, &cs);
    cs.capacity = bfit_arena_capacity(r->s.arena);
    cs.free = free_for_step(r);
    bfit_controller_state_set(r->ctl, &cs);
}

static void nap(bfit_run *r, double s)
{
    for (double slept = 0; slept < s && !bfit_run_stop_requested(r); slept += 0.1) {
        double d = s - slept < 0.1 ? s - slept : 0.1;
        struct timespec ts = {0, (long)(d * 1e9)};
        nanosleep(&ts, NULL); /* a signal ends it early: the loop looks at the stop request */
    }
}

static void say_waiting(bfit_run *r, uint64_t need, uint64_t miss, double limit)
{
    char s1[32], s2[32], s3[32];
    bfit_log_event(&r->lg, "memory_wait", "\"step\":%lld,\"need\":%llu,\"missing\":%llu,\"limit\":%.1f",
                   (long long)r->step, (unsigned long long)need, (unsigned long long)miss, limit);
    bfit_log_say(&r->lg, "batchfit: step %lld: not even micro-batch 1 fits (it needs %s, %s missing): waiting up to "
                 "%s for memory to come back", (long long)r->step + 1, bfit_format_size(need, s1, sizeof s1),
                 bfit_format_size(miss, s2, sizeof s2), bfit_format_secs(limit, s3, sizeof s3));
}

/* Not even micro-batch 1 fits. On a device shared with other processes
 * memory may come back: poll it with a growing interval (to 5 s) until
 * cfg.wait_for_memory has passed since the step first waited. On others
 * nothing can bring it back: fail at once. The failure says how much was
 * missing; bfit_train then writes a checkpoint. */
static int wait_for_memory(bfit_run *r)
{
    bfit_device_info di;
    double t0 = bfit_clock_mono(), delay = 0.05, now = t0;
    uint64_t need, miss = missing_for_one(r, &need);
    char s1[32], s2[32], s3[32];

    bfit_device_info_get(r->s.dev, &di);
    if (miss == 0) {
        controller_memory_now(r);
        return BFIT_OK;
    }
    if (r->wait_until == 0)
        r->wait_until = t0 + (di.shared ? r->cfg.wait_for_memory : 0);
    if (now < r->wait_until)
        say_waiting(r, need, miss, r->wait_until - now);
    while (miss && now < r->wait_until && !bfit_run_stop_requested(r)) {
        double left = r->wait_until - now;
        nap(r, delay < left ? delay : left);
        delay = delay * 2 < 5 ? delay * 2 : 5;
        bfit_run_watch_device(r);
        miss = missing_for_one(r, &need);
        now = bfit_clock_mono();
    }
    r->waited += now - t0;
    r->step_waited += now - t0;
    if (bfit_run_stop_requested(r))
        return bfit_fail(BFIT_ESTOPPED, "stopped on request while waiting for memory in step %lld: the run is at "
                         "step %lld", (long long)r->step + 1, (long long)r->step);
    if (miss == 0) {
        bfit_log_event(&r->lg, "memory_back", "\"step\":%lld,\"waited\":%.3f", (long long)r->step, now - t0);
        bfit_log_say(&r->lg, "batchfit: step %lld: memory came back after %s", (long long)r->step + 1,
                     bfit_format_secs(now - t0, s3, sizeof s3));
        controller_memory_now(r);
        return BFIT_OK;
    }
    r->res.stopped = BFIT_ENOMEM;
    r->res.missing = miss;
    return bfit_fail_field(BFIT_ENOMEM, "memory", "not even micro-batch 1 fits at step %lld: it needs %s, %s is "
                           "missing%s%s%s", (long long)r->step + 1, bfit_format_size(need, s1, sizeof s1),
                           bfit_format_size(miss, s2, sizeof s2), di.shared ? "; waited " : "",
                           di.shared ? bfit_format_secs(r->waited, s3, sizeof s3) : "",
                           di.shared ? " for it to come back" : "");
}

/* The controller's decision for this step, logged when it changed. When
 * not even micro-batch 1 fits, wait for memory (nothing has changed yet). */
static int decide(bfit_run *r)
{
    bfit_batch_decision *d = &r->d;
    int rc;
    while ((rc = bfit_controller_next(r->ctl, r->step, r->epoch, d)) == BFIT_ENOMEM)
        if ((rc = wait_for_memory(r)) != BFIT_OK)
            return rc;
    if (rc != BFIT_OK)
        return rc;
    if (d->reason != BFIT_REASON_NONE && d->reason != BFIT_REASON_START)
        bfit_run_log_change(r, d, d->prev_m, free_for_step(r));
    if (d->m != r->m)
        bfit_model_unreserve(r->s.M); /* blocks sized for the new m, not kept from the old */
    r->m = d->m;
    if (d->split && !r->warned_bn && bfit_run_has_batchnorm(r->s.M)) {
        r->warned_bn = 1;
        bfit_log_event(&r->lg, "warning",
                       "\"step\":%lld,\"what\":\"batch norm sees micro-batches of %d, not the effective batch %d\"",
                       (long long)r->step, r->m, d->batch);
        bfit_log_say(&r->lg, "batchfit: warning: batch norm computes its statistics over micro-batches of %d, "
                             "not over the effective batch of %d (see docs/dynamic.md)", r->m, d->batch);
    }
    return BFIT_OK;
}

/* Reserve a micro-batch of want; on out-of-memory the controller shrinks m
 * (nothing of this micro-batch ran) and *retry is set. */
static int reserve(bfit_run *r, int want, int *retry)
{
    uint64_t free_now;
    int rc = bfit_model_reserve(r->s.M, want, 1);
    /* what failed, in E's units: the micro-batch m whose bytes a length's
     * sequences were sized by (seq_max, tokens), else the samples */
    int failed = r->fit_seqs ? r->m : want;

    *retry = 0;
    if (rc != BFIT_ENOMEM)
        return rc;
    free_now = bfit_arena_available(r->s.arena);
    rc = bfit_controller_on_oom(r->ctl, failed, free_now, bfit_arena_capacity(r->s.arena), &r->d);
    if (rc != BFIT_OK) {
        /* not even 1 fits in the free: wait for memory, then try the same samples again */
        if ((rc = wait_for_memory(r)) != BFIT_OK)
            return rc;
        *retry = 1;
        return BFIT_OK;
    }
    r->res.ooms++;
    bfit_run_log_change(r, &r->d, failed, free_now);
    r->m = r->d.m;
    *retry = 1;
    return BFIT_OK;
}

/* cfg.sample_check: FNV-1a 64 of a sample's floats, then of its label. */
static uint64_t sample_hash(const float *x, int64_t numel, int32_t y)
{
    const unsigned char *b = (const unsigned char *)x;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < (size_t)numel * sizeof *x; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    for (int i = 0; i < 4; i++)
        h = (h ^ (((uint32_t)y >> (8 * i)) & 0xff)) * 1099511628211ull;
    return h;
}

int64_t bfit_run_counted(const bfit_model *M, const int32_t *y, int n)
{
    int64_t c = 0;
    if (M->labels_per_sample == 1)
        return n;
    for (int64_t i = 0; i < (int64_t)n * M->labels_per_sample; i++)
        c += y[i] >= 0;
    return c;
}

/* ---- variable-length sequences (seq_max) ----
 * The step's sequences are sorted by length, longest first, and each
 * micro-batch runs at the length of its longest (rounded up to LEN_ROUND, so
 * few lengths occur): the padding of short sequences is not computed. The
 * lengths fall within a step, so a micro-batch that fits fits the next. */
#define LEN_ROUND 16

/* Real tokens of staged sample i: up to its last label that counts. */
static int seq_len(const bfit_run *r, int i)
{
    const int32_t *y = r->stage_y + (size_t)i * (size_t)r->cfg.seq_max;
    int n = r->cfg.seq_max;
    while (n > 0 && y[n - 1] < 0)
        n--;
    return n;
}

static int by_len_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0; /* (length << 32 | ~index): longest first, then by index */
}

static void sort_by_length(bfit_run *r, int E)
{
    size_t T = (size_t)r->cfg.seq_max;
    for (int i = 0; i < E; i++)
        r->order[i] = (int64_t)seq_len(r, i) << 32 | (uint32_t)~(uint32_t)i;
    qsort(r->order, (size_t)E, sizeof *r->order, by_len_desc);
    for (int i = 0; i < E; i++) {
        int j = (int)~(uint32_t)(r->order[i] & 0xffffffffu);
        memcpy(r->pack_x + (size_t)i * T, (const int32_t *)r->stage_x + (size_t)j * T, T * sizeof(int32_t));
        memcpy(r->pack_y + (size_t)i * T, r->stage_y + (size_t)j * T, T * sizeof(int32_t));
    }
    memcpy(r->stage_x, r->pack_x, (size_t)E * T * sizeof(int32_t));
    memcpy(r->stage_y, r->pack_y, (size_t)E * T * sizeof(int32_t));
}

/* The model at the length of micro-batch [done, done + want). */
static int trim(bfit_run *r, int done)
{
    int L = (seq_len(r, done) + LEN_ROUND - 1) / LEN_ROUND * LEN_ROUND; /* sorted: the first is the longest */
    if (L > r->cfg.seq_max)
        L = r->cfg.seq_max;
    return bfit_model_set_seq(r->s.M, L > 0 ? L : 1);
}

/* The bytes a micro-batch is sized by: micro-batch m's (planned at the
 * longest length). With a token budget and m = E (memory does not bound m
 * and nothing caps it) all the step may take now, within the margin: a
 * step of E tokens holds more than E / T sequences when they are shorter
 * than T or the last one goes past E, and it should still run whole. */
static uint64_t sizing_bytes(bfit_run *r)
{
    uint64_t bytes = bfit_run_plan_bytes(r, r->m), room;
    if (!r->cfg.batch_tokens || r->cfg.micro_batch || r->cfg.adaptive || r->m < r->d.batch)
        return bytes;
    room = bfit_plan_budget(bfit_arena_capacity(r->s.arena), r->cfg.margin);
    if (r->fixed_bytes + free_for_step(r) < room)
        room = r->fixed_bytes + free_for_step(r);
    return room > bytes ? room : bytes;
}

/* The sequences of the micro-batch that starts at staged sequence done
 * (left of them) at the model's length L: as many as fit in the sizing
 * bytes at L (the plan at L: at a shorter length more fit than at the
 * longest), at least 1. A micro-batch the user fixed, or adaptive mode's
 * (two per step for the noise scale), is also a cap: m samples, or m
 * tokens. And it ends before a sequence of half its length or less (where
 * a step spans two length buckets), so padding stays under half of it. */
static int micro_size(bfit_run *r, int done, int left, int *want)
{
    int L = r->s.M->input.d[0], i = (L + 15) / 16, b, cap;
    uint64_t bytes;
    if (!r->fit_seqs) {
        *want = left < r->m ? left : r->m;
        return BFIT_OK;
    }
    if ((bytes = sizing_bytes(r)) != r->fit_bytes) { /* sized for other bytes: forget */
        memset(r->fit_seqs, 0, sizeof *r->fit_seqs * (size_t)r->nfit);
        r->fit_bytes = bytes;
    }
    if (i >= r->nfit)
        return bfit_fail(BFIT_ESTATE, "length %d is past the longest planned (%d)", L, r->pc.T);
    if (!r->fit_seqs[i]) {
        int rc = bfit_plan_max_batch(r->s.M, &r->cfg.opt, 1, bytes > r->pc.extra ? bytes - r->pc.extra : 0,
                                     r->max_take, &b, NULL);
        if (rc != BFIT_OK)
            return rc;
        r->fit_seqs[i] = b > 0 ? b : 1; /* 0: not even 1 (the reserve says so, and the controller shrinks m) */
    }
    b = r->fit_seqs[i];
    if (r->cfg.micro_batch || r->cfg.adaptive) {
        cap = r->cfg.batch_tokens ? r->m / L : r->m;
        b = cap < 1 ? 1 : cap < b ? cap : b;
    }
    b = left < b ? left : b;
    for (int j = 1; r->cfg.seq_max && j < b; j++)
        if (2 * ((seq_len(r, done + j) + LEN_ROUND - 1) / LEN_ROUND * LEN_ROUND) <= L) {
            b = j;
            break;
        }
    *want = b;
    return BFIT_OK;
}

/* Samples [done, done + want) at the model's length L into the pack buffers. */
static void pack(bfit_run *r, int done, int want, const float **x, const int32_t **y)
{
    size_t T = (size_t)r->cfg.seq_max, L = (size_t)r->s.M->input.d[0];
    for (int i = 0; i < want; i++) {
        memcpy(r->pack_x + (size_t)i * L, (const int32_t *)r->stage_x + (size_t)(done + i) * T, L * sizeof(int32_t));
        memcpy(r->pack_y + (size_t)i * L, r->stage_y + (size_t)(done + i) * T, L * sizeof(int32_t));
    }
    *x = (const float *)r->pack_x;
    *y = r->pack_y;
    r->res.tokens_computed += (int64_t)want * (int64_t)L;
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
        pack(r, done, want, &x, &y);
    else if (r->s.M->labels_per_sample > 1)
        r->res.tokens_computed += (int64_t)want * r->s.M->labels_per_sample;

    if (r->cfg.on_samples)
        r->cfg.on_samples(r->cfg.on_samples_ud, x, y, want);
    for (int i = 0; r->cfg.sample_check && i < want; i++)
        r->step_hsum += sample_hash(x + (size_t)i * (size_t)numel, numel, y[i]);
    r->step_hn += r->cfg.sample_check ? want : 0;
    rc = bfit_model_set_input(r->s.M, x, y, want);
    if (rc == BFIT_OK)
        rc = bfit_model_forward(r->s.M, r->cfg.seed * 1000003ull + r->micro++);
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
        r->diff_sq = k == 0 && !r->track_stale ? dsq : -1;
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
    int64_t left = r->per_epoch - r->taken;
    int got, rc;
    if (r->dp) {
        if (r->s.M->labels_per_sample > 1)
            return bfit_fail(BFIT_EINVAL, "data-parallel training of token models is not supported yet: train them "
                             "in one process");
        return bfit_run_dist_take(r, E, n);
    }
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
        sort_by_length(r, got);
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
    if (r->s.M->labels_per_sample > 1)
        r->res.tokens += r->step_count;
    if (r->step_count < 1)
        return bfit_fail(BFIT_EINVAL, "step %lld: all %d sequences are padding: no token has a label",
                         (long long)r->step + 1, *n);
    if (r->cfg.auto_batch && (rc = bfit_run_ladder(r, E)) != BFIT_OK)
        return rc;
    while (done < *n) {
        int want = 0, retry;
        double t0;
        if (bfit_run_stop_requested(r)) /* the step is abandoned; the caller puts the run back */
            return bfit_fail(BFIT_ESTOPPED, "stopped on request in step %lld after %d of its %d samples: the step "
                             "was abandoned, the run is at step %lld", (long long)r->step + 1, done, *n,
                             (long long)r->step);
        if (r->cfg.seq_max && (rc = trim(r, done)) != BFIT_OK)
            return rc;
        if ((rc = micro_size(r, done, *n - done, &want)) != BFIT_OK || (rc = reserve(r, want, &retry)) != BFIT_OK)
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

/* Clip, update, zero the gradients. */
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
    if (r->cfg.poison_step && r->step + 1 == r->cfg.poison_step)
        sq = NAN; /* fault injection: the overflow a test cannot otherwise make on f32-range hardware */
    else if ((rc = bfit_gradnorm_sq(r->gn, &sq)) != BFIT_OK)
        return rc;
    *apply = bfit_loss_scaler_update(&r->ls, isfinite(sq));
    r->skipped_now = !*apply;
    if (!*apply) {
        bfit_log_event(&r->lg, "loss_scale", "\"step\":%lld,\"skipped\":1,\"scale\":%.9g,\"prev_scale\":%.9g,"
                       "\"skips\":%lld", (long long)r->step, r->ls.scale, used, (long long)r->ls.skipped);
        bfit_log_say(&r->lg, "batchfit: step %lld: the gradients overflowed at loss scale %g: step skipped (its "
                     "samples count), scale now %g (%lld skipped so far)", (long long)r->step + 1, used, r->ls.scale,
                     (long long)r->ls.skipped);
        return bfit_model_zero_grads(r->s.M);
    }
    if (r->ls.scale != used)
        bfit_log_event(&r->lg, "loss_scale", "\"step\":%lld,\"skipped\":0,\"scale\":%.9g,\"prev_scale\":%.9g",
                       (long long)r->step, r->ls.scale, used);
    return used == 1.0 ? BFIT_OK : bfit_gradnorm_scale(r->gn, 1.0 / used);
}

static int update(bfit_run *r, double *lr)
{
    int rc = BFIT_OK, apply;
    *lr = 0;
    if ((rc = unscale(r, &apply)) != BFIT_OK || !apply)
        return rc;
    if (r->cfg.clip > 0)
        rc = bfit_gradnorm_clip(r->gn, r->cfg.clip, NULL);
    /* auto: the schedule counts steps of E0 samples (E changes) */
    *lr = bfit_lr_at(&r->sched, r->cfg.lr, r->cfg.auto_batch ? r->samples / r->E0 : r->step) * r->d.lr_scale;
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
    ss.step = r->step;
    ss.epoch = r->epoch;
    ss.samples = E;
    ss.seconds = *secs = bfit_clock_mono() - t0 - r->step_waited; /* waiting for memory is not computing */
    ss.data_seconds = bfit_feed_wait(&r->tr) - wait0;
    ss.free_bytes = free_for_step(r);
    ss.capacity = bfit_arena_capacity(r->s.arena);
    ss.micro_seconds = r->micro_secs < ss.seconds ? r->micro_secs : ss.seconds;
    ss.loss_known = r->step_count > 0;
    ss.loss = ss.loss_known ? loss / (double)r->step_count : 0; /* per sample, or per token */
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
    r->track_stale = 0;
    if (r->dp)
        bfit_run_dist_observe(r, &ss);
    return bfit_controller_observe(r->ctl, &ss);
}

static void report_step(bfit_run *r, bfit_step_info *in)
{
    bfit_arena_stats st;
    double el = bfit_clock_mono() - r->ep_t0, bn = 0;
    char s1[32], s2[32], split[512], ranks[4096] = "";
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

    bfit_arena_stats_get(r->s.arena, &st);
    in->noise_scale = have_bn ? bn : 0;
    in->mem = st.current;
    in->capacity = st.capacity;
    if (have_bn)
        r->res.noise_scale = bn;
    bfit_log_event(&r->lg, "step",
                   "\"step\":%lld,\"epoch\":%d,\"loss\":%.6f,\"lr\":%.6g,\"samples\":%lld,\"m\":%d,\"k\":%d,\"E\":%d,"
                   "\"mem\":%llu,\"capacity\":%llu,\"seconds\":%.6f,\"noise_scale\":%.4g,\"loss_scale\":%.9g,"
                   "\"skipped\":%d%s",
                   (long long)in->step, in->epoch + 1, in->loss, in->lr, (long long)r->samples, in->m, in->k,
                   in->batch, (unsigned long long)st.current, (unsigned long long)st.capacity, in->seconds,
                   in->noise_scale, in->loss_scale, in->skipped, ranks);
    bfit_log_progress(&r->lg, 0, "epoch %d/%d  step %lld  loss %.4f  %.0f %s/s  %s  mem %s / %s",
                      in->epoch + 1, r->cfg.epochs, (long long)in->step + 1, r->ep_loss / (double)r->ep_count,
                      (double)(r->cfg.batch_tokens ? r->ep_count - r->ep_count0 : r->taken - r->ep_taken0) /
                          (el > 0 ? el : 1e-9),
                      r->cfg.batch_tokens ? "tokens" : "samples", split,
                      bfit_format_size(st.current, s1, sizeof s1), bfit_format_size(st.capacity, s2, sizeof s2));
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
    *E = r->cfg.batch_tokens ? r->d.batch
                             : (int)(r->per_epoch - r->taken < r->d.batch ? r->per_epoch - r->taken : r->d.batch);
    r->step_scale = r->scaling ? r->ls.scale : 1.0;
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
    r->res.skipped_steps = r->ls.skipped;
    r->res.loss_scale = r->scaling ? r->ls.scale : 0;
    if (!isfinite(*loss))
        return bfit_fail_field(BFIT_EINVAL, "lr", "the loss became %g at step %lld: lower the learning rate", *loss,
                               (long long)r->step + 1);
    return BFIT_OK;
}

/* Where the step starts: its state, kept to go back to. */
static int step_start(bfit_run *r)
{
    if (r->taken == 0) {
        r->ep_t0 = bfit_clock_mono();
        r->ep_taken0 = 0;
        r->ep_count0 = 0;
        r->ep_loss = 0;
        r->ep_count = 0;
        r->ep_hsum = 0;
        r->ep_hn = 0;
    }
    r->wait_until = 0;
    r->step_waited = 0;
    r->track_dirty = 0;
    bfit_run_snap_take(r, &r->snap);
    return r->stats_bytes ? stats_io(r, 0) : BFIT_OK;
}

int bfit_run_step(bfit_run *r, bfit_step_info *info)
{
    bfit_step_info in;
    double t0, wait0, loss = 0;
    int E = 0, taken = 0, k = 0, rc, updated;

    if (bfit_run_done(r))
        return bfit_fail(BFIT_ESTATE, "the run has taken all its steps");
    if (r->broken)
        return bfit_fail(BFIT_ESTATE, "the run failed in step %lld and cannot go on", (long long)r->step + 1);
    if (bfit_run_stop_requested(r))
        return bfit_fail(BFIT_ESTOPPED, "stopped on request at step %lld", (long long)r->step);
    if ((rc = step_start(r)) != BFIT_OK)
        return rc;
    t0 = bfit_clock_mono();
    wait0 = bfit_feed_wait(&r->tr);
    memset(&in, 0, sizeof in);
    if ((rc = step_body(r, &in, &E, &taken, &k, &loss, &updated)) != BFIT_OK) {
        /* an abandoned step leaves the run at its start (but for why it
         * stopped); one that got past the update cannot be undone */
        int stopped = r->res.stopped;
        uint64_t missing = r->res.missing;
        if (updated || bfit_run_rollback(r) != BFIT_OK)
            r->broken = 1;
        r->res.stopped = stopped;
        r->res.missing = missing;
        return rc;
    }
    bfit_run_apply_memory_schedule(r, r->step + 1);
    bfit_run_watch_device(r);
    bfit_run_monitor(r, 0);
    if ((rc = observe(r, E, k, loss, t0, wait0, &in.seconds)) != BFIT_OK) {
        r->broken = 1;
        return rc;
    }
    r->train_time += in.seconds;
    in.step = r->step++;
    in.epoch = r->epoch;
    in.batch = E;
    in.sequences = r->cfg.batch_tokens ? taken : 0;
    in.m = r->m;
    in.k = k;
    in.loss = loss / (double)r->step_count; /* per sample, or per token */
    r->taken += taken;
    r->samples += taken;
    r->ep_loss += loss;
    r->ep_count += r->step_count;
    r->ep_hsum += r->step_hsum;
    r->ep_hn += r->step_hn;
    r->res.last_batch = r->d.batch;
    in.epoch_end = r->taken >= r->per_epoch;
    report_step(r, &in);
    if (in.epoch_end) {
        r->res.train_loss = r->ep_loss / (double)r->ep_count;
        r->epoch++;
        r->taken = 0;
        if (!bfit_run_done(r) && (rc = bfit_feed_next_epoch(&r->tr)) != BFIT_OK) {
            r->broken = 1;
            return rc;
        }
    }
    /* data-parallel: the ranks hold the same weights (checked) before an
     * evaluation or the end */
    if (r->dp && (in.epoch_end || bfit_run_done(r)) && (rc = bfit_run_dist_sync(r)) != BFIT_OK) {
        r->broken = 1;
        return rc;
    }
    if (r->cfg.sample_check && (in.epoch_end || bfit_run_done(r)))
        log_sample_check(r, in.epoch);
    if (r->cfg.on_step)
        r->cfg.on_step(r->cfg.cb_ud, &in);
    if (info)
        *info = in;
    return BFIT_OK;
}
