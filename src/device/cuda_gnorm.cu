/* cuda_gnorm.cu - the CUDA backend's group normalisation (GNORM_FWD/BWD)
 * over rows (sample, group) of [n, c, hw], and back (see cuda_kern.h).
 * What each thread does is cuda_core.h's, checked on the host
 * (tests/test_kernel_core.c).
 *
 * A warp takes a forward row (its statistics, then its outputs: x read
 * three times, as the CPU reads it) or a backward (sample, channel) row,
 * as k_prelu_bwd does. Fewer rows than the GPU has warps (a small batch in
 * few groups) leave it part idle; a block per row would fill it, at the
 * cost of a block's tree the host test would repeat. Not measured: this
 * has not run on a GPU yet. */
#include "device/cuda_common.cuh"

/* Lane l takes the row's elements l, l + 32, ... (coalesced); the lanes'
 * double sums are added by bk_warp_sum_down's tree and lane 0's total
 * broadcast. The row loop's bounds are the same across a warp (a block
 * and the grid stride hold whole warps), so every lane takes part in the
 * shuffles. */
__device__ __forceinline__ double gn_warp_total(double v)
{
    return __shfl_sync(0xffffffffu, bk_warp_sum_down(v), 0);
}

__global__ void k_gn_fwd(bk_gnorm q, const void *x, const float *sc, const float *sh, void *y, float *mean,
                         float *var)
{
    const int lane = threadIdx.x & 31;
    const int64_t w0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5, rows = q.n * q.g;

    for (int64_t r = w0; r < rows; r += nw) {
        double mu = gn_warp_total(bk_gn_part_sum(&q, x, r, lane, 32)) / (double)q.k;
        double v = gn_warp_total(bk_gn_part_sq(&q, x, r, mu, lane, 32)) / (double)q.k;
        if (lane == 0)
            mean[r] = (float)mu, var[r] = (float)v;
        bk_gn_fwd_part(&q, x, sc, sh, y, r, (float)mu, bk_gn_rstd(v, q.eps), lane, 32);
    }
}

extern "C" cudaError_t bk_gnorm_fwd(cudaStream_t s, const bk_gnorm *q, const void *x, const float *sc,
                                    const float *sh, void *y, float *mean, float *var)
{
    k_gn_fwd<<<bk_grid(q->n * q->g * 32, BK_THREADS), BK_THREADS, 0, s>>>(*q, x, sc, sh, y, mean, var);
    return cudaGetLastError();
}

/* hw >= BK_GN_WARP: a warp per (sample, channel) row, its lanes' parts
 * added in the tree into part[2 t], part[2 t + 1] */
__global__ void k_gn_parts_warp(bk_gnorm q, const void *x, const void *dy, const float *mean, const float *var,
                                double *part)
{
    const int lane = threadIdx.x & 31;
    const int64_t w0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5, rows = q.n * q.c;

    for (int64_t t = w0; t < rows; t += nw) {
        double d[2];
        bk_gn_bwd_part(&q, x, dy, mean, var, t, lane, 32, d);
        d[0] = bk_warp_sum_down(d[0]);
        d[1] = bk_warp_sum_down(d[1]);
        if (lane == 0)
            part[2 * t] = d[0], part[2 * t + 1] = d[1];
    }
}

/* shorter rows: a thread each, in element order (the CPU's sums) */
__global__ void k_gn_parts(bk_gnorm q, const void *x, const void *dy, const float *mean, const float *var,
                           double *part, int64_t rows)
{
    BK_FOR(t, rows) bk_gn_bwd_part(&q, x, dy, mean, var, t, 0, 1, part + 2 * t);
}

/* a thread per row (sample, group): its channels' parts in order */
__global__ void k_gn_rows(bk_gnorm q, const float *sc, const float *var, double *ws, int64_t rows)
{
    BK_FOR(r, rows) bk_gn_row_sums(&q, ws, sc, var, ws, r);
}

__global__ void k_gn_dx(bk_gnorm q, const void *x, const void *dy, const float *mean, const float *sc,
                        const double *ws, void *dx, int64_t total)
{
    BK_FOR(el, total) bk_gn_dx_one(&q, x, dy, mean, sc, ws, dx, el);
}

/* a thread per channel: its samples' parts in the CPU's order (n sums of
 * c threads: a small serial tail) */
__global__ void k_gn_params(bk_gnorm q, const double *part, float *dsc, float *dsh, int acc)
{
    BK_FOR(ch, q.c) bk_gn_param_grad(&q, part, dsc, dsh, acc, ch);
}

/* Each kernel reads what the ones before wrote, in stream order; dx
 * (which may be dy) is written after every read of dy, and the parameters'
 * kernel after it reads only the parts. */
extern "C" cudaError_t bk_gnorm_bwd(cudaStream_t s, const bk_gnorm *q, const void *x, const float *mean,
                                    const float *var, const void *dy, const float *sc, void *dx, float *dsc,
                                    float *dsh, int acc, double *ws)
{
    int64_t nc = q->n * q->c, rows = q->n * q->g, total = nc * q->hw;
    cudaError_t e;

    if (q->hw >= BK_GN_WARP)
        k_gn_parts_warp<<<bk_grid(nc * 32, BK_THREADS), BK_THREADS, 0, s>>>(*q, x, dy, mean, var, ws);
    else
        k_gn_parts<<<bk_grid(nc, BK_THREADS), BK_THREADS, 0, s>>>(*q, x, dy, mean, var, ws, nc);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
    if (dx) {
        k_gn_rows<<<bk_grid(rows, 64), 64, 0, s>>>(*q, sc, var, ws, rows);
        if ((e = cudaGetLastError()) != cudaSuccess)
            return e;
        k_gn_dx<<<bk_grid(total, BK_THREADS), BK_THREADS, 0, s>>>(*q, x, dy, mean, sc, ws, dx, total);
        if ((e = cudaGetLastError()) != cudaSuccess)
            return e;
    }
    k_gn_params<<<bk_grid(q->c, 64), 64, 0, s>>>(*q, ws, dsc, dsh, acc);
    return cudaGetLastError();
}
