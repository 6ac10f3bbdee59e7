/* test_tokens.c - token data and training a token model: token files
 * written and read back (uint16 and uint32 ids, the header byte for byte,
 * llm.c's files without a vocabulary), refused when broken (magic, version,
 * size, a header cut right after the magic, an id outside the vocabulary
 * or, with none stated, past an int32 vocabulary), a token file split into train and
 * test by blocks of ids and read in blocks, text as bytes split into train
 * and test by blocks of lines, samples labelled with the next tokens through the
 * shuffling stream, and runs of a small GPT: the loss is normalised by the
 * tokens of the optimizer step, so how the step is split into micro-batches
 * does not change the training, padding included; the loss falls on
 * repetitive text; evaluation reports a per-token loss. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "batchfit.h"
#include "internal.h"
#include "data/data.h"
#include "data/data_int.h"
#include "tfiles.h"
#include "ttok.h"

static int setup(void **st)
{
    (void)st;
    return tmp_setup("tokens");
}

static int teardown(void **st)
{
    (void)st;
    return tmp_teardown();
}

static uint32_t le32(const unsigned char *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

/* A token file's header into b[0, 16): magic, version, count, vocabulary,
 * little-endian (the rest of its 1024 bytes the caller's zeros). */
static void put_header(unsigned char *b, uint32_t version, uint32_t count, uint32_t vocab)
{
    const uint32_t v[4] = {20240520, version, count, vocab};
    for (int k = 0; k < 16; k++)
        b[k] = (unsigned char)(v[k / 4] >> (8 * (k % 4)));
}

/* The size bytes of b as the token file `name` in the test's folder, read
 * back: it must load. */
static void read_good(const unsigned char *b, size_t size, const char *name, int32_t **ids, int64_t *n, int *v)
{
    char p[300];
    tmp_path(p, sizeof p, name);
    put_bytes(p, b, (long)size);
    assert_int_equal(bfit_tokens_read(p, ids, n, v), BFIT_OK);
}

static void roundtrip(int vocab, int width)
{
    char p[300];
    int32_t ids[1000], *back;
    int64_t n;
    int v;
    long len;
    unsigned char *raw;
    tmp_path(p, sizeof p, "rt.bin");
    for (int i = 0; i < 1000; i++)
        ids[i] = (int32_t)(((uint64_t)i * 2654435761u) % (uint64_t)vocab);
    ids[7] = vocab - 1;
    assert_int_equal(bfit_tokens_write(p, ids, 1000, vocab), BFIT_OK);
    raw = (unsigned char *)file_bytes(p, &len);
    /* the header: magic, version (1: uint16, 2: uint32), count, vocab, zeros */
    assert_int_equal(len, 1024 + 1000 * width);
    assert_int_equal(le32(raw), 20240520);
    assert_int_equal(le32(raw + 4), width == 2 ? 1 : 2);
    assert_int_equal(le32(raw + 8), 1000);
    assert_int_equal(le32(raw + 12), (uint32_t)vocab);
    for (int i = 16; i < 1024; i++)
        assert_int_equal(raw[i], 0);
    /* little-endian ids */
    assert_int_equal(raw[1024 + 7 * width], (vocab - 1) & 0xff);
    free(raw);
    assert_true(bfit_tokens_is_file(p));
    assert_int_equal(bfit_tokens_read(p, &back, &n, &v), BFIT_OK);
    assert_int_equal(n, 1000);
    assert_int_equal(v, vocab);
    assert_memory_equal(back, ids, sizeof ids);
    free(back);
}

static void test_roundtrip(void **st)
{
    (void)st;
    roundtrip(300, 2);
    roundtrip(65536, 2);
    roundtrip(70000, 4);
}

/* llm.c writes vocabulary 0 (its header has no such field): the ids say it. */
static void test_llmc_file(void **st)
{
    unsigned char b[1024 + 6] = {0};
    int32_t *ids;
    int64_t n;
    int v;
    (void)st;
    put_header(b, 1, 3, 0);
    b[1024] = 0x50, b[1025] = 0xc4; /* 50256 = 0xc450, GPT-2's <|endoftext|> */
    b[1026] = 7;
    b[1028] = 0x10, b[1029] = 0x27; /* 10000 */
    read_good(b, sizeof b, "llmc.bin", &ids, &n, &v);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 50256);
    assert_int_equal(ids[1], 7);
    assert_int_equal(ids[2], 10000);
    assert_int_equal(v, 50257);
    free(ids);
}

static void expect_bad(const unsigned char *b, size_t n, int code, const char *needle)
{
    char p[300];
    int32_t *ids = (int32_t *)1;
    int64_t cnt;
    int v;
    tmp_path(p, sizeof p, "bad.bin");
    put_bytes(p, b, (long)(n));
    assert_int_equal(bfit_tokens_read(p, &ids, &cnt, &v), code);
    assert_null(ids);
    print_message("  %s\n", bfit_errmsg());
    if (!strstr(bfit_errmsg(), needle))
        fail_msg("expected \"%s\" in %s", needle, bfit_errmsg());
}

static void test_refusals(void **st)
{
    unsigned char b[1024 + 8] = {0};
    char p[300];
    int32_t *ids;
    int64_t n;
    int v;
    (void)st;
    put_header(b, 1, 4, 5); /* 4 uint16 ids of a vocabulary of 5 */
    b[1024] = 1, b[1026] = 4, b[1028] = 2, b[1030] = 3;
    read_good(b, sizeof b, "good.bin", &ids, &n, &v);
    free(ids);
    /* cut short by a whole id, by half of one, inside the header; an id too many: each says what is wrong,
     * where, and what would be right (the first was "the header says 4 ids of 2 bytes, the file holds 6
     * bytes after it"; the third "not a token file", with the magic right there) */
    expect_bad(b, sizeof b - 2, BFIT_EFORMAT, "bad.bin: the header says 4 ids of 2 bytes, the file holds 6 bytes "
               "after it (3 ids): it is cut short; give the whole file (or a header whose count, bytes 8-11, is 3)");
    expect_bad(b, sizeof b - 1, BFIT_EFORMAT, "bad.bin: 7 bytes after the 1024-byte header, not a whole number of "
               "2-byte ids (version 1): the file is cut short or has bytes after its ids; the header says 4 ids, 8 "
               "bytes");
    expect_bad(b, 100, BFIT_EFORMAT, "bad.bin: 100 bytes, shorter than a token file's header of 1024 bytes (256 "
               "int32 beginning with 20240520): the file is cut short");
    {
        unsigned char more[sizeof b + 2] = {0};
        memcpy(more, b, sizeof b);
        expect_bad(more, sizeof more, BFIT_EFORMAT, "bad.bin: the header says 4 ids of 2 bytes, the file holds 10 "
                   "bytes after it: 2 bytes after the last id; a token file ends with its ids (or its header's "
                   "count, bytes 8-11, is 5)");
    }
    b[1026] = 5;
    expect_bad(b, sizeof b, BFIT_EFORMAT, "bad.bin: id 5 at position 1 is outside the vocabulary of 5 that its header "
               "gives (the id at byte 1026): a vocabulary above every id, or 0 (the largest id + 1), would be right");
    b[1026] = 4;
    b[4] = 3;
    expect_bad(b, sizeof b, BFIT_EFORMAT, "version 3");
    { /* as a data set too: the magic makes it a token file, refused for its version (it was read as CSV) */
        bfit_data_opts o = BFIT_DATA_OPTS_INIT;
        bfit_dataset *d = NULL;
        o.seq = 2;
        tmp_path(p, sizeof p, "v3.bin");
        put_bytes(p, b, (long)(sizeof b));
        assert_int_equal(bfit_dataset_load(p, 1, &o, &d), BFIT_EFORMAT);
        assert_non_null(strstr(bfit_errmsg(), "token file version 3"));
    }
    b[4] = 1;
    b[0] ^= 1;
    expect_bad(b, sizeof b, BFIT_EFORMAT, "not a token file");
    tmp_path(p, sizeof p, "missing.bin");
    assert_int_equal(bfit_tokens_read(p, &ids, &n, &v), BFIT_EIO);
}

