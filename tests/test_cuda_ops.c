/* test_cuda_ops.c - the CUDA device against the CPU device.
 *
 * Every op kind runs on three devices from the same host data: the CPU
 * (the reference), a GPU with the "fastest" workspace policy and the same
 * GPU with "lean", whose convolutions run over their batch in chunks of 2
 * samples (conv_chunk; a tail where the batch is odd); outputs are
 * downloaded and compared. Then whole models:
 * the planned peak is the arena's measured peak on the GPU, an injected
 * allocation failure is recovered in training, and a few training steps of
 * models/mlp.cfg, models/cnn.cfg and models/gpt-nano.cfg end with the CPU's
 * weights, in f32 and (cnn, gpt-nano) bf16. The transformer ops (attention
 * in every variant, embeddings, the padded loss), casts and the 16-bit
 * paths of their own (GemmEx, cuDNN in bf16, 16-bit norms) are compared op
 * by op, and so are the ONNX imports' ops on rows, columns and channels
 * (concatenation, slices, transposition, broadcast add, channel gates,
 * PReLU), f32 and bf16, whose models (a gate and concatenations built
 * here, a ViT, a DenseNet block, MobileNetV3's block, PReLUs) are planned
 * and trained as the others. (Their kernels'
 * per-thread work is also checked on the host, GPU or not, by
 * tests/test_kernel_core.c.)
 *
 * Tolerances, and why. Elementwise ops with the same float operations
 * (add, scale, relu, dropout with the same mask function, the cross-entropy
 * gradient, SGD and AdamW, which the GPU computes with the CPU's exact
 * rounding) must be equal to the last bit (the sign of a zero aside); so
 * must copies (concatenation, slices, transposition: compared byte for
 * byte), one-product ops (broadcast add, the channel gate and its input
 * gradient) and the sums made in the CPU's order (a broadcast input's
 * gradient). The channel gate's scale gradient is a double sum in another
 * order: 1e-6 relative (f32), a bf16 ulp (bf16); so are PReLU's rows, then
 * added in the CPU's order into f32 slope gradients: 1e-6 (with hw == 1
 * PReLU sums in the CPU's order: equal to the bit). Sums in double (reduce
 * rows, the loss, norms) agree to double rounding. Sums
 * in float in another order (matmul, convolution, pooling gradients,
 * normalisations) differ by rounding: the bounds below are a few times the
 * f32 error of such sums at these sizes,
 * and 10x below what TF32 (10-bit mantissa products, which cuBLAS/cuDNN
 * must not use) would give, so a TF32 path fails.
 *
 * Without a GPU (no CUDA in the build, no driver, no device) the test says
 * why and exits 77, which CTest reports as skipped. BFIT_TEST_CUDA_ON_CPU=1
 * puts CPU devices in the GPU's places: a check of this test's own code
 * (everything then agrees trivially), not of the GPU. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "internal.h"

#include "base/rand.h"
#include "device/half.h"
#include "batch/plan.h"
#include "device/device.h"
#include "nn/model.h"
#include "nn/needs.h"
#include "nn/spec.h"
#include "nn/zoo.h"
#include "optim/optim.h"

#define SKIP 77
/* ONNX models of the fuzzer's seeds, from the source tree: a tiny ViT and
 * a DenseNet block */
#define VIT_TINY "fuzz/corpus/onnx/vit_tiny.onnx"
#define DENSE_BLOCK "fuzz/corpus/onnx/dense_block.onnx"
#define SE_MINI "tests/fixtures/se-mini.onnx" /* MobileNetV3's block: depthwise convolution, hardswish, a gate */
#define PRELU_MINI "tests/fixtures/prelu-mini.cfg" /* prelu per channel, shared, per feature */
#define PRELU_HEAD "fuzz/corpus/onnx/prelu_head.onnx" /* nn.PReLU after a Linear */
/* ConvNeXt's channels-last block and layer scale, a ShuffleNetV2 unit (tests/fixtures/cnx_shuffle_mini.py) */
#define CNX_SHUFFLE "fuzz/corpus/onnx/cnx_shuffle_mini.onnx"
/* self-attention written out as timm's Attention (tests/onnx/mhsa_refusals.py) */
#define MHSA_OK "fuzz/corpus/onnx/mhsa_ok.onnx"
/* nanoGPT's GPT from ONNX (tests/onnx/token_models.py): token and position tables, causal attention,
   the exact GELU and minGPT's NewGELU (the tanh form), a tied head */
#define GPT_OK "fuzz/corpus/onnx/gpt_ok.onnx"
/* a LLaMA-style model from ONNX (tests/onnx/llama_models.py): RMSNorm, SwiGLU's product, causal attention */
#define LLAMA_OK "fuzz/corpus/onnx/llama_ok.onnx"
/* Gemma's block from ONNX (tests/onnx/llama_models.py's gemma_text.onnx): (1 + w) RMSNorms, GeGLU, MQA */
#define GEMMA_OK "fuzz/corpus/onnx/gemma_ok.onnx"
/* the PyTorch Transformer tutorial's model, dropout 0.2 (tests/onnx/token_models.py): the embeddings scaled,
   a constant sinusoidal position table, dropout on the attention weights */
#define TUT_OK "tests/onnx/tut_text.onnx"
/* GPT-2 as transformers writes it (tests/onnx/token_models.py): Conv1D layers (weights [in, out]), dropout 0.1 */
#define HFGPT2_OK "tests/onnx/hfgpt2_text.onnx"
#define HFBERT_OK "tests/onnx/hfbert_text.onnx" /* bidirectional: the lengths from the labels matter */
#define HFBERT_GATHERED "@hfbert_gathered" /* HFBERT_OK with a masked LM's head at 5 rows (nn/head.c) */
/* group norms (gn_graph): groups of four channels, of one, all in one, a vector's */
#define GN_MINI "@gnorm"
enum { CPU = 0, GPU = 1, LEAN = 2, NS = 3 };
static const char *const side_name[NS] = {"cpu", "cuda (fastest)", "cuda (lean)"};
static bfit_device *dev[NS];
static bfit_arena *ar[NS];
static char models_dir[512], src_dir[512];

/* ---- devices -------------------------------------------------------------------- */

static int setup(void **st)
{
    bfit_device_cfg c = bfit_device_cfg_default();
    bfit_cuda_cfg g = bfit_cuda_cfg_default();
    const char *src = getenv("BFIT_SOURCE_DIR");
    (void)st;
    snprintf(models_dir, sizeof models_dir, "%s/models", src ? src : "..");
    snprintf(src_dir, sizeof src_dir, "%s", src ? src : "..");
    c.threads = 2;
    g.policy = BFIT_CUDA_FASTEST;
    g.conv_chunk = 0;
    if (bfit_device_cpu_new(&c, &dev[CPU]) != BFIT_OK)
        return -1;
    if (getenv("BFIT_TEST_CUDA_ON_CPU")) {
        if (bfit_device_cpu_new(&c, &dev[GPU]) != BFIT_OK || bfit_device_cpu_new(&c, &dev[LEAN]) != BFIT_OK)
            return -1;
    } else if (bfit_device_cuda_new_cfg(0, &g, &dev[GPU]) != BFIT_OK ||
               (g.policy = BFIT_CUDA_LEAN, g.conv_chunk = 2, bfit_device_cuda_new_cfg(0, &g, &dev[LEAN])) != BFIT_OK) {
        print_error("cuda: %s\n", bfit_errmsg());
        return -1;
    }
    for (int s = 0; s < NS; s++)
        if (!(ar[s] = bfit_device_arena_new(dev[s], 4ull << 30)))
            return -1;
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    for (int s = 0; s < NS; s++) {
        bfit_arena_free(ar[s]);
        bfit_device_free(dev[s]);
    }
    return 0;
}

/* ---- buffers on every device, from one host copy ---------------------------------- */

typedef struct dbuf {
    void *h;       /* host */
    void *d[NS];   /* each device's */
    size_t bytes;
} dbuf;

static dbuf db_new(size_t bytes)
{
    dbuf b = {calloc(1, bytes ? bytes : 1), {0}, bytes};
    assert_non_null(b.h);
    for (int s = 0; s < NS; s++)
        if (bfit_arena_alloc(ar[s], bytes ? bytes : 1, BFIT_MEM_OTHER, &b.d[s]) != BFIT_OK)
            fail_msg("%s: allocating %zu bytes: %s", side_name[s], bytes, bfit_errmsg());
    return b;
}

static void db_free(dbuf *b)
{
    for (int s = 0; s < NS; s++)
        bfit_arena_release(ar[s], b->d[s]);
    free(b->h);
    memset(b, 0, sizeof *b);
}

/* host -> every device */
static void db_up(const dbuf *b)
{
    for (int s = 0; s < NS; s++)
        if (bfit_device_upload(dev[s], b->d[s], b->h, b->bytes) != BFIT_OK)
            fail_msg("%s: upload: %s", side_name[s], bfit_errmsg());
}

static void db_down(const dbuf *b, int s, void *host)
{
    if (bfit_device_download(dev[s], host, b->d[s], b->bytes) != BFIT_OK)
        fail_msg("%s: download: %s", side_name[s], bfit_errmsg());
}

