/* ways.h - the "ways to increase the batch" table (src/batch/ways.c). */
#ifndef BFIT_WAYS_H
#define BFIT_WAYS_H

#include "nn/graph.h"
#include "batchfit.h"

#define BFIT_WAYS 6

typedef struct bfit_way {
    const char *name;         /* "bf16 + recompute auto" */
    bfit_storage storage;     /* as asked (auto, not what it resolved to) */
    int accum;                /* micro-steps per optimizer step */
    int m;                    /* the largest micro-batch within the budget (0: none fits) */
    int batch;                /* the effective batch: m x accum */
    uint64_t peak;            /* planned at m */
    double extra;             /* recomputed FLOPs / the step's other FLOPs (modelled) */
    double step_secs;         /* measured median of a step of `batch` samples (0: not measured;
                                 accumulation rows: the micro-step's row times accum) */
    double samples_per_sec;
    int measure_failed;       /* out of memory while measuring */
    char error[320];          /* why the row has no figures ("unsupported on cuda:0: ..."), or "" */
    int conv_algo;            /* bfit_conv_algo the row was planned with where plan chose per row
                                 (conv_algo auto on a GPU), -1: the device's own */
} bfit_way;

/* The table's rows for the model of g on dev, planned within budget bytes
 * (arena: the device's accounting; measuring allocates in it). With
 * measure_steps > 0 each row's micro-batch is also run that many steps on
 * random samples and timed. A row the device cannot run (a precision or op
 * it lacks), or whose planning fails, is marked with its error and the
 * others are still filled; only a failure to build the model is returned. */
int bfit_plan_ways(const bfit_graph_desc *g, bfit_device *dev, bfit_arena *arena, const bfit_optim_cfg *opt,
                   uint64_t budget, int measure_steps, bfit_way out[BFIT_WAYS]);

#endif
