/* cuda_seqmean.cu - the CUDA backend's mean of each sequence's real tokens
 * (SEQMEAN_FWD/BWD): a thread per output feature forward, its tokens summed
 * in f32 in order as on the CPU; a thread per input element backward. */
#include "device/cuda_common.cuh"

__device__ static int64_t bk_seq_len(const int32_t *lens, int64_t i, int64_t T)
{
    int64_t n = lens ? lens[i] : T;
    return n < 1 ? 1 : n > T ? T : n;
}

__global__ void k_seqmean(const void *x, void *y, int dt, const int32_t *lens, int64_t n, int64_t T, int64_t C,
                          int last)
{
    BK_FOR(e, n * C)
    {
        int64_t c = e % C, i = e / C, len = bk_seq_len(lens, i, T), k0 = last ? len - 1 : 0;
        float s = 0.0f;
        for (int64_t k = k0; k < len; k++)
            s += bk_ldx(x, dt, (i * T + k) * C + c);
        bk_stx(y, dt, e, s / (float)(len - k0));
    }
}

__global__ void k_seqmean_back(const void *dy, void *dx, int dt, const int32_t *lens, int64_t n, int64_t T,
                               int64_t C, int last)
{
    BK_FOR(e, n * T * C)
    {
        int64_t c = e % C, k = e / C % T, i = e / C / T, len = bk_seq_len(lens, i, T), k0 = last ? len - 1 : 0;
        bk_stx(dx, dt, e, k >= k0 && k < len ? bk_ldx(dy, dt, i * C + c) / (float)(len - k0) : 0.0f);
    }
}

extern "C" cudaError_t bk_seqmean(cudaStream_t s, int dt, const void *in, void *out, const int32_t *lens, int64_t n,
                                  int64_t T, int64_t C, int last, int back)
{
    if (back)
        k_seqmean_back<<<bk_grid(n * T * C, BK_THREADS), BK_THREADS, 0, s>>>(in, out, dt, lens, n, T, C, last);
    else
        k_seqmean<<<bk_grid(n * C, BK_THREADS), BK_THREADS, 0, s>>>(in, out, dt, lens, n, T, C, last);
    return cudaGetLastError();
}
