/* cuda_elt.cu - the CUDA backend's elementwise kernels: activations, add,
 * scale, dropout, the cross-entropy gradient, bias rows, the batch-norm
 * inverse deviation and the optimizer updates (see cuda_kern.h). */
#include "device/cuda_common.cuh"

#include <math.h>

enum { ALG_RELU = 0, ALG_GELU_ERF = 1, ALG_GELU_TANH = 2 }; /* bfit_eltwise_alg */

#define SQRT1_2 0.70710678118654752440f
#define SQRT2_PI 0.79788456080286535588f  /* sqrt(2 / pi) */
#define INV_SQRT_2PI 0.39894228040143267794f
#define GELU_C 0.044715f

__global__ void k_probe(void) {}

extern "C" cudaError_t bk_probe(void)
{
    cudaFuncAttributes a;
    return cudaFuncGetAttributes(&a, k_probe);
}

/* relu as oneDNN's with alpha 0 (x * 0 keeps a NaN a NaN) */
__device__ __forceinline__ float act(int alg, float x)
{
    if (alg == ALG_RELU)
        return x > 0.0f ? x : x * 0.0f;
    if (alg == ALG_GELU_ERF)
        return 0.5f * x * (1.0f + erff(x * SQRT1_2));
    return 0.5f * x * (1.0f + tanhf(SQRT2_PI * x * (1.0f + GELU_C * x * x)));
}

/* f'(x) * dy */
__device__ __forceinline__ float act_grad(int alg, float x, float dy)
{
    if (alg == ALG_RELU)
        return x > 0.0f ? dy : dy * 0.0f;
    if (alg == ALG_GELU_ERF)
        return dy * (0.5f * (1.0f + erff(x * SQRT1_2)) + x * INV_SQRT_2PI * expf(-0.5f * x * x));
    {
        float t = tanhf(SQRT2_PI * x * (1.0f + GELU_C * x * x));
        float du = SQRT2_PI * (1.0f + 3.0f * GELU_C * x * x);
        return dy * 0.5f * (1.0f + t) * (1.0f + x * (1.0f - t) * du);
    }
}

__global__ void k_eltwise_fwd(int alg, const float *x, float *y, int64_t n)
{
    BK_FOR(i, n) y[i] = act(alg, x[i]);
}

__global__ void k_eltwise_bwd(int alg, const float *x, const float *dy, float *dx, int64_t n)
{
    BK_FOR(i, n) dx[i] = act_grad(alg, x[i], dy[i]);
}

extern "C" cudaError_t bk_eltwise_fwd(cudaStream_t s, int alg, const float *x, float *y, int64_t n)
{
    k_eltwise_fwd<<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>(alg, x, y, n);
    return cudaGetLastError();
}

extern "C" cudaError_t bk_eltwise_bwd(cudaStream_t s, int alg, const float *x, const float *dy, float *dx, int64_t n)
{
    k_eltwise_bwd<<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>(alg, x, dy, dx, n);
    return cudaGetLastError();
}

__global__ void k_add(const float *a, const float *b, float *y, int64_t n)
{
    BK_FOR(i, n) y[i] = a[i] + b[i];
}

extern "C" cudaError_t bk_add(cudaStream_t s, const float *a, const float *b, float *y, int64_t n)
{
    k_add<<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>(a, b, y, n);
    return cudaGetLastError();
}

__global__ void k_scale(float *x, float alpha, int64_t n)
{
    BK_FOR(i, n) x[i] = __fmul_rn(x[i], alpha);
}

extern "C" cudaError_t bk_scale(cudaStream_t s, float *x, float alpha, int64_t n)
{
    k_scale<<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>(x, alpha, n);
    return cudaGetLastError();
}

/* Bit masks: element i is bit (i & 31) of 32-bit word i >> 5, which on a
 * little-endian machine is the CPU's bit (i & 63) of 64-bit word i >> 6.
 * Each warp covers 32 consecutive elements and its first lane writes their
 * word from a ballot; the loop's condition is the same across a warp (a
 * block and the grid stride are multiples of 32), so every lane votes. The
 * word after the last is zeroed when it is the upper half of the last
 * 64-bit word, so no bit past n is garbage. */
