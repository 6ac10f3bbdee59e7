/* rand.h - the one counter-based generator: splitmix64's finaliser, so a
 * value depends only on (seed, index), never on call order or threads.
 * Weight init, dropout masks and synthetic data all draw from it. */
#ifndef BFIT_RAND_H
#define BFIT_RAND_H

#include <stdint.h>

static inline uint64_t bfit_mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Uniform in [0, 1) from (seed, i): 53 random bits. */
static inline double bfit_rand_unit(uint64_t seed, uint64_t i)
{
    return (double)(bfit_mix64(bfit_mix64(seed) + i) >> 11) * (1.0 / 9007199254740992.0);
}

#endif
