/* test_safetensors.c - the safetensors reader and writer: round trips, files
 * exchanged with Python/PyTorch both ways, every kind of corrupt file named
 * in its error, and writes that fail without touching the old file or
 * leaving a temporary one behind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "batchfit.h"
#include "internal.h"
#include "tensor/safetensors.h"
#include "tfiles.h"

static int setup_dir(void **st)
{
    (void)st;
    return tmp_setup("st");
}

static int teardown_dir(void **st)
{
    (void)st;
    return tmp_teardown();
}
static void path_in(char *buf, size_t len, const char *name)
{
    if ((size_t)snprintf(buf, len, "%s/%s", tmpdir, name) >= len)
        fail_msg("path too long: %s/%s", tmpdir, name);
}

/* Entries of d whose names contain ".tmp." (leftover temporary files). */
static int count_tmp(const char *d)
{
    DIR *dp = opendir(d);
    struct dirent *e;
    int n = 0;
    assert_non_null(dp);
    while ((e = readdir(dp)))
        if (strstr(e->d_name, ".tmp."))
            n++;
    closedir(dp);
    return n;
}

/* The sample set: every size of dtype, odd byte counts, a scalar, an empty
 * tensor, and metadata that needs escaping. */
static const float W[6] = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f};
static const int32_t LAB[4] = {3, -1, 7, INT32_MAX};
static const uint8_t MASK[5] = {0, 1, 2, 254, 255};
static const uint16_t BF[3] = {0x3f80, 0xc020, 0x4049}; /* 1.0, -2.5, 3.140625 */
static const double E = 2.718281828459045;
static const char *const MK[2] = {"step", "note"};
static const char *const MV[2] = {"42", "quote \" backslash \\ newline \n tab \t \xc3\xa9"};

static int sample_tensors(bfit_st_tensor *t)
{
    memset(t, 0, sizeof(bfit_st_tensor) * 6);
    t[0] = (bfit_st_tensor){"mask", "U8", 1, {5}, MASK, 5};
    t[1] = (bfit_st_tensor){"layer.0.weight", "F32", 2, {2, 3}, W, sizeof W};
    t[2] = (bfit_st_tensor){"bf", "BF16", 1, {3}, BF, sizeof BF};
    t[3] = (bfit_st_tensor){"labels", "I32", 1, {4}, LAB, sizeof LAB};
    t[4] = (bfit_st_tensor){"e", "F64", 0, {0}, &E, sizeof E};
    t[5] = (bfit_st_tensor){"empty", "F32", 2, {0, 3}, NULL, 0};
    return 6;
}

/* The sample's tensors with checksums: all there, and the metadata too. */
static void check_sample_meta_extra(const bfit_st_file *f)
{
    assert_int_equal(bfit_st_count(f), 6);
    assert_string_equal(bfit_st_meta(f, "step"), "42");
    assert_string_equal(bfit_st_meta(f, "note"), MV[1]);
    assert_int_equal(bfit_st_meta_count(f), 2 + 6);
    assert_memory_equal(bfit_st_find(f, "layer.0.weight")->data, W, sizeof W);
}

static void check_sample(const bfit_st_file *f)
{
    const bfit_st_tensor *t;
    float fl[3];
    assert_int_equal(bfit_st_count(f), 6);
    t = bfit_st_find(f, "layer.0.weight");
    assert_non_null(t);
    assert_string_equal(t->dtype, "F32");
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 2);
    assert_int_equal(t->shape[1], 3);
    assert_int_equal(t->nbytes, sizeof W);
    assert_memory_equal(t->data, W, sizeof W);
    assert_int_equal((uintptr_t)t->data % 4, 0);
    t = bfit_st_find(f, "labels");
    assert_non_null(t);
    assert_string_equal(t->dtype, "I32");
    assert_memory_equal(t->data, LAB, sizeof LAB);
    assert_int_equal((uintptr_t)t->data % 4, 0);
    t = bfit_st_find(f, "mask");
    assert_non_null(t);
    assert_string_equal(t->dtype, "U8");
    assert_memory_equal(t->data, MASK, 5);
    t = bfit_st_find(f, "bf");
    assert_non_null(t);
    assert_int_equal((uintptr_t)t->data % 2, 0);
    assert_int_equal(bfit_st_to_f32(t, fl, 3), BFIT_OK);
    assert_true(fl[0] == 1.0f && fl[1] == -2.5f && fl[2] == 3.140625f);
    t = bfit_st_find(f, "e");
    assert_non_null(t);
    assert_int_equal(t->ndim, 0);
    assert_int_equal(bfit_st_numel(t), 1);
    assert_int_equal((uintptr_t)t->data % 8, 0);
    assert_memory_equal(t->data, &E, 8);
    t = bfit_st_find(f, "empty");
    assert_non_null(t);
    assert_int_equal(t->nbytes, 0);
    assert_int_equal(bfit_st_numel(t), 0);
    assert_null(bfit_st_find(f, "nope"));
    assert_string_equal(bfit_st_meta(f, "step"), "42");
    assert_string_equal(bfit_st_meta(f, "note"), MV[1]);
    assert_null(bfit_st_meta(f, "absent"));
    assert_int_equal(bfit_st_meta_count(f), 2);
}

