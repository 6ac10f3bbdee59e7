/* img_folder.c - the image-folder data set: the paths of a folder of class
 * folders (or of a list file of `path,label` lines), their labels and the
 * class names; the images are read and decoded only when a sample is made.
 *
 * Classes and files are numbered as torchvision's ImageFolder numbers them:
 * classes are the sorted names of the folder's subfolders; each class's
 * files come from a walk of its folder (following links) sorted by
 * directory, then by name; a file counts when its name ends in .jpg,
 * .jpeg or .png (any case).
 */
#include "data/data_int.h"
#include "base/err.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* Growing lists of strings, one buffer each (a data set of a million
 * files is two allocations, not a million). */
typedef struct strbuf {
    char *b;
    size_t n, cap;
} strbuf;

static int sb_add(strbuf *s, const char *a, size_t na, const char *b, int64_t *off)
{
    size_t nb = b ? strlen(b) + 1 : 0, need = s->n + na + nb + 1;
    if (need > s->cap) {
        size_t cap = s->cap ? s->cap : 4096;
        while (cap < need)
            cap *= 2;
        char *p = realloc(s->b, cap);
        if (!p)
            return bfit_fail(BFIT_ENOMEM, "out of host memory for the list of images");
        s->b = p, s->cap = cap;
    }
    *off = (int64_t)s->n;
    memcpy(s->b + s->n, a, na);
    s->n += na;
    if (b) {
        s->b[s->n++] = '/';
        memcpy(s->b + s->n, b, nb);
        s->n += nb;
    } else
        s->b[s->n++] = '\0';
    return BFIT_OK;
}

typedef struct entry {
    int64_t off;  /* of the path in the paths buffer */
    int rootlen;  /* its directory's length */
    int32_t label;
} entry;

typedef struct lister {
    strbuf paths;
    entry *e;
    int64_t n, cap;
    int64_t other; /* files of other types, ignored */
    int64_t loose; /* images beside a folder's class folders, not read */
} lister;

static int add_entry(lister *L, const char *root, const char *name, int32_t label)
{
    int64_t off = 0;
    int rc;
    if (L->n == L->cap) {
        int64_t cap = L->cap ? 2 * L->cap : 1024;
        entry *p = realloc(L->e, (size_t)cap * sizeof *p);
        if (!p)
            return bfit_fail(BFIT_ENOMEM, "out of host memory for the list of images");
        L->e = p, L->cap = cap;
    }
    if ((rc = sb_add(&L->paths, root, strlen(root), name, &off)) != BFIT_OK)
        return rc;
    L->e[L->n++] = (entry){off, (int)strlen(root), label};
    return BFIT_OK;
}

int bfit_img_ext_ok(const char *name)
{
    size_t n = strlen(name);
    return (n > 4 && (!strcasecmp(name + n - 4, ".jpg") || !strcasecmp(name + n - 4, ".png"))) ||
           (n > 5 && !strcasecmp(name + n - 5, ".jpeg"));
}

static int by_root_name(const void *x, const void *y, void *paths)
{
    const entry *a = x, *b = y;
    const char *pa = (const char *)paths + a->off, *pb = (const char *)paths + b->off;
    int n = a->rootlen < b->rootlen ? a->rootlen : b->rootlen, c = memcmp(pa, pb, (size_t)n);
    if (c || a->rootlen != b->rootlen)
        return c ? c : a->rootlen - b->rootlen;
    return strcmp(pa + a->rootlen + 1, pb + b->rootlen + 1);
}

