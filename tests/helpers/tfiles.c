/* tfiles.c - files for tests (tfiles.h). */
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "tfiles.h"
#include "internal.h"
#include "tensor/safetensors.h"

char tmpdir[256];

int tmp_setup(const char *tag)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/bfit_%s_XXXXXX", tag);
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

int tmp_teardown(void)
{
    return tmpdir[0] && nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

void tmp_path(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", tmpdir, name); }

void src_path(char *buf, size_t n, const char *rel)
{
    const char *src = getenv("BFIT_SOURCE_DIR");
    snprintf(buf, n, "%s/%s", src ? src : "..", rel);
}

char *file_bytes(const char *path, long *n)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    if (!f)
        fail_msg("%s: cannot open it", path);
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)*n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)*n, f), (size_t)*n);
    buf[*n] = '\0';
    fclose(f);
    return buf;
}

void put_bytes(const char *path, const void *b, long n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        fail_msg("%s: cannot create it", path);
    assert_int_equal(fwrite(b, 1, (size_t)n, f), (size_t)n);
    assert_int_equal(fclose(f), 0);
}

void put_text(const char *path, const char *text) { put_bytes(path, text, (long)strlen(text)); }

void assert_same_tensors(const char *pa, const char *pb)
{
    bfit_st_file *a, *b;
    assert_int_equal(bfit_st_read(pa, &a), BFIT_OK);
    assert_int_equal(bfit_st_read(pb, &b), BFIT_OK);
    assert_int_equal(bfit_st_count(a), bfit_st_count(b));
    for (int i = 0; i < bfit_st_count(a); i++) {
        const bfit_st_tensor *ta = bfit_st_get(a, i), *tb = bfit_st_find(b, ta->name);
        assert_non_null(tb);
        assert_int_equal(ta->nbytes, tb->nbytes);
        assert_memory_equal(ta->data, tb->data, ta->nbytes);
    }
    bfit_st_free(a);
    bfit_st_free(b);
}
