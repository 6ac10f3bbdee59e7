/* feed.h - where a run's samples come from: a stream over a data set
 * (shuffling, augmentation, normalisation, prefetching), or a source the
 * calling program supplies (bfit_source). */
#ifndef BFIT_FEED_H
#define BFIT_FEED_H

#include "data/data.h"

typedef struct bfit_feed {
    bfit_stream *s;            /* one of the two */
    const bfit_source *src;
    int64_t numel;             /* floats per sample (for a source) */
    int nlab;                  /* labels per sample (a token budget counts those >= 0) */
    double wait;               /* seconds spent in the source's take */
} bfit_feed;

/* Up to n samples of the epoch; exactly n unless it ends (BFIT_ESTATE if a
 * source gives more than asked). */
int bfit_feed_take(bfit_feed *f, int n, float *x, int32_t *y, int *got);
/* A token budget: the fewest of the next samples of the epoch, at most
 * limit, whose labels that count (>= 0) reach `tokens`; all that are left
 * (up to limit) if they do not. A stream counts them before it takes (its
 * prefetching guesses on); a source gives them one at a time. */
int bfit_feed_take_tokens(bfit_feed *f, int64_t tokens, int limit, float *x, int32_t *y, int *got);
int bfit_feed_next_epoch(bfit_feed *f);
/* The current epoch again from its first sample (evaluation). */
int bfit_feed_rewind(bfit_feed *f);
/* Seconds callers spent waiting for samples. */
double bfit_feed_wait(const bfit_feed *f);
/* The samples/s a stream's loader threads made since *made, *busy (their
 * totals, updated): 0 when they made none, or for a source. */
double bfit_feed_loader_rate(bfit_feed *f, int64_t *made, double *busy);
/* Frees a stream (a source is the caller's). */
void bfit_feed_close(bfit_feed *f);

#endif
