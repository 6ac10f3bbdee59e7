/* batchfit.h - the public API of libbatchfit.
 *
 * Opaque handles with _new/_free pairs. Every function that can fail returns
 * an int status (BFIT_OK or a negative BFIT_E* code) and leaves a message in
 * bfit_errmsg(); the library never exits or aborts on a recoverable condition.
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

/* ---- status codes -------------------------------------------------------- */
enum {
    BFIT_OK = 0,
    BFIT_ENOMEM = -1,   /* arena capacity or fault injection: recoverable */
    BFIT_EINVAL = -2,   /* bad argument or input */
    BFIT_EIO = -3,      /* file system */
    BFIT_EFORMAT = -4,  /* malformed file contents */
    BFIT_EDEVICE = -5,  /* backend failure (oneDNN, CUDA) */
    BFIT_ESTATE = -6,   /* call not valid in the object's current state */
    BFIT_ESTOPPED = -7, /* a run stopped on request (bfit_train_cfg.stop, bfit_run_request_stop) */
    BFIT_EPEER = -8     /* data-parallel: another process of the group failed, or the group's
                           communication did (docs/distributed.md) */
};

/* The message of the last failure on this thread ("" if none). */
const char *bfit_errmsg(void);
/* The configuration field the last failure is about ("" if none), e.g.
 * "batch": the message then reads "batch: ...". */
const char *bfit_errfield(void);
/* A short name for a status code ("out of memory", ...). */
const char *bfit_strerror(int code);

/* ---- sizes --------------------------------------------------------------- */
/* Parse "512MiB", "1.5GiB", "8GB", "4096" (bytes) into *out. Binary units
 * (KiB, MiB, GiB, TiB) are powers of 1024, decimal ones (kB/KB, MB, GB, TB)
 * powers of 1000; "B" is optional. Returns BFIT_EINVAL with a message that
 * says what was wrong for negative, empty, unknown unit, or overflow. */
int bfit_parse_size(const char *text, uint64_t *out);
/* Format bytes for people: "1.50 GiB", "512 B". Returns buf. */
char *bfit_format_size(uint64_t bytes, char *buf, size_t len);

/* ---- values: one parser and one set of limits for each kind --------------- */
/* Limits every option, schedule and configuration field of that kind obeys
 * (the command line, the schedule parsers and bfit_run_new alike). */
#define BFIT_BATCH_MAX (1 << 24)                  /* samples in a batch or micro-batch */
#define BFIT_COUNT_MAX ((int64_t)1000000000000000) /* optimizer steps, samples (10^15) */
#define BFIT_EPOCHS_MAX 1000000
/* A whole decimal number (optional sign, digits, nothing else) in
 * [min, max]; BFIT_EINVAL: "'x' is not a whole number" or "N is out of
 * range: expected MIN to MAX" (no overflow, however long). */
int bfit_parse_int(const char *text, int64_t min, int64_t max, int64_t *out);
/* A memory capacity: bfit_parse_size, and not 0. */
int bfit_parse_capacity(const char *text, uint64_t *out);
/* How often: "N" optimizer steps (1..BFIT_COUNT_MAX), or a time: "Ns",
 * "Nmin", "Nh" (N may have a fraction; more than 0). Sets one of *steps and
 * *seconds, the other to 0. */
int bfit_parse_every(const char *text, int64_t *steps, double *seconds);
/* A duration: "N" or "Ns" seconds, "Nmin", "Nh"; 0 allowed. */
int bfit_parse_duration(const char *text, double *seconds);

/* ---- the arena: the only way to device memory ---------------------------- */
typedef enum {
    BFIT_MEM_PARAMS = 0,
    BFIT_MEM_GRADS,
    BFIT_MEM_OPTIMIZER,
    BFIT_MEM_ACTIVATIONS,
    BFIT_MEM_ACT_GRADS,
    BFIT_MEM_WORKSPACE,
    BFIT_MEM_INPUT,
    BFIT_MEM_OTHER,
    BFIT_MEM_NCAT
} bfit_mem_cat;

#define BFIT_ALIGN 64
/* Bytes an allocation of n bytes takes in the arena: n rounded up to 64. */
#define BFIT_ALIGN_UP(n) (((size_t)(n) + (BFIT_ALIGN - 1)) & ~(size_t)(BFIT_ALIGN - 1))

typedef struct bfit_arena bfit_arena;

typedef struct bfit_arena_stats {
    uint64_t capacity;
    uint64_t current;                  /* total bytes held now */
    uint64_t peak;                     /* high-water mark of current */
    uint64_t cur[BFIT_MEM_NCAT];       /* per category, now */
    uint64_t peak_cat[BFIT_MEM_NCAT];  /* per category, high-water */
    uint64_t nalloc;                   /* allocations made (successful) */
    uint64_t nfree;
    uint64_t nfail;                    /* allocations refused */
    uint64_t reserved;                 /* bytes of device blocks held (>= current: granularity) */
    uint64_t reserved_peak;
} bfit_arena_stats;

/* Where the arena's memory comes from: blocks of device memory that the
 * arena carves and never touches itself (it keeps its bookkeeping on the
 * host). A device gives its own (bfit_device_blocks); NULL means host memory
 * from aligned_alloc, for an arena that only accounts. */
typedef struct bfit_block_source {
    /* n bytes, 64-byte aligned at least; BFIT_ENOMEM (nothing held) when refused */
    int (*alloc)(void *ud, size_t n, void **out);
    void (*free)(void *ud, void *p, size_t n);
    /* optional: set n bytes at p to byte (test builds poison new memory) */
    int (*fill)(void *ud, void *p, int byte, size_t n);
    void *ud;
    size_t granularity;   /* blocks are asked for in multiples of this (0: BFIT_ALIGN) */
} bfit_block_source;

/* A host allocator (Lua's lua_Alloc idea), for the CPU device's blocks:
 * NULL means aligned_alloc/free. */
typedef struct bfit_host_alloc {
    void *(*alloc)(void *ud, size_t size, size_t align);
    void (*free)(void *ud, void *p);
    void *ud;
} bfit_host_alloc;

/* capacity: bytes the arena may hand out (accounted as BFIT_ALIGN_UP of each
 * request). src: copied; NULL for host memory. */
bfit_arena *bfit_arena_new(uint64_t capacity, const bfit_block_source *src);
void bfit_arena_free(bfit_arena *a);
/* Allocate n bytes (64-byte aligned, accounted as BFIT_ALIGN_UP(n)) to a
 * category. Fails with BFIT_ENOMEM, leaving the arena unchanged, when the
 * capacity would be exceeded, a fault is injected, or the block source
 * refuses. The memory is the device's: the arena never reads or writes it. */
int bfit_arena_alloc(bfit_arena *a, size_t n, bfit_mem_cat cat, void **out);
/* One allocation of BFIT_ALIGN_UP(n) + BFIT_ALIGN_UP(n2) bytes, the first
 * part counted to cat and the second to cat2: for buffers of two categories
 * whose lifetimes let them share bytes (a step's activations and their
 * gradients), so each category still says what it adds. */
