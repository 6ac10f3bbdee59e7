/* cpu_simple.c - the ops that are plain loops: REDUCE_ROWS, ADD, dropout,
 * softmax cross-entropy with the loss and the accuracy count, SCALE, the
 * gradient norms and CAST. Data of 16-bit dtypes is loaded to f32 and
 * stored back element by element (device/half.h); f32 keeps its own loops. OpenMP over large arrays; results do not depend on
 * the number of threads (each output element is computed by one thread in a
 * fixed order, and the loss is summed serially in double). */
#include "base/err.h"
#include "base/rand.h"
#include "device/cpu.h"
#include "device/cpu_exp.h"
#include "device/cpu_isa.h"
#include "device/half.h"

#include <math.h>

/* below this many elements a loop is not worth waking the thread team */
#define PAR_MIN 32768
#define RED_BLOCK 256

/* ---- REDUCE_ROWS: dst[N] (+)= sum over rows of src[M,N] ---- */

/* src of dtype t; dst (a bias gradient) f32 */
static inline __attribute__((always_inline)) void reduce_block(const void *src, bfit_dtype t, float *dst, int64_t M,
                                                                int64_t N, int64_t b, int acc)
{
    double s[RED_BLOCK];
    int64_t j0 = b * RED_BLOCK, nj = N - j0 < RED_BLOCK ? N - j0 : RED_BLOCK;
    for (int64_t j = 0; j < nj; j++)
        s[j] = 0;
    for (int64_t i = 0; i < M; i++) {
        if (t == BFIT_F32) {
            const float *row = (const float *)src + i * N + j0;
            for (int64_t j = 0; j < nj; j++)
                s[j] += row[j];
        } else if (t == BFIT_BF16) { /* the dtype known, the loop vectorises (bfit_ld's switch kept it scalar) */
            const uint16_t *row = (const uint16_t *)src + i * N + j0;
            for (int64_t j = 0; j < nj; j++)
                s[j] += bfit_bf16_to_f32(row[j]);
        } else {
            for (int64_t j = 0; j < nj; j++)
                s[j] += bfit_ld(src, t, i * N + j0 + j);
        }
    }
    for (int64_t j = 0; j < nj; j++)
        dst[j0 + j] = (float)(acc ? dst[j0 + j] + s[j] : s[j]);
}

/* column blocks: rows are read contiguously, each block summed in double;
 * a variant per instruction set (cpu_isa.h: AVX-512 converts and adds 8
 * doubles at a time, 1.4x the baseline's rate), the same sums */
BFIT_CPU_VARIANTS(void, reduce_loop, (const void *src, bfit_dtype t, float *dst, int64_t M, int64_t N, int acc), {
    int64_t nblk = (N + RED_BLOCK - 1) / RED_BLOCK;
    BFIT_PAR_FOR_IF(M * N > PAR_MIN, for (int64_t b = 0; b < nblk; b++) reduce_block(src, t, dst, M, N, b, acc););
})

static int run_reduce(cpu_op *op, const bfit_op_args *a)
{
    if (!a->src || !a->dst)
        return bfit_fail(BFIT_EINVAL, "reduce rows: src and dst are required");
    BFIT_CPU_PICK(reduce_loop)(a->src, op->base.desc.dtype, a->dst, op->base.desc.u.reduce.M, op->base.desc.u.reduce.N,
                               op->base.desc.accumulate);
    return BFIT_OK;
}

/* ---- ADD: dst = src + src2, or dst += src when accumulating ---- */

/* bf16 in a variant per instruction set, as the cast's (cpu_bf16.c): the
 * baseline build's loop stayed scalar (the residual adds of a bf16 step) */
BFIT_CPU_VARIANTS(void, add_bf16_loop, (const uint16_t *xh, const uint16_t *yh, uint16_t *dh, int64_t n), {
    BFIT_PAR_FOR_IF(n > PAR_MIN, for (int64_t i = 0; i < n; i++)
                                     dh[i] = bfit_f32_to_bf16(bfit_bf16_to_f32(xh[i]) + bfit_bf16_to_f32(yh[i])););
})

