/* tensor.c - data type facts, shape comparison and printing. */
#include "tensor/tensor.h"

#include <stdio.h>

size_t bfit_dtype_size(bfit_dtype t)
{
    switch (t) {
    case BFIT_F32: return 4;
    case BFIT_BF16: return 2;
    case BFIT_F16: return 2;
    case BFIT_I32: return 4;
    default: return 0;
    }
}

int bfit_dtype_is_float(bfit_dtype t) { return t == BFIT_F32 || t == BFIT_BF16 || t == BFIT_F16; }

const char *bfit_dtype_name(bfit_dtype t)
{
    switch (t) {
    case BFIT_F32: return "F32";
    case BFIT_BF16: return "BF16";
    case BFIT_F16: return "F16";
    case BFIT_I32: return "I32";
    default: return "?";
    }
}

int bfit_shape_eq(bfit_shape a, bfit_shape b)
{
    if (a.nd != b.nd && !(bfit_shape_is_image(a) && bfit_shape_is_image(b)))
        return 0;
    for (int i = 0; i < BFIT_SHAPE_MAXD; i++)
        if (a.d[i] != b.d[i])
            return 0;
    return 1;
}

char *bfit_shape_str(bfit_shape s, char *buf, size_t len)
{
    size_t used = 0;
    int nd = s.nd;

    if (nd == 3 && s.h == 1 && s.w == 1)
        nd = 1;
    buf[0] = '\0';
    for (int i = 0; i < nd && used < len; i++) {
        int k = snprintf(buf + used, len - used, i ? "x%d" : "%d", s.d[i]);
        if (k < 0)
            break;
        used += (size_t)k;
    }
    return buf;
}

int64_t bfit_tensor_numel(const bfit_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->dim[i];
    return n;
}

size_t bfit_tensor_bytes(const bfit_tensor *t) { return (size_t)bfit_tensor_numel(t) * bfit_dtype_size(t->dtype); }
