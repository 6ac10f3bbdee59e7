/* cpu_lnorm.c - LNORM_FWD/BWD: layer normalisation over the cols of
 * [rows, cols] with a per-column scale and shift.
 *
 * The forward always computes the row statistics into mean/var (the caller
 * provides them: kept for backward in training, scratch in eval).
 *
 * f32 is our own loops: oneDNN's simple_layer_normalization took 58 us a
 * forward and 73 us a backward call on gpt-nano's 1024 x 128 (batch 8) and
 * opened two parallel regions each, a thread woken per region where the
 * waits sleep. Ours open one: rows in parallel, a row's sums in double;
 * backward's column sums in a fixed number of row chunks whose partial
 * sums are added in order afterwards, so the result is the same bits
 * whatever the threads. bf16 stays oneDNN's, whose backward overwrites
 * diff_scale/diff_shift, so accumulation goes through two temporaries
 * placed after the scratchpad in the workspace, then is added.
 *
 * RMS (LLaMA's RMSNorm, u.lnorm.rms): the same loops without the mean, in
 * f32 and bf16 alike; goff, added to every scale, is Gemma's (1 + w). */
#include "base/err.h"
#include "device/cpu.h"
#include "device/cpu_isa.h"
#include "device/half.h"

#include <math.h>

/* ---- f32: our own loops ---------------------------------------------------- */

#define LN_CHUNKS 16 /* backward's row chunks: partial column sums, added in order */

static inline __attribute__((always_inline)) void row_fwd(const float *x, float *y, const float *g, const float *b,
                                                          int64_t C, float eps, int rms, float off, float *mean,
                                                          float *var)
{
    /* one pass, shifted by the row's first value: |mean - x0| is at most
     * sqrt(C) standard deviations, so the subtraction below cancels at
     * most log2(C) of the double sums' 53 bits. RMS: no mean, no shift. */
    double s = 0, q = 0, k = rms ? 0.0 : x[0];
#pragma omp simd reduction(+ : s, q)
    for (int64_t j = 0; j < C; j++) {
        double d = (double)x[j] - k;
        s += d;
        q += d * d;
    }
    double mu = rms ? 0.0 : s / (double)C, v = q / (double)C - mu * mu;
    float m = (float)(k + mu), vf = (float)(v > 0 ? v : 0), rs = 1.0f / sqrtf(vf + eps);
    if (b) {
#pragma omp simd
        for (int64_t j = 0; j < C; j++)
            y[j] = (x[j] - m) * rs * (g[j] + off) + b[j];
    } else {
#pragma omp simd
        for (int64_t j = 0; j < C; j++)
            y[j] = (x[j] - m) * rs * (g[j] + off);
    }
    *mean = m;
    *var = vf; /* biased, as PyTorch and oneDNN; RMS: the mean square */
}

/* dx of one row, and its terms added to the chunk's column sums pg, pb */
static inline __attribute__((always_inline)) void row_bwd(const float *x, const float *dy, float *dx, const float *g,
                                                          int64_t C, float eps, int rms, float off, float m,
                                                          float var, float *pg, float *pb)
{
    float rs = 1.0f / sqrtf(var + eps); /* the forward's, from what it saved */
    double a = 0, c = 0;
#pragma omp simd reduction(+ : a, c)
    for (int64_t j = 0; j < C; j++) {
        float gj = dy[j] * (g[j] + off);
        a += gj;
        c += (double)gj * ((x[j] - m) * rs);
    }
    float af = rms ? 0.0f : (float)(a / (double)C), cf = (float)(c / (double)C); /* RMS: no mean to move */
#pragma omp simd
    for (int64_t j = 0; j < C; j++) {
        float d = dy[j], xh = (x[j] - m) * rs; /* read before dx is written: dx may be dy (the layer's in place) */
        pg[j] += d * xh;
        pb[j] += d;
        dx[j] = rs * (d * (g[j] + off) - af - xh * cf);
    }
}

BFIT_CPU_VARIANTS(void, ln_fwd_loop,
                  (const float *x, float *y, const float *g, const float *b, int64_t R, int64_t C, float eps,
                   int rms, float off, float *mean, float *var),
                  { BFIT_PAR_ROWS_IF(R * C > BFIT_PAR_MIN, for (int64_t r = 0; r < R; r++)
                                row_fwd(x + r * C, y + r * C, g, b, C, eps, rms, off, mean + r, var + r);); })

