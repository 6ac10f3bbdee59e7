/* cuda_attn.c - ATTN_FWD and ATTN_BWD on cuBLAS: multi-head self-attention
 * as f32 strided batched GEMMs, with cuda_attn.cu's kernels between them.
 *
 * q, k, v (and dy) are copied once into head-major f32 buffers, so each
 * lane (sequence, head) is a contiguous [T, hs] matrix and all lanes of a
 * group are one batched product. The scores of a group of lanes, [G, T, T]
 * f32, are the only T x T memory besides what the forward keeps; G is
 * chosen so that they take at most ATTN_GROUP_BYTES. Causal rows are
 * computed in full and their masked entries zeroed by the row kernels (P
 * and dS are zero there, so the products after them are exact): twice the
 * flops of a triangular kernel, and far fewer than the one-thread-a-row
 * kernels this replaced (gpt2's attention was 97% of its GPU step).
 *
 * f32 products are IEEE (cuBLAS's default math mode, no TF32), as the CPU
 * computes 16-bit attention in f32 too: the results agree with cpu_attn.c
 * to f32 rounding.
 *
 * cuBLAS row-major by column-major: a row-major [r, c] matrix is the
 * column-major [c, r] one. With row-major lanes Q, K, V, dY [T, hs] and
 * S, P, dS [T, T]:
 *   S = Q K^T:   S^T = op_T(K) Q      "scores" (also dP = dY V^T: S^T = op_T(V) dY)
 *   Y = P V:     Y^T = V P            "apply"  (also dQ = dS K)
 *   dV = P^T dY: dV^T = dY op_T(P)    "apply transposed" (also dK = dS^T Q)
 *
 * Dropout on the weights (p > 0) as cpu_attn.c: the group's P masked in
 * place after the softmax has kept it (Y = D V); backward the mask of dP
 * before dS, then P masked in place for dV = D^T dY. */
#include "base/err.h"
#include "device/cuda.h"

#define ATTN_GROUP_BYTES ((size_t)64 << 20)

typedef struct attn_ws {
    float *qkvh, *yh, *dqkvh, *s, *ds;
} attn_ws;

/* seed: the call's (args.seed), for dropout's mask */
static bk_attn geom(const bfit_op_desc *d, uint64_t seed)
{
    bk_attn a = {d->u.attn.n, d->u.attn.T, d->u.attn.H, d->u.attn.hs, d->u.attn.causal, d->u.attn.lean,
                 d->u.attn.training, (int)d->dtype, (float)(1.0 / sqrt((double)d->u.attn.hs)), 0, 0, 0};
    if (a.training && d->u.attn.p > 0) {
        a.drop = d->u.attn.p;
        a.seed = bk_mix64(seed);
        a.thresh = (uint64_t)((double)a.drop * 4294967296.0);
    }
    return a;
}

/* lanes a group's scores take (forward: S; backward: P and dP) */
static int64_t group_of(const bk_attn *a, int bwd)
{
    size_t per = (size_t)(a->T * a->T) * sizeof(float) * (bwd ? 2 : 1);
    int64_t g = (int64_t)(ATTN_GROUP_BYTES / per), lanes = a->n * a->H;
    return g < 1 ? 1 : g > lanes ? lanes : g;
}

/* Lays the workspace out after cuBLAS's part (NULL base: sizes only) and
 * returns its bytes: qkvh, yh (forward y, backward dy), dqkvh (backward),
 * the group's scores s (and backward ds). */
static size_t layout(const bk_attn *a, int bwd, size_t blas, char *base, attn_ws *w)
{
    size_t lane = (size_t)(a->T * a->hs) * sizeof(float), L = (size_t)(a->n * a->H);
    size_t tt = (size_t)(group_of(a, bwd) * a->T * a->T) * sizeof(float);
    size_t sz[5] = {3 * L * lane, L * lane, bwd ? 3 * L * lane : 0, tt, bwd ? tt : 0};
    float *at[5];
    size_t off = CUDA_WS_PART(blas);
    for (int i = 0; i < 5; i++) {
        at[i] = base && sz[i] ? (float *)(base + off) : NULL;
        off += CUDA_WS_PART(sz[i]);
    }
    if (w)
        *w = (attn_ws){at[0], at[1], at[2], at[3], at[4]};
    return off;
}

/* per lane of a batch: C = alpha op(A) op(B), column-major, m x n; tf32:
 * on TF32 tensor cores, for operands TF32 holds exactly (below) */
