/* csv.c - tabular data: one sample per line, numeric features and an
 * integer label column. No quoting: the fields are numbers. Errors say
 * file:line: column N, because a CSV goes wrong one cell at a time. */
#include "data/data_int.h"
#include "base/err.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct csv_parse {
    const char *path;
    bfit_data_opts o;
    char **field;     /* the current row split in place */
    int nfield, field_cap;
    int ncols, lc;    /* columns of the first row; label column resolved */
    int64_t first;    /* line number of the first row, for messages */
    float *x;
    int32_t *y;
    int64_t n, cap;   /* rows stored, rows allocated */
    int maxl;
    char note[160];   /* the header decision, for people */
} csv_parse;

static int is_blank(char c, char delim) { return (c == ' ' || c == '\t') && c != delim; }

/* Split line at delim into trimmed fields, growing the field array. */
static int split(csv_parse *p, char *line)
{
    char *s = line;

    p->nfield = 0;
    for (;;) {
        char *end = strchr(s, p->o.delim);
        if (p->nfield == p->field_cap) {
            int ncap = p->field_cap ? 2 * p->field_cap : 64;
            char **f = realloc(p->field, (size_t)ncap * sizeof *f);
            if (!f)
                return bfit_fail(BFIT_ENOMEM, "out of host memory reading %s", p->path);
            p->field = f;
            p->field_cap = ncap;
        }
        if (end)
            *end = '\0';
        while (is_blank(*s, p->o.delim))
            s++;
        char *t = s + strlen(s);
        while (t > s && is_blank(t[-1], p->o.delim))
            *--t = '\0';
        p->field[p->nfield++] = s;
        if (!end)
            return BFIT_OK;
        s = end + 1;
    }
}

/* A finite number filling the whole field. */
static int parse_num(const char *s, double *v)
{
    char *end;

    if (!*s)
        return 0;
    errno = 0;
    *v = strtod(s, &end);
    return *end == '\0' && errno != ERANGE && isfinite(*v);
}

/* A feature: a number that a float holds (stored as float, a larger one
 * would become inf and surface far away as a NaN loss or a normalisation
 * error). One too small for a float is 0 or a subnormal, harmless. */
static int parse_feature(const csv_parse *p, int64_t line, int col, float *out)
{
    const char *s = p->field[col];
    char *end;
    double v;

    v = *s ? strtod(s, &end) : NAN;
    if (!*s || *end != '\0' || isnan(v))
        return bfit_fail(BFIT_EFORMAT, "%s:%lld: column %d: '%.40s' is not a number", p->path, (long long)line,
                         col + 1, s);
    if (!(fabs(v) <= FLT_MAX))
        return bfit_fail(BFIT_EFORMAT, "%s:%lld: column %d: value '%.40s' is beyond the range of a 32-bit float "
                         "(about -3.4e38 to 3.4e38)", p->path, (long long)line, col + 1, s);
    *out = (float)v;
    return BFIT_OK;
}

/* Cells of the current row that are numbers; *first_not: the first that
 * is not (-1 if all are). */
static int count_numeric(const csv_parse *p, int *first_not)
{
    double v;
    int n = 0;
    *first_not = -1;
    for (int j = 0; j < p->nfield; j++) {
        if (parse_num(p->field[j], &v))
            n++;
        else if (*first_not < 0)
            *first_not = j;
    }
    return n;
}

/* What the loader decided about the header, for the data set's note. */
static void note_header(csv_parse *p, int64_t line, int is_header, const char *how)
{
    size_t used;
    if (!is_header) {
        snprintf(p->note, sizeof p->note, "no header (%s): line %lld is data", how, (long long)line);
        return;
    }
    used = (size_t)snprintf(p->note, sizeof p->note, "line %lld is a header (%s): ", (long long)line, how);
    for (int j = 0; j < p->nfield && used + 4 < sizeof p->note; j++)
        used += (size_t)snprintf(p->note + used, sizeof p->note - used, "%s%s", j ? "," : "", p->field[j]);
    if (used >= sizeof p->note)
        memcpy(p->note + sizeof p->note - 4, "...", 4);
}

