/* cuda_elt.cu - the CUDA backend's elementwise kernels: activations, add,
 * scale, dropout, the cross-entropy gradient, bias rows, the batch-norm
 * inverse deviation and the optimizer updates (see cuda_kern.h). */
#include "device/cuda_common.cuh"

#include <math.h>

__global__ void k_probe(void) {}

extern "C" cudaError_t bk_probe(void)
{
    cudaFuncAttributes a;
    return cudaFuncGetAttributes(&a, k_probe);
}

/* the activations' mathematics is cuda_core.h's (checked on the host) */
template <class T> __global__ void k_eltwise_fwd(int alg, float lo, float hi, const T *x, T *y, int64_t n)
{
    BK_FOR(i, n) y[i] = bk_to<T>(bk_act(alg, bk_f(x[i]), lo, hi));
}

template <class T>
__global__ void k_eltwise_bwd(int alg, float lo, float hi, const T *x, const T *dy, T *dx, int64_t n)
{
    BK_FOR(i, n) dx[i] = bk_to<T>(bk_act_grad(alg, bk_f(x[i]), bk_f(dy[i]), lo, hi));
}

extern "C" cudaError_t bk_eltwise_fwd(cudaStream_t s, int dt, int alg, float lo, float hi, const void *x, void *y,
                                      int64_t n)
{
    BK_DTYPE(dt, T,
             k_eltwise_fwd<T><<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>(alg, lo, hi, (const T *)x, (T *)y, n));
    return cudaGetLastError();
}

extern "C" cudaError_t bk_eltwise_bwd(cudaStream_t s, int dt, int alg, float lo, float hi, const void *x,
                                      const void *dy, void *dx, int64_t n)
{
    BK_DTYPE(dt, T,
             k_eltwise_bwd<T><<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>(alg, lo, hi, (const T *)x,
                                                                             (const T *)dy, (T *)dx, n));
    return cudaGetLastError();
}

template <class T> __global__ void k_add(const T *a, const T *b, T *y, int64_t n)
{
    BK_FOR(i, n) y[i] = bk_to<T>(bk_f(a[i]) + bk_f(b[i]));
}

