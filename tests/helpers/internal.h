/* internal.h - the library's internal headers a test reaches, in one
 * include: tests are the library's own and test below the public API. */
#ifndef BFIT_TEST_INTERNAL_H
#define BFIT_TEST_INTERNAL_H

#include "batchfit.h"
#include "base/err.h"
#include "base/sized.h"
#include "base/testctl.h"
#include "base/values.h"
#include "batch/control_state.h"
#include "batch/memsched.h"
#include "batch/noise.h"
#include "batch/plan.h"
#include "batch/probe.h"
#include "data/data.h"
#include "device/device.h"
#include "mem/arena.h"
#include "nn/model.h"
#include "optim/optim.h"
#include "optim/schedule.h"
#include "tensor/tensor.h"
#include "train/trainer.h"

#endif
