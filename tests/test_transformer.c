/* test_transformer.c - the transformer layers through the layer API:
 * finite-difference gradient checks of embed (token, position and token-type
 * tables), attention (causal and bidirectional, stored and lean, one and
 * several heads, sequences longer than a row block) and the per-token loss
 * with padding; the forward of attention against naive double loops; the
 * lean variant against the stored one; what each keeps for backward (the
 * attention matrix, exactly); padding labels adding nothing; the key-padding
 * mask (a padded sequence, masked, is the unpadded one); bf16 attention and
 * embedding against f32; refusals.
 * PyTorch's answers for the same layers are in test_layers_torch.
 *
 * Every buffer is device memory (tdev.h), so the file passes with
 * BFIT_DEVICE_CHECK=1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "device/half.h"
#include "gradcheck.h"
#include "tdev.h"

static bfit_shape Q(int t, int f) { return bfit_shape_seq(t, f); }

/* ---- gradient checks ----
 * gradcheck's defaults (h = 1e-2, relative error 2e-2 with a 1e-2 floor):
 * embed is linear in its tables (central differences exact up to rounding);
 * attention and the loss are smooth (softmax), truncation O(h^2) ~ 1e-4 with
 * O(1) inputs. A wrong gradient (a head's columns swapped, the mask missing,
 * a transposed product, a position's row mixed up) is off by O(1). */

static void gc_embed_at(const char *label, int C, int V, int P, int types, int T, int m, float scale, int fixed)
{
    gc_case c = {.label = label, .nin = 1, .in = {Q(T, 1)}, .m = m, .token_vocab = V};
    c.cfg = bfit_layer_cfg_default(BFIT_L_EMBED);
    c.cfg.units = C;
    c.cfg.vocab = V;
    c.cfg.positions = P;
    c.cfg.types = types;
    c.cfg.escale = scale;
    c.cfg.pos_fixed = fixed;
    gc_assert(&c);
}

static void gc_embed(const char *label, int C, int V, int P, int types, int T, int m)
{
    gc_embed_at(label, C, V, P, types, T, m, 0.0f, 0);
}

static void test_gc_embed(void **st)
{
    (void)st;
    gc_embed("embed C6 V11 P8 T5 m1", 6, 11, 8, 0, 5, 1);
    gc_embed("embed C6 V11 P8 T5 m3", 6, 11, 8, 0, 5, 3);
    gc_embed("embed C5 V3 nopos T7 m2", 5, 3, 0, 0, 7, 2); /* ids repeat: rows add up */
    gc_embed("embed C4 V9 P5 types2 T5 m2", 4, 9, 5, 2, 5, 2);
    gc_embed("embed C33 V7 P40 T40 m1", 33, 7, 40, 0, 40, 1); /* more columns than a block */
    /* the Transformer tutorial's: the token rows times sqrt(C), a constant position table */
    gc_embed_at("embed C6 V11 P8 T5 m2 scaled fixed", 6, 11, 8, 0, 5, 2, sqrtf(6.0f), 1);
    gc_embed_at("embed C4 V9 P5 types2 T5 m2 scaled", 4, 9, 5, 2, 5, 2, 2.5f, 0);
}

static void gc_attn_p(const char *label, int H, int hs, int T, int m, int causal, int lean, float p)
{
    gc_case c = {.label = label, .nin = 1, .in = {Q(T, 3 * H * hs)}, .m = m};
    c.cfg = bfit_layer_cfg_default(BFIT_L_ATTENTION);
    c.cfg.units = H;
    c.cfg.causal = causal;
    c.cfg.lean = lean;
    c.cfg.p = p;
    gc_assert(&c);
}

static void gc_attn(const char *label, int H, int hs, int T, int m, int causal, int lean)
{
    gc_attn_p(label, H, hs, T, m, causal, lean, 0.0f);
}

static void test_gc_attention(void **st)
{
    (void)st;
    for (int lean = 0; lean <= 1; lean++) {
        char b[80];
#define GC(H, hs, T, m, causal)                                                                    \
    snprintf(b, sizeof b, "attention H%d hs%d T%d m%d %s %s", H, hs, T, m, causal ? "causal" : "bidir",       \
             lean ? "lean" : "stored");                                                            \
    gc_attn(b, H, hs, T, m, causal, lean)
        GC(1, 4, 1, 1, 1);
        GC(1, 4, 5, 1, 1);
        GC(2, 3, 5, 3, 1);
        GC(3, 2, 6, 2, 0);
        GC(2, 4, 70, 1, 1); /* two row blocks of 64 */
        GC(2, 4, 70, 1, 0);
#undef GC
        /* dropout on the weights: one mask for a seed, drawn again in backward (a fixed function of
         * the input, so finite differences apply) */
        snprintf(b, sizeof b, "attention H2 hs3 T9 m2 causal %s dropout 0.3", lean ? "lean" : "stored");
        gc_attn_p(b, 2, 3, 9, 2, 1, lean, 0.3f);
        snprintf(b, sizeof b, "attention H2 hs4 T70 m1 bidir %s dropout 0.1", lean ? "lean" : "stored");
        gc_attn_p(b, 2, 4, 70, 1, 0, lean, 0.1f);
    }
}

