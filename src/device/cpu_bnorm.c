/* cpu_bnorm.c - batch normalisation over the channels of nchw data, on
 * loops of our own and oneDNN.
 *
 * Forward training normalises with the batch statistics and writes them
 * (mean, biased variance) to args mean/var, and moves the running
 * statistics (args rmean/rvar, when given) PyTorch's way: running =
 * (1 - momentum) * running + momentum * stat, with the unbiased variance
 * for running_var. Forward eval uses the given mean/var. f32 forward is
 * ours on maps of OWN_PLAIN_HW values or more, oneDNN's on shorter rows.
 * Backward produces diff_src, diff_scale and diff_shift; oneDNN
 * overwrites the latter two, so with desc.accumulate it writes temporaries
 * placed after its scratchpad in the workspace, which are then added. When
 * diff_src is not wanted (NULL), the two parameter gradients are computed
 * by our own loop instead, which needs no buffer for an unwanted diff_src.
 * bf16 runs on loops of our own, forward and backward (simd loops over
 * f32 rows), whether oneDNN has bf16 kernels on the CPU or not.
 * desc.blk: data in nChw8c / nChw16c (a layout chain's, as conv's), f32
 * or bf16: our loops over a block's channels as one vector, forward
 * (fwd_own_blk) and backward (bwd_own_blk), their sums by chunks of
 * samples in the workspace. */
#include "base/err.h"
#include "device/cpu.h"

#include <math.h>
#include <string.h>

enum { P_FWD = 0, P_BWD = 1 };

static const dnnl_memory_desc_t *qmd(const_dnnl_primitive_desc_t pd, dnnl_query_t what)
{
    return dnnl_primitive_desc_query_md(pd, what, 0);
}

/* The values per channel that a training forward's statistics are over. */
static int64_t d_values(const bfit_op_desc *d) { return d->u.bnorm.n * d->u.bnorm.h * d->u.bnorm.w; }

/* n values per channel went into var. */
static void update_running(const bfit_op_desc *d, const bfit_op_args *a)
{
    float *rm = a->rmean, *rv = a->rvar;
    const float *mean = a->mean, *var = a->var;
    int64_t n = d_values(d);
    double mom = d->u.bnorm.momentum, unbias = (double)n / (double)(n - 1);

    for (int64_t k = 0; k < d->u.bnorm.c; k++) {
        rm[k] = (float)((1 - mom) * rm[k] + mom * mean[k]);
        rv[k] = (float)((1 - mom) * rv[k] + mom * var[k] * unbias);
    }
}

/* Our own loops go over a channel's values ROW at a time: bf16 data is
 * widened into a buffer on the stack (the device's cast, cpu_bf16.c), so
 * that each loop is one simd loop over f32 (sums in double, as before: only
 * their order changed). The device makes no f16 op. */
enum { ROW = 1024 };

/* len <= ROW values of p (f32 or bf16) from at as f32: bf16 widened into buf. */
static const float *widen(const void *p, bfit_dtype t, int64_t at, int64_t len, float *buf)
{
    if (t == BFIT_F32)
        return (const float *)p + at;
    bfit_cpu_bf16_cast((const uint16_t *)p + at, buf, len, 0);
    return buf;
}

/* Where len values for p (dtype t) from at are computed: p itself for f32,
 * else buf, which narrow() then stores. */
static float *out_row(void *p, bfit_dtype t, int64_t at, float *buf)
{
    return t == BFIT_F32 ? (float *)p + at : buf;
}

static void narrow(void *p, bfit_dtype t, int64_t at, int64_t len, const float *v)
{
    if (t != BFIT_F32)
        bfit_cpu_bf16_cast(v, (uint16_t *)p + at, len, 1);
}

/* A row of the statistics' loops, as f32, its length in *len: of cnt
 * samples' pieces of w values each, the first from at, the next stride
 * apart. Several short pieces (cnt > 1) are gathered into buf; one piece's
 * values from j0 on, at most ROW of them, are read as widen() reads. */
static const float *stat_row(const void *p, bfit_dtype t, int64_t at, int64_t stride, int64_t cnt, int64_t w,
                             int64_t j0, float *buf, int64_t *len)
{
    if (cnt == 1) {
        *len = w - j0 < ROW ? w - j0 : ROW;
        return widen(p, t, at + j0, *len, buf);
    }
    for (int64_t i = 0; i < cnt; i++, at += stride)
        if (t == BFIT_F32)
            memcpy(buf + i * w, (const float *)p + at, (size_t)w * sizeof(float));
        else
            bfit_cpu_bf16_cast((const uint16_t *)p + at, buf + i * w, w, 0);
    *len = cnt * w;
    return buf;
}

/* Where a row of stat_row's is computed: p itself for one piece of f32,
 * else buf, which put_row then stores. */
static float *row_out(void *p, bfit_dtype t, int64_t at, int64_t cnt, int64_t j0, float *buf)
{
    return cnt == 1 ? out_row(p, t, at + j0, buf) : buf;
}

