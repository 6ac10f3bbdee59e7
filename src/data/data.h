/* data.h - data sets (IDX, CSV, in memory) and the sample stream.
 *
 * A data set is a read-only array of samples and integer labels, stored
 * compactly (uint8 for IDX images, float for CSV). The stream is a cursor
 * over it: any number of samples can be taken at any moment, so the batch
 * size may change mid-epoch without losing or repeating a sample (DESIGN.md,
 * principle 3). What a sample looks like after shuffling, augmentation and
 * normalisation depends only on (seed, epoch, sample index), never on how
 * the epoch was split into takes or on whether prefetching is on.
 */
#ifndef BFIT_DATA_H
#define BFIT_DATA_H

#include <stdint.h>

#include "batchfit.h"
#include "tensor/tensor.h"

/* ---- data ------------------------------------------------------------------ */
typedef struct bfit_dataset bfit_dataset;

/* Options for loading; all fields apply to CSV, nclasses to IDX too. */
typedef struct bfit_data_opts {
    int nclasses;  /* 0: max label + 1 (fashion-mnist: 10); else labels must be < nclasses */
    int label_col; /* CSV: label column, 0-based; negative counts from the end (-1: last) */
    int header;    /* CSV: 1 the first row is a header, 0 it is data, -1 auto: a header when it
                      holds only names, data when only numbers (a mix is an error) */
    char delim;    /* CSV: field separator, 0 means ',' */
    int seq;       /* token data (a token file, or a .txt file as bytes): tokens per sample, the
                      model's T; 0 for other data */
    int lines;     /* text: samples are its lines, of at most seq tokens, padded (variable length) */
    int classes;   /* a folder of class folders of texts: one sample a text, one label a text (a classifier
                      of token ids, bfit_dataset_load_text_classes) */
    int whole;     /* text or token file: all of it, not the train or test part (a file given as the
                      test data) */
    /* image folders and list files (docs/data.md, "Image folders"): */
    int img_c, img_h, img_w; /* the model's input: samples are made to this shape */
    int img_resize;          /* evaluation: shorter side to this before the centre crop; 0: the crop's */
    int img_no_dct;          /* 1: JPEGs always decoded whole (no DCT scaling) */
    int img_skip_bad;        /* a bad file is skipped (the next good one), counted, not an error */
    int tokens_whole;        /* a token file: every id for train and test alike, as before it had parts
                                (2026-12-04): a checkpoint's run from then (bfit_train_cfg.tokens_split) */
} bfit_data_opts;

#define BFIT_DATA_OPTS_INIT {0, -1, -1, ',', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

/* How a run, an evaluation or find takes a CSV file's first row. Auto: a
 * header when it holds only names, data when it holds only numbers, an
 * error when it mixes them; what was decided is said (bfit_dataset_note). */
typedef enum { BFIT_CSV_HEADER_AUTO = 0, BFIT_CSV_HEADER_YES, BFIT_CSV_HEADER_NO } bfit_csv_header;
/* "auto", "yes", "no" (case-insensitive); BFIT_EINVAL naming the valid ones. */
int bfit_csv_header_parse(const char *name, bfit_csv_header *out);
const char *bfit_csv_header_name(bfit_csv_header h);

/* Load a data set by name or path; o may be NULL (BFIT_DATA_OPTS_INIT).
 * spec is one of:
 *   "fashion-mnist"          the installed set in /usr/share/datasets/fashion-mnist
 *   a directory of folders   images, one folder per class (bfit_dataset_load_images)
 *   a list file              `path,label` lines naming .jpg/.jpeg/.png files
 *   a directory              MNIST layout: {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]
 *   "IMAGES,LABELS"          an explicit pair of IDX files
 *   a token file             ids in llm.c's format (docs/data.md), samples of opts->seq tokens
 *   a .txt file              its bytes as tokens (256 ids); train: 95% of its lines, else the rest
 *                            (all of them with opts->whole)
 *   a file (.csv or other)   CSV, see bfit_dataset_load_csv
 * train picks the train or the t10k files of a named set or directory and is
 * ignored for files. Fails with BFIT_EIO (missing file, saying which paths
 * were tried), BFIT_EFORMAT (bad contents, saying file and position) or
 * BFIT_EINVAL (bad options); *out is NULL on failure. */
