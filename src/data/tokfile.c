/* tokfile.c - token files (docs/data.md): llm.c's format, a 1 KiB header
 * of 256 little-endian int32 (magic, version, count, vocabulary) then
 * uint16 or uint32 ids. Read a block at a time straight into the ids of
 * the whole file or of its train or test part (blocks of ids, every 20th
 * to test, as a text's lines), checked as they come; written atomically. */
#include "base/atomic.h"
#include "base/err.h"
#include "data/data_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HDR_INTS 256

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int bfit_tokens_is_file(const char *path)
{
    unsigned char h[4];
    FILE *f = fopen(path, "rb");
    int yes = 0;
    if (f) {
        /* the magic alone: a version we do not read, or a header cut short, is refused as such (read_header),
         * not read as CSV */
        yes = fread(h, 1, 4, f) == 4 && le32(h) == BFIT_TOKENS_MAGIC;
        fclose(f);
    }
    return yes;
}

/* A file whose size is not its header's count of ids: what it holds and
 * what would be right (a file cut short, or bytes after the ids). */
static int size_error(const char *path, uint32_t cnt, int width, int64_t after)
{
    int64_t want = (int64_t)cnt * width;
    if (after % width)
        return bfit_fail(BFIT_EFORMAT, "%s: %lld bytes after the %d-byte header, not a whole number of %d-byte ids "
                         "(version %d): the file is cut short or has bytes after its ids; the header says %u ids, "
                         "%lld bytes", path, (long long)after, HDR_INTS * 4, width, width == 2 ? 1 : 2, cnt,
                         (long long)want);
    if (after < want)
        return bfit_fail(BFIT_EFORMAT, "%s: the header says %u ids of %d bytes, the file holds %lld bytes after it "
                         "(%lld ids): it is cut short; give the whole file (or a header whose count, bytes 8-11, "
                         "is %lld)", path, cnt, width, (long long)after, (long long)(after / width),
                         (long long)(after / width));
    return bfit_fail(BFIT_EFORMAT, "%s: the header says %u ids of %d bytes, the file holds %lld bytes after it: "
                     "%lld bytes after the last id; a token file ends with its ids (or its header's count, bytes "
                     "8-11, is %lld)", path, cnt, width, (long long)after, (long long)(after - want),
                     (long long)(after / width));
}

/* Read and check the header of a token file of len bytes; *width 2 or 4,
 * *count ids, *vocab the header's (0: not stated). */
static int read_header(const char *path, FILE *f, int64_t len, int *width, int64_t *count, int *vocab)
{
    unsigned char b[HDR_INTS * 4];
    uint32_t ver, cnt, voc;
    if (len >= 4 && len < HDR_INTS * 4 && fread(b, 1, 4, f) == 4 && le32(b) == BFIT_TOKENS_MAGIC)
        return bfit_fail(BFIT_EFORMAT, "%s: %lld bytes, shorter than a token file's header of %d bytes (256 int32 "
                         "beginning with %d): the file is cut short", path, (long long)len, HDR_INTS * 4,
                         BFIT_TOKENS_MAGIC);
    if (len < HDR_INTS * 4 || fread(b, 1, sizeof b, f) != sizeof b || le32(b) != BFIT_TOKENS_MAGIC)
        return bfit_fail(BFIT_EFORMAT, "%s: not a token file (a header of 256 int32 beginning with %d)", path,
                         BFIT_TOKENS_MAGIC);
    ver = le32(b + 4);
    cnt = le32(b + 8);
    voc = le32(b + 12);
    if (ver != 1 && ver != 2)
        return bfit_fail(BFIT_EFORMAT, "%s: token file version %u (1: uint16 ids, 2: uint32 ids)", path, ver);
    *width = ver == 1 ? 2 : 4;
    if (cnt > INT32_MAX)
        return bfit_fail(BFIT_EFORMAT, "%s: the header says %u ids, more than a token file holds (at most %d)", path,
                         cnt, INT32_MAX);
    if ((int64_t)cnt * *width != len - HDR_INTS * 4)
        return size_error(path, cnt, *width, len - HDR_INTS * 4);
    if (voc > INT32_MAX)
        return bfit_fail(BFIT_EFORMAT, "%s: vocabulary %u is too large", path, voc);
    *count = cnt;
    *vocab = (int)voc;
    return BFIT_OK;
}