/* The largest ids: a header without a vocabulary (0, llm.c's) makes it the
 * largest id + 1, an int32 as every vocabulary is, so id 2^31 - 1 is
 * refused as 2^31 is, and neither message speaks of a vocabulary of 0 as
 * the header's (the first was read, its vocabulary the largest id + 1
 * overflowing to -2^31: "give it vocab=-2147483648 or more"; the second
 * "outside the vocabulary of 0 that its header gives"). With no vocabulary
 * 2^31 - 2 is the largest id, and the vocabulary 2^31 - 1. */
static void test_id_limits(void **st)
{
    uint32_t three[3] = {5, INT32_MAX, 3}; /* the second at byte 1028 */
    unsigned char b[1024 + 12] = {0};
    int32_t *ids;
    int64_t n;
    int v;
    (void)st;
    put_header(b, 2, 3, 0); /* uint32 ids, no vocabulary */
    memcpy(b + 1024, three, sizeof three); /* little-endian: x86-64, the library's machine */
    expect_bad(b, sizeof b, BFIT_EFORMAT, "bad.bin: id 2147483647 at position 1 (the id at byte 1028) is beyond the "
               "ids of a token file whose header gives no vocabulary (0): the vocabulary is then the largest id + 1, "
               "at most 2147483647, so ids are 0 to 2147483646");
    three[1] = 1u << 31;
    memcpy(b + 1024, three, sizeof three);
    expect_bad(b, sizeof b, BFIT_EFORMAT, "bad.bin: id 2147483648 at position 1 (the id at byte 1028) is beyond the "
               "ids of a token file whose header gives no vocabulary (0)");
    three[1] = INT32_MAX - 1; /* the vocabulary 2^31 - 1 */
    memcpy(b + 1024, three, sizeof three);
    read_good(b, sizeof b, "most.bin", &ids, &n, &v);
    assert_int_equal(n, 3);
    assert_int_equal(ids[1], INT32_MAX - 1);
    assert_int_equal(v, INT32_MAX);
    free(ids);
}

/* A file of 4 to 7 bytes beginning with the magic is a token file cut
 * inside its header, as one of 8 to 1023 bytes is (it was "not data for a
 * token model: it reads kjv, a token file ... or a text whose name ends in
 * .txt": the magic alone did not make it a token file). */
static void test_magic_alone(void **st)
{
    unsigned char b[16];
    bfit_data_opts o = BFIT_DATA_OPTS_INIT;
    bfit_dataset *d = NULL;
    char p[300];
    (void)st;
    put_header(b, 1, 0, 0);
    o.seq = 2;
    tmp_path(p, sizeof p, "magic.bin");
    for (long len = 4; len <= 6; len++) {
        put_bytes(p, b, len);
        assert_true(bfit_tokens_is_file(p));
        assert_int_equal(bfit_dataset_load(p, 1, &o, &d), BFIT_EFORMAT);
        assert_null(d);
        if (!strstr(bfit_errmsg(), "bytes, shorter than a token file's header of 1024 bytes"))
            fail_msg("%ld bytes: %s", len, bfit_errmsg());
    }
}

/* A token file is told by its magic before anything reads it as a list of
 * images: uint16 ids can spell a list's line ("a.png,1\n", after an id
 * 0x0a0a that ends the first line), which made it a list of one image
 * (a.png not found). And the sniff for a list holds a line of 8 KiB at
 * most: getline held a token file up to its first 0x0a byte, the whole of
 * one without (peak RSS grew by the file's size). */
