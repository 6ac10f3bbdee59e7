/* safetensors.c - a strict safetensors reader and an atomic writer.
 *
 * The reader trusts nothing in the file: every length, offset and shape is
 * checked against the others and against the file's size before a pointer
 * is formed, because checkpoints and weights may come from anywhere. */
#include "base/atomic.h"
#include "base/err.h"
#include "mem/arena.h"
#include "tensor/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

struct bfit_st_file {
    int n;
    bfit_st_tensor *t;
    int nmeta;
    char **keys, **vals;
    void *buf;          /* the byte buffer, 64-byte aligned */
    size_t bufsize;
};

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"U16", 2}, {"I16", 2}, {"F16", 2},
    {"BF16", 2}, {"U32", 4}, {"I32", 4}, {"F32", 4},     {"U64", 8},     {"I64", 8}, {"F64", 8},
};

/* The table's own spelling of a dtype name, so tensors can point at it. */
static const char *dtype_canon(const char *dtype, size_t *size)
{
    if (!dtype)
        return NULL;
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (strcmp(dtypes[i].name, dtype) == 0) {
            if (size)
                *size = dtypes[i].size;
            return dtypes[i].name;
        }
    return NULL;
}

size_t bfit_st_dtype_size(const char *dtype)
{
    size_t s = 0;
    return dtype_canon(dtype, &s) ? s : 0;
}

int64_t bfit_st_numel(const bfit_st_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

/* Element count of a shape times esize, or -1 if it would pass 2^62 (no real
 * tensor is that big; it keeps the arithmetic below free of overflow). */
static int64_t shape_bytes(const int64_t *shape, int ndim, size_t esize)
{
    int64_t n = (int64_t)esize;
    const int64_t lim = (int64_t)1 << 62;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return -1;
        if (shape[i] != 0 && n > lim / shape[i])
            return -1;
        n *= shape[i];
    }
    return n;
}

/* ---- reading -------------------------------------------------------------- */

void bfit_st_free(bfit_st_file *f)
{
    if (!f)
        return;
    for (int i = 0; i < f->n; i++)
        free((char *)f->t[i].name);
    for (int i = 0; i < f->nmeta; i++) {
        free(f->keys[i]);
        free(f->vals[i]);
    }
    free(f->t);
    free(f->keys);
    free(f->vals);
    free(f->buf);
    free(f);
}

static int pread_full(int fd, void *buf, size_t n, off_t off, const char *path)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n > (1u << 30) ? (1u << 30) : n, off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return bfit_fail(BFIT_EIO, "%s: read failed: %s", path, strerror(errno));
        if (r == 0)
            return bfit_fail(BFIT_EFORMAT, "%s: file ended early (changed while being read?)", path);
        p += r;
        n -= (size_t)r;
        off += r;
    }
    return BFIT_OK;
}

/* A JSON number that is an exact non-negative integer below 2^53 (JSON's
 * doubles hold no more exactly). */
static int json_uint(const cJSON *j, int64_t *out)
{
    double d;
    if (!cJSON_IsNumber(j))
        return 0;
    d = j->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || floor(d) != d)
        return 0;
    *out = (int64_t)d;
    return 1;
}

