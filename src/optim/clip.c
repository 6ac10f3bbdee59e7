/* clip.c - global gradient norm and clipping by it. */
#include "optim/clip.h"
#include "base/err.h"

#include <math.h>

/* The chunking depends only on n, never on the threads, which keeps the sum
 * reproducible; small tensors are one chunk. */
#define NCHUNK 64
#define PAR_MIN 65536

static double sumsq(const float *x, int64_t n)
{
    double part[NCHUNK];
    int64_t nchunk = n >= PAR_MIN ? NCHUNK : 1;
    int64_t len = (n + nchunk - 1) / nchunk;
    double s = 0;

#pragma omp parallel for if (nchunk > 1) schedule(static)
    for (int64_t c = 0; c < nchunk; c++) {
        int64_t lo = c * len, hi = lo + len < n ? lo + len : n;
        double acc = 0;
#pragma omp simd reduction(+ : acc)
        for (int64_t i = lo; i < hi; i++)
            acc += (double)x[i] * (double)x[i];
        part[c] = acc;
    }
    for (int64_t c = 0; c < nchunk; c++)
        s += part[c];
    return s;
}

static void scale(float *x, int64_t n, float f)
{
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++)
        x[i] *= f;
}

static int has_grad(const bfit_param *p) { return p && p->trainable && p->grad; }

double bfit_grad_sqnorm(bfit_param *const *params, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        if (has_grad(params[i]))
            s += sumsq(params[i]->grad, bfit_param_numel(params[i]));
    return s;
}

double bfit_grad_norm(bfit_param *const *params, int n) { return sqrt(bfit_grad_sqnorm(params, n)); }

int bfit_clip_grad_norm(bfit_param *const *params, int n, double max_norm, double *total_norm)
{
    double total, c;

    if (!(max_norm > 0 && isfinite(max_norm)))
        return bfit_fail(BFIT_EINVAL, "clip: max norm %g must be finite and > 0", max_norm);
    total = bfit_grad_norm(params, n);
    if (total_norm)
        *total_norm = total;
    if (!isfinite(total))
        return BFIT_OK;
    /* PyTorch's coefficient, with its 1e-6 guard against a zero norm. */
    c = max_norm / (total + 1e-6);
    if (c < 1.0)
        for (int i = 0; i < n; i++)
            if (has_grad(params[i]))
                scale(params[i]->grad, bfit_param_numel(params[i]), (float)c);
    return BFIT_OK;
}
