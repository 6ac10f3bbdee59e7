/* memwait.c - waiting for memory: when not even micro-batch 1 fits, a run
 * on a device shared with other processes polls the device until memory
 * comes back or cfg.wait_for_memory has passed; elsewhere nothing can bring
 * it back, and it fails at once, saying how much was missing. */
#include "base/aslimit.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/text.h"
#include "batch/solve.h"
#include "train/run_int.h"

#include <time.h>

/* Bytes micro-batch 1 lacks now (0: it fits), by the controller's rule: the
 * whole step within the budget, its blocks within what is free. */
static uint64_t missing_for_one(bfit_run *r, uint64_t *need)
{
    uint64_t budget = bfit_plan_budget(bfit_arena_capacity(r->s.arena), r->cfg.margin);
    uint64_t free_now = bfit_run_free_for_step(r), step_need, a, b;
    *need = bfit_run_plan_one(r);
    step_need = *need > r->fixed_bytes ? *need - r->fixed_bytes : 0;
    a = *need > budget ? *need - budget : 0;
    b = step_need > free_now ? step_need - free_now : 0;
    return a > b ? a : b;
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
                   (long long)r->pos.step, (unsigned long long)need, (unsigned long long)miss, limit);
    bfit_log_say(&r->lg, "batchfit: step %lld: not even micro-batch 1 fits (it needs %s, %s missing): waiting up to "
                 "%s for memory to come back", (long long)r->pos.step + 1, bfit_format_size(need, s1, sizeof s1),
                 bfit_format_size(miss, s2, sizeof s2), bfit_format_secs(limit, s3, sizeof s3));
}

typedef uint64_t (*missing_fn)(bfit_run *r, uint64_t *need);

/* Read the device with a growing interval (to 5 s) until nothing is
 * missing, r->wait_until has passed or a stop is asked: what is missing
 * then; the seconds it took in *took (also added to r->waited). */
static uint64_t poll(bfit_run *r, missing_fn missing, uint64_t miss, uint64_t *need, double *took)
{
    double t0 = bfit_clock_mono(), now = t0, delay = 0.05;

    while (miss && now < r->wait_until && !bfit_run_stop_requested(r)) {
        double left = r->wait_until - now;
        nap(r, delay < left ? delay : left);
        delay = delay * 2 < 5 ? delay * 2 : 5;
        bfit_run_watch_device(r);
        miss = missing(r, need);
        now = bfit_clock_mono();
    }
    *took = now - t0;
    r->waited += *took;
    return miss;
}

/* What a rerun's limit must add for micro-batch 1: the room it gets grows
 * with the limit byte for byte, the budget by 1 - margin of it; and the
 * room kept for kernels where it is short now. */
static uint64_t limit_raise(bfit_run *r)
{
    uint64_t cap = bfit_arena_capacity(r->s.arena), need, step_need, a, b;
    need = bfit_run_plan_one(r);
    step_need = need > r->fixed_bytes ? need - r->fixed_bytes : 0;
    a = bfit_capacity_for(need, r->cfg.margin);
    a = a > cap ? a - cap : 0;
    b = step_need > bfit_run_free_for_step(r) ? step_need - bfit_run_free_for_step(r) : 0;
    return (a > b ? a : b) + bfit_run_headroom_short();
}

/* Under an address-space limit what is missing is room under it (--memory
 * is not what to change): say the limit, what it leaves and what to raise
 * it to. */
static int limit_refusal(bfit_run *r, uint64_t need, uint64_t miss)
{
    uint64_t limit = 0, room = 0, raise = limit_raise(r);
    char s1[32], s2[32], s3[32], s4[32], s5[32], hint[256], fix[128];

    bfit_as_room(&limit, &room);
    bfit_as_raise(raise, fix, sizeof fix);
    bfit_run_eval_hint(r, raise, hint, sizeof hint);
    return bfit_fail(BFIT_ENOMEM, "out of host memory: not even micro-batch 1 fits at step %lld: it needs %s, %s "
                     "is missing; the address-space limit (ulimit -v) of %s leaves %s unmapped, and %s is "
                     "kept beside the step for oneDNN's kernels: %s%s",
                     (long long)r->pos.step + 1, bfit_format_size(need, s1, sizeof s1),
                     bfit_format_size(miss, s2, sizeof s2), bfit_format_size(limit, s3, sizeof s3),
                     bfit_format_size(room, s4, sizeof s4), bfit_format_size(BFIT_AS_HEADROOM, s5, sizeof s5), fix,
                     hint);
}

/* Not even micro-batch 1 fits. On a device shared with other processes
 * memory may come back: poll it with a growing interval (to 5 s) until
 * cfg.wait_for_memory has passed since the step first waited. On others
 * nothing can bring it back: fail at once. The failure says how much was
 * missing; bfit_train then writes a checkpoint. */