/* With a key-padding mask (the sequences' real lengths): every element is
 * checked, so the padded keys' zero gradients and the padded rows' are too;
 * a length of 0 (a sequence of padding alone) keeps one key. */
static void test_gc_attention_masked(void **st)
{
    static const int32_t l3[] = {6, 3, 1}, l2[] = {70, 45}, l0[] = {0, 4};
    (void)st;
    for (int lean = 0; lean <= 1; lean++)
        for (int causal = 0; causal <= 1; causal++) {
            char b[96];
            gc_case c = {.label = b, .nin = 1, .in = {Q(6, 18)}, .m = 3, .lens = l3, .samples = 400};
            c.cfg = bfit_layer_cfg_default(BFIT_L_ATTENTION);
            c.cfg.units = 2;
            c.cfg.causal = causal;
            c.cfg.lean = lean;
            snprintf(b, sizeof b, "attention H2 hs3 T6 lens 6,3,1 %s %s", causal ? "causal" : "bidir",
                     lean ? "lean" : "stored");
            gc_assert(&c);
            c.in[0] = Q(5, 12);
            c.m = 2;
            c.lens = l0;
            snprintf(b, sizeof b, "attention H2 hs2 T5 lens 0,4 %s %s", causal ? "causal" : "bidir",
                     lean ? "lean" : "stored");
            gc_assert(&c);
            c.in[0] = Q(70, 24);
            c.lens = l2;
            c.samples = 120;
            snprintf(b, sizeof b, "attention H2 hs4 T70 lens 70,45 %s %s", causal ? "causal" : "bidir",
                     lean ? "lean" : "stored");
            gc_assert(&c);
        }
}

/* The mean of a sequence's real tokens (gap on tokens [T, C]): the padded
 * rows' gradients are checked to be 0; a length of 0 counts one token. */
static void test_gc_token_mean(void **st)
{
    static const int32_t l3[] = {6, 3, 1}, l0[] = {0, 4};
    gc_case c = {.nin = 1, .m = 3};
    (void)st;
    /* the mean of each sequence's real tokens, and its last real token (GPT-2's classifier) */
    for (int last = 0; last < 2; last++) {
        c.cfg = bfit_layer_cfg_default(last ? BFIT_L_SELECT : BFIT_L_GAP);
        c.cfg.units = last ? -1 : c.cfg.units;
        c.label = last ? "select last T6 C5 lens 6,3,1" : "gap on tokens T6 C5 lens 6,3,1";
        c.in[0] = Q(6, 5), c.m = 3, c.lens = l3;
        gc_assert(&c);
        c.label = last ? "select last T4 C3 lens 0,4" : "gap on tokens T4 C3 lens 0,4";
        c.in[0] = Q(4, 3), c.m = 2, c.lens = l0;
        gc_assert(&c);
        c.label = last ? "select last T7 C2 (no lens)" : "gap on tokens T7 C2 (no lens)";
        c.in[0] = Q(7, 2), c.lens = NULL;
        gc_assert(&c);
    }
}

static void test_gc_token_loss(void **st)
{
    /* gradcheck gives every fifth token label -1 (padding) */
    gc_case c = {.label = "xent per token 5x7 m3 (padding)", .nin = 1, .in = {Q(5, 7)}, .m = 3};
    (void)st;
    c.cfg = bfit_layer_cfg_default(BFIT_L_XENT);
    gc_assert(&c);
    c.label = "xent per token 1x4 m2";
    c.in[0] = Q(1, 4);
    c.m = 2;
    gc_assert(&c);
}

/* ---- a rig: one layer with its buffers ---- */

typedef struct rig {
    tdev t;
    bfit_layer *l;
    int m;
    tbuf x, dx, y, dy, lens;
    void *saved, *ws_f, *ws_b;
} rig;

/* The sequences' real lengths for the attention's key-padding mask. */
static void rig_lens(rig *r, const int32_t *lens)
{
    r->lens = tbuf_new(&r->t, (size_t)r->m * 4);
    memcpy(r->lens.h, lens, (size_t)r->m * 4);
    tbuf_up(&r->t, &r->lens);
}

