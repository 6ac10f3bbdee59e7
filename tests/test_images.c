/* test_images.c - image folders through the sample stream: classes and
 * files numbered as torchvision's ImageFolder numbers them, list files,
 * the same samples with 0, 1, 2 and 4 loader threads and any take sizes,
 * no buffer growth once the largest image was seen, bad files as errors
 * naming them or skipped and counted, the random resized crop's
 * parameters within torchvision's ranges, normalisation, a test set's
 * classes matched by name, list files told from CSV, class names that are
 * not UTF-8 refused. The folders are
 * written by scripts/img_folders.py (PIL); pixel values against PIL's and
 * torchvision's are tests/oracle/img_oracle.py's part. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include "internal.h"
#include "tfiles.h"

#include "data/data_int.h"

static char colour[300], fm[300], bad[300];

static int gen(const char *what, const char *dir, const char *extra)
{
    char cmd[2048], script[512];
    const char *py = getenv("BFIT_PYTHON") && *getenv("BFIT_PYTHON") ? getenv("BFIT_PYTHON") : "/usr/bin/python3";
    src_path(script, sizeof script, "scripts/img_folders.py");
    snprintf(cmd, sizeof cmd, "%s %s %s %s %s", py, script, what, dir, extra);
    return system(cmd) == 0 ? 0 : -1;
}

static int setup(void **st)
{
    (void)st;
    if (tmp_setup("images"))
        return -1;
    tmp_path(colour, sizeof colour, "colour");
    tmp_path(fm, sizeof fm, "fm");
    tmp_path(bad, sizeof bad, "bad");
    return gen("colour", colour, "--per-class 12") || gen("fmnist", fm, "--per-class 8 --format png") ||
           gen("bad", bad, "");
}

static int teardown(void **st)
{
    (void)st;
    return tmp_teardown();
}

static bfit_dataset *load(const char *spec, int c, int h, int w, int skip)
{
    bfit_data_opts o = BFIT_DATA_OPTS_INIT;
    bfit_dataset *d = NULL;
    o.img_c = c, o.img_h = h, o.img_w = w, o.img_skip_bad = skip;
    assert_int_equal(bfit_dataset_load(spec, 1, &o, &d), BFIT_OK);
    assert_true(bfit_dataset_is_images(d));
    return d;
}

/* Classes are the sorted folder names; files sorted within each. */
static void folder_order(void **st)
{
    (void)st;
    bfit_dataset *d = load(fm, 1, 28, 28, 0);
    static const char *names[] = {"Ankle_boot", "Bag", "Coat", "Dress", "Pullover", "Sandal", "Shirt", "Sneaker",
                                  "T-shirt_top", "Trouser"};
    char want[512];

    assert_int_equal(bfit_dataset_classes(d), 10);
    assert_int_equal(bfit_dataset_count(d), 80);
    for (int c = 0; c < 10; c++)
        assert_string_equal(bfit_dataset_class_name(d, c), names[c]);
    for (int i = 0; i < 80; i++) {
        snprintf(want, sizeof want, "%s/%s/%05d.png", fm, names[i / 8], i % 8);
        assert_string_equal(bfit_dataset_image_path(d, i), want);
        assert_int_equal(bfit_dataset_label(d, i), i / 8);
    }
    bfit_dataset_free(d);
}

