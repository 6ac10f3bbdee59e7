/* test_kernel_core.c - the CUDA backend's attention, embedding,
 * activation, copy (concatenation, slices, transposition, broadcast add),
 * channel-gate, PReLU and group-norm kernels' per-thread work
 * (src/device/cuda_core.h), run on the host, against the CPU device's ops
 * on the same data.
 *
 * Each CUDA thread of those kernels calls one function of cuda_core.h for
 * its row part or element and nothing else; here a loop calls the same
 * functions for every thread's index (a row's 32 parts, as a warp's lanes
 * take them), so the kernels' mathematics (masks, padding, lean
 * recomputation, 16-bit rounding, the head-major copies' offsets) is
 * checked without a GPU. Attention's products, cuBLAS's on the GPU, are
 * plain loops here. What this cannot check is the launch itself and the
 * cuBLAS calls' operands (cuda_attn.cu, cuda_attn.c), which test_cuda_ops
 * checks on a GPU.
 *
 * Tolerances: the host work sums in another order than oneDNN's sgemm, so
 * f32 results agree to a few ulps of f32 (1e-5 relative with a 1e-6 floor
 * for values near zero); bf16 outputs are rounded once from such f32 values
 * on both sides, so they may differ by one bf16 ulp (2^-8 relative). The
 * embedding sums are in the CPU's order: equal; so are copies and
 * one-product results. The channel gate's scale gradient adds a warp's 32
 * parts in its shuffle tree, in double: 1e-6 relative (f32), a bf16 ulp;
 * so do PReLU's rows, whose sums are then added in the CPU's order into
 * f32 slope gradients: 1e-6; with hw == 1 PReLU's parts are the CPU's own
 * sums: equal to the bit. Group normalisation's statistics and its
 * (sample, channel) sums are a warp's too (test_gnorm says what that and
 * fused multiply-adds allow). */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/rand.h"
#include "device/cuda_core.h"
#include "tdev.h"

static tdev td;

static int setup(void **st)
{
    (void)st;
    tdev_open(&td, 2);
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    tdev_close(&td);
    return 0;
}

static size_t esz(bfit_dtype t) { return t == BFIT_F32 ? 4 : 2; }

/* n values of dtype t uniform in [lo, hi), on both sides */
static tbuf rand_buf(bfit_dtype t, int64_t n, float lo, float hi, uint64_t seed)
{
    tbuf b = tbuf_new(&td, (size_t)n * esz(t));
    for (int64_t i = 0; i < n; i++)
        bfit_st(b.h, t, i, lo + (hi - lo) * (float)bfit_rand_unit(seed, (uint64_t)i));
    tbuf_up(&td, &b);
    return b;
}

/* got (host, dtype t) against the CPU's (b, downloaded), n values */
static void cmp(const char *what, bfit_dtype t, const void *got, tbuf *b, int64_t n, double rel, double floor_)
{
    tbuf_down(&td, b);
    for (int64_t i = 0; i < n; i++) {
        double g = bfit_ld(got, t, i), r = bfit_ld(b->h, t, i);
        if (!(fabs(g - r) <= rel * fabs(r) + floor_))
            fail_msg("%s: element %lld is %.9g on the host, the cpu's %.9g", what, (long long)i, g, r);
    }
}

static void run1(bfit_op *op, bfit_op_args *a, tbuf *ws)
{
    a->workspace = ws->d;
    if (bfit_op_run(op, a) != BFIT_OK)
        fail_msg("cpu op: %s", bfit_errmsg());
    assert_int_equal(bfit_device_sync(td.dev), BFIT_OK);
}

static tbuf op_ws(bfit_op *op) { return tbuf_new(&td, bfit_op_workspace_bytes(op) + 1); }

/* ---- attention --------------------------------------------------------------------- */

typedef struct acase {
    bfit_dtype t;
    int causal, lean, padded;
    float drop; /* dropout on the weights (the mask of seed ACASE_SEED) */
} acase;
#define ACASE_SEED 4321

/* dropout's mask on lane's T x T matrix m, element by element as k_attn_drop's threads */
static void h_drop(const bk_attn *a, const int32_t *lens, float *m, int64_t lane)
{
    for (int64_t el = 0; a->drop > 0 && el < a->T * a->T; el++)
        bk_attn_drop_el(a, lens, m, lane, el);
}

#define PARTS 32 /* a warp's lanes */

/* row-major per lane: C [T, T] = alpha Y X^T (the "scores" product) */
static void h_scores(const bk_attn *a, float alpha, const float *X, const float *Y, float *C)
{
    for (int64_t i = 0; i < a->T; i++)
        for (int64_t j = 0; j < a->T; j++) {
            float s = 0.0f;
            for (int64_t c = 0; c < a->hs; c++)
                s += Y[i * a->hs + c] * X[j * a->hs + c];
            C[i * a->T + j] = alpha * s;
        }
}

/* C [T, hs] = alpha op(M) X, op(M) = M or M^T (the "apply" products) */
static void h_apply(const bk_attn *a, float alpha, const float *M, int tm, const float *X, float *C)
{
    for (int64_t i = 0; i < a->T; i++)
        for (int64_t c = 0; c < a->hs; c++) {
            float s = 0.0f;
            for (int64_t j = 0; j < a->T; j++)
                s += (tm ? M[j * a->T + i] : M[i * a->T + j]) * X[j * a->hs + c];
            C[i * a->hs + c] = alpha * s;
        }
}

/* the forward's softmax on row i of lane, its parts as a warp's */
static void h_softmax(const bk_attn *a, const int32_t *lens, float *s, int64_t lane, int64_t i, void *kept,
                      float *lse)
{
    int64_t nk = bk_attn_row_keys(a, lens, lane, i);
    float mx = -INFINITY;
    double sum = 0;
    for (int l = 0; l < PARTS; l++)
        mx = fmaxf(mx, bk_attn_part_max(s, nk, l, PARTS));
    for (int l = 0; l < PARTS; l++)
        sum += bk_attn_part_sum(s, nk, mx, l, PARTS);
    for (int l = 0; l < PARTS; l++)
        bk_attn_part_probs(a, s, nk, mx, sum, kept, lane, i, l, PARTS);
    if (lse)
        lse[lane * a->T + i] = bk_attn_lse(mx, sum);
}

/* forward on the host: y (data dtype) and what training keeps */
static void h_fwd(const bk_attn *a, const acase *c, const void *x, const int32_t *lens, void *y, void *saved)
{
    const int64_t L = a->n * a->H, th = a->T * a->hs;
    float *qkvh = malloc(sizeof(float) * (size_t)(3 * L * th)), *yh = malloc(sizeof(float) * (size_t)(L * th));
    float *s = malloc(sizeof(float) * (size_t)(a->T * a->T));

    for (int64_t el = 0; el < 3 * L * th; el++)
        qkvh[el] = bfit_ld(x, c->t, bk_attn_qkv_at(a, el));
    for (int64_t lane = 0; lane < L; lane++) {
        const float *q = qkvh + lane * 3 * th;
        h_scores(a, a->scale, q + th, q, s);
        for (int64_t i = 0; i < a->T; i++)
            h_softmax(a, lens, s + i * a->T, lane, i, c->lean ? NULL : saved, c->lean ? saved : NULL);
        h_drop(a, lens, s, lane);
        h_apply(a, 1.0f, s, 0, q + 2 * th, yh + lane * th);
    }
    for (int64_t el = 0; el < L * th; el++)
        bfit_st(y, c->t, bk_attn_y_at(a, el), yh[el]);
    free(qkvh), free(yh), free(s);
}

