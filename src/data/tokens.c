/* tokens.c - token data: a stream of token ids cut into samples of T ids,
 * each labelled with the T ids that follow (next-token prediction); read
 * from a token file (tokfile.c), its ids split between train and test in
 * blocks, or made from a text file with one id per byte (256 ids), its
 * lines split between train and test.
 *
 * Sample i is ids[i T, (i + 1) T) with labels ids[i T + 1, (i + 1) T + 1):
 * consecutive windows, every id but the first a label once. */
#include "base/err.h"
#include "data/data_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TEXT_BLOCK 100 /* text: lines go to test in blocks of this many, */
#define TEXT_EVERY BFIT_TEST_EVERY /* every 20th block (5%) */

/* The ids as windows of seq, taking ids (malloc'd: the data set's from
 * here, freed on failure; a text's or a file's ids are not copied again,
 * which at 4 bytes a byte would double a large text's peak); windows: at
 * least one is needed (lines make their own samples, of any length); rule:
 * how a test part is made, said when it is too short (NULL: not one). */
static int tokens_dataset_take(const char *source, int32_t *ids, int64_t n, int vocab, int seq, int windows,
                               const char *rule, bfit_dataset **out)
{
    bfit_dataset *d;
    int rc;

    *out = NULL;
    if (seq < 1)
        rc = bfit_fail(BFIT_EINVAL, "%s: token data needs a token model (`input tokens=T`) to cut it into samples",
                       source);
    else if (windows && n < (int64_t)seq + 1)
        rc = bfit_fail(BFIT_EINVAL, "%s: %lld tokens make no sample of %d tokens and their %d labels (at least "
                       "%d are needed)%s%s", source, (long long)n, seq, seq, seq + 1, rule ? ": " : "",
                       rule ? rule : "");
    else
        rc = bfit_data_alloc(source, &d);
    if (rc != BFIT_OK) {
        free(ids);
        return rc;
    }
    d->ids = ids;
    d->nids = n;
    d->seq = seq;
    d->shape = bfit_shape_seq(seq, 1);
    d->count = n > 0 ? (n - 1) / seq : 0;
    d->nclasses = vocab;
    *out = d;
    return BFIT_OK;
}

/* A copy of the caller's n ids (NULL: out of memory, said). */
static int32_t *copy_ids(const char *source, const int32_t *ids, int64_t n)
{
    int32_t *own = malloc(sizeof *own * (size_t)(n ? n : 1));
    if (!own)
        bfit_fail(BFIT_ENOMEM, "%s: out of host memory for %lld tokens", source, (long long)n);
    else if (n)
        memcpy(own, ids, sizeof *own * (size_t)n);
    return own;
}

int bfit_dataset_from_tokens(const char *source, const int32_t *ids, int64_t n, int vocab, int seq,
                             bfit_dataset **out)
{
    int32_t *own = copy_ids(source, ids, n);

    *out = NULL;
    return own ? tokens_dataset_take(source, own, n, vocab, seq, 1, NULL, out) : BFIT_ENOMEM;
}

int bfit_dataset_load_tokens(const char *path, int train, int seq, bfit_dataset **out)
{
    int32_t *ids;
    int64_t n;
    char name[4096];
    int vocab, rc;

    *out = NULL;
    if ((rc = bfit_tokens_read_part(path, train, &ids, &n, &vocab)) != BFIT_OK)
        return rc;
    /* the two parts are two data sets, named as a text's are */
    snprintf(name, sizeof name, "%s (%s)", path, train < 0 ? "whole" : train ? "train part" : "test part");
    return tokens_dataset_take(name, ids, n, vocab, seq, 1, train ? NULL : BFIT_TOKENS_TEST_PART, out);
}

int bfit_dataset_token_stream(const char *source, const int32_t *ids, int64_t n, int train, int seq,
                              bfit_dataset **out)
{
    int32_t *part;
    int64_t k;
    char name[512];
    int vocab, rc;

    *out = NULL;
    if ((rc = bfit_tokens_part(source, ids, n, train, &part, &k, &vocab)) != BFIT_OK)
        return rc;
    snprintf(name, sizeof name, "%s%s", source, train < 0 ? "" : train ? " (train part)" : " (test part)");
    return tokens_dataset_take(name, part, k, vocab, seq, 1, train ? NULL : BFIT_TOKENS_TEST_PART, out);
}

/* The bytes of b[0, n) in the train or the test part (blocks of TEXT_BLOCK
 * lines, every TEXT_EVERY-th to test), or all of them (train < 0), into
 * ids; *line counts the lines before b and after it. Returns the ids. */
static int64_t text_part(const unsigned char *b, size_t n, int train, int64_t *line, int32_t *ids)
{
    int64_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int test = (*line / TEXT_BLOCK) % TEXT_EVERY == TEXT_EVERY - 1;
        if (train < 0 || test == !train)
            ids[k++] = b[i];
        *line += b[i] == '\n';
    }
    return k;
}

