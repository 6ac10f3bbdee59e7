/* plan.h - the memory plan: every byte a training (or eval) step holds on
 * the device for micro-batch m, by category, without allocating; and the
 * solver for the largest m that fits a capacity.
 *
 * The plan is the sum of what the model allocates for parameters and
 * gradients, what the optimizer allocates for its state, and the step blocks
 * of bfit_model_layout. The trainer allocates exactly these, so the planned
 * peak is the arena's measured peak. */
#ifndef BFIT_PLAN_H
#define BFIT_PLAN_H

#include "nn/model.h"
#include "optim/optim.h"

typedef struct bfit_step_plan {
    int m, training;
    uint64_t bytes[BFIT_MEM_NCAT];
    uint64_t fixed;      /* params + grads + optimizer + other (the model's statistics): independent of m */
    uint64_t step;       /* activations + act_grads + workspace + input */
    uint64_t peak;       /* fixed + step */
    uint64_t no_reuse;   /* the peak if no buffer were shared */
    double flops;        /* modelled work of the step (forward, regenerations, backward) */
    double regen_flops;  /* of which regenerations (recomputation, lean relu outputs) */
} bfit_step_plan;

/* Plan for micro-batch m. opt NULL: no optimizer state (eval, or find). */
int bfit_plan_compute(bfit_model *M, const bfit_optim_cfg *opt, int m, int training, bfit_step_plan *p);

/* The largest m in [1, limit] whose planned peak fits in budget bytes
 * (peak <= budget), by bfit_largest_fit (batch/solve.h). Returns BFIT_OK
 * with *m_out = 0 when even m = 1 does not fit (p1, if not NULL, gets the
 * plan for m = 1 so callers can say by how much). Whatever it returns fits. */
int bfit_plan_max_batch(bfit_model *M, const bfit_optim_cfg *opt, int training, uint64_t budget, int limit,
                        int *m_out, bfit_step_plan *p1);

/* How M stores a training step: precision, lean, recomputation. Before its
 * parameters are allocated (their 16-bit compute copies are sized by the
 * precision). Auto chooses the values to keep: with target > 0, the least
 * recomputed work with which micro-batch `target` fits in budget bytes
 * (the whole step's peak), or, if it cannot fit, the largest micro-batch;
 * with target 0, the largest micro-batch. opt: the optimizer whose state
 * the plans count (NULL: none). */
int bfit_model_set_storage(bfit_model *M, const bfit_storage *s, const bfit_optim_cfg *opt, uint64_t budget,
                           int target);





/* bfit_budget (batch/solve.h): capacity * (1 - margin), rounded down. */
uint64_t bfit_plan_budget(uint64_t capacity, double margin);

/* The largest m in [1, limit] whose whole step (fixed part included) takes
 * at most `fraction` of capacity, fraction in (0, 1]: the solver with budget
 * capacity * fraction. *m_out = 0 when m = 1 does not fit (see p1 above). */
int bfit_plan_max_batch_fraction(bfit_model *M, const bfit_optim_cfg *opt, int training, uint64_t capacity,
                                 double fraction, int limit, int *m_out, bfit_step_plan *p1);

/* A straight line through plans of one model and settings: the per-sample
 * slope of the peak (and of each category) between the smallest and the
 * largest m given, and how far any of the plans lies from that line. The
 * plan is affine up to alignment padding (64 bytes per buffer) for layers
 * whose workspace grows linearly; a larger deviation means some layer's
 * needs jump with m (oneDNN choosing another algorithm). */
typedef struct bfit_plan_line {
    int m1, m2;                       /* the slope is taken between these */
    double slope;                     /* bytes per sample of the peak */
    double cat_slope[BFIT_MEM_NCAT];  /* bytes per sample of each category */
    double intercept;                 /* the line at m = 0: peak(m1) - slope * m1 */
    uint64_t max_dev;                 /* largest |peak(m) - line(m)| over the plans */
    int dev_m;                        /* the m where it is (0 if none deviates) */
} bfit_plan_line;

/* Fit the line through p[0..n); needs two plans with different m
 * (BFIT_EINVAL otherwise). Pure. */
int bfit_plan_line_fit(const bfit_step_plan *p, int n, bfit_plan_line *out);

/* What `batchfit plan` reports, computed (src/batch/plan_report.c). */
#define BFIT_PLAN_LIMIT (1 << 20)   /* the largest batch the solver looks for */
#define BFIT_PLAN_REPORT_MAX 16     /* sizes asked for */
typedef struct bfit_plan_report {
    uint64_t memory, budget;        /* budget: memory less the margin */
    double margin;
    int training;
    int m_margin, m_full;           /* largest batch within the budget / the whole memory (0: none) */
    bfit_step_plan p1;                   /* m = 1 */
    bfit_step_plan shown[BFIT_PLAN_REPORT_MAX + 1];
    int nshown;
    bfit_plan_line line;            /* through the two largest shown (or the one and the next) */
    int affine;                     /* every plan with m >= 2 lies on the line (up to padding) */
    int affine1;                    /* and so does m = 1 */
    double dev_signed, dev1;        /* plan - line at line.dev_m, and at m = 1 */
    bfit_mem_cat dev_cat, dev1_cat; /* the categories that stray most there */
} bfit_plan_report;

/* Plan the sizes batches[0..nbatch) (sorted; nbatch 0: 1, 2 and the largest
 * that fits the budget), find the largest batch with and without the margin,
 * fit the per-sample line and check every plan made against it. */
int bfit_plan_report_make(bfit_model *M, const bfit_optim_cfg *opt, int training, uint64_t memory, double margin,
                          const int *batches, int nbatch, bfit_plan_report *r);

#endif
