/* train.c - the whole run as a short caller of the run object: steps, an
 * evaluation after each epoch, the weights saved and the report written at
 * the end. */
#include "base/err.h"
#include "train/run_int.h"
#include "train/weights.h"

#include <errno.h>
#include <stdio.h>
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What a weights file says of itself; test_accuracy only where an
 * evaluation of these very weights finished (a failed last evaluation, or
 * a run stopped between, measured nothing). */
/* An image or text folder's class names, by index, as a JSON array: what a user
 * of the weights needs to name a prediction. */
static int class_names_json(const bfit_dataset *d, char **out)
{
    cJSON *a = cJSON_CreateArray();
    int ok = a != NULL;

    for (int c = 0; ok && c < bfit_dataset_classes(d); c++)
        ok = cJSON_AddItemToArray(a, cJSON_CreateString(bfit_dataset_class_name(d, c)));
    *out = ok ? cJSON_PrintUnformatted(a) : NULL;
    cJSON_Delete(a);
    return *out ? BFIT_OK : bfit_fail(BFIT_ENOMEM, "out of host memory for class names");
}

int bfit_run_weights_meta(bfit_run *r, const char **keys, const char **vals, int *n, char **bufs)
{
    int rc = BFIT_OK, k = 0;

    snprintf(r->meta_steps, sizeof r->meta_steps, "%lld", (long long)r->pos.step);
    snprintf(r->meta_acc, sizeof r->meta_acc, "%.6f", r->pos.res.test_acc);
    keys[k] = "format", vals[k++] = "batchfit";
    keys[k] = "model", vals[k++] = r->cfg.model ? r->cfg.model : "";
    keys[k] = "data", vals[k++] = r->cfg.data ? r->cfg.data : "";
    keys[k] = "steps", vals[k++] = r->meta_steps;
    if (r->pos.res.evaluated)
        keys[k] = "test_accuracy", vals[k++] = r->meta_acc;
    bufs[0] = bufs[1] = NULL;
    if (r->s.mean) {
        size_t len = BFIT_NORM_TEXT_LEN(r->s.M->input.c);
        bufs[0] = malloc(len);
        bufs[1] = malloc(len);
        if (!bufs[0] || !bufs[1])
            rc = bfit_fail(BFIT_ENOMEM, "out of host memory");
        if (rc == BFIT_OK)
            rc = bfit_norm_to_text(r->s.mean, r->s.M->input.c, bufs[0], len);
        if (rc == BFIT_OK)
            rc = bfit_norm_to_text(r->s.std, r->s.M->input.c, bufs[1], len);
        keys[k] = "normalize_mean", vals[k++] = bufs[0];
        keys[k] = "normalize_std", vals[k++] = bufs[1];
    } else if (r->s.M->input_dtype != BFIT_I32) {
        /* trained on raw inputs: eval must not standardise them (token ids never are) */
        keys[k] = "normalize", vals[k++] = "none";
    }
    bufs[2] = NULL;
    if (rc == BFIT_OK && r->s.train && bfit_dataset_class_name(r->s.train, 0)) {
        if ((rc = class_names_json(r->s.train, &bufs[2])) == BFIT_OK)
            keys[k] = "classes", vals[k++] = bufs[2];
    }
    *n = k;
    return rc;
}

int bfit_run_save(bfit_run *r, const char *path)
{
    const char *keys[RUN_META_MAX], *vals[RUN_META_MAX];
    char *bufs[3];
    int n, rc;

    if (!r || !path || !*path)
        return bfit_fail(BFIT_EINVAL, "bfit_run_save needs a run and a path to write the weights to");
    rc = bfit_run_weights_meta(r, keys, vals, &n, bufs);

    if (rc == BFIT_OK)
        rc = bfit_weights_save(r->s.M, path, keys, vals, n);
    free(bufs[0]);
    free(bufs[1]);
    free(bufs[2]);
    return rc;
}

/* Steps to the end, evaluating after each epoch, a checkpoint when one is
 * due (after the epoch's evaluation, so a resumed run does not lose it) and
 * at the end. A failure of the last evaluation loses no training: *trained
 * says the steps are all done. */
static int run_all(bfit_run *r, int *trained)
{
    bfit_step_info si = {.size = sizeof si};
    bfit_eval_info ev = {.size = sizeof ev};
    int rc, due;

    *trained = bfit_run_done(r); /* a run resumed from its last checkpoint */
    while (!bfit_run_done(r)) {
        if ((rc = bfit_run_step(r, &si)) != BFIT_OK)
            return rc;
        *trained = bfit_run_done(r);
        if ((si.epoch_end || *trained) && (rc = bfit_run_evaluate(r, &ev)) != BFIT_OK)
            return rc;
        due = bfit_run_checkpoint_due(r) || (*trained && r->ckpt_dir[0]);
        if (r->dp && r->cfg.checkpoint && (rc = bfit_run_dist_ckpt_sync(r, &due)) != BFIT_OK)
            return rc;
        if (due && r->ckpt_dir[0] && (rc = bfit_run_checkpoint(r, NULL, 0)) != BFIT_OK)
            return rc;
    }
    return BFIT_OK;
}

