/* test_tensors.c - safetensors files read through the public API
 * (bfit_tensors_*): names, dtypes, shapes, values as floats from F32 and
 * BF16, metadata; and the refusals (an index out of range, room for the
 * wrong count, an integer tensor, a missing or damaged file). The file is
 * written with the library's own writer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "internal.h"
#include "tensor/safetensors.h"

static char dir[64], path[128];

static int setup(void **state)
{
    static const float w[6] = {1.5f, -2.0f, 0.25f, 3.0f, -0.125f, 1e-3f};
    static const uint16_t bf[2] = {0x3fc0, 0xc000}; /* 1.5, -2 in bf16 */
    static const int32_t ids[3] = {7, 8, 9};
    static const float s = 42.0f;
    const char *keys[] = {"model", "normalize_mean"}, *vals[] = {"mlp", "0.286"};
    bfit_st_tensor t[4] = {
        {.name = "0.weight", .dtype = "F32", .ndim = 2, .shape = {2, 3}, .data = w, .nbytes = sizeof w},
        {.name = "half", .dtype = "BF16", .ndim = 1, .shape = {2}, .data = bf, .nbytes = sizeof bf},
        {.name = "ids", .dtype = "I32", .ndim = 1, .shape = {3}, .data = ids, .nbytes = sizeof ids},
        {.name = "scalar", .dtype = "F32", .ndim = 0, .data = &s, .nbytes = sizeof s},
    };
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/bfit_tensors_XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    return bfit_st_write(path, t, 4, keys, vals, 2) == BFIT_OK ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[128];
    (void)state;
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* The index of a tensor by name (the writer orders them by element size). */
static int index_of(const bfit_tensors *t, const char *name)
{
    for (int i = 0; i < bfit_tensors_count(t); i++)
        if (!strcmp(bfit_tensors_name(t, i), name))
            return i;
    fail_msg("no tensor %s", name);
    return -1;
}

static void test_read(void **state)
{
    bfit_tensors *t = NULL;
    int64_t dims[4] = {0};
    float v[6];
    int i;
    (void)state;
    assert_int_equal(bfit_tensors_open(path, &t), BFIT_OK);
    assert_int_equal(bfit_tensors_count(t), 4);

    i = index_of(t, "0.weight");
    assert_string_equal(bfit_tensors_dtype(t, i), "F32");
    assert_int_equal(bfit_tensors_shape(t, i, dims, 4), 2);
    assert_int_equal(dims[0], 2);
    assert_int_equal(dims[1], 3);
    assert_int_equal(bfit_tensors_numel(t, i), 6);
    assert_int_equal(bfit_tensors_read(t, i, v, 6), BFIT_OK);
    assert_true(v[0] == 1.5f && v[1] == -2.0f && v[2] == 0.25f && v[5] == 1e-3f);
    assert_int_equal(bfit_tensors_shape(t, i, dims, 1), 2); /* room for fewer: the count is still the whole */

    i = index_of(t, "half");
    assert_string_equal(bfit_tensors_dtype(t, i), "BF16");
    assert_int_equal(bfit_tensors_read(t, i, v, 2), BFIT_OK);
    assert_true(v[0] == 1.5f && v[1] == -2.0f);

    i = index_of(t, "scalar");
    assert_int_equal(bfit_tensors_shape(t, i, dims, 4), 0);
    assert_int_equal(bfit_tensors_numel(t, i), 1);
    assert_int_equal(bfit_tensors_read(t, i, v, 1), BFIT_OK);
    assert_true(v[0] == 42.0f);

    assert_string_equal(bfit_tensors_meta(t, "model"), "mlp");
    assert_string_equal(bfit_tensors_meta(t, "normalize_mean"), "0.286");
    assert_null(bfit_tensors_meta(t, "nothing"));
    bfit_tensors_free(t);
}

static void fails(int rc, int want, const char *msg)
{
    assert_int_equal(rc, want);
    if (!strstr(bfit_errmsg(), msg))
        fail_msg("message '%s' lacks '%s'", bfit_errmsg(), msg);
}

static void test_refused(void **state)
{
    bfit_tensors *t = NULL;
    char bad[160];
    float v[8];
    FILE *f;
    (void)state;
    assert_int_equal(bfit_tensors_open(path, &t), BFIT_OK);
    assert_null(bfit_tensors_name(t, 4));
    assert_non_null(strstr(bfit_errmsg(), "tensor 4: out of range: the file has 4 (0 to 3)"));
    assert_null(bfit_tensors_dtype(t, -1));
    assert_int_equal(bfit_tensors_numel(t, 9), -1);
    fails(bfit_tensors_shape(t, 4, NULL, 0), BFIT_EINVAL, "out of range");
    fails(bfit_tensors_read(t, index_of(t, "0.weight"), v, 5), BFIT_EINVAL, "has 6 elements");
    fails(bfit_tensors_read(t, index_of(t, "ids"), v, 3), BFIT_EFORMAT, "is I32, not a floating type");
    bfit_tensors_free(t);
    assert_int_equal(bfit_tensors_count(NULL), -1);
    bfit_tensors_free(NULL);

    snprintf(bad, sizeof bad, "%s/none.safetensors", dir);
    fails(bfit_tensors_open(bad, &t), BFIT_EIO, "none.safetensors");
    assert_null(t);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
    assert_non_null(f = fopen(bad, "w"));
    fputs("\x10\0\0\0\0\0\0\0{not json at all", f);
    fclose(f);
    fails(bfit_tensors_open(bad, &t), BFIT_EFORMAT, "bad.safetensors");
    assert_null(t);
    fails(bfit_tensors_open(NULL, &t), BFIT_EINVAL, "no path");
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_read), cmocka_unit_test(test_refused)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
