/* test_gpt.c - transformer models end to end: the presets' sizes (GPT-2's
 * 124M, BERT-Base's 110M), models/gpt-nano.cfg and the preset being the same
 * model, a whole model's gradient (tied head and embedding, attention,
 * residuals, the per-token loss with padding) against finite differences,
 * a padded batch of a bidirectional encoder against its sequences alone
 * (the key-padding mask), the plan equal to the measured arena peak to the byte (stored and lean
 * attention, recomputation, both optimizers), how the plan grows with the
 * sequence (quadratic in stored attention, linear when lean), and spec
 * errors for token models.
 *
 * Device memory is only reached by upload and download (BFIT_DEVICE_CHECK). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "internal.h"

#include "batch/plan.h"
#include "nn/spec.h"
#include "nn/zoo.h"
#include "trig.h"
#include "ttok.h"

#define BIG ((uint64_t)16 << 30) /* accounting only: blocks are taken on demand */

typedef trig rig;

/* The device (2 threads), an arena and the model of g. */
static void rig_graph(rig *r, bfit_graph_desc *g)
{
    trig_open(r, 2, BIG);
    trig_model(r, g);
}

/* A model from a preset or file (seq > 0: that many tokens; lean attention). */
static void rig_new(rig *r, const char *src, int seq, int lean)
{
    bfit_graph_desc g;
    if (bfit_model_source_load(src, 0, &g) != BFIT_OK)
        fail_msg("%s: %s", src, bfit_errmsg());
    if (seq)
        assert_int_equal(bfit_graph_set_seq(&g, seq, "seq"), BFIT_OK);
    if (lean)
        assert_int_equal(bfit_graph_set_attention(&g, 1), BFIT_OK);
    rig_graph(r, &g);
}

static void rig_text(rig *r, const char *spec)
{
    bfit_graph_desc g;
    if (bfit_spec_parse(spec, strlen(spec), "test.cfg", &g) != BFIT_OK || bfit_spec_check_shapes(&g) != BFIT_OK)
        fail_msg("spec: %s", bfit_errmsg());
    rig_graph(r, &g);
}

static uint64_t rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* Token ids and next-token labels for m sequences, every seventh label -1
 * (padding), uploaded into the reserved input. */
static void fill_tokens(bfit_model *M, int m, uint64_t seed)
{
    int T = M->input.d[0], V = M->nodes[0].l->cfg.vocab;
    int32_t *x = malloc(sizeof *x * (size_t)m * (size_t)T), *y = malloc(sizeof *y * (size_t)m * (size_t)T);
    assert_true(x && y && M->labels_per_sample == T);
    for (int i = 0; i < m * T; i++)
        x[i] = (int32_t)(rnd(&seed) % (uint64_t)V);
    for (int i = 0; i < m * T; i++)
        y[i] = i % 7 == 6 ? -1 : (i + 1) % T ? x[i + 1] : (int32_t)(rnd(&seed) % (uint64_t)V);
    assert_int_equal(bfit_model_set_input(M, x, y, m), BFIT_OK);
    free(x);
    free(y);
}

/* ---- sizes ---- */

static void test_preset_sizes(void **st)
{
    static const struct { const char *name; int64_t params; int T, V; } want[] = {
        {"gpt2", 124439808, 1024, 50257},     /* llm.c's GPT-2 124M */
        {"bert-base", 109514298, 512, 30522}, /* BertForMaskedLM, bert-base-uncased */
        {"gpt-nano", 842496, 128, 256},
    };
    (void)st;
    for (unsigned i = 0; i < sizeof want / sizeof want[0]; i++) {
        bfit_graph_desc g;
        bfit_model *M;
        assert_int_equal(bfit_model_source_load(want[i].name, 0, &g), BFIT_OK);
        assert_int_equal(bfit_model_new(&g, NULL, NULL, &M), BFIT_OK);
        print_message("  %s: %lld parameters\n", want[i].name, (long long)bfit_model_param_count(M));
        assert_int_equal(bfit_model_param_count(M), want[i].params);
        assert_int_equal(M->input_dtype, BFIT_I32);
        assert_int_equal(M->input.d[0], want[i].T);
        assert_int_equal(M->labels_per_sample, want[i].T);
        assert_int_equal(M->nclasses, want[i].V);
        bfit_model_free(M);
        bfit_graph_fini(&g);
    }
}

/* models/gpt-nano.cfg is the preset, node for node: the same parameters and
 * the same plan to the byte. */
static void test_spec_file_is_preset(void **st)
{
    char path[600];
    const char *src = getenv("BFIT_SOURCE_DIR");
    rig a, b;
    bfit_step_plan pa, pb;
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_ADAMW);
    (void)st;
    snprintf(path, sizeof path, "%s/models/gpt-nano.cfg", src ? src : "..");
    rig_new(&a, path, 0, 0);
    rig_new(&b, "gpt-nano", 0, 0);
    assert_int_equal(a.M->n, b.M->n);
    assert_int_equal(bfit_model_param_count(a.M), bfit_model_param_count(b.M));
    assert_int_equal(bfit_plan_compute(a.M, &oc, 3, 1, &pa), BFIT_OK);
    assert_int_equal(bfit_plan_compute(b.M, &oc, 3, 1, &pb), BFIT_OK);
    assert_memory_equal(pa.bytes, pb.bytes, sizeof pa.bytes);
    trig_free(&a);
    trig_free(&b);
}