static void test_token_not_list(void **st)
{
    static const uint16_t spell[] = {0x0a0a, 0x2e61, 0x6e70, 0x2c67, 0x0a31}; /* "\n\na.png,1\n" */
    enum { N = 4096 };
    unsigned char b[1024 + 2 * N] = {0};
    uint16_t ids[N];
    bfit_data_opts o = BFIT_DATA_OPTS_INIT;
    bfit_dataset *d = NULL;
    struct rusage ru0, ru1;
    char p[300];
    FILE *f;
    (void)st;
    for (int i = 0; i < N; i++)
        ids[i] = (uint16_t)(i < 5 ? spell[i] : 0x6161); /* 'aa': no newline byte after the spelled line */
    put_header(b, 1, N, 0x10000);
    memcpy(b + 1024, ids, sizeof ids);
    tmp_path(p, sizeof p, "spells.bin");
    put_bytes(p, b, sizeof b);
    o.seq = 8;
    assert_int_equal(bfit_dataset_load(p, 1, &o, &d), BFIT_OK);
    assert_true(bfit_dataset_is_tokens(d));
    bfit_dataset_free(d);

    /* 64 MiB without a newline byte, then a list's line */
    tmp_path(p, sizeof p, "oneline.csv");
    assert_non_null(f = fopen(p, "wb"));
    memset(b, 'a', sizeof b);
    for (long k = 0; k < (64l << 20) / (long)sizeof b; k++)
        assert_int_equal(fwrite(b, 1, sizeof b, f), sizeof b);
    fputs("\na.png,1\n", f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(getrusage(RUSAGE_SELF, &ru0), 0);
    assert_false(bfit_img_is_list(p, 0)); /* no list has such a line */
    assert_int_equal(getrusage(RUSAGE_SELF, &ru1), 0);
    if (ru1.ru_maxrss - ru0.ru_maxrss > 16 * 1024) /* KiB */
        fail_msg("peak RSS grew by %ld KiB reading the first line", ru1.ru_maxrss - ru0.ru_maxrss);
    unlink(p);
}

/* Lines go to test in blocks of 100, every 20th block: 5% of the lines,
 * and train and test together are the whole text, each byte once. */
static void test_text_split(void **st)
{
    size_t cap = 4000 * 16, n = 0;
    char *text = malloc(cap);
    int32_t *tr, *te;
    int64_t ntr, nte;
    (void)st;
    for (int i = 0; i < 4000; i++)
        n += (size_t)snprintf(text + n, cap - n, "line %d\n", i);
    assert_int_equal(bfit_text_tokens((unsigned char *)text, n, 1, &tr, &ntr), BFIT_OK);
    assert_int_equal(bfit_text_tokens((unsigned char *)text, n, 0, &te, &nte), BFIT_OK);
    assert_int_equal(ntr + nte, (int64_t)n);
    {
        /* the test part is lines 1900-1999 and 3900-3999 */
        char want[64];
        int len = snprintf(want, sizeof want, "line 1900\n");
        for (int i = 0; i < len; i++)
            assert_int_equal(te[i], (unsigned char)want[i]);
        int lines = 0;
        for (int64_t i = 0; i < nte; i++)
            lines += te[i] == '\n';
        assert_int_equal(lines, 200);
        for (int i = 0; i < 7; i++)
            assert_int_equal(tr[i], (unsigned char)"line 0\n"[i]);
    }
    free(tr);
    free(te);
    {
        /* a file given as the test data is read whole (train < 0 here, opts.whole for a data set) */
        char path[300];
        bfit_data_opts o = BFIT_DATA_OPTS_INIT;
        bfit_dataset *d = NULL;
        assert_int_equal(bfit_text_tokens((unsigned char *)text, n, -1, &te, &nte), BFIT_OK);
        assert_int_equal(nte, (int64_t)n);
        for (int i = 0; i < 7; i++)
            assert_int_equal(te[i], (unsigned char)"line 0\n"[i]);
        free(te);
        tmp_path(path, sizeof path, "whole.txt");
        put_bytes(path, text, (long)n);
        o.seq = 16;
        o.whole = 1;
        assert_int_equal(bfit_dataset_load(path, 0, &o, &d), BFIT_OK);
        assert_int_equal(bfit_dataset_count(d), ((int64_t)n - 1) / 16); /* windows of 16 with a next token */
        bfit_dataset_free(d);
        o.whole = 0;
        assert_int_equal(bfit_dataset_load(path, 0, &o, &d), BFIT_OK);
        assert_true(bfit_dataset_count(d) < ((int64_t)n - 1) / 16 / 10); /* the test part: a twentieth */
        bfit_dataset_free(d);
    }
    free(text);
}

/* A text file is read in blocks of 64 KiB, its line count carried from one
 * to the next: the parts of a file of 300 KB, lines of every length (one
 * longer than a block), are those of its bytes in memory, id for id, and
 * its windows and its lines hold the same ids. */
static void test_text_file_blocks(void **st)
{
    size_t cap = 400000, n = 0;
    char *text = malloc(cap), path[300];
    bfit_data_opts o = BFIT_DATA_OPTS_INIT;
    (void)st;
    for (int i = 0; n + 80000 < cap; i++) {
        int len = i == 1000 ? 70000 : (i * 37) % 200;
        for (int k = 0; k < len; k++)
            text[n++] = (char)('a' + (i + k) % 26);
        text[n++] = '\n';
    }
    tmp_path(path, sizeof path, "blocks.txt");
    put_bytes(path, text, (long)n);
    o.seq = 16;
    for (int train = -1; train <= 1; train++)
        for (int lines = 0; lines <= 1; lines++) {
            int32_t *want;
            int64_t nwant;
            bfit_dataset *d = NULL;
            o.whole = train < 0;
            o.lines = lines;
            assert_int_equal(bfit_text_tokens((unsigned char *)text, n, train, &want, &nwant), BFIT_OK);
            assert_int_equal(bfit_dataset_load(path, train < 0 ? 0 : train, &o, &d), BFIT_OK);
            assert_true(nwant > 16);
            assert_int_equal(d->nids, nwant);
            assert_memory_equal(d->ids, want, sizeof *want * (size_t)nwant);
            free(want);
            bfit_dataset_free(d);
        }
    free(text);
}

/* A folder of texts is one text: its .txt files (subfolders included,
 * hidden ones and other files left out) in the order of their paths, a
 * newline after a file that lacks one, the lines split between train and
 * test across the files as in one file: each part's ids are those of the
 * files' bytes put together in memory, id for id, windows and lines alike.
 * A folder without a .txt file is refused, saying so (one of class folders
 * without texts reads as images, which a token model refuses). */
static void test_text_folder(void **st)
{
    static const char *const names[] = {"corpus/b.txt", "corpus/a/z.txt", "corpus/a/y.txt", "corpus/README.md",
                                        "corpus/.hidden/x.txt", "corpus/.dot.txt", "corpus/c.text"};
    size_t cap = 300000, n = 0;
    char *text = malloc(cap), path[300], dir[300], *part[3];
    size_t len[3] = {0};
    bfit_data_opts o = BFIT_DATA_OPTS_INIT;
    bfit_dataset *d = NULL;
    (void)st;
    tmp_path(dir, sizeof dir, "corpus");
    assert_int_equal(mkdir(dir, 0755), 0);
    o.seq = 16;
    assert_int_equal(bfit_dataset_load(dir, 1, &o, &d), BFIT_EINVAL); /* nothing yet */
    assert_non_null(strstr(bfit_errmsg(), "corpus holds no .txt file (in it or its subfolders)"));
    tmp_path(path, sizeof path, "corpus/a");
    assert_int_equal(mkdir(path, 0755), 0);
    tmp_path(path, sizeof path, "corpus/.hidden");
    assert_int_equal(mkdir(path, 0755), 0);
    for (int f = 0; f < 3; f++) { /* 3000 lines in all, the last file's last line without its newline */
        part[f] = malloc(120000);
        for (int i = 0; i < 1000; i++)
            len[f] += (size_t)snprintf(part[f] + len[f], 120000 - len[f], "file %d line %d%s", f, i,
                                       f == 2 && i == 999 ? "" : "\n");
    }
    for (int f = 0; f < 7; f++) { /* the three texts, and what is not read: a README, hidden, another suffix */
        tmp_path(path, sizeof path, names[f]);
        put_bytes(path, f < 3 ? part[f] : "not text\n", f < 3 ? (long)len[f] : 9);
    }
    /* in the order of their paths: a/y.txt (part 2: no newline at its end), a/z.txt (part 1), b.txt (part 0) */
    for (int f = 2; f >= 0; f--) {
        memcpy(text + n, part[f], len[f]);
        n += len[f];
        if (text[n - 1] != '\n')
            text[n++] = '\n';
    }
    for (int train = -1; train <= 1; train++)
        for (int lines = 0; lines <= 1; lines++) {
            int32_t *want;
            int64_t nwant;
            o.whole = train < 0;
            o.lines = lines;
            assert_int_equal(bfit_text_tokens((unsigned char *)text, n, train, &want, &nwant), BFIT_OK);
            if (bfit_dataset_load(dir, train < 0 ? 0 : train, &o, &d) != BFIT_OK)
                fail_msg("%s", bfit_errmsg());
            assert_non_null(strstr(bfit_dataset_source(d), "corpus (3 texts, "));
            assert_int_equal(d->nids, nwant);
            assert_memory_equal(d->ids, want, sizeof *want * (size_t)nwant);
            free(want);
            bfit_dataset_free(d);
        }
    for (int f = 0; f < 3; f++)
        free(part[f]);
    free(text);
}

/* A token file of n ids: id i is i % 251 in a train block, 251 + the
 * block's number in a test block (every 20th of 4096 ids), so a part's ids
 * say where each came from. Its ids (malloc'd) in *all. */
static void put_split_file(const char *path, int64_t n, int vocab, int32_t **all)
{
    int32_t *ids = malloc(sizeof *ids * (size_t)n);
    assert_non_null(ids);
    for (int64_t i = 0; i < n; i++)
        ids[i] = (i / 4096) % 20 == 19 ? 251 + (int32_t)(i / 4096 / 20) : (int32_t)(i % 251);
    assert_int_equal(bfit_tokens_write(path, ids, n, vocab), BFIT_OK);
    *all = ids;
}

/* A token file given alone has a text's split, its ids in blocks of 4096
 * for lines in blocks of 100: every 20th block is the test part, the rest
 * the train part, each id in exactly one, in order; all of it as the test
 * data (whole). Sizes at each edge of a test block, uint16 and uint32 ids,
 * the vocabulary the whole file's in both parts (was: every part the whole
 * file, so a run tested on what it trained on). */
static void test_token_file_split(void **st)
{
    static const int64_t sizes[] = {77824, 77825, 77824 + 129, 81920, 81921, 2 * 81920 + 77830, 300000};
    bfit_data_opts o = BFIT_DATA_OPTS_INIT;
    char path[300];
    (void)st;
    o.seq = 16;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int vocab = 300; vocab <= 70000; vocab += 69700) {
            int64_t n = sizes[s], test = n / 81920 * 4096 + (n % 81920 > 77824 ? n % 81920 - 77824 : 0);
            int32_t *all;
            tmp_path(path, sizeof path, "split.bin");
            put_split_file(path, n, vocab, &all);
            for (int train = -1; train <= 1; train++) {
                bfit_dataset *d = NULL;
                int64_t k = 0, want = train < 0 ? n : train ? n - test : test;
                o.whole = train < 0;
                if (bfit_dataset_load(path, train < 0 ? 0 : train, &o, &d) != BFIT_OK) {
                    /* a test part of under 17 ids makes no window of 16: refused, saying how parts are made */
                    assert_true(train == 0 && test < 17);
                    assert_non_null(strstr(bfit_errmsg(), "(test part): "));
                    assert_non_null(strstr(bfit_errmsg(), BFIT_TOKENS_TEST_PART));
                    continue;
                }
                assert_int_equal(d->nids, want);
                assert_int_equal(bfit_dataset_count(d), (want - 1) / 16);
                assert_int_equal(bfit_dataset_classes(d), vocab);
                assert_non_null(strstr(bfit_dataset_source(d), train < 0 ? "split.bin (whole)"
                                                               : train ? "split.bin (train part)"
                                                                       : "split.bin (test part)"));
                for (int64_t i = 0; i < n; i++)
                    if (train < 0 || ((i / 4096) % 20 == 19) == !train) {
                        if (d->ids[k] != all[i])
                            fail_msg("%lld ids, vocab %d, part %d: id %lld is %d, not id %lld of the file (%d)",
                                     (long long)n, vocab, train, (long long)k, d->ids[k], (long long)i, all[i]);
                        k++;
                    }
                assert_int_equal(k, want);
                bfit_dataset_free(d);
            }
            free(all);
        }
}

