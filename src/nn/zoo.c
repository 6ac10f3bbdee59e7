/* zoo.c - preset models built node by node, exactly as a spec would give
 * them (residual: body nodes, shortcut nodes, then the add), and the loader
 * that tells a preset name from a spec file path.
 *
 * ResNet and VGG follow torchvision layer for layer so that parameter counts
 * (and so memory) match what people know: ResNet-50 25,557,032, VGG-16
 * 138,357,544, ResNet-18 11,689,512 trainable scalars. */
#include "base/err.h"
#include "nn/model.h"
#include "nn/onnx.h"
#include "nn/spec.h"
#include "nn/zoo.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* A builder: the first failure sticks and later calls do nothing, so model
 * functions read as straight lines and check once at the end. */
typedef struct zb {
    bfit_graph_desc *g;
    int rc;
} zb;

static int add_node(zb *b, const bfit_layer_cfg *c, int in0, int in1)
{
    int v;
    if (b->rc != BFIT_OK)
        return 0;
    v = bfit_graph_add(b->g, c, in0, in1, 0, 0);
    if (v < 0) {
        b->rc = v;
        return 0;
    }
    return v;
}

static int simple(zb *b, bfit_layer_kind kind, int x)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(kind);
    return add_node(b, &c, x, -1);
}

static int conv(zb *b, int x, int out, int k, int stride, int pad, int bias)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_CONV);
    c.units = out;
    c.kh = c.kw = k;
    c.sh = c.sw = stride;
    c.ph = c.pw = pad;
    c.bias = bias;
    return add_node(b, &c, x, -1);
}

static int maxpool(zb *b, int x, int k, int stride, int pad)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_MAXPOOL);
    c.kh = c.kw = k;
    c.sh = c.sw = stride;
    c.ph = c.pw = pad;
    return add_node(b, &c, x, -1);
}

static int linear_std(zb *b, int x, int out, float std)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_LINEAR);
    c.units = out;
    c.std = std;
    return add_node(b, &c, x, -1);
}

static int linear(zb *b, int x, int out) { return linear_std(b, x, out, 0); }

static int residual_add(zb *b, int body, int shortcut)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_ADD);
    return add_node(b, &c, body, shortcut);
}

/* ---- the presets --------------------------------------------------------- */

static int build_mlp(zb *b)
{
    int x;
    b->g->input = bfit_shape_chw(1, 28, 28);
    x = simple(b, BFIT_L_FLATTEN, 0);
    x = simple(b, BFIT_L_RELU, linear(b, x, 1024));
    x = simple(b, BFIT_L_RELU, linear(b, x, 1024));
    linear(b, x, 10);
    return b->rc;
}

/* models/cnn.cfg, node for node */
static int build_cnn(zb *b)
{
    int x;
    b->g->input = bfit_shape_chw(1, 28, 28);
    x = simple(b, BFIT_L_RELU, conv(b, 0, 32, 3, 1, 1, 1));
    x = maxpool(b, x, 2, 2, 0);
    x = simple(b, BFIT_L_RELU, conv(b, x, 64, 3, 1, 1, 1));
    x = maxpool(b, x, 2, 2, 0);
    x = simple(b, BFIT_L_FLATTEN, x);
    x = simple(b, BFIT_L_RELU, linear(b, x, 128));
    linear(b, x, 10);
    return b->rc;
}

static int conv_bn(zb *b, int x, int out, int k, int stride, int pad)
{
    return simple(b, BFIT_L_BATCHNORM, conv(b, x, out, k, stride, pad, 0));
}

/* torchvision's downsample: conv1x1 (stride) + bn, when the shape changes */
static int shortcut(zb *b, int x, int inplanes, int out, int stride)
{
    if (stride == 1 && inplanes == out)
        return x;
    return conv_bn(b, x, out, 1, stride, 0);
}

/* BasicBlock: conv3x3(stride)-bn-relu-conv3x3-bn, + shortcut, relu */
static int basic_block(zb *b, int x, int inplanes, int planes, int stride)
{
    int y = simple(b, BFIT_L_RELU, conv_bn(b, x, planes, 3, stride, 1));
    y = conv_bn(b, y, planes, 3, 1, 1);
    return simple(b, BFIT_L_RELU, residual_add(b, y, shortcut(b, x, inplanes, planes, stride)));
}