int bfit_arena_alloc_shared(bfit_arena *a, size_t n, bfit_mem_cat cat, size_t n2, bfit_mem_cat cat2, void **out);
/* Release p (NULL is fine; a pointer the arena did not give is ignored). */
void bfit_arena_release(bfit_arena *a, void *p);
/* Change capacity at run time. Lowering below what is held is allowed: the
 * holdings stay, new allocations fail until enough is released. */
void bfit_arena_set_capacity(bfit_arena *a, uint64_t capacity);
uint64_t bfit_arena_capacity(const bfit_arena *a);
uint64_t bfit_arena_available(const bfit_arena *a); /* capacity - current, or 0 */
void bfit_arena_stats_get(const bfit_arena *a, bfit_arena_stats *s);
void bfit_arena_reset_peak(bfit_arena *a);
/* Fault injection: the n-th allocation from now (1 = the next) fails; 0 turns
 * it off. */
void bfit_arena_fail_nth(bfit_arena *a, uint64_t n);
const char *bfit_mem_cat_name(bfit_mem_cat c);
/* Bytes of RAM the OS says are available (MemAvailable), 0 if unknown. */
uint64_t bfit_host_available_memory(void);

/* ---- devices --------------------------------------------------------------- */
/* Element types of tensors. Sizes come from the type, never sizeof(float). */
typedef enum { BFIT_F32 = 0, BFIT_BF16, BFIT_F16, BFIT_I32, BFIT_NDTYPES } bfit_dtype;
/* "F32", "BF16", "F16", "I32" (the safetensors names). */
const char *bfit_dtype_name(bfit_dtype t);

/* A compute device: the CPU (oneDNN) or, where built, a CUDA GPU. Its
 * memory is opaque to the host and reached only through the library. */
typedef struct bfit_device bfit_device;

/* How the convolution algorithms are chosen on a GPU (cuDNN): the fastest,
 * the ones with the smallest workspace, or auto: the fastest unless a
 * leaner choice lets a larger micro-batch fit the effective batch. The CPU
 * device (oneDNN) has one choice and ignores this. */
typedef enum { BFIT_CONV_FASTEST = 0, BFIT_CONV_LEAN, BFIT_CONV_AUTO } bfit_conv_algo;
/* "fastest", "lean", "auto"; BFIT_EINVAL naming the valid ones otherwise. */
int bfit_conv_algo_parse(const char *name, bfit_conv_algo *out);
const char *bfit_conv_algo_name(bfit_conv_algo a);

typedef struct bfit_device_cfg {
    int threads;                 /* CPU: > 0: ops run on this many threads (set around each device
                                    call and restored); 0: OpenMP's own setting, untouched */
    int check;                   /* 1: op arguments must be device memory, and on the CPU device
                                    memory is inaccessible (PROT_NONE) outside device calls; -1:
                                    from the environment (BFIT_DEVICE_CHECK=1), 0: off */
    const bfit_host_alloc *host; /* CPU: where device blocks come from; NULL: aligned_alloc
                                    (the checking mode maps its own pages) */
    bfit_conv_algo conv_algo;    /* GPU: fastest (default) or lean; auto is resolved by a run */
} bfit_device_cfg;

/* Defaults: threads 0, check -1, host NULL, fastest. */
bfit_device_cfg bfit_device_cfg_default(void);

/* Open a device by name: "cpu", "cuda" or "cuda:N" (N-th GPU), or NULL /
 * "auto" for a GPU when one is present, else the CPU. cfg may be NULL
 * (defaults). BFIT_EINVAL for an unknown name, BFIT_EDEVICE when the device
 * cannot be used (saying why: not built with CUDA, no GPU, driver error). */
int bfit_device_open(const char *name, const bfit_device_cfg *cfg, bfit_device **out);
void bfit_device_free(bfit_device *d);
/* "cpu", "cuda:0". */
const char *bfit_device_name(const bfit_device *d);
/* Free and total bytes as the device sees them (a GPU: other processes
 * included; the CPU: MemAvailable and MemTotal). */
int bfit_device_memory(bfit_device *d, uint64_t *free_bytes, uint64_t *total_bytes);
/* The block source an arena over this device draws from. */
const bfit_block_source *bfit_device_blocks(const bfit_device *d);
/* An arena of capacity bytes over d's memory. */
bfit_arena *bfit_device_arena_new(bfit_device *d, uint64_t capacity);

/* ---- optimizers ------------------------------------------------------------ */
typedef enum { BFIT_OPT_SGD = 0, BFIT_OPT_ADAMW, BFIT_OPT_COUNT } bfit_opt_kind;

typedef struct bfit_optim_cfg {
    bfit_opt_kind kind;
    double weight_decay;   /* SGD: L2 term added to the gradient; AdamW: decoupled */
    /* SGD */
    double momentum;       /* 0: plain SGD, no state */
    double dampening;      /* PyTorch's dampening (first step is undamped, as there) */
    int nesterov;          /* needs momentum > 0 and dampening 0 */
    /* AdamW */
    double beta1, beta2, eps;
} bfit_optim_cfg;

/* Defaults: SGD momentum 0.9, dampening 0, no Nesterov, weight decay 0;
 * AdamW PyTorch's betas (0.9, 0.999), eps 1e-8, weight decay 0.01. */
bfit_optim_cfg bfit_optim_cfg_default(bfit_opt_kind kind);
/* Check a configuration (ranges as PyTorch checks them); BFIT_EINVAL with a
 * message naming the bad field and its valid range. */
int bfit_optim_cfg_check(const bfit_optim_cfg *cfg);
/* "sgd" / "adamw" (case-insensitive) -> kind; BFIT_EINVAL listing the valid
 * names otherwise. */
int bfit_optim_kind_parse(const char *name, bfit_opt_kind *out);
const char *bfit_optim_kind_name(bfit_opt_kind kind);

/* ---- learning-rate schedules (src/optim/schedule.h says the formulas) -------- */
typedef enum { BFIT_SCHED_CONSTANT = 0, BFIT_SCHED_STEP, BFIT_SCHED_COSINE, BFIT_SCHED_COUNT } bfit_sched_kind;

typedef struct bfit_lr_schedule {
    bfit_sched_kind kind;
    int64_t warmup_steps;  /* W; 0: no warmup */
    double warmup_start;   /* factor at step 0, in [0, 1] (0: start from lr 0, as Hugging Face does) */
    int64_t step_size;     /* step: decay every step_size steps (>= 1) */
    double gamma;          /* step: the factor (> 0) */
    int64_t total_steps;   /* cosine: steps in the whole run, warmup included (> W) */
    double min_factor;     /* cosine: final lr as a fraction of base, in [0, 1] */
} bfit_lr_schedule;

/* No warmup (start factor 0 once W is set), gamma 0.1, min_factor 0; step_size
 * and total_steps are 0 and must be set for step and cosine. */
bfit_lr_schedule bfit_lr_schedule_default(bfit_sched_kind kind);
/* BFIT_EINVAL with a message naming the field and its valid range. */
int bfit_lr_schedule_check(const bfit_lr_schedule *s);
/* The learning rate for optimizer step `step` (negative counts as 0). The
 * schedule should have passed bfit_lr_schedule_check; a bad one gives base_lr
 * after warmup rather than dividing by zero. */