/* Every image file under dir (recursively, following links) with label. */
static int walk(lister *L, const char *dir, int32_t label, int depth)
{
    DIR *dp = opendir(dir);
    struct dirent *de;
    char path[4096];
    struct stat st;
    int rc = BFIT_OK;

    if (!dp)
        return bfit_fail(BFIT_EIO, "cannot read the image folder %s: %s", dir, strerror(errno));
    if (depth > 32) {
        closedir(dp);
        return bfit_fail(BFIT_EFORMAT, "image folder %s: folders nested over 32 deep (a link loop?)", dir);
    }
    while (rc == BFIT_OK && (de = readdir(dp))) {
        if (de->d_name[0] == '.' && (!de->d_name[1] || (de->d_name[1] == '.' && !de->d_name[2])))
            continue;
        if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path)
            rc = bfit_fail(BFIT_EINVAL, "image path too long: %s/%s", dir, de->d_name);
        else if (stat(path, &st) != 0)
            continue; /* a dangling link: not a file */
        else if (S_ISDIR(st.st_mode))
            rc = walk(L, path, label, depth + 1);
        else if (bfit_img_ext_ok(de->d_name))
            rc = add_entry(L, dir, de->d_name, label);
        else
            L->other++;
    }
    closedir(dp);
    return rc;
}

/* The sorted names of dir's subfolders, as class names; *loose counts the
 * images beside them (not read: a user pointing at a folder of images
 * with one subfolder would otherwise train on that subfolder alone). */
static int list_classes(const char *dir, strbuf *names, int64_t **offs, int *n, int64_t *loose)
{
    DIR *dp = opendir(dir);
    struct dirent *de;
    char path[4096];
    struct stat st;
    int cap = 0, rc = BFIT_OK;

    *n = 0;
    if (!dp)
        return bfit_fail(BFIT_EIO, "cannot read the image folder %s: %s", dir, strerror(errno));
    while (rc == BFIT_OK && (de = readdir(dp))) {
        if (de->d_name[0] == '.' || snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path ||
            stat(path, &st) != 0)
            continue;
        if (!S_ISDIR(st.st_mode)) {
            *loose += bfit_img_ext_ok(de->d_name);
            continue;
        }
        if ((rc = bfit_img_name_check(de->d_name, dir, 0)) != BFIT_OK)
            break;
        if (*n == cap) {
            int64_t *p = realloc(*offs, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *p);
            if (!p) {
                rc = bfit_fail(BFIT_ENOMEM, "out of host memory for class names");
                break;
            }
            *offs = p;
        }
        rc = sb_add(names, de->d_name, strlen(de->d_name), NULL, &(*offs)[(*n)++]);
    }
    closedir(dp);
    return rc;
}

static int scan_folder(const char *dir, lister *L, strbuf *names, int64_t **offs, int *nclasses)
{
    char path[4096];
    int rc = list_classes(dir, names, offs, nclasses, &L->loose);

    if (rc != BFIT_OK)
        return rc;
    if (*nclasses == 0)
        return bfit_fail(BFIT_EFORMAT, "image folder %s has no class folders: give a folder of one folder per "
                         "class holding .jpg, .jpeg or .png files", dir);
    /* sort the names (offsets into names->b) by strcmp: insertion sort, classes are few */
    for (int i = 1; i < *nclasses; i++)
        for (int j = i; j > 0 && strcmp(names->b + (*offs)[j - 1], names->b + (*offs)[j]) > 0; j--) {
            int64_t t = (*offs)[j];
            (*offs)[j] = (*offs)[j - 1], (*offs)[j - 1] = t;
        }
    for (int c = 0; c < *nclasses; c++) {
        int64_t first = L->n;
        snprintf(path, sizeof path, "%s/%s", dir, names->b + (*offs)[c]);
        if ((rc = walk(L, path, c, 0)) != BFIT_OK)
            return rc;
        if (L->n == first)
            return bfit_fail(BFIT_EFORMAT, "image folder %s: class folder '%s' holds no .jpg, .jpeg or .png file",
                             dir, names->b + (*offs)[c]);
        qsort_r(L->e + first, (size_t)(L->n - first), sizeof *L->e, by_root_name, L->paths.b);
    }
    return BFIT_OK;
}

