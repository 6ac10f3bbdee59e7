/* main.c - `batchfit COMMAND ...`: dispatch to the subcommands. */
#include "cli.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static const struct {
    const char *name;
    int (*run)(int, char **);
    const char *what;
} cmds[] = {
    {"train", cmd_train, "train a model; the batch is chosen to fit memory"},
    {"eval", cmd_eval, "evaluate saved weights on a data set's test split"},
    {"plan", cmd_plan, "print the memory a training step needs, per category, and the largest batch that fits"},
    {"find", cmd_find, "find the largest batch that fits (confirmed by real steps) and the fastest batch"},
    {"report", cmd_report, "write the run report (one HTML file with charts) from a training event log"},
};

static void usage(FILE *f)
{
    fprintf(f, "Usage: batchfit COMMAND [OPTIONS]\n\n"
               "Trains neural networks and manages the batch size: the exact memory of a step,\n"
               "the largest batch that fits, and training that keeps fitting.\n\nCommands:\n");
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        fprintf(f, "  %-8s %s\n", cmds[i].name, cmds[i].what);
    fprintf(f, "\nRun 'batchfit COMMAND --help' for a command's options; 'batchfit --version' for the version.\n");
}

/* libgomp reads its wait policy once, before main, and by default a waiting
 * thread spins 300,000 rounds: beside another CPU-bound job a step then ran
 * 4-37 times slower, where sleeping waits follow the CPU the process gets
 * (bench/load.py; docs/performance.md, "A loaded machine"). So the program
 * starts itself again with sleeping waits, unless the user chose a policy,
 * or a placement: libgomp has then already bound this thread to its first
 * place, and the program started again would inherit that one place as
 * all its CPUs. */
static void wait_policy(char **argv)
{
    static const char *const chosen[] = {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_PROC_BIND", "OMP_PLACES",
                                         "GOMP_CPU_AFFINITY"};
    for (size_t i = 0; i < sizeof chosen / sizeof chosen[0]; i++)
        if (getenv(chosen[i]))
            return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) == 0)
        execv("/proc/self/exe", argv); /* returns only if it failed: go on spinning */
}

/* Under an address-space limit (ulimit -v) glibc gives a thread that
 * allocates a heap of its own, 64 MiB of address space, only while the
 * limit leaves room for one, so the room left for a step depended on how
 * many were made: Fashion-MNIST's CNN trained under 300 MB, was refused
 * under 350 to 400 MB and trained from 450 MB. One heap for every thread:
 * a training step does not allocate, so no thread waits on it. Set before
 * any thread is made (the signal thread's included: the library sets it too,
 * but as its devices are made, bfit_as_one_heap, not reachable from here);
 * the user's MALLOC_ARENA_MAX, if set, stands. */
static void one_heap_under_limit(void)
{
    struct rlimit rl;

    if (getenv("MALLOC_ARENA_MAX") || getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return;
    mallopt(M_ARENA_MAX, 1);
}

/* plan, find, eval and report are one process's work: started by a
 * launcher with several processes, each would print it all, find would
 * time its steps against the others, and all would write one report file
 * at once. Rank 0 does it and says so; the others end at once. */
static int one_process(const char *name)
{
    int size, rank;
    bfit_dist_info(&size, &rank);
    if (size < 2)
        return 1;
    if (rank == 0)
        fprintf(stderr, "batchfit: %s runs in one process: rank 0 of %d does it, the others exit (only train is "
                        "data-parallel)\n", name, size);
    return rank == 0;
}

/* Help and the version under a launcher: rank 0 prints them, not every
 * rank (train too: its help is no training). */
static int other_rank_asks_help(int argc, char **argv)
{
    int size, rank;
    bfit_dist_info(&size, &rank);
    if (size < 2 || rank == 0)
        return 0;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h") || !strcmp(argv[i], "--version") ||
            !strcmp(argv[i], "-V") || (i == 1 && !strcmp(argv[i], "help")))
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    one_heap_under_limit();
    wait_policy(argv);
    if (other_rank_asks_help(argc, argv))
        return EXIT_OK;
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        /* the program's header and the library it runs with */
        printf("batchfit %s (library %s)\n", BFIT_VERSION_STRING, bfit_version());
        return EXIT_OK;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return EXIT_OK;
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name))
            return cmds[i].run == cmd_train || one_process(cmds[i].name) ? cmds[i].run(argc - 1, argv + 1) : EXIT_OK;
    cli_error("unknown command '%s'", argv[1]);
    usage(stderr);
    return EXIT_USAGE;
}
