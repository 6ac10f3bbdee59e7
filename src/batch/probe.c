/* probe.c - the finder: the largest batch from the plan, confirmed by real
 * steps against an arena whose capacity is the budget; the fastest batch
 * from throughput measured on a ladder of sizes; the model left as found. */
#include "base/clock.h"
#include "base/median.h"
#include "base/err.h"
#include "base/progress.h"
#include "batch/probe.h"
#include "batch/session.h"
#include "nn/zoo.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_LIMIT (1 << 20)

bfit_probe_cfg bfit_probe_cfg_default(void)
{
    bfit_probe_cfg c;
    memset(&c, 0, sizeof c);
    c.margin = 0.1;
    c.limit = DEFAULT_LIMIT;
    c.ladder = 1;
    c.warmup = 1;
    c.repeats = 5;
    c.tolerance = 0.05;
    c.data_threshold = 0.2;
    c.seed = 1;
    return c;
}

bfit_find_cfg bfit_find_cfg_default(void)
{
    bfit_find_cfg c;
    memset(&c, 0, sizeof c);
    c.data = "fashion-mnist";
    c.normalize = 1;
    c.prefetch = 1;
    c.seed = 1;
    c.opt = bfit_optim_cfg_default(BFIT_OPT_SGD);
    c.probe = bfit_probe_cfg_default();
    c.storage = bfit_storage_default();
    c.mlm.mask_id = -1;
    return c;
}

static const char *sz(uint64_t b, char *buf) { return bfit_format_size(b, buf, 32); }

static void set_input(bfit_probe_result *r, const bfit_model *M)
{
    bfit_shape s = M->input;
    r->input_tokens = M->input_dtype == BFIT_I32;
    r->input_nd = s.nd;
    for (int i = 0; i < 4; i++)
        r->input_dims[i] = s.d[i];
}

/* ---- what a probe holds -------------------------------------------------- */

typedef struct probe {
    bfit_model *M;
    bfit_arena *arena;
    const bfit_probe_cfg *cfg;
    const bfit_optim_cfg *opt;
    const bfit_dataset *d;
    bfit_stream_cfg sc;
    bfit_stream *s;
    bfit_probe_result *res;
    uint64_t step_budget;   /* what the plan may take: the budget less what others hold */
    uint64_t micro;         /* steps run, for dropout seeds */
    int *steps;             /* the counter the current phase charges */
    float *stage_x;         /* host staging of one micro-batch */
    int32_t *stage_y;
    int stage_m;
    bfit_progress prog;     /* the cfg's human */
} probe;

/* A stream that can give m samples in one take (prefetching guesses the
 * next take is the size of the last, so one take per step keeps it useful). */
static int ensure_stream(probe *p, int m)
{
    if (m > p->stage_m) {
        size_t numel = (size_t)bfit_shape_numel(p->M->input);
        float *x = realloc(p->stage_x, sizeof *x * numel * (size_t)m);
        /* a token model's sample has a label per position */
        int32_t *y = x ? realloc(p->stage_y, sizeof *y * (size_t)p->M->labels_per_sample * (size_t)m) : NULL;
        if (x)
            p->stage_x = x;
        if (y)
            p->stage_y = y;
        if (!x || !y)
            return bfit_fail(BFIT_ENOMEM, "probe: out of host memory staging %d samples", m);
        p->stage_m = m;
    }
    if (p->s && p->sc.max_take >= m)
        return BFIT_OK;
    bfit_stream_free(p->s);
    p->s = NULL;
    p->sc.max_take = m;
    return bfit_stream_new(p->d, &p->sc, &p->s);
}

/* Fill the reserved input with m samples, going on to the next epoch when
 * one ends (the limit may exceed the data set). */
static int take_samples(probe *p, int m)
{
    float *x = p->stage_x;
    int32_t *y = p->stage_y;
    int64_t numel = bfit_shape_numel(p->M->input), L = p->M->labels_per_sample;
    int done = 0, empty = 0, rc;

    while (done < m) {
        int n = m - done < p->sc.max_take ? m - done : p->sc.max_take, got;
        rc = bfit_stream_take(p->s, n, x + (int64_t)done * numel, y + (int64_t)done * L, &got);
        if (rc != BFIT_OK)
            return rc;
        if (got == 0) {
            if (empty++)
                return bfit_fail(BFIT_ESTATE, "the data set %s gives no samples", bfit_dataset_source(p->d));
            bfit_stream_next_epoch(p->s);
            continue;
        }
        empty = 0;
        done += got;
    }
    return bfit_model_set_input(p->M, x, y, m);
}

/* One micro-step at the reserved size: take, forward, backward. *secs and
 * *wait get its wall time and the part spent in the stream. */
static int run_step(probe *p, double *secs, double *wait)
{
    double t0 = bfit_clock_mono(), w0 = bfit_stream_wait_seconds(p->s);
    int rc;

    (*p->steps)++;
    rc = take_samples(p, p->M->m);
    if (rc == BFIT_OK)
        rc = bfit_model_forward(p->M, p->cfg->seed * 1000003ull + p->micro++);
    if (rc == BFIT_OK)
        rc = bfit_model_backward(p->M, 1.0f / (float)p->M->m);
    if (secs)
        *secs = bfit_clock_mono() - t0;
    if (wait)
        *wait = bfit_stream_wait_seconds(p->s) - w0;
    return rc;
}

