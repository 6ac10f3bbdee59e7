/* test_spec.c - the model spec parser: good specs become exactly the nodes
 * they say (kinds, options, residual wiring, lines); every kind of bad input
 * is an error at the right file:line:col; random bytes and mutated specs
 * never crash or leak; the shipped models parse and pass the shape check. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "internal.h"

#include "nn/spec.h"
#include "tfiles.h"

static int parse(const char *text, bfit_graph_desc *g)
{
    int rc = bfit_spec_parse(text, strlen(text), "t.cfg", g);
    if (rc != BFIT_OK)
        print_message("unexpected error: %s\n", bfit_errmsg());
    return rc;
}

static void assert_node(const bfit_graph_desc *g, int i, bfit_layer_kind kind, int in0, int in1, int line, int col)
{
    const bfit_node_desc *n;
    assert_true(i < g->nnodes);
    n = &g->nodes[i];
    if (n->cfg.kind != kind || n->in[0] != in0 || n->in[1] != in1 || n->line != line || n->col != col)
        print_message("node %d: kind %s in %d,%d at %d:%d; want %s in %d,%d at %d:%d\n", i,
                      bfit_layer_kind_name(n->cfg.kind), n->in[0], n->in[1], n->line, n->col,
                      bfit_layer_kind_name(kind), in0, in1, line, col);
    assert_int_equal(n->cfg.kind, kind);
    assert_int_equal(n->in[0], in0);
    assert_int_equal(n->in[1], in1);
    assert_int_equal(n->line, line);
    assert_int_equal(n->col, col);
}

static void assert_window(const bfit_layer_cfg *c, int kh, int kw, int sh, int sw, int ph, int pw)
{
    assert_int_equal(c->kh, kh);
    assert_int_equal(c->kw, kw);
    assert_int_equal(c->sh, sh);
    assert_int_equal(c->sw, sw);
    assert_int_equal(c->ph, ph);
    assert_int_equal(c->pw, pw);
}

/* ---- the graph as it runs ------------------------------------------------ */

/* A relu read only by the max pool after it moves behind the pool (graph.c):
 * the pool reads what the relu read, the relu the pool's output, the next
 * layer the relu's, each node keeps its line. Not after a batch norm, not
 * where something else reads the relu, and a pool before its relu stays. */
static void test_pool_before_relu(void **st)
{
    const char *text = "input 3x8x8\n"
                       "conv 16 k=3 pad=1\n" /* 0 */
                       "relu\n"              /* 1 -> maxpool at line 4 */
                       "maxpool 2\n"         /* 2 -> relu at line 3 */
                       "batchnorm\n"         /* 3 */
                       "relu\n"              /* 4: after a batch norm, stays */
                       "maxpool 2\n"         /* 5 */
                       "conv 16 k=1\n"       /* 6 */
                       "relu\n"              /* 7: read by the pool and the add, stays */
                       "residual {\n"
                       "  maxpool 1\n"       /* 8 */
                       "}\n"                 /* 9: the add of 7's output and 8's */
                       "maxpool 1\n"         /* 10: a pool then */
                       "relu\n"              /* 11: its relu, stays */
                       "flatten\n"
                       "linear 4\n";
    bfit_graph_desc g;
    (void)st;
    assert_int_equal(parse(text, &g), BFIT_OK);
    bfit_graph_pool_before_relu(g.nodes, g.nnodes);
    assert_node(&g, 0, BFIT_L_CONV, 0, -1, 2, 1);
    assert_node(&g, 1, BFIT_L_MAXPOOL, 1, -1, 4, 1);
    assert_node(&g, 2, BFIT_L_RELU, 2, -1, 3, 1);
    assert_node(&g, 3, BFIT_L_BATCHNORM, 3, -1, 5, 1);
    assert_node(&g, 4, BFIT_L_RELU, 4, -1, 6, 1);
    assert_node(&g, 5, BFIT_L_MAXPOOL, 5, -1, 7, 1);
    assert_node(&g, 7, BFIT_L_RELU, 7, -1, 9, 1);
    assert_node(&g, 8, BFIT_L_MAXPOOL, 8, -1, 11, 3);
    assert_int_equal(g.nodes[9].cfg.kind, BFIT_L_ADD);
    assert_node(&g, 10, BFIT_L_MAXPOOL, 10, -1, 13, 1);
    assert_node(&g, 11, BFIT_L_RELU, 11, -1, 14, 1);
    assert_int_equal(g.nodes[12].in[0], 12);
    assert_int_equal(bfit_spec_check_shapes(&g), BFIT_OK);
    bfit_graph_fini(&g);
}

/* ---- good specs ---------------------------------------------------------- */

static void test_every_layer_and_option(void **st)
{
    const char *text =
        "# a comment line\n"
        "\n"
        "input 3x32x32   # CxHxW\n"
        "conv 16 k=3 pad=1\n"                          /* 0, line 4 */
        "conv 8 kh=3 kw=5 sh=2 sw=1 ph=1 pw=2 bias=0\n" /* 1 */
        "  batchnorm eps=1e-3 momentum=0.01\n"         /* 2, col 3 */
        "relu\n"                                       /* 3 */
        "maxpool 2\n"                                  /* 4 */
        "avgpool 3 stride=1 pad=1\n"                   /* 5 */
        "maxpool kh=2 kw=3 sh=1\n"                     /* 6 */
        "\tgelu#no space before the comment\n"         /* 7, col 2 */
        "gap\n"                                        /* 8 */
        "dropout\n"                                    /* 9 */
        "dropout 0.3\n"                                /* 10 */
        "dropout p=0.25\n"                             /* 11 */
        "layernorm eps=1e-6\n"                         /* 12 */
        "flatten\n"                                    /* 13 */
        "linear 10 bias=0";                            /* 14, no final newline */
    bfit_graph_desc g;
    const bfit_node_desc *n;
    (void)st;

    assert_int_equal(parse(text, &g), BFIT_OK);
    assert_string_equal(g.source, "t.cfg");
    assert_int_equal(g.input.c, 3);
    assert_int_equal(g.input.h, 32);
    assert_int_equal(g.input.w, 32);
    assert_int_equal(g.input_line, 3);
    assert_int_equal(g.input_col, 1);
    assert_int_equal(g.nnodes, 15);
    for (int i = 0; i < g.nnodes; i++)
        assert_int_equal(g.nodes[i].in[0], i); /* a chain */
    n = g.nodes;
    assert_node(&g, 0, BFIT_L_CONV, 0, -1, 4, 1);
    assert_int_equal(n[0].cfg.units, 16);
    assert_int_equal(n[0].cfg.bias, 1);
    assert_window(&n[0].cfg, 3, 3, 1, 1, 1, 1);
    assert_node(&g, 1, BFIT_L_CONV, 1, -1, 5, 1);
    assert_int_equal(n[1].cfg.units, 8);
    assert_int_equal(n[1].cfg.bias, 0);
    assert_window(&n[1].cfg, 3, 5, 2, 1, 1, 2);
    assert_node(&g, 2, BFIT_L_BATCHNORM, 2, -1, 6, 3);
    assert_float_equal(n[2].cfg.eps, 1e-3f, 1e-9);
    assert_float_equal(n[2].cfg.momentum, 0.01f, 1e-9);
    assert_node(&g, 3, BFIT_L_RELU, 3, -1, 7, 1);
    assert_node(&g, 4, BFIT_L_MAXPOOL, 4, -1, 8, 1);
    assert_window(&n[4].cfg, 2, 2, 2, 2, 0, 0); /* stride defaults to the kernel */
    assert_node(&g, 5, BFIT_L_AVGPOOL, 5, -1, 9, 1);
    assert_window(&n[5].cfg, 3, 3, 1, 1, 1, 1);
    assert_node(&g, 6, BFIT_L_MAXPOOL, 6, -1, 10, 1);
    assert_window(&n[6].cfg, 2, 3, 1, 3, 0, 0);
    assert_node(&g, 7, BFIT_L_GELU, 7, -1, 11, 2);
    assert_node(&g, 8, BFIT_L_GAP, 8, -1, 12, 1);
    assert_node(&g, 9, BFIT_L_DROPOUT, 9, -1, 13, 1);
    assert_float_equal(n[9].cfg.p, 0.5f, 1e-9);
    assert_float_equal(n[10].cfg.p, 0.3f, 1e-9);
    assert_float_equal(n[11].cfg.p, 0.25f, 1e-9);
    assert_node(&g, 12, BFIT_L_LAYERNORM, 12, -1, 16, 1);
    assert_float_equal(n[12].cfg.eps, 1e-6f, 1e-12);
    assert_node(&g, 13, BFIT_L_FLATTEN, 13, -1, 17, 1);
    assert_node(&g, 14, BFIT_L_LINEAR, 14, -1, 18, 1);
    assert_int_equal(n[14].cfg.units, 10);
    assert_int_equal(n[14].cfg.bias, 0);
    bfit_graph_fini(&g);

    assert_int_equal(parse("input 784\nlinear 10\n", &g), BFIT_OK);
    assert_int_equal(g.input.c, 784);
    assert_int_equal(g.input.h, 1);
    assert_int_equal(g.input.w, 1);
    assert_int_equal(g.nodes[0].cfg.bias, 1);
    bfit_graph_fini(&g);
}