static void test_round_trip(void **st)
{
    bfit_st_tensor t[6];
    bfit_st_file *f;
    char p[PATH_MAX];
    int n = sample_tensors(t);
    (void)st;
    path_in(p, sizeof p, "rt.safetensors");
    assert_int_equal(bfit_st_write(p, t, n, MK, MV, 2), BFIT_OK);
    assert_int_equal(bfit_st_read(p, &f), BFIT_OK);
    check_sample(f);
    /* the header lists the tensors as the buffer holds them: by element
     * size, largest first, so each is aligned */
    assert_string_equal(bfit_st_get(f, 0)->name, "e");
    assert_string_equal(bfit_st_get(f, 5)->name, "mask");
    assert_null(bfit_st_get(f, 6));
    bfit_st_free(f);
    /* and again over the existing file, with no metadata and no tensors */
    assert_int_equal(bfit_st_write(p, NULL, 0, NULL, NULL, 0), BFIT_OK);
    assert_int_equal(bfit_st_read(p, &f), BFIT_OK);
    assert_int_equal(bfit_st_count(f), 0);
    assert_int_equal(bfit_st_meta_count(f), 0);
    bfit_st_free(f);
    assert_int_equal(count_tmp(tmpdir), 0);
}

/* A Python program (json + struct + torch.frombuffer, and the safetensors
 * package when it is installed) that checks a file we wrote, or writes one
 * for us to read. */
