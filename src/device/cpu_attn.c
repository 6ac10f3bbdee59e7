/* cpu_attn.c - ATTN_FWD and ATTN_BWD: multi-head self-attention on the CPU.
 *
 * Each (sequence, head) pair is a lane: a T x T score matrix S = Q K^T / sqrt(hs),
 * its row softmax P, and Y = P V, with oneDNN's sgemm on the strided q, k, v
 * columns of the [n, T, 3C] input (no copies). Backward:
 *   dV = P^T dY,  dP = dY V^T,  dS = P * (dP - rowsum(P * dP)),
 *   dQ = dS K / sqrt(hs),  dK = dS^T Q / sqrt(hs).
 * The stored variant keeps P for backward ([n, H, T, T] f32: the attention
 * matrix the plan counts); the lean one keeps only each row's log-sum-exp L
 * ([n, H, T]) and recomputes P = exp(S - L) in backward.
 *
 * Lanes run in parallel, one per thread, each with its own T x T scratch
 * (two in a lean backward) in the workspace; a lane's results never depend
 * on which thread ran it. A causal lane works in row blocks so that the
 * scores above the diagonal are mostly never computed. */
#include "base/err.h"
#include "device/cpu.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#define ROW_BLOCK 64

typedef struct attn {
    int64_t n, T, H, hs, C, ld; /* ld: row stride of the input (3C) */
    float scale;
    int causal, lean;
} attn;

static attn dims(const bfit_op_desc *d)
{
    attn a = {d->u.attn.n, d->u.attn.T, d->u.attn.H, d->u.attn.hs, 0, 0, 0, d->u.attn.causal, d->u.attn.lean};
    a.C = a.H * a.hs;
    a.ld = 3 * a.C;
    a.scale = (float)(1.0 / sqrt((double)a.hs));
    return a;
}

static size_t tt_bytes(const attn *a) { return BFIT_ALIGN_UP((size_t)(a->T * a->T) * sizeof(float)); }

/* How many lanes run at once: one scratch each. */
static int64_t slots_of(const attn *a)
{
    int64_t lanes = a->n * a->H, t = omp_get_max_threads();
    return lanes < t ? lanes : t;
}

static int sgemm(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                 const float *B, int64_t ldb, float *Cm, int64_t ldc)
{
    return dnnl_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, Cm, ldc) == dnnl_success ? 0 : -1;
}

/* Scores S = scale Q K^T into P (rows i, columns j < cols(i) where a causal
 * row block stops at its last row). */
static int scores(const attn *a, const float *Q, const float *K, float *P)
{
    for (int64_t r0 = 0; r0 < a->T; r0 += ROW_BLOCK) {
        int64_t r1 = r0 + ROW_BLOCK < a->T ? r0 + ROW_BLOCK : a->T, nc = a->causal ? r1 : a->T;
        if (sgemm('N', 'T', r1 - r0, nc, a->hs, a->scale, Q + r0 * a->ld, a->ld, K, a->ld, P + r0 * a->T, a->T))
            return -1;
    }
    return 0;
}

/* Row i of the scores into probabilities; masked columns become 0. */
static float softmax_row(const attn *a, float *p, int64_t i)
{
    int64_t nj = a->causal ? i + 1 : a->T;
    float mx = p[0];
    double sum = 0;
    for (int64_t j = 1; j < nj; j++)
        mx = p[j] > mx ? p[j] : mx;
    for (int64_t j = 0; j < nj; j++) {
        p[j] = expf(p[j] - mx);
        sum += p[j];
    }
    for (int64_t j = 0; j < nj; j++)
        p[j] = (float)(p[j] / sum);
    for (int64_t j = nj; j < a->T; j++)
        p[j] = 0.0f;
    return mx + (float)log(sum);
}

/* dst (rows of ld_dst) = alpha P V, a causal row block reading only its columns. */
static int times_v(const attn *a, float alpha, const float *P, const float *V, float *dst, int64_t ld_dst)
{
    for (int64_t r0 = 0; r0 < a->T; r0 += ROW_BLOCK) {
        int64_t r1 = r0 + ROW_BLOCK < a->T ? r0 + ROW_BLOCK : a->T, nk = a->causal ? r1 : a->T;
        if (sgemm('N', 'N', r1 - r0, a->hs, nk, alpha, P + r0 * a->T, a->T, V, a->ld, dst + r0 * ld_dst, ld_dst))
            return -1;
    }
    return 0;
}

