/* train.c - the whole run as a short caller of the run object: steps, an
 * evaluation after each epoch, the weights saved and the report written at
 * the end. */
#include "base/err.h"
#include "train/run_int.h"
#include "train/weights.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static int train(const bfit_train_cfg *cfg, bfit_train_result *res, int *logged)
{
    bfit_run *r;
    int rc, trained;

    if ((rc = run_new(cfg, &r, logged)) != BFIT_OK)
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

/* The report from the closed log. A failed run keeps its own error; the
 * report's failure is added to it. */
static int write_report(const bfit_train_cfg *cfg, const char *log, int rc, bfit_train_result *res)
{
    char run_msg[1024], field[64];
    size_t skip;
    int rc2;

    snprintf(run_msg, sizeof run_msg, "%s", bfit_errmsg());
    snprintf(field, sizeof field, "%s", bfit_errfield());
    rc2 = bfit_report_write(log, cfg->report);
    res->report_written = rc2 == BFIT_OK;
    if (rc2 == BFIT_OK || rc == BFIT_OK)
        return rc2 == BFIT_OK ? rc : bfit_fail_prefix(rc2, "report: ");
    if (!field[0])
        return bfit_fail(rc, "%s; the report was not written either: %s", run_msg, bfit_errmsg());
    skip = strlen(field) + 2 <= strlen(run_msg) ? strlen(field) + 2 : 0; /* "field: " */
    return bfit_fail_field(rc, field, "%s; the report was not written either: %s", run_msg + skip, bfit_errmsg());
}

int bfit_train(const bfit_train_cfg *cfg, bfit_train_result *res)
{
    bfit_train_cfg c = *cfg;
    char tmp_log[4096];
    int rc, logged = 0, tmp_fd = -1;

    memset(res, 0, sizeof *res);
    if (cfg->report && (!cfg->log || !strcmp(cfg->log, "-"))) {
        /* the report is drawn from the events: keep them beside it meanwhile */
        snprintf(tmp_log, sizeof tmp_log, "%s.log.XXXXXX", cfg->report);
        if ((tmp_fd = mkstemp(tmp_log)) < 0)
            return bfit_fail_field(BFIT_EIO, "report", "%s: cannot create a temporary event log '%s': %s",
                                   cfg->report, tmp_log, strerror(errno));
        close(tmp_fd);
        c.log = tmp_log;
    }
    rc = train(&c, res, &logged);
    if (cfg->report && logged)
        rc = write_report(cfg, c.log, rc, res);
    if (tmp_fd >= 0)
        unlink(tmp_log);
    return rc;
}