/* n floats uniform in [lo, hi) from seed, uploaded */
static dbuf db_rand(int64_t n, float lo, float hi, uint64_t seed)
{
    dbuf b = db_new((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        ((float *)b.h)[i] = lo + (hi - lo) * (float)bfit_rand_unit(seed, (uint64_t)i);
    db_up(&b);
    return b;
}

/* n int32 labels in [0, classes), uploaded */
static dbuf db_labels(int64_t n, int classes, uint64_t seed)
{
    dbuf b = db_new((size_t)n * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++)
        ((int32_t *)b.h)[i] = (int32_t)(bfit_rand_unit(seed, (uint64_t)i) * classes);
    db_up(&b);
    return b;
}

/* args[s].field = buf's pointer on device s, for every device (every
 * pointer field has the one representation) */
static void set_arg(bfit_op_args *a, size_t off, const dbuf *b)
{
    for (int s = 0; s < NS; s++)
        memcpy((char *)&a[s] + off, &b->d[s], sizeof(void *));
}
#define ARG(a, field, buf) set_arg((a), offsetof(bfit_op_args, field), &(buf))

/* Each device's float results against the CPU's: |gpu - cpu| <= atol +
 * rtol |cpu| everywhere (rtol = atol = 0: equal values; +0 and -0 count as
 * equal, as oneDNN's relu may give either for a negative input). */
static void cmp_f32(const dbuf *b, int64_t n, double rtol, double atol, const char *what)
{
    float *ref = malloc(b->bytes), *got = malloc(b->bytes);
    assert_true(ref && got);
    db_down(b, CPU, ref);
    for (int s = GPU; s < NS; s++) {
        double worst = 0;
        int64_t at = -1;
        db_down(b, s, got);
        for (int64_t i = 0; i < n; i++) {
            double d = fabs((double)got[i] - ref[i]), lim = atol + rtol * fabs(ref[i]);
            int same = d <= lim; /* false for a NaN on either side */
            if (!same && (at < 0 || d - lim > worst)) {
                worst = d - lim;
                at = i;
            }
        }
        if (at >= 0)
            fail_msg("%s on %s: element %lld is %.9g, the cpu's %.9g (|diff| %.3g, allowed %.3g + %.3g |cpu|)", what,
                     side_name[s], (long long)at, got[at], ref[at], fabs((double)got[at] - ref[at]), atol, rtol);
    }
    free(ref);
    free(got);
}

static void cmp_bytes(const dbuf *b, const char *what)
{
    unsigned char *ref = malloc(b->bytes), *got = malloc(b->bytes);
    assert_true(ref && got);
    db_down(b, CPU, ref);
    for (int s = GPU; s < NS; s++) {
        db_down(b, s, got);
        for (size_t i = 0; i < b->bytes; i++)
            if (got[i] != ref[i])
                fail_msg("%s on %s: byte %zu is %u, the cpu's %u", what, side_name[s], i, got[i], ref[i]);
    }
    free(ref);
    free(got);
}

/* f64 results: relative difference <= rel */
static void cmp_f64(const dbuf *b, int n, double rel, const char *what)
{
    double ref[8], got[8];
    assert_true(n <= 8 && b->bytes >= n * sizeof(double));
    db_down(b, CPU, ref);
    for (int s = GPU; s < NS; s++) {
        db_down(b, s, got);
        for (int i = 0; i < n; i++)
            if (!(fabs(got[i] - ref[i]) <= rel * fabs(ref[i])))
                fail_msg("%s on %s: value %d is %.17g, the cpu's %.17g", what, side_name[s], i, got[i], ref[i]);
    }
}

/* ---- ops on every device ------------------------------------------------------------- */

typedef struct pop {
    bfit_op *op[NS];
    void *ws[NS], *saved[NS];
} pop;

/* The op on every device, with its workspace (poisoned: an op may not
 * expect zeros there) and saved buffer from that device's arena. */
static void pop_new(pop *p, const bfit_op_desc *d)
{
    memset(p, 0, sizeof *p);
    for (int s = 0; s < NS; s++) {
        size_t ws, sv;
        if (bfit_op_new(dev[s], d, &p->op[s]) != BFIT_OK)
            fail_msg("%s: op kind %d: %s", side_name[s], (int)d->kind, bfit_errmsg());
        ws = bfit_op_workspace_bytes(p->op[s]);
        sv = bfit_op_saved_bytes(p->op[s]);
        if (ws && (bfit_arena_alloc(ar[s], ws, BFIT_MEM_WORKSPACE, &p->ws[s]) != BFIT_OK ||
                   bfit_device_fill(dev[s], p->ws[s], 0xFF, ws) != BFIT_OK))
            fail_msg("%s: workspace of %zu bytes: %s", side_name[s], ws, bfit_errmsg());
        if (sv && bfit_arena_alloc(ar[s], sv, BFIT_MEM_ACTIVATIONS, &p->saved[s]) != BFIT_OK)
            fail_msg("%s: saved buffer of %zu bytes: %s", side_name[s], sv, bfit_errmsg());
    }
}

/* Run with a[s] on device s: its workspace, and its own saved buffer unless
 * a[s].saved is given (a backward using its forward's). */
static void pop_run(pop *p, bfit_op_args *a)
{
    for (int s = 0; s < NS; s++) {
        a[s].workspace = p->ws[s];
        if (!a[s].saved)
            a[s].saved = p->saved[s];
        if (bfit_op_run(p->op[s], &a[s]) != BFIT_OK)
            fail_msg("%s: op kind %d: %s", side_name[s], (int)p->op[s]->desc.kind, bfit_errmsg());
        if (bfit_device_sync(dev[s]) != BFIT_OK)
            fail_msg("%s: after op kind %d: %s", side_name[s], (int)p->op[s]->desc.kind, bfit_errmsg());
    }
}

static void pop_free(pop *p)
{
    for (int s = 0; s < NS; s++) {
        bfit_arena_release(ar[s], p->ws[s]);
        bfit_arena_release(ar[s], p->saved[s]);
        bfit_op_free(p->op[s]);
    }
}

/* one op, run once with a, freed */
static void run_op(const bfit_op_desc *d, bfit_op_args *a)
{
    pop p;
    pop_new(&p, d);
    pop_run(&p, a);
    pop_free(&p);
}

/* ---- matmul ---------------------------------------------------------------------------- */

/* Every transposition, bias and accumulation. Entries in [-1, 1), K = 53:
 * f32 sums in another order differ by ~1e-6, TF32 by ~1e-3. */
static void test_matmul(void **st)
{
    const int64_t M = 37, N = 29, K = 53;
    (void)st;
    for (int c = 0; c < 16; c++) {
        bfit_op_desc d = {.kind = BFIT_OP_MATMUL, .dtype = BFIT_F32, .accumulate = c & 1};
        bfit_op_args a[NS];
        dbuf x = db_rand(M * K, -1, 1, 1 + c), w = db_rand(K * N, -1, 1, 2 + c), b = db_rand(N, -1, 1, 3 + c);
        dbuf y = db_rand(M * N, -1, 1, 4 + c); /* the accumulated-into values */
        char what[64];
        d.u.mm = (typeof(d.u.mm)){M, N, K, (c >> 1) & 1, (c >> 2) & 1, (c >> 3) & 1, 0};
        memset(a, 0, sizeof a);
        ARG(a, src, x);
        ARG(a, weights, w);
        ARG(a, bias, b);
        ARG(a, dst, y);
        run_op(&d, a);
        snprintf(what, sizeof what, "matmul (acc %d, trans src %d weights %d, bias %d)", c & 1, (c >> 1) & 1,
                 (c >> 2) & 1, (c >> 3) & 1);
        cmp_f32(&y, M * N, 1e-4, 1e-4, what);
        db_free(&x);
        db_free(&w);
        db_free(&b);
        db_free(&y);
    }
}

/* ---- convolution ----------------------------------------------------------------------- */

typedef struct conv_shape {
    int64_t n, ic, ih, iw, oc, kh, kw, sh, sw, ph, pw;
    int groups; /* 1: dense */
} conv_shape;

static bfit_op_desc conv_desc(bfit_op_kind kind, const conv_shape *c, int bias, int acc)
{
    bfit_op_desc d = {.kind = kind, .dtype = BFIT_F32, .accumulate = acc};
    d.u.conv = (typeof(d.u.conv)){c->n,  c->ic, c->ih, c->iw, c->oc, (c->ih + 2 * c->ph - c->kh) / c->sh + 1,
                                  (c->iw + 2 * c->pw - c->kw) / c->sw + 1, c->kh, c->kw, c->sh, c->sw, c->ph, c->pw,
                                  bias, c->groups > 1 ? c->groups : 1, 0, 0};
    return d;
}

/* Forward (with and without bias), backward data, backward weights
 * accumulating with the bias gradient. The sums have up to a few hundred
 * terms; cuDNN may pick FFT or Winograd algorithms, whose rounding differs
 * more from a direct sum's (~1e-5 of the output's scale) than a reordering
 * does, still far under TF32's ~1e-3. The lean policy's workspace is never
 * larger than the fastest's. */
static void conv_case(const conv_shape *c)
{
    bfit_op_desc f = conv_desc(BFIT_OP_CONV_FWD, c, 1, 0);
    int64_t xs = c->n * c->ic * c->ih * c->iw, ws = c->oc * (c->ic / (c->groups > 1 ? c->groups : 1)) * c->kh * c->kw;
    int64_t ys = c->n * c->oc * f.u.conv.oh * f.u.conv.ow;
    dbuf x = db_rand(xs, -1, 1, 11), w = db_rand(ws, -0.5f, 0.5f, 12), b = db_rand(c->oc, -1, 1, 13);
    dbuf y = db_new((size_t)ys * 4), dy = db_rand(ys, -1, 1, 14), dx = db_new((size_t)xs * 4);
    dbuf dw = db_rand(ws, -1, 1, 15), db = db_rand(c->oc, -1, 1, 16);
    const bfit_op_kind kinds[] = {BFIT_OP_CONV_FWD, BFIT_OP_CONV_BWD_DATA, BFIT_OP_CONV_BWD_WEIGHTS};
    bfit_op_args a[NS];

    print_message("  conv n %lld %lldx%lldx%lld -> %lld k %lldx%lld s %lld groups %d\n", (long long)c->n,
                  (long long)c->ic, (long long)c->ih, (long long)c->iw, (long long)c->oc, (long long)c->kh,
                  (long long)c->kw, (long long)c->sh, c->groups > 1 ? c->groups : 1);
    for (int bias = 0; bias < 2; bias++) {
        f = conv_desc(BFIT_OP_CONV_FWD, c, bias, 0);
        memset(a, 0, sizeof a);
        ARG(a, src, x);
        ARG(a, weights, w);
        ARG(a, bias, b);
        ARG(a, dst, y);
        run_op(&f, a);
        cmp_f32(&y, ys, 2e-4, 2e-4, bias ? "conv forward with bias" : "conv forward");
    }
    f = conv_desc(BFIT_OP_CONV_BWD_DATA, c, 1, 0);
    memset(a, 0, sizeof a);
    ARG(a, diff_dst, dy);
    ARG(a, weights, w);
    ARG(a, diff_src, dx);
    run_op(&f, a);
    cmp_f32(&dx, xs, 2e-4, 2e-4, "conv backward data");
    f = conv_desc(BFIT_OP_CONV_BWD_WEIGHTS, c, 1, 1);
    memset(a, 0, sizeof a);
    ARG(a, src, x);
    ARG(a, diff_dst, dy);
    ARG(a, diff_weights, dw);
    ARG(a, diff_bias, db);
    run_op(&f, a);
    cmp_f32(&dw, ws, 2e-4, 2e-4, "conv backward weights (accumulating)");
    cmp_f32(&db, c->oc, 2e-4, 2e-4, "conv backward bias (accumulating)");
    for (int k = 0; k < 3; k++) {
        bfit_op *fast, *lean;
        f = conv_desc(kinds[k], c, 1, k == 2);
        assert_int_equal(bfit_op_new(dev[GPU], &f, &fast), BFIT_OK);
        assert_int_equal(bfit_op_new(dev[LEAN], &f, &lean), BFIT_OK);
        print_message("  conv kind %d n %lld %lldx%lldx%lld k %lldx%lld: workspace fastest %zu, lean %zu\n",
                      (int)kinds[k], (long long)c->n, (long long)c->ic, (long long)c->ih, (long long)c->iw,
                      (long long)c->kh, (long long)c->kw, bfit_op_workspace_bytes(fast),
                      bfit_op_workspace_bytes(lean));
        assert_true(bfit_op_workspace_bytes(lean) <= bfit_op_workspace_bytes(fast));
        bfit_op_free(fast);
        bfit_op_free(lean);
    }
    db_free(&x), db_free(&w), db_free(&b), db_free(&y), db_free(&dy), db_free(&dx), db_free(&dw), db_free(&db);
}

/* What ResNet-50's stem asks of the workspace as the batch grows, on the
 * fastest device (chunked where a chunk's workspace is smaller): printed,
 * for the record of a GPU run. */
static void report_stem_ws(void)
{
    const conv_shape c = {1, 3, 224, 224, 64, 7, 7, 2, 2, 3, 3, 1};
    const bfit_op_kind kinds[] = {BFIT_OP_CONV_FWD, BFIT_OP_CONV_BWD_DATA, BFIT_OP_CONV_BWD_WEIGHTS};
    const int64_t ns[] = {1, 32, 256};
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < 3; k++) {
            char line[160];
            int len = snprintf(line, sizeof line, "  stem %s kind %d, workspace per sample:", t ? "bf16" : "f32",
                               (int)kinds[k]);
            for (int i = 0; i < 3; i++) {
                conv_shape at = c;
                bfit_op *op;
                bfit_op_desc d;
                at.n = ns[i];
                d = conv_desc(kinds[k], &at, 0, 0);
                d.dtype = t ? BFIT_BF16 : BFIT_F32;
                assert_int_equal(bfit_op_new(dev[GPU], &d, &op), BFIT_OK);
                len += snprintf(line + len, sizeof line - (size_t)len, " n %lld %.3f MiB", (long long)at.n,
                                (double)bfit_op_workspace_bytes(op) / at.n / 1048576.0);
                bfit_op_free(op);
            }
            print_message("%s\n", line);
        }
}

static void test_conv(void **st)
{
    const conv_shape shapes[] = {
        {3, 5, 11, 9, 7, 3, 2, 2, 1, 1, 0, 1},    /* odd sizes, strides and padding */
        {2, 16, 12, 12, 24, 3, 3, 1, 1, 1, 1, 1}, /* a usual 3x3 "same" layer */
        {4, 8, 7, 7, 16, 1, 1, 1, 1, 0, 0, 1},    /* 1x1 */
        {2, 3, 32, 32, 8, 5, 5, 2, 2, 2, 2, 1},   /* a stem */
        /* grouped: depthwise (MobileNet's, EfficientNet's), strided, 5x5, with a channel multiplier, and 3 groups */
        {2, 16, 12, 12, 16, 3, 3, 1, 1, 1, 1, 16},
        {3, 24, 9, 9, 24, 3, 3, 2, 2, 1, 1, 24},
        {2, 8, 14, 14, 8, 5, 5, 1, 1, 2, 2, 8},
        {2, 4, 8, 8, 8, 3, 3, 1, 1, 1, 1, 4},
        {2, 12, 10, 10, 18, 3, 3, 1, 1, 1, 1, 3},
    };
    (void)st;
    for (unsigned i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        conv_case(&shapes[i]);
    report_stem_ws();
}

/* ---- pooling ------------------------------------------------------------------------------ */

/* ceil: the output size of PyTorch's ceil_mode (max pools) */
static bfit_op_desc pool_desc(bfit_op_kind kind, int64_t n, int64_t c, int64_t ih, int64_t iw, int64_t k, int64_t s,
                              int64_t p, int max, int training, int ceil)
{
    bfit_op_desc d = {.kind = kind, .dtype = BFIT_F32};
    d.u.pool = (typeof(d.u.pool)){n, c, ih, iw, bfit_pool_out(ih, k, s, p, ceil), bfit_pool_out(iw, k, s, p, ceil),
                                  k, k, s, s, p, p, max, training, 0, 0};
    return d;
}

/* Forward values are the window's maximum (the same element: inputs have no
 * ties) or a mean of at most 9 terms; backward sums at most 4 overlapping
 * windows' gradients, in another order than oneDNN. The saved indices are
 * each device's own format and are not compared. */
static void pool_case(int64_t ih, int64_t iw, int64_t k, int64_t s, int64_t p, int max, int ceil)
{
    const int64_t n = 2, c = 3;
    bfit_op_desc f = pool_desc(BFIT_OP_POOL_FWD, n, c, ih, iw, k, s, p, max, 1, ceil);
    bfit_op_desc b = pool_desc(BFIT_OP_POOL_BWD, n, c, ih, iw, k, s, p, max, 1, ceil);
    bfit_op_desc e = pool_desc(BFIT_OP_POOL_FWD, n, c, ih, iw, k, s, p, max, 0, ceil);
    int64_t xs = n * c * ih * iw, ys = n * c * f.u.pool.oh * f.u.pool.ow;
    dbuf x = db_rand(xs, -1, 1, 21), y = db_new((size_t)ys * 4), dy = db_rand(ys, -1, 1, 22);
    dbuf dx = db_new((size_t)xs * 4);
    bfit_op_args a[NS];
    pop pf, pb;

    pop_new(&pf, &f);
    memset(a, 0, sizeof a);
    ARG(a, src, x);
    ARG(a, dst, y);
    pop_run(&pf, a);
    cmp_f32(&y, ys, max ? 0 : 1e-6, max ? 0 : 1e-6, max ? "max pool forward" : "avg pool forward");
    pop_new(&pb, &b);
    memset(a, 0, sizeof a);
    ARG(a, diff_dst, dy);
    ARG(a, diff_src, dx);
    for (int sd = 0; sd < NS; sd++)
        a[sd].saved = pf.saved[sd]; /* the forward's indices */
    pop_run(&pb, a);
    cmp_f32(&dx, xs, 1e-6, 1e-6, max ? "max pool backward" : "avg pool backward");
    pop_free(&pb);
    pop_free(&pf);
    /* eval forward: no indices kept */
    memset(a, 0, sizeof a);
    ARG(a, src, x);
    ARG(a, dst, y);
    run_op(&e, a);
    cmp_f32(&y, ys, max ? 0 : 1e-6, max ? 0 : 1e-6, "pool forward (eval)");
    db_free(&x), db_free(&y), db_free(&dy), db_free(&dx);
}

static void test_pool(void **st)
{
    (void)st;
    for (int max = 0; max < 2; max++) {
        pool_case(9, 8, 3, 2, 1, max, 0); /* overlapping windows with padding */
        pool_case(8, 8, 2, 2, 0, max, 0); /* the usual 2x2 */
        pool_case(7, 5, 5, 1, 0, max, 0); /* stride 1, heavy overlap */
    }
    pool_case(7, 7, 7, 1, 0, 0, 0); /* global average pooling */
    /* ceil_mode max pools, the last windows past the edge: 7x9 -> 4x5 (floor 3x4), 8x8 -> 5x5 padded (4x4),
     * and a 16x16 window (oneDNN's on the cpu) 27x27 -> 3x3 (2x2) */
    pool_case(7, 9, 2, 2, 0, 1, 1);
    pool_case(8, 8, 3, 2, 1, 1, 1);
    pool_case(27, 27, 16, 10, 0, 1, 1);
}

/* ---- batch and layer normalisation ---------------------------------------------------------- */

/* Backward from the output needs no workspace per sample on any device:
 * the op's workspace at 64 times the batch is the same. */
static void check_bn_ws(const bfit_op_desc *d)
{
    bfit_op_desc big = *d;
    big.u.bnorm.n *= 64;
    for (int s = 0; s < NS; s++) {
        bfit_op *o, *ob;
        assert_int_equal(bfit_op_new(dev[s], d, &o), BFIT_OK);
        assert_int_equal(bfit_op_new(dev[s], &big, &ob), BFIT_OK);
        if (bfit_op_workspace_bytes(o) != bfit_op_workspace_bytes(ob))
            fail_msg("%s: batch norm backward from the output: workspace %zu bytes at n %lld, %zu at n %lld",
                     side_name[s], bfit_op_workspace_bytes(o), (long long)d->u.bnorm.n, bfit_op_workspace_bytes(ob),
                     (long long)big.u.bnorm.n);
        bfit_op_free(o);
        bfit_op_free(ob);
    }
}

/* Inputs with a mean far from 0 (variance computed well); outputs of order
 * 1. Statistics are double sums on the GPU, f32 in oneDNN: 1e-5. The
 * backward's sums over 120 values per channel: 1e-4. */
static void test_bnorm(void **st)
{
    const int64_t n = 4, c = 3, h = 5, w = 6, xs = n * c * h * w;
    bfit_op_desc d = {.kind = BFIT_OP_BNORM_FWD, .dtype = BFIT_F32};
    dbuf x = db_rand(xs, 1, 3, 31), y = db_new((size_t)xs * 4), g = db_rand(c, 0.5f, 1.5f, 32);
    dbuf sh = db_rand(c, -1, 1, 33), mean = db_new((size_t)c * 4), var = db_new((size_t)c * 4);
    dbuf rm = db_rand(c, -0.5f, 0.5f, 34), rv = db_rand(c, 0.5f, 2, 35), dy = db_rand(xs, -1, 1, 36);
    dbuf dx = db_new((size_t)xs * 4), dg = db_rand(c, -1, 1, 37), dsh = db_rand(c, -1, 1, 38);
    bfit_op_args a[NS];
    (void)st;

    d.u.bnorm = (typeof(d.u.bnorm)){.n = n, .c = c, .h = h, .w = w, .eps = 1e-5f, .momentum = 0.1f, .training = 1};
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, dst, y), ARG(a, scale, g), ARG(a, shift, sh), ARG(a, mean, mean), ARG(a, var, var);
    ARG(a, rmean, rm), ARG(a, rvar, rv);
    run_op(&d, a);
    cmp_f32(&y, xs, 1e-5, 1e-5, "batch norm forward (training)");
    cmp_f32(&mean, c, 1e-5, 1e-6, "batch norm mean");
    cmp_f32(&var, c, 1e-5, 1e-6, "batch norm variance");
    cmp_f32(&rm, c, 1e-5, 1e-6, "batch norm running mean");
    cmp_f32(&rv, c, 1e-5, 1e-6, "batch norm running variance");

    d.kind = BFIT_OP_BNORM_BWD;
    d.accumulate = 1;
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, diff_dst, dy), ARG(a, scale, g), ARG(a, mean, mean), ARG(a, var, var);
    ARG(a, diff_src, dx), ARG(a, diff_scale, dg), ARG(a, diff_shift, dsh);
    run_op(&d, a);
    cmp_f32(&dx, xs, 1e-4, 1e-4, "batch norm backward data");
    cmp_f32(&dg, c, 1e-4, 1e-4, "batch norm backward scale (accumulating)");
    cmp_f32(&dsh, c, 1e-4, 1e-4, "batch norm backward shift (accumulating)");
    /* no diff_src: the parameter gradients only */
    for (int s = 0; s < NS; s++)
        a[s].diff_src = NULL;
    run_op(&d, a);
    cmp_f32(&dg, c, 1e-4, 1e-4, "batch norm parameter gradients only");
    cmp_f32(&dsh, c, 1e-4, 1e-4, "batch norm shift gradient only");
    /* from the forward's output (in-place activated batch norm): both
     * devices take x^ from the output, with no workspace per sample */
    d.u.bnorm.use_dst = 1;
    memset(a, 0, sizeof a);
    ARG(a, src, y), ARG(a, diff_dst, dy), ARG(a, scale, g), ARG(a, shift, sh), ARG(a, mean, mean);
    ARG(a, var, var), ARG(a, diff_src, dx), ARG(a, diff_scale, dg), ARG(a, diff_shift, dsh);
    run_op(&d, a);
    cmp_f32(&dx, xs, 1e-4, 1e-4, "batch norm backward data from the output");
    cmp_f32(&dg, c, 1e-4, 1e-4, "batch norm backward scale from the output");
    cmp_f32(&dsh, c, 1e-4, 1e-4, "batch norm backward shift from the output");
    check_bn_ws(&d);
    for (int s = 0; s < NS; s++)
        a[s].diff_src = NULL;
    run_op(&d, a);
    cmp_f32(&dg, c, 1e-4, 1e-4, "batch norm parameter gradients only, from the output");
    cmp_f32(&dsh, c, 1e-4, 1e-4, "batch norm shift gradient only, from the output");
    d.u.bnorm.use_dst = 0;

    /* eval: the given statistics (the running ones) */
    d = (bfit_op_desc){.kind = BFIT_OP_BNORM_FWD, .dtype = BFIT_F32};
    d.u.bnorm = (typeof(d.u.bnorm)){.n = n, .c = c, .h = h, .w = w, .eps = 1e-5f, .momentum = 0.1f, .training = 0};
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, dst, y), ARG(a, scale, g), ARG(a, shift, sh), ARG(a, mean, rm), ARG(a, var, rv);
    run_op(&d, a);
    cmp_f32(&y, xs, 1e-5, 1e-5, "batch norm forward (eval)");
    db_free(&x), db_free(&y), db_free(&g), db_free(&sh), db_free(&mean), db_free(&var), db_free(&rm);
    db_free(&rv), db_free(&dy), db_free(&dx), db_free(&dg), db_free(&dsh);
}

/* n values of dtype t uniform in [lo, hi) from seed, uploaded */
static dbuf db_rand_t(bfit_dtype t, int64_t n, float lo, float hi, uint64_t seed)
{
    dbuf b = db_new((size_t)n * (t == BFIT_F32 ? 4 : 2));
    for (int64_t i = 0; i < n; i++)
        bfit_st(b.h, t, i, lo + (hi - lo) * (float)bfit_rand_unit(seed, (uint64_t)i));
    db_up(&b);
    return b;
}