int bfit_dataset_load(const char *spec, int train, const bfit_data_opts *o, bfit_dataset **out);
/* 1 if specs a and b name the same data: the same name, or the same file
 * or directory (by device and inode: ./a.txt and a.txt, a link, kjv and
 * its text); 0 otherwise, NULL included. */
int bfit_dataset_same(const char *a, const char *b);

int64_t bfit_dataset_count(const bfit_dataset *d);
int bfit_dataset_classes(const bfit_dataset *d);
/* What the loader decided that a person should see, "" if nothing: for a
 * CSV file whether and why its first row is a header ("line 1 is a header
 * (auto: only names): a,b,label", "no header (auto: only numbers): line 1
 * is data"). */
const char *bfit_dataset_note(const bfit_dataset *d);
void bfit_dataset_free(bfit_dataset *d);

/* Samples from the caller: a program feeds its own data to a run. Samples
 * are the model's input shape of floats (NCHW), labels class indices. For a
 * token model (`input tokens=T`) a sample is T int32 token ids (in the x
 * buffer, 4 bytes each) and has T labels, -1 for a padding token. */
typedef struct bfit_source {
    /* The next n samples of the epoch into x and labels; *got may be less
     * than n only at the epoch's end (0 when it has ended). */
    int (*take)(void *ud, int n, float *x, int32_t *labels, int *got);
    /* Start the next epoch (training), or the same one again from its first
     * sample (evaluation). */
    int (*next_epoch)(void *ud);
    int (*rewind)(void *ud);
    int64_t samples;     /* in an epoch */
    void *ud;
} bfit_source;


/* ---- data sets ----------------------------------------------------------- */

/* Load an IDX image file (magic 0x00000803, N x H x W uint8) and an IDX label
 * file (0x00000801, N uint8), each gzip-compressed (by its 1f 8b magic) or
 * raw. nclasses 0 takes max label + 1; otherwise a label >= nclasses is an
 * error. Samples have shape 1 x H x W; pixels become value/255 when taken. */
int bfit_dataset_load_idx(const char *images, const char *labels, int nclasses, bfit_dataset **out);

/* Load a CSV file of numeric features and one integer label column per row
 * (o: label_col, header, delim, nclasses; NULL for defaults). Blank lines and
 * lines starting with '#' are skipped. Header (o->header): 1 the first row
 * is one, 0 it is data, -1 (auto) it is one when it holds only names and
 * data when only numbers; a first row that mixes them is an error. Samples
 * have shape F x 1 x 1 where F is the number of columns less the
 * label. Errors name file:line:column. */
int bfit_dataset_load_csv(const char *path, const bfit_data_opts *o, bfit_dataset **out);

/* Make a data set from float samples in memory (copied): count samples of
 * shape, count labels in 0..nclasses-1. For synthetic data in tests and
 * benchmarks. */
int bfit_dataset_from_floats(bfit_shape shape, int64_t count, int nclasses, const float *x,
                             const int32_t *y, bfit_dataset **out);

/* The same without a copy: the data set reads the caller's x (count samples
 * of shape) and y (count labels, each >= 0; the classes are the largest + 1)
 * in place, and bfit_dataset_free leaves them alone. They must outlive the
 * data set and not change under it. source names it in messages and logs. */
int bfit_dataset_borrow_floats(const char *source, bfit_shape shape, int64_t count, const float *x,
                               const int32_t *y, bfit_dataset **out);

/* Sequences of token ids with a class each, in the caller's memory (read in place, as borrow_floats):
 * ids [count, seq], each sequence's padding -1 after its last token; labels [count] from 0. As a folder of
 * class folders of texts makes them (bfit_dataset_load_text_classes): the same samples train alike.
 * BFIT_EINVAL naming the sequence and position of an id below -1, a -1 before a token, or a sequence of
 * padding alone. */
/* The same with a class a token (a token classifier's tags: NER's), tags [count, seq] in the caller's
 * memory: a token's class from 0, or a negative number at a token not scored (transformers' -100: a
 * word's later pieces, [CLS], [SEP]); what they hold after a sequence's last token is not read. The
 * classes are the largest tag + 1. BFIT_EINVAL as above, or where no token has a class. */
int bfit_dataset_borrow_token_tags(const char *source, const int32_t *ids, int64_t count, int seq,
                                   const int32_t *tags, bfit_dataset **out);
