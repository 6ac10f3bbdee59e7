/* tdev.h - a device for tests, and buffers with a host copy.
 *
 * Device memory is opaque: a test fills the host side, uploads, runs ops or
 * layers on the device side, downloads and checks the host side. The device
 * honours BFIT_DEVICE_CHECK (scripts/test.sh runs the suite once with it), so
 * a test that touched device memory from the host would crash there. */
#ifndef BFIT_TDEV_H
#define BFIT_TDEV_H

#include "internal.h"

typedef struct tdev {
    bfit_device *dev;
    bfit_arena *arena;
} tdev;

/* The CPU device (threads, 0: OpenMP's) with a 4 GiB arena, or an arena of
 * capacity bytes; fails the test on error. */
void tdev_open(tdev *t, int threads);
void tdev_open_at(tdev *t, int threads, uint64_t capacity);
void tdev_close(tdev *t);
/* cmocka group set-up and tear-down: the state is a tdev_open(t, 0). */
int tdev_setup(void **state);
int tdev_teardown(void **state);
/* Device memory of n bytes (at least 1), category other; fails the test on
 * error. */
void *tdev_alloc(tdev *t, size_t n);
void tdev_release(tdev *t, void *p);

/* The planned peak of a training step of the spec file's model at
 * micro-batch m with optimizer opt's defaults; fails the test on error. */
uint64_t tdev_plan_peak(const char *spec, bfit_opt_kind opt, int m);

/* A buffer on both sides; f is h as floats. */
typedef struct tbuf {
    void *h;        /* host */
    void *d;        /* device */
    size_t bytes;
} tbuf;
#define TB_F(b) ((float *)(b).h)
#define TB_I(b) ((int32_t *)(b).h)

/* Host side NaN-filled (0xFF), so an unwritten value shows;
 * device side allocated, contents unspecified. */
tbuf tbuf_new(tdev *t, size_t bytes);
void tbuf_free(tdev *t, tbuf *b);
void tbuf_up(tdev *t, const tbuf *b);   /* host -> device */
void tbuf_down(tdev *t, tbuf *b);       /* device -> host */

#endif
