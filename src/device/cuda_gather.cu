/* cuda_gather.cu - the CUDA backend's rows gather (GATHER_FWD/BWD): a thread
 * per output element forward; backward zeroes diff_src, then a thread per
 * diff_dst element puts it in its row (the rows of a sample are distinct).
 * Elements move as their bits, as the CPU's memcpy: only their size matters.
 * An index >= T, which the CPU refuses, is skipped (a kernel cannot fail). */
#include "device/cuda_common.cuh"

template <class U> __global__ void k_gather(const U *x, U *y, const int32_t *rows, int64_t n, int64_t T, int64_t K,
                                            int64_t C)
{
    BK_FOR(e, n * K * C)
    {
        int64_t c = e % C, ik = e / C, i = ik / K, r = rows[ik];
        y[e] = r >= 0 && r < T ? x[(i * T + r) * C + c] : (U)0;
    }
}

template <class U> __global__ void k_scatter(const U *dy, U *dx, const int32_t *rows, int64_t n, int64_t T,
                                             int64_t K, int64_t C)
{
    BK_FOR(e, n * K * C)
    {
        int64_t c = e % C, ik = e / C, i = ik / K, r = rows[ik];
        if (r >= 0 && r < T)
            dx[(i * T + r) * C + c] = dy[e];
    }
}

template <class U> static cudaError_t launch(cudaStream_t s, const void *in, void *out, const int32_t *rows,
                                             int64_t n, int64_t T, int64_t K, int64_t C, int back)
{
    const unsigned g = bk_grid(n * K * C, BK_THREADS);
    if (!back) {
        k_gather<U><<<g, BK_THREADS, 0, s>>>((const U *)in, (U *)out, rows, n, T, K, C);
        return cudaGetLastError();
    }
    cudaError_t e = cudaMemsetAsync(out, 0, (size_t)(n * T * C) * sizeof(U), s); /* all bits 0: +0 */
    if (e != cudaSuccess)
        return e;
    k_scatter<U><<<g, BK_THREADS, 0, s>>>((const U *)in, (U *)out, rows, n, T, K, C);
    return cudaGetLastError();
}

extern "C" cudaError_t bk_gather(cudaStream_t s, int dt, const void *in, void *out, const int32_t *rows, int64_t n,
                                 int64_t T, int64_t K, int64_t C, int back)
{
    if (dt == BK_F32)
        return launch<uint32_t>(s, in, out, rows, n, T, K, C, back);
    return launch<uint16_t>(s, in, out, rows, n, T, K, C, back);
}