/* The row v (len values, stat_row's shape) back into p. */
static void put_row(void *p, bfit_dtype t, int64_t at, int64_t stride, int64_t cnt, int64_t w, int64_t j0,
                    int64_t len, const float *v)
{
    if (cnt == 1) {
        narrow(p, t, at + j0, len, v);
        return;
    }
    for (int64_t i = 0; i < cnt; i++, at += stride)
        if (t == BFIT_F32)
            memcpy((float *)p + at, v + i * w, (size_t)w * sizeof(float));
        else
            bfit_cpu_bf16_cast(v + i * w, (uint16_t *)p + at, w, 1);
}

/* Channel k's values (nchw) in stat_row's rows: from sample i on, cnt
 * samples' maps when a map is shorter than ROW (DenseNet's 2x2 at 64x64:
 * a row per sample was 4 values, each a call and a loop), else one
 * sample's from offset j0; at is the first piece's start, stride the next's. */
#define FOR_ROWS(n, c, hw, k, i, j0, cnt, at)                                                                          \
    for (int64_t i = 0, per_ = (hw) < ROW ? ROW / (hw) : 1, cnt = (n) < per_ ? (n) : per_, at = (k) * (hw); i < (n); \
         i += per_, cnt = (n)-i < per_ ? (n)-i : per_, at = (i * (c) + (k)) * (hw))                                  \
        for (int64_t j0 = 0; j0 < (hw); j0 += ROW)

/* Chan, Golub and LeVeque's update: the statistics of a set of *cn values
 * (mean *m, sum of squared deviations from it *q) joined by those of nb
 * more (mean mb, squares qb). */
static void chan_join(double *cn, double *m, double *q, double nb, double mb, double qb)
{
    double nn = *cn + nb, dl = mb - *m;
    *m += dl * (nb / nn);
    *q += qb + dl * dl * (*cn * nb / nn);
    *cn = nn;
}

/* The batch statistics of channel k in one pass over memory: each row (in
 * the L1 cache) in two, its mean and then the squares about it, in double;
 * the rows joined by chan_join. Two passes over the whole map before. */
static void stats_own(const bfit_op_desc *d, const void *src, int64_t k, double *m, double *v)
{
    const int64_t n = d->u.bnorm.n, c = d->u.bnorm.c, hw = d->u.bnorm.h * d->u.bnorm.w;
    const int64_t per = hw < ROW ? ROW / hw : 1; /* samples a row holds (stat_row) */
    double cn = 0, mean = 0, ss = 0;
    float xb[ROW];

    for (int64_t i = 0; i < n; i += per)
        for (int64_t j0 = 0; j0 < hw; j0 += ROW) {
            int64_t len;
            const float *x = stat_row(src, d->dtype, (i * c + k) * hw, c * hw, n - i < per ? n - i : per, hw, j0,
                                      xb, &len);
            double s = 0, q = 0, rm;
#pragma omp simd reduction(+ : s)
            for (int64_t j = 0; j < len; j++)
                s += x[j];
            rm = s / (double)len;
#pragma omp simd reduction(+ : q)
            for (int64_t j = 0; j < len; j++)
                q += ((double)x[j] - rm) * ((double)x[j] - rm);
            chan_join(&cn, &mean, &ss, (double)len, rm, q);
        }
    *m = mean;
    *v = ss / cn;
}

/* Forward by our own loops: training takes the batch statistics into
 * mean/var; eval reads them. */
static void fwd_own(const bfit_op_desc *d, const bfit_op_args *a)
{
    int64_t n = d->u.bnorm.n, c = d->u.bnorm.c, hw = d->u.bnorm.h * d->u.bnorm.w;
    const float *g = a->scale, *b = a->shift;
    float *mean = a->mean, *var = a->var;
    bfit_dtype t = d->dtype;

#pragma omp parallel for
    for (int64_t k = 0; k < c; k++) {
        double m = mean[k], v = var[k];
        float xb[ROW], yb[ROW], mf, sc, sh;
        if (d->u.bnorm.training) {
            stats_own(d, a->src, k, &m, &v);
            mean[k] = (float)m;
            var[k] = (float)v;
        }
        /* y in f32 as the blocked loops' (one subtraction and one FMA):
         * in double it took twice the vectors */
        mf = (float)m, sc = (float)(g[k] / sqrt(v + d->u.bnorm.eps)), sh = b[k];
        FOR_ROWS(n, c, hw, k, i, j0, cnt, at) {
            int64_t len;
            const float *x = stat_row(a->src, t, at, c * hw, cnt, hw, j0, xb, &len);
            float *y = row_out(a->dst, t, at, cnt, j0, yb);
#pragma omp simd
            for (int64_t j = 0; j < len; j++)
                y[j] = fmaf(x[j] - mf, sc, sh);
            put_row(a->dst, t, at, c * hw, cnt, hw, j0, len, y);
        }
    }
}

