/* batchfit.h - the public API of libbatchfit: the whole of it.
 *
 * The command-line program, the benchmarks, the examples and the Python
 * package are built against this header alone, as any program is
 * (docs/embedding.md). Every function that can fail returns an int status
 * (BFIT_OK or a negative BFIT_E* code) and leaves a message in
 * bfit_errmsg(); the library never exits or aborts on a recoverable
 * condition, and running out of memory is one.
 *
 * How the API can grow without breaking a program built against an older
 * header (the ABI):
 *   - Configurations and results are opaque objects. A configuration is
 *     set option by option, by the names the command line uses
 *     (bfit_config_set(c, "batch", "auto")); the library owns every
 *     default and turns an unset option into it. A result is read as JSON
 *     or by name. New options and new result fields are new names, never a
 *     new layout.
 *   - The few plain structs that cross the boundary (what a step did, an
 *     evaluation, a batch decision, the controller's configuration and
 *     observations) start with a `size` field: the caller sets it to
 *     sizeof the struct it was built with (BFIT_SIZED), the library reads
 *     and writes only that many bytes and treats fields past them as their
 *     defaults. Fields are only ever appended.
 *   - Only the functions declared here are exported from libbatchfit.so.
 */
#ifndef BATCHFIT_H
#define BATCHFIT_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define BFIT_API __attribute__((visibility("default")))
#else
#define BFIT_API
#endif

/* ---- version ------------------------------------------------------------- */
#define BFIT_VERSION_MAJOR 0
#define BFIT_VERSION_MINOR 3
#define BFIT_VERSION_PATCH 0
#define BFIT_VERSION_STRING "0.3.0"
/* MAJOR * 10000 + MINOR * 100 + PATCH, as compiled in */
#define BFIT_VERSION_NUMBER (BFIT_VERSION_MAJOR * 10000 + BFIT_VERSION_MINOR * 100 + BFIT_VERSION_PATCH)

/* The library's version at run time ("0.3.0"), and as a number, to compare
 * with the BFIT_VERSION_NUMBER a program was built with. */
BFIT_API const char *bfit_version(void);
BFIT_API int bfit_version_number(void);

/* A struct that crosses the boundary, its size field set: a program built
 * against an older header passes a smaller size, and fields past it are
 * their defaults. */
#define BFIT_SIZED(T) ((T){.size = sizeof(T)})

/* ---- status codes and errors ---------------------------------------------- */
enum {
    BFIT_OK = 0,
    BFIT_ENOMEM = -1,   /* device memory (the arena's capacity) or host memory: recoverable */
    BFIT_EINVAL = -2,   /* a bad argument, option or input */
    BFIT_EIO = -3,      /* the file system */
    BFIT_EFORMAT = -4,  /* malformed file contents */
    BFIT_EDEVICE = -5,  /* a backend failure (oneDNN, CUDA) */
    BFIT_ESTATE = -6,   /* a call not valid in the object's current state */
    BFIT_ESTOPPED = -7, /* a run stopped on request (a stop flag, bfit_run_request_stop) */
    BFIT_EPEER = -8     /* data-parallel: another process of the group failed, or the group's
                           communication did (docs/distributed.md) */
};

/* The message of the last failure on this thread ("" if none). */
BFIT_API const char *bfit_errmsg(void);
/* The option the last failure is about ("" if none), spelt with '_'
 * ("micro_batch"): the message then reads "micro_batch: ...", and a front
 * end may name it its own way (the CLI says --micro-batch). */
BFIT_API const char *bfit_errfield(void);
/* A short name for a status code ("out of memory", ...). */
BFIT_API const char *bfit_strerror(int code);

/* ---- sizes ----------------------------------------------------------------- */
/* "512MiB", "1.5GiB", "8GB", "4096B" into bytes: binary units (KiB, MiB,
 * GiB, TiB) are powers of 1024, decimal ones (kB, MB, GB, TB) of 1000, a
 * bare number is bytes (the "memory" option refuses one: "10" is never
 * meant as 10 bytes there). BFIT_EINVAL saying what was wrong (empty,
 * negative, an unknown unit, a fraction of a byte, 2^64 bytes or more). */
BFIT_API int bfit_parse_size(const char *text, uint64_t *out);
/* Bytes for people: "1.50 GiB", "512 B". Returns buf. */
BFIT_API char *bfit_format_size(uint64_t bytes, char *buf, size_t len);

/* ---- the configuration ------------------------------------------------------ */
/* Everything a plan, a find, a training run or an evaluation is asked to
 * do, set by option names: those of the command line without the dashes
 * ("micro-batch" or "micro_batch", `batchfit train --help` lists them and
 * docs/embedding.md says which command reads which). One configuration
 * may serve several commands; each reads the options it knows and refuses
 * (BFIT_EINVAL naming it) an option set for another command only where
 * that would silently change nothing the caller expects. */
typedef struct bfit_config bfit_config;

/* A configuration with every option at its default; NULL if out of host
 * memory. */
