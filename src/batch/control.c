/* control.c - the batch controller: for each optimizer step, the micro-batch,
 * the accumulation, the effective batch and the learning-rate scale, decided
 * from the memory plan (a function handed in) and from what the trainer
 * observed. Pure logic: no tensors, no model, no clock. docs/dynamic.md
 * states the rules; the comments here say why. --batch auto's own moves are
 * in control_auto.c, the configuration's defaults and checks in
 * control_cfg.c, the state a checkpoint keeps in control_state.c. */
#include "batchfit.h"
#include "base/err.h"
#include "batch/control_int.h"
#include "batch/solve.h"
#include "base/sized.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Measurements before a micro-batch's throughput is trusted. */
#define TPUT_MIN 2
/* The holdoff doubles on each flap up to this many times the configured one. */
#define HOLDOFF_MAX_FACTOR 64

typedef bfit_controller_tput tput;

/* ---- memory --------------------------------------------------------------- */

static uint64_t budget(const bfit_controller *c) { return bfit_budget(c->st.capacity, c->cfg.margin); }

/* The one predicate: the whole step within the budget, its blocks within
 * what is free. */
int bfit_ctl_fits(const bfit_controller *c, int m)
{
    uint64_t need = c->cfg.plan_bytes(c->cfg.plan_ud, m);

    if (need == UINT64_MAX || need > budget(c))
        return 0;
    return need - (need < c->cfg.fixed_bytes ? need : c->cfg.fixed_bytes) <= c->st.free;
}

static int fits_cb(void *ud, int m) { return bfit_ctl_fits(ud, m); }

/* The largest m in [1, hi] that fits, 0 if none. */
int bfit_ctl_largest_fit(const bfit_controller *c, int hi) { return bfit_largest_fit(fits_cb, (void *)c, hi); }

/* The largest micro-batch E allows: at most E, the fixed one if set, and in
 * adaptive mode half of E (rounded up) so every step has two micro-batches
 * for the noise scale. */
static int m_cap(const bfit_controller *c)
{
    int cap = c->st.E;

    if (c->cfg.adaptive)
        cap = (int)(((int64_t)c->st.E + 1) / 2);
    if (c->cfg.micro_batch && c->cfg.micro_batch < cap)
        cap = c->cfg.micro_batch;
    return cap;
}

/* ---- throughput records ---------------------------------------------------- */

static tput *tput_find(const bfit_controller *c, int m)
{
    for (int i = 0; i < BFIT_CONTROLLER_NTPUT; i++)
        if (c->st.tp[i].n && c->st.tp[i].m == m)
            return (tput *)&c->st.tp[i];
    return NULL;
}

static int measured(const bfit_controller *c, int m, double *rate)
{
    tput *t = tput_find(c, m);

    if (!t || t->n < TPUT_MIN)
        return 0;
    if (rate)
        *rate = t->rate;
    return 1;
}

static void tput_record(bfit_controller *c, int m, double rate)
{
    tput *t = tput_find(c, m);

    if (!t) {
        t = &c->st.tp[0];
        for (int i = 1; i < BFIT_CONTROLLER_NTPUT && t->n; i++)
            if (!c->st.tp[i].n || c->st.tp[i].used < t->used)
                t = &c->st.tp[i];
        *t = (tput){ .m = m };
    }
    if (t->n) { /* the EMA and its exponentially weighted variance */
        double a = c->cfg.tput_alpha, diff = rate - t->rate;
        t->rate += a * diff;
        t->var = (1 - a) * (t->var + a * diff * diff);
    } else {
        t->rate = rate;
    }
    t->n++;
    t->used = ++c->st.tick;
}

/* Whether m_a runs measurably faster than m_b: by grow_gain, and by more
 * than the measurements' spread (twice the standard error of the two
 * averages' difference; three times, and from more measurements, for a
 * change that would undo one made within flap_window steps: timing noise
 * must not make the micro-batch flap). */
