/* cli.h - what the subcommands share: option value parsing that reports
 * usage errors the same way, and the exit codes. Only cli/ exits. */
#ifndef BFIT_CLI_H
#define BFIT_CLI_H

#include <stdint.h>

enum {
    EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2,
    EXIT_MEMORY = 3,    /* train: not even micro-batch 1 fitted, and memory did not come back */
    EXIT_SIGINT = 130,  /* train: stopped by SIGINT (128 + 2, as shells report it) */
    EXIT_SIGTERM = 143  /* train: stopped by SIGTERM (128 + 15) */
};

/* Print "batchfit: error: ..." to stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Parse an option value or print a usage error naming the option and return
 * -1 (caller exits 2). */
int cli_int(const char *opt, const char *v, long min, long max, long *out);
int cli_double(const char *opt, const char *v, double min, double max, double *out);
int cli_size(const char *opt, const char *v, uint64_t *out);
/* getopt_long's '?': say which option was unknown or lacked its value. */
void cli_bad_option(const char *name);
/* Report the first argument getopt left over, if any; returns -1 then. */
int cli_no_extra(int argc, char **argv);
/* Print the library's last error, naming the option where the library
 * names a configuration field. */
void cli_lib_error(void);
/* Check a --device value (cpu, cuda, cuda:N, auto); -1 after a usage error. */
int cli_device_check(const char *opt, const char *v);
/* --precision and --recompute into st; -1 after a usage error. */
struct bfit_storage;
int cli_storage_opt(const char *opt, const char *v, struct bfit_storage *st);
/* The help lines of --precision, --recompute and --no-lean. */
#define CLI_STORAGE_HELP \
    "  --precision f32|bf16|f16  activations, their gradients and compute in this\n" \
    "                        precision; master weights and optimizer state f32\n" \
    "                        (default f32)\n" \
    "  --recompute none|blocks|sqrt|auto  regenerate activations in backward instead\n" \
    "                        of keeping them: at residual-block boundaries, every\n" \
    "                        ~sqrt(n) blocks, or auto: the least recomputed work that\n" \
    "                        fits the target batch (default none; docs/memory.md)\n" \
    "  --no-lean             keep layers' inputs and outputs as they are (no relu\n" \
    "                        bits, no batch norm from its output)\n"
/* Print root as one line on stdout and delete it: 0, or -1 out of memory. */
struct cJSON;
int cli_json_print(struct cJSON *root);
/* "Try 'batchfit CMD --help'." after a usage error. */
int cli_usage_hint(const char *cmd);

int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_find(int argc, char **argv);
int cmd_report(int argc, char **argv);

#endif