static const char *const PY =
    "import json, struct, sys\n"
    "import torch\n"
    "DT = {'F32': torch.float32, 'F64': torch.float64, 'F16': torch.float16, 'BF16': torch.bfloat16,\n"
    "      'I32': torch.int32, 'I64': torch.int64, 'U8': torch.uint8}\n"
    "def load(path):\n"
    "    data = open(path, 'rb').read()\n"
    "    n = struct.unpack('<Q', data[:8])[0]\n"
    "    assert (8 + n) % 8 == 0, 'buffer not 8-aligned'\n"
    "    hdr = json.loads(data[8:8 + n].decode('utf-8'))\n"
    "    buf = data[8 + n:]\n"
    "    meta = hdr.pop('__metadata__', {})\n"
    "    pos = 0\n"
    "    for (b, e), k in sorted((tuple(v['data_offsets']), k) for k, v in hdr.items()):\n"
    "        assert b == pos, 'hole or overlap at ' + k\n"
    "        pos = e\n"
    "    assert pos == len(buf), 'buffer not covered'\n"
    "    out = {}\n"
    "    for k, v in hdr.items():\n"
    "        b, e = v['data_offsets']\n"
    "        dt = DT[v['dtype']]\n"
    "        t = torch.frombuffer(bytearray(buf[b:e]), dtype=dt) if e > b else torch.empty(0, dtype=dt)\n"
    "        out[k] = t.reshape(v['shape'])\n"
    "    return out, meta\n"
    "mode, path = sys.argv[1], sys.argv[2]\n"
    "if mode == 'check':\n"
    "    t, meta = load(path)\n"
    "    exp = {'layer.0.weight': torch.arange(6, dtype=torch.float32).reshape(2, 3) * 0.5 - 1,\n"
    "           'labels': torch.tensor([3, -1, 7, 2**31 - 1], dtype=torch.int32),\n"
    "           'mask': torch.tensor([0, 1, 2, 254, 255], dtype=torch.uint8),\n"
    "           'bf': torch.tensor([1.0, -2.5, 3.140625], dtype=torch.bfloat16),\n"
    "           'e': torch.tensor(2.718281828459045, dtype=torch.float64),\n"
    "           'empty': torch.empty(0, 3)}\n"
    "    assert set(t) == set(exp), sorted(t)\n"
    "    for k in exp:\n"
    "        assert t[k].dtype == exp[k].dtype and t[k].shape == exp[k].shape and torch.equal(t[k], exp[k]), k\n"
    "    assert meta == {'step': '42', 'note': 'quote \" backslash \\\\ newline \\n tab \\t \\u00e9'}, meta\n"
    "    try:\n"
    "        from safetensors.torch import load_file\n"
    "    except ImportError:\n"
    "        print('safetensors package not installed; checked with json+struct+torch.frombuffer')\n"
    "    else:\n"
    "        lt = load_file(path)\n"
    "        assert all(torch.equal(lt[k], exp[k]) for k in exp)\n"
    "        print('loaded with safetensors.torch.load_file')\n"
    "    print('OK')\n"
    "else:\n"
    "    ts = [('a.weight', 'F32', (torch.arange(6, dtype=torch.float32) * 0.25).reshape(3, 2)),\n"
    "          ('b', 'I64', torch.tensor([-5, 1 << 40], dtype=torch.int64)),\n"
    "          ('c', 'F16', torch.tensor([0.5, -2.0, 65504.0, 2.0**-24], dtype=torch.float16)),\n"
    "          ('d', 'BF16', torch.tensor([1.5, -0.0078125], dtype=torch.bfloat16))]\n"
    "    hdr, buf = {}, b''\n"
    "    for k, dt, t in ts:\n"
    "        raw = t.contiguous().view(torch.uint8).numpy().tobytes()\n"
    "        hdr[k] = {'shape': list(t.shape), 'dtype': dt, 'data_offsets': [len(buf), len(buf) + len(raw)]}\n"
    "        buf += raw\n"
    "    # keys out of buffer order, metadata in the middle, padded with spaces\n"
    "    order = ['d', '__metadata__', 'b', 'a.weight', 'c']\n"
    "    hdr['__metadata__'] = {'format': 'pt', 'who': 'python'}\n"
    "    js = json.dumps({k: hdr[k] for k in order}).encode()\n"
    "    js += b' ' * (-len(js) % 8)\n"
    "    open(path, 'wb').write(struct.pack('<Q', len(js)) + js + buf)\n"
    "    print('OK')\n";

static void run_python(const char *mode, const char *file)
{
    const char *py = getenv("BFIT_PYTHON");
    char script[PATH_MAX], cmd[3 * PATH_MAX];
    FILE *f;
    int rc;
    if (!py || !*py || strstr(py, "NOTFOUND"))
        fail_msg("BFIT_PYTHON is not set: this test needs /usr/bin/python3 with torch (python3-torch)");
    path_in(script, sizeof script, "st_check.py");
    f = fopen(script, "w");
    assert_non_null(f);
    fputs(PY, f);
    assert_int_equal(fclose(f), 0);
    snprintf(cmd, sizeof cmd, "'%s' '%s' %s '%s'", py, script, mode, file);
    rc = system(cmd);
    if (rc != 0)
        fail_msg("python (%s) failed with status %d: %s", py, rc, cmd);
}

static void test_python_reads_ours(void **st)
{
    bfit_st_tensor t[6];
    char p[PATH_MAX];
    int n = sample_tensors(t);
    (void)st;
    path_in(p, sizeof p, "for_python.safetensors");
    assert_int_equal(bfit_st_write(p, t, n, MK, MV, 2), BFIT_OK);
    run_python("check", p);
}

