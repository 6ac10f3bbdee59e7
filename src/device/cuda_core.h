/* cuda_core.h - the per-thread work of the CUDA backend's embedding and
 * attention kernels (cuda_attn.cu), written once for the GPU and the host.
 *
 * Each kernel thread calls one of these functions for its element, row or
 * column, and does nothing else; so the same code, compiled as C on the
 * host, can be run over every thread's index by a loop and checked against
 * the CPU device (tests/test_cuda_core.c), on a machine without a GPU. What
 * only the GPU can check is the launch (grid sizes, the thread-to-index
 * mapping in cuda_attn.cu), which is a line per kernel.
 *
 * Attention follows cpu_attn.c's formulas: scores s = q.k / sqrt(hs), row
 * softmax P = exp(s - max) / sum (sum in double), y = P V; backward dP =
 * dy.v, D = sum P dP (double), dS = P (dP - D), dq = dS k / sqrt(hs),
 * dk = dS^T q / sqrt(hs), dv = P^T dy. A thread keeps no row of scores: it
 * computes them again in each pass over the keys (two or three passes, one
 * more per 64 features of a head past the first 64), so nothing of T x T is
 * needed besides the stored P itself. Its sums are in
 * another order than oneDNN's sgemm: results agree to f32 rounding. */
#ifndef BFIT_CUDA_CORE_H
#define BFIT_CUDA_CORE_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define BK_HD static inline __host__ __device__
#else
#include "device/half.h"
#define BK_HD static inline
#endif

/* the most features a head may have */
#define BK_HS_MAX 256
/* features a thread accumulates at once: a head's are done in chunks of
 * this many (the scores computed again for each), which keeps a thread's
 * local arrays, and so the local memory the driver reserves for every
 * resident thread of the GPU, small (512 bytes a thread at most) */
#define BK_HS_CHUNK 64

/* ATTN: n sequences of T tokens, H heads of hs features; dt the data's */
typedef struct bk_attn {
    int64_t n, T, H, hs;
    int causal, lean, training, dt;
    float scale; /* 1 / sqrt(hs) */
} bk_attn;

/* EMBED: n sequences of T tokens, C features, V ids, P positions (0: none);
 * types: the token-type table's row 0 is added */
typedef struct bk_embed {
    int64_t n, T, C, V, P;
    int types, dt;
} bk_embed;

/* Element i of a buffer of dtype dt (0 f32, 1 bf16, 2 f16) as f32, and back
 * rounded to nearest even. */
BK_HD float bk_ldx(const void *p, int dt, int64_t i)
{
#ifdef __CUDACC__
    if (dt == 1)
        return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (dt == 2)
        return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
#else
    return bfit_ld(p, (bfit_dtype)dt, i);
#endif
}

BK_HD void bk_stx(void *p, int dt, int64_t i, float v)
{
#ifdef __CUDACC__
    if (dt == 1)
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else if (dt == 2)
        ((__half *)p)[i] = __float2half_rn(v);
    else
        ((float *)p)[i] = v;
#else
    bfit_st(p, (bfit_dtype)dt, i, v);
#endif
}

/* ---- embeddings ----------------------------------------------------------------- */

/* y[r, c] = tok[id_r, c] + pos[t, c] + type[0, c] for element e of [n T, C] */
BK_HD void bk_embed_fwd_one(const bk_embed *e, const int32_t *ids, const float *tok, const float *pos,
                            const float *type, void *y, int64_t el)
{
    int64_t r = el / e->C, c = el - r * e->C, t = r % e->T;
    float v = tok[(int64_t)ids[r] * e->C + c] + (pos ? pos[t * e->C + c] : 0.0f) + (type ? type[c] : 0.0f);
    bk_stx(y, e->dt, el, v);
}

/* Column c of the token table's gradient for ids in [lo, hi): the rows'
 * gradients added in row order, as cpu_embed.c adds them. */
BK_HD void bk_embed_bwd_tok(const bk_embed *e, const int32_t *ids, const void *dy, float *dtok, int64_t c,
                            int64_t lo, int64_t hi)
{
    int64_t rows = e->n * e->T;
    for (int64_t r = 0; r < rows; r++) {
        int64_t id = ids[r];
        if (id >= lo && id < hi)
            dtok[id * e->C + c] += bk_ldx(dy, e->dt, r * e->C + c);
    }
}

/* Element (t, c) of the positions' gradient; with t < 0, element c of the
 * token-type row's (every row adds to it). */