BFIT_API bfit_config *bfit_config_new(void);
BFIT_API void bfit_config_free(bfit_config *c);
/* A copy (callbacks and pointers included); NULL if out of host memory. */
BFIT_API bfit_config *bfit_config_copy(const bfit_config *c);
/* Set option `name` from its text. A flag ("augment", "no-normalize",
 * "nesterov") takes NULL, "", "1", "true", "yes", or "0", "false", "no".
 * BFIT_EINVAL for an unknown name (with the closest known one) or a bad
 * value, saying what would be right; errfield is the option. The option
 * counts as given: a resumed run compares what was given with its
 * checkpoint. */
BFIT_API int bfit_config_set(bfit_config *c, const char *name, const char *value);
/* The same from numbers (formatted exactly and set as text). */
BFIT_API int bfit_config_set_int(bfit_config *c, const char *name, int64_t value);
BFIT_API int bfit_config_set_double(bfit_config *c, const char *name, double value);
/* The option's value as text (its default if not given) into buf;
 * BFIT_EINVAL for an unknown name. */
BFIT_API int bfit_config_get(const bfit_config *c, const char *name, char *buf, size_t len);
/* The option names, one by one (i from 0; NULL past the last), with what
 * they take ("N", "SIZE", "auto|N", "" for a flag) and the commands that
 * read them ("plan find train eval"). */
BFIT_API const char *bfit_config_option(int i, const char **takes, const char **commands);

/* Check the options a command reads ("plan", "find", "train", "eval") as
 * the command would before doing anything, without doing it: BFIT_EINVAL
 * naming the option for an option the command does not read, options
 * that contradict each other, a required one missing, or a model that
 * names nothing (an unknown preset, a file that does not exist). */
BFIT_API int bfit_config_check(const bfit_config *c, const char *command);

/* Progress and notes for people: a progress line on a terminal, plain lines
 * otherwise. NULL (the default): quiet. */
BFIT_API int bfit_config_set_progress(bfit_config *c, FILE *human);
/* Stop at the next micro-step boundary when *flag becomes non-zero (a
 * signal handler sets it); the run is left at its last step boundary, so a
 * checkpoint can still be written. The result's "stop_flag" is the value
 * that stopped it; data-parallel, a stop on one rank stops every rank at the
 * same step boundary and their results carry that rank's value. */
BFIT_API int bfit_config_set_stop_flag(bfit_config *c, volatile sig_atomic_t *flag);

/* ---- callbacks -------------------------------------------------------------- */
/* What one optimizer step did. */
typedef struct bfit_step_info {
    size_t size;                /* BFIT_SIZED */
    int64_t step;               /* 0-based, of the run */
    int epoch;                  /* 0-based */
    int batch;                  /* samples in the step (E, or what was left of the epoch); with
                                   batch-tokens its tokens that count */
    int sequences;              /* batch-tokens: the sequences those tokens came in (0 otherwise) */
    int m, k;                   /* micro-batch and micro-steps */
    double loss;                /* mean over the step's samples */
    double lr;                  /* the learning rate used */
    double seconds;             /* wall time of the step */
    double noise_scale;         /* the gradient noise scale estimate after it (0: none yet) */
    int skipped;                /* loss scaling: the gradients overflowed, no update was made */
    double loss_scale;          /* the scale the step's backward used (0: no scaling) */
    uint64_t mem, capacity;     /* device bytes held and the capacity after it */
    int epoch_end;              /* the step finished its epoch: evaluate now if wanted */
} bfit_step_info;

/* An evaluation on the test data. */
typedef struct bfit_eval_info {
    size_t size;                /* BFIT_SIZED */
    int epoch;                  /* epochs finished */
    int64_t step;
    double train_loss;          /* mean over the epoch's samples */
    double test_loss, test_acc;
    int64_t samples;
    int64_t counted;            /* what the means are over: samples scored (an unreadable image skipped is not:
                                   samples - counted), or a token model's tokens that count */
    double epoch_seconds;
    int m;                      /* the evaluation micro-batch */
} bfit_eval_info;

/* Why a batch decision differs from the previous step's. */
typedef enum {
    BFIT_REASON_NONE = 0,    /* nothing changed */
    BFIT_REASON_START,       /* the first decision */
    BFIT_REASON_OOM,         /* an allocation failed: m shrank, the same samples retried */
    BFIT_REASON_MEM_SHRANK,  /* capacity or free memory dropped: m shrank before failing */
    BFIT_REASON_MEM_FREED,   /* memory came back: m grew (hysteresis and throughput permitting) */
    BFIT_REASON_THROUGHPUT,  /* a smaller m that fits was measured faster */
    BFIT_REASON_SCHEDULE,    /* the batch schedule changed E */
    BFIT_REASON_NOISE,       /* adaptive mode moved E toward the gradient noise scale */
    BFIT_REASON_GOODPUT,     /* auto mode: another E (and its m) is predicted to train faster */
    BFIT_REASON_PLATEAU,     /* auto mode: the training loss stopped falling: E doubled at the same lr */
    BFIT_REASON_OPTION,      /* the micro-batch option capped m (a resume given another --micro-batch) */
    BFIT_REASON_COUNT
} bfit_batch_reason;

