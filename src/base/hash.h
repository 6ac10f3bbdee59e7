/* hash.h - FNV-1a, 64 bits: the project's one non-cryptographic hash (keys
 * of lookups, the samples' checksums). The seed is the caller's: each user
 * keeps the one its values were first made with. */
#ifndef BFIT_HASH_H
#define BFIT_HASH_H

#include <stddef.h>
#include <stdint.h>

#define BFIT_FNV_OFFSET 14695981039346656037ull /* FNV-1a's own offset basis */

static inline uint64_t bfit_fnv1a_byte(uint64_t h, unsigned char b) { return (h ^ b) * 1099511628211ull; }

static inline uint64_t bfit_fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = bfit_fnv1a_byte(h, b[i]);
    return h;
}

#endif
