/* plan.c - summing the categories of a step and solving for the largest m. */
#include "base/err.h"
#include "batch/plan.h"

#include <string.h>

int bfit_plan_compute(bfit_model *M, const bfit_optim_cfg *opt, int m, int training, bfit_plan *p)
{
    bfit_layout lay;
    int rc;

    memset(p, 0, sizeof *p);
    rc = bfit_model_layout(M, m, training, &lay);
    if (rc != BFIT_OK)
        return rc;
    p->m = m;
    p->training = training;
    memcpy(p->bytes, lay.bytes, sizeof p->bytes);
    p->bytes[BFIT_MEM_PARAMS] = bfit_model_param_bytes(M);
    if (training) {
        p->bytes[BFIT_MEM_GRADS] = bfit_model_grad_bytes(M);
        if (opt)
            p->bytes[BFIT_MEM_OPTIMIZER] = bfit_optim_state_bytes(opt, M->trainable, M->ntrainable);
    }
    p->fixed = p->bytes[BFIT_MEM_PARAMS] + p->bytes[BFIT_MEM_GRADS] + p->bytes[BFIT_MEM_OPTIMIZER];
    p->step = p->bytes[BFIT_MEM_ACTIVATIONS] + p->bytes[BFIT_MEM_ACT_GRADS] + p->bytes[BFIT_MEM_WORKSPACE] +
              p->bytes[BFIT_MEM_INPUT];
    p->peak = p->fixed + p->step;
    p->no_reuse = p->fixed;
    for (int c = BFIT_MEM_ACTIVATIONS; c <= BFIT_MEM_INPUT; c++)
        p->no_reuse += lay.no_reuse[c];
    bfit_layout_fini(&lay);
    return BFIT_OK;
}

int bfit_plan_max_batch(bfit_model *M, const bfit_optim_cfg *opt, int training, uint64_t budget, int limit,
                        int *m_out, bfit_plan *p1)
{
    bfit_plan p;
    int lo, hi, rc;

    *m_out = 0;
    if (limit < 1)
        return bfit_fail(BFIT_EINVAL, "batch limit must be at least 1, got %d", limit);
    rc = bfit_plan_compute(M, opt, 1, training, &p);
    if (rc != BFIT_OK)
        return rc;
    if (p1)
        *p1 = p;
    if (p.peak > budget)
        return BFIT_OK;
    /* invariant: lo fits; hi+1 does not fit or is past the limit */
    lo = 1;
    hi = limit;
    rc = bfit_plan_compute(M, opt, hi, training, &p);
    if (rc != BFIT_OK)
        return rc;
    if (p.peak <= budget) {
        *m_out = hi;
        return BFIT_OK;
    }
    hi--;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        rc = bfit_plan_compute(M, opt, mid, training, &p);
        if (rc != BFIT_OK)
            return rc;
        if (p.peak <= budget)
            lo = mid;
        else
            hi = mid - 1;
    }
    *m_out = lo;
    return BFIT_OK;
}
