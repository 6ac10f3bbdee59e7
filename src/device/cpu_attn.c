/* cpu_attn.c - ATTN_FWD and ATTN_BWD: multi-head self-attention on the CPU.
 *
 * Each (sequence, head) pair is a lane: a T x T score matrix S = Q K^T / sqrt(hs),
 * its row softmax P, and Y = P V, with oneDNN's sgemm on the strided q, k, v
 * columns of the [n, T, 3C] input (no copies). Backward:
 *   dV = P^T dY,  dP = dY V^T,  dS = P * (dP - rowsum(P * dP)),
 *   dQ = dS K / sqrt(hs),  dK = dS^T Q / sqrt(hs).
 * The stored variant keeps P for backward ([n, H, T, T], the attention
 * matrix the plan counts); the lean one keeps only each row's log-sum-exp L
 * ([n, H, T] f32) and recomputes P = exp(S - L) in backward.
 *
 * With args.lens a lane's keys stop at its sequence's real length: the
 * padding after it is never attended to (bidirectional attention would
 * otherwise mix it into every token); padded rows still attend to the real
 * keys, so their outputs stay finite, and their gradients, zero downstream,
 * reach nothing.
 *
 * 16-bit data (bf16, f16): a lane's q, k, v columns (and dY) are converted
 * to f32 in its scratch, computed on as f32, and its results rounded back
 * once; the stored P is kept in the data's dtype (half the f32 matrix: the
 * point of 16-bit storage), L in f32 (it is small, and exp(S - L) would
 * amplify its rounding).
 *
 * Dropout on the weights (training, p > 0: nn.MultiheadAttention's
 * dropout, BERT's and GPT-2's attention dropout): Y = D V with D = P kept
 * by a mask and scaled by 1/(1-p); backward dV = D^T dY and dP = the mask
 * of dY V^T scaled alike, before dS as above. The mask is a pure function
 * of (seed, lane, row, column), as the dropout op's is of (seed, index):
 * drawn again in backward, never stored.
 *
 * Lanes run in parallel, one per thread, each with its own scratch in the
 * workspace; a lane's results never depend on which thread ran it. A causal
 * lane works in row blocks so that the scores above the diagonal are mostly
 * never computed, and backward's products with P^T and dS^T in column
 * blocks that skip the rows above them. The softmax's loops are vectors
 * (bfit_expf, cpu_exp.h), compiled for each instruction set. */
#include "base/err.h"
#include "base/rand.h"
#include "device/cpu.h"
#include "device/cpu_exp.h"
#include "device/cpu_isa.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#define ROW_BLOCK 64

typedef struct attn {
    int64_t n, T, H, hs, C;
    int64_t len; /* keys a lane attends to: T, or its sequence's real tokens */
    float scale;
    int causal, lean, training;
    bfit_dtype dt; /* of src, dst, diff_dst, diff_src (and a stored P) */
    float drop;       /* dropout on the weights (training), 0: none */
    uint64_t seed;    /* the call's, mixed: the mask's */
    uint64_t thresh;  /* keep where the 32-bit hash is >= drop 2^32 */
} attn;

/* A lane's operands as f32 rows: in the op's buffers (f32) or converted
 * into its scratch (16-bit). ld: row stride of q, k, v and of dq, dk, dv;
 * ldy: of y and dy. */
typedef struct view {
    const float *q, *k, *v, *dy;
    float *y, *dq, *dk, *dv;
    int64_t ld, ldy;
} view;

/* A scratch slot's parts (NULL: not needed): P, dP (T x T), the lane's
 * q | k | v, its y (forward) or dy (backward), its dq | dk | dv, and with
 * dropout D (T x T). */
typedef struct slot {
    float *p, *dp, *qkv, *y, *dqkv, *d;
} slot;

/* seed: the call's (args.seed), for dropout's mask */
static attn dims(const bfit_op_desc *d, uint64_t seed)
{
    attn a = {d->u.attn.n, d->u.attn.T, d->u.attn.H, d->u.attn.hs, 0, d->u.attn.T, 0, d->u.attn.causal,
              d->u.attn.lean, d->u.attn.training, d->dtype, 0, 0, 0};
    a.C = a.H * a.hs;
    a.scale = (float)(1.0 / sqrt((double)a.hs));
    if (a.training && d->u.attn.p > 0) {
        a.drop = d->u.attn.p;
        a.seed = bfit_mix64(seed);
        a.thresh = (uint64_t)((double)a.drop * 4294967296.0);
    }
    return a;
}