/* A list file's label: a class index, or a class name. */
static int parse_index(const char *s, int32_t *v)
{
    char *end;
    long x;
    if (!isdigit((unsigned char)*s))
        return 0;
    errno = 0;
    x = strtol(s, &end, 10);
    if (*end || errno || x > 1 << 24)
        return 0;
    *v = (int32_t)x;
    return 1;
}

/* Strip the line end and spaces around the fields; split at the last comma. */
static char *split_line(char *line)
{
    char *comma, *e;
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' '))
        line[--n] = '\0';
    if (!(comma = strrchr(line, ',')))
        return NULL;
    for (e = comma; e > line && e[-1] == ' '; e--)
        ;
    *e = '\0';
    for (comma++; *comma == ' '; comma++)
        ;
    return comma;
}

static int by_name(const void *x, const void *y, void *b)
{
    return strcmp((const char *)b + *(const int64_t *)x, (const char *)b + *(const int64_t *)y);
}

/* Class names of a list file: its labels, sorted, each once; every
 * entry's label (lab at loff[i]) becomes its class's index. */
static int name_classes(lister *L, const strbuf *lab, const int64_t *loff, strbuf *names, int64_t **offs,
                        int *nclasses)
{
    int64_t *u = malloc((size_t)L->n * sizeof *u), nu = 0;
    int rc = BFIT_OK;

    if (!u)
        return bfit_fail(BFIT_ENOMEM, "out of host memory for class names");
    memcpy(u, loff, (size_t)L->n * sizeof *u);
    qsort_r(u, (size_t)L->n, sizeof *u, by_name, lab->b);
    for (int64_t i = 0; i < L->n; i++)
        if (!nu || strcmp(lab->b + u[nu - 1], lab->b + u[i]))
            u[nu++] = u[i];
    if (!(*offs = malloc((size_t)(nu ? nu : 1) * sizeof **offs)))
        rc = bfit_fail(BFIT_ENOMEM, "out of host memory for class names");
    for (int64_t i = 0; rc == BFIT_OK && i < nu; i++)
        rc = sb_add(names, lab->b + u[i], strlen(lab->b + u[i]), NULL, &(*offs)[i]);
    for (int64_t i = 0; rc == BFIT_OK && i < L->n; i++) {
        int64_t lo = 0, hi = nu - 1; /* the label is among u: binary search */
        while (lo < hi) {
            int64_t mid = (lo + hi) / 2;
            if (strcmp(lab->b + u[mid], lab->b + loff[i]) < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        L->e[i].label = (int32_t)lo;
    }
    *nclasses = (int)nu;
    free(u);
    return rc;
}

/* Numeric labels: classes 0..max, named by their numbers. */
static int number_classes(lister *L, strbuf *names, int64_t **offs, int *nclasses)
{
    int32_t most = -1;
    char num[16];
    int rc = BFIT_OK;

    for (int64_t i = 0; i < L->n; i++)
        most = L->e[i].label > most ? L->e[i].label : most;
    *nclasses = most + 1;
    if (!(*offs = malloc((size_t)(most + 1) * sizeof **offs)))
        return bfit_fail(BFIT_ENOMEM, "out of host memory for class names");
    for (int c = 0; rc == BFIT_OK && c <= most; c++)
        rc = sb_add(names, num, (size_t)snprintf(num, sizeof num, "%d", c), NULL, &(*offs)[c]);
    return rc;
}

/* The fields of a line split at its last comma (path, label): the commas
 * in the path and 2. */
static int count_fields(const char *path)
{
    int n = 2;
    for (; *path; path++)
        n += *path == ',';
    return n;
}

/* One line of a list file: a path (relative to the list's folder) and a label. */
static int list_line(lister *L, const char *file, const char *dir, int64_t lineno, char *line, strbuf *lab,
                     int64_t **loff, int *numeric)
{
    char *label = split_line(line);
    int32_t v = 0;
    int rc;

    if (!label || !*line || !*label)
        return bfit_fail(BFIT_EFORMAT, "%s:%lld: expected `path,label`, got '%s'", file, (long long)lineno, line);
    if (!bfit_img_ext_ok(line)) {
        size_t first = strcspn(line, ",");
        if (line[first] == ',' && bfit_img_ext_like(line, first)) /* an image, then more than one field */
            return bfit_fail(BFIT_EFORMAT, "%s:%lld: %d fields (`%s,%s`); a list's line has 2: `path,label`",
                             file, (long long)lineno, count_fields(line), line, label);
        return bfit_fail(BFIT_EFORMAT, "%s:%lld: %s is not a .jpg, .jpeg or .png file", file, (long long)lineno,
                         line);
    }
    *numeric = *numeric && parse_index(label, &v);
    if (!*numeric && (rc = bfit_img_name_check(label, file, lineno)) != BFIT_OK)
        return rc;
    if ((rc = line[0] == '/' ? add_entry(L, "", line + 1, v) : add_entry(L, dir, line, v)) != BFIT_OK)
        return rc;
    if (L->n > 1 && !(L->n & (L->n - 1))) { /* grow the label offsets as the entries grow */
        int64_t *p = realloc(*loff, (size_t)L->n * 2 * sizeof *p);
        if (!p)
            return bfit_fail(BFIT_ENOMEM, "out of host memory for the list of images");
        *loff = p;
    }
    return sb_add(lab, label, strlen(label), NULL, &(*loff)[L->n - 1]);
}

static int scan_list(const char *file, lister *L, strbuf *names, int64_t **offs, int *nclasses, int *numbered)
{
    FILE *f = fopen(file, "r");
    char *line = NULL, dir[4096];
    size_t cap = 0;
    int64_t lineno = 0, *loff = malloc(2 * sizeof *loff);
    strbuf lab = {0};
    int numeric = 1, rc = BFIT_OK;
    const char *slash = strrchr(file, '/');

    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - file) : 1, slash ? file : ".");
    if (!f || !loff) {
        rc = f ? bfit_fail(BFIT_ENOMEM, "out of host memory") : bfit_fail(BFIT_EIO, "cannot open %s: %s", file,
                                                                          strerror(errno));
        goto out;
    }
    while (rc == BFIT_OK && getline(&line, &cap, f) > 0) {
        lineno++;
        if (line[strspn(line, " \r\n")] == '\0' || line[0] == '#')
            continue;
        rc = list_line(L, file, dir, lineno, line, &lab, &loff, &numeric);
    }
    if (rc == BFIT_OK && L->n == 0)
        rc = bfit_fail(BFIT_EFORMAT, "%s lists no images (expected lines of `path,label`)", file);
    if (rc == BFIT_OK)
        rc = numeric ? number_classes(L, names, offs, nclasses) : name_classes(L, &lab, loff, names, offs, nclasses);
    *numbered = numeric;
out:
    if (f)
        fclose(f);
    free(line);
    free(lab.b);
    free(loff);
    return rc;
}