/* Begin/end of each tensor, for the overlap check. */
typedef struct span {
    int64_t begin, end;
    int idx;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int parse_metadata(bfit_st_file *f, const char *path, const cJSON *md)
{
    int n = 0;
    const cJSON *it;
    if (!cJSON_IsObject(md))
        return bfit_fail(BFIT_EFORMAT, "%s: \"__metadata__\" must be an object of strings", path);
    cJSON_ArrayForEach(it, md) n++;
    f->keys = calloc((size_t)n + 1, sizeof *f->keys);
    f->vals = calloc((size_t)n + 1, sizeof *f->vals);
    if (!f->keys || !f->vals)
        return bfit_fail(BFIT_ENOMEM, "%s: out of host memory for metadata", path);
    cJSON_ArrayForEach(it, md)
    {
        if (!cJSON_IsString(it))
            return bfit_fail(BFIT_EFORMAT, "%s: metadata \"%s\" must be a string", path, it->string);
        for (int i = 0; i < f->nmeta; i++)
            if (strcmp(f->keys[i], it->string) == 0)
                return bfit_fail(BFIT_EFORMAT, "%s: metadata key \"%s\" appears twice", path, it->string);
        f->keys[f->nmeta] = strdup(it->string);
        f->vals[f->nmeta] = strdup(it->valuestring);
        if (!f->keys[f->nmeta] || !f->vals[f->nmeta]) {
            f->nmeta++; /* so bfit_st_free releases the one that was made */
            return bfit_fail(BFIT_ENOMEM, "%s: out of host memory for metadata", path);
        }
        f->nmeta++;
    }
    return BFIT_OK;
}

/* One tensor's entry: dtype, shape and offsets, checked against each other
 * and against the buffer size. */
static int parse_tensor(bfit_st_file *f, const char *path, const cJSON *e, int64_t bsize, span *sp)
{
    const char *name = e->string;
    bfit_st_tensor *t = &f->t[f->n];
    const cJSON *dt = NULL, *shape = NULL, *offs = NULL, *it;
    int64_t begin, end, bytes;
    size_t esize = 0;
    int nd = 0;

    if (!cJSON_IsObject(e))
        return bfit_fail(BFIT_EFORMAT, "%s: tensor \"%s\": entry must be an object with dtype, shape, data_offsets",
                         path, name);
    cJSON_ArrayForEach(it, e)
    {
        const cJSON **slot = strcmp(it->string, "dtype") == 0          ? &dt
                             : strcmp(it->string, "shape") == 0        ? &shape
                             : strcmp(it->string, "data_offsets") == 0 ? &offs
                                                                       : NULL;
        if (!slot)
            return bfit_fail(BFIT_EFORMAT,
                             "%s: tensor \"%s\": unknown field \"%s\" (expected dtype, shape, data_offsets)", path,
                             name, it->string);
        if (*slot)
            return bfit_fail(BFIT_EFORMAT, "%s: tensor \"%s\": field \"%s\" appears twice", path, name, it->string);
        *slot = it;
    }
    if (!dt || !shape || !offs)
        return bfit_fail(BFIT_EFORMAT, "%s: tensor \"%s\": missing field \"%s\"", path, name,
                         !dt ? "dtype" : !shape ? "shape" : "data_offsets");
    if (!cJSON_IsString(dt))
        return bfit_fail(BFIT_EFORMAT, "%s: tensor \"%s\": dtype must be a string", path, name);
    t->dtype = dtype_canon(dt->valuestring, &esize);
    if (!t->dtype)
        return bfit_fail(BFIT_EFORMAT,
                         "%s: tensor \"%s\": unknown dtype \"%s\" (known: F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 "
                         "U16 U8 BOOL F8_E4M3 F8_E5M2)", path, name, dt->valuestring);
    if (!cJSON_IsArray(shape))
        return bfit_fail(BFIT_EFORMAT, "%s: tensor \"%s\": shape must be an array of integers", path, name);
    cJSON_ArrayForEach(it, shape)
    {
        if (nd == BFIT_ST_MAXDIM)
            return bfit_fail(BFIT_EFORMAT, "%s: tensor \"%s\": more than %d dimensions", path, name, BFIT_ST_MAXDIM);
        if (!json_uint(it, &t->shape[nd]))
            return bfit_fail(BFIT_EFORMAT, "%s: tensor \"%s\": shape[%d] is not a non-negative integer", path,
                             name, nd);
        nd++;
    }
    t->ndim = nd;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !json_uint(cJSON_GetArrayItem(offs, 0), &begin) ||
        !json_uint(cJSON_GetArrayItem(offs, 1), &end))
        return bfit_fail(BFIT_EFORMAT, "%s: tensor \"%s\": data_offsets must be [begin, end], non-negative integers",
                         path, name);
    if (end < begin)
        return bfit_fail(BFIT_EFORMAT, "%s: tensor \"%s\": data_offsets [%lld, %lld] end before they begin", path, name,
                         (long long)begin, (long long)end);
    if (end > bsize)
        return bfit_fail(BFIT_EFORMAT, "%s: tensor \"%s\": data_offsets [%lld, %lld] run past the %lld bytes of data "
                         "after the header: the file is shorter than its header says (truncated)", path, name,
                         (long long)begin, (long long)end, (long long)bsize);
    bytes = shape_bytes(t->shape, nd, esize);
    if (bytes < 0)
        return bfit_fail(BFIT_EFORMAT, "%s: tensor \"%s\": shape is impossibly large", path, name);
    if (bytes != end - begin)
        return bfit_fail(BFIT_EFORMAT, "%s: tensor \"%s\": shape of %lld %s elements is %lld bytes but data_offsets "
                         "[%lld, %lld] hold %lld", path, name, (long long)(bytes / (int64_t)esize), t->dtype,
                         (long long)bytes, (long long)begin, (long long)end, (long long)(end - begin));
    t->name = strdup(name);
    if (!t->name)
        return bfit_fail(BFIT_ENOMEM, "%s: out of host memory", path);
    t->data = (const char *)f->buf + begin;
    t->nbytes = (size_t)bytes;
    sp->begin = begin;
    sp->end = end;
    sp->idx = f->n;
    f->n++;
    return BFIT_OK;
}

