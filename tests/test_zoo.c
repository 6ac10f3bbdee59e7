/* test_zoo.c - the model zoo: parameter counts equal torchvision's to the
 * scalar, the architectures have torchvision's shape (stage outputs, where
 * the stride sits, no conv biases in ResNet), mlp and cnn are node for node
 * the shipped spec files, and the loader tells presets from spec files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "internal.h"

#include "nn/model.h"
#include "nn/spec.h"
#include "nn/zoo.h"
#include "tfiles.h"

static char models_dir[512];

static int setup(void **st)
{
    (void)st;
    src_path(models_dir, sizeof models_dir, "models");
    return 0;
}

/* A shape-only model (no device) of a preset. */
static bfit_model *build(const char *name)
{
    bfit_graph_desc g;
    bfit_model *M = NULL;
    if (bfit_zoo_build(name, &g) != BFIT_OK)
        print_message("%s: %s\n", name, bfit_errmsg());
    assert_int_equal(bfit_model_new(&g, NULL, NULL, &M), BFIT_OK);
    bfit_graph_fini(&g);
    return M;
}

static int count_kind(const bfit_model *M, bfit_layer_kind k)
{
    int n = 0;
    for (int i = 0; i < M->n; i++)
        n += M->nodes[i].l->cfg.kind == k;
    return n;
}

/* torchvision: sum(p.numel() for p in model.parameters()) */
static void test_param_counts(void **st)
{
    static const struct {
        const char *name;
        int64_t params;
    } want[] = {
        {"mlp", 1863690},       {"cnn", 421642},          {"resnet18", 11689512},
        {"resnet50", 25557032}, {"vgg16", 138357544},
    };
    (void)st;
    for (unsigned i = 0; i < sizeof want / sizeof want[0]; i++) {
        bfit_model *M = build(want[i].name);
        int64_t n = bfit_model_param_count(M);
        if (n != want[i].params)
            print_message("%s: %lld parameters, want %lld\n", want[i].name, (long long)n, (long long)want[i].params);
        assert_int_equal(n, want[i].params);
        bfit_model_free(M);
    }
}

static void test_names(void **st)
{
    const char *const *n = bfit_zoo_names();
    const char *want[] = {"mlp", "cnn", "resnet18", "resnet50", "vgg16", "gpt-nano", "gpt2", "bert-base"};
    int i = 0;
    (void)st;
    for (; n[i]; i++) {
        assert_true(i < 8);
        assert_string_equal(n[i], want[i]);
    }
    assert_int_equal(i, 8);
}

static void test_unknown_preset(void **st)
{
    bfit_graph_desc g;
    (void)st;
    assert_int_equal(bfit_zoo_build("resnet5", &g), BFIT_EINVAL);
    assert_int_equal(g.nnodes, 0);
    assert_non_null(strstr(bfit_errmsg(), "'resnet5'"));
    for (const char *const *n = bfit_zoo_names(); *n; n++)
        assert_non_null(strstr(bfit_errmsg(), *n));
    bfit_graph_fini(&g);
}

static void assert_same_graph(const bfit_graph_desc *a, const bfit_graph_desc *b)
{
    assert_true(bfit_shape_eq(a->input, b->input));
    assert_int_equal(a->input_dtype, b->input_dtype);
    assert_int_equal(a->nnodes, b->nnodes);
    for (int i = 0; i < a->nnodes; i++) {
        const bfit_layer_cfg *x = &a->nodes[i].cfg, *y = &b->nodes[i].cfg;
        assert_int_equal(x->kind, y->kind);
        assert_int_equal(x->units, y->units);
        assert_int_equal(x->kh, y->kh);
        assert_int_equal(x->kw, y->kw);
        assert_int_equal(x->sh, y->sh);
        assert_int_equal(x->sw, y->sw);
        assert_int_equal(x->ph, y->ph);
        assert_int_equal(x->pw, y->pw);
        assert_int_equal(x->bias, y->bias);
        assert_true(x->p == y->p && x->eps == y->eps && x->momentum == y->momentum);
        assert_true(x->vocab == y->vocab && x->positions == y->positions && x->types == y->types);
        assert_true(x->causal == y->causal && x->lean == y->lean && x->tie == y->tie && x->std == y->std);
        assert_int_equal(a->nodes[i].in[0], b->nodes[i].in[0]);
        assert_int_equal(a->nodes[i].in[1], b->nodes[i].in[1]);
    }
}