/* ---- the whole model's gradient ---- */


static double model_loss(rig *r)
{
    double loss;
    assert_int_equal(bfit_model_stats_reset(r->M), BFIT_OK);
    assert_int_equal(bfit_model_forward(r->M, 1), BFIT_OK);
    assert_int_equal(bfit_model_stats_read(r->M, &loss, NULL), BFIT_OK);
    return loss;
}

/* Central differences (h = 1e-2) on sampled elements of every trainable
 * tensor against backward's gradient of the summed loss: relative error
 * within 2e-2 (floor 1e-2), gradcheck's bound for smooth layers. The tied
 * table's gradient is the sum of the embedding's and the head's parts: a
 * missing one is off by O(1). */
static void check_model_grad(int lean)
{
    rig r;
    double worst = 0;
    int checked = 0;
    rig_text(&r, ttok_tied_spec); /* two pre-norm blocks, a tied head: every kind of the presets */
    if (lean)
        for (int i = 0; i < r.M->n; i++)
            if (r.M->nodes[i].l->cfg.kind == BFIT_L_ATTENTION)
                r.M->nodes[i].l->cfg.lean = 1;
    assert_int_equal(bfit_model_alloc_params(r.M, 1), BFIT_OK);
    assert_int_equal(bfit_model_init_params(r.M, 3), BFIT_OK);
    assert_int_equal(r.M->ntrainable, 2 + 6 + 6 + 2); /* the head's weight is the table */
    /* values of O(0.3) (not the init's std 0.02 tables, which a step of
     * 1e-2 would change by half), as gradcheck moves parameters */
    for (int p = 0; p < r.M->ntrainable; p++) {
        bfit_param *q = r.M->trainable[p];
        float *v = malloc(bfit_param_bytes(q)), *u = malloc(bfit_param_bytes(q));
        assert_int_equal(bfit_device_download(r.dev, v, q->data, bfit_param_bytes(q)), BFIT_OK);
        bfit_fill_uniform(u, bfit_param_numel(q), 0.3f, 100 + (uint64_t)p);
        for (int64_t i = 0; i < bfit_param_numel(q); i++)
            v[i] += u[i];
        assert_int_equal(bfit_device_upload(r.dev, q->data, v, bfit_param_bytes(q)), BFIT_OK);
        free(v);
        free(u);
    }
    assert_int_equal(bfit_model_reserve(r.M, 2, 1), BFIT_OK);
    fill_tokens(r.M, 2, 11);
    model_loss(&r);
    assert_int_equal(bfit_model_backward(r.M, 1.0f), BFIT_OK);
    for (int p = 0; p < r.M->ntrainable; p++) {
        bfit_param *q = r.M->trainable[p];
        int64_t n = bfit_param_numel(q);
        float *v = malloc(bfit_param_bytes(q)), *g = malloc(bfit_param_bytes(q));
        assert_int_equal(bfit_device_download(r.dev, v, q->data, bfit_param_bytes(q)), BFIT_OK);
        assert_int_equal(bfit_device_download(r.dev, g, q->grad, bfit_param_bytes(q)), BFIT_OK);
        for (int k = 0; k < 12; k++) {
            int64_t i = (int64_t)((uint64_t)(k * 7919 + p * 31) % (uint64_t)n);
            float old = v[i];
            double lp, lm, fd, e;
            v[i] = old + 1e-2f;
            bfit_device_upload(r.dev, q->data, v, bfit_param_bytes(q));
            lp = model_loss(&r);
            v[i] = old - 1e-2f;
            bfit_device_upload(r.dev, q->data, v, bfit_param_bytes(q));
            lm = model_loss(&r);
            v[i] = old;
            bfit_device_upload(r.dev, q->data, v, bfit_param_bytes(q));
            fd = (lp - lm) / ((double)(old + 1e-2f) - (double)(old - 1e-2f));
            e = fabs(fd - g[i]) / fmax(fmax(fabs(fd), fabs(g[i])), 1e-2);
            worst = fmax(worst, e);
            checked++;
            if (e > 2e-2)
                fail_msg("%s[%lld]: backward %.6g, finite difference %.6g", q->name, (long long)i, (double)g[i], fd);
        }
        free(v);
        free(g);
    }
    print_message("  whole model (%s attention): %d elements, max rel err %.2e\n", lean ? "lean" : "stored",
                  checked, worst);
    trig_free(&r);
}

static void test_model_gradient(void **st)
{
    (void)st;
    check_model_grad(0);
    check_model_grad(1);
}