/* A list file: paths relative to it, labels by name (sorted) or index. */
static void list_file(void **st)
{
    (void)st;
    char path[512], text[2048];
    bfit_dataset *d;

    tmp_path(path, sizeof path, "list.csv");
    snprintf(text, sizeof text, "# path,label\nfm/Bag/00000.png,zebra\n%s/Coat/00001.png, ant\n\nfm/Bag/00002.png,zebra\n", fm);
    put_text(path, text);
    d = load(path, 1, 28, 28, 0);
    assert_int_equal(bfit_dataset_count(d), 3);
    assert_int_equal(bfit_dataset_classes(d), 2);
    assert_string_equal(bfit_dataset_class_name(d, 0), "ant");
    assert_int_equal(bfit_dataset_label(d, 0), 1);
    assert_int_equal(bfit_dataset_label(d, 1), 0);
    snprintf(text, sizeof text, "%s/fm/Bag/00000.png", tmpdir);
    assert_string_equal(bfit_dataset_image_path(d, 0), text);
    bfit_dataset_free(d);
    put_text(path, "fm/Bag/00000.png,3\nfm/Bag/00001.png,0\n");
    d = load(path, 3, 16, 16, 0);
    assert_int_equal(bfit_dataset_classes(d), 4);
    assert_string_equal(bfit_dataset_class_name(d, 3), "3");
    bfit_dataset_free(d);
    put_text(path, "fm/Bag/00000.png,3\nfm/Bag/00001.png\n");
    bfit_data_opts o = BFIT_DATA_OPTS_INIT;
    o.img_c = 1, o.img_h = o.img_w = 28;
    d = NULL;
    assert_int_equal(bfit_dataset_load_images(path, &o, &d), BFIT_EFORMAT);
    assert_non_null(strstr(bfit_errmsg(), "list.csv:2"));
}

/* A folder of some of fm's classes (links to its class folders) under
 * other names where `as` says so. */
static void subset(const char *name, const char *const *classes, const char *const *as, int n, char *out,
                   size_t cap)
{
    char from[1024], to[1024];
    tmp_path(out, cap, name);
    assert_int_equal(mkdir(out, 0755), 0);
    for (int c = 0; c < n; c++) {
        snprintf(from, sizeof from, "%s/%s", fm, classes[c]);
        snprintf(to, sizeof to, "%s/%s", out, as ? as[c] : classes[c]);
        assert_int_equal(symlink(from, to), 0);
    }
}

/* A test folder of some of the training classes is labelled by name as
 * the model learned them; one of other names is refused naming them;
 * numbers (a list of indices) stay as they are. */
static void class_match(void **st)
{
    (void)st;
    static const char *some[] = {"Bag", "Trouser"}, *other[] = {"Bag", "Zebra"};
    static const char *fm_names[] = {"Ankle_boot", "Bag", "Coat", "Dress", "Pullover", "Sandal", "Shirt", "Sneaker",
                                     "T-shirt_top", "Trouser"};
    static const char *nums[] = {"0", "1", "2", "3"}, *dig[] = {"1", "3"};
    char dir[512], path[512];
    bfit_dataset *d;

    subset("sub", some, NULL, 2, dir, sizeof dir);
    d = load(dir, 1, 28, 28, 0);
    assert_int_equal(bfit_dataset_label(d, 8), 1); /* Trouser: its own second class */
    assert_int_equal(bfit_dataset_match_classes(d, fm_names, 10, "the weights"), BFIT_OK);
    assert_int_equal(bfit_dataset_classes(d), 10);
    assert_int_equal(bfit_dataset_label(d, 0), 1);
    assert_int_equal(bfit_dataset_label(d, 8), 9);
    assert_string_equal(bfit_dataset_class_name(d, 9), "Trouser");
    bfit_dataset_free(d);

    subset("other", some, other, 2, dir, sizeof dir);
    d = load(dir, 1, 28, 28, 0);
    assert_int_equal(bfit_dataset_match_classes(d, fm_names, 10, "the weights w.st"), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "class Zebra is not among the 10 classes of the weights w.st"));
    assert_int_equal(bfit_dataset_label(d, 8), 1); /* unchanged on failure */
    bfit_dataset_free(d);

    /* a list of names is matched; a list of indices is not */
    tmp_path(path, sizeof path, "names.csv");
    put_text(path, "fm/Bag/00000.png,Trouser\nfm/Bag/00001.png,Bag\n");
    d = load(path, 1, 28, 28, 0);
    assert_int_equal(bfit_dataset_match_classes(d, fm_names, 10, "w"), BFIT_OK);
    assert_int_equal(bfit_dataset_label(d, 0), 9);
    assert_int_equal(bfit_dataset_label(d, 1), 1);
    bfit_dataset_free(d);
    put_text(path, "fm/Bag/00000.png,3\nfm/Bag/00001.png,0\n");
    d = load(path, 1, 28, 28, 0);
    assert_int_equal(bfit_dataset_match_classes(d, other, 2, "w"), BFIT_OK);
    assert_int_equal(bfit_dataset_label(d, 0), 3);
    bfit_dataset_free(d);

    /* names 0..n-1 (trained on a list of indices) match folders named by
     * numbers, and leave folders of words as they are */
    subset("dig", some, dig, 2, dir, sizeof dir);
    d = load(dir, 1, 28, 28, 0);
    assert_int_equal(bfit_dataset_match_classes(d, nums, 4, "w"), BFIT_OK);
    assert_int_equal(bfit_dataset_label(d, 8), 3);
    bfit_dataset_free(d);
    tmp_path(dir, sizeof dir, "sub");
    d = load(dir, 1, 28, 28, 0);
    assert_int_equal(bfit_dataset_match_classes(d, nums, 4, "w"), BFIT_OK);
    assert_int_equal(bfit_dataset_classes(d), 2);
    assert_int_equal(bfit_dataset_label(d, 8), 1);
    bfit_dataset_free(d);
}

