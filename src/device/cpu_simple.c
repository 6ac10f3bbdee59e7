/* cpu_simple.c - the ops that are plain loops: REDUCE_ROWS, ADD, dropout,
 * softmax cross-entropy with the loss and the accuracy count, SCALE and the
 * gradient norms. OpenMP over large arrays; results do not depend on
 * the number of threads (each output element is computed by one thread in a
 * fixed order, and the loss is summed serially in double). */
#include "base/err.h"
#include "base/rand.h"
#include "device/cpu.h"

#include <math.h>

/* below this many elements a loop is not worth waking the thread team */
#define PAR_MIN 32768
#define RED_BLOCK 256

/* ---- REDUCE_ROWS: dst[N] (+)= sum over rows of src[M,N] ---- */

static void reduce_block(const float *src, float *dst, int64_t M, int64_t N, int64_t b, int acc)
{
    double s[RED_BLOCK];
    int64_t j0 = b * RED_BLOCK, nj = N - j0 < RED_BLOCK ? N - j0 : RED_BLOCK;
    for (int64_t j = 0; j < nj; j++)
        s[j] = 0;
    for (int64_t i = 0; i < M; i++) {
        const float *row = src + i * N + j0;
        for (int64_t j = 0; j < nj; j++)
            s[j] += row[j];
    }
    for (int64_t j = 0; j < nj; j++)
        dst[j0 + j] = (float)(acc ? dst[j0 + j] + s[j] : s[j]);
}

static int run_reduce(cpu_op *op, const bfit_op_args *a)
{
    int64_t M = op->base.desc.u.reduce.M, N = op->base.desc.u.reduce.N;
    int acc = op->base.desc.accumulate;
    const float *src = a->src;
    float *dst = a->dst;
    int64_t nblk = (N + RED_BLOCK - 1) / RED_BLOCK;

    if (!src || !dst)
        return bfit_fail(BFIT_EINVAL, "reduce rows: src and dst are required");
    /* column blocks: rows are read contiguously, each block summed in double */
    BFIT_PAR_FOR_IF(M * N > PAR_MIN, for (int64_t b = 0; b < nblk; b++) reduce_block(src, dst, M, N, b, acc););
    return BFIT_OK;
}

/* ---- ADD: dst = src + src2, or dst += src when accumulating ---- */

static int run_add(cpu_op *op, const bfit_op_args *a)
{
    int64_t n = op->base.desc.u.add.n;
    const float *x = a->src, *y = op->base.desc.accumulate ? a->dst : a->src2;
    float *dst = a->dst;

    if (!x || !y || !dst)
        return bfit_fail(BFIT_EINVAL, "add: src, %s and dst are required",
                         op->base.desc.accumulate ? "dst (accumulating)" : "src2");
    BFIT_PAR_FOR_IF(n > PAR_MIN, for (int64_t i = 0; i < n; i++) dst[i] = x[i] + y[i];);
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
    const float *x = a->src;
    float *y = a->dst;
    uint8_t *mask = a->saved;

    if (!x || !y || !mask)
        return bfit_fail(BFIT_EINVAL, "dropout forward: src, dst and saved (the mask) are required");
    BFIT_PAR_FOR_IF(n > PAR_MIN, for (int64_t i = 0; i < n; i++) {
        uint8_t k = (bfit_mix64(s + (uint64_t)i) >> 32) >= thresh;
        mask[i] = k;
        y[i] = k ? x[i] * scale : 0.0f;
    });
    return BFIT_OK;
}

static int run_drop_bwd(cpu_op *op, const bfit_op_args *a)
{
    int64_t n = op->base.desc.u.drop.n;
    float scale = 1.0f / (1.0f - op->base.desc.u.drop.p);
    const float *dy = a->diff_dst;
    const uint8_t *mask = a->saved;
    float *dx = a->diff_src;

    if (!dy || !dx || !mask)
        return bfit_fail(BFIT_EINVAL, "dropout backward: diff_dst, diff_src and saved (the mask) are required");
    BFIT_PAR_FOR_IF(n > PAR_MIN, for (int64_t i = 0; i < n; i++) dx[i] = mask[i] ? dy[i] * scale : 0.0f;);
    return BFIT_OK;
}

/* ---- softmax cross-entropy over rows of [M, N] ---- */

