/* cuda_common.cuh - helpers the backend's .cu files share: launch sizes,
 * grid-stride loops, the dropout hash and deterministic block sums. */
#ifndef BFIT_CUDA_COMMON_CUH
#define BFIT_CUDA_COMMON_CUH

#include "device/cuda_kern.h"

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

/* splitmix64's finaliser: the same function as bfit_mix64 (src/base/rand.h),
 * so a dropout mask is the CPU's bit for bit. */
__device__ __forceinline__ uint64_t bk_mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
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
