/* profile.h - a training step timed alone, and the device's matmul
 * (profile.c; the public face is bfit_profile, src/api/profile.c). */
#ifndef BFIT_PROFILE_H
#define BFIT_PROFILE_H

#include "tensor/tensor.h"

#include <stdint.h>

typedef struct bfit_profile_cfg {
    const char *model;       /* preset, spec or other model source */
    const char *device_name; /* NULL: cpu */
    int batch;               /* the micro-batch, which is the whole step */
    int reps, warmup;        /* timed repetitions (the median is taken) and untimed steps first */
    int threads;             /* 0: OpenMP's */
    double rep_seconds;      /* about how long a timed repetition runs (at least 2 steps) */
    bfit_dtype precision;
    int seq;                 /* token models: the length, as plan --seq (0: the model's) */
    double mask;             /* a masked LM's share of scored tokens (mask-tokens), its head gathered as its
                                run's; 0: every token scored */
} bfit_profile_cfg;

typedef struct bfit_profile_result {
    double samples_per_s, samples_per_cpu_s; /* medians over the repetitions */
    double op_share; /* BFIT_OPTIME=1: the device's ops' seconds over the timed steps' (each op waited for); else -1 */
    double flops_per_sample; /* of the linear and conv layers (every layer for a token model) */
    double loss;             /* of the last step, per sample (per token) */
    int tokens_per_sample;   /* a token model's T, else 0 */
    int reps, steps, warmup, threads;
    bfit_dtype precision;
} bfit_profile_result;

int bfit_profile_step(const bfit_profile_cfg *c, bfit_profile_result *r);
/* dst[m, n] = src[m, k] x weights[k, n] f32, reps medians of 10 runs. */
int bfit_profile_matmul(const char *device, int64_t m, int64_t n, int64_t k, int reps, int threads, double *gflops,
                        int *threads_used);

#endif
