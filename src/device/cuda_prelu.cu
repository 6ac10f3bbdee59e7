/* cuda_prelu.cu - the CUDA backend's PReLU (PRELU_FWD/BWD): y = x where
 * x > 0, else a x (linear: a x everywhere), over rows (sample, channel) of
 * [n c, hw], and back (see cuda_kern.h); with hw == 1 the slopes' gradient
 * is summed by column parts instead of rows of one element. What each
 * thread does is cuda_core.h's, checked on the host
 * (tests/test_kernel_core.c). */
#include "device/cuda_common.cuh"

__global__ void k_prelu_fwd(bk_prelu p, const void *x, const float *a, void *y, int64_t total)
{
    BK_FOR(el, total) bk_prelu_fwd_one(&p, x, a, y, el);
}

extern "C" cudaError_t bk_prelu_fwd(cudaStream_t s, const bk_prelu *p, const void *x, const float *a, void *y)
{
    int64_t total = p->n * p->c * p->hw;
    k_prelu_fwd<<<bk_grid(total, BK_THREADS), BK_THREADS, 0, s>>>(*p, x, a, y, total);
    return cudaGetLastError();
}

/* A warp per row: lane l takes the row's elements l, l + 32, ...
 * (coalesced), then the lanes' double sums are added by a shuffle tree
 * (lane 0 ends with ((v0 + v16) + (v8 + v24)) + ..., the tree the host test
 * repeats) into rs[r] (hw > 1). The row loop's bounds are the
 * same across a warp (a block and the grid stride hold whole warps), so
 * every lane takes part in the shuffles. */
__global__ void k_prelu_bwd(bk_prelu p, const void *x, const float *a, const void *dy, void *dx, double *rs)
{
    const int lane = threadIdx.x & 31;
    const int64_t w0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5, rows = p.n * p.c;

    for (int64_t r = w0; r < rows; r += nw) {
        double v = bk_warp_sum_down(bk_prelu_bwd_part(&p, x, a, dy, dx, r, lane, 32));
        if (rs && lane == 0)
            rs[r] = v;
    }
}

/* hw == 1: a thread per part (q, j), t = q c + j, its chunk's samples in
 * order into rs[t]; consecutive threads take consecutive channels, so
 * every sample's loads are coalesced. */
__global__ void k_prelu_bwd_cols(bk_prelu p, const void *x, const float *a, const void *dy, void *dx, double *rs,
                                 int64_t parts)
{
    BK_FOR(t, parts) rs[t] = bk_prelu_col_part(&p, x, a, dy, dx, t);
}

/* No slopes' gradient: dx alone, a thread per element */
__global__ void k_prelu_dx(bk_prelu p, const void *x, const float *a, const void *dy, void *dx, int64_t total)
{
    BK_FOR(el, total) bk_prelu_dx_one(&p, x, a, dy, dx, el);
}

/* A thread per slope: its rows' (parts') sums in the CPU's order (few
 * slopes, and n c sums at most: a small serial tail after the sums'
 * kernel). */
__global__ void k_prelu_slopes(bk_prelu p, const double *rs, float *dw, int acc, int64_t ns)
{
    BK_FOR(j, ns) bk_prelu_slope_grad(&p, rs, dw, acc, j);
}

extern "C" cudaError_t bk_prelu_bwd(cudaStream_t s, const bk_prelu *p, const void *x, const float *a, const void *dy,
                                    void *dx, float *dw, int acc, double *rs)
{
    int64_t rows = p->n * p->c, ns = p->shared ? 1 : p->c, parts = bk_prelu_chunks(p) * p->c;
    cudaError_t e;

    if (!dw)
        k_prelu_dx<<<bk_grid(rows * p->hw, BK_THREADS), BK_THREADS, 0, s>>>(*p, x, a, dy, dx, rows * p->hw);
    else if (p->hw == 1)
        k_prelu_bwd_cols<<<bk_grid(parts, BK_THREADS), BK_THREADS, 0, s>>>(*p, x, a, dy, dx, rs, parts);
    else
        k_prelu_bwd<<<bk_grid(rows * 32, BK_THREADS), BK_THREADS, 0, s>>>(*p, x, a, dy, dx, rs);
    if ((e = cudaGetLastError()) != cudaSuccess || !dw)
        return e;
    k_prelu_slopes<<<bk_grid(ns, 64), 64, 0, s>>>(*p, rs, dw, acc, ns);
    return cudaGetLastError();
}