static int clearly_faster(const bfit_controller *c, int m_a, int m_b, int bound, double *ra, double *rb)
{
    const tput *a = tput_find(c, m_a), *b = tput_find(c, m_b);
    double alpha = c->cfg.tput_alpha, cap = (2 - alpha) / alpha, na, nb, se, xa, xb;
    int reversal = c->st.prev_m == m_a && c->st.step - c->st.m_changed <= c->cfg.flap_window;
    int need = reversal ? 2 * TPUT_MIN + 1 : TPUT_MIN;

    if (!a || !b || a->n < need || b->n < need)
        return 0;
    na = a->n < cap ? a->n : cap; /* the EMA's effective number of measurements */
    nb = b->n < cap ? b->n : cap;
    se = sqrt(a->var / na + b->var / nb);
    xa = bound ? bfit_ctl_bound(c, a->rate) : a->rate; /* a step is no faster than its samples come */
    xb = bound ? bfit_ctl_bound(c, b->rate) : b->rate;
    if (ra)
        *ra = xa;
    if (rb)
        *rb = xb;
    return xa > xb * (1.0 + c->cfg.grow_gain) && xa - xb > (reversal ? 3 : 2) * se;
}

double bfit_ctl_bound(const bfit_controller *c, double rate)
{
    return c->st.loader_rate > 0 && rate > c->st.loader_rate ? c->st.loader_rate : rate;
}

void bfit_ctl_hold(bfit_controller *c, bfit_batch_decision *d, int held, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (held && !c->st.loader_held) {
        n = snprintf(d->held, sizeof d->held, "the loader bounds the speed at %.4g samples/s: ", c->st.loader_rate);
        va_start(ap, fmt);
        if (n > 0 && (size_t)n < sizeof d->held)
            vsnprintf(d->held + n, sizeof d->held - (size_t)n, fmt, ap);
        va_end(ap);
        d->loader_rate = c->st.loader_rate;
    }
    c->st.loader_held = held;
}

/* ---- decisions ------------------------------------------------------------- */

void bfit_ctl_say(bfit_batch_decision *d, const char *fmt, ...)
{
    size_t n = strlen(d->why);
    va_list ap;

    if (n + 3 >= sizeof d->why)
        return;
    if (n)
        n += (size_t)snprintf(d->why + n, sizeof d->why - n, "; ");
    va_start(ap, fmt);
    vsnprintf(d->why + n, sizeof d->why - n, fmt, ap);
    va_end(ap);
}

/* Record a change's reason: the first one of a step is the decision's. */
void bfit_ctl_because(bfit_batch_decision *d, bfit_batch_reason r)
{
    if (d->reason == BFIT_REASON_NONE)
        d->reason = r;
}

/* What E and m count, for messages. */
static const char *unit(const bfit_controller *c) { return c->cfg.tokens ? "tokens" : "samples"; }

void bfit_ctl_set_m(bfit_controller *c, int m)
{
    if (m != c->st.m) {
        c->st.prev_m = c->st.m;
        c->st.m_changed = c->st.step;
        c->st.m = m;
        c->st.at_m = 0;
        c->st.streak = 0;
    }
}

/* After any shrink: no growth for the holdoff, which doubles when the shrink
 * undoes a growth of less than flap_window steps ago, so memory oscillating
 * around a threshold makes the controller ever slower to follow it. */
static void after_shrink(bfit_controller *c, int64_t step)
{
    int64_t base = c->cfg.shrink_holdoff;

    if (c->st.last_grow >= 0 && step - c->st.last_grow <= c->cfg.flap_window) {
        c->st.holdoff = c->st.holdoff * 2 > base * HOLDOFF_MAX_FACTOR ? base * HOLDOFF_MAX_FACTOR : c->st.holdoff * 2;
    } else {
        c->st.holdoff = base;
    }
    c->st.last_grow = -1;
    c->st.hold_until = step + c->st.holdoff;
    c->st.streak = 0;
    c->st.free_at_shrink = c->st.free;
}

/* The ramp's progress at `step`: the j-th step of W, or in auto mode (where
 * E varies) the samples since the change over W steps of E0 samples. */
static double ramp_frac(const bfit_controller *c, int64_t step)
{
    double W = (double)c->cfg.rewarmup_steps;

    if (c->cfg.auto_batch)
        return W <= 0 ? 1.0 : (double)(c->st.au.seen - c->st.au.ramp_seen + c->st.E) / (W * c->st.E0);
    return W <= 0 ? 1.0 : (double)(step - c->st.ramp_start + 1) / W;
}