static int check_labels(const int32_t *labels, int64_t M, int64_t N)
{
    for (int64_t i = 0; i < M; i++)
        if (labels[i] < 0 || labels[i] >= N)
            return bfit_fail(BFIT_EINVAL, "cross-entropy: label %d of sample %lld is outside [0, %lld)",
                             (int)labels[i], (long long)i, (long long)N);
    return BFIT_OK;
}

/* One row of XENT_FWD: probabilities, and with labels the row's loss and
 * whether its arg-max (the first, on ties) is the label. */
static void xent_row(const float *xi, float *pi, int64_t N, const int32_t *labels, double *row_loss,
                     uint8_t *row_hit, int64_t i)
{
    float mx = xi[0];
    int64_t best = 0;
    double sum = 0;
    for (int64_t j = 1; j < N; j++)
        if (xi[j] > mx) {
            mx = xi[j];
            best = j;
        }
    for (int64_t j = 0; j < N; j++)
        sum += exp((double)xi[j] - mx);
    for (int64_t j = 0; j < N; j++)
        pi[j] = (float)(exp((double)xi[j] - mx) / sum);
    if (labels) {
        row_loss[i] = log(sum) + mx - xi[labels[i]];
        row_hit[i] = best == labels[i];
    }
}

static size_t xent_ws(int64_t M) { return BFIT_ALIGN_UP((size_t)M * sizeof(double)) + BFIT_ALIGN_UP((size_t)M); }

/* XENT_FWD: dst = softmax(src) per row; with labels, stats[0] += the sum of
 * -log p[label], computed as logsumexp - x[label] (no log of a rounded
 * probability), and stats[1] += the rows predicted right. Per-row results go
 * to the workspace and are summed serially, so the sum does not depend on
 * the threads. */
static int run_xent_fwd(cpu_op *op, const bfit_op_args *a)
{
    int64_t M = op->base.desc.u.xent.M, N = op->base.desc.u.xent.N;
    const float *x = a->src;
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
        if ((rc = check_labels(a->labels, M, N)) != BFIT_OK)
            return rc;
    }
    BFIT_PAR_FOR_IF(M * N > PAR_MIN, for (int64_t i = 0; i < M; i++) xent_row(x + i * N, p + i * N, N,
                                                                     a->labels, row_loss, row_hit, i););
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
    const float *p = a->src;
    float *dx = a->diff_src, s = a->loss_scale;
    int rc;

    if (!p || !dx || !a->labels)
        return bfit_fail(BFIT_EINVAL, "cross-entropy backward: src (the probabilities), labels and diff_src "
                                      "are required");
    if ((rc = check_labels(a->labels, M, N)) != BFIT_OK)
        return rc;
    BFIT_PAR_FOR_IF(M * N > PAR_MIN, for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++)
            dx[i * N + j] = p[i * N + j] * s;
        dx[i * N + a->labels[i]] = (p[i * N + a->labels[i]] - 1.0f) * s;
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

static void norms_chunk(const float *g, float *prev, int64_t lo, int64_t hi, double *sq, double *dsq)
{
    double s = 0, d = 0;
    if (!prev) {
#pragma omp simd reduction(+ : s)
        for (int64_t i = lo; i < hi; i++)
            s += (double)g[i] * (double)g[i];
    } else {
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

static int run_norms(cpu_op *op, const bfit_op_args *a)
{
    int64_t n = op->base.desc.u.norms.n, nchunk = n >= 2 * PAR_MIN ? NCHUNK : 1, len = (n + nchunk - 1) / nchunk;
    double part[NCHUNK], dpart[NCHUNK], s = 0, d = 0, *out = a->stats;
    const float *g = a->src;
    float *prev = a->state0;

    if (!g || !out)
        return bfit_fail(BFIT_EINVAL, "norms: src and stats are required");
    BFIT_PAR_FOR_IF(nchunk > 1, for (int64_t c = 0; c < nchunk; c++) {
        int64_t lo = c * len, hi = lo + len < n ? lo + len : n;
        norms_chunk(g, prev, lo < n ? lo : n, hi, &part[c], &dpart[c]);
    });
    for (int64_t c = 0; c < nchunk; c++) {
        s += part[c];
        d += dpart[c];
    }
    out[0] = s;
    if (prev)
        out[1] = d;
    return BFIT_OK;
}

static int positive(int64_t v, const char *what)
{
    if (v < 1)
        return bfit_fail(BFIT_EINVAL, "%s must be positive, got %lld", what, (long long)v);
    return BFIT_OK;
}

int cpu_simple_init(cpu_op *op)
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
        op->saved = (size_t)d->u.drop.n; /* one mask byte per element */
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