static void rig_open(rig *r, const bfit_layer_cfg *cfg, bfit_shape in, int m, uint64_t seed)
{
    char err[256];
    int64_t nx = (int64_t)m * bfit_shape_numel(in), ny;
    memset(r, 0, sizeof *r);
    r->m = m;
    tdev_open(&r->t, 0);
    if (bfit_layer_new(cfg, r->t.dev, &in, 1, &r->l, err, sizeof err) != BFIT_OK)
        fail_msg("layer: %s", err);
    assert_int_equal(bfit_layer_prepare(r->l, m, 1), BFIT_OK);
    ny = (int64_t)m * bfit_shape_numel(r->l->out);
    r->x = tbuf_new(&r->t, (size_t)nx * 4);
    r->dx = tbuf_new(&r->t, (size_t)nx * 4);
    r->y = tbuf_new(&r->t, (size_t)ny * 4);
    r->dy = tbuf_new(&r->t, (size_t)ny * 4);
    bfit_fill_uniform(TB_F(r->x), nx, 1.5f, seed);
    bfit_fill_uniform(TB_F(r->dy), ny, 1.0f, seed + 1);
    tbuf_up(&r->t, &r->x);
    tbuf_up(&r->t, &r->dy);
    r->saved = tdev_alloc(&r->t, r->l->need.saved);
    r->ws_f = tdev_alloc(&r->t, r->l->need.ws_fwd);
    r->ws_b = tdev_alloc(&r->t, r->l->need.ws_bwd);
}

static void rig_run(rig *r)
{
    bfit_fwd_args a = {0};
    bfit_bwd_args b = {0};
    a.m = b.m = r->m;
    a.training = 1;
    a.x[0] = b.x[0] = r->x.d;
    a.y = r->y.d;
    a.saved = b.saved = r->saved;
    a.ws = r->ws_f;
    b.ws = r->ws_b;
    b.y = r->y.d;
    b.dy = r->dy.d;
    b.dx[0] = r->dx.d;
    a.lens = b.lens = r->lens.d;
    assert_int_equal(bfit_layer_forward(r->l, &a), BFIT_OK);
    assert_int_equal(bfit_layer_backward(r->l, &b), BFIT_OK);
    tbuf_down(&r->t, &r->y);
    tbuf_down(&r->t, &r->dx);
}

static void rig_close(rig *r)
{
    tbuf_free(&r->t, &r->x);
    tbuf_free(&r->t, &r->dx);
    tbuf_free(&r->t, &r->y);
    tbuf_free(&r->t, &r->dy);
    if (r->lens.d)
        tbuf_free(&r->t, &r->lens);
    bfit_layer_free(r->l);
    tdev_close(&r->t);
}

static bfit_layer_cfg attn_cfg(int H, int causal, int lean)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_ATTENTION);
    c.units = H;
    c.causal = causal;
    c.lean = lean;
    return c;
}

/* Naive attention in double: y[b, i, h*hs + c] for the input x [m, T, 3C];
 * with lens, keys j >= lens[b] are masked (PyTorch's key_padding_mask). */
static void naive_attention(const float *x, double *y, int m, int T, int H, int hs, int causal, const int32_t *lens)
{
    int C = H * hs;
    double *s = malloc(sizeof(double) * (size_t)T);
    for (int b = 0; b < m; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                const float *q = x + ((size_t)b * T + i) * 3 * C + h * hs;
                double mx = -INFINITY, sum = 0;
                int nj = causal ? i + 1 : T;
                if (lens && nj > (lens[b] > 0 ? lens[b] : 1))
                    nj = lens[b] > 0 ? lens[b] : 1;
                for (int j = 0; j < nj; j++) {
                    const float *k = x + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    s[j] = 0;
                    for (int c = 0; c < hs; c++)
                        s[j] += (double)q[c] * k[c];
                    s[j] /= sqrt((double)hs);
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j < nj; j++)
                    sum += s[j] = exp(s[j] - mx);
                for (int c = 0; c < hs; c++) {
                    double acc = 0;
                    for (int j = 0; j < nj; j++)
                        acc += s[j] / sum * x[((size_t)b * T + j) * 3 * C + 2 * C + h * hs + c];
                    y[((size_t)b * T + i) * C + h * hs + c] = acc;
                }
            }
    free(s);
}

/* The forward against double loops: float32 sums of at most 70 products of
 * O(1) terms are good to ~1e-6 relative to the terms; 1e-5 absolute on
 * outputs of size ~1 is ten times that and far below a mistake. */
