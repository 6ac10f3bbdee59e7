/* tensors.c - a safetensors file read through the public API
 * (bfit_tensors_*): the names, shapes and float values of its tensors, so
 * a program (the Python package) takes trained weights without parsing the
 * format. The parser and its checks are tensor/safetensors.c's. */
#include "base/err.h"
#include "tensor/safetensors.h"

#include <stdlib.h>

struct bfit_tensors {
    bfit_st_file *f;
};

int bfit_tensors_open(const char *path, bfit_tensors **out)
{
    bfit_tensors *t;
    int rc;

    if (!out)
        return bfit_fail(BFIT_EINVAL, "bfit_tensors_open needs somewhere to put the file");
    *out = NULL;
    if (!path || !*path)
        return bfit_fail(BFIT_EINVAL, "bfit_tensors_open: no path given");
    if (!(t = calloc(1, sizeof *t)))
        return bfit_fail(BFIT_ENOMEM, "out of host memory for %s", path);
    if ((rc = bfit_st_read(path, &t->f)) != BFIT_OK) {
        free(t);
        return rc;
    }
    *out = t;
    return BFIT_OK;
}

void bfit_tensors_free(bfit_tensors *t)
{
    if (!t)
        return;
    bfit_st_free(t->f);
    free(t);
}

int bfit_tensors_count(const bfit_tensors *t)
{
    if (!t) {
        bfit_fail(BFIT_EINVAL, "bfit_tensors_count: no file");
        return -1;
    }
    return bfit_st_count(t->f);
}

/* Tensor i, or NULL with the message saying what i may be. */
static const bfit_st_tensor *get(const bfit_tensors *t, int i)
{
    if (!t) {
        bfit_fail(BFIT_EINVAL, "no tensors file");
        return NULL;
    }
    if (i < 0 || i >= bfit_st_count(t->f)) {
        bfit_fail(BFIT_EINVAL, "tensor %d: out of range: the file has %d (0 to %d)", i, bfit_st_count(t->f),
                  bfit_st_count(t->f) - 1);
        return NULL;
    }
    return bfit_st_get(t->f, i);
}

const char *bfit_tensors_name(const bfit_tensors *t, int i)
{
    const bfit_st_tensor *s = get(t, i);
    return s ? s->name : NULL;
}

const char *bfit_tensors_dtype(const bfit_tensors *t, int i)
{
    const bfit_st_tensor *s = get(t, i);
    return s ? s->dtype : NULL;
}

int bfit_tensors_shape(const bfit_tensors *t, int i, int64_t *dims, int max)
{
    const bfit_st_tensor *s = get(t, i);
    if (!s)
        return BFIT_EINVAL;
    for (int d = 0; d < s->ndim && d < max && dims; d++)
        dims[d] = s->shape[d];
    return s->ndim;
}

int64_t bfit_tensors_numel(const bfit_tensors *t, int i)
{
    const bfit_st_tensor *s = get(t, i);
    return s ? bfit_st_numel(s) : -1;
}

int bfit_tensors_read(const bfit_tensors *t, int i, float *out, int64_t n)
{
    const bfit_st_tensor *s = get(t, i);
    if (!s)
        return BFIT_EINVAL;
    if (!out || n != bfit_st_numel(s))
        return bfit_fail(BFIT_EINVAL, "tensor %s has %lld elements: give room for exactly that many (got %lld)",
                         s->name, (long long)bfit_st_numel(s), (long long)n);
    return bfit_st_to_f32(s, out, n);
}

const char *bfit_tensors_meta(const bfit_tensors *t, const char *key)
{
    return t && key ? bfit_st_meta(t->f, key) : NULL;
}
