/* control.c - the batch controller: for each optimizer step, the micro-batch,
 * the accumulation, the effective batch and the learning-rate scale, decided
 * from the memory plan (a function handed in) and from what the trainer
 * observed. Pure logic: no tensors, no model, no clock. docs/dynamic.md
 * states the rules; the comments here say why. */
#include "batchfit.h"
#include "base/err.h"
#include "batch/control_state.h"
#include "batch/goodput.h"
#include "batch/solve.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Sizes past a bisection's answer that are also tried: a plan can be smaller
 * at some m than at m - 1 (oneDNN picks another algorithm). */
/* Micro-batches whose throughput is remembered (least recently used go). */
#define NTPUT 32
/* Auto mode: steps trained before the ladder is measured (data loading and
 * the first sizes' set-up have settled), and how far measured micro-steps
 * may drift from the ladder's times before it is measured again. */
#define LADDER_AFTER 50
#define LADDER_DRIFT 1.5
/* Measurements before a micro-batch's throughput is trusted. */
#define TPUT_MIN 2
/* The holdoff doubles on each flap up to this many times the configured one. */
#define HOLDOFF_MAX_FACTOR 64

typedef struct tput {
    int m, n;        /* micro-batch, measurements (0: slot free) */
    double rate;     /* EMA of samples per second of compute */
    uint64_t used;   /* for replacement */
} tput;

struct bfit_controller {
    bfit_controller_config cfg;
    bfit_batch_point *sched;   /* our copy of cfg.schedule */
    /* ---- the state (control_state.h) ---- */
    uint64_t capacity, free;   /* the last observed memory */
    int m, E, E0;
    bfit_noise noise;

    int started, decided, observed, oom_step;
    int64_t step;              /* the step last decided */
    bfit_batch_decision d;     /* and its decision */

    double scale;              /* lr scale of the last decision */
    double ramp_from, ramp_to; /* the re-warmup ramp, from ramp_start on */
    int64_t ramp_start;

    int streak;                /* consecutive observations with room for a larger m */
    int at_m;                  /* steps observed since m last changed */
    int64_t hold_until;        /* no growth before this step */
    int64_t holdoff;           /* the current holdoff (doubles on flapping) */
    int64_t last_grow;         /* step of the last growth, -1: none */
    int64_t last_E_change;

    tput tp[NTPUT];
    uint64_t tick;

    bfit_controller_auto au;   /* consecutive steps' norms and auto mode (control_state.h) */
};

/* ---- names and parsing --------------------------------------------------- */

static const char *const rule_names[BFIT_LR_NRULES] = { "linear", "sqrt", "none", "adascale" };
static const char *const reason_names[BFIT_REASON_COUNT] = {
    "", "start", "out of memory", "memory shrank", "memory freed", "throughput", "schedule", "noise scale",
    "goodput", "plateau"
};

int bfit_lr_rule_parse(const char *name, bfit_lr_rule *out)
{
    for (int r = 0; r < BFIT_LR_NRULES; r++) {
        if (name && strcasecmp(name, rule_names[r]) == 0) {
            *out = (bfit_lr_rule)r;
            return BFIT_OK;
        }
    }
    return bfit_fail(BFIT_EINVAL, "unknown lr scaling rule '%s' (valid: linear, sqrt, none, adascale)",
                     name ? name : "");
}

const char *bfit_lr_rule_name(bfit_lr_rule rule)
{
    return (unsigned)rule < BFIT_LR_NRULES ? rule_names[rule] : "?";
}

double bfit_lr_rule_scale(bfit_lr_rule rule, double ratio)
{
    switch (rule) {
    case BFIT_LR_LINEAR: return ratio;
    case BFIT_LR_SQRT: return sqrt(ratio);
    case BFIT_LR_ADASCALE: return ratio < 1 ? ratio : 1.0; /* the gain's bound without a noise scale */
    default: return 1.0;
    }
}

const char *bfit_batch_reason_name(bfit_batch_reason r)
{
    return (unsigned)r < BFIT_REASON_COUNT ? reason_names[r] : "?";
}

/* ---- configuration -------------------------------------------------------- */

void bfit_controller_config_default(bfit_controller_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->rule = BFIT_LR_LINEAR;
    cfg->rewarmup_steps = 100;
    cfg->grow_after = 5;
    cfg->grow_gain = 0.05;
    cfg->shrink_holdoff = 50;
    cfg->flap_window = 200;
    cfg->tput_skip = 1;
    cfg->tput_alpha = 0.3;
    cfg->adapt_interval = 100;
    cfg->adapt_factor = 2.0;
    cfg->adapt_min_change = 0.1;
    cfg->noise_alpha = 0.05;
    cfg->noise_min_updates = 20;
    cfg->auto_gain = 0.1;
    cfg->auto_interval = 10000;
    cfg->auto_confirm = 20;
    cfg->auto_plateau_windows = 2;
    cfg->auto_plateau = 0.02;
}

static int check_schedule(const bfit_controller_config *cfg)
{
    const bfit_batch_point *s = cfg->schedule;

    if (cfg->nschedule < 0 || (cfg->nschedule > 0 && !s))
        return bfit_fail(BFIT_EINVAL, "controller: schedule of %d points without points", cfg->nschedule);
    for (int i = 0; i < cfg->nschedule; i++) {
        if (s[i].at < 0 || s[i].batch < 1)
            return bfit_fail(BFIT_EINVAL, "controller: schedule point %d (%lld:%d) needs at >= 0 and batch >= 1",
                             i + 1, (long long)s[i].at, s[i].batch);
        if (i > 0 && (s[i].by_epoch != s[0].by_epoch || s[i].at <= s[i - 1].at))
            return bfit_fail(BFIT_EINVAL, "controller: schedule point %d is not after point %d in the same unit",
                             i + 1, i);
    }
    if (cfg->batch < 1 && (cfg->nschedule == 0 || s[0].at != 0))
        return bfit_fail(BFIT_EINVAL, "controller: effective batch %d must be >= 1 (or the schedule must start "
                         "at 0)", cfg->batch);
    return BFIT_OK;
}