/* Names must be unique, and the tensors must tile the buffer exactly: no
 * overlap, no hole, nothing after the last one (the format forbids holes so
 * a file cannot smuggle other content). */
static int check_layout(const bfit_st_file *f, const char *path, span *sp, int64_t bsize)
{
    int64_t pos = 0;
    const char **names;
    int rc = BFIT_OK;

    names = malloc(sizeof *names * ((size_t)f->n + 1));
    if (!names)
        return bfit_fail(BFIT_ENOMEM, "%s: out of host memory", path);
    for (int i = 0; i < f->n; i++)
        names[i] = f->t[i].name;
    qsort(names, (size_t)f->n, sizeof *names, name_cmp);
    for (int i = 1; i < f->n && rc == BFIT_OK; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            rc = bfit_fail(BFIT_EFORMAT, "%s: tensor \"%s\" appears twice", path, names[i]);
    free(names);
    if (rc != BFIT_OK)
        return rc;
    qsort(sp, (size_t)f->n, sizeof *sp, span_cmp);
    for (int i = 0; i < f->n; i++) {
        if (sp[i].begin < pos)
            return bfit_fail(BFIT_EFORMAT, "%s: tensor \"%s\": data_offsets [%lld, %lld] overlap tensor \"%s\"", path,
                             f->t[sp[i].idx].name, (long long)sp[i].begin, (long long)sp[i].end,
                             f->t[sp[i - 1].idx].name);
        if (sp[i].begin > pos)
            return bfit_fail(BFIT_EFORMAT, "%s: buffer bytes [%lld, %lld) before tensor \"%s\" belong to no tensor",
                             path, (long long)pos, (long long)sp[i].begin, f->t[sp[i].idx].name);
        pos = sp[i].end;
    }
    if (pos != bsize)
        return bfit_fail(BFIT_EFORMAT, "%s: buffer is %lld bytes but the tensors cover only %lld", path,
                         (long long)bsize, (long long)pos);
    return BFIT_OK;
}

static int parse_header(bfit_st_file *f, const char *path, const char *hdr, size_t hlen, int64_t bsize)
{
    const char *end = NULL;
    cJSON *root, *e;
    span *sp = NULL;
    int n = 0, rc = BFIT_OK, seen_meta = 0;

    if (hdr[0] != '{')
        return bfit_fail(BFIT_EFORMAT, "%s: header does not start with '{' (not a safetensors file?)", path);
    root = cJSON_ParseWithLengthOpts(hdr, hlen, &end, 0);
    if (!root) {
        size_t at = end && end >= hdr ? (size_t)(end - hdr) : 0;
        return bfit_fail(BFIT_EFORMAT, "%s: header is not valid JSON (near byte %zu of %zu)", path, at, hlen);
    }
    for (const char *p = end; p < hdr + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            rc = bfit_fail(BFIT_EFORMAT, "%s: header has bytes after its JSON object (at byte %zu of %zu)", path,
                           (size_t)(p - hdr), hlen);
            goto free_root;
        }
    if (!cJSON_IsObject(root)) {
        rc = bfit_fail(BFIT_EFORMAT, "%s: header must be a JSON object", path);
        goto free_root;
    }
    cJSON_ArrayForEach(e, root) n++;
    f->t = calloc((size_t)n + 1, sizeof *f->t);
    sp = calloc((size_t)n + 1, sizeof *sp);
    if (!f->t || !sp) {
        rc = bfit_fail(BFIT_ENOMEM, "%s: out of host memory for %d tensors", path, n);
        goto free_sp;
    }
    cJSON_ArrayForEach(e, root)
    {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (seen_meta++) {
                rc = bfit_fail(BFIT_EFORMAT, "%s: \"__metadata__\" appears twice", path);
                goto free_sp;
            }
            rc = parse_metadata(f, path, e);
        } else {
            rc = parse_tensor(f, path, e, bsize, &sp[f->n]);
        }
        if (rc != BFIT_OK)
            goto free_sp;
    }
    rc = check_layout(f, path, sp, bsize);
free_sp:
    free(sp);
free_root:
    cJSON_Delete(root);
    return rc;
}