/* cmp_f32 for data of dtype t (values converted to f32 on the host) */
static void cmp_t(bfit_dtype t, const dbuf *b, int64_t n, double rtol, double atol, const char *what)
{
    void *ref = malloc(b->bytes), *got = malloc(b->bytes);
    assert_true(ref && got);
    db_down(b, CPU, ref);
    for (int s = GPU; s < NS; s++) {
        db_down(b, s, got);
        for (int64_t i = 0; i < n; i++) {
            double r = bfit_ld(ref, t, i), g = bfit_ld(got, t, i);
            if (!(fabs(g - r) <= atol + rtol * fabs(r)))
                fail_msg("%s (%s) on %s: element %lld is %.9g, the cpu's %.9g", what, bfit_dtype_name(t),
                         side_name[s], (long long)i, g, r);
        }
    }
    free(ref);
    free(got);
}

/* one bf16 ulp relative (2^-8) and a little: both round an f32 value once,
 * which another summation order may put on the other side of a midpoint */
#define BF_REL (1.0 / 64)
#define BF_ABS 2e-3

/* rows x cols with cols past one block's threads and rows past one chunk
 * of the parameter-gradient sums; backward also in place (dx over dy, as
 * the layer does for a first layer). noshift: no shift (LayerNorm(bias=
 * False)): none given, none written (its gradient buffer keeps its values).
 * rms (noshift too): RMSNorm, in f32 or bf16 (t); goff added to its scale
 * (Gemma's 1 + w). */
static void lnorm_case(bfit_dtype t, int64_t rows, int64_t cols, int noshift, int rms, float goff)
{
    bfit_op_desc d = {.kind = BFIT_OP_LNORM_FWD, .dtype = t, .accumulate = 1};
    int64_t n = rows * cols;
    size_t es = bfit_dtype_size(t);
    double rel = t == BFIT_F32 ? 1e-4 : BF_REL, abs = t == BFIT_F32 ? 1e-4 : BF_ABS;
    dbuf x = db_rand_t(t, n, -2, 3, 41), y = db_new((size_t)n * es), g = db_rand(cols, 0.5f, 1.5f, 42);
    dbuf sh = db_rand(cols, -1, 1, 43), mean = db_new((size_t)rows * 4), var = db_new((size_t)rows * 4);
    dbuf dy = db_rand_t(t, n, -1, 1, 44), dx = db_new((size_t)n * es), dg = db_rand(cols, -1, 1, 45);
    dbuf dsh = db_rand(cols, -1, 1, 46);
    bfit_op_args a[NS];

    d.u.lnorm = (typeof(d.u.lnorm)){rows, cols, 1e-5f, noshift, rms, goff};
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, dst, y), ARG(a, scale, g), ARG(a, mean, mean), ARG(a, var, var);
    if (!noshift)
        ARG(a, shift, sh);
    run_op(&d, a);
    cmp_t(t, &y, n, t == BFIT_F32 ? 1e-5 : BF_REL, t == BFIT_F32 ? 1e-5 : BF_ABS, "layer norm forward");
    cmp_f32(&mean, rows, 1e-5, 1e-6, "layer norm mean");
    cmp_f32(&var, rows, 1e-5, 1e-6, "layer norm variance");
    d.kind = BFIT_OP_LNORM_BWD;
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, mean, mean), ARG(a, var, var), ARG(a, diff_dst, dy), ARG(a, scale, g);
    ARG(a, diff_src, dx), ARG(a, diff_scale, dg);
    if (!noshift)
        ARG(a, diff_shift, dsh);
    run_op(&d, a);
    cmp_t(t, &dx, n, rel, abs, "layer norm backward data");
    cmp_f32(&dg, cols, t == BFIT_F32 ? 1e-4 : 1e-3, t == BFIT_F32 ? 1e-4 : 1e-3,
            "layer norm backward scale (accumulating)");
    cmp_f32(&dsh, cols, noshift ? 0 : 1e-4, noshift ? 0 : 1e-4, "layer norm backward shift (accumulating)");
    ARG(a, diff_src, dy); /* in place */
    run_op(&d, a);
    cmp_t(t, &dy, n, rel, abs, "layer norm backward in place");
    db_free(&x), db_free(&y), db_free(&g), db_free(&sh), db_free(&mean), db_free(&var), db_free(&dy);
    db_free(&dx), db_free(&dg), db_free(&dsh);
}

static void test_lnorm(void **st)
{
    (void)st;
    lnorm_case(BFIT_F32, 37, 300, 0, 0, 0);
    lnorm_case(BFIT_F32, 600, 50, 0, 0, 0);
    lnorm_case(BFIT_F32, 37, 300, 1, 0, 0);
    lnorm_case(BFIT_F32, 37, 300, 1, 1, 0); /* RMSNorm */
    lnorm_case(BFIT_BF16, 37, 300, 1, 1, 0);
    lnorm_case(BFIT_F32, 37, 300, 1, 1, 1); /* Gemma's: 1 + w */
    lnorm_case(BFIT_BF16, 37, 300, 1, 1, 1);
}

/* ---- elementwise -------------------------------------------------------------------------------- */

/* relu, clip and leaky relu are exact; the others' erf/tanh/exp are
 * different libm codes (CUDA's and oneDNN's approximations), a few ulp
 * apart. lo, hi: clip's bounds, hardsigmoid's alpha and beta, leaky relu's
 * slope, elu's alpha, softplus's beta and threshold (crossed by [-4, 4]),
 * selu's alpha and scale (PyTorch's), celu's alpha. */
static void test_eltwise(void **st)
{
    const int64_t n = 10007;
    (void)st;
    for (int alg = BFIT_ELT_RELU; alg <= BFIT_ELT_CELU; alg++) {
        bfit_op_desc d = {.kind = BFIT_OP_ELTWISE_FWD, .dtype = BFIT_F32};
        dbuf x = db_rand(n, -4, 4, 51 + alg), y = db_new(n * 4), dy = db_rand(n, -1, 1, 54), dx = db_new(n * 4);
        double tol = alg == BFIT_ELT_RELU || alg == BFIT_ELT_CLIP || alg == BFIT_ELT_LEAKYRELU ? 0 : 1e-5;
        float lo = alg == BFIT_ELT_HARDSIGMOID ? 0.25f
                   : alg == BFIT_ELT_ELU       ? 0.75f
                   : alg == BFIT_ELT_SOFTPLUS  ? 2.0f
                   : alg == BFIT_ELT_SELU      ? BFIT_SELU_ALPHA
                                               : -0.5f,
              hi = alg == BFIT_ELT_HARDSIGMOID ? 0.375f : alg == BFIT_ELT_SELU ? BFIT_SELU_SCALE : 2.0f;
        bfit_op_args a[NS];
        d.u.elt = (typeof(d.u.elt)){.n = n, .alg = (bfit_eltwise_alg)alg, .lo = lo, .hi = hi};
        memset(a, 0, sizeof a);
        ARG(a, src, x), ARG(a, dst, y);
        run_op(&d, a);
        cmp_f32(&y, n, tol, tol, "eltwise forward");
        d.kind = BFIT_OP_ELTWISE_BWD;
        memset(a, 0, sizeof a);
        ARG(a, src, x), ARG(a, diff_dst, dy), ARG(a, diff_src, dx);
        run_op(&d, a);
        cmp_f32(&dx, n, tol, tol, "eltwise backward");
        db_free(&x), db_free(&y), db_free(&dy), db_free(&dx);
    }
}

/* Double sums rounded once to float on both: equal but for a double
 * rounding now and then. Three chunks of rows on the GPU. */
static void test_reduce_rows(void **st)
{
    const int64_t M = 700, N = 45;
    (void)st;
    for (int acc = 0; acc < 2; acc++) {
        bfit_op_desc d = {.kind = BFIT_OP_REDUCE_ROWS, .dtype = BFIT_F32, .accumulate = acc};
        dbuf x = db_rand(M * N, -1, 1, 61), y = db_rand(N, -1, 1, 62);
        bfit_op_args a[NS];
        d.u.reduce = (typeof(d.u.reduce)){M, N};
        memset(a, 0, sizeof a);
        ARG(a, src, x), ARG(a, dst, y);
        run_op(&d, a);
        cmp_f32(&y, N, 1e-6, 1e-6, acc ? "reduce rows (accumulating)" : "reduce rows");
        db_free(&x), db_free(&y);
    }
}

static void test_add_scale(void **st)
{
    const int64_t n = 4099;
    dbuf x = db_rand(n, -1, 1, 71), z = db_rand(n, -1, 1, 72), y = db_rand(n, -1, 1, 73);
    bfit_op_desc d = {.kind = BFIT_OP_ADD, .dtype = BFIT_F32};
    bfit_op_args a[NS];
    (void)st;
    d.u.add.n = n;
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, src2, z), ARG(a, dst, y);
    run_op(&d, a);
    cmp_f32(&y, n, 0, 0, "add");
    d.accumulate = 1;
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, dst, y);
    run_op(&d, a);
    cmp_f32(&y, n, 0, 0, "add (accumulating)");
    d = (bfit_op_desc){.kind = BFIT_OP_SCALE, .dtype = BFIT_F32};
    d.u.scale.n = n;
    memset(a, 0, sizeof a);
    ARG(a, dst, y);
    for (int s = 0; s < NS; s++)
        a[s].alpha = 0.3f;
    run_op(&d, a);
    cmp_f32(&y, n, 0, 0, "scale");
    db_free(&x), db_free(&z), db_free(&y);
}

/* The same mask function of (seed, index): the same elements dropped, the
 * same bits saved (every byte of the words, the bits past n zero on both),
 * the same products. n: a last 64-bit word half used, and more than half. */
static void check_dropout(int64_t n)
{
    bfit_op_desc d = {.kind = BFIT_OP_DROPOUT_FWD, .dtype = BFIT_F32};
    dbuf x = db_rand(n, -1, 1, 81), y = db_new(n * 4), dy = db_rand(n, -1, 1, 82), dx = db_new(n * 4);
    bfit_op_args a[NS];
    pop pf;
    d.u.drop = (typeof(d.u.drop)){n, 0.3f};
    pop_new(&pf, &d);
    assert_int_equal(bfit_op_saved_bytes(pf.op[GPU]), (size_t)(n + 63) / 64 * 8);
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, dst, y);
    for (int s = 0; s < NS; s++)
        a[s].seed = 12345;
    pop_run(&pf, a);
    cmp_f32(&y, n, 0, 0, "dropout forward");
    {
        /* the masks, as bytes (downloaded through a dbuf view of saved) */
        size_t mb = (size_t)(n + 63) / 64 * 8;
        dbuf m = {malloc(mb), {pf.saved[0], pf.saved[1], pf.saved[2]}, mb};
        cmp_bytes(&m, "dropout mask");
        free(m.h);
    }
    d.kind = BFIT_OP_DROPOUT_BWD;
    memset(a, 0, sizeof a);
    ARG(a, diff_dst, dy), ARG(a, diff_src, dx);
    for (int s = 0; s < NS; s++)
        a[s].saved = pf.saved[s];
    run_op(&d, a);
    cmp_f32(&dx, n, 0, 0, "dropout backward");
    pop_free(&pf);
    db_free(&x), db_free(&y), db_free(&dy), db_free(&dx);
}

static void test_dropout(void **st)
{
    (void)st;
    check_dropout(10001); /* 10001 % 64 = 17 */
    check_dropout(10033); /* 10033 % 64 = 49 */
}

/* relu's lean variants: backward from the output, and from sign bits only
 * (the bits compared byte for byte, as dropout's mask). */
static void test_relu_lean(void **st)
{
    const int64_t n = 10001;
    dbuf x = db_rand(n, -4, 4, 91), y = db_new(n * 4), dy = db_rand(n, -1, 1, 92), dx = db_new(n * 4);
    bfit_op_desc d = {.kind = BFIT_OP_ELTWISE_FWD, .dtype = BFIT_F32};
    bfit_op_args a[NS];
    pop pf;
    (void)st;
    /* from the output */
    d.u.elt = (typeof(d.u.elt)){.n = n, .alg = BFIT_ELT_RELU, .use_dst = 1};
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, dst, y);
    run_op(&d, a);
    cmp_f32(&y, n, 0, 0, "relu forward (use dst)");
    d.kind = BFIT_OP_ELTWISE_BWD;
    memset(a, 0, sizeof a);
    ARG(a, src, y), ARG(a, diff_dst, dy), ARG(a, diff_src, dx);
    run_op(&d, a);
    cmp_f32(&dx, n, 0, 0, "relu backward from the output");
    /* from the bits */
    d = (bfit_op_desc){.kind = BFIT_OP_ELTWISE_FWD, .dtype = BFIT_F32};
    d.u.elt = (typeof(d.u.elt)){.n = n, .alg = BFIT_ELT_RELU, .bits = 1};
    pop_new(&pf, &d);
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, dst, y);
    pop_run(&pf, a);
    cmp_f32(&y, n, 0, 0, "relu forward (bits)");
    {
        size_t mb = (size_t)(n + 63) / 64 * 8;
        dbuf m = {malloc(mb), {pf.saved[0], pf.saved[1], pf.saved[2]}, mb};
        cmp_bytes(&m, "relu sign bits");
        free(m.h);
    }
    d.kind = BFIT_OP_ELTWISE_BWD;
    memset(a, 0, sizeof a);
    ARG(a, diff_dst, dy), ARG(a, diff_src, dx);
    for (int s = 0; s < NS; s++)
        a[s].saved = pf.saved[s];
    run_op(&d, a);
    cmp_f32(&dx, n, 0, 0, "relu backward from the bits");
    pop_free(&pf);
    db_free(&x), db_free(&y), db_free(&dy), db_free(&dx);
}

/* ---- cross-entropy ---------------------------------------------------------------------------- */

/* Probabilities from exp in double on both (1e-6); the loss sums of double
 * row losses in another order (1e-9 relative), the hits exactly. Row 0 has
 * a tie for the maximum with the label on the second: no hit on either. */
static void xent_case(int64_t M, int64_t N)
{
    bfit_op_desc d = {.kind = BFIT_OP_XENT_FWD, .dtype = BFIT_F32};
    dbuf x = db_rand(M * N, -3, 3, 91), p = db_new((size_t)(M * N) * 4), lab = db_labels(M, (int)N, 92);
    dbuf st = db_new(2 * sizeof(double)), dx = db_new((size_t)(M * N) * 4), pr = db_rand(M * N, 0, 1, 93);
    bfit_op_args a[NS];

    ((float *)x.h)[0] = ((float *)x.h)[N - 1] = 5.0f;
    ((int32_t *)lab.h)[0] = (int32_t)(N - 1);
    ((double *)st.h)[0] = 1.5;
    ((double *)st.h)[1] = 2;
    db_up(&x), db_up(&lab), db_up(&st);
    d.u.xent = (typeof(d.u.xent)){M, N, 0};
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, dst, p), ARG(a, labels, lab), ARG(a, stats, st);
    run_op(&d, a);
    cmp_f32(&p, M * N, 1e-6, 1e-7, "cross-entropy probabilities");
    cmp_f64(&st, 2, 1e-9, "cross-entropy loss and hits");
    {
        double v[2];
        db_down(&st, GPU, v);
        assert_true(v[1] == floor(v[1]) && v[1] >= 2 && v[1] <= 2 + M - 1); /* row 0 is no hit */
    }
    memset(a, 0, sizeof a); /* probabilities only */
    ARG(a, src, x), ARG(a, dst, p);
    run_op(&d, a);
    cmp_f32(&p, M * N, 1e-6, 1e-7, "cross-entropy probabilities (no labels)");
    d.kind = BFIT_OP_XENT_BWD;
    memset(a, 0, sizeof a);
    ARG(a, src, pr), ARG(a, labels, lab), ARG(a, diff_src, dx);
    for (int s = 0; s < NS; s++)
        a[s].loss_scale = 1.0f / (float)M;
    run_op(&d, a);
    cmp_f32(&dx, M * N, 0, 0, "cross-entropy backward");
    db_free(&x), db_free(&p), db_free(&lab), db_free(&st), db_free(&dx), db_free(&pr);
}

static void test_xent(void **st)
{
    (void)st;
    xent_case(33, 10);
    xent_case(5, 300); /* rows wider than a block */
}

/* ---- norms and optimizer updates ------------------------------------------------------------- */

/* Sums of squares in double (1e-12 relative: another order); the copy is
 * exact. n past the GPU's vector loop with a tail, and a tiny n. */
static void test_norms(void **st)
{
    const int64_t sizes[] = {1000003, 5};
    (void)st;
    for (int k = 0; k < 2; k++) {
        int64_t n = sizes[k];
        bfit_op_desc d = {.kind = BFIT_OP_NORMS, .dtype = BFIT_F32};
        dbuf g = db_rand(n, -1, 1, 101 + k), prev = db_rand(n, -1, 1, 103 + k), out = db_new(2 * sizeof(double));
        bfit_op_args a[NS];
        d.u.norms.n = n;
        memset(a, 0, sizeof a);
        ARG(a, src, g), ARG(a, stats, out);
        run_op(&d, a);
        cmp_f64(&out, 1, 1e-12, "norms (sum of squares)");
        ARG(a, state0, prev);
        run_op(&d, a);
        cmp_f64(&out, 2, 1e-12, "norms (with the change)");
        cmp_f32(&prev, n, 0, 0, "norms copy");
        db_free(&g), db_free(&prev), db_free(&out);
    }
}

