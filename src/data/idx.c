/* idx.c - IDX files (the MNIST format): a big-endian header of magic
 * 0x000008nn (nn = number of dimensions) and the dimensions, then uint8 data.
 *
 * zlib reads both kinds: gzopen recognises gzip by its 1f 8b magic and reads
 * anything else as is. Every complaint names the file and what was expected,
 * because a wrong file here is the most common way a first run goes wrong.
 */
#include "data/data_int.h"
#include "base/err.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define IDX_LABELS 0x00000801u
#define IDX_IMAGES 0x00000803u
#define IDX_MAX_ITEMS ((int64_t)1 << 40) /* a header claiming more is not a data set */
#define IDX_FIRST_READ ((int64_t)64 << 10) /* then doubled as data arrives */

typedef struct idx_file {
    const char *path;
    gzFile gz;
    int ndim;
    uint32_t dim[3];
    int64_t items;  /* product of the dimensions: bytes of data */
    uint8_t *data;
} idx_file;

static const char *idx_kind(uint32_t magic)
{
    return magic == IDX_IMAGES ? "IDX images: N x rows x cols bytes"
         : magic == IDX_LABELS ? "IDX labels: N bytes"
                               : "not an IDX ubyte file";
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Read up to n bytes, looping because gzread takes an unsigned int. Returns
 * the bytes read (short only at end of file) or -1 on a zlib error. */
static int64_t read_full(gzFile gz, uint8_t *buf, int64_t n)
{
    int64_t got = 0;

    while (got < n) {
        int64_t want = n - got > (1 << 30) ? (1 << 30) : n - got;
        int r = gzread(gz, buf + got, (unsigned)want);
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += r;
    }
    return got;
}

static int gz_failed(const idx_file *f)
{
    int zerr;
    const char *msg = gzerror(f->gz, &zerr);
    return bfit_fail(BFIT_EFORMAT, "%s: corrupt gzip data: %s", f->path, msg);
}

/* Open f->path and read its magic and dimensions. */
static int read_header(idx_file *f, uint32_t want_magic)
{
    uint8_t hdr[16];
    struct stat st;
    int64_t got, need;
    uint32_t magic;

    if (stat(f->path, &st) != 0)
        return bfit_fail(BFIT_EIO, "cannot open %s: %s", f->path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return bfit_fail(BFIT_EIO, "%s is a directory, expected an IDX file", f->path);
    f->gz = gzopen(f->path, "rb");
    if (!f->gz)
        return bfit_fail(BFIT_EIO, "cannot open %s: %s", f->path, errno ? strerror(errno) : "out of memory");
    gzbuffer(f->gz, 1 << 17);

    got = read_full(f->gz, hdr, 4);
    if (got < 0)
        return gz_failed(f);
    if (got < 4)
        return bfit_fail(BFIT_EFORMAT, "%s: truncated: expected at least 4 bytes (the magic number), got %lld",
                         f->path, (long long)got);
    magic = be32(hdr);
    if (magic != want_magic)
        return bfit_fail(BFIT_EFORMAT, "%s: wrong magic number: expected 0x%08x (%s), found 0x%08x (%s)%s",
                         f->path, want_magic, idx_kind(want_magic), magic, idx_kind(magic),
                         magic == IDX_IMAGES || magic == IDX_LABELS ? "; were images and labels swapped?" : "");
    f->ndim = (int)(magic & 0xff);
    need = 4 + 4 * (int64_t)f->ndim;
    got = read_full(f->gz, hdr + 4, need - 4);
    if (got < 0)
        return gz_failed(f);
    if (got < need - 4)
        return bfit_fail(BFIT_EFORMAT, "%s: truncated header: expected %lld bytes, got %lld",
                         f->path, (long long)need, (long long)(4 + got));
    f->items = 1;
    for (int i = 0; i < f->ndim; i++) {
        f->dim[i] = be32(hdr + 4 + 4 * i);
        if (f->dim[i] == 0)
            return bfit_fail(BFIT_EFORMAT, "%s: dimension %d in the header is 0: the file holds no samples",
                             f->path, i + 1);
        /* checked before multiplying: a hostile header must not overflow */
        if (f->dim[i] > INT32_MAX || f->items > IDX_MAX_ITEMS / (int64_t)f->dim[i])
            return bfit_fail(BFIT_EFORMAT, "%s: header claims an implausible size (dimension %d is %u)",
                             f->path, i + 1, f->dim[i]);
        f->items *= f->dim[i];
    }
    return BFIT_OK;
}

/* Read the f->items data bytes. The buffer grows as bytes arrive, so a
 * lying header on a short file costs no giant allocation. */
static int read_body(idx_file *f)
{
    int64_t hdr = 4 + 4 * (int64_t)f->ndim, cap, got = 0, r;
    uint8_t extra;
    int zerr;

    cap = f->items < IDX_FIRST_READ ? f->items : IDX_FIRST_READ;
    f->data = malloc((size_t)cap);
    if (!f->data)
        return bfit_fail(BFIT_ENOMEM, "%s: out of host memory for %lld bytes", f->path, (long long)cap);
    for (;;) {
        r = read_full(f->gz, f->data + got, cap - got);
        if (r < 0)
            return gz_failed(f);
        got += r;
        if (got < cap || cap == f->items)
            break;
        int64_t ncap = cap * 2 < f->items ? cap * 2 : f->items;
        uint8_t *p = realloc(f->data, (size_t)ncap);
        if (!p)
            return bfit_fail(BFIT_ENOMEM, "%s: out of host memory for %lld bytes", f->path, (long long)ncap);
        f->data = p;
        cap = ncap;
    }
    if (got < f->items)
        return bfit_fail(BFIT_EFORMAT, "%s: truncated: expected %lld bytes (%lld header + %lld data%s), got %lld",
                         f->path, (long long)(hdr + f->items), (long long)hdr, (long long)f->items,
                         gzdirect(f->gz) ? "" : ", uncompressed", (long long)(hdr + got));
    r = read_full(f->gz, &extra, 1);
    if (r < 0)
        return gz_failed(f);
    if (r == 1)
        return bfit_fail(BFIT_EFORMAT, "%s: longer than its header says: expected %lld bytes%s, found more",
                         f->path, (long long)(hdr + f->items), gzdirect(f->gz) ? "" : " uncompressed");
    /* zlib reports a gzip stream cut short only as a soft error: all the
     * data arrived but the trailer (CRC-32 and length) did not, so nothing
     * vouches for the data (gzip -t refuses such a file too) */
    gzerror(f->gz, &zerr);
    if (zerr == Z_BUF_ERROR)
        return bfit_fail(BFIT_EFORMAT, "%s: truncated gzip file: the compressed data ends before its 8-byte trailer "
                         "(CRC-32 and length), so the data cannot be checked; copy or download the file again",
                         f->path);
    return BFIT_OK;
}

/* Read a whole IDX file of the given magic into f (f->data owned by the
 * caller on success and on failure). */
static int idx_read(idx_file *f, uint32_t magic)
{
    int rc = read_header(f, magic);

    if (rc == BFIT_OK)
        rc = read_body(f);
    if (f->gz)
        gzclose(f->gz); /* read-only: a late error here was already seen by gzread */
    f->gz = NULL;
    return rc;
}

int bfit_dataset_load_idx(const char *images, const char *labels, int nclasses, bfit_dataset **out)
{
    idx_file fi = {.path = images}, fl = {.path = labels};
    bfit_dataset *d = NULL;
    int64_t n;
    int rc, maxl = 0;

    *out = NULL;
    if (!images || !labels)
        return bfit_fail(BFIT_EINVAL, "load_idx: NULL path");
    if (nclasses < 0 || nclasses > 256)
        return bfit_fail(BFIT_EINVAL, "nclasses %d out of range for IDX labels: allowed 1..256 (0: from labels)",
                         nclasses);
    rc = idx_read(&fi, IDX_IMAGES);
    if (rc)
        goto out_free;
    rc = idx_read(&fl, IDX_LABELS);
    if (rc)
        goto out_free;
    n = fi.dim[0];
    if (fl.dim[0] != fi.dim[0]) {
        rc = bfit_fail(BFIT_EFORMAT, "image and label counts differ: %s has %u images, %s has %u labels",
                       images, fi.dim[0], labels, fl.dim[0]);
        goto out_free;
    }
    for (int64_t i = 0; i < n; i++) {
        if (nclasses && fl.data[i] >= nclasses) {
            rc = bfit_fail(BFIT_EFORMAT, "%s: label of sample %lld (byte offset %lld) is %d, out of range: "
                           "allowed 0..%d", labels, (long long)i, (long long)(8 + i), fl.data[i], nclasses - 1);
            goto out_free;
        }
        if (fl.data[i] > maxl)
            maxl = fl.data[i];
    }
    rc = bfit_data_alloc(images, &d);
    if (rc)
        goto out_free;
    d->labels = malloc((size_t)n * sizeof *d->labels);
    if (!d->labels) {
        rc = bfit_fail(BFIT_ENOMEM, "out of host memory for %lld labels", (long long)n);
        goto out_free;
    }
    for (int64_t i = 0; i < n; i++)
        d->labels[i] = fl.data[i];
    d->u8 = fi.data;
    fi.data = NULL;
    d->shape = bfit_shape_chw(1, (int)fi.dim[1], (int)fi.dim[2]);
    d->count = n;
    d->nclasses = nclasses ? nclasses : maxl + 1;
    *out = d;
    d = NULL;
out_free:
    bfit_dataset_free(d);
    free(fi.data);
    free(fl.data);
    return rc;
}
