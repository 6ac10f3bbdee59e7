/* find.c - `find` in the library (bfit_find): the largest batch that fits
 * (planned, confirmed by real steps) and the fastest (measured), the chart,
 * and when nothing fits, what memory would. The probe is batch/probe.c. */
#include "api/config_int.h"
#include "api/find_int.h"
#include "api/result.h"
#include "base/aslimit.h"
#include "base/err.h"
#include "base/outpath.h"
#include "batch/solve.h"

#include <stdlib.h>

static const char *fmt(uint64_t b, char *buf) { return bfit_format_size(b, buf, 32); }

/* The capacity was the room an address-space limit left: the limit is
 * what to raise, not --memory (BFIT_ENOMEM kept). The room is not read
 * again: what took it (the data, the stream) is freed by now. */
static int limit_no_fit(const bfit_find_cfg *fc, const char *hint)
{
    uint64_t limit, room;
    char b1[32], b2[32];

    if (!bfit_as_room(&limit, &room))
        return bfit_fail(BFIT_ENOMEM, "%s: %s%s", fc->model, bfit_errmsg(), hint);
    return bfit_fail(BFIT_ENOMEM, "out of host memory: %s: %s; that memory is what the address-space limit "
                     "(ulimit -v) of %s left beside the data, the stream and their threads, less %s kept for "
                     "oneDNN's kernels: raise ulimit -v%s", fc->model, bfit_errmsg(), fmt(limit, b1),
                     fmt(BFIT_AS_HEADROOM, b2), hint);
}

/* Nothing fits: say what memory would (BFIT_ENOMEM kept). */
static int explain_no_fit(const bfit_find_cfg *fc, const bfit_probe_result *r, int rc)
{
    char b1[32], b2[32], hint[160] = "";
    double margin = fc->probe.margin;

    if (rc != BFIT_ENOMEM || r->no_fit == BFIT_PROBE_FITS)
        return rc;
    if (r->p1.bytes[BFIT_MEM_OPTIMIZER])
        snprintf(hint, sizeof hint, ", or hold no optimizer state (%s of it): --optimizer sgd --momentum 0",
                 fmt(r->p1.bytes[BFIT_MEM_OPTIMIZER], b1));
    if (r->limited)
        return limit_no_fit(fc, hint);
    if (margin > 0)
        return bfit_fail(BFIT_ENOMEM, "%s: %s; give --memory of at least %s for batch 1 (%s with --margin 0)%s",
                         fc->model, bfit_errmsg(),
                               fmt(bfit_capacity_for(r->p1.peak + r->held_other, margin), b1),
                               fmt(r->p1.peak + r->held_other, b2), hint);
    return bfit_fail(BFIT_ENOMEM, "%s: %s; give --memory of at least %s for batch 1%s", fc->model, bfit_errmsg(),
                     fmt(r->p1.peak + r->held_other, b1), hint);
}

/* The probe's answers into the result; the chart when asked. */
static int report(const bfit_config *c, const bfit_find_cfg *fc, const bfit_probe_result *r, bfit_result *res)
{
    int rc;
    if (bfit_result_out(res))
        bfit_find_text(fc, r, bfit_result_out(res));
    if ((rc = bfit_find_json(fc, r, res->root)) != BFIT_OK)
        return rc;
    if (c->plot) {
        if ((rc = bfit_probe_chart_save(c->plot, fc->model, fc->probe.tolerance, fc->probe.margin, r)) != BFIT_OK)
            return bfit_fail_field(rc, "plot", "%s", bfit_errmsg());
        if (bfit_result_out(res))
            fprintf(bfit_result_out(res), "chart: %s\n", c->plot);
        cJSON_AddStringToObject(res->root, "chart", c->plot);
    }
    if (!r->plan_agrees)
        return bfit_fail(BFIT_EDEVICE, "THE MEMORY PLAN DISAGREES WITH A REAL STEP: %s. This is a bug in batchfit: "
                         "please report it with this output. The largest batch printed comes from a "
                         "doubling-then-bisecting search with real steps, not from the plan.", r->disagreement);
    return BFIT_OK;
}

int bfit_find(const bfit_config *c, bfit_result **out)
{
    bfit_find_cfg fc;
    bfit_probe_result *r;
    bfit_result *res;
    int rc;

    if (!out)
        return bfit_fail(BFIT_EINVAL, "bfit_find needs somewhere to put the result");
    *out = NULL;
    if ((rc = bfit_config_find_cfg(c, &fc)) != BFIT_OK || (rc = bfit_config_precision(c, &fc.storage.precision)) != BFIT_OK)
        return rc;
    if (c->plot && (rc = bfit_outpath_check("plot", c->plot)) != BFIT_OK)
        return rc; /* now, not after the measurements */
    if (!(r = calloc(1, sizeof *r)))
        return bfit_fail(BFIT_ENOMEM, "out of host memory");
    if (!(res = bfit_result_make())) {
        free(r);
        return BFIT_ENOMEM;
    }
    rc = bfit_probe_find(&fc, r);
    if (rc == BFIT_OK)
        rc = report(c, &fc, r, res);
    else
        rc = explain_no_fit(&fc, r, rc);
    bfit_result_close(res);
    free(r);
    if (rc != BFIT_OK && rc != BFIT_ENOMEM && rc != BFIT_EDEVICE) {
        bfit_result_free(res);
        return rc;
    }
    *out = res;
    return rc;
}