double bfit_lr_at(const bfit_lr_schedule *s, double base_lr, int64_t step);
/* "constant", "step", "cosine" (case-insensitive) -> kind; BFIT_EINVAL
 * listing the valid names otherwise. */
int bfit_lr_sched_parse(const char *name, bfit_sched_kind *out);
const char *bfit_lr_sched_name(bfit_sched_kind kind);

/* ---- models and their memory plan ---------------------------------------- */
/* A model built from a preset name (mlp, cnn, resnet18, resnet50, vgg16) or
 * a spec file (docs/model-spec.md). */
typedef struct bfit_model bfit_model;

/* How a training step stores what backward needs (docs/memory.md). */
typedef enum {
    BFIT_RECOMPUTE_NONE = 0,  /* keep what backward reads (lean: as little as that) */
    BFIT_RECOMPUTE_BLOCKS,    /* keep only the values between residual blocks (every cut of the graph) */
    BFIT_RECOMPUTE_SQRT,      /* keep every ~sqrt(n)-th cut (Chen et al. 2016) */
    BFIT_RECOMPUTE_CUTS,      /* keep the values given (what auto resolves to) */
    BFIT_RECOMPUTE_AUTO,      /* the values to keep that make the target batch fit with the least
                                 recomputed work (src/batch/recompute.c) */
    BFIT_RECOMPUTE_COUNT
} bfit_recompute_kind;

/* Dynamic loss scaling (GradScaler's): the loss times S before backward;
 * a step with inf/NaN gradients is skipped (its samples still count) and S
 * halved; S doubles after an interval of clean steps. */
enum { BFIT_LOSS_SCALE_AUTO = 0, BFIT_LOSS_SCALE_NONE, BFIT_LOSS_SCALE_DYNAMIC };

typedef struct bfit_storage {
    bfit_dtype precision;           /* f32; bf16 or f16: 16-bit activations, gradients and compute,
                                       f32 master weights and optimizer state */
    int lean;                       /* 1: store as little as backward reads (relu bits, batch norm
                                       from its output); 0: inputs and outputs as they are */
    bfit_recompute_kind recompute;
} bfit_storage;

/* f32, lean, no recomputation. */
bfit_storage bfit_storage_default(void);
/* "f32", "bf16", "f16" (case-insensitive); BFIT_EINVAL naming the valid ones. */
int bfit_precision_parse(const char *name, bfit_dtype *out);
/* "none", "blocks", "sqrt", "auto"; BFIT_EINVAL naming the valid ones. */
int bfit_recompute_parse(const char *name, bfit_recompute_kind *out);
const char *bfit_recompute_name(bfit_recompute_kind k);

/* Load a model for planning on dev (its ops decide workspace sizes; NULL:
 * shapes only, no planning): a preset, a spec file or an ONNX file
 * (docs/onnx.md). Errors name file:line:col for a spec, the node for ONNX. */
int bfit_model_load(const char *preset_or_spec, bfit_device *dev, bfit_model **out);
/* The same from an ONNX model of len bytes in memory (copied; source names it
 * in messages). Its initializers are the parameters' starting values. */
int bfit_model_load_onnx(const void *buf, size_t len, const char *source, bfit_device *dev, bfit_model **out);
void bfit_model_free(bfit_model *M);
/* Trainable scalars. */
int64_t bfit_model_param_count(const bfit_model *M);
/* Class scores the model outputs. */
int bfit_model_classes(const bfit_model *M);

typedef struct bfit_plan {
    int m, training;
    uint64_t bytes[BFIT_MEM_NCAT];
    uint64_t fixed;      /* params + grads + optimizer + other (the model's statistics): independent of m */
    uint64_t step;       /* activations + act_grads + workspace + input */
    uint64_t peak;       /* fixed + step */
    uint64_t no_reuse;   /* the peak if no buffer were shared */
    double flops;        /* modelled work of the step (forward, regenerations, backward) */
    double regen_flops;  /* of which regenerations (recomputation, lean relu outputs) */
} bfit_plan;

/* Plan for micro-batch m. opt NULL: no optimizer state (eval, or find). */
int bfit_plan_compute(bfit_model *M, const bfit_optim_cfg *opt, int m, int training, bfit_plan *p);

/* The largest m in [1, limit] whose planned peak fits in budget bytes
 * (peak <= budget), by bfit_largest_fit (batch/solve.h). Returns BFIT_OK
 * with *m_out = 0 when even m = 1 does not fit (p1, if not NULL, gets the
 * plan for m = 1 so callers can say by how much). Whatever it returns fits. */
int bfit_plan_max_batch(bfit_model *M, const bfit_optim_cfg *opt, int training, uint64_t budget, int limit,
                        int *m_out, bfit_plan *p1);

/* How M stores a training step: precision, lean, recomputation. Before its
 * parameters are allocated (their 16-bit compute copies are sized by the
 * precision). Auto chooses the values to keep: with target > 0, the least
 * recomputed work with which micro-batch `target` fits in budget bytes
 * (the whole step's peak), or, if it cannot fit, the largest micro-batch;
 * with target 0, the largest micro-batch. opt: the optimizer whose state
 * the plans count (NULL: none). */
int bfit_model_set_storage(bfit_model *M, const bfit_storage *s, const bfit_optim_cfg *opt, uint64_t budget,
                           int target);
/* The storage a model has now, auto resolved: its recomputation reads
 * cuts then, with the number of values it keeps. */
bfit_storage bfit_model_storage(const bfit_model *M);

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
} bfit_data_opts;

#define BFIT_DATA_OPTS_INIT {0, -1, -1, ',', 0, 0}

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
 *   a directory              MNIST layout: {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]
 *   "IMAGES,LABELS"          an explicit pair of IDX files
 *   a token file             ids in llm.c's format (docs/data.md), samples of opts->seq tokens
 *   a .txt file              its bytes as tokens (256 ids); train: 95% of its lines, else the rest
 *   a file (.csv or other)   CSV, see bfit_dataset_load_csv
 * train picks the train or the t10k files of a named set or directory and is
 * ignored for files. Fails with BFIT_EIO (missing file, saying which paths
 * were tried), BFIT_EFORMAT (bad contents, saying file and position) or
 * BFIT_EINVAL (bad options); *out is NULL on failure. */
int bfit_dataset_load(const char *spec, int train, const bfit_data_opts *o, bfit_dataset **out);

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

/* ---- memory schedules (simulating a co-tenant) ------------------------------ */
typedef struct bfit_mem_point {
    int64_t step;
    uint64_t capacity;
} bfit_mem_point;

#define BFIT_MEM_SCHEDULE_MAX 64
/* Parse "STEP:SIZE,..." ("200:150MiB,400:1GiB"): steps 0..BFIT_COUNT_MAX,
 * strictly increasing; sizes as bfit_parse_capacity (not 0); blanks around
 * items allowed, empty items not. BFIT_EINVAL naming the 1-based character
 * position otherwise (the batch schedule's rules). */
int bfit_mem_schedule_parse(const char *text, bfit_mem_point *out, int max, int *n);

