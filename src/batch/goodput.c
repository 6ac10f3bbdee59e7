/* goodput.c - the arithmetic of `--batch auto`: the ladder, step times,
 * the grid of effective batches, statistical efficiency. goodput.h says
 * what each function does; the comments here say why. */
#include "batch/goodput.h"

void bfit_gp_ladder_start(gp_ladder *l, int first, int limit, int reach)
{
    *l = (gp_ladder){ .limit = limit, .reach = reach };
    l->next = first < 1 ? 1 : first > limit ? limit : first;
    if (limit < 1)
        l->next = 0;
}

int bfit_gp_ladder_extend(gp_ladder *l, int limit)
{
    /* a ladder that levelled off, was cut short or is still running has
     * nothing to add: past its last rung the rate is the last rung's */
    if (l->next || l->n == 0 || l->n == GP_RUNGS || l->m[l->n - 1] != l->limit || limit <= l->limit)
        return 0;
    l->limit = limit;
    l->next = l->ext_ref = l->m[l->n - 1];
    l->ext_pace = 0;
    return 1;
}

/* An extension's first timing is its reference rung's again: the pace. */
static void extend_pace(gp_ladder *l, double secs)
{
    int top = l->m[l->n - 1];

    l->ext_pace = secs > 0 ? l->secs[l->n - 1] / secs : 0;
    l->next = l->ext_pace > 0 ? ((int64_t)top * 2 <= l->limit ? top * 2 : l->limit) : 0;
    if (!l->next)
        l->ext_ref = 0;
}

void bfit_gp_ladder_record(gp_ladder *l, int m, double secs, double gain)
{
    double rate;

    if (l->ext_ref && l->ext_pace == 0) {
        extend_pace(l, secs);
        return;
    }
    secs *= l->ext_ref ? l->ext_pace : 1.0;
    if (secs <= 0 || l->n == GP_RUNGS) {
        l->next = l->ext_ref = 0;
        return;
    }
    l->m[l->n] = m;
    l->secs[l->n++] = secs;
    rate = m / secs;
    /* A rate that stops rising has found the device's saturation: larger
     * sizes cost samples and memory to measure and would only confirm it.
     * But the size in use is always measured: a ladder that stopped below
     * it (small sizes timed fast while the load moved) would compare them
     * with its rate extrapolated from the last rung, and move to them on
     * that alone (a run went 64 -> 8 so). */
    if (rate > l->best_rate * (1.0 + gain)) {
        l->stalls = 0;
    } else if (++l->stalls >= 2 && m >= l->reach) {
        l->next = 0;
    }
    if (rate > l->best_rate)
        l->best_rate = rate;
    if (l->next != 0)
        l->next = m >= l->limit ? 0 : (int64_t)m * 2 <= l->limit ? m * 2 : l->limit;
    if (l->next == 0)
        l->ext_ref = 0; /* done: an extension too */
}

double bfit_gp_micro_seconds(const gp_ladder *l, int m)
{
    int i;

    if (l->n == 0 || m < 1)
        return -1;
    if (m <= l->m[0])
        return l->secs[0] * m / l->m[0];
    for (i = 1; i < l->n; i++)
        if (m <= l->m[i]) {
            double f = (double)(m - l->m[i - 1]) / (double)(l->m[i] - l->m[i - 1]);
            return l->secs[i - 1] + f * (l->secs[i] - l->secs[i - 1]);
        }
    /* past the last rung: its rate, which the ladder found levelled off */
    return l->secs[l->n - 1] * m / l->m[l->n - 1];
}

double bfit_gp_step_seconds(const gp_ladder *l, int E, int m)
{
    int k = (E + m - 1) / m, last = E - (k - 1) * m;
    double tm = bfit_gp_micro_seconds(l, m), tl = bfit_gp_micro_seconds(l, last);

    if (tm < 0 || tl < 0)
        return -1;
    return (k - 1) * tm + tl;
}

static int add(int *out, int n, int max, int v)
{
    int i = n;

    for (int j = 0; j < n; j++)
        if (out[j] == v)
            return n;
    if (n == max)
        return n;
    while (i > 0 && out[i - 1] > v) {
        out[i] = out[i - 1];
        i--;
    }
    out[i] = v;
    return n + 1;
}

int bfit_gp_grid(int lo, int hi, int *out, int max)
{
    int n = 0;

    if (lo < 1 || hi < lo || max < 1)
        return 0;
    n = add(out, n, max, lo);
    /* round numbers a factor of about 1.4 apart: no change is smaller than
     * a third, so a re-warmup always buys a real difference */
    for (int64_t p = 1; p <= hi; p *= 2) {
        if (p >= lo)
            n = add(out, n, max, (int)p);
        if (p >= 2 && p / 2 * 3 >= lo && p / 2 * 3 <= hi)
            n = add(out, n, max, (int)(p / 2 * 3));
    }
    return add(out, n, max, hi);
}

double bfit_gp_efficiency(double B, double E, double E0)
{
    /* Below E0 the formula promises more progress per sample than the
     * reference batch makes, which the lr rule, scaling the lr down, does
     * not deliver (measured: docs/performance.md); Pollux (AdaptDL) never
     * goes below its initial batch. So no credit: a smaller batch must win
     * on throughput alone. */
    if (E <= E0)
        return 1.0;
    return (B + E0) / (B + E);
}
