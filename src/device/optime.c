/* optime.c - op times by kind and dtype (optime.h). */
#include "device/optime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void bfit_optime_attach(bfit_device *d)
{
    const char *e = getenv("BFIT_OPTIME");

    if (d && !d->optime && e && *e && strcmp(e, "0") != 0)
        d->optime = calloc(1, sizeof *d->optime); /* a diagnostic: without it, no table */
}

double bfit_optime_begin(bfit_device *d)
{
    if (!d->optime)
        return 0;
    bfit_device_sync(d);
    return now();
}

void bfit_optime_end(bfit_device *d, int row, bfit_dtype t, double t0)
{
    double s;

    if (!d->optime || row < 0 || row >= BFIT_OPTIME_ROWS || (unsigned)t >= BFIT_NDTYPES)
        return;
    bfit_device_sync(d);
    s = now() - t0;
    d->optime->secs[row][t] += s;
    d->optime->calls[row][t]++;
    d->optime->total += s;
}

double bfit_device_op_seconds(const bfit_device *d) { return d && d->optime ? d->optime->total : -1; }

static const char *row_name(int row)
{
    return row == BFIT_OPTIME_COPY ? "copy" : row == BFIT_OPTIME_FILL ? "fill" : bfit_op_kind_name((bfit_op_kind)row);
}

void bfit_optime_detach(bfit_device *d)
{
    bfit_optime *o = d ? d->optime : NULL;

    if (!o)
        return;
    fprintf(stderr, "%s: op times (BFIT_OPTIME), %.3f s in all\n%-30s %-5s %9s %10s %6s\n", bfit_device_name(d),
            o->total, "op", "dtype", "calls", "seconds", "share");
    for (;;) { /* the largest not yet shown; a few dozen rows at most */
        int br = -1, bt = -1;
        for (int r = 0; r < BFIT_OPTIME_ROWS; r++)
            for (int t = 0; t < BFIT_NDTYPES; t++)
                if (o->calls[r][t] > 0 && (br < 0 || o->secs[r][t] > o->secs[br][bt]))
                    br = r, bt = t;
        if (br < 0)
            break;
        fprintf(stderr, "%-30s %-5s %9lu %10.4f %5.1f%%\n", row_name(br),
                br >= BFIT_OP_COUNT ? "-" : bfit_dtype_name((bfit_dtype)bt), /* copies and fills: bytes */
                o->calls[br][bt], o->secs[br][bt], o->total > 0 ? 100 * o->secs[br][bt] / o->total : 0);
        o->calls[br][bt] = 0;
    }
    free(o);
    d->optime = NULL;
}