/* leakyrelu, elu, softplus, selu and celu: PyTorch's defaults, then each
 * parameter (a negative slope, beta or alpha included: PyTorch allows them) */
static void test_param_activations(void **st)
{
    const char *text = "input 10\n"
                       "leakyrelu\n"                      /* 0 */
                       "leakyrelu slope=-0.25\n"          /* 1 */
                       "elu\n"                            /* 2 */
                       "elu alpha=0.5\n"                  /* 3 */
                       "softplus\n"                       /* 4 */
                       "softplus threshold=5 beta=-2\n"   /* 5 */
                       "selu\n"                           /* 6 */
                       "celu\n"                           /* 7 */
                       "celu alpha=-0.5\n"                /* 8 */
                       "linear 2\n";
    bfit_graph_desc g;
    const bfit_node_desc *n;
    (void)st;

    assert_int_equal(parse(text, &g), BFIT_OK);
    assert_int_equal(g.nnodes, 10);
    n = g.nodes;
    assert_node(&g, 0, BFIT_L_LEAKYRELU, 0, -1, 2, 1);
    assert_true(n[0].cfg.alpha == 0.01f);
    assert_node(&g, 1, BFIT_L_LEAKYRELU, 1, -1, 3, 1);
    assert_true(n[1].cfg.alpha == -0.25f);
    assert_node(&g, 2, BFIT_L_ELU, 2, -1, 4, 1);
    assert_true(n[2].cfg.alpha == 1.0f);
    assert_true(n[3].cfg.alpha == 0.5f);
    assert_node(&g, 4, BFIT_L_SOFTPLUS, 4, -1, 6, 1);
    assert_true(n[4].cfg.beta == 1.0f && n[4].cfg.threshold == 20.0f);
    assert_true(n[5].cfg.beta == -2.0f && n[5].cfg.threshold == 5.0f);
    assert_node(&g, 6, BFIT_L_SELU, 6, -1, 8, 1);
    assert_node(&g, 7, BFIT_L_CELU, 7, -1, 9, 1);
    assert_true(n[7].cfg.alpha == 1.0f);
    assert_true(n[8].cfg.alpha == -0.5f);
    bfit_graph_fini(&g);
}

/* prelu: one slope starting at PyTorch's 0.25, or channels=C (nn.PReLU(C)),
 * its initial slope given by slope=S; the channels are checked against the
 * input when the shapes are (test_shape_check) */
static void test_prelu(void **st)
{
    const char *text = "input 4x6x6\n"
                       "prelu\n"                          /* 0 */
                       "prelu channels=4 slope=-0.1\n"     /* 1 */
                       "flatten\n"                        /* 2 */
                       "linear 5\n"                       /* 3 */
                       "prelu slope=0.5 channels=5\n";     /* 4 */
    bfit_graph_desc g;
    const bfit_node_desc *n;
    (void)st;

    assert_int_equal(parse(text, &g), BFIT_OK);
    assert_int_equal(bfit_spec_check_shapes(&g), BFIT_OK);
    n = g.nodes;
    assert_node(&g, 0, BFIT_L_PRELU, 0, -1, 2, 1);
    assert_true(n[0].cfg.units == 1 && n[0].cfg.alpha == 0.25f);
    assert_node(&g, 1, BFIT_L_PRELU, 1, -1, 3, 1);
    assert_true(n[1].cfg.units == 4 && n[1].cfg.alpha == -0.1f);
    assert_node(&g, 4, BFIT_L_PRELU, 4, -1, 6, 1);
    assert_true(n[4].cfg.units == 5 && n[4].cfg.alpha == 0.5f);
    bfit_graph_fini(&g);
}

/* layerscale: a scale per channel (feature) starting at timm's 1e-5, or at
 * init=V; its count is the input's, taken when the layer is made */
static void test_layerscale(void **st)
{
    const char *text = "input 4x6x6\n"
                       "layerscale\n"          /* 0 */
                       "layerscale init=0.1\n" /* 1 */
                       "flatten\n"             /* 2 */
                       "linear 5\n"            /* 3 */
                       "layerscale init=-2\n"  /* 4 */
                       "layerscale channels=1\n"; /* 5: one scale */
    bfit_graph_desc g;
    const bfit_node_desc *n;
    (void)st;

    assert_int_equal(parse(text, &g), BFIT_OK);
    assert_int_equal(bfit_spec_check_shapes(&g), BFIT_OK);
    n = g.nodes;
    assert_node(&g, 0, BFIT_L_LAYERSCALE, 0, -1, 2, 1);
    assert_true(n[0].cfg.units == 0 && n[0].cfg.alpha == 1e-5f);
    assert_node(&g, 1, BFIT_L_LAYERSCALE, 1, -1, 3, 1);
    assert_true(n[1].cfg.alpha == 0.1f);
    assert_node(&g, 4, BFIT_L_LAYERSCALE, 4, -1, 6, 1);
    assert_true(n[4].cfg.alpha == -2.0f);
    assert_node(&g, 5, BFIT_L_LAYERSCALE, 5, -1, 7, 1);
    assert_true(n[5].cfg.units == 1);
    bfit_graph_fini(&g);
}

/* groupnorm G: G groups (the positional number), eps as the other norms */
static void test_groupnorm(void **st)
{
    const char *text = "input 8x6x6\n"
                       "groupnorm 2\n"          /* 0 */
                       "groupnorm 8 eps=1e-3\n" /* 1 */
                       "flatten\n"              /* 2 */
                       "linear 6\n"             /* 3 */
                       "groupnorm 3\n";         /* 4: a vector's 6 features in 3 groups */
    bfit_graph_desc g;
    const bfit_node_desc *n;
    (void)st;

    assert_int_equal(parse(text, &g), BFIT_OK);
    assert_int_equal(bfit_spec_check_shapes(&g), BFIT_OK);
    n = g.nodes;
    assert_node(&g, 0, BFIT_L_GROUPNORM, 0, -1, 2, 1);
    assert_true(n[0].cfg.units == 2 && n[0].cfg.eps == 1e-5f);
    assert_node(&g, 1, BFIT_L_GROUPNORM, 1, -1, 3, 1);
    assert_true(n[1].cfg.units == 8 && n[1].cfg.eps == 1e-3f);
    assert_node(&g, 4, BFIT_L_GROUPNORM, 4, -1, 6, 1);
    assert_true(n[4].cfg.units == 3);
    bfit_graph_fini(&g);
}