/* 1 if name ends in .lst (any case): a list file by its name. */
static int named_list(const char *name)
{
    size_t n = strlen(name);
    return n > 4 && !strcasecmp(name + n - 4, ".lst");
}

/* 1 if the first n bytes of s are a path to a file: a folder, a '/',
 * then a name with an extension of letters and digits (dir/readme.txt). */
static int path_like(const char *s, size_t n)
{
    size_t dot = n, slash;
    while (dot > 0 && isalnum((unsigned char)s[dot - 1]))
        dot--;
    if (dot == 0 || dot == n || s[dot - 1] != '.' || n - dot > 5)
        return 0;
    for (slash = dot - 1; slash > 0 && s[slash - 1] != '/'; slash--)
        ;
    return slash > 1 && slash < dot - 1 && strspn(s + dot, "0123456789") < n - dot;
}

/* 1 if the line (a data line of a file) names a file: its first field
 * ends in an image file's extension (one we read or not, so that a .gif is
 * refused as a list's line rather than read as a CSV's) or is a path
 * (dir/readme.txt), or the part before its last comma ends in .jpg, .jpeg
 * or .png (a path with commas). A CSV's first field is a number or a
 * column's name, none of these. */
static int line_names_file(char *line)
{
    size_t first = strcspn(line, ",");
    int comma = line[first] == ',';
    while (first && line[first - 1] == ' ')
        first--;
    return (comma && (bfit_img_ext_like(line, first) || path_like(line, first))) ||
           (split_line(line) && bfit_img_ext_ok(line));
}

