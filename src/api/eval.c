/* eval.c - evaluation through the public API (bfit_evaluate): saved
 * weights of a model on a data set's test split, as a result. */
#include "api/config_int.h"
#include "api/result.h"
#include "base/err.h"
#include "nn/zoo.h"

#include <math.h>

/* A language model's figures are per token: its input is token ids and it
 * scores every token (a classifier of token ids scores a sequence). */
static int is_token_model(const char *model, int seq)
{
    bfit_graph_desc g;
    bfit_model *M = NULL;
    int tokens;
    if (bfit_model_source_load(model, seq, &g) != BFIT_OK)
        return 0;
    if (bfit_model_new(&g, NULL, NULL, &M) != BFIT_OK) /* the shapes only */
        M = NULL;
    bfit_graph_fini(&g);
    tokens = M && M->input_dtype == BFIT_I32 && M->per_token;
    bfit_model_free(M);
    return tokens;
}

int bfit_evaluate(const bfit_config *c, bfit_result **out)
{
    bfit_eval_cfg e;
    bfit_dataset *arrays = NULL;
    bfit_result *res;
    double loss = 0, acc = 0;
    int64_t n = 0, skipped = 0;
    char note[80];
    int rc;
    FILE *f;

    if (!out)
        return bfit_fail(BFIT_EINVAL, "bfit_evaluate needs somewhere to put the result");
    *out = NULL;
    if ((rc = bfit_config_eval_cfg(c, &e)) != BFIT_OK || (rc = bfit_config_arrays_eval(c, &arrays)) != BFIT_OK)
        return rc;
    if (arrays) { /* the caller's samples, scored in place */
        e.given_test = arrays;
        e.data = bfit_dataset_source(arrays);
    }
    rc = bfit_evaluate_from(&e, &loss, &acc, &n, &skipped);
    bfit_dataset_free(arrays);
    if (rc != BFIT_OK)
        return rc;
    if (!isfinite(loss) || !isfinite(acc))
        return bfit_fail(BFIT_EFORMAT, "%s: the evaluation's loss is %g: the weights (or the data) hold values too "
                         "large to compute with (check them, e.g. for inf or 1e38)", e.weights, loss);
    if (!(res = bfit_result_make()))
        return BFIT_ENOMEM;
    cJSON_AddNumberToObject(res->root, "samples", (double)n);
    cJSON_AddNumberToObject(res->root, "loss", loss);
    cJSON_AddNumberToObject(res->root, "accuracy", acc);
    if (skipped) /* --skip-bad-images only */
        cJSON_AddNumberToObject(res->root, "images_skipped", (double)skipped);
    if ((f = bfit_result_out(res)) && is_token_model(e.model, e.seq_max ? e.seq_max : e.seq))
        fprintf(f, "test loss %.4f per token (%.4f bits), %s accuracy %.2f%% on %lld sequences\n", loss,
                loss / 0.69314718055994531,
                bfit_token_acc_name(&e.mlm, c->arr[1].ids ? c->arr[1].tags : c->arr[0].tags), 100 * acc,
                (long long)n);
    else if (f)
        fprintf(f, "test loss %.4f, test accuracy %.2f%% on %lld samples%s%s%s\n", loss, 100 * acc, (long long)n,
                skipped ? " (" : "", skipped ? bfit_eval_skipped_str(skipped, note, sizeof note) + 2 : "",
                skipped ? ")" : "");
    bfit_result_close(res);
    *out = res;
    return BFIT_OK;
}