/* fwd_own_blk's and bwd_own_blk's sums are over this many chunks of the
 * samples, each chunk's partial sums held in the workspace and added in
 * chunk order: a count of the op's sizes alone, so that the sums are the
 * same whatever the threads. Chunks times channel blocks are the work the
 * threads share: with one block (16 channels) the samples alone spread it.
 * At most BLK_CHUNKS, and each chunk at least BLK_CHUNK_MIN values of a
 * block: on short maps (MobileNetV2's 2x2 of 960 channels) chunks of a
 * sample or two were more tasks and joins than values. */
#define BLK_CHUNKS 16
#define BLK_CHUNK_MIN 4096
static int64_t blk_chunks(const bfit_op_desc *d)
{
    int64_t n = d->u.bnorm.n, p = n * d->u.bnorm.h * d->u.bnorm.w * d->u.bnorm.blk / BLK_CHUNK_MIN;
    p = p < n ? p : n;
    return p < 1 ? 1 : p < BLK_CHUNKS ? p : BLK_CHUNKS;
}

/* The blocked loops are written once, for a block of B lanes, and called
 * through BLK_B with B a constant (16 or 8, the desc's): their per-lane
 * sums then stay in registers; with B read from the desc they went through
 * the stack at every position. */
#define BLK_FN static inline __attribute__((always_inline))
#define BLK_B(f, d, ...) ((d)->u.bnorm.blk == 16 ? f##_b(d, __VA_ARGS__, 16) : f##_b(d, __VA_ARGS__, 8))

/* Block kb's statistics over samples [i0, i1), per lane: the mean in
 * mq[l], the sum of squared deviations from it in qq[l]. Each row (ROW
 * values, whole positions: ROW is a multiple of B; in the L1 cache) in two
 * passes in f32, its sums and then the squares about its mean; the rows
 * joined in double (chan_join). One pass over memory, where the means and
 * then the squares about them took two. */
BLK_FN void blk_stats_b(const bfit_op_desc *d, const void *src, int64_t kb, int64_t i0, int64_t i1, double *mq,
                        double *qq, const int64_t B)
{
    const int64_t hw = d->u.bnorm.h * d->u.bnorm.w, nb = d->u.bnorm.c / B, row = hw * B;
    const int64_t per = row < ROW ? ROW / row : 1; /* samples a row holds (stat_row) */
    double cn = 0, m[16] = {0}, q[16] = {0};
    float xb[ROW];

    for (int64_t i = i0; i < i1; i += per)
        for (int64_t j0 = 0; j0 < row; j0 += ROW) {
            int64_t len, np;
            const float *x = stat_row(src, d->dtype, (i * nb + kb) * row, nb * row, i1 - i < per ? i1 - i : per,
                                      row, j0, xb, &len);
            np = len / B;
            float r[16] = {0}, rm[16], r1[16] = {0}, r2[16] = {0};
            for (int64_t p = 0; p < len; p += B)
#pragma omp simd
                for (int64_t l = 0; l < B; l++)
                    r[l] += x[p + l];
            for (int64_t l = 0; l < B; l++)
                rm[l] = r[l] / (float)np;
            for (int64_t p = 0; p < len; p += B)
#pragma omp simd
                for (int64_t l = 0; l < B; l++) {
                    r1[l] += x[p + l] - rm[l];
                    r2[l] = fmaf(x[p + l] - rm[l], x[p + l] - rm[l], r2[l]);
                }
            for (int64_t l = 0; l < B; l++) {
                /* rm is off the row's mean by f32's sum of values far from
                 * 0: the deviations' sum r1 corrects it (the corrected
                 * two-pass algorithm) */
                double c0 = cn, d1 = (double)r1[l] / (double)np;
                chan_join(&c0, &m[l], &q[l], (double)np, rm[l] + d1, r2[l] - d1 * r1[l]);
            }
            cn += (double)np;
        }
    for (int64_t l = 0; l < B; l++)
        mq[l] = m[l], qq[l] = q[l];
}

/* The chunks' statistics of each channel (means pm[q c + k], squared
 * deviations pq[q c + k]; chunk q over samples [n q / P, n (q + 1) / P) of
 * hw values each) joined in chunk order: the mean into pm[k] (chunk 0's
 * place) and mean[k], the biased variance into pq[k] and var[k]. Inside a
 * parallel region. */
static void fold_stats(double *pm, double *pq, int64_t n, int64_t P, int64_t c, int64_t hw, float *mean, float *var)
{
#pragma omp for schedule(static)
    for (int64_t k = 0; k < c; k++) {
        double cn = 0, m = 0, q = 0;
        for (int64_t p = 0; p < P; p++)
            chan_join(&cn, &m, &q, (double)((n * (p + 1) / P - n * p / P) * hw), pm[p * c + k], pq[p * c + k]);
        pm[k] = m, pq[k] = q / cn;
        mean[k] = (float)m, var[k] = (float)pq[k];
    }
}

/* Samples [i0, i1)'s y in block kb from the batch statistics (pm, pv:
 * training) or the given ones (pm NULL: eval); the lanes' constants once
 * for the samples (per sample before: on short maps, such as DenseNet's
 * last 2x2, their square roots and divisions outweighed the values). */