/* Data lines (neither blank nor # comments) read to decide list or not. */
#define LIST_SNIFF_LINES 64
/* A line a list can hold: a path (PATH_MAX 4096) and a label. */
#define LIST_LINE_MAX 8192

/* The next line without its '\n' into buf: 1, 0 at the end of the file,
 * -1 for a line too long to be a list's, which is not read further (a token
 * file or a text of one line can be hundreds of MB: getline held it whole). */
static int sniff_line(FILE *f, char *buf, size_t cap)
{
    size_t n = 0;
    int c;
    while ((c = getc(f)) != EOF && c != '\n') {
        if (n + 1 >= cap)
            return -1;
        buf[n++] = (char)c;
    }
    buf[n] = '\0';
    return c != EOF || n > 0;
}

int bfit_img_is_list(const char *path, int text_ok)
{
    FILE *f = fopen(path, "r");
    char *line;
    size_t n = strlen(path);
    int yes = 0, seen = 0, txt = n > 4 && !strcmp(path + n - 4, ".txt");

    if (!f)
        return 0;
    if (named_list(path)) {
        fclose(f);
        return 1;
    }
    if (!(line = malloc(LIST_LINE_MAX))) { /* not a list as far as can be told: the reader says the rest */
        fclose(f);
        return 0;
    }
    /* a .txt read as text for a token model decides by its first line only,
     * so that a text's later line that happens to name an image does not
     * make it a list; elsewhere a list's first line may be the wrong one */
    while (!yes && seen < (text_ok && txt ? 1 : LIST_SNIFF_LINES)) {
        int got = sniff_line(f, line, LIST_LINE_MAX);
        if (got < 0) { /* no list has such a line: it is some other file */
            seen++;
            break;
        }
        if (got == 0)
            break;
        if (line[strspn(line, " \r")] == '\0' || line[0] == '#')
            continue;
        seen++;
        yes = line_names_file(line);
    }
    /* nothing but blanks and comments: a .txt is no text for a model that
     * is not a token model, so it is an empty list (said as such) */
    yes = yes || (!seen && txt && !text_ok);
    free(line);
    fclose(f);
    return yes;
}

void bfit_imgset_free(bfit_imgset *g)
{
    if (!g)
        return;
    free(g->paths);
    free(g->off);
    free(g);
}

/* Images beside a folder's class folders are not read: said, since a user
 * pointing at a folder of images with one subfolder would otherwise train
 * on that subfolder alone. */
static void loose_note(bfit_dataset *d, const lister *L)
{
    if (L->loose)
        snprintf(d->note, sizeof d->note, "%lld .jpg/.jpeg/.png file(s) directly in it are not read: only the "
                 "images in its class folders (one folder per class)", (long long)L->loose);
}

void bfit_img_note_one_class(bfit_dataset *d)
{
    size_t n = strlen(d->note);
    if (d->img && d->nclasses == 1 && n + 2 < sizeof d->note)
        snprintf(d->note + n, sizeof d->note - n, "%s1 class only ('%s'): a classifier needs 2 or more",
                 n ? "; " : "", bfit_dataset_class_name(d, 0));
}