/* 1 if d's labels are its tokens' tags (bfit_dataset_borrow_token_tags). */
int bfit_dataset_is_tags(const bfit_dataset *d);
/* Token sequences without labels (ids as above): a masked LM's, whose labels are the tokens it masks
 * (bfit_mlm); the vocabulary the largest id + 1. */
int bfit_dataset_borrow_token_seqs(const char *source, const int32_t *ids, int64_t count, int seq,
                                   bfit_dataset **out);
int bfit_dataset_is_unlabelled(const bfit_dataset *d);
int bfit_dataset_borrow_tokens(const char *source, const int32_t *ids, int64_t count, int seq, const int32_t *y,
                               bfit_dataset **out);

/* ---- image folders (src/data/img_*.c; docs/data.md, "Image folders") ------- */
/* The options of image folders, as a run, an evaluation and find take them. */
typedef struct bfit_img_opts {
    int resize;          /* evaluation: Resize(this) before the centre crop; 0: the model's size */
    int center_crop[2];  /* evaluation: CenterCrop(H, W); 0 or the model's size; W 0: as H */
    int rrc[2];          /* training: RandomResizedCrop(H, W) (the model's size); W 0: as H; H 0: the
                            evaluation transform */
    int loader_threads;  /* threads decoding samples; 0: what the machine spares beside the compute threads */
    int skip_bad;        /* bad files skipped and counted instead of failing */
    int no_dct;          /* JPEGs decoded whole always */
    int nmean, nstd;     /* given normalisation: mean[nmean], std[nstd] (0: the training set's) */
    float mean[4], std[4];
} bfit_img_opts;
/* The loader threads for opts: as given, else the cores less the compute
 * threads (at least 1). */
int bfit_img_loader_threads(const bfit_img_opts *o, int compute_threads);

/* A folder of class folders holding .jpg/.jpeg/.png files, or a list file
 * of `path,label` lines (label: a class index or a name), numbered as
 * torchvision's ImageFolder does. Only the paths are read here; samples
 * are decoded and transformed to o->img_c x img_h x img_w when taken.
 * BFIT_EIO / BFIT_EFORMAT naming the folder or file:line. */
int bfit_dataset_load_images(const char *spec, const bfit_data_opts *o, bfit_dataset **out);
int bfit_dataset_is_images(const bfit_dataset *d);
/* Class c's name (a folder's name, a list's label), NULL for classes without names (IDX, CSV, tokens). */
const char *bfit_dataset_class_name(const bfit_dataset *d, int c);
/* A test set's classes by the names a model was trained on (names[0..n),
 * by index: the training folder's, or the weights' `classes`): each of d's
 * class names must be among them, and its labels become their indices (a
 * test folder of some of the training classes is labelled as the model
 * learned them, not by its own sorted order). Nothing changes for data
 * without names: not images, a list of class indices, or names that are
 * all "0".."n-1" (a list of indices trained them) against d's non-numbers.
 * BFIT_EINVAL naming d, the unknown classes and whose names (`whose`). */
int bfit_dataset_match_classes(bfit_dataset *d, const char *const *names, int n, const char *whose);
/* The file of sample i (dataset order), NULL if not images. */
const char *bfit_dataset_image_path(const bfit_dataset *d, int64_t i);
/* Bad files skipped so far (--skip-bad-images). */
int64_t bfit_dataset_images_skipped(const bfit_dataset *d);

/* ---- token data (src/data/tokens.c; docs/data.md) ------------------------- */
#define BFIT_TOKENS_MAGIC 20240520 /* llm.c's: header[0] of a token file */
/* The `kjv` data set's text (scripts/kjv.sh); the environment's BFIT_KJV
 * overrides it. */
#define BFIT_KJV_TEXT "/usr/local/share/batchfit/kjv.txt"
/* 1 if path is a token file (its first 4 bytes, the magic, say so). */
int bfit_tokens_is_file(const char *path);
/* Read a token file: *ids (malloc'd, *count of them), *vocab (the header's,
 * or the largest id + 1 when it says 0). BFIT_EIO / BFIT_EFORMAT naming the
 * file and what is wrong (header, size, an id outside the vocabulary). */
int bfit_tokens_read(const char *path, int32_t **ids, int64_t *count, int *vocab);
/* Write one (atomically): uint16 ids when vocab <= 65536, else uint32. */
int bfit_tokens_write(const char *path, const int32_t *ids, int64_t count, int vocab);
/* The train part (train 1), test part (0) or all (-1) of n ids in memory,
 * split as a token file's: a malloc'd copy, *vocab the largest id + 1 (a
 * header's vocabulary 0). An id below 0 is refused, naming its position. */
