/* fuzz_csv.c - the CSV loader on any text, with options from its first
 * byte: the header rule (auto, yes, no), the label column (last, first,
 * second), the separator (',' ';' tab) and the classes (from the labels, or
 * 3). A data set that loads is also summarised. */
#include "data/data.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    static const char delims[] = {',', ';', '\t', ','};
    bfit_data_opts o = BFIT_DATA_OPTS_INIT;
    bfit_dataset *ds = NULL;
    char path[300];
    float mean[64], std[64];

    if (n < 1)
        return 0;
    o.header = (int)(d[0] % 3) - 1;
    o.label_col = (int)((d[0] >> 2) % 3) - 1;
    o.delim = delims[(d[0] >> 4) & 3];
    o.nclasses = d[0] & 0x40 ? 3 : 0;
    if (fuzz_file("data.csv", d + 1, n - 1, path, sizeof path))
        return 0;
    if (bfit_dataset_load_csv(path, &o, &ds) == BFIT_OK) {
        bfit_shape s = bfit_dataset_shape(ds);
        if (s.c >= 1 && s.c <= 64)
            (void)bfit_dataset_norm_stats(ds, mean, std);
        bfit_dataset_free(ds);
    }
    return 0;
}
