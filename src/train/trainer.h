/* trainer.h - the training run's internal face. Its public API (the
 * configuration, bfit_run_*, bfit_train, bfit_evaluate) is in batchfit.h;
 * what is here is for the library's own tests and tools. */
#ifndef BFIT_TRAINER_H
#define BFIT_TRAINER_H

#include <stdio.h>

#include "batch/memsched.h"
#include "data/data.h"
#include "optim/optim.h"
#include "optim/schedule.h"

/* The run's arena, so a test can inject a fault or change the capacity at a
 * chosen moment. */
bfit_arena *bfit_run_arena(bfit_run *r);

#endif