int bfit_tokens_part(const char *source, const int32_t *ids, int64_t n, int train, int32_t **part, int64_t *count,
                     int *vocab);
/* Byte-level tokens of n bytes of text: the train part (train 1) or the
 * test part (0): lines in blocks of 100, every 20th block to test (5%). */
int bfit_text_tokens(const unsigned char *b, size_t n, int train, int32_t **ids, int64_t *count);
/* How a text's test part is made, said where it is too short. */
#define BFIT_TEXT_TEST_PART "a text's test part is every 20th block of 100 lines"
/* A text's lines and a token file's ids go to the test part a block in
 * this many; a token file's blocks are of BFIT_TOKENS_BLOCK ids (a text's
 * rule, ids for lines), read a block at a time. */
#define BFIT_TEST_EVERY 20
#define BFIT_TOKENS_BLOCK 4096
#define BFIT_TOKENS_TEST_PART "a token file's test part is every 20th block of 4096 ids"
/* Token data sets: samples of seq ids (shape seq x 1, int32 in the sample
 * buffer) with the seq ids that follow as their labels; vocab classes. */
int bfit_dataset_from_tokens(const char *source, const int32_t *ids, int64_t n, int vocab, int seq,
                             bfit_dataset **out);
/* A token file's train part (train 1), test part (0) or all of it (-1),
 * read a block at a time into the data set's ids. */
int bfit_dataset_load_tokens(const char *path, int train, int seq, bfit_dataset **out);
/* The same of a stream of n ids in memory (bfit_tokens_part), named source. */
int bfit_dataset_token_stream(const char *source, const int32_t *ids, int64_t n, int train, int seq,
                              bfit_dataset **out);
/* A text file as bytes (256 ids), its train or test part. */
int bfit_dataset_load_text(const char *path, int train, int seq, bfit_dataset **out);
/* Variable-length samples: documents ending with id sep (a line and its
 * newline), each cut into pieces of at most seq tokens (a piece's labels
 * are the ids after it, so no token is lost), padded to seq with id 0 and
 * label -1. A document of one token has nothing to predict: none. */
int bfit_dataset_token_lines(const char *source, const int32_t *ids, int64_t n, int vocab, int seq, int32_t sep,
                             bfit_dataset **out);
/* A text file's lines as variable-length byte samples (its train or test part). */
int bfit_dataset_load_text_lines(const char *path, int train, int seq, bfit_dataset **out);
/* The bytes of n text files one after another (a newline after each that lacks one), as a text's: the
 * train (1) or test (0) part of their lines counted across the files, or all (-1). */
int bfit_text_files_tokens(const char *const *paths, int n, int train, int32_t **ids, int64_t *count);
/* A data set of a text's ids (taken: freed on failure), named name: windows of seq, or its lines. */
int bfit_dataset_text_take(const char *name, int32_t *ids, int64_t count, int train, int seq, int lines,
                           bfit_dataset **out);
/* A folder of texts: every .txt file in it and its subfolders (hidden ones left out), in the order of
 * their paths, as one text (bfit_text_files_tokens), for token models. */
int bfit_dataset_load_text_dir(const char *dir, int train, int seq, int lines, bfit_dataset **out);
/* A folder of class folders of texts, for a classifier of token ids: each .txt file one sample of its
 * first seq bytes (256 ids), padded with id -1 (the sequence's end), labelled by its class folder; the
 * classes numbered as an image folder's (sorted names, hidden folders left out), a class's texts in the
 * order of their paths; train 1: all but every 20th text of each class, 0: those, -1: all. BFIT_EFORMAT
 * naming the folder or file (no class folders, a class without texts, an empty text). */
int bfit_dataset_load_text_classes(const char *dir, int train, int seq, bfit_dataset **out);
/* 1 for texts with a class each (bfit_dataset_load_text_classes): token ids, one label a sample. */
int bfit_dataset_is_text_classes(const bfit_dataset *d);
/* Whether dir holds a .txt file that bfit_dataset_load_text_dir would read. */
int bfit_text_dir_has_text(const char *dir);
/* A shuffling stream over variable-length samples sorts each run of this
 * many samples of its order by length, longest first (docs/data.md). */
