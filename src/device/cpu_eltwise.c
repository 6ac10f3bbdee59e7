/* cpu_eltwise.c - ELTWISE_FWD/BWD on oneDNN: relu, the two gelus (the erf one in f32 is ours,
 * cpu_gelu.c), clip, sigmoid, silu, tanh, hardswish, leaky relu and elu
 * (hardsigmoid, softplus, selu and celu, which oneDNN 2.6 lacks, by cuda_core.h's per-element function) over a
 * flat array of n elements (the shape does not matter elementwise). The
 * backward takes the forward's input (src), which every algorithm here
 * supports; relu may instead take the forward's output (use_dst), which
 * oneDNN also supports, or keep only its sign bits (bits: our own loops), so
 * that a model keeps whichever it keeps anyway, or 1 bit per element. bf16
 * computed in f32 (cpu_bf16.c) goes in chunks (run). */
#include "base/err.h"
#include "device/cpu.h"
#include "device/cpu_isa.h"
#include "device/cuda_core.h"
#include "device/half.h"

#include <immintrin.h>

/* ---- relu with a bit mask -------------------------------------------------- */

/* 64 elements per word, one thread per range of words: no two threads write
 * a word. Each dtype has its own word function (a per-element dtype switch
 * and rounding made bf16 three times slower than f32), and a whole word is
 * a few vector compares and masked moves, with AVX-512 where cpu_isa.h
 * chooses it, else AVX2: the scalar loops took a tenth of a bf16 cnn step.
 * All give the same bits and values; a last partial word is scalar. */

static uint64_t relu_word_f32(const float *x, float *y, int len)
{
    uint64_t word = 0;
    for (int i = 0; i < len; i++) {
        int on = x[i] > 0.0f;
        word |= (uint64_t)on << i;
        y[i] = on ? x[i] : 0.0f;
    }
    return word;
}

/* A 16-bit float read as a signed integer is > 0 exactly when the float is
 * > 0 or a NaN of clear sign (which passes, as torch.relu's). */
static uint64_t relu_word_16(const int16_t *x, int16_t *y, int len)
{
    uint64_t word = 0;
    for (int i = 0; i < len; i++) {
        int on = x[i] > 0;
        word |= (uint64_t)on << i;
        y[i] = on ? x[i] : 0;
    }
    return word;
}

static void relu_mask_f32(uint64_t word, const float *dy, float *dx, int len)
{
    for (int i = 0; i < len; i++)
        dx[i] = (word >> i) & 1u ? dy[i] : 0.0f;
}

static void relu_mask_16(uint64_t word, const uint16_t *dy, uint16_t *dx, int len)
{
    for (int i = 0; i < len; i++)
        dx[i] = (word >> i) & 1u ? dy[i] : 0;
}

/* A whole word of 64 with AVX2: a compare's lanes to bits by movemask (the
 * 16-bit lanes packed to bytes first), bits to lanes by a test of each
 * lane's own bit. */
static inline uint64_t relu_word64_f32_avx2(const float *x, float *y)
{
    uint64_t word = 0;
    for (int j = 0; j < 8; j++) {
        __m256 v = _mm256_loadu_ps(x + 8 * j);
        __m256 k = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ); /* NaN: off, as x > 0 */
        _mm256_storeu_ps(y + 8 * j, _mm256_and_ps(k, v));
        word |= (uint64_t)(uint32_t)_mm256_movemask_ps(k) << (8 * j);
    }
    return word;
}

static inline uint64_t relu_word64_16_avx2(const int16_t *x, int16_t *y)
{
    uint64_t word = 0;
    for (int j = 0; j < 2; j++) {
        __m256i v0 = _mm256_loadu_si256((const __m256i *)(x + 32 * j));
        __m256i v1 = _mm256_loadu_si256((const __m256i *)(x + 32 * j + 16));
        __m256i k0 = _mm256_cmpgt_epi16(v0, _mm256_setzero_si256()), k1 = _mm256_cmpgt_epi16(v1, _mm256_setzero_si256());
        /* bytes of k0, k1 come out by 128-bit lanes as quarters 0, 2, 1, 3 */
        __m256i k = _mm256_permute4x64_epi64(_mm256_packs_epi16(k0, k1), 0xd8);
        _mm256_storeu_si256((__m256i *)(y + 32 * j), _mm256_and_si256(k0, v0));
        _mm256_storeu_si256((__m256i *)(y + 32 * j + 16), _mm256_and_si256(k1, v1));
        word |= (uint64_t)(uint32_t)_mm256_movemask_epi8(k) << (32 * j);
    }
    return word;
}