static void test_we_read_python(void **st)
{
    char p[PATH_MAX];
    bfit_st_file *f;
    const bfit_st_tensor *t;
    float a[6], c[4], d[2];
    int64_t b[2];
    (void)st;
    path_in(p, sizeof p, "from_python.safetensors");
    run_python("write", p);
    assert_int_equal(bfit_st_read(p, &f), BFIT_OK);
    assert_int_equal(bfit_st_count(f), 4);
    assert_string_equal(bfit_st_get(f, 0)->name, "d"); /* header order kept */
    t = bfit_st_find(f, "a.weight");
    assert_non_null(t);
    assert_int_equal(t->shape[0], 3);
    assert_int_equal(t->shape[1], 2);
    assert_int_equal(bfit_st_to_f32(t, a, 6), BFIT_OK);
    for (int i = 0; i < 6; i++)
        assert_true(a[i] == 0.25f * (float)i);
    t = bfit_st_find(f, "b");
    assert_non_null(t);
    assert_string_equal(t->dtype, "I64");
    memcpy(b, t->data, 16);
    assert_true(b[0] == -5 && b[1] == (int64_t)1 << 40);
    assert_int_equal(bfit_st_to_f32(t, a, 2), BFIT_EFORMAT); /* not floating */
    t = bfit_st_find(f, "c");
    assert_non_null(t);
    assert_int_equal(bfit_st_to_f32(t, c, 4), BFIT_OK);
    assert_true(c[0] == 0.5f && c[1] == -2.0f && c[2] == 65504.0f && c[3] == 0x1p-24f);
    assert_int_equal(bfit_st_to_f32(t, c, 3), BFIT_EFORMAT); /* wrong count */
    t = bfit_st_find(f, "d");
    assert_non_null(t);
    assert_int_equal(bfit_st_to_f32(t, d, 2), BFIT_OK);
    assert_true(d[0] == 1.5f && d[1] == -0.0078125f);
    assert_string_equal(bfit_st_meta(f, "format"), "pt");
    assert_string_equal(bfit_st_meta(f, "who"), "python");
    bfit_st_free(f);
}

/* Write 8-byte length (hlen, or the JSON's length if hlen < 0), the JSON,
 * then nbuf zero bytes. */
static void make_raw(const char *path, const char *json, long long hlen, size_t nbuf)
{
    size_t jn = strlen(json), n = 8 + jn + nbuf;
    unsigned char *b = calloc(1, n);
    uint64_t h = hlen < 0 ? jn : (uint64_t)hlen;
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(h >> (8 * i));
    memcpy(b + 8, json, jn);
    put_bytes(path, b, n);
    free(b);
}

static void expect_bad(const char *name, const char *json, long long hlen, size_t nbuf, const char *msg)
{
    char p[PATH_MAX];
    bfit_st_file *f = (bfit_st_file *)1;
    int rc;
    path_in(p, sizeof p, name);
    make_raw(p, json, hlen, nbuf);
    rc = bfit_st_read(p, &f);
    printf("  %-22s -> %s\n", name, bfit_errmsg());
    assert_int_equal(rc, BFIT_EFORMAT);
    assert_null(f);
    assert_non_null(strstr(bfit_errmsg(), p));
    if (!strstr(bfit_errmsg(), msg))
        fail_msg("%s: message \"%s\" lacks \"%s\"", name, bfit_errmsg(), msg);
}

#define T24 "\"t\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}"

