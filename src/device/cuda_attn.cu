/* cuda_attn.cu - embeddings, and the kernels of multi-head self-attention
 * between its cuBLAS products (cuda_attn.c): the head-major copies in and
 * out, and the row work of cuda_core.h (see there for the formulas and how
 * the same code is checked on the host).
 *
 * A row of T scores is one warp's: its 32 lanes are cuda_core.h's 32 parts
 * (neighbouring columns, so reads and writes are coalesced), and the
 * row's max and sums are shuffles in a fixed tree (the same result every
 * run). */
#include "device/cuda_common.cuh"

#define EMB_CHUNKS 64 /* id ranges of the token table's gradient, one thread each per column */

__global__ void k_embed_fwd(bk_embed e, const int32_t *ids, const float *tok, const float *pos, const float *type,
                            void *y)
{
    BK_FOR(el, e.n * e.T * e.C) bk_embed_fwd_one(&e, ids, tok, pos, type, y, el);
}

extern "C" cudaError_t bk_embed_fwd(cudaStream_t s, const bk_embed *e, const int32_t *ids, const float *tok,
                                    const float *pos, const float *type, void *y)
{
    k_embed_fwd<<<bk_grid(e->n * e->T * e->C, BK_THREADS), BK_THREADS, 0, s>>>(*e, ids, tok, pos, type, y);
    return cudaGetLastError();
}

/* thread (c, k): column c of the ids in chunk k of EMB_CHUNKS */
__global__ void k_embed_bwd_tok(bk_embed e, const int32_t *ids, const void *dy, float *dtok, int64_t per)
{
    BK_FOR(t, e.C * EMB_CHUNKS)
    {
        int64_t c = t % e.C, k = t / e.C;
        bk_embed_bwd_tok(&e, ids, dy, dtok, c, k * per, (k + 1) * per);
    }
}

/* thread (t, c) of the positions; with type, threads (k, c) of the type rows after them */
__global__ void k_embed_bwd_pos(bk_embed e, const int32_t *ids, const void *dy, float *dpos, float *dtype)
{
    const int64_t np = dpos ? e.T * e.C : 0;
    BK_FOR(t, np + (dtype ? e.types * e.C : 0))
    {
        if (t < np)
            bk_embed_bwd_pos(&e, NULL, dy, dpos, t / e.C, t % e.C);
        else
            bk_embed_bwd_pos(&e, ids, dy, dtype, (t - np) / e.C, (t - np) % e.C);
    }
}

extern "C" cudaError_t bk_embed_bwd(cudaStream_t s, const bk_embed *e, const int32_t *ids, const void *dy,
                                    float *dtok, float *dpos, float *dtype)
{
    int64_t per = (e->V + EMB_CHUNKS - 1) / EMB_CHUNKS, np = (dpos ? e->T * e->C : 0) + (dtype ? e->types * e->C : 0);
    cudaError_t err;
    k_embed_bwd_tok<<<bk_grid(e->C * EMB_CHUNKS, BK_THREADS), BK_THREADS, 0, s>>>(*e, ids, dy, dtok, per);
    if ((err = cudaGetLastError()) != cudaSuccess || !np)
        return err;
    k_embed_bwd_pos<<<bk_grid(np, BK_THREADS), BK_THREADS, 0, s>>>(*e, ids, dy, dpos, dtype);
    return cudaGetLastError();
}

/* ---- attention ------------------------------------------------------------------------ */

#define ATTN_THREADS 256 /* 8 rows a block */

__global__ void k_attn_gather(bk_attn a, const void *src, float *dst, int64_t n, int qkv)
{
    BK_FOR(el, n) dst[el] = bk_ldx(src, a.dt, qkv ? bk_attn_qkv_at(&a, el) : bk_attn_y_at(&a, el));
}

__global__ void k_attn_scatter(bk_attn a, const float *src, void *dst, int64_t n, int qkv)
{
    BK_FOR(el, n) bk_stx(dst, a.dt, qkv ? bk_attn_qkv_at(&a, el) : bk_attn_y_at(&a, el), src[el]);
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* warp w's rows: r = w, w + warps, ... of `rows`; every lane of a warp has
 * the same r, so the shuffles see the whole warp */
#define ATTN_ROWS(r, rows)                                                                          \
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < (rows);            \
         r += ((int64_t)gridDim.x * blockDim.x) >> 5)

