/* train.c - training through the public API: a run from a configuration
 * (bfit_run_new), the whole loop (bfit_train), and what they found as a
 * result: the figures as JSON and the summary lines the command line
 * prints. */
#include "api/config_int.h"
#include "api/result.h"
#include "base/err.h"
#include "data/data.h"
#include "train/run_int.h"

#include <stdlib.h>

/* What a run keeps: its copy of the configuration and the given options'
 * JSON its start event logs. */
typedef struct kept {
    bfit_config *c;
    char *given;
} kept;

static void keep_free(void *p)
{
    kept *k = p;
    bfit_config_free(k->c);
    free(k->given);
    free(k);
}

int bfit_run_new(const bfit_config *c, bfit_run **out)
{
    kept *k;
    bfit_train_cfg t;
    int rc;

    if (!out)
        return bfit_fail(BFIT_EINVAL, "bfit_run_new needs somewhere to put the run");
    *out = NULL;
    if (!c)
        return bfit_fail(BFIT_EINVAL, "bfit_run_new needs a configuration");
    /* the run points into its configuration: it keeps a copy of its own */
    if (!(k = calloc(1, sizeof *k)) || !(k->c = bfit_config_copy(c))) {
        free(k);
        return bfit_fail(BFIT_ENOMEM, "out of host memory");
    }
    /* the data sets of the caller's arrays live as long as the run: its configuration holds them */
    if ((rc = bfit_config_train_cfg(k->c, &t)) != BFIT_OK ||
        (rc = bfit_config_precision(k->c, &t.storage.precision)) != BFIT_OK ||
        (rc = bfit_config_given_json(k->c, &k->given)) != BFIT_OK ||
        (rc = bfit_config_arrays_sets(k->c, &t, k->c->arr_sets)) != BFIT_OK) {
        keep_free(k);
        return rc;
    }
    t.options_json = k->given;
    if ((rc = bfit_run_new_from(&t, out)) != BFIT_OK) {
        keep_free(k);
        return rc;
    }
    (*out)->keep = k;
    (*out)->keep_free = keep_free;
    return BFIT_OK;
}

/* The figures of a run into a result's JSON. */
static void result_json(const bfit_train_result *r, cJSON *o)
{
    cJSON_AddNumberToObject(o, "steps", (double)r->steps);
    cJSON_AddNumberToObject(o, "samples", (double)r->samples);
    cJSON_AddNumberToObject(o, "epochs", r->epochs);
    cJSON_AddNumberToObject(o, "train_loss", r->train_loss);
    if (r->evaluated) {
        cJSON_AddNumberToObject(o, "test_loss", r->test_loss);
        cJSON_AddNumberToObject(o, "test_accuracy", r->test_acc);
    } else { /* no evaluation of the final weights finished: nothing measured */
        cJSON_AddNullToObject(o, "test_loss");
        cJSON_AddNullToObject(o, "test_accuracy");
    }
    cJSON_AddNumberToObject(o, "train_seconds", r->seconds);
    cJSON_AddNumberToObject(o, "micro_batch", r->micro_batch);
    cJSON_AddNumberToObject(o, "batch", r->last_batch);
    cJSON_AddNumberToObject(o, "ooms", r->ooms);
    cJSON_AddNumberToObject(o, "batch_changes", r->batch_changes);
    cJSON_AddNumberToObject(o, "peak_bytes", (double)r->peak_bytes);
    cJSON_AddNumberToObject(o, "skipped_steps", (double)r->skipped_steps);
    if (r->images_skipped) /* --skip-bad-images only */
        cJSON_AddNumberToObject(o, "images_skipped", (double)r->images_skipped);
    cJSON_AddNumberToObject(o, "loss_scale", r->loss_scale);
    cJSON_AddNumberToObject(o, "noise_scale", r->noise_scale);
    if (r->tokens || r->tokens_computed) /* a classifier of token ids: the positions computed alone */
        cJSON_AddNumberToObject(o, "tokens_computed", (double)r->tokens_computed);
    if (r->tokens)
        cJSON_AddNumberToObject(o, "tokens", (double)r->tokens);
    cJSON_AddStringToObject(o, "stopped", r->stopped == BFIT_ESTOPPED ? "request"
                                          : r->stopped == BFIT_ENOMEM ? "memory" : "");
    if (r->stopped == BFIT_ESTOPPED && r->stop_flag) /* a stop flag's (a signal handler's) */
        cJSON_AddNumberToObject(o, "stop_flag", r->stop_flag);
    if (r->stopped == BFIT_ESTOPPED && r->stop_rank >= 0) /* data-parallel: the rank that was stopped */
        cJSON_AddNumberToObject(o, "stop_rank", r->stop_rank);
    cJSON_AddNumberToObject(o, "missing_bytes", (double)r->missing);
    cJSON_AddStringToObject(o, "checkpoint", r->checkpoint);
    cJSON_AddStringToObject(o, "resumed_from", r->resumed_from);
    cJSON_AddBoolToObject(o, "report_written", r->report_written);
    cJSON_AddStringToObject(o, "report", r->report_written ? r->report : "");
    cJSON_AddBoolToObject(o, "dist_alone", r->dist_alone);
}

