/* control_auto.c - --batch auto's moves (docs/dynamic.md, "Auto mode"):
 * the ladder inside a run, the micro-batch it plans for each E, goodput
 * moves of E (measured throughput x the statistical efficiency of the
 * noise scale) and plateau moves (E doubled at the same lr when the
 * training loss stops falling). */
#include "batchfit.h"
#include "base/err.h"
#include "batch/control_int.h"
#include "batch/goodput.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* Steps trained before the ladder is measured (data loading and the first
 * sizes' set-up have settled), and how far measured micro-steps may drift
 * from the ladder's times before it is measured again. */
#define LADDER_AFTER 50
#define LADDER_DRIFT 1.5
/* Times a ladder confirms a move its rungs propose (each: the proposed
 * size and the size in use timed again, one after the other). */
#define LADDER_CONFIRMS 2

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
    top = bfit_ctl_fits(c, cap) ? cap : bfit_ctl_largest_fit(c, cap);
    best = top;
    t_top = t_best = top ? bfit_gp_step_seconds(&c->st.au.lad, E, top) : -1;
    if (top && t_top > 0 && !c->cfg.keep_whole && !c->cfg.micro_batch) {
        for (int i = 0; i < c->st.au.lad.n; i++) {
            int m = c->st.au.lad.m[i];
            double t = bfit_gp_step_seconds(&c->st.au.lad, E, m);
            if (m < top && t > 0 && t < t_best && bfit_ctl_fits(c, m)) {
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
 * the step's own work (optimizer, norms) as measured; with `bound`, no
 * more than the loader makes (a step cannot outrun its samples). */
static double predict_rate(const bfit_controller *c, int E, double fb_secs, int bound)
{
    double speed = c->st.au.speed > 0 ? c->st.au.speed : 1.0;
    double t = fb_secs / speed + c->st.au.overhead, r = t > 0 ? E / t : 0;

    return bound ? bfit_ctl_bound(c, r) : r;
}

/* The micro-batch the ladder's plan moves the current E to, 0 for none:
 * the plan's m, unless the m in use fits and the plan's is not auto_gain
 * faster than it. *secs: the plan's step seconds. */
static int plan_move(const bfit_controller *c, double *secs)
{
    int pm = plan_m(c, c->st.E, secs);

    if (pm == 0 || pm == c->st.m)
        return 0;
    if (pm < c->st.m && bfit_ctl_fits(c, c->st.m) &&
        *secs * (1.0 + c->cfg.auto_gain) > bfit_gp_step_seconds(&c->st.au.lad, c->st.E, c->st.m))
        return 0;
    return pm;
}

/* Growing to pm is memory's doing, not the clock's: memory shrank the
 * micro-batch and has come back since. */
static int mem_freed(const bfit_controller *c, int pm)
{
    return pm > c->st.m && c->st.free > c->st.free_at_shrink;
}

/* After the ladder, or when memory came back: the plan's micro-batch for
 * the current E. Growth waits for the holdoff and the streak as in the
 * other modes; a smaller m is a measured choice (reason throughput), made
 * only where the ladder's confirmation bore it out. */
void bfit_ctl_auto_replan(bfit_controller *c, int64_t step, bfit_batch_decision *d)
{
    double secs;
    int from = c->st.m, pm, allow = c->st.au.lad.allow;

    if (c->st.au.lad.next || c->st.au.lad.n == 0 || !(pm = plan_move(c, &secs)))
        return;
    if (allow && pm != allow && !mem_freed(c, pm))
        return;
    if (pm > c->st.m) {
        if (step < c->st.hold_until || c->st.streak < c->cfg.grow_after)
            return;
        c->st.last_grow = step;
    }
    if (mem_freed(c, pm)) {
        bfit_ctl_because(d, BFIT_REASON_MEM_FREED);
        bfit_ctl_say(d, "memory freed: micro-batch %d -> %d", from, pm);
    } else {
        /* smaller, or larger again after a smaller one the ladder chose */
        double r_to = c->st.E / secs, r_from = c->st.E / bfit_gp_step_seconds(&c->st.au.lad, c->st.E, from);
        bfit_ctl_because(d, BFIT_REASON_THROUGHPUT);
        if (pm > from)
            bfit_ctl_say(d, "throughput: micro-batch %d -> %d (ladder: %.4g vs %.4g samples/s for a step of %d; %d "
                         "is not %.0f%% faster now)", from, pm, r_to, r_from, c->st.E, from, 100 * c->cfg.auto_gain);
        else
            bfit_ctl_say(d, "throughput: micro-batch %d -> %d (ladder: %.4g vs %.4g samples/s for a step of %d)", from,
                         pm, r_to, r_from, c->st.E);
    }
    /* m made smaller for speed, not memory: growing back is "memory freed"
     * only after memory shrinks (which sets the mark) and comes back */
    if (pm < c->st.m)
        c->st.free_at_shrink = UINT64_MAX;
    bfit_ctl_set_m(c, pm);
}

/* The best E of the grid within a factor adapt_factor of the current one:
 * goodput = predicted samples/s x efficiency. *gp_cur gets the current E's
 * goodput (at its plan's m). */
static int best_goodput(const bfit_controller *c, double B, int bound, double *gp_cur, double *gp_best, int *m_best)
{
    int grid[GP_GRID], n, bestE = c->st.E;
    double lo = c->st.E / c->cfg.adapt_factor, hi = c->st.E * c->cfg.adapt_factor, secs;
    int m = plan_m(c, c->st.E, &secs);

    *gp_cur = *gp_best = m ? predict_rate(c, c->st.E, secs, bound) * bfit_gp_efficiency(B, c->st.E, bfit_ctl_lr_ref(c)) : 0;
    *m_best = m;
    n = bfit_gp_grid(c->cfg.batch_min, c->cfg.batch_max, grid, GP_GRID);
    for (int i = 0; i < n; i++) {
        double g;
        if (grid[i] < lo || grid[i] > hi || grid[i] == c->st.E || !(m = plan_m(c, grid[i], &secs)) || secs <= 0)
            continue;
        g = predict_rate(c, grid[i], secs, bound) * bfit_gp_efficiency(B, grid[i], bfit_ctl_lr_ref(c));
        if (g > *gp_best) {
            *gp_best = g;
            bestE = grid[i];
            *m_best = m;
        }
    }
    return bestE;
}

/* After an E change the windows start again: the loss of another E (and,
 * after a plateau move, of less gradient noise) is compared with its own. */
static void plateau_reset(bfit_controller *c)
{
    c->st.au.plat_sum = 0;
    c->st.au.plat_n = 0;
    c->st.au.plat_best = 0;
    c->st.au.plat_windows = 0;
    c->st.au.plat_stalls = 0;
}

/* Auto mode moves to E in micro-batches of m: the bookkeeping of a change,
 * the windows started again, the lr toward its new scale. */
static void auto_move(bfit_controller *c, int64_t step, int E, int m)
{
    c->st.E = E;
    bfit_ctl_set_m(c, m);
    c->st.last_E_change = step;
    c->st.au.change_seen = c->st.au.seen;
    c->st.au.pending_n = 0;
    plateau_reset(c);
    bfit_ctl_rescale(c, step);
}

/* Close a window of auto_interval samples of training loss: progress is a
 * mean auto_plateau below the best window's since the last change. */
void bfit_ctl_plateau_observe(bfit_controller *c, const bfit_step_stats *s)
{
    int64_t W = c->cfg.auto_interval > 0 ? c->cfg.auto_interval : 1;
    double mean;
    int first;

    if (!c->cfg.auto_batch || !c->cfg.auto_plateau_windows || !s->loss_known || !isfinite(s->loss) ||
        s->samples <= 0)
        return;
    c->st.au.plat_sum += s->loss * s->samples;
    c->st.au.plat_n += s->samples;
    if (c->st.au.plat_n < W)
        return;
    mean = c->st.au.plat_sum / (double)c->st.au.plat_n;
    first = c->st.au.plat_windows++ == 0;
    c->st.au.plat_sum = 0;
    c->st.au.plat_n = 0;
    if (first || mean < c->st.au.plat_best - c->cfg.auto_plateau * fabs(c->st.au.plat_best))
        c->st.au.plat_stalls = 0;
    else
        c->st.au.plat_stalls++;
    if (first || mean < c->st.au.plat_best)
        c->st.au.plat_best = mean;
}

/* Auto mode on a plateau: with a constant lr the loss stops falling where
 * the gradient noise holds it (the lr's "temperature", lr / E); doubling E
 * at the same lr halves that noise, which is what an lr decay would do
 * (Smith et al. 2018, "Don't decay the learning rate, increase the batch
 * size"). Only while the noise scale B is at least the new E: beyond it the
 * step's gradient is mostly signal and more samples buy little. The lr is
 * then for the new E (lr_ref), so later goodput moves scale from there. */
void bfit_ctl_try_plateau(bfit_controller *c, int64_t step, bfit_batch_decision *d)
{
    double B;
    int from = c->st.E, fromM = c->st.m, E = c->st.E * 2, m;

    if (!c->cfg.auto_plateau_windows || c->st.au.plat_stalls < c->cfg.auto_plateau_windows)
        return;
    if (E > c->cfg.batch_max || c->st.noise.n < c->cfg.noise_min_updates ||
        bfit_noise_scale(&c->st.noise, &B) != BFIT_OK || B < E || !(m = plan_m(c, E, NULL))) {
        c->st.au.plat_stalls = 0; /* look again after as many windows */
        return;
    }
    bfit_ctl_because(d, BFIT_REASON_PLATEAU);
    bfit_ctl_say(d, "plateau: batch %d -> %d, micro-batch %d -> %d, at the same lr (the training loss fell less than %.0f%% "
        "in %d windows of %lld samples, best mean %.4g; noise scale %.4g)", from, E, fromM, m,
        100.0 * c->cfg.auto_plateau, c->cfg.auto_plateau_windows, (long long)c->cfg.auto_interval,
        c->st.au.plat_best, B);
    c->st.au.lr_ref = bfit_ctl_lr_ref(c) * 2;
    auto_move(c, step, E, m);
}

/* No E is worth a move once the loader's rate bounds the speed: if one
 * is by its compute alone, the loader holds E (said once, in d->held). */
static void goodput_held(bfit_controller *c, double B, bfit_batch_decision *d)
{
    double gp_cur = 0, gp_best = 0, secs = 0;
    int E = c->st.E, m, held = 0;

    if (c->st.loader_rate > 0) {
        E = best_goodput(c, B, 0, &gp_cur, &gp_best, &m);
        held = E != c->st.E && gp_best >= gp_cur * (1.0 + c->cfg.auto_gain);
    }
    if (held)
        plan_m(c, E, &secs);
    bfit_ctl_hold(c, d, held, "staying at batch %d (batch %d would compute %.4g samples/s, goodput %+.1f%% by "
                  "the compute alone)", c->st.E, E, held ? predict_rate(c, E, secs, 0) : 0,
                  held ? 100.0 * (gp_best / gp_cur - 1.0) : 0);
}

/* Auto mode's E: once the ladder is measured, the noise scale estimated
 * and auto_interval samples trained since the last change, an E whose
 * predicted goodput beats the current one by auto_gain, and has done so
 * for auto_confirm steps in a row, replaces it. */
void bfit_ctl_try_goodput(bfit_controller *c, int64_t step, bfit_batch_decision *d)
{
    double B, gp_cur, gp_best, s_old, s_new;
    int E, m, fromE = c->st.E, fromM = c->st.m;

    if (c->st.au.lad.next || c->st.au.lad.n == 0 || c->st.noise.n < c->cfg.noise_min_updates ||
        c->st.au.seen - c->st.au.change_seen < c->cfg.auto_interval || bfit_noise_scale(&c->st.noise, &B) != BFIT_OK) {
        c->st.au.pending_n = 0;
        return;
    }
    E = best_goodput(c, B, 1, &gp_cur, &gp_best, &m);
    if (E == c->st.E || !(gp_best >= gp_cur * (1.0 + c->cfg.auto_gain))) {
        c->st.au.pending_n = 0;
        goodput_held(c, B, d);
        return;
    }
    if (E != c->st.au.pending_E) {
        c->st.au.pending_E = E;
        c->st.au.pending_n = 0;
    }
    if (++c->st.au.pending_n < c->cfg.auto_confirm)
        return;
    plan_m(c, fromE, &s_old);
    plan_m(c, E, &s_new);
    d->noise_scale = B;
    d->tput_old = predict_rate(c, fromE, s_old, 1);
    d->tput_new = predict_rate(c, E, s_new, 1);
    d->eff_old = bfit_gp_efficiency(B, fromE, bfit_ctl_lr_ref(c));
    d->eff_new = bfit_gp_efficiency(B, E, bfit_ctl_lr_ref(c));
    auto_move(c, step, E, m);
    bfit_ctl_because(d, BFIT_REASON_GOODPUT);
    bfit_ctl_say(d, "goodput: batch %d -> %d, micro-batch %d -> %d (noise scale %.4g; %.4g -> %.4g samples/s x efficiency "
        "%.3g -> %.3g: %+.1f%%)", fromE, E, fromM, m, B, d->tput_old, d->tput_new, d->eff_old, d->eff_new,
        100.0 * (gp_best / gp_cur - 1.0));
}

/* The largest micro-batch a ladder needs: that of the largest E goodput or
 * a plateau can move to from the current one (adapt_factor E, a micro-batch
 * being at most its E), within batch_max and the fixed micro-batch, and
 * what fits. Larger sizes cost the most to time and matter only after E
 * has moved; then the ladder is extended to them. */
static int ladder_top(const bfit_controller *c)
{
    int cap = c->cfg.micro_batch && c->cfg.micro_batch < c->cfg.batch_max ? c->cfg.micro_batch : c->cfg.batch_max;
    double reach = c->st.E * c->cfg.adapt_factor;

    if (reach < cap)
        cap = reach > c->st.m ? (int)reach : c->st.m;
    return bfit_ctl_largest_fit(c, cap);
}

/* Auto mode: measure the ladder (again): from below batch_min (small
 * micro-batches accumulated may be the fastest way to a step) up to
 * ladder_top. */
static void ladder_begin(bfit_controller *c)
{
    int first = 1;

    while (first * 2 <= c->cfg.batch_min / 2)
        first *= 2;
    bfit_gp_ladder_start(&c->st.au.lad, first, ladder_top(c), c->st.m);
    c->st.au.ladders++;
}

/* Auto mode: the first ladder once training has settled; another when
 * micro-steps have run LADDER_DRIFT faster or slower than it predicts for
 * long (the machine's load changed, and with it perhaps which size is
 * fastest), at most every 4 auto_interval samples; the ladder extended
 * when E has moved where its sizes no longer reach. */
void bfit_ctl_ladder_when(bfit_controller *c)
{
    double d = c->st.au.speed > 1 ? c->st.au.speed : c->st.au.speed > 0 ? 1 / c->st.au.speed : 1;

    if (!c->cfg.auto_batch || c->st.au.lad.next)
        return;
    if (c->st.au.ladders == 0 ? c->st.au.nobs >= LADDER_AFTER
                        : d > LADDER_DRIFT && c->st.au.seen - c->st.au.ladder_seen >= 4 * c->cfg.auto_interval)
        ladder_begin(c);
    else if (c->st.au.ladders > 0)
        bfit_gp_ladder_extend(&c->st.au.lad, ladder_top(c));
}

/* Auto mode: how fast micro-steps run now against the ladder (the load
 * changes), and the step's own work outside them. */
void bfit_ctl_observe_speed(bfit_controller *c, const bfit_step_stats *s, double compute)
{
    double pred = bfit_gp_step_seconds(&c->st.au.lad, s->samples, c->st.m), a = c->cfg.tput_alpha;

    if (!c->cfg.auto_batch || c->st.au.lad.n == 0 || !(s->micro_seconds > 0) || pred <= 0)
        return;
    c->st.au.speed = c->st.au.speed > 0 ? c->st.au.speed + a * (pred / s->micro_seconds - c->st.au.speed) : pred / s->micro_seconds;
    c->st.au.overhead = c->st.au.overhead > 0 ? c->st.au.overhead + a * (compute - s->micro_seconds - c->st.au.overhead)
                                  : compute - s->micro_seconds;
    if (c->st.au.overhead < 0)
        c->st.au.overhead = 0;
}

int bfit_controller_ladder_next(const bfit_controller *c)
{
    return c && c->cfg.auto_batch && c->st.started ? c->st.au.lad.next : 0;
}

static int rung_of(const gp_ladder *l, int m)
{
    for (int i = 0; i < l->n; i++)
        if (l->m[i] == m)
            return i;
    return -1;
}

/* The rungs propose a throughput move (a move for memory needs no clock):
 * time the proposed size and the size in use again, one after the other,
 * at most LADDER_CONFIRMS times a ladder; a proposal that cannot be timed
 * again (no rung of its own) is taken as before. */
static void confirm_begin(bfit_controller *c)
{
    gp_ladder *l = &c->st.au.lad;
    double secs;
    int pm = plan_move(c, &secs);

    if (!pm || mem_freed(c, pm) || !bfit_ctl_fits(c, c->st.m) || rung_of(l, pm) < 0 || rung_of(l, c->st.m) < 0)
        return;
    if (l->rounds == LADDER_CONFIRMS) {
        l->allow = -1; /* each confirmation proposed another size: the timings do not settle */
        return;
    }
    l->rounds++;
    l->confirm = l->next = pm;
    l->against = c->st.m;
    l->confirm_secs = 0;
}

/* The confirmation's times replace their rungs', and the other rungs take
 * the pace the size in use changed by (the machine's, since the rungs ran);
 * the move stands if the plan still makes it. */
static void confirm_record(bfit_controller *c, int m, double secs)
{
    gp_ladder *l = &c->st.au.lad;
    int proposed = l->confirm, cur = rung_of(l, l->against), pm;
    double pace, s;

    if (m == proposed && l->confirm_secs == 0 && secs > 0) {
        l->confirm_secs = secs;
        l->next = l->against;
        return;
    }
    l->confirm = l->next = 0;
    if (secs <= 0 || m != l->against) {
        l->allow = -1; /* not timed again (out of the ladder's time or memory): no move on the rungs alone */
        return;
    }
    pace = secs / l->secs[cur];
    for (int i = 0; i < l->n; i++)
        l->secs[i] = l->m[i] == proposed ? l->confirm_secs : i == cur ? secs : l->secs[i] * pace;
    pm = plan_move(c, &s);
    if (pm == proposed)
        l->allow = pm;
    else if (!pm)
        l->allow = -1;
    else
        confirm_begin(c);
}

int bfit_controller_ladder_record(bfit_controller *c, int m, double seconds)
{
    int ext;

    if (!c || m < 1 || m != bfit_controller_ladder_next(c) || isnan(seconds))
        return bfit_fail(BFIT_EINVAL, "controller: the ladder asked for micro-batch %d, not %d",
                         c ? bfit_controller_ladder_next(c) : 0, m);
    ext = c->st.au.lad.ext_ref != 0;
    if (c->st.au.lad.confirm) {
        confirm_record(c, m, seconds);
    } else {
        bfit_gp_ladder_record(&c->st.au.lad, m, seconds, c->cfg.grow_gain);
        if (c->st.au.lad.next == 0)
            confirm_begin(c);
    }
    if (c->st.au.lad.next == 0) {
        if (!ext) {
            c->st.au.speed = 0; /* measured against the new ladder from now on */
            c->st.au.ladder_seen = c->st.au.seen;
        } /* an extension keeps the old rungs' pace */
        c->st.au.ladder_ran = 1;
    }
    return BFIT_OK;
}
