/* fuzz_spec.c - the model spec parser and its shape inference on any text. */
#include "nn/spec.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    bfit_graph_desc g;
    if (bfit_spec_parse((const char *)d, n, "fuzz.cfg", &g) == BFIT_OK)
        (void)bfit_spec_check_shapes(&g);
    bfit_graph_fini(&g);
    return 0;
}
