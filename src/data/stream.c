/* stream.c - the sample stream: a cursor (epoch, position) over a per-epoch
 * order, takes of any size, and loader threads.
 *
 * A take's samples are made by a job that the loader threads share: each
 * claims the next samples of the job (one at a time for images, in chunks
 * for samples already in memory) and writes them in place, with its own
 * decoding buffers (so a sample allocates nothing once they have grown).
 * With prefetching, the next take is guessed to ask for as many samples as
 * the last one and is made into a staging buffer while the caller computes:
 * one take ahead, no more. Since a sample depends only on (seed, epoch,
 * index), whatever part of the guess matches the real take is used and the
 * rest is made on the spot (the caller's thread helping): the data are the
 * same with and without prefetching, with any number of threads.
 */
#include "data/data_int.h"
#include "base/clock.h"
#include "base/err.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { JOB_NONE, JOB_RUNNING, JOB_DONE };

/* Samples [0, n) from cursor at into x, y. */
typedef struct job {
    int state;
    bfit_cursor at;
    int n, next, active; /* claimed up to next; threads making samples now */
    float *x;
    int32_t *y;
    int rc, err_k;       /* the first failure and its sample (n if none) */
    bfit_err_state err;
} job;

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
    int chunk;               /* samples a thread claims at once */
    bfit_img_scratch own;    /* the caller's decoding buffers */

    /* loader threads: they own px/py while the job is a prefetch and running */
    int nthreads;
    pthread_t *threads;
    bfit_img_scratch *scratch; /* one per thread */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int quit, sync_ok;
    int started;             /* threads that have run (and mapped their malloc arena) */
    int64_t made;            /* samples the loader threads made, */
    double busy_s;           /*   in this many seconds of their time */
    job job;
    float *px;
    int32_t *py;
};

/* Make samples [k0, k1) of the take at cursor at into x, y (sample k at
 * x + k * numel); the first failing sample's index in *bad. Assumes perm
 * is the order of at.epoch. */
static int produce(const bfit_stream *s, bfit_img_scratch *sc, bfit_cursor at, int k0, int k1, float *x,
                   int32_t *y, int *bad)
{
    for (int k = k0; k < k1; k++) {
        int64_t idx = s->perm ? s->perm[at.pos + k] : at.pos + k;
        if (s->d->img) {
            int rc = bfit_img_sample(&s->fn, sc, at.epoch, idx, x + k * s->numel, y + k);
            if (rc != BFIT_OK) {
                *bad = k;
                return rc;
            }
            continue;
        }
        if (s->d->labels) /* a sample's class (a text's too) */
            y[k] = s->d->labels[idx];
        else if (s->d->tags) { /* a class a token: unscored where negative, padding after the last */
            const int32_t *t = s->d->tags + idx * s->d->seq;
            int32_t *yk = y + (size_t)k * (size_t)s->nlab;
            for (int j = 0; j < s->nlab; j++)
                yk[j] = j >= s->d->lens[idx] ? BFIT_LABEL_PAD : t[j] < 0 ? BFIT_LABEL_UNSCORED : t[j];
        } else if (s->cfg.mlm.p > 0) { /* its own ids, some masked, and their labels */
            int32_t *xk = (int32_t *)(x + k * s->numel);
            bfit_data_sample(&s->fn, at.epoch, idx, x + k * s->numel);
            bfit_data_mask(&s->fn, at.epoch, idx, xk, y + (size_t)k * (size_t)s->nlab,
                           s->d->starts ? s->d->lens[idx] : s->d->seq, s->nlab);
            continue;
        } else if (s->d->starts) { /* a line's next ids, then -1 (padding) */
            int32_t *yk = y + (size_t)k * (size_t)s->nlab;
            memcpy(yk, s->d->ids + s->d->starts[idx] + 1, sizeof *y * (size_t)s->d->lens[idx]);
            for (int j = s->d->lens[idx]; j < s->nlab; j++)
                yk[j] = -1;
        } else if (s->d->ids) /* the next seq ids */
            memcpy(y + (size_t)k * (size_t)s->nlab, s->d->ids + idx * s->d->seq + 1, sizeof *y * (size_t)s->nlab);
        bfit_data_sample(&s->fn, at.epoch, idx, x + k * s->numel);
    }
    return BFIT_OK;
}