static void test_corrupt_files(void **st)
{
    char p[PATH_MAX];
    bfit_st_file *f;
    (void)st;
    /* a good one first, so each case below is one fault away from valid */
    path_in(p, sizeof p, "good.safetensors");
    make_raw(p, "{" T24 "}", -1, 24);
    assert_int_equal(bfit_st_read(p, &f), BFIT_OK);
    assert_int_equal(bfit_st_count(f), 1);
    bfit_st_free(f);

    path_in(p, sizeof p, "short.safetensors");
    put_bytes(p, "\x10\0\0", 3);
    assert_int_equal(bfit_st_read(p, &f), BFIT_EFORMAT);
    assert_non_null(strstr(bfit_errmsg(), "8-byte header length"));

    expect_bad("truncated", "{" T24 "}", -1, 20,
               "\"t\": data_offsets [0, 24] run past the 20 bytes of data after the header: the file is shorter than "
               "its header says (truncated)");
    expect_bad("hlen_past_end", "{" T24 "}", 1000, 24, "header length 1000 runs past the end");
    expect_bad("hlen_huge", "{" T24 "}", (long long)1 << 62, 24, "runs past the end");
    /* a text file (a log given as weights): said to be text, not a length of 2482730676645077627 */
    path_in(p, sizeof p, "log.jsonl");
    put_text(p, "{\"event\":\"start\",\"time\":1}\n");
    assert_int_equal(bfit_st_read(p, &f), BFIT_EFORMAT);
    assert_non_null(strstr(bfit_errmsg(), p));
    if (!strstr(bfit_errmsg(), ": not a safetensors file: it starts with the text '{\"event\"'"))
        fail_msg("a text file: \"%s\"", bfit_errmsg());
    expect_bad("hlen_tiny", "{" T24 "}", 1, 24, "outside 2..");
    expect_bad("not_json", "{\"t\":{\"dtype\":\"F32\",,}}", -1, 0, "not valid JSON");
    expect_bad("not_object", "[1,2]", -1, 0, "does not start with '{'");
    expect_bad("junk_after", "{" T24 "}x", -1, 24, "bytes after its JSON object");
    expect_bad("shape_mismatch", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[0,24]}}", -1, 24,
               "\"t\": shape of 8 F32 elements is 32 bytes but data_offsets [0, 24] hold 24");
    expect_bad("overlap",
               "{" T24 ",\"u\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[20,28]}}", -1, 28,
               "overlap tensor");
    expect_bad("hole", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[4,28]}}", -1, 28,
               "bytes [0, 4) before tensor \"t\" belong to no tensor");
    expect_bad("trailing", "{" T24 "}", -1, 32, "buffer is 32 bytes but the tensors cover only 24");
    expect_bad("unknown_dtype", "{\"t\":{\"dtype\":\"F33\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", -1, 24,
               "\"t\": unknown dtype \"F33\"");
    expect_bad("duplicate", "{" T24 "," T24 "}", -1, 24, "tensor \"t\" appears twice");
    expect_bad("dup_zero", "{\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                           "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", -1, 0,
               "\"z\" appears twice");
    expect_bad("neg_offset", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[-4,20]}}", -1, 24,
               "data_offsets must be [begin, end]");
    expect_bad("end_before", "{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", -1, 8,
               "end before they begin");
    expect_bad("frac_shape", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,10]}}", -1, 10,
               "shape[0] is not a non-negative integer");
    expect_bad("missing", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2,3]}}", -1, 24, "missing field \"data_offsets\"");
    expect_bad("extra_field", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24],\"x\":1}}", -1, 24,
               "unknown field \"x\"");
    expect_bad("too_many_dims", "{\"t\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
               -1, 1, "more than 8 dimensions");
    expect_bad("huge_shape", "{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}",
               -1, 0, "impossibly large");
    expect_bad("meta_not_str", "{\"__metadata__\":{\"a\":1}," T24 "}", -1, 24, "metadata \"a\" must be a string");
    expect_bad("entry_not_obj", "{\"t\":5}", -1, 0, "\"t\": entry must be an object");

    path_in(p, sizeof p, "does_not_exist.safetensors");
    assert_int_equal(bfit_st_read(p, &f), BFIT_EIO);
    assert_non_null(strstr(bfit_errmsg(), "does_not_exist"));
    assert_int_equal(bfit_st_read(tmpdir, &f), BFIT_EIO); /* a directory */
}

/* The old file at p must still hold exactly old[0..n). */
static void assert_same(const char *p, const char *old, long n)
{
    long m;
    char *now = file_bytes(p, &m);
    assert_int_equal(m, n);
    assert_memory_equal(now, old, n);
    free(now);
}