/* part: P chunks' column sums of dy xhat, then P of dy, each C floats */
BFIT_CPU_VARIANTS(void, ln_bwd_loop,
                  (const float *x, const float *dy, float *dx, const float *g, const float *mean, const float *var,
                   int64_t R, int64_t C, float eps, int rms, float off, int64_t P, float *part),
                  {
                      BFIT_PAR_ROWS_IF(R * C > BFIT_PAR_MIN, for (int64_t p = 0; p < P; p++) {
                          float *pg = part + p * C, *pb = part + (P + p) * C;
                          for (int64_t j = 0; j < C; j++)
                              pg[j] = pb[j] = 0.0f;
                          for (int64_t r = R * p / P; r < R * (p + 1) / P; r++)
                              row_bwd(x + r * C, dy + r * C, dx + r * C, g, C, eps, rms, off, mean[r], var[r],
                                      pg, pb);
                      });
                  })

static int64_t chunks(const bfit_op_desc *d) { return d->u.lnorm.rows < LN_CHUNKS ? d->u.lnorm.rows : LN_CHUNKS; }

/* ---- bf16 RMS: our own too (oneDNN 2.7 has no RMS norm) ----------------------
 * The f32 loops' arithmetic on each value read as f32: sums in double, the
 * same chunks of rows for the weight's gradient. */

static void rms_fwd_bf16(const uint16_t *x, uint16_t *y, const float *g, int64_t R, int64_t C, float eps, float off,
                         float *mean, float *var)
{
    BFIT_PAR_ROWS_IF(R * C > BFIT_PAR_MIN, for (int64_t r = 0; r < R; r++) {
        const uint16_t *xr = x + r * C;
        uint16_t *yr = y + r * C;
        double q = 0;
        for (int64_t j = 0; j < C; j++) {
            double v = bfit_bf16_to_f32(xr[j]);
            q += v * v;
        }
        float vf = (float)(q / (double)C), rs = 1.0f / sqrtf(vf + eps);
        for (int64_t j = 0; j < C; j++)
            yr[j] = bfit_f32_to_bf16(bfit_bf16_to_f32(xr[j]) * rs * (g[j] + off));
        mean[r] = 0.0f;
        var[r] = vf;
    });
}

static void rms_bwd_bf16(const uint16_t *x, const uint16_t *dy, uint16_t *dx, const float *g, const float *var,
                         int64_t R, int64_t C, float eps, float off, int64_t P, float *part)
{
    BFIT_PAR_ROWS_IF(R * C > BFIT_PAR_MIN, for (int64_t p = 0; p < P; p++) {
        float *pg = part + p * C, *pb = part + (P + p) * C;
        for (int64_t j = 0; j < C; j++)
            pg[j] = pb[j] = 0.0f;
        for (int64_t r = R * p / P; r < R * (p + 1) / P; r++) {
            const uint16_t *xr = x + r * C, *dyr = dy + r * C;
            uint16_t *dxr = dx + r * C;
            float rs = 1.0f / sqrtf(var[r] + eps);
            double c = 0;
            for (int64_t j = 0; j < C; j++)
                c += (double)(bfit_bf16_to_f32(dyr[j]) * (g[j] + off)) * (bfit_bf16_to_f32(xr[j]) * rs);
            float cf = (float)(c / (double)C);
            for (int64_t j = 0; j < C; j++) {
                float d = bfit_bf16_to_f32(dyr[j]), xh = bfit_bf16_to_f32(xr[j]) * rs; /* dx may be dy */
                pg[j] += d * xh;
                pb[j] += d;
                dxr[j] = bfit_f32_to_bf16(rs * (d * (g[j] + off) - xh * cf));
            }
        }
    });
}

static int own_fwd(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    if (!a->src || !a->dst || !a->scale || (!a->shift && !d->u.lnorm.noshift) || !a->mean || !a->var)
        return bfit_fail(BFIT_EINVAL, "layer norm forward: src, dst, scale, shift, mean and var are required");
    if (d->dtype == BFIT_BF16) /* RMS only: a bf16 layer norm is oneDNN's */
        rms_fwd_bf16(a->src, a->dst, a->scale, d->u.lnorm.rows, d->u.lnorm.cols, d->u.lnorm.eps, d->u.lnorm.goff,
                     a->mean, a->var);
    else
        BFIT_CPU_PICK(ln_fwd_loop)(a->src, a->dst, a->scale, d->u.lnorm.noshift ? NULL : a->shift,
                                   d->u.lnorm.rows, d->u.lnorm.cols, d->u.lnorm.eps, d->u.lnorm.rms, d->u.lnorm.goff,
                                   a->mean, a->var);
    return BFIT_OK;
}

