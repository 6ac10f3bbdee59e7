/* data_int.h - inside the data module: the data set's layout and the pure
 * functions that turn (seed, epoch, index) into a ready sample, shared by
 * the loaders, the stream and its prefetch thread. */
#ifndef BFIT_DATA_INT_H
#define BFIT_DATA_INT_H

#include "data/data.h"
#include "data/img.h"

#include <stdatomic.h>

/* An image-folder data set: paths and class names, decoded on demand. */
typedef struct bfit_imgset {
    char *paths;          /* every path, NUL-terminated, one buffer */
    int64_t *off;         /* count offsets into paths */
    bfit_img_tf tf;       /* the evaluation transform; streams switch rrc and hflip on */
    int skip_bad;         /* a bad file: the next good one instead, counted */
    atomic_llong skipped; /* bad files met (and skipped) so far */
    int64_t other;        /* files of other types in the folder, ignored */
} bfit_imgset;

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
    int unlabelled;   /* token arrays without labels: a masked LM's sequences (its labels the tokens masked) */
    int32_t *tags;    /* token arrays of a token classifier: count * seq classes, a token's own (negative: not
                         scored), borrowed; NULL: the labels are the next ids */
    char *names;      /* class names (image and text folders, list files), NUL-terminated, one buffer; */
    int64_t *name_off; /*   nclasses offsets into it; NULL: classes without names (IDX, CSV) */
    int numbered;     /* a list file of class indices: the names are the numbers, no one's names */
    char note[256];   /* what the loader decided (a CSV's header, an image folder's oddities), "" if nothing */
    int borrowed;     /* f32 and labels are the caller's (bfit_dataset_borrow_floats): not freed */
    bfit_imgset *img; /* an image folder (img_folder.c), or NULL */
};

/* A token file's ids (tokfile.c), or its train or test part's (train 1,
 * 0; < 0: all), read 64 KiB at a time into them: the file's bytes are
 * never all in memory beside their ids. *vocab the header's, or the
 * largest id of the whole file + 1 (both parts have the same). */
int bfit_tokens_read_part(const char *path, int train, int32_t **ids, int64_t *count, int *vocab);

/* A data set with everything but the sample and label arrays, which the
 * loader fills (it owns them from here on: bfit_dataset_free frees them). */
int bfit_data_alloc(const char *source, bfit_dataset **out);

/* The .txt files under dir and its subfolders (hidden ones left out), sorted by path: *n of them in
 * *paths (bfit_text_paths_free). BFIT_EIO naming a folder that cannot be listed. */
int bfit_text_paths(const char *dir, char ***paths, int *n);
void bfit_text_paths_free(char **paths, int n);

/* The sample order of one epoch: perm[k] is the index of the k-th sample.
 * Depends only on (seed, epoch): Fisher-Yates driven by a counter-based
 * splitmix64. */
void bfit_data_permute(uint64_t seed, int64_t epoch, int64_t n, int32_t *perm);

/* How to turn stored values into what the model sees. */
typedef struct bfit_sample_fn {
    const bfit_dataset *d;
    uint64_t seed;
    int crop_pad, hflip;
    int rrc;           /* images: RandomResizedCrop (the training transform) */
    const float *lut;  /* u8 data: shape.c * 256 ready values (scaled, normalised) */
    const float *mean; /* f32 data: shape.c values, or NULL */
    const float *std;
    int bad_unscored;  /* images, skip_bad: a bad file gives a blank sample labelled -1 */
    const bfit_mlm *mlm; /* token data: masked-LM labels if mlm->p > 0 */
} bfit_sample_fn;

/* Write dataset sample idx, as seen in epoch, into out (numel floats). */
void bfit_data_sample(const bfit_sample_fn *f, int64_t epoch, int64_t idx, float *out);

/* Token sample idx's masked-LM form in epoch: x holds its T ids (len real,
 * then padding), made the model's input in place; y gets its T labels
 * (the ids predicted, BFIT_LABEL_UNSCORED at the other real tokens, -1 at
 * the padding). */
void bfit_data_mask(const bfit_sample_fn *f, int64_t epoch, int64_t idx, int32_t *x, int32_t *y, int len, int T);

/* The key of sample idx's augmentation draws in epoch. */
uint64_t bfit_data_aug_key(uint64_t seed, int64_t epoch, int64_t idx);

/* ---- image folders (img_folder.c, img_sample.c) ------------------------------- */
/* 1 if name ends in .jpg, .jpeg or .png (any case). */
int bfit_img_ext_ok(const char *name);
/* 1 if the first n bytes of s end in an image file's extension, one we
 * read (.jpg, .jpeg, .png) or another (.gif, .bmp, .webp, .tif, ...). */
int bfit_img_ext_like(const char *s, size_t n);
/* 1 if path is a list file of `path,label` lines: its name ends in .lst,
 * or one of its first data lines names a file (its first field ends in an
 * image's extension, bfit_img_ext_like, or is a path such as dir/notes.txt),
 * or it is a .txt of nothing but
 * blank and # lines and text_ok is 0 (not for a token model: an empty
 * list). text_ok: a .txt may be text for a token model, decided by its
 * first data line only. */
int bfit_img_is_list(const char *path, int text_ok);
/* A training split of images with a single class: its note says so. */
void bfit_img_note_one_class(bfit_dataset *d);
/* A class name (a folder's, or a list's label) must be UTF-8: the names
 * are saved with the weights as JSON text and matched by name later.
 * BFIT_EFORMAT naming the folder `where` (lineno 0) or file:lineno, the
 * name with its bad bytes as \xNN. */
int bfit_img_name_check(const char *name, const char *where, int64_t lineno);
/* Image sample idx of epoch into out (numel floats, normalised by f->lut)
 * with its label; s is the calling thread's scratch. A bad file is an
 * error naming it, or with skip_bad the next good file in data-set order
 * (counted in img->skipped); with f->bad_unscored too, a blank sample
 * labelled -1 instead, which an evaluation leaves out. */
int bfit_img_sample(const bfit_sample_fn *f, bfit_img_scratch *s, int64_t epoch, int64_t idx, float *out,
                    int32_t *label);
/* Per-channel mean and std of pixels / 255 over the evaluation transform
 * of up to BFIT_IMG_STATS_SAMPLES samples spread evenly over the set. */
#define BFIT_IMG_STATS_SAMPLES 1000
int bfit_img_norm_stats(const bfit_dataset *d, float *mean, float *std);
void bfit_imgset_free(bfit_imgset *g);

#endif