/* The lane's dimensions with its sequence's length; a sequence of padding
 * alone keeps its first key, so its rows stay finite. */
static attn lane_dims(const attn *a, const bfit_op_args *o, int64_t lane)
{
    attn l = *a;
    if (o->lens) {
        int64_t n = o->lens[lane / a->H];
        l.len = n < 1 ? 1 : n > a->T ? a->T : n;
    }
    return l;
}

/* Keys that row i (end = i + 1), or a row block ending before end, reads:
 * those of the real tokens, and when causal none after the row. */
static int64_t keys_to(const attn *a, int64_t end) { return a->causal && end < a->len ? end : a->len; }

static size_t tt_bytes(const attn *a) { return BFIT_ALIGN_UP((size_t)(a->T * a->T) * sizeof(float)); }
static size_t vec_bytes(const attn *a, int k) { return BFIT_ALIGN_UP((size_t)(k * a->T * a->hs) * sizeof(float)); }

/* Lays slot parts out from base (NULL: sizes only); returns the slot's bytes.
 * f32 stored training keeps P in `saved` itself, so its forward needs none. */
static size_t slot_parts(const attn *a, int bwd, char *base, slot *s)
{
    int half = a->dt != BFIT_F32;
    size_t sz[6] = {
        bwd ? (a->lean || half ? tt_bytes(a) : 0) : (a->training && !a->lean && !half ? 0 : tt_bytes(a)),
        bwd ? tt_bytes(a) : 0,
        half ? vec_bytes(a, 3) : 0,
        half ? vec_bytes(a, 1) : 0,
        half && bwd ? vec_bytes(a, 3) : 0,
        a->drop > 0 ? tt_bytes(a) : 0,
    };
    float *at[6];
    size_t off = 0;
    for (int i = 0; i < 6; i++) {
        at[i] = base && sz[i] ? (float *)(base + off) : NULL;
        off += sz[i];
    }
    if (s)
        *s = (slot){at[0], at[1], at[2], at[3], at[4], at[5]};
    return off;
}

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

/* Scores S = scale Q K^T into P (rows i, columns j < keys_to(block end)). */
static int scores(const attn *a, const view *w, float *P)
{
    for (int64_t r0 = 0; r0 < a->T; r0 += ROW_BLOCK) {
        int64_t r1 = r0 + ROW_BLOCK < a->T ? r0 + ROW_BLOCK : a->T, nc = keys_to(a, r1);
        if (sgemm('N', 'T', r1 - r0, nc, a->hs, a->scale, w->q + r0 * w->ld, w->ld, w->k, w->ld, P + r0 * a->T, a->T))
            return -1;
    }
    return 0;
}

/* Columns a row's vector loops run over: its keys rounded up to 16, so
 * that they end without a scalar tail (a tail of exponentials in scalars
 * took as long as the vectors did); the columns past the keys, whatever
 * they hold, are made 0 by a select. */
static int64_t vec_cols(const attn *a, int64_t nj)
{
    int64_t n = (nj + 15) & ~(int64_t)15;
    return n < a->T ? n : a->T;
}

/* Row i of the scores into probabilities; masked columns become 0. The
 * loops are vectors (bfit_expf, cpu_exp.h; the sum in double lanes), one
 * variant per instruction set (cpu_isa.h): a lane's results depend on the
 * CPU's vector width in their last bits, never on the threads. */
static inline __attribute__((always_inline)) void softmax_in(const attn *a, float *p, int64_t i, float *lse)
{
    int64_t nj = keys_to(a, i + 1), nv = vec_cols(a, nj);
    float mx = p[0];
    double sum = 0, inv;
    if (nv < 16) { /* a row shorter than a vector: the vectors' reductions would cost more than the row */
        for (int64_t j = 1; j < nj; j++)
            mx = p[j] > mx ? p[j] : mx;
        for (int64_t j = 0; j < nj; j++)
            sum += p[j] = bfit_expf(p[j] - mx);
        for (int64_t j = nj; j < nv; j++)
            p[j] = 0.0f;
    } else {
#pragma omp simd reduction(max : mx)
        for (int64_t j = 1; j < nj; j++)
            mx = p[j] > mx ? p[j] : mx;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < nv; j++) {
            float e = bfit_expf(p[j] - mx);
            p[j] = j < nj ? e : 0.0f;
            sum += p[j];
        }
    }
    inv = 1.0 / sum;