BLK_FN void blk_norm_b(const bfit_op_desc *d, const bfit_op_args *a, const double *pm, const double *pv, int64_t i0,
                       int64_t i1, int64_t kb, const int64_t B)
{
    const int64_t hw = d->u.bnorm.h * d->u.bnorm.w, nb = d->u.bnorm.c / B, row = hw * B;
    const float *g = a->scale, *b = a->shift, *mean = a->mean, *var = a->var;
    float xb[ROW], yb[ROW], mf[16], sc[16], sh[16];

    for (int64_t l = 0; l < B; l++) {
        const int64_t k = kb * B + l;
        double m = pm ? pm[k] : mean[k], v = pm ? pv[k] : var[k];
        mf[l] = (float)m, sc[l] = (float)(g[k] / sqrt(v + d->u.bnorm.eps)), sh[l] = b[k];
    }
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j0 = 0, at = (i * nb + kb) * row; j0 < row; j0 += ROW, at += ROW) {
            const int64_t len = row - j0 < ROW ? row - j0 : ROW;
            const float *x = widen(a->src, d->dtype, at, len, xb);
            float *y = out_row(a->dst, d->dtype, at, yb);
            for (int64_t q = 0; q < len; q += B)
#pragma omp simd
                for (int64_t l = 0; l < B; l++)
                    y[q + l] = fmaf(x[q + l] - mf[l], sc[l], sh[l]);
            narrow(a->dst, d->dtype, at, len, y);
        }
}

/* fwd_own on nChw{B}c data (f32 or bf16, as widen() reads it): training's
 * statistics by chunks of samples (blk_chunks, blk_stats) into part (2 x
 * chunks x c doubles: the op's workspace), each chunk's means and squared
 * deviations, joined in chunk order (fold_stats); y = (x - mean) scale' +
 * shift in f32 (one subtraction and one FMA, within 2 roundings of the
 * output; bf16 rounded once more), by chunk and block (blk_norm). By block
 * alone before, one thread did all of a 16-channel net's. oneDNN's
 * bnorm_jit took a blocked batch norm before that: MobileNetV2's gradients
 * against PyTorch float64 erred 3.5 times PyTorch float32's (median over
 * its tensors; nchw 1.1), its batch statistics the most. */
static void fwd_own_blk(const bfit_op_desc *d, const bfit_op_args *a, double *part)
{
    const int64_t n = d->u.bnorm.n, c = d->u.bnorm.c, B = d->u.bnorm.blk, nb = c / B, P = blk_chunks(d);
    const int64_t hw = d->u.bnorm.h * d->u.bnorm.w;
    const int train = d->u.bnorm.training;
    double *pm = part, *pv = train ? part + P * c : NULL;

#pragma omp parallel
    {
        if (train) { /* eval skips these loops and their barriers */
#pragma omp for collapse(2) schedule(static)
            for (int64_t q = 0; q < P; q++)
                for (int64_t kb = 0; kb < nb; kb++)
                    BLK_B(blk_stats, d, a->src, kb, n * q / P, n * (q + 1) / P, pm + q * c + kb * B,
                          pv + q * c + kb * B);
            fold_stats(pm, pv, n, P, c, hw, a->mean, a->var);
        }
#pragma omp for collapse(2) schedule(static)
        for (int64_t q = 0; q < P; q++)
            for (int64_t kb = 0; kb < nb; kb++)
                BLK_B(blk_norm, d, a, train ? pm : NULL, pv, n * q / P, n * (q + 1) / P, kb);
    }
}

static int run_fwd(cpu_op *op, const bfit_op_args *a)
{
    dnnl_primitive_desc_t pd = op->pd[P_FWD];
    /* scale, shift, mean and var are all plain f32 [c]: one md serves them */
    const dnnl_memory_desc_t *cmd = qmd(pd, dnnl_query_weights_md);
    cpu_arg args[] = {
        {DNNL_ARG_SRC, a->src, qmd(pd, dnnl_query_src_md)},
        {DNNL_ARG_DST, a->dst, qmd(pd, dnnl_query_dst_md)},
        {DNNL_ARG_SCALE, a->scale, cmd},
        {DNNL_ARG_SHIFT, a->shift, cmd},
        {DNNL_ARG_MEAN, a->mean, cmd},
        {DNNL_ARG_VARIANCE, a->var, cmd},
    };
    int rc;

    if (!a->src || !a->dst || !a->scale || !a->shift || !a->mean || !a->var)
        return bfit_fail(BFIT_EINVAL, "batch norm forward: src, dst, scale, shift, mean, var are required");
    if (!a->rmean != !a->rvar)
        return bfit_fail(BFIT_EINVAL, "batch norm forward: rmean and rvar go together");
    if (op->base.desc.u.bnorm.training && d_values(&op->base.desc) < 2)
        /* an op of one value per channel may be made (its memory is planned)
         * but not run: the unbiased variance of one value is undefined */
        return bfit_fail(BFIT_EINVAL, "cpu batch norm: training needs more than one value per channel, got %lld",
                         (long long)d_values(&op->base.desc));
    if (!pd && op->base.desc.u.bnorm.blk && op->ws && !a->workspace)
        rc = bfit_fail(BFIT_EINVAL, "batch norm forward: blocked training needs the workspace (%zu bytes)", op->ws);
    else if (!pd && op->base.desc.u.bnorm.blk) /* our own loops (init) */
        fwd_own_blk(&op->base.desc, a, a->workspace), rc = BFIT_OK;
    else if (!pd)
        fwd_own(&op->base.desc, a), rc = BFIT_OK;
    else
        rc = bfit_cpu_exec(op, P_FWD, args, 6, a->workspace, "batch normalization forward");
    if (rc == BFIT_OK && a->rmean && op->base.desc.u.bnorm.training)
        update_running(&op->base.desc, a);
    return rc;
}

