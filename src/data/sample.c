/* sample.c - the pure part of the stream: the order of an epoch and the
 * look of one sample, each a function of (seed, epoch, index) only.
 *
 * Random numbers come from splitmix64 used as a counter-based generator (the
 * i-th number is mix(key + i * golden)), so any sample's randomness can be
 * computed on its own, by any thread, in any order: that is what makes the
 * data independent of the batch split and of prefetching.
 */
#include "data/data_int.h"

#include <string.h>

#define GOLDEN 0x9e3779b97f4a7c15ULL
#define DOMAIN_PERM 0x7065726d75746531ULL /* keeps shuffle and augmentation draws apart */
#define DOMAIN_AUG 0x6175676d656e7431ULL
#define DOMAIN_MASK 0x6d61736b6c6d3031ULL

/* The splitmix64 finaliser: a bijection that scatters nearby inputs. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t key(uint64_t seed, int64_t epoch, uint64_t domain)
{
    return mix64(mix64(seed ^ domain) + (uint64_t)epoch * GOLDEN);
}

void bfit_data_permute(uint64_t seed, int64_t epoch, int64_t n, int32_t *perm)
{
    uint64_t k = key(seed, epoch, DOMAIN_PERM);

    for (int64_t i = 0; i < n; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = n - 1; i > 0; i--) {
        uint64_t r = mix64(k + (uint64_t)(n - i) * GOLDEN);
        /* Lemire's multiply-shift: a uniform pick in 0..i without division */
        int64_t j = (int64_t)(((unsigned __int128)r * (uint64_t)(i + 1)) >> 64);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

uint64_t bfit_data_aug_key(uint64_t seed, int64_t epoch, int64_t idx)
{
    return mix64(key(seed, epoch, DOMAIN_AUG) + (uint64_t)idx * GOLDEN);
}

/* ---- the masked-LM objective ---- */

static int is_special(const bfit_mlm *m, int32_t id)
{
    for (int i = 0; i < m->nspecial; i++)
        if (BFIT_TOKEN_ID(id) == m->special[i])
            return 1;
    return 0;
}

/* Token j predicted: its label the id, its input by r's low 32 bits
 * (which the pick did not use): 8 in 10 the mask, 1 a random id, 1 kept.
 * A sentence pair's segment stays in the input. */
static void mask_one(const bfit_mlm *m, int32_t *x, int32_t *y, int j, uint64_t r)
{
    uint32_t what = (uint32_t)(((r & 0xffffffffu) * 10) >> 32);
    int32_t type = x[j] & ~BFIT_TOKEN_ID_MASK;
    y[j] = BFIT_TOKEN_ID(x[j]);
    if (what < 8)
        x[j] = m->mask_id | type;
    else if (what == 8)
        x[j] = (int32_t)(((mix64(r) >> 32) * (uint64_t)m->vocab) >> 32) | type;
}

/* Each real token that is not special is predicted with probability p, as
 * transformers' DataCollatorForLanguageModeling draws them; a sequence
 * that drew none gets one (BERT's own data maker predicts max(1, round(p
 * n))), so that no sequence, and no step, goes unscored. */
void bfit_data_mask(const bfit_sample_fn *f, int64_t epoch, int64_t idx, int32_t *x, int32_t *y, int len, int T)
{
    const bfit_mlm *m = f->mlm;
    uint64_t k = mix64(key(f->seed, epoch, DOMAIN_MASK) + (uint64_t)idx * GOLDEN);
    uint64_t cut = (uint64_t)(m->p * 0x1p32);
    int picked = 0, cand = 0;

    for (int j = 0; j < T; j++)
        y[j] = j < len ? BFIT_LABEL_UNSCORED : BFIT_LABEL_PAD;
    for (int j = 0; j < len; j++) {
        uint64_t r = mix64(k + (uint64_t)(j + 1) * GOLDEN);
        if (is_special(m, x[j]))
            continue;
        cand++;
        if ((r >> 32) < cut && (!m->max_pred || picked < m->max_pred)) {
            mask_one(m, x, y, j, r);
            picked++;
        }
    }
    if (picked || !cand)
        return;
    /* the one: the candidate of a drawn rank */
    int at = (int)(((mix64(k) >> 32) * (uint64_t)cand) >> 32);
    for (int j = 0; j < len; j++)
        if (!is_special(m, x[j]) && at-- == 0) {
            mask_one(m, x, y, j, mix64(k + (uint64_t)(j + 1) * GOLDEN));
            return;
        }
}

/* Value of stored element v of channel c, as the model sees it. */
static float f32_value(const bfit_sample_fn *f, int c, float v)
{
    return f->mean ? (v - f->mean[c]) / f->std[c] : v;
}

void bfit_data_sample(const bfit_sample_fn *f, int64_t epoch, int64_t idx, float *out)
{
    const bfit_dataset *d = f->d;
    const int C = d->shape.c, H = d->shape.h, W = d->shape.w;
    const int64_t plane = (int64_t)H * W, numel = C * plane;
    int dy = 0, dx = 0, flip = 0;

    if (d->ids && d->starts) { /* a line: its ids, then id 0 as padding (its labels -1 say where it ends); */
        int32_t *o = (int32_t *)out, pad = d->labels ? -1 : 0; /* a text with a class: -1, its only mark */
        memcpy(o, d->ids + d->starts[idx], sizeof *d->ids * (size_t)d->lens[idx]);
        for (int j = d->lens[idx]; j < d->seq; j++)
            o[j] = pad;
        return;
    }
    if (d->ids) { /* token ids, as int32 in the sample buffer */
        memcpy(out, d->ids + idx * d->seq, sizeof *d->ids * (size_t)d->seq);
        return;
    }
    if (f->crop_pad || f->hflip) {
        uint64_t r = bfit_data_aug_key(f->seed, epoch, idx);
        uint64_t span = 2 * (uint64_t)f->crop_pad + 1;
        dy = (int)((r & 0xffffffu) % span) - f->crop_pad;
        dx = (int)(((r >> 24) & 0xffffffu) % span) - f->crop_pad;
        flip = f->hflip && (r >> 63);
    }
    for (int c = 0; c < C; c++) {
        const uint8_t *su = d->u8 ? d->u8 + idx * numel + c * plane : NULL;
        const float *sf = d->f32 ? d->f32 + idx * numel + c * plane : NULL;
        const float *lut = f->lut ? f->lut + 256 * c : NULL;
        /* padding is a stored zero, normalised like any other value */
        const float zero = lut ? lut[0] : f32_value(f, c, 0.0f);
        float *o = out + c * plane;

        for (int h = 0; h < H; h++) {
            int sy = h + dy;
            for (int w = 0; w < W; w++) {
                int sx = (flip ? W - 1 - w : w) + dx;
                float v = zero;
                if (sy >= 0 && sy < H && sx >= 0 && sx < W) {
                    int64_t at = (int64_t)sy * W + sx;
                    v = lut ? lut[su[at]] : f32_value(f, c, sf[at]);
                }
                o[(int64_t)h * W + w] = v;
            }
        }
    }
}