/* The GPU's updates round like the CPU's, operation for operation: equal
 * bit for bit, over several steps. */
static void test_sgd(void **st)
{
    const int64_t n = 1001;
    (void)st;
    for (int c = 0; c < 4; c++) {
        int mom = c > 0, nesterov = c == 3;
        bfit_op_desc d = {.kind = BFIT_OP_SGD, .dtype = BFIT_F32};
        dbuf p = db_rand(n, -1, 1, 111), g = db_rand(n, -1, 1, 112), buf = db_rand(n, -1, 1, 113);
        bfit_op_args a[NS];
        d.u.sgd = (typeof(d.u.sgd)){.n = n, .momentum = mom, .nesterov = nesterov};
        memset(a, 0, sizeof a);
        ARG(a, dst, p), ARG(a, src, g);
        if (mom)
            ARG(a, state0, buf);
        for (int step = 0; step < 3; step++) {
            for (int s = 0; s < NS; s++) {
                float *h = a[s].hyper;
                h[BFIT_SGD_LR_NEG] = -0.05f;
                h[BFIT_SGD_WD] = c == 2 ? 0.0f : 1e-3f;
                h[BFIT_SGD_MOM] = 0.9f;
                h[BFIT_SGD_DAMP1] = c == 2 ? 0.7f : 1.0f;
                h[BFIT_SGD_FIRST] = step == 0;
            }
            run_op(&d, a);
        }
        cmp_f32(&p, n, 0, 0, "sgd parameters");
        if (mom)
            cmp_f32(&buf, n, 0, 0, "sgd momentum");
        db_free(&p), db_free(&g), db_free(&buf);
    }
}

static void test_adamw(void **st)
{
    const int64_t n = 1001;
    bfit_op_desc d = {.kind = BFIT_OP_ADAMW, .dtype = BFIT_F32};
    dbuf p = db_rand(n, -1, 1, 121), g = db_rand(n, -1, 1, 122), m = db_rand(n, -0.1f, 0.1f, 123);
    dbuf v = db_rand(n, 0, 0.01f, 124);
    bfit_op_args a[NS];
    (void)st;
    d.u.adamw.n = n;
    memset(a, 0, sizeof a);
    ARG(a, dst, p), ARG(a, src, g), ARG(a, state0, m), ARG(a, state1, v);
    for (int step = 1; step <= 3; step++) {
        for (int s = 0; s < NS; s++) {
            float *h = a[s].hyper;
            double b1 = 0.9, b2 = 0.999, lr = 1e-3;
            h[BFIT_ADAMW_DECAY_MUL] = (float)(1 - lr * 0.01);
            h[BFIT_ADAMW_B1] = (float)b1;
            h[BFIT_ADAMW_C1] = (float)(1 - b1);
            h[BFIT_ADAMW_B2] = (float)b2;
            h[BFIT_ADAMW_C2] = (float)(1 - b2);
            h[BFIT_ADAMW_STEP_NEG] = (float)(-lr / (1 - pow(b1, step)));
            h[BFIT_ADAMW_BC2_SQRT] = (float)sqrt(1 - pow(b2, step));
            h[BFIT_ADAMW_EPS] = 1e-8f;
        }
        run_op(&d, a);
    }
    cmp_f32(&p, n, 0, 0, "adamw parameters");
    cmp_f32(&m, n, 0, 0, "adamw first moment");
    cmp_f32(&v, n, 0, 0, "adamw second moment");
    db_free(&p), db_free(&g), db_free(&m), db_free(&v);
}

/* ---- 16-bit data --------------------------------------------------------------------------------- */

/* ---- attention and embeddings ----------------------------------------------------------------------- */

/* Every variant: causal or not, stored or lean, padded sequences (lens) or
 * not, f32 and bf16, without and with dropout on the weights (one mask on
 * both: the same seed's); T past a warp, a sequence of padding alone. The
 * GPU sums in another order than oneDNN's sgemm: f32 to 1e-4, bf16 to an
 * ulp. */
static void attn_case(bfit_dtype t, int causal, int lean, int padded, float drop)
{
    const int64_t n = 3, T = 37, H = 2, hs = 16, C = H * hs;
    bfit_op_desc f = {.kind = BFIT_OP_ATTN_FWD, .dtype = t}, b;
    dbuf x = db_rand_t(t, n * T * 3 * C, -2, 2, 201), dy = db_rand_t(t, n * T * C, -1, 1, 202);
    dbuf y = db_new((size_t)(n * T * C) * 4), dx = db_new((size_t)(n * T * 3 * C) * 4), lens = db_new(n * 4);
    double rel = t == BFIT_F32 ? 1e-4 : BF_REL, abs_ = t == BFIT_F32 ? 1e-5 : BF_ABS;
    bfit_op_args a[NS];
    char what[96];
    pop pf;

    ((int32_t *)lens.h)[0] = 20, ((int32_t *)lens.h)[1] = 37, ((int32_t *)lens.h)[2] = 0;
    db_up(&lens);
    snprintf(what, sizeof what, "attention%s%s%s%s", causal ? " causal" : "", lean ? " lean" : "",
             padded ? " padded" : "", drop > 0 ? " dropout" : "");
    f.u.attn = (typeof(f.u.attn)){n, T, H, hs, causal, lean, 1, drop};
    b = f;
    b.kind = BFIT_OP_ATTN_BWD;
    pop_new(&pf, &f);
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, dst, y);
    if (padded)
        ARG(a, lens, lens);
    for (int s = 0; s < NS; s++)
        a[s].seed = 77;
    pop_run(&pf, a);
    cmp_t(t, &y, n * T * C, rel, abs_, what);
    {
        size_t sb = bfit_op_saved_bytes(pf.op[CPU]);
        dbuf sv = {malloc(sb), {pf.saved[0], pf.saved[1], pf.saved[2]}, sb};
        assert_int_equal(bfit_op_saved_bytes(pf.op[GPU]), sb);
        if (lean)
            cmp_t(BFIT_F32, &sv, n * H * T, 1e-5, 1e-5, "attention log-sum-exp");
        else
            cmp_t(t, &sv, n * H * T * T, rel, abs_, "attention probabilities");
        free(sv.h);
    }
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, diff_dst, dy), ARG(a, diff_src, dx);
    if (padded)
        ARG(a, lens, lens);
    for (int s = 0; s < NS; s++)
        a[s].saved = pf.saved[s], a[s].seed = 77;
    run_op(&b, a);
    strcat(what, " backward");
    cmp_t(t, &dx, n * T * 3 * C, t == BFIT_F32 ? 1e-3 : BF_REL, t == BFIT_F32 ? 1e-5 : BF_ABS, what);
    pop_free(&pf);
    db_free(&x), db_free(&dy), db_free(&y), db_free(&dx), db_free(&lens);
}

static void test_attention(void **st)
{
    (void)st;
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < 16; k++)
            attn_case(t ? BFIT_BF16 : BFIT_F32, k & 1, (k >> 1) & 1, (k >> 2) & 1, k & 8 ? 0.3f : 0.0f);
}

/* Lookups and the gradients' sums in row order on both: equal; also with
 * the token rows scaled by sqrt(C) and a constant position table (the
 * Transformer tutorial's), whose buffer neither writes. */
static void test_embedding(void **st)
{
    const int64_t n = 4, T = 19, C = 24, V = 50, P = 32;
    (void)st;
    for (int t = 0; t < 4; t++) {
        bfit_dtype dt = t & 1 ? BFIT_BF16 : BFIT_F32;
        int fixed = t >= 2;
        bfit_op_desc d = {.kind = BFIT_OP_EMBED_FWD, .dtype = dt};
        dbuf ids = db_new((size_t)(n * T) * 4), tok = db_rand(V * C, -1, 1, 211), pos = db_rand(P * C, -1, 1, 212);
        dbuf typ = db_rand(C, -1, 1, 213), y = db_new((size_t)(n * T * C) * 4), dy = db_rand_t(dt, n * T * C, -1, 1, 214);
        dbuf dtok = db_rand(V * C, -1, 1, 215), dpos = db_rand(P * C, -1, 1, 216), dtyp = db_rand(C, -1, 1, 217);
        bfit_op_args a[NS];
        for (int64_t r = 0; r < n * T; r++)
            ((int32_t *)ids.h)[r] = (int32_t)((r * 13) % 7 + (r % 5 == 0 ? 40 : 0)); /* repeats */
        db_up(&ids);
        d.u.embed = (typeof(d.u.embed)){n, T, C, V, P, 1, fixed, fixed ? sqrtf((float)C) : 1.0f};
        memset(a, 0, sizeof a);
        ARG(a, src, ids), ARG(a, weights, tok), ARG(a, bias, pos), ARG(a, shift, typ), ARG(a, dst, y);
        run_op(&d, a);
        cmp_t(dt, &y, n * T * C, 0, 0, "embedding forward");
        d.kind = BFIT_OP_EMBED_BWD;
        memset(a, 0, sizeof a);
        ARG(a, src, ids), ARG(a, diff_dst, dy), ARG(a, diff_weights, dtok), ARG(a, diff_bias, dpos);
        ARG(a, diff_shift, dtyp);
        run_op(&d, a);
        cmp_f32(&dtok, V * C, 0, 0, "embedding backward (tokens)");
        cmp_f32(&dpos, P * C, 0, 0, "embedding backward (positions)");
        cmp_f32(&dtyp, C, 0, 0, "embedding backward (token type)");
        db_free(&ids), db_free(&tok), db_free(&pos), db_free(&typ), db_free(&y), db_free(&dy);
        db_free(&dtok), db_free(&dpos), db_free(&dtyp);
    }
}

/* A token model's loss: rows with label -1 (padding) add no loss, no hit
 * and no gradient. */
static void test_xent_ignore(void **st)
{
    const int64_t M = 77, N = 41;
    bfit_op_desc d = {.kind = BFIT_OP_XENT_FWD, .dtype = BFIT_F32};
    dbuf x = db_rand(M * N, -3, 3, 221), p = db_new((size_t)(M * N) * 4), lab = db_labels(M, (int)N, 222);
    dbuf stats = db_new(2 * sizeof(double)), dx = db_new((size_t)(M * N) * 4), pr = db_rand(M * N, 0, 1, 223);
    bfit_op_args a[NS];
    pop pf;
    (void)st;
    for (int64_t i = 0; i < M; i += 3)
        ((int32_t *)lab.h)[i] = -1;
    db_up(&lab);
    memset(stats.h, 0, stats.bytes);
    db_up(&stats);
    d.u.xent = (typeof(d.u.xent)){M, N, 1};
    pop_new(&pf, &d);
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, dst, p), ARG(a, labels, lab), ARG(a, stats, stats);
    pop_run(&pf, a);
    cmp_f32(&p, M * N, 1e-6, 1e-7, "cross-entropy probabilities (padded rows)");
    cmp_f64(&stats, 2, 1e-12, "cross-entropy loss and hits (padded rows)");
    pop_free(&pf);
    /* the backward on the same probabilities for every side (each side's
     * forward rounds its own: the H200 differed by an ulp there, 2026-12-04),
     * so the same bits: the rows with label -1 zero, the others exact */
    d.kind = BFIT_OP_XENT_BWD;
    memset(a, 0, sizeof a);
    ARG(a, src, pr), ARG(a, labels, lab), ARG(a, diff_src, dx);
    for (int s = 0; s < NS; s++)
        a[s].loss_scale = 0.25f;
    run_op(&d, a);
    cmp_f32(&dx, M * N, 0, 0, "cross-entropy gradient (padded rows)");
    {
        float *g = malloc(dx.bytes);
        assert_non_null(g);
        db_down(&dx, CPU, g);
        for (int64_t i = 0; i < M * N; i++)
            assert_true((i / N) % 3 ? g[i] != 0 : g[i] == 0);
        free(g);
    }
    db_free(&x), db_free(&p), db_free(&lab), db_free(&stats), db_free(&dx), db_free(&pr);
}

/* Round to nearest even both ways: the same bits. */
static void test_cast(void **st)
{
    const int64_t n = 5003;
    dbuf x = db_rand(n, -70000, 70000, 231), h = db_new((size_t)n * 2), back = db_new((size_t)n * 4);
    bfit_op_desc d = {.kind = BFIT_OP_CAST, .dtype = BFIT_F32};
    bfit_op_args a[NS];
    (void)st;
    ((float *)x.h)[0] = 1.00390625f; /* a bf16 midpoint: rounds to even */
    ((float *)x.h)[1] = 1e-42f;      /* subnormal */
    db_up(&x);
    d.u.cast = (typeof(d.u.cast)){n, BFIT_BF16};
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, dst, h);
    run_op(&d, a);
    cmp_bytes(&h, "cast f32 to bf16");
    d = (bfit_op_desc){.kind = BFIT_OP_CAST, .dtype = BFIT_BF16};
    d.u.cast = (typeof(d.u.cast)){n, BFIT_F32};
    memset(a, 0, sizeof a);
    ARG(a, src, h), ARG(a, dst, back);
    run_op(&d, a);
    cmp_bytes(&back, "cast bf16 to f32");
    db_free(&x), db_free(&h), db_free(&back);
}

/* The 16-bit paths of their own on the GPU: cuBLAS GemmEx (16-bit dst, f32
 * accumulating dst), cuDNN convolutions in bf16 (the weight gradient
 * through the 16-bit workspace), batch norm and layer norm on our 16-bit
 * kernels, the loss from bf16 logits. Inputs are bf16 already, so both
 * devices multiply the same values; sums in f32 in other orders, results
 * rounded once: to about an ulp of bf16 (f32 gradients: 1e-3). */
/* matmul in bf16: six settings of accumulation, bias and an f32 gradient */
static void bf16_matmul(void)
{
    const bfit_dtype t = BFIT_BF16;
    for (int c = 0; c < 6; c++) { /* matmul: (acc, bias); 4, 5: an f32 gradient set (mm.grad) */
        const int64_t M = 37, N = 29, K = 53;
        int grad = c >= 4, acc = !grad && (c & 1), bias = !grad && ((c >> 1) & 1);
        bfit_op_desc d = {.kind = BFIT_OP_MATMUL, .dtype = t, .accumulate = acc};
        dbuf x = db_rand_t(t, M * K, -1, 1, 241), w = db_rand_t(t, K * N, -1, 1, 242), b = db_rand(N, -1, 1, 243);
        dbuf y = acc || grad ? db_rand(M * N, -1, 1, 244) : db_new((size_t)(M * N) * 2);
        bfit_op_args a[NS];
        d.u.mm = (typeof(d.u.mm)){M, N, K, c & 1, 0, bias, grad};
        memset(a, 0, sizeof a);
        ARG(a, src, x), ARG(a, weights, w), ARG(a, bias, b), ARG(a, dst, y);
        run_op(&d, a);
        if (acc || grad)
            cmp_f32(&y, M * N, 1e-3, 1e-4, acc ? "bf16 matmul into f32 (accumulating)" : "bf16 matmul setting f32");
        else
            cmp_t(t, &y, M * N, BF_REL, BF_ABS, "bf16 matmul");
        db_free(&x), db_free(&w), db_free(&b), db_free(&y);
    }
}

/* convolution forward, backward data and weights in bf16 */
static void bf16_conv(void)
{
    const bfit_dtype t = BFIT_BF16;
    conv_shape cs = {3, 16, 12, 12, 24, 3, 3, 1, 1, 1, 1, 1}; /* lean: a chunk of 2, a tail of 1 */
    bfit_op_desc f = conv_desc(BFIT_OP_CONV_FWD, &cs, 1, 0);
    int64_t xs = cs.n * cs.ic * cs.ih * cs.iw, ws = cs.oc * cs.ic * cs.kh * cs.kw, ys = cs.n * cs.oc * 144;
    dbuf x = db_rand_t(t, xs, -1, 1, 251), w = db_rand_t(t, ws, -0.5f, 0.5f, 252), b = db_rand(cs.oc, -1, 1, 253);
    dbuf y = db_new((size_t)ys * 2), dy = db_rand_t(t, ys, -1, 1, 254), dx = db_new((size_t)xs * 2);
    dbuf dw = db_rand(ws, -1, 1, 255), db = db_rand(cs.oc, -1, 1, 256);
    bfit_op_args a[NS];
    f.dtype = t;
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, weights, w), ARG(a, bias, b), ARG(a, dst, y);
    run_op(&f, a);
    cmp_t(t, &y, ys, BF_REL, 4 * BF_ABS, "bf16 conv forward with bias");
    f = conv_desc(BFIT_OP_CONV_BWD_DATA, &cs, 1, 0);
    f.dtype = t;
    memset(a, 0, sizeof a);
    ARG(a, diff_dst, dy), ARG(a, weights, w), ARG(a, diff_src, dx);
    run_op(&f, a);
    cmp_t(t, &dx, xs, BF_REL, 4 * BF_ABS, "bf16 conv backward data");
    f = conv_desc(BFIT_OP_CONV_BWD_WEIGHTS, &cs, 1, 1);
    f.dtype = t;
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, diff_dst, dy), ARG(a, diff_weights, dw), ARG(a, diff_bias, db);
    run_op(&f, a);
    /* the GPU rounds the weight gradient (sums of 432 products, ~12) to bf16 before adding it: 0.05;
     * lean's chunks are rounded each (~10 and ~7): 0.07 at most */
    cmp_f32(&dw, ws, BF_REL, 0.1, "bf16 conv backward weights into f32 (accumulating)");
    cmp_f32(&db, cs.oc, 1e-4, 1e-3, "bf16 conv backward bias into f32 (accumulating)");
    db_free(&x), db_free(&w), db_free(&b), db_free(&y), db_free(&dy), db_free(&dx), db_free(&dw), db_free(&db);
}

