/* solve.c - the largest fitting micro-batch, and budgets under a margin. */
#include "batch/solve.h"

int bfit_largest_fit(bfit_fits_fn fits, void *ud, int hi)
{
    int lo = 0, again = 1;

    if (hi < 1)
        return 0;
    if (fits(ud, hi))
        return hi;
    while (again) {
        int top = hi; /* fits(lo) or lo == 0; !fits(top) */
        while (top - lo > 1) {
            int mid = lo + (top - lo) / 2;
            if (fits(ud, mid))
                lo = mid;
            else
                top = mid;
        }
        again = 0;
        for (int m = lo + 2; m <= lo + BFIT_SOLVE_PROBE && m < hi; m++)
            if (fits(ud, m))
                again = m;
        if (again)
            lo = again;
    }
    return lo;
}

uint64_t bfit_budget(uint64_t capacity, double margin)
{
    if (!(margin > 0))
        return capacity;
    if (margin >= 1)
        return 0;
    return (uint64_t)((double)capacity * (1.0 - margin));
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
