/* cli.c - what the subcommands share: the option loop that hands every
 * option to the library's configuration by its name, errors printed the
 * same way, and the result printed as text or JSON. */
#include "cli.h"

#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The line is written at once: stderr is unbuffered, and the lines of
 * several processes that a launcher passes on as they come would interleave
 * in pieces ("batchfit: rank 1: error: batchfit: rank 0: error: ..."). */
void cli_error(const char *fmt, ...)
{
    va_list ap;
    char line[2048];
    int size, rank, n;
    bfit_dist_info(&size, &rank); /* one of several processes: say which */
    n = size > 1 ? snprintf(line, sizeof line, "batchfit: rank %d: error: ", rank)
                 : snprintf(line, sizeof line, "batchfit: error: ");
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap); /* room for the newline */
    va_end(ap);
    n = (int)strlen(line);
    line[n] = '\n';
    fwrite(line, 1, (size_t)n + 1, stderr);
}

int cli_usage_hint(const char *cmd)
{
    fprintf(stderr, "Try 'batchfit %s --help'.\n", cmd);
    return EXIT_USAGE;
}

/* Whether text[0..n) is an option's name spelt with '_' (the library's
 * spelling, "batch_max"). */
static int option_word(const char *text, size_t n)
{
    const char *name;
    for (int i = 0; (name = bfit_config_option(i, NULL, NULL)) != NULL; i++) {
        size_t k = 0;
        while (k < n && name[k] && (name[k] == '-' ? '_' : name[k]) == text[k])
            k++;
        if (k == n && !name[k])
            return 1;
    }
    return 0;
}

#define WORD_CHARS "abcdefghijklmnopqrstuvwxyz0123456789_"

/* An option named at p: `name` in backquotes, or a bare word with a '_'
 * between a separator and a separator or a sentence's full stop. Sets the
 * name, its length and the characters it takes in msg. */
static int named_option(const char *msg, const char *p, const char **name, size_t *n, size_t *take)
{
    size_t w = strspn(p + (*p == '`'), WORD_CHARS);
    char prev = p == msg ? ' ' : p[-1], next = p[w];

    if (*p == '`') {
        if (!w || p[w + 1] != '`' || !option_word(p + 1, w))
            return 0;
        *name = p + 1, *n = w, *take = w + 2;
        return 1;
    }
    if (!w || !memchr(p, '_', w) || !strchr(" (,'\"`", prev) ||
        !(strchr(" ),:;'\"`", next) || (next == '.' && (!p[w + 1] || p[w + 1] == ' '))) || !option_word(p, w))
        return 0;
    *name = p, *n = w, *take = w;
    return 1;
}

/* msg with the options it names in the library's spelling ("above
 * batch_max 32") in the command line's ("above --batch-max 32"): words with
 * a '_' between spaces or punctuation, never inside a path or a name, and
 * an option quoted in backquotes ("give `checkpoint` a directory"), which a
 * one-word name needs to be told from the word. */
static void spell_options(const char *msg, char *out, size_t len)
{
    size_t o = 0, n, take;
    const char *name;

    for (const char *p = msg; *p && o + 1 < len; p += take) {
        if (named_option(msg, p, &name, &n, &take)) {
            o += (size_t)snprintf(out + o, len - o, "--");
            for (size_t k = 0; k < n && o + 1 < len; k++)
                out[o++] = name[k] == '_' ? '-' : name[k];
            continue;
        }
        /* a whole word at once, so that its tail is never taken for one */
        take = strspn(p, WORD_CHARS);
        take = take ? take : 1;
        for (size_t k = 0; k < take && o + 1 < len; k++)
            out[o++] = p[k];
    }
    out[o < len ? o : len - 1] = '\0';
}

void cli_lib_error(void)
{
    const char *msg = bfit_errmsg(), *field = bfit_errfield();
    size_t n = strlen(field);
    char flag[80], text[2048];

    /* the library names an option ("micro_batch: ..."); the command line
     * spells it --micro-batch */
    if (n && n + 3 < sizeof flag && !strncmp(msg, field, n) && msg[n] == ':') {
        snprintf(flag, sizeof flag, "--%s", field);
        for (char *c = flag; *c; c++)
            if (*c == '_')
                *c = '-';
        spell_options(msg + n, text, sizeof text);
        cli_error("%s%s", flag, text);
        return;
    }
    spell_options(msg, text, sizeof text);
    cli_error("%s", text);
}

/* A name the command handles itself, or an alias's option. */
static int local_index(const cli_cmd *cmd, const char *name)
{
    for (int i = 0; cmd->local && cmd->local[i]; i++)
        if (!strcmp(cmd->local[i], name))
            return i;
    return -1;
}

static const char *alias_of(const cli_cmd *cmd, const char *name)
{
    for (int i = 0; cmd->alias && cmd->alias[i]; i += 2)
        if (!strcmp(cmd->alias[i], name))
            return cmd->alias[i + 1];
    return name;
}

/* The argument spells the option whole ("--epochs", "--epochs=3"), not
 * an abbreviation of it. */