static void test_attention_forward_values(void **st)
{
    static const struct { int H, hs, T, m, causal; } cases[] = {
        {1, 4, 1, 1, 1}, {2, 3, 5, 3, 1}, {3, 2, 6, 2, 0}, {2, 8, 70, 2, 1}, {4, 16, 130, 1, 0},
    };
    (void)st;
    for (unsigned k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int lean = 0; lean <= 1; lean++) {
            rig r;
            int C = cases[k].H * cases[k].hs, n;
            double *want, worst = 0;
            bfit_layer_cfg c = attn_cfg(cases[k].H, cases[k].causal, lean);
            rig_open(&r, &c, Q(cases[k].T, 3 * C), cases[k].m, 100 + k);
            rig_run(&r);
            n = cases[k].m * cases[k].T * C;
            want = malloc(sizeof(double) * (size_t)n);
            naive_attention(TB_F(r.x), want, cases[k].m, cases[k].T, cases[k].H, cases[k].hs, cases[k].causal, NULL);
            for (int i = 0; i < n; i++)
                worst = fmax(worst, fabs(TB_F(r.y)[i] - want[i]));
            printf("  attention H%d hs%d T%d m%d %s %s: max abs err %.2e\n", cases[k].H, cases[k].hs, cases[k].T,
                   cases[k].m, cases[k].causal ? "causal" : "bidir", lean ? "lean" : "stored", worst);
            assert_true(worst < 1e-5);
            free(want);
            rig_close(&r);
        }
}

/* A padded sequence, masked, is the unpadded one: its real rows' outputs and
 * every input gradient (the padded rows' output gradients zero, as the loss
 * makes them) match a run at the real length alone; the padded keys get no
 * gradient, and the padded rows' outputs are those of the naive masked
 * attention (finite). Without the mask the real rows would differ by O(1). */
static void masked_vs_trimmed(int causal, int lean)
{
    enum { H = 2, hs = 4, C = H * hs, T = 70, L = 45 };
    static const int32_t lens[1] = {L};
    bfit_layer_cfg c = attn_cfg(H, causal, lean);
    rig p, t;
    double *want = malloc(sizeof(double) * T * C), worst = 0, gworst = 0;
    rig_open(&p, &c, Q(T, 3 * C), 1, 31);
    rig_open(&t, &c, Q(L, 3 * C), 1, 32);
    rig_lens(&p, lens);
    for (int i = L * C; i < T * C; i++)
        TB_F(p.dy)[i] = 0;
    tbuf_up(&p.t, &p.dy);
    memcpy(t.x.h, p.x.h, (size_t)L * 3 * C * 4); /* the same real tokens */
    memcpy(t.dy.h, p.dy.h, (size_t)L * C * 4);
    tbuf_up(&t.t, &t.x);
    tbuf_up(&t.t, &t.dy);
    rig_run(&p);
    rig_run(&t);
    naive_attention(TB_F(p.x), want, 1, T, H, hs, causal, lens);
    for (int i = 0; i < T * C; i++) {
        assert_true(isfinite(TB_F(p.y)[i]));
        worst = fmax(worst, fabs(TB_F(p.y)[i] - want[i]));
        if (i < L * C)
            worst = fmax(worst, fabs(TB_F(p.y)[i] - TB_F(t.y)[i]));
    }
    for (int i = 0; i < T * 3 * C; i++)
        if (i < L * 3 * C)
            gworst = fmax(gworst, fabs(TB_F(p.dx)[i] - TB_F(t.dx)[i]));
        else
            assert_true(TB_F(p.dx)[i] == 0.0f); /* padding: no gradient */
    printf("  masked T%d len %d %s %s vs trimmed: y max abs diff %.2e, dx %.2e\n", T, L,
           causal ? "causal" : "bidir", lean ? "lean" : "stored", worst, gworst);
    assert_true(worst < 1e-5 && gworst < 1e-5);
    free(want);
    rig_close(&p);
    rig_close(&t);
}

static void test_masked_is_trimmed(void **st)
{
    (void)st;
    for (int lean = 0; lean <= 1; lean++)
        for (int causal = 0; causal <= 1; causal++)
            masked_vs_trimmed(causal, lean);
}

/* Lean recomputes exp(S - L) where stored kept exp(S - max) / sum: the same
 * probabilities up to float rounding (~1e-7 relative), so the gradients
 * agree to 1e-5 relative to their size, and the outputs exactly (the
 * forward is the same code). */
