/* cuda_core.h - the per-thread work of the CUDA backend's activation,
 * embedding, attention, copy (concatenation, transposition, slices),
 * channel-gate, PReLU and group-norm kernels (cuda_elt.cu, cuda_attn.cu,
 * cuda_concat.cu, cuda_chscale.cu, cuda_prelu.cu, cuda_gnorm.cu), written
 * once for the GPU and the host.
 *
 * Each kernel thread calls one of these functions for its element, row or
 * column, and does nothing else; so the same code, compiled as C on the
 * host, can be run over every thread's index by a loop and checked against
 * the CPU device (tests/test_kernel_core.c), on a machine without a GPU. What
 * only the GPU can check is the launch (grid sizes, the thread-to-index
 * mapping in cuda_attn.cu), which is a line per kernel.
 *
 * Attention follows cpu_attn.c's formulas: scores s = q.k / sqrt(hs), row
 * softmax P = exp(s - max) / sum (sum in double), y = P V; backward dP =
 * dy.v, D = sum P dP (double), dS = P (dP - D), dq = dS k / sqrt(hs),
 * dk = dS^T q / sqrt(hs), dv = P^T dy. The products are cuBLAS's f32
 * strided batched GEMMs (cuda_attn.c) on head-major f32 copies of q, k, v
 * and dy; what is here is the rest: the copies' index maps and the row
 * work between the products (softmax, P again, dS). Sums are in another
 * order than the CPU's: results agree to f32 rounding. */
#ifndef BFIT_CUDA_CORE_H
#define BFIT_CUDA_CORE_H

#include <math.h>
#include <stdint.h>

#include "batchfit.h" /* BFIT_TOKEN_ID, BFIT_TOKEN_TYPE */

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define BK_HD static inline __host__ __device__
#else
#include "device/half.h"
#define BK_HD static inline
#endif

/* ATTN: n sequences of T tokens, H heads of hs features; dt the data's;
 * drop: dropout on the weights (0: none), its mask by seed (the call's,
 * mixed) and thresh as cpu_attn.c draws it */
typedef struct bk_attn {
    int64_t n, T, H, hs;
    int causal, lean, training, dt;
    float scale; /* 1 / sqrt(hs) */
    float drop;
    uint64_t seed, thresh;
} bk_attn;

/* splitmix64's finaliser: the same function as bfit_mix64 (src/base/rand.h),
 * so a dropout mask (cuda_elt.cu's, the attention's) is the CPU's bit for bit */
BK_HD uint64_t bk_mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* EMBED: n sequences of T tokens, C features, V ids, P positions (0: none);
 * types: the token-type table's rows (each token's type in its id's high
 * bits, BFIT_TOKEN_TYPE_SHIFT); scale: the token rows' factor */
typedef struct bk_embed {
    int64_t n, T, C, V, P;
    int types, dt;
    float scale;
} bk_embed;

/* Element i of a buffer of dtype dt (0 f32, 1 bf16, 2 f16) as f32, and back
 * rounded to nearest even. */
BK_HD float bk_ldx(const void *p, int dt, int64_t i)
{
#ifdef __CUDACC__
    if (dt == 1)
        return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (dt == 2)
        return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
#else
    return bfit_ld(p, (bfit_dtype)dt, i);
#endif
}

BK_HD void bk_stx(void *p, int dt, int64_t i, float v)
{
#ifdef __CUDACC__
    if (dt == 1)
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else if (dt == 2)
        ((__half *)p)[i] = __float2half_rn(v);
    else
        ((float *)p)[i] = v;
#else
    bfit_st(p, (bfit_dtype)dt, i, v);
#endif
}

/* ---- activations ----------------------------------------------------------------- */

/* alg: bfit_eltwise_alg (device.h), whose order these follow; clip's
 * bounds are the op's, and so are hardsigmoid's alpha and beta (lo, hi),
 * leaky relu's slope, elu's and celu's alpha (lo), softplus's beta and threshold,
 * selu's alpha and scale */
enum { BK_RELU, BK_GELU_ERF, BK_GELU_TANH, BK_CLIP, BK_SIGMOID, BK_SILU, BK_TANH, BK_HARDSIGMOID, BK_HARDSWISH,
       BK_LEAKYRELU, BK_ELU, BK_SOFTPLUS, BK_SELU, BK_CELU };