static inline void relu_mask64_f32_avx2(uint64_t word, const float *dy, float *dx)
{
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    for (int j = 0; j < 8; j++) {
        __m256i b = _mm256_and_si256(_mm256_set1_epi32((int)((word >> (8 * j)) & 0xffu)), bit);
        __m256 k = _mm256_castsi256_ps(_mm256_cmpeq_epi32(b, bit));
        _mm256_storeu_ps(dx + 8 * j, _mm256_and_ps(k, _mm256_loadu_ps(dy + 8 * j)));
    }
}

static inline void relu_mask64_16_avx2(uint64_t word, const uint16_t *dy, uint16_t *dx)
{
    const __m256i bit = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
                                          (short)0x8000);
    for (int j = 0; j < 4; j++) {
        __m256i b = _mm256_and_si256(_mm256_set1_epi16((short)(word >> (16 * j))), bit);
        __m256i k = _mm256_cmpeq_epi16(b, bit);
        __m256i g = _mm256_loadu_si256((const __m256i *)(dy + 16 * j));
        _mm256_storeu_si256((__m256i *)(dx + 16 * j), _mm256_and_si256(k, g));
    }
}

/* The same for a whole word of 64, with AVX-512. */
BFIT_CPU_AVX512 static inline uint64_t relu_word64_f32(const float *x, float *y)
{
    uint64_t word = 0;
    for (int j = 0; j < 4; j++) {
        __m512 v = _mm512_loadu_ps(x + 16 * j);
        __mmask16 k = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ); /* NaN: off, as x > 0 */
        _mm512_storeu_ps(y + 16 * j, _mm512_maskz_mov_ps(k, v));
        word |= (uint64_t)k << (16 * j);
    }
    return word;
}

BFIT_CPU_AVX512 static inline uint64_t relu_word64_16(const int16_t *x, int16_t *y)
{
    uint64_t word = 0;
    for (int j = 0; j < 2; j++) {
        __m512i v = _mm512_loadu_si512(x + 32 * j);
        __mmask32 k = _mm512_cmpgt_epi16_mask(v, _mm512_setzero_si512());
        _mm512_storeu_si512(y + 32 * j, _mm512_maskz_mov_epi16(k, v));
        word |= (uint64_t)k << (32 * j);
    }
    return word;
}

BFIT_CPU_AVX512 static inline void relu_mask64_f32(uint64_t word, const float *dy, float *dx)
{
    for (int j = 0; j < 4; j++)
        _mm512_storeu_ps(dx + 16 * j, _mm512_maskz_loadu_ps((__mmask16)(word >> (16 * j)), dy + 16 * j));
}

BFIT_CPU_AVX512 static inline void relu_mask64_16(uint64_t word, const uint16_t *dy, uint16_t *dx)
{
    for (int j = 0; j < 2; j++)
        _mm512_storeu_si512(dx + 32 * j, _mm512_maskz_loadu_epi16((__mmask32)(word >> (32 * j)), dy + 32 * j));
}

/* The loops over words, parallel above 65536 elements: a variant per
 * instruction set, each holding its loop so the word functions inline. */
#define WORDS_PAR (65536 / 64)
#define WORD_LEN(w) (n - (w) * 64 < 64 ? (int)(n - (w) * 64) : 64)

BFIT_CPU_AVX512 static void bits_fwd_avx512(const void *x, void *y, uint64_t *bits, int64_t n, int f32)
{
    BFIT_PAR_FOR_IF((n + 63) / 64 > WORDS_PAR, for (int64_t w = 0; w < (n + 63) / 64; w++) {
        const float *xf = (const float *)x + w * 64;
        const int16_t *xh = (const int16_t *)x + w * 64;
        float *yf = (float *)y + w * 64;
        int16_t *yh = (int16_t *)y + w * 64;
        if (WORD_LEN(w) == 64)
            bits[w] = f32 ? relu_word64_f32(xf, yf) : relu_word64_16(xh, yh);
        else
            bits[w] = f32 ? relu_word_f32(xf, yf, WORD_LEN(w)) : relu_word_16(xh, yh, WORD_LEN(w));
    });
}

