/* fuzz_img.c - the image readers (TurboJPEG, libspng) on any bytes: the
 * header probed, then, for a header that passes, both channel rules, a
 * DCT-scaled decode, the evaluation transform and a random resized crop
 * (draws from the input's first bytes). */
#include "batchfit.h"
#include "data/img.h"
#include "fuzz_util.h"

static double draw(void *ud, int k)
{
    const uint8_t *b = ud;
    return b[k % 8] / 256.0;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    bfit_img_scratch s = {0};
    bfit_img_info in;
    uint8_t seed[8] = {0};
    int flip;

    for (size_t i = 0; i < 8 && i < n; i++)
        seed[i] = d[i];
    /* small outputs keep each run fast; sizes over 1M pixels are left alone */
    if (bfit_img_probe(&s, "fuzz", d, n, &in) == BFIT_OK && (int64_t)in.w * in.h <= (1 << 20)) {
        bfit_img_decode(&s, "fuzz", d, n, &in, 3, 1, &s.dec);
        bfit_img_decode(&s, "fuzz", d, n, &in, 1, 4, &s.dec);
        bfit_img_tf t = {3, 16, 12, 20, 0, 0, 1};
        bfit_img_transform(&s, &t, "fuzz", d, n, draw, seed, &flip);
        t.rrc = 1, t.hflip = 1, t.c = 1;
        bfit_img_transform(&s, &t, "fuzz", d, n, draw, seed, &flip);
    }
    bfit_img_scratch_free(&s);
    return 0;
}