#define BK_SQRT1_2 0.70710678118654752440f
#define BK_SQRT2_PI 0.79788456080286535588f /* sqrt(2 / pi) */
#define BK_INV_SQRT_2PI 0.39894228040143267794f
#define BK_GELU_C 0.044715f

BK_HD float bk_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* log(1 + e^t), PyTorch's log1p(exp(t)), written so that a large t (past
 * a threshold above 88) gives t rather than inf */
BK_HD float bk_log1pexp(float t) { return fmaxf(t, 0.0f) + log1pf(expf(-fabsf(t))); }

/* relu as oneDNN's with alpha 0 (x * 0 keeps a NaN a NaN); leaky relu,
 * elu, softplus, selu and celu as PyTorch's */
BK_HD float bk_act(int alg, float x, float lo, float hi)
{
    switch (alg) {
    case BK_LEAKYRELU: return x > 0.0f ? x : x * lo;
    case BK_ELU: return x > 0.0f ? x : lo * expm1f(x);
    case BK_SOFTPLUS: return lo * x > hi ? x : bk_log1pexp(lo * x) / lo;
    case BK_SELU: return x > 0.0f ? x * hi : expm1f(x) * (lo * hi); /* alpha scale in float, as PyTorch's */
    case BK_CELU: return x > 0.0f ? x : lo * expm1f(x / lo);
    case BK_RELU: return x > 0.0f ? x : x * 0.0f;
    case BK_GELU_ERF: return 0.5f * x * (1.0f + erff(x * BK_SQRT1_2));
    case BK_GELU_TANH: return 0.5f * x * (1.0f + tanhf(BK_SQRT2_PI * x * (1.0f + BK_GELU_C * x * x)));
    case BK_CLIP: return x < lo ? lo : x > hi ? hi : x;
    case BK_SIGMOID: return bk_sigmoid(x);
    case BK_SILU: return x * bk_sigmoid(x);
    case BK_HARDSIGMOID: return fminf(fmaxf(lo * x + hi, 0.0f), 1.0f);
    case BK_HARDSWISH: return x * fminf(fmaxf(x + 3.0f, 0.0f), 6.0f) / 6.0f;
    default: return tanhf(x);
    }
}

/* f'(x) dy; clip's passes strictly inside (lo, hi), as PyTorch's hardtanh,
 * so x may be its output; hardsigmoid's strictly inside its ramp, as
 * PyTorch's; hardswish's is oneDNN's (0 at x <= -3, dy at x >= 3); leaky
 * relu's, elu's, selu's and celu's take the slope at 0 from the left, as PyTorch's;
 * softplus's is sigmoid(beta x) (1 past 88, where PyTorch's e^t / (e^t + 1)
 * is inf / inf), dy above the threshold */
BK_HD float bk_act_grad(int alg, float x, float dy, float lo, float hi)
{
    float s, t, du;
    switch (alg) {
    case BK_LEAKYRELU: return x > 0.0f ? dy : dy * lo;
    case BK_ELU: return x > 0.0f ? dy : dy * lo * expf(x);
    case BK_SOFTPLUS: return lo * x > hi ? dy : dy * bk_sigmoid(lo * x);
    case BK_SELU: return x > 0.0f ? dy * hi : dy * (lo * hi) * expf(x);
    case BK_CELU: return x > 0.0f ? dy : dy * expf(x / lo);
    case BK_RELU: return x > 0.0f ? dy : dy * 0.0f;
    case BK_GELU_ERF:
        return dy * (0.5f * (1.0f + erff(x * BK_SQRT1_2)) + x * BK_INV_SQRT_2PI * expf(-0.5f * x * x));
    case BK_GELU_TANH:
        t = tanhf(BK_SQRT2_PI * x * (1.0f + BK_GELU_C * x * x));
        du = BK_SQRT2_PI * (1.0f + 3.0f * BK_GELU_C * x * x);
        return dy * 0.5f * (1.0f + t) * (1.0f + x * (1.0f - t) * du);
    case BK_CLIP: return x > lo && x < hi ? dy : dy * 0.0f;
    case BK_SIGMOID: s = bk_sigmoid(x); return dy * s * (1.0f - s);
    case BK_SILU: s = bk_sigmoid(x); return dy * s * (1.0f + x * (1.0f - s));
    case BK_HARDSIGMOID: t = lo * x + hi; return t > 0.0f && t < 1.0f ? dy * lo : dy * 0.0f;
    case BK_HARDSWISH: return x <= -3.0f ? dy * 0.0f : x >= 3.0f ? dy : dy * (2.0f * x + 3.0f) / 6.0f;
    default: t = tanhf(x); return dy * (1.0f - t * t);
    }
}