/* Backward by our own loops, x^ from the input x: (x - mean) / sqrt(var +
 * eps); or (from_dst) from the forward's output y (in-place activated batch
 * norm, Rota Bulo et al. 2018): x^ = (y - shift) / scale recovers what the
 * input gave, so the input need not be kept. Per channel, with N values:
 *   dshift += sum dy, dscale += sum dy x^,
 *   dx = scale / sqrt(var + eps) * (dy - sum dy / N - x^ sum(dy x^) / N).
 * A channel whose scale is 0 gave y = shift everywhere: x^ cannot be
 * recovered from y, and is taken as 0 (its dx is 0 then; its dscale is
 * lost). */
static void bwd_own(const bfit_op_desc *d, const bfit_op_args *a, int from_dst)
{
    int64_t n = d->u.bnorm.n, c = d->u.bnorm.c, hw = d->u.bnorm.h * d->u.bnorm.w;
    double cnt = (double)(n * hw);
    const float *g = a->scale, *b = a->shift, *mean = a->mean, *var = a->var;
    bfit_dtype t = d->dtype;

#pragma omp parallel for
    for (int64_t k = 0; k < c; k++) {
        double sdy = 0, sdyx = 0, rstd = 1.0 / sqrt((double)var[k] + d->u.bnorm.eps), mdy, mdyx;
        double coef = g[k] * rstd, off = from_dst ? b[k] : mean[k];
        double inv = from_dst ? (g[k] != 0.0f ? 1.0 / g[k] : 0.0) : rstd;
        float xb[ROW], gb[ROW], ob[ROW], fo, fa, fb, fc;
        FOR_ROWS(n, c, hw, k, i, j0, pieces, at) {
            int64_t len;
            const float *x = stat_row(a->src, t, at, c * hw, pieces, hw, j0, xb, &len);
            const float *dy = stat_row(a->diff_dst, t, at, c * hw, pieces, hw, j0, gb, &len);
#pragma omp simd reduction(+ : sdy, sdyx)
            for (int64_t j = 0; j < len; j++) {
                sdy += dy[j];
                sdyx += dy[j] * (((double)x[j] - off) * inv);
            }
        }
        ((float *)a->diff_shift)[k] = (float)((d->accumulate ? ((float *)a->diff_shift)[k] : 0) + sdy);
        ((float *)a->diff_scale)[k] = (float)((d->accumulate ? ((float *)a->diff_scale)[k] : 0) + sdyx);
        if (!a->diff_src)
            continue;
        mdy = sdy / cnt, mdyx = sdyx / cnt;
        /* dx in f32 as blk_dx's: in double it took twice the vectors */
        fo = (float)off, fa = (float)coef, fb = (float)(-coef * inv * mdyx), fc = (float)(-coef * mdy);
        FOR_ROWS(n, c, hw, k, i, j0, pieces, at) {
            int64_t len;
            const float *x = stat_row(a->src, t, at, c * hw, pieces, hw, j0, xb, &len);
            const float *dy = stat_row(a->diff_dst, t, at, c * hw, pieces, hw, j0, gb, &len);
            float *dx = row_out(a->diff_src, t, at, pieces, j0, ob);
#pragma omp simd
            for (int64_t j = 0; j < len; j++)
                dx[j] = fmaf(fa, dy[j], fmaf(fb, x[j] - fo, fc));
            put_row(a->diff_src, t, at, c * hw, pieces, hw, j0, len, dx);
        }
    }
}

/* Block kb's per-lane constants: x^ = (v - off) inv, dx = coef (...). */
static void blk_consts(const bfit_op_desc *d, const bfit_op_args *a, int from_dst, int64_t kb, double *off,
                       double *inv, double *coef)
{
    const float *g = a->scale, *b = a->shift, *mean = a->mean, *var = a->var;
    for (int64_t l = 0; l < d->u.bnorm.blk; l++) {
        int64_t k = kb * d->u.bnorm.blk + l;
        double rstd = 1.0 / sqrt((double)var[k] + d->u.bnorm.eps);
        coef[l] = g[k] * rstd;
        off[l] = from_dst ? b[k] : mean[k];
        inv[l] = from_dst ? (g[k] != 0.0f ? 1.0 / g[k] : 0.0) : rstd;
    }
}

/* Block kb's sums of dy and dy x^ over samples [i0, i1), per lane, into
 * out[2 l], out[2 l + 1]: f32 within a row, double across rows, x^'s
 * factor inv applied to a row's sum. A sample's block is hw B values,
 * taken ROW at a time (whole positions: ROW is a multiple of B), bf16
 * widened to f32. */