static void test_residual_wiring(void **st)
{
    const char *text =
        "input 8x8x8\n"            /* 1 */
        "conv 8 k=3 pad=1\n"       /* 2: node 0 -> v1 */
        "residual {\n"             /* 3 */
        "  conv 8 k=3 pad=1\n"     /* 4: node 1 (v1) -> v2 */
        "  relu\n"                 /* 5: node 2 -> v3 */
        "}\n"                      /* 6: node 3 = add(v3, v1) -> v4, at 3:1 */
        "residual {\n"             /* 7 */
        "  conv 16 k=1 stride=2\n" /* 8: node 4 (v4) -> v5 */
        "} shortcut {\n"           /* 9 */
        "  conv 16 k=1 stride=2\n" /* 10: node 5 (v4) -> v6 */
        "  batchnorm\n"            /* 11: node 6 -> v7 */
        "}\n"                      /* 12: node 7 = add(v5, v7) -> v8, at 7:1 */
        "  residual {\n"           /* 13, col 3 */
        "    relu\n"               /* 14: node 8 (v8) -> v9 */
        "    residual {\n"         /* 15, col 5 */
        "      gelu\n"             /* 16: node 9 (v9) -> v10 */
        "    }\n"                  /* 17 */
        "  }\n"                    /* 18: node 10 = add(v10, v9) -> v11 */
        "  # the shortcut may open on the line after the body's }\n"
        "  shortcut {\n"           /* 20 */
        "    relu\n"               /* 21: node 11 (v8) -> v12 */
        "  }\n"                    /* 22: node 12 = add(v11, v12) -> v13, at 13:3 */
        "residual {\n"             /* 23 */
        "  relu\n"                 /* 24: node 13 (v13) -> v14 */
        "}\n"                      /* 25: EOF ends it: node 14 = add(v14, v13) at 23:1 */
        ;
    bfit_graph_desc g;
    (void)st;

    assert_int_equal(parse(text, &g), BFIT_OK);
    assert_int_equal(g.nnodes, 15);
    assert_node(&g, 0, BFIT_L_CONV, 0, -1, 2, 1);
    assert_node(&g, 1, BFIT_L_CONV, 1, -1, 4, 3);
    assert_node(&g, 2, BFIT_L_RELU, 2, -1, 5, 3);
    assert_node(&g, 3, BFIT_L_ADD, 3, 1, 3, 1);
    assert_node(&g, 4, BFIT_L_CONV, 4, -1, 8, 3);
    assert_node(&g, 5, BFIT_L_CONV, 4, -1, 10, 3);
    assert_int_equal(g.nodes[5].cfg.sh, 2);
    assert_node(&g, 6, BFIT_L_BATCHNORM, 6, -1, 11, 3);
    assert_node(&g, 7, BFIT_L_ADD, 5, 7, 7, 1);
    assert_node(&g, 8, BFIT_L_RELU, 8, -1, 14, 5);
    assert_node(&g, 9, BFIT_L_GELU, 9, -1, 16, 7);
    assert_node(&g, 10, BFIT_L_ADD, 10, 9, 15, 5);
    assert_node(&g, 11, BFIT_L_RELU, 8, -1, 21, 5);
    assert_node(&g, 12, BFIT_L_ADD, 11, 12, 13, 3);
    assert_node(&g, 13, BFIT_L_RELU, 13, -1, 24, 3);
    assert_node(&g, 14, BFIT_L_ADD, 14, 13, 23, 1);
    bfit_graph_fini(&g);
}

static void test_text_details(void **st)
{
    /* CRLF, a byte-order mark, tabs, UTF-8 in comments, words glued to braces */
    const char *text = "\xEF\xBB\xBFinput 784\r\n# caf\xC3\xA9 \xE2\x9C\x93\r\nresidual{\r\n\tlinear 784\r\n}\r\n";
    /* the text need not end in NUL: the parser must stop at len */
    const char *two = "input 784\nlinear 10\nGARBAGE";
    bfit_graph_desc g;
    (void)st;

    assert_int_equal(parse(text, &g), BFIT_OK);
    assert_int_equal(g.nnodes, 2);
    assert_node(&g, 0, BFIT_L_LINEAR, 0, -1, 4, 2);
    assert_node(&g, 1, BFIT_L_ADD, 1, 0, 3, 1);
    bfit_graph_fini(&g);
    assert_int_equal(bfit_spec_parse(two, strlen(two) - 7, "t.cfg", &g), BFIT_OK);
    assert_int_equal(g.nnodes, 1);
    bfit_graph_fini(&g);
    /* no source name still gives messages a prefix */
    assert_int_equal(bfit_spec_parse("relu", 4, NULL, &g), BFIT_EFORMAT);
    assert_string_equal(bfit_errmsg(),
                        "<spec>:1:1: a spec begins with `input CxHxW` or `input F` (e.g. `input 1x28x28`), not `relu`");
    bfit_graph_fini(&g); /* safe after a failure */
}

/* ---- bad specs ----------------------------------------------------------- */

typedef struct bad {
    const char *text;
    size_t len;        /* 0: strlen(text) */
    const char *where; /* the message's prefix */
    const char *words[3];
} bad;

static char long_line[2100];

