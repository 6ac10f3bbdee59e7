/* img_loader.c - bench/img_loader.py's batchfit side: the image loader
 * alone (bfit_loader_measure) through the public API, printing
 * "samples_per_s=X threads=N".
 *   bfit_img_loader DIR MODEL SIZE THREADS SAMPLES */
#include "batchfit.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    bfit_config *c = bfit_config_new();
    double rate = 0;
    int threads = 0;

    if (argc != 6 || !c) {
        fprintf(stderr, "usage: bfit_img_loader DIR MODEL SIZE THREADS SAMPLES\n");
        return 2;
    }
    if (bfit_config_set(c, "data", argv[1]) || bfit_config_set(c, "model", argv[2]) ||
        bfit_config_set(c, "random-resized-crop", argv[3]) || bfit_config_set(c, "augment", "yes") ||
        bfit_config_set(c, "loader-threads", argv[4]) || bfit_config_set(c, "mean", "0.485,0.456,0.406") ||
        bfit_config_set(c, "std", "0.229,0.224,0.225") ||
        bfit_loader_measure(c, 64, atoll(argv[5]), &rate, &threads)) {
        fprintf(stderr, "bfit_img_loader: %s\n", bfit_errmsg());
        bfit_config_free(c);
        return 1;
    }
    printf("samples_per_s=%.1f threads=%d\n", rate, threads);
    bfit_config_free(c);
    return 0;
}
