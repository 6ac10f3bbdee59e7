/* tensor.c - data type facts and shape printing. */
#include "tensor/tensor.h"

#include <stdio.h>

size_t bfit_dtype_size(bfit_dtype t)
{
    return t == BFIT_F32 ? 4 : 2;
}

const char *bfit_dtype_name(bfit_dtype t)
{
    switch (t) {
    case BFIT_F32: return "F32";
    case BFIT_BF16: return "BF16";
    case BFIT_F16: return "F16";
    }
    return "?";
}

char *bfit_shape_str(bfit_shape s, char *buf, size_t len)
{
    if (s.h == 1 && s.w == 1)
        snprintf(buf, len, "%d", s.c);
    else
        snprintf(buf, len, "%dx%dx%d", s.c, s.h, s.w);
    return buf;
}