/* A file meant as a list is read as one, with its errors at file:line,
 * whatever its first line or its name; CSV stays CSV. */
static void list_or_csv(void **st)
{
    (void)st;
    static const struct {
        const char *name, *text, *want;
    } cases[] = {
        {"firstbad.csv", "fm/Bag/readme.txt,0\nfm/Bag/00000.png,0\n", "firstbad.csv:1: fm/Bag/readme.txt is not a"},
        {"onebad.csv", "fm/Bag/readme.txt,0\n", "onebad.csv:1: fm/Bag/readme.txt is not a"},
        {"gif.txt", "fm/Bag/0.gif,0\n", "gif.txt:1: fm/Bag/0.gif is not a .jpg"},
        {"three.csv", "# x\nfm/Bag/00000.png,a,extra\n", "three.csv:2: 3 fields"},
        {"empty.txt", "", "empty.txt lists no images"},
        {"comments.txt", "# nothing\n\n", "comments.txt lists no images"},
        {"empty.lst", "# nothing\n", "empty.lst lists no images"},
        {"header.csv", "path,label\nfm/Bag/00000.png,0\n", "header.csv:1: path is not a"},
    };
    bfit_data_opts o = BFIT_DATA_OPTS_INIT;
    char path[512];
    bfit_dataset *d = NULL;

    o.img_c = 1, o.img_h = o.img_w = 28;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tmp_path(path, sizeof path, cases[i].name);
        put_text(path, cases[i].text);
        assert_int_equal(bfit_dataset_load(path, 0, &o, &d), BFIT_EFORMAT);
        if (!strstr(bfit_errmsg(), cases[i].want))
            fail_msg("%s: got '%s', want '%s'", cases[i].name, bfit_errmsg(), cases[i].want);
    }
    /* numbers, with or without a header, are a CSV's */
    tmp_path(path, sizeof path, "num.csv");
    put_text(path, "x.a,km/h,label\n0.5,1,0\n2,3e-4,1\n");
    assert_int_equal(bfit_dataset_load(path, 0, NULL, &d), BFIT_OK);
    assert_false(bfit_dataset_is_images(d));
    assert_int_equal(bfit_dataset_count(d), 2);
    bfit_dataset_free(d);
}

/* A class name that is not UTF-8 is refused, naming it: the weights'
 * metadata is JSON (UTF-8), and a test set's names are matched to it. */