static const bad bads[] = {
    {"input 784\nlineer 10\n", 0, "t.cfg:2:1: ", {"unknown layer `lineer`", "did you mean `linear`?"}},
    {"input 784\nLinear 10\n", 0, "t.cfg:2:1: ", {"unknown layer `Linear`", "did you mean `linear`?"}},
    {"input 784\nfrobnicate\n", 0, "t.cfg:2:1: ", {"unknown layer `frobnicate`", "known: linear, conv"}},
    {"input 784\nadd\n", 0, "t.cfg:2:1: ", {"`add` is not written", "residual"}},
    {"input 784\nsoftmax\n", 0, "t.cfg:2:1: ", {"leave `softmax` out"}},
    {"input 1x28x28\nconv 3x k=3\n", 0, "t.cfg:2:6: ", {"bad number `3x`", "conv's output channels"}},
    {"input 784\nlinear -4\n", 0, "t.cfg:2:8: ", {"at least 1", "`-4`"}},
    {"input 784\nlinear +4\n", 0, "t.cfg:2:8: ", {"bad number `+4`"}},
    {"input 784\nlinear 0\n", 0, "t.cfg:2:8: ", {"linear's output features must be at least 1, got `0`"}},
    {"input 784\nlinear 99999999999\n", 0, "t.cfg:2:8: ", {"`99999999999` is too large", "at most 16777216"}},
    {"input 784\nlinear 2147483648\n", 0, "t.cfg:2:8: ", {"too large"}},
    {"input 1x28x28\nconv k=3\n", 0, "t.cfg:2:1: ", {"conv needs its number of output channels"}},
    {"input 784\nlinear\n", 0, "t.cfg:2:1: ", {"linear needs its number of output features", "linear N"}},
    {"input 1x28x28\nconv 8\n", 0, "t.cfg:2:1: ", {"conv needs a kernel size", "k=K"}},
    {"input 1x28x28\nmaxpool\n", 0, "t.cfg:2:1: ", {"maxpool needs a kernel size", "maxpool K"}},
    {"input 1x28x28\nconv 8 kh=3\n", 0, "t.cfg:2:8: ", {"`kh=3` needs `kw=` too"}},
    {"input 1x28x28\nconv 8 k=3 strid=2\n", 0, "t.cfg:2:12: ", {"conv has no option `strid`", "did you mean `stride`?"}},
    {"input 784\nlinear 10 k=3\n", 0, "t.cfg:2:11: ", {"linear has no option `k`", "options: bias"}},
    {"input 784\nrelu x=1\n", 0, "t.cfg:2:6: ", {"relu takes no options"}},
    {"input 1x28x28\nconv 8 k=3 stride=0\n", 0, "t.cfg:2:19: ", {"stride must be at least 1, got `0`"}},
    {"input 1x28x28\nconv 8 k=3 pad=-1\n", 0, "t.cfg:2:16: ", {"pad must be at least 0"}},
    {"input 784\nlinear 10 bias=2\n", 0, "t.cfg:2:16: ", {"bias must be 0 or 1, got `2`"}},
    {"input 784\nlinear 10 std=0\n", 0, "t.cfg:2:15: ", {"std (the weights' initial spread) must be in (0, 1]"}},
    {"input 784\nlinear 10 std=x\n", 0, "t.cfg:2:15: ", {"bad number `x` for std"}},
    {"input 1x28x28\nconv 8 k=3 std=0.02\n", 0, "t.cfg:2:12: ", {"conv has no option `std`"}},
    {"input 1x28x28\nconv 8 k=\n", 0, "t.cfg:2:8: ", {"option `k` needs a value"}},
    {"input 1x28x28\nconv 8 =3\n", 0, "t.cfg:2:8: ", {"missing option name"}},
    {"input 784\ndropout 1.5\n", 0, "t.cfg:2:9: ", {"dropout's p must be in [0, 1), got `1.5`"}},
    {"input 784\ndropout p=nan\n", 0, "t.cfg:2:11: ", {"bad number `nan`"}},
    {"input 784\nbatchnorm eps=abc\n", 0, "t.cfg:2:15: ", {"bad number `abc` for eps"}},
    {"input 784\nbatchnorm eps=0\n", 0, "t.cfg:2:15: ", {"eps must be in (0, 1]"}},
    {"input 784\nbatchnorm momentum=1e999\n", 0, "t.cfg:2:20: ", {"bad number `1e999`"}},
    {"input 1x28x28\nconv 8 k=3 kh=5 kw=5\n", 0, "t.cfg:2:12: ",
     {"duplicate option", "`kh=5` sets the kernel height, already set by `k=3` at column 8"}},
    {"input 1x28x28\nmaxpool 2 k=3\n", 0, "t.cfg:2:11: ", {"duplicate option", "already set by `2`"}},
    {"input 784\ndropout 0.5 p=0.3\n", 0, "t.cfg:2:13: ", {"duplicate option"}},
    {"input 784\nrelu 3\n", 0, "t.cfg:2:6: ", {"unexpected `3`", "relu takes no arguments"}},
    {"input 784\nleakyrelu 0.2\n", 0, "t.cfg:2:11: ", {"unexpected `0.2`", "leakyrelu takes only options"}},
    {"input 784\nleakyrelu alpha=0.2\n", 0, "t.cfg:2:11: ", {"leakyrelu has no option `alpha`", "options: slope"}},
    {"input 784\nleakyrelu slope=1e31\n", 0, "t.cfg:2:17: ", {"leakyrelu's slope must be in (-1e+30, 1e+30)"}},
    {"input 784\nelu alpha=inf\n", 0, "t.cfg:2:11: ", {"bad number `inf` for elu's alpha"}},
    {"input 784\nelu slope=1\n", 0, "t.cfg:2:5: ", {"elu has no option `slope`", "options: alpha"}},
    {"input 784\nsoftplus beta=0\n", 0, "t.cfg:2:15: ", {"softplus's beta must not be 0"}},
    {"input 784\nsoftplus beta=-0\n", 0, "t.cfg:2:15: ", {"softplus's beta must not be 0"}},
    {"input 784\nsoftplus treshold=5\n", 0, "t.cfg:2:10: ",
     {"softplus has no option `treshold`", "did you mean `threshold`?"}},
    {"input 784\nsoftplus beta=2 beta=3\n", 0, "t.cfg:2:17: ", {"duplicate option", "`beta=3` sets beta"}},
    {"input 1x8x8\nmaxpool 2 ceil=2\n", 0, "t.cfg:2:16: ", {"ceil must be 0 or 1, got `2`"}},
    {"input 784\ngelu tanh=2\n", 0, "t.cfg:2:11: ", {"tanh must be 0 or 1, got `2`"}},
    {"input 784\nlayernorm bias=2\n", 0, "t.cfg:2:16: ", {"bias must be 0 or 1, got `2`"}},
    {"input 784\nsilu tanh=1\n", 0, "t.cfg:2:6: ", {"silu takes no options, got `tanh=1`"}},
    {"input 1x8x8\navgpool 2 ceil=1\n", 0, "t.cfg:2:11: ", {"avgpool has no option `ceil`"}},
    {"input 784\nselu alpha=1\n", 0, "t.cfg:2:6: ", {"selu takes no options, got `alpha=1`"}},
    {"input 784\ncelu alpha=0\n", 0, "t.cfg:2:12: ", {"celu's alpha must not be 0 (celu divides by it), got `0`"}},
    {"input 784\ncelu alpha=-0.0\n", 0, "t.cfg:2:12: ", {"celu's alpha must not be 0"}},
    {"input 784\ncelu alpha=1e31\n", 0, "t.cfg:2:12: ", {"celu's alpha must be in (-1e+30, 1e+30)"}},
    {"input 784\ncelu alpha=nan\n", 0, "t.cfg:2:12: ", {"bad number `nan` for celu's alpha"}},
    {"input 784\nprelu 3\n", 0, "t.cfg:2:7: ", {"unexpected `3`", "prelu takes only options"}},
    {"input 784\nprelu channels=0\n", 0, "t.cfg:2:16: ", {"prelu's channels (its slopes) must be at least 1"}},
    {"input 784\nprelu slope=inf\n", 0, "t.cfg:2:13: ", {"bad number `inf` for prelu's initial slope"}},
    {"input 784\nprelu alpha=0.1\n", 0, "t.cfg:2:7: ", {"prelu has no option `alpha`", "options: slope, channels"}},
    {"input 784\nprelu channels=2 channels=3\n", 0, "t.cfg:2:18: ", {"duplicate option", "sets the slopes"}},
    {"input 784\nlayerscale 3\n", 0, "t.cfg:2:12: ", {"unexpected `3`", "layerscale takes only options"}},
    {"input 784\nlayerscale init=nan\n", 0, "t.cfg:2:17: ", {"bad number `nan` for layerscale's initial scale"}},
    {"input 784\nlayerscale slope=1\n", 0, "t.cfg:2:12: ", {"layerscale has no option `slope`", "options: channels, init"}},
    {"input 784\nlayerscale init=1 init=2\n", 0, "t.cfg:2:19: ", {"duplicate option"}},
    {"input 784\ngroupnorm\n", 0, "t.cfg:2:1: ", {"groupnorm needs its number of groups", "groupnorm G [eps=E]"}},
    {"input 784\ngroupnorm 0\n", 0, "t.cfg:2:11: ", {"groupnorm's groups must be at least 1"}},
    {"input 784\ngroupnorm 2 eps=0\n", 0, "t.cfg:2:17: ", {"eps must be in (0, 1], got `0`"}},
    {"input 784\nbatchnorm 3\n", 0, "t.cfg:2:11: ", {"batchnorm takes only options"}},
    {"input 784\nlinear 10 20\n", 0, "t.cfg:2:11: ", {"unexpected `20`", "linear N"}},
    {"relu\n", 0, "t.cfg:1:1: ", {"begins with `input"}},
    {"# comment\n\n  linear 10\ninput 784\n", 0, "t.cfg:3:3: ", {"begins with `input", "not `linear`"}},
    {"input 784\nrelu\ninput 784\n", 0, "t.cfg:3:1: ", {"`input` given again (first at line 1)"}},
    {"input\n", 0, "t.cfg:1:1: ", {"`input` needs a shape"}},
    {"input 28x28\n", 0, "t.cfg:1:7: ", {"2 dimensions", "1x28x28"}},
    {"input 1x28x28x3\n", 0, "t.cfg:1:7: ", {"more than 3 dimensions"}},
    {"input 1x0x28\n", 0, "t.cfg:1:9: ", {"an input dimension must be at least 1, got `0`"}},
    {"input 1xx28\n", 0, "t.cfg:1:9: ", {"expected a number"}},
    {"input 4096x4096x4096\n", 0, "t.cfg:1:7: ", {"values per sample"}},
    /* the fuzzer's: three dimensions near INT_MAX, whose product passes 2^63 */
    {"input 16777216x16777216x16777216\n", 0, "t.cfg:1:7: ", {"values per sample (at most 2147483647)"}},
    {"input 784 extra\n", 0, "t.cfg:1:11: ", {"unexpected `extra`"}},
    {"input 784\n{\n", 0, "t.cfg:2:1: ", {"`{` opens a block only after `residual` or `shortcut`"}},
    {"input 784\nrelu {\n", 0, "t.cfg:2:6: ", {"`{` opens a block only after"}},
    {"input 784\nrelu }\n", 0, "t.cfg:2:6: ", {"`}` closes a block on a line of its own"}},
    {"input 784\nresidual\n", 0, "t.cfg:2:1: ", {"write `residual {`"}},
    {"input 784\nresidual { relu\n", 0, "t.cfg:2:12: ", {"unexpected `relu` after `{`", "own line"}},
    {"input 784\nresidual {\n  relu\n", 0, "t.cfg:2:1: ", {"`residual {` is never closed"}},
    {"input 784\nresidual {\n  residual {\n    relu\n  }\n", 0, "t.cfg:2:1: ", {"`residual {` is never closed"}},
    {"input 784\nresidual {\n  relu\n} shortcut {\n  relu\n", 0, "t.cfg:4:3: ", {"`shortcut {` is never closed"}},
    {"input 784\nrelu\n}\n", 0, "t.cfg:3:1: ", {"`}` without an open block"}},
    {"input 784\nresidual {\n}\n", 0, "t.cfg:3:1: ", {"empty residual body"}},
    {"input 784\nresidual {\nrelu\n} shortcut {\n}\n", 0, "t.cfg:5:1: ", {"empty shortcut"}},
    {"input 784\nshortcut {\n", 0, "t.cfg:2:1: ", {"`shortcut` must follow the `}`"}},
    {"input 784\nresidual {\nrelu\n}\nrelu\nshortcut {\n", 0, "t.cfg:6:1: ", {"`shortcut` must follow"}},
    {"input 784\nresidual {\nrelu\n} relu\n", 0, "t.cfg:4:3: ", {"unexpected `relu` after `}`"}},
    {"input 784\nresidual {\nrelu\n} shortcut\n", 0, "t.cfg:4:3: ", {"write `shortcut {`"}},
    {"input 784\nresidual {\nrelu\n} shortcut {\nrelu\n} shortcut {\n", 0, "t.cfg:6:3: ", {"unexpected `shortcut`"}},
    {"", 0, "t.cfg:1:1: ", {"empty spec"}},
    {"# nothing but comments\n\n   \n", 0, "t.cfg:1:1: ", {"empty spec"}},
    {"\n  input 784 # and nothing else\n", 0, "t.cfg:2:3: ", {"no layers after `input`"}},
    {"input 784\nre\0lu\n", 16, "t.cfg:2:3: ", {"NUL byte", "binary"}},
    {"input 784\nrelu # caf\xE9\n", 0, "t.cfg:2:11: ", {"byte 0xE9 is not valid UTF-8"}},
    {"input 784\nrelu # \xC0\xAF overlong\n", 0, "t.cfg:2:8: ", {"byte 0xC0 is not valid UTF-8"}},
    {"input 784\nrelu # \xED\xA0\x80 surrogate\n", 0, "t.cfg:2:8: ", {"byte 0xED is not valid UTF-8"}},
    {"input 784\nrelu # \xE2\x9C\n", 0, "t.cfg:2:8: ", {"not valid UTF-8"}},
    {"input 784\nrelu # \xC3\xA9\x01\n", 0, "t.cfg:2:9: ", {"control character 0x01"}}, /* columns count characters */
    {"input 784\n\x1B[31mrelu\n", 0, "t.cfg:2:1: ", {"control character 0x1B", "plain text"}},
    {"input 784\rrelu\n", 0, "t.cfg:1:10: ", {"control character 0x0D"}},
    {"input 784\nrelu # \xC2\x85\n", 0, "t.cfg:2:8: ", {"control character U+0085"}},
    {long_line, 0, "t.cfg:2:1025: ", {"line longer than 1024 bytes"}},
    {"input 784\nlinear 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1\n", 0, "t.cfg:2:70: ",
     {"more than 32 words"}},
};