static double scale_at(const bfit_controller *c, int64_t step)
{
    double f = ramp_frac(c, step);

    if (f >= 1)
        return c->st.ramp_to;
    return c->st.ramp_from + (c->st.ramp_to - c->st.ramp_from) * f;
}

/* The E the lr is for: E0, doubled by each of auto mode's plateau moves
 * (which keep the lr while E doubles). */
int bfit_ctl_lr_ref(const bfit_controller *c)
{
    return c->st.au.lr_ref ? c->st.au.lr_ref : c->st.E0;
}

/* rule(E / E0); AdaScale's gain S (B + E0) / (B + E) from the smoothed
 * noise scale B, or its lower bound min(S, 1) while there is none. E0 here
 * is bfit_ctl_lr_ref(). */
static double target_scale(const bfit_controller *c)
{
    double E0 = bfit_ctl_lr_ref(c), S = (double)c->st.E / E0, B;

    if (c->cfg.rule == BFIT_LR_ADASCALE && c->st.noise.n >= c->cfg.noise_min_updates &&
        bfit_noise_scale(&c->st.noise, &B) == BFIT_OK)
        return S * (B + E0) / (B + c->st.E); /* also below E0, where bfit_gp_efficiency stops at 1 */
    return bfit_lr_rule_scale(c->cfg.rule, S);
}

/* E changed at `step`: a higher scale ramps up from the one in use, a lower
 * one applies at once. */
void bfit_ctl_rescale(bfit_controller *c, int64_t step)
{
    double to = target_scale(c);

    c->st.ramp_from = to > c->st.scale ? c->st.scale : to;
    c->st.ramp_to = to;
    c->st.ramp_start = step;
    c->st.au.ramp_seen = c->st.au.seen;
}

static int schedule_E(const bfit_controller *c, int64_t step, int epoch)
{
    int E = c->cfg.batch;

    for (int i = 0; i < c->cfg.nschedule; i++) {
        int64_t at = c->sched[i].by_epoch ? epoch : step;
        if (c->sched[i].at <= at)
            E = c->sched[i].batch;
    }
    return E;
}

/* Adaptive mode: toward the smoothed noise scale, within the bounds, by at
 * most adapt_factor, only every adapt_interval steps and only for a change of
 * at least adapt_min_change (small moves cost a re-warmup for nothing). */
static int adaptive_E(bfit_controller *c, int64_t step, double *bn)
{
    double t, lo, hi;
    int E = c->st.E;

    if (step - c->st.last_E_change < c->cfg.adapt_interval || c->st.noise.n < c->cfg.noise_min_updates ||
        bfit_noise_scale(&c->st.noise, bn) != BFIT_OK)
        return E;
    lo = E / c->cfg.adapt_factor;
    hi = E * c->cfg.adapt_factor;
    t = *bn < lo ? lo : *bn > hi ? hi : *bn;
    t = t < c->cfg.batch_min ? c->cfg.batch_min : t > c->cfg.batch_max ? c->cfg.batch_max : t;
    t = floor(t + 0.5);
    if (fabs(t - E) < 1 || fabs(t - E) < c->cfg.adapt_min_change * E)
        return E;
    return (int)t;
}

/* No measured size up to mc is clearly faster than m once the loader's
 * rate bounds both: if one is by its compute alone, the loader holds m. */
static void grow_held(bfit_controller *c, int mc, bfit_batch_decision *d)
{
    double r = 0, cur = 0;
    int held = 0, m = 0;

    for (int i = 0; i < BFIT_CONTROLLER_NTPUT && c->st.loader_rate > 0 && !held; i++) {
        m = c->st.tp[i].m;
        held = c->st.tp[i].n && m > c->st.m && m <= mc && bfit_ctl_fits(c, m) &&
               clearly_faster(c, m, c->st.m, 0, &r, &cur);
    }
    bfit_ctl_hold(c, d, held, "staying at micro-batch %d (micro-batch %d computes %.4g vs %.4g %s/s)", c->st.m, m, r,
                  cur, unit(c));
}

/* Grow m if memory allows a larger one and (auto mode) it is unmeasured, or
 * measured faster by grow_gain than the current m. A fixed micro-batch grows
 * back to itself whenever memory allows. need_streak: require grow_after
 * observations in a row with room (not after an E change, where the room
 * was just observed). */