#define BK_WARP_FOR(i, n)                                                                          \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i - (threadIdx.x & 31) < (n); \
         i += (int64_t)gridDim.x * blockDim.x)

__device__ __forceinline__ void bk_put_bits(uint32_t *bits, int64_t i, int64_t n, bool on)
{
    unsigned w = __ballot_sync(0xffffffffu, on);
    if ((threadIdx.x & 31) == 0) {
        int64_t word = i >> 5;
        bits[word] = w;
        if ((word & 1) == 0 && (word + 1) * 32 >= n)
            bits[word + 1] = 0;
    }
}

__device__ __forceinline__ bool bk_get_bit(const uint32_t *bits, int64_t i)
{
    return (bits[i >> 5] >> (i & 31)) & 1u;
}

__global__ void k_dropout_fwd(const float *x, float *y, uint32_t *mask, int64_t n, uint64_t seed, uint64_t thresh,
                              float scale)
{
    BK_WARP_FOR(i, n)
    {
        bool k = i < n && (bk_mix64(seed + (uint64_t)i) >> 32) >= thresh;
        if (i < n)
            y[i] = k ? __fmul_rn(x[i], scale) : 0.0f;
        bk_put_bits(mask, i, n, k);
    }
}

__global__ void k_dropout_bwd(const float *dy, const uint32_t *mask, float *dx, int64_t n, float scale)
{
    BK_FOR(i, n) dx[i] = bk_get_bit(mask, i) ? __fmul_rn(dy[i], scale) : 0.0f;
}

extern "C" cudaError_t bk_dropout_fwd(cudaStream_t s, const float *x, float *y, void *mask, int64_t n,
                                      uint64_t seed_mixed, uint64_t thresh, float scale)
{
    k_dropout_fwd<<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>(x, y, (uint32_t *)mask, n, seed_mixed, thresh,
                                                                 scale);
    return cudaGetLastError();
}

extern "C" cudaError_t bk_dropout_bwd(cudaStream_t s, const float *dy, const void *mask, float *dx, int64_t n,
                                      float scale)
{
    k_dropout_bwd<<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>(dy, (const uint32_t *)mask, dx, n, scale);
    return cudaGetLastError();
}

/* relu keeping only its sign bits for backward */
__global__ void k_relu_bits_fwd(const float *x, float *y, uint32_t *bits, int64_t n)
{
    BK_WARP_FOR(i, n)
    {
        float v = i < n ? x[i] : 0.0f;
        bool on = v > 0.0f;
        if (i < n)
            y[i] = on ? v : 0.0f;
        bk_put_bits(bits, i, n, on);
    }
}

__global__ void k_relu_bits_bwd(const uint32_t *bits, const float *dy, float *dx, int64_t n)
{
    BK_FOR(i, n) dx[i] = bk_get_bit(bits, i) ? dy[i] : 0.0f;
}

extern "C" cudaError_t bk_relu_bits_fwd(cudaStream_t s, const float *x, float *y, void *bits, int64_t n)
{
    k_relu_bits_fwd<<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>(x, y, (uint32_t *)bits, n);
    return cudaGetLastError();
}

extern "C" cudaError_t bk_relu_bits_bwd(cudaStream_t s, const void *bits, const float *dy, float *dx, int64_t n)
{
    k_relu_bits_bwd<<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>((const uint32_t *)bits, dy, dx, n);
    return cudaGetLastError();
}

/* Batch norm's input recovered from its output (in-place activated batch
 * norm): x = mean + (y - shift) / scale * sqrt(var + eps); a channel with
 * scale 0 gives x = mean (x^ = 0, as cpu_bnorm.c takes it). */
__global__ void k_bn_unnorm(const float *y, const float *scale, const float *shift, const float *mean,
                            const float *var, float *x, int64_t c, int64_t hw, int64_t total, float eps)
{
    BK_FOR(i, total)
    {
        int64_t k = (i / hw) % c;
        float g = scale[k];
        x[i] = g != 0.0f ? mean[k] + (y[i] - shift[k]) / g * sqrtf(var[k] + eps) : mean[k];
    }
}

