/* test_gradset.c - a step's first backward sets the parameter gradients
 * (src/nn/gradset.c): two micro-batches over stale gradients (NaN bytes
 * left from "an earlier step") give, bit for bit, the gradients the same two
 * micro-batches add onto zeros; only the gradients no backward sets are
 * zeroed between steps; a tied table is set by its head and added to by its
 * embedding. f32 and bf16 (a matmul's f32 gradient from 16-bit operands). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/testctl.h"
#include "device/device.h"
#include "nn/spec.h"
#include "tfiles.h"
#include "trig.h"
#include "ttok.h"

#define BIG ((uint64_t)1 << 30)

static uint64_t rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* m random samples (images, vectors or token ids) and valid labels. */
static void fill_input(bfit_model *M, int m, uint64_t seed)
{
    int64_t n = (int64_t)m * bfit_shape_numel(M->input), nl = (int64_t)m * M->labels_per_sample;
    int tokens = M->input_dtype == BFIT_I32;
    float *x = malloc((size_t)n * sizeof *x);
    int32_t *lab = malloc((size_t)nl * sizeof *lab);
    assert_true(x && lab);
    for (int64_t i = 0; i < n; i++) {
        if (tokens)
            ((int32_t *)x)[i] = (int32_t)(rnd(&seed) % (uint64_t)M->nodes[0].l->cfg.vocab);
        else
            x[i] = (float)((double)rnd(&seed) / 2147483648.0 - 0.5);
    }
    for (int64_t i = 0; i < nl; i++)
        lab[i] = (int32_t)(rnd(&seed) % (uint64_t)M->nclasses);
    assert_int_equal(bfit_model_set_input(M, x, lab, m), BFIT_OK);
    free(x);
    free(lab);
}

/* Two micro-batches of m, then all the gradients downloaded (n floats). */
static float *two_micro(trig *r, int m, int64_t *n)
{
    bfit_model *M = r->M;
    int64_t at = 0;
    float *g;
    for (int k = 0; k < 2; k++) {
        fill_input(M, m, 11 + (uint64_t)k);
        assert_int_equal(bfit_model_forward(M, 5 + (uint64_t)k), BFIT_OK);
        assert_int_equal(bfit_model_backward(M, 0.5f / (float)m), BFIT_OK);
        assert_int_equal(M->grads_stale, 0);
    }
    *n = (int64_t)(M->grad_bytes / sizeof(float));
    g = calloc(1, M->grad_bytes); /* alignment gaps: zeros on both sides */
    assert_non_null(g);
    for (int j = 0; j < M->ntrainable; j++) {
        size_t b = bfit_param_bytes(M->trainable[j]);
        assert_int_equal(bfit_device_download(r->dev, g + at, M->trainable[j]->grad, b), BFIT_OK);
        at += (int64_t)(BFIT_ALIGN_UP(b) / sizeof(float));
    }
    return g;
}

/* After NaN bytes and bfit_model_zero_grads: the zeroed gradients are
 * zeros, the set ones still NaN (nothing wrote them); returns how many
 * trainable parameters are set. */
static int stale_then_zeroed(trig *r)
{
    bfit_model *M = r->M;
    int set = 0;
    assert_int_equal(bfit_device_fill(r->dev, M->grad_block, 0xFF, M->grad_bytes), BFIT_OK);
    assert_int_equal(bfit_model_zero_grads(M), BFIT_OK);
    assert_int_equal(M->grads_stale, 1);
    for (int j = 0; j < M->ntrainable; j++) {
        float v;
        assert_int_equal(bfit_device_download(r->dev, &v, M->trainable[j]->grad, sizeof v), BFIT_OK);
        if (M->grad_zero[j])
            assert_true(v == 0.0f);
        else
            assert_true(v != v); /* untouched: the step's first backward sets it */
        set += !M->grad_zero[j];
    }
    return set;
}

/* How the models below store a step (the default, or a test's). */
static bfit_store_cfg store;

/* The model of src (a preset, a file under models/, or spec text with a
 * newline) in precision prec at micro-batch m: set over NaN = added onto
 * zeros, bit for bit. Returns how many trainable parameters are set. */
static int set_equals_added(const char *src, bfit_dtype prec, int m)
{
    bfit_store_cfg sc = store;
    bfit_graph_desc g;
    char path[600];
    int64_t na, nb;
    float *a, *b;
    int set;
    trig r;

    trig_open(&r, 2, BIG);
    if (strchr(src, '\n')) {
        assert_int_equal(bfit_spec_parse(src, strlen(src), "t.cfg", &g), BFIT_OK);
        assert_int_equal(bfit_spec_check_shapes(&g), BFIT_OK);
        trig_model(&r, &g);
    } else {
        char rel[128];
        snprintf(rel, sizeof rel, "models/%s", src);
        src_path(path, sizeof path, rel);
        trig_load(&r, strstr(src, ".cfg") ? path : src);
    }
    sc.precision = prec;
    assert_int_equal(bfit_model_configure(r.M, &sc), BFIT_OK);
    assert_int_equal(bfit_model_alloc_params(r.M, 1), BFIT_OK);
    assert_int_equal(bfit_model_init_params(r.M, 3), BFIT_OK);
    assert_int_equal(bfit_model_reserve(r.M, m, 1), BFIT_OK);

    set = stale_then_zeroed(&r);
    a = two_micro(&r, m, &na);
    /* the same two micro-batches, every op adding onto zeros */
    assert_int_equal(bfit_device_zero(r.dev, r.M->grad_block, r.M->grad_bytes), BFIT_OK);
    r.M->grads_stale = 0;
    b = two_micro(&r, m, &nb);
    assert_int_equal(na, nb);
    for (int64_t i = 0; i < na; i++)
        if (memcmp(&a[i], &b[i], sizeof a[i]) != 0)
            fail_msg("%s (%s) gradient float %lld: set %.9g, added onto zeros %.9g", src, bfit_dtype_name(prec),
                     (long long)i, (double)a[i], (double)b[i]);
    free(a);
    free(b);
    trig_free(&r);
    return set;
}