static int exact(const char *arg, const char *opt)
{
    size_t n = strlen(opt);
    return !strncmp(arg, "--", 2) && !strncmp(arg + 2, opt, n) && (arg[2 + n] == '\0' || arg[2 + n] == '=');
}

/* An option getopt does not know: the library's "did you mean", or that
 * the option is another command's. */
static void unknown_option(const cli_cmd *cmd, const char *arg)
{
    char name[64];
    bfit_config *scratch = bfit_config_new();
    size_t n = strcspn(arg + (strncmp(arg, "--", 2) ? 0 : 2), "=");
    snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), arg + (strncmp(arg, "--", 2) ? 0 : 2));
    if (scratch && strncmp(arg, "--", 2) == 0 && bfit_config_set(scratch, name, NULL) != BFIT_OK &&
        strstr(bfit_errmsg(), "did you mean '")) {
        const char *m = strstr(bfit_errmsg(), "did you mean '") + 14;
        cli_error("unknown option '%s': did you mean '--%.*s'?", arg, (int)strcspn(m, "'"), m);
    } else if (scratch && strncmp(arg, "--", 2) == 0 && strstr(bfit_errmsg(), "unknown option") == NULL) {
        cli_error("unknown option '%s' for %s (another command's option)", arg, cmd->name);
    } else {
        cli_error("unknown option '%s'", arg);
    }
    bfit_config_free(scratch);
}

/* What getopt refused, said for what it was: a short option (there are
 * none), a flag given a value, a value missing, or an unknown name. */
static void refused_option(const cli_cmd *cmd, const char *arg)
{
    size_t n = strcspn(arg, "=");
    if (arg[0] == '-' && arg[1] != '-' && arg[1]) {
        cli_error("unknown option '%s': options are spelled out (--name; --help lists them)", arg);
        return;
    }
    for (const struct option *o = cmd->opts; o->name; o++) {
        if (strncmp(arg, "--", 2) || strlen(o->name) != n - 2 || strncmp(arg + 2, o->name, n - 2))
            continue;
        if (arg[n] == '=' && o->has_arg == no_argument)
            cli_error("option --%s takes no value, got '%s'", o->name, arg + n + 1);
        else
            cli_error("option %s needs a value", arg);
        return;
    }
    unknown_option(cmd, arg);
}

int cli_parse(const cli_cmd *cmd, int argc, char **argv, bfit_config *c, unsigned *local)
{
    int o, idx;

    *local = 0;
    opterr = 0;
    optind = 1;
    while ((o = getopt_long(argc, argv, "", cmd->opts, &idx)) != -1) {
        const char *name = optind > 0 && optind <= argc ? argv[optind - 1] : "?", *opt;
        int li;
        if (o == '?' || o == ':') {
            refused_option(cmd, name);
            return cli_usage_hint(cmd->name);
        }
        opt = cmd->opts[idx].name;
        if (optarg && optind >= 2 && optarg == argv[optind - 1]) /* "--opt VALUE": the option is before it */
            name = argv[optind - 2];
        if (!exact(name, opt)) { /* getopt takes abbreviations; a typo must not pick an option */
            unknown_option(cmd, name);
            return cli_usage_hint(cmd->name);
        }
        if (!strcmp(opt, "help")) {
            cmd->help();
            return EXIT_OK;
        }
        if ((li = local_index(cmd, opt)) >= 0) {
            *local |= 1u << li;
            continue;
        }
        if (bfit_config_set(c, alias_of(cmd, opt), cmd->opts[idx].has_arg ? optarg : NULL) != BFIT_OK) {
            cli_lib_error();
            return cli_usage_hint(cmd->name);
        }
    }
    if (optind < argc) {
        cli_error("unexpected argument '%s'", argv[optind]);
        return cli_usage_hint(cmd->name);
    }
    if (bfit_config_check(c, cmd->name) != BFIT_OK) {
        cli_lib_error();
        return cli_usage_hint(cmd->name);
    }
    return -1;
}

void cli_print(const bfit_result *res, int json)
{
    if (!res)
        return;
    if (json)
        puts(bfit_result_json(res));
    else
        bfit_result_print(res, stdout);
    fflush(stdout);
}

/* The image folders' options, as train and find list them in --help. */
const char cli_help_images[] =
         "Image folders (--data DIR of class folders of .jpg/.jpeg/.png, or a list file of\n"
         "path,label lines; docs/data.md):\n"
         "  --resize N            evaluation: shorter side to N, then the centre crop\n"
         "                        (default: the model's size)\n"
         "  --center-crop N       evaluation: the centre N x N (the model's size)\n"
         "  --random-resized-crop N   training: torchvision's RandomResizedCrop(N) (the\n"
         "                        model's size); --augment adds the horizontal flip\n"
         "  --mean M,M,M --std S,S,S  normalise by these (default: the training set's)\n"
         "  --loader-threads N    threads decoding images (default: the cores the compute\n"
         "                        threads leave, at least 1)\n"
         "  --skip-bad-images     skip and count unreadable files instead of failing\n"
         "  --no-dct-scaling      decode JPEGs whole (default: at 1/2, 1/4, 1/8 when the\n"
         "                        output needs no more)\n";