/* Checksums ("crc32.<tensor>": 8 hex digits of zlib's CRC-32 over the
 * tensor's bytes) are verified for every tensor that has one: a damaged
 * file is an error naming the tensor, never weights loaded half right. */
static int verify_checksums(const bfit_st_file *f, const char *path)
{
    for (int i = 0; i < f->nmeta; i++) {
        const char *name, *hex = f->vals[i];
        const bfit_st_tensor *t;
        unsigned long want, got;
        char *end;
        if (strncmp(f->keys[i], BFIT_ST_CRC_PREFIX, strlen(BFIT_ST_CRC_PREFIX)) != 0)
            continue;
        name = f->keys[i] + strlen(BFIT_ST_CRC_PREFIX);
        if (!(t = bfit_st_find(f, name)))
            return bfit_fail(BFIT_EFORMAT, "%s: metadata \"%s\" is the checksum of a tensor the file does not have",
                             path, f->keys[i]);
        want = strlen(hex) == 8 && strspn(hex, "0123456789abcdef") == 8 ? strtoul(hex, &end, 16) : ULONG_MAX;
        if (want == ULONG_MAX)
            return bfit_fail(BFIT_EFORMAT, "%s: metadata \"%s\" is '%.20s', not 8 lowercase hex digits", path,
                             f->keys[i], hex);
        got = bfit_st_crc32(t->data, t->nbytes);
        if (got != want)
            return bfit_fail(BFIT_EFORMAT, "%s: tensor \"%s\" fails its checksum (crc32 %08lx, recorded %08lx): the "
                             "file is damaged", path, name, got, want);
    }
    return BFIT_OK;
}

unsigned long bfit_st_crc32(const void *p, size_t n)
{
    uLong c = crc32(0L, Z_NULL, 0);
    const Bytef *b = p;
    while (n > 0) { /* zlib takes an unsigned int at a time */
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = crc32(c, b, k);
        b += k;
        n -= k;
    }
    return (unsigned long)c;
}

/* hdr: hlen header bytes (NUL-terminated at hlen); the tensors' bytes are
 * already in f->buf (f->bufsize of them). */
static int parse_all(bfit_st_file *f, const char *path, char *hdr, uint64_t hlen)
{
    int rc = parse_header(f, path, hdr, hlen, (int64_t)f->bufsize);
    if (rc == BFIT_OK)
        rc = verify_checksums(f, path);
    return rc;
}

