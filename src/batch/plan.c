/* plan.c - summing the categories of a step and solving for the largest m. */
#include "base/err.h"
#include "batch/plan.h"
#include "batch/solve.h"

#include <math.h>
#include <string.h>

int bfit_plan_compute(bfit_model *M, const bfit_optim_cfg *opt, int m, int training, bfit_step_plan *p)
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
    p->bytes[BFIT_MEM_OTHER] = BFIT_MODEL_STATS_BYTES;
    if (training) {
        p->bytes[BFIT_MEM_GRADS] = bfit_model_grad_bytes(M);
        if (opt)
            p->bytes[BFIT_MEM_OPTIMIZER] = bfit_optim_state_bytes(opt, M->trainable, M->ntrainable);
    }
    p->fixed = p->bytes[BFIT_MEM_PARAMS] + p->bytes[BFIT_MEM_GRADS] + p->bytes[BFIT_MEM_OPTIMIZER] +
               p->bytes[BFIT_MEM_OTHER];
    p->step = p->bytes[BFIT_MEM_ACTIVATIONS] + p->bytes[BFIT_MEM_ACT_GRADS] + p->bytes[BFIT_MEM_WORKSPACE] +
              p->bytes[BFIT_MEM_INPUT];
    p->peak = p->fixed + p->step;
    p->no_reuse = p->fixed;
    for (int c = BFIT_MEM_ACTIVATIONS; c <= BFIT_MEM_INPUT; c++)
        p->no_reuse += lay.no_reuse[c];
    p->flops = lay.flops;
    p->regen_flops = lay.regen_flops;
    bfit_layout_fini(&lay);
    return BFIT_OK;
}

/* What the solver asks: the peak of a plan at m. A plan that cannot be
 * made (an error) does not fit; the error is kept for the caller,
 * unless it is out of memory: a device that cannot make an op that large
 * (cuDNN's 2^31 elements per tensor) says so, and m simply does not fit. */
typedef struct fit_ctx {
    bfit_model *M;
    const bfit_optim_cfg *opt;
    int training, rc;
} fit_ctx;

static uint64_t plan_need(void *ud, int m)
{
    fit_ctx *f = ud;
    bfit_step_plan p;
    int rc;
    if (f->rc != BFIT_OK)
        return UINT64_MAX;
    rc = bfit_plan_compute(f->M, f->opt, m, f->training, &p);
    if (rc == BFIT_ENOMEM) {
        bfit_clear_error();
        return UINT64_MAX;
    }
    if (rc != BFIT_OK) {
        f->rc = rc;
        return UINT64_MAX;
    }
    return p.peak;
}

int bfit_plan_max_batch(bfit_model *M, const bfit_optim_cfg *opt, int training, uint64_t budget, int limit,
                        int *m_out, bfit_step_plan *p1)
{
    fit_ctx f = {M, opt, training, BFIT_OK};
    bfit_step_plan p;
    int rc, m;

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
    m = bfit_largest_under(plan_need, &f, budget, limit, 1, p.peak);
    if (f.rc != BFIT_OK)
        return f.rc;
    *m_out = m;
    return BFIT_OK;
}

uint64_t bfit_plan_budget(uint64_t capacity, double margin) { return bfit_budget(capacity, margin); }

int bfit_plan_max_batch_fraction(bfit_model *M, const bfit_optim_cfg *opt, int training, uint64_t capacity,
                                 double fraction, int limit, int *m_out, bfit_step_plan *p1)
{
    *m_out = 0;
    if (!(fraction > 0 && fraction <= 1))
        return bfit_fail(BFIT_EINVAL, "fraction of memory must be in (0, 1], got %g", fraction);
    return bfit_plan_max_batch(M, opt, training, fraction >= 1 ? capacity : (uint64_t)((double)capacity * fraction),
                               limit, m_out, p1);
}

int bfit_plan_line_fit(const bfit_step_plan *p, int n, bfit_plan_line *out)
{
    const bfit_step_plan *a = NULL, *b = NULL;
    double dm;

    memset(out, 0, sizeof *out);
    for (int i = 0; i < n; i++) {
        if (!a || p[i].m < a->m)
            a = &p[i];
        if (!b || p[i].m > b->m)
            b = &p[i];
    }
    if (!a || a->m == b->m)
        return bfit_fail(BFIT_EINVAL, "a per-sample slope needs plans for two different batch sizes");
    dm = (double)(b->m - a->m);
    out->m1 = a->m;
    out->m2 = b->m;
    out->slope = ((double)b->peak - (double)a->peak) / dm;
    for (int c = 0; c < BFIT_MEM_NCAT; c++)
        out->cat_slope[c] = ((double)b->bytes[c] - (double)a->bytes[c]) / dm;
    out->intercept = (double)a->peak - out->slope * a->m;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)p[i].peak - (out->intercept + out->slope * p[i].m));
        uint64_t dev = (uint64_t)llround(d);
        if (dev > out->max_dev) {
            out->max_dev = dev;
            out->dev_m = p[i].m;
        }
    }
    return BFIT_OK;
}