/* Forward of lane (b, h): P in p (saved or scratch), L into lse if given. */
static int fwd_lane(const attn *a, const float *x, float *y, float *p, float *lse, int64_t lane)
{
    int64_t b = lane / a->H, h = lane % a->H;
    const float *Q = x + b * a->T * a->ld + h * a->hs;
    if (scores(a, Q, Q + a->C, p))
        return -1;
    for (int64_t i = 0; i < a->T; i++) {
        float l = softmax_row(a, p + i * a->T, i);
        if (lse)
            lse[lane * a->T + i] = l;
    }
    return times_v(a, 1.0f, p, Q + 2 * a->C, y + b * a->T * a->C + h * a->hs, a->C);
}

/* Where lane `lane` (run in slot s) keeps P, and L. */
static float *lane_p(const attn *a, const bfit_op_args *o, int training, int64_t lane, int64_t s)
{
    if (training && !a->lean)
        return (float *)o->saved + lane * a->T * a->T;
    return (float *)((char *)o->workspace + (size_t)s * tt_bytes(a));
}

/* One lane's work, run in scratch slot s. */
typedef int (*lane_fn)(const attn *a, const bfit_op_args *o, int training, int64_t lane, int64_t s);

/* Every lane, spread over the threads: thread s < nslots runs lanes s,
 * s + nslots, ... in slot s. One slot: serially, sgemm using the threads. */
static int for_lanes(const attn *a, const bfit_op_args *o, int training, int64_t nslots, lane_fn fn)
{
    int64_t nl = a->n * a->H;
    int bad = 0;
    if (nslots <= 1) {
        for (int64_t lane = 0; lane < nl && !bad; lane++)
            bad = fn(a, o, training, lane, 0);
        return bad;
    }
#pragma omp parallel
    {
        int64_t nt = omp_get_num_threads() < nslots ? omp_get_num_threads() : nslots, s = omp_get_thread_num();
        for (int64_t lane = s; s < nt && lane < nl; lane += nt)
            if (fn(a, o, training, lane, s))
                __atomic_store_n(&bad, 1, __ATOMIC_RELAXED);
    }
    return bad;
}

static int fwd_one(const attn *a, const bfit_op_args *o, int training, int64_t lane, int64_t s)
{
    float *lse = training && a->lean ? (float *)o->saved : NULL;
    return fwd_lane(a, o->src, o->dst, lane_p(a, o, training, lane, s), lse, lane);
}

static int run_fwd(cpu_op *op, const bfit_op_args *o)
{
    attn a = dims(&op->base.desc);
    int training = op->base.desc.u.attn.training, bad = 0;
    int64_t nslots = (int64_t)(intptr_t)op->extra;

    if (!o->src || !o->dst || (training && !o->saved) || (op->ws && !o->workspace))
        return bfit_fail(BFIT_EINVAL, "attention forward: src, dst%s%s are required", training ? ", saved" : "",
                         op->ws ? ", workspace" : "");
    bad = for_lanes(&a, o, training, nslots, fwd_one);
    return bad ? bfit_fail(BFIT_EDEVICE, "oneDNN: sgemm failed in attention forward") : BFIT_OK;
}

/* The lean backward's P: the scores again, exponentiated against L. */
static int recompute_p(const attn *a, const float *Q, const float *lse, float *p)
{
    if (scores(a, Q, Q + a->C, p))
        return -1;
    for (int64_t i = 0; i < a->T; i++) {
        int64_t nj = a->causal ? i + 1 : a->T;
        float *r = p + i * a->T;
        for (int64_t j = 0; j < nj; j++)
            r[j] = expf(r[j] - lse[i]);
        for (int64_t j = nj; j < a->T; j++)
            r[j] = 0.0f;
    }
    return 0;
}

/* dP (in place) becomes dS = P * (dP - rowsum(P * dP)); masked entries,
 * which the causal dP never computed, become 0. */
static void softmax_bwd(const attn *a, const float *p, float *dp)
{
    for (int64_t i = 0; i < a->T; i++) {
        int64_t nj = a->causal ? i + 1 : a->T;
        const float *pr = p + i * a->T;
        float *g = dp + i * a->T;
        double dot = 0;
        for (int64_t j = 0; j < nj; j++)
            dot += (double)pr[j] * g[j];
        for (int64_t j = 0; j < nj; j++)
            g[j] = pr[j] * (g[j] - (float)dot);
        for (int64_t j = nj; j < a->T; j++)
            g[j] = 0.0f;
    }
}

