/* cpu_eltwise.c - ELTWISE_FWD/BWD on oneDNN: relu, the two gelus and clip over a
 * flat array of n elements (the shape does not matter elementwise). The
 * backward takes the forward's input (src), which every algorithm here
 * supports; relu may instead take the forward's output (use_dst), which
 * oneDNN also supports, or keep only its sign bits (bits: our own loops), so
 * that a model keeps whichever it keeps anyway, or 1 bit per element. */
#include "base/err.h"
#include "device/cpu.h"
#include "device/half.h"

/* ---- relu with a bit mask -------------------------------------------------- */

/* 64 elements per word, one thread per range of words: no two threads write
 * a word. Each dtype has its own word function (a per-element dtype switch
 * and rounding made bf16 three times slower than f32), and a whole word is
 * four (f32) or two (16-bit) AVX-512 compares and masked moves where the
 * compiler targets AVX-512: the scalar loops took a tenth of a bf16 cnn
 * step. Both give the same bits and values; a last partial word is scalar. */
#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#define BITS_SIMD 1
#else
#define BITS_SIMD 0
#endif

static uint64_t relu_word_f32(const float *x, float *y, int len)
{
    uint64_t word = 0;
#if BITS_SIMD
    if (len == 64) {
        for (int j = 0; j < 4; j++) {
            __m512 v = _mm512_loadu_ps(x + 16 * j);
            __mmask16 k = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ); /* NaN: off, as x > 0 */
            _mm512_storeu_ps(y + 16 * j, _mm512_maskz_mov_ps(k, v));
            word |= (uint64_t)k << (16 * j);
        }
        return word;
    }
#endif
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
#if BITS_SIMD
    if (len == 64) {
        for (int j = 0; j < 2; j++) {
            __m512i v = _mm512_loadu_si512(x + 32 * j);
            __mmask32 k = _mm512_cmpgt_epi16_mask(v, _mm512_setzero_si512());
            _mm512_storeu_si512(y + 32 * j, _mm512_maskz_mov_epi16(k, v));
            word |= (uint64_t)k << (32 * j);
        }
        return word;
    }
#endif
    for (int i = 0; i < len; i++) {
        int on = x[i] > 0;
        word |= (uint64_t)on << i;
        y[i] = on ? x[i] : 0;
    }
    return word;
}

static void relu_mask_f32(uint64_t word, const float *dy, float *dx, int len)
{
#if BITS_SIMD
    if (len == 64) {
        for (int j = 0; j < 4; j++)
            _mm512_storeu_ps(dx + 16 * j, _mm512_maskz_loadu_ps((__mmask16)(word >> (16 * j)), dy + 16 * j));
        return;
    }
#endif
    for (int i = 0; i < len; i++)
        dx[i] = (word >> i) & 1u ? dy[i] : 0.0f;
}

static void relu_mask_16(uint64_t word, const uint16_t *dy, uint16_t *dx, int len)
{
#if BITS_SIMD
    if (len == 64) {
        for (int j = 0; j < 2; j++)
            _mm512_storeu_si512(dx + 32 * j, _mm512_maskz_loadu_epi16((__mmask32)(word >> (32 * j)), dy + 32 * j));
        return;
    }
#endif
    for (int i = 0; i < len; i++)
        dx[i] = (word >> i) & 1u ? dy[i] : 0;
}

/* The loops below are over words: parallel above 65536 elements. */
#define WORDS_PAR (65536 / 64)

static int run_bits_fwd(cpu_op *op, const bfit_op_args *a)
{
    int64_t n = op->base.desc.u.elt.n, nw = (n + 63) / 64;
    int f32 = op->base.desc.dtype == BFIT_F32;
    uint64_t *bits = a->saved;

    if (!a->src || !a->dst || !bits)
        return bfit_fail(BFIT_EINVAL, "relu forward (bits): src, dst and saved (the bits) are required");
    BFIT_PAR_FOR_IF(nw > WORDS_PAR, for (int64_t w = 0; w < nw; w++) {
        int len = n - w * 64 < 64 ? (int)(n - w * 64) : 64;
        bits[w] = f32 ? relu_word_f32((const float *)a->src + w * 64, (float *)a->dst + w * 64, len)
                      : relu_word_16((const int16_t *)a->src + w * 64, (int16_t *)a->dst + w * 64, len);
    });
    return BFIT_OK;
}

static int run_bits_bwd(cpu_op *op, const bfit_op_args *a)
{
    int64_t n = op->base.desc.u.elt.n, nw = (n + 63) / 64;
    int f32 = op->base.desc.dtype == BFIT_F32;
    const uint64_t *bits = a->saved;

    if (!a->diff_dst || !a->diff_src || !bits)
        return bfit_fail(BFIT_EINVAL, "relu backward (bits): diff_dst, diff_src and saved (the bits) are required");
    BFIT_PAR_FOR_IF(nw > WORDS_PAR, for (int64_t w = 0; w < nw; w++) {
        int len = n - w * 64 < 64 ? (int)(n - w * 64) : 64;
        if (f32)
            relu_mask_f32(bits[w], (const float *)a->diff_dst + w * 64, (float *)a->diff_src + w * 64, len);
        else
            relu_mask_16(bits[w], (const uint16_t *)a->diff_dst + w * 64, (uint16_t *)a->diff_src + w * 64, len);
    });
    return BFIT_OK;
}

