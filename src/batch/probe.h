/* probe.h - the finder: the largest micro-batch that fits a device's memory
 * and the micro-batch that trains fastest, answered with few real steps.
 *
 * The largest batch comes from the plan (bfit_plan_max_batch) for the budget
 * capacity * (1 - margin), and is then confirmed on the device: with the
 * arena's capacity set to exactly the budget, a real training micro-step
 * (reserve, forward, backward on real samples) runs at m and reserving m + 1
 * is refused. Since the arena enforces the capacity, that proves the answer;
 * two step attempts replace the log2(m) to 2 log2(m) trials of a
 * doubling-then-bisecting search. If a real step disagrees with the plan
 * (a bug), the result says so and the answer comes from such a search, run
 * with real steps.
 *
 * The fastest batch: samples/s measured at a geometric ladder of sizes
 * (1, 2, 4, ... and the largest), warm-up steps excluded, the median of the
 * measured steps; the recommendation is the smallest size within a
 * tolerance of the best. A step is what the trainer's micro-step does: take
 * the samples from the stream, forward, backward. The optimizer runs once
 * per effective batch whatever the micro-batch, so it is not timed.
 *
 * The model is left as found: probe steps compute gradients but no optimizer
 * step is taken, and parameters (batch-norm running statistics included) and
 * gradients are snapshotted to host memory and restored.
 *
 * Inputs of varying size would be planned on the largest; the data sets
 * batchfit reads have one sample shape, the model's input shape, which is
 * what the plan uses.
 */
#ifndef BFIT_PROBE_H
#define BFIT_PROBE_H

#include <stdio.h>

#include "batch/plan.h"
#include "data/data.h"

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
    double tolerance;       /* when the best's lead is within the measured spread: the largest size within
                               this fraction of the best is the fastest batch, [0, 1) */
    double data_threshold;  /* data-wait share of a step above which the loader is the limit, (0, 1] */
    uint64_t seed;          /* dropout masks of the probe steps */
    FILE *human;            /* progress for people (which size is being confirmed, measured); NULL: quiet */
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
    int limited;             /* the capacity is the room an address-space limit (ulimit -v) left:
                                the limit, not the memory given, is what to raise */
    bfit_step_plan p1;            /* the plan at m = 1: the fixed part per category */
    bfit_probe_no_fit no_fit;
    uint64_t missing;        /* no_fit: bytes over the capacity or budget */
    int limit;               /* the limit searched up to */

    /* the largest batch */
    int plan_m;              /* the plan's answer */
    int largest;             /* the answer: plan_m, or the real search's if they disagreed */
    bfit_step_plan plan_largest;  /* plan(largest) */
    bfit_step_plan plan_next;     /* plan(largest + 1), if largest < limit and it can be made */
    char next_unmade[256];   /* why largest + 1 cannot be made on the device (an op's limit, such as
                                cuDNN's 2^31 - 1 elements a tensor), else "" */
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
    int clear_best;          /* its lead over every other size is larger than their measured spreads */
    int recommended;         /* the fastest batch: best when its lead is clear, else the largest size
                                within tolerance of the best (bfit_probe_analyse) */
    double data_share;       /* wait share at the recommended size */
    int data_bound;          /* data_share > data_threshold: the loader is the limit */
    /* image folders: the loader measured alone (find) */
    int loader_threads;      /* 0: not measured (data in memory) */
    double loader_rate;      /* samples/s the loader threads make, the training transform included */
    double compute_rate;     /* samples/s of the recommended size's compute alone (its data wait taken out) */
    int loader_bound;        /* the loader is slower than that compute: it bounds the speed */

    /* for reports */
    int threads;
    int64_t params;
    int input_nd, input_dims[4]; /* the model's sample shape */
    int input_tokens;        /* 1: it is input_dims[0] token ids (a token model) */
    int64_t data_count;
    char data_note[256];     /* bfit_dataset_note of the data ("" if nothing to say) */
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
    bfit_img_opts img;      /* image folders: transforms and loader threads */
    uint64_t seed;          /* init, shuffling, dropout */
    int limit;              /* 0: the training set's size (no micro-batch is larger) */
    int seq;                /* token models: windows of seq tokens (0: the model's length) */
    int attention;          /* BFIT_ATTN_* (nn/zoo.h): every attention layer stored or lean (0: the model's) */
    bfit_mlm mlm;           /* token data: a masked LM's labels (p > 0), its head gathered, as a run's */
    bfit_optim_cfg opt;     /* whose state is planned and held */
    bfit_probe_cfg probe;   /* capacity and limit are set from the fields above */
} bfit_find_cfg;

/* Defaults: fashion-mnist, normalised, prefetching, no augmentation, seed 1,
 * SGD with momentum 0.9, bfit_probe_cfg_default. */
bfit_find_cfg bfit_find_cfg_default(void);

/* Samples/s that the stream's loader threads (sc0's) make for takes of m
 * with nothing else running: one take made on the spot (its buffers grow),
 * then prefetched takes: `samples` of them, or (0) for about a second. */
int bfit_probe_loader_rate(const bfit_dataset *d, const bfit_stream_cfg *sc0, int m, int64_t samples, double *rate);
/* The same for find's model and data: the training stream a run would make. */
int bfit_probe_loader_alone(const bfit_find_cfg *cfg, int take, int64_t samples, double *rate, int *threads);

/* Build the model, load the data and probe (bfit_probe_run) on a new arena
 * of cfg->memory. The result is filled as far as it got, so that a model
 * that does not fit can be explained. */
int bfit_probe_find(const bfit_find_cfg *cfg, bfit_probe_result *res);

/* Write the find chart (throughput and memory against the micro-batch) as an
 * SVG file, atomically (src/batch/find_chart.c). */
int bfit_probe_chart_save(const char *path, const char *model, double tolerance, double margin,
                          const bfit_probe_result *r);


/* Probe model M, whose parameters and gradients are allocated on its
 * device's arena, with samples of data set d drawn by a stream made from sc
 * (its max_take is set here). opt: the optimizer whose state a training step
 * holds; the probe allocates it for its run and never steps it (NULL if the
 * caller already holds its optimizer in this arena, which then counts among
 * what the arena holds). Whatever else the arena holds counts against the
 * budget. During the probe the arena's capacity is the budget; it is
 * restored, and the model is left with its parameters and gradients as
 * found and no step reserved.
 *
 * Returns BFIT_OK with res filled; BFIT_ENOMEM when even batch 1 does not
 * fit (res->no_fit says why, res->missing by how much); BFIT_EINVAL for a
 * bad cfg or a data set that does not match the model; BFIT_ESTATE for a
 * model without parameters or gradients. A real step that disagrees with the
 * plan is not an error: res->plan_agrees is 0 and res->disagreement says
 * what happened. */
int bfit_probe_run(bfit_model *M, const bfit_dataset *d, const bfit_stream_cfg *sc, const bfit_optim_cfg *opt,
                   const bfit_probe_cfg *cfg, bfit_probe_result *res);

/* The throughput analysis on res->rungs (best, recommended, data share and
 * bound) for a tolerance and a threshold. Pure; bfit_probe_run calls it. */
void bfit_probe_analyse(bfit_probe_result *res, double tolerance, double data_threshold);


#endif