static void try_grow(bfit_controller *c, int64_t step, int need_streak, bfit_batch_decision *d)
{
    int cap = m_cap(c), mc, best = 0, from = c->st.m, freed;
    double cur = 0, best_r = 0;

    if (step < c->st.hold_until || c->st.m >= cap || (need_streak && c->st.streak < c->cfg.grow_after))
        return;
    mc = bfit_ctl_largest_fit(c, cap);
    if (mc <= c->st.m)
        return;
    if (c->cfg.micro_batch || !measured(c, mc, NULL)) {
        best = mc;
    } else {
        for (int i = 0; i < BFIT_CONTROLLER_NTPUT; i++) {
            int m = c->st.tp[i].m;
            double r;
            if (c->st.tp[i].n && m > c->st.m && m <= mc && bfit_ctl_fits(c, m) &&
                clearly_faster(c, m, c->st.m, 1, &r, &cur) && r > best_r) {
                best = m;
                best_r = r;
            }
        }
        if (!best)
            grow_held(c, mc, d);
    }
    if (!best)
        return;
    bfit_ctl_set_m(c, best);
    c->st.last_grow = step;
    /* memory freed: more is free than when m last shrank; otherwise the room
     * was there, and the reason is what was measured (or not yet) */
    freed = c->cfg.micro_batch || c->st.free > c->st.free_at_shrink;
    bfit_ctl_because(d, freed ? BFIT_REASON_MEM_FREED : BFIT_REASON_THROUGHPUT);
    if (c->cfg.micro_batch || !measured(c, best, NULL))
        bfit_ctl_say(d, freed ? "memory freed: micro-batch %d -> %d" : "throughput: micro-batch %d -> %d (a size that "
                     "fits and is not measured yet)", from, best);
    else
        bfit_ctl_say(d, "%s: micro-batch %d -> %d (measured %.4g vs %.4g %s/s, beyond their spread)",
                     freed ? "memory freed" : "throughput", from, best, best_r, cur, unit(c));
}

/* Auto mode: a smaller m that fits and was measured faster by grow_gain
 * replaces a measured m (a growth into an unmeasured size can turn out
 * slower). */
static void try_faster(bfit_controller *c, bfit_batch_decision *d)
{
    double cur = 0, best_r = 0;
    int best = 0, from = c->st.m;

    if (c->cfg.micro_batch || !measured(c, c->st.m, &cur))
        return;
    for (int i = 0; i < BFIT_CONTROLLER_NTPUT; i++) {
        int m = c->st.tp[i].m;
        double r;
        if (c->st.tp[i].n && m < c->st.m && bfit_ctl_fits(c, m) && clearly_faster(c, m, c->st.m, 1, &r, &cur) &&
            r > best_r) {
            best = m;
            best_r = r;
        }
    }
    if (!best)
        return;
    bfit_ctl_set_m(c, best);
    bfit_ctl_because(d, BFIT_REASON_THROUGHPUT);
    bfit_ctl_say(d, "throughput: micro-batch %d -> %d (measured %.4g vs %.4g %s/s, beyond their spread)", from, best,
                 best_r, cur, unit(c));
}

/* ---- auto mode: goodput ------------------------------------------------------ */





/* ---- auto mode: plateaus ----------------------------------------------------- */






static void finish(bfit_controller *c, int64_t step, bfit_batch_decision *d)
{
    int64_t k = ((int64_t)c->st.E + c->st.m - 1) / c->st.m;

    d->m = c->st.m;
    d->k = (int)k;
    d->last = (int)(c->st.E - (k - 1) * c->st.m);
    d->batch = c->st.E;
    d->lr_scale = c->st.scale;
    d->split = c->st.m < c->st.E;
    c->st.d = *d;
    c->st.step = step;
    c->st.decided = 1;
    c->st.observed = 0;
    c->st.oom_step = 0;
}

static int no_fit(bfit_controller *c, bfit_batch_decision *d, const char *when)
{
    char s1[32], s2[32], s3[32], s4[32];
    uint64_t p1 = c->cfg.plan_bytes(c->cfg.plan_ud, 1);

    d->m = d->k = d->last = 0;
    return bfit_fail(BFIT_ENOMEM, "%s: even micro-batch 1 needs %s (%s of it for the step) but the budget is %s "
                     "and %s is free for the step", when, bfit_format_size(p1, s1, sizeof s1),
                     bfit_format_size(p1 >= c->cfg.fixed_bytes ? p1 - c->cfg.fixed_bytes : 0, s3, sizeof s3),
                     bfit_format_size(budget(c), s2, sizeof s2),
                     bfit_format_size(c->st.free, s4, sizeof s4));
}

