/* cuda_rope.cu - the CUDA backend's rotary position embedding (ROPE_FWD/BWD):
 * the angles' cos and sin into the workspace (rope.h's angles, as the CPU's
 * table), then a thread per pair of columns of a head (see cuda_kern.h). */
#include "device/cuda_common.cuh"
#include "device/rope.h"

__global__ void k_rope_table(float *cs, int64_t T, int64_t d, float theta)
{
    const int64_t h = d / 2;
    BK_FOR(i, T * h)
    {
        double a = bfit_rope_angle(i / h, i % h, d, theta);
        cs[2 * i] = (float)cos(a);
        cs[2 * i + 1] = (float)sin(a);
    }
}

/* pair i of the n T (C / d) h pairs: row r (a sample's token t), head q, column j < h */
__global__ void k_rope_turn(const float *cs, const void *x, void *y, int dt, int64_t rows, int64_t T, int64_t C,
                            int64_t d, float sign)
{
    const int64_t h = d / 2, per_row = C / 2;
    BK_FOR(i, rows * per_row)
    {
        int64_t r = i / per_row, p = i % per_row, q = p / h, j = p % h, k = r * C + q * d + j;
        const float *c = cs + ((r % T) * h + j) * 2;
        float a = bk_ldx(x, dt, k), b = bk_ldx(x, dt, k + h), co = c[0], si = sign * c[1];
        bk_stx(y, dt, k, a * co - b * si);
        bk_stx(y, dt, k + h, b * co + a * si);
    }
}

extern "C" cudaError_t bk_rope(cudaStream_t s, int dt, const void *x, void *y, float *cs, int64_t n, int64_t T,
                               int64_t C, int64_t d, float theta, int back)
{
    cudaError_t e;
    k_rope_table<<<bk_grid(T * (d / 2), BK_THREADS), BK_THREADS, 0, s>>>(cs, T, d, theta);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
    k_rope_turn<<<bk_grid(n * T * (C / 2), BK_THREADS), BK_THREADS, 0, s>>>(cs, x, y, dt, n * T, T, C, d,
                                                                             back ? -1.0f : 1.0f);
    return cudaGetLastError();
}