extern "C" cudaError_t bk_add(cudaStream_t s, int dt, const void *a, const void *b, void *y, int64_t n)
{
    BK_DTYPE(dt, T,
             k_add<T><<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>((const T *)a, (const T *)b, (T *)y, n));
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

template <class T>
__global__ void k_dropout_fwd(const T *x, T *y, uint32_t *mask, int64_t n, uint64_t seed, uint64_t thresh, float scale)
{
    BK_WARP_FOR(i, n)
    {
        bool k = i < n && (bk_mix64(seed + (uint64_t)i) >> 32) >= thresh;
        if (i < n)
            y[i] = bk_to<T>(k ? __fmul_rn(bk_f(x[i]), scale) : 0.0f);
        bk_put_bits(mask, i, n, k);
    }
}

template <class T> __global__ void k_dropout_bwd(const T *dy, const uint32_t *mask, T *dx, int64_t n, float scale)
{
    BK_FOR(i, n) dx[i] = bk_to<T>(bk_get_bit(mask, i) ? __fmul_rn(bk_f(dy[i]), scale) : 0.0f);
}

extern "C" cudaError_t bk_dropout_fwd(cudaStream_t s, int dt, const void *x, void *y, void *mask, int64_t n,
                                      uint64_t seed_mixed, uint64_t thresh, float scale)
{
    BK_DTYPE(dt, T,
             k_dropout_fwd<T><<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>((const T *)x, (T *)y, (uint32_t *)mask,
                                                                             n, seed_mixed, thresh, scale));
    return cudaGetLastError();
}

extern "C" cudaError_t bk_dropout_bwd(cudaStream_t s, int dt, const void *dy, const void *mask, void *dx, int64_t n,
                                      float scale)
{
    BK_DTYPE(dt, T,
             k_dropout_bwd<T><<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>((const T *)dy, (const uint32_t *)mask,
                                                                             (T *)dx, n, scale));
    return cudaGetLastError();
}

/* relu keeping only its sign bits for backward */
template <class T> __global__ void k_relu_bits_fwd(const T *x, T *y, uint32_t *bits, int64_t n)
{
    BK_WARP_FOR(i, n)
    {
        float v = i < n ? bk_f(x[i]) : 0.0f;
        bool on = v > 0.0f;
        if (i < n)
            y[i] = bk_to<T>(on ? v : 0.0f);
        bk_put_bits(bits, i, n, on);
    }
}

template <class T> __global__ void k_relu_bits_bwd(const uint32_t *bits, const T *dy, T *dx, int64_t n)
{
    BK_FOR(i, n) dx[i] = bk_get_bit(bits, i) ? dy[i] : bk_to<T>(0.0f);
}

extern "C" cudaError_t bk_relu_bits_fwd(cudaStream_t s, int dt, const void *x, void *y, void *bits, int64_t n)
{
    BK_DTYPE(dt, T,
             k_relu_bits_fwd<T><<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>((const T *)x, (T *)y,
                                                                               (uint32_t *)bits, n));
    return cudaGetLastError();
}

extern "C" cudaError_t bk_relu_bits_bwd(cudaStream_t s, int dt, const void *bits, const void *dy, void *dx, int64_t n)
{
    BK_DTYPE(dt, T,
             k_relu_bits_bwd<T><<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>((const uint32_t *)bits, (const T *)dy,
                                                                               (T *)dx, n));
    return cudaGetLastError();
}

/* A batch norm's elementwise loops index in I: 32 bits where the tensor
 * allows (a 64-bit division per element costs more than the element). */
#define BN_FOR(i, n) for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (I)gridDim.x * blockDim.x)

/* y = scale (x - mean) rstd + shift, as cpu_bnorm.c's 16-bit loops */
template <class T, class I>
__global__ void k_bn_fwd(const T *x, T *y, const float *scale, const float *shift, const float *mean, const float *var,
                         I c, I hw, I total, float eps)
{
    BN_FOR(i, total)
    {
        I k = (i / hw) % c;
        float rstd = (float)(1.0 / sqrt((double)var[k] + (double)eps));
        y[i] = bk_to<T>(scale[k] * ((bk_f(x[i]) - mean[k]) * rstd) + shift[k]);
    }
}

/* 32-bit indexes when every index and its grid step stay below 2^32 */
static inline bool bn_small(int64_t total) { return total <= 0x7fffffff; }

extern "C" cudaError_t bk_bn_fwd(cudaStream_t s, int dt, const void *x, void *y, const float *scale,
                                 const float *shift, const float *mean, const float *var, int64_t n, int64_t c,
                                 int64_t hw, float eps)
{
    const int64_t total = n * c * hw;
    BK_DTYPE(dt, T, {
        if (bn_small(total))
            k_bn_fwd<T, uint32_t><<<bk_grid(total, BK_THREADS), BK_THREADS, 0, s>>>(
                (const T *)x, (T *)y, scale, shift, mean, var, (uint32_t)c, (uint32_t)hw, (uint32_t)total, eps);
        else
            k_bn_fwd<T, int64_t><<<bk_grid(total, BK_THREADS), BK_THREADS, 0, s>>>((const T *)x, (T *)y, scale,
                                                                                  shift, mean, var, c, hw, total, eps);
    });
    return cudaGetLastError();
}

/* x^ from the input (shift NULL) or from the output, as k_bn_param_grads */
template <class T, class I>
__global__ void k_bn_dx(const T *x, const T *dy, const float *scale, const float *shift, const float *mean,
                        const float *var, const double *sums, T *dx, I c, I hw, I total, double cnt, float eps)
{
    BN_FOR(i, total)
    {
        I k = (i / hw) % c;
        double rstd = 1.0 / sqrt((double)var[k] + (double)eps), xh;
        if (shift)
            xh = scale[k] != 0.0f ? ((double)bk_f(x[i]) - shift[k]) / scale[k] : 0.0;
        else
            xh = ((double)bk_f(x[i]) - mean[k]) * rstd;
        double g = (double)bk_f(dy[i]) - sums[k] / cnt - xh * sums[c + k] / cnt;
        dx[i] = bk_to<T>((float)((double)scale[k] * rstd * g));
    }
}

extern "C" cudaError_t bk_bn_dx(cudaStream_t s, int dt, const void *x, const void *dy, const float *scale,
                                const float *shift, const float *mean, const float *var, const double *sums, void *dx,
                                int64_t n, int64_t c, int64_t hw, float eps)
{
    const int64_t total = n * c * hw;
    BK_DTYPE(dt, T, {
        if (bn_small(total))
            k_bn_dx<T, uint32_t><<<bk_grid(total, BK_THREADS), BK_THREADS, 0, s>>>(
                (const T *)x, (const T *)dy, scale, shift, mean, var, sums, (T *)dx, (uint32_t)c, (uint32_t)hw,
                (uint32_t)total, (double)(n * hw), eps);
        else
            k_bn_dx<T, int64_t><<<bk_grid(total, BK_THREADS), BK_THREADS, 0, s>>>(
                (const T *)x, (const T *)dy, scale, shift, mean, var, sums, (T *)dx, c, hw, total, (double)(n * hw),
                eps);
    });
    return cudaGetLastError();
}

/* a negative label (padding) gives its row no gradient, as cpu_simple.c's */
template <class T>
__global__ void k_xent_bwd(const float *p, const int32_t *labels, T *dx, int64_t M, int64_t N, float scale)
{
    BK_FOR(i, M * N)
    {
        int64_t row = i / N, col = i - row * N;
        int32_t lab = labels[row];
        float v = p[i];
        dx[i] = bk_to<T>(__fmul_rn(col == (int64_t)lab ? __fsub_rn(v, 1.0f) : v, lab < 0 ? 0.0f : scale));
    }
}

extern "C" cudaError_t bk_xent_bwd(cudaStream_t s, int dt, const float *p, const int32_t *labels, void *dx, int64_t M,
                                   int64_t N, float scale)
{
    BK_DTYPE(dt, T,
             k_xent_bwd<T><<<bk_grid(M * N, BK_THREADS), BK_THREADS, 0, s>>>(p, labels, (T *)dx, M, N, scale));
    return cudaGetLastError();
}

template <class T> __global__ void k_bias_rows(T *dst, const float *bias, int64_t M, int64_t N, int acc)
{
    BK_FOR(i, M * N)
    {
        float b = bias[i % N];
        dst[i] = bk_to<T>(acc ? bk_f(dst[i]) + b : b);
    }
}

extern "C" cudaError_t bk_bias_rows(cudaStream_t s, int dt, void *dst, const float *bias, int64_t M, int64_t N,
                                    int acc)
{
    BK_DTYPE(dt, T, k_bias_rows<T><<<bk_grid(M * N, BK_THREADS), BK_THREADS, 0, s>>>((T *)dst, bias, M, N, acc));
    return cudaGetLastError();
}

template <class T> __global__ void k_bias_chan(T *y, const float *bias, int64_t c, int64_t hw, int64_t total)
{
    BK_FOR(i, total) y[i] = bk_to<T>(bk_f(y[i]) + bias[(i / hw) % c]);
}

extern "C" cudaError_t bk_bias_chan(cudaStream_t s, int dt, void *y, const float *bias, int64_t n, int64_t c,
                                    int64_t hw)
{
    BK_DTYPE(dt, T, k_bias_chan<T><<<bk_grid(n * c * hw, BK_THREADS), BK_THREADS, 0, s>>>((T *)y, bias, c, hw, n * c * hw));
    return cudaGetLastError();
}

template <class T> __global__ void k_to_f32(const T *x, float *y, int64_t n, int acc)
{
    BK_FOR(i, n) y[i] = acc ? y[i] + bk_f(x[i]) : bk_f(x[i]);
}

extern "C" cudaError_t bk_to_f32(cudaStream_t s, int dt, const void *x, float *y, int64_t n, int acc)
{
    BK_DTYPE(dt, T, k_to_f32<T><<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>((const T *)x, y, n, acc));
    return cudaGetLastError();
}

template <class F, class T> __global__ void k_cast(const F *x, T *y, int64_t n)
{
    BK_FOR(i, n) y[i] = bk_to<T>(bk_f(x[i]));
}

extern "C" cudaError_t bk_cast(cudaStream_t s, int from, int to, const void *x, void *y, int64_t n)
{
    BK_DTYPE(from, F, BK_DTYPE(to, T, k_cast<F, T><<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>((const F *)x, (T *)y, n)));
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