/* "start", "out of memory", "memory shrank", "memory freed", "throughput",
 * "schedule", "noise scale", "goodput", "plateau", "micro-batch option" ("" for
 * none). */
BFIT_API const char *bfit_batch_reason_name(bfit_batch_reason r);

/* What one optimizer step should do (the controller's decision). */
typedef struct bfit_batch_decision {
    size_t size;             /* BFIT_SIZED */
    int m;                   /* micro-batch (0 only with a BFIT_ENOMEM return) */
    int k;                   /* micro-batches in the step: ceil(E / m) */
    int last;                /* the last one's size: E - (k - 1) m, in [1, m] */
    int batch;               /* E */
    double lr_scale;         /* multiplies the scheduled lr; see bfit_controller_next */
    bfit_batch_reason reason;/* BFIT_REASON_NONE when nothing changed */
    int prev_m, prev_batch;  /* before this decision (0 at the start) */
    int split;               /* m < E: layers with batch statistics (batch norm) see
                                micro-batches, not E; the trainer warns once */
    char why[240];           /* a sentence for people: "memory shrank: micro-batch 90 -> 50 (...)" */
    /* goodput changes: the numbers behind them (0 otherwise) */
    double noise_scale;      /* the smoothed noise scale the choice used */
    double tput_old, tput_new;  /* predicted samples/s at the old and the new (E, m) */
    double eff_old, eff_new;    /* statistical efficiency per sample, relative to E0 */
    /* a change the compute alone would have made but the loader's speed
     * does not: said once, when it starts (0 and "" otherwise; reason stays
     * BFIT_REASON_NONE unless something else changed) */
    double loader_rate;      /* samples/s the loader makes, the bound */
    char held[240];          /* "the loader bounds the speed at 812 samples/s: staying at batch 128 (...)" */
} bfit_batch_decision;

typedef void (*bfit_step_fn)(void *ud, const bfit_step_info *s);
typedef void (*bfit_eval_fn)(void *ud, const bfit_eval_info *e);
typedef void (*bfit_change_fn)(void *ud, const bfit_batch_decision *d, int64_t step);
/* One line of the event log, a JSON object ({"event":"batch_change",...}),
 * without its newline; also when no log file is written. */
typedef void (*bfit_event_fn)(void *ud, const char *json);

/* Called after every optimizer step, evaluation, batch change and event
 * (NULL: none). The structs are the library's: read what your header
 * knows. */
BFIT_API int bfit_config_set_callbacks(bfit_config *c, bfit_step_fn on_step, bfit_eval_fn on_eval,
                                       bfit_change_fn on_batch_change, bfit_event_fn on_event, void *ud);

/* ---- samples from the caller ---------------------------------------------- */
/* A program feeds its own data: samples are the model's input shape of
 * floats (NCHW), labels class indices. For a token model (`input
 * tokens=T`) a sample is T int32 token ids (in x, 4 bytes each) with T
 * labels, -1 for padding. take: the next n samples of the epoch into x and
 * labels; *got may be less than n only at the epoch's end (0 when it has
 * ended). next_epoch: start the next epoch (training); rewind: the same
 * epoch again from its first sample (evaluation). samples: in an epoch. */
typedef int (*bfit_take_fn)(void *ud, int n, float *x, int32_t *labels, int *got);
typedef int (*bfit_epoch_fn)(void *ud);
/* which: 0 the training samples, 1 the test samples. Replaces the "data"
 * (or "test-data") option; no normalisation is applied to them. A training
 * source needs test samples too (a test source, test arrays or "test-data";
 * train refuses it alone, naming "test_data"). take NULL: back to the
 * option. */
BFIT_API int bfit_config_set_source(bfit_config *c, int which, bfit_take_fn take, bfit_epoch_fn next_epoch,
                                    bfit_epoch_fn rewind, int64_t samples, void *ud);

/* Samples in the caller's memory, as a data set: which 0 trains on them
 * (replacing "data"), 1 evaluates on them (replacing "test-data"). x holds
 * n samples of sample_floats floats each, in the model's input layout
 * (NCHW; sample_floats must be the size of the model's input, 784 for
 * 1x28x28), labels n class indices from 0 (the classes are the largest +
 * 1). Unlike bfit_config_set_source, they are treated exactly as the same
 * samples read from a file: shuffled by the seed, normalised by the
 * training samples' mean and standard deviation (unless "no-normalize"),
 * augmented if asked; with training arrays and neither test arrays nor
 * "test-data", the evaluation is on the training arrays (as for a single
 * CSV file). Nothing is copied: the memory must stay alive and unchanged
 * until every command given this configuration (or a copy of it) has
 * returned and every run made from it (bfit_run_new) has been freed.
 * x and labels NULL: back to the option. Read by train and eval (eval scores
 * the test arrays, or the training arrays where only those are given, with
 * the normalisation saved in the weights; other commands refuse them); the
 * model must be given (its input shape). BFIT_EINVAL naming "data" or
 * "test_data". */