static void bits_fwd_avx2(const void *x, void *y, uint64_t *bits, int64_t n, int f32)
{
    BFIT_PAR_FOR_IF((n + 63) / 64 > WORDS_PAR, for (int64_t w = 0; w < (n + 63) / 64; w++) {
        const float *xf = (const float *)x + w * 64;
        const int16_t *xh = (const int16_t *)x + w * 64;
        float *yf = (float *)y + w * 64;
        int16_t *yh = (int16_t *)y + w * 64;
        if (WORD_LEN(w) == 64)
            bits[w] = f32 ? relu_word64_f32_avx2(xf, yf) : relu_word64_16_avx2(xh, yh);
        else
            bits[w] = f32 ? relu_word_f32(xf, yf, WORD_LEN(w)) : relu_word_16(xh, yh, WORD_LEN(w));
    });
}

BFIT_CPU_AVX512 static void bits_bwd_avx512(const uint64_t *bits, const void *dy, void *dx, int64_t n, int f32)
{
    BFIT_PAR_FOR_IF((n + 63) / 64 > WORDS_PAR, for (int64_t w = 0; w < (n + 63) / 64; w++) {
        const float *gf = (const float *)dy + w * 64;
        const uint16_t *gh = (const uint16_t *)dy + w * 64;
        float *of = (float *)dx + w * 64;
        uint16_t *oh = (uint16_t *)dx + w * 64;
        if (WORD_LEN(w) == 64 && f32)
            relu_mask64_f32(bits[w], gf, of);
        else if (WORD_LEN(w) == 64)
            relu_mask64_16(bits[w], gh, oh);
        else if (f32)
            relu_mask_f32(bits[w], gf, of, WORD_LEN(w));
        else
            relu_mask_16(bits[w], gh, oh, WORD_LEN(w));
    });
}

static void bits_bwd_avx2(const uint64_t *bits, const void *dy, void *dx, int64_t n, int f32)
{
    BFIT_PAR_FOR_IF((n + 63) / 64 > WORDS_PAR, for (int64_t w = 0; w < (n + 63) / 64; w++) {
        const float *gf = (const float *)dy + w * 64;
        const uint16_t *gh = (const uint16_t *)dy + w * 64;
        float *of = (float *)dx + w * 64;
        uint16_t *oh = (uint16_t *)dx + w * 64;
        if (WORD_LEN(w) == 64 && f32)
            relu_mask64_f32_avx2(bits[w], gf, of);
        else if (WORD_LEN(w) == 64)
            relu_mask64_16_avx2(bits[w], gh, oh);
        else if (f32)
            relu_mask_f32(bits[w], gf, of, WORD_LEN(w));
        else
            relu_mask_16(bits[w], gh, oh, WORD_LEN(w));
    });
}

static int run_bits_fwd(cpu_op *op, const bfit_op_args *a)
{
    int64_t n = op->base.desc.u.elt.n;
    int f32 = op->base.desc.dtype == BFIT_F32;

    if (!a->src || !a->dst || !a->saved)
        return bfit_fail(BFIT_EINVAL, "relu forward (bits): src, dst and saved (the bits) are required");
    (bfit_cpu_isa_get() == BFIT_CPU_ISA_AVX512 ? bits_fwd_avx512 : bits_fwd_avx2)(a->src, a->dst, a->saved, n, f32);
    return BFIT_OK;
}

static int run_bits_bwd(cpu_op *op, const bfit_op_args *a)
{
    int64_t n = op->base.desc.u.elt.n;
    int f32 = op->base.desc.dtype == BFIT_F32;

    if (!a->diff_dst || !a->diff_src || !a->saved)
        return bfit_fail(BFIT_EINVAL, "relu backward (bits): diff_dst, diff_src and saved (the bits) are required");
    (bfit_cpu_isa_get() == BFIT_CPU_ISA_AVX512 ? bits_bwd_avx512 : bits_bwd_avx2)(a->saved, a->diff_dst, a->diff_src,
                                                                             n, f32);
    return BFIT_OK;
}

/* ---- hardsigmoid, softplus, selu, celu: the function the CUDA kernel runs - */

/* Per element, in f32 (bfit_ld/bfit_st convert bf16): oneDNN 2.6 has no
 * hardsigmoid, selu or celu, and its soft_relu has neither beta nor
 * threshold (its elu has no scale, for selu, or input scale, for celu). The
 * bfit_eltwise_alg is cuda_core.h's BK_ number. */
