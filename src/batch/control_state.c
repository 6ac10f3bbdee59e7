/* control_state.c - the batch controller's state taken out and put back
 * (control_state.h): a checkpoint keeps it so a resumed run decides exactly
 * as the uninterrupted one would. The state is one struct inside the
 * controller, copied whole; putting it back checks it first. */
#include "batchfit.h"
#include "base/err.h"
#include "batch/control_int.h"

#include <math.h>

void bfit_controller_state_get(const bfit_controller *c, bfit_controller_state *s) { *s = c->st; }

int bfit_controller_state_set(bfit_controller *c, const bfit_controller_state *s)
{
    int ok = s->m >= 1 && s->E >= 1 && s->E0 >= 1 && isfinite(s->scale) && isfinite(s->ramp_from) &&
             isfinite(s->ramp_to) && s->noise.alpha > 0 && s->noise.alpha <= 1 && isfinite(s->noise.g2_ema) &&
             isfinite(s->noise.s_ema) && s->noise.n >= 0 && s->holdoff >= 0 && s->step >= 0 &&
             isfinite(s->au.plat_sum) && isfinite(s->au.plat_best) && s->au.plat_n >= 0 && s->au.lr_ref >= 0 &&
             s->prev_m >= 0 && s->loader_rate >= 0 && isfinite(s->loader_rate);
    for (int i = 0; ok && i < BFIT_CONTROLLER_NTPUT; i++)
        ok = s->tp[i].n >= 0 && isfinite(s->tp[i].rate) && s->tp[i].var >= 0 && isfinite(s->tp[i].var);
    if (!ok)
        return bfit_fail(BFIT_EINVAL, "controller: the state to restore is not one a controller can have "
                         "(micro-batch %d, batch %d)", s->m, s->E);
    c->st = *s;
    return BFIT_OK;
}

void bfit_controller_set_memory(bfit_controller *c, uint64_t capacity, uint64_t free_bytes)
{
    c->st.capacity = capacity;
    c->st.free = free_bytes;
}
