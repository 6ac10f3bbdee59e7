/* trun.c - a short training run's configuration for tests (trun.h). */
#include "trun.h"

bfit_train_cfg trun_cfg(const char *model, int E, int64_t samples, int64_t eval)
{
    bfit_train_cfg c = bfit_train_cfg_default();
    c.device_name = "cpu"; /* the CPU is meant: device auto could take a GPU */
    c.model = model;
    c.batch = E;
    c.epoch_samples = samples;
    c.eval_samples = eval;
    c.threads = 2;
    return c;
}