static int run_own(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    bfit_dtype t = d->dtype;
    float lo = d->u.elt.lo, hi = d->u.elt.hi;
    int64_t n = d->u.elt.n;
    int alg = (int)d->u.elt.alg;

    if (d->kind == BFIT_OP_ELTWISE_FWD) {
        if (!a->src || !a->dst)
            return bfit_fail(BFIT_EINVAL, "eltwise forward: src and dst are required");
        BFIT_PAR_FOR_IF(n > BFIT_PAR_MIN, for (int64_t i = 0; i < n; i++)
            bfit_st(a->dst, t, i, bk_act(alg, bfit_ld(a->src, t, i), lo, hi)););
        return BFIT_OK;
    }
    if (!a->src || !a->diff_dst || !a->diff_src)
        return bfit_fail(BFIT_EINVAL, "eltwise backward: src, diff_dst and diff_src are required");
    BFIT_PAR_FOR_IF(n > BFIT_PAR_MIN, for (int64_t i = 0; i < n; i++)
        bfit_st(a->diff_src, t, i, bk_act_grad(alg, bfit_ld(a->src, t, i), bfit_ld(a->diff_dst, t, i), lo, hi)););
    return BFIT_OK;
}

/* bf16 computed in f32 (cpu_bf16.c) goes over the array in chunks of this
 * many elements: its f32 copies (three in a backward) then take a constant
 * 3 MiB of workspace instead of 12 bytes per element (ResNet-50's relu
 * backward: 9 MiB per sample, the largest workspace of its bf16 step). The
 * primitives for a chunk sit in slots 0 (1: its forward, the hint), those
 * for the last, shorter chunk in 2 (3). */
#define CHUNK ((int64_t)1 << 18)

static int64_t chunk_of(const cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    return bfit_cpu_compute_dt(cpu_dev(op), d->dtype) != d->dtype && d->u.elt.n > CHUNK ? CHUNK : d->u.elt.n;
}

static const_dnnl_memory_desc_t arg_md(const cpu_op *op, int p, int arg)
{
    return dnnl_primitive_desc_query_md(op->pd[p], dnnl_query_exec_arg_md, arg);
}

/* Run slot p's primitive (forward or backward) on elements [at, at + len). */
static int run_part(cpu_op *op, int p, const bfit_op_args *a, int64_t at)
{
    size_t off = (size_t)at * bfit_dtype_size(op->base.desc.dtype);
    int dst = op->base.desc.u.elt.use_dst;
    if (op->base.desc.kind == BFIT_OP_ELTWISE_FWD) {
        const cpu_arg args[] = {
            {DNNL_ARG_SRC, (const char *)a->src + off, arg_md(op, p, DNNL_ARG_SRC)},
            {DNNL_ARG_DST, (char *)a->dst + off, arg_md(op, p, DNNL_ARG_DST)},
        };
        return bfit_cpu_exec(op, p, args, 2, a->workspace, "eltwise forward");
    } else {
        const cpu_arg args[] = {
            {dst ? DNNL_ARG_DST : DNNL_ARG_SRC, (const char *)a->src + off,
             arg_md(op, p, dst ? DNNL_ARG_DST : DNNL_ARG_SRC)},
            {DNNL_ARG_DIFF_DST, (const char *)a->diff_dst + off, arg_md(op, p, DNNL_ARG_DIFF_DST)},
            {DNNL_ARG_DIFF_SRC, (char *)a->diff_src + off, arg_md(op, p, DNNL_ARG_DIFF_SRC)},
        };
        return bfit_cpu_exec(op, p, args, 3, a->workspace, "eltwise backward");
    }
}

static int run(cpu_op *op, const bfit_op_args *a)
{
    int64_t n = op->base.desc.u.elt.n, c = chunk_of(op);
    int rc = BFIT_OK;
    if (op->base.desc.kind == BFIT_OP_ELTWISE_FWD && (!a->src || !a->dst))
        return bfit_fail(BFIT_EINVAL, "eltwise forward: src and dst are required");
    if (op->base.desc.kind == BFIT_OP_ELTWISE_BWD && (!a->src || !a->diff_dst || !a->diff_src))
        return bfit_fail(BFIT_EINVAL, "eltwise backward: src, diff_dst and diff_src are required");
    for (int64_t at = 0; rc == BFIT_OK && at < n; at += c)
        rc = run_part(op, at + c <= n ? 0 : 2, a, at);
    return rc;
}

/* The primitive for arrays of n elements in slot p (its forward hint in
 * p + 1 for a backward), its workspace into *ws (a max). */