/* backward on the host, as bwd_group does it lane by lane */
static void h_bwd(const bk_attn *a, const acase *c, const void *x, const int32_t *lens, const void *dy,
                  const void *saved, void *dx)
{
    const int64_t L = a->n * a->H, th = a->T * a->hs, tt = a->T * a->T;
    float *qkvh = malloc(sizeof(float) * (size_t)(3 * L * th)), *dyh = malloc(sizeof(float) * (size_t)(L * th));
    float *dqh = malloc(sizeof(float) * (size_t)(3 * L * th)), *p = malloc(sizeof(float) * (size_t)tt);
    float *ds = malloc(sizeof(float) * (size_t)tt);

    for (int64_t el = 0; el < 3 * L * th; el++)
        qkvh[el] = bfit_ld(x, c->t, bk_attn_qkv_at(a, el));
    for (int64_t el = 0; el < L * th; el++)
        dyh[el] = bfit_ld(dy, c->t, bk_attn_y_at(a, el));
    for (int64_t lane = 0; lane < L; lane++) {
        const float *q = qkvh + lane * 3 * th, *k = q + th, *v = q + 2 * th, *g = dyh + lane * th;
        float *dq = dqh + lane * 3 * th;
        if (c->lean)
            h_scores(a, a->scale, k, q, p);
        h_scores(a, 1.0f, v, g, ds);
        h_drop(a, lens, ds, lane);
        for (int64_t i = 0; i < a->T; i++) {
            int64_t nk = bk_attn_row_keys(a, lens, lane, i);
            double d = 0;
            for (int l = 0; l < PARTS; l++)
                bk_attn_part_p(a, saved, p + i * a->T, nk, lane, i, l, PARTS);
            for (int l = 0; l < PARTS; l++)
                d += bk_attn_part_dot(p + i * a->T, ds + i * a->T, nk, l, PARTS);
            for (int l = 0; l < PARTS; l++)
                bk_attn_part_ds(p + i * a->T, ds + i * a->T, a->T, (float)d, l, PARTS);
        }
        h_drop(a, lens, p, lane);
        h_apply(a, 1.0f, p, 1, g, dq + 2 * th);
        h_apply(a, a->scale, ds, 0, k, dq);
        h_apply(a, a->scale, ds, 1, q, dq + th);
    }
    for (int64_t el = 0; el < 3 * L * th; el++)
        bfit_st(dx, c->t, bk_attn_qkv_at(a, el), dqh[el]);
    free(qkvh), free(dyh), free(dqh), free(p), free(ds);
}

static void attn_case(const acase *c, int64_t hs)
{
    const int64_t n = 2, T = 37, H = 2, C = H * hs;
    bfit_op_desc d = {.kind = BFIT_OP_ATTN_FWD, .dtype = c->t};
    bk_attn a = {n, T, H, hs, c->causal, c->lean, 1, (int)c->t, (float)(1.0 / sqrt((double)hs)), 0, 0, 0};
    double rel = c->t == BFIT_F32 ? 1e-5 : 1.0 / 128, fl = c->t == BFIT_F32 ? 1e-6 : 1e-3;
    tbuf x = rand_buf(c->t, n * T * 3 * C, -2, 2, 1), dy = rand_buf(c->t, n * T * C, -1, 1, 2);
    tbuf y = tbuf_new(&td, (size_t)(n * T * C) * esz(c->t)), dx = tbuf_new(&td, (size_t)(n * T * 3 * C) * esz(c->t));
    tbuf lens = tbuf_new(&td, (size_t)n * sizeof(int32_t)), saved, ws;
    bfit_op *fwd, *bwd;
    bfit_op_args o = {0};
    void *yh = malloc(y.bytes), *sh, *dxh = malloc(dx.bytes);
    const int32_t *hl = c->padded ? TB_I(lens) : NULL;
    char what[160];

    TB_I(lens)[0] = 6; /* padding after 6 tokens */
    TB_I(lens)[1] = 37;
    tbuf_up(&td, &lens);
    d.u.attn = (typeof(d.u.attn)){n, T, H, hs, c->causal, c->lean, 1, c->drop};
    if (c->drop > 0) { /* as cuda_attn.c's geom */
        a.drop = c->drop;
        a.seed = bk_mix64(ACASE_SEED);
        a.thresh = (uint64_t)((double)c->drop * 4294967296.0);
    }
    assert_int_equal(bfit_op_new(td.dev, &d, &fwd), BFIT_OK);
    d.kind = BFIT_OP_ATTN_BWD;
    assert_int_equal(bfit_op_new(td.dev, &d, &bwd), BFIT_OK);
    saved = tbuf_new(&td, bfit_op_saved_bytes(fwd));
    sh = calloc(1, saved.bytes);
    snprintf(what, sizeof what, "attention %s%s%s%s%s", bfit_dtype_name(c->t), c->causal ? " causal" : "",
             c->lean ? " lean" : "", c->padded ? " padded" : "", c->drop > 0 ? " dropout" : "");

    /* forward: y and what is kept */
    o.src = x.d, o.dst = y.d, o.saved = saved.d, o.lens = c->padded ? lens.d : NULL, o.seed = ACASE_SEED;
    ws = op_ws(fwd);
    run1(fwd, &o, &ws);
    tbuf_free(&td, &ws);
    h_fwd(&a, c, x.h, hl, yh, sh);
    cmp(what, c->t, yh, &y, n * T * C, rel, fl);
    if (c->lean)
        cmp("attention log-sum-exp", BFIT_F32, sh, &saved, n * H * T, 1e-5, 1e-6);
    else
        cmp("attention probabilities", c->t, sh, &saved, n * H * T * T, rel, fl);

    /* backward from the cpu's saved values */
    memset(&o, 0, sizeof o);
    o.src = x.d, o.diff_dst = dy.d, o.diff_src = dx.d, o.saved = saved.d, o.lens = c->padded ? lens.d : NULL;
    o.seed = ACASE_SEED;
    ws = op_ws(bwd);
    run1(bwd, &o, &ws);
    tbuf_free(&td, &ws);
    memset(dxh, 0xFF, dx.bytes); /* every element must be written */
    h_bwd(&a, c, x.h, hl, dy.h, saved.h, dxh);
    strcat(what, " backward");
    cmp(what, c->t, dxh, &dx, n * T * 3 * C, c->t == BFIT_F32 ? 1e-4 : rel, c->t == BFIT_F32 ? 1e-5 : fl);

    bfit_op_free(fwd), bfit_op_free(bwd);
    tbuf_free(&td, &x), tbuf_free(&td, &dy), tbuf_free(&td, &y), tbuf_free(&td, &dx), tbuf_free(&td, &lens);
    tbuf_free(&td, &saved);
    free(yh), free(sh), free(dxh);
}

