/* lossscale.h - dynamic loss scaling for 16-bit gradients (what
 * torch.cuda.amp.GradScaler does): the loss is multiplied by S before
 * backward so small gradients survive in f16; a step whose gradients came
 * out inf or NaN is skipped and S halved; after `interval` clean steps in a
 * row S doubles. Pure arithmetic: the trainer applies it. */
#ifndef BFIT_LOSSSCALE_H
#define BFIT_LOSSSCALE_H

#include <stdint.h>

typedef struct bfit_loss_scaler {
    double scale;        /* S, a power of two */
    int64_t interval;    /* clean steps before S doubles */
    int64_t good;        /* clean steps since S last changed */
    int64_t skipped;     /* steps skipped for inf/NaN gradients */
} bfit_loss_scaler;

#define BFIT_LOSS_SCALE_MAX (16777216.0 * 16777216.0 * 16777216.0) /* 2^72: no f16 gradient needs more */
#define BFIT_LOSS_SCALE_MIN (1.0 / 16777216.0)                    /* 2^-24: below, f16 has nothing left */

void bfit_loss_scaler_init(bfit_loss_scaler *s, double scale, int64_t interval);
/* After a step's backward: finite = every gradient finite. Returns 1 to
 * apply the step (its gradients unscaled by the S it was made with), 0 to
 * skip it. S changes for the next step. */
int bfit_loss_scaler_update(bfit_loss_scaler *s, int finite);

#endif