static void test_bad_specs(void **st)
{
    (void)st;
    memset(long_line, ' ', sizeof long_line - 1);
    memcpy(long_line, "input 784\nrelu", 14);
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        const bad *b = &bads[i];
        size_t len = b->len ? b->len : strlen(b->text);
        bfit_graph_desc g;
        int rc = bfit_spec_parse(b->text, len, "t.cfg", &g);
        const char *m = bfit_errmsg();
        int ok = rc == BFIT_EFORMAT && strncmp(m, b->where, strlen(b->where)) == 0;
        for (int w = 0; w < 3 && b->words[w]; w++)
            ok = ok && strstr(m, b->words[w]) != NULL;
        if (!ok)
            print_message("case %zu: rc %d, message \"%s\"; want %s... with \"%s\"\n", i, rc, m, b->where,
                          b->words[0]);
        assert_true(ok);
        assert_int_equal(g.nnodes, 0);
        assert_null(g.nodes);
        bfit_graph_fini(&g);
    }
}

static void test_nesting_limit(void **st)
{
    char text[4096];
    size_t n = 0;
    bfit_graph_desc g;
    (void)st;
    n += (size_t)snprintf(text + n, sizeof text - n, "input 8\n");
    for (int i = 0; i < BFIT_SPEC_MAXDEPTH; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "residual {\n");
    n += (size_t)snprintf(text + n, sizeof text - n, "relu\n");
    for (int i = 0; i < BFIT_SPEC_MAXDEPTH; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "}\n");
    assert_int_equal(parse(text, &g), BFIT_OK);
    assert_int_equal(g.nnodes, 1 + BFIT_SPEC_MAXDEPTH);
    bfit_graph_fini(&g);
    n = (size_t)snprintf(text, sizeof text, "input 8\n");
    for (int i = 0; i <= BFIT_SPEC_MAXDEPTH; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "residual {\n");
    assert_int_equal(bfit_spec_parse(text, n, "t.cfg", &g), BFIT_EFORMAT);
    assert_non_null(strstr(bfit_errmsg(), "t.cfg:66:1: blocks nested more than 64 deep"));
}

