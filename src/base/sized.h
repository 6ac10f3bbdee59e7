/* sized.h - the structs that cross the public boundary start with a size
 * field (batchfit.h, BFIT_SIZED): a program built against an older header
 * passes a smaller struct, one built against a newer header a larger one.
 * These copy between the caller's struct and the library's own, as the
 * Linux kernel's copy_struct_from_user does: fields the caller lacks keep
 * the library's defaults; fields the library lacks must be zero (unset),
 * or the call is refused rather than silently ignoring them. */
#ifndef BFIT_SIZED_H
#define BFIT_SIZED_H

#include <stddef.h>

/* The smallest size accepted: the size field and one more byte. */
#define BFIT_SIZED_MIN (sizeof(size_t) + 1)
/* No struct of ours nears this: a larger size is not one (an unset field's
 * garbage), and zeroing up to it would write over the caller's memory. */
#define BFIT_SIZED_MAX ((size_t)1 << 16)

/* The caller's struct `given` (its size first) over `full` (full_size
 * bytes, holding the defaults; its size field set to full_size). BFIT_EINVAL
 * naming `what` for a size that was not set, or a larger struct whose extra
 * bytes are not zero. */
int bfit_sized_in(void *full, size_t full_size, const void *given, const char *what);
/* The library's `full` into the caller's `dst` (its size first, kept):
 * min(dst size, full_size) bytes, and zeros past full_size. BFIT_EINVAL
 * naming `what` for a size that was not set. */
int bfit_sized_out(void *dst, const void *full, size_t full_size, const char *what);

#endif
