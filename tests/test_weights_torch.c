/* test_weights_torch.c - a weights file batchfit saves loads in PyTorch: the
 * equivalent torch.nn.Sequential gives the same probabilities on the same
 * (normalised) test images. Also: loading refuses weights of another model,
 * and leaves the model as it was; evaluating weights too large to compute
 * with is an error, not a loss of NaN. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
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
#include "tfiles.h"

#define N 64

static int setup(void **st)
{
    (void)st;
    return tmp_setup("wt");
}

static int teardown(void **st)
{
    (void)st;
    return tmp_teardown();
}

/* The inputs and the probabilities, for the Python oracle. */
static void write_io(const char *io, float *x, float *probs)
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

/* Train briefly, then compute probabilities for the first N test samples
 * with the saved weights and write them with the inputs for Python. The
 * model is models/NAME.cfg, or the spec text when one is given. */
static void check_spec(const char *name, const char *text)
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
    c.device_name = "cpu"; /* the CPU is meant: --device auto could take a GPU */
    int32_t y[N];
    int got;

    assert_non_null(src);
    if (!py || !*py)
        fail_msg("BFIT_PYTHON is not set: install python3-torch (scripts/setup.sh)");
    if (text) {
        FILE *f;
        snprintf(spec, sizeof spec, "%s/%s.cfg", tmpdir, name);
        assert_non_null(f = fopen(spec, "w"));
        fputs(text, f);
        fclose(f);
    } else {
        snprintf(spec, sizeof spec, "%s/models/%s.cfg", src, name);
    }
    snprintf(wpath, sizeof wpath, "%s/%s.safetensors", tmpdir, name);
    snprintf(io, sizeof io, "%s/%s_io.safetensors", tmpdir, name);
    c.model = spec;
    c.epoch_samples = 1280;
    c.eval_samples = 100;
    c.threads = 2;
    c.save = wpath;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);

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
    write_io(io, x, probs);
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

static void check_model(const char *name) { check_spec(name, NULL); }

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

/* Batch norm over the features of a vector after a linear layer: trained
 * (micro-batches of at least 2), its running statistics are BatchNorm1d's. */