static void test_size_limits(void **st)
{
    size_t n = BFIT_SPEC_MAXBYTES + 1;
    char *big = malloc(n);
    bfit_graph_desc g;
    (void)st;
    assert_non_null(big);
    /* one layer too many */
    n = (size_t)snprintf(big, 16, "input 8\n");
    for (int i = 0; i <= BFIT_SPEC_MAXNODES; i++) {
        memcpy(big + n, "relu\n", 5);
        n += 5;
    }
    assert_int_equal(bfit_spec_parse(big, n, "t.cfg", &g), BFIT_EFORMAT);
    assert_string_equal(bfit_errmsg(), "t.cfg:100002:1: too many layers (at most 100000)");
    /* a file too large to be a spec is refused before it is read through */
    memset(big, '#', BFIT_SPEC_MAXBYTES + 1);
    assert_int_equal(bfit_spec_parse(big, BFIT_SPEC_MAXBYTES + 1, "t.cfg", &g), BFIT_EFORMAT);
    assert_non_null(strstr(bfit_errmsg(), "t.cfg:1:1: 16777217 bytes is too large for a model spec"));
    free(big);
}

/* ---- shapes -------------------------------------------------------------- */

static void expect_shape_error(const char *text, const char *where, const char *w1, const char *w2)
{
    bfit_graph_desc g;
    const char *m;
    assert_int_equal(parse(text, &g), BFIT_OK);
    assert_int_equal(bfit_spec_check_shapes(&g), BFIT_EFORMAT);
    m = bfit_errmsg();
    if (strncmp(m, where, strlen(where)) || !strstr(m, w1) || (w2 && !strstr(m, w2)))
        print_message("message \"%s\"; want %s... with \"%s\", \"%s\"\n", m, where, w1, w2 ? w2 : "");
    assert_int_equal(strncmp(m, where, strlen(where)), 0);
    assert_non_null(strstr(m, w1));
    if (w2)
        assert_non_null(strstr(m, w2));
    bfit_graph_fini(&g);
}

static void test_shape_check(void **st)
{
    bfit_graph_desc g;
    int rc;
    (void)st;
    assert_int_equal(parse("input 3x8x8\nconv 4 k=3 pad=1\nresidual {\nconv 4 k=3 pad=1\nrelu\n}\n"
                           "residual {\nconv 8 k=3 stride=2 pad=1\n} shortcut {\nconv 8 k=1 stride=2\nbatchnorm\n}\n"
                           "gap\nlinear 10\n",
                           &g),
                     BFIT_OK);
    rc = bfit_spec_check_shapes(&g);
    if (rc != BFIT_OK)
        print_message("%s\n", bfit_errmsg());
    assert_int_equal(rc, BFIT_OK);
    bfit_graph_fini(&g);

    expect_shape_error("input 1x28x28\nconv 32 k=3 pad=1\nmaxpool 2\nmaxpool 2\nlinear 10\n", "t.cfg:5:1: ",
                       "linear 10", "32x7x7");
    expect_shape_error("input 1x28x28\nconv 32 k=3 pad=1\nmaxpool 2\nmaxpool 2\nlinear 10\n", "t.cfg:5:1: ",
                       "flatten", NULL);
    /* identity shortcut: say both shapes and how to project */
    expect_shape_error("input 1x28x28\nconv 8 k=3 pad=1\n  residual {\n  conv 16 k=3 stride=2 pad=1\n}\n"
                       "flatten\nlinear 10\n",
                       "t.cfg:3:3: ", "body gives 16x14x14 but its input is 8x28x28",
                       "`} shortcut {`, `conv 16 k=1 stride=2`");
    /* an explicit shortcut that does not match */
    expect_shape_error("input 1x28x28\nconv 8 k=3 pad=1\nresidual {\nconv 16 k=3 stride=2 pad=1\n} shortcut {\n"
                       "conv 16 k=1\n}\nflatten\nlinear 10\n",
                       "t.cfg:3:1: ", "body gives 16x14x14 but its shortcut gives 16x28x28", NULL);
    expect_shape_error("input 784\nresidual {\nlinear 10\n}\n", "t.cfg:2:1: ", "body gives 10 but its input is 784",
                       "`linear 10`");
    /* a sequence's projection is a linear per position, no batch norm */
    expect_shape_error("input tokens=32\nembed 32 vocab=256\nresidual {\nlayernorm\nlinear 64\n}\nlinear 256\n",
                       "t.cfg:3:1: ", "body gives 32x64 but its input is 32x32", "`linear 64`, `}`");
    /* prelu's slopes: one, or one per channel of the input */
    expect_shape_error("input 3x8x8\nprelu channels=4\nflatten\nlinear 10\n", "t.cfg:2:1: ",
                       "channels=4 does not fit the input 3x8x8", NULL);
    /* groupnorm's groups divide the channels */
    expect_shape_error("input 8x4x4\ngroupnorm 3\nflatten\nlinear 10\n", "t.cfg:2:1: ",
                       "3 groups do not fit the input 8x4x4", NULL);
    /* the loss needs class scores */
    expect_shape_error("input 1x28x28\nconv 8 k=3\n", "t.cfg:2:1: ", "the last layer gives 8x26x26", "flatten");
    /* a window larger than the input: the layer or the guard says so */
    expect_shape_error("input 1x4x4\nconv 8 k=5\nflatten\nlinear 10\n", "t.cfg:2:1: ", "conv 8 k=5", "1x4x4");
    expect_shape_error("input 1x4x4\nmaxpool 2 stride=3 pad=1\nmaxpool 3 stride=1\nflatten\nlinear 10\n",
                       "t.cfg:3:1: ", "maxpool 3 stride=1", "1x2x2");
    /* a ceil_mode max pool says so: its output size is not the floor one */
    expect_shape_error("input 1x4x4\nmaxpool 3 stride=2 pad=2 ceil=1\nflatten\nlinear 10\n", "t.cfg:2:1: ",
                       "maxpool 3 stride=2 pad=2 ceil=1 gets 1x4x4", NULL);
}

/* gelu's tanh=1 is PyTorch's approximate='tanh'; the default, the exact form. */
static void test_gelu_tanh(void **st)
{
    bfit_graph_desc g;
    (void)st;
    assert_int_equal(parse("input 784\ngelu tanh=1\ngelu\ngelu tanh=0\nlinear 2\n", &g), BFIT_OK);
    assert_int_equal(g.nodes[0].cfg.tanh, 1);
    assert_int_equal(g.nodes[1].cfg.tanh, 0);
    assert_int_equal(g.nodes[2].cfg.tanh, 0);
    bfit_graph_fini(&g);
}

/* layernorm bias=0: a scale alone (nanoGPT's LayerNorm(bias=False)), one parameter where the default has two. */
static void test_layernorm_nobias(void **st)
{
    bfit_graph_desc g;
    bfit_model *M;
    (void)st;
    assert_int_equal(parse("input 6\nlayernorm bias=0\nlayernorm\nlinear 2\n", &g), BFIT_OK);
    assert_int_equal(g.nodes[0].cfg.bias, 0);
    assert_int_equal(g.nodes[1].cfg.bias, 1);
    assert_int_equal(bfit_model_new(&g, NULL, NULL, &M), BFIT_OK);
    assert_int_equal(M->nodes[0].l->nparams, 1);
    assert_int_equal(M->nodes[1].l->nparams, 2);
    assert_int_equal(bfit_model_param_count(M), 6 + 12 + 14);
    bfit_model_free(M);
    bfit_graph_fini(&g);
}

/* rmsnorm: LLaMA's RMSNorm, eps 1e-6 unless given, a scale alone; it takes no bias=. offset=1: Gemma's,
 * the scale 1 + w, w starting at 0; other values and other layers refused. */