/* Byte-level tokens of a text: the lines of the train or the test part,
 * or every line (train < 0: the whole file), newlines kept. */
int bfit_text_tokens(const unsigned char *b, size_t n, int train, int32_t **ids, int64_t *count)
{
    int64_t line = 0;
    *ids = malloc(sizeof **ids * (n ? n : 1));
    if (!*ids)
        return bfit_fail(BFIT_ENOMEM, "out of host memory for %zu tokens", n);
    *count = text_part(b, n, train, &line, *ids);
    return BFIT_OK;
}

/* One file's bytes onto ids[*k ...] (at most room of them), its lines counted on from *line; a file that
 * does not end in a newline gets one, so that the next file starts a line (sep: whether to add it). */
static int text_file_part(const char *path, int train, int sep, int32_t *ids, int64_t room, int64_t *k,
                          int64_t *line)
{
    unsigned char b[1 << 16], last = '\n';
    int64_t pos = 0;
    long len;
    size_t got;
    FILE *f = fopen(path, "rb");

    if (!f)
        return bfit_fail(BFIT_EIO, "%s: cannot open: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return bfit_fail(BFIT_EIO, "%s: cannot read: %s", path, strerror(errno));
    }
    while (pos < len && (got = fread(b, 1, sizeof b, f)) > 0) {
        if ((int64_t)got > len - pos) /* grown while read: the size it had */
            got = (size_t)(len - pos);
        if (*k + (int64_t)got > room) /* the files grew since they were measured */
            got = (size_t)(room - *k);
        *k += text_part(b, got, train, line, ids + *k);
        pos += (int64_t)got;
        last = got ? b[got - 1] : last;
        if (*k == room)
            break;
    }
    fclose(f);
    if (pos < len && *k < room)
        return bfit_fail(BFIT_EIO, "%s: short read", path);
    if (sep && last != '\n' && *k < room)
        *k += text_part((const unsigned char *)"\n", 1, train, line, ids + *k);
    return BFIT_OK;
}

/* The bytes of n text files one after the other (a newline after each that
 * lacks one), read a block at a time: their bytes are never all in memory
 * beside their ids (4 bytes each). The train or test part of their lines,
 * counted across the files, or all of them. */
int bfit_text_files_tokens(const char *const *paths, int n, int train, int32_t **ids, int64_t *count)
{
    int64_t room = 0, line = 0, k = 0;
    struct stat st;
    int32_t *fit;
    int rc = BFIT_OK;

    *ids = NULL;
    for (int i = 0; i < n; i++) {
        if (stat(paths[i], &st) != 0)
            return bfit_fail(BFIT_EIO, "%s: cannot read: %s", paths[i], strerror(errno));
        room += (int64_t)st.st_size + (n > 1); /* and the newline a file may get */
    }
    if (!(*ids = malloc(sizeof **ids * (size_t)(room ? room : 1))))
        return bfit_fail(BFIT_ENOMEM, "%s: out of host memory for %lld tokens", n ? paths[0] : "text",
                         (long long)room);
    for (int i = 0; i < n && rc == BFIT_OK; i++)
        rc = text_file_part(paths[i], train, n > 1, *ids, room, &k, &line);
    if (rc != BFIT_OK) {
        free(*ids);
        *ids = NULL;
        return rc;
    }
    /* the test part is a twentieth of the text: give back the rest */
    if ((fit = realloc(*ids, sizeof **ids * (size_t)(k ? k : 1))))
        *ids = fit;
    *count = k;
    return BFIT_OK;
}

static int text_file_tokens(const char *path, int train, int32_t **ids, int64_t *count)
{
    return bfit_text_files_tokens(&path, 1, train, ids, count);
}

int bfit_dataset_load_text(const char *path, int train, int seq, bfit_dataset **out)
{
    int32_t *ids;
    int64_t count = 0;
    char name[4096];
    int rc;

    *out = NULL;
    if ((rc = text_file_tokens(path, train, &ids, &count)) != BFIT_OK)
        return rc;
    /* the two parts are two data sets: their names say which */
    snprintf(name, sizeof name, "%s (%s)", path, train < 0 ? "whole" : train ? "train part" : "test part");
    return tokens_dataset_take(name, ids, count, 256, seq, 1, train ? NULL : BFIT_TEXT_TEST_PART, out);
}

/* Pieces of at most seq tokens of each document [a, b) (sep-terminated),
 * into starts/lens (NULL: only count them). */
static int64_t cut_lines(const int32_t *ids, int64_t n, int seq, int32_t sep, int64_t *starts, int32_t *lens)
{
    int64_t k = 0, a = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] != sep && i != n - 1)
            continue;
        /* document [a, i]: positions a .. i-1 have a next token */
        for (int64_t s = a; s < i; s += seq) {
            if (starts) {
                starts[k] = s;
                lens[k] = (int32_t)(i - s < seq ? i - s : seq);
            }
            k++;
        }
        a = i + 1;
    }
    return k;
}