/* ---- the batch controller: micro-batch, accumulation, effective batch ---- */
/* Pure logic over observations (src/batch/control.c): it knows nothing of
 * tensors or models. The memory plan is handed to it as a function, and the
 * trainer tells it what happened after each optimizer step. docs/dynamic.md
 * states the rules.
 *
 * Memory words used below:
 *   plan_bytes(m)  every byte a training step at micro-batch m holds on the
 *                  device, the fixed part (params, grads, optimizer) included.
 *   fixed_bytes    the part of plan_bytes that does not depend on m.
 *   capacity       the bytes this process may use now (it may change: a
 *                  co-tenant); budget = capacity * (1 - margin).
 *   free_bytes     capacity minus every byte held outside the step blocks
 *                  (params, grads, optimizer state, anything else), i.e. what
 *                  the step blocks of any m may take. With the arena:
 *                  bfit_arena_available() plus the step blocks held now (after
 *                  a failed all-or-nothing reserve that is just available()).
 *   m fits         plan_bytes(m) <= budget  and  plan_bytes(m) - fixed_bytes
 *                  <= free_bytes. One predicate for start, growth, shrinking
 *                  and OOM recovery. */

/* How the learning rate follows the effective batch E: scale = rule(E / E0). */
typedef enum {
    BFIT_LR_LINEAR = 0,  /* E / E0 (Goyal et al.; usual for SGD) */
    BFIT_LR_SQRT,        /* sqrt(E / E0) (usual for Adam/AdamW) */
    BFIT_LR_NONE,        /* 1 */
    BFIT_LR_ADASCALE,    /* AdaScale's gain (Johnson et al. 2020), from the noise scale B:
                            S (B + E0) / (B + E) with S = E / E0; --batch auto only */
    BFIT_LR_NRULES
} bfit_lr_rule;

/* "linear", "sqrt", "none", "adascale" (case-insensitive); BFIT_EINVAL
 * naming the valid ones otherwise. */
int bfit_lr_rule_parse(const char *name, bfit_lr_rule *out);
const char *bfit_lr_rule_name(bfit_lr_rule rule);
/* rule(ratio); ratio > 0. adascale needs the noise scale: without it this
 * gives min(ratio, 1), the lower of its bounds. */
double bfit_lr_rule_scale(bfit_lr_rule rule, double ratio);

/* Why a decision differs from the previous step's. */
typedef enum {
    BFIT_REASON_NONE = 0,    /* nothing changed */
    BFIT_REASON_START,       /* the first decision */
    BFIT_REASON_OOM,         /* an allocation failed: m shrank, same samples retried */
    BFIT_REASON_MEM_SHRANK,  /* capacity or free memory dropped: m shrank before failing */
    BFIT_REASON_MEM_FREED,   /* memory came back: m grew (hysteresis and throughput permitting) */
    BFIT_REASON_THROUGHPUT,  /* a smaller m that fits was measured faster */
    BFIT_REASON_SCHEDULE,    /* the batch schedule changed E */
    BFIT_REASON_NOISE,       /* adaptive mode moved E toward the gradient noise scale */
    BFIT_REASON_GOODPUT,     /* auto mode: another E (and its m) is predicted to train faster */
    BFIT_REASON_PLATEAU,     /* auto mode: the training loss stopped falling: E doubled at the same lr */
    BFIT_REASON_COUNT
} bfit_batch_reason;

/* "start", "out of memory", "memory shrank", "memory freed", "throughput",
 * "schedule", "noise scale", "goodput", "plateau" ("" for none). */
const char *bfit_batch_reason_name(bfit_batch_reason r);

/* One point of a batch schedule: from step (or epoch) `at` on, E = batch. */
typedef struct bfit_batch_point {
    int64_t at;
    int by_epoch;  /* `at` counts epochs, not optimizer steps */
    int batch;
} bfit_batch_point;

#define BFIT_BATCH_SCHEDULE_MAX 64

/* Parse a batch schedule: comma-separated AT:E points, AT a step number
 * ("0:32,1000:64,2000:128", 0..BFIT_COUNT_MAX) or 'e' and an epoch number
 * ("e0:32,e2:64", 0..BFIT_EPOCHS_MAX); all points in one unit, AT strictly
 * increasing, E in 1..BFIT_BATCH_MAX; blanks around items are allowed, empty
 * items not. Fills out[0..*n), at most max points. BFIT_EINVAL with a
 * message naming the 1-based character position otherwise. */
int bfit_batch_schedule_parse(const char *text, bfit_batch_point *out, int max, int *n);

/* Device bytes a training step needs at micro-batch m >= 1, fixed part
 * included; UINT64_MAX if it cannot be planned. Called often: keep it cheap. */
typedef uint64_t (*bfit_plan_fn)(void *ud, int m);