BFIT_API int bfit_config_set_arrays(bfit_config *c, int which, const float *x, const int32_t *labels, int64_t n,
                                    int64_t sample_floats);

/* A token's segment (BERT's token_type_ids: 0 the first sentence of a pair,
 * 1 the second) rides in the high bits of its id, id | type <<
 * BFIT_TOKEN_TYPE_SHIFT, for a model with token types (an embed layer's
 * `types`, an ONNX export's token_type_ids input): ids below 2^24, types
 * below the model's count. Type 0 is the id itself. */
#define BFIT_TOKEN_TYPE_SHIFT 24
#define BFIT_TOKEN_ID_MASK ((1 << BFIT_TOKEN_TYPE_SHIFT) - 1)
#define BFIT_TOKEN_ID(v) ((v) & BFIT_TOKEN_ID_MASK)       /* of an id that is not -1 (padding) */
#define BFIT_TOKEN_TYPE(v) ((v) >> BFIT_TOKEN_TYPE_SHIFT)

/* A language model's labels, one a token: the id it should predict, or
 * BFIT_LABEL_PAD after a sequence's last token, or BFIT_LABEL_UNSCORED at
 * a real token whose prediction is not scored (a masked LM's unmasked
 * tokens: the sequence still runs to its last real token, whose keys a
 * bidirectional attention sees). */
#define BFIT_LABEL_PAD (-1)
#define BFIT_LABEL_UNSCORED (-2)

/* Token ids in the caller's memory, for a classifier of token ids (a token
 * model whose scores are one vector per sequence: `select 0` or `gap`, then
 * `linear N`), as bfit_config_set_arrays's samples are: ids holds n
 * sequences of T int32 ids (T the model's), each padded after its last
 * token with -1 (a sequence of fewer than T tokens: the model masks its
 * padding), labels n class indices from 0; a sentence pair's second
 * segment is its ids | 1 << BFIT_TOKEN_TYPE_SHIFT (a model with token
 * types). They train exactly as the same texts in a folder of class
 * folders of texts do (docs/data.md), read in place, not copied. labels NULL: sequences without classes,
 * each its own sample for a masked LM ("mask-tokens"), labelled by the tokens it masks (the vocabulary the
 * largest id + 1). ids and labels NULL: back to the option. BFIT_EINVAL
 * naming "data" or "test_data" (an id below -1, -1 before a token, a
 * sequence of padding alone: when the run starts, naming the sequence). */
BFIT_API int bfit_config_set_token_arrays(bfit_config *c, int which, const int32_t *ids, const int32_t *labels,
                                          int64_t n, int64_t T);

/* Token ids with a class a token, for a token classifier (named entities,
 * parts of speech: transformers' *ForTokenClassification, a model whose
 * scores are one vector per token over K classes): ids as in
 * bfit_config_set_token_arrays (n sequences of T, -1 after each one's last
 * token), tags n * T int32, a token's class from 0 or a negative number
 * where it is not scored (transformers' -100: a word's later pieces,
 * [CLS], [SEP]); after a sequence's last token they are not read. The
 * classes are the largest tag + 1. Read in place, not copied, shuffled
 * and padded as the token arrays are; the loss and accuracy are over the
 * scored tokens. ids and tags NULL: back to the option. BFIT_EINVAL naming
 * "data" or "test_data" (the ids' errors, no token with a class: when the
 * run starts). */
BFIT_API int bfit_config_set_token_tags(bfit_config *c, int which, const int32_t *ids, const int32_t *tags,
                                        int64_t n, int64_t T);

/* A language model's token data in the caller's memory: n int32 ids, one
 * stream cut into samples of the model's T ids, each labelled with the T
 * ids that follow, exactly as the same ids in a token file (docs/data.md,
 * "Token files"): as the training data (which 0) its train part (every
 * 20th block of 4096 ids held out), tested on its test part unless test
 * data is given; as the test data (1) read whole. The vocabulary is the
 * largest id + 1 (ids from 0). Copied when a run starts (its part), read
 * until then. ids NULL: back to the option. BFIT_EINVAL naming "data" or
 * "test_data" (an id below 0, too few ids for one sample, a model not of
 * token ids: when the run starts, naming the position). */
BFIT_API int bfit_config_set_token_stream(bfit_config *c, int which, const int32_t *ids, int64_t n);

/* A host allocator for the CPU device's memory blocks (Lua's lua_Alloc):
 * NULL functions mean aligned_alloc/free. A block it refuses is out of
 * memory (the run shrinks its micro-batch, or fails with BFIT_ENOMEM).
 * Checking mode (BFIT_DEVICE_CHECK=1) takes guarded mappings instead. */
typedef void *(*bfit_alloc_fn)(void *ud, size_t size, size_t align);
typedef void (*bfit_free_fn)(void *ud, void *p);
BFIT_API int bfit_config_set_allocator(bfit_config *c, bfit_alloc_fn alloc, bfit_free_fn free_fn, void *ud);

/* ---- devices --------------------------------------------------------------- */
/* A compute device: the CPU (oneDNN) or, where built, a CUDA GPU. Its
 * memory is opaque to the host and reached only through the library. */
