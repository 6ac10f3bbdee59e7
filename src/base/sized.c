/* sized.c - copies of the public structs that carry their size (sized.h). */
#include "base/sized.h"
#include "base/err.h"

#include <string.h>

static int bad_size(const char *what, size_t size)
{
    if (size > BFIT_SIZED_MAX)
        return bfit_fail(BFIT_EINVAL, "%s: size %zu is no struct's size (an unset field?): start from "
                         "BFIT_SIZED(%s) or the struct's _default()", what, size, what);
    if (size == 0)
        return bfit_fail(BFIT_EINVAL, "%s: its size field is not set: start from BFIT_SIZED(%s) or the "
                         "struct's _default()", what, what);
    return bfit_fail(BFIT_EINVAL, "%s: size %zu is too small to be one", what, size);
}

int bfit_sized_in(void *full, size_t full_size, const void *given, const char *what)
{
    size_t size;

    memcpy(&size, given, sizeof size);
    if (size < BFIT_SIZED_MIN || size > BFIT_SIZED_MAX)
        return bad_size(what, size);
    for (size_t i = full_size; i < size; i++)
        if (((const unsigned char *)given)[i])
            return bfit_fail(BFIT_EINVAL, "%s: the program was built against a newer batchfit (%zu bytes against "
                             "this library's %zu) and sets a field this library (%s) does not know",
                             what, size, full_size, BFIT_VERSION_STRING);
    memcpy((char *)full + sizeof size, (const char *)given + sizeof size,
           (size < full_size ? size : full_size) - sizeof size);
    memcpy(full, &full_size, sizeof full_size);
    return BFIT_OK;
}

int bfit_sized_out(void *dst, const void *full, size_t full_size, const char *what)
{
    size_t size;

    memcpy(&size, dst, sizeof size);
    if (size < BFIT_SIZED_MIN || size > BFIT_SIZED_MAX)
        return bad_size(what, size);
    memcpy((char *)dst + sizeof size, (const char *)full + sizeof size,
           (size < full_size ? size : full_size) - sizeof size);
    if (size > full_size)
        memset((char *)dst + full_size, 0, size - full_size);
    return BFIT_OK;
}