static void test_rmsnorm(void **st)
{
    bfit_graph_desc g;
    bfit_model *M;
    (void)st;
    assert_int_equal(parse("input 6\nrmsnorm\nrmsnorm eps=1e-5\nlinear 2\n", &g), BFIT_OK);
    assert_int_equal(g.nodes[0].cfg.kind, BFIT_L_RMSNORM);
    assert_true(g.nodes[0].cfg.eps == 1e-6f);
    assert_true(g.nodes[1].cfg.eps == 1e-5f);
    assert_int_equal(bfit_model_new(&g, NULL, NULL, &M), BFIT_OK);
    assert_int_equal(M->nodes[0].l->nparams, 1);
    assert_int_equal(bfit_model_param_count(M), 6 + 6 + 14);
    bfit_model_free(M);
    bfit_graph_fini(&g);
    assert_int_equal(parse("input 6\nrmsnorm bias=0\nlinear 2\n", &g), BFIT_EFORMAT);
    assert_non_null(strstr(bfit_errmsg(), "t.cfg:2:9: rmsnorm has no option `bias` (options: eps, offset)"));
    assert_int_equal(parse("input 6\nrmsnorm eps=0\nlinear 2\n", &g), BFIT_EFORMAT);
    assert_int_equal(parse("input 6\nrmsnorm offset=1\nlinear 2\n", &g), BFIT_OK);
    assert_int_equal(g.nodes[0].cfg.offset, 1);
    assert_int_equal(bfit_model_new(&g, NULL, NULL, &M), BFIT_OK);
    {
        float w[6] = {-1, -1, -1, -1, -1, -1}, *const host[] = {w};
        bfit_layer *l = M->nodes[0].l;
        assert_int_equal(bfit_model_param_count(M), 6 + 14);
        l->vt->init_params(l, 1, host);
        for (int i = 0; i < 6; i++)
            assert_true(w[i] == 0.0f); /* 1 + 0: a scale of 1 */
    }
    bfit_model_free(M);
    bfit_graph_fini(&g);
    assert_int_equal(parse("input 6\nrmsnorm offset=2\nlinear 2\n", &g), BFIT_EFORMAT);
    assert_non_null(strstr(bfit_errmsg(), "t.cfg:2:16: offset must be 0 or 1, got `2`"));
    assert_int_equal(parse("input 6\nlayernorm offset=1\nlinear 2\n", &g), BFIT_EFORMAT);
    assert_non_null(strstr(bfit_errmsg(), "layernorm has no option `offset`"));
}

/* attention's p is the dropout on its weights: none unless given (a
 * dropout layer's default stays 0.5), and a probability below 1. */
static void test_attention_dropout(void **st)
{
    bfit_graph_desc g;
    (void)st;
    assert_int_equal(parse("input tokens=8\nembed 6 vocab=3\nlinear 18\nattention 2 p=0.1\nlinear 18\n"
                           "attention 2\ndropout\nlinear 3\n", &g), BFIT_OK);
    assert_int_equal(g.nodes[2].cfg.kind, BFIT_L_ATTENTION);
    assert_true(g.nodes[2].cfg.p == 0.1f);
    assert_true(g.nodes[4].cfg.p == 0.0f);
    assert_true(g.nodes[5].cfg.p == 0.5f);
    bfit_graph_fini(&g);
    assert_int_equal(parse("input tokens=8\nembed 6 vocab=3\nlinear 18\nattention 2 p=1\n", &g), BFIT_EFORMAT);
    assert_non_null(strstr(bfit_errmsg(), "t.cfg:4:15: attention's dropout p must be in [0, 1), got `1`"));
}

/* maxpool's ceil=1 is PyTorch's ceil_mode (an ONNX MaxPool's ceil_mode=1):
 * 5x5 by 3/2 gives 3x3 (floor: 2x2); a pool from an import, where no
 * spec line set it, is described with it too. */
static void test_pool_ceil(void **st)
{
    bfit_graph_desc g;
    (void)st;
    assert_int_equal(parse("input 1x5x5\nmaxpool 3 stride=2 ceil=1\nmaxpool 3 stride=2 ceil=0\nflatten\n"
                           "linear 2\n",
                           &g),
                     BFIT_OK);
    assert_int_equal(g.nodes[0].cfg.ceil, 1);
    assert_int_equal(g.nodes[1].cfg.ceil, 0);
    assert_int_equal(bfit_spec_check_shapes(&g), BFIT_EFORMAT); /* 3x3 by the floor 3/2 pool: 1x1, then */
    bfit_graph_fini(&g);
    assert_int_equal(parse("input 1x5x5\nmaxpool 3 stride=2 ceil=1\nflatten\nlinear 2\n", &g), BFIT_OK);
    assert_int_equal(bfit_spec_check_shapes(&g), BFIT_OK);
    bfit_graph_fini(&g);
    assert_int_equal(parse("input 1x4x4\nmaxpool 3 stride=2 pad=2\nflatten\nlinear 10\n", &g), BFIT_OK);
    g.nodes[0].line = 0; /* as an ONNX import makes it */
    g.nodes[0].cfg.ceil = 1;
    assert_int_equal(bfit_spec_check_shapes(&g), BFIT_EFORMAT);
    if (!strstr(bfit_errmsg(), "node 0: maxpool 3 stride=2 pad=2 ceil=1 gets 1x4x4"))
        fail_msg("got: %s", bfit_errmsg());
    bfit_graph_fini(&g);
}

/* ---- files --------------------------------------------------------------- */

static void model_path(char *buf, size_t len, const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s", name);
    src_path(buf, len, rel);
}

static void test_model_files(void **st)
{
    char path[4096];
    bfit_graph_desc g;
    static const bfit_layer_kind mlp[] = {BFIT_L_FLATTEN, BFIT_L_LINEAR, BFIT_L_RELU,
                                          BFIT_L_LINEAR,  BFIT_L_RELU,   BFIT_L_LINEAR};
    static const bfit_layer_kind cnn[] = {BFIT_L_CONV,    BFIT_L_RELU,   BFIT_L_MAXPOOL, BFIT_L_CONV,
                                          BFIT_L_RELU,    BFIT_L_MAXPOOL, BFIT_L_FLATTEN, BFIT_L_LINEAR,
                                          BFIT_L_RELU,    BFIT_L_LINEAR};
    int rc;
    (void)st;

    model_path(path, sizeof path, "mlp.cfg");
    rc = bfit_spec_parse_file(path, &g);
    if (rc != BFIT_OK)
        print_message("%s\n", bfit_errmsg());
    assert_int_equal(rc, BFIT_OK);
    assert_int_equal(g.nnodes, 6);
    for (int i = 0; i < 6; i++)
        assert_int_equal(g.nodes[i].cfg.kind, mlp[i]);
    assert_int_equal(g.nodes[1].cfg.units, 1024);
    assert_int_equal(g.nodes[3].cfg.units, 1024);
    assert_int_equal(g.nodes[5].cfg.units, 10);
    bfit_graph_fini(&g);

    model_path(path, sizeof path, "cnn.cfg");
    rc = bfit_spec_parse_file(path, &g);
    if (rc != BFIT_OK)
        print_message("%s\n", bfit_errmsg());
    assert_int_equal(rc, BFIT_OK);
    assert_int_equal(g.nnodes, 10);
    for (int i = 0; i < 10; i++)
        assert_int_equal(g.nodes[i].cfg.kind, cnn[i]);
    assert_int_equal(g.nodes[0].cfg.units, 32);
    assert_window(&g.nodes[0].cfg, 3, 3, 1, 1, 1, 1);
    assert_window(&g.nodes[2].cfg, 2, 2, 2, 2, 0, 0);
    assert_int_equal(g.nodes[3].cfg.units, 64);
    assert_int_equal(g.nodes[7].cfg.units, 128);
    assert_int_equal(g.nodes[9].cfg.units, 10);
    bfit_graph_fini(&g);

    /* a missing file and a directory are I/O errors naming the path */
    model_path(path, sizeof path, "no-such-model.cfg");
    assert_int_equal(bfit_spec_parse_file(path, &g), BFIT_EIO);
    assert_int_equal(strncmp(bfit_errmsg(), path, strlen(path)), 0);
    assert_non_null(strstr(bfit_errmsg(), ": cannot open: No such file or directory"));
    bfit_graph_fini(&g);
    model_path(path, sizeof path, "");
    assert_int_equal(bfit_spec_parse_file(path, &g), BFIT_EIO);
    assert_non_null(strstr(bfit_errmsg(), "cannot read"));
    bfit_graph_fini(&g);
}