static int make_prims(cpu_op *op, int p, int64_t n, dnnl_alg_kind_t alg, float alpha, float beta, size_t *ws)
{
    const bfit_op_desc *d = &op->base.desc;
    dnnl_memory_desc_t md;
    dnnl_eltwise_desc_t fwd, bwd;
    dnnl_primitive_attr_t attr;
    size_t ws_hint = 0;
    int rc;

    if ((rc = bfit_cpu_md_dt(&md, 1, &n, d->dtype)) != BFIT_OK)
        return rc;
    CPU_TRY(dnnl_eltwise_forward_desc_init(&fwd, dnnl_forward_training, alg, &md, alpha, beta),
            "eltwise forward descriptor");
    if ((rc = bfit_cpu_attr_user_scratchpad(&attr)) != BFIT_OK)
        return rc;
    if (d->kind == BFIT_OP_ELTWISE_FWD) {
        rc = bfit_cpu_pd_create(op, p, &fwd, attr, NULL, ws);
    } else {
        /* the backward needs the forward's pd as a hint */
        rc = bfit_cpu_pd_create(op, p + 1, &fwd, attr, NULL, &ws_hint);
        if (rc == BFIT_OK && dnnl_eltwise_backward_desc_init(&bwd, alg, &md, &md, alpha, beta) != dnnl_success)
            rc = bfit_fail(BFIT_EDEVICE, "oneDNN: eltwise backward descriptor failed");
        if (rc == BFIT_OK)
            rc = bfit_cpu_pd_create(op, p, &bwd, attr, op->pd[p + 1], ws);
    }
    dnnl_primitive_attr_destroy(attr);
    return rc;
}

int bfit_cpu_eltwise_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t n = d->u.elt.n, c;
    dnnl_alg_kind_t alg;
    float alpha = 0.f, beta = 0.f;
    int rc, mine;

    /* n, the algorithm, its bounds and backward modes: checked in bfit_op_new */
    if ((rc = bfit_cpu_gelu_init(op, &mine)) != BFIT_OK || mine)
        return rc;
    if (d->u.elt.bits) {
        op->ws = 0;
        op->saved = (size_t)(n + 63) / 64 * 8;
        op->run = d->kind == BFIT_OP_ELTWISE_FWD ? run_bits_fwd : run_bits_bwd;
        return BFIT_OK;
    }
    switch (d->u.elt.alg) {
    case BFIT_ELT_RELU: /* alpha 0: plain relu; the dst variant computes the same, backward from dst */
        alg = d->u.elt.use_dst ? dnnl_eltwise_relu_use_dst_for_bwd : dnnl_eltwise_relu;
        break;
    case BFIT_ELT_GELU_ERF: alg = dnnl_eltwise_gelu_erf; break;
    case BFIT_ELT_GELU_TANH: alg = dnnl_eltwise_gelu_tanh; break;
    /* v2: the gradient passes only strictly inside (lo, hi), as PyTorch's hardtanh */
    case BFIT_ELT_CLIP: alg = d->u.elt.use_dst ? dnnl_eltwise_clip_v2_use_dst_for_bwd : dnnl_eltwise_clip_v2; break;
    case BFIT_ELT_SIGMOID: alg = dnnl_eltwise_logistic; break;
    case BFIT_ELT_SILU: alg = dnnl_eltwise_swish, alpha = 1.f; break; /* x * sigmoid(alpha x) */
    case BFIT_ELT_TANH: alg = dnnl_eltwise_tanh; break;
    case BFIT_ELT_HARDSWISH: alg = dnnl_eltwise_hardswish; break;
    /* relu with alpha: x > 0 ? x : alpha x, the gradient alpha dy at x <= 0 (PyTorch's leaky_relu) */
    case BFIT_ELT_LEAKYRELU: alg = dnnl_eltwise_relu, alpha = d->u.elt.lo; break;
    case BFIT_ELT_ELU: alg = dnnl_eltwise_elu, alpha = d->u.elt.lo; break; /* alpha (e^x - 1) at x <= 0 */
    case BFIT_ELT_HARDSIGMOID:
    case BFIT_ELT_SOFTPLUS:
    case BFIT_ELT_SELU:
    case BFIT_ELT_CELU:
        op->ws = op->saved = 0;
        op->run = run_own;
        return BFIT_OK;
    default: return bfit_fail(BFIT_EINVAL, "eltwise: unknown algorithm %d", (int)d->u.elt.alg);
    }
    if (d->u.elt.alg == BFIT_ELT_CLIP)
        alpha = d->u.elt.lo, beta = d->u.elt.hi;
    op->ws = 0;
    op->saved = 0;
    op->run = run;
    c = chunk_of(op);
    if ((rc = make_prims(op, 0, c, alg, alpha, beta, &op->ws)) != BFIT_OK)
        return rc;
    return n % c ? make_prims(op, 2, n % c, alg, alpha, beta, &op->ws) : BFIT_OK;
}
