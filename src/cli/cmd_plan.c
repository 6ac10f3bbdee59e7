/* cmd_plan.c - `batchfit plan` (the memory-plan issue fills this in). */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

int cmd_plan(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--help")) {
        puts("Usage: batchfit plan --model FILE|PRESET [--memory SIZE] [--batch LIST] [--json]\n\n"
             "Print the bytes a training step needs per memory category and the largest\n"
             "batch that fits. (Not implemented yet.)");
        return EXIT_OK;
    }
    cli_error("plan is not implemented yet");
    return EXIT_FAIL;
}