static void test_lean_matches_stored(void **st)
{
    rig a, b;
    bfit_layer_cfg cs = attn_cfg(2, 1, 0), cl = attn_cfg(2, 1, 1);
    int64_t n;
    double worst = 0, scale = 0;
    (void)st;
    rig_open(&a, &cs, Q(70, 24), 2, 7);
    rig_open(&b, &cl, Q(70, 24), 2, 7);
    rig_run(&a);
    rig_run(&b);
    assert_memory_equal(a.y.h, b.y.h, a.y.bytes);
    n = (int64_t)(a.dx.bytes / 4);
    for (int64_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs(TB_F(a.dx)[i] - TB_F(b.dx)[i]));
        scale = fmax(scale, fabs(TB_F(a.dx)[i]));
    }
    printf("  lean vs stored dx: max abs diff %.2e of max %.2e\n", worst, scale);
    assert_true(scale > 0.1);
    assert_true(worst <= 1e-5 * scale);
    rig_close(&a);
    rig_close(&b);
}

/* ---- 16-bit data ---- */

/* One attention layer's y and dx at dtype dt (f32 or 16-bit) for inputs x
 * and dy given as f32 (exactly representable in dt), results widened to f32;
 * *saved gets the bytes it kept. */
static void attn_at(bfit_dtype dt, const bfit_layer_cfg *c, bfit_shape in, int m, const float *x, const float *dy,
                    float *y, float *dx, size_t *saved)
{
    tdev t;
    bfit_layer *l;
    char err[256];
    size_t es = dt == BFIT_F32 ? 4 : 2;
    int64_t nx = (int64_t)m * bfit_shape_numel(in), ny = nx / 3;
    tbuf bx, bdx, by, bdy;
    bfit_fwd_args a = {0};
    bfit_bwd_args b = {0};
    tdev_open(&t, 0);
    assert_int_equal(bfit_layer_new(c, t.dev, &in, 1, &l, err, sizeof err), BFIT_OK);
    bfit_layer_set_dtype(l, dt);
    assert_int_equal(bfit_layer_prepare(l, m, 1), BFIT_OK);
    bx = tbuf_new(&t, (size_t)nx * es);
    bdx = tbuf_new(&t, (size_t)nx * es);
    by = tbuf_new(&t, (size_t)ny * es);
    bdy = tbuf_new(&t, (size_t)ny * es);
    for (int64_t i = 0; i < nx; i++)
        bfit_st(bx.h, dt, i, x[i]);
    for (int64_t i = 0; i < ny; i++)
        bfit_st(bdy.h, dt, i, dy[i]);
    tbuf_up(&t, &bx);
    tbuf_up(&t, &bdy);
    a.m = b.m = m;
    a.training = 1;
    a.x[0] = b.x[0] = bx.d;
    a.y = by.d;
    b.y = by.d;
    a.saved = b.saved = tdev_alloc(&t, l->need.saved);
    a.ws = tdev_alloc(&t, l->need.ws_fwd);
    b.ws = tdev_alloc(&t, l->need.ws_bwd);
    b.dy = bdy.d;
    b.dx[0] = bdx.d;
    assert_int_equal(bfit_layer_forward(l, &a), BFIT_OK);
    assert_int_equal(bfit_layer_backward(l, &b), BFIT_OK);
    tbuf_down(&t, &by);
    tbuf_down(&t, &bdx);
    for (int64_t i = 0; i < ny; i++)
        y[i] = bfit_ld(by.h, dt, i);
    for (int64_t i = 0; i < nx; i++)
        dx[i] = bfit_ld(bdx.h, dt, i);
    *saved = l->need.saved;
    tbuf_free(&t, &bx);
    tbuf_free(&t, &bdx);
    tbuf_free(&t, &by);
    tbuf_free(&t, &bdy);
    bfit_layer_free(l);
    tdev_close(&t);
}

/* bf16 attention against f32 on the same (bf16-representable) inputs. The
 * bf16 op computes in f32 and rounds once, so each output is the f32 one
 * rounded to 8 significant bits: within half a bf16 ulp, 2^-8 relative (the
 * unit roundoff), plus 1e-6 for f32 sums taken in another order. Its
 * backward also starts from the stored P rounded to bf16 (2^-8 relative per
 * entry) and rounds dx once, so dx is held to 2^-6 (four unit roundoffs) of
 * the largest dx;
 * lean recomputes P in f32 and only rounds dx, so it is held to half an ulp
 * of each element as y is. The stored bf16 P is half the f32 matrix. */
