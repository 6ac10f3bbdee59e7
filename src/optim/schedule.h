/* schedule.h - learning-rate schedules: an optional linear warmup, then
 * constant, step decay or cosine decay. A pure function of the step, so a
 * resumed run needs only the step count.
 *
 * Steps count optimizer steps from 0 (the lr for the first update is
 * bfit_lr_at(s, base, 0)). Warmup is PyTorch's LinearLR: over steps
 * 0..W-1 the factor rises linearly from warmup_start to 1, reaching 1 at
 * step W. The main schedule then runs on t = step - W (like SequentialLR
 * with the milestone at W):
 *   constant  base
 *   step      base * gamma^floor(t / step_size)            (StepLR)
 *   cosine    min + (base - min) * (1 + cos(pi t / T)) / 2, T = total - W,
 *             min = base * min_factor, and min from t = T on  (CosineAnnealingLR,
 *             held at its minimum instead of rising again)
 */
#ifndef BFIT_SCHEDULE_H
#define BFIT_SCHEDULE_H

#include <stdint.h>

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



#endif