/* ---- embeddings ----------------------------------------------------------------- */

/* y[r, c] = tok[id_r, c] + pos[t, c] + type[type_r, c] for element e of [n T, C] */
BK_HD void bk_embed_fwd_one(const bk_embed *e, const int32_t *ids, const float *tok, const float *pos,
                            const float *type, void *y, int64_t el)
{
    int64_t r = el / e->C, c = el - r * e->C, t = r % e->T, id = BFIT_TOKEN_ID(ids[r]);
    /* fmaf: one rounding on the GPU, the host and the CPU device alike */
    float v = fmaf(e->scale, tok[id * e->C + c], pos ? pos[t * e->C + c] : 0.0f) +
              (type ? type[(int64_t)BFIT_TOKEN_TYPE(ids[r]) * e->C + c] : 0.0f);
    bk_stx(y, e->dt, el, v);
}

/* Column c of the token table's gradient for ids in [lo, hi): the rows'
 * gradients added in row order, as cpu_embed.c adds them. */
BK_HD void bk_embed_bwd_tok(const bk_embed *e, const int32_t *ids, const void *dy, float *dtok, int64_t c,
                            int64_t lo, int64_t hi)
{
    int64_t rows = e->n * e->T;
    for (int64_t r = 0; r < rows; r++) {
        int64_t id = BFIT_TOKEN_ID(ids[r]);
        if (id >= lo && id < hi)
            dtok[id * e->C + c] = fmaf(e->scale, bk_ldx(dy, e->dt, r * e->C + c), dtok[id * e->C + c]);
    }
}

/* Element (t, c) of the positions' gradient; with ids, element (t, c) of
 * the token-type table's (its rows of type t add to it, in row order). */
BK_HD void bk_embed_bwd_pos(const bk_embed *e, const int32_t *ids, const void *dy, float *d, int64_t t, int64_t c)
{
    if (!ids) {
        for (int64_t b = 0; b < e->n; b++)
            d[t * e->C + c] += bk_ldx(dy, e->dt, (b * e->T + t) * e->C + c);
    } else {
        for (int64_t r = 0; r < e->n * e->T; r++)
            if (BFIT_TOKEN_TYPE(ids[r]) == t)
                d[t * e->C + c] += bk_ldx(dy, e->dt, r * e->C + c);
    }
}

/* ---- attention ---------------------------------------------------------------------- */

/* The real tokens of sequence b (its keys; padding alone keeps one). */
BK_HD int64_t bk_attn_len(const bk_attn *a, const int32_t *lens, int64_t b)
{
    int64_t n = lens ? lens[b] : a->T;
    return n < 1 ? 1 : n > a->T ? a->T : n;
}

/* The keys row i reads: those of the real tokens, none after it when causal. */
BK_HD int64_t bk_attn_keys(const bk_attn *a, int64_t len, int64_t i) { return a->causal && i + 1 < len ? i + 1 : len; }

/* The keys of query row i of lane (sequence lane / H, head lane % H). */
BK_HD int64_t bk_attn_row_keys(const bk_attn *a, const int32_t *lens, int64_t lane, int64_t i)
{
    return bk_attn_keys(a, bk_attn_len(a, lens, lane / a->H), i);
}

/* Element el of the head-major f32 copy qkvh [n H, 3, T, hs] (each lane's
 * q, k and v contiguous, for strided batched products) from qkv [n, T, 3C]
 * (head h in columns h hs of each third): its offset in qkv. */
BK_HD int64_t bk_attn_qkv_at(const bk_attn *a, int64_t el)
{
    const int64_t hs = a->hs, T = a->T, C = a->H * hs;
    int64_t c = el % hs, t = el / hs % T, part = el / (hs * T) % 3, lane = el / (3 * T * hs);
    return (lane / a->H * T + t) * 3 * C + part * C + lane % a->H * hs + c;
}

/* Element el of a head-major [n H, T, hs] copy of a [n, T, C] buffer (y,
 * dy): its offset there. */