/* batch norm forward and backward in bf16, from the input and from the output */
static void bf16_bnorm(void)
{
    const bfit_dtype t = BFIT_BF16;
    const int64_t n = 4, c = 3, h = 5, w = 6, xs = n * c * h * w;
    bfit_op_desc d = {.kind = BFIT_OP_BNORM_FWD, .dtype = t};
    dbuf x = db_rand_t(t, xs, 1, 3, 261), y = db_new((size_t)xs * 2), g = db_rand(c, 0.5f, 1.5f, 262);
    dbuf sh = db_rand(c, -1, 1, 263), mean = db_new((size_t)c * 4), var = db_new((size_t)c * 4);
    dbuf rm = db_rand(c, -0.5f, 0.5f, 264), rv = db_rand(c, 0.5f, 2, 265), dy = db_rand_t(t, xs, -1, 1, 266);
    dbuf dx = db_new((size_t)xs * 2), dg = db_rand(c, -1, 1, 267), dsh = db_rand(c, -1, 1, 268);
    bfit_op_args a[NS];
    d.u.bnorm = (typeof(d.u.bnorm)){.n = n, .c = c, .h = h, .w = w, .eps = 1e-5f, .momentum = 0.1f, .training = 1};
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, dst, y), ARG(a, scale, g), ARG(a, shift, sh), ARG(a, mean, mean), ARG(a, var, var);
    ARG(a, rmean, rm), ARG(a, rvar, rv);
    run_op(&d, a);
    cmp_t(t, &y, xs, BF_REL, BF_ABS, "bf16 batch norm forward");
    cmp_f32(&var, c, 1e-5, 1e-6, "bf16 batch norm variance");
    cmp_f32(&rv, c, 1e-5, 1e-6, "bf16 batch norm running variance");
    d.kind = BFIT_OP_BNORM_BWD;
    d.accumulate = 1;
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, diff_dst, dy), ARG(a, scale, g), ARG(a, mean, mean), ARG(a, var, var);
    ARG(a, diff_src, dx), ARG(a, diff_scale, dg), ARG(a, diff_shift, dsh);
    run_op(&d, a);
    cmp_t(t, &dx, xs, BF_REL, BF_ABS, "bf16 batch norm backward data");
    cmp_f32(&dg, c, 1e-3, 1e-3, "bf16 batch norm backward scale");
    cmp_f32(&dsh, c, 1e-4, 1e-4, "bf16 batch norm backward shift");
    d.u.bnorm.use_dst = 1;
    memset(a, 0, sizeof a);
    ARG(a, src, y), ARG(a, diff_dst, dy), ARG(a, scale, g), ARG(a, shift, sh), ARG(a, mean, mean);
    ARG(a, var, var), ARG(a, diff_src, dx), ARG(a, diff_scale, dg), ARG(a, diff_shift, dsh);
    run_op(&d, a);
    cmp_t(t, &dx, xs, BF_REL, BF_ABS, "bf16 batch norm backward data from the output");
    cmp_f32(&dg, c, 1e-3, 1e-3, "bf16 batch norm backward scale from the output");
    cmp_f32(&dsh, c, 1e-4, 1e-4, "bf16 batch norm backward shift from the output");
    check_bn_ws(&d);
    db_free(&x), db_free(&y), db_free(&g), db_free(&sh), db_free(&mean), db_free(&var), db_free(&rm);
    db_free(&rv), db_free(&dy), db_free(&dx), db_free(&dg), db_free(&dsh);
}

/* layer norm forward and backward in bf16, then the loss from its output */
static void bf16_lnorm_xent(void)
{
    const bfit_dtype t = BFIT_BF16;
    const int64_t rows = 37, cols = 300, n = rows * cols;
    bfit_op_desc d = {.kind = BFIT_OP_LNORM_FWD, .dtype = t, .accumulate = 1};
    dbuf x = db_rand_t(t, n, -2, 3, 271), y = db_new((size_t)n * 2), g = db_rand(cols, 0.5f, 1.5f, 272);
    dbuf sh = db_rand(cols, -1, 1, 273), mean = db_new((size_t)rows * 4), var = db_new((size_t)rows * 4);
    dbuf dy = db_rand_t(t, n, -1, 1, 274), dx = db_new((size_t)n * 2), dg = db_rand(cols, -1, 1, 275);
    dbuf dsh = db_rand(cols, -1, 1, 276), p = db_new((size_t)n * 4), lab = db_labels(rows, (int)cols, 277);
    dbuf stats = db_new(2 * sizeof(double));
    bfit_op_args a[NS];
    d.u.lnorm = (typeof(d.u.lnorm)){rows, cols, 1e-5f, 0, 0, 0};
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, dst, y), ARG(a, scale, g), ARG(a, shift, sh), ARG(a, mean, mean), ARG(a, var, var);
    run_op(&d, a);
    cmp_t(t, &y, n, BF_REL, BF_ABS, "bf16 layer norm forward");
    d.kind = BFIT_OP_LNORM_BWD;
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, mean, mean), ARG(a, var, var), ARG(a, diff_dst, dy), ARG(a, scale, g);
    ARG(a, diff_src, dx), ARG(a, diff_scale, dg), ARG(a, diff_shift, dsh);
    run_op(&d, a);
    cmp_t(t, &dx, n, BF_REL, BF_ABS, "bf16 layer norm backward data");
    cmp_f32(&dg, cols, 1e-3, 1e-3, "bf16 layer norm backward scale");
    /* the loss from the bf16 output as logits */
    d = (bfit_op_desc){.kind = BFIT_OP_XENT_FWD, .dtype = t};
    d.u.xent = (typeof(d.u.xent)){rows, cols, 0};
    memset(stats.h, 0, stats.bytes);
    db_up(&stats);
    memset(a, 0, sizeof a);
    {
        pop pf;
        pop_new(&pf, &d);
        ARG(a, src, y), ARG(a, dst, p), ARG(a, labels, lab), ARG(a, stats, stats);
        pop_run(&pf, a);
        pop_free(&pf);
    }
    cmp_f32(&p, n, 1e-6, 1e-7, "bf16 cross-entropy probabilities");
    cmp_f64(&stats, 2, 1e-9, "bf16 cross-entropy loss and hits");
    db_free(&x), db_free(&y), db_free(&g), db_free(&sh), db_free(&mean), db_free(&var), db_free(&dy);
    db_free(&dx), db_free(&dg), db_free(&dsh), db_free(&p), db_free(&lab), db_free(&stats);
}

static void test_ops_bf16(void **st)
{
    (void)st;
    bf16_matmul();
    bf16_conv();
    bf16_bnorm();
    bf16_lnorm_xent();
}

/* ---- rows and columns: concatenation, slices, transposition, broadcast add --------------------------- */

/* A concatenation of n inputs (cols[k] columns each, over rows; bit k of
 * bcast: input k is one row for every row, its gradient f32 and added),
 * forward and backward into gradients of random values (add: bit k adds
 * into them, the others overwrite; skip: bit k has no gradient, NULL).
 * same: input 1 is input 0 again, as concat(x, x) makes it, its gradient
 * the same buffer, added the second time. Copies, adds of two values and
 * the broadcast sums (double, row order on both) are equal to the bit. */
static void concat_case(bfit_dtype t, int64_t rows, int n, const int64_t *cols, uint32_t bcast, uint32_t add,
                        uint32_t skip, int same)
{
    bfit_op_desc d = {.kind = BFIT_OP_CONCAT_FWD, .dtype = t};
    dbuf x[BFIT_OP_MAXCAT], g[BFIT_OP_MAXCAT], y, dy;
    const void *srcs[NS][BFIT_OP_MAXCAT];
    void *dsts[NS][BFIT_OP_MAXCAT];
    int64_t ld = 0;
    bfit_op_args a[NS];
    char what[160];

    d.u.concat.rows = rows;
    d.u.concat.n = n;
    d.u.concat.bcast = bcast;
    for (int k = 0; k < n; k++) {
        int b = bcast >> k & 1;
        int64_t xn = (b ? 1 : rows) * cols[k];
        d.u.concat.cols[k] = cols[k];
        ld += cols[k];
        x[k] = same && k == 1 ? x[0] : db_rand_t(t, xn, -2, 2, 300 + (uint64_t)k);
        g[k] = same && k == 1 ? g[0] : db_rand_t(b ? BFIT_F32 : t, xn, -1, 1, 340 + (uint64_t)k);
        for (int s = 0; s < NS; s++) {
            srcs[s][k] = x[k].d[s];
            dsts[s][k] = skip >> k & 1 ? NULL : g[k].d[s];
        }
    }
    y = db_rand_t(t, rows * ld, -1, 1, 380);
    dy = db_rand_t(t, rows * ld, -1, 1, 381);
    snprintf(what, sizeof what, "concat of %d inputs over %lld rows (%lld columns; broadcast %#x, add %#x, skip %#x%s)",
             n, (long long)rows, (long long)ld, bcast, add, skip, same ? ", input 1 is input 0" : "");
    memset(a, 0, sizeof a);
    ARG(a, dst, y);
    for (int s = 0; s < NS; s++)
        a[s].srcs = srcs[s];
    run_op(&d, a);
    cmp_bytes(&y, what);
    d.kind = BFIT_OP_CONCAT_BWD;
    memset(a, 0, sizeof a);
    ARG(a, diff_dst, dy);
    for (int s = 0; s < NS; s++)
        a[s].dsts = dsts[s], a[s].add_mask = add;
    run_op(&d, a);
    for (int k = 0; k < n; k++) {
        char w2[200];
        if (skip >> k & 1 || (same && k == 1))
            continue;
        snprintf(w2, sizeof w2, "%s backward, input %d%s", what, k, bcast >> k & 1 ? " (broadcast, f32)" : "");
        cmp_bytes(&g[k], w2);
    }
    for (int k = 0; k < n; k++)
        if (!(same && k == 1))
            db_free(&x[k]), db_free(&g[k]);
    db_free(&y), db_free(&dy);
}

static void test_concat(void **st)
{
    static const int64_t c3[] = {3, 1, 7}, c5[] = {40, 1, 17, 64, 5}, cls[] = {24, 16 * 24}, two[] = {9, 9};
    int64_t c32[BFIT_OP_MAXCAT];
    (void)st;
    for (int k = 0; k < BFIT_OP_MAXCAT; k++)
        c32[k] = 1 + k % 3;
    for (int i = 0; i < 2; i++) {
        bfit_dtype t = i ? BFIT_BF16 : BFIT_F32;
        concat_case(t, 5, 3, c3, 0, 0, 0, 0);
        concat_case(t, 5, 3, c3, 0, 0x2, 0, 0);
        concat_case(t, 33, 5, c5, 0, 0x15, 0x8, 0); /* adds, sets and a skipped input */
        concat_case(t, 300, 5, c5, 0, 0x1f, 0, 0);  /* every gradient added */
        concat_case(t, 4, 2, cls, 0x1, 0x1, 0, 0);  /* a ViT's class token before 16 tokens */
        concat_case(t, 7, 2, cls, 0x1, 0x3, 0, 0);
        concat_case(t, 6, 2, two, 0, 0x2, 0, 1);    /* concat(x, x): set, then added */
        concat_case(t, 3, BFIT_OP_MAXCAT, c32, 0x80000001u, 0x55555555u, 0x100, 0);
    }
}

/* Each sample's matrix (of blocks of q elements) transposed: equal to the bit. */
static void transpose_case(bfit_dtype t, int64_t n, int64_t A, int64_t B, int64_t q)
{
    bfit_op_desc d = {.kind = BFIT_OP_TRANSPOSE, .dtype = t};
    dbuf x = db_rand_t(t, n * A * B * q, -2, 2, 401), y = db_rand_t(t, n * A * B * q, -1, 1, 402);
    bfit_op_args a[NS];
    char what[96];
    d.u.tr = (typeof(d.u.tr)){n, A, B, q};
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, dst, y);
    run_op(&d, a);
    snprintf(what, sizeof what, "transpose of %lld samples %lld x %lld of %lld (%s)", (long long)n, (long long)A,
             (long long)B, (long long)q, bfit_dtype_name(t));
    cmp_bytes(&y, what);
    db_free(&x), db_free(&y);
}

/* dst = src + a row (f32) in every row, one rounding: equal to the bit;
 * also in place (dst = src, as a layer may run it). */
static void add_rows_case(bfit_dtype t, int64_t M, int64_t N)
{
    bfit_op_desc d = {.kind = BFIT_OP_ADD_ROWS, .dtype = t};
    dbuf x = db_rand_t(t, M * N, -2, 2, 411), b = db_rand(N, -1, 1, 412), y = db_rand_t(t, M * N, -1, 1, 413);
    bfit_op_args a[NS];
    char what[96];
    d.u.rows = (typeof(d.u.rows)){M, N};
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, bias, b), ARG(a, dst, y);
    run_op(&d, a);
    snprintf(what, sizeof what, "broadcast add %lld x %lld (%s)", (long long)M, (long long)N, bfit_dtype_name(t));
    cmp_bytes(&y, what);
    ARG(a, dst, x); /* in place */
    run_op(&d, a);
    strcat(what, " in place");
    cmp_bytes(&x, what);
    db_free(&x), db_free(&b), db_free(&y);
}

/* Columns [off, off + len) of [rows, ld], and back into a buffer of
 * random values, which must end zero outside them: equal to the bit. */
static void slice_case(bfit_dtype t, int64_t rows, int64_t ld, int64_t off, int64_t len)
{
    bfit_op_desc d = {.kind = BFIT_OP_SLICE_FWD, .dtype = t};
    dbuf x = db_rand_t(t, rows * ld, -2, 2, 421), y = db_rand_t(t, rows * len, -1, 1, 422);
    dbuf dy = db_rand_t(t, rows * len, -1, 1, 423), dx = db_rand_t(t, rows * ld, -1, 1, 424);
    bfit_op_args a[NS];
    char what[112];
    d.u.slice = (typeof(d.u.slice)){rows, ld, off, len};
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, dst, y);
    run_op(&d, a);
    snprintf(what, sizeof what, "slice [%lld, %lld) of %lld x %lld (%s)", (long long)off, (long long)(off + len),
             (long long)rows, (long long)ld, bfit_dtype_name(t));
    cmp_bytes(&y, what);
    d.kind = BFIT_OP_SLICE_BWD;
    memset(a, 0, sizeof a);
    ARG(a, diff_dst, dy), ARG(a, diff_src, dx);
    run_op(&d, a);
    strcat(what, " backward");
    cmp_bytes(&dx, what);
    db_free(&x), db_free(&y), db_free(&dy), db_free(&dx);
}

static void test_rows_ops(void **st)
{
    (void)st;
    for (int i = 0; i < 2; i++) {
        bfit_dtype t = i ? BFIT_BF16 : BFIT_F32;
        transpose_case(t, 3, 5, 7, 1);
        transpose_case(t, 2, 64, 33, 1); /* a ViT's channels to its tokens */
        transpose_case(t, 1, 1, 9, 1);
        transpose_case(t, 2, 96, 64, 1); /* ConvNeXt's channels to channels-last */
        transpose_case(t, 2, 2, 24, 16); /* ShuffleNet's channel shuffle of 4x4 maps */
        add_rows_case(t, 7, 13);
        add_rows_case(t, 129, 64);
        slice_case(t, 4, 17 * 24, 0, 24); /* a ViT's head reading its class token */
        slice_case(t, 7, 30, 11, 19);
        slice_case(t, 3, 8, 0, 8);
        slice_case(t, 5, 9, 8, 1);
    }
}

/* ---- channel gates ---------------------------------------------------------------------------------- */

/* [n, c, hw] times a scale per (sample, channel), [n, c]: forward and the
 * input's gradient one product each (equal to the bit); the scales'
 * gradient a sum over hw in double, in another order on the GPU (a warp's
 * tree) than the CPU's, so equal but where a double rounding tips the
 * float: 1e-6 relative (f32), one bf16 ulp (bf16). Backward with both
 * gradients, the scales' only (diff_src NULL) and the input's only (dst
 * NULL). hw: below a warp, odd, 1, several loops of a warp. */
static void chscale_case(bfit_dtype t, int64_t n, int64_t c, int64_t hw)
{
    bfit_op_desc d = {.kind = BFIT_OP_CHSCALE_FWD, .dtype = t};
    int64_t N = n * c * hw;
    dbuf x = db_rand_t(t, N, -2, 2, 431), s = db_rand_t(t, n * c, 0, 1, 432), y = db_rand_t(t, N, -1, 1, 433);
    dbuf dy = db_rand_t(t, N, -1, 1, 434), dx = db_rand_t(t, N, -1, 1, 435), ds = db_rand_t(t, n * c, -1, 1, 436);
    double rel = t == BFIT_F32 ? 1e-6 : 1.0 / 256, abs_ = t == BFIT_F32 ? 1e-7 : 1e-4;
    bfit_op_args a[NS];
    char what[160], w2[320];

    d.u.chs = (typeof(d.u.chs)){n, c, hw, 0};
    snprintf(what, sizeof what, "channel scaling n %lld c %lld hw %lld (%s)", (long long)n, (long long)c,
             (long long)hw, bfit_dtype_name(t));
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, src2, s), ARG(a, dst, y);
    run_op(&d, a);
    cmp_bytes(&y, what);
    d.kind = BFIT_OP_CHSCALE_BWD;
    for (int v = 0; v < 3; v++) { /* both, the scales' gradient only, the input's only */
        memset(a, 0, sizeof a);
        ARG(a, src, x), ARG(a, src2, s), ARG(a, diff_dst, dy);
        if (v != 1)
            ARG(a, diff_src, dx);
        if (v != 2)
            ARG(a, dst, ds);
        run_op(&d, a);
        snprintf(w2, sizeof w2, "%s backward%s, input gradient", what, v == 2 ? " (input only)" : "");
        if (v != 1)
            cmp_bytes(&dx, w2);
        snprintf(w2, sizeof w2, "%s backward%s, scales' gradient", what, v == 1 ? " (diff_src NULL)" : "");
        cmp_t(t, &ds, n * c, rel, abs_, w2);
    }
    db_free(&x), db_free(&s), db_free(&y), db_free(&dy), db_free(&dx), db_free(&ds);
}

