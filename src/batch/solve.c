/* solve.c - the largest fitting micro-batch, and budgets under a margin. */
#include "batch/solve.h"

#include <limits.h>

/* Bisects between lo (fits, or 0) and top (does not fit, or end), then
 * tries the BFIT_SOLVE_PROBE sizes above the answer below end; one that
 * fits restarts the bisection above it. */
static int bisect_probe(bfit_fits_fn fits, void *ud, int lo, int top, int end)
{
    for (;;) {
        int again = 0;
        while (top - lo > 1) {
            int mid = lo + (top - lo) / 2;
            if (fits(ud, mid))
                lo = mid;
            else
                top = mid;
        }
        for (int m = lo + 2; m <= lo + BFIT_SOLVE_PROBE && m < end; m++)
            if (fits(ud, m))
                again = m;
        if (!again)
            return lo;
        lo = again;
        top = end;
    }
}

int bfit_largest_fit(bfit_fits_fn fits, void *ud, int hi)
{
    if (hi < 1)
        return 0;
    if (fits(ud, hi))
        return hi;
    return bisect_probe(fits, ud, 0, hi, hi);
}

typedef struct need_ctx {
    bfit_need_fn need;
    void *ud;
    uint64_t budget;
} need_ctx;

static int need_fits(void *ud, int m)
{
    need_ctx *c = ud;
    return c->need(c->ud, m) <= c->budget;
}

/* Secant steps on need(m) - budget from (m0, n0): a step's bytes are
 * nearly affine in m, so two or three land next to the answer, where
 * bisection from [0, hi] takes twenty plans. Each step keeps lo (fits) and
 * top (does not) and guesses strictly between them; where need does not
 * grow it tries the largest left, and a need that cannot be made (or
 * shrinks past the budget) leaves the rest to the bisection. */
int bfit_largest_under(bfit_need_fn need, void *ud, uint64_t budget, int hi, int m0, uint64_t n0)
{
    need_ctx c = {need, ud, budget};
    int lo = m0, top, g;
    double xa = m0, ya = (double)n0;

    if (hi < 1 || hi == INT_MAX || m0 < 1 || m0 > hi || n0 > budget) /* INT_MAX: no room for top */
        return bfit_largest_fit(need_fits, &c, hi);
    top = hi + 1, g = m0 + 1; /* after the check: at INT_MAX they would overflow */
    for (int step = 0; step < BFIT_SOLVE_SECANT && top - lo > 1; step++) {
        uint64_t y;
        double slope, next;
        g = g <= lo ? lo + 1 : g >= top ? top - 1 : g;
        y = need(ud, g);
        if (y <= budget)
            lo = g;
        else
            top = g;
        if (y == UINT64_MAX)
            break;
        slope = ((double)y - ya) / ((double)g - xa);
        xa = g, ya = (double)y;
        if (slope > 0) {
            next = (double)g + ((double)budget - (double)y) / slope;
            g = next < (double)lo ? lo : next >= (double)top ? top : (int)next;
        } else if (y <= budget) {
            g = top; /* not growing here: the largest left */
        } else {
            break;
        }
    }
    return bisect_probe(need_fits, &c, lo, top, hi + 1);
}

uint64_t bfit_budget(uint64_t capacity, double margin)
{
    if (!(margin > 0))
        return capacity;
    if (margin >= 1)
        return 0;
    return (uint64_t)((double)capacity * (1.0 - margin));
}

int bfit_margin_for(uint64_t need, uint64_t capacity)
{
    int pct = 99;
    while (pct >= 0 && bfit_budget(capacity, pct / 100.0) < need)
        pct--;
    return pct;
}

uint64_t bfit_capacity_for(uint64_t need, double margin)
{
    uint64_t m;
    if (!(margin > 0))
        return need;
    if (margin >= 1)
        return UINT64_MAX;
    m = (uint64_t)((double)need / (1.0 - margin));
    while (bfit_budget(m, margin) < need)
        m++;
    while (m > need && bfit_budget(m - 1, margin) >= need)
        m--;
    return m;
}