/* A token file is read 64 KiB at a time into its part's ids: a file of
 * 2^21 + 3 uint32 ids (8 MiB, 129 blocks, the last of 12 bytes) comes back
 * id for id, and an id outside the vocabulary in the last block is found
 * there, named by its position and byte. */
static void test_token_file_blocks(void **st)
{
    int64_t n = (1 << 21) + 3, cnt;
    int32_t *ids = malloc(sizeof *ids * (size_t)n), *back;
    char path[300], want[200];
    unsigned char *raw;
    long len;
    int v;
    (void)st;
    assert_non_null(ids);
    for (int64_t i = 0; i < n; i++)
        ids[i] = (int32_t)((i * 2654435761u) % 69000);
    tmp_path(path, sizeof path, "blocks.bin");
    assert_int_equal(bfit_tokens_write(path, ids, n, 70000), BFIT_OK);
    assert_int_equal(bfit_tokens_read(path, &back, &cnt, &v), BFIT_OK);
    assert_int_equal(cnt, n);
    assert_int_equal(v, 70000);
    assert_memory_equal(back, ids, sizeof *ids * (size_t)n);
    free(back);
    raw = (unsigned char *)file_bytes(path, &len);
    raw[len - 4] = 0x70, raw[len - 3] = 0x11, raw[len - 2] = 1, raw[len - 1] = 0; /* the last id 70000 = 0x11170 */
    put_bytes(path, raw, len);
    free(raw);
    back = (int32_t *)1;
    assert_int_equal(bfit_tokens_read(path, &back, &cnt, &v), BFIT_EFORMAT);
    assert_null(back);
    snprintf(want, sizeof want, "id 70000 at position %lld is outside the vocabulary of 70000 that its header gives "
             "(the id at byte %ld)", (long long)(n - 1), len - 4);
    if (!strstr(bfit_errmsg(), want))
        fail_msg("expected \"%s\" in %s", want, bfit_errmsg());
    free(ids);
}

/* Samples of T ids, labelled with the next T, through a shuffling stream. */
static void test_stream_labels(void **st)
{
    int32_t ids[1001];
    bfit_dataset *d;
    bfit_stream *s;
    bfit_stream_cfg sc = {0};
    float x[6 * 10];
    int32_t y[6 * 10];
    int got, seen[100] = {0};
    (void)st;
    for (int i = 0; i < 1001; i++)
        ids[i] = i % 97;
    assert_int_equal(bfit_dataset_from_tokens("mem", ids, 1001, 97, 10, &d), BFIT_OK);
    assert_int_equal(bfit_dataset_count(d), 100);
    assert_int_equal(bfit_dataset_label_len(d), 10);
    assert_true(bfit_shape_eq(bfit_dataset_shape(d), bfit_shape_seq(10, 1)));
    sc.seed = 3;
    sc.shuffle = 1;
    sc.max_take = 6;
    sc.prefetch = 1;
    assert_int_equal(bfit_stream_new(d, &sc, &s), BFIT_OK);
    for (int t = 0; t < 17; t++) {
        assert_int_equal(bfit_stream_take(s, 6, x, y, &got), BFIT_OK);
        for (int k = 0; k < got; k++) {
            const int32_t *xi = (const int32_t *)x + k * 10;
            int start = -1;
            for (int i = 0; i < 100 && start < 0; i++) /* which window: ids are i % 97 from i*10 */
                if (xi[0] == (i * 10) % 97 && xi[1] == (i * 10 + 1) % 97 && xi[9] == (i * 10 + 9) % 97 &&
                    !seen[i] && y[k * 10 + 9] == (i * 10 + 10) % 97)
                    start = i;
            assert_true(start >= 0);
            seen[start] = 1;
            for (int j = 0; j < 9; j++)
                assert_int_equal(y[k * 10 + j], xi[j + 1]);
        }
    }
    for (int i = 0; i < 100; i++)
        assert_true(seen[i]); /* one epoch: every window once */
    bfit_stream_free(s);
    bfit_dataset_free(d);
}