static void utf8_names(void **st)
{
    (void)st;
    static const char *some[] = {"Bag", "Coat"}, *as[] = {"Bag", "caf\xe9"};
    bfit_data_opts o = BFIT_DATA_OPTS_INIT;
    char dir[512], path[512];
    bfit_dataset *d = NULL;

    o.img_c = 1, o.img_h = o.img_w = 28;
    subset("latin1", some, as, 2, dir, sizeof dir);
    assert_int_equal(bfit_dataset_load(dir, 1, &o, &d), BFIT_EFORMAT);
    assert_non_null(strstr(bfit_errmsg(), "class folder 'caf\\xe9' has a name that is not UTF-8"));
    tmp_path(path, sizeof path, "latin1.csv");
    put_text(path, "fm/Bag/00000.png,ok\nfm/Bag/00001.png,caf\xe9\n");
    assert_int_equal(bfit_dataset_load(path, 1, &o, &d), BFIT_EFORMAT);
    assert_non_null(strstr(bfit_errmsg(), "latin1.csv:2: the class name 'caf\\xe9' is not UTF-8"));
    put_text(path, "fm/Bag/00000.png,caf\xc3\xa9\n"); /* the same in UTF-8 */
    assert_int_equal(bfit_dataset_load(path, 1, &o, &d), BFIT_OK);
    assert_string_equal(bfit_dataset_class_name(d, 0), "caf\xc3\xa9");
    bfit_dataset_free(d);
}

/* Every sample of two epochs, with takes of changing sizes. */
static void all_samples(const bfit_dataset *d, int threads, int prefetch, int rrc, float *x, int32_t *y)
{
    static const int sizes[] = {5, 1, 16, 3, 9};
    bfit_stream_cfg cfg = {.seed = 42, .shuffle = 1, .prefetch = prefetch, .max_take = 16, .aug_hflip = 1,
                           .aug_rrc = rrc, .loader_threads = threads};
    const int64_t numel = bfit_shape_numel(bfit_dataset_shape(d)), n = bfit_dataset_count(d);
    bfit_stream *s = NULL;
    int64_t at = 0;

    assert_int_equal(bfit_stream_new(d, &cfg, &s), BFIT_OK);
    for (int e = 0; e < 2; e++, bfit_stream_next_epoch(s))
        for (int k = 0, got = 1; got; k++) {
            assert_int_equal(bfit_stream_take(s, sizes[k % 5], x + at * numel, y + at, &got), BFIT_OK);
            at += got;
        }
    assert_int_equal(at, 2 * n);
    bfit_stream_free(s);
}

/* Same seed, same samples: with 0 (the caller), 1, 2 or 4 threads. */
static void threads_same(void **st)
{
    (void)st;
    bfit_dataset *d = load(colour, 3, 24, 20, 0);
    const size_t numel = 3 * 24 * 20, n = 2 * (size_t)bfit_dataset_count(d);
    float *x0 = malloc(n * numel * sizeof *x0), *x1 = malloc(n * numel * sizeof *x1);
    int32_t *y0 = malloc(n * sizeof *y0), *y1 = malloc(n * sizeof *y1);

    for (int rrc = 0; rrc < 2; rrc++) {
        all_samples(d, 0, 0, rrc, x0, y0);
        static const int t[][2] = {{1, 1}, {2, 1}, {4, 1}, {3, 0}};
        for (int i = 0; i < 4; i++) {
            memset(x1, 0, n * numel * sizeof *x1);
            all_samples(d, t[i][0], t[i][1], rrc, x1, y1);
            assert_memory_equal(x0, x1, n * numel * sizeof *x0);
            assert_memory_equal(y0, y1, n * sizeof *y0);
        }
    }
    free(x0), free(x1), free(y0), free(y1);
    bfit_dataset_free(d);
}

/* After an epoch has seen every image, the decoding buffers never grow. */
static void no_growth(void **st)
{
    (void)st;
    bfit_dataset *d = load(colour, 3, 32, 32, 0);
    bfit_stream_cfg cfg = {.seed = 1, .shuffle = 1, .prefetch = 1, .max_take = 8, .aug_hflip = 1, .aug_rrc = 1,
                           .loader_threads = 2};
    bfit_stream *s = NULL;
    float *x = malloc(8 * 3 * 32 * 32 * sizeof *x);
    int32_t y[8];
    int got = 1;
    int64_t grown;

    assert_int_equal(bfit_stream_new(d, &cfg, &s), BFIT_OK);
    for (int e = 0; e < 3; e++, bfit_stream_next_epoch(s)) /* every image seen, the buffers evened out */
        for (got = 1; got;)
            assert_int_equal(bfit_stream_take(s, 8, x, y, &got), BFIT_OK);
    grown = bfit_stream_scratch_grown(s);
    assert_true(grown > 0);
    for (int e = 0; e < 3; e++, bfit_stream_next_epoch(s))
        for (got = 1; got;)
            assert_int_equal(bfit_stream_take(s, 8, x, y, &got), BFIT_OK);
    assert_int_equal(bfit_stream_scratch_grown(s), grown);
    bfit_stream_free(s);
    free(x);
    bfit_dataset_free(d);
}