static void test_attention(void **st)
{
    (void)st;
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < 16; k++) { /* 8 on: dropout on the weights, the GPU's mask against the CPU's */
            acase c = {t ? BFIT_BF16 : BFIT_F32, k & 1, (k >> 1) & 1, (k >> 2) & 1, k & 8 ? 0.3f : 0.0f};
            attn_case(&c, 5);
            attn_case(&c, 80); /* a head wider than a warp's parts */
        }
}

/* ---- embeddings ------------------------------------------------------------------------- */

/* scale: the token rows' factor (1: none); fixed: the positions a constant, left without a gradient (the
 * op must not write diff_bias even when given one); types: the token-type table's rows (above 1: the rows'
 * types in their ids' high bits, sentence pairs) */
static void embed_case(bfit_dtype t, int P, int types, float scale, int fixed)
{
    const int64_t n = 3, T = 5, C = 7, V = 11;
    bk_embed e = {n, T, C, V, P, types, (int)t, scale};
    bfit_op_desc d = {.kind = BFIT_OP_EMBED_FWD, .dtype = t};
    tbuf ids = tbuf_new(&td, (size_t)(n * T) * sizeof(int32_t));
    tbuf tok = rand_buf(BFIT_F32, V * C, -1, 1, 3), pos = rand_buf(BFIT_F32, (P ? P : 1) * C, -1, 1, 4);
    tbuf typ = rand_buf(BFIT_F32, (types ? types : 1) * C, -1, 1, 5), dy = rand_buf(t, n * T * C, -1, 1, 6);
    tbuf y = tbuf_new(&td, (size_t)(n * T * C) * esz(t));
    tbuf dtok = rand_buf(BFIT_F32, V * C, -1, 1, 7), dpos = rand_buf(BFIT_F32, (P ? P : 1) * C, -1, 1, 8);
    tbuf dtyp = rand_buf(BFIT_F32, (types ? types : 1) * C, -1, 1, 9);
    float *htok = malloc(dtok.bytes), *hpos = malloc(dpos.bytes), *htyp = malloc(dtyp.bytes);
    void *yh = malloc(y.bytes);
    bfit_op *op;
    bfit_op_args o = {0};
    tbuf ws;

    for (int64_t r = 0; r < n * T; r++) /* repeats: several rows into one table row */
        TB_I(ids)[r] = (int32_t)((r * 7) % 4 + (r == 3 ? 9 : 0)) |
                       (types > 1 ? (int32_t)(r % T * types / T) << BFIT_TOKEN_TYPE_SHIFT : 0);
    tbuf_up(&td, &ids);
    memcpy(htok, dtok.h, dtok.bytes), memcpy(hpos, dpos.h, dpos.bytes), memcpy(htyp, dtyp.h, dtyp.bytes);
    d.u.embed = (typeof(d.u.embed)){n, T, C, V, P, types, fixed, scale};
    assert_int_equal(bfit_op_new(td.dev, &d, &op), BFIT_OK);
    o.src = ids.d, o.weights = tok.d, o.bias = P ? pos.d : NULL, o.shift = types ? typ.d : NULL, o.dst = y.d;
    ws = op_ws(op);
    run1(op, &o, &ws);
    tbuf_free(&td, &ws);
    for (int64_t el = 0; el < n * T * C; el++)
        bk_embed_fwd_one(&e, TB_I(ids), tok.h, P ? pos.h : NULL, types ? typ.h : NULL, yh, el);
    cmp("embedding forward", t, yh, &y, n * T * C, 0, 0);
    bfit_op_free(op);

    d.kind = BFIT_OP_EMBED_BWD;
    assert_int_equal(bfit_op_new(td.dev, &d, &op), BFIT_OK);
    memset(&o, 0, sizeof o);
    o.src = ids.d, o.diff_dst = dy.d, o.diff_weights = dtok.d, o.diff_bias = P ? dpos.d : NULL;
    o.diff_shift = types ? dtyp.d : NULL;
    ws = op_ws(op);
    run1(op, &o, &ws);
    tbuf_free(&td, &ws);
    /* cuda_attn.cu's split: per column, ids in chunks; positions per (t, c); the type row per c */
    for (int64_t k = 0; k < 4; k++)
        for (int64_t c = 0; c < C; c++)
            bk_embed_bwd_tok(&e, TB_I(ids), dy.h, htok, c, k * 3, (k + 1) * 3);
    for (int64_t tt = 0; P && !fixed && tt < T; tt++)
        for (int64_t c = 0; c < C; c++)
            bk_embed_bwd_pos(&e, NULL, dy.h, hpos, tt, c);
    for (int64_t k = 0; k < types; k++)
        for (int64_t c = 0; c < C; c++)
            bk_embed_bwd_pos(&e, TB_I(ids), dy.h, htyp, k, c);
    cmp("embedding backward, tokens", BFIT_F32, htok, &dtok, V * C, 0, 0);
    if (P) /* fixed: the buffer as it was */
        cmp("embedding backward, positions", BFIT_F32, hpos, &dpos, P * C, 0, 0);
    if (types)
        cmp("embedding backward, token types", BFIT_F32, htyp, &dtyp, types * C, 0, 0);
    bfit_op_free(op);
    tbuf_free(&td, &ids), tbuf_free(&td, &tok), tbuf_free(&td, &pos), tbuf_free(&td, &typ), tbuf_free(&td, &dy);
    tbuf_free(&td, &y), tbuf_free(&td, &dtok), tbuf_free(&td, &dpos), tbuf_free(&td, &dtyp);
    free(htok), free(hpos), free(htyp), free(yh);
}

static void test_embedding(void **st)
{
    (void)st;
    embed_case(BFIT_F32, 0, 0, 1.0f, 0);
    embed_case(BFIT_F32, 8, 1, 1.0f, 0);
    embed_case(BFIT_BF16, 5, 0, 1.0f, 0);
    embed_case(BFIT_BF16, 6, 1, 1.0f, 0);
    /* the Transformer tutorial's embeddings: scaled by sqrt(C), a constant (sinusoidal) position table */
    embed_case(BFIT_F32, 8, 0, sqrtf(7.0f), 1);
    embed_case(BFIT_BF16, 6, 1, sqrtf(7.0f), 1);
    embed_case(BFIT_F32, 5, 1, 2.5f, 0);
    /* sentence pairs: each token's type (of 2, of 3) in its id's high bits */
    embed_case(BFIT_F32, 8, 2, 1.0f, 0);
    embed_case(BFIT_BF16, 6, 3, 1.0f, 0);
}

/* ---- activations ------------------------------------------------------------------- */

/* Every activation's forward and backward (cuda_elt.cu's thread work:
 * bk_act, bk_act_grad) against the CPU device's oneDNN op, f32, on inputs
 * over [-8, 8) (the sigmoids' tails included); relu and clip exactly (a
 * selection), the others to oneDNN's few ulps; clip's and relu's backward
 * from the output too. The order of cuda_core.h's enum is device.h's. */
