/* test_report.c - the run report (bfit_report_write) from hand-written event
 * logs: each chart holds one point per step or evaluation and one marker
 * per batch change, memory change, warning and error, with the events'
 * text escaped; a long run is drawn in a bounded number of points that
 * keep its spikes; a run that failed, one that failed before it started and
 * one cut short say so; the start event's fields and plan are shown.
 * Logs that are not event logs are refused naming LOG:LINE and what is
 * wrong, and then no HTML is written and an existing one is left as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batchfit.h"
#include "internal.h"
#include "tfiles.h"

static char log_path[300], html_path[300];

static int setup(void **st)
{
    (void)st;
    if (tmp_setup("report") != 0)
        return -1;
    tmp_path(log_path, sizeof log_path, "run.jsonl");
    tmp_path(html_path, sizeof html_path, "run.html");
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    return tmp_teardown();
}

/* The whole file, or NULL if there is none. */
static char *read_text(const char *path)
{
    FILE *f = fopen(path, "r");
    char *s;
    long n;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    s = malloc((size_t)n + 1);
    assert_non_null(s);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

static int count_in(const char *from, const char *to, const char *needle)
{
    int n = 0;
    size_t len = strlen(needle);
    for (const char *p = from; (p = strstr(p, needle)) && p < to; p += len)
        n++;
    return n;
}

/* The text of one chart: <figure class="chart" id="ID"> ... </figure>. */
static void figure(const char *html, const char *id, const char **from, const char **to)
{
    char key[64];
    snprintf(key, sizeof key, "<figure class=\"chart\" id=\"%s\">", id);
    *from = strstr(html, key);
    assert_non_null(*from);
    *to = strstr(*from, "</figure>");
    assert_non_null(*to);
    assert_int_equal(count_in(*from, *to, "<svg "), 1);
}

/* Points of the polyline of class cls in chart id (-1: no such line); the
 * smallest y pixel (the highest point) in *top if not NULL. */
static int points(const char *html, const char *id, const char *cls, double *top)
{
    const char *from, *to, *p;
    char key[64];
    int n = 0;
    figure(html, id, &from, &to);
    snprintf(key, sizeof key, "<polyline class=\"line %s\"", cls);
    p = strstr(from, key);
    if (!p || p > to)
        return -1;
    p = strstr(p, "points=\"") + 8;
    if (top)
        *top = 1e9;
    while (*p != '"') {
        double x, y;
        int used;
        assert_int_equal(sscanf(p, "%lf,%lf %n", &x, &y, &used), 2);
        if (top && y < *top)
            *top = y;
        p += used;
        n++;
    }
    return n;
}

static int in_chart(const char *html, const char *id, const char *needle)
{
    const char *from, *to;
    figure(html, id, &from, &to);
    return count_in(from, to, needle);
}

static const char *charts[] = {"loss",       "accuracy", "lr",    "gnorm", "batch", "memory",
                               "throughput", "data",     "noise", "busy",  "shared"};
#define NCHARTS ((int)(sizeof charts / sizeof charts[0])) /* and an event is in the list once more */

#define START "{\"event\":\"start\",\"time\":1700000000.5,\"model\":\"models/<tiny>.cfg\",\"data\":\"fashion-mnist\"," \
              "\"params\":1863690,\"batch\":64,\"micro_batch\":32,\"epochs\":1,\"capacity\":1073741824,"         \
              "\"plan\":{\"m\":32,\"bytes\":{\"params\":1000,\"grads\":1000,\"optimizer\":0,\"activations\":600,"   \
              "\"act_grads\":300,\"workspace\":50,\"input\":40,\"other\":10},\"peak\":3000,\"budget\":900000}}\n"
#define STEP(s, loss, m, k, E, noise)                                                                             \
    "{\"event\":\"step\",\"time\":1,\"step\":" #s ",\"epoch\":1,\"loss\":" #loss ",\"lr\":0.05,\"m\":" #m         \
    ",\"k\":" #k ",\"E\":" #E ",\"mem\":3000000,\"capacity\":1073741824,\"seconds\":0.01,\"noise_scale\":" #noise "}\n"

/* 6 steps, 2 evaluations, 4 events (one of each kind), an unknown event
 * and a blank line. */
static const char *small_log =
    START
    "{\"event\":\"warning\",\"time\":1,\"step\":0,\"what\":\"batch norm sees <micro-batches> & more\"}\n"
    STEP(0, 2.3, 32, 2, 64, 0) STEP(1, 2.1, 32, 2, 64, 0)
    "{\"event\":\"step\",\"time\":1,\"step\":2,\"epoch\":1,\"loss\":1.9,\"lr\":0.05,\"m\":32,\"k\":2,\"E\":64,"
    "\"mem\":3000000,\"capacity\":1073741824,\"seconds\":0.01,\"noise_scale\":40.5,\"grad_norm\":1.25}\n"
    "{\"event\":\"eval\",\"time\":1,\"epoch\":1,\"step\":3,\"train_loss\":2,\"test_loss\":1.8,\"test_acc\":0.61}\n"
    "{\"event\":\"memory\",\"time\":1,\"step\":3,\"capacity\":33554432}\n"
    "{\"event\":\"batch_change\",\"time\":1,\"step\":3,\"reason\":\"memory shrank\",\"m\":16,\"prev_m\":32,\"E\":64,"
    "\"prev_E\":64,\"why\":\"memory shrank: micro-batch 32 -> 16\"}\n"
    "\n"
    "{\"event\":\"something_new\",\"time\":1,\"x\":[1,2]}\n"
    STEP(3, 1.7, 16, 4, 64, 50) STEP(4, 1.6, 16, 4, 64, 0)
    "{\"event\":\"step\",\"time\":1,\"step\":5,\"epoch\":1,\"loss\":1.5,\"lr\":0.05,\"m\":16,\"k\":4,\"E\":64,"
    "\"mem\":3000000,\"capacity\":1073741824,\"seconds\":0.01,\"noise_scale\":60,\"grad_norm\":0.5}\n"
    "{\"event\":\"error\",\"time\":1,\"step\":6,\"epoch\":1,\"code\":\"out of memory\",\"field\":\"memory\","
    "\"message\":\"memory: not even a micro-batch of 1 fits\"}\n"
    "{\"event\":\"eval\",\"time\":1,\"epoch\":1,\"step\":6,\"train_loss\":1.6,\"test_loss\":1.5,\"test_acc\":0.7}\n";

static void test_points_and_markers(void **st)
{
    char *h;
    (void)st;
    put_text(log_path, small_log);
    if (bfit_report_write(log_path, html_path) != BFIT_OK)
        fail_msg("%s", bfit_errmsg());
    h = read_text(html_path);
    assert_non_null(h);
    assert_int_equal(count_in(h, h + strlen(h), "<svg "), NCHARTS);
    for (size_t i = 0; i < sizeof charts / sizeof charts[0]; i++) {
        /* every event on every chart, in the log's order */
        assert_int_equal(in_chart(h, charts[i], "<g class=\"ev "), 4);
        assert_int_equal(in_chart(h, charts[i], "<g class=\"ev ev-warning\"><title>1. step 0"), 1);
        assert_int_equal(in_chart(h, charts[i], "<g class=\"ev ev-memory\"><title>2. step 3"), 1);
        assert_int_equal(in_chart(h, charts[i], "<g class=\"ev ev-batch_change\"><title>3. step 3"), 1);
        assert_int_equal(in_chart(h, charts[i], "<g class=\"ev ev-error\"><title>4. step 6"), 1);
    }
    assert_int_equal(points(h, "loss", "train-loss", NULL), 6);
    assert_int_equal(points(h, "loss", "test-loss", NULL), 2);
    assert_int_equal(in_chart(h, "loss", "<circle class=\"pt test-loss\""), 2);
    assert_int_equal(points(h, "accuracy", "test-acc", NULL), 2);
    assert_int_equal(in_chart(h, "accuracy", "<title>step 6: test accuracy 70%</title>"), 1);
    assert_int_equal(points(h, "batch", "batch-E", NULL), 6);
    assert_int_equal(points(h, "batch", "batch-m", NULL), 6);
    assert_int_equal(points(h, "memory", "mem", NULL), 6);
    assert_int_equal(points(h, "memory", "capacity", NULL), 7); /* the start's, then after each step */
    assert_int_equal(points(h, "throughput", "thru", NULL), 6);
    assert_int_equal(points(h, "throughput", "thru-median", NULL), 6);
    assert_int_equal(points(h, "noise", "noise", NULL), 3); /* only the steps with an estimate */
    assert_int_equal(points(h, "lr", "lr", NULL), 6);
    assert_int_equal(points(h, "gnorm", "gnorm", NULL), 2); /* only the steps that logged one */
    /* the text of events, escaped, in the titles and the list */
    assert_int_equal(count_in(h, h + strlen(h), "batch norm sees &lt;micro-batches&gt; &amp; more"), NCHARTS + 1);
    assert_int_equal(count_in(h, h + strlen(h), "memory shrank: micro-batch 32 -&gt; 16"), NCHARTS + 1);
    assert_int_equal(count_in(h, h + strlen(h), "device capacity is now 32.00 MiB"), NCHARTS + 1);
    assert_null(strstr(h, "<tiny>"));
    assert_non_null(strstr(h, "models/&lt;tiny&gt;.cfg"));
    assert_non_null(strstr(h, "<ol class=\"events\">"));
    free(h);
}

/* The data wait: a point per step that logged its share (percent, with a
 * title each), none for one that did not; a batch held by the loader is an
 * event on every chart. */
static void test_data_wait(void **st)
{
#define DSTEP(s, share)                                                                                           \
    "{\"event\":\"step\",\"time\":1,\"step\":" #s ",\"epoch\":1,\"loss\":2,\"lr\":0.05,\"m\":32,\"k\":1,\"E\":32,"    \
    "\"mem\":3000000,\"capacity\":1073741824,\"seconds\":0.02,\"data_wait\":0.01,\"data_share\":" #share "}\n"
    char *h;
    double top;
    (void)st;
    put_text(log_path, START DSTEP(0, 0.1) DSTEP(1, 0.2) STEP(2, 2.0, 32, 1, 32, 0) DSTEP(3, 0.5)
               "{\"event\":\"batch_hold\",\"time\":1,\"step\":4,\"m\":32,\"E\":32,\"loader_rate\":812,"
               "\"why\":\"the loader bounds the speed at 812 samples/s: staying at batch 32\"}\n"
               DSTEP(4, 0.05) DSTEP(5, 0));
#undef DSTEP
    assert_int_equal(bfit_report_write(log_path, html_path), BFIT_OK);
    h = read_text(html_path);
    assert_non_null(h);
    assert_int_equal(points(h, "data", "data-share", &top), 5); /* step 2 logged none */
    assert_int_equal(in_chart(h, "data", "<circle class=\"pt data-share\""), 5);
    assert_int_equal(in_chart(h, "data", "<title>step 3: data wait 50%</title>"), 1);
    assert_int_equal(in_chart(h, "data", "<title>step 5: data wait 0%</title>"), 1);
    assert_true(top >= 56 && top < 250); /* the highest point is in the plot */
    for (int i = 0; i < NCHARTS; i++)
        assert_int_equal(in_chart(h, charts[i], "<g class=\"ev ev-batch_hold\"><title>1. step 4, batch held: the loader "
                                                "bounds the speed at 812 samples/s: staying at batch 32"), 1);
    free(h);
    /* a log without data shares says so */
    put_text(log_path, START STEP(0, 2.3, 32, 2, 64, 0));
    assert_int_equal(bfit_report_write(log_path, html_path), BFIT_OK);
    h = read_text(html_path);
    assert_int_equal(points(h, "data", "data-share", NULL), -1);
    assert_int_equal(in_chart(h, "data", "no step logged its data wait"), 1);
    free(h);
}

static void test_config_plan_status(void **st)
{
    char *h;
    (void)st;
    put_text(log_path, small_log);
    assert_int_equal(bfit_report_write(log_path, html_path), BFIT_OK);
    h = read_text(html_path);
    assert_non_null(h);
    /* the run failed: its error, not a summary of a finished run */
    assert_non_null(strstr(h, "<p class=\"status fail\"><strong>Failed</strong> at step 6 (epoch 1): out of memory: "
                              "memory: not even a micro-batch of 1 fits</p>"));
    assert_null(strstr(h, "Finished"));
    /* the start event's fields as people read them */
    assert_non_null(strstr(h, "<tr><th>params</th><td>1,863,690</td></tr>"));
    assert_non_null(strstr(h, "<tr><th>capacity</th><td>1.00 GiB (1,073,741,824)</td></tr>"));
    assert_non_null(strstr(h, "<tr><th>time</th><td>2023-11-14 22:13:20 UTC</td></tr>"));
    /* the plan: every category with its share of the peak */
    assert_non_null(strstr(h, "micro-batch m = 32"));
    assert_non_null(strstr(h, "<tr><th>params</th><td class=\"num\">1000 B</td><td class=\"num bytes\">1,000</td>"
                              "<td class=\"num\">33.3%</td>"));
    assert_non_null(strstr(h, "<tr><th>activations</th><td class=\"num\">600 B</td>"));
    assert_non_null(strstr(h, "<tr><th>other</th><td class=\"num\">10 B</td>"));
    assert_non_null(strstr(h, "<tr><th>peak</th><td class=\"num\">2.93 KiB</td>"));
    assert_int_equal(count_in(h, h + strlen(h), "<span class=\"bar\""), 8);
    /* self-contained: no script, nothing fetched, a viewport for phones and print rules */
    assert_null(strstr(h, "<script"));
    assert_null(strstr(h, "src="));
    assert_null(strstr(h, "@import"));
    assert_null(strstr(h, "url("));
    assert_non_null(strstr(h, "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"));
    assert_non_null(strstr(h, "@media print"));
    free(h);
}

static void test_finished_and_cut_runs(void **st)
{
    char *h;
    (void)st;
    put_text(log_path, START STEP(0, 2.3, 32, 2, 64, 0) STEP(1, 2.1, 32, 2, 64, 0)
               "{\"event\":\"end\",\"time\":2,\"steps\":2,\"samples\":128,\"test_acc\":0.5,\"train_seconds\":2.0,"
               "\"peak\":3145728,\"ooms\":0,\"batch_changes\":1}\n");
    assert_int_equal(bfit_report_write(log_path, html_path), BFIT_OK);
    h = read_text(html_path);
    assert_non_null(strstr(h, "<strong>Finished</strong>: 2 steps, 128 samples, test accuracy 50.00%, 2.0 s of "
                              "training (64 samples/s); peak memory 3.00 MiB; 1 batch change, 0 out-of-memory "
                              "recoveries."));
    assert_non_null(strstr(h, "No batch changes, memory changes, warnings or errors."));
    assert_int_equal(in_chart(h, "loss", "<g class=\"ev "), 0);
    /* without evaluations or estimates the charts say so instead of drawing nothing */
    assert_int_equal(points(h, "accuracy", "test-acc", NULL), -1);
    assert_int_equal(in_chart(h, "accuracy", "no evaluation in this log"), 1);
    assert_int_equal(in_chart(h, "noise", "no estimate"), 1);
    free(h);

    /* the process was stopped: neither end nor error */
    put_text(log_path, START STEP(0, 2.3, 32, 2, 64, 0));
    assert_int_equal(bfit_report_write(log_path, html_path), BFIT_OK);
    h = read_text(html_path);
    assert_non_null(strstr(h, "<strong>Incomplete</strong>"));
    free(h);

    /* killed mid-line: the last line, without its newline, is left out and said */
    put_text(log_path, START STEP(0, 2.3, 32, 2, 64, 0) STEP(1, 2.1, 32, 2, 64, 0) "{\"event\":\"step\",\"st");
    assert_int_equal(bfit_report_write(log_path, html_path), BFIT_OK);
    h = read_text(html_path);
    assert_non_null(strstr(h, "<strong>Incomplete</strong>"));
    assert_non_null(strstr(h, "The log's last line was cut short"));
    assert_int_equal(points(h, "loss", "train-loss", NULL), 2);
    free(h);

    /* failed before the run started: only the error */
    put_text(log_path, "{\"event\":\"error\",\"time\":1,\"step\":0,\"epoch\":1,\"code\":\"out of memory\","
                         "\"field\":\"memory\",\"message\":\"memory: training needs 21.61 MiB\"}\n");
    assert_int_equal(bfit_report_write(log_path, html_path), BFIT_OK);
    h = read_text(html_path);
    assert_non_null(strstr(h, "<strong>Failed</strong> at step 0"));
    assert_non_null(strstr(h, "The log has no start event"));
    assert_int_equal(in_chart(h, "memory", "<g class=\"ev ev-error\">"), 1);
    assert_int_equal(points(h, "loss", "train-loss", NULL), -1);
    free(h);
}

/* A run whose batch counts tokens says so on the charts of E, throughput
 * and the noise scale; one in samples says samples. */
static void test_token_units(void **st)
{
    static const char *start_tok =
        "{\"event\":\"start\",\"time\":1,\"model\":\"gpt-nano\",\"data\":\"kjv\",\"batch\":4096,\"batch_tokens\":1,"
        "\"capacity\":1073741824}\n";
    char log[600], *h;
    (void)st;
    snprintf(log, sizeof log, "%s%s", start_tok, STEP(0, 5.5, 4096, 1, 4131, 12.5));
    put_text(log_path, log);
    assert_int_equal(bfit_report_write(log_path, html_path), BFIT_OK);
    h = read_text(html_path);
    assert_int_equal(in_chart(h, "batch", "E: tokens per optimizer step"), 1);
    assert_int_equal(in_chart(h, "throughput", "tokens/s of each step"), 1);
    assert_int_equal(in_chart(h, "noise", "B_noise (tokens)"), 1);
    assert_int_equal(count_in(h, h + strlen(h), "samples per optimizer step"), 0);
    free(h);
    put_text(log_path, START STEP(0, 2.3, 32, 2, 64, 0));
    assert_int_equal(bfit_report_write(log_path, html_path), BFIT_OK);
    h = read_text(html_path);
    assert_int_equal(in_chart(h, "batch", "E: samples per optimizer step"), 1);
    assert_int_equal(in_chart(h, "throughput", "samples/s of each step"), 1);
    free(h);
}

/* The capacity is a step line: in effect from the step after the one that
 * reported it, with a corner where it changes. */
static void test_capacity_steps(void **st)
{
    char *h;
    (void)st;
    put_text(log_path, START
               "{\"event\":\"step\",\"step\":0,\"loss\":2,\"m\":32,\"k\":1,\"E\":32,\"mem\":3000000,"
               "\"capacity\":1073741824,\"seconds\":0.01}\n"
               "{\"event\":\"step\",\"step\":1,\"loss\":2,\"m\":32,\"k\":1,\"E\":32,\"mem\":3000000,"
               "\"capacity\":33554432,\"seconds\":0.01}\n"
               "{\"event\":\"memory\",\"time\":1,\"step\":2,\"capacity\":33554432}\n"
               "{\"event\":\"step\",\"step\":2,\"loss\":2,\"m\":16,\"k\":2,\"E\":32,\"mem\":3000000,"
               "\"capacity\":33554432,\"seconds\":0.01}\n");
    assert_int_equal(bfit_report_write(log_path, html_path), BFIT_OK);
    h = read_text(html_path);
    /* (0, 1 GiB) (1, 1 GiB) (2, 1 GiB) (2, 32 MiB) (3, 32 MiB) */
    assert_int_equal(points(h, "memory", "capacity", NULL), 5);
    assert_int_equal(points(h, "memory", "mem", NULL), 3);
    free(h);
}

/* A long run: at most 2400 points per line, the buckets' extremes kept. */
static void test_long_run_bounded(void **st)
{
    FILE *f = fopen(log_path, "w");
    double top;
    char *h;
    int n;
    (void)st;
    assert_non_null(f);
    fputs(START, f);
    for (int s = 0; s < 10000; s++)
        fprintf(f, "{\"event\":\"step\",\"time\":1,\"step\":%d,\"loss\":%g,\"m\":32,\"k\":1,\"E\":32,\"mem\":3000000,"
                   "\"capacity\":1073741824,\"seconds\":0.01}\n", s, s == 7777 ? 100.0 : 1.0 + (s % 7) * 0.01);
    fclose(f);
    assert_int_equal(bfit_report_write(log_path, html_path), BFIT_OK);
    h = read_text(html_path);
    n = points(h, "loss", "train-loss", &top);
    assert_in_range(n, 1200, 2400);
    assert_true(top < 56.05); /* the spike of 100 reaches the top of the plot (y = 56) */
    assert_in_range(points(h, "batch", "batch-E", NULL), 1, 2400);
    free(h);
}

/* A refused log: the code, the message, and no HTML (an old one unchanged,
 * no temporary file left). */
static void refused(const char *log_text, int code, const char *msg)
{
    char *h, *e;
    DIR *d;
    struct dirent *de;
    if (log_text)
        put_text(log_path, log_text);
    put_text(html_path, "old report");
    assert_int_equal(bfit_report_write(log_path, html_path), code);
    e = strstr(bfit_errmsg(), msg);
    if (!e)
        fail_msg("expected '%s' in '%s'", msg, bfit_errmsg());
    h = read_text(html_path);
    assert_string_equal(h, "old report");
    free(h);
    d = opendir(tmpdir);
    while ((de = readdir(d)))
        assert_null(strstr(de->d_name, ".tmp"));
    closedir(d);
}

static void test_malformed_logs(void **st)
{
    char m[600];
    (void)st;
    snprintf(m, sizeof m, "%s:3: not valid JSON (at column 33)", log_path);
    refused(START STEP(0, 2.3, 32, 2, 64, 0) "{\"event\":\"step\",\"step\":1,\"loss\":nan}\n", BFIT_EFORMAT, m);
    snprintf(m, sizeof m, "%s:2: a \"step\" event without the number \"loss\"", log_path);
    refused(START "{\"event\":\"step\",\"step\":1,\"m\":32}\n", BFIT_EFORMAT, m);
    snprintf(m, sizeof m, "%s:2: a \"step\" event without the number \"seconds\" (it is there, but not a number)",
             log_path);
    refused(START "{\"event\":\"step\",\"step\":1,\"loss\":2,\"m\":32,\"k\":1,\"E\":32,\"mem\":1,\"capacity\":1,"
                  "\"seconds\":\"fast\"}\n", BFIT_EFORMAT, m);
    snprintf(m, sizeof m, "%s:2: a \"memory\" event without the number \"capacity\"", log_path);
    refused(START "{\"event\":\"memory\",\"step\":3}\n", BFIT_EFORMAT, m);
    snprintf(m, sizeof m, "%s:1: not an event: a JSON object was expected", log_path);
    refused("[1, 2, 3]\n", BFIT_EFORMAT, m);
    snprintf(m, sizeof m, "%s:2: not an event: the object has no \"event\" name", log_path);
    refused(START "{\"step\":1}\n", BFIT_EFORMAT, m);
    /* a line cut short with lines after it (the last alone is left out: test_finished_and_cut_runs) */
    snprintf(m, sizeof m, "%s:2: not valid JSON (at column 25): the line ends early (a cut log?)", log_path);
    refused(START "{\"event\":\"step\",\"step\":1\n" STEP(2, 2.3, 32, 2, 64, 0), BFIT_EFORMAT, m);
    snprintf(m, sizeof m, "%s:2: a second \"start\" event: a log holds one run", log_path);
    refused(START START, BFIT_EFORMAT, m);
    snprintf(m, sizeof m, "%s: the log is empty: it holds no events", log_path);
    refused("", BFIT_EFORMAT, m);
    refused("\n  \n", BFIT_EFORMAT, m);
    unlink(log_path);
    snprintf(m, sizeof m, "%s: cannot open the log: No such file or directory", log_path);
    refused(NULL, BFIT_EIO, m);
}

static void test_unwritable_output(void **st)
{
    char bad[400];
    (void)st;
    put_text(log_path, small_log);
    snprintf(bad, sizeof bad, "%s/no/such/dir/run.html", tmpdir);
    assert_int_equal(bfit_report_write(log_path, bad), BFIT_EIO);
    assert_non_null(strstr(bfit_errmsg(), bad));
}

/* Monitor events: a point per sample on the busy and shared-memory charts
 * (fields a device did not give are left out), and a change of the clock
 * throttling marked on every chart, its end too. */
static void test_monitor(void **st)
{
    static const char log[] =
        "{\"event\":\"start\",\"time\":1,\"model\":\"m\",\"capacity\":1073741824}\n"
        "{\"event\":\"monitor\",\"time\":1,\"step\":0,\"device\":\"cuda:0\",\"busy\":5,"
        "\"self_bytes\":1073741824,\"others_bytes\":0,\"others\":0,\"throttled\":\"\"}\n"
        "{\"event\":\"step\",\"time\":1,\"step\":0,\"loss\":2,\"E\":8,\"m\":8,\"k\":1,\"mem\":1000,"
        "\"capacity\":1073741824,\"seconds\":0.1}\n"
        "{\"event\":\"monitor\",\"time\":1,\"step\":1,\"device\":\"cuda:0\",\"busy\":97,"
        "\"self_bytes\":2147483648,\"others_bytes\":3221225472,\"others\":1,\"throttled\":\"power cap\"}\n"
        "{\"event\":\"monitor\",\"time\":1,\"step\":2,\"device\":\"cuda:0\",\"busy\":99,"
        "\"self_bytes\":2147483648,\"others_bytes\":0,\"others\":0,\"throttled\":\"power cap\"}\n"
        "{\"event\":\"monitor\",\"time\":1,\"step\":3,\"device\":\"cpu\",\"busy\":40,\"self_bytes\":1073741824,"
        "\"throttled\":\"\"}\n";
    char *h;
    (void)st;
    put_text(log_path, log);
    if (bfit_report_write(log_path, html_path) != BFIT_OK)
        fail_msg("%s", bfit_errmsg());
    h = read_text(html_path);
    assert_non_null(h);
    assert_int_equal(points(h, "busy", "busy", NULL), 4);
    assert_int_equal(in_chart(h, "busy", "<title>step 1: busy 97%</title>"), 1);
    assert_int_equal(points(h, "shared", "self", NULL), 4);
    assert_int_equal(points(h, "shared", "others", NULL), 3); /* the cpu's sample has none */
    for (size_t i = 0; i < sizeof charts / sizeof charts[0]; i++) {
        assert_int_equal(in_chart(h, charts[i], "<g class=\"ev "), 2);
        assert_int_equal(in_chart(h, charts[i], "<g class=\"ev ev-throttle\"><title>1. step 1"), 1);
        assert_int_equal(in_chart(h, charts[i], "<g class=\"ev ev-throttle\"><title>2. step 3"), 1);
    }
    assert_int_equal(count_in(h, h + strlen(h), "the device is slowed down: power cap"), /* each chart, and the list */
                     NCHARTS + 1);
    assert_int_equal(count_in(h, h + strlen(h), "the device is no longer slowed down"), /* each chart, and the list */
                     NCHARTS + 1);
    free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_data_wait),
        cmocka_unit_test(test_points_and_markers),
        cmocka_unit_test(test_config_plan_status),
        cmocka_unit_test(test_finished_and_cut_runs),
        cmocka_unit_test(test_capacity_steps),
        cmocka_unit_test(test_token_units),
        cmocka_unit_test(test_long_run_bounded),
        cmocka_unit_test(test_malformed_logs),
        cmocka_unit_test(test_unwritable_output),
        cmocka_unit_test(test_monitor),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