#pragma omp simd
    for (int64_t j = 0; j < nv; j++)
        p[j] = (float)(p[j] * inv);
    for (int64_t j = nv; j < a->T; j++)
        p[j] = 0.0f;
    if (lse) /* only the lean variant keeps L */
        lse[i] = mx + (float)log(sum);
}

/* Every row of a lane's P; each row's L into lse if given. */
BFIT_CPU_VARIANTS(void, softmax_rows, (const attn *a, float *p, float *lse), {
    for (int64_t i = 0; i < a->T; i++)
        softmax_in(a, p + i * a->T, i, lse);
})

/* dst (rows of ldd) = alpha P B (rows of ldb), a row block reading only its columns. */
static int times_p(const attn *a, float alpha, const float *P, const float *B, int64_t ldb, float *dst, int64_t ldd)
{
    for (int64_t r0 = 0; r0 < a->T; r0 += ROW_BLOCK) {
        int64_t r1 = r0 + ROW_BLOCK < a->T ? r0 + ROW_BLOCK : a->T, nk = keys_to(a, r1);
        if (sgemm('N', 'N', r1 - r0, a->hs, nk, alpha, P + r0 * a->T, a->T, B, ldb, dst + r0 * ldd, ldd))
            return -1;
    }
    return 0;
}

/* Dropout's mask on lane `lane`'s T x T matrix src into dst, and (g not
 * NULL) on g in place, one draw for both: kept entries scaled by 1/(1-p),
 * the others 0; columns past a row's keys are 0 (src and g need not hold
 * them). */
static void drop_rows(const attn *a, int64_t lane, const float *src, float *dst, float *g)
{
    const float inv = 1.0f / (1.0f - a->drop);
    for (int64_t i = 0; i < a->T; i++) {
        int64_t nj = keys_to(a, i + 1), r = i * a->T;
        uint64_t at = a->seed + (uint64_t)((lane * a->T + i) * a->T);
        for (int64_t j = 0; j < nj; j++) {
            int keep = (bfit_mix64(at + (uint64_t)j) >> 32) >= a->thresh;
            dst[r + j] = keep ? src[r + j] * inv : 0.0f;
            if (g)
                g[r + j] = keep ? g[r + j] * inv : 0.0f;
        }
        for (int64_t j = nj; j < a->T; j++) {
            dst[r + j] = 0.0f;
            if (g)
                g[r + j] = 0.0f;
        }
    }
}

/* Forward of one lane: P into p, each row's L into lse if given, Y (of P,
 * or with dropout of D, made in d). */
static int fwd_lane(const attn *a, int64_t lane, const view *w, float *p, float *lse, float *d)
{
    if (scores(a, w, p))
        return -1;
    BFIT_CPU_PICK(softmax_rows)(a, p, lse);
    if (a->drop > 0)
        drop_rows(a, lane, p, d, NULL);
    return times_p(a, 1.0f, a->drop > 0 ? d : p, w->v, w->ld, w->y, w->ldy);
}

/* T rows of hs columns between a 16-bit buffer (element off, rows of ld)
 * and f32 rows of ldf. */
static void cols_in(const attn *a, const void *src, int64_t off, int64_t ld, float *dst, int64_t ldf)
{
    for (int64_t t = 0; t < a->T; t++)
        bfit_cpu_widen(src, a->dt, off + t * ld, dst + t * ldf, a->hs);
}

static void cols_out(const attn *a, const float *src, int64_t ldf, void *dst, int64_t off, int64_t ld)
{
    for (int64_t t = 0; t < a->T; t++)
        bfit_cpu_narrow(src + t * ldf, dst, a->dt, off + t * ld, a->hs);
}

/* Lane (b, h)'s operands: in place (f32), or its q, k, v (and in backward
 * dy) converted into the slot (16-bit), results left in the slot. */
