/* text_dir.c - a folder of texts for a token model: every .txt file in it
 * and its subfolders, in the order of their paths (so the same folder is
 * the same text on every machine), read as one text: its lines split
 * between train and test as a single file's are (tokens.c). Hidden files
 * and folders (a name starting with '.') are left out, and so are other
 * files, which a corpus folder often holds beside its texts (a README.md,
 * a LICENSE). */
#include "base/err.h"
#include "data/data_int.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAXDEPTH 16

typedef struct paths {
    char **p;
    int n, cap;
} paths;

static int push(paths *ps, const char *path)
{
    if (ps->n == ps->cap) {
        int cap = ps->cap ? 2 * ps->cap : 64;
        char **p = realloc(ps->p, sizeof *p * (size_t)cap);
        if (!p)
            return bfit_fail(BFIT_ENOMEM, "out of host memory listing texts");
        ps->p = p, ps->cap = cap;
    }
    if (!(ps->p[ps->n] = strdup(path)))
        return bfit_fail(BFIT_ENOMEM, "out of host memory listing texts");
    ps->n++;
    return BFIT_OK;
}

static int is_txt(const char *name)
{
    size_t n = strlen(name);
    return n > 4 && strcmp(name + n - 4, ".txt") == 0;
}

/* The .txt files under dir, depth levels of folders at most. */
static int walk(const char *dir, int depth, paths *ps)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    struct stat st;
    char path[4096];
    int rc = BFIT_OK;

    if (!d)
        return bfit_fail(BFIT_EIO, "%s: cannot list: %s", dir, strerror(errno));
    while (rc == BFIT_OK && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path)
            rc = bfit_fail(BFIT_EINVAL, "%s/%s: the path is too long", dir, e->d_name);
        else if (stat(path, &st) != 0)
            rc = bfit_fail(BFIT_EIO, "%s: cannot read: %s", path, strerror(errno));
        else if (S_ISDIR(st.st_mode) && depth < MAXDEPTH)
            rc = walk(path, depth + 1, ps);
        else if (S_ISREG(st.st_mode) && is_txt(e->d_name))
            rc = push(ps, path);
    }
    closedir(d);
    return rc;
}

static int by_path(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int bfit_text_paths(const char *dir, char ***out, int *n)
{
    paths ps = {0};
    int rc = walk(dir, 0, &ps);
    if (rc != BFIT_OK) {
        bfit_text_paths_free(ps.p, ps.n);
        ps.p = NULL, ps.n = 0;
    } else if (ps.n)
        qsort(ps.p, (size_t)ps.n, sizeof *ps.p, by_path);
    *out = ps.p, *n = ps.n;
    return rc;
}

void bfit_text_paths_free(char **p, int n)
{
    for (int i = 0; i < n; i++)
        free(p[i]);
    free(p);
}

int bfit_text_dir_has_text(const char *dir)
{
    char **p;
    int n;
    if (bfit_text_paths(dir, &p, &n) != BFIT_OK)
        return 0;
    bfit_text_paths_free(p, n);
    return n > 0;
}

int bfit_dataset_load_text_dir(const char *dir, int train, int seq, int lines, bfit_dataset **out)
{
    char **p = NULL, name[4096];
    int32_t *ids = NULL;
    int64_t count = 0;
    int n = 0, rc;

    *out = NULL;
    if ((rc = bfit_text_paths(dir, &p, &n)) != BFIT_OK)
        return rc;
    if (!n)
        rc = bfit_fail(BFIT_EINVAL, "%s holds no .txt file (in it or its subfolders): a token model reads a folder "
                                    "of texts, each a file whose name ends in .txt", dir);
    else if ((rc = bfit_text_files_tokens((const char *const *)p, n, train, &ids, &count)) == BFIT_OK) {
        snprintf(name, sizeof name, "%s (%d text%s, %s%s)", dir, n, n == 1 ? "" : "s",
                 train < 0 ? "whole" : train ? "train part" : "test part", lines ? ", lines" : "");
        rc = bfit_dataset_text_take(name, ids, count, train, seq, lines, out);
    }
    bfit_text_paths_free(p, n);
    return rc;
}