static void test_file_errors_name_the_file(void **st)
{
    const char *path = "test_spec_tmp.cfg";
    FILE *f = fopen(path, "wb");
    bfit_graph_desc g;
    (void)st;
    assert_non_null(f);
    fputs("input 1x28x28\nconv 8 k=3\nlinear 10\n", f);
    fclose(f);
    assert_int_equal(bfit_spec_parse_file(path, &g), BFIT_EFORMAT);
    assert_int_equal(strncmp(bfit_errmsg(), "test_spec_tmp.cfg:3:1: linear 10", 32), 0);
    assert_int_equal(g.nnodes, 0);
    bfit_graph_fini(&g);
    f = fopen(path, "wb");
    assert_non_null(f);
    fputs("input 784\nlinear 10 bias=yes\n", f);
    fclose(f);
    assert_int_equal(bfit_spec_parse_file(path, &g), BFIT_EFORMAT);
    assert_string_equal(bfit_errmsg(), "test_spec_tmp.cfg:2:16: bias must be 0 or 1, got `yes`");
    bfit_graph_fini(&g);
    remove(path);
}

/* ---- fuzz ---------------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t x = rng_state += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static size_t below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* Parse (and when that works, shape-check) len bytes held in a buffer of
 * exactly that size, so reading past the end is an ASan error. */
static void fuzz_one(const char *data, size_t len)
{
    char *buf = malloc(len ? len : 1);
    bfit_graph_desc g;
    int rc;
    assert_non_null(buf);
    memcpy(buf, data, len);
    rc = bfit_spec_parse(buf, len, "fuzz.cfg", &g);
    if (rc == BFIT_OK)
        rc = bfit_spec_check_shapes(&g);
    if (rc != BFIT_OK && (rc != BFIT_EFORMAT || strncmp(bfit_errmsg(), "fuzz.cfg", 8) != 0)) {
        print_message("rc %d, message \"%s\" for %zu bytes:\n%.*s\n", rc, bfit_errmsg(), len, (int)len, buf);
        fail();
    }
    bfit_graph_fini(&g);
    free(buf);
}

static void test_fuzz(void **st)
{
    static const char seed_spec[] =
        "# seed\ninput 3x16x16\nconv 8 k=3 pad=1 bias=0\nbatchnorm eps=1e-5 momentum=0.1\nrelu\n"
        "residual {\n  conv 8 k=3 pad=1\n  relu\n}\nresidual {\n  conv 16 kh=3 kw=3 sh=2 sw=2 ph=1 pw=1\n"
        "} shortcut {\n  conv 16 k=1 stride=2\n}\nmaxpool 2\navgpool 3 stride=1 pad=1\ndropout 0.1\n"
        "gelu\nlayernorm\ngap\nflatten\nlinear 10\n";
    static const char *const words[] = {
        "{", "}", "residual {\n", "} shortcut {\n", "shortcut {", "\n", "#", "=", "k=", "0", "-1", "1x",
        "99999999999", "16777216", "x", "stride=2", "pad=9", "\r", "\t", "\xff", "\xc3\xa9", "\xe2\x9c",
        "linear 3\n", "conv 1 k=7\n", "input 1x1x1\n", "input 5\n", "maxpool 5\n", "flatten\n", "gap\n",
        "1e-40", "0.9999", "bias=1", "kh=2", " ", "relu\n",
    };
    static const char alphabet[] = "input 1x8x8\nconv 4 k=3 relu{}#=0123456789.-\n";
    char buf[4096];
    (void)st;

    rng_state = 20240611;
    for (int iter = 0; iter < 3000; iter++) { /* random bytes, some nearly text */
        size_t len = below(300);
        int textish = (int)below(2);
        for (size_t i = 0; i < len; i++) {
            unsigned char c = (unsigned char)rnd();
            if (textish && below(8))
                c = (unsigned char)alphabet[below(sizeof alphabet - 1)];
            buf[i] = (char)c;
        }
        fuzz_one(buf, len);
    }
    for (int iter = 0; iter < 4000; iter++) { /* mutations of a valid spec */
        size_t len = sizeof seed_spec - 1;
        memcpy(buf, seed_spec, len);
        for (int m = 1 + (int)(below(8) == 0) * (int)below(4); m > 0; m--) {
            size_t at = below(len + 1), n;
            switch (below(6)) {
            case 0: /* one byte, mostly one a spec could hold */
                if (len)
                    buf[below(len)] = below(4) ? alphabet[below(sizeof alphabet - 1)] : (char)rnd();
                break;
            case 1: { /* insert a word */
                const char *w = words[below(sizeof words / sizeof words[0])];
                n = strlen(w);
                if (len + n < sizeof buf) {
                    memmove(buf + at + n, buf + at, len - at);
                    memcpy(buf + at, w, n);
                    len += n;
                }
                break;
            }
            case 2: /* delete a range */
                n = below(len - at + 1) % 40;
                memmove(buf + at, buf + at + n, len - at - n);
                len -= n;
                break;
            case 3: /* another number: digits keep the syntax, stress the shapes */
                for (size_t i = 0; i < len; i++) {
                    size_t j = (at + i) % (len ? len : 1);
                    if (buf[j] >= '0' && buf[j] <= '9') {
                        buf[j] = (char)('0' + below(10));
                        break;
                    }
                }
                break;
            case 4: { /* move a whole line elsewhere: blocks break, the rest stays valid */
                char line[256];
                char *b = memchr(buf + at, '\n', len - at), *e;
                if (!b || !(e = memchr(b + 1, '\n', (size_t)(buf + len - b - 1))) || e - b > (long)sizeof line)
                    break;
                n = (size_t)(e - b);
                memcpy(line, b, n);
                memmove(b, e, (size_t)(buf + len - e));
                at = below(len - n + 1);
                memmove(buf + at + n, buf + at, len - n - at);
                memcpy(buf + at, line, n);
                break;
            }
            default: /* duplicate a range */
                n = below(len - at + 1) % 80;
                if (len + n < sizeof buf) {
                    memmove(buf + at + n, buf + at, len - at);
                    len += n;
                }
                break;
            }
        }
        fuzz_one(buf, len);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_layer_and_option),
        cmocka_unit_test(test_param_activations),
        cmocka_unit_test(test_prelu), cmocka_unit_test(test_layerscale),
        cmocka_unit_test(test_groupnorm),
        cmocka_unit_test(test_residual_wiring),
        cmocka_unit_test(test_text_details),
        cmocka_unit_test(test_bad_specs),
        cmocka_unit_test(test_nesting_limit),
        cmocka_unit_test(test_size_limits),
        cmocka_unit_test(test_shape_check),
        cmocka_unit_test(test_pool_ceil), cmocka_unit_test(test_gelu_tanh), cmocka_unit_test(test_layernorm_nobias),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_attention_dropout),
        cmocka_unit_test(test_pool_before_relu),
        cmocka_unit_test(test_model_files),
        cmocka_unit_test(test_file_errors_name_the_file),
        cmocka_unit_test(test_fuzz),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
