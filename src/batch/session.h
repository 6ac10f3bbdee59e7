/* session.h - what a run on a model and a data set holds: the arena, the
 * device, the model, the data sets and their normalisation. One set-up for
 * training, evaluation and `find`, in two phases so a caller can check that
 * the model fits before it loads data. */
#ifndef BFIT_SESSION_H
#define BFIT_SESSION_H

#include "data/data.h"
#include "nn/model.h"

typedef struct bfit_session_cfg {
    const char *model;                        /* a preset name or a spec file */
    const char *data;                         /* a data set name or path, or "synthetic" */
    const char *test_data;                    /* the test split from here instead (NULL: data's) */
    bfit_csv_header csv_header;               /* a CSV file's first row */
    const bfit_dataset *given_train, *given_test; /* use these instead of loading `data` */
    int want_train, want_test;                /* splits to have (train is loaded anyway to normalise) */
    bfit_device *device;                      /* use this device (not owned); NULL: open one */
    const char *device_name;                  /* else open this (bfit_device_open; NULL: auto) */
    bfit_conv_algo conv_algo;                 /* a GPU's convolution algorithms (auto opens fastest) */
    bfit_dtype precision;                     /* the run's: --device auto chooses a device that runs the
                                                 model in it */
    const bfit_host_alloc *host;              /* CPU device blocks from here (NULL: aligned_alloc) */
    uint64_t memory;                          /* arena capacity; 0: what the device has free */
    int threads;                              /* CPU threads; 0: OpenMP's setting */
    int normalize;                            /* per-channel mean/std of the training split */
    const float *given_mean, *given_std;      /* normalise with these (C values each) instead */
    uint64_t seed;                            /* synthetic data */
    const bfit_img_opts *img;                 /* image folders' options (NULL: defaults) */
    int seq_max;                              /* token models: variable-length lines of at most this many
                                                 tokens (the model's length); 0: fixed windows */
    int seq;                                  /* token models: windows of this many tokens (the model's
                                                 length); 0: the model's */
    int attention;                            /* BFIT_ATTN_* (nn/zoo.h): the attention layers' storage for
                                                 backward */
    const bfit_mlm *mlm;                      /* token models: masked-LM labels if mlm->p > 0 (NULL: the
                                                 next tokens) */
    int tokens_whole;                         /* a token file as data is all train and all test, as before
                                                 it had parts (bfit_data_opts.tokens_whole) */
    const char *const *class_names;           /* the classes the model was trained on (the weights'), to
                                                 match a loaded test set's by name; NULL: the training
                                                 set's, when it is an image set */
    int nclass_names;
    const char *class_names_from;             /* whose they are, for messages */
} bfit_session_cfg;

typedef struct bfit_session {
    bfit_arena *arena;
    bfit_device *dev;
    bfit_device *dev_own;                     /* dev, when the session opened it */
    bfit_graph_desc g;
    bfit_model *M;
    bfit_dataset *train_own, *test_own;
    const bfit_dataset *train, *test;         /* in use: owned or given; NULL if not wanted */
    float *mean, *std;                        /* NULL without normalisation */
    char device_why[512];                     /* which device, and why (--device auto's reason) */
    int test_is_data;                         /* test_data names data (bfit_dataset_same): the test is
                                                 data's test split, as without test_data */
} bfit_session;

/* Phase one: device, arena, and the model (no device memory yet). */
int bfit_session_open_model(bfit_session *s, const bfit_session_cfg *c);
/* A masked LM (share p > 0 of a model scoring every token, its attention
 * bidirectional) runs its head at the tokens it masks only: g gets the
 * gather (nn/head.c), 1. Other models stay as they are: 0, or with refuse
 * (the model's name) BFIT_EINVAL saying why it is no masked LM (a run
 * refuses later, its data named too: check_mlm). < 0: an error. */
int bfit_session_gather_head(bfit_graph_desc *g, double p, const char *refuse);
/* A stream's masked-LM settings: given's, random ids drawn below the
 * model's vocabulary (or the data's, for a model not led by an embed), the
 * draws capped at the rows its head gathers; off unless given->p > 0 and d
 * is a language model's token data. */
void bfit_session_mlm(const bfit_mlm *given, const bfit_model *M, const bfit_dataset *d, bfit_mlm *out);
/* Phase two: the data sets, checked against the model's input shape and
 * classes, and the normalisation statistics of the training split. */
int bfit_session_open_data(bfit_session *s, const bfit_session_cfg *c);
/* Open the session's device again with other convolution algorithms and
 * build the model on it (nothing of it must be allocated yet): how a run
 * resolves conv_algo auto. */
int bfit_session_reopen(bfit_session *s, const bfit_session_cfg *c, bfit_conv_algo algo);
/* The samples of "synthetic" data of this input shape (images; a token
 * model's are windows): 512, fewer where they would pass 512 MiB (at least 8). */
int bfit_synthetic_count(bfit_shape input);
/* Release everything (safe on a zeroed or half-opened session). */
void bfit_session_close(bfit_session *s);

#endif