/* The presets mlp, cnn and gpt-nano are the shipped spec files, node for
 * node. */
static void test_presets_match_model_files(void **st)
{
    const char *names[] = {"mlp", "cnn", "gpt-nano"};
    (void)st;
    for (int i = 0; i < 3; i++) {
        bfit_graph_desc a, b;
        char path[600];
        snprintf(path, sizeof path, "%s/%s.cfg", models_dir, names[i]);
        assert_int_equal(bfit_zoo_build(names[i], &a), BFIT_OK);
        if (bfit_spec_parse_file(path, &b) != BFIT_OK)
            print_message("%s\n", bfit_errmsg());
        assert_int_equal(bfit_spec_check_shapes(&b), BFIT_OK);
        assert_same_graph(&a, &b);
        /* and the preset passes the spec's own shape check */
        assert_int_equal(bfit_spec_check_shapes(&a), BFIT_OK);
        bfit_graph_fini(&a);
        bfit_graph_fini(&b);
    }
}

/* The output shape of the last node of a kind before node `before`. */
static bfit_shape last_out(const bfit_model *M, bfit_layer_kind k, int before)
{
    bfit_shape s = {0};
    for (int i = 0; i < before && i < M->n; i++)
        if (M->nodes[i].l->cfg.kind == k)
            s = M->nodes[i].l->out;
    return s;
}

static int find_kind(const bfit_model *M, bfit_layer_kind k)
{
    for (int i = 0; i < M->n; i++)
        if (M->nodes[i].l->cfg.kind == k)
            return i;
    return -1;
}

static void assert_shape(bfit_shape s, int c, int h, int w)
{
    if (s.c != c || s.h != h || s.w != w)
        print_message("shape %dx%dx%d, want %dx%dx%d\n", s.c, s.h, s.w, c, h, w);
    assert_true(s.c == c && s.h == h && s.w == w);
}

static void test_resnet_structure(void **st)
{
    bfit_model *M;
    int gap, stem_pool;
    (void)st;

    M = build("resnet50");
    /* 1 stem + 16 blocks x 3 + 4 downsample convs, each followed by its bn */
    assert_int_equal(count_kind(M, BFIT_L_CONV), 53);
    assert_int_equal(count_kind(M, BFIT_L_BATCHNORM), 53);
    assert_int_equal(count_kind(M, BFIT_L_ADD), 16);
    assert_int_equal(count_kind(M, BFIT_L_LINEAR), 1);
    for (int i = 0; i < M->n; i++)
        if (M->nodes[i].l->cfg.kind == BFIT_L_CONV)
            assert_int_equal(M->nodes[i].l->cfg.bias, 0);
    stem_pool = find_kind(M, BFIT_L_MAXPOOL);
    assert_shape(M->nodes[stem_pool].l->out, 64, 56, 56);
    gap = find_kind(M, BFIT_L_GAP);
    assert_shape(M->nodes[gap].l->in[0], 2048, 7, 7);
    assert_shape(M->nodes[gap].l->out, 2048, 1, 1);
    assert_int_equal(M->nclasses, 1000);
    /* v1.5: the first block of layer2 strides on its 3x3 conv, not the 1x1 */
    {
        int k3 = 0, k1 = 0;
        for (int i = 0; i < M->n; i++) {
            bfit_layer *l = M->nodes[i].l;
            if (l->cfg.kind != BFIT_L_CONV || l->in[0].h != 56 || l->out.h != 28)
                continue;
            assert_int_equal(l->cfg.sh, 2);
            /* the block's 3x3 (128 -> 128), or the downsample 1x1 (256 -> 512) */
            if (l->cfg.kh == 3 && l->in[0].c == 128 && l->out.c == 128)
                k3++;
            else if (l->cfg.kh == 1 && l->in[0].c == 256 && l->out.c == 512)
                k1++;
            else
                fail_msg("a stride-2 conv %dx%d %d -> %d that torchvision v1.5 does not have", l->cfg.kh,
                         l->cfg.kw, l->in[0].c, l->out.c);
        }
        assert_int_equal(k3, 1);
        assert_int_equal(k1, 1);
    }
    bfit_model_free(M);

    M = build("resnet18");
    /* 1 stem + 8 blocks x 2 + 3 downsample convs */
    assert_int_equal(count_kind(M, BFIT_L_CONV), 20);
    assert_int_equal(count_kind(M, BFIT_L_BATCHNORM), 20);
    assert_int_equal(count_kind(M, BFIT_L_ADD), 8);
    gap = find_kind(M, BFIT_L_GAP);
    assert_shape(M->nodes[gap].l->in[0], 512, 7, 7);
    bfit_model_free(M);
}

