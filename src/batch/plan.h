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

typedef struct bfit_plan {
    int m, training;
    uint64_t bytes[BFIT_MEM_NCAT];
    uint64_t fixed;      /* params + grads + optimizer: independent of m */
    uint64_t step;       /* activations + act_grads + workspace + input */
    uint64_t peak;       /* fixed + step */
    uint64_t no_reuse;   /* the peak if no buffer were shared */
} bfit_plan;

/* Plan for micro-batch m. opt NULL: no optimizer state (eval, or find). */
int bfit_plan_compute(bfit_model *M, const bfit_optim_cfg *opt, int m, int training, bfit_plan *p);

/* The largest m in [1, limit] whose planned peak fits in budget bytes
 * (peak <= budget). Returns BFIT_OK with *m_out = 0 when even m = 1 does not
 * fit (p1, if not NULL, gets the plan for m = 1 so callers can say by how
 * much). Peak is nondecreasing in m, so this bisects. */
int bfit_plan_max_batch(bfit_model *M, const bfit_optim_cfg *opt, int training, uint64_t budget, int limit,
                        int *m_out, bfit_plan *p1);

#endif
