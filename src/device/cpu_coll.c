/* cpu_coll.c - the CPU device's collectives: its memory is host memory, so
 * the group's host transport (MPI, src/device/comm.c) sums and broadcasts
 * device buffers in place, inside a device call (in the checking mode the
 * blocks are opened only for it). */
#include "base/err.h"
#include "device/cpu.h"

int bfit_cpu_coll_open(bfit_device *d, const bfit_coll_host *h, void **state)
{
    (void)d;
    *state = (void *)h;
    return BFIT_OK;
}

int bfit_cpu_coll_sum(bfit_device *dev, void *state, void *buf, size_t count)
{
    const bfit_coll_host *h = state;
    cpu_device *d = (cpu_device *)dev;
    const void *ptrs[1] = {buf};
    const char *names[1] = {"buffer"};
    int rc = bfit_cpu_enter(d, ptrs, names, 1, "collective sum");

    if (rc != BFIT_OK)
        return rc;
    rc = h->sum_f32(h->ud, buf, count);
    bfit_cpu_leave(d);
    return rc;
}

int bfit_cpu_coll_bcast(bfit_device *dev, void *state, void *buf, size_t n, int root)
{
    const bfit_coll_host *h = state;
    cpu_device *d = (cpu_device *)dev;
    const void *ptrs[1] = {buf};
    const char *names[1] = {"buffer"};
    int rc = bfit_cpu_enter(d, ptrs, names, 1, "collective broadcast");

    if (rc != BFIT_OK)
        return rc;
    rc = h->bcast(h->ud, buf, n, root);
    bfit_cpu_leave(d);
    return rc;
}

void bfit_cpu_coll_close(bfit_device *d, void *state)
{
    (void)d;
    (void)state;
}
