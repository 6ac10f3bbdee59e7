/* feed.c - a stream or the caller's source behind one interface. */
#include "base/clock.h"
#include "base/err.h"
#include "train/feed.h"
#include "train/log.h"

/* A source may hand over fewer than asked: ask again until the epoch ends. */
static int source_take(bfit_feed *f, int n, float *x, int32_t *y, int *got)
{
    int done = 0;
    while (done < n) {
        int k = 0, rc = f->src->take(f->src->ud, n - done, x + (size_t)done * (size_t)f->numel,
                                     y + (size_t)done * (size_t)(f->nlab > 1 ? f->nlab : 1), &k);
        if (rc != BFIT_OK)
            return bfit_fail(rc < 0 ? rc : BFIT_EINVAL, "data source: take failed (status %d)", rc);
        if (k < 0 || k > n - done)
            return bfit_fail(BFIT_ESTATE, "data source: gave %d samples when asked for %d", k, n - done);
        if (k == 0)
            break;
        done += k;
    }
    *got = done;
    return BFIT_OK;
}

int bfit_feed_take(bfit_feed *f, int n, float *x, int32_t *y, int *got)
{
    double t0;
    int rc;
    if (f->s)
        return bfit_stream_take(f->s, n, x, y, got);
    t0 = bfit_clock_mono();
    rc = source_take(f, n, x, y, got);
    f->wait += bfit_clock_mono() - t0;
    return rc;
}

int bfit_feed_take_tokens(bfit_feed *f, int64_t tokens, int limit, float *x, int32_t *y, int *got)
{
    int64_t sum = 0;
    int n = 0, k, rc;
    *got = 0;
    if (f->s) {
        n = bfit_stream_count_tokens(f->s, tokens, limit);
        return n ? bfit_stream_take(f->s, n, x, y, got) : BFIT_OK;
    }
    for (; n < limit && sum < tokens; n++) {
        const int32_t *yn = y + (size_t)n * (size_t)f->nlab;
        if ((rc = bfit_feed_take(f, 1, x + (size_t)n * (size_t)f->numel, (int32_t *)yn, &k)) != BFIT_OK)
            return rc;
        if (k == 0)
            break;
        for (int j = 0; j < f->nlab; j++)
            sum += yn[j] >= 0;
    }
    *got = n;
    return BFIT_OK;
}

int bfit_feed_next_epoch(bfit_feed *f)
{
    if (f->s) {
        bfit_stream_next_epoch(f->s);
        return BFIT_OK;
    }
    if (f->src->next_epoch && f->src->next_epoch(f->src->ud) != BFIT_OK)
        return bfit_fail(BFIT_EINVAL, "data source: next_epoch failed");
    return BFIT_OK;
}

int bfit_feed_rewind(bfit_feed *f)
{
    if (f->s) {
        bfit_cursor c = bfit_stream_tell(f->s);
        c.pos = 0;
        return bfit_stream_seek(f->s, c);
    }
    if (!f->src->rewind)
        return bfit_fail(BFIT_EINVAL, "data source: an evaluation source needs rewind");
    if (f->src->rewind(f->src->ud) != BFIT_OK)
        return bfit_fail(BFIT_EINVAL, "data source: rewind failed");
    return BFIT_OK;
}

double bfit_feed_wait(const bfit_feed *f) { return f->s ? bfit_stream_wait_seconds(f->s) : f->wait; }

double bfit_feed_loader_rate(bfit_feed *f, int64_t *made, double *busy)
{
    int64_t n;
    double t, rate = 0;

    if (!f->s)
        return 0;
    bfit_stream_loader_work(f->s, &n, &t);
    if (n > *made && t > *busy) /* each thread makes samples at this rate while busy */
        rate = bfit_stream_loader_threads(f->s) * (double)(n - *made) / (t - *busy);
    *made = n;
    *busy = t;
    return rate;
}

void bfit_feed_close(bfit_feed *f)
{
    bfit_stream_free(f->s);
    f->s = NULL;
}