/* ---- a padded batch is the unpadded sequences (bidirectional attention) ---- */

/* A post-norm encoder, BERT's shape, small. */
static const char *encoder =
    "input tokens=16\n"
    "embed 8 vocab=11 positions=16\n"
    "residual {\n linear 24\n attention 2 causal=0\n linear 8\n}\n"
    "layernorm\n"
    "residual {\n linear 16\n gelu\n linear 8\n}\n"
    "layernorm\n"
    "linear 11\n";

/* The same with dropout on its attention weights (BERT's 0.1): workspace for the mask's products, no
 * memory kept for the mask. */
static const char *encoder_drop =
    "input tokens=16\n"
    "embed 8 vocab=11 positions=16\n"
    "residual {\n linear 24\n attention 2 causal=0 p=0.1\n linear 8\n}\n"
    "layernorm\n"
    "residual {\n linear 16\n gelu\n linear 8\n}\n"
    "layernorm\n"
    "linear 11\n";

/* The summed loss and every parameter gradient (concatenated, host) of the
 * sequences [first, first + m) of x, y (rows of 16), at length T. */
static double enc_grads(rig *r, const int32_t *x, const int32_t *y, int m, int T, float *g, int64_t ng)
{
    int32_t xs[3 * 16], ys[3 * 16];
    int64_t k = 0;
    double loss;
    for (int i = 0; i < m; i++) {
        memcpy(xs + i * T, x + i * 16, sizeof(int32_t) * (size_t)T);
        memcpy(ys + i * T, y + i * 16, sizeof(int32_t) * (size_t)T);
    }
    assert_int_equal(bfit_model_set_seq(r->M, T), BFIT_OK);
    assert_int_equal(bfit_model_reserve(r->M, m, 1), BFIT_OK);
    assert_int_equal(bfit_model_set_input(r->M, xs, ys, m), BFIT_OK);
    assert_int_equal(bfit_model_zero_grads(r->M), BFIT_OK);
    loss = model_loss(r);
    assert_int_equal(bfit_model_backward(r->M, 1.0f), BFIT_OK);
    for (int p = 0; p < r->M->ntrainable; p++) {
        bfit_param *q = r->M->trainable[p];
        assert_true(k + bfit_param_numel(q) <= ng);
        assert_int_equal(bfit_device_download(r->dev, g + k, q->grad, bfit_param_bytes(q)), BFIT_OK);
        k += bfit_param_numel(q);
    }
    return loss;
}

/* Three sequences of 16, 9 and 4 tokens, padded to 16 (ids 0, labels -1),
 * in one micro-batch, against each alone at its own length: the same summed
 * loss and parameter gradients to float rounding (1e-5 relative to the
 * largest). With the mask off the padded batch's differ by far more. */
static void padded_vs_alone(int lean, int masked, double *dloss, double *dgrad)
{
    static const int lens[3] = {16, 9, 4};
    int32_t x[3 * 16], y[3 * 16];
    uint64_t s = 77;
    int64_t ng;
    float *ga, *gb, *g1;
    double la, lb = 0, worst = 0, scale = 0;
    rig r;
    rig_text(&r, encoder);
    for (int i = 0; i < r.M->n; i++)
        if (r.M->nodes[i].l->cfg.kind == BFIT_L_ATTENTION)
            r.M->nodes[i].l->cfg.lean = lean;
    r.M->seq_lens = masked; /* off: the control, attention over the padding */
    assert_int_equal(bfit_model_alloc_params(r.M, 1), BFIT_OK);
    assert_int_equal(bfit_model_init_params(r.M, 5), BFIT_OK);
    ng = bfit_model_param_count(r.M);
    ga = malloc(sizeof *ga * (size_t)ng);
    gb = calloc((size_t)ng, sizeof *gb);
    g1 = malloc(sizeof *g1 * (size_t)ng);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 16; j++) {
            x[i * 16 + j] = j < lens[i] ? (int32_t)(rnd(&s) % 11) : 0;
            y[i * 16 + j] = j < lens[i] ? (int32_t)(rnd(&s) % 11) : -1;
        }
    la = enc_grads(&r, x, y, 3, 16, ga, ng);
    for (int i = 0; i < 3; i++) {
        lb += enc_grads(&r, x + i * 16, y + i * 16, 1, lens[i], g1, ng);
        for (int64_t k = 0; k < ng; k++)
            gb[k] += g1[k];
    }
    for (int64_t k = 0; k < ng; k++) {
        worst = fmax(worst, fabs((double)ga[k] - gb[k]));
        scale = fmax(scale, fabs((double)gb[k]));
    }
    *dloss = fabs(la - lb) / lb;
    *dgrad = worst / scale;
    print_message("  encoder %s, %s: summed loss padded %.7f, alone %.7f; gradients max diff %.2e of max %.2e\n",
                  lean ? "lean" : "stored", masked ? "masked" : "NOT masked", la, lb, worst, scale);
    free(ga);
    free(gb);
    free(g1);
    trig_free(&r);
}

