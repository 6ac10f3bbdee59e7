/* plan_report.c - what `batchfit plan` shows, computed: the plans at the
 * sizes asked for (or 1, 2 and the largest that fits), the largest batch
 * with and without the margin, and the per-sample line through the plans
 * with how far any plan strays from it. */
#include "base/err.h"
#include "batch/plan.h"

#include <string.h>

/* The category of plan p farthest from its per-sample line. */
static bfit_mem_cat worst_cat(const bfit_plan_report *r, const bfit_step_plan *p)
{
    const bfit_step_plan *ref = &r->shown[r->nshown - 1];
    bfit_mem_cat cat = BFIT_MEM_WORKSPACE;
    double worst = -1;
    for (int c = 0; c < BFIT_MEM_NCAT; c++) {
        double e = (double)p->bytes[c] - ((double)ref->bytes[c] + r->line.cat_slope[c] * (p->m - ref->m));
        if (e < 0)
            e = -e;
        if (e > worst) {
            worst = e;
            cat = (bfit_mem_cat)c;
        }
    }
    return cat;
}

/* The sizes shown, planned; then further sizes that check the line (small
 * ones, one between the slope's ends, the largest that fit) into all[]. */
static int plan_sizes(bfit_model *M, const bfit_optim_cfg *opt, int training, const int *batches, int nbatch,
                      bfit_plan_report *r, bfit_step_plan *all, int *nall, int *first_extra)
{
    int extra[6], nextra = 0, rc;

    r->nshown = 0;
    for (int i = 0; i < nbatch && i < BFIT_PLAN_REPORT_MAX; i++)
        r->shown[r->nshown++].m = batches[i];
    if (!nbatch) {
        /* 1 and 2 show the small-batch steps, the largest what fits */
        r->shown[r->nshown++].m = 1;
        r->shown[r->nshown++].m = 2;
        if (r->m_margin > 2)
            r->shown[r->nshown++].m = r->m_margin;
    }
    *nall = 0;
    for (int i = 0; i < r->nshown; i++) {
        if ((rc = bfit_plan_compute(M, opt, r->shown[i].m, training, &r->shown[i])) != BFIT_OK)
            return rc;
        all[(*nall)++] = r->shown[i];
    }
    /* one size shown: the slope is taken to the next size up */
    if (r->nshown == 1)
        extra[nextra++] = r->shown[0].m < BFIT_PLAN_LIMIT ? r->shown[0].m + 1 : r->shown[0].m - 1;
    *first_extra = nextra ? extra[0] : 0;
    extra[nextra++] = 1;
    extra[nextra++] = 2;
    extra[nextra++] = (r->shown[0].m + r->shown[r->nshown - 1].m) / 2 + 1;
    if (r->m_margin > 0)
        extra[nextra++] = r->m_margin;
    if (r->m_full > 0)
        extra[nextra++] = r->m_full;
    for (int i = 0; i < nextra; i++) {
        int seen = 0;
        for (int j = 0; j < *nall; j++)
            seen |= all[j].m == extra[i];
        if (seen)
            continue;
        if ((rc = bfit_plan_compute(M, opt, extra[i], training, &all[*nall])) != BFIT_OK)
            return rc;
        (*nall)++;
    }
    return BFIT_OK;
}

/* The deviation of every plan from the line; m = 1 kept apart, since there
 * oneDNN often runs single-threaded kernels with other scratch. */
static void deviations(bfit_plan_report *r, const bfit_step_plan *all, int nall)
{
    bfit_plan_line l = r->line;
    l.max_dev = 0;
    l.dev_m = 0;
    for (int j = 0; j < nall; j++) {
        double d = (double)all[j].peak - (l.intercept + l.slope * all[j].m);
        uint64_t dev = (uint64_t)(d < 0 ? -d + 0.5 : d + 0.5);
        if (all[j].m == 1) {
            r->dev1 = d;
            r->dev1_cat = worst_cat(r, &all[j]);
            continue;
        }
        if (dev > l.max_dev) {
            l.max_dev = dev;
            l.dev_m = all[j].m;
            r->dev_signed = d;
            r->dev_cat = worst_cat(r, &all[j]);
        }
    }
    r->line = l;
}

int bfit_plan_report_make(bfit_model *M, const bfit_optim_cfg *opt, int training, uint64_t memory, double margin,
                          const int *batches, int nbatch, bfit_plan_report *r)
{
    bfit_step_plan all[BFIT_PLAN_REPORT_MAX + 8], ends[2];
    int nall, first_extra, rc;
    uint64_t tol;

    memset(r, 0, sizeof *r);
    r->memory = memory;
    r->margin = margin;
    r->training = training;
    r->budget = bfit_plan_budget(memory, margin);
    rc = bfit_plan_max_batch(M, opt, training, r->budget, BFIT_PLAN_LIMIT, &r->m_margin, &r->p1);
    if (rc == BFIT_OK)
        rc = bfit_plan_max_batch(M, opt, training, memory, BFIT_PLAN_LIMIT, &r->m_full, NULL);
    if (rc == BFIT_OK)
        rc = plan_sizes(M, opt, training, batches, nbatch, r, all, &nall, &first_extra);
    if (rc != BFIT_OK)
        return rc;
    /* the slope between the two largest sizes shown (or the shown size and
     * the next): per-sample growth, clear of the small-m steps where oneDNN
     * picks other algorithms */
    ends[0] = r->shown[r->nshown >= 2 ? r->nshown - 2 : 0];
    ends[1] = r->shown[r->nshown - 1];
    for (int j = 0; r->nshown == 1 && j < nall; j++)
        if (all[j].m == first_extra)
            ends[1] = all[j];
    if ((rc = bfit_plan_line_fit(ends, 2, &r->line)) != BFIT_OK)
        return rc;
    deviations(r, all, nall);
    /* alignment padding (at most 64 bytes per buffer, a few buffers per
     * layer) and a 0.1% wobble are not departures from affine, for a person
     * reading the slope; anything larger is */
    tol = (uint64_t)BFIT_ALIGN * 4 * (uint64_t)(M->n + 1);
    r->affine = r->line.max_dev <= tol || r->line.max_dev <= r->line.slope * r->line.dev_m / 1000;
    r->affine1 = (r->dev1 < 0 ? -r->dev1 : r->dev1) <= (double)tol ||
                 (r->dev1 < 0 ? -r->dev1 : r->dev1) <= r->p1.peak / 1000.0;
    return BFIT_OK;
}
