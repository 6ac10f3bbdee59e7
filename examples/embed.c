/* embed.c - batchfit inside a C program, through the public header only.
 *
 * Trains the mlp preset on Fashion-MNIST one optimizer step at a time, with
 * batchfit choosing the micro-batch from the memory plan, then saves the
 * weights and evaluates them again from the file.
 *
 *   cc embed.c $(pkg-config --cflags --libs batchfit) -o embed
 *   ./embed [SAMPLES_PER_EPOCH [MEMORY]]
 */
#include <batchfit.h>

#include <stdio.h>
#include <stdlib.h>

/* Called by the library after every optimizer step. */
static void on_step(void *ud, const bfit_step_info *s)
{
    int *every = ud;
    if (s->step % *every == 0 || s->epoch_end)
        printf("step %4lld  loss %.4f  micro-batch %d x %d  memory %.1f MiB\n", (long long)s->step, s->loss, s->m,
               s->k, s->mem / 1048576.0);
}

static void on_batch_change(void *ud, const bfit_batch_decision *d, int64_t step)
{
    (void)ud;
    printf("step %4lld  the batch changed: %s\n", (long long)step, d->why);
}

static int fail(const char *what)
{
    fprintf(stderr, "embed: %s: %s\n", what, bfit_errmsg());
    return 1;
}

int main(int argc, char **argv)
{
    bfit_config *cfg = bfit_config_new(), *ev = bfit_config_new();
    bfit_run *run = NULL;
    bfit_eval_info info = BFIT_SIZED(bfit_eval_info);
    bfit_result *res = NULL;
    int every = 50, rc;

    if (!cfg || !ev)
        return fail("configuring");
    /* options by the names the command line uses; everything else keeps
     * the library's defaults */
    if (bfit_config_set(cfg, "model", "mlp") != BFIT_OK ||   /* a preset, a spec file or an ONNX file */
        bfit_config_set(cfg, "data", "fashion-mnist") != BFIT_OK ||
        bfit_config_set_int(cfg, "batch", 128) != BFIT_OK || /* the effective batch; the micro-batch is planned */
        bfit_config_set_double(cfg, "lr", 0.05) != BFIT_OK ||
        (argc > 1 && bfit_config_set(cfg, "epoch-samples", argv[1]) != BFIT_OK) ||
        (argc > 2 && bfit_config_set(cfg, "memory", argv[2]) != BFIT_OK))
        return fail("configuring");
    bfit_config_set_callbacks(cfg, on_step, NULL, on_batch_change, NULL, &every);

    if (bfit_run_new(cfg, &run) != BFIT_OK)
        return fail("setting up");
    while (!bfit_run_done(run))
        if ((rc = bfit_run_step(run, NULL)) != BFIT_OK)
            goto failed;
    if ((rc = bfit_run_evaluate(run, &info)) != BFIT_OK || (rc = bfit_run_save(run, "embed.safetensors")) != BFIT_OK ||
        (rc = bfit_run_result(run, &res)) != BFIT_OK)
        goto failed;
    bfit_run_finish(run, BFIT_OK);
    bfit_run_free(run);
    printf("trained: %.0f steps, test accuracy %.2f%%, peak device memory %.1f MiB\n",
           bfit_result_number(res, "steps"), 100 * info.test_acc, bfit_result_number(res, "peak_bytes") / 1048576.0);
    bfit_result_free(res);

    /* the saved weights, evaluated afresh */
    if (bfit_config_set(ev, "model", "mlp") != BFIT_OK || bfit_config_set(ev, "weights", "embed.safetensors") != BFIT_OK ||
        bfit_evaluate(ev, &res) != BFIT_OK)
        return fail("evaluating the saved weights");
    printf("reloaded: test accuracy %.2f%% on %.0f samples\n", 100 * bfit_result_number(res, "accuracy"),
           bfit_result_number(res, "samples"));
    bfit_result_free(res);
    bfit_config_free(cfg);
    bfit_config_free(ev);
    return 0;
failed:
    fail("training");
    bfit_run_finish(run, rc); /* the log, if any, ends with the error */
    bfit_run_free(run);
    return 1;
}