typedef struct bfit_controller_config {
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
    bfit_lr_rule rule;         /* linear default; the caller picks sqrt for AdamW */
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

/* Defaults: auto micro-batch, margin 0, linear rule, W 100, G 5, X 0.05, N 50,
 * flap window 200, skip 1, tput alpha 0.3, adapt interval 100, factor 2,
 * min change 0.1, noise alpha 0.05, 20 updates; auto: gain 0.1, interval
 * 10000 samples, confirm 20. Memory, plan and E are the caller's to set. */
void bfit_controller_config_default(bfit_controller_config *cfg);

/* What one optimizer step should do. */
typedef struct bfit_batch_decision {
    int m;                   /* micro-batch (0 only with a BFIT_ENOMEM return) */
    int k;                   /* micro-batches in the step: ceil(E / m) */
    int last;                /* the last one's size: E - (k - 1) m, in [1, m] */
    int batch;               /* E */
    double lr_scale;         /* multiplies the scheduled lr; see bfit_controller_next */
    bfit_batch_reason reason;/* BFIT_REASON_NONE when nothing changed */
    int prev_m, prev_batch;  /* before this decision (0 at the start) */
    int split;               /* m < E: layers with batch statistics (batch norm) see
                                micro-batches, not E; the trainer warns once */
    char why[240];           /* for logs: "memory shrank: micro-batch 90 -> 50 (...)" */
    /* goodput changes: the numbers behind them (0 otherwise) */
    double noise_scale;      /* the smoothed noise scale the choice used */
    double tput_old, tput_new;  /* predicted samples/s at the old and the new (E, m) */
    double eff_old, eff_new;    /* statistical efficiency per sample, relative to E0 */
} bfit_batch_decision;

/* What the trainer saw in one optimizer step. */
typedef struct bfit_step_stats {
    int64_t step;            /* the step the last bfit_controller_next decided */
    int epoch;
    int samples;             /* samples in the step */
    double seconds;          /* wall time of the step */
    double data_seconds;     /* of which waiting for data (not counted as compute) */
    double micro_seconds;    /* of which in the micro-steps (forward, backward); 0: not measured.
                                The rest is the step's own work (optimizer, norms). */
    uint64_t free_bytes;     /* now, as defined above */
    uint64_t capacity;       /* now */
    /* gradient noise (optional, nmicro = 0: none): the squared L2 norm of each
     * micro-batch's mean gradient with its size, and of the whole step's mean
     * gradient (B_big = the sum of the sizes). Needs nmicro >= 2. */
    int nmicro;
    const double *micro_sqnorm;
    const int *micro_size;
    double full_sqnorm;
    /* consecutive steps (optional): step_norms = 1 says full_sqnorm is set
     * (also with nmicro = 0); diff_sqnorm >= 0 is |G_t - G_{t-1}|^2, this
     * step's mean gradient minus the previous step's (negative: not known).
     * Two steps make one noise estimate: b = each step, B = both. */
    int step_norms;
    double diff_sqnorm;
    /* the step's mean training loss (optional; auto mode's plateau check) */
    int loss_known;
    double loss;
} bfit_step_stats;

typedef struct bfit_controller bfit_controller;

/* Check cfg (BFIT_EINVAL naming the field) and choose the first micro-batch;
 * BFIT_ENOMEM if even m = 1 does not fit. */
int bfit_controller_new(const bfit_controller_config *cfg, bfit_controller **out);
void bfit_controller_free(bfit_controller *c);

/* The decision for optimizer step `step` of epoch `epoch` (steps count from
 * the run's first, epochs too). Asking again for the same step gives the same
 * decision. lr_scale is rule(E / E0), except after E rises: then it ramps
 * linearly from the scale in use to the new one over W steps (the j-th step
 * with the new E, j = 1..W, gets old + (new - old) j / W). A lower scale is
 * taken at once: a smaller lr is safe. BFIT_ENOMEM (d->m = 0) if the last
 * observed memory fits not even m = 1. */
int bfit_controller_next(bfit_controller *c, int64_t step, int epoch, bfit_batch_decision *d);

/* Report the step that bfit_controller_next last decided. BFIT_ESTATE before
 * any decision, BFIT_EINVAL for another step or nonsense values. */
int bfit_controller_observe(bfit_controller *c, const bfit_step_stats *s);

/* A micro-batch of failed_m samples could not be reserved and did not run.
 * free_bytes and capacity are now's (as defined above). d gets the same step's
 * decision with m the largest that fits, below failed_m; E and lr_scale are
 * unchanged, k and last describe a whole step at the new m (the trainer
 * splits what is left of the step by the new m). No growth for N steps.
 * BFIT_ENOMEM (d->m = 0) if no m below failed_m fits. */
int bfit_controller_on_oom(bfit_controller *c, int failed_m, uint64_t free_bytes, uint64_t capacity,
                           bfit_batch_decision *d);

/* The smoothed gradient noise scale; BFIT_ESTATE until it has an estimate. */
int bfit_controller_noise_scale(const bfit_controller *c, double *b_noise);
/* The measured samples per second (compute time only) at micro-batch m;
 * BFIT_ESTATE if m has not been measured. */
int bfit_controller_throughput(const bfit_controller *c, int m, double *samples_per_s);

/* Auto mode's ladder (the find ladder inside a run): the micro-batch whose
 * forward and backward the trainer should time next, 0 when none (the
 * ladder is done, or not auto). It doubles from about batch_min / 2 up to
 * the largest that fits within batch_max, and stops early once two sizes in
 * a row are not faster than the best so far. The trainer leaves the model
 * as it found it (no optimizer step, gradients zeroed, statistics reset). */
int bfit_controller_ladder_next(const bfit_controller *c);
/* One forward and backward of m samples took `seconds` (the best of a few
 * runs); seconds <= 0: m could not run (out of memory), which ends the
 * ladder. BFIT_EINVAL unless m is what ladder_next asked for. */
int bfit_controller_ladder_record(bfit_controller *c, int m, double seconds);


/* ---- the gradient noise scale (McCandlish et al. 2018, appendix A.1) ----- */
/* From squared norms of mean gradients at two batch sizes b < B:
 *   |G|^2 ~ (B |G_B|^2 - b |G_b|^2) / (B - b)
 *   tr(S) ~ (|G_b|^2 - |G_B|^2) / (1/b - 1/B)
 * each smoothed by its own EMA; B_noise = tr(S)_ema / |G|^2_ema. The ratio of
 * two EMAs started together needs no bias correction. */
typedef struct bfit_noise {
    double alpha;            /* EMA weight of a new estimate */
    double g2_ema, s_ema;    /* smoothed |G|^2 and tr(Sigma) */
    double g2_last, s_last;  /* the last unsmoothed estimates */
    int64_t n;               /* estimates taken */
} bfit_noise;

/* alpha in (0, 1] (BFIT_EINVAL otherwise). */
int bfit_noise_init(bfit_noise *nz, double alpha);
/* One estimate from |G_b|^2 at b and |G_B|^2 at B; BFIT_EINVAL unless
 * 0 < b < B and both norms are finite and >= 0. */
int bfit_noise_update(bfit_noise *nz, double b_small, double g2_small, double b_big, double g2_big);
/* One estimate from a step of k >= 2 micro-batches: g2_micro[j] the squared
 * norm of micro-batch j's mean gradient over size[j] samples, g2_full that of
 * the step's mean over B = sum size[j]. Unequal sizes are exact in
 * expectation: b is their harmonic mean and |G_b|^2 the plain mean of the
 * g2_micro, since E|G_bj|^2 = |G|^2 + tr(S) / b_j. */
int bfit_noise_update_step(bfit_noise *nz, int k, const double *g2_micro, const int *size, double g2_full);
/* One estimate from two batches of b1 and b2 samples (two consecutive
 * steps): their mean gradients' squared norms g2_1, g2_2 and the squared
 * norm of their difference d2. b = the two, B = b1 + b2, whose mean gradient
 * (b1 G1 + b2 G2) / B has the squared norm
 * (b1^2 g2_1 + b2^2 g2_2 + b1 b2 (g2_1 + g2_2 - d2)) / B^2. */
int bfit_noise_update_pair(bfit_noise *nz, double b1, double g2_1, double b2, double g2_2, double d2);
/* B_noise (>= 0; a negative tr(S) estimate reads 0); BFIT_ESTATE before any
 * estimate or while the smoothed |G|^2 is not positive. */
int bfit_noise_scale(const bfit_noise *nz, double *b_noise);

/* ---- data-parallel training (docs/distributed.md) ------------------------ */
typedef enum {
    BFIT_DIST_OFF = 0,  /* this process trains alone */
    BFIT_DIST_ON,       /* with every process of the MPI job (alone in a job of one) */
    BFIT_DIST_AUTO      /* on when a launcher (mpirun, srun) started several processes */
} bfit_dist_mode;

/* "off", "on", "auto". */
int bfit_dist_mode_parse(const char *name, bfit_dist_mode *out);
/* 1 when this build has MPI (without it, a run asked to train data-parallel
 * fails saying so, also in auto mode under a launcher of several). */
int bfit_dist_available(void);
/* This process's group size and rank: MPI's once a data-parallel run set it
 * up, before that the launcher's environment (1 and 0 without one). */
void bfit_dist_info(int *size, int *rank);
/* Finalise MPI if the library initialised it: a program's last call after
 * data-parallel training (a launcher counts a process that exits without it
 * as failed). */
void bfit_dist_finalize(void);
/* End every process of the job with code: for a program after a failure
 * its other processes cannot learn of (the library never calls it). */
void bfit_dist_abort(int code);

/* ---- training ---------------------------------------------------------------- */
/* An optimizer step consumes exactly E samples (the last of an epoch may
 * have fewer) in micro-batches of m; the loss is normalised by the samples
 * in the optimizer step, so the gradient does not depend on the split.
 * Every micro-step reserves its memory before it computes (OOM-atomic); on
 * an out-of-memory the micro-batch shrinks to what the plan says fits now
 * and the same samples are taken again. Messages name configuration fields
 * (see bfit_errfield). */
struct bfit_step_info;
struct bfit_eval_info;

typedef struct bfit_train_cfg {
    const char *model;         /* spec file, preset, or ONNX file */
    int init_random;           /* 1: draw every parameter, ignoring the starting weights a model file gives
                                  (an ONNX model's initializers); 0: the file's, where it has them */
    const char *data;          /* data set name or path */
    const char *test_data;     /* evaluate on this instead of data's test split (NULL: that) */
    bfit_csv_header csv_header;/* a CSV file's first row (auto) */
    int batch;                 /* effective batch E (adaptive: the initial E, 0 = batch_min) */
    int batch_tokens;          /* token models: batch, micro_batch, batch_min, batch_max, lr_ref_batch and
                                  the batch schedule count tokens that have a label, not sequences. A step
                                  takes whole sequences until their tokens reach E; a micro-batch of m
                                  tokens is planned as ceil(m / T) sequences of the longest length T, and
                                  one of shorter sequences takes as many as fit in the same bytes at their
                                  length (docs/train.md, "Token budgets"). Not with auto. */
    int micro_batch;           /* 0: the plan chooses (largest that fits, at most E) */
    int adaptive;              /* --batch adaptive: E follows the gradient noise scale */
    int auto_batch;            /* --batch auto: E and m chosen for goodput (docs/dynamic.md) */
    int batch_min, batch_max;  /* adaptive and auto bounds */
    int lr_ref_batch;          /* the E that lr is given for (0: the first E); auto counts the lr
                                  schedule (warm-up, decay) in steps of this many samples */
    double auto_gain;          /* auto: the predicted goodput gain a change of E needs (0: 10%); library
                                  only, not kept in checkpoints (give it again on resuming) */
    const bfit_batch_point *batch_schedule; /* E by step or epoch; NULL: constant */
    int nbatch_schedule;
    int batch_instead_of_decay;/* a step lr schedule becomes batch increases by 1/gamma */
    int lr_rule;               /* bfit_lr_rule; -1: linear for SGD, sqrt for AdamW */
    int64_t rewarmup_steps;    /* lr re-warmup after E rises (default 100) */
    const bfit_mem_point *memory_schedule; /* capacity changes at steps; NULL: none */
    int nmemory_schedule;
    const bfit_dataset *train_set, *test_set; /* given data sets instead of `data` */
    const bfit_source *train_source, *test_source; /* samples from the caller instead (no normalisation) */
    /* called with the samples of every micro-batch that ran (tests count them) */
    void (*on_samples)(void *ud, const float *x, const int32_t *y, int n);
    void *on_samples_ud;
    /* called after every optimizer step, evaluation and batch change (ud: cb_ud) */
    void (*on_step)(void *ud, const struct bfit_step_info *s);
    void (*on_eval)(void *ud, const struct bfit_eval_info *e);
    void (*on_batch_change)(void *ud, const bfit_batch_decision *d, int64_t step);
    void *cb_ud;
    uint64_t fail_nth_alloc;   /* tests: the n-th device allocation of the run fails (0: off) */
    int epochs;
    int64_t epoch_samples;     /* 0: the whole training set per epoch; else this many (shuffled) */
    int64_t eval_samples;      /* 0: the whole test set; else the first this many */
    int64_t max_steps;         /* 0: no limit */
    int eval_batch;            /* micro-batch for evaluation (0: 1000, or what fits) */
    bfit_optim_cfg opt;
    double lr;
    bfit_lr_schedule sched;
    double clip;               /* max global gradient norm; 0: off */
    uint64_t seed;
    int threads;               /* CPU threads; 0: OpenMP's setting */
    bfit_device *device;       /* train on this device (not owned); NULL: open device_name */
    const char *device_name;   /* "cpu", "cuda", "cuda:N", "auto"; NULL: auto */
    bfit_conv_algo conv_algo;  /* GPU convolution algorithms (fastest default) */
    bfit_storage storage;      /* precision, lean, recomputation (auto: for the target micro-batch:
                                  micro_batch, else batch, else batch_max) */
    int loss_scale;            /* BFIT_LOSS_SCALE_*: dynamic loss scaling (default: for f16 only) */
    double loss_scale_init;    /* the first scale (0: 65536) */
    int64_t loss_scale_interval; /* clean steps before the scale doubles (0: 2000) */
    int64_t poison_step;       /* tests: the gradients of this step (1-based) are made NaN, as an
                                  overflow would make them (0: off) */
    const bfit_host_alloc *host; /* CPU device blocks from here; NULL: aligned_alloc */
    uint64_t memory;           /* arena capacity; 0: what the device has free */
    double margin;             /* fraction of memory kept free when choosing m (default 0.1) */
    int augment;               /* images: random crop (pad 2) and horizontal flip */
    int prefetch;              /* background loading */
    int seq_max;               /* token models: samples are the data's lines (documents), cut into pieces of at
                                  most seq_max tokens (the model's length becomes seq_max), of varying length;
                                  each micro-batch runs at the length of its longest sequence (the step's
                                  sequences sorted by length, so padding stays small); 0: windows of the
                                  model's length */
    int normalize;             /* per-channel mean/std from the training set */
    const char *save;          /* weights file (safetensors) or NULL */
    const char *log;           /* JSON-lines log or NULL */
    const char *report;        /* HTML run report written at the end, also after a failure once the
                                  log was open (bfit_report_write); NULL: none. Without a log, the
                                  events go to a temporary file beside it. */
    FILE *human;               /* progress and summary lines; NULL: quiet */
    double progress_interval;  /* seconds between plain progress lines when not a terminal */
    /* checkpoints and resuming (docs/train.md) */
    const char *checkpoint;    /* directory of checkpoints (NULL: none) */
    int64_t checkpoint_steps;  /* one every this many optimizer steps (0: by time) */
    double checkpoint_seconds; /* one every this many seconds (0: by steps; both 0: 600) */
    int checkpoint_keep;       /* the newest this many are kept (default 3) */
    const char *resume;        /* continue from this checkpoint, or the newest in this directory */
    const char *const *resume_set; /* the configuration fields the caller set (the command line's options),
                                  compared with the checkpoint's; the others are taken from it. NULL: the
                                  fields that differ from bfit_train_cfg_default() count as set */
    int nresume_set;
    double wait_for_memory;    /* seconds to wait, polling, when not even micro-batch 1 fits (default 300;
                                  0: fail at once) */
    volatile sig_atomic_t *stop; /* non-zero: stop at the next micro-step boundary (a signal handler sets
                                  it); the step is abandoned, the run stays at its last step boundary */
    void (*on_checkpoint_write)(void *ud, const char *tmp_path); /* tests: a checkpoint is half written */
    /* data-parallel training over MPI (docs/distributed.md): every process of the job trains with its
       own device on its share of each step's E samples; rank 0 writes the log, report, weights and
       checkpoints, the others are quiet */
    bfit_dist_mode dist;       /* off (default), on, or auto: on when a launcher started several */
    int memory_schedule_rank;  /* the simulated memory events (memory_schedule, fail_nth_alloc) happen on
                                  this rank only (-1 default: on every rank) */
    int sample_check;          /* tests: log each epoch's count and checksum of the samples trained on
                                  (every rank's): the sum mod 2^64 of each sample's FNV-1a 64 hash of
                                  its floats' bytes, then its label's (int32, little-endian) */
} bfit_train_cfg;

/* Defaults: data fashion-mnist, E 128, auto micro-batch, 1 epoch, SGD momentum 0.9, lr 0.05,
 * constant schedule, seed 1, margin 0.1, prefetch and normalisation on, 3 checkpoints kept,
 * 300 s of waiting for memory. */
bfit_train_cfg bfit_train_cfg_default(void);

typedef struct bfit_train_result {
    int64_t steps;              /* optimizer steps */
    int64_t samples;            /* training samples consumed */
    int epochs;
    double train_loss;          /* mean over the last epoch */
    double test_loss, test_acc; /* after the last epoch */
    double seconds;             /* training wall time, evaluation excluded */
    int micro_batch;            /* the last micro-batch used */
    int ooms;                   /* out-of-memory events recovered from */
    int batch_changes;          /* decisions that changed m or E */
    int last_batch;             /* the last effective batch */
    double noise_scale;         /* the last gradient noise scale estimate (0: none) */
    int64_t skipped_steps;      /* loss scaling: steps skipped for inf/NaN gradients */
    double loss_scale;          /* loss scaling: the scale at the end (0: none) */
    uint64_t peak_bytes;        /* the arena's high-water mark */
    int report_written;         /* cfg.report was written (also when training failed) */
    int stopped;                /* the run stopped early: BFIT_ESTOPPED (a request) or BFIT_ENOMEM (memory
                                   did not come back in time); 0 otherwise */
    uint64_t missing;           /* BFIT_ENOMEM stop: bytes micro-batch 1 lacked */
    int64_t tokens, tokens_computed; /* token models: label tokens trained on, and token positions the
                                  micro-batches computed (the rest, padding) */
    char checkpoint[4200];      /* the last checkpoint written ("" if none) */
    char resumed_from[4200];    /* the checkpoint the run resumed from ("" if none) */
    int dist_alone;             /* data-parallel: a failure of this process that the others have not
                                   learnt of (they would wait for it): end the job (bfit_dist_abort) */
} bfit_train_result;

/* What one optimizer step did. */
typedef struct bfit_step_info {
    int64_t step;               /* 0-based, of the run */
    int epoch;                  /* 0-based */
    int batch;                  /* samples in the step (E, or what was left of the epoch); with
                                   batch_tokens its tokens that count */
    int sequences;              /* batch_tokens: the sequences those tokens came in (0 otherwise) */
    int m, k;                   /* micro-batch and micro-steps */
    double loss;                /* mean over the step's samples */
    double lr;                  /* the learning rate used */
    double seconds;             /* wall time of the step */
    double noise_scale;         /* the estimate after it (0: none yet) */
    int skipped;                /* loss scaling: the gradients overflowed, no update was made */
    double loss_scale;          /* the scale the step's backward used (0: no scaling) */
    uint64_t mem, capacity;     /* arena bytes held and the capacity after it */
    int epoch_end;              /* the step finished its epoch: evaluate now if wanted */
} bfit_step_info;

typedef struct bfit_eval_info {
    int epoch;                  /* epochs finished */
    int64_t step;
    double train_loss;          /* mean over the epoch's samples */
    double test_loss, test_acc;
    int64_t samples;
    int64_t counted;            /* what the means are over: samples, or a token model's tokens that count */
    double epoch_seconds;
    int m;                      /* the evaluation micro-batch */
} bfit_eval_info;

/* A training run one optimizer step at a time; bfit_train is its loop. */
typedef struct bfit_run bfit_run;

/* Check cfg (BFIT_EINVAL naming the field), set up device, model, data,
 * optimizer and controller, and write the log's start event. */
int bfit_run_new(const bfit_train_cfg *cfg, bfit_run **out);
/* Whether the run has taken every step it will (epochs, max_steps). */
int bfit_run_done(const bfit_run *r);
/* One optimizer step: its micro-steps (reserving memory before each, and
 * on out-of-memory shrinking and retrying the same samples), accumulation,
 * clipping, the optimizer and the controller's observation. */
int bfit_run_step(bfit_run *r, bfit_step_info *info);
/* Evaluate on the test split with the micro-batch that fits what is free
 * now (the training step's blocks are released first). */
int bfit_run_evaluate(bfit_run *r, bfit_eval_info *ev);
/* Write the weights (with the normalisation statistics) to path. */
int bfit_run_save(bfit_run *r, const char *path);
/* Write a checkpoint of the run at its step boundary into cfg.checkpoint
 * (atomically; the newest cfg.checkpoint_keep are kept); path (may be NULL)
 * gets the file's name. */
int bfit_run_checkpoint(bfit_run *r, char *path, size_t len);
/* Ask the run to stop (another thread may call it): bfit_run_step returns
 * BFIT_ESTOPPED at the next micro-step boundary, the step abandoned and the
 * run left at its last step boundary, so a checkpoint can still be written. */
void bfit_run_request_stop(bfit_run *r);
/* The figures so far. */
void bfit_run_result(const bfit_run *r, bfit_train_result *res);
/* Write the log's end event (after a good run) or error event (rc the failure). */
void bfit_run_finish(bfit_run *r, int rc);
void bfit_run_free(bfit_run *r);

/* The whole run: steps, an evaluation after each epoch, checkpoints, the
 * weights saved. Stopped on request (BFIT_ESTOPPED) or by memory that did
 * not come back (BFIT_ENOMEM, res->stopped set), it writes a checkpoint
 * first when cfg.checkpoint is set (res->checkpoint). */
int bfit_train(const bfit_train_cfg *cfg, bfit_train_result *res);

/* Find the checkpoint a run would resume from: file_or_dir itself, or the
 * newest checkpoint in the directory. BFIT_EIO if there is none. */
int bfit_checkpoint_find(const char *file_or_dir, char *path, size_t len);

/* The run report: from a run's JSON-lines event log (bfit_train_cfg.log),
 * one self-contained HTML file (inline SVG charts over the steps: loss and
 * test accuracy, E and m, memory and capacity, throughput, noise scale, with
 * every batch change, memory change, warning and error marked; the run's
 * configuration and memory plan). Written atomically, and only once the
 * whole log has been read: BFIT_EIO if the log cannot be read or the file
 * not written, BFIT_EFORMAT naming LOG:LINE for a line that is not an event
 * or lacks a field the report draws, and for a log without events. */
int bfit_report_write(const char *log_path, const char *html_path);

/* Evaluate a model's saved weights on a data set's test split. */
typedef struct bfit_eval_cfg {
    const char *model, *weights, *data;
    int batch;                  /* 0: 1000 */
    int64_t samples;            /* 0: all */
    int threads;
    bfit_device *device;        /* NULL: open device_name (NULL: auto) */
    const char *device_name;
    bfit_conv_algo conv_algo;
    uint64_t memory;
    int normalize;              /* 0: none. 1: the statistics saved with the weights, or
                                   for older files those of data's training split */
    bfit_csv_header csv_header; /* a CSV file's first row (auto) */
    FILE *human;                /* notes for people (what a CSV's first row was taken as); NULL: none */
} bfit_eval_cfg;

int bfit_evaluate(const bfit_eval_cfg *cfg, double *loss, double *acc, int64_t *n);

/* ---- find: the largest and the fastest batch --------------------------------- */
#define BFIT_PROBE_MAX_RUNGS 40    /* ladder sizes: enough for limits up to 2^38 */
#define BFIT_PROBE_SEARCH_STEPS 3  /* steps per trial of the search find is compared with */

typedef struct bfit_probe_cfg {
    uint64_t capacity;      /* device memory to plan for; 0: the arena's capacity */
    double margin;          /* fraction of capacity kept free, 0 <= margin < 1 */
    int limit;              /* largest micro-batch considered; 0: 1 << 20 */
    int ladder;             /* 1: also measure throughput (the fastest batch) */
    int warmup;             /* steps per ladder size before measuring, >= 0 */
    int repeats;            /* measured steps per ladder size (median), >= 1 */
    double tolerance;       /* recommend the smallest size within this fraction of the best, [0, 1) */
    double data_threshold;  /* data-wait share of a step above which the loader is the limit, (0, 1] */
    uint64_t seed;          /* dropout masks of the probe steps */
} bfit_probe_cfg;

/* Defaults: the arena's capacity, margin 0.1, limit 1 << 20, ladder on,
 * warm-up 1, repeats 5, tolerance 0.05, data threshold 0.2, seed 1. */
bfit_probe_cfg bfit_probe_cfg_default(void);

/* Why nothing fits (res->no_fit). */
typedef enum {
    BFIT_PROBE_FITS = 0,
    BFIT_PROBE_FIXED_OVER_CAPACITY, /* params + grads + optimizer state exceed the capacity */
    BFIT_PROBE_FIXED_OVER_BUDGET,   /* ... fit the capacity but not the budget (the margin) */
    BFIT_PROBE_BATCH1_OVER_BUDGET   /* the fixed part fits, batch 1's step does not */
} bfit_probe_no_fit;

/* One size of the ladder. */
typedef struct bfit_probe_rung {
    int m;
    uint64_t planned_peak;   /* plan(m).peak */
    uint64_t measured_peak;  /* the arena's high-water mark over the steps, less what others hold */
    double step_s;           /* median seconds of a measured step (take + forward + backward) */
    double samples_per_s;    /* m / step_s */
    double spread;           /* width of the middle half of the measured step times / step_s
                                (all of them for fewer than 4): over 0.5, something else used the CPU */
    double wait_share;       /* median over the measured steps of the share spent waiting for samples */
} bfit_probe_rung;

typedef struct bfit_probe_result {
    /* the budget */
    uint64_t capacity;       /* device memory planned for */
    uint64_t budget;         /* capacity * (1 - margin): the arena's capacity during the probe */
    uint64_t held_other;     /* held in the arena besides the model's parameters and gradients */
    bfit_plan p1;            /* the plan at m = 1: the fixed part per category */
    bfit_probe_no_fit no_fit;
    uint64_t missing;        /* no_fit: bytes over the capacity or budget */
    int limit;               /* the limit searched up to */

    /* the largest batch */
    int plan_m;              /* the plan's answer */
    int largest;             /* the answer: plan_m, or the real search's if they disagreed */
    bfit_plan plan_largest;  /* plan(largest) */
    bfit_plan plan_next;     /* plan(largest + 1), if largest < limit */
    uint64_t measured_largest; /* measured peak of the confirming step */
    int next_refused;        /* 1: reserving largest + 1 was refused; 0: largest is the limit */
    int plan_agrees;         /* 0: a real step contradicted the plan (see disagreement) */
    char disagreement[512];
    int largest_steps;       /* real step attempts for the largest batch (refusals included) */
    int search_trials;       /* a doubling-then-bisecting search against the same budget: trials */
    int search_steps;        /*   ... times BFIT_PROBE_SEARCH_STEPS */
    int search_m;            /*   ... and its answer */

    /* the fastest batch (ladder on) */
    int nrungs;
    bfit_probe_rung rungs[BFIT_PROBE_MAX_RUNGS];
    int ladder_steps;        /* real steps the ladder ran (warm-up included) */
    int best;                /* index of the highest samples/s */
    int recommended;         /* index of the smallest size within tolerance of the best */
    double data_share;       /* wait share at the recommended size */
    int data_bound;          /* data_share > data_threshold: the loader is the limit */

    /* for reports */
    int threads;
    int64_t params;
    int input_nd, input_dims[4]; /* the model's sample shape */
    int64_t data_count;
    char data_note[160];     /* bfit_dataset_note of the data ("" if nothing to say) */
} bfit_probe_result;


/* Everything `batchfit find` sets up. */
typedef struct bfit_find_cfg {
    const char *model;      /* a preset name or a spec file (bfit_model_source_load) */
    const char *data;       /* a data set (bfit_dataset_load), or "synthetic": random samples of the model's shape */
    bfit_csv_header csv_header; /* a CSV file's first row (auto) */
    const char *device_name;/* bfit_device_open's name; NULL: auto */
    bfit_conv_algo conv_algo;/* GPU convolution algorithms */
    bfit_storage storage;   /* precision, lean, recomputation (auto: the largest micro-batch) */
    uint64_t memory;        /* device capacity; 0: what the device has free */
    int threads;            /* CPU threads; 0: OpenMP's setting */
    int normalize, prefetch, augment;
    uint64_t seed;          /* init, shuffling, dropout */
    int limit;              /* 0: the training set's size (no micro-batch is larger) */
    bfit_optim_cfg opt;     /* whose state is planned and held */
    bfit_probe_cfg probe;   /* capacity and limit are set from the fields above */
} bfit_find_cfg;

/* Defaults: fashion-mnist, normalised, prefetching, no augmentation, seed 1,
 * SGD with momentum 0.9, bfit_probe_cfg_default. */
bfit_find_cfg bfit_find_cfg_default(void);

/* Build the model, load the data and probe (bfit_probe_run) on a new arena
 * of cfg->memory. The result is filled as far as it got, so that a model
 * that does not fit can be explained. */
int bfit_probe_find(const bfit_find_cfg *cfg, bfit_probe_result *res);

/* Write the find chart (throughput and memory against the micro-batch) as an
 * SVG file, atomically (src/batch/find_chart.c). */
int bfit_probe_chart_save(const char *path, const char *model, double tolerance, double margin,
                          const bfit_probe_result *r);

#ifdef __cplusplus
}
#endif
#endif
