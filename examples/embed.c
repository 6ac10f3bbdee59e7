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
    bfit_train_cfg cfg = bfit_train_cfg_default();
    bfit_eval_cfg ev = {0};
    bfit_run *run = NULL;
    bfit_eval_info info;
    bfit_train_result res;
    double loss, acc;
    int64_t n;
    int every = 50, rc;

    cfg.model = "mlp";                  /* a preset, or a spec file such as models/mlp.cfg */
    cfg.data = "fashion-mnist";
    cfg.batch = 128;                    /* the effective batch; the micro-batch is planned */
    cfg.epochs = 1;
    cfg.epoch_samples = argc > 1 ? atoll(argv[1]) : 0;
    if (argc > 2 && bfit_parse_size(argv[2], &cfg.memory) != BFIT_OK)
        return fail("memory");
    cfg.lr = 0.05;
    cfg.on_step = on_step;
    cfg.on_batch_change = on_batch_change;
    cfg.cb_ud = &every;

    if (bfit_run_new(&cfg, &run) != BFIT_OK)
        return fail("setting up");
    while (!bfit_run_done(run))
        if ((rc = bfit_run_step(run, NULL)) != BFIT_OK)
            goto failed;
    if ((rc = bfit_run_evaluate(run, &info)) != BFIT_OK || (rc = bfit_run_save(run, "embed.safetensors")) != BFIT_OK)
        goto failed;
    bfit_run_result(run, &res);
    bfit_run_finish(run, BFIT_OK);
    bfit_run_free(run);
    printf("trained: %lld steps, test accuracy %.2f%%, peak device memory %.1f MiB\n", (long long)res.steps,
           100 * info.test_acc, res.peak_bytes / 1048576.0);

    /* the saved weights, evaluated afresh */
    ev.model = "mlp";
    ev.weights = "embed.safetensors";
    ev.data = "fashion-mnist";
    ev.normalize = 1;
    if (bfit_evaluate(&ev, &loss, &acc, &n) != BFIT_OK)
        return fail("evaluating the saved weights");
    printf("reloaded: test accuracy %.2f%% on %lld samples\n", 100 * acc, (long long)n);
    return 0;
failed:
    fail("training");
    bfit_run_finish(run, rc); /* the log, if any, ends with the error */
    bfit_run_free(run);
    return 1;
}