static void test_batchnorm1d_loads_in_torch(void **st)
{
    (void)st;
    check_spec("bn1d", "input 1x28x28\nflatten\nlinear 33\nbatchnorm\nrelu\nlinear 10\n");
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

/* Write the tensors of file `from` to `to` with one F32 value replaced
 * (tensor name, index; name NULL: none) and the given metadata. */
static void rewrite(const char *from, const char *to, const char *name, int64_t idx, float v, const char *const *mk,
                    const char *const *mv, int nmeta)
{
    bfit_st_file *f;
    bfit_st_tensor t[64];
    void *copy[64];
    int n;
    assert_int_equal(bfit_st_read(from, &f), BFIT_OK);
    n = bfit_st_count(f);
    assert_true(n <= 64);
    for (int i = 0; i < n; i++) {
        t[i] = *bfit_st_get(f, i);
        copy[i] = malloc(t[i].nbytes + 1);
        memcpy(copy[i], t[i].data, t[i].nbytes);
        if (name && !strcmp(t[i].name, name))
            ((float *)copy[i])[idx] = v;
        t[i].data = copy[i];
    }
    assert_int_equal(bfit_st_write(to, t, n, mk, mv, nmeta), BFIT_OK);
    for (int i = 0; i < n; i++)
        free(copy[i]);
    bfit_st_free(f);
}

/* A weights file with a NaN or inf in a tensor (a run that diverged), or
 * non-finite normalisation metadata, is refused naming the file, the tensor
 * or key and the value; the model is left as it was. */
static void test_nonfinite_refused(void **st)
{
    const char *src = getenv("BFIT_SOURCE_DIR");
    const char *mk[2] = {"normalize_mean", "normalize_std"};
    const char *bad[][2] = {{"inf", "0.3"}, {"0.5", "nan"}, {"1e39", "0.3"}, {"0.5", "0"}};
    const char *want[][2] = {{"'normalize_mean'", "is inf"}, {"'normalize_std'", "is nan"},
                             {"'normalize_mean'", "is 1e39"}, {"normalize_std[0]", "not positive"}};
    char spec[512], good[512], badp[512];
    float mean[1], sd[1], *before, *after;
    tdev t;
    bfit_graph_desc g;
    bfit_model *M;
    int found;
    (void)st;
    snprintf(spec, sizeof spec, "%s/models/mlp.cfg", src);
    snprintf(good, sizeof good, "%s/good.safetensors", tmpdir);
    snprintf(badp, sizeof badp, "%s/bad.safetensors", tmpdir);
    tdev_open(&t, 2);
    assert_int_equal(bfit_spec_parse_file(spec, &g), BFIT_OK);
    assert_int_equal(bfit_model_new(&g, t.dev, t.arena, &M), BFIT_OK);
    assert_int_equal(bfit_model_alloc_params(M, 0), BFIT_OK);
    assert_int_equal(bfit_model_init_params(M, 5), BFIT_OK);
    assert_int_equal(bfit_weights_save(M, good, NULL, NULL, 0), BFIT_OK);
    before = malloc(M->param_bytes);
    after = malloc(M->param_bytes);
    assert_int_equal(bfit_device_download(t.dev, before, M->param_block, M->param_bytes), BFIT_OK);
    for (int k = 0; k < 2; k++) {
        rewrite(good, badp, "1.weight", 7, k ? INFINITY : NAN, NULL, NULL, 0);
        assert_int_equal(bfit_weights_load(M, badp), BFIT_EFORMAT);
        printf("  %s\n", bfit_errmsg());
        assert_non_null(strstr(bfit_errmsg(), badp));
        assert_non_null(strstr(bfit_errmsg(), "tensor '1.weight'"));
        assert_non_null(strstr(bfit_errmsg(), k ? "holds inf at index 7" : "holds nan at index 7"));
        assert_int_equal(bfit_device_download(t.dev, after, M->param_block, M->param_bytes), BFIT_OK);
        assert_memory_equal(after, before, M->param_bytes);
    }
    {
        /* an integer tensor where a parameter is: refused naming the file */
        bfit_st_file *f;
        bfit_st_tensor tt[64];
        int n;
        assert_int_equal(bfit_st_read(good, &f), BFIT_OK);
        n = bfit_st_count(f);
        for (int i = 0; i < n; i++) {
            tt[i] = *bfit_st_get(f, i);
            if (!strcmp(tt[i].name, "1.weight"))
                tt[i].dtype = "I32";
        }
        assert_int_equal(bfit_st_write(badp, tt, n, NULL, NULL, 0), BFIT_OK);
        bfit_st_free(f);
        assert_int_equal(bfit_weights_load(M, badp), BFIT_EFORMAT);
        printf("  %s\n", bfit_errmsg());
        assert_non_null(strstr(bfit_errmsg(), badp));
        assert_non_null(strstr(bfit_errmsg(), "tensor '1.weight' is I32, an integer type"));
        assert_int_equal(bfit_device_download(t.dev, after, M->param_block, M->param_bytes), BFIT_OK);
        assert_memory_equal(after, before, M->param_bytes);
    }
    for (int k = 0; k < 4; k++) {
        rewrite(good, badp, NULL, 0, 0, mk, bad[k], 2);
        assert_int_equal(bfit_weights_read_norm(badp, 1, mean, sd, &found), BFIT_EFORMAT);
        printf("  %s\n", bfit_errmsg());
        assert_int_equal(found, 0);
        assert_non_null(strstr(bfit_errmsg(), badp));
        assert_non_null(strstr(bfit_errmsg(), want[k][0]));
        assert_non_null(strstr(bfit_errmsg(), want[k][1]));
    }
    free(before);
    free(after);
    bfit_model_free(M);
    bfit_graph_fini(&g);
    tdev_close(&t);
}

/* Weights that are finite but huge (every value +-3e38) make the loss NaN:
 * an evaluation says so and fails, with no result (it printed loss -nan and
 * exited 0, and its JSON held "loss":-nan). */
static void test_huge_weights_eval(void **st)
{
    const char *src = getenv("BFIT_SOURCE_DIR");
    char spec[512], good[512], huge[512];
    bfit_st_file *f;
    bfit_st_tensor t[64];
    void *copy[64];
    bfit_config *c;
    bfit_result *res = NULL;
    tdev d;
    bfit_graph_desc g;
    bfit_model *M;
    int n;
    (void)st;
    snprintf(spec, sizeof spec, "%s/models/mlp.cfg", src);
    snprintf(good, sizeof good, "%s/h-good.safetensors", tmpdir);
    snprintf(huge, sizeof huge, "%s/h-huge.safetensors", tmpdir);
    tdev_open(&d, 2);
    assert_int_equal(bfit_spec_parse_file(spec, &g), BFIT_OK);
    assert_int_equal(bfit_model_new(&g, d.dev, d.arena, &M), BFIT_OK);
    assert_int_equal(bfit_model_alloc_params(M, 0), BFIT_OK);
    assert_int_equal(bfit_model_init_params(M, 5), BFIT_OK);
    assert_int_equal(bfit_weights_save(M, good, NULL, NULL, 0), BFIT_OK);
    bfit_model_free(M);
    bfit_graph_fini(&g);
    tdev_close(&d);
    assert_int_equal(bfit_st_read(good, &f), BFIT_OK);
    n = bfit_st_count(f);
    assert_true(n <= 64);
    for (int i = 0; i < n; i++) {
        t[i] = *bfit_st_get(f, i);
        assert_string_equal(t[i].dtype, "F32");
        copy[i] = malloc(t[i].nbytes + 1);
        for (size_t j = 0; j < t[i].nbytes / 4; j++)
            ((float *)copy[i])[j] = j % 2 ? -3e38f : 3e38f;
        t[i].data = copy[i];
    }
    assert_int_equal(bfit_st_write(huge, t, n, NULL, NULL, 0), BFIT_OK);
    for (int i = 0; i < n; i++)
        free(copy[i]);
    bfit_st_free(f);

    c = bfit_config_new();
    assert_non_null(c);
    assert_int_equal(bfit_config_set(c, "model", spec), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "weights", huge), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "eval-samples", "100"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "device", "cpu"), BFIT_OK);
    assert_int_equal(bfit_evaluate(c, &res), BFIT_EFORMAT);
    printf("  %s\n", bfit_errmsg());
    assert_null(res);
    assert_non_null(strstr(bfit_errmsg(), huge));
    assert_non_null(strstr(bfit_errmsg(), "the evaluation's loss is"));
    assert_non_null(strstr(bfit_errmsg(), "too large to compute with"));
    /* the weights it was made from evaluate */
    assert_int_equal(bfit_config_set(c, "weights", good), BFIT_OK);
    if (bfit_evaluate(c, &res) != BFIT_OK)
        fail_msg("the good weights: %s", bfit_errmsg());
    assert_true(isfinite(bfit_result_number(res, "loss")));
    bfit_result_free(res);
    bfit_config_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_loads_in_torch),
        cmocka_unit_test(test_cnn_loads_in_torch),
        cmocka_unit_test(test_batchnorm1d_loads_in_torch),
        cmocka_unit_test(test_wrong_model_refused),
        cmocka_unit_test(test_nonfinite_refused),
        cmocka_unit_test(test_huge_weights_eval),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