static const_dnnl_memory_desc_t arg_md(const cpu_op *op, int arg)
{
    return dnnl_primitive_desc_query_md(op->pd[0], dnnl_query_exec_arg_md, arg);
}

static int run_fwd(cpu_op *op, const bfit_op_args *a)
{
    const cpu_arg args[] = {
        {DNNL_ARG_SRC, a->src, arg_md(op, DNNL_ARG_SRC)},
        {DNNL_ARG_DST, a->dst, arg_md(op, DNNL_ARG_DST)},
    };
    if (!a->src || !a->dst)
        return bfit_fail(BFIT_EINVAL, "eltwise forward: src and dst are required");
    return bfit_cpu_exec(op, 0, args, 2, a->workspace, "eltwise forward");
}

static int run_bwd(cpu_op *op, const bfit_op_args *a)
{
    int dst = op->base.desc.u.elt.use_dst;
    const cpu_arg args[] = {
        {dst ? DNNL_ARG_DST : DNNL_ARG_SRC, a->src, arg_md(op, dst ? DNNL_ARG_DST : DNNL_ARG_SRC)},
        {DNNL_ARG_DIFF_DST, a->diff_dst, arg_md(op, DNNL_ARG_DIFF_DST)},
        {DNNL_ARG_DIFF_SRC, a->diff_src, arg_md(op, DNNL_ARG_DIFF_SRC)},
    };
    if (!a->src || !a->diff_dst || !a->diff_src)
        return bfit_fail(BFIT_EINVAL, "eltwise backward: src, diff_dst and diff_src are required");
    return bfit_cpu_exec(op, 0, args, 3, a->workspace, "eltwise backward");
}

int bfit_cpu_eltwise_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t n = d->u.elt.n;
    dnnl_memory_desc_t md;
    dnnl_eltwise_desc_t fwd, bwd;
    dnnl_primitive_attr_t attr;
    dnnl_alg_kind_t alg;
    float alpha = 0.f, beta = 0.f;
    int rc;

    if (n < 1)
        return bfit_fail(BFIT_EINVAL, "eltwise: need at least one element, got %lld", (long long)n);
    if ((d->u.elt.use_dst && d->u.elt.alg != BFIT_ELT_RELU && d->u.elt.alg != BFIT_ELT_CLIP) ||
        (d->u.elt.bits && d->u.elt.alg != BFIT_ELT_RELU))
        return bfit_fail(BFIT_EINVAL, "eltwise: only relu's and clip's backward can use the output, relu's sign bits");
    if (d->u.elt.alg == BFIT_ELT_CLIP && !(d->u.elt.lo < d->u.elt.hi))
        return bfit_fail(BFIT_EINVAL, "eltwise: clip needs lo < hi, got [%g, %g]", (double)d->u.elt.lo,
                         (double)d->u.elt.hi);
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
    default: return bfit_fail(BFIT_EINVAL, "eltwise: unknown algorithm %d", (int)d->u.elt.alg);
    }
    if ((rc = bfit_cpu_md_dt(&md, 1, &n, d->dtype)) != BFIT_OK)
        return rc;
    if (d->u.elt.alg == BFIT_ELT_CLIP)
        alpha = d->u.elt.lo, beta = d->u.elt.hi;
    CPU_TRY(dnnl_eltwise_forward_desc_init(&fwd, dnnl_forward_training, alg, &md, alpha, beta),
            "eltwise forward descriptor");
    if ((rc = bfit_cpu_attr_user_scratchpad(&attr)) != BFIT_OK)
        return rc;
    op->ws = 0;
    op->saved = 0;
    if (d->kind == BFIT_OP_ELTWISE_FWD) {
        rc = bfit_cpu_pd_create(&op->pd[0], &fwd, attr, cpu_dev(op)->eng, NULL, &op->ws);
        op->run = run_fwd;
    } else {
        /* the backward needs the forward's pd as a hint; it is kept in pd[1] */
        size_t ws_hint = 0;
        rc = bfit_cpu_pd_create(&op->pd[1], &fwd, attr, cpu_dev(op)->eng, NULL, &ws_hint);
        if (rc == BFIT_OK && dnnl_eltwise_backward_desc_init(&bwd, alg, &md, &md, alpha, beta) != dnnl_success)
            rc = bfit_fail(BFIT_EDEVICE, "oneDNN: eltwise backward descriptor failed");
        if (rc == BFIT_OK)
            rc = bfit_cpu_pd_create(&op->pd[0], &bwd, attr, cpu_dev(op)->eng, op->pd[1], &op->ws);
        op->run = run_bwd;
    }
    dnnl_primitive_attr_destroy(attr);
    if (rc != BFIT_OK)
        return rc;
    CPU_TRY(dnnl_primitive_create(&op->prim[0], op->pd[0]), "eltwise primitive");
    return BFIT_OK;
}
