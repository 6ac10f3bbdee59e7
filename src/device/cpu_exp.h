/* cpu_exp.h - exp(x) in f32 for loops the compiler vectorises.
 *
 * glibc's expf is a call per element, which keeps a softmax's loop scalar
 * (attention's rows: half its forward's time went there). This is plain
 * float and integer arithmetic, inlined into `omp simd` loops: x = n ln2 + r
 * with |r| <= ln2 / 2 (ln2 in two parts, so n ln2 is exact), exp(r) by
 * Cephes' degree-5 minimax polynomial, and 2^n put into the exponent bits.
 * Within 2 ulps of exp over f32's normal results (tests/test_exp.c checks
 * it against double exp); below them (x < -87.33) the result is 0, where
 * expf would give a subnormal of at most 1.2e-38, and above 88 it is
 * exp(88); a NaN stays a NaN. fmaf is spelled out, so every instruction set and a scalar build
 * round alike. */
#ifndef BFIT_CPU_EXP_H
#define BFIT_CPU_EXP_H

#include <math.h>
#include <stdint.h>

#define BFIT_EXP_MIN -87.33654f /* ln(FLT_MIN): smaller x give 0 */

static inline __attribute__((always_inline)) float bfit_expf(float x)
{
    const float magic = 12582912.0f; /* 1.5 * 2^23: t = magic + n holds n in its low bits */
    float xc = x < BFIT_EXP_MIN ? BFIT_EXP_MIN : x > 88.0f ? 88.0f : x;
    float t = fmaf(xc, 1.44269504088896341f, magic), n = t - magic;
    float r = fmaf(n, -0.693359375f, xc); /* ln2's first 11 bits: n times it is exact */
    r = fmaf(n, 2.12194440e-4f, r);        /* and the rest */
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    p = fmaf(p, r * r, r) + 1.0f;
    union {
        float f;
        uint32_t i;
    } u = {t}, s;
    s.i = (u.i - 0x4B400000u + 127u) << 23; /* 2^n: n in [-126, 127]; unsigned, so a NaN's bits wrap (p is NaN) */
    return x < BFIT_EXP_MIN ? 0.0f : p * s.f;
}

#endif