static void test_images(void **st)
{
    (void)st;
    /* conv, batch norm, linear: every gradient set, none zeroed */
    const char *models[] = {"mlp", "cnn", "resnet-mini.cfg"};
    const int count[] = {6, 8, 0};
    for (int i = 0; i < 3; i++)
        for (int p = 0; p < 2; p++) {
            bfit_dtype prec = p ? BFIT_BF16 : BFIT_F32;
            int set = set_equals_added(models[i], prec, 6);
            print_message("  %s %s: %d gradients set\n", models[i], bfit_dtype_name(prec), set);
            if (count[i])
                assert_int_equal(set, count[i]);
            else
                assert_true(set > 20);
        }
}

/* The tied table: its head sets it, the embedding adds its rows; the
 * positions' table is zeroed (an embedding's backward scatters). */
static void test_tokens(void **st)
{
    bfit_graph_desc g;
    trig r;
    (void)st;
    for (int p = 0; p < 2; p++)
        assert_true(set_equals_added(ttok_tied_spec, p ? BFIT_BF16 : BFIT_F32, 3) > 0);
    trig_open(&r, 2, BIG);
    assert_int_equal(bfit_spec_parse(ttok_tied_spec, strlen(ttok_tied_spec), "t.cfg", &g), BFIT_OK);
    trig_model(&r, &g);
    assert_int_equal(r.M->nodes[0].l->cfg.kind, BFIT_L_EMBED);
    assert_false(r.M->nodes[0].grad_set);
    for (int i = 0; i < r.M->n; i++)
        if (r.M->nodes[i].l->nparams && r.M->nodes[i].l->params[0].owner)
            assert_true(r.M->nodes[i].grad_set); /* the head, first in backward */
    assert_false(r.M->grad_zero[0]); /* the token table: the head sets it */
    assert_true(r.M->grad_zero[1]);  /* the positions' table */
    trig_free(&r);
    assert_true(set_equals_added("gpt-nano", BFIT_F32, 2) > 0);
}

/* A module applied twice (cfg.share, as the ONNX import sets it): the
 * second linear's parameters are the first's (one tensor each, counted
 * once, its gradient set by the later place and added to by the earlier);
 * a layer of another kind or shape cannot share them. */
static void test_shared_module(void **st)
{
    static const char spec[] = "input 8\nlinear 8\nrelu\nlinear 8\nrelu\nlinear 4\n";
    static const char other[] = "input 8\nlinear 8\nrelu\nlayernorm\nlinear 4\n";
    bfit_graph_desc g;
    bfit_model *M = NULL;
    trig r;
    (void)st;
    trig_open(&r, 2, BIG);
    assert_int_equal(bfit_spec_parse(spec, strlen(spec), "t.cfg", &g), BFIT_OK);
    g.nodes[2].cfg.share = 1;
    trig_model(&r, &g);
    assert_int_equal(r.M->nparams, 4); /* 6 without sharing */
    assert_ptr_equal(r.M->nodes[2].l->params[0].data, r.M->nodes[0].l->params[0].data);
    assert_ptr_equal(r.M->nodes[2].l->params[1].grad, r.M->nodes[0].l->params[1].grad);
    assert_true(r.M->nodes[2].grad_set);  /* the later place sets, */
    assert_false(r.M->nodes[0].grad_set); /* the earlier adds */
    trig_free(&r);
    trig_open(&r, 2, BIG);
    assert_int_equal(bfit_spec_parse(other, strlen(other), "t.cfg", &g), BFIT_OK);
    g.nodes[2].cfg.share = 1;
    assert_int_not_equal(bfit_model_new(&g, r.dev, r.arena, &M), BFIT_OK);
    assert_null(M);
    assert_non_null(strstr(bfit_errmsg(), "shares the parameters of a layer of another kind or shape"));
    bfit_graph_fini(&g);
    trig_free(&r);
}

/* Other paths of the ops that set: batch norms in nchw and backward from
 * their input (not lean: oneDNN's), convolutions' weight gradients as one
 * product over the samples (cpu_conv_gemm.c); and recomputation. */
static void test_other_paths(void **st)
{
    (void)st;
    bfit_test_control(BFIT_TC_LAYOUT, 1); /* nchw throughout */
    store.lean = 0;
    assert_true(set_equals_added("resnet-mini.cfg", BFIT_F32, 6) > 20);
    assert_int_equal(set_equals_added("cnn", BFIT_BF16, 6), 8);
    store = bfit_store_cfg_default();
    bfit_test_control(BFIT_TC_CONV_GEMM, 1);
    assert_true(set_equals_added("resnet-mini.cfg", BFIT_F32, 6) > 20);
    bfit_test_control(BFIT_TC_CONV_GEMM, 0);
    bfit_test_control(BFIT_TC_LAYOUT, 0);
    store.recompute = BFIT_RECOMPUTE_BLOCKS; /* regenerations between the backwards */
    assert_true(set_equals_added("resnet-mini.cfg", BFIT_BF16, 6) > 20);
    assert_true(set_equals_added("gpt-nano", BFIT_F32, 2) > 0);
    store = bfit_store_cfg_default();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_images),
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_shared_module),
        cmocka_unit_test(test_other_paths),
    };
    store = bfit_store_cfg_default();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