static int own_bwd(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t C = d->u.lnorm.cols, P = chunks(d);
    float *part = a->workspace, *gs = a->diff_scale, *gh = a->diff_shift;

    if (!a->src || !a->mean || !a->var || !a->diff_dst || !a->scale || !a->diff_src || !gs ||
        (!gh && !d->u.lnorm.noshift) || !part)
        return bfit_fail(BFIT_EINVAL, "layer norm backward: src, mean, var, diff_dst, scale, diff_src, "
                                      "diff_scale, diff_shift and a workspace are required");
    if (d->dtype == BFIT_BF16)
        rms_bwd_bf16(a->src, a->diff_dst, a->diff_src, a->scale, a->var, d->u.lnorm.rows, C, d->u.lnorm.eps,
                     d->u.lnorm.goff, P, part);
    else
        BFIT_CPU_PICK(ln_bwd_loop)(a->src, a->diff_dst, a->diff_src, a->scale, a->mean, a->var, d->u.lnorm.rows,
                                   C, d->u.lnorm.eps, d->u.lnorm.rms, d->u.lnorm.goff, P, part);
    for (int64_t j = 0; j < C; j++) {
        double sg = d->accumulate ? gs[j] : 0, sh = d->accumulate && !d->u.lnorm.noshift ? gh[j] : 0;
        for (int64_t p = 0; p < P; p++) {
            sg += part[p * C + j];
            sh += part[(P + p) * C + j];
        }
        gs[j] = (float)sg;
        if (!d->u.lnorm.noshift) /* the shift's gradient is computed with the others and dropped */
            gh[j] = (float)sh;
    }
    return BFIT_OK;
}

static int own_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    op->saved = 0;
    op->ws = d->kind == BFIT_OP_LNORM_FWD ? 0 : BFIT_ALIGN_UP((size_t)(2 * chunks(d) * d->u.lnorm.cols) * sizeof(float));
    op->run = d->kind == BFIT_OP_LNORM_FWD ? own_fwd : own_bwd;
    return BFIT_OK;
}

/* ---- bf16: oneDNN's ---------------------------------------------------------- */

static const_dnnl_memory_desc_t arg_md(const cpu_op *op, int arg)
{
    return dnnl_primitive_desc_query_md(op->pd[0], dnnl_query_exec_arg_md, arg);
}

static int run_fwd(cpu_op *op, const bfit_op_args *a)
{
    int noshift = op->base.desc.u.lnorm.noshift;
    const cpu_arg args[] = { /* without a shift: its slot is the last, left out */
        {DNNL_ARG_SRC, a->src, arg_md(op, DNNL_ARG_SRC)},
        {DNNL_ARG_DST, a->dst, arg_md(op, DNNL_ARG_DST)},
        {DNNL_ARG_SCALE, a->scale, arg_md(op, DNNL_ARG_SCALE)},
        {DNNL_ARG_MEAN, a->mean, arg_md(op, DNNL_ARG_MEAN)},
        {DNNL_ARG_VARIANCE, a->var, arg_md(op, DNNL_ARG_VARIANCE)},
        {DNNL_ARG_SHIFT, a->shift, noshift ? NULL : arg_md(op, DNNL_ARG_SHIFT)},
    };
    if (!a->src || !a->dst || !a->scale || (!a->shift && !noshift) || !a->mean || !a->var)
        return bfit_fail(BFIT_EINVAL, "layer norm forward: src, dst, scale, shift, mean and var are required");
    return bfit_cpu_exec(op, 0, args, noshift ? 5 : 6, a->workspace, "layer norm forward");
}

static int run_bwd(cpu_op *op, const bfit_op_args *a)
{
    int64_t cols = op->base.desc.u.lnorm.cols;
    int acc = op->base.desc.accumulate;
    /* temporaries sit after the (aligned) scratchpad; see init */
    size_t off = (size_t)(op->ws - 2 * BFIT_ALIGN_UP((size_t)cols * sizeof(float)));
    float *ds = acc ? (float *)((char *)a->workspace + off) : a->diff_scale;
    float *dh = acc ? ds + BFIT_ALIGN_UP((size_t)cols * sizeof(float)) / sizeof(float) : a->diff_shift;
    int noshift = op->base.desc.u.lnorm.noshift;
    const cpu_arg args[] = { /* without a shift: the last two slots are left out */
        {DNNL_ARG_SRC, a->src, arg_md(op, DNNL_ARG_SRC)},
        {DNNL_ARG_MEAN, a->mean, arg_md(op, DNNL_ARG_MEAN)},
        {DNNL_ARG_VARIANCE, a->var, arg_md(op, DNNL_ARG_VARIANCE)},
        {DNNL_ARG_DIFF_DST, a->diff_dst, arg_md(op, DNNL_ARG_DIFF_DST)},
        {DNNL_ARG_SCALE, a->scale, arg_md(op, DNNL_ARG_SCALE)},
        {DNNL_ARG_DIFF_SRC, a->diff_src, arg_md(op, DNNL_ARG_DIFF_SRC)},
        {DNNL_ARG_DIFF_SCALE, ds, arg_md(op, DNNL_ARG_DIFF_SCALE)},
        /* oneDNN 2.6 refuses a use_shift backward without a shift argument,
         * though the shift does not enter any gradient: any [cols] buffer */
        {DNNL_ARG_SHIFT, a->shift ? a->shift : a->scale, noshift ? NULL : arg_md(op, DNNL_ARG_SHIFT)},
        {DNNL_ARG_DIFF_SHIFT, dh, noshift ? NULL : arg_md(op, DNNL_ARG_DIFF_SHIFT)},
    };
    float *gs = a->diff_scale, *gh = a->diff_shift;
    int rc;

    if (!a->src || !a->mean || !a->var || !a->diff_dst || !a->scale || !a->diff_src || !gs || (!gh && !noshift) ||
        (acc && !a->workspace))
        return bfit_fail(BFIT_EINVAL, "layer norm backward: src, mean, var, diff_dst, scale, diff_src, "
                                      "diff_scale, diff_shift and a workspace are required");
    rc = bfit_cpu_exec(op, 0, args, noshift ? 7 : 9, a->workspace, "layer norm backward");
    if (rc != BFIT_OK || !acc)
        return rc;
    BFIT_PAR_FOR_IF(cols > 16384, for (int64_t j = 0; j < cols; j++) {
        gs[j] += ds[j];
        if (!noshift)
            gh[j] += dh[j];
    });
    return BFIT_OK;
}

