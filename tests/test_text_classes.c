/* test_text_classes.c - a folder of class folders of texts for a classifier
 * of token ids (src/data/text_classes.c): classes and texts in their order,
 * the split (every 20th text of each class to test), a sample's bytes and
 * its -1 padding, its one label, the note on texts cut to the model's
 * length, the refusals; and the model reading a sequence's length from its
 * padding (bidirectional attention leaves the padding's keys out). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "batchfit.h"
#include "internal.h"
#include "data/data.h"
#include "data/data_int.h"
#include "tfiles.h"

#define SEQ 16

static int setup(void **st)
{
    (void)st;
    return tmp_setup("textcls");
}

static int teardown(void **st)
{
    (void)st;
    return tmp_teardown();
}

static void dir_at(const char *rel)
{
    char p[400];
    tmp_path(p, sizeof p, rel);
    assert_int_equal(mkdir(p, 0755), 0);
}

static void text_at(const char *rel, const char *text)
{
    char p[400];
    tmp_path(p, sizeof p, rel);
    put_text(p, text);
}

/* texts/: pos (21 texts, 5 in a subfolder, one of 40 bytes), neg (20), a
 * hidden folder and a loose file (neither read), a README in a class
 * folder (not a .txt: not read). Text i of a class says "<class> i". */
static void make_texts(void)
{
    char rel[128], t[64];
    dir_at("texts");
    dir_at("texts/pos");
    dir_at("texts/pos/more");
    dir_at("texts/neg");
    dir_at("texts/.git");
    text_at("texts/.git/x.txt", "hidden\n");
    text_at("texts/notes.txt", "loose\n");
    text_at("texts/pos/README.md", "not a text\n");
    for (int i = 0; i < 21; i++) {
        snprintf(rel, sizeof rel, i < 16 ? "texts/pos/%02d.txt" : "texts/pos/more/%02d.txt", i);
        snprintf(t, sizeof t, i == 3 ? "pos %d is longer than sixteen bytes, cut" : "pos %d", i);
        text_at(rel, t);
    }
    for (int i = 0; i < 20; i++) {
        snprintf(rel, sizeof rel, "texts/neg/%02d.txt", i);
        snprintf(t, sizeof t, "neg %d", i);
        text_at(rel, t);
    }
}

/* Sample k of d as the stream gives it (dataset order): its ids and label. */
static void take(const bfit_dataset *d, int64_t k, int32_t *x, int32_t *y)
{
    bfit_stream_cfg c = {.max_take = 64};
    bfit_stream *s;
    int32_t xs[64 * SEQ], ys[64];
    int got;
    assert_true(bfit_dataset_count(d) <= 64);
    assert_int_equal(bfit_stream_new(d, &c, &s), BFIT_OK);
    assert_int_equal(bfit_stream_take(s, (int)bfit_dataset_count(d), (float *)xs, ys, &got), BFIT_OK);
    assert_int_equal(got, bfit_dataset_count(d));
    memcpy(x, xs + k * SEQ, sizeof *x * SEQ);
    *y = ys[k];
    bfit_stream_free(s);
}

