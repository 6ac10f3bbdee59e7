/* train.c - the whole run as a short caller of the run object: steps, an
 * evaluation after each epoch, the weights saved at the end. */
#include "base/err.h"
#include "train/run_int.h"
#include "train/weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int bfit_run_save(bfit_run *r, const char *path)
{
    char *nm = NULL, *ns = NULL, steps_s[32], acc_s[32];
    const char *keys[] = {"format", "model", "data", "steps", "test_accuracy", "normalize_mean", "normalize_std"};
    const char *vals[7];
    int nmeta = 5, rc = BFIT_OK;

    snprintf(steps_s, sizeof steps_s, "%lld", (long long)r->step);
    snprintf(acc_s, sizeof acc_s, "%.6f", r->res.test_acc);
    vals[0] = "batchfit";
    vals[1] = r->cfg.model ? r->cfg.model : "";
    vals[2] = r->cfg.data ? r->cfg.data : "";
    vals[3] = steps_s;
    vals[4] = acc_s;
    if (r->s.mean) {
        nm = malloc(BFIT_NORM_TEXT_MAX);
        ns = malloc(BFIT_NORM_TEXT_MAX);
        if (!nm || !ns)
            rc = bfit_fail(BFIT_ENOMEM, "out of host memory");
        if (rc == BFIT_OK)
            rc = bfit_norm_to_text(r->s.mean, r->s.M->input.c, nm, BFIT_NORM_TEXT_MAX);
        if (rc == BFIT_OK)
            rc = bfit_norm_to_text(r->s.std, r->s.M->input.c, ns, BFIT_NORM_TEXT_MAX);
        vals[5] = nm;
        vals[6] = ns;
        nmeta = 7;
    }
    if (rc == BFIT_OK)
        rc = bfit_weights_save(r->s.M, path, keys, vals, nmeta);
    free(nm);
    free(ns);
    return rc;
}

/* Steps to the end, evaluating after each epoch. A failure of the last
 * evaluation loses no training: *trained says the steps are all done. */
static int run_all(bfit_run *r, int *trained)
{
    bfit_step_info si;
    bfit_eval_info ev;
    int rc;

    *trained = 0;
    while (!bfit_run_done(r)) {
        if ((rc = bfit_run_step(r, &si)) != BFIT_OK)
            return rc;
        *trained = bfit_run_done(r);
        if ((si.epoch_end || *trained) && (rc = bfit_run_evaluate(r, &ev)) != BFIT_OK)
            return rc;
    }
    return BFIT_OK;
}

int bfit_train(const bfit_train_cfg *cfg, bfit_train_result *res)
{
    bfit_run *r;
    int rc, trained;

    memset(res, 0, sizeof *res);
    if ((rc = bfit_run_new(cfg, &r)) != BFIT_OK)
        return rc;
    rc = run_all(r, &trained);
    if (cfg->save && (rc == BFIT_OK || trained)) {
        int rc2 = bfit_run_save(r, cfg->save);
        if (rc != BFIT_OK && rc2 == BFIT_OK)
            bfit_fail_prefix(rc, "(the trained weights were saved to %s) ", cfg->save);
        if (rc == BFIT_OK)
            rc = rc2;
    }
    bfit_run_result(r, res);
    bfit_run_finish(r, rc);
    bfit_run_free(r);
    return rc;
}