typedef struct bfit_device bfit_device;

/* Open the device the configuration names (option "device": cpu, cuda,
 * cuda:N, or auto: with "model" given, the first GPU when it runs every op
 * of the model in its "precision", else the CPU; without, the first GPU),
 * with its "threads" and "conv-algo"; c may be NULL (defaults).
 * BFIT_EDEVICE saying why a device cannot be used. */
BFIT_API int bfit_device_new(const bfit_config *c, bfit_device **out);
BFIT_API void bfit_device_free(bfit_device *d);
/* "cpu", "cuda:0". */
BFIT_API const char *bfit_device_name(const bfit_device *d);
/* Free and total bytes as the device sees them (a GPU: other processes
 * included; the CPU: MemAvailable and MemTotal). */
BFIT_API int bfit_device_memory(bfit_device *d, uint64_t *free_bytes, uint64_t *total_bytes);
/* Train and plan on this device (not owned: free it after the runs that
 * use it) instead of opening one. */
BFIT_API int bfit_config_set_device(bfit_config *c, bfit_device *d);

/* ---- results ------------------------------------------------------------------- */
/* What a plan, a find, a training run or an evaluation found: a JSON
 * object (docs/embedding.md lists the fields of each), its figures by name,
 * and the text the command line prints. Made also when a command fails
 * part-way, as far as it got (a plan of a model that does not fit says by
 * how much). */
typedef struct bfit_result bfit_result;

BFIT_API void bfit_result_free(bfit_result *r);
/* The whole result as one line of JSON (owned by r). */
BFIT_API const char *bfit_result_json(const bfit_result *r);
/* A number by its path in the JSON ("test_accuracy", "largest.batch",
 * "plans.1.peak"); NaN if there is none there. */
BFIT_API double bfit_result_number(const bfit_result *r, const char *path);
/* A string by its path; NULL if there is none there (owned by r). */
BFIT_API const char *bfit_result_string(const bfit_result *r, const char *path);
/* Write the text for people (the tables and lines `batchfit` prints). */
BFIT_API int bfit_result_print(const bfit_result *r, FILE *f);

/* ---- the commands ------------------------------------------------------------- */
/* Each takes the configuration, and sets *out to a new result (free it)
 * when there is anything to say, also on failure; *out is NULL only when
 * nothing could be done (a bad option, out of host memory). */

/* The memory of a training step per category, its fixed and per-sample
 * parts, the peak at the "batch" sizes asked for, and the largest batch
 * that fits "memory" (less the "margin"); with "ways", the ways to a larger
 * batch side by side. Plans only: nothing is reserved. BFIT_ENOMEM (with
 * the result) when a batch asked for, or the model, does not fit: the
 * message says by how much and what memory would fit. */
BFIT_API int bfit_plan(const bfit_config *c, bfit_result **out);
/* The largest batch that fits (planned, confirmed by real steps) and the
 * fastest (measured); with "plot", the chart as SVG. BFIT_ENOMEM when
 * nothing fits, saying what memory would. */
BFIT_API int bfit_find(const bfit_config *c, bfit_result **out);
/* Train: the steps, an evaluation after each epoch, checkpoints, the
 * weights saved. A stop on request (BFIT_ESTOPPED) or memory that did not
 * come back (BFIT_ENOMEM) writes a checkpoint first when "checkpoint" is
 * set; the result says where ("checkpoint"). */
BFIT_API int bfit_train(const bfit_config *c, bfit_result **out);
/* Evaluate saved "weights" of "model" on the test data. */
BFIT_API int bfit_evaluate(const bfit_config *c, bfit_result **out);
/* A training step timed alone: "model" at micro-batch "batch" (the whole
 * step) on random samples already on the device, the trainer's reserve,
 * forward, backward, optimizer and zeroing, "warmup" steps untimed, then
 * "repeats" timed repetitions of about "rep-seconds" each; samples/s (their
 * median), FLOPs per sample, threads. With "matmul" MxNxK instead: the
 * device's f32 matmul rate on its best case, the practical limit a step is
 * compared with (bench/). */
BFIT_API int bfit_profile(const bfit_config *c, bfit_result **out);

/* The data's loader alone, for the model of c (find's options: model, data,
 * augment, the image options): samples/s of training samples made in
 * takes of `take`, over `samples` of them, with *threads loader threads
 * (the --loader-threads default when NULL is fine). What bench/img_loader
 * compares with PyTorch's DataLoader. */
BFIT_API int bfit_loader_measure(const bfit_config *c, int take, int64_t samples, double *samples_per_s, int *threads);
/* The run report: from a run's JSON-lines event log, one self-contained
 * HTML file (charts over the steps, every batch change and warning marked,
 * the configuration and the memory plan), written atomically. BFIT_EIO if
 * the log cannot be read or the file written, BFIT_EFORMAT naming LOG:LINE
 * for a line that is not an event. */
BFIT_API int bfit_report_write(const char *log_path, const char *html_path);
/* The checkpoint a run would resume from: file_or_dir itself, or the newest
 * in the directory. BFIT_EIO if there is none. */