static void bf16_vs_f32(int causal, int lean)
{
    enum { H = 2, hs = 8, C = H * hs, T = 70, m = 2 };
    bfit_layer_cfg c = attn_cfg(H, causal, lean);
    int64_t nx = (int64_t)m * T * 3 * C, ny = (int64_t)m * T * C;
    float *x = malloc(sizeof *x * (size_t)nx), *dy = malloc(sizeof *dy * (size_t)ny);
    float *y32 = malloc(sizeof(float) * (size_t)ny), *y16 = malloc(sizeof(float) * (size_t)ny);
    float *d32 = malloc(sizeof(float) * (size_t)nx), *d16 = malloc(sizeof(float) * (size_t)nx);
    size_t s32, s16;
    double wy = 0, wd = 0, scale = 0, ulp = ldexp(1.0, -8); /* bf16's unit roundoff */
    bfit_fill_uniform(x, nx, 1.5f, 3);
    bfit_fill_uniform(dy, ny, 1.0f, 4);
    for (int64_t i = 0; i < nx; i++)
        x[i] = bfit_bf16_to_f32(bfit_f32_to_bf16(x[i]));
    for (int64_t i = 0; i < ny; i++)
        dy[i] = bfit_bf16_to_f32(bfit_f32_to_bf16(dy[i]));
    attn_at(BFIT_F32, &c, Q(T, 3 * C), m, x, dy, y32, d32, &s32);
    attn_at(BFIT_BF16, &c, Q(T, 3 * C), m, x, dy, y16, d16, &s16);
    for (int64_t i = 0; i < ny; i++) {
        double e = fabs((double)y16[i] - y32[i]);
        wy = fmax(wy, e / (fabs(y32[i]) + 1e-30));
        if (!(e <= ulp * fabs(y32[i]) + 1e-6))
            fail_msg("y[%lld]: bf16 %.9g, f32 %.9g", (long long)i, (double)y16[i], (double)y32[i]);
    }
    for (int64_t i = 0; i < nx; i++) {
        double e = fabs((double)d16[i] - d32[i]);
        wd = fmax(wd, e);
        scale = fmax(scale, fabs(d32[i]));
        if (lean)
            assert_true(e <= ulp * fabs(d32[i]) + 1e-6);
    }
    printf("  bf16 vs f32 attention %s %s: y max rel diff %.2e (unit roundoff %.2e), dx max abs diff %.2e of max "
           "%.2e; saved %zu / %zu bytes\n", causal ? "causal" : "bidir", lean ? "lean" : "stored", wy, ulp, wd,
           scale, s16, s32);
    assert_true(wd <= 4 * ulp * scale);
    assert_int_equal(s16, lean ? s32 : BFIT_ALIGN_UP((size_t)m * H * T * T * 2));
    free(x);
    free(dy);
    free(y32);
    free(y16);
    free(d32);
    free(d16);
}

static void test_bf16_attention(void **st)
{
    (void)st;
    for (int lean = 0; lean <= 1; lean++)
        for (int causal = 0; causal <= 1; causal++)
            bf16_vs_f32(causal, lean);
}

/* An embedding (tokens, positions, type 0) at dtype dt: output and table
 * gradients (f32), from the same ids, tables and dy (dy exact in dt). */
static void embed_at(bfit_dtype dt, const float *dy, float *y, float *grads, int64_t *ngrad)
{
    enum { T = 9, C = 20, V = 7, m = 3 };
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_EMBED);
    bfit_shape in = Q(T, 1);
    tdev t;
    bfit_layer *l;
    char err[256];
    size_t es = dt == BFIT_F32 ? 4 : 2;
    tbuf ids, by, bdy, pd[3], pg[3];
    bfit_fwd_args a = {0};
    bfit_bwd_args b = {0};
    c.units = C;
    c.vocab = V;
    c.positions = T;
    c.types = 2;
    tdev_open(&t, 0);
    assert_int_equal(bfit_layer_new(&c, t.dev, &in, 1, &l, err, sizeof err), BFIT_OK);
    bfit_layer_set_dtype(l, dt);
    assert_int_equal(bfit_layer_prepare(l, m, 1), BFIT_OK);
    assert_int_equal(l->nparams, 3);
    for (int i = 0; i < 3; i++) {
        int64_t n = bfit_param_numel(&l->params[i]);
        pd[i] = tbuf_new(&t, (size_t)n * 4);
        pg[i] = tbuf_new(&t, (size_t)n * 4);
        bfit_fill_uniform(TB_F(pd[i]), n, 1.0f, 40 + (uint64_t)i);
        memset(pg[i].h, 0, (size_t)n * 4);
        tbuf_up(&t, &pd[i]);
        tbuf_up(&t, &pg[i]);
        l->params[i].data = pd[i].d;
        l->params[i].grad = pg[i].d;
    }
    ids = tbuf_new(&t, m * T * 4);
    by = tbuf_new(&t, m * T * C * es);
    bdy = tbuf_new(&t, m * T * C * es);
    for (int i = 0; i < m * T; i++)
        TB_I(ids)[i] = (i * 5 + 3) % V; /* repeats: rows add up */
    for (int i = 0; i < m * T * C; i++)
        bfit_st(bdy.h, dt, i, dy[i]);
    tbuf_up(&t, &ids);
    tbuf_up(&t, &bdy);
    a.m = b.m = m;
    a.training = 1;
    a.x[0] = b.x[0] = ids.d;
    a.y = by.d;
    b.dy = bdy.d;
    assert_int_equal(bfit_layer_forward(l, &a), BFIT_OK);
    assert_int_equal(bfit_layer_backward(l, &b), BFIT_OK);
    tbuf_down(&t, &by);
    for (int i = 0; i < m * T * C; i++)
        y[i] = bfit_ld(by.h, dt, i);
    *ngrad = 0;
    for (int i = 0; i < 3; i++) {
        tbuf_down(&t, &pg[i]);
        memcpy(grads + *ngrad, pg[i].h, pg[i].bytes);
        *ngrad += (int64_t)(pg[i].bytes / 4);
        tbuf_free(&t, &pd[i]);
        tbuf_free(&t, &pg[i]);
    }
    tbuf_free(&t, &ids);
    tbuf_free(&t, &by);
    tbuf_free(&t, &bdy);
    bfit_layer_free(l);
    tdev_close(&t);
}

