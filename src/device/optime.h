/* optime.h - where a step's time goes, op kind by op kind: a diagnostic for
 * speed work (BFIT_OPTIME=1), the same on every device. Each op, copy and
 * fill is waited for before and after it runs (bfit_device_sync), so the
 * times are each op's alone; at the device's end a table of kind, dtype,
 * calls and seconds goes to stderr, the largest first. Off, it costs one
 * branch per call. */
#ifndef BFIT_DEVICE_OPTIME_H
#define BFIT_DEVICE_OPTIME_H

#include "device/device.h"

/* rows past the op kinds: the device's copies and fills (zeroing), of
 * bytes (kept under the first dtype) */
#define BFIT_OPTIME_COPY BFIT_OP_COUNT
#define BFIT_OPTIME_FILL (BFIT_OP_COUNT + 1)
#define BFIT_OPTIME_ROWS (BFIT_OP_COUNT + 2)

typedef struct bfit_optime {
    double secs[BFIT_OPTIME_ROWS][BFIT_NDTYPES];
    unsigned long calls[BFIT_OPTIME_ROWS][BFIT_NDTYPES];
    double total;
} bfit_optime;

/* A device just opened: its table when the environment asks for one. */
void bfit_optime_attach(bfit_device *d);
/* The clock at an op's start (after waiting for the device), or 0 if off. */
double bfit_optime_begin(bfit_device *d);
/* The op of row and dtype that began at t0 is done. */
void bfit_optime_end(bfit_device *d, int row, bfit_dtype t, double t0);
/* The table on stderr, and the device's table freed. */
void bfit_optime_detach(bfit_device *d);

#endif