/* Lines of ids as samples, taking ids (as tokens_dataset_take). */
static int token_lines_take(const char *source, int32_t *ids, int64_t n, int vocab, int seq, int32_t sep,
                            bfit_dataset **out)
{
    bfit_dataset *d;
    int64_t k;
    int rc;

    if ((rc = tokens_dataset_take(source, ids, n, vocab, seq, 0, NULL, &d)) != BFIT_OK)
        return rc;
    k = cut_lines(d->ids, n, seq, sep, NULL, NULL);
    d->starts = malloc(sizeof *d->starts * (size_t)(k ? k : 1));
    d->lens = malloc(sizeof *d->lens * (size_t)(k ? k : 1));
    if (!d->starts || !d->lens) {
        bfit_dataset_free(d);
        return bfit_fail(BFIT_ENOMEM, "%s: out of host memory for %lld lines", source, (long long)k);
    }
    cut_lines(d->ids, n, seq, sep, d->starts, d->lens);
    d->count = k;
    *out = d;
    return BFIT_OK;
}

int bfit_dataset_token_lines(const char *source, const int32_t *ids, int64_t n, int vocab, int seq, int32_t sep,
                             bfit_dataset **out)
{
    int32_t *own = copy_ids(source, ids, n);

    *out = NULL;
    return own ? token_lines_take(source, own, n, vocab, seq, sep, out) : BFIT_ENOMEM;
}

void bfit_dataset_ids_above(const bfit_dataset *d, int vocab, int64_t *at, int32_t *id, int32_t *most)
{
    *at = -1;
    *id = *most = 0;
    for (int64_t i = 0; d->ids && i < d->nids; i++) {
        /* a classifier's ids may carry a sentence pair's token type in their high bits; a language model's not */
        int32_t v = d->labels && d->ids[i] > 0 ? BFIT_TOKEN_ID(d->ids[i]) : d->ids[i];
        if (v >= vocab && *at < 0) {
            *at = i;
            *id = v;
        }
        *most = v > *most ? v : *most;
    }
}

int64_t bfit_dataset_type_above(const bfit_dataset *d, int types, int *type)
{
    for (int64_t i = 0; d->ids && d->labels && i < d->nids; i++) /* a classifier's: a language model has none */
        if (d->ids[i] > 0 && BFIT_TOKEN_TYPE(d->ids[i]) >= types) {
            *type = BFIT_TOKEN_TYPE(d->ids[i]);
            return i;
        }
    return -1;
}

int bfit_dataset_sample_len(const bfit_dataset *d, int64_t i) { return d->lens ? d->lens[i] : d->seq; }

int bfit_dataset_most_for_tokens(const bfit_dataset *d, int64_t tokens, int64_t *most)
{
    int64_t *hist, sum = 0, n = 0;
    *most = 0;
    if (!d->seq || tokens < 1)
        return bfit_fail(BFIT_EINVAL, "%s: a token budget (%lld) needs token data and at least 1 token", d->source,
                         (long long)tokens);
    if (!d->lens) { /* fixed windows: seq real tokens each */
        *most = (tokens + d->seq - 1) / d->seq < d->count ? (tokens + d->seq - 1) / d->seq : d->count;
        return BFIT_OK;
    }
    if (!(hist = calloc((size_t)d->seq + 1, sizeof *hist))) /* lengths are 1..seq: counted, not sorted */
        return bfit_fail(BFIT_ENOMEM, "out of host memory");
    for (int64_t i = 0; i < d->count; i++)
        hist[d->lens[i]]++;
    for (int len = 0; len <= d->seq && sum < tokens; len++) {
        int64_t k = len ? (tokens - sum + len - 1) / len : hist[0];
        k = k < hist[len] ? k : hist[len];
        n += k;
        sum += k * len;
    }
    free(hist);
    *most = n;
    return BFIT_OK;
}

int bfit_dataset_text_take(const char *name, int32_t *ids, int64_t count, int train, int seq, int lines,
                           bfit_dataset **out)
{
    return lines ? token_lines_take(name, ids, count, 256, seq, '\n', out)
                 : tokens_dataset_take(name, ids, count, 256, seq, 1, train ? NULL : BFIT_TEXT_TEST_PART, out);
}

int bfit_dataset_load_text_lines(const char *path, int train, int seq, bfit_dataset **out)
{
    int32_t *ids;
    int64_t count = 0;
    char name[4096];
    int rc;

    *out = NULL;
    if ((rc = text_file_tokens(path, train, &ids, &count)) != BFIT_OK)
        return rc;
    snprintf(name, sizeof name, "%s (%s, lines)", path, train < 0 ? "whole" : train ? "train part" : "test part");
    return token_lines_take(name, ids, count, 256, seq, '\n', out);
}
