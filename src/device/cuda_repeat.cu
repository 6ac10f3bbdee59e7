/* cuda_repeat.cu - the CUDA backend's repeated heads (REPEAT_FWD/BWD,
 * grouped-query attention): a thread per output element forward, per input
 * element backward, its r copies summed in f32 in order as on the CPU. */
#include "device/cuda_common.cuh"

__global__ void k_repeat(const void *x, void *y, int dt, int64_t rows, int64_t g, int64_t r, int64_t d)
{
    BK_FOR(e, rows * g * r * d)
    {
        int64_t j = e % d, h = e / d % (g * r), i = e / d / (g * r);
        bk_stx(y, dt, e, bk_ldx(x, dt, (i * g + h / r) * d + j));
    }
}

__global__ void k_repeat_back(const void *dy, void *dx, int dt, int64_t rows, int64_t g, int64_t r, int64_t d)
{
    BK_FOR(e, rows * g * d)
    {
        int64_t j = e % d, h = e / d % g, i = e / d / g;
        float s = 0.0f;
        for (int64_t c = 0; c < r; c++)
            s += bk_ldx(dy, dt, (i * g * r + h * r + c) * d + j);
        bk_stx(dx, dt, e, s);
    }
}

extern "C" cudaError_t bk_repeat(cudaStream_t s, int dt, const void *in, void *out, int64_t rows, int64_t g,
                                 int64_t r, int64_t d, int back)
{
    if (back)
        k_repeat_back<<<bk_grid(rows * g * d, BK_THREADS), BK_THREADS, 0, s>>>(in, out, dt, rows, g, r, d);
    else
        k_repeat<<<bk_grid(rows * g * r * d, BK_THREADS), BK_THREADS, 0, s>>>(in, out, dt, rows, g, r, d);
    return cudaGetLastError();
}