BFIT_API int bfit_checkpoint_find(const char *file_or_dir, char *path, size_t len);

/* ---- reading weights ------------------------------------------------------------ */
/* A safetensors file the library wrote (weights from "save", a checkpoint)
 * or any other, its tensors read by name as floats: what a program needs to
 * take the trained weights without parsing the format. */
typedef struct bfit_tensors bfit_tensors;

/* Read and check the whole file. BFIT_EIO if it cannot be read, BFIT_EFORMAT
 * naming the file and what is wrong, BFIT_ENOMEM. */
BFIT_API int bfit_tensors_open(const char *path, bfit_tensors **out);
BFIT_API void bfit_tensors_free(bfit_tensors *t);
/* Tensors in the file's order; -1 with a message for a NULL t. */
BFIT_API int bfit_tensors_count(const bfit_tensors *t);
/* Tensor i's name and dtype ("F32", "BF16", "I64", ...); NULL (with a
 * message) when i is out of range. */
BFIT_API const char *bfit_tensors_name(const bfit_tensors *t, int i);
BFIT_API const char *bfit_tensors_dtype(const bfit_tensors *t, int i);
/* Tensor i's dimensions into dims[0..max), returning how many it has
 * (0 for a scalar; more than max means dims holds the first max), or
 * BFIT_EINVAL when i is out of range. */
BFIT_API int bfit_tensors_shape(const bfit_tensors *t, int i, int64_t *dims, int max);
/* Its elements (1 for a scalar); -1 when i is out of range. */
BFIT_API int64_t bfit_tensors_numel(const bfit_tensors *t, int i);
/* Tensor i as n floats (n its element count), converted from F32, F64,
 * BF16 or F16; BFIT_EINVAL for another n or an i out of range,
 * BFIT_EFORMAT naming an integer tensor. */
BFIT_API int bfit_tensors_read(const bfit_tensors *t, int i, float *out, int64_t n);
/* A metadata value by key ("model", "normalize_mean", ...); NULL if none. */
BFIT_API const char *bfit_tensors_meta(const bfit_tensors *t, const char *key);

/* ---- a run, one optimizer step at a time ------------------------------------------ */
/* bfit_train is this loop: new, step until done (evaluating at epoch ends),
 * save, finish. */
typedef struct bfit_run bfit_run;

/* Check the configuration (BFIT_EINVAL naming the option), set up the
 * device, model, data, optimizer and controller, and log the start. */
BFIT_API int bfit_run_new(const bfit_config *c, bfit_run **out);
/* Whether the run has taken every step it will (epochs, max-steps). */
BFIT_API int bfit_run_done(const bfit_run *r);
/* One optimizer step: its micro-steps (reserving memory before each, and on
 * out-of-memory shrinking and retrying the same samples), accumulation,
 * clipping, the optimizer, the controller. info may be NULL. */
BFIT_API int bfit_run_step(bfit_run *r, bfit_step_info *info);
/* Evaluate on the test data with the micro-batch that fits what is free
 * now. info may be NULL. */
BFIT_API int bfit_run_evaluate(bfit_run *r, bfit_eval_info *info);
/* Write the weights (safetensors, with the normalisation statistics). */
BFIT_API int bfit_run_save(bfit_run *r, const char *path);
/* A checkpoint at the step boundary into the "checkpoint" directory
 * (atomically; the newest "keep" are kept); path (may be NULL) gets its
 * file name. */
BFIT_API int bfit_run_checkpoint(bfit_run *r, char *path, size_t len);
/* Ask the run to stop (another thread may call it): bfit_run_step returns
 * BFIT_ESTOPPED at the next micro-step boundary. */
BFIT_API void bfit_run_request_stop(bfit_run *r);
/* The figures so far, as bfit_train's result. */
BFIT_API int bfit_run_result(const bfit_run *r, bfit_result **out);
/* Log the end (rc BFIT_OK) or the error rc. */
BFIT_API void bfit_run_finish(bfit_run *r, int rc);
BFIT_API void bfit_run_free(bfit_run *r);

/* ---- the batch controller: micro-batch, accumulation, effective batch ------------- */
/* Pure logic over observations (docs/dynamic.md states the rules): it
 * knows nothing of tensors or models, so any training loop can use it. The
 * memory plan is a function handed in; after each optimizer step the loop
 * says what happened.
 *
 *   plan_bytes(m)  every byte a training step at micro-batch m holds on the
 *                  device, the fixed part (params, grads, optimizer) included.
 *   fixed_bytes    the part of plan_bytes that does not depend on m.
 *   capacity       the bytes this process may use now (it may change);
 *                  budget = capacity * (1 - margin).
 *   free_bytes     capacity minus every byte held outside the step's own
 *                  blocks: what the step of any m may take.
 *   m fits         plan_bytes(m) <= budget  and  plan_bytes(m) - fixed_bytes
 *                  <= free_bytes: one predicate for start, growth,
 *                  shrinking and OOM recovery. */

