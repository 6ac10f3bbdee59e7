/* fuzz_tokfile.c - token files (llm.c's format: header, uint16 or uint32
 * ids) through bfit_dataset_load, the CLI's way in, on any bytes after two
 * of options. The first: the part (train, test, whole, every id as before
 * the split), the model's tokens per sample (1-16), --seq-max (refused for
 * a token file), and whether the header's count is set to the ids the
 * file holds (else the fuzzer rarely gets past the size check to the ids).
 * The second, with the count set, may repeat the ids to 18-25 blocks of
 * 4096 more: either side of where the first test block (the 20th) begins
 * and ends, and reads of many 64 KiB blocks, which inputs of a few KiB
 * never reach (8 of its 256 values only: such a file costs hundreds of
 * small ones). A data set that loads is also checked against its
 * vocabulary and its first samples taken through the shuffling stream, as
 * a run does. */
#include "data/data.h"
#include "fuzz_util.h"

#define HDR 1024
#define MOST_TAKE 4
#define STRETCH_FROM 248 /* second byte 248-255: 18-25 blocks more; below: the bytes as they are */
#define STRETCH_LEAST 18

/* The ids against the vocabulary (as a run checks them against its model's)
 * and up to 64 samples of MOST_TAKE windows of at most 16 ids: what a run's
 * first steps take. */
static void take_some(const bfit_dataset *ds)
{
    bfit_stream_cfg sc = {0};
    bfit_stream *s;
    float x[MOST_TAKE * 16];
    int32_t y[MOST_TAKE * 16], id, most;
    int64_t at;
    int got = 1;

    bfit_dataset_ids_above(ds, bfit_dataset_classes(ds), &at, &id, &most);
    sc.seed = 1;
    sc.shuffle = 1;
    sc.max_take = MOST_TAKE;
    if (bfit_stream_new(ds, &sc, &s) != BFIT_OK)
        return;
    for (int k = 0; k < 64 / MOST_TAKE && got > 0; k++)
        if (bfit_stream_take(s, MOST_TAKE, x, y, &got) != BFIT_OK)
            break;
    bfit_stream_free(s);
}

/* The file's bytes (malloc'd, *len of them): d's, the bytes after its
 * header repeated to `more` blocks of 4096 ids more (with fix), and with
 * fix its header's count set to the ids it holds. */
static uint8_t *token_file_bytes(const uint8_t *d, size_t n, int fix, int more, size_t *len)
{
    size_t width = n >= 8 && d[4] == 2 ? 4 : 2, ids = n >= HDR ? (n - HDR) / width : 0;
    uint8_t *b;

    *len = n + (fix && ids ? (size_t)more * 4096 * width : 0);
    if (!(b = malloc(*len ? *len : 1)))
        return NULL;
    memcpy(b, d, n);
    for (size_t at = n, k; at < *len; at += k) { /* the bytes after the header again and again, doubling */
        k = at - HDR < *len - at ? at - HDR : *len - at;
        memcpy(b + at, b + HDR, k);
    }
    if (fix && n >= HDR) /* the count, little-endian */
        for (int k = 0; k < 4; k++)
            b[8 + k] = (uint8_t)((uint32_t)((*len - HDR) / width) >> (8 * k));
    return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    static const int parts[] = {1, 0, -1, 1};
    bfit_data_opts o = BFIT_DATA_OPTS_INIT;
    bfit_dataset *ds = NULL;
    uint8_t *b;
    size_t len;
    char path[300];
    int opt, more, rc;

    if (n < 2)
        return 0;
    opt = d[0];
    o.seq = 1 + ((opt >> 2) & 15);
    o.whole = (opt & 3) == 2;
    o.tokens_whole = (opt & 3) == 3;
    o.lines = (opt & 0x80) != 0;
    more = d[1] >= STRETCH_FROM ? d[1] - STRETCH_FROM + STRETCH_LEAST : 0;
    if (!(b = token_file_bytes(d + 2, n - 2, (opt & 0x40) != 0, more, &len)))
        return 0;
    rc = fuzz_file("t.bin", b, len, path, sizeof path);
    free(b);
    if (rc || bfit_dataset_load(path, parts[opt & 3], &o, &ds) != BFIT_OK)
        return 0;
    take_some(ds);
    bfit_dataset_free(ds);
    return 0;
}