static int run_add(cpu_op *op, const bfit_op_args *a)
{
    int64_t n = op->base.desc.u.add.n;
    const void *x = a->src, *y = op->base.desc.accumulate ? a->dst : a->src2;
    void *dst = a->dst;
    bfit_dtype t = op->base.desc.dtype;

    if (!x || !y || !dst)
        return bfit_fail(BFIT_EINVAL, "add: src, %s and dst are required",
                         op->base.desc.accumulate ? "dst (accumulating)" : "src2");
    if (t == BFIT_F32) {
        const float *xf = x, *yf = y;
        float *df = dst;
        BFIT_PAR_FOR_IF(n > PAR_MIN, for (int64_t i = 0; i < n; i++) df[i] = xf[i] + yf[i];);
    } else if (t == BFIT_BF16) {
        BFIT_CPU_PICK(add_bf16_loop)(x, y, dst, n);
    } else {
        BFIT_PAR_FOR_IF(n > PAR_MIN, for (int64_t i = 0; i < n; i++)
                                         bfit_st(dst, t, i, bfit_ld(x, t, i) + bfit_ld(y, t, i)););
    }
    return BFIT_OK;
}

/* ---- dropout: the mask is a pure function of (seed, index) ---- */

/* the mask is a pure function of (seed, index): reproducible whatever the
 * threading, and recomputable from the seed alone */
static int run_drop_fwd(cpu_op *op, const bfit_op_args *a)
{
    int64_t n = op->base.desc.u.drop.n;
    float p = op->base.desc.u.drop.p, scale = 1.0f / (1.0f - p);
    /* keep element i when its 32-bit hash is >= p * 2^32: P(keep) = 1 - p */
    uint64_t thresh = (uint64_t)((double)p * 4294967296.0), s = bfit_mix64(a->seed);
    const void *x = a->src;
    void *y = a->dst;
    uint64_t *mask = a->saved;
    bfit_dtype t = op->base.desc.dtype;
    int64_t nw = (n + 63) / 64;

    if (!x || !y || !mask)
        return bfit_fail(BFIT_EINVAL, "dropout forward: src, dst and saved (the mask) are required");
    /* a word of 64 mask bits per iteration: no two threads write a word */
    BFIT_PAR_FOR_IF(n > PAR_MIN, for (int64_t w = 0; w < nw; w++) {
        uint64_t word = 0;
        int64_t lo = w * 64, hi = lo + 64 < n ? lo + 64 : n;
        for (int64_t i = lo; i < hi; i++) {
            uint64_t k = (bfit_mix64(s + (uint64_t)i) >> 32) >= thresh;
            word |= k << (i - lo);
            if (t == BFIT_F32)
                ((float *)y)[i] = k ? ((const float *)x)[i] * scale : 0.0f;
            else
                bfit_st(y, t, i, k ? bfit_ld(x, t, i) * scale : 0.0f);
        }
        mask[w] = word;
    });
    return BFIT_OK;
}

static int run_drop_bwd(cpu_op *op, const bfit_op_args *a)
{
    int64_t n = op->base.desc.u.drop.n;
    float scale = 1.0f / (1.0f - op->base.desc.u.drop.p);
    const void *dy = a->diff_dst;
    const uint64_t *mask = a->saved;
    void *dx = a->diff_src;
    bfit_dtype t = op->base.desc.dtype;

    if (!dy || !dx || !mask)
        return bfit_fail(BFIT_EINVAL, "dropout backward: diff_dst, diff_src and saved (the mask) are required");
#define KEEP(i) ((mask[(i) >> 6] >> ((i) & 63)) & 1u)
    if (t == BFIT_F32) {
        const float *g = dy;
        float *o = dx;
        BFIT_PAR_FOR_IF(n > PAR_MIN, for (int64_t i = 0; i < n; i++) o[i] = KEEP(i) ? g[i] * scale : 0.0f;);
    } else {
        BFIT_PAR_FOR_IF(n > PAR_MIN, for (int64_t i = 0; i < n; i++)
                                         bfit_st(dx, t, i, KEEP(i) ? bfit_ld(dy, t, i) * scale : 0.0f););
    }
#undef KEEP
    return BFIT_OK;
}

/* ---- softmax cross-entropy over rows of [M, N] ---- */