static void test_vgg16_structure(void **st)
{
    bfit_model *M = build("vgg16");
    int flat;
    (void)st;
    assert_int_equal(count_kind(M, BFIT_L_CONV), 13);
    assert_int_equal(count_kind(M, BFIT_L_MAXPOOL), 5);
    assert_int_equal(count_kind(M, BFIT_L_LINEAR), 3);
    assert_int_equal(count_kind(M, BFIT_L_DROPOUT), 2);
    assert_int_equal(count_kind(M, BFIT_L_RELU), 15);
    assert_int_equal(count_kind(M, BFIT_L_BATCHNORM), 0);
    flat = find_kind(M, BFIT_L_FLATTEN);
    assert_shape(last_out(M, BFIT_L_MAXPOOL, flat), 512, 7, 7);
    assert_shape(M->nodes[flat].l->out, 25088, 1, 1);
    for (int i = 0; i < M->n; i++)
        if (M->nodes[i].l->cfg.kind == BFIT_L_CONV) {
            assert_int_equal(M->nodes[i].l->cfg.bias, 1);
            assert_int_equal(M->nodes[i].l->cfg.kh, 3);
            assert_int_equal(M->nodes[i].l->cfg.ph, 1);
        }
    bfit_model_free(M);
}

static void test_source_load(void **st)
{
    bfit_graph_desc g;
    char path[600];
    FILE *f;
    (void)st;

    /* a preset name */
    assert_int_equal(bfit_model_source_is_file("resnet50"), 0);
    assert_int_equal(bfit_model_source_load("resnet50", 0, &g), BFIT_OK);
    assert_shape(g.input, 3, 224, 224);
    bfit_graph_fini(&g);
    /* a path */
    snprintf(path, sizeof path, "%s/cnn.cfg", models_dir);
    assert_int_equal(bfit_model_source_is_file(path), 1);
    assert_int_equal(bfit_model_source_load(path, 0, &g), BFIT_OK);
    assert_int_equal(g.nnodes, 10);
    bfit_graph_fini(&g);
    /* looks like a file, is not there: a file error, not "unknown preset" */
    assert_int_equal(bfit_model_source_is_file("nope.cfg"), 1);
    assert_int_equal(bfit_model_source_load("nope.cfg", 0, &g), BFIT_EIO);
    assert_non_null(strstr(bfit_errmsg(), "nope.cfg"));
    assert_int_equal(bfit_model_source_load("no/such", 0, &g), BFIT_EIO);
    bfit_graph_fini(&g);
    /* neither: an unknown preset */
    assert_int_equal(bfit_model_source_load("nope", 0, &g), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "resnet18"));
    bfit_graph_fini(&g);
    /* an existing file without '/' or .cfg is a spec file */
    f = fopen("zoo_test_spec", "w");
    assert_non_null(f);
    fputs("input 8\nlinear 3\n", f);
    fclose(f);
    assert_int_equal(bfit_model_source_is_file("zoo_test_spec"), 1);
    assert_int_equal(bfit_model_source_load("zoo_test_spec", 0, &g), BFIT_OK);
    assert_int_equal(g.nnodes, 1);
    bfit_graph_fini(&g);
    unlink("zoo_test_spec");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_param_counts),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_unknown_preset),
        cmocka_unit_test(test_presets_match_model_files),
        cmocka_unit_test(test_resnet_structure),
        cmocka_unit_test(test_vgg16_structure),
        cmocka_unit_test(test_source_load),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