int bfit_run_wait_for_memory(bfit_run *r)
{
    bfit_device_info di;
    double now = bfit_clock_mono(), took;
    uint64_t need, miss = missing_for_one(r, &need);
    char s1[32], s2[32], s3[32];

    bfit_device_info_get(r->s.dev, &di);
    if (miss == 0) {
        bfit_run_memory_now(r);
        return BFIT_OK;
    }
    if (r->wait_until == 0)
        r->wait_until = now + (di.shared ? r->cfg.wait_for_memory : 0);
    if (now < r->wait_until)
        say_waiting(r, need, miss, r->wait_until - now);
    miss = poll(r, missing_for_one, miss, &need, &took);
    r->step_waited += took;
    if (bfit_run_stop_requested(r))
        return bfit_fail(BFIT_ESTOPPED, "stopped on request while waiting for memory in step %lld: the run is at "
                         "step %lld", (long long)r->pos.step + 1, (long long)r->pos.step);
    if (miss == 0) {
        bfit_log_event(&r->lg, "memory_back", "\"step\":%lld,\"waited\":%.3f", (long long)r->pos.step, took);
        bfit_log_say(&r->lg, "batchfit: step %lld: memory came back after %s", (long long)r->pos.step + 1,
                     bfit_format_secs(took, s3, sizeof s3));
        bfit_run_memory_now(r);
        return BFIT_OK;
    }
    r->pos.res.stopped = BFIT_ENOMEM;
    r->pos.res.missing = miss;
    if (r->pos.nmem > 0) { /* the capacity in force is a schedule point's (a device's watch would have moved it) */
        const bfit_mem_point *pt = &r->cfg.memory_schedule[r->pos.nmem - 1];
        if (pt->capacity == bfit_arena_capacity(r->s.arena))
            return bfit_fail_field(BFIT_ENOMEM, "memory_schedule", "its capacity from step %lld, %s: not even "
                                   "micro-batch 1 fits at step %lld: it needs %s, %s is missing", (long long)pt->step,
                                   bfit_format_size(pt->capacity, s3, sizeof s3), (long long)r->pos.step + 1,
                                   bfit_format_size(need, s1, sizeof s1), bfit_format_size(miss, s2, sizeof s2));
    }
    if (di.limited)
        return limit_refusal(r, need, miss);
    return bfit_fail_field(BFIT_ENOMEM, "memory", "not even micro-batch 1 fits at step %lld: it needs %s, %s is "
                           "missing%s%s%s", (long long)r->pos.step + 1, bfit_format_size(need, s1, sizeof s1),
                           bfit_format_size(miss, s2, sizeof s2), di.shared ? "; waited " : "",
                           di.shared ? bfit_format_secs(r->waited, s3, sizeof s3) : "",
                           di.shared ? " for it to come back" : "");
}

/* At the start, micro-batch 1 lacks what other processes hold: the device
 * is shared, its whole memory (r->configured, the ceiling) would hold it,
 * and no memory schedule set the capacity. Bytes missing now, 0 if none. */
static uint64_t start_missing(bfit_run *r, uint64_t *need)
{
    bfit_device_info di;
    uint64_t budget = bfit_plan_budget(bfit_arena_capacity(r->s.arena), r->cfg.margin);

    bfit_device_info_get(r->s.dev, &di);
    *need = bfit_run_plan_one(r);
    if (!di.shared || di.limited || r->pos.nmem > 0 || *need == UINT64_MAX ||
        *need > bfit_plan_budget(r->configured, r->cfg.margin))
        return 0;
    return *need > budget ? *need - budget : 0;
}

/* Not even micro-batch 1 fits at the start. Where what it lacks is what
 * other processes hold of a shared device, wait for it as a step would, up
 * to cfg.wait_for_memory, reading the device again (the capacity follows it
 * up to the ceiling): BFIT_OK when it may fit now; else BFIT_ENOMEM saying
 * what the others hold and how long it waited (nothing to checkpoint yet).
 * Elsewhere BFIT_ENOMEM saying how far from fitting the model is. */
int bfit_run_wait_to_start(bfit_run *r)
{
    uint64_t need, miss = start_missing(r, &need), free_b = 0, total = 0;
    char s1[32], s2[32], s3[32], s4[32], s5[32];
    double took;

    if (miss == 0)
        return bfit_run_plan_fits_msg(r, bfit_plan_budget(r->base_capacity, r->cfg.margin));
    if (r->wait_until == 0) {
        r->wait_until = bfit_clock_mono() + r->cfg.wait_for_memory;
        if (r->cfg.wait_for_memory > 0)
            say_waiting(r, need, miss, r->cfg.wait_for_memory);
    }
    miss = poll(r, start_missing, miss, &need, &took);
    if (bfit_run_stop_requested(r))
        return bfit_fail(BFIT_ESTOPPED, "stopped on request while waiting for memory to start");
    if (miss == 0) {
        bfit_log_event(&r->lg, "memory_back", "\"step\":0,\"waited\":%.3f", r->waited);
        bfit_log_say(&r->lg, "batchfit: memory came back after %s", bfit_format_secs(r->waited, s3, sizeof s3));
        r->wait_until = 0;
        return BFIT_OK;
    }
    bfit_device_memory(r->s.dev, &free_b, &total);
    return bfit_fail_field(BFIT_ENOMEM, "wait_for_memory", "not even micro-batch 1 fits in what the device has free: "
                           "it needs %s, %s is missing; other processes hold the rest (%s free of %s)%s%s%s",
                           bfit_format_size(need, s1, sizeof s1), bfit_format_size(miss, s2, sizeof s2),
                           bfit_format_size(free_b, s4, sizeof s4), bfit_format_size(total, s5, sizeof s5),
                           r->cfg.wait_for_memory > 0 ? "; waited " : ": --wait-for-memory waits for them",
                           r->cfg.wait_for_memory > 0 ? bfit_format_secs(r->waited, s3, sizeof s3) : "",
                           r->cfg.wait_for_memory > 0 ? " for it to come back" : "");
}
