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


#endif