/* Claim and make chunks of the running job until none is left; called
 * and returns with mu held. */
static void work(bfit_stream *s, bfit_img_scratch *sc)
{
    job *j = &s->job;

    while (j->state == JOB_RUNNING && j->next < j->n) {
        int k0 = j->next, k1 = k0 + s->chunk < j->n ? k0 + s->chunk : j->n, bad = k1, rc;
        bfit_cursor at = j->at;
        float *x = j->x;
        int32_t *y = j->y;
        double t0;
        j->next = k1;
        j->active++;
        pthread_mutex_unlock(&s->mu);
        t0 = s->d->img ? bfit_clock_thread() : 0;
        rc = produce(s, sc, at, k0, k1, x, y, &bad);
        t0 = s->d->img ? bfit_clock_thread() - t0 : 0;
        pthread_mutex_lock(&s->mu);
        if (s->d->img && sc != &s->own) { /* the loader threads' own rate, not the caller's help */
            s->made += k1 - k0;
            s->busy_s += t0;
        }
        j->active--;
        if (rc != BFIT_OK && bad < j->err_k) {
            j->rc = rc;
            j->err_k = bad;
            bfit_err_save(&j->err);
            j->next = j->n; /* the rest is not needed */
        }
        if (j->next >= j->n && j->active == 0) {
            j->state = JOB_DONE;
            pthread_cond_broadcast(&s->cv);
        }
    }
}