/* Where a masked LM's head is gathered (nn/head.c): after the last add
 * that reads the attention, before everything token-wise after it; in a
 * post-norm encoder (BERT's) so before the last layer's layer norm and
 * feed-forward, whose residual add reads the gathered rows too; nowhere in
 * a model whose end holds no linear. */
static void test_gather_placement(void **st)
{
    static const char *const enc = "input tokens=16\nembed 16 vocab=24 positions=16\nresidual {\n linear 48\n "
                                   "attention 2 causal=0\n linear 16\n}\nlayernorm\n";
    char spec[512];
    bfit_graph_desc g;
    int at[3] = {0}, want_in[3], readers[3] = {0}, kinds[3][2] = {{0}}, ffn = -1;
    (void)st;
    for (int c = 0; c < 3; c++) {
        snprintf(spec, sizeof spec, "%s%s", enc,
                 c == 0 ? "linear 16\ngelu\nlayernorm\nlinear 24\n"
                 : c == 1 ? "residual {\n linear 32\n gelu\n linear 16\n}\nlayernorm\nlinear 16\ngelu\nlayernorm\nlinear 24\n"
                          : "gelu\n");
        assert_int_equal(bfit_spec_parse(spec, strlen(spec), "t.cfg", &g), BFIT_OK);
        /* the value the head starts from: the add after the attention, which the first layer norm reads */
        for (int i = 0; i < g.nnodes; i++)
            if (g.nodes[i].cfg.kind == BFIT_L_LAYERNORM) {
                want_in[c] = g.nodes[i].in[0];
                break;
            }
        assert_int_equal(bfit_graph_gather_head(&g, 5, 0.15), c == 2 ? 0 : 1);
        for (int i = 0; i < g.nnodes; i++)
            if (g.nodes[i].cfg.kind == BFIT_L_GATHER)
                at[c] = i + 1;
        for (int i = 0; at[c] && i < g.nnodes; i++)
            for (int k = 0; k < g.nodes[i].nin; k++)
                if (g.nodes[i].in[k] == at[c] && readers[c] < 2)
                    kinds[c][readers[c]++] = g.nodes[i].cfg.kind;
        if (at[c])
            assert_int_equal(g.nodes[at[c] - 1].in[0], want_in[c]);
        for (int i = 0; c == 1 && i < g.nnodes; i++)
            if (g.nodes[i].cfg.kind == BFIT_L_LINEAR && g.nodes[i].cfg.units == 32)
                ffn = i;
        bfit_graph_fini(&g);
    }
    /* the layer norm alone reads the rows; in case 1 the feed-forward (its linear 32) comes after them */
    assert_true(at[0] && readers[0] == 1 && kinds[0][0] == BFIT_L_LAYERNORM);
    assert_true(at[1] && readers[1] == 1 && kinds[1][0] == BFIT_L_LAYERNORM && ffn > at[1] - 1);
    assert_int_equal(at[2], 0); /* ends in a layer norm and a GELU: no linear after the encoder's last add */
}

/* A masked LM labels a few tokens and leaves the others unscored (-2):
 * they are still real tokens, whose keys the bidirectional attention sees
 * up to the last of them; only -1 is padding. A sequence of 12 tokens, 2
 * of them scored, padded to 16: its loss is the sequence's alone at 12,
 * depends on the ids of its unscored tail (tokens 6-11) and not on the
 * padding's; with the tail taken for padding (-1) the loss differs. */
static void test_unscored_tokens_are_keys(void **st)
{
    int32_t x[16], x2[16], y[16], ypad[16];
    uint64_t s = 5;
    int64_t ng;
    float *g;
    double l16, l12, ltail, lpadids, lcut;
    rig r;
    (void)st;
    rig_text(&r, encoder);
    assert_int_equal(bfit_model_alloc_params(r.M, 1), BFIT_OK);
    assert_int_equal(bfit_model_init_params(r.M, 5), BFIT_OK);
    ng = bfit_model_param_count(r.M);
    g = malloc(sizeof *g * (size_t)ng);
    for (int j = 0; j < 16; j++) {
        x[j] = j < 12 ? (int32_t)(rnd(&s) % 11) : 0;
        y[j] = j >= 12 ? BFIT_LABEL_PAD : j == 2 || j == 5 ? (int32_t)(rnd(&s) % 11) : BFIT_LABEL_UNSCORED;
        ypad[j] = j > 5 ? BFIT_LABEL_PAD : y[j];
    }
    l16 = enc_grads(&r, x, y, 1, 16, g, ng);
    l12 = enc_grads(&r, x, y, 1, 12, g, ng);
    lcut = enc_grads(&r, x, ypad, 1, 16, g, ng);
    memcpy(x2, x, sizeof x);
    for (int j = 12; j < 16; j++)
        x2[j] = 7;
    lpadids = enc_grads(&r, x2, y, 1, 16, g, ng);
    for (int j = 6; j < 12; j++)
        x2[j] = (x[j] + 3) % 11;
    ltail = enc_grads(&r, x2, y, 1, 16, g, ng);
    print_message("  2 of 12 tokens scored, padded to 16: loss %.7f, alone at 12 %.7f, other padding ids %.7f, "
                  "other unscored ids %.7f, the unscored tail as padding %.7f\n", l16, l12, lpadids, ltail, lcut);
    assert_true(fabs(l16 - l12) < 1e-5 * l12);
    assert_true(l16 == lpadids);
    assert_true(fabs(l16 - ltail) > 1e-4 * l16);
    assert_true(fabs(l16 - lcut) > 1e-4 * l16);
    free(g);
    trig_free(&r);
}