static void test_chscale(void **st)
{
    (void)st;
    for (int i = 0; i < 2; i++) {
        bfit_dtype t = i ? BFIT_BF16 : BFIT_F32;
        chscale_case(t, 2, 3, 5);
        chscale_case(t, 3, 7, 63);
        chscale_case(t, 2, 16, 1);
        chscale_case(t, 4, 5, 300);
        chscale_case(t, 2, 24, 49 * 5); /* a late MobileNetV3 gate's 7x7, over several loops */
        chscale_case(t, 3, 4099, 1);    /* the mul layer's product of two tensors: a thread per element */
    }
}

/* ---- PReLU -------------------------------------------------------------------------------------------- */

/* [n, c, hw] with a slope per channel or one for all (f32), PReLU or
 * linear (LayerScale): forward and the input's gradient one product each
 * (equal to the bit); the slopes' gradient sums each row in double in
 * another order on the GPU (a warp's tree) than the CPU's, then the rows in
 * the CPU's order, so equal but where a double rounding tips the float:
 * 1e-6 relative, 1e-6 absolute (accumulating adds that float to the old
 * value); with hw == 1 it sums parts of 256 samples per channel in the
 * CPU's order: equal to the bit. Backward setting and accumulating, with
 * and without diff_src, in place (diff_src = diff_dst), and without
 * diff_weights (dx alone). The workspace is poisoned (pop_new). */
static void prelu_case(bfit_dtype t, int64_t n, int64_t c, int64_t hw, int shared, int lin)
{
    bfit_op_desc d = {.kind = BFIT_OP_PRELU_FWD, .dtype = t, .u.prelu = {n, c, hw, shared, 0, lin}};
    int64_t N = n * c * hw, ns = shared ? 1 : c;
    dbuf x = db_rand_t(t, N, -2, 2, 441), w = db_rand(ns, -0.5f, 0.5f, 442), y = db_rand_t(t, N, -1, 1, 443);
    dbuf dy = db_rand_t(t, N, -1, 1, 444), dx = db_rand_t(t, N, -1, 1, 445), dw = db_rand(ns, -1, 1, 446);
    void *dy0 = malloc(dy.bytes), *dw0 = malloc(dw.bytes);
    bfit_op_args a[NS];
    char what[160], w2[320];

    assert_true(dy0 && dw0);
    memcpy(dy0, dy.h, dy.bytes), memcpy(dw0, dw.h, dw.bytes);
    snprintf(what, sizeof what, "prelu n %lld c %lld hw %lld %s%s (%s)", (long long)n, (long long)c, (long long)hw,
             shared ? "shared" : "per channel", lin ? " linear" : "", bfit_dtype_name(t));
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, weights, w), ARG(a, dst, y);
    run_op(&d, a);
    cmp_bytes(&y, what);
    d.kind = BFIT_OP_PRELU_BWD;
    for (int v = 0; v < 6; v++) { /* bit 0: accumulate; bit 1: no diff_src; 4: in place, setting; 5: dx alone */
        d.accumulate = v & 1;
        memcpy(dy.h, dy0, dy.bytes), memcpy(dw.h, dw0, dw.bytes);
        db_up(&dy), db_up(&dw);
        memset(a, 0, sizeof a);
        ARG(a, src, x), ARG(a, weights, w), ARG(a, diff_dst, dy);
        if (v != 5)
            ARG(a, diff_weights, dw);
        if (v == 4)
            ARG(a, diff_src, dy);
        else if (!(v & 2))
            ARG(a, diff_src, dx);
        run_op(&d, a);
        snprintf(w2, sizeof w2, "%s backward (%s%s), input gradient", what, v & 1 ? "accumulating" : "setting",
                 v == 4 ? ", in place" : v == 5 ? ", diff_weights NULL" : "");
        if (!(v & 2) || v == 5)
            cmp_bytes(v == 4 ? &dy : &dx, w2);
        if (v == 5)
            continue;
        snprintf(w2, sizeof w2, "%s backward (%s%s), slopes' gradient", what, v & 1 ? "accumulating" : "setting",
                 v & 2 ? ", diff_src NULL" : v == 4 ? ", in place" : "");
        if (hw == 1)
            cmp_bytes(&dw, w2);
        else
            cmp_f32(&dw, ns, 1e-6, 1e-6, w2);
    }
    db_free(&x), db_free(&w), db_free(&y), db_free(&dy), db_free(&dx), db_free(&dw);
    free(dy0), free(dw0);
}

static void test_prelu(void **st)
{
    (void)st;
    for (int i = 0; i < 4; i++) {
        bfit_dtype t = i & 1 ? BFIT_BF16 : BFIT_F32;
        int lin = i >> 1;
        for (int shared = 0; shared < 2; shared++) {
            prelu_case(t, 2, 3, 5, shared, lin);
            prelu_case(t, 3, 7, 63, shared, lin);
            prelu_case(t, 8, 32, 1, shared, lin);         /* a vector's features: one chunk */
            prelu_case(t, 4, 5, 300, shared, lin);        /* several loops of a warp */
            prelu_case(t, 2, 16, 64 * 64, shared, lin);   /* many rows' sums for one shared slope */
            prelu_case(t, 600, 37, 1, shared, lin);       /* tokens: chunks of 256, the last partial */
            prelu_case(t, 32 * 197, 384, 1, shared, lin); /* a ViT's tokens, LayerScale's shape */
        }
    }
}

/* ---- group normalisation ---------------------------------------------------------------------------- */

/* The backward on the CPU's statistics (uploaded to every device), setting
 * and accumulating, with and without diff_src, in place (diff_src =
 * diff_dst); the workspace poisoned (pop_new). dx is the CPU's formula in
 * double, rounded once, on (sample, channel) sums that a warp adds in
 * another order (double roundings) and either compiler may fuse: at most
 * an ulp of its dtype apart (1e-6 relative, f32; 2^-7, bf16) but near
 * zero, where the terms' double error (~1e-15) bounds it. The scale's and
 * shift's gradients add those sums in the CPU's order: with hw below a
 * warp (BK_GN_WARP) a thread sums a row in element order, the CPU's sum of
 * exact products, so they equal the CPU's to the bit; else 1e-6 relative
 * and absolute (accumulating adds the float to the old value). */
static void gnorm_bwd_case(bfit_op_desc d, const dbuf *x, const dbuf *sc, const dbuf *mean, const dbuf *var,
                           const char *what)
{
    const bfit_dtype t = d.dtype;
    const int64_t c = d.u.gnorm.c, N = d.u.gnorm.n * c * d.u.gnorm.hw;
    dbuf dy = db_rand_t(t, N, -1, 1, 457), dx = db_rand_t(t, N, -1, 1, 458);
    dbuf dsc = db_rand(c, -1, 1, 459), dsh = db_rand(c, -1, 1, 460);
    void *dy0 = malloc(dy.bytes), *p0 = malloc(2 * dsc.bytes);
    bfit_op_args a[NS];
    char w2[320];

    assert_true(dy0 && p0);
    memcpy(dy0, dy.h, dy.bytes), memcpy(p0, dsc.h, dsc.bytes), memcpy((char *)p0 + dsc.bytes, dsh.h, dsh.bytes);
    d.kind = BFIT_OP_GNORM_BWD;
    for (int v = 0; v < 5; v++) { /* bit 0: accumulate; bit 1: no diff_src; 4: in place, setting */
        d.accumulate = v & 1;
        memcpy(dy.h, dy0, dy.bytes), memcpy(dsc.h, p0, dsc.bytes), memcpy(dsh.h, (char *)p0 + dsc.bytes, dsh.bytes);
        db_up(&dy), db_up(&dsc), db_up(&dsh);
        memset(a, 0, sizeof a);
        ARG(a, src, *x), ARG(a, scale, *sc), ARG(a, mean, *mean), ARG(a, var, *var), ARG(a, diff_dst, dy);
        ARG(a, diff_scale, dsc), ARG(a, diff_shift, dsh);
        if (v == 4)
            ARG(a, diff_src, dy);
        else if (!(v & 2))
            ARG(a, diff_src, dx);
        run_op(&d, a);
        snprintf(w2, sizeof w2, "%s backward (%s%s)", what, v & 1 ? "accumulating" : "setting",
                 v & 2 ? ", diff_src NULL" : v == 4 ? ", in place" : "");
        if (!(v & 2))
            cmp_t(t, v == 4 ? &dy : &dx, N, t == BFIT_F32 ? 1e-6 : 1.0 / 128, 1e-9, w2);
        if (d.u.gnorm.hw < 32) {
            cmp_bytes(&dsc, w2), cmp_bytes(&dsh, w2);
        } else {
            cmp_f32(&dsc, c, 1e-6, 1e-6, w2), cmp_f32(&dsh, c, 1e-6, 1e-6, w2);
        }
    }
    db_free(&dy), db_free(&dx), db_free(&dsc), db_free(&dsh);
    free(dy0), free(p0);
}

/* [n, c, hw] in g groups, f32 scale and shift. Forward: each (sample,
 * group) row's mean and variance are double sums, a warp's tree on the GPU
 * against the CPU's one ordered sum, so the f32 statistics are equal but
 * where a double rounding tips the float (1e-6 relative); y is one float
 * formula either compiler may fuse (xhat scale + shift): an ulp (1e-6
 * relative and absolute near zero, f32; 2^-7 relative, bf16). Data offset
 * from zero, so that the mean matters. */
static void gnorm_case(bfit_dtype t, int64_t n, int64_t c, int64_t hw, int g)
{
    bfit_op_desc d = {.kind = BFIT_OP_GNORM_FWD, .dtype = t, .u.gnorm = {n, c, hw, g, 1e-5f}};
    int64_t N = n * c * hw, rows = n * g;
    dbuf x = db_rand_t(t, N, -1, 3, 451), sc = db_rand(c, 0.5f, 1.5f, 452), sh = db_rand(c, -1, 1, 453);
    dbuf y = db_rand_t(t, N, -1, 1, 454), mean = db_rand(rows, -1, 1, 455), var = db_rand(rows, -1, 1, 456);
    bfit_op_args a[NS];
    char what[160];

    snprintf(what, sizeof what, "group norm n %lld c %lld hw %lld, %d groups (%s)", (long long)n, (long long)c,
             (long long)hw, g, bfit_dtype_name(t));
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, dst, y), ARG(a, scale, sc), ARG(a, shift, sh), ARG(a, mean, mean), ARG(a, var, var);
    run_op(&d, a);
    cmp_f32(&mean, rows, 1e-6, 0, what), cmp_f32(&var, rows, 1e-6, 0, what);
    cmp_t(t, &y, N, t == BFIT_F32 ? 1e-6 : 1.0 / 128, 1e-6, what);
    db_down(&mean, CPU, mean.h), db_down(&var, CPU, var.h);
    db_up(&mean), db_up(&var);
    gnorm_bwd_case(d, &x, &sc, &mean, &var, what);
    db_free(&x), db_free(&sc), db_free(&sh), db_free(&y), db_free(&mean), db_free(&var);
}

/* ---- rotary embeddings ---------------------------------------------------------------------------- */

/* Forward and backward against the CPU's: the angles' tables are made the
 * same way on both (double cos and sin of rope.h's float angle), the turns
 * are two products and a sum each, so within an f32 rounding (bf16: one
 * ulp). Heads of 2, 8 and 64 columns, LLaMA 1's and LLaMA 3's bases; the
 * workspace (the tables) is the harness's, poisoned. */
static void rope_case(bfit_dtype t, int64_t n, int64_t T, int64_t C, int64_t d, float theta)
{
    bfit_op_desc dsc = {.kind = BFIT_OP_ROPE_FWD, .dtype = t};
    int64_t N = n * T * C;
    size_t es = bfit_dtype_size(t);
    dbuf x = db_rand_t(t, N, -2, 2, 461), y = db_new((size_t)N * es), dy = db_rand_t(t, N, -1, 1, 462);
    dbuf dx = db_new((size_t)N * es);
    double rel = t == BFIT_F32 ? 1e-5 : BF_REL, abs_ = t == BFIT_F32 ? 1e-6 : BF_ABS;
    bfit_op_args a[NS];

    dsc.u.rope = (typeof(dsc.u.rope)){n, T, C, d, theta};
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, dst, y);
    run_op(&dsc, a);
    cmp_t(t, &y, N, rel, abs_, "rotary embedding forward");
    dsc.kind = BFIT_OP_ROPE_BWD;
    memset(a, 0, sizeof a);
    ARG(a, diff_dst, dy), ARG(a, diff_src, dx);
    run_op(&dsc, a);
    cmp_t(t, &dx, N, rel, abs_, "rotary embedding backward");
    db_free(&x), db_free(&y), db_free(&dy), db_free(&dx);
}

/* Repeated heads and their summed gradients against the CPU's: copies are
 * exact bytes; a sum of r values in order is the CPU's order too. */
static void repeat_case(bfit_dtype t, int64_t rows, int64_t g, int64_t r, int64_t d)
{
    bfit_op_desc dsc = {.kind = BFIT_OP_REPEAT_FWD, .dtype = t};
    int64_t N = rows * g * d, R = N * r;
    size_t es = bfit_dtype_size(t);
    dbuf x = db_rand_t(t, N, -2, 2, 471), y = db_new((size_t)R * es), dy = db_rand_t(t, R, -1, 1, 472);
    dbuf dx = db_new((size_t)N * es);
    bfit_op_args a[NS];

    dsc.u.rep = (typeof(dsc.u.rep)){rows, g, r, d};
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, dst, y);
    run_op(&dsc, a);
    cmp_bytes(&y, "head repeat");
    dsc.kind = BFIT_OP_REPEAT_BWD;
    memset(a, 0, sizeof a);
    ARG(a, diff_dst, dy), ARG(a, diff_src, dx);
    run_op(&dsc, a);
    /* the same order of f32 adds; bf16 rounds the sum once, as the CPU's bfit_st */
    cmp_t(t, &dx, N, t == BFIT_F32 ? 1e-6 : BF_REL, t == BFIT_F32 ? 1e-7 : BF_ABS, "head repeat backward");
    db_free(&x), db_free(&y), db_free(&dy), db_free(&dx);
}

/* The mean of each sequence's real tokens (or its last one) and its
 * gradient against the CPU's: the same f32 sums in token order, one division. */
static void seqmean_case(bfit_dtype t, int64_t n, int64_t T, int64_t C, int last)
{
    bfit_op_desc dsc = {.kind = BFIT_OP_SEQMEAN_FWD, .dtype = t};
    size_t es = bfit_dtype_size(t);
    dbuf x = db_rand_t(t, n * T * C, -2, 2, 481), y = db_new((size_t)(n * C) * es);
    dbuf dy = db_rand_t(t, n * C, -1, 1, 482), dx = db_new((size_t)(n * T * C) * es), lens = db_new((size_t)n * 4);
    bfit_op_args a[NS];

    for (int64_t i = 0; i < n; i++) /* all, some, one, none (counted as one) */
        ((int32_t *)lens.h)[i] = (int32_t)(i % 4 == 0 ? T : i % 4 == 1 ? (T + 1) / 2 : i % 4 == 2 ? 1 : 0);
    db_up(&lens);
    dsc.u.seqm = (typeof(dsc.u.seqm)){n, T, C, last};
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, dst, y), ARG(a, lens, lens);
    run_op(&dsc, a);
    cmp_t(t, &y, n * C, t == BFIT_F32 ? 1e-6 : BF_REL, t == BFIT_F32 ? 1e-7 : BF_ABS, "mean of the tokens");
    dsc.kind = BFIT_OP_SEQMEAN_BWD;
    memset(a, 0, sizeof a);
    ARG(a, diff_dst, dy), ARG(a, diff_src, dx), ARG(a, lens, lens);
    run_op(&dsc, a);
    cmp_t(t, &dx, n * T * C, t == BFIT_F32 ? 1e-6 : BF_REL, t == BFIT_F32 ? 1e-7 : BF_ABS,
          "mean of the tokens backward");
    db_free(&x), db_free(&y), db_free(&dy), db_free(&dx), db_free(&lens);
}

/* Rows gathered and put back against the CPU's: copies, compared byte for
 * byte. Each sample takes K distinct rows in a shuffled order, every fourth
 * index negative (a row of zeros forward, nothing put back). */