/* ignore: negative labels mark rows that count for nothing (padding) */
static int check_labels(const int32_t *labels, int64_t M, int64_t N, int ignore)
{
    for (int64_t i = 0; i < M; i++)
        if ((labels[i] < 0 && !ignore) || labels[i] >= N)
            return bfit_fail(BFIT_EINVAL, "cross-entropy: label %d of sample %lld is outside [0, %lld)",
                             (int)labels[i], (long long)i, (long long)N);
    return BFIT_OK;
}

/* One row of XENT_FWD: probabilities, and with labels the row's loss and
 * whether its arg-max (the first, on ties) is the label. Each exponential
 * once, in double (bfit_exp_d: the loop is a vector), kept rounded to f32
 * in the row until the sum is known; the sum and the loss from the
 * unrounded ones. 16-bit logits are widened into the row first. */
static inline __attribute__((always_inline)) void xent_row(const void *x, bfit_dtype t, float *pi, int64_t N,
                                                            const int32_t *labels, double *row_loss,
                                                            uint8_t *row_hit, int64_t i)
{
    int64_t best = 0;
    const float *xr = t == BFIT_F32 ? (const float *)x + i * N : pi;
    float mx, xl;
    double sum = 0;
    if (t != BFIT_F32)
        bfit_cpu_widen(x, t, i * N, pi, N);
    mx = xr[0];
    for (int64_t j = 1; j < N; j++)
        if (xr[j] > mx) {
            mx = xr[j];
            best = j;
        }
    xl = labels && labels[i] >= 0 ? xr[labels[i]] : 0.0f; /* before the row (xr, if 16-bit) is overwritten */
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < N; j++) {
        double e = bfit_exp_d((double)xr[j] - mx);
        sum += e;
        pi[j] = (float)e;
    }
#pragma omp simd
    for (int64_t j = 0; j < N; j++)
        pi[j] = (float)((double)pi[j] / sum);
    if (labels && labels[i] < 0) {
        row_loss[i] = 0;
        row_hit[i] = 0;
    } else if (labels) {
        row_loss[i] = log(sum) + mx - xl;
        row_hit[i] = best == labels[i];
    }
}

/* Every row; a variant per instruction set (cpu_isa.h): the sum's lanes
 * follow the vector width, so the loss may differ between them in its last
 * bits (each the same whatever the threads). */
BFIT_CPU_VARIANTS(void, xent_loop, (const void *x, bfit_dtype t, float *p, int64_t M, int64_t N,
                                    const int32_t *labels, double *row_loss, uint8_t *row_hit), {
    BFIT_PAR_FOR_IF(M * N > PAR_MIN,
                    for (int64_t i = 0; i < M; i++) xent_row(x, t, p + i * N, N, labels, row_loss, row_hit, i););
})

static size_t xent_ws(int64_t M) { return BFIT_ALIGN_UP((size_t)M * sizeof(double)) + BFIT_ALIGN_UP((size_t)M); }

/* XENT_FWD: dst = softmax(src) per row; with labels, stats[0] += the sum of
 * -log p[label], computed as logsumexp - x[label] (no log of a rounded
 * probability), and stats[1] += the rows predicted right. Per-row results go
 * to the workspace and are summed serially, so the sum does not depend on
 * the threads. */
static int run_xent_fwd(cpu_op *op, const bfit_op_args *a)
{
    int64_t M = op->base.desc.u.xent.M, N = op->base.desc.u.xent.N;
    const void *x = a->src;   /* logits of the op's dtype; the probabilities are f32 */
    float *p = a->dst;
    double *row_loss = a->workspace, *stats = a->stats, total = 0, hits = 0;
    uint8_t *row_hit = a->workspace ? (uint8_t *)a->workspace + BFIT_ALIGN_UP((size_t)M * sizeof(double)) : NULL;
    int rc;

    if (!x || !p)
        return bfit_fail(BFIT_EINVAL, "cross-entropy forward: src and dst are required");
    if (!a->labels != !a->stats)
        return bfit_fail(BFIT_EINVAL, "cross-entropy forward: labels and stats go together");
    if (a->labels) {
        if (!row_loss)
            return bfit_fail(BFIT_EINVAL, "cross-entropy forward: a workspace is required with labels");
        if ((rc = check_labels(a->labels, M, N, op->base.desc.u.xent.ignore)) != BFIT_OK)
            return rc;
    }
    BFIT_CPU_PICK(xent_loop)(x, op->base.desc.dtype, p, M, N, a->labels, row_loss, row_hit);
    if (a->labels) {
        for (int64_t i = 0; i < M; i++) {
            total += row_loss[i];
            hits += row_hit[i];
        }
        stats[0] += total;
        stats[1] += hits;
    }
    return BFIT_OK;
}

