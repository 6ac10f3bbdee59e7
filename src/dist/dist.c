/* dist.c - the group's state for data-parallel training: the words of the
 * last exchange, the shares in force, the gradient sum (dist.h). */
#include "base/err.h"
#include "dist/dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

struct bfit_dist {
    bfit_comm *comm;
    int size, rank;
    bfit_dist_word *words;  /* the last exchange's, size of them */
    int E;                  /* the E the shares split (0: none yet) */
    int *share;             /* the shares of E */
    int *step_share;        /* this step's (E's, or the epoch's last, shorter step's) */
    int *next;              /* scratch: a candidate split */
    int64_t *rate, *w;      /* scratch: the measured rates and the weights */
    int offset;             /* this rank's first sample of the step */
    int streak;             /* boundaries in a row at which another split was faster */
};

int bfit_dist_new(bfit_dist **out)
{
    bfit_dist *d = calloc(1, sizeof *d);
    int rc, n;

    *out = NULL;
    if (!d)
        return bfit_fail(BFIT_ENOMEM, "out of host memory");
    if ((rc = bfit_comm_new(&d->comm)) != BFIT_OK) {
        free(d);
        return rc;
    }
    d->size = bfit_comm_size(d->comm);
    d->rank = bfit_comm_rank(d->comm);
    n = d->size;
    d->words = calloc((size_t)n, sizeof *d->words);
    d->share = calloc((size_t)n, sizeof *d->share);
    d->step_share = calloc((size_t)n, sizeof *d->step_share);
    d->next = calloc((size_t)n, sizeof *d->next);
    d->rate = calloc((size_t)n, sizeof *d->rate);
    d->w = calloc((size_t)n, sizeof *d->w);
    if (!d->words || !d->share || !d->step_share || !d->next || !d->rate || !d->w) {
        bfit_dist_free(d);
        return bfit_fail(BFIT_ENOMEM, "out of host memory for %d ranks", n);
    }
    *out = d;
    return BFIT_OK;
}

int bfit_dist_attach(bfit_dist *d, bfit_device *dev) { return bfit_comm_attach(d->comm, dev); }

void bfit_dist_free(bfit_dist *d)
{
    if (!d)
        return;
    bfit_comm_free(d->comm);
    free(d->words);
    free(d->share);
    free(d->step_share);
    free(d->next);
    free(d->rate);
    free(d->w);
    free(d);
}

int bfit_dist_rank(const bfit_dist *d) { return d->rank; }
int bfit_dist_size(const bfit_dist *d) { return d->size; }

int bfit_dist_exchange(bfit_dist *d, const bfit_dist_word *mine, const bfit_dist_word **all)
{
    int rc = bfit_comm_allgather(d->comm, mine, d->words, sizeof *mine);
    *all = d->words;
    return rc;
}

int bfit_dist_failed(const bfit_dist_word *all, int n)
{
    for (int r = 0; r < n; r++)
        if (all[r].code != BFIT_OK)
            return r;
    return -1;
}

int bfit_dist_disagree(const bfit_dist_word *all, int n)
{
    for (int r = 1; r < n; r++)
        if (all[r].check != all[0].check)
            return r;
    return -1;
}

int bfit_dist_sum(bfit_dist *d, void *buf, size_t count) { return bfit_comm_sum(d->comm, buf, count); }

/* "a/b/c" of n integers, into buf at *len. */
static void put_list(char *buf, size_t n, size_t *len, const int *v, int k)
{
    for (int r = 0; r < k && *len < n; r++)
        *len += (size_t)snprintf(buf + *len, n - *len, "%s%d", r ? "/" : "", v[r]);
}