static void gather_case(bfit_dtype t, int64_t n, int64_t T, int64_t K, int64_t C)
{
    bfit_op_desc dsc = {.kind = BFIT_OP_GATHER_FWD, .dtype = t};
    size_t es = bfit_dtype_size(t);
    dbuf x = db_rand_t(t, n * T * C, -2, 2, 491), y = db_new((size_t)(n * K * C) * es);
    dbuf dy = db_rand_t(t, n * K * C, -1, 1, 492), dx = db_new((size_t)(n * T * C) * es);
    dbuf rows = db_new((size_t)(n * K) * 4);
    int32_t *perm = malloc((size_t)T * sizeof *perm), *r = rows.h;
    bfit_op_args a[NS];

    assert_non_null(perm);
    for (int64_t i = 0; i < n; i++) {
        for (int64_t j = 0; j < T; j++)
            perm[j] = (int32_t)j;
        for (int64_t j = T - 1; j > 0; j--) { /* Fisher-Yates */
            int64_t q = (int64_t)(bfit_rand_unit(493 + (uint64_t)i, (uint64_t)j) * (double)(j + 1)) % (j + 1);
            int32_t v = perm[j];
            perm[j] = perm[q], perm[q] = v;
        }
        for (int64_t k = 0; k < K; k++)
            r[i * K + k] = k % 4 == 3 ? -1 : perm[k];
    }
    free(perm);
    db_up(&rows);
    dsc.u.gat = (typeof(dsc.u.gat)){n, T, K, C};
    memset(a, 0, sizeof a);
    ARG(a, src, x), ARG(a, dst, y), ARG(a, rows, rows);
    run_op(&dsc, a);
    cmp_bytes(&y, "rows gather");
    dsc.kind = BFIT_OP_GATHER_BWD;
    memset(a, 0, sizeof a);
    ARG(a, diff_dst, dy), ARG(a, diff_src, dx), ARG(a, rows, rows);
    run_op(&dsc, a);
    cmp_bytes(&dx, "rows gather backward");
    db_free(&x), db_free(&y), db_free(&dy), db_free(&dx), db_free(&rows);
}

static void test_rope(void **st)
{
    (void)st;
    for (int i = 0; i < 2; i++) {
        bfit_dtype t = i ? BFIT_BF16 : BFIT_F32;
        rope_case(t, 3, 5, 12, 2, 10000.0f);
        rope_case(t, 2, 33, 64, 8, 10000.0f);
        rope_case(t, 2, 300, 256, 64, 500000.0f);
        repeat_case(t, 7, 2, 3, 4);    /* grouped-query attention's heads, in the same test */
        repeat_case(t, 600, 8, 4, 64); /* LLaMA 3 8B's 8 key and value heads for 32 query heads */
        seqmean_case(t, 5, 7, 3, 0);     /* a sentence classifier's pooling, in the same test */
        seqmean_case(t, 8, 128, 768, 0); /* BERT-base's width, 128 tokens */
        seqmean_case(t, 5, 7, 3, 1);     /* GPT-2's classifier: the last real token */
        seqmean_case(t, 8, 128, 768, 1);
        gather_case(t, 3, 7, 4, 5);      /* a masked LM's head at its masked tokens, in the same test */
        gather_case(t, 8, 128, 20, 768); /* BERT-base's width, 15% of 128 tokens */
    }
}

static void test_gnorm(void **st)
{
    (void)st;
    for (int i = 0; i < 2; i++) {
        bfit_dtype t = i ? BFIT_BF16 : BFIT_F32;
        gnorm_case(t, 2, 6, 5, 3);          /* groups of two channels, rows shorter than a warp */
        gnorm_case(t, 3, 4, 1, 1);          /* a vector in one group (layer norm) */
        gnorm_case(t, 8, 12, 1, 3);         /* a vector in groups */
        gnorm_case(t, 2, 6, 7, 6);          /* a group a channel (instance norm) */
        gnorm_case(t, 2, 16, 9, 2);         /* rows longer than a warp, channel rows shorter */
        gnorm_case(t, 2, 8, 40, 2);         /* channel rows of a warp's parts */
        gnorm_case(t, 3, 5, 300, 5);        /* many per lane */
        gnorm_case(t, 4, 64, 16 * 16, 32);  /* PyTorch's usual 32 groups */
        gnorm_case(t, 2, 32, 32 * 32, 1);   /* rows of 32768 */
    }
}

/* ---- whole models ---------------------------------------------------------------------------------- */

/* A squeeze-and-excitation gate and concatenations, which no spec keyword
 * makes (ONNX imports do; this one has both in one small graph): 3x9x7 -> conv 8 -> relu = a; gate = sigmoid(linear 8 (relu
 * (linear 4 (gap a)))); b = scale(a, gate); c = conv 6 k=1 (b); d =
 * concat(b, c, a); e = concat(c, d); f = concat(e, e) -> gap -> linear 10.
 * Backward, e's concatenation writes c's gradient and d's adds into it
 * (add_mask), and f's hands e both its halves, the second added to the
 * first in the same buffer. */
static int add_kind(bfit_graph_desc *g, bfit_layer_kind k, int in0, int in1)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(k);
    return bfit_graph_add(g, &c, in0, in1, 0, 0);
}

static void gate_graph(bfit_graph_desc *g)
{
    bfit_layer_cfg cv = bfit_layer_cfg_default(BFIT_L_CONV), c1 = cv, cat = bfit_layer_cfg_default(BFIT_L_CONCAT);
    bfit_layer_cfg l4 = bfit_layer_cfg_default(BFIT_L_LINEAR), l8 = l4, l10 = l4;
    int a, gate, b, c, d, e, f, in[3];

    bfit_graph_init(g, "gate-concat (test_cuda_ops.c)");
    g->input = bfit_shape_chw(3, 9, 7);
    g->input_dtype = BFIT_F32;
    cv.units = 8, cv.kh = cv.kw = 3, cv.ph = cv.pw = 1;
    c1.units = 6, c1.kh = c1.kw = 1;
    l4.units = 4, l8.units = 8, l10.units = 10;
    cat.axis = 0;
    a = add_kind(g, BFIT_L_RELU, bfit_graph_add(g, &cv, 0, -1, 0, 0), -1);
    gate = bfit_graph_add(g, &l4, add_kind(g, BFIT_L_GAP, a, -1), -1, 0, 0);
    gate = bfit_graph_add(g, &l8, add_kind(g, BFIT_L_RELU, gate, -1), -1, 0, 0);
    b = add_kind(g, BFIT_L_SCALE, a, add_kind(g, BFIT_L_SIGMOID, gate, -1));
    c = bfit_graph_add(g, &c1, b, -1, 0, 0);
    in[0] = b, in[1] = c, in[2] = a;
    d = bfit_graph_add_n(g, &cat, in, 3, 0, 0);
    e = bfit_graph_add(g, &cat, c, d, 0, 0);
    f = add_kind(g, BFIT_L_GAP, bfit_graph_add(g, &cat, e, e, 0, 0), -1);
    assert_true(bfit_graph_add(g, &l10, f, -1, 0, 0) > 0);
}

/* group norms of every kind the kernels tell apart: 16x16 and 8x8 maps
 * (channel rows a warp's), 4x4 (a thread's) and a vector; written here, as
 * tests/fixtures is not this test's */
static void gn_graph(bfit_graph_desc *g)
{
    static const char spec[] = "input 3x16x16\n"
                               "conv 16 k=3 pad=1\ngroupnorm 4\nrelu\nmaxpool 2\n"
                               "conv 16 k=3 pad=1\ngroupnorm 16\nrelu\nmaxpool 2\n"
                               "conv 32 k=3 pad=1\ngroupnorm 1 eps=1e-3\nrelu\nflatten\n"
                               "linear 24\ngroupnorm 3\nrelu\nlinear 10\n";
    if (bfit_spec_parse(spec, sizeof spec - 1, "gn-mini (test_cuda_ops.c)", g) != BFIT_OK ||
        bfit_spec_check_shapes(g) != BFIT_OK)
        fail_msg("gn-mini: %s", bfit_errmsg());
}

/* The model of file on device s drawing on arena (NULL: shapes and
 * parameter list only): file is in models/, or a path from the source
 * tree, or "@gate" (gate_graph), or "@gnorm" (gn_graph). */
static bfit_model *model_on(const char *file, int s, bfit_arena *arena)
{
    char path[700];
    bfit_graph_desc g;
    bfit_model *M = NULL;
    snprintf(path, sizeof path, "%s/%s", strchr(file, '/') ? src_dir : models_dir, file);
    if (!strcmp(file, HFBERT_GATHERED))
        snprintf(path, sizeof path, "%s/%s", src_dir, HFBERT_OK);
    if (!strcmp(file, "@gate"))
        gate_graph(&g);
    else if (!strcmp(file, GN_MINI))
        gn_graph(&g);
    else if (bfit_model_source_load(path, 0, &g) != BFIT_OK)
        fail_msg("%s: %s", path, bfit_errmsg());
    if (!strcmp(file, HFBERT_GATHERED) && bfit_graph_gather_head(&g, 5, 0.15) != 1)
        fail_msg("%s: no head to gather: %s", path, bfit_errmsg());
    if (bfit_model_new(&g, dev[s], arena, &M) != BFIT_OK)
        fail_msg("%s on %s: %s", file, side_name[s], bfit_errmsg());
    bfit_graph_fini(&g);
    return M;
}

/* A batch of m synthetic samples (values in [0, 1), or token ids) and
 * labels for step k; a token model's last 3 tokens of each sequence are
 * padding (label -1, no loss). x holds 4-byte values either way. */
static void batch(const bfit_model *M, int m, int k, void *x, int32_t *y)
{
    int64_t per = bfit_shape_numel(M->input), nl = (int64_t)m * M->labels_per_sample;
    if (M->input_dtype == BFIT_I32) {
        int V = M->nodes[0].l->cfg.vocab;
        for (int64_t i = 0; i < m * per; i++)
            ((int32_t *)x)[i] = (int32_t)(bfit_rand_unit(1000 + (uint64_t)k, (uint64_t)i) * V);
    } else {
        for (int64_t i = 0; i < m * per; i++)
            ((float *)x)[i] = (float)bfit_rand_unit(1000 + (uint64_t)k, (uint64_t)i);
    }
    /* a token model's: the last 3 padding, the one before and every fifth real but unscored (a masked
       LM's: the sequence runs to its last real token) */
    for (int64_t i = 0; i < nl; i++) {
        int64_t L = M->labels_per_sample, j = i % L;
        y[i] = L > 1 && j >= L - 3                     ? BFIT_LABEL_PAD
               : L > 1 && (j == L - 4 || j % 5 == 1) ? BFIT_LABEL_UNSCORED
                                                        : (int32_t)(bfit_rand_unit(2000 + (uint64_t)k, (uint64_t)i) *
                                                                    M->nclasses);
    }
    for (int64_t i = 0, scored = 0; M->gather && i < nl; i++) { /* a gathered head's K a sample at most */
        scored = i % M->labels_per_sample ? scored : 0;
        scored += y[i] >= 0;
        if (y[i] >= 0 && scored > bfit_model_loss_rows(M) - 1) /* one row of zeros left */
            y[i] = BFIT_LABEL_UNSCORED;
    }
}

static bfit_storage storage_of(bfit_dtype t)
{
    bfit_storage st = bfit_storage_default();
    st.precision = t;
    return st;
}

/* One training step on the GPU from an empty arena: the arena's measured
 * peak, in total and per category, is the plan, and the step allocates
 * nothing after the reserve (as tests/test_plan.c checks on the CPU). */
static void measured_step(const char *file, int s, const bfit_optim_cfg *oc, int m, bfit_dtype t)
{
    bfit_arena *A = bfit_device_arena_new(dev[s], 8ull << 30);
    bfit_model *M = model_on(file, s, A);
    bfit_optim *opt = NULL;
    bfit_step_plan p;
    bfit_arena_stats s0, s1;
    bfit_storage st = storage_of(t);
    float *x = malloc(sizeof(float) * (size_t)m * (size_t)bfit_shape_numel(M->input));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)m * (size_t)M->labels_per_sample);
    double loss, hits;

    bfit_arena_stats_get(A, &s0);
    assert_int_equal(s0.peak, 0);
    assert_int_equal(bfit_model_set_storage(M, &st, oc, 8ull << 30, 0), BFIT_OK);
    assert_int_equal(bfit_plan_compute(M, oc, m, 1, &p), BFIT_OK);
    assert_int_equal(bfit_model_alloc_params(M, 1), BFIT_OK);
    assert_int_equal(bfit_model_init_params(M, 7), BFIT_OK);
    assert_int_equal(bfit_optim_new(oc, M->trainable, M->ntrainable, dev[s], A, &opt), BFIT_OK);
    assert_int_equal(bfit_model_reserve(M, m, 1), BFIT_OK);
    bfit_arena_stats_get(A, &s0);
    assert_int_equal(s0.current, p.peak);
    batch(M, m, 0, x, y);
    assert_int_equal(bfit_model_set_input(M, x, y, m), BFIT_OK);
    assert_int_equal(bfit_model_forward(M, 5), BFIT_OK);
    assert_int_equal(bfit_model_backward(M, 1.0f / (float)m), BFIT_OK);
    assert_int_equal(bfit_optim_step(opt, 0.01), BFIT_OK);
    assert_int_equal(bfit_model_stats_read(M, &loss, &hits), BFIT_OK);
    assert_true(loss > 0 && loss < 1e9);
    bfit_arena_stats_get(A, &s1);
    assert_int_equal(s1.nalloc, s0.nalloc);
    if (s1.peak != p.peak)
        fail_msg("%s on %s in %s, m %d: measured peak %llu, planned %llu", file, side_name[s], bfit_dtype_name(t), m,
                 (unsigned long long)s1.peak, (unsigned long long)p.peak);
    for (int c = 0; c < BFIT_MEM_NCAT; c++)
        if (s1.peak_cat[c] != p.bytes[c])
            fail_msg("%s on %s, m %d: %s measured %llu, planned %llu", file, side_name[s], m,
                     bfit_mem_cat_name((bfit_mem_cat)c), (unsigned long long)s1.peak_cat[c],
                     (unsigned long long)p.bytes[c]);
    bfit_optim_free(opt);
    bfit_model_free(M);
    bfit_arena_free(A);
    free(x);
    free(y);
}

static void test_plan_is_measured(void **st)
{
    const char *files[] = {"mlp.cfg", "cnn.cfg", "gpt-nano.cfg"};
    const int ms[] = {1, 8, 32};
    (void)st;
    for (int f = 0; f < 3; f++)
        for (int k = 0; k < 3; k++)
            for (int s = GPU; s < NS; s++)
                for (int t = 0; t < 2; t++) {
                    bfit_optim_cfg sgd = bfit_optim_cfg_default(BFIT_OPT_SGD);
                    bfit_optim_cfg adamw = bfit_optim_cfg_default(BFIT_OPT_ADAMW);
                    if (f == 2 && ms[k] > 8)
                        continue;
                    measured_step(files[f], s, &sgd, ms[k], t ? BFIT_BF16 : BFIT_F32);
                    measured_step(files[f], s, &adamw, ms[k], t ? BFIT_BF16 : BFIT_F32);
                }
}

/* A label outside the classes is refused before anything runs, on every
 * device (a GPU's loss op could not refuse it: the labels are device
 * memory by then). */
static void test_bad_label_refused(void **st)
{
    (void)st;
    for (int s = 0; s < NS; s++) {
        bfit_arena *A = bfit_device_arena_new(dev[s], 1ull << 30);
        bfit_model *M = model_on("mlp.cfg", s, A);
        float x[4 * 784] = {0};
        int32_t y[4] = {0, 1, 10, 2};
        assert_int_equal(bfit_model_alloc_params(M, 1), BFIT_OK);
        assert_int_equal(bfit_model_reserve(M, 4, 1), BFIT_OK);
        assert_int_equal(bfit_model_set_input(M, x, y, 4), BFIT_EINVAL);
        if (!strstr(bfit_errmsg(), "label 10 of sample 2 is outside [0, 10)"))
            fail_msg("%s: %s", side_name[s], bfit_errmsg());
        bfit_model_free(M);
        bfit_arena_free(A);
    }
}

/* Synthetic samples for bfit_train: sample i is a function of i. */
typedef struct synth {
    int64_t next, count;
    int numel, classes;
} synth;

static int synth_take(void *ud, int n, float *x, int32_t *labels, int *got)
{
    synth *s = ud;
    int k = 0;
    for (; k < n && s->next < s->count; k++, s->next++) {
        for (int j = 0; j < s->numel; j++)
            x[(int64_t)k * s->numel + j] = (float)bfit_rand_unit(77, (uint64_t)(s->next * s->numel + j));
        labels[k] = (int32_t)(s->next % s->classes);
    }
    *got = k;
    return BFIT_OK;
}

static int synth_restart(void *ud)
{
    ((synth *)ud)->next = 0;
    return BFIT_OK;
}

/* The 6th and 7th allocations of a run fall in the first micro-batch's
 * reservation (after params, grads, statistics and optimizer state): each
 * fails, the trainer shrinks the micro-batch and carries on; every sample
 * is trained on. */