/* Masked-LM labels (BERT's objective, --mask-tokens): over 4,000 windows
 * of 50 ids, a share p = 0.15 of the tokens that are not special is
 * labelled with its id, 80% of those masked in the input, 10% a random id,
 * 10% kept; every other token is kept and labelled -2 (real, unscored);
 * special ids never. The draws are the sample's own: a stream taken 7 at
 * a time gives what one taken 1 at a time gives, and the next epoch other
 * masks. */
#define MW 50
#define MN 4000
static void take_all(bfit_stream *s, int step, int32_t *x, int32_t *y)
{
    int got;
    for (int k = 0; k < MN; k += got) {
        int n = MN - k < step ? MN - k : step;
        assert_int_equal(bfit_stream_take(s, n, (float *)(x + (size_t)k * MW), y + (size_t)k * MW, &got), BFIT_OK);
        assert_int_equal(got, n);
    }
}

static void test_stream_masked(void **st)
{
    int32_t *ids = malloc(sizeof *ids * (MW * MN + 1)), *x = malloc(sizeof *x * MW * MN);
    int32_t *y = malloc(sizeof *y * MW * MN), *x2 = malloc(sizeof *x2 * MW * MN), *y2 = malloc(sizeof *y2 * MW * MN);
    int64_t cand = 0, lab = 0, masked = 0, kept = 0, other = 0, seen[97] = {0}, distinct = 0, same = 0;
    bfit_dataset *d;
    bfit_stream *s;
    bfit_stream_cfg sc = {0};
    (void)st;
    for (int i = 0; i < MW * MN + 1; i++)
        ids[i] = (int32_t)((i * 7 + 3) % 97);
    assert_int_equal(bfit_dataset_from_tokens("mem", ids, MW * MN + 1, 97, MW, &d), BFIT_OK);
    sc.max_take = 7;
    sc.mlm = (bfit_mlm){.p = 0.15, .mask_id = 96, .vocab = 97, .nspecial = 2, .special = {0, 5}};
    assert_int_equal(bfit_stream_new(d, &sc, &s), BFIT_OK);
    take_all(s, 7, x, y);
    bfit_stream_free(s);
    for (int i = 0; i < MW * MN; i++) {
        int special = ids[i] == 0 || ids[i] == 5;
        assert_true(y[i] == BFIT_LABEL_UNSCORED || (y[i] == ids[i] && !special));
        if (y[i] == BFIT_LABEL_UNSCORED) {
            assert_int_equal(x[i], ids[i]);
        } else {
            masked += x[i] == 96;
            kept += x[i] == ids[i] && x[i] != 96; /* (96, the mask, is an id of the data too) */
            other += x[i] != 96 && x[i] != ids[i];
            assert_true(x[i] >= 0 && x[i] < 97);
            distinct += x[i] != 96 && x[i] != ids[i] && !seen[x[i]]++;
        }
        cand += !special;
        lab += y[i] >= 0;
    }
    print_message("  %lld of %lld tokens labelled (%.2f%%): masked %.1f%%, random %.1f%% (%lld ids), kept %.1f%%\n",
                  (long long)lab, (long long)cand, 100.0 * lab / cand, 100.0 * masked / lab, 100.0 * other / lab,
                  (long long)distinct, 100.0 * kept / lab);
    assert_true(lab > 0.145 * cand && lab < 0.155 * cand);
    assert_true(masked > 0.78 * lab && masked < 0.82 * lab);
    assert_true(other > 0.085 * lab && other < 0.105 * lab); /* a random id that is the token's own is kept */
    assert_true(kept > 0.09 * lab && kept < 0.11 * lab);
    assert_true(distinct >= 90);
    /* the same draws whatever the takes and the order: shuffled, 7 at a time and 1 at a time */
    sc.seed = 3;
    sc.shuffle = 1;
    assert_int_equal(bfit_stream_new(d, &sc, &s), BFIT_OK);
    take_all(s, 7, x, y);
    bfit_stream_next_epoch(s);
    take_all(s, 7, x2, y2);
    for (int i = 0; i < MW * MN; i++)
        same += x[i] == x2[i] && y[i] == y2[i];
    assert_true(same < MW * MN); /* epoch 1: the other order and other masks */
    bfit_stream_free(s);
    sc.max_take = 1;
    assert_int_equal(bfit_stream_new(d, &sc, &s), BFIT_OK);
    take_all(s, 1, x2, y2);
    assert_memory_equal(x, x2, sizeof *x * MW * MN);
    assert_memory_equal(y, y2, sizeof *y * MW * MN);
    bfit_stream_free(s);
    /* capped at 5 a window (a gathered head's rows, max_pred): a window's first 5 draws as before, the
       tokens after them not drawn (their input as it was, no label) */
    sc.mlm.max_pred = 5;
    assert_int_equal(bfit_stream_new(d, &sc, &s), BFIT_OK);
    take_all(s, 1, x2, y2);
    bfit_stream_free(s);
    same = 0;
    for (int w = 0; w < MN; w++) {
        int before = 0, after = 0;
        for (int j = 0; j < MW; j++) {
            int i = w * MW + j, kept_draw = y[i] >= 0 && before < 5;
            before += y[i] >= 0;
            after += y2[i] >= 0;
            assert_int_equal(y2[i], kept_draw ? y[i] : BFIT_LABEL_UNSCORED);
            assert_int_equal(x2[i], kept_draw || y[i] < 0 ? x[i] : y[i]); /* an undrawn token: itself */
        }
        assert_true(after == (before < 5 ? before : 5));
        same += before > 5;
    }
    print_message("  capped at 5: %lld of %d windows had drawn more\n", (long long)same, MN);
    assert_true(same > MN / 4);
    bfit_dataset_free(d);
    free(ids), free(x), free(y), free(x2), free(y2);
}

/* A line's masked-LM labels: its padding -1, at least one token labelled
 * in a line that has one to label (BERT's max(1, round(p n))), none in a
 * line of special ids alone; a sentence pair's segment stays in the input
 * and is not in the label. */