/* The first row fixes the column count and, with header auto, says whether
 * it is a header: one that holds only names is, one of only numbers is data,
 * and one that mixes them is neither (a typo in the first data row, which a
 * looser rule would drop unannounced). */
static int first_row(csv_parse *p, int64_t line, int *is_header)
{
    int numeric, bad;

    p->ncols = p->nfield;
    p->first = line;
    if (p->ncols < 2)
        return bfit_fail(BFIT_EFORMAT, "%s:%lld: found %d column, need at least 2 (features and a label)%s",
                         p->path, (long long)line, p->ncols,
                         p->o.delim == ',' ? "" : " (is the separator right?)");
    p->lc = p->o.label_col < 0 ? p->ncols + p->o.label_col : p->o.label_col;
    if (p->lc < 0 || p->lc >= p->ncols)
        return bfit_fail(BFIT_EINVAL, "label column %d does not exist: %s has %d columns (0..%d, or -1 for the last)",
                         p->o.label_col, p->path, p->ncols, p->ncols - 1);
    if (p->o.header >= 0) {
        *is_header = p->o.header == 1;
        note_header(p, line, *is_header, *is_header ? "header yes" : "header no");
        return BFIT_OK;
    }
    numeric = count_numeric(p, &bad);
    if (numeric > 0 && numeric < p->nfield)
        return bfit_fail(BFIT_EFORMAT, "%s:%lld: column %d: '%.40s' is not a number, but %d other cell%s of this "
                         "first row %s: it is neither a header (names only) nor a data row (numbers only); fix the "
                         "row, or set the header to yes (line %lld is a header) or no", p->path, (long long)line,
                         bad + 1, p->field[bad], numeric, numeric == 1 ? "" : "s", numeric == 1 ? "is" : "are",
                         (long long)line);
    *is_header = numeric == 0;
    note_header(p, line, *is_header, *is_header ? "auto: only names" : "auto: only numbers");
    return BFIT_OK;
}

static int grow(csv_parse *p)
{
    int64_t f = p->ncols - 1, ncap = p->cap ? 2 * p->cap : 1024;
    float *x;
    int32_t *y;

    if (ncap > INT32_MAX)
        ncap = INT32_MAX;
    if (p->n == ncap)
        return bfit_fail(BFIT_EFORMAT, "%s: more than %d rows", p->path, INT32_MAX);
    x = realloc(p->x, (size_t)(ncap * f) * sizeof *x);
    if (!x)
        return bfit_fail(BFIT_ENOMEM, "out of host memory reading %s (%lld rows)", p->path, (long long)ncap);
    p->x = x;
    y = realloc(p->y, (size_t)ncap * sizeof *y);
    if (!y)
        return bfit_fail(BFIT_ENOMEM, "out of host memory reading %s (%lld rows)", p->path, (long long)ncap);
    p->y = y;
    p->cap = ncap;
    return BFIT_OK;
}

static int parse_label(csv_parse *p, int64_t line, int col, int32_t *out)
{
    const char *s = p->field[col];
    int nc = p->o.nclasses;
    double v;

    if (!parse_num(s, &v) || v != floor(v))
        return bfit_fail(BFIT_EFORMAT, "%s:%lld: column %d: label '%.40s' is not an integer",
                         p->path, (long long)line, col + 1, s);
    if (v < 0 || (nc && v >= nc) || v > 1e6) {
        if (nc)
            return bfit_fail(BFIT_EFORMAT, "%s:%lld: column %d: label %.0f out of range: allowed 0..%d",
                             p->path, (long long)line, col + 1, v, nc - 1);
        return bfit_fail(BFIT_EFORMAT, "%s:%lld: column %d: label %.0f out of range: allowed 0..1000000",
                         p->path, (long long)line, col + 1, v);
    }
    *out = (int32_t)v;
    return BFIT_OK;
}