static void act_case(bfit_eltwise_alg alg, int use_dst)
{
    const int64_t n = 4099;
    /* clip's bounds, hardsigmoid's alpha and beta, leaky relu's slope, elu's alpha */
    const float lo = alg == BFIT_ELT_HARDSIGMOID ? 0.25f : alg == BFIT_ELT_ELU ? 0.75f : -0.5f,
                hi = alg == BFIT_ELT_HARDSIGMOID ? 0.375f : 2.0f;
    bfit_op_desc d = {.kind = BFIT_OP_ELTWISE_FWD, .dtype = BFIT_F32};
    tbuf x = rand_buf(BFIT_F32, n, -8, 8, 61 + alg), dy = rand_buf(BFIT_F32, n, -1, 1, 71);
    tbuf y = tbuf_new(&td, n * 4), dx = tbuf_new(&td, n * 4), ws;
    float *yh = malloc(n * 4), *dxh = malloc(n * 4);
    /* relu and clip select, leaky relu multiplies once; the others' exp, erf and tanh are libm's here,
       oneDNN's polynomials there (hardswish's few products may round otherwise) */
    double tol = alg == BFIT_ELT_RELU || alg == BFIT_ELT_CLIP || alg == BFIT_ELT_LEAKYRELU ? 0 : 16 * FLT_EPSILON;
    bfit_op_args o = {0};
    bfit_op *op;

    assert_non_null(yh), assert_non_null(dxh);
    d.u.elt = (typeof(d.u.elt)){.n = n, .alg = alg, .lo = lo, .hi = hi, .use_dst = use_dst};
    assert_int_equal(bfit_op_new(td.dev, &d, &op), BFIT_OK);
    o.src = x.d, o.dst = y.d;
    ws = op_ws(op);
    run1(op, &o, &ws);
    tbuf_free(&td, &ws);
    bfit_op_free(op);
    for (int64_t i = 0; i < n; i++)
        yh[i] = bk_act((int)alg, TB_F(x)[i], lo, hi);
    cmp("activation forward", BFIT_F32, yh, &y, n, tol, tol);

    d.kind = BFIT_OP_ELTWISE_BWD;
    assert_int_equal(bfit_op_new(td.dev, &d, &op), BFIT_OK);
    memset(&o, 0, sizeof o);
    o.src = use_dst ? y.d : x.d, o.diff_dst = dy.d, o.diff_src = dx.d;
    ws = op_ws(op);
    run1(op, &o, &ws);
    tbuf_free(&td, &ws);
    bfit_op_free(op);
    for (int64_t i = 0; i < n; i++)
        dxh[i] = bk_act_grad((int)alg, use_dst ? yh[i] : TB_F(x)[i], TB_F(dy)[i], lo, hi);
    cmp("activation backward", BFIT_F32, dxh, &dx, n, tol, tol);
    tbuf_free(&td, &x), tbuf_free(&td, &dy), tbuf_free(&td, &y), tbuf_free(&td, &dx);
    free(yh), free(dxh);
}

static void test_activations(void **st)
{
    (void)st;
    /* hardsigmoid, softplus, selu and celu: the cpu device runs this very function (oneDNN 2.6
       has none, or without their parameters); test_device_dense and test_layers_torch check them
       against their definitions */
    for (int alg = BFIT_ELT_RELU; alg <= BFIT_ELT_ELU; alg++) {
        if (alg == BFIT_ELT_HARDSIGMOID)
            continue;
        print_message("  activation %d\n", alg);
        act_case((bfit_eltwise_alg)alg, 0);
    }
    act_case(BFIT_ELT_RELU, 1);
    act_case(BFIT_ELT_CLIP, 1);
}

/* ---- copies: concatenation, slices, transposition, broadcast add -------------------------- */

static void run_desc(const bfit_op_desc *d, bfit_op_args *o)
{
    bfit_op *op;
    tbuf ws;
    assert_int_equal(bfit_op_new(td.dev, d, &op), BFIT_OK);
    ws = op_ws(op);
    run1(op, o, &ws);
    tbuf_free(&td, &ws);
    bfit_op_free(op);
}

/* the element's bits, as a copy kernel moves them */
static void copy_el(bfit_dtype t, const void *src, int64_t si, void *dst, int64_t di)
{
    memcpy((char *)dst + di * (int64_t)esz(t), (const char *)src + si * (int64_t)esz(t), esz(t));
}

/* A concatenation of three inputs, the first broadcast when bcast (a
 * class token), forward and backward as cuda_concat.c launches them, input
 * by input: the copies' index maps, the adds (input 1's gradient added)
 * and the broadcast sum, against cpu_concat.c: equal. */
static void concat_case(bfit_dtype t, int64_t rows, int bcast)
{
    const int64_t cols[3] = {5, 33, 1}, ld = 39;
    bfit_op_desc d = {.kind = BFIT_OP_CONCAT_FWD, .dtype = t};
    tbuf x[3], g[3], y = tbuf_new(&td, (size_t)(rows * ld) * esz(t)), dy = rand_buf(t, rows * ld, -1, 1, 83);
    void *gh[3], *yh = malloc(y.bytes);
    const void *srcs[3];
    void *dsts[3];
    bfit_op_args o = {0};
    char what[96];

    d.u.concat.rows = rows, d.u.concat.n = 3, d.u.concat.bcast = (uint32_t)bcast;
    for (int k = 0; k < 3; k++) {
        int b = k == 0 && bcast;
        d.u.concat.cols[k] = cols[k];
        x[k] = rand_buf(t, (b ? 1 : rows) * cols[k], -2, 2, 80 + (uint64_t)k);
        g[k] = rand_buf(b ? BFIT_F32 : t, (b ? 1 : rows) * cols[k], -1, 1, 90 + (uint64_t)k);
        gh[k] = malloc(g[k].bytes);
        memcpy(gh[k], g[k].h, g[k].bytes);
        srcs[k] = x[k].d, dsts[k] = g[k].d;
    }
    o.srcs = srcs, o.dst = y.d;
    run_desc(&d, &o);
    for (int k = 0, off = 0; k < 3; off += (int)cols[k], k++) {
        bk_copy2d c = {rows, cols[k], k == 0 && bcast ? 0 : cols[k], 0, ld, off};
        for (int64_t el = 0; el < rows * cols[k]; el++) {
            int64_t si, di;
            bk_copy2d_at(&c, el, &si, &di);
            copy_el(t, x[k].h, si, yh, di);
        }
    }
    snprintf(what, sizeof what, "concat forward (%s, %lld rows%s)", bfit_dtype_name(t), (long long)rows,
             bcast ? ", a broadcast input" : "");
    cmp(what, t, yh, &y, rows * ld, 0, 0);

    d.kind = BFIT_OP_CONCAT_BWD;
    memset(&o, 0, sizeof o);
    o.diff_dst = dy.d, o.dsts = dsts, o.add_mask = 0x2;
    run_desc(&d, &o);
    for (int k = 0, off = 0; k < 3; off += (int)cols[k], k++) {
        bk_copy2d c = {rows, cols[k], ld, off, cols[k], 0};
        for (int64_t j = 0; k == 0 && bcast && j < cols[k]; j++)
            bk_col_sum(dy.h, (int)t, gh[k], rows, ld, off, j);
        for (int64_t el = 0; !(k == 0 && bcast) && el < rows * cols[k]; el++) {
            int64_t si, di;
            bk_copy2d_at(&c, el, &si, &di);
            if (k == 1)
                bk_copy2d_add(&c, dy.h, gh[k], (int)t, el);
            else
                copy_el(t, dy.h, si, gh[k], di);
        }
        snprintf(what, sizeof what, "concat backward (%s), input %d (%s)", bfit_dtype_name(t), k,
                 k == 0 && bcast ? "broadcast" : k == 1 ? "added" : "set");
        cmp(what, k == 0 && bcast ? BFIT_F32 : t, gh[k], &g[k], (k == 0 && bcast ? 1 : rows) * cols[k], 0, 0);
    }
    for (int k = 0; k < 3; k++)
        tbuf_free(&td, &x[k]), tbuf_free(&td, &g[k]), free(gh[k]);
    tbuf_free(&td, &y), tbuf_free(&td, &dy), free(yh);
}