/* XENT_BWD: diff_src = (probs - onehot(label)) * loss_scale; probs come in
 * src (the forward's dst). */
static int run_xent_bwd(cpu_op *op, const bfit_op_args *a)
{
    int64_t M = op->base.desc.u.xent.M, N = op->base.desc.u.xent.N;
    const float *p = a->src;   /* the f32 probabilities; diff_src of the op's dtype */
    void *dx = a->diff_src;
    float s = a->loss_scale;
    bfit_dtype t = op->base.desc.dtype;
    int rc;

    if (!p || !dx || !a->labels)
        return bfit_fail(BFIT_EINVAL, "cross-entropy backward: src (the probabilities), labels and diff_src "
                                      "are required");
    if ((rc = check_labels(a->labels, M, N, op->base.desc.u.xent.ignore)) != BFIT_OK)
        return rc;
    BFIT_PAR_FOR_IF(M * N > PAR_MIN, for (int64_t i = 0; i < M; i++) {
        float keep = a->labels[i] < 0 ? 0.0f : s; /* an ignored row gets no gradient */
        for (int64_t j = 0; j < N; j++)
            bfit_st(dx, t, i * N + j, (p[i * N + j] - (j == a->labels[i] ? 1.0f : 0.0f)) * keep);
    });
    return BFIT_OK;
}

/* ---- SCALE: dst *= alpha (gradient clipping) ---- */

static int run_scale(cpu_op *op, const bfit_op_args *a)
{
    int64_t n = op->base.desc.u.scale.n;
    float *x = a->dst, f = a->alpha;
    if (!x)
        return bfit_fail(BFIT_EINVAL, "scale: dst is required");
    BFIT_PAR_FOR_IF(n >= PAR_MIN, for (int64_t i = 0; i < n; i++) x[i] *= f;);
    return BFIT_OK;
}

/* ---- NORMS: sums of squares in double over fixed chunks ---- */

/* The chunking depends only on n, never on the threads, which keeps the sum
 * the same bit for bit whatever the thread count: a resumed run clips
 * exactly as the original did. Small tensors are one chunk. */
#define NCHUNK 64

static inline __attribute__((always_inline)) void norms_chunk(const float *g, float *prev, int64_t lo, int64_t hi,
                                                               double *sq, double *dsq)
{
    double s = 0, d = 0;
    if (!prev) {
#pragma omp simd reduction(+ : s)
        for (int64_t i = lo; i < hi; i++)
            s += (double)g[i] * (double)g[i];
    } else {
#pragma omp simd reduction(+ : s, d)
        for (int64_t i = lo; i < hi; i++) {
            double x = g[i], y = x - prev[i];
            s += x * x;
            d += y * y;
            prev[i] = g[i];
        }
    }
    *sq = s;
    *dsq = d;
}

/* A variant per instruction set (cpu_isa.h): AVX-512 sums 8 doubles at a
 * time, twice the baseline's rate. The lanes of the sum of squares follow
 * the vector width, so the two may differ in the last bits (each is the
 * same whatever the threads). */
BFIT_CPU_VARIANTS(void, norms_loop, (const float *g, float *prev, int64_t n, int64_t nchunk, double *part,
                                     double *dpart), {
    int64_t len = (n + nchunk - 1) / nchunk;
    BFIT_PAR_FOR_IF(nchunk > 1, for (int64_t c = 0; c < nchunk; c++) {
        int64_t lo = c * len, hi = lo + len < n ? lo + len : n;
        norms_chunk(g, prev, lo < n ? lo : n, hi, &part[c], &dpart[c]);
    });
})

