/* fuzz_idx.c - the IDX loader (plain or gzip) on any pair of files: the
 * first two bytes give the images file's length, it follows, the labels
 * file is the rest. A data set that loads is also summarised (the
 * normalisation statistics read every value). */
#include "data/data.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    char images[300], labels[300];
    size_t cut;
    bfit_dataset *ds = NULL;
    float mean[4], std[4];

    if (n < 2)
        return 0;
    cut = (size_t)d[0] | (size_t)d[1] << 8;
    d += 2;
    n -= 2;
    if (cut > n)
        cut = n;
    if (fuzz_file("images", d, cut, images, sizeof images) || fuzz_file("labels", d + cut, n - cut, labels, sizeof labels))
        return 0;
    if (bfit_dataset_load_idx(images, labels, 0, &ds) == BFIT_OK) {
        bfit_shape s = bfit_dataset_shape(ds);
        if (s.c >= 1 && s.c <= 4)
            (void)bfit_dataset_norm_stats(ds, mean, std);
        bfit_dataset_free(ds);
    }
    return 0;
}
