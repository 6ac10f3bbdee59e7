/* img_classes.c - the class names of image folders and list files (and of
 * text folders, text_classes.c): that they are text
 * (UTF-8, as the weights' JSON metadata must hold them), and a test set's
 * classes matched by name to the classes a model was trained on, so that a
 * test folder holding some of the training folder's classes is labelled as
 * the model learned them, not by its own sorted order. */
#include "data/data_int.h"
#include "base/err.h"
#include "base/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int bfit_img_ext_like(const char *s, size_t n)
{
    /* ours, then what people keep images in that we do not read */
    static const char *const ext[] = {".jpg", ".jpeg", ".png", ".gif", ".bmp",  ".webp", ".tif",
                                      ".tiff", ".jfif", ".ppm", ".pgm", ".pbm", ".heic", ".avif"};
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
        size_t k = strlen(ext[i]);
        if (n > k && !strncasecmp(s + n - k, ext[i], k))
            return 1;
    }
    return 0;
}

int bfit_img_name_check(const char *name, const char *where, int64_t lineno)
{
    const unsigned char *u = (const unsigned char *)name, *end = u + strlen(name);
    unsigned cp;
    char shown[512];
    size_t k = 0;
    int bad = -1;

    for (size_t i = 0; u[i];) {
        int n = bfit_utf8_len(u + i, end, &cp);
        if (!n && bad < 0)
            bad = (int)i;
        /* the name as it can be printed: a bad byte as \xNN */
        if (k + 8 < sizeof shown)
            k += (size_t)(n ? snprintf(shown + k, sizeof shown - k, "%.*s", n, name + i)
                            : snprintf(shown + k, sizeof shown - k, "\\x%02x", u[i]));
        i += n ? (size_t)n : 1;
    }
    if (bad < 0)
        return BFIT_OK;
    if (lineno)
        return bfit_fail(BFIT_EFORMAT, "%s:%lld: the class name '%s' is not UTF-8 (byte 0x%02x at %d): class "
                         "names are saved with the weights as JSON text, which is UTF-8; write the label in UTF-8",
                         where, (long long)lineno, shown, u[bad], bad);
    return bfit_fail(BFIT_EFORMAT, "image folder %s: the class folder '%s' has a name that is not UTF-8 (byte "
                     "0x%02x at %d): class names are saved with the weights as JSON text, which is UTF-8; rename "
                     "it in UTF-8 (e.g. convmv -f latin1 -t utf8 -r --notest %s)", where, shown, u[bad], bad, where);
}

/* 1 if s is a class index as a list of numbers names it: "0", "17". */
static int is_index(const char *s)
{
    if (!*s || (s[0] == '0' && s[1]))
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

/* 1 if names are "0", "1", ... "n-1": a list of class numbers' (or of
 * folders named so), which says nothing of a named folder's classes. */
static int numbers_only(const char *const *names, int n)
{
    char num[16];
    for (int c = 0; c < n; c++) {
        snprintf(num, sizeof num, "%d", c);
        if (strcmp(names[c], num))
            return 0;
    }
    return 1;
}

typedef struct named {
    const char *name;
    int index;
} named;

static int by_named(const void *x, const void *y)
{
    return strcmp(((const named *)x)->name, ((const named *)y)->name);
}

/* Append s to buf (of cap) as ", s"; after `most` names only a count. */
static void list_add(char *buf, size_t cap, int k, int most, int total, const char *s)
{
    size_t n = strlen(buf);
    if (k < most)
        snprintf(buf + n, cap - n, "%s%s", k ? ", " : "", s);
    else if (k == most)
        snprintf(buf + n, cap - n, " and %d more", total - most);
}

/* The failure: which of d's classes are not among names, and what names are. */
static int unknown_classes(const bfit_dataset *d, const int *map, const char *const *names, int n,
                           const char *whose)
{
    char unknown[1024] = "", known[1024] = "";
    int nu = 0, k = 0;

    for (int c = 0; c < d->nclasses; c++)
        nu += map[c] < 0;
    for (int c = 0; c < d->nclasses; c++)
        if (map[c] < 0)
            list_add(unknown, sizeof unknown, k++, 10, nu, d->names + d->name_off[c]);
    for (int j = 0; j < n; j++)
        list_add(known, sizeof known, j, 10, n, names[j]);
    return bfit_fail(BFIT_EINVAL, "%s: class%s %s %s not among the %d classes of %s: %s. A test set's classes "
                     "are matched to the model's by name: name its class folders (or a list's labels) as the "
                     "training data's (a subset of them is fine), or give class indices in a list file",
                     d->source, nu > 1 ? "es" : "", unknown, nu > 1 ? "are" : "is", n, whose, known);
}

/* d's names become names (n of them), its labels map[label]. */
static int renumber(bfit_dataset *d, const int *map, const char *const *names, int n)
{
    size_t len = 0;
    char *buf;
    int64_t *off = malloc((size_t)n * sizeof *off);

    for (int j = 0; j < n; j++)
        len += strlen(names[j]) + 1;
    if (!off || !(buf = malloc(len ? len : 1))) {
        free(off);
        return bfit_fail(BFIT_ENOMEM, "out of host memory for class names");
    }
    len = 0;
    for (int j = 0; j < n; j++) {
        off[j] = (int64_t)len;
        memcpy(buf + len, names[j], strlen(names[j]) + 1);
        len += strlen(names[j]) + 1;
    }
    for (int64_t i = 0; i < d->count; i++)
        d->labels[i] = map[d->labels[i]];
    free(d->names);
    free(d->name_off);
    d->names = buf, d->name_off = off;
    d->nclasses = n;
    return BFIT_OK;
}

int bfit_dataset_match_classes(bfit_dataset *d, const char *const *names, int n, const char *whose)
{
    named *sorted;
    int *map, rc = BFIT_OK, same = d && d->names && d->nclasses == n;

    /* numbers are indices already: a list of them, or a model trained on one
     * (its names 0..n-1) against a folder of names, which nothing can match */
    if (!d || !d->names || d->numbered || n < 1)
        return BFIT_OK;
    if (numbers_only(names, n))
        for (int c = 0; c < d->nclasses; c++)
            if (!is_index(d->names + d->name_off[c]))
                return BFIT_OK;
    sorted = malloc((size_t)n * sizeof *sorted);
    map = malloc((size_t)d->nclasses * sizeof *map);
    if (!sorted || !map) {
        free(sorted);
        free(map);
        return bfit_fail(BFIT_ENOMEM, "out of host memory for class names");
    }
    for (int j = 0; j < n; j++)
        sorted[j] = (named){names[j], j};
    qsort(sorted, (size_t)n, sizeof *sorted, by_named); /* a model may have thousands of classes */
    for (int c = 0; c < d->nclasses; c++) {
        named key = {d->names + d->name_off[c], 0}, *hit;
        hit = bsearch(&key, sorted, (size_t)n, sizeof *sorted, by_named);
        map[c] = hit ? hit->index : -1;
        same = same && map[c] == c;
        rc = hit ? rc : BFIT_EINVAL;
    }
    if (rc != BFIT_OK)
        rc = unknown_classes(d, map, names, n, whose);
    else if (!same)
        rc = renumber(d, map, names, n);
    free(sorted);
    free(map);
    return rc;
}