/* The first decision: E from the schedule (or the configured one), m the
 * largest that fits up to the cap. */
static int start(bfit_controller *c, int64_t step, int epoch, bfit_batch_decision *d)
{
    int cap, m;

    c->st.E = c->cfg.adaptive || c->cfg.auto_batch ? (c->cfg.batch ? c->cfg.batch : c->cfg.batch_min)
                                                : schedule_E(c, step, epoch);
    if (c->cfg.auto_batch && c->cfg.lr_ref_batch) /* the batch the lr is for: auto's reference (goodput.c) */
        c->st.E = c->cfg.lr_ref_batch < c->cfg.batch_min   ? c->cfg.batch_min
               : c->cfg.lr_ref_batch > c->cfg.batch_max ? c->cfg.batch_max
                                                        : c->cfg.lr_ref_batch;
    cap = m_cap(c);
    m = bfit_ctl_largest_fit(c, cap);
    if (!m)
        return no_fit(c, d, "controller");
    bfit_ctl_set_m(c, m);
    c->st.E0 = c->cfg.lr_ref_batch ? c->cfg.lr_ref_batch : c->st.E;
    c->st.scale = c->st.ramp_from = c->st.ramp_to = target_scale(c);
    c->st.ramp_start = step;
    c->st.last_E_change = step;
    d->reason = BFIT_REASON_START;
    bfit_ctl_say(d, "start: batch %d, micro-batch %d%s", c->st.E, m, c->cfg.tokens ? " (tokens)" : "");
    if (c->cfg.micro_batch && m < cap)
        bfit_ctl_say(d, "micro-batch %d does not fit", cap);
    return BFIT_OK;
}

static int next_full(bfit_controller *c, int64_t step, int epoch, bfit_batch_decision *d)
{
    bfit_batch_decision nd = {.size = sizeof nd};
    int E, E_changed = 0, rc;
    double bn = 0;

    if (!c || !d || step < 0)
        return bfit_fail(BFIT_EINVAL, "controller: next needs a controller, a decision and a step >= 0");
    if (c->st.decided && step == c->st.step) {
        *d = c->st.d;
        return BFIT_OK;
    }
    if (c->st.decided && step < c->st.step)
        return bfit_fail(BFIT_EINVAL, "controller: step %lld comes before step %lld", (long long)step,
                         (long long)c->st.step);
    nd.prev_m = c->st.m;
    nd.prev_batch = c->st.E;
    if (!c->st.started) {
        rc = start(c, step, epoch, &nd);
        if (rc != BFIT_OK) {
            *d = nd;
            return rc;
        }
        c->st.started = 1;
    } else {
        /* nothing fits: fail before changing anything */
        if (!bfit_ctl_fits(c, 1)) {
            *d = nd;
            return no_fit(c, d, "memory shrank");
        }
        /* 1. the effective batch (auto mode decides it last, below) */
        E = c->cfg.adaptive ? adaptive_E(c, step, &bn) : c->cfg.auto_batch ? c->st.E : schedule_E(c, step, epoch);
        if (E != c->st.E) {
            bfit_ctl_because(&nd, c->cfg.adaptive ? BFIT_REASON_NOISE : BFIT_REASON_SCHEDULE);
            if (c->cfg.adaptive)
                bfit_ctl_say(&nd, "noise scale %.4g: batch %d -> %d%s", bn, c->st.E, E, c->cfg.tokens ? " tokens" : "");
            else
                bfit_ctl_say(&nd, "schedule: batch %d -> %d", c->st.E, E);
            c->st.E = E;
            c->st.last_E_change = step;
            bfit_ctl_rescale(c, step);
            E_changed = 1;
        }
        /* 2. memory: shrink before an allocation fails */
        if (!bfit_ctl_fits(c, c->st.m)) {
            int from = c->st.m, m = bfit_ctl_largest_fit(c, c->st.m < m_cap(c) ? c->st.m : m_cap(c));
            bfit_ctl_set_m(c, m);
            after_shrink(c, step);
            bfit_ctl_because(&nd, BFIT_REASON_MEM_SHRANK);
            bfit_ctl_say(&nd, "memory shrank: micro-batch %d -> %d", from, m);
        }
        /* 3. a smaller E caps m; a larger one may let it grow */
        if (c->st.m > m_cap(c)) {
            int m = bfit_ctl_fits(c, m_cap(c)) ? m_cap(c) : bfit_ctl_largest_fit(c, m_cap(c));
            if (nd.reason == BFIT_REASON_NONE) /* E kept: the cap is the option's (a resume that set it) */
                bfit_ctl_because(&nd, BFIT_REASON_OPTION);
            bfit_ctl_say(&nd, "micro-batch %d -> %d%s", c->st.m, m,
                         nd.reason == BFIT_REASON_OPTION ? " (the micro-batch option)" : "");
            bfit_ctl_set_m(c, m);
        } else if (c->cfg.auto_batch) {
            bfit_ctl_auto_replan(c, step, &nd);
        } else {
            try_grow(c, step, !E_changed, &nd);
        }
        if (nd.reason == BFIT_REASON_NONE && c->cfg.auto_batch)
            bfit_ctl_try_plateau(c, step, &nd);
        if (nd.reason == BFIT_REASON_NONE && c->cfg.auto_batch)
            bfit_ctl_try_goodput(c, step, &nd);
        else if (nd.reason == BFIT_REASON_NONE)
            try_faster(c, &nd);
        if (c->cfg.rule == BFIT_LR_ADASCALE)
            c->st.ramp_to = target_scale(c); /* the gain follows the noise scale */
        c->st.scale = scale_at(c, step);
    }
    finish(c, step, &nd);
    *d = nd;
    return BFIT_OK;
}