/* Transposition, the broadcast add and a slice with its backward (which
 * writes every element: zeros outside the slice), from cuda_core.h's
 * index maps, against cpu_concat.c: equal. */
static void rows_case(bfit_dtype t)
{
    const int64_t n = 3, A = 5, B = 7, rows = 4, ld = 11, off = 3, len = 6;
    bfit_op_desc d = {.kind = BFIT_OP_TRANSPOSE, .dtype = t};
    tbuf x = rand_buf(t, n * A * B, -2, 2, 101), y = tbuf_new(&td, x.bytes), b = rand_buf(BFIT_F32, B, -1, 1, 102);
    tbuf s = tbuf_new(&td, (size_t)(rows * len) * esz(t)), ds = tbuf_new(&td, (size_t)(rows * ld) * esz(t));
    tbuf sx = rand_buf(t, rows * ld, -2, 2, 103);
    void *h = malloc(x.bytes > ds.bytes ? x.bytes : ds.bytes);
    bk_copy2d c = {rows, len, ld, off, len, 0};
    bfit_op_args o = {0};

    d.u.tr = (typeof(d.u.tr)){n, A, B, 1};
    o.src = x.d, o.dst = y.d;
    run_desc(&d, &o);
    for (int64_t el = 0; el < n * A * B; el++)
        copy_el(t, x.h, bk_tr_at(A, B, 1, el), h, el);
    cmp("transpose", t, h, &y, n * A * B, 0, 0);

    d = (bfit_op_desc){.kind = BFIT_OP_ADD_ROWS, .dtype = t};
    d.u.rows = (typeof(d.u.rows)){n * A, B};
    o.src = x.d, o.bias = b.d, o.dst = y.d;
    run_desc(&d, &o);
    for (int64_t el = 0; el < n * A * B; el++)
        bk_add_rows_one(x.h, TB_F(b), h, (int)t, B, el);
    cmp("broadcast add", t, h, &y, n * A * B, 0, 0);

    d = (bfit_op_desc){.kind = BFIT_OP_SLICE_FWD, .dtype = t};
    d.u.slice = (typeof(d.u.slice)){rows, ld, off, len};
    memset(&o, 0, sizeof o);
    o.src = sx.d, o.dst = s.d;
    run_desc(&d, &o);
    for (int64_t el = 0; el < rows * len; el++) {
        int64_t si, di;
        bk_copy2d_at(&c, el, &si, &di);
        copy_el(t, sx.h, si, h, di);
    }
    cmp("slice", t, h, &s, rows * len, 0, 0);
    d.kind = BFIT_OP_SLICE_BWD;
    memset(&o, 0, sizeof o);
    o.diff_dst = s.d, o.diff_src = ds.d; /* the slice back into its place */
    run_desc(&d, &o);
    for (int64_t el = 0; el < rows * ld; el++) {
        int64_t i = bk_slice_bwd_at(ld, off, len, el);
        if (i >= 0)
            copy_el(t, s.h, i, h, el);
        else
            bfit_st(h, t, el, 0.0f);
    }
    cmp("slice backward", t, h, &ds, rows * ld, 0, 0);
    tbuf_free(&td, &x), tbuf_free(&td, &y), tbuf_free(&td, &b), tbuf_free(&td, &s), tbuf_free(&td, &ds);
    tbuf_free(&td, &sx), free(h);
}

/* A transposition larger than cpu_concat.c's 32 x 32 tiles, neither side a
 * multiple of them (ConvNeXt's [C, H*W]), or of blocks of q elements (a
 * channel shuffle's maps): the same index map. */
static void transpose_case(bfit_dtype t, int64_t n, int64_t A, int64_t B, int64_t q)
{
    bfit_op_desc d = {.kind = BFIT_OP_TRANSPOSE, .dtype = t};
    tbuf x = rand_buf(t, n * A * B * q, -2, 2, 104), y = tbuf_new(&td, x.bytes);
    void *h = malloc(x.bytes);
    bfit_op_args o = {0};
    char what[80];

    d.u.tr = (typeof(d.u.tr)){n, A, B, q};
    o.src = x.d, o.dst = y.d;
    run_desc(&d, &o);
    for (int64_t el = 0; el < n * A * B * q; el++)
        copy_el(t, x.h, bk_tr_at(A, B, q, el), h, el);
    snprintf(what, sizeof what, "transpose %lld x %lld x %lld of %lld", (long long)n, (long long)A, (long long)B,
             (long long)q);
    cmp(what, t, h, &y, n * A * B * q, 0, 0);
    tbuf_free(&td, &x), tbuf_free(&td, &y), free(h);
}

static void test_copies(void **st)
{
    (void)st;
    for (int i = 0; i < 2; i++) {
        bfit_dtype t = i ? BFIT_BF16 : BFIT_F32;
        concat_case(t, 7, 0);
        concat_case(t, 4, 1);
        rows_case(t);
        transpose_case(t, 3, 37, 70, 1);
        transpose_case(t, 2, 96, 64, 1);
        transpose_case(t, 2, 2, 12, 9); /* ShuffleNet's channel shuffle: [2, C/2] maps of 3x3 */
        transpose_case(t, 3, 3, 4, 5);
    }
}

/* ---- channel gates ---------------------------------------------------------------------- */

/* the lanes' sums as a warp's shuffle tree adds them (cuda_chscale.cu) */
static double warp_tree(double *v)
{
    for (int o = PARTS / 2; o > 0; o >>= 1)
        for (int l = 0; l < o; l++)
            v[l] += v[l + o];
    return v[0];
}

/* CHSCALE forward and backward as cuda_chscale.cu's threads do them: the
 * products equal to the CPU's; the scales' gradient, 32 parts added in a
 * tree against the CPU's one sum in element order, each in double from
 * exact products: 1e-6 relative (f32), a bf16 ulp (bf16). Backward also
 * without diff_src. */
