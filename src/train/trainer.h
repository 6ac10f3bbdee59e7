/* trainer.h - the step loop: samples from the stream, micro-batches on the
 * device, gradients summed over the effective batch, optimizer steps, an
 * evaluation after each epoch, weights saved at the end.
 *
 * An optimizer step consumes exactly E samples (the last of an epoch may
 * have fewer) in micro-batches of m; the loss is normalised by the samples in
 * the optimizer step, so the gradient does not depend on the split. Every
 * micro-step reserves its memory before it computes (OOM-atomic); on an
 * out-of-memory the micro-batch shrinks to what the plan says fits now and
 * the same samples are taken again. */
#ifndef BFIT_TRAINER_H
#define BFIT_TRAINER_H

#include <stdio.h>

#include "batch/memsched.h"
#include "data/data.h"
#include "optim/optim.h"
#include "optim/schedule.h"


#endif