/* Bottleneck (v1.5: the stride on the 3x3): 1x1-bn-relu, 3x3(stride)-bn-relu,
 * 1x1 to 4*planes-bn, + shortcut, relu */
static int bottleneck(zb *b, int x, int inplanes, int planes, int stride)
{
    int y = simple(b, BFIT_L_RELU, conv_bn(b, x, planes, 1, 1, 0));
    y = simple(b, BFIT_L_RELU, conv_bn(b, y, planes, 3, stride, 1));
    y = conv_bn(b, y, 4 * planes, 1, 1, 0);
    return simple(b, BFIT_L_RELU, residual_add(b, y, shortcut(b, x, inplanes, 4 * planes, stride)));
}

static int build_resnet(zb *b, const int blocks[4], int bottle)
{
    int x, inplanes = 64, expansion = bottle ? 4 : 1;
    b->g->input = bfit_shape_chw(3, 224, 224);
    x = simple(b, BFIT_L_RELU, conv_bn(b, 0, 64, 7, 2, 3));
    x = maxpool(b, x, 3, 2, 1);
    for (int stage = 0; stage < 4; stage++) {
        int planes = 64 << stage;
        for (int i = 0; i < blocks[stage]; i++) {
            int stride = i == 0 && stage > 0 ? 2 : 1;
            x = bottle ? bottleneck(b, x, inplanes, planes, stride) : basic_block(b, x, inplanes, planes, stride);
            inplanes = planes * expansion;
        }
    }
    x = simple(b, BFIT_L_GAP, x);
    linear(b, x, 1000);
    return b->rc;
}

static int build_resnet18(zb *b)
{
    static const int blocks[4] = {2, 2, 2, 2};
    return build_resnet(b, blocks, 0);
}

static int build_resnet50(zb *b)
{
    static const int blocks[4] = {3, 4, 6, 3};
    return build_resnet(b, blocks, 1);
}

/* torchvision vgg16 (configuration "D"); its AdaptiveAvgPool2d((7, 7)) is the
 * identity on the 7x7 maps a 224x224 input gives, so it is left out. */
static int build_vgg16(zb *b)
{
    static const int cfg[] = {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0};
    int x = 0;
    b->g->input = bfit_shape_chw(3, 224, 224);
    for (unsigned i = 0; i < sizeof cfg / sizeof cfg[0]; i++)
        x = cfg[i] ? simple(b, BFIT_L_RELU, conv(b, x, cfg[i], 3, 1, 1, 1)) : maxpool(b, x, 2, 2, 0);
    x = simple(b, BFIT_L_FLATTEN, x);
    for (int i = 0; i < 2; i++)
        x = simple(b, BFIT_L_DROPOUT, simple(b, BFIT_L_RELU, linear(b, x, 4096)));
    linear(b, x, 1000);
    return b->rc;
}

/* ---- transformers ---------------------------------------------------------- */

#define TF_STD 0.02f /* GPT-2's and BERT's initial spread of weights */

typedef struct tf_cfg {
    int layers, heads, width, context, vocab;
    int types;     /* BERT's token types (0: none) */
    int causal;    /* GPT: causal attention, pre-norm blocks; BERT: bidirectional, post-norm */
    float eps;     /* layer norm */
    float dropout; /* after the embeddings and each block's body (0: none) */
    float proj_std; /* initial spread of the residual projections: GPT-2's 0.02 / sqrt(2 layers) (the
                       literal, so a spec file's `std=` gives the same float); the other linears 0.02 */
} tf_cfg;

static int layer_norm(zb *b, int x, float eps)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_LAYERNORM);
    c.eps = eps;
    return add_node(b, &c, x, -1);
}

static int drop(zb *b, int x, float p)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_DROPOUT);
    if (p <= 0)
        return x;
    c.p = p;
    return add_node(b, &c, x, -1);
}

/* The two bodies of a block: attention (q|k|v projection, attention, output
 * projection) and the MLP (4x wide, GELU). */
