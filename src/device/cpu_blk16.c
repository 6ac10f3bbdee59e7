/* cpu_blk16.c - bf16 activations between plain nchw and oneDNN's nChw16c
 * (aBcd16b), the layout its bf16 convolutions take: our own transposes.
 *
 * oneDNN 2.6 has a specialised reorder for f32 here (jit:blk, 60-110 GB/s
 * on this machine) but bf16 falls to its generic one (jit:uni, about
 * 40 GB/s): a bf16 reorder took as long as the f32 one of twice the bytes,
 * 128x64x14x14 0.16 ms against 0.11 ms (2 threads). Both layouts are
 * 16 x hw tiles per (sample, block of 16 channels); a tile is transposed
 * 16 x 16 at a time with AVX2 256-bit unpacks, its last hw % 16 columns
 * element by element. The same code is compiled twice: for AVX-512 (VL
 * gives it 32 vector registers, so the 16 rows stay in registers) and for
 * the baseline (cpu_isa.h chooses); the bits are the same. Only whole
 * blocks: c % 16 == 0 (oneDNN pads a partial block with zeros, which its
 * own reorder writes). */
#include "device/cpu.h"
#include "device/cpu_isa.h"

#include <immintrin.h>
#include <stdint.h>

#ifdef __AVX2__ /* the library's baseline (x86-64-v3) */
#define BLK_SIMD 1
#else
#define BLK_SIMD 0
#endif

int bfit_cpu_blk16_match(const dnnl_memory_desc_t *plain, const dnnl_memory_desc_t *chosen, int64_t *n, int64_t *c,
                    int64_t *hw)
{
    dnnl_memory_desc_t want, nchw;

    if (plain->ndims != 4 || plain->data_type != dnnl_bf16 || plain->dims[1] % 16)
        return 0;
    if (dnnl_memory_desc_init_by_tag(&nchw, 4, plain->dims, dnnl_bf16, dnnl_nchw) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&want, 4, plain->dims, dnnl_bf16, dnnl_nChw16c) != dnnl_success ||
        !dnnl_memory_desc_equal(plain, &nchw) || !dnnl_memory_desc_equal(chosen, &want))
        return 0;
    *n = plain->dims[0];
    *c = plain->dims[1];
    *hw = plain->dims[2] * plain->dims[3];
    return 1;
}

#if BLK_SIMD
/* 16 rows of 16 16-bit elements (row i at s + i * ss) to 16 rows (row j at
 * d + j * ds, its element i from source row i column j): unpacks of 16-,
 * 32-, 64-bit pairs within 128-bit lanes, then across them. */
static inline __attribute__((always_inline)) void tr16x16(const uint16_t *s, int64_t ss, uint16_t *d, int64_t ds)
{
    /* b[g + 8h] ends holding rows 8h..8h+7 of columns col[g] (low lane) and
     * col[g] + 8 (high lane); the last step joins the row halves */
    static const int col[8] = {0, 4, 2, 6, 1, 5, 3, 7};
    __m256i a[16], b[16];

    /* unrolled, or the arrays live on the stack (gcc keeps these loops) */
    _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) a[i] = _mm256_loadu_si256((const __m256i *)(s + i * ss));
    _Pragma("GCC unroll 8") for (int i = 0; i < 16; i += 2) { /* pairs of rows, per 128-bit lane */
        b[i] = _mm256_unpacklo_epi16(a[i], a[i + 1]);
        b[i + 1] = _mm256_unpackhi_epi16(a[i], a[i + 1]);
    }
    _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) { /* i = 4 (j / 2), k = j % 2 */
        int i = 4 * (j / 2) + j % 2;
        a[i] = _mm256_unpacklo_epi32(b[i], b[i + 2]);
        a[i + 2] = _mm256_unpackhi_epi32(b[i], b[i + 2]);
    }
    _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) {
        int i = 8 * (j / 4) + j % 4;
        b[i] = _mm256_unpacklo_epi64(a[i], a[i + 4]);
        b[i + 4] = _mm256_unpackhi_epi64(a[i], a[i + 4]);
    }
    _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++) {
        _mm256_storeu_si256((__m256i *)(d + col[g] * ds), _mm256_permute2x128_si256(b[g], b[g + 8], 0x20));
        _mm256_storeu_si256((__m256i *)(d + (col[g] + 8) * ds), _mm256_permute2x128_si256(b[g], b[g + 8], 0x31));
    }
}
#endif

/* One tile: 16 channels x hw, plain rows (stride hw) <-> blocked (stride 16);
 * inlined into each variant below. */
static inline __attribute__((always_inline)) void tile(const uint16_t *src, uint16_t *dst, int64_t hw,
                                                        int to_plain)
{
    int64_t s = 0;
#if BLK_SIMD
    for (; s + 16 <= hw; s += 16)
        if (to_plain)
            tr16x16(src + s * 16, 16, dst + s, hw);
        else
            tr16x16(src + s, hw, dst + s * 16, 16);
#endif
    for (; s < hw; s++)
        for (int c = 0; c < 16; c++)
            if (to_plain)
                dst[c * hw + s] = src[s * 16 + c];
            else
                dst[s * 16 + c] = src[c * hw + s];
}

BFIT_CPU_AVX512 static void tile_avx512(const uint16_t *src, uint16_t *dst, int64_t hw, int to_plain)
{
    tile(src, dst, hw, to_plain);
}

static void tile_base(const uint16_t *src, uint16_t *dst, int64_t hw, int to_plain) { tile(src, dst, hw, to_plain); }

void bfit_cpu_blk16_run(const void *src, void *dst, int64_t n, int64_t c, int64_t hw, int to_plain)
{
    int64_t tiles = n * (c / 16);
    void (*fn)(const uint16_t *, uint16_t *, int64_t, int) =
        bfit_cpu_isa_get() == BFIT_CPU_ISA_AVX512 ? tile_avx512 : tile_base;
    BFIT_PAR_FOR_IF(tiles * hw * 16 > BFIT_PAR_MIN, for (int64_t t = 0; t < tiles; t++) {
        fn((const uint16_t *)src + t * 16 * hw, (uint16_t *)dst + t * 16 * hw, hw, to_plain);
    });
}
