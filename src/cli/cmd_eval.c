/* cmd_eval.c - `batchfit eval`: saved weights on a data set's test split
 * (bfit_evaluate). Parses, calls and prints. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>

static void help(void)
{
    puts("Usage: batchfit eval --model FILE --weights FILE [OPTIONS]\n"
         "\n"
         "Evaluate saved weights (from `batchfit train --save`) on the test split of a\n"
         "data set: mean loss and accuracy.\n"
         "\n"
         "  --model FILE|PRESET the model spec, ONNX file or preset the weights were\n"
         "                      trained with\n"
         "  --weights FILE      safetensors weights\n"
         "  --data NAME|PATH    fashion-mnist (default): its test split; an MNIST-format\n"
         "                      directory: its t10k files; a CSV file: the whole file;\n"
         "                      for token models kjv, a token file or a .txt file (its\n"
         "                      test part: every 20th block of 4096 ids, or of 100\n"
         "                      lines)\n"
         "  --test-data PATH    evaluate on this instead of --data's test split: a text\n"
         "                      or token file is read whole (as train's --test-data)\n"
         "  --seq N             token models: score windows of N tokens, as a train\n"
         "                      --seq N run evaluates (default: the model's length)\n"
         "  --seq-max N         token models: score the text's lines, cut at N tokens, as\n"
         "                      a train --seq-max N run evaluates (default: windows of\n"
         "                      the model's length)\n"
         "  --mask-tokens P --mask-id ID --special-ids ID,...   a masked LM: score its\n"
         "                      masked tokens, as a train run with these evaluates (the\n"
         "                      test set's masks are the same in every run)\n"
         "Image folders (docs/data.md): --resize N, --center-crop N, --mean M,M,M --std S,S,S,\n"
         "  --loader-threads N, --skip-bad-images, --no-dct-scaling (as train's)\n"
         "  --csv-header yes|no|auto   whether a CSV file's first row is a header (default\n"
         "                      auto: yes when it holds only names, no when only numbers)\n"
         "  --eval-batch N      evaluation micro-batch (default 1000, or what fits);\n"
         "                      --batch N is the same (train's name is --eval-batch)\n"
         "  --eval-samples N    evaluate the first N test samples (default: all);\n"
         "                      --samples N is the same\n"
         "  --memory SIZE       device memory capacity (default: available RAM)\n"
         "  --threads N         CPU threads (default: all cores)\n"
         "  --device NAME       cpu, cuda, cuda:N or auto (default auto: a GPU when\n"
         "                      present and built with CUDA, else cpu)\n"
         "  --no-normalize      do not normalise inputs (by default the mean/std saved with\n"
         "                      the weights at training are applied)\n"
         "  --json              print the result as JSON\n"
         "\n"
         "Exit status: 0 evaluated, 1 failed, 2 usage error.");
}

static const struct option opts[] = {
    {"resize", required_argument, 0, 1}, {"center-crop", required_argument, 0, 1},
    {"loader-threads", required_argument, 0, 1}, {"skip-bad-images", no_argument, 0, 1},
    {"no-dct-scaling", no_argument, 0, 1}, {"mean", required_argument, 0, 1}, {"std", required_argument, 0, 1},
    {"model", required_argument, 0, 1},     {"weights", required_argument, 0, 1},
    {"data", required_argument, 0, 1},       {"batch", required_argument, 0, 1},
    {"test-data", required_argument, 0, 1}, {"seq-max", required_argument, 0, 1},
    {"seq", required_argument, 0, 1},       {"attention", required_argument, 0, 1}, /* refused, saying why */
    {"mask-tokens", required_argument, 0, 1}, {"mask-id", required_argument, 0, 1},
    {"special-ids", required_argument, 0, 1},
    {"samples", required_argument, 0, 1}, {"memory", required_argument, 0, 1},
    {"threads", required_argument, 0, 1}, {"no-normalize", no_argument, 0, 1},
    {"json", no_argument, 0, 1},             {"help", no_argument, 0, 1},
    {"device", required_argument, 0, 1},  {"csv-header", required_argument, 0, 1},
    {"eval-batch", required_argument, 0, 1}, {"eval-samples", required_argument, 0, 1},
    {0, 0, 0, 0}};

static const char *const local[] = {"json", NULL};
/* eval's older names for train's options */
static const char *const alias[] = {"batch", "eval-batch", "samples", "eval-samples", NULL};

int cmd_eval(int argc, char **argv)
{
    static const cli_cmd cmd = {"eval", opts, help, local, alias};
    bfit_config *c = bfit_config_new();
    bfit_result *res = NULL;
    unsigned flags;
    int code;

    if (!c) {
        cli_lib_error();
        return EXIT_FAIL;
    }
    bfit_config_set_progress(c, stderr); /* notes: what a CSV file's first row was taken as */
    if ((code = cli_parse(&cmd, argc, argv, c, &flags)) >= 0)
        goto out;
    if (bfit_evaluate(c, &res) != BFIT_OK) {
        cli_lib_error();
        code = EXIT_FAIL;
        goto out;
    }
    cli_print(res, flags & 1);
    code = EXIT_OK;
out:
    bfit_result_free(res);
    bfit_config_free(c);
    return code;
}
