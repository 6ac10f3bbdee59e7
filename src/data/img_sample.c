/* img_sample.c - one image-folder sample: its file read, decoded and
 * transformed, its pixels normalised into the model's floats (NCHW); and
 * the normalisation statistics of an image set.
 *
 * The random draws of a sample (the crop, the flip) come from the key of
 * (seed, epoch, index), so a sample is the same whichever thread makes it
 * and however the epoch is split into takes.
 */
#include "base/err.h"
#include "base/rand.h"
#include "data/data_int.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The k-th uniform draw in [0, 1) of the sample whose key is *ud. */
static double draw(void *ud, int k)
{
    uint64_t r = bfit_mix64(*(const uint64_t *)ud + (uint64_t)(k + 1) * 0x632be59bd9b4e019ull);
    return (double)(r >> 11) * (1.0 / 9007199254740992.0);
}

/* File j transformed into s->out; *flip whether to mirror it. */
static int make(const bfit_dataset *d, const bfit_img_tf *t, bfit_img_scratch *s, int64_t j, uint64_t *key,
                int *flip)
{
    const char *path = d->img->paths + d->img->off[j];
    size_t n;
    int rc = bfit_img_read(s, path, &n);
    return rc != BFIT_OK ? rc : bfit_img_transform(s, t, path, s->file, n, draw, key, flip);
}

/* A bad file's error, rc, ended by the ways out of it (not for memory). */
static int way_out(int rc)
{
    if (rc == BFIT_ENOMEM)
        return rc;
    return bfit_fail(rc, "%s (remove the file, or give `skip_bad_images` to go past unreadable images)",
                     bfit_errmsg());
}

int bfit_img_sample(const bfit_sample_fn *f, bfit_img_scratch *s, int64_t epoch, int64_t idx, float *out,
                    int32_t *label)
{
    const bfit_dataset *d = f->d;
    const int C = d->shape.c, H = d->shape.h, W = d->shape.w;
    bfit_img_tf t = d->img->tf;
    uint64_t key = bfit_data_aug_key(f->seed, epoch, idx);
    int64_t j = idx;
    int flip = 0, rc;

    t.rrc = f->rrc;
    t.hflip = f->hflip;
    for (int64_t tries = 0;; tries++, j = (j + 1) % d->count) {
        if ((rc = make(d, &t, s, j, &key, &flip)) == BFIT_OK)
            break;
        if (!d->img->skip_bad || rc == BFIT_ENOMEM)
            return way_out(rc);
        atomic_fetch_add(&d->img->skipped, 1);
        if (f->bad_unscored && label) { /* an evaluation: scored by nothing, so not twice by a neighbour */
            memset(out, 0, sizeof *out * (size_t)C * H * W);
            *label = -1;
            return BFIT_OK;
        }
        if (tries + 1 == d->count)
            return bfit_fail(BFIT_EFORMAT, "%s: no image of the set can be read (the last: %s)", d->source,
                             bfit_errmsg());
    }
    if (label)
        *label = d->labels[j];
    for (int c = 0; c < C; c++) {
        const float *lut = f->lut + 256 * c;
        float *o = out + (size_t)c * H * W;
        for (int y = 0; y < H; y++) {
            const uint8_t *row = s->out.px + (size_t)y * W * C + c;
            for (int x = 0; x < W; x++)
                o[(size_t)y * W + x] = lut[row[(size_t)(flip ? W - 1 - x : x) * C]];
        }
    }
    return BFIT_OK;
}

/* Sums of pixels and their squares per channel: exact in integers; *good:
 * the images read (a skipped one counts in neither the sums nor the
 * set's skipped count, which is training's and evaluation's). */
static int stats_pass(const bfit_dataset *d, bfit_img_scratch *s, int64_t n, uint64_t *sum, uint64_t *sq,
                      int64_t *good)
{
    const int C = d->shape.c;
    const size_t npx = (size_t)d->shape.h * d->shape.w;
    uint64_t key = 0;
    int flip, rc;

    for (int64_t i = 0; i < n; i++) {
        int64_t j = i * d->count / n;
        if ((rc = make(d, &d->img->tf, s, j, &key, &flip)) != BFIT_OK) {
            if (!d->img->skip_bad || rc == BFIT_ENOMEM)
                return way_out(rc);
            continue;
        }
        (*good)++;
        for (size_t p = 0; p < npx; p++)
            for (int c = 0; c < C; c++) {
                uint64_t v = s->out.px[p * C + c];
                sum[c] += v;
                sq[c] += v * v;
            }
    }
    return BFIT_OK;
}

int bfit_img_norm_stats(const bfit_dataset *d, float *mean, float *std)
{
    const int C = d->shape.c;
    int64_t n = d->count < BFIT_IMG_STATS_SAMPLES ? d->count : BFIT_IMG_STATS_SAMPLES;
    uint64_t sum[3] = {0}, sq[3] = {0};
    bfit_img_scratch s = {0};
    int64_t good = 0;
    int rc = stats_pass(d, &s, n, sum, sq, &good);

    bfit_img_scratch_free(&s);
    if (rc != BFIT_OK)
        return rc;
    if (good == 0)
        return bfit_fail(BFIT_EFORMAT, "%s: none of the %lld images read for the normalisation statistics can be "
                         "read", d->source, (long long)n);
    for (int c = 0; c < C; c++) {
        double cnt = (double)good * d->shape.h * d->shape.w;
        double m = (double)sum[c] / cnt / 255.0, var = (double)sq[c] / cnt / (255.0 * 255.0) - m * m;
        mean[c] = (float)m;
        std[c] = var > 1e-12 ? (float)sqrt(var) : 1.0f;
    }
    return BFIT_OK;
}

int bfit_img_loader_threads(const bfit_img_opts *o, int compute_threads)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int compute = compute_threads > 0 ? compute_threads : omp_get_max_threads();

    if (o && o->loader_threads > 0)
        return o->loader_threads;
    return cores - compute > 1 ? (int)(cores - compute) : 1;
}