/* The noise scale: from the step's micro-batches when it had two or more,
 * else from this step and the previous one (docs/dynamic.md). In auto mode
 * an estimate weighs by its samples: noise_alpha per E0 of them. */
static int observe_noise(bfit_controller *c, const bfit_step_stats *s)
{
    int rc = BFIT_OK;

    if (c->cfg.auto_batch && c->st.noise.n > 0)
        c->st.noise.alpha = 1.0 - pow(1.0 - c->cfg.noise_alpha, (double)s->samples / c->st.E0);
    if (s->nmicro)
        rc = bfit_noise_update_step(&c->st.noise, s->nmicro, s->micro_sqnorm, s->micro_size, s->full_sqnorm);
    else if (s->step_norms && s->diff_sqnorm >= 0 && c->st.au.prev_norms && s->samples > 0)
        rc = bfit_noise_update_pair(&c->st.noise, c->st.au.prev_b, c->st.au.prev_g2, s->samples, s->full_sqnorm, s->diff_sqnorm);
    c->st.au.prev_norms = s->step_norms && s->samples > 0;
    c->st.au.prev_g2 = s->full_sqnorm;
    c->st.au.prev_b = s->samples;
    return rc;
}




static int observe_full(bfit_controller *c, const bfit_step_stats *s)
{
    double compute;
    int cap, rc;

    if (!c || !s)
        return bfit_fail(BFIT_EINVAL, "controller: observe needs a controller and stats");
    if (!c->st.decided || c->st.observed)
        return bfit_fail(BFIT_ESTATE, "controller: observe follows exactly one next() per step");
    if (s->step != c->st.step)
        return bfit_fail(BFIT_EINVAL, "controller: observed step %lld, but step %lld was decided",
                         (long long)s->step, (long long)c->st.step);
    if (s->samples < 0 || !(s->seconds >= 0) || !(s->data_seconds >= 0) || !isfinite(s->seconds))
        return bfit_fail(BFIT_EINVAL, "controller: step %lld has %d samples in %g s (%g s data): not valid",
                         (long long)s->step, s->samples, s->seconds, s->data_seconds);
    if (s->nmicro < 0 || s->nmicro == 1 || (s->nmicro && (!s->micro_sqnorm || !s->micro_size)))
        return bfit_fail(BFIT_EINVAL, "controller: %d micro-batch norms (0, or 2 and more with sizes)",
                         s->nmicro);
    if (!(s->micro_seconds >= 0 && s->micro_seconds <= s->seconds * (1 + 1e-9) + 1e-9) || (s->step_norms && !isfinite(s->diff_sqnorm)))
        return bfit_fail(BFIT_EINVAL, "controller: step %lld: micro-step seconds %g (of %g) or norms not valid",
                         (long long)s->step, s->micro_seconds, s->seconds);
    if (!(s->loader_rate >= 0) || !isfinite(s->loader_rate))
        return bfit_fail(BFIT_EINVAL, "controller: step %lld: loader rate %g samples/s (>= 0; 0: not known)",
                         (long long)s->step, s->loader_rate);
    if ((rc = observe_noise(c, s)) != BFIT_OK)
        return rc;
    c->st.observed = 1;
    c->st.capacity = s->capacity;
    c->st.free = s->free_bytes;
    c->st.au.seen += s->samples;
    bfit_ctl_plateau_observe(c, s);
    /* throughput of compute, not of data loading; not over a step that
     * retried after an OOM (two sizes) or set up a new size */
    compute = s->seconds - s->data_seconds;
    if (++c->st.at_m > c->cfg.tput_skip && !c->st.oom_step && !c->st.au.ladder_ran && s->samples > 0 && compute > 0) {
        tput_record(c, c->st.m, s->samples / compute);
        bfit_ctl_observe_speed(c, s, compute);
    }
    if (s->loader_rate > 0) /* an EMA, as the compute's rates */
        c->st.loader_rate = c->st.loader_rate > 0 ? c->st.loader_rate + c->cfg.tput_alpha * (s->loader_rate - c->st.loader_rate)
                                                  : s->loader_rate;
    c->st.au.nobs++;
    c->st.au.ladder_ran = 0;
    bfit_ctl_ladder_when(c);
    /* the streak of steps with room for a larger micro-batch */
    cap = m_cap(c);
    if (c->st.m < cap && bfit_ctl_largest_fit(c, cap) > c->st.m)
        c->st.streak++;
    else
        c->st.streak = 0;
    return BFIT_OK;
}