static int bwd_lane(const attn *a, const bfit_op_args *o, const float *p, float *dp, int64_t lane)
{
    int64_t b = lane / a->H, h = lane % a->H, off = b * a->T * a->ld + h * a->hs;
    const float *Q = (const float *)o->src + off, *K = Q + a->C, *V = Q + 2 * a->C;
    const float *dY = (const float *)o->diff_dst + b * a->T * a->C + h * a->hs;
    float *dQ = (float *)o->diff_src + off, *dK = dQ + a->C, *dV = dQ + 2 * a->C;

    /* dP = dY V^T: a causal row block needs only its columns */
    for (int64_t r0 = 0; r0 < a->T; r0 += ROW_BLOCK) {
        int64_t r1 = r0 + ROW_BLOCK < a->T ? r0 + ROW_BLOCK : a->T, nc = a->causal ? r1 : a->T;
        if (sgemm('N', 'T', r1 - r0, nc, a->hs, 1.0f, dY + r0 * a->C, a->C, V, a->ld, dp + r0 * a->T, a->T))
            return -1;
    }
    if (sgemm('T', 'N', a->T, a->hs, a->T, 1.0f, p, a->T, dY, a->C, dV, a->ld))
        return -1;
    softmax_bwd(a, p, dp);
    if (times_v(a, a->scale, dp, K, dQ, a->ld))
        return -1;
    return sgemm('T', 'N', a->T, a->hs, a->T, a->scale, dp, a->T, Q, a->ld, dK, a->ld);
}

static int bwd_one(const attn *a, const bfit_op_args *o, int training, int64_t lane, int64_t s)
{
    char *w = (char *)o->workspace + (size_t)s * (a->lean ? 2 : 1) * tt_bytes(a);
    const float *p = a->lean ? (const float *)w : (const float *)o->saved + lane * a->T * a->T;
    float *dp = (float *)(w + (a->lean ? tt_bytes(a) : 0));
    int64_t b = lane / a->H, h = lane % a->H;

    if (a->lean && recompute_p(a, (const float *)o->src + b * a->T * a->ld + h * a->hs,
                               (const float *)o->saved + lane * a->T, (float *)w))
        return -1;
    return bwd_lane(a, o, p, dp, lane);
}

static int run_bwd(cpu_op *op, const bfit_op_args *o)
{
    attn a = dims(&op->base.desc);
    int bad = 0;
    int64_t nslots = (int64_t)(intptr_t)op->extra;

    if (!o->src || !o->diff_dst || !o->diff_src || !o->saved || !o->workspace)
        return bfit_fail(BFIT_EINVAL, "attention backward: src, diff_dst, diff_src, saved and workspace are required");
    bad = for_lanes(&a, o, 1, nslots, bwd_one);
    return bad ? bfit_fail(BFIT_EDEVICE, "oneDNN: sgemm failed in attention backward") : BFIT_OK;
}

int cpu_attn_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    attn a = dims(d);
    int64_t slots = slots_of(&a);
    int training = d->u.attn.training;

    if (a.n < 1 || a.T < 1 || a.H < 1 || a.hs < 1)
        return bfit_fail(BFIT_EINVAL, "attention: sizes must be positive, got n=%lld T=%lld H=%lld hs=%lld",
                         (long long)a.n, (long long)a.T, (long long)a.H, (long long)a.hs);
    if (d->dtype != BFIT_F32)
        return bfit_fail(BFIT_EINVAL, "attention: %s is not supported on the cpu yet (f32 only)",
                         bfit_dtype_name(d->dtype));
    if (d->kind == BFIT_OP_ATTN_BWD && !training)
        return bfit_fail(BFIT_EINVAL, "attention backward: the op must be made for training");
    op->extra = (void *)(intptr_t)slots;
    op->saved = !training ? 0 : BFIT_ALIGN_UP((size_t)(a.n * a.H * a.T * (a.lean ? 1 : a.T)) * sizeof(float));
    if (d->kind == BFIT_OP_ATTN_FWD) {
        op->ws = training && !a.lean ? 0 : (size_t)slots * tt_bytes(&a);
        op->run = run_fwd;
    } else {
        op->ws = (size_t)slots * (a.lean ? 2 : 1) * tt_bytes(&a);
        op->run = run_bwd;
    }
    return BFIT_OK;
}