/* How the learning rate follows the effective batch E: scale = rule(E / E0). */
typedef enum {
    BFIT_LR_LINEAR = 0,  /* E / E0 (Goyal et al.; usual for SGD) */
    BFIT_LR_SQRT,        /* sqrt(E / E0) (usual for Adam/AdamW) */
    BFIT_LR_NONE,        /* 1 */
    BFIT_LR_ADASCALE,    /* AdaScale's gain from the noise scale B: S (B + E0) / (B + E), S = E / E0 */
    BFIT_LR_NRULES
} bfit_lr_rule;

/* "linear", "sqrt", "none", "adascale" (case-insensitive); BFIT_EINVAL
 * naming the valid ones otherwise. */
BFIT_API int bfit_lr_rule_parse(const char *name, bfit_lr_rule *out);
BFIT_API const char *bfit_lr_rule_name(bfit_lr_rule rule);
/* rule(ratio), ratio > 0 (adascale without a noise scale: min(ratio, 1)). */
BFIT_API double bfit_lr_rule_scale(bfit_lr_rule rule, double ratio);

/* One point of a batch schedule: from step (or epoch) `at` on, E = batch. */
typedef struct bfit_batch_point {
    int64_t at;
    int by_epoch;  /* `at` counts epochs, not optimizer steps */
    int batch;
} bfit_batch_point;

/* Parse "0:32,1000:64" (steps) or "e0:32,e2:64" (epochs) into out[0..*n)
 * (at most max points): one unit, `at` strictly increasing, E >= 1.
 * BFIT_EINVAL naming the 1-based character position otherwise. */
BFIT_API int bfit_batch_schedule_parse(const char *text, bfit_batch_point *out, int max, int *n);

/* Device bytes a training step needs at micro-batch m >= 1, the fixed part
 * included; UINT64_MAX if it cannot be planned. Called often: keep it cheap. */
typedef uint64_t (*bfit_plan_fn)(void *ud, int m);

typedef struct bfit_controller_config {
    size_t size;               /* BFIT_SIZED; bfit_controller_config_default sets it */
    /* memory */
    bfit_plan_fn plan_bytes;
    void *plan_ud;
    uint64_t fixed_bytes;      /* <= plan_bytes(1) */
    uint64_t capacity;         /* at the start; free_bytes starts as capacity - fixed_bytes */
    double margin;             /* [0, 1) */
    int micro_batch;           /* 0: auto (the largest m <= E that fits); > 0: this m,
                                  shrunk if it does not fit, grown back to it, never past */
    /* effective batch */
    int batch;                 /* E before the first schedule point; adaptive: initial E (0: batch_min) */
    const bfit_batch_point *schedule; /* copied; NULL: none */
    int nschedule;
    int adaptive;              /* follow the noise scale (no schedule then) */
    int auto_batch;            /* auto: E and m maximise goodput (no schedule, not adaptive) */
    int batch_min, batch_max;  /* adaptive: 2 <= batch_min <= batch_max; auto: 1 <= ... */
    /* learning rate */
    bfit_lr_rule rule;         /* linear default; sqrt suits AdamW */
    int lr_ref_batch;          /* E0, the E the lr was tuned for; 0: the E of the first step */
    int64_t rewarmup_steps;    /* W: steps over which a raised scale ramps up (0: at once) */
    /* micro-batch growth */
    int grow_after;            /* G: consecutive observed steps with room for a larger m */
    double grow_gain;          /* X: a measured m must be this much faster (0.05 = 5%) */
    int64_t shrink_holdoff;    /* N: no growth for N steps after a shrink (doubled on flapping) */
    int64_t flap_window;       /* a shrink this soon after a growth counts as a flap */
    int tput_skip;             /* steps after an m change not measured (primitive set-up) */
    double tput_alpha;         /* EMA weight of a new samples/s measurement, (0, 1] */
    /* adaptive E */
    int64_t adapt_interval;    /* at least this many steps between E changes */
    double adapt_factor;       /* E changes by at most this factor at a time (> 1) */
    double adapt_min_change;   /* and only if it would change by at least this fraction */
    double noise_alpha;        /* EMA weight of the noise estimator, (0, 1]; auto: per E0 samples */
    int noise_min_updates;     /* estimates needed before E follows them */
    /* auto E (docs/dynamic.md, "Auto mode") */
    double auto_gain;          /* a change needs this predicted goodput gain (0.1 = 10%) */
    int64_t auto_interval;     /* at least this many samples between E changes (and before the first) */
    int auto_confirm;          /* the same better E must win this many steps in a row */
    int auto_plateau_windows;  /* E doubles at the same lr when the mean training loss of this many
                                  windows of auto_interval samples in a row is not auto_plateau
                                  below the best window's since the last change; 0: never */
    double auto_plateau;       /* the relative fall that counts as progress (0.02 = 2%) */
    int keep_whole;            /* never split E into micro-batches for speed alone (batch norm) */
    int tokens;                /* E, m and the bounds count tokens: messages say so */
} bfit_controller_config;

