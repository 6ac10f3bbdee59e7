/* outpath.c - output paths checked before the work (see outpath.h). */
#include "base/outpath.h"
#include "base/err.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* path's folder ("." for a bare name, "/" for /x) and its last part */
static void split(const char *path, char *dir, size_t n, const char **base)
{
    const char *slash = strrchr(path, '/');
    snprintf(dir, n, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    if (!dir[0])
        snprintf(dir, n, "/");
    *base = slash ? slash + 1 : path;
}

/* what such a file is usually called, for the message's example */
static const char *ext_of(const char *field)
{
    return !strcmp(field, "save") ? "safetensors" : !strcmp(field, "log") ? "jsonl" : !strcmp(field, "plot") ? "svg"
                                                                                                              : "html";
}

int bfit_outpath_check(const char *field, const char *path)
{
    char dir[4096];
    const char *base;
    struct stat st;

    split(path, dir, sizeof dir, &base);
    if (!base[0] || !strcmp(base, ".") || !strcmp(base, "..") || (stat(path, &st) == 0 && S_ISDIR(st.st_mode)))
        return bfit_fail_field(BFIT_EIO, field, "%s is a directory: give the file's name (e.g. %s%sout.%s)", path,
                               path, path[strlen(path) - 1] == '/' ? "" : "/", ext_of(field));
    if (stat(dir, &st) != 0)
        return bfit_fail_field(BFIT_EIO, field, "%s: cannot write into directory '%s': %s", path, dir,
                               strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return bfit_fail_field(BFIT_EIO, field, "%s: '%s' is not a directory", path, dir);
    if (access(dir, W_OK) != 0)
        return bfit_fail_field(BFIT_EIO, field, "%s: cannot write into directory '%s': %s", path, dir,
                               strerror(errno));
    return BFIT_OK;
}

/* The file itself where it exists, else its folder's real path and its
 * name: 0 where neither resolves (the checks above then speak). */
static int identity(const char *path, char *out, size_t n)
{
    char dir[4096], real[PATH_MAX];
    const char *base;

    if (realpath(path, real)) {
        snprintf(out, n, "%s", real);
        return 1;
    }
    split(path, dir, sizeof dir, &base);
    if (!realpath(dir, real))
        return 0;
    snprintf(out, n, "%s/%s", real, base);
    return 1;
}

int bfit_outpath_same(const char *a, const char *b)
{
    char x[PATH_MAX + 256], y[PATH_MAX + 256];
    if (!a || !b || !strcmp(a, "-") || !strcmp(b, "-"))
        return 0;
    if (!strcmp(a, b))
        return 1;
    return identity(a, x, sizeof x) && identity(b, y, sizeof y) && !strcmp(x, y);
}