BK_HD void bk_embed_bwd_pos(const bk_embed *e, const void *dy, float *d, int64_t t, int64_t c)
{
    if (t >= 0) {
        for (int64_t b = 0; b < e->n; b++)
            d[t * e->C + c] += bk_ldx(dy, e->dt, (b * e->T + t) * e->C + c);
    } else {
        for (int64_t r = 0; r < e->n * e->T; r++)
            d[c] += bk_ldx(dy, e->dt, r * e->C + c);
    }
}

/* ---- attention ---------------------------------------------------------------------- */

/* The real tokens of sequence b (its keys; padding alone keeps one). */
BK_HD int64_t bk_attn_len(const bk_attn *a, const int32_t *lens, int64_t b)
{
    int64_t n = lens ? lens[b] : a->T;
    return n < 1 ? 1 : n > a->T ? a->T : n;
}

/* The keys row i reads: those of the real tokens, none after it when causal. */
BK_HD int64_t bk_attn_keys(const bk_attn *a, int64_t len, int64_t i) { return a->causal && i + 1 < len ? i + 1 : len; }

/* Element offsets of lane (b, h)'s q | k | v row t in [n, T, 3C] and of its
 * y row t in [n, T, C]. */
BK_HD int64_t bk_attn_qoff(const bk_attn *a, int64_t lane, int64_t t)
{
    int64_t C = a->H * a->hs;
    return (lane / a->H * a->T + t) * 3 * C + lane % a->H * a->hs;
}

BK_HD int64_t bk_attn_yoff(const bk_attn *a, int64_t lane, int64_t t)
{
    int64_t C = a->H * a->hs;
    return (lane / a->H * a->T + t) * C + lane % a->H * a->hs;
}

/* scale q_i . k_j, in f32 */
BK_HD float bk_attn_score(const bk_attn *a, const void *qkv, int64_t qo, int64_t ko)
{
    float s = 0.0f;
    for (int64_t c = 0; c < a->hs; c++)
        s += bk_ldx(qkv, a->dt, qo + c) * bk_ldx(qkv, a->dt, ko + c);
    return a->scale * s;
}

/* Forward of query row i of lane: y's row; training stores P's row (data
 * dtype, zeros past the keys) or, lean, the row's log-sum-exp (f32). */
BK_HD void bk_attn_fwd_row(const bk_attn *a, const void *qkv, const int32_t *lens, void *y, void *saved,
                           int64_t lane, int64_t i)
{
    const int64_t C = a->H * a->hs, qo = bk_attn_qoff(a, lane, i);
    const int64_t nk = bk_attn_keys(a, bk_attn_len(a, lens, lane / a->H), i);
    float acc[BK_HS_CHUNK], mx = 0.0f;
    double sum = 0;

    for (int64_t j = 0; j < nk; j++) {
        float s = bk_attn_score(a, qkv, qo, bk_attn_qoff(a, lane, j) + C);
        mx = j == 0 || s > mx ? s : mx;
    }
    for (int64_t c0 = 0; c0 < a->hs; c0 += BK_HS_CHUNK) {
        int64_t nc = a->hs - c0 < BK_HS_CHUNK ? a->hs - c0 : BK_HS_CHUNK;
        for (int64_t c = 0; c < nc; c++)
            acc[c] = 0.0f;
        for (int64_t j = 0; j < nk; j++) {
            int64_t ko = bk_attn_qoff(a, lane, j) + C;
            float e = expf(bk_attn_score(a, qkv, qo, ko) - mx);
            if (c0 == 0)
                sum += e;
            for (int64_t c = 0; c < nc; c++)
                acc[c] += e * bk_ldx(qkv, a->dt, ko + C + c0 + c);
        }
        for (int64_t c = 0; c < nc; c++)
            bk_stx(y, a->dt, bk_attn_yoff(a, lane, i) + c0 + c, (float)(acc[c] / sum));
    }
    if (!a->training)
        return;
    if (a->lean) {
        ((float *)saved)[lane * a->T + i] = mx + (float)log(sum);
        return;
    }
    for (int64_t j = 0; j < a->T; j++) {
        float p = j < nk ? (float)(expf(bk_attn_score(a, qkv, qo, bk_attn_qoff(a, lane, j) + C) - mx) / sum) : 0.0f;
        bk_stx(saved, a->dt, (lane * a->T + i) * a->T + j, p);
    }
}

/* P[i, j] of lane for backward: kept, or (lean) exp(s - L_i) again. */
BK_HD float bk_attn_p(const bk_attn *a, const void *qkv, const void *saved, int64_t lane, int64_t i, int64_t j)
{
    int64_t C = a->H * a->hs;
    if (!a->lean)
        return bk_ldx(saved, a->dt, (lane * a->T + i) * a->T + j);
    return expf(bk_attn_score(a, qkv, bk_attn_qoff(a, lane, i), bk_attn_qoff(a, lane, j) + C) -
                ((const float *)saved)[lane * a->T + i]);
}