static view lane_view(const attn *a, const bfit_op_args *o, int64_t lane, const slot *s, int bwd)
{
    int64_t b = lane / a->H, h = lane % a->H, off = b * a->T * 3 * a->C + h * a->hs;
    int64_t yoff = b * a->T * a->C + h * a->hs;
    view w = {0};
    if (a->dt == BFIT_F32) {
        w.q = (const float *)o->src + off;
        w.ld = 3 * a->C;
        w.ldy = a->C;
        w.y = bwd ? NULL : (float *)o->dst + yoff;
        w.dy = bwd ? (const float *)o->diff_dst + yoff : NULL;
        w.dq = bwd ? (float *)o->diff_src + off : NULL;
    } else {
        w.q = s->qkv;
        w.ld = 3 * a->hs;
        w.ldy = a->hs;
        for (int k = 0; k < 3; k++)
            cols_in(a, o->src, off + k * a->C, 3 * a->C, s->qkv + k * a->hs, w.ld);
        if (bwd)
            cols_in(a, o->diff_dst, yoff, a->C, s->y, w.ldy);
        w.y = bwd ? NULL : s->y;
        w.dy = bwd ? s->y : NULL;
        w.dq = bwd ? s->dqkv : NULL;
    }
    w.k = w.q + w.ld / 3;
    w.v = w.q + 2 * (w.ld / 3);
    w.dk = w.dq ? w.dq + w.ld / 3 : NULL;
    w.dv = w.dq ? w.dq + 2 * (w.ld / 3) : NULL;
    return w;
}

/* Where the slot of thread s begins, laid out. */
static slot slot_of(const attn *a, const bfit_op_args *o, int bwd, int64_t s)
{
    slot sl;
    size_t sb = slot_parts(a, bwd, NULL, NULL);
    slot_parts(a, bwd, o->workspace && sb ? (char *)o->workspace + (size_t)s * sb : NULL, &sl);
    return sl;
}

/* One lane's work, run in scratch slot s. */
typedef int (*lane_fn)(const attn *a, const bfit_op_args *o, int64_t lane, int64_t s);

/* Every lane, spread over the threads: thread s < nslots runs lanes s,
 * s + nslots, ... in slot s. One slot: serially, sgemm using the threads. */
static int for_lanes(const attn *a, const bfit_op_args *o, int64_t nslots, lane_fn fn)
{
    int64_t nl = a->n * a->H;
    int bad = 0;
    if (nslots <= 1) {
        for (int64_t lane = 0; lane < nl && !bad; lane++)
            bad = fn(a, o, lane, 0);
        return bad;
    }
#pragma omp parallel
    {
        int64_t nt = omp_get_num_threads() < nslots ? omp_get_num_threads() : nslots, s = omp_get_thread_num();
        for (int64_t lane = s; s < nt && lane < nl; lane += nt)
            if (fn(a, o, lane, s))
                __atomic_store_n(&bad, 1, __ATOMIC_RELAXED);
    }
    return bad;
}

static int fwd_one(const attn *a0, const bfit_op_args *o, int64_t lane, int64_t s)
{
    attn l = lane_dims(a0, o, lane);
    const attn *a = &l;
    slot sl = slot_of(a, o, 0, s);
    view w = lane_view(a, o, lane, &sl, 0);
    float *p = sl.p ? sl.p : (float *)o->saved + lane * a->T * a->T; /* f32 stored: P where it is kept */
    float *lse = a->training && a->lean ? (float *)o->saved + lane * a->T : NULL;
    int64_t yoff = lane / a->H * a->T * a->C + lane % a->H * a->hs, tt = a->T * a->T;

    if (fwd_lane(a, lane, &w, p, lse, sl.d))
        return -1;
    if (a->dt == BFIT_F32)
        return 0;
    cols_out(a, w.y, w.ldy, o->dst, yoff, a->C);
    if (a->training && !a->lean) /* the stored P, in the data's dtype */
        bfit_cpu_narrow(p, o->saved, a->dt, lane * tt, tt);
    return 0;
}

