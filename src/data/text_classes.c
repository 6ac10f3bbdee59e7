/* text_classes.c - a folder of class folders of texts, for a classifier of
 * token ids (aclImdb's train/pos and train/neg): each .txt file one sample,
 * its bytes the ids (256 of them), cut to the model's T tokens and padded
 * with id -1, which the model reads as the end of the sequence (its length:
 * attention leaves the padding's keys out); its label the class folder's.
 *
 * Classes are numbered as image folders' are: the sorted names of the
 * folder's subfolders, hidden ones left out; a class's texts are its .txt
 * files, in the order of their paths (text_dir.c). Without test data of its
 * own, every 20th text of each class is the test part (5%, every class in
 * it), as a text's lines are split. */
#include "base/err.h"
#include "data/data_int.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct classes {
    char *names; /* NUL-terminated, one buffer */
    int64_t *off;
    size_t len;
    int n;
} classes;

static int by_name(const void *a, const void *b, void *names)
{
    return strcmp((const char *)names + *(const int64_t *)a, (const char *)names + *(const int64_t *)b);
}

static int add_class(classes *c, const char *name)
{
    size_t k = strlen(name) + 1;
    char *b = realloc(c->names, c->len + k);
    int64_t *o = b ? realloc(c->off, sizeof *o * (size_t)(c->n + 1)) : NULL;
    if (b)
        c->names = b;
    if (!o)
        return bfit_fail(BFIT_ENOMEM, "out of host memory for class names");
    c->off = o;
    memcpy(c->names + c->len, name, k);
    c->off[c->n++] = (int64_t)c->len;
    c->len += k;
    return BFIT_OK;
}