/* Id i of a token file is in its test part: blocks of BFIT_TOKENS_BLOCK
 * ids, every BFIT_TEST_EVERY-th (a text's fraction, its lines' rule for ids). */
static int token_in_test(int64_t i) { return (i / BFIT_TOKENS_BLOCK) % BFIT_TEST_EVERY == BFIT_TEST_EVERY - 1; }

/* How many of a token file's n ids its train part (train 1), its test
 * part (0) or the whole (< 0) holds. */
static int64_t token_part_size(int64_t n, int train)
{
    int64_t span = (int64_t)BFIT_TOKENS_BLOCK * BFIT_TEST_EVERY, before = (int64_t)BFIT_TOKENS_BLOCK * (BFIT_TEST_EVERY - 1);
    int64_t test = n / span * BFIT_TOKENS_BLOCK + (n % span > before ? n % span - before : 0);
    return train < 0 ? n : train ? n - test : test;
}

/* A token file being read: where, into what. */
typedef struct tok_read {
    const char *path;
    int width, vocab, train, most;
    int64_t at, k; /* ids read so far, ids of the part so far */
    int32_t *ids;
} tok_read;

/* The m ids of b, checked, into the part's ids. */
static int take_ids(tok_read *t, const unsigned char *b, size_t m)
{
    for (size_t j = 0; j < m; j++, t->at++) {
        const unsigned char *p = b + j * (size_t)t->width;
        uint32_t v = t->width == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : le32(p);
        /* no vocabulary: it is the largest id + 1, which must fit an int32 as a stated one does */
        if (!t->vocab && v >= INT32_MAX)
            return bfit_fail(BFIT_EFORMAT, "%s: id %u at position %lld (the id at byte %lld) is beyond the ids of a "
                             "token file whose header gives no vocabulary (0): the vocabulary is then the largest "
                             "id + 1, at most %d, so ids are 0 to %d", t->path, v, (long long)t->at,
                             (long long)(HDR_INTS * 4 + t->at * t->width), INT32_MAX, INT32_MAX - 1);
        if (t->vocab && (int64_t)v >= t->vocab)
            return bfit_fail(BFIT_EFORMAT, "%s: id %u at position %lld is outside the vocabulary of %d that its "
                             "header gives (the id at byte %lld): a vocabulary above every id, or 0 (the largest "
                             "id + 1), would be right", t->path, v, (long long)t->at, t->vocab,
                             (long long)(HDR_INTS * 4 + t->at * t->width));
        if (t->train < 0 || token_in_test(t->at) == !t->train)
            t->ids[t->k++] = (int32_t)v;
        t->most = (int)v > t->most ? (int)v : t->most;
    }
    return BFIT_OK;
}

