/* loader.c - the loader measured alone (bfit_loader_measure): how many
 * training samples per second the data's loader makes for the model, the
 * training transform included; bench/img_loader.py's batchfit side. */
#include "api/config_int.h"
#include "base/err.h"
#include "batch/probe.h"

int bfit_loader_measure(const bfit_config *c, int take, int64_t samples, double *samples_per_s, int *threads)
{
    bfit_find_cfg fc;
    int rc, t = 0;

    if (!c || !samples_per_s || take < 1 || samples < 1)
        return bfit_fail(BFIT_EINVAL, "loader_measure: a config, take >= 1, samples >= 1 and a result are needed");
    *samples_per_s = 0;
    if ((rc = bfit_config_find_cfg(c, &fc)) != BFIT_OK)
        return rc;
    rc = bfit_probe_loader_alone(&fc, take, samples, samples_per_s, &t);
    if (threads)
        *threads = t;
    return rc;
}
