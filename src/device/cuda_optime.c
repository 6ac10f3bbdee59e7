/* cuda_optime.c - where a GPU step's time goes, op kind by op kind: a
 * diagnostic for speed work (BFIT_CUDA_OPTIME=1). Each op is waited for
 * before and after it runs, so the times are each op's alone (and the step
 * is slower for it); at the device's end a table of kind, dtype, calls and
 * seconds goes to stderr, the largest first. Off, it costs one branch. */
#include "device/cuda.h"

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

void cuda_optime_init(cuda_device *d)
{
    const char *e = getenv("BFIT_CUDA_OPTIME");
    d->optime_on = e && *e && strcmp(e, "0") != 0;
}

double cuda_optime_begin(cuda_device *d)
{
    if (!d->optime_on)
        return 0;
    cudaStreamSynchronize(d->stream);
    return now();
}

void cuda_optime_end(cuda_device *d, bfit_op_kind k, bfit_dtype t, double t0)
{
    if (!d->optime_on || (unsigned)k >= BFIT_OP_COUNT || (unsigned)t >= BFIT_NDTYPES)
        return;
    cudaStreamSynchronize(d->stream);
    d->optime[k][t] += now() - t0;
    d->opcalls[k][t]++;
}

void cuda_optime_report(const cuda_device *d)
{
    double total = 0;
    if (!d->optime_on)
        return;
    for (int k = 0; k < BFIT_OP_COUNT; k++)
        for (int t = 0; t < BFIT_NDTYPES; t++)
            total += d->optime[k][t];
    fprintf(stderr, "%s: op times (BFIT_CUDA_OPTIME), %.3f s in all\n%-16s %-5s %9s %10s %6s\n", d->name, total, "op",
            "dtype", "calls", "seconds", "share");
    for (;;) { /* the largest not yet shown; a few dozen rows at most */
        int bk = -1, bt = -1;
        for (int k = 0; k < BFIT_OP_COUNT; k++)
            for (int t = 0; t < BFIT_NDTYPES; t++)
                if (d->opcalls[k][t] > 0 && (bk < 0 || d->optime[k][t] > d->optime[bk][bt]))
                    bk = k, bt = t;
        if (bk < 0)
            break;
        fprintf(stderr, "%-16s %-5s %9lu %10.4f %5.1f%%\n", cuda_kind_name((bfit_op_kind)bk),
                bfit_dtype_name((bfit_dtype)bt), ((cuda_device *)d)->opcalls[bk][bt], d->optime[bk][bt],
                total > 0 ? 100 * d->optime[bk][bt] / total : 0);
        ((cuda_device *)d)->opcalls[bk][bt] = 0;
    }
}
