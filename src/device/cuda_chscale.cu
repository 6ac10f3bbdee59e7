/* cuda_chscale.cu - the CUDA backend's channel gates (CHSCALE_FWD/BWD,
 * squeeze-and-excitation): each channel row of [n c, hw] times its scale,
 * and back (see cuda_kern.h). What each thread does is cuda_core.h's,
 * checked on the host (tests/test_kernel_core.c). */
#include "device/cuda_common.cuh"

__global__ void k_chs_fwd(const void *x, const void *sc, void *y, int dt, int64_t hw, int64_t total)
{
    BK_FOR(el, total) bk_chs_fwd_one(x, sc, y, dt, hw, el);
}

extern "C" cudaError_t bk_chs_fwd(cudaStream_t s, int dt, const void *x, const void *sc, void *y, int64_t rows,
                                  int64_t hw)
{
    k_chs_fwd<<<bk_grid(rows * hw, BK_THREADS), BK_THREADS, 0, s>>>(x, sc, y, dt, hw, rows * hw);
    return cudaGetLastError();
}

/* A warp per channel row: lane l takes the row's elements l, l + 32, ...
 * (coalesced), then the lanes' double sums are added by a shuffle tree
 * (lane 0 ends with ((v0 + v16) + (v8 + v24)) + ..., the tree the host test
 * repeats). The row loop's bounds are the same across a warp (a block and
 * the grid stride hold whole warps), so every lane takes part in the
 * shuffles. */
__global__ void k_chs_bwd(const void *x, const void *sc, const void *dy, void *dx, void *ds, int dt, int64_t rows,
                          int64_t hw)
{
    const int lane = threadIdx.x & 31;
    const int64_t w0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;

    for (int64_t r = w0; r < rows; r += nw) {
        double v = bk_warp_sum_down(bk_chs_bwd_part(ds ? x : NULL, sc, dy, dx, dt, r, hw, lane, 32));
        if (ds && lane == 0)
            bk_stx(ds, dt, r, (float)v);
    }
}

/* One position per row (the `mul` layer: two tensors' elementwise
 * product): a thread per element, the same part function. */
__global__ void k_chs_bwd1(const void *x, const void *sc, const void *dy, void *dx, void *ds, int dt, int64_t rows)
{
    BK_FOR(r, rows)
    {
        double v = bk_chs_bwd_part(ds ? x : NULL, sc, dy, dx, dt, r, 1, 0, 1);
        if (ds)
            bk_stx(ds, dt, r, (float)v);
    }
}

extern "C" cudaError_t bk_chs_bwd(cudaStream_t s, int dt, const void *x, const void *sc, const void *dy, void *dx,
                                  void *ds, int64_t rows, int64_t hw)
{
    if (hw == 1)
        k_chs_bwd1<<<bk_grid(rows, BK_THREADS), BK_THREADS, 0, s>>>(x, sc, dy, dx, ds, dt, rows);
    else
        k_chs_bwd<<<bk_grid(rows * 32, BK_THREADS), BK_THREADS, 0, s>>>(x, sc, dy, dx, ds, dt, rows, hw);
    return cudaGetLastError();
}