/* The defaults, size set: auto micro-batch, margin 0, linear rule, W 100,
 * G 5, X 0.05, N 50, flap window 200, skip 1, tput alpha 0.3, adapt
 * interval 100, factor 2, min change 0.1, noise alpha 0.05, 20 updates;
 * auto: gain 0.1, interval 10000 samples, confirm 20, plateau 2 windows of
 * 2%. Memory, plan and E are the caller's to set. */
#define bfit_controller_config_default(cfg) bfit_controller_config_init((cfg), sizeof *(cfg))
BFIT_API void bfit_controller_config_init(bfit_controller_config *cfg, size_t size);

/* What the loop saw in one optimizer step. */
typedef struct bfit_step_stats {
    size_t size;             /* BFIT_SIZED */
    int64_t step;            /* the step the last bfit_controller_next decided */
    int epoch;
    int samples;             /* samples in the step */
    double seconds;          /* wall time of the step */
    double data_seconds;     /* of which waiting for data (not counted as compute) */
    double micro_seconds;    /* of which in the micro-steps (forward, backward); 0: not measured */
    uint64_t free_bytes;     /* now, as defined above */
    uint64_t capacity;       /* now */
    /* gradient noise (optional, nmicro = 0: none): the squared L2 norm of each
     * micro-batch's mean gradient with its size, and of the step's mean
     * gradient. Needs nmicro >= 2. */
    int nmicro;
    const double *micro_sqnorm;
    const int *micro_size;
    double full_sqnorm;
    /* consecutive steps (optional): step_norms = 1 says full_sqnorm is set;
     * diff_sqnorm >= 0 is |G_t - G_{t-1}|^2 (negative: not known) */
    int step_norms;
    double diff_sqnorm;
    /* the step's mean training loss (optional; auto mode's plateau check) */
    int loss_known;
    double loss;
    /* samples/s the data loader makes while busy (its threads' measured
     * rate; optional, 0: not known). A step cannot run faster than the
     * loader feeds it: throughput comparisons use min(compute, loader). */
    double loader_rate;
} bfit_step_stats;

typedef struct bfit_controller bfit_controller;

/* Check cfg (BFIT_EINVAL naming the field) and choose the first micro-batch;
 * BFIT_ENOMEM if even m = 1 does not fit. */
BFIT_API int bfit_controller_new(const bfit_controller_config *cfg, bfit_controller **out);
BFIT_API void bfit_controller_free(bfit_controller *c);
/* The decision for optimizer step `step` of epoch `epoch` (d->size set by
 * the caller). Asking again for the same step gives the same decision.
 * lr_scale is rule(E / E0), except after E rises: then it ramps linearly
 * from the scale in use to the new one over W steps. BFIT_ENOMEM (d->m = 0)
 * if the last observed memory fits not even m = 1. */
BFIT_API int bfit_controller_next(bfit_controller *c, int64_t step, int epoch, bfit_batch_decision *d);
/* Report the step bfit_controller_next last decided. BFIT_ESTATE before any
 * decision or when that step was already observed (one observe per next),
 * BFIT_EINVAL for another step or nonsense values. */
BFIT_API int bfit_controller_observe(bfit_controller *c, const bfit_step_stats *s);
/* A micro-batch of failed_m samples could not be reserved and did not run:
 * d gets the same step's decision with m the largest that fits below
 * failed_m (E and lr_scale unchanged). BFIT_ENOMEM (d->m = 0) if none. */
BFIT_API int bfit_controller_on_oom(bfit_controller *c, int failed_m, uint64_t free_bytes, uint64_t capacity,
                                    bfit_batch_decision *d);
/* The smoothed gradient noise scale; BFIT_ESTATE until there is one. */
BFIT_API int bfit_controller_noise_scale(const bfit_controller *c, double *b_noise);
/* Measured samples per second (compute only) at micro-batch m; BFIT_ESTATE
 * if m has not been measured. */
BFIT_API int bfit_controller_throughput(const bfit_controller *c, int m, double *samples_per_s);
/* Auto mode's ladder: the micro-batch whose forward and backward the loop
 * should time next, 0 when none. */
BFIT_API int bfit_controller_ladder_next(const bfit_controller *c);
/* One forward and backward of m samples took `seconds` (<= 0: m could not
 * run, which ends the ladder). BFIT_EINVAL unless m is what ladder_next
 * asked for. */
BFIT_API int bfit_controller_ladder_record(bfit_controller *c, int m, double seconds);

/* ---- data-parallel training (docs/distributed.md) ---------------------------- */
/* 1 when this build has MPI. */
BFIT_API int bfit_dist_available(void);
/* This process's group size and rank: MPI's once a data-parallel run set it
 * up, before that the launcher's environment (1 and 0 without one). */
BFIT_API void bfit_dist_info(int *size, int *rank);
/* Finalise MPI if the library initialised it: a program's last call after
 * data-parallel training. */
BFIT_API void bfit_dist_finalize(void);
/* End every process of the job with code: for a program after a failure its
 * other processes cannot learn of (the result's "dist_alone"). The library
 * never calls it. */
BFIT_API void bfit_dist_abort(int code);

#ifdef __cplusplus
}
#endif
#endif
