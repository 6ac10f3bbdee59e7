/* trun.h - the configuration of a short training run for tests: model,
 * effective batch E, samples per epoch (Fashion-MNIST unless the test gives
 * other data), evaluation on eval test samples, two threads. */
#ifndef BFIT_TRUN_H
#define BFIT_TRUN_H

#include "internal.h"

bfit_train_cfg trun_cfg(const char *model, int E, int64_t samples, int64_t eval);

#endif