static void test_masked_lines(void **st)
{
    /* documents: "1 2 3 4 5 6 7 /", "9 /", "/", "4 4 /" with / = 10 (special), seq 3 */
    int32_t ids[] = {1, 2, 3, 4, 5, 6, 7, 10, 9, 10, 10, 4, 4, 10}, x[5 * 3], y[5 * 3];
    static const int lens[] = {3, 3, 1, 1, 2};
    bfit_mlm m = {.p = 1e-6, .mask_id = 0, .vocab = 11, .nspecial = 1, .special = {10}};
    bfit_sample_fn f = {.seed = 1, .mlm = &m};
    int32_t pair[4] = {1 | 1 << BFIT_TOKEN_TYPE_SHIFT, 2 | 1 << BFIT_TOKEN_TYPE_SHIFT, 3, 4}, py[4];
    bfit_dataset *d;
    bfit_stream *s;
    bfit_stream_cfg sc = {.max_take = 5, .mlm = m};
    int got;
    (void)st;
    assert_int_equal(bfit_dataset_token_lines("mem", ids, 14, 11, 3, 10, &d), BFIT_OK);
    assert_int_equal(bfit_stream_new(d, &sc, &s), BFIT_OK);
    assert_int_equal(bfit_stream_take(s, 5, (float *)x, y, &got), BFIT_OK);
    for (int k = 0; k < 5; k++) {
        int labelled = 0, specials = 0;
        for (int j = 0; j < 3; j++) {
            assert_true(j < lens[k] ? y[k * 3 + j] != BFIT_LABEL_PAD : y[k * 3 + j] == BFIT_LABEL_PAD);
            labelled += y[k * 3 + j] >= 0;
            specials += j < lens[k] && x[k * 3 + j] == 10;
        }
        assert_int_equal(labelled, specials == lens[k] ? 0 : 1); /* "7 / 9" has 2 candidates, "/" none */
    }
    bfit_stream_free(s);
    bfit_dataset_free(d);
    m.p = 1; /* every token labelled, a pair's segment kept in the input */
    for (int i = 0; i < 4; i++) {
        int32_t was = pair[i];
        f.seed = 1;
        bfit_data_mask(&f, 0, i, pair + i, py, 1, 1);
        assert_int_equal(py[0], BFIT_TOKEN_ID(was));
        assert_int_equal(BFIT_TOKEN_TYPE(pair[i]), BFIT_TOKEN_TYPE(was));
    }
}

/* Lines as variable-length samples: each document (ending in its
 * separator) cut into pieces of at most seq, labels the next ids, padding
 * id 0 and label -1; a one-token document has nothing to predict. */
