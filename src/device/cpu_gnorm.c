/* cpu_gnorm.c - GNORM_FWD/BWD: group normalisation, PyTorch's GroupNorm,
 * over [n, c, hw] in g groups of c/g channels: each (sample, group) row of
 * k = c/g * hw contiguous elements is normalised by its mean and biased
 * variance, then each channel scaled and shifted (f32 scale and shift, any
 * float dtype of data). Plain loops, a thread per row.
 *
 * The statistics are sums in double (two passes: the mean, then the
 * squares about it), kept as f32 for the backward. The backward sums per
 * (sample, channel) the parts of the scale's and shift's gradients into the
 * workspace, then a channel's samples in order: the same bits whatever the
 * thread count. Why not oneDNN: 2.6 has no group normalisation primitive
 * (its batch normalisation of a [1, n g, k] view would need the affine per
 * channel applied apart, and its statistics per call are not ours). */
#include "base/err.h"
#include "device/cpu.h"
#include "device/half.h"

#include <math.h>

typedef struct gn_geom {
    int64_t n, c, hw, g, cg, k; /* cg channels a group, k elements a row */
    float eps;
    bfit_dtype dt;
} gn_geom;

static gn_geom geom(const bfit_op_desc *d)
{
    gn_geom q = {d->u.gnorm.n, d->u.gnorm.c, d->u.gnorm.hw, d->u.gnorm.groups, 0, 0, d->u.gnorm.eps, d->dtype};
    q.cg = q.c / q.g;
    q.k = q.cg * q.hw;
    return q;
}

/* The sum of x[0..k) in double (sq: of (x - c)^2 instead), in 8 running
 * sums over the elements i mod 8, then added in a fixed tree: one chain of
 * additions would wait on each add's latency, 8 fill the vector lanes. The
 * order is the row's own, whatever the threads. */
static double sum8(const float *x, int64_t k, int sq, double c)
{
    double a[8] = {0};
    int64_t i = 0;

    for (; i + 8 <= k; i += 8)
        for (int j = 0; j < 8; j++) {
            double v = x[i + j] - c;
            a[j] += sq ? v * v : x[i + j];
        }
    for (int j = 0; i < k; i++, j++) {
        double v = x[i] - c;
        a[j] += sq ? v * v : x[i];
    }
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* Row r's mean and biased variance, in double (f32 data: 8 running sums,
 * sum8). */
static void row_stats(const gn_geom *q, const void *x, int64_t r, double *mean, double *var)
{
    int64_t at = r * q->k;
    double s = 0, ss = 0;

    if (q->dt == BFIT_F32) {
        const float *xf = (const float *)x + at;
        s = sum8(xf, q->k, 0, 0) / (double)q->k;
        ss = sum8(xf, q->k, 1, s);
    } else {
        for (int64_t i = 0; i < q->k; i++)
            s += bfit_ld(x, q->dt, at + i);
        s /= (double)q->k;
        for (int64_t i = 0; i < q->k; i++) {
            double v = bfit_ld(x, q->dt, at + i) - s;
            ss += v * v;
        }
    }
    *mean = s;
    *var = ss / (double)q->k;
}

static void fwd_row(const gn_geom *q, const bfit_op_args *a, int64_t r)
{
    const float *sc = a->scale, *sh = a->shift;
    double mean, var;
    float m, rs;

    row_stats(q, a->src, r, &mean, &var);
    m = (float)mean;
    rs = (float)(1.0 / sqrt(var + (double)q->eps));
    ((float *)a->mean)[r] = m;
    ((float *)a->var)[r] = (float)var;
    for (int64_t j = 0; j < q->cg; j++) {
        int64_t ch = (r % q->g) * q->cg + j, at = r * q->k + j * q->hw;
        float s = sc[ch], b = sh[ch];
        if (q->dt == BFIT_F32) {
            const float *xf = (const float *)a->src + at;
            float *yf = (float *)a->dst + at;
            for (int64_t p = 0; p < q->hw; p++)
                yf[p] = (xf[p] - m) * rs * s + b;
            continue;
        }
        for (int64_t p = 0; p < q->hw; p++) {
            float xh = (bfit_ld(a->src, q->dt, at + p) - m) * rs;
            bfit_st(a->dst, q->dt, at + p, xh * s + b);
        }
    }
}

static int run_fwd(cpu_op *op, const bfit_op_args *a)
{
    gn_geom q = geom(&op->base.desc);
    int64_t rows = q.n * q.g;

    if (!a->src || !a->dst || !a->scale || !a->shift || !a->mean || !a->var)
        return bfit_fail(BFIT_EINVAL, "group norm: src, dst, scale, shift, mean and var are required");
    BFIT_PAR_ROWS_IF(rows * q.k > BFIT_PAR_MIN, for (int64_t r = 0; r < rows; r++) { fwd_row(&q, a, r); });
    return BFIT_OK;
}