static void chscale_case(bfit_dtype t, int64_t n, int64_t c, int64_t hw)
{
    const int64_t rows = n * c, N = rows * hw;
    bfit_op_desc d = {.kind = BFIT_OP_CHSCALE_FWD, .dtype = t};
    tbuf x = rand_buf(t, N, -2, 2, 111), s = rand_buf(t, rows, 0, 1, 112), y = tbuf_new(&td, x.bytes);
    tbuf dy = rand_buf(t, N, -1, 1, 113), dx = tbuf_new(&td, x.bytes), ds = tbuf_new(&td, s.bytes);
    void *yh = malloc(x.bytes), *dxh = malloc(x.bytes), *dsh = malloc(s.bytes);
    double rel = t == BFIT_F32 ? 1e-6 : 1.0 / 256;
    bfit_op_args o = {0};
    char what[96];

    d.u.chs = (typeof(d.u.chs)){n, c, hw, 0};
    o.src = x.d, o.src2 = s.d, o.dst = y.d;
    run_desc(&d, &o);
    for (int64_t el = 0; el < N; el++)
        bk_chs_fwd_one(x.h, s.h, yh, (int)t, hw, el);
    snprintf(what, sizeof what, "channel scaling (%s, hw %lld)", bfit_dtype_name(t), (long long)hw);
    cmp(what, t, yh, &y, N, 0, 0);
    d.kind = BFIT_OP_CHSCALE_BWD;
    for (int v = 0; v < 2; v++) {
        memset(&o, 0, sizeof o);
        o.src = x.d, o.src2 = s.d, o.diff_dst = dy.d, o.diff_src = v ? NULL : dx.d, o.dst = ds.d;
        run_desc(&d, &o);
        for (int64_t r = 0; r < rows; r++) {
            double part[PARTS];
            for (int l = 0; l < PARTS; l++)
                part[l] = bk_chs_bwd_part(x.h, s.h, dy.h, v ? NULL : dxh, (int)t, r, hw, l, PARTS);
            bfit_st(dsh, t, r, (float)warp_tree(part));
        }
        if (!v)
            cmp("channel scaling backward, input gradient", t, dxh, &dx, N, 0, 0);
        cmp(v ? "channel scaling backward, scales' gradient alone" : "channel scaling backward, scales' gradient", t,
            dsh, &ds, rows, rel, 1e-7);
    }
    tbuf_free(&td, &x), tbuf_free(&td, &s), tbuf_free(&td, &y), tbuf_free(&td, &dy), tbuf_free(&td, &dx);
    tbuf_free(&td, &ds), free(yh), free(dxh), free(dsh);
}

static void test_chscale(void **st)
{
    (void)st;
    for (int i = 0; i < 2; i++) {
        bfit_dtype t = i ? BFIT_BF16 : BFIT_F32;
        chscale_case(t, 2, 3, 5);   /* fewer elements than a warp's lanes */
        chscale_case(t, 3, 4, 63);  /* odd */
        chscale_case(t, 2, 5, 1);
        chscale_case(t, 2, 3, 700); /* many per lane */
    }
}

/* ---- PReLU ------------------------------------------------------------------------------- */

/* The backward's partial sums as cuda_prelu.cu's threads make them, dx
 * too (dx not NULL): hw > 1, a row's 32 parts added in a warp's tree, into
 * rs [n c]; hw == 1, a thread per part (chunk of BK_PRELU_CH samples,
 * channel), into rs [ceil(n / CH) c]. */
static void prelu_host_sums(const bk_prelu *p, const tbuf *x, const tbuf *a, const tbuf *dy, void *dx, double *rs)
{
    if (p->hw == 1) {
        for (int64_t t = 0; t < bk_prelu_chunks(p) * p->c; t++)
            rs[t] = bk_prelu_col_part(p, x->h, a->h, dy->h, dx, t);
        return;
    }
    for (int64_t r = 0; r < p->n * p->c; r++) {
        double part[PARTS];
        for (int l = 0; l < PARTS; l++)
            part[l] = bk_prelu_bwd_part(p, x->h, a->h, dy->h, dx, r, l, PARTS);
        rs[r] = warp_tree(part);
    }
}

/* The input's gradient alone (no diff_weights): a thread per element, equal
 * to the CPU's. */
static void prelu_dx_only(const bk_prelu *p, bfit_op_desc d, const tbuf *x, const tbuf *a, const tbuf *dy, tbuf *dx,
                          void *dxh, const char *what)
{
    const int64_t N = p->n * p->c * p->hw;
    bfit_op_args o = {0};

    o.src = x->d, o.weights = a->d, o.diff_dst = dy->d, o.diff_src = dx->d;
    run_desc(&d, &o);
    for (int64_t el = 0; el < N; el++)
        bk_prelu_dx_one(p, x->h, a->h, dy->h, dxh, el);
    cmp(what, (bfit_dtype)p->dt, dxh, dx, N, 0, 0);
}

/* PRELU forward and backward as cuda_prelu.cu's threads do them: the
 * output and the input's gradient one product each (equal to the CPU's);
 * with hw > 1 each row's slope-gradient sum, 32 parts added in a warp's
 * tree against the CPU's one sum in element order, both in double from
 * exact products, then the rows in the CPU's order: equal but where a
 * double rounding tips the float, 1e-6 relative (and 1e-6 absolute: the
 * accumulating case adds that float to dw); with hw == 1 the parts are the
 * CPU's sums in the CPU's order: the same bits. Set and accumulate, with
 * and without diff_src, and dx alone; slopes shared or per channel;
 * PReLU or linear (LayerScale). */
