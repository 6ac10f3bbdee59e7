/* cuda_common.cuh - helpers the backend's .cu files share: launch sizes,
 * grid-stride loops, the data types, the dropout hash and deterministic
 * block sums. */
#ifndef BFIT_CUDA_COMMON_CUH
#define BFIT_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "device/cuda_kern.h"

/* Data of 16-bit dtypes is loaded as f32, computed on in f32 and stored
 * rounded to nearest even once, as the CPU device does (device/half.h). */
__device__ __forceinline__ float bk_f(float x) { return x; }
__device__ __forceinline__ float bk_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float bk_f(__half x) { return __half2float(x); }
template <class T> __device__ __forceinline__ T bk_to(float v);
template <> __device__ __forceinline__ float bk_to<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 bk_to<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half bk_to<__half>(float v) { return __float2half_rn(v); }

/* Run the statement(s) with T the element type of dtype dt (cuda_kern.h's
 * BK_F32, BK_BF16, BK_F16). */
#define BK_DTYPE(dt, T, ...)                                                                       \
    do {                                                                                           \
        switch (dt) {                                                                              \
        case BK_BF16: {                                                                            \
            typedef __nv_bfloat16 T;                                                               \
            __VA_ARGS__;                                                                           \
            break;                                                                                 \
        }                                                                                          \
        case BK_F16: {                                                                             \
            typedef __half T;                                                                      \
            __VA_ARGS__;                                                                           \
            break;                                                                                 \
        }                                                                                          \
        default: {                                                                                 \
            typedef float T;                                                                       \
            __VA_ARGS__;                                                                           \
            break;                                                                                 \
        }                                                                                          \
        }                                                                                          \
    } while (0)

#define BK_THREADS 256

/* Blocks for n elements at `threads` a block; loops are grid-stride, so a
 * cap only bounds the grid, never the work. */
static inline unsigned bk_grid(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    const int64_t cap = 1 << 20;
    return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

#define BK_FOR(i, n)                                                                               \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)gridDim.x * blockDim.x)

/* Sum of v over a warp by a shuffle-down tree: lane 0 ends with ((v0 +
 * v16) + (v8 + v24)) + ..., the order test_kernel_core repeats on the host
 * (the other lanes hold partial sums). Every lane must take part. */
__device__ __forceinline__ double bk_warp_sum_down(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

/* Sum of v over a block of NT threads (NT a multiple of 32, at most 1024):
 * shuffles within warps, then the warps' sums in order. The tree is fixed
 * by NT alone, so the result is the same on every run and every GPU. The
 * total is returned to every thread. sh: NT / 32 doubles of shared memory. */
template <int NT> __device__ __forceinline__ double bk_block_sum(double v, double *sh)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
    __syncthreads(); /* sh may still be read from a previous call */
    if (lane == 0)
        sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < NT / 32 ? sh[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1)
            v += __shfl_down_sync(0xffffffffu, v, o);
        if (lane == 0)
            sh[0] = v;
    }
    __syncthreads();
    return sh[0];
}

#endif