/* The data set from a scan: paths and labels move into it. */
static int make_set(const char *spec, const bfit_data_opts *o, lister *L, strbuf *names, int64_t *offs,
                    int nclasses, int numbered, bfit_dataset **out)
{
    bfit_dataset *d = NULL;
    bfit_imgset *g = calloc(1, sizeof *g);
    int rc = g ? bfit_data_alloc(spec, &d) : bfit_fail(BFIT_ENOMEM, "out of host memory");

    if (rc == BFIT_OK && (!(g->off = malloc((size_t)L->n * sizeof *g->off)) ||
                          !(d->labels = malloc((size_t)L->n * sizeof *d->labels))))
        rc = bfit_fail(BFIT_ENOMEM, "out of host memory for %lld images", (long long)L->n);
    if (rc != BFIT_OK) {
        bfit_imgset_free(g);
        bfit_dataset_free(d);
        free(offs);
        return rc;
    }
    for (int64_t i = 0; i < L->n; i++) {
        g->off[i] = L->e[i].off;
        d->labels[i] = L->e[i].label;
    }
    g->paths = L->paths.b, L->paths.b = NULL;
    d->names = names->b, names->b = NULL;
    d->name_off = offs;
    g->tf = (bfit_img_tf){o->img_c, o->img_h, o->img_w, o->img_resize, 0, 0, !o->img_no_dct};
    g->skip_bad = o->img_skip_bad;
    d->numbered = numbered;
    g->other = L->other;
    atomic_init(&g->skipped, 0);
    d->img = g;
    d->shape = bfit_shape_chw(o->img_c, o->img_h, o->img_w);
    d->count = L->n;
    d->nclasses = nclasses;
    loose_note(d, L);
    *out = d;
    return BFIT_OK;
}

int bfit_dataset_load_images(const char *spec, const bfit_data_opts *o, bfit_dataset **out)
{
    lister L = {0};
    strbuf names = {0};
    int64_t *offs = NULL;
    int nclasses = 0, numbered = 0, rc;
    struct stat st;

    *out = NULL;
    if (o->seq > 0)
        return bfit_fail(BFIT_EINVAL, "%s reads as images (%s), but a token model reads token ids: give it kjv, a "
                         "token file, a text named .txt whose first line is not an image's `path,label`, or a "
                         "folder of such texts (docs/data.md)", spec, stat(spec, &st) == 0 && S_ISDIR(st.st_mode)
                         ? "a folder of class folders" : "a list whose lines name image files as `path,label`");
    if (o->img_c != 1 && o->img_c != 3)
        return bfit_fail(BFIT_EINVAL, "images of %s: the model's input has %d channels; images give 1 (gray) or "
                         "3 (RGB)", spec, o->img_c);
    if (o->img_h < 1 || o->img_w < 1)
        return bfit_fail(BFIT_EINVAL, "images of %s need the model's input size (an image model: input CxHxW)",
                         spec);
    rc = stat(spec, &st) == 0 && S_ISDIR(st.st_mode) ? scan_folder(spec, &L, &names, &offs, &nclasses)
                                                     : scan_list(spec, &L, &names, &offs, &nclasses, &numbered);
    if (rc == BFIT_OK && L.n > INT32_MAX)
        rc = bfit_fail(BFIT_EINVAL, "%s: %lld images, at most %d", spec, (long long)L.n, INT32_MAX);
    if (rc == BFIT_OK)
        rc = make_set(spec, o, &L, &names, offs, nclasses, numbered, out);
    else
        free(offs);
    free(L.paths.b);
    free(L.e);
    free(names.b);
    return rc;
}

int bfit_dataset_is_images(const bfit_dataset *d) { return d && d->img != NULL; }

const char *bfit_dataset_class_name(const bfit_dataset *d, int c)
{
    return d->names && c >= 0 && c < d->nclasses ? d->names + d->name_off[c] : NULL;
}

const char *bfit_dataset_image_path(const bfit_dataset *d, int64_t i)
{
    return d->img && i >= 0 && i < d->count ? d->img->paths + d->img->off[i] : NULL;
}

int64_t bfit_dataset_images_skipped(const bfit_dataset *d)
{
    return d && d->img ? (int64_t)atomic_load(&d->img->skipped) : 0;
}