BK_HD int64_t bk_attn_y_at(const bk_attn *a, int64_t el)
{
    const int64_t hs = a->hs, T = a->T, C = a->H * hs;
    int64_t c = el % hs, t = el / hs % T, lane = el / (T * hs);
    return (lane / a->H * T + t) * C + lane % a->H * hs + c;
}

/* A row's softmax and its backward are reduced in parts: part j0 of step
 * parts takes the columns j0, j0 + step, ... below nk (a GPU warp's 32
 * lanes are 32 parts; the host test runs the same parts in a loop). */

/* the largest score of a part (-inf when it has no column) */
BK_HD float bk_attn_part_max(const float *s, int64_t nk, int64_t j0, int64_t step)
{
    float mx = -INFINITY;
    for (int64_t j = j0; j < nk; j += step)
        mx = s[j] > mx ? s[j] : mx;
    return mx;
}

/* sum of exp(s - mx) over a part, in double as the CPU sums it */
BK_HD double bk_attn_part_sum(const float *s, int64_t nk, float mx, int64_t j0, int64_t step)
{
    double sum = 0;
    for (int64_t j = j0; j < nk; j += step)
        sum += expf(s[j] - mx);
    return sum;
}

/* the row's log-sum-exp, which lean training keeps (as the CPU rounds it) */
BK_HD float bk_attn_lse(float mx, double sum) { return mx + (float)log(sum); }

/* Forward: the part's scores become probabilities in place (zeros past the
 * keys), in f32 for the product with v; stored training (kept not NULL)
 * keeps them in the data's dtype too, row i of lane at kept's (lane T + i) T. */
BK_HD void bk_attn_part_probs(const bk_attn *a, float *s, int64_t nk, float mx, double sum, void *kept, int64_t lane,
                              int64_t i, int64_t j0, int64_t step)
{
    for (int64_t j = j0; j < a->T; j += step) {
        float p = j < nk ? (float)(expf(s[j] - mx) / sum) : 0.0f;
        s[j] = p;
        if (kept)
            bk_stx(kept, a->dt, (lane * a->T + i) * a->T + j, p);
    }
}

/* Backward: P's row for lane's row i into p (f32), from what the forward
 * kept: the probabilities themselves, or (lean) exp(s - L_i) of the scores
 * already in p, L_i the row's log-sum-exp. */
BK_HD void bk_attn_part_p(const bk_attn *a, const void *saved, float *p, int64_t nk, int64_t lane, int64_t i,
                          int64_t j0, int64_t step)
{
    float L = a->lean ? ((const float *)saved)[lane * a->T + i] : 0.0f;
    for (int64_t j = j0; j < a->T; j += step) {
        if (a->lean)
            p[j] = j < nk ? expf(p[j] - L) : 0.0f;
        else
            p[j] = bk_ldx(saved, a->dt, (lane * a->T + i) * a->T + j);
    }
}

/* sum of P dP over a part (double); the row's D = sum P dP */
BK_HD double bk_attn_part_dot(const float *p, const float *dp, int64_t nk, int64_t j0, int64_t step)
{
    double d = 0;
    for (int64_t j = j0; j < nk; j += step)
        d += (double)p[j] * dp[j];
    return d;
}

/* dP becomes dS = P (dP - D) in place, D rounded to f32 as the CPU uses it
 * (zeros where P is zero: past the keys) */
BK_HD void bk_attn_part_ds(const float *p, float *dp, int64_t T, float d, int64_t j0, int64_t step)
{
    for (int64_t j = j0; j < T; j += step)
        dp[j] = p[j] * (dp[j] - d);
}

/* Dropout's mask on element el of a group's [G, T, T] matrix m (lane g0 +
 * row / T, query row % T, key j), in place, as cpu_attn.c's drop_rows: kept
 * entries times 1/(1-p), the others 0, and 0 past the row's keys. */
BK_HD void bk_attn_drop_el(const bk_attn *a, const int32_t *lens, float *m, int64_t g0, int64_t el)
{
    int64_t r = el / a->T, j = el - r * a->T, lane = g0 + r / a->T, i = r % a->T;
    uint64_t h = bk_mix64(a->seed + (uint64_t)((lane * a->T + i) * a->T + j));
    int keep = j < bk_attn_row_keys(a, lens, lane, i) && (h >> 32) >= a->thresh;
    m[el] = keep ? m[el] * (1.0f / (1.0f - a->drop)) : 0.0f;
}