/* Reserve m from nothing, so the arena's peak is this step's. */
static int reserve_fresh(probe *p, int m)
{
    bfit_model_unreserve(p->M);
    bfit_arena_reset_peak(p->arena);
    return bfit_model_reserve(p->M, m, 1);
}

static uint64_t measured_peak(const probe *p)
{
    bfit_arena_stats st;
    bfit_arena_stats_get(p->arena, &st);
    return st.peak - p->res->held_other;
}

/* ---- the doubling-then-bisecting search ---------------------------------- */

/* Does a step of m fit? Sets *fits; returns a status for other failures. */
typedef int (*fits_fn)(probe *p, int m, int *fits);

/* Start at the smallest trainable batch (1 for most models), double while
 * it fits (up to limit), then bisect between the last fit and the first
 * failure: what today's tools do by trial and error. *answer 0 when the
 * start does not fit; *refused: answer + 1 was tried and failed. */
static int doubling_search(probe *p, fits_fn f, int limit, int *answer, int *trials, int *refused)
{
    int lo = bfit_model_min_batch(p->M), hi = 0, fits, rc;

    *answer = 0;
    *trials = 1;
    *refused = 0;
    if (lo > limit)
        return bfit_fail(BFIT_EINVAL, "this model trains on micro-batches of at least %d, above the limit %d", lo,
                         limit);
    rc = f(p, lo, &fits);
    if (rc != BFIT_OK)
        return rc;
    if (!fits) {
        *refused = 1;
        return BFIT_OK;
    }
    while (lo < limit) {
        int next = lo > limit / 2 ? limit : 2 * lo;
        (*trials)++;
        rc = f(p, next, &fits);
        if (rc != BFIT_OK)
            return rc;
        if (!fits) {
            hi = next;
            break;
        }
        lo = next;
    }
    while (hi && hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        (*trials)++;
        rc = f(p, mid, &fits);
        if (rc != BFIT_OK)
            return rc;
        if (fits)
            lo = mid;
        else
            hi = mid;
    }
    *answer = lo;
    *refused = hi == lo + 1;
    return BFIT_OK;
}

/* The search simulated: the arena refuses exactly what the plan exceeds. */
/* A batch whose ops the device refuses to make (ENOMEM: a tensor over a
 * library's size limit) does not fit, as one over the budget does not. */
static int fits_by_plan(probe *p, int m, int *fits)
{
    bfit_step_plan pl;
    int rc = bfit_plan_compute(p->M, p->opt, m, 1, &pl);
    *fits = rc == BFIT_OK && pl.peak <= p->step_budget;
    if (rc == BFIT_ENOMEM)
        bfit_clear_error();
    return rc == BFIT_ENOMEM ? BFIT_OK : rc;
}

/* The search for real, one step per trial: the fallback when the plan is
 * contradicted. */
static int fits_by_step(probe *p, int m, int *fits)
{
    int rc;
    *fits = 0;
    rc = ensure_stream(p, m);
    if (rc != BFIT_OK)
        return rc;
    rc = reserve_fresh(p, m);
    if (rc == BFIT_ENOMEM) {
        (*p->steps)++;
        bfit_clear_error();
        return BFIT_OK;
    }
    if (rc == BFIT_OK)
        rc = run_step(p, NULL, NULL);
    bfit_model_unreserve(p->M);
    *fits = rc == BFIT_OK;
    return rc;
}

/* ---- why nothing fits ---------------------------------------------------- */

static int explain_no_fit(bfit_probe_result *r, double margin)
{
    const bfit_step_plan *p1 = &r->p1;
    char a[32], b[32], c[32], d[32], e[32], f[32];
    char other[96] = "", budget[160], is_budget[170];

    if (r->held_other)
        snprintf(other, sizeof other, " (of which %s is held by others)", sz(r->held_other, a));
    if (margin > 0)
        snprintf(budget, sizeof budget, "the budget %s (memory %s less the %g%% margin)%s", sz(r->budget, a),
                 sz(r->capacity, b), 100 * margin, other);
    else
        snprintf(budget, sizeof budget, "the memory %s%s", sz(r->capacity, a), other);
    /* "the budget 1 MiB (...)" -> "the budget is 1 MiB (...)" */
    {
        char *sp = strchr(budget + 4, ' ');
        snprintf(is_budget, sizeof is_budget, "%.*s is%s", (int)(sp - budget), budget, sp);
    }
    if (p1->fixed + r->held_other > r->capacity) {
        r->no_fit = BFIT_PROBE_FIXED_OVER_CAPACITY;
        r->missing = p1->fixed + r->held_other - r->capacity;
        return bfit_fail(BFIT_ENOMEM,
                         "the model does not fit in %s%s at any batch size: its fixed part alone (parameters %s + "
                         "gradients %s + optimizer state %s = %s) exceeds the memory by %s",
                         sz(r->capacity, a), other, sz(p1->bytes[BFIT_MEM_PARAMS], b),
                         sz(p1->bytes[BFIT_MEM_GRADS], c), sz(p1->bytes[BFIT_MEM_OPTIMIZER], d), sz(p1->fixed, e),
                         sz(r->missing, f));
    }
    if (p1->fixed + r->held_other > r->budget) {
        r->no_fit = BFIT_PROBE_FIXED_OVER_BUDGET;
        r->missing = p1->fixed + r->held_other - r->budget;
        return bfit_fail(BFIT_ENOMEM,
                         "the model does not fit in %s at any batch size: its fixed part alone (parameters, "
                         "gradients, optimizer state) is %s, %s over",
                         budget, sz(p1->fixed, c), sz(r->missing, d));
    }
    r->no_fit = BFIT_PROBE_BATCH1_OVER_BUDGET;
    r->missing = p1->peak + r->held_other - r->budget;
    return bfit_fail(BFIT_ENOMEM, "not even batch 1 fits: it needs %s (fixed %s + step %s) but %s: %s missing",
                     sz(p1->peak, c), sz(p1->fixed, d), sz(p1->step, e), is_budget, sz(r->missing, f));
}

