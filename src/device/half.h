/* half.h - 16-bit floats on the host side of a backend: bf16 and IEEE f16
 * to and from f32, round to nearest even, NaN kept a NaN. Device code that
 * works element by element loads and stores through ld/st, so one loop
 * serves every dtype. */
#ifndef BFIT_HALF_H
#define BFIT_HALF_H

#include <stdint.h>
#include <string.h>

#include "tensor/tensor.h"

static inline float bfit_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t bfit_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* a quiet NaN stays a NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float bfit_f16_to_f32(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    float f;
    if (e == 0x1f) {
        u = s | 0x7f800000u | (m << 13); /* inf or NaN */
    } else if (e == 0) {
        if (!m) {
            u = s;
        } else { /* subnormal: normalise */
            e = 1;
            while (!(m & 0x400u)) {
                m <<= 1;
                e--;
            }
            m &= 0x3ffu;
            u = s | ((e + 112u) << 23) | (m << 13);
        }
    } else {
        u = s | ((e + 112u) << 23) | (m << 13);
    }
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t bfit_f32_to_f16(float f)
{
    uint32_t u, s, mant;
    int32_t e;
    memcpy(&u, &f, 4);
    s = (u >> 16) & 0x8000u;
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)(s | 0x7e00u);
    e = (int32_t)((u >> 23) & 0xffu) - 127 + 15;
    mant = u & 0x7fffffu;
    if (e >= 0x1f)
        return (uint16_t)(s | 0x7c00u); /* overflow, or inf */
    if (e <= 0) {
        /* subnormal or zero: shift the implicit bit in, round to nearest even */
        uint32_t m, shift, half, rest;
        if (e < -10)
            return (uint16_t)s;
        m = mant | 0x800000u;
        shift = (uint32_t)(14 - e);
        half = 1u << (shift - 1);
        rest = m & ((1u << shift) - 1);
        m >>= shift;
        if (rest > half || (rest == half && (m & 1u)))
            m++;
        return (uint16_t)(s | m);
    }
    {
        uint32_t h = s | ((uint32_t)e << 10) | (mant >> 13), rest = mant & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
            h++; /* may carry into the exponent, up to inf: right */
        return (uint16_t)h;
    }
}

/* Element i of a buffer of dtype t, as f32, and back. */
static inline float bfit_ld(const void *p, bfit_dtype t, int64_t i)
{
    switch (t) {
    case BFIT_BF16: return bfit_bf16_to_f32(((const uint16_t *)p)[i]);
    case BFIT_F16: return bfit_f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static inline void bfit_st(void *p, bfit_dtype t, int64_t i, float v)
{
    switch (t) {
    case BFIT_BF16: ((uint16_t *)p)[i] = bfit_f32_to_bf16(v); break;
    case BFIT_F16: ((uint16_t *)p)[i] = bfit_f32_to_f16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

#endif