static void test_lines(void **st)
{
    /* documents: "1 2 3 4 5 6 7 /", "9 /", "/", "4 4 /" with / = 10, seq 3 */
    int32_t ids[] = {1, 2, 3, 4, 5, 6, 7, 10, 9, 10, 10, 4, 4, 10};
    static const int want_len[] = {3, 3, 1, 1, 2};
    static const int32_t want_x0[] = {1, 2, 3}, want_y2[] = {10, -1, -1}, want_x4[] = {4, 4, 0}, want_y4[] = {4, 10, -1};
    bfit_dataset *d;
    bfit_stream *s;
    bfit_stream_cfg sc = {0};
    int32_t x[5 * 3], y[5 * 3];
    int got;
    (void)st;
    assert_int_equal(bfit_dataset_token_lines("mem", ids, 14, 11, 3, 10, &d), BFIT_OK);
    assert_int_equal(bfit_dataset_count(d), 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(bfit_dataset_sample_len(d, i), want_len[i]);
    sc.max_take = 5;
    assert_int_equal(bfit_stream_new(d, &sc, &s), BFIT_OK);
    assert_int_equal(bfit_stream_take(s, 5, (float *)x, y, &got), BFIT_OK);
    assert_int_equal(got, 5);
    assert_memory_equal(x, want_x0, sizeof want_x0);
    assert_memory_equal(y + 6, want_y2, sizeof want_y2); /* "7 /": 7 predicts the separator */
    assert_memory_equal(x + 12, want_x4, sizeof want_x4);
    assert_memory_equal(y + 12, want_y4, sizeof want_y4);
    bfit_stream_free(s);
    bfit_dataset_free(d);
}

/* A shuffling stream over variable-length samples: within each bucket of
 * BFIT_LEN_BUCKET samples of the epoch's order, lengths never grow; every
 * sample comes once (the lengths taken are the data set's); two streams of
 * the same seed give the same order. */
static int take_lengths(const bfit_dataset *d, int *lens)
{
    enum { SEQ = 64 };
    static int32_t x[SEQ * 100], y[SEQ * 100];
    bfit_stream *s;
    bfit_stream_cfg sc = {0};
    int got, pos = 0;
    sc.seed = 5;
    sc.shuffle = 1;
    sc.max_take = 100;
    assert_int_equal(bfit_stream_new(d, &sc, &s), BFIT_OK);
    do {
        assert_int_equal(bfit_stream_take(s, 100, (float *)x, y, &got), BFIT_OK);
        for (int k = 0; k < got; k++, pos++) {
            int len = 0;
            while (len < SEQ && y[k * SEQ + len] >= 0)
                len++;
            lens[pos] = len;
        }
    } while (got > 0);
    bfit_stream_free(s);
    return pos;
}

static void test_length_buckets(void **st)
{
    enum { NDOC = 2500 };
    int32_t *ids = malloc(sizeof *ids * NDOC * 60);
    int64_t n = 0;
    int a[NDOC], b[NDOC], hist_taken[65] = {0}, hist_data[65] = {0};
    bfit_dataset *d;
    (void)st;
    for (int k = 0; k < NDOC; k++) { /* document k: 2 + k*37 % 50 tokens, then the separator */
        int len = 2 + k * 37 % 50;
        for (int j = 0; j < len; j++)
            ids[n++] = (k + j) % 9;
        ids[n++] = 10;
    }
    assert_int_equal(bfit_dataset_token_lines("mem", ids, n, 11, 64, 10, &d), BFIT_OK);
    assert_int_equal(bfit_dataset_count(d), NDOC);
    assert_int_equal(take_lengths(d, a), NDOC);
    assert_int_equal(take_lengths(d, b), NDOC);
    assert_memory_equal(a, b, sizeof a);
    for (int i = 0; i < NDOC; i++) {
        if (i % BFIT_LEN_BUCKET)
            assert_true(a[i] <= a[i - 1]);
        hist_taken[a[i]]++;
        hist_data[bfit_dataset_sample_len(d, i)]++;
    }
    assert_memory_equal(hist_taken, hist_data, sizeof hist_data);
    assert_true(a[BFIT_LEN_BUCKET] > a[BFIT_LEN_BUCKET - 1]); /* a new bucket starts long again */
    bfit_dataset_free(d);
    free(ids);
}

/* ---- training ---- */

#define T 40
/* %s: the attention's options (causal by default; bidirectional with " causal=0") */
#define SPEC_FMT \
    "input tokens=40\n"                                                                      \
    "embed 16 vocab=13 positions=40\n"                                                       \
    "residual {\n layernorm\n linear 48\n attention 2%s\n linear 16\n}\n"                     \
    "residual {\n layernorm\n linear 32\n gelu\n linear 16\n}\n"                             \
    "layernorm\n"                                                                            \
    "linear 13 tie=1 bias=0\n"
static const char *attn_opts = "";

/* Sequences of the pattern "0 1 2 ... 11 12 0 1 ...", each padded after a
 * length that varies with the sample (4 to 40 tokens): the padding's ids
 * are 0 and its labels -1. */
static ttok tokens(int64_t n) { return (ttok){.n = n, .seq = T, .vocab = 13, .lo = 4, .mul = 7, .mod = 37}; }

typedef struct losses {
    int n;
    double loss[64];
} losses;

static void on_step(void *ud, const struct bfit_step_info *s)
{
    losses *l = ud;
    assert_true(l->n < 64);
    l->loss[l->n++] = s->loss;
}

static void run(int micro, int seq_max, losses *out, double *test_loss, bfit_train_result *rr)
{
    char p[300], spec[600];
    ttok train = tokens(96), test = tokens(32);
    bfit_source ts = ttok_source(&train), vs = ttok_source(&test);
    bfit_train_cfg c = bfit_train_cfg_default();
    bfit_train_result res;
    c.device_name = "cpu"; /* the CPU is meant: device auto could take a GPU */
    tmp_path(p, sizeof p, "tiny.cfg");
    snprintf(spec, sizeof spec, SPEC_FMT, attn_opts);
    put_text(p, spec);
    c.model = p;
    c.train_source = &ts;
    c.test_source = &vs;
    c.batch = 8;
    c.micro_batch = micro;
    c.epochs = 2;
    c.threads = 2;
    c.opt = bfit_optim_cfg_default(BFIT_OPT_ADAMW);
    c.lr = 1e-2;
    c.prefetch = 0;
    c.on_step = on_step;
    c.cb_ud = out;
    c.seq_max = seq_max;
    memset(out, 0, sizeof *out);
    if (bfit_train_from(&c, &res) != BFIT_OK)
        fail_msg("train: %s", bfit_errmsg());
    *test_loss = res.test_loss;
    if (rr)
        *rr = res;
}

/* A step's loss is the mean over its tokens that count, whatever its split:
 * micro-batches of 8, 2 and 1 give the same training to float rounding
 * (each sequence has a different count of real tokens, so normalising each
 * micro-batch by its own tokens, or by samples, would not). The loss falls
 * on the pattern, and the test loss is per token. */
static void test_training_split_invariant(void **st)
{
    losses a, b, c;
    double ta, tb, tc;
    (void)st;
    run(8, 0, &a, &ta, NULL);
    run(2, 0, &b, &tb, NULL);
    run(1, 0, &c, &tc, NULL);
    assert_int_equal(a.n, 24);
    assert_int_equal(b.n, 24);
    assert_int_equal(c.n, 24);
    for (int i = 0; i < a.n; i++) {
        assert_true(fabs(a.loss[i] - b.loss[i]) < 1e-4 * a.loss[i]);
        assert_true(fabs(a.loss[i] - c.loss[i]) < 1e-4 * a.loss[i]);
    }
    print_message("  per-token loss: step 1 %.4f, step 24 %.4f; test %.4f (ln 13 = %.4f)\n", a.loss[0],
                  a.loss[a.n - 1], ta, log(13.0));
    assert_true(a.loss[0] > 2.0 && a.loss[0] < 3.5); /* a fresh model: about ln 13 per token */
    assert_true(a.loss[a.n - 1] < 0.7 * a.loss[0]);
    assert_true(ta > 0 && ta < a.loss[0]);
    assert_true(fabs(ta - tb) < 1e-4 * ta && fabs(ta - tc) < 1e-4 * ta);
}

/* Variable length (seq_max): each micro-batch runs at its longest sequence
 * (rounded up to 16), the step's sequences sorted by length. With causal
 * attention the padding after a sequence never reaches its tokens, so the
 * training is that of the padded run, to float rounding, while fewer
 * positions are computed: the same tokens, less padding. */
static void test_variable_length(void **st)
{
    losses a, b;
    double ta, tb;
    bfit_train_result ra, rb;
    (void)st;
    run(2, 0, &a, &ta, &ra);
    run(2, T, &b, &tb, &rb);
    assert_int_equal(a.n, b.n);
    for (int i = 0; i < a.n; i++)
        if (!(fabs(a.loss[i] - b.loss[i]) < 1e-4 * a.loss[i]))
            fail_msg("step %d: padded %.6f, trimmed %.6f", i + 1, a.loss[i], b.loss[i]);
    assert_true(fabs(ta - tb) < 1e-4 * ta);
    assert_int_equal(ra.tokens, rb.tokens);
    assert_int_equal(ra.tokens_computed, 2 * 96 * T); /* every position of every sequence, both epochs */
    print_message("  %lld tokens; positions computed: padded %lld (%.1f%% padding), trimmed %lld (%.1f%%)\n",
                  (long long)ra.tokens, (long long)ra.tokens_computed,
                  100.0 * (1 - (double)ra.tokens / (double)ra.tokens_computed), (long long)rb.tokens_computed,
                  100.0 * (1 - (double)rb.tokens / (double)rb.tokens_computed));
    assert_true(rb.tokens_computed < 0.8 * ra.tokens_computed);
}

/* The same with bidirectional attention, whose key-padding mask (each
 * sequence's real length, from its labels) keeps the padding from every
 * token: trained padded to 40 in micro-batches of 2, or one sequence a
 * micro-batch at its length rounded up to 16, the losses are the same to
 * float rounding. Without the mask each token would attend to the padding,
 * whose amount differs between the two, and the losses would part. */
static void test_variable_length_bidirectional(void **st)
{
    losses a, b;
    double ta, tb, worst = 0;
    bfit_train_result ra, rb;
    (void)st;
    attn_opts = " causal=0";
    run(2, 0, &a, &ta, &ra);
    run(1, T, &b, &tb, &rb);
    attn_opts = "";
    assert_int_equal(a.n, b.n);
    for (int i = 0; i < a.n; i++) {
        worst = fmax(worst, fabs(a.loss[i] - b.loss[i]) / a.loss[i]);
        if (!(fabs(a.loss[i] - b.loss[i]) < 1e-4 * a.loss[i]))
            fail_msg("step %d: padded %.6f, trimmed %.6f", i + 1, a.loss[i], b.loss[i]);
    }
    assert_true(fabs(ta - tb) < 1e-4 * ta);
    assert_int_equal(ra.tokens, rb.tokens);
    print_message("  bidirectional: step 1 %.5f, step %d %.5f (padded) / %.5f (trimmed), max rel diff %.1e; "
                  "positions computed %lld / %lld\n", a.loss[0], a.n, a.loss[a.n - 1], b.loss[b.n - 1], worst,
                  (long long)ra.tokens_computed, (long long)rb.tokens_computed);
    assert_true(a.loss[a.n - 1] < 0.7 * a.loss[0]);
}

/* A data source gives its own labels: masked-LM options beside one are
 * refused before any step, naming the option. */
static void test_source_not_masked(void **st)
{
    char p[300], spec[600];
    ttok train = tokens(16);
    bfit_source ts = ttok_source(&train);
    bfit_train_cfg c = bfit_train_cfg_default();
    bfit_train_result res;
    (void)st;
    tmp_path(p, sizeof p, "tiny_mlm.cfg");
    snprintf(spec, sizeof spec, SPEC_FMT, " causal=0");
    put_text(p, spec);
    c.device_name = "cpu";
    c.model = p;
    c.train_source = &ts;
    c.batch = 8;
    c.mlm.p = 0.15;
    c.mlm.mask_id = 12;
    assert_int_equal(bfit_train_from(&c, &res), BFIT_EINVAL);
    assert_string_equal(bfit_errfield(), "mask_tokens");
    assert_non_null(strstr(bfit_errmsg(), "a data source (bfit_config_set_source) gives its own labels"));
}

/* A token model trained on a text file as bytes: the weights it saves (the
 * tied head's table once) load for bfit_evaluate, which gives the run's test
 * loss per token on the file's test part. */
static void test_save_and_evaluate(void **st)
{
    static const char *byte_spec = "input tokens=16\nembed 16 vocab=256 positions=16\n"
                                   "residual {\n layernorm\n linear 48\n attention 2\n linear 16\n}\n"
                                   "layernorm\nlinear 256 tie=1 bias=0\n";
    char spec_path[300], text_path[300], w[300];
    size_t cap = 128 << 10, n = 0; /* 2,900 lines: the test part is lines 1900-1999 */
    char *text = malloc(cap);
    bfit_train_cfg c = bfit_train_cfg_default();
    bfit_eval_cfg e;
    bfit_train_result res;
    double loss, acc;
    c.device_name = "cpu"; /* the CPU is meant: --device auto could take a GPU */
    int64_t cnt;
    (void)st;
    for (int i = 0; n + 64 < cap; i++)
        n += (size_t)snprintf(text + n, cap - n, "verse %d: and it was so, and it was good.\n", i % 97);
    tmp_path(spec_path, sizeof spec_path, "bytes.cfg");
    tmp_path(text_path, sizeof text_path, "text.txt");
    tmp_path(w, sizeof w, "bytes.safetensors");
    put_text(spec_path, byte_spec);
    put_bytes(text_path, text, (long)n);
    c.model = spec_path;
    c.data = text_path;
    c.batch = 16;
    c.epochs = 1;
    c.threads = 2;
    c.max_steps = 20;
    c.opt = bfit_optim_cfg_default(BFIT_OPT_ADAMW);
    c.lr = 1e-2;
    c.save = w;
    if (bfit_train_from(&c, &res) != BFIT_OK)
        fail_msg("train: %s", bfit_errmsg());
    memset(&e, 0, sizeof e);
    e.model = spec_path;
    e.weights = w;
    e.data = text_path;
    e.threads = 2;
    e.device_name = "cpu";
    if (bfit_evaluate_from(&e, &loss, &acc, &cnt, NULL) != BFIT_OK)
        fail_msg("evaluate: %s", bfit_errmsg());
    print_message("  trained 20 steps: test loss %.4f per token (run), %.4f (evaluate, %lld sequences)\n",
                  res.test_loss, loss, (long long)cnt);
    assert_true(res.test_loss < log(256.0) - 1.0); /* it learnt something */
    assert_true(fabs(loss - res.test_loss) < 1e-5 * res.test_loss);
    free(text);
}

/* Sequences of one token (--seq-max 1: a bigram model) are still a token
 * model's: a loss per token and its tokens counted. One label per sample
 * made the run take it for a classifier and plan it at length 0, which it
 * reported as "needs 9.80 MiB even at micro-batch 1, but 20 GiB is
 * allowed". */
static void test_seq_max_one(void **st)
{
    static const char *byte_spec = "input tokens=16\nembed 16 vocab=256 positions=16\n"
                                   "residual {\n layernorm\n linear 48\n attention 2\n linear 16\n}\n"
                                   "layernorm\nlinear 256 tie=1 bias=0\n";
    char spec_path[300], text_path[300];
    size_t cap = 128 << 10, n = 0; /* enough lines for a test part */
    char *text = malloc(cap);
    bfit_train_cfg c = bfit_train_cfg_default();
    bfit_train_result res;
    (void)st;
    assert_non_null(text);
    for (int i = 0; n + 64 < cap; i++)
        n += (size_t)snprintf(text + n, cap - n, "verse %d: and it was so.\n", i % 97);
    tmp_path(spec_path, sizeof spec_path, "bytes1.cfg");
    tmp_path(text_path, sizeof text_path, "text1.txt");
    put_text(spec_path, byte_spec);
    put_bytes(text_path, text, (long)n);
    c.model = spec_path;
    c.data = text_path;
    c.seq_max = 1;
    c.batch = 16;
    c.threads = 2;
    c.max_steps = 3;
    c.eval_samples = 50;
    if (bfit_train_from(&c, &res) != BFIT_OK)
        fail_msg("train --seq-max 1: %s", bfit_errmsg());
    assert_int_equal(res.steps, 3);
    assert_int_equal(res.tokens, 3 * 16); /* one token a sequence, each with its label */
    assert_true(res.test_loss > 0 && res.test_loss < 2 * log(256.0));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_not_list), /* first: its peak RSS check needs the process small */
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_llmc_file),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_id_limits),
        cmocka_unit_test(test_magic_alone),
        cmocka_unit_test(test_text_split),
        cmocka_unit_test(test_text_file_blocks),
        cmocka_unit_test(test_text_folder),
        cmocka_unit_test(test_token_file_split),
        cmocka_unit_test(test_token_file_blocks),
        cmocka_unit_test(test_stream_labels),
        cmocka_unit_test(test_stream_masked),
        cmocka_unit_test(test_masked_lines),
        cmocka_unit_test(test_lines),
        cmocka_unit_test(test_length_buckets),
        cmocka_unit_test(test_training_split_invariant),
        cmocka_unit_test(test_variable_length),
        cmocka_unit_test(test_variable_length_bidirectional),
        cmocka_unit_test(test_source_not_masked),
        cmocka_unit_test(test_save_and_evaluate),
        cmocka_unit_test(test_seq_max_one),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