static int attn_body(zb *b, const tf_cfg *t, int x)
{
    bfit_layer_cfg a = bfit_layer_cfg_default(BFIT_L_ATTENTION);
    a.units = t->heads;
    a.causal = t->causal;
    x = add_node(b, &a, linear_std(b, x, 3 * t->width, TF_STD), -1);
    return drop(b, linear_std(b, x, t->width, t->proj_std), t->dropout);
}

static int mlp_body(zb *b, const tf_cfg *t, int x)
{
    x = simple(b, BFIT_L_GELU, linear_std(b, x, 4 * t->width, TF_STD));
    return drop(b, linear_std(b, x, t->width, t->proj_std), t->dropout);
}

/* GPT-2: x + attn(ln(x)), then x + mlp(ln(x)) (pre-norm). BERT: ln(x +
 * attn(x)), then ln(x + mlp(x)) (post-norm). */
static int block(zb *b, const tf_cfg *t, int x)
{
    if (t->causal) {
        x = residual_add(b, attn_body(b, t, layer_norm(b, x, t->eps)), x);
        return residual_add(b, mlp_body(b, t, layer_norm(b, x, t->eps)), x);
    }
    x = layer_norm(b, residual_add(b, attn_body(b, t, x), x), t->eps);
    return layer_norm(b, residual_add(b, mlp_body(b, t, x), x), t->eps);
}

/* Embeddings, the blocks, and a head tied to the token table: GPT-2's
 * ln_f and lm_head; BERT's masked-LM head (dense, GELU, norm, decoder with
 * its own bias). The loss is per token. */
static int build_transformer(zb *b, const tf_cfg *t)
{
    bfit_layer_cfg e = bfit_layer_cfg_default(BFIT_L_EMBED), h = bfit_layer_cfg_default(BFIT_L_LINEAR);
    int x;
    b->g->input = bfit_shape_seq(t->context, 1);
    b->g->input_dtype = BFIT_I32;
    e.units = t->width;
    e.vocab = t->vocab;
    e.positions = t->context;
    e.types = t->types;
    x = add_node(b, &e, 0, -1);
    if (!t->causal)
        x = layer_norm(b, x, t->eps);
    x = drop(b, x, t->dropout);
    for (int i = 0; i < t->layers; i++)
        x = block(b, t, x);
    if (t->causal)
        x = layer_norm(b, x, t->eps);
    else
        x = layer_norm(b, simple(b, BFIT_L_GELU, linear_std(b, x, t->width, TF_STD)), t->eps);
    h.units = t->vocab;
    h.tie = 1;
    h.bias = !t->causal;
    add_node(b, &h, x, -1);
    return b->rc;
}

/* For tests and the demo: byte-level tokens, 4 layers of 128, 128 tokens. */
static int build_gpt_nano(zb *b)
{
    static const tf_cfg t = {4, 4, 128, 128, 256, 0, 1, 1e-5f, 0, 0.0070710678f};
    return build_transformer(b, &t);
}

/* GPT-2 small as llm.c trains it: 124,439,808 parameters. */
static int build_gpt2(zb *b)
{
    static const tf_cfg t = {12, 12, 768, 1024, 50257, 0, 1, 1e-5f, 0, 0.0040824829f};
    return build_transformer(b, &t);
}

/* BERT-Base (uncased) with its masked-LM head, hidden dropout 0.1:
 * 109,514,298 parameters (BertForMaskedLM). Attention-probability dropout
 * is not modelled. */
static int build_bert_base(zb *b)
{
    static const tf_cfg t = {12, 12, 768, 512, 30522, 2, 0, 1e-12f, 0.1f, TF_STD}; /* no residual scaling */
    return build_transformer(b, &t);
}

static const struct {
    const char *name;
    int (*build)(zb *b);
} presets[] = {
    {"mlp", build_mlp},           {"cnn", build_cnn},     {"resnet18", build_resnet18},
    {"resnet50", build_resnet50}, {"vgg16", build_vgg16}, {"gpt-nano", build_gpt_nano},
    {"gpt2", build_gpt2},         {"bert-base", build_bert_base},
};
#define NPRESETS (sizeof presets / sizeof presets[0])

static const char *const names[NPRESETS + 1] = {"mlp", "cnn", "resnet18", "resnet50", "vgg16",
                                                "gpt-nano", "gpt2", "bert-base", NULL};