static int run_fwd(cpu_op *op, const bfit_op_args *o)
{
    attn a = dims(&op->base.desc, o->seed);
    int64_t nslots = (int64_t)(intptr_t)op->extra;

    if (!o->src || !o->dst || (a.training && !o->saved) || (op->ws && !o->workspace))
        return bfit_fail(BFIT_EINVAL, "attention forward: src, dst%s%s are required", a.training ? ", saved" : "",
                         op->ws ? ", workspace" : "");
    if (for_lanes(&a, o, nslots, fwd_one))
        return bfit_fail(BFIT_EDEVICE, "oneDNN: sgemm failed in attention forward");
    return BFIT_OK;
}

/* Row i of the lean backward's P: exp(S - L), masked columns 0. */
static inline __attribute__((always_inline)) void exp_in(const attn *a, float *r, float l, int64_t i)
{
    int64_t nj = keys_to(a, i + 1), nv = vec_cols(a, nj);
#pragma omp simd
    for (int64_t j = 0; j < nv; j++) {
        float e = bfit_expf(r[j] - l);
        r[j] = j < nj ? e : 0.0f;
    }
    for (int64_t j = nv; j < a->T; j++)
        r[j] = 0.0f;
}

BFIT_CPU_VARIANTS(void, exp_row, (const attn *a, float *r, float l, int64_t i), { exp_in(a, r, l, i); })

/* The lean backward's P: the scores again, exponentiated against L. */
static int recompute_p(const attn *a, const view *w, const float *lse, float *p)
{
    void (*row)(const attn *, float *, float, int64_t) = BFIT_CPU_PICK(exp_row);
    if (scores(a, w, p))
        return -1;
    for (int64_t i = 0; i < a->T; i++)
        row(a, p + i * a->T, lse[i], i);
    return 0;
}

/* dP (in place) becomes dS = P * (dP - rowsum(P * dP)); masked entries,
 * which dP never computed, become 0. */
static inline __attribute__((always_inline)) void softmax_bwd_in(const attn *a, const float *p, float *dp)
{
    for (int64_t i = 0; i < a->T; i++) {
        int64_t nj = keys_to(a, i + 1), nv = vec_cols(a, nj);
        const float *pr = p + i * a->T;
        float *g = dp + i * a->T;
        double dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j < nv; j++)
            dot += j < nj ? (double)pr[j] * g[j] : 0.0;
#pragma omp simd
        for (int64_t j = 0; j < nv; j++)
            g[j] = j < nj ? pr[j] * (g[j] - (float)dot) : 0.0f;
        for (int64_t j = nv; j < a->T; j++)
            g[j] = 0.0f;
    }
}

BFIT_CPU_VARIANTS(void, softmax_bwd, (const attn *a, const float *p, float *dp), { softmax_bwd_in(a, p, dp); })

/* dst (rows of ldd) = alpha P^T B (rows of ldb), by blocks of P's columns:
 * under a causal mask column j is 0 in every row above j, so a block's
 * product starts at the row of its first column. */
static int p_t_times(const attn *a, float alpha, const float *P, const float *B, int64_t ldb, float *dst,
                     int64_t ldd)
{
    for (int64_t c0 = 0; c0 < a->T; c0 += ROW_BLOCK) {
        int64_t c1 = c0 + ROW_BLOCK < a->T ? c0 + ROW_BLOCK : a->T, i0 = a->causal ? c0 : 0;
        if (sgemm('T', 'N', c1 - c0, a->hs, a->T - i0, alpha, P + i0 * a->T + c0, a->T, B + i0 * ldb, ldb,
                  dst + c0 * ldd, ldd))
            return -1;
    }
    return 0;
}

/* d: with dropout, scratch for D */
static int bwd_lane(const attn *a, int64_t lane, const view *w, const float *p, float *dp, float *d)
{
    /* dP = dY V^T: a row block needs only its columns */
    for (int64_t r0 = 0; r0 < a->T; r0 += ROW_BLOCK) {
        int64_t r1 = r0 + ROW_BLOCK < a->T ? r0 + ROW_BLOCK : a->T, nc = keys_to(a, r1);
        if (sgemm('N', 'T', r1 - r0, nc, a->hs, 1.0f, w->dy + r0 * w->ldy, w->ldy, w->v, w->ld, dp + r0 * a->T, a->T))
            return -1;
    }
    if (a->drop > 0) /* dV = D^T dY; the gradient reaching P is the mask's of dD */
        drop_rows(a, lane, p, d, dp);
    if (p_t_times(a, 1.0f, a->drop > 0 ? d : p, w->dy, w->ldy, w->dv, w->ld))
        return -1;
    BFIT_CPU_PICK(softmax_bwd)(a, p, dp);
    if (times_p(a, a->scale, dp, w->k, w->ld, w->dq, w->ld))
        return -1;
    return p_t_times(a, a->scale, dp, w->q, w->ld, w->dk, w->ld);
}