/* ---- copies: concatenation, slices, transposition ---------------------------------- */

/* A copy of rows x cols elements between two row-major buffers: source
 * row r's elements start at r sld + soff (sld 0: one row for every row, a
 * broadcast input), the destination's at r dld + doff. A concatenation's
 * input k is such a copy into (or, backward, out of) its columns of the
 * output's rows; a slice is one out of (or into) its columns. */
typedef struct bk_copy2d {
    int64_t rows, cols, sld, soff, dld, doff;
} bk_copy2d;

/* Element el (row-major over rows x cols) of the copy: its offsets in the
 * source and the destination. */
BK_HD void bk_copy2d_at(const bk_copy2d *c, int64_t el, int64_t *si, int64_t *di)
{
    int64_t r = el / c->cols, j = el - r * c->cols;
    *si = r * c->sld + c->soff + j;
    *di = r * c->dld + c->doff + j;
}

/* The backward's accumulating copy: dst (+)= src at element el, in f32,
 * rounded once to dt (cpu_concat.c's slice_back). */
BK_HD void bk_copy2d_add(const bk_copy2d *c, const void *src, void *dst, int dt, int64_t el)
{
    int64_t si, di;
    bk_copy2d_at(c, el, &si, &di);
    bk_stx(dst, dt, di, bk_ldx(dst, dt, di) + bk_ldx(src, dt, si));
}

/* A broadcast input's gradient, column j: g[j] += the sum over the rows of
 * dy[r, off + j], in double in row order as cpu_concat.c's sum_rows, so
 * equal to the CPU's bit for bit. */
BK_HD void bk_col_sum(const void *dy, int dt, float *g, int64_t rows, int64_t ld, int64_t off, int64_t j)
{
    double s = 0;
    for (int64_t r = 0; r < rows; r++)
        s += bk_ldx(dy, dt, r * ld + off + j);
    g[j] += (float)s;
}

/* SLICE_BWD's element el of diff_src [rows, ld]: the offset in diff_dst
 * [rows, len] it takes, or -1 where it is outside columns [off, off + len)
 * (a zero). */
BK_HD int64_t bk_slice_bwd_at(int64_t ld, int64_t off, int64_t len, int64_t el)
{
    int64_t r = el / ld, c = el - r * ld - off;
    return c >= 0 && c < len ? r * len + c : -1;
}

/* TRANSPOSE's element el of dst [n, b, a, q]: its offset in src [n, a, b, q]. */
BK_HD int64_t bk_tr_at(int64_t a, int64_t b, int64_t q, int64_t el)
{
    int64_t r = el % q, e = el / q, s = e / (a * b), k = e - s * a * b, j = k / a, i = k - j * a;
    return ((s * a + i) * b + j) * q + r;
}

/* ADD_ROWS: y[el] = x[el] + bias[el % N] in f32, rounded once to dt (y may
 * be x). */
BK_HD void bk_add_rows_one(const void *x, const float *bias, void *y, int dt, int64_t N, int64_t el)
{
    bk_stx(y, dt, el, bk_ldx(x, dt, el) + bias[el % N]);
}

/* ---- channel gates (CHSCALE) ---------------------------------------------------------- */

/* Forward: y[el] = x[el] s[el / hw], one rounding (cpu_chscale.c's). */
BK_HD void bk_chs_fwd_one(const void *x, const void *s, void *y, int dt, int64_t hw, int64_t el)
{
    bk_stx(y, dt, el, bk_ldx(x, dt, el) * bk_ldx(s, dt, el / hw));
}

/* Backward on channel row r ([hw] of [n c, hw]), part j0 of step parts
 * (a warp's lanes; the host test runs the parts in a loop): dx = dy s for
 * the part's elements (dx not NULL; dx may be dy), and the part's sum of
 * dy x in double (x NULL: 0). Each product of two floats is exact in
 * double, so the row's sum differs from the CPU's (one sum in element
 * order) only by the rounding of double additions in another order; the
 * float stored from it is the CPU's but where that sum lies within a few
 * double ulps of a midpoint between floats. */