/* The 8-byte length at p and its checks against the size; *hlen gets it. */
static int header_length(const uint8_t *lb, uint64_t fsize, const char *path, uint64_t *hlen)
{
    *hlen = 0;
    if (fsize < 8)
        return bfit_fail(BFIT_EFORMAT, "%s: only %llu bytes; a safetensors file starts with an 8-byte header length",
                         path, (unsigned long long)fsize);
    for (int i = 7; i >= 0; i--)
        *hlen = *hlen << 8 | lb[i];
    if (*hlen > fsize - 8) {
        int text = 1;
        for (int i = 0; i < 8; i++)
            text &= lb[i] >= 0x20 && lb[i] < 0x7f;
        if (text) /* a log, a spec, a CSV: say what it is, not the length its first bytes make */
            return bfit_fail(BFIT_EFORMAT, "%s: not a safetensors file: it starts with the text '%.8s', where a "
                             "safetensors file starts with the 8-byte length of its JSON header", path,
                             (const char *)lb);
        return bfit_fail(BFIT_EFORMAT, "%s: not a safetensors file, or a truncated one: its header length %llu runs "
                         "past the end of the file (%llu bytes follow it)", path, (unsigned long long)*hlen,
                         (unsigned long long)(fsize - 8));
    }
    if (*hlen < 2 || *hlen > BFIT_ST_MAX_HEADER)
        return bfit_fail(BFIT_EFORMAT, "%s: header length %llu is outside 2..%llu", path, (unsigned long long)*hlen,
                         BFIT_ST_MAX_HEADER);
    return BFIT_OK;
}

/* A file with its header read into a new buffer and room for the tensors. */
static int start_file(uint64_t fsize, uint64_t hlen, const char *path, bfit_st_file **f, char **hdr)
{
    *hdr = malloc(hlen + 1);
    *f = calloc(1, sizeof **f);
    if (!*hdr || !*f)
        return bfit_fail(BFIT_ENOMEM, "%s: out of host memory for the header", path);
    (*f)->bufsize = fsize - 8 - hlen;
    (*f)->buf = aligned_alloc(64, BFIT_ALIGN_UP((*f)->bufsize ? (*f)->bufsize : 1));
    if (!(*f)->buf)
        return bfit_fail(BFIT_ENOMEM, "%s: out of host memory for %zu bytes of tensors", path, (*f)->bufsize);
    return BFIT_OK;
}

int bfit_st_parse(const void *data, size_t len, const char *name, bfit_st_file **out)
{
    const uint8_t *p = data;
    uint64_t hlen;
    char *hdr = NULL;
    bfit_st_file *f = NULL;
    int rc;

    *out = NULL;
    if ((rc = header_length(p, len, name, &hlen)) != BFIT_OK)
        return rc;
    if ((rc = start_file(len, hlen, name, &f, &hdr)) == BFIT_OK) {
        memcpy(hdr, p + 8, hlen);
        hdr[hlen] = '\0';
        memcpy(f->buf, p + 8 + hlen, f->bufsize);
        rc = parse_all(f, name, hdr, hlen);
    }
    if (rc == BFIT_OK) {
        *out = f;
        f = NULL;
    }
    bfit_st_free(f);
    free(hdr);
    return rc;
}

int bfit_st_read(const char *path, bfit_st_file **out)
{
    int fd, rc;
    struct stat st;
    uint8_t lb[8] = {0};
    uint64_t hlen = 0, fsize;
    char *hdr = NULL;
    bfit_st_file *f = NULL;

    *out = NULL;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return bfit_fail(BFIT_EIO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0) {
        rc = bfit_fail(BFIT_EIO, "%s: cannot stat: %s", path, strerror(errno));
        goto close_fd;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = bfit_fail(BFIT_EIO, "%s: not a regular file", path);
        goto close_fd;
    }
    fsize = (uint64_t)st.st_size;
    if (fsize >= 8 && (rc = pread_full(fd, lb, 8, 0, path)) != BFIT_OK)
        goto close_fd;
    if ((rc = header_length(lb, fsize, path, &hlen)) != BFIT_OK)
        goto close_fd;
    if ((rc = start_file(fsize, hlen, path, &f, &hdr)) != BFIT_OK)
        goto free_all;
    rc = pread_full(fd, hdr, hlen, 8, path);
    if (rc != BFIT_OK)
        goto free_all;
    hdr[hlen] = '\0';
    rc = pread_full(fd, f->buf, f->bufsize, (off_t)(8 + hlen), path);
    if (rc != BFIT_OK)
        goto free_all;
    rc = parse_all(f, path, hdr, hlen);
    if (rc != BFIT_OK)
        goto free_all;
    *out = f;
    f = NULL;
free_all:
    bfit_st_free(f);
    free(hdr);
close_fd:
    close(fd);
    return rc;
}