/* The bf16 embedding sums its f32 tables in f32 and rounds once: its rows
 * are the f32 rows rounded to bf16, exactly; its table gradients, from the
 * same dy, are the f32 ones exactly (the same f32 sums in the same order). */
static void test_bf16_embed(void **st)
{
    enum { n = 3 * 9 * 20 };
    float dy[n], y32[n], y16[n], g32[(7 + 9 + 2) * 20], g16[(7 + 9 + 2) * 20];
    int64_t n32, n16;
    (void)st;
    bfit_fill_uniform(dy, n, 1.0f, 9);
    for (int i = 0; i < n; i++)
        dy[i] = bfit_bf16_to_f32(bfit_f32_to_bf16(dy[i]));
    embed_at(BFIT_F32, dy, y32, g32, &n32);
    embed_at(BFIT_BF16, dy, y16, g16, &n16);
    assert_int_equal(n32, n16);
    for (int i = 0; i < n; i++)
        assert_true(y16[i] == bfit_bf16_to_f32(bfit_f32_to_bf16(y32[i])));
    assert_memory_equal(g32, g16, sizeof(float) * (size_t)n32);
    printf("  bf16 embedding: %d outputs the f32 ones rounded, %lld table gradients equal\n", n, (long long)n32);
}

/* What the plan counts for an attention layer: the probabilities
 * [m, H, T, T] f32 (stored) or a log-sum-exp per row [m, H, T] (lean),
 * besides the output and its gradient [m, T, C]. */
static void test_attention_memory(void **st)
{
    tdev t;
    bfit_layer *l;
    char err[256];
    uint64_t bytes[BFIT_MEM_NCAT];
    int m = 3, T = 100, H = 4, C = 32;
    (void)st;
    tdev_open(&t, 0);
    for (int lean = 0; lean <= 1; lean++) {
        bfit_layer_cfg c = attn_cfg(H, 1, lean);
        bfit_shape in = Q(T, 3 * C);
        uint64_t out = BFIT_ALIGN_UP((uint64_t)m * T * C * 4);
        uint64_t kept = BFIT_ALIGN_UP((uint64_t)m * H * T * (lean ? 1 : T) * 4);
        assert_int_equal(bfit_layer_new(&c, t.dev, &in, 1, &l, err, sizeof err), BFIT_OK);
        assert_int_equal(bfit_layer_memory(l, m, 1, bytes), BFIT_OK);
        assert_int_equal(bytes[BFIT_MEM_ACTIVATIONS], out + kept);
        assert_int_equal(bytes[BFIT_MEM_ACT_GRADS], out);
        assert_int_equal(bytes[BFIT_MEM_PARAMS], 0);
        printf("  attention m%d T%d H%d C%d %s: activations %llu, workspace %llu\n", m, T, H, C,
               lean ? "lean" : "stored", (unsigned long long)bytes[BFIT_MEM_ACTIVATIONS],
               (unsigned long long)bytes[BFIT_MEM_WORKSPACE]);
        /* eval keeps nothing */
        assert_int_equal(bfit_layer_memory(l, m, 0, bytes), BFIT_OK);
        assert_int_equal(bytes[BFIT_MEM_ACTIVATIONS], out);
        bfit_layer_free(l);
    }
    tdev_close(&t);
}

/* A padding token (label -1) adds no loss, no count and no gradient, and
 * the other tokens' are what they would be without it. */
