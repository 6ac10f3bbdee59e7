/* lossscale.c - dynamic loss scaling (lossscale.h). Halving on overflow and
 * doubling after a run of clean steps keeps S near the largest value the
 * gradients tolerate, as PyTorch's GradScaler does (init 2^16, interval
 * 2000). S stays a power of two so scaling and unscaling are exact. */
#include "optim/lossscale.h"

void bfit_loss_scaler_init(bfit_loss_scaler *s, double scale, int64_t interval)
{
    s->scale = scale > 0 ? scale : 65536.0;
    s->interval = interval > 0 ? interval : 2000;
    s->good = 0;
    s->skipped = 0;
}

int bfit_loss_scaler_update(bfit_loss_scaler *s, int finite)
{
    if (!finite) {
        s->skipped++;
        s->good = 0;
        if (s->scale * 0.5 >= BFIT_LOSS_SCALE_MIN)
            s->scale *= 0.5;
        return 0;
    }
    if (++s->good >= s->interval) {
        s->good = 0;
        if (s->scale * 2 <= BFIT_LOSS_SCALE_MAX)
            s->scale *= 2;
    }
    return 1;
}