static void prelu_case(bfit_dtype t, int64_t n, int64_t c, int64_t hw, int shared, int lin)
{
    const int64_t N = n * c * hw, ns = shared ? 1 : c, nr = hw == 1 ? (n + BK_PRELU_CH - 1) / BK_PRELU_CH : n;
    bk_prelu p = {n, c, hw, shared, (int)t, lin};
    bfit_op_desc d = {.kind = BFIT_OP_PRELU_FWD, .dtype = t, .u.prelu = {n, c, hw, shared, 0, lin}};
    tbuf x = rand_buf(t, N, -2, 2, 121), a = rand_buf(BFIT_F32, ns, -0.5f, 0.5f, 122), y = tbuf_new(&td, x.bytes);
    tbuf dy = rand_buf(t, N, -1, 1, 123), dx = tbuf_new(&td, x.bytes), dw = rand_buf(BFIT_F32, ns, -1, 1, 124);
    void *yh = malloc(x.bytes), *dxh = malloc(x.bytes);
    float *dwh = malloc(dw.bytes), *dw0 = malloc(dw.bytes);
    double *rs = malloc((size_t)(nr * c) * sizeof(double));
    bfit_op_args o = {0};
    char what[160];

    memcpy(dw0, dw.h, dw.bytes);
    o.src = x.d, o.weights = a.d, o.dst = y.d;
    run_desc(&d, &o);
    for (int64_t el = 0; el < N; el++)
        bk_prelu_fwd_one(&p, x.h, a.h, yh, el);
    snprintf(what, sizeof what, "prelu (%s, n %lld, hw %lld, %s%s)", bfit_dtype_name(t), (long long)n, (long long)hw,
             shared ? "shared" : "per channel", lin ? ", linear" : "");
    cmp(what, t, yh, &y, N, 0, 0);
    d.kind = BFIT_OP_PRELU_BWD;
    prelu_dx_only(&p, d, &x, &a, &dy, &dx, dxh, what);
    for (int v = 0; v < 4; v++) { /* bit 0: accumulate; bit 1: no diff_src */
        d.accumulate = v & 1;
        memcpy(dw.h, dw0, dw.bytes), memcpy(dwh, dw0, dw.bytes);
        tbuf_up(&td, &dw);
        memset(&o, 0, sizeof o);
        o.src = x.d, o.weights = a.d, o.diff_dst = dy.d, o.diff_src = v & 2 ? NULL : dx.d, o.diff_weights = dw.d;
        run_desc(&d, &o);
        prelu_host_sums(&p, &x, &a, &dy, v & 2 ? NULL : dxh, rs);
        for (int64_t j = 0; j < ns; j++)
            bk_prelu_slope_grad(&p, rs, dwh, d.accumulate, j);
        snprintf(what, sizeof what, "prelu backward (%s, n %lld, hw %lld, %s%s, %s%s)", bfit_dtype_name(t),
                 (long long)n, (long long)hw, shared ? "shared" : "per channel", lin ? ", linear" : "",
                 v & 1 ? "accumulating" : "setting", v & 2 ? ", no diff_src" : "");
        if (!(v & 2))
            cmp(what, t, dxh, &dx, N, 0, 0);
        cmp(what, BFIT_F32, dwh, &dw, ns, hw == 1 ? 0 : 1e-6, hw == 1 ? 0 : 1e-6);
        if (hw == 1 && memcmp(dwh, dw.h, dw.bytes))
            fail_msg("%s: the slopes' gradient is not the cpu's bit for bit", what);
    }
    tbuf_free(&td, &x), tbuf_free(&td, &a), tbuf_free(&td, &y), tbuf_free(&td, &dy), tbuf_free(&td, &dx);
    tbuf_free(&td, &dw), free(yh), free(dxh), free(dwh), free(dw0), free(rs);
}

static void test_prelu(void **st)
{
    (void)st;
    for (int i = 0; i < 4; i++) {
        bfit_dtype t = i & 1 ? BFIT_BF16 : BFIT_F32;
        int lin = i >> 1;
        for (int shared = 0; shared < 2; shared++) {
            prelu_case(t, 2, 3, 5, shared, lin);   /* fewer elements than a warp's lanes */
            prelu_case(t, 3, 4, 63, shared, lin);  /* odd */
            prelu_case(t, 4, 5, 1, shared, lin);   /* a vector's features: one chunk */
            prelu_case(t, 2, 3, 700, shared, lin); /* many per lane */
            prelu_case(t, 600, 37, 1, shared, lin); /* tokens: chunks of 256, the last partial */
            prelu_case(t, 512, 130, 1, shared, lin); /* whole chunks; the cpu's column tiles */
        }
    }
}

/* ---- group normalisation --------------------------------------------------------------- */

/* GNORM forward as cuda_gnorm.cu's warps do it: a row's 32 parts of each
 * sum added in a warp's tree, then its outputs part by part. */
static void gn_host_fwd(const bk_gnorm *q, const void *x, const float *sc, const float *sh, void *y, float *mean,
                        float *var)
{
    for (int64_t r = 0; r < q->n * q->g; r++) {
        double part[PARTS], mu, v;
        for (int l = 0; l < PARTS; l++)
            part[l] = bk_gn_part_sum(q, x, r, l, PARTS);
        mu = warp_tree(part) / (double)q->k;
        for (int l = 0; l < PARTS; l++)
            part[l] = bk_gn_part_sq(q, x, r, mu, l, PARTS);
        v = warp_tree(part) / (double)q->k;
        mean[r] = (float)mu, var[r] = (float)v;
        for (int l = 0; l < PARTS; l++)
            bk_gn_fwd_part(q, x, sc, sh, y, r, (float)mu, bk_gn_rstd(v, q->eps), l, PARTS);
    }
}

/* GNORM backward as cuda_gnorm.cu's kernels do it, in their order: the
 * (sample, channel) parts (from BK_GN_WARP elements a row 32 parts in a
 * warp's tree, else one in element order), with dx the rows' sums then dx
 * element by element (dx may be dy), then the channels' gradients. */
static void gn_host_bwd(const bk_gnorm *q, const void *x, const float *mean, const float *var, const void *dy,
                        const float *sc, void *dx, float *dsc, float *dsh, int acc, double *ws)
{
    for (int64_t t = 0; t < q->n * q->c; t++) {
        double d[2], g[PARTS], b[PARTS];
        if (q->hw < BK_GN_WARP) {
            bk_gn_bwd_part(q, x, dy, mean, var, t, 0, 1, ws + 2 * t);
            continue;
        }
        for (int l = 0; l < PARTS; l++) {
            bk_gn_bwd_part(q, x, dy, mean, var, t, l, PARTS, d);
            g[l] = d[0], b[l] = d[1];
        }
        ws[2 * t] = warp_tree(g), ws[2 * t + 1] = warp_tree(b);
    }
    if (dx) {
        for (int64_t r = 0; r < q->n * q->g; r++)
            bk_gn_row_sums(q, ws, sc, var, ws, r);
        for (int64_t el = 0; el < q->n * q->c * q->hw; el++)
            bk_gn_dx_one(q, x, dy, mean, sc, ws, dx, el);
    }
    for (int64_t ch = 0; ch < q->c; ch++)
        bk_gn_param_grad(q, ws, dsc, dsh, acc, ch);
}

/* The backward on the CPU's statistics (mean, var: the CPU forward's),
 * setting and accumulating, with and without diff_src, and in place (dx =
 * dy). dx: the CPU's formula in double, rounded once, on parts that differ
 * from the CPU's only by the order of double additions (the warp's tree),
 * and either side may fuse a multiply-add: the doubles differ by a few
 * ulps of the terms, so the stored values by at most one ulp of their
 * dtype (2^-23, f32; 2^-7 relative, bf16) but near zero, where the terms'
 * double error (1e-15) is the bound. The scale's and shift's gradients
 * add the parts in the CPU's order: below BK_GN_WARP the parts are the
 * CPU's own sums (dy xhat exact in double, fused or not), so equal to the
 * bit; above, equal but where a double rounding tips the float: 1e-6
 * relative and absolute (accumulating adds that float to the old value). */