static int run_norms(cpu_op *op, const bfit_op_args *a)
{
    int64_t n = op->base.desc.u.norms.n, nchunk = n >= 2 * PAR_MIN ? NCHUNK : 1;
    double part[NCHUNK], dpart[NCHUNK], s = 0, d = 0, *out = a->stats;
    const float *g = a->src;
    float *prev = a->state0;

    if (!g || !out)
        return bfit_fail(BFIT_EINVAL, "norms: src and stats are required");
    BFIT_CPU_PICK(norms_loop)(g, prev, n, nchunk, part, dpart);
    for (int64_t c = 0; c < nchunk; c++) {
        s += part[c];
        d += dpart[c];
    }
    out[0] = s;
    if (prev)
        out[1] = d;
    return BFIT_OK;
}

/* ---- CAST: dst (to) = src (the op's dtype), rounding to nearest even ---- */

static int run_cast(cpu_op *op, const bfit_op_args *a)
{
    int64_t n = op->base.desc.u.cast.n;
    bfit_dtype from = op->base.desc.dtype, to = op->base.desc.u.cast.to;
    if (!a->src || !a->dst)
        return bfit_fail(BFIT_EINVAL, "cast: src and dst are required");
    if ((from == BFIT_F32 && to == BFIT_BF16) || (from == BFIT_BF16 && to == BFIT_F32))
        bfit_cpu_bf16_cast(a->src, a->dst, n, to == BFIT_BF16); /* cpu_bf16.c: vectorised */
    else
        BFIT_PAR_FOR_IF(n > PAR_MIN,
                        for (int64_t i = 0; i < n; i++) bfit_st(a->dst, to, i, bfit_ld(a->src, from, i)););
    return BFIT_OK;
}

static int positive(int64_t v, const char *what)
{
    if (v < 1)
        return bfit_fail(BFIT_EINVAL, "%s must be positive, got %lld", what, (long long)v);
    return BFIT_OK;
}

int bfit_cpu_simple_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    int rc = BFIT_OK;

    op->ws = 0;
    op->saved = 0;
    switch (d->kind) {
    case BFIT_OP_REDUCE_ROWS:
        if ((rc = positive(d->u.reduce.M, "reduce rows: M")) == BFIT_OK)
            rc = positive(d->u.reduce.N, "reduce rows: N");
        op->run = run_reduce;
        break;
    case BFIT_OP_ADD:
        rc = positive(d->u.add.n, "add: n");
        op->run = run_add;
        break;
    case BFIT_OP_DROPOUT_FWD:
    case BFIT_OP_DROPOUT_BWD:
        rc = positive(d->u.drop.n, "dropout: n");
        if (rc == BFIT_OK && !(d->u.drop.p >= 0.0f && d->u.drop.p < 1.0f))
            rc = bfit_fail(BFIT_EINVAL, "dropout: p must be in [0, 1), got %g", (double)d->u.drop.p);
        op->saved = (size_t)(d->u.drop.n + 63) / 64 * 8; /* one mask bit per element, in 64-bit words */
        op->run = d->kind == BFIT_OP_DROPOUT_FWD ? run_drop_fwd : run_drop_bwd;
        break;
    case BFIT_OP_XENT_FWD:
    case BFIT_OP_XENT_BWD:
        if ((rc = positive(d->u.xent.M, "cross-entropy: M")) == BFIT_OK)
            rc = positive(d->u.xent.N, "cross-entropy: N");
        if (d->kind == BFIT_OP_XENT_FWD)
            op->ws = xent_ws(d->u.xent.M); /* per-row losses and hits */
        op->run = d->kind == BFIT_OP_XENT_FWD ? run_xent_fwd : run_xent_bwd;
        break;
    case BFIT_OP_CAST:
        rc = positive(d->u.cast.n, "cast: n");
        if (rc == BFIT_OK && (!bfit_dtype_is_float(d->dtype) || !bfit_dtype_is_float(d->u.cast.to)))
            rc = bfit_fail(BFIT_EINVAL, "cast: between float dtypes only, got %s to %s", bfit_dtype_name(d->dtype),
                           bfit_dtype_name(d->u.cast.to));
        op->run = run_cast;
        break;
    case BFIT_OP_SCALE:
        rc = positive(d->u.scale.n, "scale: n");
        op->run = run_scale;
        break;
    case BFIT_OP_NORMS:
        rc = positive(d->u.norms.n, "norms: n");
        op->run = run_norms;
        break;
    default:
        rc = bfit_fail(BFIT_EINVAL, "cpu: op kind %d is not a plain-loop op", (int)d->kind);
        break;
    }
    return rc;
}