#define BFIT_LEN_BUCKET 1024
/* Real tokens of sample i (seq for fixed windows). */
int bfit_dataset_sample_len(const bfit_dataset *d, int64_t i);
/* The most consecutive samples, in any order, that it can take for their
 * real tokens to reach `tokens` (>= 1): as many of the shortest as reach
 * it, at most all of them; *most gets it. What a step of a token budget
 * may need to stage (docs/train.md). BFIT_EINVAL for data without tokens. */
int bfit_dataset_most_for_tokens(const bfit_dataset *d, int64_t tokens, int64_t *most);
/* Labels per sample: 1, or seq for token data (a next token each; texts with classes: 1). */
int bfit_dataset_label_len(const bfit_dataset *d);
/* Token data: the first id at or above vocab (*id, at *at in the data's
 * ids; *at -1 if none) and the largest id (*most). */
void bfit_dataset_ids_above(const bfit_dataset *d, int vocab, int64_t *at, int32_t *id, int32_t *most);
/* A classifier's token data: the first id whose token type (a sentence
 * pair's segment, in its high bits) is types or more (*type set), -1 if none. */
int64_t bfit_dataset_type_above(const bfit_dataset *d, int types, int *type);
/* 1 for token data (sequences of token ids), 0 for samples of values. */
int bfit_dataset_is_tokens(const bfit_dataset *d);
/* Whether a model of nclasses scores has one for every label of d: its classes, or for token data (whose
 * labels are its ids: a text's 256 possible bytes need not all occur) every id it holds. */
int bfit_dataset_labels_fit(const bfit_dataset *d, int nclasses);

int64_t bfit_dataset_count(const bfit_dataset *d);
bfit_shape bfit_dataset_shape(const bfit_dataset *d);
int bfit_dataset_classes(const bfit_dataset *d);
/* Where it came from (a path or name), for logs. */
const char *bfit_dataset_source(const bfit_dataset *d);
/* Label of sample i (0 <= i < count), in dataset order. */
int32_t bfit_dataset_label(const bfit_dataset *d, int64_t i);

/* Per-channel mean and standard deviation (population) of the sample values
 * as the stream sees them before normalisation (IDX pixels /255; CSV: each
 * feature is a channel). mean and std hold shape.c floats each. A channel
 * with zero spread gets std 1 so normalising it is harmless. Compute these on
 * the training set and pass them to the streams of both train and test. */
int bfit_dataset_norm_stats(const bfit_dataset *d, float *mean, float *std);

/* The value of the largest magnitude as the model sees it: (x - mean[c]) /
 * std[c] with mean/std given (NULL: x as stored, pixels / 255), with its
 * sample and its element's index in the sample; 0 for token data. */
void bfit_dataset_largest(const bfit_dataset *d, const float *mean, const float *std, double *v, int64_t *sample,
                          int64_t *elem);

void bfit_dataset_free(bfit_dataset *d);

/* ---- the sample stream --------------------------------------------------- */
typedef struct bfit_stream bfit_stream;

/* A position: the next sample taken is the pos-th of epoch's order. */
typedef struct bfit_cursor {
    int64_t epoch;
    int64_t pos;
} bfit_cursor;

/* BERT's masked-LM objective on token data (data/sample.c): a share p of
 * each sequence's tokens is predicted, their labels the ids, the other
 * real tokens' BFIT_LABEL_UNSCORED; of those predicted 80% become mask_id
 * in the input, 10% a random id below vocab, 10% stay. p 0: next-token
 * labels. */
#define BFIT_MLM_SPECIAL_MAX 32
typedef struct bfit_mlm {
    double p;
    int32_t mask_id;
    int32_t vocab;
    int nspecial; /* ids never masked: [CLS], [SEP], [PAD] */
    int32_t special[BFIT_MLM_SPECIAL_MAX];
    int max_pred; /* a sequence's draws beyond this many are not taken (the head's gathered rows); 0: all */
} bfit_mlm;

/* The special ids as text, "101,102" (mlm.c): BFIT_EINVAL naming the
 * column of what is not an id; "" none. */
int bfit_mlm_special_parse(const char *t, bfit_mlm *m);
void bfit_mlm_special_text(const bfit_mlm *m, char *buf, size_t len);
/* The masked tokens a head gathers from a sequence of T at share p: the
 * mean p T plus 4 standard deviations, rounded up, and one, at most T (37
 * of 128 at p 0.15): a sequence draws more about once in 50,000 (T 32 to
 * 512). */