/* Bad files: an error naming the file, or skipped and counted. */
static void bad_files(void **st)
{
    (void)st;
    static const char *files[] = {"truncated.jpg", "badcrc.png", "huge.png", "huge.jpg", "notimage.jpg"};
    char dir[300], cmd[4096], path[600];
    float x[3 * 8 * 8 * 6];
    int32_t y[6];
    int got;

    for (int f = 0; f < 5; f++) {
        tmp_path(dir, sizeof dir, "one_bad");
        snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s/a %s/b && cp %s/good.jpg %s/a/ && cp %s/good.png %s/b/ "
                 "&& cp %s/%s %s/b/", dir, dir, dir, bad, dir, bad, dir, bad, files[f], dir);
        assert_int_equal(system(cmd), 0);
        for (int skip = 0; skip < 2; skip++) {
            bfit_dataset *d = load(dir, 3, 8, 8, skip);
            bfit_stream_cfg cfg = {.seed = 1, .max_take = 6, .prefetch = skip, .loader_threads = 2};
            bfit_stream *s = NULL;
            assert_int_equal(bfit_stream_new(d, &cfg, &s), BFIT_OK);
            int rc = bfit_stream_take(s, 3, x, y, &got);
            if (!skip) {
                assert_int_equal(rc, BFIT_EFORMAT);
                snprintf(path, sizeof path, "%s/b/%s", dir, files[f]);
                assert_non_null(strstr(bfit_errmsg(), path));
            } else {
                assert_int_equal(rc, BFIT_OK);
                assert_int_equal(got, 3);
                assert_int_equal(bfit_dataset_images_skipped(d), 1);
                /* the bad file's place is the next file's sample (wrapping to the first) */
                int bi = strstr(bfit_dataset_image_path(d, 1), files[f]) ? 1 : 2, j = (bi + 1) % 3;
                assert_non_null(strstr(bfit_dataset_image_path(d, bi), files[f]));
                assert_int_equal(y[bi], bfit_dataset_label(d, j));
                assert_memory_equal(x + bi * 192, x + j * 192, 192 * sizeof *x);
            }
            bfit_stream_free(s);
            bfit_dataset_free(d);
        }
    }
}

static double draw_fixed(void *ud, int k)
{
    return ((const double *)ud)[k % 4];
}

static double draw_seq(void *ud, int k)
{
    uint64_t x = *(uint64_t *)ud + (uint64_t)k * 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ull;
    return (double)((x ^ (x >> 29)) >> 11) / 9007199254740992.0;
}

/* RandomResizedCrop's boxes: inside the image, area 8%..100% and aspect
 * 3/4..4/3 up to rounding; the fallback is the central crop of the
 * largest allowed aspect. */
static void rrc_boxes(void **st)
{
    (void)st;
    for (uint64_t seed = 0; seed < 2000; seed++) {
        int w = 20 + (int)(seed % 300), h = 20 + (int)(seed * 7 % 300);
        bfit_img_box b = bfit_img_rrc_box(w, h, draw_seq, &seed);
        assert_true(b.top >= 0 && b.left >= 0 && b.top + b.h <= h && b.left + b.w <= w && b.w > 0 && b.h > 0);
        double area = (double)b.w * b.h / ((double)w * h), r = (double)b.w / b.h;
        if (!(b.w == w && b.h == h)) { /* not a fallback of a whole image */
            assert_true(area > 0.08 * 0.8 && area <= 1.0);
            assert_true(r > 0.75 * 0.8 && r < 4.0 / 3.0 * 1.25);
        }
    }
    /* every try's area too large (scale draw 1, ratio draw 1 = 4/3 on a
     * tall image): the fallback, torchvision's arithmetic */
    double u[4] = {0.999999, 0.999999, 0, 0};
    bfit_img_box b = bfit_img_rrc_box(30, 100, draw_fixed, u);
    assert_int_equal(b.w, 30);
    assert_int_equal(b.h, 40); /* round(30 / (3/4)) */
    assert_int_equal(b.top, 30);
    assert_int_equal(b.left, 0);
}

