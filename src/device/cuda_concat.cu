/* cuda_concat.cu - the CUDA backend's copies between rows and columns:
 * a concatenation's inputs into their columns of the output and back (set,
 * added, or summed over the rows for a broadcast input), slices,
 * transposition and a row added to every row (see cuda_kern.h). One
 * thread per element; what each does is cuda_core.h's, checked on the host.
 * Plain copies move the elements' bits (as the CPU's memcpy), whatever the
 * dtype: only their size matters. */
#include "device/cuda_common.cuh"

/* Run the statement(s) with U an unsigned integer of dtype dt's size. */
#define BK_BITS(dt, U, ...)                                                                        \
    do {                                                                                           \
        if ((dt) == BK_F32) {                                                                      \
            typedef uint32_t U;                                                                    \
            __VA_ARGS__;                                                                           \
        } else {                                                                                   \
            typedef uint16_t U;                                                                    \
            __VA_ARGS__;                                                                           \
        }                                                                                          \
    } while (0)

template <class U> __global__ void k_copy2d(bk_copy2d c, const U *src, U *dst)
{
    BK_FOR(el, c.rows * c.cols)
    {
        int64_t si, di;
        bk_copy2d_at(&c, el, &si, &di);
        dst[di] = src[si];
    }
}

__global__ void k_copy2d_add(bk_copy2d c, const void *src, void *dst, int dt)
{
    BK_FOR(el, c.rows * c.cols) bk_copy2d_add(&c, src, dst, dt, el);
}

extern "C" cudaError_t bk_copy2d_run(cudaStream_t s, int dt, const bk_copy2d *c, const void *src, void *dst, int add)
{
    const int64_t n = c->rows * c->cols;
    if (add)
        k_copy2d_add<<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>(*c, src, dst, dt);
    else
        BK_BITS(dt, U, k_copy2d<U><<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>(*c, (const U *)src, (U *)dst));
    return cudaGetLastError();
}

/* one thread per column, its rows in order */
__global__ void k_col_sum(const void *dy, int dt, float *g, int64_t rows, int64_t ld, int64_t off, int64_t cols)
{
    BK_FOR(j, cols) bk_col_sum(dy, dt, g, rows, ld, off, j);
}

extern "C" cudaError_t bk_col_sum_rows(cudaStream_t s, int dt, const void *dy, float *g, int64_t rows, int64_t ld,
                                       int64_t off, int64_t cols)
{
    k_col_sum<<<bk_grid(cols, 128), 128, 0, s>>>(dy, dt, g, rows, ld, off, cols);
    return cudaGetLastError();
}

/* every element of dx written: the slice's or a zero (no memset first) */
template <class U> __global__ void k_slice_bwd(const U *dy, U *dx, int64_t rows, int64_t ld, int64_t off, int64_t len)
{
    BK_FOR(el, rows * ld)
    {
        int64_t i = bk_slice_bwd_at(ld, off, len, el);
        dx[el] = i >= 0 ? dy[i] : (U)0;
    }
}

extern "C" cudaError_t bk_slice_bwd(cudaStream_t s, int dt, const void *dy, void *dx, int64_t rows, int64_t ld,
                                    int64_t off, int64_t len)
{
    BK_BITS(dt, U,
            k_slice_bwd<U><<<bk_grid(rows * ld, BK_THREADS), BK_THREADS, 0, s>>>((const U *)dy, (U *)dx, rows, ld,
                                                                                 off, len));
    return cudaGetLastError();
}

/* Writes in order, reads strided: the transposes made (a ViT's patches to
 * tokens, a few MB) are a small part of a step. */
template <class U> __global__ void k_transpose(const U *x, U *y, int64_t n, int64_t a, int64_t b, int64_t q)
{
    BK_FOR(el, n * a * b * q) y[el] = x[bk_tr_at(a, b, q, el)];
}

extern "C" cudaError_t bk_transpose(cudaStream_t s, int dt, const void *x, void *y, int64_t n, int64_t a, int64_t b,
                                    int64_t q)
{
    BK_BITS(dt, U,
            k_transpose<U><<<bk_grid(n * a * b * q, BK_THREADS), BK_THREADS, 0, s>>>((const U *)x, (U *)y, n, a, b,
                                                                                     q));
    return cudaGetLastError();
}

__global__ void k_add_rows(const void *x, const float *bias, void *y, int dt, int64_t M, int64_t N)
{
    BK_FOR(el, M * N) bk_add_rows_one(x, bias, y, dt, N, el);
}

extern "C" cudaError_t bk_add_rows(cudaStream_t s, int dt, const void *x, const float *bias, void *y, int64_t M,
                                   int64_t N)
{
    k_add_rows<<<bk_grid(M * N, BK_THREADS), BK_THREADS, 0, s>>>(x, bias, y, dt, M, N);
    return cudaGetLastError();
}