/* The run stopped early (a request, or memory that did not come back) at a
 * step boundary: its state goes into a checkpoint, and the error says so. */
static int stop_checkpoint(bfit_run *r, int rc)
{
    char msg[2048], field[64], path[4200];
    int rc2;

    r->pos.res.stopped = rc == BFIT_ESTOPPED ? BFIT_ESTOPPED : r->pos.res.stopped;
    if (!r->pos.res.stopped || r->broken)
        return rc;
    if (r->dp && r->cfg.checkpoint) { /* a group stops together: every rank's state to rank 0 */
        bfit_err_state e;
        int due = 1;
        bfit_err_save(&e);
        rc2 = bfit_run_dist_ckpt_sync(r, &due);
        bfit_err_restore(&e); /* the stop's message, whatever the sync did */
        if (rc2 != BFIT_OK)
            return rc;
    }
    if (!r->ckpt_dir[0])
        return rc;
    snprintf(msg, sizeof msg, "%s", bfit_errmsg());
    snprintf(field, sizeof field, "%s", bfit_errfield());
    if (r->ckpt_step == r->pos.step && r->pos.res.checkpoint[0]) /* one is there already */
        snprintf(path, sizeof path, "%s", r->pos.res.checkpoint);
    else if ((rc2 = bfit_run_checkpoint(r, path, sizeof path)) != BFIT_OK)
        return bfit_fail_prefix(rc, "%s; and the checkpoint failed: ", msg);
    if (field[0] && !strncmp(msg, field, strlen(field)) && msg[strlen(field)] == ':')
        return bfit_fail_field(rc, field, "%s; the run's state at step %lld is in %s", msg + strlen(field) + 2,
                               (long long)r->pos.step, path);
    return bfit_fail(rc, "%s; the run's state at step %lld is in %s", msg, (long long)r->pos.step, path);
}

/* The run; o gets its outputs (a resumed run's from its checkpoint). */
static int train(const bfit_train_cfg *cfg, bfit_train_result *res, int *logged, run_outputs *o)
{
    bfit_run *r;
    int rc, trained;

    if ((rc = bfit_run_create(cfg, &r, logged, o)) != BFIT_OK)
        return rc;
    rc = run_all(r, &trained);
    if (rc == BFIT_ESTOPPED || (rc == BFIT_ENOMEM && r->pos.res.stopped))
        rc = stop_checkpoint(r, rc);
    if (o->save[0] && bfit_run_dist_writer(r) && (rc == BFIT_OK || trained)) {
        int rc2 = bfit_run_save(r, o->save);
        if (rc != BFIT_OK && rc2 == BFIT_OK)
            bfit_fail_prefix(rc, "(the trained weights were saved to %s) ", o->save);
        if (rc == BFIT_OK)
            rc = rc2;
    }
    bfit_run_result_get(r, res);
    bfit_run_finish(r, rc);
    bfit_run_free(r);
    return rc;
}

/* The report from the closed log. A failed run keeps its own error; the
 * report's failure is added to it. */
static int write_report(const char *report, const char *log, int rc, bfit_train_result *res)
{
    char run_msg[1024], field[64];
    size_t skip;
    int rc2;

    snprintf(run_msg, sizeof run_msg, "%s", bfit_errmsg());
    snprintf(field, sizeof field, "%s", bfit_errfield());
    rc2 = bfit_report_write(log, report);
    res->report_written = rc2 == BFIT_OK;
    snprintf(res->report, sizeof res->report, "%s", report);
    if (rc2 == BFIT_OK || rc == BFIT_OK)
        return rc2 == BFIT_OK ? rc : bfit_fail_prefix(rc2, "report: ");
    if (!field[0])
        return bfit_fail(rc, "%s; the report was not written either: %s", run_msg, bfit_errmsg());
    skip = strlen(field) + 2 <= strlen(run_msg) ? strlen(field) + 2 : 0; /* "field: " */
    return bfit_fail_field(rc, field, "%s; the report was not written either: %s", run_msg + skip, bfit_errmsg());
}

int bfit_train_from(const bfit_train_cfg *cfg, bfit_train_result *res)
{
    run_outputs *o = calloc(1, sizeof *o);
    int rc, logged = 0;

    memset(res, 0, sizeof *res);
    if (!o)
        return bfit_fail(BFIT_ENOMEM, "out of host memory");
    rc = train(cfg, res, &logged, o);
    if (o->report[0] && logged)
        rc = write_report(o->report, o->log, rc, res);
    res->dist_alone = res->dist_alone && rc != BFIT_OK; /* a run that ended well leaves no rank waiting */
    if (o->tmp_log)
        bfit_atomic_abort(&o->tmp);
    free(o);
    return rc;
}