/* dy_i . v_j */
BK_HD float bk_attn_dp(const bk_attn *a, const void *qkv, const void *dy, int64_t lane, int64_t i, int64_t j)
{
    int64_t vo = bk_attn_qoff(a, lane, j) + 2 * a->H * a->hs, yo = bk_attn_yoff(a, lane, i);
    float s = 0.0f;
    for (int64_t c = 0; c < a->hs; c++)
        s += bk_ldx(dy, a->dt, yo + c) * bk_ldx(qkv, a->dt, vo + c);
    return s;
}

/* Backward of query row i: D_i = sum P dP into dot[lane T + i] (f32, as
 * the CPU rounds it before use), and dq_i into dqkv. */
BK_HD void bk_attn_bwd_row(const bk_attn *a, const void *qkv, const int32_t *lens, const void *dy, const void *saved,
                           void *dqkv, float *dot, int64_t lane, int64_t i)
{
    const int64_t C = a->H * a->hs, qo = bk_attn_qoff(a, lane, i);
    const int64_t nk = bk_attn_keys(a, bk_attn_len(a, lens, lane / a->H), i);
    float acc[BK_HS_CHUNK], d;
    double D = 0;

    for (int64_t j = 0; j < nk; j++)
        D += (double)bk_attn_p(a, qkv, saved, lane, i, j) * bk_attn_dp(a, qkv, dy, lane, i, j);
    d = (float)D;
    dot[lane * a->T + i] = d;
    for (int64_t c0 = 0; c0 < a->hs; c0 += BK_HS_CHUNK) {
        int64_t nc = a->hs - c0 < BK_HS_CHUNK ? a->hs - c0 : BK_HS_CHUNK;
        for (int64_t c = 0; c < nc; c++)
            acc[c] = 0.0f;
        for (int64_t j = 0; j < nk; j++) {
            float p = bk_attn_p(a, qkv, saved, lane, i, j), ds = p * (bk_attn_dp(a, qkv, dy, lane, i, j) - d);
            int64_t ko = bk_attn_qoff(a, lane, j) + C;
            for (int64_t c = 0; c < nc; c++)
                acc[c] += ds * bk_ldx(qkv, a->dt, ko + c0 + c);
        }
        for (int64_t c = 0; c < nc; c++)
            bk_stx(dqkv, a->dt, qo + c0 + c, a->scale * acc[c]);
    }
}

/* Backward of key row j (after every row's dot): dk_j and dv_j into dqkv,
 * summed over the query rows that read key j. */
BK_HD void bk_attn_bwd_key(const bk_attn *a, const void *qkv, const int32_t *lens, const void *dy, const void *saved,
                           void *dqkv, const float *dot, int64_t lane, int64_t j)
{
    const int64_t C = a->H * a->hs, len = bk_attn_len(a, lens, lane / a->H), ko = bk_attn_qoff(a, lane, j) + C;
    float dk[BK_HS_CHUNK], dv[BK_HS_CHUNK];

    for (int64_t c0 = 0; c0 < a->hs; c0 += BK_HS_CHUNK) {
        int64_t nc = a->hs - c0 < BK_HS_CHUNK ? a->hs - c0 : BK_HS_CHUNK;
        for (int64_t c = 0; c < nc; c++)
            dk[c] = dv[c] = 0.0f;
        for (int64_t i = a->causal ? j : 0; j < len && i < a->T; i++) {
            float p, ds;
            int64_t qo = bk_attn_qoff(a, lane, i), yo = bk_attn_yoff(a, lane, i);
            if (j >= bk_attn_keys(a, len, i))
                continue;
            p = bk_attn_p(a, qkv, saved, lane, i, j);
            ds = p * (bk_attn_dp(a, qkv, dy, lane, i, j) - dot[lane * a->T + i]);
            for (int64_t c = 0; c < nc; c++) {
                dv[c] += p * bk_ldx(dy, a->dt, yo + c0 + c);
                dk[c] += ds * bk_ldx(qkv, a->dt, qo + c0 + c);
            }
        }
        for (int64_t c = 0; c < nc; c++) {
            bk_stx(dqkv, a->dt, ko + c0 + c, a->scale * dk[c]);
            bk_stx(dqkv, a->dt, ko + C + c0 + c, dv[c]);
        }
    }
}

#endif