BLK_FN void blk_sums_b(const bfit_op_desc *d, const bfit_op_args *a, int from_dst, int64_t kb, int64_t i0,
                       int64_t i1, double *out, const int64_t B)
{
    const int64_t hw = d->u.bnorm.h * d->u.bnorm.w, nb = d->u.bnorm.c / B, row = hw * B;
    double sdy[16] = {0}, sdyx[16] = {0}, off[16], inv[16], coef[16];
    float xb[ROW], gb[ROW], fo[16], fi[16];

    blk_consts(d, a, from_dst, kb, off, inv, coef);
    for (int64_t l = 0; l < B; l++)
        fo[l] = (float)off[l], fi[l] = (float)inv[l];
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j0 = 0, at = (i * nb + kb) * row; j0 < row; j0 += ROW, at += ROW) {
            const int64_t len = row - j0 < ROW ? row - j0 : ROW;
            const float *xr = widen(a->src, d->dtype, at, len, xb), *gr = widen(a->diff_dst, d->dtype, at, len, gb);
            float s1[16] = {0}, s2[16] = {0};
            for (int64_t q = 0; q < len; q += B)
#pragma omp simd
                for (int64_t l = 0; l < B; l++) {
                    s1[l] += gr[q + l];
                    s2[l] = fmaf(gr[q + l], xr[q + l] - fo[l], s2[l]);
                }
            for (int64_t l = 0; l < B; l++)
                sdy[l] += s1[l], sdyx[l] += (double)s2[l] * fi[l];
        }
    for (int64_t l = 0; l < B; l++)
        out[2 * l] = sdy[l], out[2 * l + 1] = sdyx[l];
}

/* Samples [i0, i1)'s dx in block kb from the means of the sums (m[2 l],
 * m[2 l + 1]); the lanes' constants once for the samples, as blk_norm. */
BLK_FN void blk_dx_b(const bfit_op_desc *d, const bfit_op_args *a, int from_dst, int64_t i0, int64_t i1,
                     int64_t kb, const double *m, const int64_t B)
{
    const int64_t hw = d->u.bnorm.h * d->u.bnorm.w, nb = d->u.bnorm.c / B, row = hw * B;
    double off[16], inv[16], coef[16];
    float xb[ROW], gb[ROW], ob[ROW], fo[16], fa[16], fb[16], fc[16];

    /* dx = coef (dy - mdy) - coef inv mdyx (v - off) in f32: one
     * subtraction and two FMAs from per-lane constants rounded once */
    blk_consts(d, a, from_dst, kb, off, inv, coef);
    for (int64_t l = 0; l < B; l++)
        fo[l] = (float)off[l], fa[l] = (float)coef[l], fb[l] = (float)(-coef[l] * inv[l] * m[2 * l + 1]),
        fc[l] = (float)(-coef[l] * m[2 * l]);
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j0 = 0, at = (i * nb + kb) * row; j0 < row; j0 += ROW, at += ROW) {
            const int64_t len = row - j0 < ROW ? row - j0 : ROW;
            const float *xr = widen(a->src, d->dtype, at, len, xb);
            const float *gr = widen(a->diff_dst, d->dtype, at, len, gb);
            float *o = out_row(a->diff_src, d->dtype, at, ob);
            for (int64_t q = 0; q < len; q += B)
#pragma omp simd
                for (int64_t l = 0; l < B; l++)
                    o[q + l] = fmaf(fa[l], gr[q + l], fmaf(fb[l], xr[q + l] - fo[l], fc[l]));
            narrow(a->diff_src, d->dtype, at, len, o);
        }
}

/* bwd_own on nChw{B}c data: at each position a block's B channels are
 * contiguous, so the loops run over them as one vector; per channel the
 * sums and the dx of bwd_own, the sums f32 within a row and double across
 * (blk_sums), dx in f32 (blk_dx). The sums by chunks of samples into part
 * (blk_chunks(d) x c pairs, the op's workspace), added in chunk order;
 * then dx by sample and block. oneDNN's blocked kernel
 * did this before for f32 (split over the samples too), but its threads
 * meet at a barrier of its own that spins: with two threads on one core
 * (packed beside another job) resnet-mini's batch norm backward took 10
 * times as long as with one (docs/performance.md). These meet at
 * libgomp's. */