static int check_config(const bfit_controller_config *cfg)
{
    if (!cfg || !cfg->plan_bytes)
        return bfit_fail(BFIT_EINVAL, "controller: no plan function");
    if (!(cfg->margin >= 0 && cfg->margin < 1))
        return bfit_fail(BFIT_EINVAL, "controller: margin %g must be in [0, 1)", cfg->margin);
    if (cfg->micro_batch < 0)
        return bfit_fail(BFIT_EINVAL, "controller: micro-batch %d must be 0 (auto) or >= 1", cfg->micro_batch);
    if ((unsigned)cfg->rule >= BFIT_LR_NRULES)
        return bfit_fail(BFIT_EINVAL, "controller: unknown lr scaling rule %d (valid: linear, sqrt, none, "
                         "adascale)", (int)cfg->rule);
    if (cfg->rule == BFIT_LR_ADASCALE && !cfg->auto_batch && !cfg->adaptive)
        return bfit_fail(BFIT_EINVAL, "controller: the adascale rule needs the noise scale: an auto or adaptive "
                         "batch");
    if (cfg->auto_batch) {
        if (cfg->adaptive || cfg->nschedule)
            return bfit_fail(BFIT_EINVAL, "controller: an auto batch excludes an adaptive batch and a batch "
                             "schedule");
        if (cfg->batch_min < 1 || cfg->batch_min > cfg->batch_max)
            return bfit_fail(BFIT_EINVAL, "controller: auto batch needs 1 <= minimum <= maximum, got %d and %d",
                             cfg->batch_min, cfg->batch_max);
        if (cfg->batch && (cfg->batch < cfg->batch_min || cfg->batch > cfg->batch_max))
            return bfit_fail(BFIT_EINVAL, "controller: initial batch %d is outside [%d, %d]", cfg->batch,
                             cfg->batch_min, cfg->batch_max);
        if (!(cfg->auto_gain >= 0 && isfinite(cfg->auto_gain)) || cfg->auto_interval < 0 || cfg->auto_confirm < 1)
            return bfit_fail(BFIT_EINVAL, "controller: auto needs gain >= 0 (got %g), interval >= 0 (%lld), "
                             "confirm >= 1 (%d)", cfg->auto_gain, (long long)cfg->auto_interval, cfg->auto_confirm);
        if (cfg->auto_plateau_windows < 0 || !(cfg->auto_plateau >= 0 && cfg->auto_plateau < 1))
            return bfit_fail(BFIT_EINVAL, "controller: auto's plateau check needs windows >= 0 (got %d) and a "
                             "relative fall in [0, 1) (got %g)", cfg->auto_plateau_windows, cfg->auto_plateau);
    } else if (cfg->adaptive) {
        if (cfg->nschedule)
            return bfit_fail(BFIT_EINVAL, "controller: adaptive batch and a batch schedule exclude each other");
        if (cfg->batch_min < 2 || cfg->batch_min > cfg->batch_max)
            return bfit_fail(BFIT_EINVAL, "controller: adaptive batch needs 2 <= minimum <= maximum, got %d and %d",
                             cfg->batch_min, cfg->batch_max);
        if (cfg->batch && (cfg->batch < cfg->batch_min || cfg->batch > cfg->batch_max))
            return bfit_fail(BFIT_EINVAL, "controller: initial batch %d is outside [%d, %d]", cfg->batch,
                             cfg->batch_min, cfg->batch_max);
    } else if (check_schedule(cfg) != BFIT_OK) {
        return BFIT_EINVAL;
    }
    if (cfg->lr_ref_batch < 0 || cfg->rewarmup_steps < 0)
        return bfit_fail(BFIT_EINVAL, "controller: lr reference batch %d and re-warmup steps %lld must be >= 0",
                         cfg->lr_ref_batch, (long long)cfg->rewarmup_steps);
    if (cfg->grow_after < 0 || cfg->shrink_holdoff < 0 || cfg->flap_window < 0 || cfg->tput_skip < 0)
        return bfit_fail(BFIT_EINVAL, "controller: grow-after, holdoff, flap window and skip must be >= 0");
    if (!(cfg->grow_gain >= 0 && isfinite(cfg->grow_gain)))
        return bfit_fail(BFIT_EINVAL, "controller: growth gain %g must be finite and >= 0", cfg->grow_gain);
    if (!(cfg->tput_alpha > 0 && cfg->tput_alpha <= 1) || !(cfg->noise_alpha > 0 && cfg->noise_alpha <= 1))
        return bfit_fail(BFIT_EINVAL, "controller: EMA weights (throughput %g, noise %g) must be in (0, 1]",
                         cfg->tput_alpha, cfg->noise_alpha);
    if (cfg->adapt_interval < 1 || !(cfg->adapt_factor > 1 && isfinite(cfg->adapt_factor)) ||
        !(cfg->adapt_min_change >= 0 && cfg->adapt_min_change < 1) || cfg->noise_min_updates < 1)
        return bfit_fail(BFIT_EINVAL, "controller: adaptive needs interval >= 1 (got %lld), factor > 1 (%g), "
                         "min change in [0, 1) (%g), noise updates >= 1 (%d)", (long long)cfg->adapt_interval,
                         cfg->adapt_factor, cfg->adapt_min_change, cfg->noise_min_updates);
    return BFIT_OK;
}

/* ---- memory --------------------------------------------------------------- */

static uint64_t budget(const bfit_controller *c) { return bfit_budget(c->capacity, c->cfg.margin); }

/* The one predicate: the whole step within the budget, its blocks within
 * what is free. */
static int fits(const bfit_controller *c, int m)
{
    uint64_t need = c->cfg.plan_bytes(c->cfg.plan_ud, m);

    if (need == UINT64_MAX || need > budget(c))
        return 0;
    return need - (need < c->cfg.fixed_bytes ? need : c->cfg.fixed_bytes) <= c->free;
}