/* Row r: its channels' parts of the scale's and shift's gradients into
 * part[2 (s c + ch)], then dx (when asked; dx may be dy: each element is
 * read before it is written). */
static void bwd_row(const gn_geom *q, const bfit_op_args *a, int64_t r, double *part)
{
    const float *sc = a->scale;
    float m = ((const float *)a->mean)[r];
    float rs = (float)(1.0 / sqrt((double)((const float *)a->var)[r] + (double)q->eps));
    double sg = 0, sgx = 0;

    for (int64_t j = 0; j < q->cg; j++) {
        int64_t ch = (r % q->g) * q->cg + j, at = r * q->k + j * q->hw;
        double dg = 0, db = 0;
        if (q->dt == BFIT_F32) {
            const float *xf = (const float *)a->src + at, *gf = (const float *)a->diff_dst + at;
            for (int64_t p = 0; p < q->hw; p++) {
                float xh = (xf[p] - m) * rs;
                dg += (double)gf[p] * xh;
                db += gf[p];
            }
        } else {
            for (int64_t p = 0; p < q->hw; p++) {
                double dy = bfit_ld(a->diff_dst, q->dt, at + p);
                double xh = (double)((bfit_ld(a->src, q->dt, at + p) - m) * rs);
                dg += dy * xh;
                db += dy;
            }
        }
        part[2 * ((r / q->g) * q->c + ch)] = dg;
        part[2 * ((r / q->g) * q->c + ch) + 1] = db;
        sg += db * sc[ch];
        sgx += dg * sc[ch];
    }
    if (!a->diff_src)
        return;
    sg /= (double)q->k, sgx /= (double)q->k;
    for (int64_t j = 0; j < q->cg; j++) {
        int64_t ch = (r % q->g) * q->cg + j, at = r * q->k + j * q->hw;
        if (q->dt == BFIT_F32) {
            const float *xf = (const float *)a->src + at, *gf = (const float *)a->diff_dst + at;
            float *dx = (float *)a->diff_src + at;
            for (int64_t p = 0; p < q->hw; p++) {
                float xh = (xf[p] - m) * rs;
                dx[p] = (float)(rs * ((double)gf[p] * sc[ch] - sg - xh * sgx));
            }
            continue;
        }
        for (int64_t p = 0; p < q->hw; p++) {
            float xh = (bfit_ld(a->src, q->dt, at + p) - m) * rs;
            double g = (double)bfit_ld(a->diff_dst, q->dt, at + p) * sc[ch];
            bfit_st(a->diff_src, q->dt, at + p, (float)(rs * (g - sg - xh * sgx)));
        }
    }
}

static int run_bwd(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    gn_geom q = geom(d);
    int64_t rows = q.n * q.g;
    double *part = a->workspace;
    float *dsc = a->diff_scale, *dsh = a->diff_shift;

    if (!a->src || !a->diff_dst || !a->scale || !a->mean || !a->var || !dsc || !dsh || !part)
        return bfit_fail(BFIT_EINVAL, "group norm backward: src, diff_dst, scale, mean, var, diff_scale, diff_shift "
                                      "and the workspace are required");
    BFIT_PAR_ROWS_IF(rows * q.k > BFIT_PAR_MIN, for (int64_t r = 0; r < rows; r++) { bwd_row(&q, a, r, part); });
    for (int64_t ch = 0; ch < q.c; ch++) { /* a channel's samples in order */
        double g = 0, b = 0;
        for (int64_t s = 0; s < q.n; s++)
            g += part[2 * (s * q.c + ch)], b += part[2 * (s * q.c + ch) + 1];
        dsc[ch] = d->accumulate ? dsc[ch] + (float)g : (float)g;
        dsh[ch] = d->accumulate ? dsh[ch] + (float)b : (float)b;
    }
    return BFIT_OK;
}

int bfit_cpu_gnorm_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t n = d->u.gnorm.n, c = d->u.gnorm.c, hw = d->u.gnorm.hw, g = d->u.gnorm.groups;

    if (n < 1 || c < 1 || hw < 1 || g < 1 || c % g)
        return bfit_fail(BFIT_EINVAL, "group norm: n %lld, c %lld, hw %lld must be positive and the groups %lld "
                         "must divide the channels", (long long)n, (long long)c, (long long)hw, (long long)g);
    if (!(d->u.gnorm.eps > 0))
        return bfit_fail(BFIT_EINVAL, "group norm: eps must be positive, got %g", (double)d->u.gnorm.eps);
    op->saved = 0;
    op->ws = d->kind == BFIT_OP_GNORM_BWD ? (size_t)(2 * n * c) * sizeof(double) : 0;
    op->run = d->kind == BFIT_OP_GNORM_FWD ? run_fwd : run_bwd;
    return BFIT_OK;
}