/* encoder_drop's summed loss and gradients of one padded batch (x, y: 3 rows of 16), its blocks kept or
 * recomputed in backward (rec), or its attention's dropout off (p0). */
static double drop_grads(int rec, int p0, const int32_t *x, const int32_t *y, float *g, int64_t ng)
{
    bfit_store_cfg sc = bfit_store_cfg_default();
    double loss;
    rig r;
    rig_text(&r, encoder_drop);
    for (int i = 0; p0 && i < r.M->n; i++)
        if (r.M->nodes[i].l->cfg.kind == BFIT_L_ATTENTION)
            r.M->nodes[i].l->cfg.p = 0;
    sc.recompute = rec ? BFIT_RECOMPUTE_BLOCKS : BFIT_RECOMPUTE_NONE;
    assert_int_equal(bfit_model_configure(r.M, &sc), BFIT_OK);
    assert_int_equal(bfit_model_alloc_params(r.M, 1), BFIT_OK);
    assert_int_equal(bfit_model_init_params(r.M, 5), BFIT_OK);
    loss = enc_grads(&r, x, y, 3, 16, g, ng);
    trig_free(&r);
    return loss;
}

/* Dropout on the attention weights redraws its mask in backward, and in a
 * recomputation of the block from the same seed: recomputing the blocks
 * gives the kept run's loss and gradients bit for bit; without the dropout
 * they differ (the mask is there). */
static void test_attention_dropout_recomputed(void **st)
{
    int32_t x[3 * 16], y[3 * 16];
    uint64_t s = 91;
    int64_t ng = 4096, diff = 0;
    float *ga = calloc((size_t)ng, sizeof *ga), *gb = calloc((size_t)ng, sizeof *gb), *gc = calloc((size_t)ng, 4);
    double la, lb, lc;
    (void)st;
    for (int i = 0; i < 3 * 16; i++)
        x[i] = (int32_t)(rnd(&s) % 11), y[i] = (int32_t)(rnd(&s) % 11);
    la = drop_grads(0, 0, x, y, ga, ng);
    lb = drop_grads(1, 0, x, y, gb, ng);
    lc = drop_grads(0, 1, x, y, gc, ng);
    for (int64_t k = 0; k < ng; k++)
        diff += ga[k] != gc[k];
    print_message("  encoder, attention dropout 0.1: loss kept %.7f, recomputed %.7f, without dropout %.7f; %lld of "
                  "the gradients differ without it\n", la, lb, lc, (long long)diff);
    assert_true(la == lb);
    assert_memory_equal(ga, gb, sizeof *ga * (size_t)ng);
    assert_true(la != lc && diff > 100);
    free(ga), free(gb), free(gc);
}

static void test_padded_is_unpadded(void **st)
{
    double dl, dg;
    (void)st;
    for (int lean = 0; lean <= 1; lean++) {
        padded_vs_alone(lean, 1, &dl, &dg);
        assert_true(dl < 1e-6 && dg < 1e-5);
    }
    padded_vs_alone(0, 0, &dl, &dg); /* the control: the test would see a missing mask */
    assert_true(dl > 1e-4 || dg > 1e-3);
}

/* ---- the plan is the allocation ---- */