int bfit_mlm_max_pred(double p, int T);

typedef struct bfit_stream_cfg {
    uint64_t seed;          /* shuffle and augmentation */
    int shuffle;            /* 1: a permutation per epoch; 0: dataset order (evaluation) */
    int max_take;           /* largest n ever passed to take; sizes the staging buffers */
    int prefetch;           /* 1: a background thread prepares the next take */
    int aug_crop_pad;       /* images: random crop after zero padding by this many pixels */
    int aug_hflip;          /* images: flip left-right with probability 1/2 */
    int aug_rrc;            /* image folders: RandomResizedCrop instead of resize + centre crop */
    int loader_threads;     /* threads making samples (with prefetch); 0: one */
    const float *norm_mean; /* shape.c values, copied; NULL: no normalisation */
    const float *norm_std;  /* shape.c values, each > 0; NULL together with norm_mean */
    int64_t epoch_len;      /* samples an epoch takes, when fewer than the set's (0: all): the length buckets
                               of variable-length samples are cut there, so the epoch is a random subset */
    int bad_unscored;       /* image folders skipping bad files: an unreadable file's sample is blank with
                               label -1, which no loss scores (an evaluation), not the next readable file's */
    bfit_mlm mlm;           /* token data: masked-LM labels (p > 0) instead of the next ids */
} bfit_stream_cfg;

/* Make a stream over d at epoch 0, position 0. d must outlive the stream. All
 * buffers (permutation, staging for max_take samples) are allocated here; take
 * allocates nothing. Fails with BFIT_EINVAL for a bad config (augmentation on
 * non-image data, max_take < 1, std <= 0), BFIT_ENOMEM, or BFIT_ESTATE if the
 * prefetch thread cannot start. */
int bfit_stream_new(const bfit_dataset *d, const bfit_stream_cfg *cfg, bfit_stream **out);

/* Copy the next min(n, remaining in epoch) samples into x (n * numel floats,
 * NCHW; int32 ids for token data) and their labels into y (n values; n * seq
 * for token data), set *got, and advance. At the end
 * of an epoch *got is 0; call bfit_stream_next_epoch to go on. 1 <= n <=
 * max_take, else BFIT_EINVAL. */
int bfit_stream_take(bfit_stream *s, int n, float *x, int32_t *y, int *got);

/* Move to position 0 of the next epoch (whatever remains of this one is
 * skipped). */
void bfit_stream_next_epoch(bfit_stream *s);

/* The cursor now; seek back to it to take the same samples again (retry
 * after an out-of-memory), or save it in a checkpoint. */
bfit_cursor bfit_stream_tell(const bfit_stream *s);

/* Jump to c (epoch >= 0, 0 <= pos <= count); BFIT_EINVAL otherwise, with the
 * stream unchanged. Samples taken after a seek are the same as those first
 * taken from that cursor. */
int bfit_stream_seek(bfit_stream *s, bfit_cursor c);

/* How many of the next samples of this epoch, at most limit, it takes for
 * their real tokens to reach `tokens`: the fewest that do, or all there
 * are (up to limit) if they do not. Takes nothing. */
int bfit_stream_count_tokens(const bfit_stream *s, int64_t tokens, int limit);

/* Samples left in the current epoch. */
int64_t bfit_stream_remaining(const bfit_stream *s);

/* Total wall seconds callers have spent inside take (waiting for prefetched
 * samples or making them): the data side of a bottleneck report. */
double bfit_stream_wait_seconds(const bfit_stream *s);

/* How many times the stream's decoding buffers grew (all threads): after
 * the first samples of the largest size, 0 more per take (the test of "no
 * allocation per sample"). */
int64_t bfit_stream_scratch_grown(const bfit_stream *s);
/* Loader threads running (0: samples are made by the caller). */
int bfit_stream_loader_threads(const bfit_stream *s);
/* The samples the loader threads have made so far and the seconds of their
 * time it took (the caller's help not counted): threads x samples / seconds
 * is the rate they make samples at while busy. Image folders only, where
 * decoding can be slower than the device (0 and 0 for data in memory, or
 * without threads). */
void bfit_stream_loader_work(bfit_stream *s, int64_t *samples, double *seconds);

/* Stops the loader threads and frees the stream (not the data set). */
void bfit_stream_free(bfit_stream *s);

#endif