static void gnorm_bwd(const bk_gnorm *q, bfit_op_desc d, const tbuf *x, const tbuf *sc, const tbuf *mean,
                      const tbuf *var, const char *what0)
{
    const int64_t N = q->n * q->c * q->hw;
    const bfit_dtype t = (bfit_dtype)q->dt;
    const int exact = q->hw < BK_GN_WARP;
    tbuf dy = rand_buf(t, N, -1, 1, 134), dyi = tbuf_new(&td, dy.bytes), dx = tbuf_new(&td, dy.bytes);
    tbuf dsc = rand_buf(BFIT_F32, q->c, -1, 1, 135), dsh = rand_buf(BFIT_F32, q->c, -1, 1, 136);
    float *p0 = malloc(2 * dsc.bytes), *gsc = malloc(dsc.bytes), *gsh = malloc(dsh.bytes);
    void *dxh = malloc(dy.bytes);
    double *ws = malloc((size_t)bk_gn_ws_doubles(q) * sizeof(double));
    bfit_op_args o = {0};
    char what[256];

    memcpy(p0, dsc.h, dsc.bytes), memcpy(p0 + q->c, dsh.h, dsh.bytes);
    d.kind = BFIT_OP_GNORM_BWD;
    for (int v = 0; v < 5; v++) { /* bit 0: accumulate; bit 1: no diff_src; 4: in place, setting */
        d.accumulate = v & 1;
        memcpy(dsc.h, p0, dsc.bytes), memcpy(dsh.h, p0 + q->c, dsh.bytes), memcpy(dyi.h, dy.h, dy.bytes);
        memcpy(gsc, p0, dsc.bytes), memcpy(gsh, p0 + q->c, dsh.bytes), memcpy(dxh, dy.h, dy.bytes);
        tbuf_up(&td, &dsc), tbuf_up(&td, &dsh), tbuf_up(&td, &dyi);
        memset(&o, 0, sizeof o);
        o.src = x->d, o.scale = sc->d, o.mean = mean->d, o.var = var->d, o.diff_scale = dsc.d, o.diff_shift = dsh.d;
        o.diff_dst = v == 4 ? dyi.d : dy.d, o.diff_src = v == 4 ? dyi.d : v & 2 ? NULL : dx.d;
        run_desc(&d, &o);
        gn_host_bwd(q, x->h, mean->h, var->h, v == 4 ? dxh : dy.h, sc->h, v & 2 ? NULL : dxh, gsc, gsh, v & 1, ws);
        snprintf(what, sizeof what, "%s backward (%s%s)", what0, v & 1 ? "accumulating" : "setting",
                 v & 2 ? ", no diff_src" : v == 4 ? ", in place" : "");
        if (!(v & 2))
            cmp(what, t, dxh, v == 4 ? &dyi : &dx, N, t == BFIT_F32 ? 1e-6 : 1.0 / 128, 1e-9);
        cmp(what, BFIT_F32, gsc, &dsc, q->c, exact ? 0 : 1e-6, exact ? 0 : 1e-6);
        cmp(what, BFIT_F32, gsh, &dsh, q->c, exact ? 0 : 1e-6, exact ? 0 : 1e-6);
        if (exact && (memcmp(gsc, dsc.h, dsc.bytes) || memcmp(gsh, dsh.h, dsh.bytes)))
            fail_msg("%s: the scale's or shift's gradient is not the cpu's bit for bit", what);
    }
    tbuf_free(&td, &dy), tbuf_free(&td, &dyi), tbuf_free(&td, &dx), tbuf_free(&td, &dsc), tbuf_free(&td, &dsh);
    free(p0), free(gsc), free(gsh), free(dxh), free(ws);
}

/* GNORM forward against the CPU's: the statistics' sums in a warp's tree
 * against the CPU's one ordered sum, both in double, so the f32 mean and
 * variance equal but where a double rounding tips the float (1e-6
 * relative); the outputs one float formula, which either side may fuse
 * (y = xhat scale + shift): an ulp (f32: 1e-6 relative, 1e-6 absolute
 * near zero; bf16: 2^-7 relative). Data offset from zero, so that the mean
 * matters. Then the backward, on the CPU's statistics. */
static void gnorm_case(bfit_dtype t, int64_t n, int64_t c, int64_t hw, int64_t g)
{
    const int64_t N = n * c * hw, rows = n * g;
    bk_gnorm q = bk_gn_geom(n, c, hw, g, 1e-5f, (int)t);
    bfit_op_desc d = {.kind = BFIT_OP_GNORM_FWD, .dtype = t, .u.gnorm = {n, c, hw, (int)g, 1e-5f}};
    tbuf x = rand_buf(t, N, -1, 3, 131), sc = rand_buf(BFIT_F32, c, 0.5f, 1.5f, 132);
    tbuf sh = rand_buf(BFIT_F32, c, -1, 1, 133), y = tbuf_new(&td, x.bytes);
    tbuf mean = tbuf_new(&td, (size_t)rows * sizeof(float)), var = tbuf_new(&td, (size_t)rows * sizeof(float));
    void *yh = malloc(x.bytes);
    float *mh = malloc(mean.bytes), *vh = malloc(var.bytes);
    bfit_op_args o = {0};
    char what[128];

    o.src = x.d, o.dst = y.d, o.scale = sc.d, o.shift = sh.d, o.mean = mean.d, o.var = var.d;
    run_desc(&d, &o);
    gn_host_fwd(&q, x.h, sc.h, sh.h, yh, mh, vh);
    snprintf(what, sizeof what, "group norm (%s, n %lld c %lld hw %lld, %lld groups)", bfit_dtype_name(t),
             (long long)n, (long long)c, (long long)hw, (long long)g);
    cmp(what, BFIT_F32, mh, &mean, rows, 1e-6, 0);
    cmp(what, BFIT_F32, vh, &var, rows, 1e-6, 0);
    cmp(what, t, yh, &y, N, t == BFIT_F32 ? 1e-6 : 1.0 / 128, 1e-6);
    gnorm_bwd(&q, d, &x, &sc, &mean, &var, what); /* cmp left the CPU's statistics in mean.h, var.h */
    tbuf_free(&td, &x), tbuf_free(&td, &sc), tbuf_free(&td, &sh), tbuf_free(&td, &y), tbuf_free(&td, &mean);
    tbuf_free(&td, &var), free(yh), free(mh), free(vh);
}

static void test_gnorm(void **st)
{
    (void)st;
    for (int i = 0; i < 2; i++) {
        bfit_dtype t = i ? BFIT_BF16 : BFIT_F32;
        gnorm_case(t, 2, 6, 5, 3);    /* groups of two channels, rows shorter than a warp */
        gnorm_case(t, 3, 4, 1, 1);    /* a vector in one group (layer norm) */
        gnorm_case(t, 4, 12, 1, 3);   /* a vector in groups */
        gnorm_case(t, 2, 6, 7, 6);    /* a group a channel (instance norm) */
        gnorm_case(t, 2, 16, 9, 2);   /* rows longer than a warp, channel rows shorter */
        gnorm_case(t, 2, 8, 40, 2);   /* channel rows of a warp's parts */
        gnorm_case(t, 3, 5, 300, 5);  /* many per lane */
        gnorm_case(t, 2, 32, 64, 8);  /* 8x8 images in 8 groups */
        gnorm_case(t, 1, 64, 31, 1);  /* the threads' longest rows, all channels in one group */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_copies),
        cmocka_unit_test(test_chscale),
        cmocka_unit_test(test_prelu),
        cmocka_unit_test(test_gnorm),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