static void measured_step(const char *model, int seq, int lean, bfit_recompute_kind rec, bfit_opt_kind ok, int m,
                          bfit_dtype prec)
{
    rig r;
    bfit_step_plan p;
    bfit_arena_stats s0, s1;
    bfit_optim_cfg oc = bfit_optim_cfg_default(ok);
    bfit_store_cfg sc = bfit_store_cfg_default();
    double loss;

    if (!strncmp(model, "input", 5)) /* a spec's text, at its own length */
        rig_text(&r, model);
    else
        rig_new(&r, model, seq, lean);
    sc.recompute = rec;
    sc.precision = prec;
    assert_int_equal(bfit_model_configure(r.M, &sc), BFIT_OK);
    assert_int_equal(bfit_plan_compute(r.M, &oc, m, 1, &p), BFIT_OK);
    assert_int_equal(bfit_model_alloc_params(r.M, 1), BFIT_OK);
    assert_int_equal(bfit_model_init_params(r.M, 7), BFIT_OK);
    assert_int_equal(bfit_optim_new(&oc, r.M->trainable, r.M->ntrainable, r.dev, r.arena, &r.opt), BFIT_OK);
    assert_int_equal(bfit_model_reserve(r.M, m, 1), BFIT_OK);
    bfit_arena_stats_get(r.arena, &s0);
    assert_int_equal(s0.current, p.peak);
    fill_tokens(r.M, m, 5 + (uint64_t)m);
    assert_int_equal(bfit_model_forward(r.M, 5), BFIT_OK);
    assert_int_equal(bfit_model_stats_read(r.M, &loss, NULL), BFIT_OK);
    /* a fresh model guesses: about log V nats per real token (5.5 for 256) */
    {
        double lv = log((double)r.M->nodes[0].l->cfg.vocab);
        assert_true(loss > 0.72 * lv * m * seq * 6 / 7 && loss < 1.26 * lv * m * seq);
    }
    assert_int_equal(bfit_model_backward(r.M, 1.0f / (float)(m * seq)), BFIT_OK);
    assert_int_equal(bfit_optim_step(r.opt, 1e-3), BFIT_OK);
    bfit_arena_stats_get(r.arena, &s1);
    assert_int_equal(s1.nalloc, s0.nalloc);
    if (r.M->seq_lens) /* ids, labels, and the lengths of the key-padding mask */
        assert_int_equal(p.bytes[BFIT_MEM_INPUT],
                         2 * BFIT_ALIGN_UP((uint64_t)m * seq * 4) + BFIT_ALIGN_UP((uint64_t)m * 4));
    print_message("  %s seq %d %s %s %s %s m=%d: planned %llu, measured %llu\n",
                  strncmp(model, "input", 5) ? model : "encoder", seq, bfit_dtype_name(prec), lean ? "lean" : "stored",
                  rec == BFIT_RECOMPUTE_NONE ? "keep" : "blocks", bfit_optim_kind_name(ok), m,
                  (unsigned long long)p.peak, (unsigned long long)s1.peak);
    assert_int_equal(s1.peak, p.peak);
    for (int c = 0; c < BFIT_MEM_NCAT; c++)
        assert_int_equal(s1.peak_cat[c], p.bytes[c]);
    trig_free(&r);
}

static void test_measured_equals_planned(void **st)
{
    (void)st;
    measured_step("gpt-nano", 32, 0, BFIT_RECOMPUTE_NONE, BFIT_OPT_ADAMW, 1, BFIT_F32);
    measured_step("gpt-nano", 32, 0, BFIT_RECOMPUTE_NONE, BFIT_OPT_SGD, 3, BFIT_F32);
    measured_step("gpt-nano", 32, 1, BFIT_RECOMPUTE_NONE, BFIT_OPT_ADAMW, 3, BFIT_F32);
    measured_step("gpt-nano", 32, 0, BFIT_RECOMPUTE_BLOCKS, BFIT_OPT_ADAMW, 2, BFIT_F32);
    measured_step("gpt-nano", 128, 0, BFIT_RECOMPUTE_NONE, BFIT_OPT_ADAMW, 2, BFIT_F32);
    measured_step("gpt-nano", 77, 1, BFIT_RECOMPUTE_NONE, BFIT_OPT_SGD, 2, BFIT_F32);
    /* bidirectional: the sequences' lengths staged in the input block too */
    measured_step(encoder, 16, 0, BFIT_RECOMPUTE_NONE, BFIT_OPT_ADAMW, 3, BFIT_F32);
    measured_step(encoder, 16, 0, BFIT_RECOMPUTE_BLOCKS, BFIT_OPT_SGD, 5, BFIT_F32);
    /* 16-bit activations: attention keeps P in bf16, computes in f32 scratch */
    measured_step("gpt-nano", 32, 0, BFIT_RECOMPUTE_NONE, BFIT_OPT_ADAMW, 3, BFIT_BF16);
    measured_step("gpt-nano", 77, 1, BFIT_RECOMPUTE_NONE, BFIT_OPT_SGD, 2, BFIT_BF16);
    measured_step("gpt-nano", 32, 0, BFIT_RECOMPUTE_BLOCKS, BFIT_OPT_ADAMW, 2, BFIT_BF16);
    measured_step(encoder, 16, 0, BFIT_RECOMPUTE_NONE, BFIT_OPT_ADAMW, 3, BFIT_BF16);
    /* dropout on the attention weights: its products' scratch in the workspace, the mask never kept */
    measured_step(encoder_drop, 16, 0, BFIT_RECOMPUTE_NONE, BFIT_OPT_ADAMW, 3, BFIT_F32);
    measured_step(encoder_drop, 16, 0, BFIT_RECOMPUTE_BLOCKS, BFIT_OPT_SGD, 2, BFIT_BF16);
}

/* ---- the plan against the sequence length ---- */