static int on_oom_full(bfit_controller *c, int failed_m, uint64_t free_bytes, uint64_t capacity, bfit_batch_decision *d)
{
    bfit_batch_decision nd;
    int m, from;

    if (!c || !d || failed_m < 1)
        return bfit_fail(BFIT_EINVAL, "controller: on_oom needs a controller, a decision and the failed size");
    if (!c->st.decided)
        return bfit_fail(BFIT_ESTATE, "controller: an OOM before any decision");
    c->st.capacity = capacity;
    c->st.free = free_bytes;
    c->st.oom_step = 1;
    m = bfit_ctl_largest_fit(c, failed_m - 1 < m_cap(c) ? failed_m - 1 : m_cap(c));
    if (!m) {
        *d = c->st.d;
        return no_fit(c, d, "out of memory");
    }
    from = c->st.m;
    bfit_ctl_set_m(c, m);
    after_shrink(c, c->st.step);
    nd = c->st.d;
    nd.reason = BFIT_REASON_OOM;
    nd.prev_m = from;
    nd.prev_batch = c->st.E;
    nd.why[0] = '\0';
    nd.held[0] = '\0'; /* said with the step's first decision */
    nd.loader_rate = 0;
    bfit_ctl_say(&nd, "out of memory at micro-batch %d: micro-batch %d -> %d", failed_m, from, m);
    finish(c, c->st.step, &nd);
    c->st.oom_step = 1;
    *d = nd;
    return BFIT_OK;
}

int bfit_controller_noise_scale(const bfit_controller *c, double *b_noise)
{
    if (!c || !b_noise)
        return bfit_fail(BFIT_EINVAL, "controller: no controller or output");
    return bfit_noise_scale(&c->st.noise, b_noise);
}

int bfit_controller_throughput(const bfit_controller *c, int m, double *samples_per_s)
{
    if (!c || !samples_per_s)
        return bfit_fail(BFIT_EINVAL, "controller: no controller or output");
    if (!measured(c, m, samples_per_s))
        return bfit_fail(BFIT_ESTATE, "controller: micro-batch %d not measured yet", m);
    return BFIT_OK;
}