static void test_classes_and_split(void **st)
{
    bfit_data_opts o = BFIT_DATA_OPTS_INIT;
    bfit_dataset *d;
    char p[400];
    int32_t x[SEQ], y;
    (void)st;
    make_texts();
    tmp_path(p, sizeof p, "texts");
    o.seq = SEQ, o.classes = 1;
    /* all: neg's 20 (label 0), then pos's 21 by path: 00..15, then more/16..20 */
    o.whole = 1;
    if (bfit_dataset_load(p, 1, &o, &d) != BFIT_OK)
        fail_msg("%s", bfit_errmsg());
    assert_int_equal(bfit_dataset_count(d), 41);
    assert_int_equal(bfit_dataset_classes(d), 2);
    assert_string_equal(bfit_dataset_class_name(d, 0), "neg");
    assert_string_equal(bfit_dataset_class_name(d, 1), "pos");
    assert_true(bfit_dataset_is_tokens(d) && bfit_dataset_is_text_classes(d));
    assert_int_equal(bfit_dataset_label_len(d), 1);
    assert_non_null(strstr(bfit_dataset_note(d), "1 of 41 texts are longer than the model's 16 tokens"));
    take(d, 0, x, &y); /* "neg 0": 5 bytes, then -1 */
    assert_int_equal(y, 0);
    assert_memory_equal(x, ((int32_t[]){'n', 'e', 'g', ' ', '0', -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}),
                        sizeof x);
    assert_int_equal(bfit_dataset_sample_len(d, 0), 5);
    take(d, 23, x, &y); /* pos 3: its first 16 bytes, no padding */
    assert_int_equal(y, 1);
    assert_memory_equal(x, ((int32_t[]){'p', 'o', 's', ' ', '3', ' ', 'i', 's', ' ', 'l', 'o', 'n', 'g', 'e', 'r',
                                        ' '}), sizeof x);
    take(d, 40, x, &y); /* the last: more/20.txt */
    assert_int_equal(y, 1);
    assert_int_equal(x[4], '2');
    assert_int_equal(x[5], '0');
    assert_int_equal(x[6], -1);
    bfit_dataset_free(d);
    /* the test part: each class's 20th text (neg 19, pos more/19) */
    o.whole = 0;
    assert_int_equal(bfit_dataset_load(p, 0, &o, &d), BFIT_OK);
    assert_int_equal(bfit_dataset_count(d), 2);
    assert_non_null(strstr(bfit_dataset_source(d), "texts (2 classes, test part)"));
    take(d, 0, x, &y);
    assert_true(y == 0 && x[4] == '1' && x[5] == '9');
    take(d, 1, x, &y);
    assert_true(y == 1 && x[4] == '1' && x[5] == '9');
    bfit_dataset_free(d);
    /* the train part: the other 39 */
    assert_int_equal(bfit_dataset_load(p, 1, &o, &d), BFIT_OK);
    assert_int_equal(bfit_dataset_count(d), 39);
    bfit_dataset_free(d);
}

static void expect_refusal(const char *rel, int rc, const char *msg)
{
    bfit_data_opts o = BFIT_DATA_OPTS_INIT;
    bfit_dataset *d = (bfit_dataset *)1;
    char p[400];
    tmp_path(p, sizeof p, rel);
    o.seq = SEQ, o.classes = 1;
    assert_int_equal(bfit_dataset_load(p, 1, &o, &d), rc);
    assert_null(d);
    if (!strstr(bfit_errmsg(), msg))
        fail_msg("got: %s\nwanted: %s", bfit_errmsg(), msg);
}

static void test_refusals(void **st)
{
    (void)st;
    dir_at("flat");
    text_at("flat/a.txt", "a text beside no class folder\n");
    expect_refusal("flat", BFIT_EFORMAT, "flat has no class folders: a classifier of texts reads a folder of one "
                                         "folder per class, each holding .txt files");
    dir_at("nocls");
    dir_at("nocls/a");
    dir_at("nocls/b");
    text_at("nocls/a/1.txt", "one\n");
    text_at("nocls/b/1.md", "not a text\n");
    expect_refusal("nocls", BFIT_EFORMAT, "nocls: class folder 'b' holds no .txt file (in it or its subfolders)");
    dir_at("empty");
    dir_at("empty/a");
    text_at("empty/a/1.txt", "one\n");
    text_at("empty/a/2.txt", "");
    expect_refusal("empty", BFIT_EFORMAT, "empty/a/2.txt: an empty text: a sample needs at least one byte");
    dir_at("latin1");
    dir_at("latin1/caf\xe9");
    text_at("latin1/caf\xe9/1.txt", "one\n");
    expect_refusal("latin1", BFIT_EFORMAT, "the class folder 'caf\\xe9' has a name that is not UTF-8");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classes_and_split),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
