/* shares.c - how the effective batch is split among the ranks: in
 * proportion to each rank's measured samples per second at its own
 * micro-batch (so a rank whose memory forces a small micro-batch, if that
 * makes it slower, takes fewer samples; if not, it accumulates more), in
 * integers, changed only for a predicted gain. Every rank computes the same
 * split from the same exchanged words, in integer arithmetic, so no rank
 * ever disagrees on which samples are whose. */
#include "dist/dist.h"

#include <string.h>

typedef __int128 i128; /* E (< 2^25) times a weight (< 2^50) */

#define W_MAX ((int64_t)1 << 50)

void bfit_dist_weights(int n, const int64_t *rate, int64_t *w)
{
    int64_t sum = 0, k = 0;
    for (int r = 0; r < n; r++)
        if (rate[r] > 0) {
            sum += rate[r] < W_MAX ? rate[r] : W_MAX;
            k++;
        }
    for (int r = 0; r < n; r++) {
        if (!k)
            w[r] = 1;
        else
            w[r] = rate[r] > 0 ? (rate[r] < W_MAX ? rate[r] : W_MAX) : (sum / k > 0 ? sum / k : 1);
    }
}

/* Give one sample to every rank left with none, from the largest shares. */
static void at_least_one(int n, int *share)
{
    for (int r = 0; r < n; r++) {
        int big = 0;
        if (share[r] > 0)
            continue;
        for (int q = 1; q < n; q++)
            if (share[q] > share[big])
                big = q;
        if (share[big] < 2)
            return;
        share[big]--;
        share[r]++;
    }
}

void bfit_dist_split(int E, int n, const int64_t *w, int *share)
{
    i128 W = 0;
    int given = 0;

    for (int r = 0; r < n; r++)
        W += w[r];
    for (int r = 0; r < n; r++) {
        share[r] = (int)((i128)E * w[r] / W);
        given += share[r];
    }
    /* the remainder: one each to the largest fractions (E w mod W) */
    while (given < E) {
        int best = -1;
        i128 best_f = -1;
        for (int r = 0; r < n; r++) {
            i128 f = (i128)E * w[r] - (i128)share[r] * W; /* the fraction, times W */
            if (f > best_f) {
                best = r;
                best_f = f;
            }
        }
        share[best]++;
        given++;
    }
    if (E >= n)
        at_least_one(n, share);
}

/* The rank whose share / w is the largest: the last to finish. */
static int slowest(int n, const int64_t *w, const int *s)
{
    int k = 0;
    for (int r = 1; r < n; r++)
        if ((i128)s[r] * w[k] > (i128)s[k] * w[r])
            k = r;
    return k;
}

int bfit_dist_faster(int n, const int64_t *w, const int *cur, const int *next, double gain)
{
    int a = slowest(n, w, cur), b = slowest(n, w, next);
    /* next[b] / w[b] * (1 + gain) < cur[a] / w[a], with gain in 1/1000ths */
    int64_t g = (int64_t)(gain * 1000 + 0.5);
    return (i128)next[b] * w[a] * (1000 + g) < (i128)cur[a] * w[b] * 1000;
}