extern "C" cudaError_t bk_bn_unnorm(cudaStream_t s, const float *y, const float *scale, const float *shift,
                                    const float *mean, const float *var, float *x, int64_t n, int64_t c, int64_t hw,
                                    float eps)
{
    k_bn_unnorm<<<bk_grid(n * c * hw, BK_THREADS), BK_THREADS, 0, s>>>(y, scale, shift, mean, var, x, c, hw,
                                                                       n * c * hw, eps);
    return cudaGetLastError();
}

__global__ void k_xent_bwd(const float *p, const int32_t *labels, float *dx, int64_t M, int64_t N, float scale)
{
    BK_FOR(i, M * N)
    {
        int64_t row = i / N, col = i - row * N;
        float v = p[i];
        dx[i] = __fmul_rn(col == (int64_t)labels[row] ? __fsub_rn(v, 1.0f) : v, scale);
    }
}

extern "C" cudaError_t bk_xent_bwd(cudaStream_t s, const float *p, const int32_t *labels, float *dx, int64_t M,
                                   int64_t N, float scale)
{
    k_xent_bwd<<<bk_grid(M * N, BK_THREADS), BK_THREADS, 0, s>>>(p, labels, dx, M, N, scale);
    return cudaGetLastError();
}

__global__ void k_bias_rows(float *dst, const float *bias, int64_t M, int64_t N, int acc)
{
    BK_FOR(i, M * N)
    {
        float b = bias[i % N];
        dst[i] = acc ? dst[i] + b : b;
    }
}

extern "C" cudaError_t bk_bias_rows(cudaStream_t s, float *dst, const float *bias, int64_t M, int64_t N, int acc)
{
    k_bias_rows<<<bk_grid(M * N, BK_THREADS), BK_THREADS, 0, s>>>(dst, bias, M, N, acc);
    return cudaGetLastError();
}

__global__ void k_invstd(const float *var, float *inv, int64_t c, float eps)
{
    BK_FOR(k, c) inv[k] = (float)(1.0 / sqrt((double)var[k] + (double)eps));
}

extern "C" cudaError_t bk_invstd(cudaStream_t s, const float *var, float *inv, int64_t c, float eps)
{
    k_invstd<<<bk_grid(c, BK_THREADS), BK_THREADS, 0, s>>>(var, inv, c, eps);
    return cudaGetLastError();
}

/* cpu_optim.c's run_sgd: fmaf where it has fmaf, every other product and
 * sum rounded on its own (the _rn intrinsics are never contracted). */
__global__ void k_sgd(float *p, const float *g, float *buf, int64_t n, bk_sgd_hyper h)
{
    BK_FOR(i, n)
    {
        float pi = p[i], d = h.wd != 0.0f ? __fmaf_rn(pi, h.wd, g[i]) : g[i];
        if (buf) {
            float b = h.first ? d : __fmaf_rn(d, h.damp1, __fmul_rn(buf[i], h.mom));
            buf[i] = b;
            d = h.nesterov ? __fmaf_rn(b, h.mom, d) : b;
        }
        p[i] = __fmaf_rn(d, h.lr_neg, pi);
    }
}

extern "C" cudaError_t bk_sgd(cudaStream_t s, float *p, const float *g, float *buf, int64_t n, bk_sgd_hyper h)
{
    k_sgd<<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>(p, g, buf, n, h);
    return cudaGetLastError();
}

/* cpu_optim.c's run_adamw, operation for operation (IEEE sqrt and
 * division: the build has no fast math). */
__global__ void k_adamw(float *p, const float *g, float *m, float *v, int64_t n, bk_adamw_hyper h)
{
    BK_FOR(i, n)
    {
        float gi = g[i];
        float pi = __fmul_rn(p[i], h.dm);
        float mi = __fmaf_rn(gi, h.c1, __fmul_rn(m[i], h.b1));
        float vi = __fmaf_rn(__fmul_rn(h.c2, gi), gi, __fmul_rn(v[i], h.b2));
        float den = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), h.bc2_sqrt), h.eps);
        m[i] = mi;
        v[i] = vi;
        p[i] = __fadd_rn(pi, __fdiv_rn(__fmul_rn(h.step_neg, mi), den));
    }
}

extern "C" cudaError_t bk_adamw(cudaStream_t s, float *p, const float *g, float *m, float *v, int64_t n,
                                bk_adamw_hyper h)
{
    k_adamw<<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>(p, g, m, v, n, h);
    return cudaGetLastError();
}