const char *const *bfit_zoo_names(void) { return names; }

int bfit_zoo_build(const char *name, bfit_graph_desc *g)
{
    char list[192] = "";

    bfit_graph_init(g, name);
    for (unsigned i = 0; i < NPRESETS; i++) {
        if (strcmp(name, presets[i].name) != 0)
            continue;
        zb b = {g, BFIT_OK};
        if (presets[i].build(&b) != BFIT_OK) {
            bfit_graph_fini(g);
            return b.rc;
        }
        return BFIT_OK;
    }
    for (unsigned i = 0; i < NPRESETS; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", presets[i].name);
    bfit_graph_fini(g);
    return bfit_fail(BFIT_EINVAL, "unknown model preset '%s': expected one of %s, or a spec file path", name, list);
}

int bfit_model_source_is_file(const char *s)
{
    struct stat st;
    size_t n = strlen(s);
    /* a directory of that name in the working directory does not hide a preset */
    return (stat(s, &st) == 0 && !S_ISDIR(st.st_mode)) || strchr(s, '/') != NULL ||
           (n >= 4 && strcmp(s + n - 4, ".cfg") == 0) || (n >= 5 && strcmp(s + n - 5, ".onnx") == 0);
}

int bfit_model_source_is_onnx(const char *s) { return bfit_model_source_is_file(s) && bfit_onnx_sniff(s); }

int bfit_model_source_load(const char *name_or_path, int seq, bfit_graph_desc *g)
{
    if (bfit_model_source_is_file(name_or_path))
        return bfit_onnx_sniff(name_or_path) ? bfit_onnx_load_file(name_or_path, seq, g)
                                             : bfit_spec_parse_file(name_or_path, g);
    return bfit_zoo_build(name_or_path, g);
}

int bfit_graph_set_attention(bfit_graph_desc *g, int lean)
{
    int n = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].cfg.kind == BFIT_L_ATTENTION) {
            g->nodes[i].cfg.lean = lean != 0;
            n++;
        }
    if (!n)
        return bfit_fail_field(BFIT_EINVAL, "attention", "the model has no attention layer");
    return BFIT_OK;
}

int bfit_graph_set_seq(bfit_graph_desc *g, int seq, const char *option)
{
    int most = 0;
    if (g->input_dtype != BFIT_I32)
        return bfit_fail_field(BFIT_EINVAL, option, "applies to token models (`input tokens=T`); this model's "
                                                   "input is not token ids");
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].cfg.kind == BFIT_L_EMBED)
            most = g->nodes[i].cfg.positions;
    if (seq < 1 || (most && seq > most))
        return bfit_fail_field(BFIT_EINVAL, option, "must be 1 to %d (the model's positions), got %d", most ? most : 1 << 24,
                               seq);
    g->input = bfit_shape_seq(seq, 1);
    return BFIT_OK;
}

int bfit_model_load(const char *preset_or_spec, bfit_device *dev, bfit_model **out)
{
    bfit_graph_desc g;
    int rc;

    *out = NULL;
    if (!preset_or_spec)
        return bfit_fail_field(BFIT_EINVAL, "model", "is required: a preset name or a spec file");
    rc = bfit_model_source_load(preset_or_spec, 0, &g);
    if (rc != BFIT_OK)
        return rc;
    /* planning needs ops but no memory: the model gets no arena */
    rc = bfit_model_new(&g, dev, NULL, out);
    bfit_graph_fini(&g);
    return rc;
}

int bfit_model_load_onnx(const void *buf, size_t len, const char *source, bfit_device *dev, bfit_model **out)
{
    bfit_graph_desc g;
    int rc;

    *out = NULL;
    if (!buf && len)
        return bfit_fail(BFIT_EINVAL, "onnx: no buffer for %zu bytes", len);
    if ((rc = bfit_onnx_load_buffer(buf ? buf : "", len, source, 0, &g)) != BFIT_OK)
        return rc;
    rc = bfit_model_new(&g, dev, NULL, out);
    bfit_graph_fini(&g);
    return rc;
}

int bfit_model_classes(const bfit_model *M) { return M->nclasses; }
