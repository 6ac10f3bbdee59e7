/* cli.c - shared option parsing and error printing for the subcommands. */
#include "cli/cli.h"

#include "batchfit.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_error(const char *fmt, ...)
{
    va_list ap;
    int size, rank;
    bfit_dist_info(&size, &rank); /* one of several processes: say which */
    if (size > 1)
        fprintf(stderr, "batchfit: rank %d: error: ", rank);
    else
        fputs("batchfit: error: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int cli_usage_hint(const char *cmd)
{
    fprintf(stderr, "Try 'batchfit %s --help'.\n", cmd);
    return EXIT_USAGE;
}

void cli_bad_option(const char *name)
{
    if (optopt)
        cli_error("option %s needs a value", name);
    else
        cli_error("unknown option '%s'", name);
}

int cli_no_extra(int argc, char **argv)
{
    if (optind < argc) {
        cli_error("unexpected argument '%s'", argv[optind]);
        return -1;
    }
    return 0;
}

int cli_int(const char *opt, const char *v, long min, long max, long *out)
{
    int64_t x;
    if (bfit_parse_int(v, min, max, &x) != BFIT_OK) {
        cli_error("%s: %s", opt, bfit_errmsg());
        return -1;
    }
    *out = (long)x;
    return 0;
}

int cli_double(const char *opt, const char *v, double min, double max, double *out)
{
    char *end;
    double x;
    errno = 0;
    x = strtod(v, &end);
    if (!*v || *end || errno || !isfinite(x)) {
        cli_error("%s: '%s' is not a number", opt, v);
        return -1;
    }
    if (x < min || x > max) {
        cli_error("%s: %g is out of range: expected %g to %g", opt, x, min, max);
        return -1;
    }
    *out = x;
    return 0;
}

int cli_size(const char *opt, const char *v, uint64_t *out)
{
    if (bfit_parse_capacity(v, out) != BFIT_OK) {
        cli_error("%s: %s", opt, bfit_errmsg());
        return -1;
    }
    return 0;
}

void cli_lib_error(void)
{
    const char *msg = bfit_errmsg(), *field = bfit_errfield();
    size_t n = strlen(field);
    char flag[80];

    /* the library names a configuration field ("micro_batch: ..."); the
     * command line calls it an option (--micro-batch) */
    if (n && n + 3 < sizeof flag && !strncmp(msg, field, n) && msg[n] == ':') {
        snprintf(flag, sizeof flag, "--%s", field);
        for (char *c = flag; *c; c++)
            if (*c == '_')
                *c = '-';
        cli_error("%s%s", flag, msg + n);
        return;
    }
    cli_error("%s", msg);
}

int cli_device_check(const char *opt, const char *v)
{
    if (!strcmp(v, "cpu") || !strcmp(v, "auto") || !strcmp(v, "cuda"))
        return 0;
    if (!strncmp(v, "cuda:", 5) && v[5]) {
        char *end;
        long i = strtol(v + 5, &end, 10);
        if (!*end && i >= 0 && i <= 1024)
            return 0;
    }
    cli_error("%s: unknown device '%s': expected cpu, cuda, cuda:N (a GPU index) or auto", opt, v);
    return -1;
}

int cli_storage_opt(const char *opt, const char *v, bfit_storage *st)
{
    int rc = !strcmp(opt, "--precision") ? bfit_precision_parse(v, &st->precision)
                                         : bfit_recompute_parse(v, &st->recompute);
    if (rc != BFIT_OK) {
        cli_error("%s: %s", opt, bfit_errmsg());
        return -1;
    }
    return 0;
}

int cli_json_print(cJSON *root)
{
    char *s = cJSON_PrintUnformatted(root);

    cJSON_Delete(root);
    if (!s)
        return -1;
    puts(s);
    cJSON_free(s);
    return 0;
}