BK_HD double bk_chs_bwd_part(const void *x, const void *s, const void *dy, void *dx, int dt, int64_t r, int64_t hw,
                             int64_t j0, int64_t step)
{
    float sr = dx ? bk_ldx(s, dt, r) : 0.0f;
    double acc = 0;
    for (int64_t j = r * hw + j0; j < (r + 1) * hw; j += step) {
        float g = bk_ldx(dy, dt, j);
        if (x)
            acc += (double)g * (double)bk_ldx(x, dt, j);
        if (dx)
            bk_stx(dx, dt, j, g * sr);
    }
    return acc;
}

/* ---- PReLU (PRELU) ---------------------------------------------------------------------- */

/* [n, c, hw] in rows of hw (sample, channel); a: the f32 slopes, one per
 * channel or (shared) a[0] for all; linear: y = a x for x > 0 too (a
 * learned scale, LayerScale). */
typedef struct bk_prelu {
    int64_t n, c, hw;
    int shared, dt, linear;
} bk_prelu;

/* With hw == 1 (channels innermost: vectors, tokens) the slopes' gradient
 * is summed in parts of BK_PRELU_CH samples per channel, part (q, j) at
 * q c + j of the workspace, instead of a sum per single-element row: a
 * c-th of the workspace and no warp per element. cpu_prelu.c uses the same
 * chunks, so the two give the same bits. */
#define BK_PRELU_CH 256

BK_HD int64_t bk_prelu_chunks(const bk_prelu *p) { return (p->n + BK_PRELU_CH - 1) / BK_PRELU_CH; }

BK_HD float bk_prelu_slope(const bk_prelu *p, const float *a, int64_t r) { return a[p->shared ? 0 : r % p->c]; }

/* Forward: y[el] = x > 0 (and not linear) ? x : a x, one rounding
 * (cpu_prelu.c's). */
BK_HD void bk_prelu_fwd_one(const bk_prelu *p, const void *x, const float *a, void *y, int64_t el)
{
    float v = bk_ldx(x, p->dt, el);
    bk_stx(y, p->dt, el, v > 0 && !p->linear ? v : bk_prelu_slope(p, a, p->hw == 1 ? el : el / p->hw) * v);
}

/* The input's gradient alone (no slopes' gradient asked), element el:
 * dx = x > 0 (and not linear) ? dy : a dy; dx may be dy. */
BK_HD void bk_prelu_dx_one(const bk_prelu *p, const void *x, const float *a, const void *dy, void *dx, int64_t el)
{
    float v = bk_ldx(x, p->dt, el), g = bk_ldx(dy, p->dt, el);
    bk_stx(dx, p->dt, el, v > 0 && !p->linear ? g : bk_prelu_slope(p, a, p->hw == 1 ? el : el / p->hw) * g);
}

/* Backward on row r, part j0 of step parts (a warp's lanes; the host test
 * runs the parts in a loop): dx = x > 0 (and not linear) ? dy : a dy (dx
 * not NULL; dx may be dy: each element is read before it is written), and
 * the part's sum of dy x where x <= 0 (linear: everywhere), in double. The
 * products are exact in double, so the row's sum differs from the CPU's
 * (one sum in element order) only by the rounding of double additions in
 * another order. */
BK_HD double bk_prelu_bwd_part(const bk_prelu *p, const void *x, const float *a, const void *dy, void *dx, int64_t r,
                               int64_t j0, int64_t step)
{
    float s = bk_prelu_slope(p, a, r);
    double acc = 0;
    for (int64_t j = r * p->hw + j0; j < (r + 1) * p->hw; j += step) {
        float v = bk_ldx(x, p->dt, j), g = bk_ldx(dy, p->dt, j);
        if (v <= 0 || p->linear)
            acc += (double)g * (double)v;
        if (dx)
            bk_stx(dx, p->dt, j, v > 0 && !p->linear ? g : s * g);
    }
    return acc;
}

/* hw == 1, part t = q c + j: channel j of samples [q CH, (q + 1) CH) (n
 * at most), dx as bk_prelu_bwd_part's (dx NULL: skipped), and the sum of
 * dy x where x <= 0 (linear: everywhere) in sample order, in double: the
 * CPU's sum for the part, bit for bit. Threads of consecutive t read
 * consecutive channels of a sample: coalesced. */