/* Center crop offsets: round half to even, as Python's round. */
static void center_boxes(void **st)
{
    (void)st;
    bfit_img_box b = bfit_img_center_box(10, 9, 4, 5); /* (9 - 4) / 2 = 2.5 -> 2; (10 - 5) / 2 = 2.5 -> 2 */
    assert_int_equal(b.top, 2);
    assert_int_equal(b.left, 2);
    b = bfit_img_center_box(12, 11, 4, 5); /* 3.5 -> 4 both */
    assert_int_equal(b.top, 4);
    assert_int_equal(b.left, 4);
    b = bfit_img_center_box(5, 5, 8, 9); /* larger: padded by (8-5)//2 = 1 and (9-5)//2 = 2 */
    assert_int_equal(b.top, -1);
    assert_int_equal(b.left, -2);
    int ow, oh;
    bfit_img_resize_dims(300, 211, 256, &ow, &oh); /* int(256 * 300 / 211) = 363 */
    assert_int_equal(ow, 363);
    assert_int_equal(oh, 256);
}

/* Normalisation: (p / 255 - mean) / std in float, as ToTensor + Normalize;
 * the training set's statistics from its evaluation transform. */
static void normalise(void **st)
{
    (void)st;
    bfit_dataset *d = load(fm, 1, 28, 28, 0);
    float mean = 0.25f, sd = 0.5f, m2, s2;
    bfit_stream_cfg cfg = {.max_take = 80, .norm_mean = &mean, .norm_std = &sd};
    bfit_stream_cfg raw = {.max_take = 80};
    bfit_stream *s = NULL, *r = NULL;
    float *x = malloc(80 * 784 * sizeof *x), *xr = malloc(80 * 784 * sizeof *xr);
    int32_t y[80];
    int got;
    double sum = 0, sq = 0;

    assert_int_equal(bfit_stream_new(d, &cfg, &s), BFIT_OK);
    assert_int_equal(bfit_stream_new(d, &raw, &r), BFIT_OK);
    assert_int_equal(bfit_stream_take(s, 80, x, y, &got), BFIT_OK);
    assert_int_equal(bfit_stream_take(r, 80, xr, y, &got), BFIT_OK);
    for (int i = 0; i < 80 * 784; i++) {
        float p = xr[i] * 255.0f;
        assert_true(p == (float)(int)(p + 0.5f)); /* whole pixel values / 255 */
        assert_true(x[i] == ((float)(int)(p + 0.5f) / 255.0f - mean) / sd);
        sum += xr[i], sq += (double)xr[i] * xr[i];
    }
    assert_int_equal(bfit_dataset_norm_stats(d, &m2, &s2), BFIT_OK);
    double em = sum / (80 * 784);
    assert_true(fabs(m2 - em) < 1e-6);
    assert_true(fabs(s2 - sqrt(sq / (80 * 784) - em * em)) < 1e-5);
    bfit_stream_free(s);
    bfit_stream_free(r);
    free(x), free(xr);
    bfit_dataset_free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(folder_order), cmocka_unit_test(list_file),  cmocka_unit_test(threads_same),
        cmocka_unit_test(no_growth),    cmocka_unit_test(bad_files),  cmocka_unit_test(rrc_boxes),
        cmocka_unit_test(center_boxes), cmocka_unit_test(normalise),    cmocka_unit_test(class_match),
        cmocka_unit_test(list_or_csv),  cmocka_unit_test(utf8_names),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