static void test_padding_ignored(void **st)
{
    tdev t;
    bfit_layer *l;
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_XENT);
    bfit_shape in = Q(4, 5);
    char err[256];
    tbuf x, y, dx, lab, stats;
    void *ws_f, *ws_b;
    bfit_fwd_args a = {0};
    bfit_bwd_args b = {0};
    double loss = 0;
    (void)st;
    tdev_open(&t, 0);
    assert_int_equal(bfit_layer_new(&c, t.dev, &in, 1, &l, err, sizeof err), BFIT_OK);
    assert_int_equal(bfit_layer_prepare(l, 2, 1), BFIT_OK);
    x = tbuf_new(&t, 40 * 4);
    y = tbuf_new(&t, 40 * 4);
    dx = tbuf_new(&t, 40 * 4);
    lab = tbuf_new(&t, 8 * 4);
    stats = tbuf_new(&t, 16);
    bfit_fill_uniform(TB_F(x), 40, 2.0f, 5);
    for (int i = 0; i < 8; i++)
        TB_I(lab)[i] = i % 3 == 1 ? -1 : i % 5;
    memset(stats.h, 0, 16);
    tbuf_up(&t, &x);
    tbuf_up(&t, &lab);
    tbuf_up(&t, &stats);
    ws_f = tdev_alloc(&t, l->need.ws_fwd);
    ws_b = tdev_alloc(&t, l->need.ws_bwd);
    a.m = b.m = 2;
    a.training = 1;
    a.x[0] = b.x[0] = x.d;
    a.y = y.d;
    b.y = y.d;
    a.ws = ws_f;
    b.ws = ws_b;
    a.labels = b.labels = lab.d;
    a.stats = stats.d;
    b.dx[0] = dx.d;
    b.loss_scale = 0.5f;
    assert_int_equal(bfit_layer_forward(l, &a), BFIT_OK);
    assert_int_equal(bfit_layer_backward(l, &b), BFIT_OK);
    tbuf_down(&t, &stats);
    tbuf_down(&t, &dx);
    for (int i = 0; i < 8; i++) {
        const float *r = TB_F(x) + i * 5;
        double mx = r[0], s = 0;
        int lb = TB_I(lab)[i];
        for (int j = 1; j < 5; j++)
            mx = fmax(mx, r[j]);
        for (int j = 0; j < 5; j++)
            s += exp(r[j] - mx);
        for (int j = 0; j < 5; j++) {
            double want = lb < 0 ? 0 : 0.5 * (exp(r[j] - mx) / s - (j == lb));
            assert_true(fabs(TB_F(dx)[i * 5 + j] - want) < 1e-6);
        }
        if (lb >= 0)
            loss += log(s) + mx - r[lb];
    }
    assert_true(fabs(((double *)stats.h)[0] - loss) < 1e-5 * loss);
    assert_true(((double *)stats.h)[1] <= 5.0); /* at most the 5 real tokens are right */
    tbuf_free(&t, &x);
    tbuf_free(&t, &y);
    tbuf_free(&t, &dx);
    tbuf_free(&t, &lab);
    tbuf_free(&t, &stats);
    bfit_layer_free(l);
    tdev_close(&t);
}

static void expect_refusal(const bfit_layer_cfg *c, bfit_shape in, const char *needle)
{
    bfit_layer *l = NULL;
    char err[256];
    assert_int_equal(bfit_layer_new(c, NULL, &in, 1, &l, err, sizeof err), BFIT_EINVAL);
    printf("  refused: %s\n", err);
    assert_non_null(strstr(err, needle));
    assert_null(l);
}

static void test_refusals(void **st)
{
    bfit_layer_cfg a = attn_cfg(5, 1, 0), e = bfit_layer_cfg_default(BFIT_L_EMBED);
    (void)st;
    expect_refusal(&a, Q(8, 48), "divides the width 16");
    expect_refusal(&a, Q(8, 16), "[T, 3C]");
    e.units = 8;
    e.vocab = 10;
    e.positions = 4;
    expect_refusal(&e, Q(5, 1), "positions=5");
    expect_refusal(&e, Q(5, 3), "token ids");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gc_embed),
        cmocka_unit_test(test_gc_attention),
        cmocka_unit_test(test_gc_attention_masked),
        cmocka_unit_test(test_gc_token_mean),
        cmocka_unit_test(test_gc_token_loss),
        cmocka_unit_test(test_attention_forward_values),
        cmocka_unit_test(test_masked_is_trimmed),
        cmocka_unit_test(test_lean_matches_stored),
        cmocka_unit_test(test_attention_memory),
        cmocka_unit_test(test_bf16_attention),
        cmocka_unit_test(test_bf16_embed),
        cmocka_unit_test(test_padding_ignored),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