static uint64_t per_seq(const char *model, int seq, int lean, bfit_step_plan *p)
{
    rig r;
    bfit_step_plan a, b;
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_ADAMW);
    rig_new(&r, model, seq, lean);
    assert_int_equal(bfit_plan_compute(r.M, &oc, 2, 1, &a), BFIT_OK);
    assert_int_equal(bfit_plan_compute(r.M, &oc, 4, 1, &b), BFIT_OK);
    if (p)
        *p = b;
    trig_free(&r);
    return (b.bytes[BFIT_MEM_ACTIVATIONS] - a.bytes[BFIT_MEM_ACTIVATIONS]) / 2;
}

/* Per sequence, the activations kept at the turn from forward to backward
 * grow as a T + b T^2 with stored attention: the second difference over
 * T, 2T, 3T is 2 b T^2, b the attention matrices (layers x heads x 4 bytes).
 * Lean keeps no T^2 term beyond the workspace, so its per-sequence bytes
 * are linear in T. Checked on bert-base (12 layers, 12 heads), where the
 * kept activations are the peak. */
/* A classifier of token ids (one label a sequence) with bidirectional
 * attention: without padding every key is attended to (its lengths were
 * taken from its one label before 2026-12-05: each sequence was 1 token
 * long to the attention, or 0 for a label -1); a sequence's padding is its
 * trailing -1 ids (a text with a class), and -1 anywhere else is refused. */
static void test_classifier_attends_to_all(void **st)
{
    static const char *cls = "input tokens=16\n"
                             "embed 8 vocab=11 positions=16\n"
                             "residual {\n linear 24\n attention 2 causal=0\n linear 8\n}\n"
                             "flatten\n"
                             "linear 3\n";
    int32_t x[2 * 16] = {0}, y[2] = {2, 0};
    rig r;

    (void)st;
    rig_text(&r, cls);
    assert_int_equal(r.M->labels_per_sample, 1);
    assert_true(r.M->seq_lens);
    assert_int_equal(bfit_model_alloc_params(r.M, 1), BFIT_OK);
    assert_int_equal(bfit_model_init_params(r.M, 5), BFIT_OK);
    assert_int_equal(bfit_model_reserve(r.M, 2, 1), BFIT_OK);
    assert_int_equal(bfit_model_set_input(r.M, x, y, 2), BFIT_OK);
    assert_int_equal(r.M->stage_lens[0], 16);
    assert_int_equal(r.M->stage_lens[1], 16);
    /* a text with a class: its padding ids -1 say where it ends (the embedding is given id 0 there) */
    for (int i = 5; i < 16; i++)
        x[i] = -1;
    x[16 + 15] = -1;
    assert_int_equal(bfit_model_set_input(r.M, x, y, 2), BFIT_OK);
    assert_int_equal(r.M->stage_lens[0], 5);
    assert_int_equal(r.M->stage_lens[1], 15);
    /* -1 only after the last token, and a token at least */
    x[16 + 3] = -1;
    assert_int_equal(bfit_model_set_input(r.M, x, y, 2), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "token id -1 at position 3 of sample 1 is outside the vocabulary [0, 11) "
                                          "(-1 pads a sequence only after its last token)"));
    for (int i = 0; i < 16; i++)
        x[16 + i] = -1;
    assert_int_equal(bfit_model_set_input(r.M, x, y, 2), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "sample 1 has no token: its 16 ids are all -1 (padding)"));
    trig_free(&r);
}

static void test_plan_grows_with_seq(void **st)
{
    const int T = 128;
    double s1, s2, s3, l1, l2, l3, b = 12.0 * 12.0 * 4.0;
    (void)st;
    s1 = (double)per_seq("bert-base", T, 0, NULL);
    s2 = (double)per_seq("bert-base", 2 * T, 0, NULL);
    s3 = (double)per_seq("bert-base", 3 * T, 0, NULL);
    l1 = (double)per_seq("bert-base", T, 1, NULL);
    l2 = (double)per_seq("bert-base", 2 * T, 1, NULL);
    l3 = (double)per_seq("bert-base", 3 * T, 1, NULL);
    print_message("  bert-base activations per sequence: stored %.0f %.0f %.0f, lean %.0f %.0f %.0f bytes\n", s1,
                  s2, s3, l1, l2, l3);
    assert_true(fabs((s3 - 2 * s2 + s1) - 2 * b * T * T) < 64.0 * 200);
    assert_true(fabs(l3 - 2 * l2 + l1) < 64.0 * 200);
    /* at T the difference is the matrices less the log-sum-exps */
    assert_true(fabs((s1 - l1) - 12.0 * 12.0 * 4.0 * T * (T - 1)) < 64.0 * 200);
}

/* ---- the sequence length at run time ---- */

/* A model set to T plans, and computes, as one built at T: the same plan to
 * the byte, the same loss on the same tokens (the parameters do not depend
 * on T); going back to a longer T reuses the blocks held; a length past the
 * positions is refused and leaves the model working at its length. */