/* The summary lines for people. */
static void result_text(const bfit_train_result *r, FILE *f)
{
    if (!f)
        return;
    if (r->tokens)
        fprintf(f, "test loss %.4f per token (%.4f bits) after %d epoch(s), %lld steps, %.1f s training (%.0f "
                "tokens/s; padding %.1f%% of the positions computed)\n",
                r->test_loss, r->test_loss / 0.69314718055994531, r->epochs, (long long)r->steps, r->seconds,
                r->seconds > 0 ? (double)r->tokens / r->seconds : 0.0,
                r->tokens_computed ? 100.0 * (1.0 - (double)r->tokens / (double)r->tokens_computed) : 0.0);
    else if (r->tokens_computed && r->samples) /* a classifier of token ids: each micro-batch at its longest */
        fprintf(f, "test accuracy %.2f%% after %d epoch(s), %lld steps, %.1f s training (%.0f samples/s; %.1f "
                "token positions computed a sequence)\n", 100 * r->test_acc, r->epochs, (long long)r->steps,
                r->seconds, r->seconds > 0 ? (double)r->samples / r->seconds : 0.0,
                (double)r->tokens_computed / (double)r->samples);
    else
        fprintf(f, "test accuracy %.2f%% after %d epoch(s), %lld steps, %.1f s training (%.0f samples/s)\n",
                100 * r->test_acc, r->epochs, (long long)r->steps, r->seconds,
                r->seconds > 0 ? (double)r->samples / r->seconds : 0.0);
    if (r->images_skipped)
        fprintf(f, "%lld unreadable image read(s) skipped (--skip-bad-images): in training each replaced by the "
                "next readable image, in evaluations left out of the scores\n", (long long)r->images_skipped);
    if (r->loss_scale > 0)
        fprintf(f, "loss scaling: %lld step(s) skipped for inf/NaN gradients (their samples counted), final scale "
                "%g\n", (long long)r->skipped_steps, r->loss_scale);
}

static bfit_result *make_result(const bfit_train_result *tr, int text)
{
    bfit_result *res = bfit_result_make();
    if (!res)
        return NULL;
    result_json(tr, res->root);
    if (text)
        result_text(tr, bfit_result_out(res));
    bfit_result_close(res);
    return res;
}

int bfit_run_result(const bfit_run *r, bfit_result **out)
{
    bfit_train_result tr;
    if (!r || !out)
        return bfit_fail(BFIT_EINVAL, "bfit_run_result needs a run and somewhere to put the result");
    bfit_run_result_get(r, &tr);
    return (*out = make_result(&tr, 1)) ? BFIT_OK : BFIT_ENOMEM;
}

int bfit_train(const bfit_config *c, bfit_result **out)
{
    bfit_train_cfg t;
    bfit_train_result tr;
    bfit_err_state e;
    bfit_dataset *sets[2] = {NULL, NULL};
    char *given = NULL;
    int rc;

    if (!out)
        return bfit_fail(BFIT_EINVAL, "bfit_train needs somewhere to put the result");
    *out = NULL;

    if ((rc = bfit_config_train_cfg(c, &t)) != BFIT_OK || (rc = bfit_config_precision(c, &t.storage.precision)) != BFIT_OK ||
        (rc = bfit_config_given_json(c, &given)) != BFIT_OK ||
        (rc = bfit_config_arrays_sets(c, &t, sets)) != BFIT_OK) {
        free(given);
        return rc;
    }
    t.options_json = given;
    rc = bfit_train_from(&t, &tr);
    free(given);
    bfit_dataset_free(sets[0]);
    bfit_dataset_free(sets[1]);
    bfit_err_save(&e); /* making the result must not lose the run's message */
    *out = make_result(&tr, rc == BFIT_OK);
    bfit_err_restore(&e);
    return rc;
}
