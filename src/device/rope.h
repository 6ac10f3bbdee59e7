/* rope.h - the angles of a rotary position embedding, the same on every
 * device: token t, pair j of a head of d columns, base theta.
 *
 * As Hugging Face's and most users' code compute them in float32:
 * inv_freq = 1 / theta^(2j/d) rounded to float, the angle t * inv_freq a
 * float product, its cos and sin from that float (here in double, then
 * rounded: within an ulp of PyTorch's float32 cos and sin). */
#ifndef BFIT_DEVICE_ROPE_H
#define BFIT_DEVICE_ROPE_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define BFIT_ROPE_HD __host__ __device__
#else
#define BFIT_ROPE_HD
#endif

/* pair j's frequency, theta^(-2j/d), as a float */
static inline BFIT_ROPE_HD float bfit_rope_inv(int64_t j, int64_t d, float theta)
{
    return (float)(1.0 / pow((double)theta, (double)(2 * j) / (double)d));
}

static inline BFIT_ROPE_HD float bfit_rope_angle(int64_t t, int64_t j, int64_t d, float theta)
{
    return (float)t * bfit_rope_inv(j, d, theta);
}

#endif