static void test_set_seq(void **st)
{
    rig a, b;
    bfit_step_plan pa, pb;
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_ADAMW);
    bfit_arena_stats s0, s1;
    double la, lb;
    (void)st;
    rig_new(&a, "gpt-nano", 0, 0);
    rig_new(&b, "gpt-nano", 77, 0);
    assert_int_equal(bfit_model_alloc_params(a.M, 1), BFIT_OK);
    assert_int_equal(bfit_model_alloc_params(b.M, 1), BFIT_OK);
    assert_int_equal(bfit_model_init_params(a.M, 9), BFIT_OK);
    assert_int_equal(bfit_model_init_params(b.M, 9), BFIT_OK);
    assert_int_equal(bfit_model_reserve(a.M, 3, 1), BFIT_OK); /* at 128 */
    bfit_arena_stats_get(a.arena, &s0);
    assert_int_equal(bfit_model_set_seq(a.M, 77), BFIT_OK);
    assert_int_equal(a.M->labels_per_sample, 77);
    assert_int_equal(bfit_plan_compute(a.M, &oc, 3, 1, &pa), BFIT_OK);
    assert_int_equal(bfit_plan_compute(b.M, &oc, 3, 1, &pb), BFIT_OK);
    assert_memory_equal(pa.bytes, pb.bytes, sizeof pa.bytes);
    assert_int_equal(bfit_model_reserve(a.M, 3, 1), BFIT_OK);
    assert_int_equal(bfit_model_reserve(b.M, 3, 1), BFIT_OK);
    bfit_arena_stats_get(a.arena, &s1);
    assert_int_equal(s1.nalloc, s0.nalloc); /* 128's blocks hold 77's step */
    fill_tokens(a.M, 3, 21);
    fill_tokens(b.M, 3, 21);
    la = model_loss(&a);
    lb = model_loss(&b);
    print_message("  gpt-nano set to 77 tokens: loss %.6f, built at 77: %.6f\n", la, lb);
    assert_true(la == lb);
    assert_int_equal(bfit_model_set_seq(a.M, 129), BFIT_EINVAL);
    assert_string_equal(bfit_errfield(), "seq");
    print_message("  %s\n", bfit_errmsg());
    assert_int_equal(a.M->input.d[0], 77);
    assert_int_equal(bfit_model_reserve(a.M, 3, 1), BFIT_OK);
    fill_tokens(a.M, 3, 21);
    assert_true(model_loss(&a) == lb);
    trig_free(&a);
    trig_free(&b);
}

/* ---- spec errors of token models ---- */

static void expect_error(const char *spec, const char *needle)
{
    bfit_graph_desc g;
    bfit_model *M = NULL;
    int rc = bfit_spec_parse(spec, strlen(spec), "m.cfg", &g);
    if (rc == BFIT_OK) {
        if ((rc = bfit_spec_check_shapes(&g)) == BFIT_OK)
            rc = bfit_model_new(&g, NULL, NULL, &M);
        bfit_graph_fini(&g); /* parsed: ours to free, whatever came next */
    }
    assert_int_not_equal(rc, BFIT_OK);
    assert_null(M);
    print_message("  %s\n", bfit_errmsg());
    if (!strstr(bfit_errmsg(), needle))
        fail_msg("expected \"%s\" in: %s", needle, bfit_errmsg());
}

static void test_spec_errors(void **st)
{
    (void)st;
    expect_error("input tokens=8\nlinear 4\n", "m.cfg:2:1: the model input is token ids: the first layer must be `embed`");
    expect_error("input 8\nembed 4 vocab=3\n", "m.cfg:2:1: embed 4: embed expects the token ids");
    expect_error("input tokens=8\nembed 4\n", "m.cfg:2:1: embed needs its vocabulary");
    expect_error("input tokens=8\nembed 4 vocab=3 positions=4\nlinear 3\n", "give positions=8 or more");
    expect_error("input tokens=8\nembed 4 vocab=3\nlinear 5 tie=1 bias=0\n", "m.cfg:3:1: tie=1");
    expect_error("input tokens=8\nembed 5 vocab=3\nattention 1\nlinear 3\n", "[T, 3C]");
    expect_error("input tokens=8\nembed 6 vocab=3\nattention 4\nlinear 3\n", "divides the width 2, got 4");
    expect_error("input tokens=x\n", "bad number `x`");
    expect_error("input tokens=8\nembed 6 vocab=3\nattention 2 causal=2\n", "causal must be 0 or 1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_preset_sizes),
        cmocka_unit_test(test_spec_file_is_preset),
        cmocka_unit_test(test_model_gradient),
        cmocka_unit_test(test_padded_is_unpadded),
        cmocka_unit_test(test_unscored_tokens_are_keys), cmocka_unit_test(test_gather_placement),
        cmocka_unit_test(test_attention_dropout_recomputed),
        cmocka_unit_test(test_measured_equals_planned),
        cmocka_unit_test(test_classifier_attends_to_all),
        cmocka_unit_test(test_plan_grows_with_seq),
        cmocka_unit_test(test_set_seq),
        cmocka_unit_test(test_spec_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
