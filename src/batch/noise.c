/* noise.c - the gradient noise scale B_noise = tr(Sigma) / |G|^2 from squared
 * gradient norms at two batch sizes (McCandlish et al. 2018, "An Empirical
 * Model of Large-Batch Training", appendix A.1). Pure arithmetic: the caller
 * measures the norms. */
#include "batchfit.h"
#include "base/err.h"
#include "batch/noise.h"

#include <math.h>

int bfit_noise_init(bfit_noise *nz, double alpha)
{
    if (!nz)
        return bfit_fail(BFIT_EINVAL, "noise scale: no estimator");
    if (!(alpha > 0 && alpha <= 1))
        return bfit_fail(BFIT_EINVAL, "noise scale: EMA weight %g must be in (0, 1]", alpha);
    *nz = (bfit_noise){ .alpha = alpha };
    return BFIT_OK;
}

int bfit_noise_update(bfit_noise *nz, double b_small, double g2_small, double b_big, double g2_big)
{
    double g2, s;

    if (!(b_small > 0 && b_big > b_small && isfinite(b_big)))
        return bfit_fail(BFIT_EINVAL, "noise scale: needs 0 < B_small < B_big, got %g and %g", b_small, b_big);
    if (!(g2_small >= 0 && isfinite(g2_small) && g2_big >= 0 && isfinite(g2_big)))
        return bfit_fail(BFIT_EINVAL, "noise scale: squared norms must be finite and >= 0, got %g and %g",
                         g2_small, g2_big);
    /* E|G_b|^2 = |G|^2 + tr(S)/b at both sizes: two equations, two unknowns */
    g2 = (b_big * g2_big - b_small * g2_small) / (b_big - b_small);
    s = (g2_small - g2_big) / (1.0 / b_small - 1.0 / b_big);
    nz->g2_last = g2;
    nz->s_last = s;
    if (nz->n == 0) {
        /* start the EMAs at the first estimate rather than at 0 */
        nz->g2_ema = g2;
        nz->s_ema = s;
    } else {
        nz->g2_ema += nz->alpha * (g2 - nz->g2_ema);
        nz->s_ema += nz->alpha * (s - nz->s_ema);
    }
    nz->n++;
    return BFIT_OK;
}

int bfit_noise_update_step(bfit_noise *nz, int k, const double *g2_micro, const int *size, double g2_full)
{
    double inv = 0, mean = 0, big = 0;

    if (k < 2 || !g2_micro || !size)
        return bfit_fail(BFIT_EINVAL, "noise scale: needs at least 2 micro-batches, got %d", k);
    for (int j = 0; j < k; j++) {
        if (size[j] < 1)
            return bfit_fail(BFIT_EINVAL, "noise scale: micro-batch %d has size %d", j, size[j]);
        inv += 1.0 / size[j];
        mean += g2_micro[j];
        big += size[j];
    }
    /* mean over j of |G|^2 + tr(S)/b_j = |G|^2 + tr(S) * mean(1/b_j) */
    return bfit_noise_update(nz, (double)k / inv, mean / k, big, g2_full);
}

int bfit_noise_scale(const bfit_noise *nz, double *b_noise)
{
    if (!nz || nz->n == 0)
        return bfit_fail(BFIT_ESTATE, "noise scale: no estimate yet");
    if (!(nz->g2_ema > 0))
        return bfit_fail(BFIT_ESTATE, "noise scale: the gradient's squared norm estimate %g is not positive yet",
                         nz->g2_ema);
    *b_noise = nz->s_ema > 0 ? nz->s_ema / nz->g2_ema : 0.0;
    return BFIT_OK;
}

int bfit_noise_update_pair(bfit_noise *nz, double b1, double g2_1, double b2, double g2_2, double d2)
{
    double B = b1 + b2, g2_big;
    double g2[2] = { g2_1, g2_2 };
    int size[2];

    if (!(b1 >= 1 && b2 >= 1 && b1 <= 2147483647.0 && b2 <= 2147483647.0))
        return bfit_fail(BFIT_EINVAL, "noise scale: batch sizes %g and %g must be from 1 to 2^31-1", b1, b2);
    if (!(d2 >= 0 && isfinite(d2) && g2_1 >= 0 && isfinite(g2_1) && g2_2 >= 0 && isfinite(g2_2)))
        return bfit_fail(BFIT_EINVAL, "noise scale: squared norms must be finite and >= 0, got %g, %g and %g",
                         g2_1, g2_2, d2);
    /* |b1 G1 + b2 G2|^2 with 2 G1.G2 = |G1|^2 + |G2|^2 - |G1 - G2|^2 */
    g2_big = (b1 * b1 * g2_1 + b2 * b2 * g2_2 + b1 * b2 * (g2_1 + g2_2 - d2)) / (B * B);
    if (g2_big < 0)
        g2_big = 0; /* rounding: a norm is never negative */
    size[0] = (int)b1;
    size[1] = (int)b2;
    return bfit_noise_update_step(nz, 2, g2, size, g2_big);
}