int bfit_st_count(const bfit_st_file *f) { return f->n; }

const bfit_st_tensor *bfit_st_get(const bfit_st_file *f, int i)
{
    return i >= 0 && i < f->n ? &f->t[i] : NULL;
}

const bfit_st_tensor *bfit_st_find(const bfit_st_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0)
            return &f->t[i];
    return NULL;
}

const char *bfit_st_meta(const bfit_st_file *f, const char *key)
{
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->keys[i], key) == 0)
            return f->vals[i];
    return NULL;
}

int bfit_st_meta_count(const bfit_st_file *f) { return f->nmeta; }

int bfit_st_meta_get(const bfit_st_file *f, int i, const char **key, const char **val)
{
    if (i < 0 || i >= f->nmeta)
        return bfit_fail(BFIT_EINVAL, "metadata index %d outside 0..%d", i, f->nmeta - 1);
    *key = f->keys[i];
    *val = f->vals[i];
    return BFIT_OK;
}

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    float v;
    if (exp == 0) {
        v = ldexpf((float)man, -24); /* zero and subnormals */
        return sign ? -v : v;
    }
    bits = exp == 31 ? (sign | 0x7f800000u | man << 13) : (sign | (exp + 112) << 23 | man << 13);
    memcpy(&v, &bits, 4);
    return v;
}

int bfit_st_is_float(const bfit_st_tensor *t)
{
    return !strcmp(t->dtype, "F32") || !strcmp(t->dtype, "F64") || !strcmp(t->dtype, "BF16") ||
           !strcmp(t->dtype, "F16");
}

int bfit_st_to_f32(const bfit_st_tensor *t, float *dst, int64_t n)
{
    const unsigned char *p = t->data;
    if (bfit_st_numel(t) != n)
        return bfit_fail(BFIT_EFORMAT, "tensor \"%s\" has %lld elements, expected %lld", t->name,
                         (long long)bfit_st_numel(t), (long long)n);
    if (strcmp(t->dtype, "F32") == 0) {
        memcpy(dst, p, (size_t)n * 4);
    } else if (strcmp(t->dtype, "F64") == 0) {
        for (int64_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, p + 8 * i, 8);
            dst[i] = (float)d;
        }
    } else if (strcmp(t->dtype, "BF16") == 0 || strcmp(t->dtype, "F16") == 0) {
        int bf = t->dtype[0] == 'B';
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            uint32_t bits;
            memcpy(&h, p + 2 * i, 2);
            if (bf) {
                bits = (uint32_t)h << 16;
                memcpy(&dst[i], &bits, 4);
            } else {
                dst[i] = half_to_float(h);
            }
        }
    } else {
        return bfit_fail(BFIT_EFORMAT, "tensor \"%s\" is %s, not a floating type", t->name, t->dtype);
    }
    return BFIT_OK;
}

/* ---- writing -------------------------------------------------------------- */