int bfit_tokens_read_part(const char *path, int train, int32_t **ids, int64_t *count, int *vocab)
{
    unsigned char b[1 << 16]; /* a multiple of both widths: no id is cut */
    tok_read t = {path, 4, 0, train, -1, 0, 0, NULL};
    int64_t n = 0, len;
    FILE *f = fopen(path, "rb");
    int rc;

    *ids = NULL;
    if (!f)
        return bfit_fail(BFIT_EIO, "%s: cannot open: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        rc = bfit_fail(BFIT_EIO, "%s: cannot read: %s", path, strerror(errno));
        goto out;
    }
    if ((rc = read_header(path, f, len, &t.width, &n, &t.vocab)) != BFIT_OK)
        goto out;
    if (!(t.ids = malloc(sizeof *t.ids * (size_t)(token_part_size(n, train) ? token_part_size(n, train) : 1)))) {
        rc = bfit_fail(BFIT_ENOMEM, "%s: out of host memory for %lld ids", path, (long long)token_part_size(n, train));
        goto out;
    }
    while (rc == BFIT_OK && t.at < n) {
        size_t want = (n - t.at) * t.width < (int64_t)sizeof b ? (size_t)((n - t.at) * t.width) : sizeof b;
        if (fread(b, 1, want, f) != want)
            rc = bfit_fail(BFIT_EIO, "%s: short read at byte %lld of %lld (the file changed while read?)", path,
                           (long long)(HDR_INTS * 4 + t.at * t.width), (long long)len);
        else
            rc = take_ids(&t, b, want / (size_t)t.width);
    }
out:
    fclose(f);
    if (rc != BFIT_OK) {
        free(t.ids);
        return rc;
    }
    *ids = t.ids;
    *count = t.k;
    *vocab = t.vocab ? t.vocab : t.most + 1; /* not stated: the ids seen */
    return BFIT_OK;
}

int bfit_tokens_part(const char *source, const int32_t *ids, int64_t n, int train, int32_t **part, int64_t *count,
                     int *vocab)
{
    int64_t k = 0, size = token_part_size(n, train);
    int32_t most = -1, *p;

    *part = NULL;
    for (int64_t i = 0; i < n; i++) { /* checked whole, whichever part is taken: the two parts agree */
        if (ids[i] < 0 || ids[i] == INT32_MAX)
            return bfit_fail(BFIT_EINVAL, "%s: id %d at position %lld: token ids are 0 to %d", source, (int)ids[i],
                             (long long)i, INT32_MAX - 1);
        most = ids[i] > most ? ids[i] : most;
    }
    if (!(p = malloc(sizeof *p * (size_t)(size ? size : 1))))
        return bfit_fail(BFIT_ENOMEM, "%s: out of host memory for %lld ids", source, (long long)size);
    for (int64_t i = 0; i < n; i++)
        if (train < 0 || token_in_test(i) == !train)
            p[k++] = ids[i];
    *part = p;
    *count = k;
    *vocab = most + 1;
    return BFIT_OK;
}

int bfit_tokens_read(const char *path, int32_t **ids, int64_t *count, int *vocab)
{
    return bfit_tokens_read_part(path, -1, ids, count, vocab);
}

int bfit_tokens_write(const char *path, const int32_t *ids, int64_t count, int vocab)
{
    int width = vocab > 0 && vocab <= 65536 ? 2 : 4;
    unsigned char h[HDR_INTS * 4], w[4096];
    bfit_atomic_file af;
    int rc;

    if (count < 0 || count > INT32_MAX || vocab < 0)
        return bfit_fail(BFIT_EINVAL, "%s: %lld ids of a vocabulary of %d cannot be written", path, (long long)count,
                         vocab);
    uint32_t v[4] = {BFIT_TOKENS_MAGIC, width == 2 ? 1u : 2u, (uint32_t)count, (uint32_t)vocab};
    memset(h, 0, sizeof h);
    for (int k = 0; k < 16; k++)
        h[k] = (unsigned char)(v[k / 4] >> (8 * (k % 4)));
    if ((rc = bfit_atomic_open(&af, path)) != BFIT_OK || (rc = bfit_atomic_write(&af, h, sizeof h)) != BFIT_OK)
        return rc;
    for (int64_t i = 0; i < count;) {
        size_t k = 0;
        for (; i < count && k + 4 <= sizeof w; i++)
            for (int j = 0; j < width; j++)
                w[k++] = (unsigned char)((uint32_t)ids[i] >> (8 * j));
        if ((rc = bfit_atomic_write(&af, w, k)) != BFIT_OK)
            return rc;
    }
    return bfit_atomic_commit(&af);
}
