/* data_int.h - inside the data module: the data set's layout and the pure
 * functions that turn (seed, epoch, index) into a ready sample, shared by
 * the loaders, the stream and its prefetch thread. */
#ifndef BFIT_DATA_INT_H
#define BFIT_DATA_INT_H

#include "data/data.h"

struct bfit_dataset {
    char *source;     /* path or name, for messages and logs */
    bfit_shape shape; /* per sample */
    int64_t count;
    int nclasses;
    uint8_t *u8;      /* count * numel pixels (IDX), or NULL */
    float *f32;       /* count * numel values (CSV, memory), or NULL */
    int32_t *labels;  /* count (not for token data) */
    int32_t *ids;     /* token data: nids ids; sample i is ids[i seq, (i+1) seq), its labels the next */
    int64_t nids;
    int seq;          /* token data: tokens (and labels) per sample; 0 otherwise */
    int64_t *starts;  /* token lines: sample i is ids[starts[i], +lens[i]), labels one further, padded */
    int32_t *lens;    /*   to seq with id 0 and label -1; NULL: fixed windows */
    char note[160];   /* what the loader decided (a CSV's header), "" if nothing */
    int borrowed;     /* f32 and labels are the caller's (bfit_dataset_borrow_floats): not freed */
};

/* A data set with everything but the sample and label arrays, which the
 * loader fills (it owns them from here on: bfit_dataset_free frees them). */
int bfit_data_alloc(const char *source, bfit_dataset **out);

/* The sample order of one epoch: perm[k] is the index of the k-th sample.
 * Depends only on (seed, epoch): Fisher-Yates driven by a counter-based
 * splitmix64. */
void bfit_data_permute(uint64_t seed, int64_t epoch, int64_t n, int32_t *perm);

/* How to turn stored values into what the model sees. */
typedef struct bfit_sample_fn {
    const bfit_dataset *d;
    uint64_t seed;
    int crop_pad, hflip;
    const float *lut;  /* u8 data: shape.c * 256 ready values (scaled, normalised) */
    const float *mean; /* f32 data: shape.c values, or NULL */
    const float *std;
} bfit_sample_fn;

/* Write dataset sample idx, as seen in epoch, into out (numel floats). */
void bfit_data_sample(const bfit_sample_fn *f, int64_t epoch, int64_t idx, float *out);

#endif