static int gemm(cuda_device *dev, int tf32, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                const float *A, int64_t lda, int64_t sa, const float *B, int64_t ldb, int64_t sb, float *C, int64_t ldc,
                int64_t sc, int64_t batch)
{
    const float zero = 0.0f;
    const cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (tf32)
        CUBLAS_TRY(cublasGemmStridedBatchedEx(dev->blas, oa, ob, (int)m, (int)n, (int)k, &alpha, A, CUDA_R_32F,
                                              (int)lda, sa, B, CUDA_R_32F, (int)ldb, sb, &zero, C, CUDA_R_32F,
                                              (int)ldc, sc, (int)batch, CUBLAS_COMPUTE_32F_FAST_TF32,
                                              CUBLAS_GEMM_DEFAULT),
                   "attention (cublasGemmStridedBatchedEx, TF32)");
    else
        CUBLAS_TRY(cublasSgemmStridedBatched(dev->blas, oa, ob, (int)m, (int)n, (int)k, &alpha, A, (int)lda, sa, B,
                                             (int)ldb, sb, &zero, C, (int)ldc, sc, (int)batch),
                   "attention (cublasSgemmStridedBatched)");
    return BFIT_OK;
}

/* C [G, T, T] = alpha Y X^T per lane (row-major): X, Y [T, hs] at lane
 * strides sx, sy. For 16-bit data every product runs on TF32 tensor cores
 * with f32 sums: the scores' operands are copies of 16-bit values (q, k;
 * v, dy), which TF32's 10-bit mantissa holds exactly, so their products
 * are the f32 ones; P and dS (apply) are rounded to TF32 (2^-11 relative,
 * a quarter of the rounding the 16-bit result gets, and finer than
 * PyTorch's flash attention, which rounds P to bf16). f32 data stays IEEE
 * f32 throughout. */
static int scores(cuda_device *dev, const bk_attn *a, float alpha, const float *X, int64_t sx, const float *Y,
                  int64_t sy, float *C, int64_t G)
{
    return gemm(dev, a->dt != BFIT_F32, 1, 0, a->T, a->T, a->hs, alpha, X, a->hs, sx, Y, a->hs, sy, C, a->T,
                a->T * a->T, G);
}

/* C [T, hs] = alpha op(M) X per lane (row-major), op(M) = M (tm 0) or M^T
 * (tm 1), M [G, T, T] */
static int apply(cuda_device *dev, const bk_attn *a, float alpha, const float *M, int tm, const float *X, int64_t sx,
                 float *C, int64_t sc, int64_t G)
{
    return gemm(dev, a->dt != BFIT_F32, 0, tm, a->hs, a->T, a->T, alpha, X, a->hs, sx, M, a->T, a->T * a->T, C, a->hs,
                sc, G);
}

/* cuBLAS's workspace is the op's first part (none under the lean policy) */
static attn_ws enter(cuda_op *op, const bfit_op_args *o, const bk_attn *a, int bwd, int *rc)
{
    cuda_device *dev = cuda_dev(op);
    char *base = cuda_ws(op, o);
    attn_ws w;
    layout(a, bwd, dev->blas_ws, base, &w);
    *rc = cublasSetWorkspace(dev->blas, dev->blas_ws ? base : NULL, dev->blas_ws) == CUBLAS_STATUS_SUCCESS
              ? BFIT_OK
              : bfit_fail(BFIT_EDEVICE, "attention: setting the cuBLAS workspace failed");
    return w;
}

static int run_fwd(cuda_op *op, const bfit_op_args *o)
{
    cuda_device *dev = cuda_dev(op);
    bk_attn a = geom(&op->base.desc, o->seed);
    const int64_t L = a.n * a.H, G = group_of(&a, 0), th = a.T * a.hs;
    int rc;
    attn_ws w;

    if (!o->src || !o->dst || (a.training && !o->saved) || !o->workspace)
        return bfit_fail(BFIT_EINVAL, "attention forward: src, dst, workspace%s are required",
                         a.training ? ", saved" : "");
    w = enter(op, o, &a, 0, &rc);
    if (rc ||
        (rc = cuda_launched(bk_attn_gather(dev->stream, &a, o->src, w.qkvh, 1), "attention forward (q, k, v in)")))
        return rc;
    for (int64_t g0 = 0; g0 < L; g0 += G) {
        int64_t g = L - g0 < G ? L - g0 : G;
        const float *q = w.qkvh + g0 * 3 * th;
        if ((rc = scores(dev, &a, a.scale, q + th, 3 * th, q, 3 * th, w.s, g)) ||
            (rc = cuda_launched(bk_attn_softmax(dev->stream, &a, o->lens, w.s, g0, g,
                                                a.training && !a.lean ? o->saved : NULL,
                                                a.training && a.lean ? (float *)o->saved : NULL),
                                "attention forward (softmax)")) ||
            (a.drop > 0 && (rc = cuda_launched(bk_attn_drop(dev->stream, &a, o->lens, w.s, g0, g),
                                               "attention forward (dropout)"))) ||
            (rc = apply(dev, &a, 1.0f, w.s, 0, q + 2 * th, 3 * th, w.yh + g0 * th, th, g)))
            return rc;
    }
    return cuda_launched(bk_attn_scatter(dev->stream, &a, w.yh, o->dst, 0), "attention forward (y out)");
}