int bfit_cpu_lnorm_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t dims[2] = {d->u.lnorm.rows, d->u.lnorm.cols};
    unsigned flags = dnnl_use_scale | (d->u.lnorm.noshift ? 0 : dnnl_use_shift);
    dnnl_memory_desc_t data, stat;
    dnnl_layer_normalization_desc_t fwd, bwd;
    dnnl_primitive_attr_t attr;
    size_t ws_hint = 0;
    int rc;

    if (dims[0] < 1 || dims[1] < 1)
        return bfit_fail(BFIT_EINVAL, "layer norm: rows and cols must be positive, got %lldx%lld",
                         (long long)dims[0], (long long)dims[1]);
    if (!(d->u.lnorm.eps > 0))
        return bfit_fail(BFIT_EINVAL, "layer norm: eps must be positive, got %g", (double)d->u.lnorm.eps);
    if (d->u.lnorm.rms && (!d->u.lnorm.noshift || (d->dtype != BFIT_F32 && d->dtype != BFIT_BF16)))
        return bfit_fail(BFIT_EINVAL, "RMS norm: no shift (noshift), in f32 or bf16");
    if (d->u.lnorm.goff != 0 && !(d->u.lnorm.rms && isfinite(d->u.lnorm.goff)))
        return bfit_fail(BFIT_EINVAL, "layer norm: an offset of the scale (%g) is the RMS norm's only",
                         (double)d->u.lnorm.goff);
    if (d->dtype == BFIT_F32 || d->u.lnorm.rms)
        return own_init(op);
    if ((rc = bfit_cpu_md_dt(&data, 2, dims, d->dtype)) != BFIT_OK || (rc = bfit_cpu_md(&stat, 1, dims)) != BFIT_OK)
        return rc;
    CPU_TRY(dnnl_layer_normalization_forward_desc_init(&fwd, dnnl_forward_training, &data, &stat,
                                                       d->u.lnorm.eps, flags),
            "layer norm forward descriptor");
    if ((rc = bfit_cpu_attr_user_scratchpad(&attr)) != BFIT_OK)
        return rc;
    op->ws = 0;
    op->saved = 0;
    if (d->kind == BFIT_OP_LNORM_FWD) {
        rc = bfit_cpu_pd_create(op, 0, &fwd, attr, NULL, &op->ws);
        op->run = run_fwd;
    } else {
        rc = bfit_cpu_pd_create(op, 1, &fwd, attr, NULL, &ws_hint);
        if (rc == BFIT_OK && dnnl_layer_normalization_backward_desc_init(&bwd, dnnl_backward, &data, &data, &stat,
                                                                         d->u.lnorm.eps, flags) != dnnl_success)
            rc = bfit_fail(BFIT_EDEVICE, "oneDNN: layer norm backward descriptor failed");
        if (rc == BFIT_OK)
            rc = bfit_cpu_pd_create(op, 0, &bwd, attr, op->pd[1], &op->ws);
        /* workspace: [scratchpad][diff_scale temp][diff_shift temp], 64-aligned */
        if (rc == BFIT_OK && d->accumulate)
            op->ws = BFIT_ALIGN_UP(op->ws) + 2 * BFIT_ALIGN_UP((size_t)dims[1] * sizeof(float));
        op->run = run_bwd;
    }
    dnnl_primitive_attr_destroy(attr);
    if (rc != BFIT_OK)
        return rc;
    return BFIT_OK;
}