/* The sorted names of dir's subfolders (not hidden ones). */
static int list_classes(const char *dir, classes *c)
{
    DIR *dp = opendir(dir);
    struct dirent *de;
    char path[4096];
    struct stat st;
    int rc = BFIT_OK;

    if (!dp)
        return bfit_fail(BFIT_EIO, "%s: cannot list: %s", dir, strerror(errno));
    while (rc == BFIT_OK && (de = readdir(dp))) {
        if (de->d_name[0] == '.' || snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path ||
            stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        if ((rc = bfit_img_name_check(de->d_name, dir, 0)) == BFIT_OK)
            rc = add_class(c, de->d_name);
    }
    closedir(dp);
    if (rc == BFIT_OK && c->n)
        qsort_r(c->off, (size_t)c->n, sizeof *c->off, by_name, c->names);
    return rc;
}

/* Texts' ids one after another, with where each starts, its length and its label. */
typedef struct texts {
    int32_t *ids, *lens, *labels;
    int64_t *starts, nids, n, cap_ids, cap;
    int64_t cut; /* texts longer than seq bytes */
} texts;

static int grow(texts *t, int seq)
{
    if (t->n == t->cap) {
        int64_t cap = t->cap ? 2 * t->cap : 256;
        int32_t *l = realloc(t->lens, sizeof *l * (size_t)cap), *y = NULL;
        int64_t *s = NULL;
        if (l)
            y = realloc(t->labels, sizeof *y * (size_t)cap);
        if (y)
            s = realloc(t->starts, sizeof *s * (size_t)cap);
        if (l)
            t->lens = l;
        if (y)
            t->labels = y;
        if (!s)
            return bfit_fail(BFIT_ENOMEM, "out of host memory for %lld texts", (long long)cap);
        t->starts = s, t->cap = cap;
    }
    if (t->nids + seq > t->cap_ids) {
        int64_t cap = t->cap_ids ? 2 * t->cap_ids : 65536;
        int32_t *p;
        while (cap < t->nids + seq)
            cap *= 2;
        if (!(p = realloc(t->ids, sizeof *p * (size_t)cap)))
            return bfit_fail(BFIT_ENOMEM, "out of host memory for %lld token ids", (long long)cap);
        t->ids = p, t->cap_ids = cap;
    }
    return BFIT_OK;
}

/* The first seq bytes of the text at path, as the next sample of class label. */
static int read_text(texts *t, const char *path, int seq, int32_t label, unsigned char *buf)
{
    FILE *f = fopen(path, "rb");
    size_t n;
    int more, rc;

    if (!f)
        return bfit_fail(BFIT_EIO, "%s: cannot open: %s", path, strerror(errno));
    n = fread(buf, 1, (size_t)seq + 1, f);
    rc = ferror(f) ? bfit_fail(BFIT_EIO, "%s: cannot read: %s", path, strerror(errno)) : BFIT_OK;
    fclose(f);
    if (rc == BFIT_OK && n == 0)
        rc = bfit_fail(BFIT_EFORMAT, "%s: an empty text: a sample needs at least one byte; remove the file or "
                                     "give it its text", path);
    if (rc != BFIT_OK || (rc = grow(t, seq)) != BFIT_OK)
        return rc;
    more = n > (size_t)seq;
    n = more ? (size_t)seq : n;
    t->cut += more;
    for (size_t i = 0; i < n; i++)
        t->ids[t->nids + (int64_t)i] = buf[i];
    t->starts[t->n] = t->nids;
    t->lens[t->n] = (int32_t)n;
    t->labels[t->n++] = label;
    t->nids += (int64_t)n;
    return BFIT_OK;
}

/* Class c's texts of the part (train 1, test 0, all < 0) into t. */
static int read_class(texts *t, const char *dir, const classes *c, int k, int train, int seq, unsigned char *buf)
{
    char path[4096], **p = NULL;
    int n = 0, rc;

    snprintf(path, sizeof path, "%s/%s", dir, c->names + c->off[k]);
    if ((rc = bfit_text_paths(path, &p, &n)) != BFIT_OK)
        return rc;
    if (!n)
        rc = bfit_fail(BFIT_EFORMAT, "%s: class folder '%s' holds no .txt file (in it or its subfolders): each "
                       "class folder holds its texts, one sample a file whose name ends in .txt", dir,
                       c->names + c->off[k]);
    for (int i = 0; rc == BFIT_OK && i < n; i++)
        if (train < 0 || (i % BFIT_TEST_EVERY == BFIT_TEST_EVERY - 1) == !train)
            rc = read_text(t, p[i], seq, k, buf);
    bfit_text_paths_free(p, n);
    return rc;
}

static void texts_free(texts *t)
{
    free(t->ids);
    free(t->lens);
    free(t->labels);
    free(t->starts);
}

/* The data set takes t's arrays and c's names. */
static int make_set(const char *dir, int train, int seq, texts *t, classes *c, bfit_dataset **out)
{
    char name[4096];
    bfit_dataset *d;
    int rc;

    snprintf(name, sizeof name, "%s (%d classes, %s)", dir, c->n,
             train < 0 ? "whole" : train ? "train part" : "test part");
    if ((rc = bfit_data_alloc(name, &d)) != BFIT_OK)
        return rc;
    d->ids = t->ids, d->nids = t->nids, d->starts = t->starts, d->lens = t->lens, d->labels = t->labels;
    d->count = t->n;
    if (t->cut) /* said: a classifier that sees a text's beginning only may want a longer T */
        snprintf(d->note, sizeof d->note, "%lld of %lld texts are longer than the model's %d tokens: each is cut "
                 "to its first %d bytes", (long long)t->cut, (long long)t->n, seq, seq);
    memset(t, 0, sizeof *t);
    d->names = c->names, d->name_off = c->off;
    d->nclasses = c->n;
    memset(c, 0, sizeof *c);
    d->seq = seq;
    d->shape = bfit_shape_seq(seq, 1);
    *out = d;
    return BFIT_OK;
}

int bfit_dataset_load_text_classes(const char *dir, int train, int seq, bfit_dataset **out)
{
    classes c = {0};
    texts t = {0};
    unsigned char *buf = NULL;
    int rc;

    *out = NULL;
    if (seq < 1)
        return bfit_fail(BFIT_EINVAL, "%s: texts need a token model (`input tokens=T`) to cut them", dir);
    if ((rc = list_classes(dir, &c)) != BFIT_OK)
        goto fail;
    if (!c.n) {
        rc = bfit_fail(BFIT_EFORMAT, "%s has no class folders: a classifier of texts reads a folder of one folder "
                                     "per class, each holding .txt files", dir);
        goto fail;
    }
    if (!(buf = malloc((size_t)seq + 1))) {
        rc = bfit_fail(BFIT_ENOMEM, "out of host memory");
        goto fail;
    }
    for (int k = 0; rc == BFIT_OK && k < c.n; k++)
        rc = read_class(&t, dir, &c, k, train, seq, buf);
    if (rc == BFIT_OK && !t.n)
        rc = bfit_fail(BFIT_EINVAL, "%s (test part): no text: every %dth text of each class is the test part, and "
                       "no class has %d", dir, BFIT_TEST_EVERY, BFIT_TEST_EVERY);
    if (rc != BFIT_OK)
        goto fail;
    if ((rc = make_set(dir, train, seq, &t, &c, out)) != BFIT_OK)
        goto fail;
    free(buf);
    return BFIT_OK;
fail:
    free(buf);
    texts_free(&t);
    free(c.names);
    free(c.off);
    return rc;
}
