/* tshared.c - a CPU device shared with a simulated co-tenant (tshared.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tshared.h"

uint64_t tshared_free;
void (*tshared_on_read)(void);

static const bfit_device_vt *cpu_table;
static bfit_device_vt shared_table;

static void shared_info(const bfit_device *d, bfit_device_info *out)
{
    cpu_table->info(d, out);
    out->shared = 1;
}

static int shared_memory(bfit_device *d, uint64_t *free_b, uint64_t *total)
{
    (void)d;
    if (tshared_on_read)
        tshared_on_read();
    *free_b = tshared_free;
    *total = 8ull << 30;
    return BFIT_OK;
}

bfit_device *tshared_new(int threads)
{
    bfit_device_cfg cc = bfit_device_cfg_default();
    bfit_device *dev;
    cc.threads = threads;
    if (bfit_device_cpu_new(&cc, &dev) != BFIT_OK)
        fail_msg("device: %s", bfit_errmsg());
    cpu_table = dev->vt;
    shared_table = *dev->vt;
    shared_table.info = shared_info;
    shared_table.mem_info = shared_memory;
    dev->vt = &shared_table;
    tshared_free = 1ull << 30;
    return dev;
}

void tshared_close(bfit_device *dev)
{
    dev->vt = cpu_table;
    bfit_device_free(dev);
}