static int data_row(csv_parse *p, int64_t line)
{
    float *x;
    int rc;

    if (p->nfield != p->ncols)
        return bfit_fail(BFIT_EFORMAT, "%s:%lld: expected %d fields (as in line %lld), found %d",
                         p->path, (long long)line, p->ncols, (long long)p->first, p->nfield);
    if (p->n == p->cap && (rc = grow(p)))
        return rc;
    x = p->x + p->n * (p->ncols - 1);
    for (int j = 0; j < p->ncols; j++) {
        if (j == p->lc) {
            rc = parse_label(p, line, j, &p->y[p->n]);
            if (rc)
                return rc;
            if (p->y[p->n] > p->maxl)
                p->maxl = p->y[p->n];
            continue;
        }
        if ((rc = parse_feature(p, line, j, x++)) != BFIT_OK)
            return rc;
    }
    p->n++;
    return BFIT_OK;
}

/* A NUL byte in a line would end it early for every string function (a
 * row that starts with one looked blank and was dropped): the file is not
 * text there, and says where. */
static int check_nul(const csv_parse *p, const char *buf, size_t len, int64_t line)
{
    const char *z = memchr(buf, '\0', len);
    int col = 1;
    if (!z)
        return BFIT_OK;
    for (const char *c = buf; c < z; c++)
        col += *c == p->o.delim;
    return bfit_fail(BFIT_EFORMAT, "%s:%lld: column %d: a NUL byte (byte %lld of the line): a CSV file is text, "
                     "numbers separated by '%c'", p->path, (long long)line, col, (long long)(z - buf) + 1, p->o.delim);
}

static int parse_lines(csv_parse *p, FILE *fp)
{
    char *buf = NULL;
    size_t bufcap = 0;
    ssize_t len;
    int64_t line = 0;
    int rc = BFIT_OK;

    while ((len = getline(&buf, &bufcap, fp)) != -1) {
        int is_header = 0;
        char *s = buf;
        line++;
        while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
            buf[--len] = '\0';
        if ((rc = check_nul(p, buf, (size_t)len, line)) != BFIT_OK)
            break;
        while (*s == ' ' || *s == '\t')
            s++;
        if (*s == '\0' || *s == '#')
            continue;
        rc = split(p, buf);
        if (rc)
            break;
        if (p->ncols == 0) {
            rc = first_row(p, line, &is_header);
            if (rc)
                break;
            if (is_header)
                continue;
        }
        rc = data_row(p, line);
        if (rc)
            break;
    }
    if (rc == BFIT_OK && ferror(fp))
        rc = bfit_fail(BFIT_EIO, "%s: read error after line %lld: %s", p->path, (long long)line, strerror(errno));
    if (rc == BFIT_OK && p->n == 0)
        rc = bfit_fail(BFIT_EFORMAT, "%s: no data rows", p->path);
    free(buf);
    return rc;
}

int bfit_dataset_load_csv(const char *path, const bfit_data_opts *o, bfit_dataset **out)
{
    static const bfit_data_opts defaults = BFIT_DATA_OPTS_INIT;
    csv_parse p = {.path = path};
    bfit_dataset *d = NULL;
    struct stat st;
    FILE *fp = NULL;
    int rc;

    *out = NULL;
    p.o = o ? *o : defaults;
    if (!p.o.delim)
        p.o.delim = ',';
    if (!path)
        return bfit_fail(BFIT_EINVAL, "load_csv: NULL path");
    if (p.o.nclasses < 0)
        return bfit_fail(BFIT_EINVAL, "nclasses %d: must be >= 0 (0: from the labels)", p.o.nclasses);
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return bfit_fail(BFIT_EIO, "%s is a directory, expected a CSV file", path);
    fp = fopen(path, "r");
    if (!fp)
        return bfit_fail(BFIT_EIO, "cannot open %s: %s", path, strerror(errno));
    rc = parse_lines(&p, fp);
    if (rc)
        goto out_free;
    rc = bfit_data_alloc(path, &d);
    if (rc)
        goto out_free;
    d->f32 = p.x;
    d->labels = p.y;
    p.x = NULL;
    p.y = NULL;
    d->shape = bfit_shape_vec(p.ncols - 1);
    d->count = p.n;
    d->nclasses = p.o.nclasses ? p.o.nclasses : p.maxl + 1;
    snprintf(d->note, sizeof d->note, "%s", p.note);
    *out = d;
out_free:
    free(p.x);
    free(p.y);
    free(p.field);
    fclose(fp);
    return rc;
}