static int fits_cb(void *ud, int m) { return fits(ud, m); }

/* The largest m in [1, hi] that fits, 0 if none. */
static int largest_fit(const bfit_controller *c, int hi) { return bfit_largest_fit(fits_cb, (void *)c, hi); }

/* The largest micro-batch E allows: at most E, the fixed one if set, and in
 * adaptive mode half of E (rounded up) so every step has two micro-batches
 * for the noise scale. */
static int m_cap(const bfit_controller *c)
{
    int cap = c->E;

    if (c->cfg.adaptive)
        cap = (int)(((int64_t)c->E + 1) / 2);
    if (c->cfg.micro_batch && c->cfg.micro_batch < cap)
        cap = c->cfg.micro_batch;
    return cap;
}

/* ---- throughput records ---------------------------------------------------- */

static tput *tput_find(const bfit_controller *c, int m)
{
    for (int i = 0; i < NTPUT; i++)
        if (c->tp[i].n && c->tp[i].m == m)
            return (tput *)&c->tp[i];
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
        t = &c->tp[0];
        for (int i = 1; i < NTPUT && t->n; i++)
            if (!c->tp[i].n || c->tp[i].used < t->used)
                t = &c->tp[i];
        *t = (tput){ .m = m };
    }
    t->rate = t->n ? t->rate + c->cfg.tput_alpha * (rate - t->rate) : rate;
    t->n++;
    t->used = ++c->tick;
}

/* ---- decisions ------------------------------------------------------------- */