static void test_failed_write_keeps_old(void **st)
{
    bfit_st_tensor t[6], bad;
    char p[PATH_MAX], sub[PATH_MAX], q[PATH_MAX], *old;
    long nold;
    struct rlimit rl, small;
    float *big;
    int n = sample_tensors(t);
    (void)st;

    path_in(p, sizeof p, "keep.safetensors");
    assert_int_equal(bfit_st_write(p, t, n, MK, MV, 2), BFIT_OK);
    old = file_bytes(p, &nold);

    /* bad arguments: nothing is created */
    bad = (bfit_st_tensor){"x", "F32", 1, {3}, W, 8};
    assert_int_equal(bfit_st_write(p, &bad, 1, NULL, NULL, 0), BFIT_EINVAL);
    bad = (bfit_st_tensor){"x", "Q8", 1, {3}, W, 3};
    assert_int_equal(bfit_st_write(p, &bad, 1, NULL, NULL, 0), BFIT_EINVAL);
    t[1].name = "mask";
    assert_int_equal(bfit_st_write(p, t, n, NULL, NULL, 0), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "given twice"));
    t[1].name = "layer.0.weight";
    assert_same(p, old, nold);

    /* a directory that does not exist */
    path_in(q, sizeof q, "no/such/dir/x.safetensors");
    assert_int_equal(bfit_st_write(q, t, n, NULL, NULL, 0), BFIT_EIO);
    assert_non_null(strstr(bfit_errmsg(), "cannot create a temporary file"));

    /* the rename fails late (the target is a directory): the temporary file,
     * fully written by then, must be gone */
    path_in(sub, sizeof sub, "is_a_dir");
    assert_int_equal(mkdir(sub, 0755), 0);
    path_in(q, sizeof q, "is_a_dir/inside");
    put_bytes(q, "x", 1);
    assert_int_equal(bfit_st_write(sub, t, n, MK, MV, 2), BFIT_EIO);
    printf("  rename over a directory -> %s\n", bfit_errmsg());
    assert_int_equal(count_tmp(tmpdir), 0);
    assert_int_equal(access(q, F_OK), 0);

    /* the disk "fills" part way through the tensors (RLIMIT_FSIZE: write
     * returns EFBIG once SIGXFSZ is ignored) */
    big = calloc(1 << 18, sizeof(float));
    assert_non_null(big);
    bad = (bfit_st_tensor){"big", "F32", 1, {1 << 18}, big, (size_t)(1 << 18) * sizeof(float)};
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &rl), 0);
    signal(SIGXFSZ, SIG_IGN);
    small = rl;
    small.rlim_cur = 4096;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    assert_int_equal(bfit_st_write(p, &bad, 1, NULL, NULL, 0), BFIT_EIO);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &rl), 0);
    signal(SIGXFSZ, SIG_DFL);
    printf("  disk full -> %s\n", bfit_errmsg());
    assert_int_equal(count_tmp(tmpdir), 0);
    assert_same(p, old, nold);
    free(big);

    /* a directory we may not write (meaningless for root, who may) */
    if (geteuid() != 0) {
        path_in(sub, sizeof sub, "ro");
        assert_int_equal(mkdir(sub, 0755), 0);
        path_in(q, sizeof q, "ro/w.safetensors");
        assert_int_equal(bfit_st_write(q, t, n, NULL, NULL, 0), BFIT_OK);
        assert_int_equal(chmod(sub, 0555), 0);
        assert_int_equal(bfit_st_write(q, &t[0], 1, NULL, NULL, 0), BFIT_EIO);
        assert_int_equal(chmod(sub, 0755), 0);
        assert_int_equal(count_tmp(sub), 0);
        {
            bfit_st_file *f;
            assert_int_equal(bfit_st_read(q, &f), BFIT_OK);
            assert_int_equal(bfit_st_count(f), n);
            bfit_st_free(f);
        }
    } else {
        printf("  (running as root: the read-only directory case is skipped)\n");
    }
    free(old);
}

/* A save killed half-way leaves path.tmp.XXXXXX behind (hundreds of MB for
 * real weights): the next write to that path removes it. A temporary file
 * still being written (its writer holds the lock) stays, and so does any
 * other name. */
