/* tshared.h - a CPU device that says it is shared with other processes
 * (bfit_device_info.shared) and reports as free what the test says: how a
 * co-tenant taking and returning GPU memory is simulated on the CPU. One
 * such device at a time. */
#ifndef BFIT_TSHARED_H
#define BFIT_TSHARED_H

#include "device/device.h"

/* What the co-tenant leaves free (tshared_new sets 1 GiB); the device's
 * total is 8 GiB. */
extern uint64_t tshared_free;
/* Called at each reading of the free memory, before it is reported (NULL:
 * none): a test's co-tenant that reacts to being polled. */
extern void (*tshared_on_read)(void);

/* The device (threads, 0: OpenMP's); fails the test on error. */
bfit_device *tshared_new(int threads);
void tshared_close(bfit_device *dev);

#endif