BK_HD double bk_prelu_col_part(const bk_prelu *p, const void *x, const float *a, const void *dy, void *dx, int64_t t)
{
    int64_t c = p->c, j = t % c, k0 = t / c * BK_PRELU_CH, k1 = k0 + BK_PRELU_CH < p->n ? k0 + BK_PRELU_CH : p->n;
    float s = a[p->shared ? 0 : j];
    double acc = 0;
    for (int64_t i = k0 * c + j; i < k1 * c; i += c) {
        float v = bk_ldx(x, p->dt, i), g = bk_ldx(dy, p->dt, i);
        if (v <= 0 || p->linear)
            acc += (double)g * (double)v;
        if (dx)
            bk_stx(dx, p->dt, i, v > 0 && !p->linear ? g : s * g);
    }
    return acc;
}

/* Slope j's gradient from the partial sums rs: the rows' [n c] (hw > 1)
 * or the parts' [ceil(n / CH) c] (hw == 1); its rows (parts) by sample
 * (chunk), then channel (every channel for a shared slope), in double,
 * set or (acc) added to dw[j] in f32: cpu_prelu.c's order, so equal to
 * the CPU's given the same partial sums. */
BK_HD void bk_prelu_slope_grad(const bk_prelu *p, const double *rs, float *dw, int acc, int64_t j)
{
    int64_t lo = p->shared ? 0 : j, hi = p->shared ? p->c : j + 1, nr = p->hw == 1 ? bk_prelu_chunks(p) : p->n;
    double s = 0;
    for (int64_t k = 0; k < nr; k++)
        for (int64_t ch = lo; ch < hi; ch++)
            s += rs[k * p->c + ch];
    dw[j] = acc ? dw[j] + (float)s : (float)s;
}

/* ---- group normalisation (GNORM) ------------------------------------------------------- */

/* [n, c, hw] in rows (sample, group) of k = cg hw contiguous elements, cg
 * = c / g channels a group (cpu_gnorm.c's); scale, shift, their gradients
 * and the statistics f32 whatever dt. */
typedef struct bk_gnorm {
    int64_t n, c, hw, g, cg, k;
    float eps;
    int dt;
} bk_gnorm;

BK_HD bk_gnorm bk_gn_geom(int64_t n, int64_t c, int64_t hw, int64_t g, float eps, int dt)
{
    bk_gnorm q = {n, c, hw, g, c / g, c / g * hw, eps, dt};
    return q;
}

/* The backward sums a (sample, channel) row of hw elements with a thread
 * when hw is below this, in element order (the CPU's sums, bit for bit),
 * else with a warp, whose lanes would mostly idle on so short a row. */
#define BK_GN_WARP 32

/* The backward's workspace, in doubles: the parts (dg, db) of each
 * (sample, channel) at 2 (s c + ch), as the CPU's, then three per row r at
 * 2 n c + 3 r: sg / k, sgx / k and the row's rstd (bk_gn_row_sums). */
BK_HD int64_t bk_gn_ws_doubles(const bk_gnorm *q) { return 2 * q->n * q->c + 3 * q->n * q->g; }

/* 1 / sqrt(var + eps) rounded to f32, as the CPU's: from the double
 * variance in the forward, from the kept f32 one in the backward */
BK_HD float bk_gn_rstd(double var, float eps) { return (float)(1.0 / sqrt(var + (double)eps)); }

/* Forward on row r, part j0 of step parts (a warp's lanes; the host test
 * runs the parts in a loop): the part's sum of x, in double. */
BK_HD double bk_gn_part_sum(const bk_gnorm *q, const void *x, int64_t r, int64_t j0, int64_t step)
{
    double s = 0;
    for (int64_t i = r * q->k + j0; i < (r + 1) * q->k; i += step)
        s += bk_ldx(x, q->dt, i);
    return s;
}

/* ... the part's sum of squares about the row's mean (the variance's second
 * pass, as the CPU's: no cancellation of a large mean's square) */
BK_HD double bk_gn_part_sq(const bk_gnorm *q, const void *x, int64_t r, double mean, int64_t j0, int64_t step)
{
    double s = 0;
    for (int64_t i = r * q->k + j0; i < (r + 1) * q->k; i += step) {
        double v = bk_ldx(x, q->dt, i) - mean;
        s += v * v;
    }
    return s;
}

/* ... the part's outputs y = ((x - m) rs) scale[ch] + shift[ch] in float,
 * rounded once to dt (m, rs: the row's mean and rstd in f32); y may be x:
 * each element is read before it is written. */