/* Why the shares are what they are, for the log. */
static void say_why(const bfit_dist *d, int E, int changed_E, char *why, size_t n)
{
    size_t len = 0;
    int measured = 0;

    if (!why || !n)
        return;
    why[0] = '\0';
    for (int r = 0; r < d->size; r++)
        measured += d->rate[r] > 0;
    len += (size_t)snprintf(why, n, "shares of %d: ", E);
    if (!changed_E) {
        put_list(why, n, &len, d->share, d->size);
        if (len < n)
            len += (size_t)snprintf(why + len, n - len, " -> ");
    }
    put_list(why, n, &len, d->next, d->size);
    if (len < n && !measured)
        len += (size_t)snprintf(why + len, n - len, " (no throughput measured yet: equal)");
    for (int r = 0; r < d->size && measured && len < n; r++)
        len += (size_t)snprintf(why + len, n - len, "%s%.4g%s", r ? "/" : " (samples/s ",
                                d->rate[r] > 0 ? (double)d->rate[r] / 1024.0 : 0.0,
                                r == d->size - 1 ? ")" : "");
}

int bfit_dist_plan(bfit_dist *d, int E, int step_E, const bfit_dist_word *all, double gain, int confirm, char *why,
                   size_t n)
{
    int changed = 0;

    for (int r = 0; r < d->size; r++)
        d->rate[r] = all[r].rate;
    bfit_dist_weights(d->size, d->rate, d->w);
    bfit_dist_split(E, d->size, d->w, d->next);
    /* a faster split must win `confirm` boundaries in a row: one step's
     * timing is noisy, and a new share is a new micro-batch size whose first
     * steps are slow (the device prepares its ops) */
    if (d->E == E && memcmp(d->next, d->share, (size_t)d->size * sizeof *d->next) &&
        bfit_dist_faster(d->size, d->w, d->share, d->next, gain))
        d->streak++;
    else
        d->streak = 0;
    if (d->E != E || d->streak >= confirm) {
        d->streak = 0;
        say_why(d, E, d->E != E, why, n);
        memcpy(d->share, d->next, (size_t)d->size * sizeof *d->next);
        d->E = E;
        changed = 1;
    }
    if (step_E < E) /* the epoch's last, shorter step: split alike; the shares of E stay */
        bfit_dist_split(step_E, d->size, d->w, d->step_share);
    else
        memcpy(d->step_share, d->share, (size_t)d->size * sizeof *d->share);
    d->offset = 0;
    for (int r = 0; r < d->rank; r++)
        d->offset += d->step_share[r];
    return changed;
}

void bfit_dist_state_get(const bfit_dist *d, int *E, int *streak, const int **share)
{
    *E = d->E;
    *streak = d->streak;
    *share = d->share;
}

int bfit_dist_state_set(bfit_dist *d, int E, int streak, const int *share)
{
    int64_t sum = 0;
    for (int r = 0; r < d->size; r++) {
        if (share[r] < 0)
            return bfit_fail(BFIT_EINVAL, "rank %d's share %d is negative", r, share[r]);
        sum += share[r];
    }
    if (E < 0 || streak < 0 || (E > 0 && sum != E) || (E == 0 && sum != 0))
        return bfit_fail(BFIT_EINVAL, "shares adding up to %lld are not shares of %d (streak %d)", (long long)sum, E,
                         streak);
    d->E = E;
    d->streak = streak;
    memcpy(d->share, share, (size_t)d->size * sizeof *share);
    return BFIT_OK;
}

int bfit_dist_allgather(bfit_dist *d, const void *mine, void *all, size_t n)
{
    return bfit_comm_allgather(d->comm, mine, all, n);
}

const int *bfit_dist_shares(const bfit_dist *d) { return d->step_share; }
const int *bfit_dist_shares_of_E(const bfit_dist *d) { return d->share; }
int bfit_dist_offset(const bfit_dist *d) { return d->offset; }

uint64_t bfit_dist_crc(uint64_t crc, const void *p, size_t n)
{
    const unsigned char *b = p;
    while (n > 0) {
        uInt k = n > (1u << 30) ? 1u << 30 : (uInt)n;
        crc = crc32((uLong)crc, b, k);
        b += k;
        n -= k;
    }
    return crc;
}