/* ---- the phases ---------------------------------------------------------- */

static void disagree(bfit_probe_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void disagree(bfit_probe_result *r, const char *fmt, ...)
{
    va_list ap;
    size_t n = strlen(r->disagreement);
    if (n + 4 >= sizeof r->disagreement)
        return;
    if (n)
        n += (size_t)snprintf(r->disagreement + n, sizeof r->disagreement - n, "; ");
    va_start(ap, fmt);
    vsnprintf(r->disagreement + n, sizeof r->disagreement - n, fmt, ap);
    va_end(ap);
    r->plan_agrees = 0;
}

/* The plan of the batch after the largest; one the device cannot make (its
 * ops refused as out of memory) keeps why instead. */
static int plan_next(probe *p, int m)
{
    bfit_probe_result *r = p->res;
    int rc = bfit_plan_compute(p->M, p->opt, m, 1, &r->plan_next);
    r->next_unmade[0] = 0;
    if (rc != BFIT_ENOMEM)
        return rc;
    snprintf(r->next_unmade, sizeof r->next_unmade, "%s", bfit_errmsg());
    memset(&r->plan_next, 0, sizeof r->plan_next);
    bfit_clear_error();
    return BFIT_OK;
}

/* Confirm the plan's largest m: a real step at m, a refusal at m + 1. On a
 * contradiction, find the answer by a real search. */
static int confirm_largest(probe *p)
{
    bfit_probe_result *r = p->res;
    int m = r->plan_m, rc, trials, refused, answer;
    char a[32], b[32];

    p->steps = &r->largest_steps;
    bfit_progress_say(&p->prog, 1, "find: confirming the largest batch, %d, with a real step", m);
    rc = ensure_stream(p, m);
    if (rc != BFIT_OK)
        return rc;
    rc = reserve_fresh(p, m);
    if (rc == BFIT_OK) {
        rc = run_step(p, NULL, NULL);
        if (rc != BFIT_OK)
            return rc;
        r->measured_largest = measured_peak(p);
        if (r->measured_largest != r->plan_largest.peak)
            disagree(r, "at batch %d the step's measured peak is %llu bytes but the plan says %llu", m,
                     (unsigned long long)r->measured_largest, (unsigned long long)r->plan_largest.peak);
    } else if (rc == BFIT_ENOMEM) {
        r->largest_steps++;
        disagree(r, "the plan says batch %d needs %s and fits the budget %s, but reserving it failed (%s)", m,
                 sz(r->plan_largest.peak, a), sz(r->budget, b), bfit_errmsg());
        bfit_clear_error();
    } else {
        return rc;
    }
    bfit_model_unreserve(p->M);
    if (m < r->limit) {
        rc = reserve_fresh(p, m + 1);
        r->largest_steps++;
        if (rc == BFIT_OK) {
            disagree(r, "the plan says batch %d needs %s, over the budget %s, but reserving it succeeded", m + 1,
                     sz(r->plan_next.peak, a), sz(r->budget, b));
        } else if (rc == BFIT_ENOMEM) {
            r->next_refused = 1;
            bfit_clear_error();
        } else {
            return rc;
        }
        bfit_model_unreserve(p->M);
    }
    if (r->plan_agrees) {
        r->largest = m;
        return BFIT_OK;
    }

    /* The plan was contradicted: a bug to report, not to hide. The answer
     * comes from real steps, bounded by the doubling-then-bisecting search. */
    rc = doubling_search(p, fits_by_step, r->limit, &answer, &trials, &refused);
    if (rc != BFIT_OK)
        return rc;
    if (!answer)
        return bfit_fail(BFIT_ENOMEM, "the plan says batch %d fits, but a real step does not fit even at batch 1 "
                         "(%s)", m, r->disagreement);
    r->largest = answer;
    r->next_refused = refused;
    rc = bfit_plan_compute(p->M, p->opt, answer, 1, &r->plan_largest);
    if (rc == BFIT_OK && answer < r->limit)
        rc = plan_next(p, answer + 1);
    if (rc == BFIT_OK)
        rc = reserve_fresh(p, answer);
    if (rc == BFIT_OK)
        rc = run_step(p, NULL, NULL);
    if (rc == BFIT_OK)
        r->measured_largest = measured_peak(p);
    bfit_model_unreserve(p->M);
    return rc;
}

/* Throughput at one size: warm-up steps, then the medians of the measured
 * step times and data-wait shares (a step disturbed by another process
 * moves neither). */
static int measure_rung(probe *p, bfit_probe_rung *g, double *t, double *w)
{
    const bfit_probe_cfg *c = p->cfg;
    int rc;

    rc = reserve_fresh(p, g->m);
    if (rc != BFIT_OK)
        return bfit_fail_prefix(rc, "ladder at batch %d: ", g->m);
    for (int i = 0; i < c->warmup + c->repeats; i++) {
        rc = run_step(p, &t[i], &w[i]);
        if (rc != BFIT_OK)
            return rc;
        bfit_model_zero_grads(p->M); /* gradients only add up here; keep them small */
    }
    g->measured_peak = measured_peak(p);
    for (int i = c->warmup; i < c->warmup + c->repeats; i++)
        w[i] = t[i] > 0 ? w[i] / t[i] : 0;
    g->step_s = bfit_median(t + c->warmup, c->repeats);
    {
        /* the middle half's width: one disturbed step moves neither it nor the median */
        int k = c->repeats / 4;
        g->spread = g->step_s > 0 ? (t[c->warmup + c->repeats - 1 - k] - t[c->warmup + k]) / g->step_s : 0;
    }
    g->samples_per_s = g->step_s > 0 ? g->m / g->step_s : 0;
    g->wait_share = bfit_median(w + c->warmup, c->repeats);
    bfit_model_unreserve(p->M);
    return BFIT_OK;
}

/* The ladder's sizes for a largest batch: from the smallest trainable
 * batch s, s, 2s, 4s, ... below it, and it. */
static int rungs_for(int smallest, int largest)
{
    int n = 1;
    for (int64_t m = smallest; m < largest; m *= 2)
        n++;
    return n;
}

/* A device whose free memory is bounded by all this process maps (the CPU
 * under ulimit -v) has less once the data, the parameters and their copy
 * are loaded than when the session opened, and less again as each size's
 * kernels and streams are made: the room now (arena's blocks + free) in
 * *cap, 0 if the device is not so bounded. A run re-reads it the same way
 * (bfit_run_watch_device). */
static int room_now(const probe *p, uint64_t *cap)
{
    bfit_device_info di;

    bfit_device_info_get(p->M->dev, &di);
    return di.limited && bfit_device_room(p->M->dev, p->arena, cap, NULL) == BFIT_OK;
}

/* The search takes the room left once everything is loaded, or it finds a
 * batch whose step then finds no room. Only ever lower. */
static void capacity_now(probe *p)
{
    bfit_probe_result *res = p->res;
    uint64_t cap;

    if (!room_now(p, &cap) || cap >= res->capacity)
        return;
    res->limited = 1;
    res->capacity = cap;
    res->budget = bfit_plan_budget(res->capacity, p->cfg->margin);
    p->step_budget = res->budget > res->held_other ? res->budget - res->held_other : 0;
}

/* Whether a rung's step fits the room left now; the ladder runs after the
 * largest was confirmed, and the sizes before it took room. */
static int room_left(probe *p, int m, uint64_t peak)
{
    uint64_t cap, budget;
    char a[32], b[32];

    if (!room_now(p, &cap))
        return 1;
    budget = bfit_plan_budget(cap, p->cfg->margin);
    if (peak + p->res->held_other <= budget)
        return 1;
    bfit_progress_say(&p->prog, 1, "find: batch %d not measured: its step needs %s, but the address-space limit "
                      "(ulimit -v) now leaves a budget of %s", m, sz(peak + p->res->held_other, a), sz(budget, b));
    return 0;
}

/* Sizes 1, 2, 4, ... (or from the smallest trainable batch) below the
 * largest, then the largest. */
static int ladder(probe *p)
{
    bfit_probe_result *r = p->res;
    double *t, *w;
    int rc = BFIT_OK, smallest = bfit_model_min_batch(p->M);

    p->steps = &r->ladder_steps;
    t = malloc(sizeof *t * (size_t)(p->cfg->warmup + p->cfg->repeats));
    w = malloc(sizeof *w * (size_t)(p->cfg->warmup + p->cfg->repeats));
    if (!t || !w) {
        rc = bfit_fail(BFIT_ENOMEM, "probe: out of host memory");
        goto out;
    }
    r->nrungs = 0;
    for (int64_t m = smallest; r->nrungs < BFIT_PROBE_MAX_RUNGS; m *= 2) {
        bfit_probe_rung *g = &r->rungs[r->nrungs];
        bfit_step_plan pl;
        if (m >= r->largest)
            m = r->largest;
        memset(g, 0, sizeof *g);
        g->m = (int)m;
        rc = bfit_plan_compute(p->M, p->opt, g->m, 1, &pl);
        if (rc != BFIT_OK)
            goto out;
        g->planned_peak = pl.peak;
        /* oneDNN's scratch can make a smaller size plan more than the
         * largest (plan.h); such a size cannot be the answer anyway */
        if (pl.peak <= p->step_budget && room_left(p, g->m, pl.peak)) {
            bfit_progress_say(&p->prog, 0, "find: measuring batch %d (size %d of about %d)", g->m, r->nrungs + 1,
                              rungs_for(smallest, r->largest));
            rc = measure_rung(p, g, t, w);
            if (rc != BFIT_OK)
                goto out;
            if (g->measured_peak != g->planned_peak)
                disagree(r, "at batch %d the step's measured peak is %llu bytes but the plan says %llu", g->m,
                         (unsigned long long)g->measured_peak, (unsigned long long)g->planned_peak);
            r->nrungs++;
        }
        if (m == r->largest)
            break;
    }
    bfit_probe_analyse(r, p->cfg->tolerance, p->cfg->data_threshold);
out:
    free(t);
    free(w);
    return rc;
}

/* The fastest batch: the best measured one when its lead over every other
 * is larger than their measured spreads (half the width of the middle half
 * of each one's step times, as a rate); otherwise the rates tie within the
 * noise, and it is the largest within the tolerance of the best (a larger
 * micro-batch runs fewer steps for the same samples, so a tie goes to it). */
void bfit_probe_analyse(bfit_probe_result *r, double tolerance, double data_threshold)
{
    int clear = 1;
    double u_best;

    r->best = r->recommended = 0;
    r->data_share = 0;
    r->data_bound = 0;
    if (r->nrungs < 1)
        return;
    for (int i = 1; i < r->nrungs; i++)
        if (r->rungs[i].samples_per_s > r->rungs[r->best].samples_per_s)
            r->best = i;
    u_best = r->rungs[r->best].samples_per_s * r->rungs[r->best].spread / 2;
    for (int i = 0; i < r->nrungs; i++) {
        double u = r->rungs[i].samples_per_s * r->rungs[i].spread / 2;
        if (i != r->best && r->rungs[r->best].samples_per_s - r->rungs[i].samples_per_s <= u_best + u)
            clear = 0;
    }
    r->recommended = r->best;
    r->clear_best = clear;
    for (int i = r->nrungs - 1; !clear && i > r->best; i--)
        if (r->rungs[i].samples_per_s >= (1.0 - tolerance) * r->rungs[r->best].samples_per_s) {
            r->recommended = i;
            break;
        }
    r->data_share = r->rungs[r->recommended].wait_share;
    r->data_bound = r->data_share > data_threshold;
}

/* ---- the probe ----------------------------------------------------------- */

static int check_cfg(const bfit_probe_cfg *c)
{
    if (!(c->margin >= 0 && c->margin < 1))
        return bfit_fail_field(BFIT_EINVAL, "margin", "must be in [0, 1), got %g", c->margin);
    if (!(c->tolerance >= 0 && c->tolerance < 1))
        return bfit_fail_field(BFIT_EINVAL, "tolerance", "must be in [0, 1), got %g", c->tolerance);
    if (!(c->data_threshold > 0 && c->data_threshold <= 1))
        return bfit_fail_field(BFIT_EINVAL, "data_threshold", "must be in (0, 1], got %g", c->data_threshold);
    if (c->limit < 0)
        return bfit_fail_field(BFIT_EINVAL, "limit", "the batch limit must be at least 1, got %d", c->limit);
    if (c->warmup < 0 || c->warmup > 1000)
        return bfit_fail_field(BFIT_EINVAL, "warmup", "warm-up steps must be 0 to 1000, got %d", c->warmup);
    if (c->repeats < 1 || c->repeats > 1000)
        return bfit_fail_field(BFIT_EINVAL, "repeats", "measured steps must be 1 to 1000, got %d", c->repeats);
    return BFIT_OK;
}

/* Host copies of the parameters and gradients, to put back at the end. */
typedef struct snapshot {
    void *params, *grads;
    int grads_stale; /* whether a backward is to set them (gradset.c) */
} snapshot;

static int snapshot_take(bfit_model *M, snapshot *s)
{
    int rc = BFIT_OK;
    s->params = malloc(M->param_bytes ? M->param_bytes : 1);
    s->grads = malloc(M->grad_bytes ? M->grad_bytes : 1);
    if (!s->params || !s->grads)
        return bfit_fail(BFIT_ENOMEM, "probe: out of host memory for a copy of the parameters");
    s->grads_stale = M->grads_stale;
    rc = bfit_device_download(M->dev, s->params, M->param_block, M->param_bytes);
    if (rc == BFIT_OK && M->grad_block)
        rc = bfit_device_download(M->dev, s->grads, M->grad_block, M->grad_bytes);
    return rc;
}

static int snapshot_restore(bfit_model *M, const snapshot *s)
{
    /* the masters and the compute copies alike: the whole params block */
    int rc = bfit_device_upload(M->dev, M->param_block, s->params, M->param_bytes);
    if (rc == BFIT_OK && M->grad_block)
        rc = bfit_device_upload(M->dev, M->grad_block, s->grads, M->grad_bytes);
    M->grads_stale = s->grads_stale;
    return rc;
}

/* Plan the largest batch, and the search it is compared with. */
static int plan_phase(probe *p)
{
    bfit_probe_result *r = p->res;
    int trials, refused, rc;

    rc = bfit_plan_compute(p->M, p->opt, 1, 1, &r->p1);
    if (rc != BFIT_OK)
        return rc;
    if (r->p1.peak > p->step_budget)
        return explain_no_fit(r, p->cfg->margin);
    rc = bfit_plan_max_batch(p->M, p->opt, 1, p->step_budget, r->limit, &r->plan_m, NULL);
    if (rc != BFIT_OK)
        return rc;
    if (r->plan_m < bfit_model_min_batch(p->M))
        return bfit_fail(BFIT_ENOMEM, "the largest batch that fits is %d, but this model trains on micro-batches "
                         "of at least %d (batch norm over vectors needs two values per channel)", r->plan_m,
                         bfit_model_min_batch(p->M));
    rc = bfit_plan_compute(p->M, p->opt, r->plan_m, 1, &r->plan_largest);
    if (rc == BFIT_OK && r->plan_m < r->limit)
        rc = plan_next(p, r->plan_m + 1);
    if (rc != BFIT_OK)
        return rc;
    rc = doubling_search(p, fits_by_plan, r->limit, &r->search_m, &trials, &refused);
    r->search_trials = trials;
    r->search_steps = trials * BFIT_PROBE_SEARCH_STEPS;
    return rc;
}

/* The probe's arguments against the model and the data set. */
static int check_args(const bfit_model *M, const bfit_dataset *d, const bfit_stream_cfg *sc,
                      const bfit_probe_cfg *cfg)
{
    char a[32], b[32];
    int rc;

    if (!M || !d || !sc || !cfg)
        return bfit_fail(BFIT_EINVAL, "probe: NULL argument");
    rc = check_cfg(cfg);
    if (rc != BFIT_OK)
        return rc;
    if (!M->dev || !M->param_block || (M->grad_bytes && !M->grad_block))
        return bfit_fail(BFIT_ESTATE, "probe: the model needs its parameters and gradients allocated");
    if (!bfit_shape_eq(bfit_dataset_shape(d), M->input))
        return bfit_fail(BFIT_EINVAL, "the model takes inputs of %s but the data set %s has samples of %s",
                         bfit_shape_str(M->input, a, sizeof a), bfit_dataset_source(d),
                         bfit_shape_str(bfit_dataset_shape(d), b, sizeof b));
    if (!bfit_dataset_labels_fit(d, M->nclasses))
        return bfit_fail(BFIT_EINVAL, "the model has %d class scores but the data set %s has %d classes",
                         M->nclasses, bfit_dataset_source(d), bfit_dataset_classes(d));
    return BFIT_OK;
}

/* Fill p and the result's header; the budget is what the step may use after
 * everything else the arena holds (parameters, gradients and statistics are
 * planned with the step). Returns the arena's capacity to restore. */
static uint64_t probe_init(probe *p, bfit_model *M, const bfit_dataset *d, const bfit_stream_cfg *sc,
                           const bfit_optim_cfg *opt, const bfit_probe_cfg *cfg, bfit_probe_result *res)
{
    bfit_device_info di;
    bfit_arena_stats st;
    uint64_t old_capacity;

    memset(p, 0, sizeof *p);
    p->M = M;
    p->arena = M->arena;
    p->cfg = cfg;
    p->opt = opt;
    p->d = d;
    p->sc = *sc;
    p->res = res;
    bfit_progress_init(&p->prog, cfg->human);
    bfit_device_info_get(M->dev, &di);
    res->threads = di.threads;
    res->params = bfit_model_param_count(M);
    set_input(res, M);
    res->data_count = bfit_dataset_count(d);
    res->limit = cfg->limit ? cfg->limit : DEFAULT_LIMIT;

    bfit_model_unreserve(M);
    old_capacity = bfit_arena_capacity(p->arena);
    res->capacity = cfg->capacity ? cfg->capacity : old_capacity;
    res->budget = bfit_plan_budget(res->capacity, cfg->margin);
    bfit_arena_stats_get(p->arena, &st);
    res->held_other = st.current - M->param_bytes - (M->grad_block ? M->grad_bytes : 0) - BFIT_MODEL_STATS_BYTES;
    p->step_budget = res->budget > res->held_other ? res->budget - res->held_other : 0;
    return old_capacity;
}

int bfit_probe_run(bfit_model *M, const bfit_dataset *d, const bfit_stream_cfg *sc, const bfit_optim_cfg *opt,
                   const bfit_probe_cfg *cfg, bfit_probe_result *res)
{
    probe p;
    snapshot snap = {0};
    bfit_optim *o = NULL;
    uint64_t old_capacity, budget;
    int rc, restore_rc;
    char a[32], b[32];

    memset(res, 0, sizeof *res);
    res->plan_agrees = 1;
    rc = check_args(M, d, sc, cfg);
    if (rc != BFIT_OK)
        return rc;
    old_capacity = probe_init(&p, M, d, sc, opt, cfg, res);
    /* the copy first: under an address-space limit it takes room the plan must not count on */
    rc = snapshot_take(M, &snap);
    if (rc != BFIT_OK)
        goto out;
    capacity_now(&p);
    rc = plan_phase(&p);
    /* the stream and staging for the largest take room under ulimit -v (a
     * prefetching loader thread maps 72 MiB: the small CNN's confirming
     * step under 400 MB was refused a kernel): made first, and planned
     * again in what they leave; the stream holds the smaller answer too */
    if (rc == BFIT_OK)
        rc = ensure_stream(&p, res->plan_m);
    budget = res->budget;
    if (rc == BFIT_OK)
        capacity_now(&p);
    if (rc == BFIT_OK && res->budget < budget)
        rc = plan_phase(&p);
    if (rc != BFIT_OK)
        goto out;
    bfit_arena_set_capacity(p.arena, res->budget);
    if (opt) {
        rc = bfit_optim_new(opt, M->trainable, M->ntrainable, M->dev, p.arena, &o);
        if (rc == BFIT_ENOMEM)
            rc = bfit_fail_prefix(BFIT_ENOMEM, "the plan says the optimizer state (%s) fits the budget %s, but "
                                  "allocating it failed, a bug in the plan: ",
                                  sz(res->p1.bytes[BFIT_MEM_OPTIMIZER], a), sz(res->budget, b));
        if (rc != BFIT_OK)
            goto out;
    }
    rc = confirm_largest(&p);
    if (rc == BFIT_OK && cfg->ladder)
        rc = ladder(&p);
out:
    bfit_progress_end(&p.prog);
    bfit_model_unreserve(M);
    bfit_stream_free(p.s);
    free(p.stage_x);
    free(p.stage_y);
    bfit_optim_free(o);
    bfit_arena_set_capacity(p.arena, old_capacity);
    if (snap.params && snap.grads) {
        restore_rc = snapshot_restore(M, &snap);
        if (rc == BFIT_OK)
            rc = restore_rc;
    }
    free(snap.params);
    free(snap.grads);
    return rc;
}

/* ---- the loader alone ------------------------------------------------------ */

int bfit_probe_loader_rate(const bfit_dataset *d, const bfit_stream_cfg *sc0, int m, int64_t samples, double *rate)
{
    bfit_stream_cfg sc = *sc0;
    bfit_stream *s = NULL;
    size_t numel = (size_t)bfit_shape_numel(bfit_dataset_shape(d));
    float *x = malloc(sizeof *x * numel * (size_t)m);
    int32_t *y = malloc(sizeof *y * (size_t)m);
    int64_t n = 0;
    double t0 = 0;
    int rc = x && y ? BFIT_OK : bfit_fail(BFIT_ENOMEM, "out of host memory measuring the loader");

    sc.max_take = m;
    sc.prefetch = 1;
    if (rc == BFIT_OK)
        rc = bfit_stream_new(d, &sc, &s);
    for (int i = 0; rc == BFIT_OK && (samples ? n < samples : i < 4 || bfit_clock_mono() - t0 < 1.0); i++) {
        int got = 0;
        if ((rc = bfit_stream_take(s, m, x, y, &got)) == BFIT_OK && got == 0) {
            bfit_stream_next_epoch(s);
            rc = bfit_stream_take(s, m, x, y, &got);
        }
        if (i == 0)
            t0 = bfit_clock_mono();
        else
            n += got;
    }
    *rate = rc == BFIT_OK && bfit_clock_mono() > t0 ? (double)n / (bfit_clock_mono() - t0) : 0;
    bfit_stream_free(s);
    free(x);
    free(y);
    return rc;
}

/* Which side bounds the speed at the recommended size: the loader alone
 * against the step's compute alone. */
static int loader_verdict(const bfit_dataset *d, const bfit_stream_cfg *sc, bfit_probe_result *r)
{
    const bfit_probe_rung *g = r->nrungs ? &r->rungs[r->recommended] : NULL;
    int m = g ? g->m : r->largest, rc;

    if (m < 1)
        return BFIT_OK;
    if ((rc = bfit_probe_loader_rate(d, sc, m < 256 ? m : 256, 0, &r->loader_rate)) != BFIT_OK)
        return rc;
    r->loader_threads = sc->loader_threads > 0 ? sc->loader_threads : 1;
    if (g && g->step_s > 0 && g->wait_share < 1)
        r->compute_rate = g->m / (g->step_s * (1 - g->wait_share));
    r->loader_bound = r->data_bound || (r->compute_rate > 0 && r->loader_rate < r->compute_rate);
    return BFIT_OK;
}

/* The stream of a find or a run's training: its transform and threads. */
static void train_stream_cfg(const bfit_find_cfg *cfg, const bfit_session *ss, bfit_stream_cfg *sc)
{
    memset(sc, 0, sizeof *sc);
    sc->seed = cfg->seed;
    sc->shuffle = 1;
    sc->max_take = 1;
    sc->prefetch = cfg->prefetch;
    if (bfit_dataset_is_images(ss->train)) { /* the training transform, as a run makes it */
        sc->aug_rrc = cfg->img.rrc[0] != 0;
        sc->loader_threads = bfit_img_loader_threads(&cfg->img, cfg->threads);
    } else
        sc->aug_crop_pad = cfg->augment ? 2 : 0;
    sc->aug_hflip = cfg->augment;
    sc->norm_mean = ss->mean;
    sc->norm_std = ss->std;
    bfit_session_mlm(&cfg->mlm, ss->M, ss->train, &sc->mlm);
}

static void session_cfg(const bfit_find_cfg *cfg, bfit_session_cfg *sc_)
{
    memset(sc_, 0, sizeof *sc_);
    sc_->model = cfg->model;
    sc_->data = cfg->data;
    sc_->csv_header = cfg->csv_header;
    sc_->want_train = 1;
    sc_->memory = cfg->memory;
    sc_->device_name = cfg->device_name;
    sc_->conv_algo = cfg->conv_algo;
    sc_->precision = cfg->storage.precision;
    sc_->seq = cfg->seq;
    sc_->attention = cfg->attention;
    sc_->threads = cfg->threads;
    sc_->normalize = cfg->normalize;
    sc_->seed = cfg->seed;
    sc_->img = &cfg->img;
    sc_->mlm = &cfg->mlm;
}

int bfit_probe_loader_alone(const bfit_find_cfg *cfg, int take, int64_t samples, double *rate, int *threads)
{
    bfit_session ss;
    bfit_session_cfg sc_;
    bfit_stream_cfg sc;
    int rc;

    memset(&ss, 0, sizeof ss);
    session_cfg(cfg, &sc_);
    if ((rc = bfit_session_open_model(&ss, &sc_)) == BFIT_OK && (rc = bfit_session_open_data(&ss, &sc_)) == BFIT_OK) {
        train_stream_cfg(cfg, &ss, &sc);
        sc.prefetch = 1;
        *threads = sc.loader_threads > 0 ? sc.loader_threads : 1;
        rc = bfit_probe_loader_rate(ss.train, &sc, take, samples, rate);
    }
    bfit_session_close(&ss);
    return rc;
}

/* ---- `find`'s setup ------------------------------------------------------ */

int bfit_probe_find(const bfit_find_cfg *cfg, bfit_probe_result *res)
{
    bfit_session ss;
    bfit_session_cfg sc_;
    bfit_probe_cfg pc = cfg->probe;
    bfit_stream_cfg sc;
    int rc;

    memset(res, 0, sizeof *res);
    memset(&ss, 0, sizeof ss);
    rc = check_cfg(&cfg->probe);
    if (rc == BFIT_OK)
        rc = bfit_optim_cfg_check(&cfg->opt);
    if (rc != BFIT_OK)
        return rc;
    session_cfg(cfg, &sc_);
    rc = bfit_session_open_model(&ss, &sc_);
    if (rc != BFIT_OK)
        goto out;
    {
        bfit_device_info di;
        bfit_device_info_get(ss.dev, &di);
        res->threads = di.threads;
        res->limited = di.limited && !cfg->memory; /* the room the limit left was read */
    }
    res->params = bfit_model_param_count(ss.M);
    set_input(res, ss.M);
    res->capacity = bfit_arena_capacity(ss.arena);
    res->budget = bfit_plan_budget(res->capacity, pc.margin);

    rc = bfit_model_set_storage(ss.M, &cfg->storage, &cfg->opt, res->budget, 0);
    if (rc != BFIT_OK)
        goto out;
    /* say why nothing fits before allocating parameters that may not fit */
    rc = bfit_plan_compute(ss.M, &cfg->opt, 1, 1, &res->p1);
    if (rc != BFIT_OK)
        goto out;
    if (res->p1.peak > res->budget) {
        rc = explain_no_fit(res, pc.margin);
        goto out;
    }
    rc = bfit_session_open_data(&ss, &sc_);
    if (rc != BFIT_OK)
        goto out;
    if (ss.train_own)
        snprintf(res->data_note, sizeof res->data_note, "%s", bfit_dataset_note(ss.train_own));
    train_stream_cfg(cfg, &ss, &sc);
    rc = bfit_model_alloc_params(ss.M, 1);
    if (rc == BFIT_OK)
        rc = bfit_model_init_params(ss.M, cfg->seed);
    if (rc != BFIT_OK)
        goto out;

    pc.capacity = res->capacity;
    pc.seed = cfg->seed;
    if (cfg->limit)
        pc.limit = cfg->limit;
    else
        pc.limit = bfit_dataset_count(ss.train) < DEFAULT_LIMIT && strcmp(cfg->data, "synthetic")
                       ? (int)bfit_dataset_count(ss.train)
                       : DEFAULT_LIMIT;
    rc = bfit_probe_run(ss.M, ss.train, &sc, &cfg->opt, &pc, res);
    if (rc == BFIT_OK && bfit_dataset_is_images(ss.train))
        rc = loader_verdict(ss.train, &sc, res);
out:
    bfit_session_close(&ss);
    return rc;
}