BK_HD void bk_gn_fwd_part(const bk_gnorm *q, const void *x, const float *sc, const float *sh, void *y, int64_t r,
                          float m, float rs, int64_t j0, int64_t step)
{
    int64_t c0 = (r % q->g) * q->cg, at = r * q->k;
    for (int64_t i = j0; i < q->k; i += step) {
        int64_t ch = c0 + i / q->hw;
        float xh = (bk_ldx(x, q->dt, at + i) - m) * rs;
        bk_stx(y, q->dt, at + i, xh * sc[ch] + sh[ch]);
    }
}

/* Backward on (sample, channel) row t = s c + ch (hw elements at t hw),
 * part j0 of step parts: the part's sums of dy xhat and of dy into d[0],
 * d[1], in double, xhat = (x - m) rs in f32 as the CPU recomputes it from
 * the kept statistics. dy xhat is exact in double, so a warp's sum differs
 * from the CPU's (one sum in element order) only by the rounding of double
 * additions in another order; one part (step 1) is the CPU's sum. */
BK_HD void bk_gn_bwd_part(const bk_gnorm *q, const void *x, const void *dy, const float *mean, const float *var,
                          int64_t t, int64_t j0, int64_t step, double *d)
{
    int64_t r = t / q->c * q->g + t % q->c / q->cg;
    float m = mean[r], rs = bk_gn_rstd((double)var[r], q->eps);
    double dg = 0, db = 0;
    for (int64_t i = t * q->hw + j0; i < (t + 1) * q->hw; i += step) {
        double g = bk_ldx(dy, q->dt, i);
        dg += g * (double)((bk_ldx(x, q->dt, i) - m) * rs);
        db += g;
    }
    d[0] = dg, d[1] = db;
}

/* Row r's sums over its channels in channel order, sg = sum db scale and
 * sgx = sum dg scale, divided by k, and its rstd, into the workspace's
 * three doubles for the row (the CPU's order: equal given equal parts, but
 * for a fused multiply-add either compiler may make). */
BK_HD void bk_gn_row_sums(const bk_gnorm *q, const double *part, const float *sc, const float *var, double *ws,
                          int64_t r)
{
    int64_t c0 = (r % q->g) * q->cg;
    const double *p = part + 2 * (r / q->g * q->c + c0);
    double sg = 0, sgx = 0, *o = ws + 2 * q->n * q->c + 3 * r;
    for (int64_t j = 0; j < q->cg; j++) {
        sg += p[2 * j + 1] * sc[c0 + j];
        sgx += p[2 * j] * sc[c0 + j];
    }
    o[0] = sg / (double)q->k, o[1] = sgx / (double)q->k, o[2] = bk_gn_rstd((double)var[r], q->eps);
}

/* The input's gradient at element el: dx = rs (dy scale - sg / k - xhat
 * sgx / k) in double, rounded once to dt, the CPU's formula (its rounding
 * but for fused multiply-adds); dx may be dy. */
BK_HD void bk_gn_dx_one(const bk_gnorm *q, const void *x, const void *dy, const float *mean, const float *sc,
                        const double *ws, void *dx, int64_t el)
{
    int64_t r = el / q->k, ch = (r % q->g) * q->cg + el % q->k / q->hw;
    const double *o = ws + 2 * q->n * q->c + 3 * r;
    float rs = (float)o[2], xh = (bk_ldx(x, q->dt, el) - mean[r]) * rs;
    double g = (double)bk_ldx(dy, q->dt, el) * sc[ch];
    bk_stx(dx, q->dt, el, (float)(rs * (g - o[0] - xh * o[1])));
}

/* Channel ch's scale and shift gradients: its samples' parts in order, in
 * double, set or (acc) added in f32: the CPU's order, so equal to its bits
 * given equal parts. */
BK_HD void bk_gn_param_grad(const bk_gnorm *q, const double *part, float *dsc, float *dsh, int acc, int64_t ch)
{
    double g = 0, b = 0;
    for (int64_t s = 0; s < q->n; s++)
        g += part[2 * (s * q->c + ch)], b += part[2 * (s * q->c + ch) + 1];
    dsc[ch] = acc ? dsc[ch] + (float)g : (float)g;
    dsh[ch] = acc ? dsh[ch] + (float)b : (float)b;
}

#endif
