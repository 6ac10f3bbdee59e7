/* cmd_report.c - `batchfit report LOG -o FILE`: the run report (one HTML
 * file) from a training run's event log; the library draws it. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static void help(void)
{
    puts("Usage: batchfit report LOG [-o FILE]\n"
         "\n"
         "Write the run report: one self-contained HTML file (charts as inline SVG, no\n"
         "script, nothing fetched; it reads on a phone and prints) drawn from the event\n"
         "log of `batchfit train --log LOG`. It shows over the optimizer steps the loss\n"
         "and test accuracy, the effective batch E and the micro-batch m (E = m x k),\n"
         "memory in use against the capacity, throughput and the gradient noise scale,\n"
         "with every batch change, memory change, warning and error numbered on the\n"
         "charts and listed below them; then the run's configuration and the memory\n"
         "plan per category. `batchfit train --report FILE` writes it at the end of a\n"
         "run, also after a failure.\n"
         "\n"
         "  -o, --output FILE     the HTML file (default: LOG with .html for .jsonl)\n"
         "\n"
         "The file is written whole or not at all: a log that cannot be read leaves an\n"
         "existing FILE as it was.\n"
         "\n"
         "Example:\n"
         "  batchfit train --model models/cnn.cfg --epochs 2 --log run.jsonl\n"
         "  batchfit report run.jsonl -o run.html\n"
         "\n"
         "Exit status: 0 written, 1 the log cannot be read or is not a run's event log\n"
         "(the message names FILE:LINE), or the report cannot be written, 2 usage error.");
}

static const struct option opts[] = {
    {"output", required_argument, 0, 'o'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};

/* LOG.jsonl -> LOG.html; -1 when that would be LOG itself. */
static int default_output(const char *log, char *out, size_t n)
{
    size_t len = strlen(log);
    const char *ext[] = {".jsonl", ".json", ".log"};
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
        size_t e = strlen(ext[i]);
        if (len > e && !strcmp(log + len - e, ext[i])) {
            len -= e;
            break;
        }
    }
    if ((size_t)snprintf(out, n, "%.*s.html", (int)len, log) >= n || !strcmp(out, log))
        return -1;
    return 0;
}

int cmd_report(int argc, char **argv)
{
    const char *out = NULL, *log;
    char dflt[4096];
    int o;

    opterr = 0;
    optind = 1;
    while ((o = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        const char *name = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
        switch (o) {
        case 'o': out = optarg; break;
        case 'h': help(); return EXIT_OK;
        default:
            if (optopt == 'o') /* -x is no option of report's, though getopt names it too */
                cli_error("option %s needs a value", name);
            else
                cli_error("unknown option '%s'", name);
            return cli_usage_hint("report");
        }
    }
    if (optind >= argc) {
        cli_error("the event log is required, e.g. batchfit report run.jsonl -o run.html");
        return cli_usage_hint("report");
    }
    log = argv[optind++];
    if (optind < argc) {
        cli_error("unexpected argument '%s'", argv[optind]);
        return cli_usage_hint("report");
    }
    if (!out) {
        if (default_output(log, dflt, sizeof dflt)) {
            cli_error("cannot name the report after '%s': give -o FILE", log);
            return cli_usage_hint("report");
        }
        out = dflt;
    }
    if (bfit_report_write(log, out) != BFIT_OK) {
        cli_lib_error();
        return EXIT_FAIL;
    }
    printf("report written to %s\n", out);
    return EXIT_OK;
}
