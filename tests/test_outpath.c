/* test_outpath.c - the files a run writes are checked before the training
 * that makes them (a directory, a folder that is a file, two outputs on one
 * file), and an event log that cannot be written is cut to its last whole
 * event and given up while the training goes on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include "batchfit.h"
#include "internal.h"
#include "base/outpath.h"
#include "tfiles.h"
#include "train/log.h"
#include "train/trainer.h"

static void refused(int rc, const char *field, const char *words)
{
    assert_int_not_equal(rc, BFIT_OK);
    if (!strstr(bfit_errmsg(), words) || (field && strcmp(bfit_errfield(), field)))
        fail_msg("got '%s' (field '%s'), want '%s' about %s", bfit_errmsg(), bfit_errfield(), words,
                 field ? field : "-");
}

static void test_check(void **st)
{
    char dir[400], file[400], under[420], ok[400], slash[420];
    (void)st;
    tmp_path(dir, sizeof dir, "d");
    tmp_path(file, sizeof file, "f");
    snprintf(under, sizeof under, "%s/x", file);
    tmp_path(ok, sizeof ok, "w.safetensors");
    snprintf(slash, sizeof slash, "%s/", dir);
    assert_int_equal(mkdir(dir, 0777), 0);
    put_text(file, "x");
    refused(bfit_outpath_check("save", dir), "save", "is a directory: give the file's name");
    refused(bfit_outpath_check("save", slash), "save", "is a directory");
    refused(bfit_outpath_check("report", "."), "report", "is a directory");
    refused(bfit_outpath_check("save", under), "save", "is not a directory");
    refused(bfit_outpath_check("save", "/no/such/dir/w"), "save", "No such file or directory");
    assert_int_equal(bfit_outpath_check("save", ok), BFIT_OK);
    assert_int_equal(access(ok, F_OK), -1); /* checked, not made */
}

static void test_same(void **st)
{
    char a[400], link[400], dot[400], b[400];
    (void)st;
    tmp_path(a, sizeof a, "a.jsonl");
    tmp_path(b, sizeof b, "b.jsonl");
    tmp_path(link, sizeof link, "l.jsonl");
    snprintf(dot, sizeof dot, "%s/./a.jsonl", tmpdir);
    assert_true(bfit_outpath_same(a, dot)); /* neither exists yet */
    assert_false(bfit_outpath_same(a, b));
    put_text(a, "");
    assert_int_equal(symlink(a, link), 0);
    assert_true(bfit_outpath_same(link, dot));
    assert_false(bfit_outpath_same("-", "-")); /* no file */
}

/* bfit_train_from refuses at once: no step is taken (the run would take
 * minutes, the test's time limit says so) */
static void test_train_refuses_first(void **st)
{
    bfit_train_cfg c = bfit_train_cfg_default();
    bfit_train_result r;
    char log[400];
    (void)st;
    c.model = "mlp";
    c.data = "synthetic";
    c.epochs = 1000;
    c.save = tmpdir;
    refused(bfit_train_from(&c, &r), "save", "is a directory");
    tmp_path(log, sizeof log, "same.jsonl");
    c.save = NULL;
    c.log = log;
    c.report = log;
    refused(bfit_train_from(&c, &r), "log", "is also where the report goes");
    assert_int_equal(access(log, F_OK), -1);
}

/* A file size limit stands in for a full disk (EFBIG instead of ENOSPC) */
static void test_log_cut_to_whole_events(void **st)
{
    struct rlimit was, lim;
    char path[400], *text, *human_text;
    FILE *human = tmpfile();
    bfit_log lg;
    long n, hn;
    (void)st;
    tmp_path(path, sizeof path, "full.jsonl");
    assert_non_null(human);
    assert_int_equal(bfit_log_open(&lg, path, human, 0), BFIT_OK);
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &was), 0);
    lim = was;
    lim.rlim_cur = 1000;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    for (int i = 0; i < 100; i++)
        bfit_log_event(&lg, "step", "\"step\":%d,\"loss\":%.6f", i, 1.0 / (i + 1));
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &was), 0);
    assert_true(lg.json_failed);
    bfit_log_event(&lg, "end", "\"ok\":1"); /* given up: nothing written, no crash */
    bfit_log_close(&lg);
    text = file_bytes(path, &n);
    assert_true(n > 0 && n <= 1000);
    assert_int_equal(text[n - 1], '\n');
    assert_null(strstr(text, "\"end\""));
    for (char *line = text; *line; line = strchr(line, '\n') + 1)
        assert_true(line[0] == '{' && strchr(line, '\n')[-1] == '}');
    free(text);
    hn = ftell(human);
    human_text = calloc(1, (size_t)hn + 1);
    rewind(human);
    assert_int_equal(fread(human_text, 1, (size_t)hn, human), (size_t)hn);
    assert_non_null(strstr(human_text, "cannot be written"));
    assert_non_null(strstr(human_text, "the training goes on"));
    free(human_text);
    fclose(human);
}

static int setup(void **st)
{
    (void)st;
    return tmp_setup("outpath");
}

static int teardown(void **st)
{
    (void)st;
    return tmp_teardown();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_same),
        cmocka_unit_test(test_train_refuses_first),
        cmocka_unit_test(test_log_cut_to_whole_events),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
