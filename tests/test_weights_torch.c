/* test_weights_torch.c - a weights file batchfit saves loads in PyTorch: the
 * equivalent torch.nn.Sequential gives the same probabilities on the same
 * (normalised) test images. Also: loading refuses weights of another model,
 * and leaves the model as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "data/data.h"
#include "nn/model.h"
#include "nn/spec.h"
#include "tensor/safetensors.h"
#include "train/trainer.h"
#include "train/weights.h"
#include "tdev.h"

#define N 64

static char tmpdir[256];

static int setup(void **st)
{
    (void)st;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/bfit_wt_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **st)
{
    char cmd[300];
    (void)st;
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd);
}

/* Train briefly, then compute probabilities for the first N test samples
 * with the saved weights and write them with the inputs for Python. */
static void check_model(const char *name)
{
    const char *src = getenv("BFIT_SOURCE_DIR"), *py = getenv("BFIT_PYTHON");
    char spec[512], wpath[512], io[512], cmd[2048];
    bfit_train_cfg c = bfit_train_cfg_default();
    bfit_train_result r;
    tdev td;
    bfit_graph_desc g;
    bfit_model *M;
    bfit_dataset *tr, *te;
    bfit_stream *s;
    bfit_stream_cfg sc;
    float mean[1], std[1], *x, *probs;
    int32_t y[N];
    int got;

    assert_non_null(src);
    if (!py || !*py)
        fail_msg("BFIT_PYTHON is not set: install python3-torch (scripts/setup.sh)");
    snprintf(spec, sizeof spec, "%s/models/%s.cfg", src, name);
    snprintf(wpath, sizeof wpath, "%s/%s.safetensors", tmpdir, name);
    snprintf(io, sizeof io, "%s/%s_io.safetensors", tmpdir, name);
    c.model = spec;
    c.epoch_samples = 1280;
    c.eval_samples = 100;
    c.threads = 2;
    c.save = wpath;
    assert_int_equal(bfit_train(&c, &r), BFIT_OK);

    tdev_open(&td, 2);
    assert_int_equal(bfit_spec_parse_file(spec, &g), BFIT_OK);
    assert_int_equal(bfit_model_new(&g, td.dev, td.arena, &M), BFIT_OK);
    assert_int_equal(bfit_model_alloc_params(M, 0), BFIT_OK);
    assert_int_equal(bfit_weights_load(M, wpath), BFIT_OK);
    assert_int_equal(bfit_dataset_load("fashion-mnist", 1, NULL, &tr), BFIT_OK);
    assert_int_equal(bfit_dataset_load("fashion-mnist", 0, NULL, &te), BFIT_OK);
    assert_int_equal(bfit_dataset_norm_stats(tr, mean, std), BFIT_OK);
    memset(&sc, 0, sizeof sc);
    sc.max_take = N;
    sc.norm_mean = mean;
    sc.norm_std = std;
    assert_int_equal(bfit_stream_new(te, &sc, &s), BFIT_OK);
    /* samples on the host, uploaded; probabilities downloaded */
    x = malloc(sizeof *x * N * 784);
    probs = malloc(sizeof *probs * N * 10);
    assert_non_null(x);
    assert_non_null(probs);
    assert_int_equal(bfit_model_reserve(M, N, 0), BFIT_OK);
    assert_int_equal(bfit_stream_take(s, N, x, y, &got), BFIT_OK);
    assert_int_equal(got, N);
    assert_int_equal(bfit_model_set_input(M, x, y, N), BFIT_OK);
    assert_int_equal(bfit_model_forward(M, 0), BFIT_OK);
    assert_int_equal(bfit_model_read_probs(M, probs), BFIT_OK);
    {
        bfit_st_tensor t[2];
        memset(t, 0, sizeof t);
        t[0].name = "x";
        t[0].dtype = "F32";
        t[0].ndim = 4;
        t[0].shape[0] = N;
        t[0].shape[1] = 1;
        t[0].shape[2] = 28;
        t[0].shape[3] = 28;
        t[0].data = x;
        t[0].nbytes = N * 784 * sizeof(float);
        t[1].name = "probs";
        t[1].dtype = "F32";
        t[1].ndim = 2;
        t[1].shape[0] = N;
        t[1].shape[1] = 10;
        t[1].data = probs;
        t[1].nbytes = N * 10 * sizeof(float);
        assert_int_equal(bfit_st_write(io, t, 2, NULL, NULL, 0), BFIT_OK);
    }
    snprintf(cmd, sizeof cmd, "%s %s/tests/oracle/weights_check.py %s %s %s", py, src, spec, wpath, io);
    assert_int_equal(system(cmd), 0);

    free(x);
    free(probs);
    bfit_stream_free(s);
    bfit_dataset_free(tr);
    bfit_dataset_free(te);
    bfit_model_free(M);
    bfit_graph_fini(&g);
    tdev_close(&td);
}

static void test_mlp_loads_in_torch(void **st)
{
    (void)st;
    check_model("mlp");
}

static void test_cnn_loads_in_torch(void **st)
{
    (void)st;
    check_model("cnn");
}

/* mlp weights into the cnn: refused by name, and the cnn's own parameters
 * are left untouched (all of them, bit for bit). */
static void test_wrong_model_refused(void **st)
{
    const char *src = getenv("BFIT_SOURCE_DIR");
    char spec[512], wpath[512];
    tdev t;
    bfit_graph_desc g;
    bfit_model *M;
    void *before, *after;
    (void)st;
    snprintf(spec, sizeof spec, "%s/models/cnn.cfg", src);
    snprintf(wpath, sizeof wpath, "%s/mlp.safetensors", tmpdir);
    tdev_open(&t, 2);
    assert_int_equal(bfit_spec_parse_file(spec, &g), BFIT_OK);
    assert_int_equal(bfit_model_new(&g, t.dev, t.arena, &M), BFIT_OK);
    assert_int_equal(bfit_model_alloc_params(M, 0), BFIT_OK);
    assert_int_equal(bfit_model_init_params(M, 5), BFIT_OK);
    before = malloc(M->param_bytes);
    after = malloc(M->param_bytes);
    assert_non_null(before);
    assert_non_null(after);
    assert_int_equal(bfit_device_download(t.dev, before, M->param_block, M->param_bytes), BFIT_OK);
    assert_int_equal(bfit_weights_load(M, wpath), BFIT_EFORMAT);
    assert_non_null(strstr(bfit_errmsg(), "another model"));
    assert_int_equal(bfit_device_download(t.dev, after, M->param_block, M->param_bytes), BFIT_OK);
    assert_memory_equal(after, before, M->param_bytes);
    assert_int_equal(bfit_weights_load(M, "/nonexistent.safetensors"), BFIT_EIO);
    free(before);
    free(after);
    bfit_model_free(M);
    bfit_graph_fini(&g);
    tdev_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_loads_in_torch),
        cmocka_unit_test(test_cnn_loads_in_torch),
        cmocka_unit_test(test_wrong_model_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
