/* batchfit.h - the public API of libbatchfit.
 *
 * Opaque handles with _new/_free pairs. Every function that can fail returns
 * an int status (BFIT_OK or a negative BFIT_E* code) and leaves a message in
 * bfit_errmsg(); the library never exits or aborts on a recoverable condition.
 */
#ifndef BATCHFIT_H
#define BATCHFIT_H

#include <stddef.h>
#include <stdint.h>

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
    BFIT_ESTATE = -6    /* call not valid in the object's current state */
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

typedef struct bfit_cpu_cfg {
    int threads;                 /* > 0: ops run on this many threads (set around each device
                                    call and restored); 0: OpenMP's own setting, untouched */
    int check;                   /* 1: device memory is inaccessible (PROT_NONE) outside device
                                    calls, and op arguments must be device memory; -1: from
                                    the environment (BFIT_DEVICE_CHECK=1), 0: off */
    const bfit_host_alloc *host; /* where device blocks come from; NULL: aligned_alloc
                                    (the checking mode maps its own pages) */
} bfit_cpu_cfg;

/* Defaults: threads 0, check -1, host NULL. */
bfit_cpu_cfg bfit_cpu_cfg_default(void);

/* Open a device by name: "cpu", "cuda" or "cuda:N" (N-th GPU), or NULL /
 * "auto" for a GPU when one is present, else the CPU. cpu may be NULL
 * (defaults). BFIT_EINVAL for an unknown name, BFIT_EDEVICE when the device
 * cannot be used (saying why: not built with CUDA, no GPU, driver error). */
int bfit_device_open(const char *name, const bfit_cpu_cfg *cpu, bfit_device **out);
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
    BFIT_LR_NRULES
} bfit_lr_rule;

/* "linear", "sqrt", "none" (case-insensitive); BFIT_EINVAL naming the valid
 * ones otherwise. */
int bfit_lr_rule_parse(const char *name, bfit_lr_rule *out);
const char *bfit_lr_rule_name(bfit_lr_rule rule);
/* rule(ratio); ratio > 0. */
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
    BFIT_REASON_COUNT
} bfit_batch_reason;

/* "start", "out of memory", "memory shrank", "memory freed", "throughput",
 * "schedule", "noise scale" ("" for none). */
const char *bfit_batch_reason_name(bfit_batch_reason r);

/* One point of a batch schedule: from step (or epoch) `at` on, E = batch. */
typedef struct bfit_batch_point {
    int64_t at;
    int by_epoch;  /* `at` counts epochs, not optimizer steps */
    int batch;
} bfit_batch_point;

#define BFIT_BATCH_SCHEDULE_MAX 64

/* Parse a batch schedule: comma-separated AT:E points, AT a step number
 * ("0:32,1000:64,2000:128") or 'e' and an epoch number ("e0:32,e2:64"); all
 * points in one unit, AT strictly increasing, E >= 1; blanks around items are
 * allowed. Fills out[0..*n), at most max points. BFIT_EINVAL with a message
 * naming the 1-based character position otherwise. */
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
    int batch_min, batch_max;  /* adaptive: 2 <= batch_min <= batch_max */
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
    double noise_alpha;        /* EMA weight of the noise estimator, (0, 1] */
    int noise_min_updates;     /* estimates needed before E follows them */
} bfit_controller_config;

/* Defaults: auto micro-batch, margin 0, linear rule, W 100, G 5, X 0.05, N 50,
 * flap window 200, skip 1, tput alpha 0.3, adapt interval 100, factor 2,
 * min change 0.1, noise alpha 0.05, 20 updates. Memory, plan and E are the
 * caller's to set. */
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
    char why[200];           /* for logs: "memory shrank: micro-batch 90 -> 50 (...)" */
} bfit_batch_decision;

/* What the trainer saw in one optimizer step. */
typedef struct bfit_step_stats {
    int64_t step;            /* the step the last bfit_controller_next decided */
    int epoch;
    int samples;             /* samples in the step */
    double seconds;          /* wall time of the step */
    double data_seconds;     /* of which waiting for data (not counted as compute) */
    uint64_t free_bytes;     /* now, as defined above */
    uint64_t capacity;       /* now */
    /* gradient noise (optional, nmicro = 0: none): the squared L2 norm of each
     * micro-batch's mean gradient with its size, and of the whole step's mean
     * gradient (B_big = the sum of the sizes). Needs nmicro >= 2. */
    int nmicro;
    const double *micro_sqnorm;
    const int *micro_size;
    double full_sqnorm;
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
/* B_noise (>= 0; a negative tr(S) estimate reads 0); BFIT_ESTATE before any
 * estimate or while the smoothed |G|^2 is not positive. */
int bfit_noise_scale(const bfit_noise *nz, double *b_noise);

#ifdef __cplusplus
}
#endif
#endif