/* A growing string; oom sticks so callers check once at the end. */
typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char *q;
        while (cap < b->n + n + 1)
            cap *= 2;
        q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    int k;
    va_start(ap, fmt);
    k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_put(b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

/* A JSON string literal: quotes, backslashes and control bytes escaped;
 * other bytes (UTF-8) pass through. */
static void sb_json_str(sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_put(b, e, 2);
        } else if (c < 0x20) {
            sb_printf(b, "\\u%04x", c);
        } else {
            sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static int check_write_args(const char *path, const bfit_st_tensor *t, int n, const char *const *mk,
                            const char *const *mv, int nmeta)
{
    if (!path || !*path || n < 0 || nmeta < 0 || (n > 0 && !t) || (nmeta > 0 && (!mk || !mv)))
        return bfit_fail(BFIT_EINVAL, "safetensors write: bad arguments");
    for (int i = 0; i < n; i++) {
        size_t es = 0;
        int64_t bytes;
        if (!t[i].name || !*t[i].name || strcmp(t[i].name, "__metadata__") == 0)
            return bfit_fail(BFIT_EINVAL, "%s: tensor %d needs a name other than \"\" and \"__metadata__\"", path, i);
        if (!dtype_canon(t[i].dtype, &es))
            return bfit_fail(BFIT_EINVAL, "%s: tensor \"%s\": unknown dtype \"%s\"", path, t[i].name,
                             t[i].dtype ? t[i].dtype : "(null)");
        if (t[i].ndim < 0 || t[i].ndim > BFIT_ST_MAXDIM)
            return bfit_fail(BFIT_EINVAL, "%s: tensor \"%s\": %d dimensions, at most %d", path, t[i].name, t[i].ndim,
                             BFIT_ST_MAXDIM);
        bytes = shape_bytes(t[i].shape, t[i].ndim, es);
        if (bytes < 0 || (uint64_t)bytes != (uint64_t)t[i].nbytes)
            return bfit_fail(BFIT_EINVAL, "%s: tensor \"%s\": %zu bytes do not match its shape and dtype (%lld)", path,
                             t[i].name, t[i].nbytes, (long long)bytes);
        if (bytes > 0 && !t[i].data)
            return bfit_fail(BFIT_EINVAL, "%s: tensor \"%s\" has no data", path, t[i].name);
        for (int j = 0; j < i; j++)
            if (strcmp(t[j].name, t[i].name) == 0)
                return bfit_fail(BFIT_EINVAL, "%s: tensor \"%s\" given twice", path, t[i].name);
    }
    for (int i = 0; i < nmeta; i++) {
        if (!mk[i] || !mv[i])
            return bfit_fail(BFIT_EINVAL, "%s: metadata %d has a null key or value", path, i);
        if (!strncmp(mk[i], BFIT_ST_CRC_PREFIX, strlen(BFIT_ST_CRC_PREFIX)))
            return bfit_fail(BFIT_EINVAL, "%s: metadata key \"%s\": the prefix %s is for checksums", path, mk[i],
                             BFIT_ST_CRC_PREFIX);
        for (int j = 0; j < i; j++)
            if (strcmp(mk[j], mk[i]) == 0)
                return bfit_fail(BFIT_EINVAL, "%s: metadata key \"%s\" given twice", path, mk[i]);
    }
    return BFIT_OK;
}

/* The header JSON for tensors in order[], padded with spaces to a multiple
 * of 8 so the buffer starts 8-byte aligned in the file. */
static int build_header(sbuf *b, const bfit_st_tensor *t, const int *order, int n, const char *const *mk,
                        const char *const *mv, int nmeta)
{
    uint64_t off = 0;
    sb_put(b, "{", 1);
    if (nmeta > 0) {
        sb_put(b, "\"__metadata__\":{", 16);
        for (int i = 0; i < nmeta; i++) {
            if (i)
                sb_put(b, ",", 1);
            sb_json_str(b, mk[i]);
            sb_put(b, ":", 1);
            sb_json_str(b, mv[i]);
        }
        sb_put(b, "}", 1);
    }
    for (int k = 0; k < n; k++) {
        const bfit_st_tensor *x = &t[order[k]];
        if (k || nmeta > 0)
            sb_put(b, ",", 1);
        sb_json_str(b, x->name);
        sb_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", x->dtype);
        for (int d = 0; d < x->ndim; d++)
            sb_printf(b, d ? ",%lld" : "%lld", (long long)x->shape[d]);
        sb_printf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                  (unsigned long long)(off + x->nbytes));
        off += x->nbytes;
    }
    sb_put(b, "}", 1);
    while (!b->oom && b->n % 8)
        sb_put(b, " ", 1);
    return b->oom ? bfit_fail(BFIT_ENOMEM, "safetensors write: out of host memory for the header") : BFIT_OK;
}

/* The caller's metadata and, with checksums, "crc32.<name>" of each tensor. */
static int all_meta(const bfit_st_tensor *t, int n, const char *const *mk, const char *const *mv, int nmeta,
                    int checksums, char ***keys, char ***vals, int *total)
{
    int k = nmeta + (checksums ? n : 0);
    *keys = calloc((size_t)k + 1, sizeof **keys);
    *vals = calloc((size_t)k + 1, sizeof **vals);
    *total = 0;
    if (!*keys || !*vals)
        return bfit_fail(BFIT_ENOMEM, "safetensors write: out of host memory");
    for (int i = 0; i < nmeta; i++) {
        (*keys)[i] = (char *)mk[i];
        (*vals)[i] = (char *)mv[i];
    }
    *total = nmeta;
    for (int i = 0; checksums && i < n; i++) {
        size_t len = strlen(BFIT_ST_CRC_PREFIX) + strlen(t[i].name) + 1;
        char *key = malloc(len), *val = malloc(9);
        if (!key || !val) {
            free(key);
            free(val);
            return bfit_fail(BFIT_ENOMEM, "safetensors write: out of host memory");
        }
        snprintf(key, len, "%s%s", BFIT_ST_CRC_PREFIX, t[i].name);
        snprintf(val, 9, "%08lx", bfit_st_crc32(t[i].data, t[i].nbytes));
        (*keys)[*total] = key;
        (*vals)[(*total)++] = val;
    }
    return BFIT_OK;
}

static void free_meta(char **keys, char **vals, int nmeta, int total)
{
    for (int i = nmeta; keys && vals && i < total; i++) {
        free(keys[i]);
        free(vals[i]);
    }
    free(keys);
    free(vals);
}

int bfit_st_write(const char *path, const bfit_st_tensor *tensors, int n, const char *const *meta_keys,
                  const char *const *meta_vals, int nmeta)
{
    return bfit_st_write_ex(path, tensors, n, meta_keys, meta_vals, nmeta, NULL);
}

int bfit_st_write_ex(const char *path, const bfit_st_tensor *tensors, int n, const char *const *meta_keys,
                     const char *const *meta_vals, int nmeta, const bfit_st_write_opts *o)
{
    sbuf hdr = {0};
    int *order = NULL, rc, k = 0, total = 0;
    char **keys = NULL, **vals = NULL;
    bfit_atomic_file af;
    uint8_t lb[8];

    rc = check_write_args(path, tensors, n, meta_keys, meta_vals, nmeta);
    if (rc != BFIT_OK)
        return rc;
    if ((rc = all_meta(tensors, n, meta_keys, meta_vals, nmeta, o && o->checksums, &keys, &vals, &total)) != BFIT_OK)
        goto free_mem;
    order = malloc(sizeof *order * ((size_t)n + 1));
    if (!order) {
        rc = bfit_fail(BFIT_ENOMEM, "%s: out of host memory", path);
        goto free_mem;
    }
    /* largest elements first keeps every tensor aligned without padding,
     * which the format (no holes) would not allow */
    for (size_t es = 8; es >= 1; es /= 2)
        for (int i = 0; i < n; i++)
            if (bfit_st_dtype_size(tensors[i].dtype) == es)
                order[k++] = i;
    rc = build_header(&hdr, tensors, order, n, (const char *const *)keys, (const char *const *)vals, total);
    if (rc != BFIT_OK)
        goto free_mem;
    for (int i = 0; i < 8; i++)
        lb[i] = (uint8_t)((uint64_t)hdr.n >> (8 * i));

    rc = bfit_atomic_open(&af, path);
    if (rc != BFIT_OK)
        goto free_mem;
    rc = bfit_atomic_write(&af, lb, 8);
    if (rc == BFIT_OK)
        rc = bfit_atomic_write(&af, hdr.p, hdr.n);
    for (int i = 0; i < n && rc == BFIT_OK; i++) {
        if (o && o->mid && i == n / 2)
            o->mid(o->ud, af.tmp);
        rc = bfit_atomic_write(&af, tensors[order[i]].data, tensors[order[i]].nbytes);
    }
    if (rc == BFIT_OK)
        rc = bfit_atomic_commit(&af);
    else if (af.fd >= 0)
        bfit_atomic_abort(&af);
free_mem:
    free_meta(keys, vals, nmeta, total);
    free(hdr.p);
    free(order);
    return rc;
}
