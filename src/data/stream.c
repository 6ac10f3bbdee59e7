/* stream.c - the sample stream: a cursor (epoch, position) over a per-epoch
 * order, takes of any size, and a prefetch thread.
 *
 * The prefetch thread guesses that the next take asks for as many samples as
 * the last one and prepares them in a staging buffer. Since a sample depends
 * only on (seed, epoch, index), whatever part of the guess matches the real
 * take is used and the rest is made on the spot: the data are the same with
 * and without prefetching, and a wrong guess costs only time.
 */
#include "data/data_int.h"
#include "base/clock.h"
#include "base/err.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

enum { JOB_NONE, JOB_PENDING, JOB_RUNNING, JOB_DONE };

struct bfit_stream {
    const bfit_dataset *d;
    bfit_stream_cfg cfg;
    bfit_sample_fn fn;
    int64_t numel;
    int nlab;           /* labels per sample */
    int64_t *keys;      /* variable-length samples, shuffled: (length, index) to sort buckets by */
    float *lut, *mean, *std; /* owned copies behind fn */
    int32_t *perm;           /* order of perm_epoch; NULL when not shuffling */
    int64_t perm_epoch;
    bfit_cursor cur;
    int last_n;
    double wait_s;

    /* prefetch: the worker owns px/py while job is PENDING or RUNNING */
    int threaded;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int quit, job, job_n, job_got;
    bfit_cursor job_at;
    atomic_int cancel;
    float *px;
    int32_t *py;
};

/* Make n samples from cursor at into x, y; stop early (returning how many
 * were made) if *cancel is raised. Assumes perm is the order of at.epoch. */
static int produce(const bfit_stream *s, bfit_cursor at, int n, float *x, int32_t *y, atomic_int *cancel)
{
    for (int k = 0; k < n; k++) {
        if (cancel && atomic_load_explicit(cancel, memory_order_relaxed))
            return k;
        int64_t idx = s->perm ? s->perm[at.pos + k] : at.pos + k;
        if (s->d->starts) { /* a line's next ids, then -1 (padding) */
            int32_t *yk = y + (size_t)k * (size_t)s->nlab;
            memcpy(yk, s->d->ids + s->d->starts[idx] + 1, sizeof *y * (size_t)s->d->lens[idx]);
            for (int j = s->d->lens[idx]; j < s->nlab; j++)
                yk[j] = -1;
        } else if (s->d->ids) /* the next seq ids */
            memcpy(y + (size_t)k * (size_t)s->nlab, s->d->ids + idx * s->d->seq + 1, sizeof *y * (size_t)s->nlab);
        else
            y[k] = s->d->labels[idx];
        bfit_data_sample(&s->fn, at.epoch, idx, x + k * s->numel);
    }
    return n;
}

static void *worker(void *arg)
{
    bfit_stream *s = arg;

    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->quit && s->job != JOB_PENDING)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->quit)
            break;
        s->job = JOB_RUNNING;
        bfit_cursor at = s->job_at;
        int n = s->job_n;
        pthread_mutex_unlock(&s->mu);
        int got = produce(s, at, n, s->px, s->py, &s->cancel);
        pthread_mutex_lock(&s->mu);
        s->job_got = got;
        s->job = JOB_DONE;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Ask the worker for n samples from the current cursor. */