static void test_injected_failure_recovered(void **st)
{
    const uint64_t nth[] = {6, 7};
    char path[700];
    (void)st;
    snprintf(path, sizeof path, "%s/mlp.cfg", models_dir);
    for (int t = 0; t < 2; t++) {
        synth tr = {0, 512, 784, 10}, te = {0, 128, 784, 10};
        bfit_source trs = {synth_take, synth_restart, synth_restart, 512, &tr};
        bfit_source tes = {synth_take, synth_restart, synth_restart, 128, &te};
        bfit_train_cfg c = bfit_train_cfg_default();
        bfit_train_result r;
        c.model = path;
        c.device = dev[GPU];
        c.train_source = &trs;
        c.test_source = &tes;
        c.normalize = 0;
        c.prefetch = 0;
        c.batch = 64;
        c.epochs = 1;
        c.memory = 1ull << 30;
        c.fail_nth_alloc = nth[t];
        if (bfit_train_from(&c, &r) != BFIT_OK)
            fail_msg("training with allocation %llu failing: %s", (unsigned long long)nth[t], bfit_errmsg());
        print_message("  allocation %llu failed: %d recovered, micro-batch %d, %lld samples, loss %.4f\n",
                      (unsigned long long)nth[t], r.ooms, r.micro_batch, (long long)r.samples, r.train_loss);
        assert_true(r.ooms >= 1);
        assert_true(r.micro_batch < 64);
        assert_int_equal(r.samples, 512);
        assert_true(isfinite(r.train_loss));
    }
}

/* Three SGD steps (momentum 0.9, lr 0.05) at micro-batch 16 from the same
 * initial weights and samples. Per step the losses agree to 1e-5. Per
 * parameter tensor, the change of the weights over the three steps agrees
 * with the CPU's to 1e-3 of its norm: f32 rounding makes the gradients
 * differ by ~1e-6, but in the cnn a max-pool window whose top two values
 * are within rounding of each other may send its gradient to the other
 * element on the other device, which moves a few weights by ~1e-5; a wrong
 * gradient or update moves the result by its whole size. */
static void train_steps(const char *file, int s, bfit_dtype t, float ***weights, double *losses)
{
    const int m = 16;
    bfit_arena *A = bfit_device_arena_new(dev[s], 8ull << 30);
    bfit_model *M = model_on(file, s, A);
    bfit_optim *opt = NULL;
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
    bfit_storage st = storage_of(t);
    float *x = malloc(sizeof(float) * (size_t)m * (size_t)bfit_shape_numel(M->input));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)m * (size_t)M->labels_per_sample);

    assert_int_equal(bfit_model_set_storage(M, &st, &oc, 8ull << 30, 0), BFIT_OK);
    assert_int_equal(bfit_model_alloc_params(M, 1), BFIT_OK);
    assert_int_equal(bfit_model_init_params(M, 7), BFIT_OK);
    assert_int_equal(bfit_optim_new(&oc, M->trainable, M->ntrainable, dev[s], A, &opt), BFIT_OK);
    assert_int_equal(bfit_model_reserve(M, m, 1), BFIT_OK);
    *weights = calloc((size_t)M->nparams * 2, sizeof **weights);
    for (int i = 0; i < M->nparams; i++) { /* [2i] the initial values, [2i+1] the final */
        (*weights)[2 * i] = malloc(bfit_param_bytes(M->params[i]));
        (*weights)[2 * i + 1] = malloc(bfit_param_bytes(M->params[i]));
        assert_int_equal(bfit_device_download(dev[s], (*weights)[2 * i], M->params[i]->data,
                                              bfit_param_bytes(M->params[i])),
                         BFIT_OK);
    }
    for (int k = 0; k < 3; k++) {
        double hits;
        batch(M, m, k, x, y);
        assert_int_equal(bfit_model_zero_grads(M), BFIT_OK);
        assert_int_equal(bfit_model_stats_reset(M), BFIT_OK);
        assert_int_equal(bfit_model_set_input(M, x, y, m), BFIT_OK);
        assert_int_equal(bfit_model_forward(M, 100 + (uint64_t)k), BFIT_OK);
        assert_int_equal(bfit_model_backward(M, 1.0f / (float)m), BFIT_OK);
        assert_int_equal(bfit_optim_step(opt, 0.05), BFIT_OK);
        assert_int_equal(bfit_model_refresh_copies(M), BFIT_OK);
        assert_int_equal(bfit_model_stats_read(M, &losses[k], &hits), BFIT_OK);
    }
    for (int i = 0; i < M->nparams; i++)
        assert_int_equal(bfit_device_download(dev[s], (*weights)[2 * i + 1], M->params[i]->data,
                                              bfit_param_bytes(M->params[i])),
                         BFIT_OK);
    bfit_optim_free(opt);
    bfit_model_free(M);
    bfit_arena_free(A);
    free(x);
    free(y);
}

/* Norm of the difference of two changes of parameter i over the steps: each
 * change is w[2i+1] - w[2i] (what train_steps downloaded). */
static double change_gap(float **a, float **b, int i, int64_t n)
{
    double num = 0;
    for (int64_t j = 0; j < n; j++) {
        double da = (double)a[2 * i + 1][j] - a[2 * i][j], db = (double)b[2 * i + 1][j] - b[2 * i][j];
        num += (da - db) * (da - db);
    }
    return sqrt(num);
}

/* f32: the GPU's weight changes within 1e-3 of the CPU's (see train_steps).
 * bf16 (both devices computing in bf16 with f32 masters): a rounding to
 * bf16 (2^-8) that differs moves later values by that much, and what a
 * bf16 step may differ by is measured, not assumed: the same steps in f32
 * on the CPU are the reference, and the GPU's bf16 change may be no further
 * from it than twice the CPU's bf16 change is (and 1e-3 of its norm,
 * should the CPU's error happen to be near zero). A wrong gradient moves
 * the change by its whole size, far beyond either. The losses agree to
 * 1e-5 (f32) and 1e-2 (bf16). */
static void compare_training(const char *file, bfit_dtype t)
{
    float **w[NS], **ref = NULL;
    double loss[NS][3], rloss[3], lt = t == BFIT_F32 ? 1e-5 : 1e-2;
    bfit_model *shape = model_on(file, CPU, NULL); /* for the parameter list */
    for (int s = 0; s < NS; s++)
        train_steps(file, s, t, &w[s], loss[s]);
    if (t != BFIT_F32)
        train_steps(file, CPU, BFIT_F32, &ref, rloss);
    for (int s = GPU; s < NS; s++) {
        for (int k = 0; k < 3; k++)
            if (!(fabs(loss[s][k] - loss[CPU][k]) <= lt * fabs(loss[CPU][k])))
                fail_msg("%s on %s: loss at step %d is %.9g, the cpu's %.9g", file, side_name[s], k, loss[s][k],
                         loss[CPU][k]);
        double worst = 0;
        for (int i = 0; i < shape->nparams; i++) {
            const bfit_param *p = shape->params[i];
            int64_t n = bfit_param_numel(p);
            for (int64_t j = 0; j < n; j++)
                assert_true(w[s][2 * i][j] == w[CPU][2 * i][j]); /* the same initial weights */
            if (t == BFIT_F32) {
                double gap = change_gap(w[s], w[CPU], i, n), norm = 0;
                for (int64_t j = 0; j < n; j++) {
                    double dc = (double)w[CPU][2 * i + 1][j] - w[CPU][2 * i][j];
                    norm += dc * dc;
                }
                norm = sqrt(norm);
                worst = norm > 0 && gap / norm > worst ? gap / norm : worst;
                if (norm > 0 ? gap > 1e-3 * norm : gap != 0)
                    fail_msg("%s on %s: parameter %d (%s) moved %.3g away from the cpu's change of norm %.3g", file,
                             side_name[s], i, p->name, gap, norm);
                continue;
            }
            double e_gpu = change_gap(w[s], ref, i, n), e_cpu = change_gap(w[CPU], ref, i, n), norm = 0;
            for (int64_t j = 0; j < n; j++) {
                double dr = (double)ref[2 * i + 1][j] - ref[2 * i][j];
                norm += dr * dr;
            }
            norm = sqrt(norm);
            if (e_cpu > 0 && e_gpu / e_cpu > worst)
                worst = e_gpu / e_cpu;
            if (e_gpu > 2 * e_cpu + 1e-3 * norm)
                fail_msg("%s on %s: parameter %d (%s): its bf16 change is %.3g from f32's (norm %.3g), the cpu's "
                         "bf16 %.3g: more than twice the cpu's bf16 error", file, side_name[s], i, p->name, e_gpu,
                         norm, e_cpu);
        }
        if (t == BFIT_F32)
            print_message("  %s on %s in f32: losses %.6f %.6f %.6f; weight changes within %.3g of the cpu's\n",
                          file, side_name[s], loss[s][0], loss[s][1], loss[s][2], worst);
        else
            print_message("  %s on %s in %s: losses %.6f %.6f %.6f; weight changes at most %.3g times as far "
                          "from f32's as the cpu's bf16\n", file, side_name[s], bfit_dtype_name(t), loss[s][0],
                          loss[s][1], loss[s][2], worst);
    }
    for (int s = 0; s < NS; s++) {
        for (int i = 0; i < 2 * shape->nparams; i++)
            free(w[s][i]);
        free(w[s]);
    }
    for (int i = 0; ref && i < 2 * shape->nparams; i++)
        free(ref[i]);
    free(ref);
    bfit_model_free(shape);
}

static void test_training_matches_cpu(void **st)
{
    (void)st;
    compare_training("mlp.cfg", BFIT_F32);
    compare_training("cnn.cfg", BFIT_F32);
    compare_training("gpt-nano.cfg", BFIT_F32);
}

static void test_training_bf16(void **st)
{
    (void)st;
    compare_training("cnn.cfg", BFIT_BF16);
    compare_training("gpt-nano.cfg", BFIT_BF16);
    compare_training("@gate", BFIT_BF16);
    compare_training(VIT_TINY, BFIT_BF16);
    compare_training(DENSE_BLOCK, BFIT_BF16);
    compare_training(SE_MINI, BFIT_BF16);
    compare_training(PRELU_MINI, BFIT_BF16);
    compare_training(CNX_SHUFFLE, BFIT_BF16);
    compare_training(MHSA_OK, BFIT_BF16);
    compare_training(GPT_OK, BFIT_BF16);
    compare_training(LLAMA_OK, BFIT_BF16);
    compare_training(GEMMA_OK, BFIT_BF16);
    compare_training(TUT_OK, BFIT_BF16);
    compare_training(HFGPT2_OK, BFIT_BF16);
    compare_training(HFBERT_OK, BFIT_BF16);
    compare_training(HFBERT_GATHERED, BFIT_BF16);
}

/* The models of the ops on rows, columns, channel gates, grouped
 * convolutions and PReLU: the GPU makes every op they need, in f32 and
 * bf16 (cuda_supports, and no op left that only the cpu has). */
static void test_needs_new_ops(void **st)
{
    const char *const files[] = {"@gate",     VIT_TINY,    DENSE_BLOCK, SE_MINI, PRELU_MINI, PRELU_HEAD,
                                 CNX_SHUFFLE, MHSA_OK,     GPT_OK,      LLAMA_OK, TUT_OK,    HFGPT2_OK,
                                 GEMMA_OK};
    (void)st;
    for (int i = 0; i < (int)(sizeof files / sizeof files[0]); i++)
        for (int t = 0; t < 2; t++) {
            bfit_graph_desc g;
            bfit_op_needs nd;
            char path[700], why[512] = "";
            int ok;
            snprintf(path, sizeof path, "%s/%s", src_dir, files[i]);
            if (i == 0)
                gate_graph(&g);
            else if (bfit_model_source_load(path, 0, &g) != BFIT_OK)
                fail_msg("%s: %s", path, bfit_errmsg());
            if (bfit_graph_op_needs(&g, t ? BFIT_BF16 : BFIT_F32, &nd) != BFIT_OK)
                fail_msg("%s: its ops: %s", files[i], bfit_errmsg());
            bfit_graph_fini(&g);
            ok = bfit_device_supports_needs(dev[GPU], &nd, why, sizeof why);
            if (!ok)
                fail_msg("%s in %s on %s: refused: %s", files[i], t ? "bf16" : "f32", side_name[GPU], why);
        }
}

/* The planned peak is the measured one for the new ops' models too (of
 * their ops only PReLU's backward has a workspace: a double per row, or
 * with hw == 1 per chunk of 256 samples and channel). */
static void test_plan_new_ops(void **st)
{
    const char *const files[] = {"@gate", VIT_TINY, DENSE_BLOCK, SE_MINI,  PRELU_MINI, CNX_SHUFFLE, MHSA_OK, GPT_OK,
                                 LLAMA_OK, TUT_OK,  HFGPT2_OK, GEMMA_OK, HFBERT_GATHERED};
    bfit_optim_cfg sgd = bfit_optim_cfg_default(BFIT_OPT_SGD);
    (void)st;
    for (int f = 0; f < (int)(sizeof files / sizeof files[0]); f++)
        for (int s = GPU; s < NS; s++)
            for (int t = 0; t < 2; t++) {
                measured_step(files[f], s, &sgd, 1, t ? BFIT_BF16 : BFIT_F32);
                measured_step(files[f], s, &sgd, 7, t ? BFIT_BF16 : BFIT_F32);
            }
}

/* Training through a channel gate and concatenations (gate_graph), a ViT
 * (transposition, the class token's broadcast concatenation, the positions'
 * broadcast add, the slice its head reads), a DenseNet block
 * (concatenations), MobileNetV3's block, PReLUs (prelu-mini.cfg: per
 * channel, shared, per feature) and ConvNeXt's and ShuffleNet's parts
 * (channels-last transposes, channel slices and shuffles), as
 * test_training_matches_cpu. */
static void test_training_new_ops(void **st)
{
    (void)st;
    compare_training("@gate", BFIT_F32);
    compare_training(VIT_TINY, BFIT_F32);
    compare_training(DENSE_BLOCK, BFIT_F32);
    compare_training(SE_MINI, BFIT_F32);
    compare_training(PRELU_MINI, BFIT_F32);
    compare_training(CNX_SHUFFLE, BFIT_F32);
    compare_training(MHSA_OK, BFIT_F32);
    compare_training(GPT_OK, BFIT_F32);
    compare_training(LLAMA_OK, BFIT_F32);
    compare_training(GEMMA_OK, BFIT_F32);
    compare_training(TUT_OK, BFIT_F32);
    compare_training(HFGPT2_OK, BFIT_F32);
    compare_training(HFBERT_OK, BFIT_F32);
    compare_training(HFBERT_GATHERED, BFIT_F32);
}

/* The group norms' model (gn_graph) on the GPU: every op it needs made in
 * f32 and bf16 (none left that only the cpu has), the planned peak the
 * measured one (the backward's workspace declared at op creation), and a
 * few training steps against the CPU, as test_training_matches_cpu. */
static void test_gnorm_model(void **st)
{
    bfit_optim_cfg sgd = bfit_optim_cfg_default(BFIT_OPT_SGD);
    (void)st;
    for (int t = 0; t < 2; t++) {
        bfit_graph_desc g;
        bfit_op_needs nd;
        char why[512] = "";
        gn_graph(&g);
        if (bfit_graph_op_needs(&g, t ? BFIT_BF16 : BFIT_F32, &nd) != BFIT_OK)
            fail_msg("gn-mini: its ops: %s", bfit_errmsg());
        bfit_graph_fini(&g);
        if (nd.cpu_only || !bfit_device_supports_needs(dev[GPU], &nd, why, sizeof why))
            fail_msg("gn-mini in %s on %s: refused: %s", t ? "bf16" : "f32", side_name[GPU],
                     nd.cpu_only ? nd.cpu_only : why);
        for (int s = GPU; s < NS; s++) {
            measured_step(GN_MINI, s, &sgd, 1, t ? BFIT_BF16 : BFIT_F32);
            measured_step(GN_MINI, s, &sgd, 7, t ? BFIT_BF16 : BFIT_F32);
        }
        compare_training(GN_MINI, t ? BFIT_BF16 : BFIT_F32);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_conv),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_bnorm),
        cmocka_unit_test(test_lnorm),
        cmocka_unit_test(test_eltwise),
        cmocka_unit_test(test_reduce_rows),
        cmocka_unit_test(test_add_scale),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_relu_lean),
        cmocka_unit_test(test_xent),
        cmocka_unit_test(test_norms),
        cmocka_unit_test(test_sgd),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_plan_is_measured),
        cmocka_unit_test(test_bad_label_refused),
        cmocka_unit_test(test_injected_failure_recovered),
        cmocka_unit_test(test_training_matches_cpu),
        cmocka_unit_test(test_training_bf16),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_xent_ignore),
        cmocka_unit_test(test_cast),
        cmocka_unit_test(test_ops_bf16),
        cmocka_unit_test(test_concat),
        cmocka_unit_test(test_rows_ops),
        cmocka_unit_test(test_chscale),
        cmocka_unit_test(test_prelu),
        cmocka_unit_test(test_gnorm),          cmocka_unit_test(test_rope),
        cmocka_unit_test(test_needs_new_ops),
        cmocka_unit_test(test_plan_new_ops),
        cmocka_unit_test(test_training_new_ops),
        cmocka_unit_test(test_gnorm_model),
    };
    bfit_device *g = NULL;

    /* no GPU, no test: skipped (77), never passed */
    if (!getenv("BFIT_TEST_CUDA_ON_CPU") && bfit_device_open("cuda", NULL, &g) != BFIT_OK) {
        printf("test_cuda_ops: skipped: %s\n", bfit_errmsg());
        return SKIP;
    }
    bfit_device_free(g);
    /* tests/cmake/cuda.cmake runs the CPU-substitute mode as two tests */
    if (getenv("BFIT_TEST_ONLY"))
        cmocka_set_test_filter(getenv("BFIT_TEST_ONLY"));
    if (getenv("BFIT_TEST_SKIP"))
        cmocka_set_skip_filter(getenv("BFIT_TEST_SKIP"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
