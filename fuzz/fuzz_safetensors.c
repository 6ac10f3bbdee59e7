/* fuzz_safetensors.c - the safetensors reader (header JSON, layout,
 * checksums) on any bytes; a file that parses has every float tensor
 * converted to f32 and its metadata listed, and the normalisation statistics
 * of a weights file read from it as `batchfit eval` reads them. */
#include "fuzz_util.h"
#include "tensor/safetensors.h"
#include "train/weights.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    bfit_st_file *f = NULL;
    char path[300];
    float mean[3], std[3];
    int found;

    if (bfit_st_parse(d, n, "fuzz.safetensors", &f) != BFIT_OK)
        return 0;
    for (int i = 0; i < bfit_st_count(f); i++) {
        const bfit_st_tensor *t = bfit_st_get(f, i);
        int64_t k = bfit_st_numel(t);
        float *buf;
        if (k < 0 || k > (1 << 20) || !(buf = malloc((size_t)(k ? k : 1) * sizeof *buf)))
            continue;
        (void)bfit_st_to_f32(t, buf, k);
        free(buf);
    }
    for (int i = 0; i < bfit_st_meta_count(f); i++) {
        const char *k, *v;
        (void)bfit_st_meta_get(f, i, &k, &v);
    }
    bfit_st_free(f);
    if (fuzz_file("w.safetensors", d, n, path, sizeof path) == 0) {
        (void)bfit_weights_read_norm(path, 1, mean, std, &found);
        (void)bfit_weights_read_norm(path, 3, mean, std, &found);
    }
    return 0;
}