static void post(bfit_stream *s, int n)
{
    pthread_mutex_lock(&s->mu);
    s->job_at = s->cur;
    s->job_n = n;
    s->job = JOB_PENDING;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Throw away any prefetched work; on return the worker is idle. */
static void discard(bfit_stream *s)
{
    if (!s->threaded)
        return;
    pthread_mutex_lock(&s->mu);
    if (s->job == JOB_PENDING)
        s->job = JOB_NONE;
    atomic_store(&s->cancel, 1);
    while (s->job == JOB_RUNNING)
        pthread_cond_wait(&s->cv, &s->mu);
    atomic_store(&s->cancel, 0);
    s->job = JOB_NONE;
    pthread_mutex_unlock(&s->mu);
}

/* Copy what the finished job made for the current cursor (at most m
 * samples) into x, y; return how many. */
static int collect(bfit_stream *s, int m, float *x, int32_t *y)
{
    int use = 0;

    pthread_mutex_lock(&s->mu);
    while (s->job == JOB_PENDING || s->job == JOB_RUNNING)
        pthread_cond_wait(&s->cv, &s->mu);
    if (s->job == JOB_DONE && s->job_at.epoch == s->cur.epoch && s->job_at.pos == s->cur.pos)
        use = m < s->job_got ? m : s->job_got;
    s->job = JOB_NONE;
    pthread_mutex_unlock(&s->mu);
    memcpy(x, s->px, (size_t)use * (size_t)s->numel * sizeof *x);
    memcpy(y, s->py, (size_t)use * (size_t)s->nlab * sizeof *y);
    return use;
}

static int by_key_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Variable-length samples: the shuffled order sorted by length, longest
 * first, within buckets of BFIT_LEN_BUCKET, so that consecutive samples (a
 * step, a micro-batch) have similar lengths and little padding; ties by
 * index. Still a function of (seed, epoch) only, each sample once. */
static void bucket(bfit_stream *s)
{
    int64_t n = s->d->count;
    for (int64_t c0 = 0; c0 < n; c0 += BFIT_LEN_BUCKET) {
        int64_t c1 = c0 + BFIT_LEN_BUCKET < n ? c0 + BFIT_LEN_BUCKET : n;
        for (int64_t i = c0; i < c1; i++)
            s->keys[i] = (int64_t)s->d->lens[s->perm[i]] << 32 | (uint32_t)~(uint32_t)s->perm[i];
        qsort(s->keys + c0, (size_t)(c1 - c0), sizeof *s->keys, by_key_desc);
        for (int64_t i = c0; i < c1; i++)
            s->perm[i] = (int32_t)~(uint32_t)(s->keys[i] & 0xffffffffu);
    }
}

static void set_epoch(bfit_stream *s, int64_t epoch)
{
    if (s->perm && s->perm_epoch != epoch) {
        bfit_data_permute(s->cfg.seed, epoch, s->d->count, s->perm);
        if (s->keys)
            bucket(s);
    }
    s->perm_epoch = epoch;
}

static int check_cfg(const bfit_dataset *d, const bfit_stream_cfg *cfg)
{
    const bfit_shape sh = d->shape;

    if (cfg->max_take < 1)
        return bfit_fail(BFIT_EINVAL, "stream: max_take is %d, must be at least 1", cfg->max_take);
    if ((double)cfg->max_take * (double)bfit_shape_numel(sh) > (double)INT32_MAX * 4)
        return bfit_fail(BFIT_EINVAL, "stream: max_take %d samples of %lld values is too large",
                         cfg->max_take, (long long)bfit_shape_numel(sh));
    if ((cfg->aug_crop_pad || cfg->aug_hflip || cfg->norm_mean) && d->ids)
        return bfit_fail(BFIT_EINVAL, "%s is token data: no augmentation or normalisation", d->source);
    if ((cfg->aug_crop_pad || cfg->aug_hflip) && sh.h == 1 && sh.w == 1)
        return bfit_fail(BFIT_EINVAL, "augmentation (crop, flip) needs images; %s has vectors of %d features",
                         d->source, sh.c);
    if (cfg->aug_crop_pad < 0 || cfg->aug_crop_pad > sh.h || cfg->aug_crop_pad > sh.w)
        return bfit_fail(BFIT_EINVAL, "crop padding %d out of range: allowed 0..%d for %dx%d images",
                         cfg->aug_crop_pad, sh.h < sh.w ? sh.h : sh.w, sh.h, sh.w);
    if (!cfg->norm_mean != !cfg->norm_std)
        return bfit_fail(BFIT_EINVAL, "normalisation needs both mean and std (or neither)");
    for (int c = 0; cfg->norm_std && c < sh.c; c++)
        if (!(cfg->norm_std[c] > 0) || !isfinite(cfg->norm_std[c]) || !isfinite(cfg->norm_mean[c]))
            return bfit_fail(BFIT_EINVAL, "normalisation of channel %d: mean %g, std %g; std must be > 0",
                             c, cfg->norm_mean[c], cfg->norm_std[c]);
    if (d->count > INT32_MAX)
        return bfit_fail(BFIT_EINVAL, "stream: %lld samples, at most %d", (long long)d->count, INT32_MAX);
    return BFIT_OK;
}

/* Tables that turn a stored value into a model input: 256 floats per
 * channel for bytes (scaled to 0..1, then normalised), copies of the
 * statistics for floats. */
static int make_tables(bfit_stream *s)
{
    const int C = s->d->shape.c;
    const bfit_stream_cfg *cfg = &s->cfg;

    if (s->d->u8) {
        s->lut = malloc((size_t)C * 256 * sizeof *s->lut);
        if (!s->lut)
            return BFIT_ENOMEM;
        for (int c = 0; c < C; c++)
            for (int p = 0; p < 256; p++) {
                float v = (float)p / 255.0f;
                s->lut[c * 256 + p] = cfg->norm_mean ? (v - cfg->norm_mean[c]) / cfg->norm_std[c] : v;
            }
    } else if (cfg->norm_mean) {
        s->mean = malloc((size_t)C * sizeof *s->mean);
        s->std = malloc((size_t)C * sizeof *s->std);
        if (!s->mean || !s->std)
            return BFIT_ENOMEM;
        memcpy(s->mean, cfg->norm_mean, (size_t)C * sizeof *s->mean);
        memcpy(s->std, cfg->norm_std, (size_t)C * sizeof *s->std);
    }
    s->cfg.norm_mean = s->mean; /* the caller's arrays need not outlive us */
    s->cfg.norm_std = s->std;
    s->fn = (bfit_sample_fn){s->d, cfg->seed, cfg->aug_crop_pad, cfg->aug_hflip, s->lut, s->mean, s->std};
    return BFIT_OK;
}

static int start_prefetch(bfit_stream *s)
{
    s->px = malloc((size_t)s->cfg.max_take * (size_t)s->numel * sizeof *s->px);
    s->py = malloc((size_t)s->cfg.max_take * (size_t)s->nlab * sizeof *s->py);
    if (!s->px || !s->py)
        return BFIT_ENOMEM;
    if (pthread_mutex_init(&s->mu, NULL))
        return BFIT_ESTATE;
    if (pthread_cond_init(&s->cv, NULL)) {
        pthread_mutex_destroy(&s->mu);
        return BFIT_ESTATE;
    }
    if (pthread_create(&s->thread, NULL, worker, s)) {
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        return BFIT_ESTATE;
    }
    s->threaded = 1;
    return BFIT_OK;
}

int bfit_stream_new(const bfit_dataset *d, const bfit_stream_cfg *cfg, bfit_stream **out)
{
    bfit_stream *s;
    int rc;

    *out = NULL;
    if (!d || !cfg)
        return bfit_fail(BFIT_EINVAL, "stream_new: NULL argument");
    rc = check_cfg(d, cfg);
    if (rc)
        return rc;
    s = calloc(1, sizeof *s);
    if (!s)
        return bfit_fail(BFIT_ENOMEM, "out of host memory for a stream");
    s->d = d;
    s->cfg = *cfg;
    s->numel = bfit_shape_numel(d->shape);
    s->nlab = bfit_dataset_label_len(d);
    s->perm_epoch = -1;
    atomic_init(&s->cancel, 0);
    rc = make_tables(s);
    if (rc)
        goto out_fail;
    if (cfg->shuffle) {
        s->perm = malloc((size_t)d->count * sizeof *s->perm);
        if (d->lens && s->perm && !(s->keys = malloc((size_t)d->count * sizeof *s->keys))) {
            free(s->perm);
            s->perm = NULL;
        }
        if (!s->perm) {
            rc = BFIT_ENOMEM;
            goto out_fail;
        }
    }
    set_epoch(s, 0);
    if (cfg->prefetch && (rc = start_prefetch(s)))
        goto out_fail;
    *out = s;
    return BFIT_OK;
out_fail:
    bfit_stream_free(s);
    if (rc == BFIT_ENOMEM)
        return bfit_fail(rc, "out of host memory for a stream over %lld samples (max_take %d)",
                         (long long)d->count, cfg->max_take);
    return bfit_fail(rc, "cannot start the prefetch thread");
}

int bfit_stream_take(bfit_stream *s, int n, float *x, int32_t *y, int *got)
{
    double t0 = bfit_clock_mono();
    int64_t rem;
    int m, done = 0;

    if (got)
        *got = 0;
    if (!s || !x || !y || !got)
        return bfit_fail(BFIT_EINVAL, "stream_take: NULL argument");
    if (n < 1 || n > s->cfg.max_take)
        return bfit_fail(BFIT_EINVAL, "stream_take: n = %d, allowed 1..%d (max_take)", n, s->cfg.max_take);
    rem = s->d->count - s->cur.pos;
    m = rem < n ? (int)rem : n;
    if (s->threaded)
        done = collect(s, m, x, y);
    if (done < m) {
        bfit_cursor at = {s->cur.epoch, s->cur.pos + done};
        produce(s, at, m - done, x + done * s->numel, y + (size_t)done * (size_t)s->nlab, NULL);
    }
    s->cur.pos += m;
    s->last_n = n;
    if (s->threaded && s->cur.pos < s->d->count)
        post(s, rem - m < n ? (int)(rem - m) : n);
    *got = m;
    s->wait_s += bfit_clock_mono() - t0;
    return BFIT_OK;
}

void bfit_stream_next_epoch(bfit_stream *s)
{
    discard(s);
    s->cur.epoch++;
    s->cur.pos = 0;
    set_epoch(s, s->cur.epoch);
    if (s->threaded && s->last_n > 0)
        post(s, s->last_n < s->d->count ? s->last_n : (int)s->d->count);
}

bfit_cursor bfit_stream_tell(const bfit_stream *s) { return s->cur; }

int bfit_stream_seek(bfit_stream *s, bfit_cursor c)
{
    if (c.epoch < 0 || c.pos < 0 || c.pos > s->d->count)
        return bfit_fail(BFIT_EINVAL, "stream_seek: cursor (epoch %lld, position %lld) out of range: "
                         "epoch >= 0, position 0..%lld", (long long)c.epoch, (long long)c.pos,
                         (long long)s->d->count);
    discard(s);
    set_epoch(s, c.epoch);
    s->cur = c;
    return BFIT_OK;
}

int bfit_stream_count_tokens(const bfit_stream *s, int64_t tokens, int limit)
{
    int64_t rem = s->d->count - s->cur.pos, sum = 0;
    int n = 0;
    for (; n < limit && n < rem && sum < tokens; n++)
        sum += bfit_dataset_sample_len(s->d, s->perm ? s->perm[s->cur.pos + n] : s->cur.pos + n);
    return n;
}

int64_t bfit_stream_remaining(const bfit_stream *s) { return s->d->count - s->cur.pos; }

double bfit_stream_wait_seconds(const bfit_stream *s) { return s->wait_s; }

void bfit_stream_free(bfit_stream *s)
{
    if (!s)
        return;
    if (s->threaded) {
        pthread_mutex_lock(&s->mu);
        s->quit = 1;
        atomic_store(&s->cancel, 1);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
    }
    free(s->px);
    free(s->py);
    free(s->perm);
    free(s->keys);
    free(s->lut);
    free(s->mean);
    free(s->std);
    free(s);
}