static void say(bfit_batch_decision *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(bfit_batch_decision *d, const char *fmt, ...)
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
static void because(bfit_batch_decision *d, bfit_batch_reason r)
{
    if (d->reason == BFIT_REASON_NONE)
        d->reason = r;
}

/* What E and m count, for messages. */
static const char *unit(const bfit_controller *c) { return c->cfg.tokens ? "tokens" : "samples"; }

static void set_m(bfit_controller *c, int m)
{
    if (m != c->m) {
        c->m = m;
        c->at_m = 0;
        c->streak = 0;
    }
}

/* After any shrink: no growth for the holdoff, which doubles when the shrink
 * undoes a growth of less than flap_window steps ago, so memory oscillating
 * around a threshold makes the controller ever slower to follow it. */
static void after_shrink(bfit_controller *c, int64_t step)
{
    int64_t base = c->cfg.shrink_holdoff;

    if (c->last_grow >= 0 && step - c->last_grow <= c->cfg.flap_window) {
        c->holdoff = c->holdoff * 2 > base * HOLDOFF_MAX_FACTOR ? base * HOLDOFF_MAX_FACTOR : c->holdoff * 2;
    } else {
        c->holdoff = base;
    }
    c->last_grow = -1;
    c->hold_until = step + c->holdoff;
    c->streak = 0;
}

/* The ramp's progress at `step`: the j-th step of W, or in auto mode (where
 * E varies) the samples since the change over W steps of E0 samples. */
static double ramp_frac(const bfit_controller *c, int64_t step)
{
    double W = (double)c->cfg.rewarmup_steps;

    if (c->cfg.auto_batch)
        return W <= 0 ? 1.0 : (double)(c->au.seen - c->au.ramp_seen + c->E) / (W * c->E0);
    return W <= 0 ? 1.0 : (double)(step - c->ramp_start + 1) / W;
}

static double scale_at(const bfit_controller *c, int64_t step)
{
    double f = ramp_frac(c, step);

    if (f >= 1)
        return c->ramp_to;
    return c->ramp_from + (c->ramp_to - c->ramp_from) * f;
}

/* The E the lr is for: E0, doubled by each of auto mode's plateau moves
 * (which keep the lr while E doubles). */
static int lr_ref(const bfit_controller *c)
{
    return c->au.lr_ref ? c->au.lr_ref : c->E0;
}

/* rule(E / E0); AdaScale's gain S (B + E0) / (B + E) from the smoothed
 * noise scale B, or its lower bound min(S, 1) while there is none. E0 here
 * is lr_ref(). */
static double target_scale(const bfit_controller *c)
{
    double E0 = lr_ref(c), S = (double)c->E / E0, B;

    if (c->cfg.rule == BFIT_LR_ADASCALE && c->noise.n >= c->cfg.noise_min_updates &&
        bfit_noise_scale(&c->noise, &B) == BFIT_OK)
        return S * (B + E0) / (B + c->E); /* also below E0, where bfit_gp_efficiency stops at 1 */
    return bfit_lr_rule_scale(c->cfg.rule, S);
}

/* E changed at `step`: a higher scale ramps up from the one in use, a lower
 * one applies at once. */
static void rescale(bfit_controller *c, int64_t step)
{
    double to = target_scale(c);

    c->ramp_from = to > c->scale ? c->scale : to;
    c->ramp_to = to;
    c->ramp_start = step;
    c->au.ramp_seen = c->au.seen;
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
    int E = c->E;

    if (step - c->last_E_change < c->cfg.adapt_interval || c->noise.n < c->cfg.noise_min_updates ||
        bfit_noise_scale(&c->noise, bn) != BFIT_OK)
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

/* Grow m if memory allows a larger one and (auto mode) it is unmeasured, or
 * measured faster by grow_gain than the current m. A fixed micro-batch grows
 * back to itself whenever memory allows. need_streak: require grow_after
 * observations in a row with room (not after an E change, where the room
 * was just observed). */
static void try_grow(bfit_controller *c, int64_t step, int need_streak, bfit_batch_decision *d)
{
    int cap = m_cap(c), mc, best = 0, from = c->m;
    double cur = 0, best_r = 0;

    if (step < c->hold_until || c->m >= cap || (need_streak && c->streak < c->cfg.grow_after))
        return;
    mc = largest_fit(c, cap);
    if (mc <= c->m)
        return;
    if (c->cfg.micro_batch || !measured(c, mc, NULL)) {
        best = mc;
    } else if (measured(c, c->m, &cur)) {
        for (int i = 0; i < NTPUT; i++) {
            int m = c->tp[i].m;
            if (c->tp[i].n >= TPUT_MIN && m > c->m && m <= mc && c->tp[i].rate > best_r && fits(c, m)) {
                best = m;
                best_r = c->tp[i].rate;
            }
        }
        if (best && best_r < cur * (1.0 + c->cfg.grow_gain))
            best = 0;
    }
    if (!best)
        return;
    set_m(c, best);
    c->last_grow = step;
    because(d, BFIT_REASON_MEM_FREED);
    if (c->cfg.micro_batch || !measured(c, best, NULL))
        say(d, "memory freed: micro-batch %d -> %d", from, best);
    else
        say(d, "memory freed: micro-batch %d -> %d (measured %.4g vs %.4g %s/s)", from, best, best_r, cur, unit(c));
}

/* Auto mode: a smaller m that fits and was measured faster by grow_gain
 * replaces a measured m (a growth into an unmeasured size can turn out
 * slower). */
static void try_faster(bfit_controller *c, bfit_batch_decision *d)
{
    double cur = 0, best_r = 0;
    int best = 0, from = c->m;

    if (c->cfg.micro_batch || !measured(c, c->m, &cur))
        return;
    for (int i = 0; i < NTPUT; i++) {
        int m = c->tp[i].m;
        if (c->tp[i].n >= TPUT_MIN && m < c->m && c->tp[i].rate > best_r && fits(c, m)) {
            best = m;
            best_r = c->tp[i].rate;
        }
    }
    if (!best || best_r < cur * (1.0 + c->cfg.grow_gain))
        return;
    set_m(c, best);
    because(d, BFIT_REASON_THROUGHPUT);
    say(d, "throughput: micro-batch %d -> %d (measured %.4g vs %.4g %s/s)", from, best, best_r, cur, unit(c));
}

/* ---- auto mode: goodput ------------------------------------------------------ */

/* The micro-batch for a step of E samples: the largest that fits (at most E
 * and the fixed one), unless the ladder says a smaller one that fits runs
 * the whole step auto_gain faster. It follows the ladder, not each step's
 * clock, so it moves only when the ladder is measured again. 0 if nothing
 * fits. */
static int plan_m(const bfit_controller *c, int E, double *secs)
{
    int cap = E, top, best;
    double t_top, t_best;

    if (c->cfg.micro_batch && c->cfg.micro_batch < cap)
        cap = c->cfg.micro_batch;
    top = fits(c, cap) ? cap : largest_fit(c, cap);
    best = top;
    t_top = t_best = top ? bfit_gp_step_seconds(&c->au.lad, E, top) : -1;
    if (top && t_top > 0 && !c->cfg.keep_whole && !c->cfg.micro_batch) {
        for (int i = 0; i < c->au.lad.n; i++) {
            int m = c->au.lad.m[i];
            double t = bfit_gp_step_seconds(&c->au.lad, E, m);
            if (m < top && t > 0 && t < t_best && fits(c, m)) {
                best = m;
                t_best = t;
            }
        }
        if (t_best * (1.0 + c->cfg.auto_gain) > t_top) {
            best = top;
            t_best = t_top;
        }
    }
    if (secs)
        *secs = t_best;
    return best;
}

/* Predicted samples/s of steps of E in micro-batches of m: the ladder's
 * time scaled by how fast micro-steps have run in training lately, plus
 * the step's own work (optimizer, norms) as measured. */
static double predict_rate(const bfit_controller *c, int E, double fb_secs)
{
    double speed = c->au.speed > 0 ? c->au.speed : 1.0;
    double t = fb_secs / speed + c->au.overhead;

    return t > 0 ? E / t : 0;
}

/* After the ladder, or when memory came back: the plan's micro-batch for
 * the current E. Growth waits for the holdoff and the streak as in the
 * other modes; a smaller m is a measured choice (reason throughput). */
static void auto_replan(bfit_controller *c, int64_t step, bfit_batch_decision *d)
{
    double secs;
    int from = c->m, pm;

    if (c->au.lad.next || c->au.lad.n == 0)
        return;
    pm = plan_m(c, c->E, &secs);
    if (pm == 0 || pm == c->m)
        return;
    /* the current m stays unless the plan's is auto_gain faster than it */
    if (pm < c->m && fits(c, c->m) && secs * (1.0 + c->cfg.auto_gain) > bfit_gp_step_seconds(&c->au.lad, c->E, c->m))
        return;
    if (pm > c->m) {
        if (step < c->hold_until || c->streak < c->cfg.grow_after)
            return;
        c->last_grow = step;
        because(d, BFIT_REASON_MEM_FREED);
        say(d, "memory freed: micro-batch %d -> %d", from, pm);
    } else {
        because(d, BFIT_REASON_THROUGHPUT);
        say(d, "throughput: micro-batch %d -> %d (ladder: %.4g vs %.4g samples/s for a step of %d)", from, pm,
            c->E / secs, c->E / bfit_gp_step_seconds(&c->au.lad, c->E, from), c->E);
    }
    set_m(c, pm);
}

/* The best E of the grid within a factor adapt_factor of the current one:
 * goodput = predicted samples/s x efficiency. *gp_cur gets the current E's
 * goodput (at its plan's m). */
static int best_goodput(const bfit_controller *c, double B, double *gp_cur, double *gp_best, int *m_best)
{
    int grid[GP_GRID], n, bestE = c->E;
    double lo = c->E / c->cfg.adapt_factor, hi = c->E * c->cfg.adapt_factor, secs;
    int m = plan_m(c, c->E, &secs);

    *gp_cur = *gp_best = m ? predict_rate(c, c->E, secs) * bfit_gp_efficiency(B, c->E, lr_ref(c)) : 0;
    *m_best = m;
    n = bfit_gp_grid(c->cfg.batch_min, c->cfg.batch_max, grid, GP_GRID);
    for (int i = 0; i < n; i++) {
        double g;
        if (grid[i] < lo || grid[i] > hi || grid[i] == c->E || !(m = plan_m(c, grid[i], &secs)) || secs <= 0)
            continue;
        g = predict_rate(c, grid[i], secs) * bfit_gp_efficiency(B, grid[i], lr_ref(c));
        if (g > *gp_best) {
            *gp_best = g;
            bestE = grid[i];
            *m_best = m;
        }
    }
    return bestE;
}

/* ---- auto mode: plateaus ----------------------------------------------------- */

/* After an E change the windows start again: the loss of another E (and,
 * after a plateau move, of less gradient noise) is compared with its own. */
static void plateau_reset(bfit_controller *c)
{
    c->au.plat_sum = 0;
    c->au.plat_n = 0;
    c->au.plat_best = 0;
    c->au.plat_windows = 0;
    c->au.plat_stalls = 0;
}

/* Auto mode moves to E in micro-batches of m: the bookkeeping of a change,
 * the windows started again, the lr toward its new scale. */
static void auto_move(bfit_controller *c, int64_t step, int E, int m)
{
    c->E = E;
    set_m(c, m);
    c->last_E_change = step;
    c->au.change_seen = c->au.seen;
    c->au.pending_n = 0;
    plateau_reset(c);
    rescale(c, step);
}

/* Close a window of auto_interval samples of training loss: progress is a
 * mean auto_plateau below the best window's since the last change. */
static void plateau_observe(bfit_controller *c, const bfit_step_stats *s)
{
    int64_t W = c->cfg.auto_interval > 0 ? c->cfg.auto_interval : 1;
    double mean;
    int first;

    if (!c->cfg.auto_batch || !c->cfg.auto_plateau_windows || !s->loss_known || !isfinite(s->loss) ||
        s->samples <= 0)
        return;
    c->au.plat_sum += s->loss * s->samples;
    c->au.plat_n += s->samples;
    if (c->au.plat_n < W)
        return;
    mean = c->au.plat_sum / (double)c->au.plat_n;
    first = c->au.plat_windows++ == 0;
    c->au.plat_sum = 0;
    c->au.plat_n = 0;
    if (first || mean < c->au.plat_best - c->cfg.auto_plateau * fabs(c->au.plat_best))
        c->au.plat_stalls = 0;
    else
        c->au.plat_stalls++;
    if (first || mean < c->au.plat_best)
        c->au.plat_best = mean;
}

/* Auto mode on a plateau: with a constant lr the loss stops falling where
 * the gradient noise holds it (the lr's "temperature", lr / E); doubling E
 * at the same lr halves that noise, which is what an lr decay would do
 * (Smith et al. 2018, "Don't decay the learning rate, increase the batch
 * size"). Only while the noise scale B is at least the new E: beyond it the
 * step's gradient is mostly signal and more samples buy little. The lr is
 * then for the new E (lr_ref), so later goodput moves scale from there. */
static void try_plateau(bfit_controller *c, int64_t step, bfit_batch_decision *d)
{
    double B;
    int from = c->E, fromM = c->m, E = c->E * 2, m;

    if (!c->cfg.auto_plateau_windows || c->au.plat_stalls < c->cfg.auto_plateau_windows)
        return;
    if (E > c->cfg.batch_max || c->noise.n < c->cfg.noise_min_updates ||
        bfit_noise_scale(&c->noise, &B) != BFIT_OK || B < E || !(m = plan_m(c, E, NULL))) {
        c->au.plat_stalls = 0; /* look again after as many windows */
        return;
    }
    because(d, BFIT_REASON_PLATEAU);
    say(d, "plateau: batch %d -> %d, micro-batch %d -> %d, at the same lr (the training loss fell less than %.0f%% "
        "in %d windows of %lld samples, best mean %.4g; noise scale %.4g)", from, E, fromM, m,
        100.0 * c->cfg.auto_plateau, c->cfg.auto_plateau_windows, (long long)c->cfg.auto_interval,
        c->au.plat_best, B);
    c->au.lr_ref = lr_ref(c) * 2;
    auto_move(c, step, E, m);
}

/* Auto mode's E: once the ladder is measured, the noise scale estimated
 * and auto_interval samples trained since the last change, an E whose
 * predicted goodput beats the current one by auto_gain, and has done so
 * for auto_confirm steps in a row, replaces it. */
static void try_goodput(bfit_controller *c, int64_t step, bfit_batch_decision *d)
{
    double B, gp_cur, gp_best, s_old, s_new;
    int E, m, fromE = c->E, fromM = c->m;

    if (c->au.lad.next || c->au.lad.n == 0 || c->noise.n < c->cfg.noise_min_updates ||
        c->au.seen - c->au.change_seen < c->cfg.auto_interval || bfit_noise_scale(&c->noise, &B) != BFIT_OK) {
        c->au.pending_n = 0;
        return;
    }
    E = best_goodput(c, B, &gp_cur, &gp_best, &m);
    if (E == c->E || !(gp_best >= gp_cur * (1.0 + c->cfg.auto_gain))) {
        c->au.pending_n = 0;
        return;
    }
    if (E != c->au.pending_E) {
        c->au.pending_E = E;
        c->au.pending_n = 0;
    }
    if (++c->au.pending_n < c->cfg.auto_confirm)
        return;
    plan_m(c, fromE, &s_old);
    plan_m(c, E, &s_new);
    d->noise_scale = B;
    d->tput_old = predict_rate(c, fromE, s_old);
    d->tput_new = predict_rate(c, E, s_new);
    d->eff_old = bfit_gp_efficiency(B, fromE, lr_ref(c));
    d->eff_new = bfit_gp_efficiency(B, E, lr_ref(c));
    auto_move(c, step, E, m);
    because(d, BFIT_REASON_GOODPUT);
    say(d, "goodput: batch %d -> %d, micro-batch %d -> %d (noise scale %.4g; %.4g -> %.4g samples/s x efficiency "
        "%.3g -> %.3g: %+.1f%%)", fromE, E, fromM, m, B, d->tput_old, d->tput_new, d->eff_old, d->eff_new,
        100.0 * (gp_best / gp_cur - 1.0));
}

static void finish(bfit_controller *c, int64_t step, bfit_batch_decision *d)
{
    int64_t k = ((int64_t)c->E + c->m - 1) / c->m;

    d->m = c->m;
    d->k = (int)k;
    d->last = (int)(c->E - (k - 1) * c->m);
    d->batch = c->E;
    d->lr_scale = c->scale;
    d->split = c->m < c->E;
    c->d = *d;
    c->step = step;
    c->decided = 1;
    c->observed = 0;
    c->oom_step = 0;
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
                     bfit_format_size(c->free, s4, sizeof s4));
}

/* The first decision: E from the schedule (or the configured one), m the
 * largest that fits up to the cap. */
static int start(bfit_controller *c, int64_t step, int epoch, bfit_batch_decision *d)
{
    int cap, m;

    c->E = c->cfg.adaptive || c->cfg.auto_batch ? (c->cfg.batch ? c->cfg.batch : c->cfg.batch_min)
                                                : schedule_E(c, step, epoch);
    if (c->cfg.auto_batch && c->cfg.lr_ref_batch) /* the batch the lr is for: auto's reference (goodput.c) */
        c->E = c->cfg.lr_ref_batch < c->cfg.batch_min   ? c->cfg.batch_min
               : c->cfg.lr_ref_batch > c->cfg.batch_max ? c->cfg.batch_max
                                                        : c->cfg.lr_ref_batch;
    cap = m_cap(c);
    m = largest_fit(c, cap);
    if (!m)
        return no_fit(c, d, "controller");
    set_m(c, m);
    c->E0 = c->cfg.lr_ref_batch ? c->cfg.lr_ref_batch : c->E;
    c->scale = c->ramp_from = c->ramp_to = target_scale(c);
    c->ramp_start = step;
    c->last_E_change = step;
    d->reason = BFIT_REASON_START;
    say(d, "start: batch %d, micro-batch %d%s", c->E, m, c->cfg.tokens ? " (tokens)" : "");
    if (c->cfg.micro_batch && m < cap)
        say(d, "micro-batch %d does not fit", cap);
    return BFIT_OK;
}

int bfit_controller_next(bfit_controller *c, int64_t step, int epoch, bfit_batch_decision *d)
{
    bfit_batch_decision nd = {0};
    int E, E_changed = 0, rc;
    double bn = 0;

    if (!c || !d || step < 0)
        return bfit_fail(BFIT_EINVAL, "controller: next needs a controller, a decision and a step >= 0");
    if (c->decided && step == c->step) {
        *d = c->d;
        return BFIT_OK;
    }
    if (c->decided && step < c->step)
        return bfit_fail(BFIT_EINVAL, "controller: step %lld comes before step %lld", (long long)step,
                         (long long)c->step);
    nd.prev_m = c->m;
    nd.prev_batch = c->E;
    if (!c->started) {
        rc = start(c, step, epoch, &nd);
        if (rc != BFIT_OK) {
            *d = nd;
            return rc;
        }
        c->started = 1;
    } else {
        /* nothing fits: fail before changing anything */
        if (!fits(c, 1)) {
            *d = nd;
            return no_fit(c, d, "memory shrank");
        }
        /* 1. the effective batch (auto mode decides it last, below) */
        E = c->cfg.adaptive ? adaptive_E(c, step, &bn) : c->cfg.auto_batch ? c->E : schedule_E(c, step, epoch);
        if (E != c->E) {
            because(&nd, c->cfg.adaptive ? BFIT_REASON_NOISE : BFIT_REASON_SCHEDULE);
            if (c->cfg.adaptive)
                say(&nd, "noise scale %.4g: batch %d -> %d%s", bn, c->E, E, c->cfg.tokens ? " tokens" : "");
            else
                say(&nd, "schedule: batch %d -> %d", c->E, E);
            c->E = E;
            c->last_E_change = step;
            rescale(c, step);
            E_changed = 1;
        }
        /* 2. memory: shrink before an allocation fails */
        if (!fits(c, c->m)) {
            int from = c->m, m = largest_fit(c, c->m < m_cap(c) ? c->m : m_cap(c));
            set_m(c, m);
            after_shrink(c, step);
            because(&nd, BFIT_REASON_MEM_SHRANK);
            say(&nd, "memory shrank: micro-batch %d -> %d", from, m);
        }
        /* 3. a smaller E caps m; a larger one may let it grow */
        if (c->m > m_cap(c)) {
            int m = fits(c, m_cap(c)) ? m_cap(c) : largest_fit(c, m_cap(c));
            say(&nd, "micro-batch %d -> %d", c->m, m);
            set_m(c, m);
        } else if (c->cfg.auto_batch) {
            auto_replan(c, step, &nd);
        } else {
            try_grow(c, step, !E_changed, &nd);
        }
        if (nd.reason == BFIT_REASON_NONE && c->cfg.auto_batch)
            try_plateau(c, step, &nd);
        if (nd.reason == BFIT_REASON_NONE && c->cfg.auto_batch)
            try_goodput(c, step, &nd);
        else if (nd.reason == BFIT_REASON_NONE)
            try_faster(c, &nd);
        if (c->cfg.rule == BFIT_LR_ADASCALE)
            c->ramp_to = target_scale(c); /* the gain follows the noise scale */
        c->scale = scale_at(c, step);
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

    if (c->cfg.auto_batch && c->noise.n > 0)
        c->noise.alpha = 1.0 - pow(1.0 - c->cfg.noise_alpha, (double)s->samples / c->E0);
    if (s->nmicro)
        rc = bfit_noise_update_step(&c->noise, s->nmicro, s->micro_sqnorm, s->micro_size, s->full_sqnorm);
    else if (s->step_norms && s->diff_sqnorm >= 0 && c->au.prev_norms && s->samples > 0)
        rc = bfit_noise_update_pair(&c->noise, c->au.prev_b, c->au.prev_g2, s->samples, s->full_sqnorm, s->diff_sqnorm);
    c->au.prev_norms = s->step_norms && s->samples > 0;
    c->au.prev_g2 = s->full_sqnorm;
    c->au.prev_b = s->samples;
    return rc;
}

/* Auto mode: measure the ladder (again): from below batch_min (small
 * micro-batches accumulated may be the fastest way to a step) up to the
 * largest micro-batch that fits within batch_max. */
static void ladder_begin(bfit_controller *c)
{
    int first = 1, cap = c->cfg.micro_batch && c->cfg.micro_batch < c->cfg.batch_max ? c->cfg.micro_batch
                                                                                   : c->cfg.batch_max;

    while (first * 2 <= c->cfg.batch_min / 2)
        first *= 2;
    bfit_gp_ladder_start(&c->au.lad, first, largest_fit(c, cap));
    c->au.ladders++;
}

/* Auto mode: the first ladder once training has settled; another when
 * micro-steps have run LADDER_DRIFT faster or slower than it predicts for
 * long (the machine's load changed, and with it perhaps which size is
 * fastest), at most every 4 auto_interval samples. */
static void ladder_when(bfit_controller *c)
{
    double d = c->au.speed > 1 ? c->au.speed : c->au.speed > 0 ? 1 / c->au.speed : 1;

    if (!c->cfg.auto_batch || c->au.lad.next)
        return;
    if (c->au.ladders == 0 ? c->au.nobs >= LADDER_AFTER
                        : d > LADDER_DRIFT && c->au.seen - c->au.ladder_seen >= 4 * c->cfg.auto_interval)
        ladder_begin(c);
}

/* Auto mode: how fast micro-steps run now against the ladder (the load
 * changes), and the step's own work outside them. */
static void observe_speed(bfit_controller *c, const bfit_step_stats *s, double compute)
{
    double pred = bfit_gp_step_seconds(&c->au.lad, s->samples, c->m), a = c->cfg.tput_alpha;

    if (!c->cfg.auto_batch || c->au.lad.n == 0 || !(s->micro_seconds > 0) || pred <= 0)
        return;
    c->au.speed = c->au.speed > 0 ? c->au.speed + a * (pred / s->micro_seconds - c->au.speed) : pred / s->micro_seconds;
    c->au.overhead = c->au.overhead > 0 ? c->au.overhead + a * (compute - s->micro_seconds - c->au.overhead)
                                  : compute - s->micro_seconds;
    if (c->au.overhead < 0)
        c->au.overhead = 0;
}

int bfit_controller_observe(bfit_controller *c, const bfit_step_stats *s)
{
    double compute;
    int cap, rc;

    if (!c || !s)
        return bfit_fail(BFIT_EINVAL, "controller: observe needs a controller and stats");
    if (!c->decided || c->observed)
        return bfit_fail(BFIT_ESTATE, "controller: observe follows exactly one next() per step");
    if (s->step != c->step)
        return bfit_fail(BFIT_EINVAL, "controller: observed step %lld, but step %lld was decided",
                         (long long)s->step, (long long)c->step);
    if (s->samples < 0 || !(s->seconds >= 0) || !(s->data_seconds >= 0) || !isfinite(s->seconds))
        return bfit_fail(BFIT_EINVAL, "controller: step %lld has %d samples in %g s (%g s data): not valid",
                         (long long)s->step, s->samples, s->seconds, s->data_seconds);
    if (s->nmicro < 0 || s->nmicro == 1 || (s->nmicro && (!s->micro_sqnorm || !s->micro_size)))
        return bfit_fail(BFIT_EINVAL, "controller: %d micro-batch norms (0, or 2 and more with sizes)",
                         s->nmicro);
    if (!(s->micro_seconds >= 0 && s->micro_seconds <= s->seconds * (1 + 1e-9) + 1e-9) || (s->step_norms && !isfinite(s->diff_sqnorm)))
        return bfit_fail(BFIT_EINVAL, "controller: step %lld: micro-step seconds %g (of %g) or norms not valid",
                         (long long)s->step, s->micro_seconds, s->seconds);
    if ((rc = observe_noise(c, s)) != BFIT_OK)
        return rc;
    c->observed = 1;
    c->capacity = s->capacity;
    c->free = s->free_bytes;
    c->au.seen += s->samples;
    plateau_observe(c, s);
    /* throughput of compute, not of data loading; not over a step that
     * retried after an OOM (two sizes) or set up a new size */
    compute = s->seconds - s->data_seconds;
    if (++c->at_m > c->cfg.tput_skip && !c->oom_step && !c->au.ladder_ran && s->samples > 0 && compute > 0) {
        tput_record(c, c->m, s->samples / compute);
        observe_speed(c, s, compute);
    }
    c->au.nobs++;
    c->au.ladder_ran = 0;
    ladder_when(c);
    /* the streak of steps with room for a larger micro-batch */
    cap = m_cap(c);
    if (c->m < cap && largest_fit(c, cap) > c->m)
        c->streak++;
    else
        c->streak = 0;
    return BFIT_OK;
}

int bfit_controller_on_oom(bfit_controller *c, int failed_m, uint64_t free_bytes, uint64_t capacity,
                           bfit_batch_decision *d)
{
    bfit_batch_decision nd;
    int m, from;

    if (!c || !d || failed_m < 1)
        return bfit_fail(BFIT_EINVAL, "controller: on_oom needs a controller, a decision and the failed size");
    if (!c->decided)
        return bfit_fail(BFIT_ESTATE, "controller: an OOM before any decision");
    c->capacity = capacity;
    c->free = free_bytes;
    c->oom_step = 1;
    m = largest_fit(c, failed_m - 1 < m_cap(c) ? failed_m - 1 : m_cap(c));
    if (!m) {
        *d = c->d;
        return no_fit(c, d, "out of memory");
    }
    from = c->m;
    set_m(c, m);
    after_shrink(c, c->step);
    nd = c->d;
    nd.reason = BFIT_REASON_OOM;
    nd.prev_m = from;
    nd.prev_batch = c->E;
    nd.why[0] = '\0';
    say(&nd, "out of memory at micro-batch %d: micro-batch %d -> %d", failed_m, from, m);
    finish(c, c->step, &nd);
    c->oom_step = 1;
    *d = nd;
    return BFIT_OK;
}

int bfit_controller_noise_scale(const bfit_controller *c, double *b_noise)
{
    if (!c || !b_noise)
        return bfit_fail(BFIT_EINVAL, "controller: no controller or output");
    return bfit_noise_scale(&c->noise, b_noise);
}

int bfit_controller_throughput(const bfit_controller *c, int m, double *samples_per_s)
{
    if (!c || !samples_per_s)
        return bfit_fail(BFIT_EINVAL, "controller: no controller or output");
    if (!measured(c, m, samples_per_s))
        return bfit_fail(BFIT_ESTATE, "controller: micro-batch %d not measured yet", m);
    return BFIT_OK;
}

int bfit_controller_ladder_next(const bfit_controller *c)
{
    return c && c->cfg.auto_batch && c->started ? c->au.lad.next : 0;
}

int bfit_controller_ladder_record(bfit_controller *c, int m, double seconds)
{
    if (!c || m < 1 || m != bfit_controller_ladder_next(c) || isnan(seconds))
        return bfit_fail(BFIT_EINVAL, "controller: the ladder asked for micro-batch %d, not %d",
                         c ? bfit_controller_ladder_next(c) : 0, m);
    bfit_gp_ladder_record(&c->au.lad, m, seconds, c->cfg.grow_gain);
    if (c->au.lad.next == 0) {
        c->au.speed = 0; /* measured against the new ladder from now on */
        c->au.ladder_seen = c->au.seen;
        c->au.ladder_ran = 1;
    }
    return BFIT_OK;
}

int bfit_controller_new(const bfit_controller_config *cfg, bfit_controller **out)
{
    bfit_controller *c;
    uint64_t p1;
    int rc;

    if (!out)
        return bfit_fail(BFIT_EINVAL, "controller: no output");
    *out = NULL;
    rc = check_config(cfg);
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
    c->capacity = cfg->capacity;
    c->free = cfg->capacity > cfg->fixed_bytes ? cfg->capacity - cfg->fixed_bytes : 0;
    c->holdoff = cfg->shrink_holdoff;
    c->last_grow = -1;
    bfit_noise_init(&c->noise, cfg->noise_alpha);
    /* fail now, not at the first step, if nothing fits at all */
    if (!fits(c, 1)) {
        bfit_batch_decision d = {0};
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

/* ---- the state, for checkpoints (control_state.h) ----------------------------
 * Kept apart from the logic above: every field of struct bfit_controller but
 * the configuration and the schedule's copy is state and is copied here. */
_Static_assert(NTPUT == BFIT_CONTROLLER_NTPUT, "the state's throughput table has the controller's size");

void bfit_controller_state_get(const bfit_controller *c, bfit_controller_state *s)
{
    memset(s, 0, sizeof *s);
    s->capacity = c->capacity;
    s->free = c->free;
    s->m = c->m;
    s->E = c->E;
    s->E0 = c->E0;
    s->noise = c->noise;
    s->started = c->started;
    s->decided = c->decided;
    s->observed = c->observed;
    s->oom_step = c->oom_step;
    s->step = c->step;
    s->d = c->d;
    s->scale = c->scale;
    s->ramp_from = c->ramp_from;
    s->ramp_to = c->ramp_to;
    s->ramp_start = c->ramp_start;
    s->streak = c->streak;
    s->at_m = c->at_m;
    s->hold_until = c->hold_until;
    s->holdoff = c->holdoff;
    s->last_grow = c->last_grow;
    s->last_E_change = c->last_E_change;
    for (int i = 0; i < NTPUT; i++)
        s->tp[i] = (bfit_controller_tput){c->tp[i].m, c->tp[i].n, c->tp[i].rate, c->tp[i].used};
    s->tick = c->tick;
    s->au = c->au;
}

int bfit_controller_state_set(bfit_controller *c, const bfit_controller_state *s)
{
    int ok = s->m >= 1 && s->E >= 1 && s->E0 >= 1 && isfinite(s->scale) && isfinite(s->ramp_from) &&
             isfinite(s->ramp_to) && s->noise.alpha > 0 && s->noise.alpha <= 1 && isfinite(s->noise.g2_ema) &&
             isfinite(s->noise.s_ema) && s->noise.n >= 0 && s->holdoff >= 0 && s->step >= 0 &&
             isfinite(s->au.plat_sum) && isfinite(s->au.plat_best) && s->au.plat_n >= 0 && s->au.lr_ref >= 0;
    for (int i = 0; ok && i < NTPUT; i++)
        ok = s->tp[i].n >= 0 && isfinite(s->tp[i].rate);
    if (!ok)
        return bfit_fail(BFIT_EINVAL, "controller: the state to restore is not one a controller can have "
                         "(micro-batch %d, batch %d)", s->m, s->E);
    c->capacity = s->capacity;
    c->free = s->free;
    c->m = s->m;
    c->E = s->E;
    c->E0 = s->E0;
    c->noise = s->noise;
    c->started = s->started;
    c->decided = s->decided;
    c->observed = s->observed;
    c->oom_step = s->oom_step;
    c->step = s->step;
    c->d = s->d;
    c->scale = s->scale;
    c->ramp_from = s->ramp_from;
    c->ramp_to = s->ramp_to;
    c->ramp_start = s->ramp_start;
    c->streak = s->streak;
    c->at_m = s->at_m;
    c->hold_until = s->hold_until;
    c->holdoff = s->holdoff;
    c->last_grow = s->last_grow;
    c->last_E_change = s->last_E_change;
    for (int i = 0; i < NTPUT; i++)
        c->tp[i] = (tput){s->tp[i].m, s->tp[i].n, s->tp[i].rate, s->tp[i].used};
    c->tick = s->tick;
    c->au = s->au;
    return BFIT_OK;
}
