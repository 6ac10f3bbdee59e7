/* cuda_attn.cu - embeddings and multi-head self-attention on the GPU: the
 * launches of cuda_core.h's per-thread work (see there for the formulas and
 * how the same code is checked on the host).
 *
 * Correctness first: attention runs one thread per query row (forward,
 * backward's dq) or key row (dk, dv), each looping over the other rows with
 * no shared memory and no tensor cores; it needs no T x T memory besides the
 * stored probabilities, and its sums need no atomics. Neighbouring threads
 * of a warp are neighbouring rows of one head, so they read the same key
 * and value rows at the same time (cached). A flash-attention kernel is the
 * obvious next step once this one has been checked on a GPU. */
#include "device/cuda_common.cuh"

#define EMB_CHUNKS 64 /* id ranges of the token table's gradient, one thread each per column */
#define ATTN_THREADS 128

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

/* thread (t, c) of the positions; with type, threads c of the type row after them */
__global__ void k_embed_bwd_pos(bk_embed e, const void *dy, float *dpos, float *dtype)
{
    const int64_t np = dpos ? e.T * e.C : 0;
    BK_FOR(t, np + (dtype ? e.C : 0))
    {
        if (t < np)
            bk_embed_bwd_pos(&e, dy, dpos, t / e.C, t % e.C);
        else
            bk_embed_bwd_pos(&e, dy, dtype, -1, t - np);
    }
}

extern "C" cudaError_t bk_embed_bwd(cudaStream_t s, const bk_embed *e, const int32_t *ids, const void *dy,
                                    float *dtok, float *dpos, float *dtype)
{
    int64_t per = (e->V + EMB_CHUNKS - 1) / EMB_CHUNKS, np = (dpos ? e->T * e->C : 0) + (dtype ? e->C : 0);
    cudaError_t err;
    k_embed_bwd_tok<<<bk_grid(e->C * EMB_CHUNKS, BK_THREADS), BK_THREADS, 0, s>>>(*e, ids, dy, dtok, per);
    if ((err = cudaGetLastError()) != cudaSuccess || !np)
        return err;
    k_embed_bwd_pos<<<bk_grid(np, BK_THREADS), BK_THREADS, 0, s>>>(*e, dy, dpos, dtype);
    return cudaGetLastError();
}

/* thread r: query row r % T of lane r / T */
__global__ void k_attn_fwd(bk_attn a, const void *qkv, const int32_t *lens, void *y, void *saved)
{
    BK_FOR(r, a.n * a.H * a.T) bk_attn_fwd_row(&a, qkv, lens, y, saved, r / a.T, r % a.T);
}

__global__ void k_attn_bwd_rows(bk_attn a, const void *qkv, const int32_t *lens, const void *dy, const void *saved,
                                void *dqkv, float *dot)
{
    BK_FOR(r, a.n * a.H * a.T) bk_attn_bwd_row(&a, qkv, lens, dy, saved, dqkv, dot, r / a.T, r % a.T);
}

__global__ void k_attn_bwd_keys(bk_attn a, const void *qkv, const int32_t *lens, const void *dy, const void *saved,
                                void *dqkv, const float *dot)
{
    BK_FOR(r, a.n * a.H * a.T) bk_attn_bwd_key(&a, qkv, lens, dy, saved, dqkv, dot, r / a.T, r % a.T);
}

extern "C" cudaError_t bk_attn_fwd(cudaStream_t s, const bk_attn *a, const void *qkv, const int32_t *lens, void *y,
                                   void *saved)
{
    k_attn_fwd<<<bk_grid(a->n * a->H * a->T, ATTN_THREADS), ATTN_THREADS, 0, s>>>(*a, qkv, lens, y, saved);
    return cudaGetLastError();
}

extern "C" size_t bk_attn_bwd_ws(const bk_attn *a) { return (size_t)(a->n * a->H * a->T) * sizeof(float); }

extern "C" cudaError_t bk_attn_bwd(cudaStream_t s, const bk_attn *a, const void *qkv, const int32_t *lens,
                                   const void *dy, const void *saved, void *dqkv, void *ws)
{
    unsigned grid = bk_grid(a->n * a->H * a->T, ATTN_THREADS);
    cudaError_t err;
    /* every row's dot before any key reads it: the two kernels are ordered on s */
    k_attn_bwd_rows<<<grid, ATTN_THREADS, 0, s>>>(*a, qkv, lens, dy, saved, dqkv, (float *)ws);
    if ((err = cudaGetLastError()) != cudaSuccess)
        return err;
    k_attn_bwd_keys<<<grid, ATTN_THREADS, 0, s>>>(*a, qkv, lens, dy, saved, dqkv, (const float *)ws);
    return cudaGetLastError();
}