/* The lane's P for backward: kept (f32 in place, 16-bit widened into the
 * slot), or recomputed (lean). */
static const float *bwd_p(const attn *a, const bfit_op_args *o, const view *w, const slot *sl, int64_t lane)
{
    int64_t tt = a->T * a->T;
    if (a->lean)
        return recompute_p(a, w, (const float *)o->saved + lane * a->T, sl->p) ? NULL : sl->p;
    if (a->dt == BFIT_F32)
        return (const float *)o->saved + lane * tt;
    bfit_cpu_widen(o->saved, a->dt, lane * tt, sl->p, tt);
    return sl->p;
}

static int bwd_one(const attn *a0, const bfit_op_args *o, int64_t lane, int64_t s)
{
    attn l = lane_dims(a0, o, lane);
    const attn *a = &l;
    slot sl = slot_of(a, o, 1, s);
    view w = lane_view(a, o, lane, &sl, 1);
    const float *p = bwd_p(a, o, &w, &sl, lane);
    int64_t off = lane / a->H * a->T * 3 * a->C + lane % a->H * a->hs;

    if (!p || bwd_lane(a, lane, &w, p, sl.dp, sl.d))
        return -1;
    for (int k = 0; a->dt != BFIT_F32 && k < 3; k++)
        cols_out(a, sl.dqkv + k * a->hs, w.ld, o->diff_src, off + k * a->C, 3 * a->C);
    return 0;
}

static int run_bwd(cpu_op *op, const bfit_op_args *o)
{
    attn a = dims(&op->base.desc, o->seed);
    int64_t nslots = (int64_t)(intptr_t)op->extra;

    if (!o->src || !o->diff_dst || !o->diff_src || !o->saved || !o->workspace)
        return bfit_fail(BFIT_EINVAL, "attention backward: src, diff_dst, diff_src, saved and workspace are required");
    if (for_lanes(&a, o, nslots, bwd_one))
        return bfit_fail(BFIT_EDEVICE, "oneDNN: sgemm failed in attention backward");
    return BFIT_OK;
}

int bfit_cpu_attn_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    attn a = dims(d, 0);
    int64_t slots = slots_of(&a);
    size_t kept = a.lean ? sizeof(float) : (size_t)a.T * bfit_dtype_size(a.dt); /* per row: L, or P's row */

    if (a.n < 1 || a.T < 1 || a.H < 1 || a.hs < 1)
        return bfit_fail(BFIT_EINVAL, "attention: sizes must be positive, got n=%lld T=%lld H=%lld hs=%lld",
                         (long long)a.n, (long long)a.T, (long long)a.H, (long long)a.hs);
    if (a.dt != BFIT_F32 && a.dt != BFIT_BF16 && a.dt != BFIT_F16)
        return bfit_fail(BFIT_EINVAL, "attention: %s is not supported on the cpu (f32, bf16, f16)",
                         bfit_dtype_name(a.dt));
    if (d->kind == BFIT_OP_ATTN_BWD && !a.training)
        return bfit_fail(BFIT_EINVAL, "attention backward: the op must be made for training");
    if (!(d->u.attn.p >= 0 && d->u.attn.p < 1))
        return bfit_fail(BFIT_EINVAL, "attention: dropout probability must be in [0, 1), got %g", (double)d->u.attn.p);
    op->extra = (void *)(intptr_t)slots;
    op->saved = !a.training ? 0 : BFIT_ALIGN_UP((size_t)(a.n * a.H * a.T) * kept);
    op->ws = (size_t)slots * slot_parts(&a, d->kind == BFIT_OP_ATTN_BWD, NULL, NULL);
    op->run = d->kind == BFIT_OP_ATTN_FWD ? run_fwd : run_bwd;
    return BFIT_OK;
}