static void bwd_own_blk(const bfit_op_desc *d, const bfit_op_args *a, int from_dst, double *part)
{
    const int64_t n = d->u.bnorm.n, c = d->u.bnorm.c, B = d->u.bnorm.blk, nb = c / B, P = blk_chunks(d);
    const double cnt = (double)(n * d->u.bnorm.h * d->u.bnorm.w);
    float *ds = a->diff_scale, *dh = a->diff_shift;

#pragma omp parallel
    {
#pragma omp for collapse(2) schedule(static)
        for (int64_t q = 0; q < P; q++)
            for (int64_t kb = 0; kb < nb; kb++)
                BLK_B(blk_sums, d, a, from_dst, kb, n * q / P, n * (q + 1) / P, part + 2 * (q * c + kb * B));
#pragma omp for schedule(static)
        for (int64_t k = 0; k < c; k++) {
            double sdy = 0, sdyx = 0;
            for (int64_t q = 0; q < P; q++)
                sdy += part[2 * (q * c + k)], sdyx += part[2 * (q * c + k) + 1];
            dh[k] = (float)((d->accumulate ? dh[k] : 0) + sdy);
            ds[k] = (float)((d->accumulate ? ds[k] : 0) + sdyx);
            part[2 * k] = sdy / cnt, part[2 * k + 1] = sdyx / cnt; /* chunk 0's place: the means, for dx */
        }
        if (a->diff_src) {
#pragma omp for collapse(2) schedule(static)
            for (int64_t q = 0; q < P; q++)
                for (int64_t kb = 0; kb < nb; kb++)
                    BLK_B(blk_dx, d, a, from_dst, n * q / P, n * (q + 1) / P, kb, part + 2 * kb * B);
        }
    }
}

static int run_bwd(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    dnnl_primitive_desc_t pd = op->pd[P_BWD];
    const dnnl_memory_desc_t *cmd = qmd(pd, dnnl_query_weights_md);
    float *ds = a->diff_scale, *dh = a->diff_shift;
    int64_t c = d->u.bnorm.c;
    int rc;

    if (!a->src || !a->diff_dst || !a->scale || !a->mean || !a->var || !ds || !dh)
        return bfit_fail(BFIT_EINVAL, "batch norm backward: src, diff_dst, scale, mean, var, diff_scale, "
                                      "diff_shift are required");
    if (d->u.bnorm.use_dst && !a->shift)
        return bfit_fail(BFIT_EINVAL, "batch norm backward from the output: shift is required");
    if (d->u.bnorm.blk) { /* our own loops, always (init) */
        if (!a->workspace)
            return bfit_fail(BFIT_EINVAL, "batch norm backward: blocked data needs the workspace (%zu bytes)",
                             op->ws);
        bwd_own_blk(d, a, d->u.bnorm.use_dst, a->workspace);
        return BFIT_OK;
    }
    /* our own loops (init), and the parameter gradients alone (no buffer
     * for an unwanted diff_src) */
    if (d->u.bnorm.use_dst || !pd || !a->diff_src) {
        bwd_own(d, a, d->u.bnorm.use_dst);
        return BFIT_OK;
    }
    if (d->accumulate) {
        char *ws = a->workspace;
        if (!ws)
            return bfit_fail(BFIT_EINVAL, "batch norm backward: accumulate needs the workspace");
        ds = (float *)(ws + BFIT_ALIGN_UP(op->pd_ws[P_BWD]));
        dh = (float *)((char *)ds + BFIT_ALIGN_UP((size_t)c * sizeof(float)));
    }
    {
        cpu_arg args[] = {
            {DNNL_ARG_SRC, a->src, qmd(pd, dnnl_query_src_md)},
            {DNNL_ARG_MEAN, a->mean, cmd},
            {DNNL_ARG_VARIANCE, a->var, cmd},
            {DNNL_ARG_DIFF_DST, a->diff_dst, qmd(pd, dnnl_query_diff_dst_md)},
            {DNNL_ARG_SCALE, a->scale, cmd},
            /* oneDNN checks that SHIFT is given though backward never reads
             * it; any [c] buffer will do when the caller has none */
            {DNNL_ARG_SHIFT, a->shift ? a->shift : a->scale, cmd},
            {DNNL_ARG_DIFF_SRC, a->diff_src, qmd(pd, dnnl_query_diff_src_md)},
            {DNNL_ARG_DIFF_SCALE, ds, qmd(pd, dnnl_query_diff_weights_md)},
            {DNNL_ARG_DIFF_SHIFT, dh, qmd(pd, dnnl_query_diff_weights_md)},
        };
        rc = bfit_cpu_exec(op, P_BWD, args, 9, a->workspace, "batch normalization backward");
    }
    if (rc != BFIT_OK || !d->accumulate)
        return rc;
    for (int64_t k = 0; k < c; k++) {
        ((float *)a->diff_scale)[k] += ds[k];
        ((float *)a->diff_shift)[k] += dh[k];
    }
    return BFIT_OK;
}

/* An f32 forward on nchw maps of at least this many values per channel
 * runs on fwd_own: twice as fast as oneDNN's nchw kernel on a net of 24
 * and 40 channels at 28x28 and 14x14 (0.63 -> 0.31 s over 123 calls, 1
 * thread; 0.37 -> 0.16 s with 2). A row shorter than this (BatchNorm1d's
 * features, hw 1) would make its loops per sample mostly overhead, and
 * oneDNN keeps those. Its nchw backward was as fast as ours: it stays. */
#define OWN_PLAIN_HW 16
static int own_plain_fwd(const bfit_op_desc *d)
{
    return d->kind == BFIT_OP_BNORM_FWD && d->u.bnorm.h * d->u.bnorm.w >= OWN_PLAIN_HW;
}