static int new_full(const bfit_controller_config *cfg, bfit_controller **out)
{
    bfit_controller *c;
    uint64_t p1;
    int rc;

    if (!out)
        return bfit_fail(BFIT_EINVAL, "controller: no output");
    *out = NULL;
    rc = bfit_ctl_check_config(cfg);
    if (rc != BFIT_OK)
        return rc;
    p1 = cfg->plan_bytes(cfg->plan_ud, 1);
    if (p1 != UINT64_MAX && p1 < cfg->fixed_bytes)
        return bfit_fail(BFIT_EINVAL, "controller: fixed bytes %llu exceed the plan at micro-batch 1 (%llu)",
                         (unsigned long long)cfg->fixed_bytes, (unsigned long long)p1);
    c = calloc(1, sizeof *c);
    if (!c)
        return bfit_fail(BFIT_ENOMEM, "controller: out of host memory");
    c->cfg = *cfg;
    if (cfg->nschedule) {
        c->sched = malloc((size_t)cfg->nschedule * sizeof *c->sched);
        if (!c->sched) {
            rc = bfit_fail(BFIT_ENOMEM, "controller: out of host memory");
            goto fail_free;
        }
        memcpy(c->sched, cfg->schedule, (size_t)cfg->nschedule * sizeof *c->sched);
    }
    c->cfg.schedule = c->sched;
    c->st.capacity = cfg->capacity;
    c->st.free = cfg->capacity > cfg->fixed_bytes ? cfg->capacity - cfg->fixed_bytes : 0;
    c->st.holdoff = cfg->shrink_holdoff;
    c->st.last_grow = -1;
    bfit_noise_init(&c->st.noise, cfg->noise_alpha);
    /* fail now, not at the first step, if nothing fits at all */
    if (!bfit_ctl_fits(c, 1)) {
        bfit_batch_decision d = {.size = sizeof d};
        rc = no_fit(c, &d, "controller");
        goto fail_sched;
    }
    *out = c;
    return BFIT_OK;

fail_sched:
    free(c->sched);
fail_free:
    free(c);
    return rc;
}

void bfit_controller_free(bfit_controller *c)
{
    if (!c)
        return;
    free(c->sched);
    free(c);
}


/* ---- the public face: structs that carry their size (base/sized.h) ---------- */

int bfit_controller_new(const bfit_controller_config *cfg, bfit_controller **out)
{
    bfit_controller_config full;

    if (out)
        *out = NULL;
    if (!cfg)
        return bfit_fail(BFIT_EINVAL, "controller: no configuration");
    bfit_controller_config_default(&full);
    if (bfit_sized_in(&full, sizeof full, cfg, "bfit_controller_config") != BFIT_OK)
        return BFIT_EINVAL;
    return new_full(&full, out);
}

int bfit_controller_next(bfit_controller *c, int64_t step, int epoch, bfit_batch_decision *d)
{
    bfit_batch_decision full = {.size = sizeof full};
    int rc;

    if (!d || d->size < BFIT_SIZED_MIN || d->size > BFIT_SIZED_MAX)
        return d ? bfit_sized_out(d, &full, sizeof full, "bfit_batch_decision")
                 : bfit_fail(BFIT_EINVAL, "controller: next needs a decision to fill");
    rc = next_full(c, step, epoch, &full);
    bfit_sized_out(d, &full, sizeof full, "bfit_batch_decision");
    return rc;
}

int bfit_controller_observe(bfit_controller *c, const bfit_step_stats *s)
{
    bfit_step_stats full = {.size = sizeof full};

    if (!s)
        return bfit_fail(BFIT_EINVAL, "controller: observe needs a controller and stats");
    if (bfit_sized_in(&full, sizeof full, s, "bfit_step_stats") != BFIT_OK)
        return BFIT_EINVAL;
    return observe_full(c, &full);
}

int bfit_controller_on_oom(bfit_controller *c, int failed_m, uint64_t free_bytes, uint64_t capacity,
                           bfit_batch_decision *d)
{
    bfit_batch_decision full = {.size = sizeof full};
    int rc;

    if (!d || d->size < BFIT_SIZED_MIN || d->size > BFIT_SIZED_MAX)
        return d ? bfit_sized_out(d, &full, sizeof full, "bfit_batch_decision")
                 : bfit_fail(BFIT_EINVAL, "controller: on_oom needs a decision to fill");
    rc = on_oom_full(c, failed_m, free_bytes, capacity, &full);
    bfit_sized_out(d, &full, sizeof full, "bfit_batch_decision");
    return rc;
}