/* rows r of the group's scores [lanes, T, T]: lane g0 + r / T, query r % T */
__global__ void k_attn_softmax(bk_attn a, const int32_t *lens, float *sc, int64_t g0, int64_t rows, void *kept,
                               float *lse)
{
    const int l = threadIdx.x & 31;
    ATTN_ROWS(r, rows)
    {
        int64_t lane = g0 + r / a.T, i = r % a.T, nk = bk_attn_row_keys(&a, lens, lane, i);
        float *s = sc + r * a.T;
        float mx = warp_max(bk_attn_part_max(s, nk, l, 32));
        double sum = warp_sum(bk_attn_part_sum(s, nk, mx, l, 32));
        bk_attn_part_probs(&a, s, nk, mx, sum, kept, lane, i, l, 32);
        if (lse && l == 0)
            lse[lane * a.T + i] = bk_attn_lse(mx, sum);
    }
}

__global__ void k_attn_p(bk_attn a, const int32_t *lens, const void *saved, float *p, int64_t g0, int64_t rows)
{
    const int l = threadIdx.x & 31;
    ATTN_ROWS(r, rows)
    {
        int64_t lane = g0 + r / a.T, i = r % a.T;
        bk_attn_part_p(&a, saved, p + r * a.T, bk_attn_row_keys(&a, lens, lane, i), lane, i, l, 32);
    }
}

__global__ void k_attn_ds(bk_attn a, const int32_t *lens, const float *p, float *dp, int64_t g0, int64_t rows)
{
    const int l = threadIdx.x & 31;
    ATTN_ROWS(r, rows)
    {
        int64_t lane = g0 + r / a.T, i = r % a.T, nk = bk_attn_row_keys(&a, lens, lane, i);
        float d = (float)warp_sum(bk_attn_part_dot(p + r * a.T, dp + r * a.T, nk, l, 32));
        bk_attn_part_ds(p + r * a.T, dp + r * a.T, a.T, d, l, 32);
    }
}

__global__ void k_attn_drop(bk_attn a, const int32_t *lens, float *m, int64_t g0, int64_t n)
{
    BK_FOR(el, n) bk_attn_drop_el(&a, lens, m, g0, el);
}

static unsigned rows_grid(int64_t rows) { return bk_grid(rows * 32, ATTN_THREADS); }

extern "C" cudaError_t bk_attn_gather(cudaStream_t s, const bk_attn *a, const void *src, float *dst, int qkv)
{
    int64_t n = a->n * a->T * a->H * a->hs * (qkv ? 3 : 1);
    k_attn_gather<<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>(*a, src, dst, n, qkv);
    return cudaGetLastError();
}

extern "C" cudaError_t bk_attn_scatter(cudaStream_t s, const bk_attn *a, const float *src, void *dst, int qkv)
{
    int64_t n = a->n * a->T * a->H * a->hs * (qkv ? 3 : 1);
    k_attn_scatter<<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>(*a, src, dst, n, qkv);
    return cudaGetLastError();
}

extern "C" cudaError_t bk_attn_softmax(cudaStream_t s, const bk_attn *a, const int32_t *lens, float *sc, int64_t g0,
                                       int64_t lanes, void *kept, float *lse)
{
    k_attn_softmax<<<rows_grid(lanes * a->T), ATTN_THREADS, 0, s>>>(*a, lens, sc, g0, lanes * a->T, kept, lse);
    return cudaGetLastError();
}

extern "C" cudaError_t bk_attn_p_again(cudaStream_t s, const bk_attn *a, const int32_t *lens, const void *saved, float *p,
                                       int64_t g0, int64_t lanes)
{
    k_attn_p<<<rows_grid(lanes * a->T), ATTN_THREADS, 0, s>>>(*a, lens, saved, p, g0, lanes * a->T);
    return cudaGetLastError();
}

extern "C" cudaError_t bk_attn_drop(cudaStream_t s, const bk_attn *a, const int32_t *lens, float *m, int64_t g0,
                                    int64_t lanes)
{
    int64_t n = lanes * a->T * a->T;
    k_attn_drop<<<bk_grid(n, BK_THREADS), BK_THREADS, 0, s>>>(*a, lens, m, g0, n);
    return cudaGetLastError();
}

extern "C" cudaError_t bk_attn_ds(cudaStream_t s, const bk_attn *a, const int32_t *lens, const float *p, float *dp,
                                  int64_t g0, int64_t lanes)
{
    k_attn_ds<<<rows_grid(lanes * a->T), ATTN_THREADS, 0, s>>>(*a, lens, p, dp, g0, lanes * a->T);
    return cudaGetLastError();
}