/* one group's backward: P, dP, dS, then dv, dq, dk into dqkvh */
static int bwd_group(cuda_device *dev, const bk_attn *a, const bfit_op_args *o, const attn_ws *w, int64_t g0,
                     int64_t g)
{
    const int64_t th = a->T * a->hs;
    const float *q = w->qkvh + g0 * 3 * th, *k = q + th, *v = q + 2 * th, *dy = w->yh + g0 * th;
    float *dq = w->dqkvh + g0 * 3 * th;
    int rc = BFIT_OK;

    if ((a->lean && (rc = scores(dev, a, a->scale, k, 3 * th, q, 3 * th, w->s, g))) ||
        (rc = cuda_launched(bk_attn_p_again(dev->stream, a, o->lens, o->saved, w->s, g0, g),
                            "attention backward (P)")) ||
        (rc = scores(dev, a, 1.0f, v, 3 * th, dy, th, w->ds, g)) ||
        (a->drop > 0 && (rc = cuda_launched(bk_attn_drop(dev->stream, a, o->lens, w->ds, g0, g),
                                            "attention backward (dropout of dP)"))) ||
        (rc = cuda_launched(bk_attn_ds(dev->stream, a, o->lens, w->s, w->ds, g0, g), "attention backward (dS)")) ||
        (a->drop > 0 && (rc = cuda_launched(bk_attn_drop(dev->stream, a, o->lens, w->s, g0, g),
                                            "attention backward (dropout of P)"))) ||
        (rc = apply(dev, a, 1.0f, w->s, 1, dy, th, dq + 2 * th, 3 * th, g)) ||
        (rc = apply(dev, a, a->scale, w->ds, 0, k, 3 * th, dq, 3 * th, g)))
        return rc;
    return apply(dev, a, a->scale, w->ds, 1, q, 3 * th, dq + th, 3 * th, g);
}

static int run_bwd(cuda_op *op, const bfit_op_args *o)
{
    cuda_device *dev = cuda_dev(op);
    bk_attn a = geom(&op->base.desc, o->seed);
    const int64_t L = a.n * a.H, G = group_of(&a, 1);
    int rc;
    attn_ws w;

    if (!o->src || !o->diff_dst || !o->diff_src || !o->saved || !o->workspace)
        return bfit_fail(BFIT_EINVAL, "attention backward: src, diff_dst, diff_src, saved and workspace are required");
    w = enter(op, o, &a, 1, &rc);
    if (rc ||
        (rc = cuda_launched(bk_attn_gather(dev->stream, &a, o->src, w.qkvh, 1), "attention backward (q, k, v in)")) ||
        (rc = cuda_launched(bk_attn_gather(dev->stream, &a, o->diff_dst, w.yh, 0), "attention backward (dy in)")))
        return rc;
    for (int64_t g0 = 0; g0 < L; g0 += G)
        if ((rc = bwd_group(dev, &a, o, &w, g0, L - g0 < G ? L - g0 : G)))
            return rc;
    return cuda_launched(bk_attn_scatter(dev->stream, &a, w.dqkvh, o->diff_src, 1),
                         "attention backward (dq, dk, dv out)");
}

/* saved: as the CPU keeps it (device.h): P [n,H,T,T] in the data's dtype,
 * or lean the log-sum-exp of each row [n,H,T] in f32 */
int cuda_attn_init(cuda_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    bk_attn a = geom(d, 0);
    size_t kept = a.lean ? sizeof(float) : (size_t)a.T * (d->dtype == BFIT_F32 ? 4 : 2);
    int bwd = d->kind == BFIT_OP_ATTN_BWD;

    if (a.n < 1 || a.T < 1 || a.H < 1 || a.hs < 1)
        return bfit_fail(BFIT_EINVAL, "attention: sizes must be positive, got n=%lld T=%lld H=%lld hs=%lld",
                         (long long)a.n, (long long)a.T, (long long)a.H, (long long)a.hs);
    if (a.T > INT32_MAX / a.T || a.hs > INT32_MAX)
        return bfit_fail(BFIT_EINVAL, "cuda attention: %lld tokens; cuBLAS's sizes are 32-bit, at most 46340",
                         (long long)a.T);
    if (bwd && !a.training)
        return bfit_fail(BFIT_EINVAL, "attention backward: the op must be made for training");
    if (!(d->u.attn.p >= 0 && d->u.attn.p < 1))
        return bfit_fail(BFIT_EINVAL, "attention: dropout probability must be in [0, 1), got %g", (double)d->u.attn.p);
    op->saved = !a.training ? 0 : BFIT_ALIGN_UP((size_t)(a.n * a.H * a.T) * kept);
    op->ws = layout(&a, bwd, cuda_dev(op)->blas_ws, NULL, NULL) + CUDA_WS_ALIGN;
    op->run = bwd ? run_bwd : run_fwd;
    return BFIT_OK;
}