static void *worker(void *arg)
{
    bfit_stream *s = ((void **)arg)[0];
    bfit_img_scratch *sc = ((void **)arg)[1];

    free(arg); /* its first heap call: glibc makes its malloc arena (64 MiB of address space) */
    pthread_mutex_lock(&s->mu);
    s->started++;
    pthread_cond_broadcast(&s->cv);
    for (;;) {
        while (!s->quit && !(s->job.state == JOB_RUNNING && s->job.next < s->job.n))
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->quit)
            break;
        work(s, sc);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Start a job of n samples from cursor at into x, y. Needs mu held and
 * no job running. */
static void start_job(bfit_stream *s, bfit_cursor at, int n, float *x, int32_t *y)
{
    s->job = (job){JOB_RUNNING, at, n, 0, 0, x, y, BFIT_OK, n, {{0}, {0}}};
    pthread_cond_broadcast(&s->cv);
}

/* Ask the threads for n samples from the current cursor, ahead of time. */
static void post(bfit_stream *s, int n)
{
    pthread_mutex_lock(&s->mu);
    start_job(s, s->cur, n, s->px, s->py);
    pthread_mutex_unlock(&s->mu);
}

/* Stop the running job (no more claims) and wait for its claimed samples;
 * on return the threads are idle. Needs mu held. */
static void stop_job(bfit_stream *s)
{
    if (s->job.state == JOB_RUNNING)
        s->job.next = s->job.n;
    while (s->job.active > 0)
        pthread_cond_wait(&s->cv, &s->mu);
    s->job.state = JOB_NONE;
}

/* Throw away any prefetched work. */
static void discard(bfit_stream *s)
{
    if (!s->nthreads)
        return;
    pthread_mutex_lock(&s->mu);
    stop_job(s);
    pthread_mutex_unlock(&s->mu);
}

/* Which thread makes which sample depends on timing, so a thread may meet
 * the largest image long after another has. Once a job is done (the
 * threads idle, mu held), every decoding buffer set is grown to the largest
 * of each buffer: after one epoch has seen every image, none grows again
 * (and no sample allocates), however the work fell. An allocation that
 * fails here is left to the thread that would need it. */
static void even_out(bfit_stream *s)
{
    if (!s->d->img)
        return;
    for (int i = 0; i < s->nthreads; i++)
        (void)bfit_img_scratch_cover(&s->own, &s->scratch[i]);
    for (int i = 0; i < s->nthreads; i++)
        (void)bfit_img_scratch_cover(&s->scratch[i], &s->own);
}

/* Make n samples from cursor at into x, y now, the threads and the caller
 * together. */
static int make_now(bfit_stream *s, bfit_cursor at, int n, float *x, int32_t *y)
{
    int rc, bad = n;

    if (!s->nthreads)
        return produce(s, &s->own, at, 0, n, x, y, &bad);
    pthread_mutex_lock(&s->mu);
    start_job(s, at, n, x, y);
    work(s, &s->own);
    while (s->job.state == JOB_RUNNING)
        pthread_cond_wait(&s->cv, &s->mu);
    even_out(s);
    rc = s->job.rc;
    if (rc != BFIT_OK)
        bfit_err_restore(&s->job.err);
    s->job.state = JOB_NONE;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* Copy what the prefetch made for the current cursor (at most m samples)
 * into x, y; *used gets how many. A failure among them is returned. */
static int collect(bfit_stream *s, int m, float *x, int32_t *y, int *used)
{
    int use = 0, rc = BFIT_OK;

    pthread_mutex_lock(&s->mu);
    while (s->job.state == JOB_RUNNING)
        pthread_cond_wait(&s->cv, &s->mu);
    even_out(s);
    if (s->job.state == JOB_DONE && s->job.x == s->px && s->job.at.epoch == s->cur.epoch &&
        s->job.at.pos == s->cur.pos) {
        use = m < s->job.n ? m : s->job.n;
        if (s->job.err_k < use) {
            rc = s->job.rc;
            bfit_err_restore(&s->job.err);
        }
    }
    s->job.state = JOB_NONE;
    pthread_mutex_unlock(&s->mu);
    if (rc != BFIT_OK)
        return rc;
    memcpy(x, s->px, (size_t)use * (size_t)s->numel * sizeof *x);
    memcpy(y, s->py, (size_t)use * (size_t)s->nlab * sizeof *y);
    *used = use;
    return BFIT_OK;
}

static int by_key_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Variable-length samples: the shuffled order sorted by length, longest
 * first, within buckets of BFIT_LEN_BUCKET, so that consecutive samples (a
 * step, a micro-batch) have similar lengths and little padding; ties by
 * index. Still a function of (seed, epoch) only, each sample once. A
 * bucket ends at the epoch's length too: sorting across it would make a
 * short epoch the longest samples of its buckets, not a random subset. */
static void bucket(bfit_stream *s)
{
    int64_t n = s->d->count, len = s->cfg.epoch_len > 0 && s->cfg.epoch_len < n ? s->cfg.epoch_len : n;
    for (int64_t c0 = 0, c1; c0 < n; c0 = c1) {
        c1 = c0 + BFIT_LEN_BUCKET < n ? c0 + BFIT_LEN_BUCKET : n;
        c1 = c0 < len && c1 > len ? len : c1;
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
    if ((cfg->aug_crop_pad || cfg->aug_hflip) && d->ids)
        return bfit_fail(BFIT_EINVAL, "augmentation (crop, flip) needs images; %s is token data (train without "
                         "--augment)", d->source);
    if (cfg->norm_mean && d->ids)
        return bfit_fail(BFIT_EINVAL, "%s is token data: token ids are not normalised", d->source);
    if ((cfg->aug_crop_pad || cfg->aug_hflip) && sh.h == 1 && sh.w == 1)
        return bfit_fail(BFIT_EINVAL, "augmentation (crop, flip) needs images; %s has vectors of %d features",
                         d->source, sh.c);
    if (d->img && cfg->aug_crop_pad)
        return bfit_fail(BFIT_EINVAL, "%s is an image folder: its augmentations are a random resized crop and "
                         "a flip, not a padded crop", d->source);
    if (cfg->aug_rrc && !d->img)
        return bfit_fail(BFIT_EINVAL, "a random resized crop needs an image folder; %s is not one", d->source);
    if (cfg->loader_threads < 0 || cfg->loader_threads > 1024)
        return bfit_fail(BFIT_EINVAL, "stream: %d loader threads, allowed 0..1024", cfg->loader_threads);
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
    if (d->unlabelled && !(cfg->mlm.p > 0))
        return bfit_fail(BFIT_EINVAL, "%s: token sequences without labels are a masked LM's: give masked-LM labels",
                         d->source);
    if (cfg->mlm.p > 0 && (!d->ids || d->labels || d->tags))
        return bfit_fail(BFIT_EINVAL, "masked-LM labels need the token data of a language model; %s is %s",
                         d->source, d->tags ? "a token classifier's tags" : d->ids ? "a classifier's texts" : "not token data");
    if (cfg->mlm.p > 0 && (cfg->mlm.p > 1 || cfg->mlm.vocab < 1 || cfg->mlm.mask_id < 0 ||
                           cfg->mlm.mask_id >= cfg->mlm.vocab || cfg->mlm.nspecial < 0 ||
                           cfg->mlm.nspecial > BFIT_MLM_SPECIAL_MAX))
        return bfit_fail(BFIT_EINVAL, "stream: masked-LM share %g, mask id %d, vocabulary %d, %d special ids",
                         cfg->mlm.p, (int)cfg->mlm.mask_id, (int)cfg->mlm.vocab, cfg->mlm.nspecial);
    return BFIT_OK;
}

/* Tables that turn a stored value into a model input: 256 floats per
 * channel for bytes (scaled to 0..1, then normalised), copies of the
 * statistics for floats. */
static int make_tables(bfit_stream *s)
{
    const int C = s->d->shape.c;
    const bfit_stream_cfg *cfg = &s->cfg;

    if (s->d->u8 || s->d->img) {
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
    s->fn = (bfit_sample_fn){s->d, cfg->seed, cfg->aug_crop_pad, cfg->aug_hflip, cfg->aug_rrc, s->lut, s->mean, s->std,
                             cfg->bad_unscored, &s->cfg.mlm};
    return BFIT_OK;
}

/* The loader threads (cfg.loader_threads, at least one with prefetching)
 * and, with prefetching, the staging buffers of the next take; a failure
 * says what (a thread without room for its stack is out of host memory:
 * it said "cannot start the loader threads", the limit unnamed). */
static int start_threads(bfit_stream *s)
{
    int n = s->cfg.loader_threads > 0 ? s->cfg.loader_threads : 1, err;

    if (s->cfg.prefetch) {
        s->px = malloc((size_t)s->cfg.max_take * (size_t)s->numel * sizeof *s->px);
        s->py = malloc((size_t)s->cfg.max_take * (size_t)s->nlab * sizeof *s->py);
        if (!s->px || !s->py)
            return bfit_fail(BFIT_ENOMEM, "out of host memory for a stream's next %d samples", s->cfg.max_take);
    }
    s->threads = calloc((size_t)n, sizeof *s->threads);
    s->scratch = calloc((size_t)n, sizeof *s->scratch);
    if (!s->threads || !s->scratch)
        return bfit_fail(BFIT_ENOMEM, "out of host memory for a stream's loader threads");
    if (pthread_mutex_init(&s->mu, NULL))
        return bfit_fail(BFIT_ESTATE, "cannot start the loader threads");
    if (pthread_cond_init(&s->cv, NULL)) {
        pthread_mutex_destroy(&s->mu);
        return bfit_fail(BFIT_ESTATE, "cannot start the loader threads");
    }
    s->sync_ok = 1;
    for (; s->nthreads < n; s->nthreads++) {
        void **arg = malloc(2 * sizeof *arg);
        if (!arg)
            return bfit_fail(BFIT_ENOMEM, "out of host memory for a stream's loader threads");
        arg[0] = s, arg[1] = &s->scratch[s->nthreads];
        if ((err = pthread_create(&s->threads[s->nthreads], NULL, worker, arg)) != 0) {
            free(arg);
            /* EAGAIN: no room for its stack (under ulimit -v: err.c names the limit) or too many threads */
            return bfit_fail(err == EAGAIN || err == ENOMEM ? BFIT_ENOMEM : BFIT_ESTATE, "%s: cannot start "
                             "loader thread %d of %d (%s)", err == EAGAIN || err == ENOMEM ? "out of host memory"
                             : "stream", s->nthreads + 1, n, strerror(err));
        }
    }
    /* Under ulimit -v a run reads the room left once its streams are open:
     * what the threads map (stacks, malloc arenas) must be mapped by then. */
    pthread_mutex_lock(&s->mu);
    while (s->started < s->nthreads)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
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
    s->chunk = d->img ? 1 : 64;
    if ((cfg->prefetch || cfg->loader_threads > 1) && (rc = start_threads(s))) {
        bfit_stream_free(s); /* the message is start_threads' */
        return rc;
    }
    *out = s;
    return BFIT_OK;
out_fail:
    bfit_stream_free(s);
    if (rc == BFIT_ENOMEM)
        return bfit_fail(rc, "out of host memory for a stream over %lld samples (max_take %d)",
                         (long long)d->count, cfg->max_take);
    return bfit_fail(rc, "cannot start the loader threads");
}

int bfit_stream_take(bfit_stream *s, int n, float *x, int32_t *y, int *got)
{
    double t0 = bfit_clock_mono();
    int64_t rem;
    int m, done = 0, rc = BFIT_OK;

    if (got)
        *got = 0;
    if (!s || !x || !y || !got)
        return bfit_fail(BFIT_EINVAL, "stream_take: NULL argument");
    if (n < 1 || n > s->cfg.max_take)
        return bfit_fail(BFIT_EINVAL, "stream_take: n = %d, allowed 1..%d (max_take)", n, s->cfg.max_take);
    rem = s->d->count - s->cur.pos;
    m = rem < n ? (int)rem : n;
    if (s->px)
        rc = collect(s, m, x, y, &done);
    if (rc == BFIT_OK && done < m) {
        bfit_cursor at = {s->cur.epoch, s->cur.pos + done};
        rc = make_now(s, at, m - done, x + done * s->numel, y + (size_t)done * (size_t)s->nlab);
    }
    if (rc == BFIT_OK) {
        s->cur.pos += m;
        s->last_n = n;
        if (s->px && s->cur.pos < s->d->count)
            post(s, rem - m < n ? (int)(rem - m) : n);
        *got = m;
    }
    s->wait_s += bfit_clock_mono() - t0;
    return rc;
}

void bfit_stream_next_epoch(bfit_stream *s)
{
    discard(s);
    s->cur.epoch++;
    s->cur.pos = 0;
    set_epoch(s, s->cur.epoch);
    if (s->px && s->last_n > 0)
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

int64_t bfit_stream_scratch_grown(const bfit_stream *s)
{
    int64_t g = s->own.grown;
    for (int i = 0; s->scratch && i < s->nthreads; i++)
        g += s->scratch[i].grown;
    return g;
}

int bfit_stream_loader_threads(const bfit_stream *s) { return s->nthreads; }

void bfit_stream_loader_work(bfit_stream *s, int64_t *samples, double *seconds)
{
    *samples = 0;
    *seconds = 0;
    if (!s->sync_ok)
        return;
    pthread_mutex_lock(&s->mu);
    *samples = s->made;
    *seconds = s->busy_s;
    pthread_mutex_unlock(&s->mu);
}

void bfit_stream_free(bfit_stream *s)
{
    if (!s)
        return;
    if (s->sync_ok) {
        pthread_mutex_lock(&s->mu);
        stop_job(s);
        s->quit = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        for (int i = 0; i < s->nthreads; i++)
            pthread_join(s->threads[i], NULL);
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
    }
    for (int i = 0; s->scratch && i < s->nthreads; i++)
        bfit_img_scratch_free(&s->scratch[i]);
    bfit_img_scratch_free(&s->own);
    free(s->scratch);
    free(s->threads);
    free(s->px);
    free(s->py);
    free(s->perm);
    free(s->keys);
    free(s->lut);
    free(s->mean);
    free(s->std);
    free(s);
}