static void test_stale_temp_swept(void **st)
{
    bfit_st_tensor t[6];
    char p[PATH_MAX], stale[PATH_MAX], live[PATH_MAX], other[PATH_MAX], notours[PATH_MAX];
    int n = sample_tensors(t), fd;
    (void)st;

    path_in(p, sizeof p, "swept.safetensors");
    path_in(stale, sizeof stale, "swept.safetensors.tmp.Ab3xY9");
    path_in(live, sizeof live, "swept.safetensors.tmp.LiVe01");
    path_in(other, sizeof other, "other.safetensors.tmp.Ab3xY9");
    path_in(notours, sizeof notours, "swept.safetensors.tmp.keep-me");
    put_bytes(stale, "half a file", 11);
    put_bytes(other, "x", 1);
    put_bytes(notours, "x", 1);
    /* a writer at work: the lock is held through another open file */
    put_bytes(live, "being written", 13);
    fd = open(live, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), 0);

    assert_int_equal(bfit_st_write(p, t, n, MK, MV, 2), BFIT_OK);
    assert_int_equal(access(stale, F_OK), -1);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(access(live, F_OK), 0);
    assert_int_equal(access(other, F_OK), 0);
    assert_int_equal(access(notours, F_OK), 0);

    /* once its writer is gone, it goes too */
    close(fd);
    assert_int_equal(bfit_st_write(p, t, n, MK, MV, 2), BFIT_OK);
    assert_int_equal(access(live, F_OK), -1);
    assert_int_equal(access(other, F_OK), 0);
    unlink(other);
    unlink(notours);
    assert_int_equal(count_tmp(tmpdir), 0);
}

/* Checksums: every tensor's CRC-32 in the metadata, verified on reading;
 * a flipped byte anywhere in a tensor is an error naming it. The same bytes
 * parsed from memory give the same file. */
static void test_checksums(void **st)
{
    bfit_st_tensor t[6];
    bfit_st_write_opts o = {1, NULL, NULL};
    bfit_st_file *f;
    char p[PATH_MAX], q[PATH_MAX], *raw;
    long n;
    int nt = sample_tensors(t);
    (void)st;
    path_in(p, sizeof p, "crc.safetensors");
    path_in(q, sizeof q, "crc-bad.safetensors");
    assert_int_equal(bfit_st_write_ex(p, t, nt, MK, MV, 2, &o), BFIT_OK);
    assert_int_equal(bfit_st_read(p, &f), BFIT_OK);
    check_sample_meta_extra(f);
    assert_non_null(bfit_st_meta(f, "crc32.layer.0.weight"));
    assert_int_equal(strlen(bfit_st_meta(f, "crc32.layer.0.weight")), 8);
    bfit_st_free(f);
    raw = file_bytes(p, &n);
    assert_int_equal(bfit_st_parse(raw, (size_t)n, "mem", &f), BFIT_OK);
    check_sample_meta_extra(f);
    bfit_st_free(f);
    /* flip one bit of the last byte: the tensor stored last is named */
    raw[n - 1] ^= 1;
    put_bytes(q, raw, n);
    assert_int_equal(bfit_st_read(q, &f), BFIT_EFORMAT);
    printf("  %s\n", bfit_errmsg());
    assert_non_null(strstr(bfit_errmsg(), q));
    assert_non_null(strstr(bfit_errmsg(), "fails its checksum"));
    assert_non_null(strstr(bfit_errmsg(), "\"mask\"")); /* U8, the smallest element size: stored last */
    assert_int_equal(bfit_st_parse(raw, (size_t)n, "mem", &f), BFIT_EFORMAT);
    assert_non_null(strstr(bfit_errmsg(), "mem: tensor \"mask\" fails its checksum"));
    /* truncated anywhere: an error, never a partial file */
    for (size_t cut = 0; cut < (size_t)n; cut += 7) {
        assert_int_not_equal(bfit_st_parse(raw, cut, "cut", &f), BFIT_OK);
        assert_non_null(strstr(bfit_errmsg(), "cut"));
    }
    free(raw);
    /* the prefix is reserved for checksums */
    {
        const char *k[1] = {"crc32.x"}, *v[1] = {"00000000"};
        assert_int_equal(bfit_st_write(q, t, nt, k, v, 1), BFIT_EINVAL);
        assert_non_null(strstr(bfit_errmsg(), "for checksums"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_python_reads_ours),
        cmocka_unit_test(test_we_read_python),
        cmocka_unit_test(test_corrupt_files),
        cmocka_unit_test(test_failed_write_keeps_old),
        cmocka_unit_test(test_stale_temp_swept),
        cmocka_unit_test(test_checksums),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