int bfit_cpu_bnorm_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t sd[4] = {d->u.bnorm.n, d->u.bnorm.c, d->u.bnorm.h, d->u.bnorm.w};
    int train = d->kind == BFIT_OP_BNORM_BWD || d->u.bnorm.training;
    unsigned flags = dnnl_use_scale | dnnl_use_shift | (train ? 0u : (unsigned)dnnl_use_global_stats);
    dnnl_memory_desc_t src;
    dnnl_batch_normalization_desc_t fd, bd;
    dnnl_primitive_attr_t attr;
    dnnl_status_t s;
    size_t hint_ws = 0, ws = 0;
    int rc;

    if (sd[0] < 1 || sd[1] < 1 || sd[2] < 1 || sd[3] < 1 || !(d->u.bnorm.eps >= 0))
        return bfit_fail(BFIT_EINVAL, "cpu batch norm: bad sizes %lldx%lldx%lldx%lld or eps %g", (long long)sd[0],
                         (long long)sd[1], (long long)sd[2], (long long)sd[3], (double)d->u.bnorm.eps);
    if (d->kind != BFIT_OP_BNORM_FWD && d->kind != BFIT_OP_BNORM_BWD)
        return bfit_fail(BFIT_EINVAL, "cpu batch norm: op kind %d is not a batch norm", (int)d->kind);
    if (d->u.bnorm.blk && ((d->u.bnorm.blk != 8 && d->u.bnorm.blk != 16) || sd[1] % d->u.bnorm.blk ||
                           (d->dtype != BFIT_F32 && d->dtype != BFIT_BF16)))
        return bfit_fail(BFIT_EINVAL, "cpu batch norm: blocked data (blk %d) must be f32 or bf16 in blocks of 8 "
                         "or 16 of its %lld channels", d->u.bnorm.blk, (long long)sd[1]);
    if ((d->kind == BFIT_OP_BNORM_BWD && d->u.bnorm.use_dst) || d->u.bnorm.blk || own_plain_fwd(d) ||
        bfit_cpu_compute_dt(cpu_dev(op), d->dtype) != d->dtype || d->dtype == BFIT_BF16) {
        /* our own loops (fwd_own, bwd_own; blocked data: bwd_own_blk's sums
         * in the workspace, fwd_own_blk's): no primitive, no scratch; bf16
         * where oneDNN has no bf16 kernels too, as its f32 primitive would
         * need three f32 copies in the workspace (cpu_bf16.c: 9.2 MiB per
         * ResNet-50 sample, its largest workspace), and where it has them
         * (AVX-512 with bf16): its nchw kernel (ncsp_bnorm) made ResNet-18's
         * bf16 step at 32 1.33 times as long */
        op->run = d->kind == BFIT_OP_BNORM_FWD ? run_fwd : run_bwd;
        /* the chunks' sums: bwd_own_blk's, a training fwd_own_blk's */
        op->ws = d->u.bnorm.blk && (d->kind == BFIT_OP_BNORM_BWD || d->u.bnorm.training)
                     ? (size_t)blk_chunks(d) * (size_t)sd[1] * 2 * sizeof(double)
                     : 0;
        op->saved = 0;
        return BFIT_OK;
    }
    rc = d->u.bnorm.blk ? bfit_cpu_md_blocked(&src, sd, d->dtype, d->u.bnorm.blk) : bfit_cpu_md_dt(&src, 4, sd, d->dtype);
    if (rc != BFIT_OK)
        return rc;
    /* the backward pd's hint must be the training forward */
    CPU_TRY(dnnl_batch_normalization_forward_desc_init(&fd, train ? dnnl_forward_training : dnnl_forward_inference,
                                                       &src, d->u.bnorm.eps, flags),
            "batch normalization forward descriptor");
    rc = bfit_cpu_attr_user_scratchpad(&attr);
    if (rc != BFIT_OK)
        return rc;
    rc = bfit_cpu_pd_create(op, P_FWD, &fd, attr, NULL,
                       d->kind == BFIT_OP_BNORM_FWD ? &ws : &hint_ws);
    if (rc != BFIT_OK)
        goto free_attr;
    if (d->kind == BFIT_OP_BNORM_FWD) {
        op->run = run_fwd;
    } else {
        s = dnnl_batch_normalization_backward_desc_init(&bd, dnnl_backward, &src, &src, d->u.bnorm.eps, flags);
        if (s != dnnl_success) {
            rc = bfit_cpu_dnnl_check(s, "batch normalization backward descriptor");
            goto free_attr;
        }
        rc = bfit_cpu_pd_create(op, P_BWD, &bd, attr, op->pd[P_FWD], &ws);
        if (rc != BFIT_OK)
            goto free_attr;
        if (d->accumulate)
            ws = BFIT_ALIGN_UP(ws) + 2 * BFIT_ALIGN_UP((size_t)d->u.bnorm.c * sizeof(float));
        op->run = run_bwd;
    }
    op->ws = ws;
    op->saved = 0;
free_attr:
    dnnl_primitive_attr_destroy(attr);
    return rc;
}
