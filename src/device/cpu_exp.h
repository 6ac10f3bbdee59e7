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
 * exp(88); a NaN stays a NaN. fmaf is spelled out, so every instruction
 * set and a scalar build round alike. The zero below the range is an
 * integer mask on the scale, not a select of the product: GCC does not
 * if-convert a floating-point operation that might trap, and the loop
 * would stay scalar. */
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
    s.i &= -(uint32_t)(x >= BFIT_EXP_MIN);  /* below the range (not a NaN): a scale of 0 */
    return p * s.f;
}

/* exp(x) in double, the same way: n ln2 in two parts (fdlibm's), exp(r) by
 * its Taylor series to r^13 (the next term is 4e-18 of it at |r| = ln2 / 2),
 * 2^n into the exponent. Within 2 ulps of exp (tests/test_exp.c, against
 * long double); x < -708 gives 0 (exp would give a subnormal), x > 709 is
 * taken as 709, a NaN stays a NaN. For sums that must stay good to 1e-12
 * (the cross-entropy's loss) in a vector loop. */
#define BFIT_EXP_D_MIN -708.0

static inline __attribute__((always_inline)) double bfit_exp_d(double x)
{
    const double magic = 6755399441055744.0; /* 1.5 * 2^52 */
    double xc = x < BFIT_EXP_D_MIN ? BFIT_EXP_D_MIN : x > 709.0 ? 709.0 : x;
    double t = fma(xc, 1.4426950408889634, magic), n = t - magic;
    double r = fma(n, -6.93147180369123816490e-01, xc);
    r = fma(n, -1.90821492927058770002e-10, r);
    double p = 1.0 / 6227020800.0; /* 1 / 13! */
    p = fma(p, r, 1.0 / 479001600.0);
    p = fma(p, r, 1.0 / 39916800.0);
    p = fma(p, r, 1.0 / 3628800.0);
    p = fma(p, r, 1.0 / 362880.0);
    p = fma(p, r, 1.0 / 40320.0);
    p = fma(p, r, 1.0 / 5040.0);
    p = fma(p, r, 1.0 / 720.0);
    p = fma(p, r, 1.0 / 120.0);
    p = fma(p, r, 1.0 / 24.0);
    p = fma(p, r, 1.0 / 6.0);
    p = fma(p, r, 0.5);
    p = fma(p, r * r, r) + 1.0;
    union {
        double f;
        uint64_t i;
    } u = {t}, s;
    s.i = (u.i - 0x4338000000000000ull + 1023u) << 52; /* 2^n: n in [-1021, 1023] */
    s.i &= -(uint64_t)(x >= BFIT_EXP_D_MIN);           /* below the range (not a NaN): a scale of 0 */
    return p * s.f;
}

#endif
