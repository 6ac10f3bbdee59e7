/* cli.h - what the subcommands share. The command line parses, calls the
 * library through its public header and prints; every option but a few of
 * its own (--help, --json, --quiet) is the library's, set by name. Only
 * cli/ exits. */
#ifndef BFIT_CLI_H
#define BFIT_CLI_H

#include <batchfit.h>

#include <getopt.h>

enum {
    EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2,
    EXIT_MEMORY = 3,    /* train: not even micro-batch 1 fitted, and memory did not come back */
    EXIT_SIGINT = 130,  /* train: stopped by SIGINT (128 + 2, as shells report it) */
    EXIT_SIGTERM = 143  /* train: stopped by SIGTERM (128 + 15) */
};

/* A subcommand's options: getopt's table, the names it handles itself (bit
 * i of cli_parse's *local is set for local[i]), and aliases (pairs: the
 * command line's name, the library's option). */
typedef struct cli_cmd {
    const char *name;
    const struct option *opts;
    void (*help)(void);
    const char *const *local;
    const char *const *alias;
} cli_cmd;

/* Print "batchfit: error: ..." to stderr. */
extern const char cli_help_images[]; /* the image folders' options in --help */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print the library's last error, naming the option where it names one. */
void cli_lib_error(void);
/* "Try 'batchfit CMD --help'." after a usage error; returns EXIT_USAGE. */
int cli_usage_hint(const char *cmd);
/* Every option into c (by name), then the library's check of them for the
 * command. Returns -1 to go on, else the exit code (0 after --help, 2
 * after a usage error, said). */
int cli_parse(const cli_cmd *cmd, int argc, char **argv, bfit_config *c, unsigned *local);
/* The result on stdout: its text, or its JSON on one line. */
void cli_print(const bfit_result *res, int json);

/* The help lines of --precision, --recompute and --no-lean. */
/* Token models' length and attention, as plan, find and train list them. */
#define CLI_SEQ_HELP \
    "  --seq N               token models: sequences of N tokens (default: the\n" \
    "                        model's input; at most its positions)\n"
#define CLI_ATTENTION_HELP \
    "  --attention stored|lean  token models: keep each attention matrix for\n" \
    "                        backward (stored, default) or only a log-sum-exp per\n" \
    "                        row, recomputing the matrix in backward (lean)\n"

#define CLI_STORAGE_HELP \
    "  --precision f32|bf16|f16|auto  activations, their gradients and compute in\n" \
    "                        this precision; master weights and optimizer state\n" \
    "                        f32 (default f32; auto: bf16 where the device computes\n" \
    "                        it natively, else f32)\n" \
    "  --recompute none|blocks|sqrt|auto  regenerate activations in backward instead\n" \
    "                        of keeping them: at residual-block boundaries, every\n" \
    "                        ~sqrt(n) blocks, or auto: the least recomputed work that\n" \
    "                        fits the target batch (default none; docs/memory.md)\n" \
    "  --no-lean             keep layers' inputs and outputs as they are (no relu\n" \
    "                        bits, no batch norm from its output)\n"

int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_find(int argc, char **argv);
int cmd_report(int argc, char **argv);

#endif
