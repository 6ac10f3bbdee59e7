/* cmd_find.c - `batchfit find`: the largest batch that fits (planned, then
 * confirmed by real steps) and the batch that trains fastest (measured), as
 * a table, JSON and an SVG chart (bfit_find). Parses, calls and prints. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>

static void help(void)
{
    fputs("Usage: batchfit find --model PRESET|FILE [OPTIONS]\n"
         "\n"
         "Answer two questions with few real training steps: the largest micro-batch\n"
         "that fits the memory, and the micro-batch that trains fastest.\n"
         "\n"
         "The largest comes from the memory plan for the budget (memory less the\n"
         "margin) and is confirmed on the device: with the arena's capacity set to the\n"
         "budget, a real step (forward and backward on real samples) runs at that size\n"
         "and the next size up is refused. The fastest is measured: samples/s at\n"
         "1, 2, 4, ... and the largest (warm-up steps excluded, median of the\n"
         "measured): the best size, when it leads every other by more than their\n"
         "measured spread, else the largest within --tolerance of the best, is\n"
         "recommended. The model's weights are left as they were: no optimizer step\n"
         "is taken and parameters (batch-norm statistics included) are restored.\n"
         "\n"
         "Model and data:\n"
         "  --model PRESET|FILE   a preset (mlp, cnn, resnet18, resnet50, vgg16, gpt-nano,\n"
         "                        gpt2, bert-base), a model spec file (docs/model-spec.md,\n"
         "                        e.g. models/cnn.cfg, models/resnet-mini.cfg) or an ONNX file\n"
         "                        exported from PyTorch (docs/onnx.md)\n"
         "  --data NAME|PATH      fashion-mnist (default), an MNIST-format directory,\n"
         "                        IMAGES,LABELS IDX files, a CSV file, or synthetic\n"
         "                        (random samples of the model's input shape; random\n"
         "                        ids for a token model); for token models kjv, a\n"
         "                        token file or a .txt file (docs/data.md)\n"
         CLI_SEQ_HELP
         CLI_ATTENTION_HELP
         "  --mask-tokens P --mask-id ID --special-ids ID,...   a masked LM: its steps\n"
         "                        as train's (docs/train.md), its head gathered\n",
          stdout);
    fputs(cli_help_images, stdout);
    puts("  --csv-header yes|no|auto   whether a CSV file's first row is a header\n"
         "                        (default auto: yes when it holds only names)\n"
         "  --augment             random crop and flip of images, as in training\n"
         "  --no-normalize        do not standardise inputs\n"
         "  --no-prefetch         load samples on the training thread\n"
         "Memory:\n"
         "  --memory SIZE         device memory, e.g. 256MiB, 11GiB, 8GB (default:\n"
         "                        available RAM)\n"
         "  --margin F            fraction of memory kept free, 0 <= F < 1 (default 0.1)\n"
         "  --optimizer sgd|adamw optimizer whose state is held (default sgd)\n"
         "  --momentum X          SGD momentum (default 0.9); 0: no optimizer state\n"
         "  --limit N             largest batch considered (default: the training\n"
         "                        set's size; no micro-batch is larger)\n"
         "Throughput:\n"
         "  --tolerance F         when the rates tie within their spread: the largest batch\n"
         "                        within F of the best samples/s is the fastest, 0 <= F < 1\n"
         "                        (default 0.05)\n"
         "  --warmup N            unmeasured steps per size (default 1)\n"
         "  --repeats N           measured steps per size, the median is used (default 5)\n"
         "  --data-threshold F    data-wait share of a step above which the loader is\n"
         "                        the limit, 0 < F <= 1 (default 0.2)\n"
         "  --largest-only        skip the throughput measurement\n"
         "Run:\n"
         "  --threads N           CPU threads (default: all cores)\n"
         "  --device NAME         cpu, cuda, cuda:N or auto (default auto: a GPU when one\n"
         "                        is present and batchfit was built with CUDA, else cpu)\n"
         "  --conv-algo fastest|lean  a GPU's convolution algorithms (default fastest)\n"
         CLI_STORAGE_HELP
         "  --seed N              init, shuffling and dropout seed (default 1)\n"
         "  --plot FILE           write an SVG chart of throughput and memory against\n"
         "                        batch size\n"
         "  --json                print the result as JSON\n"
         "\n"
         "Example:\n"
         "  batchfit find --model cnn --memory 256MiB --plot find.svg\n"
         "\n"
         "Exit status: 0 found, 1 nothing fits, the model or data cannot be loaded,\n"
         "the plot cannot be written, or a real step contradicted the memory plan (a\n"
         "bug: the answers printed then come from a search with real steps), 2 usage\n"
         "error.");
}

static const struct option opts[] = {
    {"resize", required_argument, 0, 1}, {"center-crop", required_argument, 0, 1},
    {"random-resized-crop", required_argument, 0, 1}, {"loader-threads", required_argument, 0, 1},
    {"skip-bad-images", no_argument, 0, 1}, {"no-dct-scaling", no_argument, 0, 1},
    {"mean", required_argument, 0, 1}, {"std", required_argument, 0, 1},
    {"model", required_argument, 0, 1},       {"data", required_argument, 0, 1},
    {"augment", no_argument, 0, 1},          {"no-normalize", no_argument, 0, 1},
    {"no-prefetch", no_argument, 0, 1},  {"memory", required_argument, 0, 1},
    {"margin", required_argument, 0, 1},      {"optimizer", required_argument, 0, 1},
    {"momentum", required_argument, 0, 1},       {"limit", required_argument, 0, 1},
    {"tolerance", required_argument, 0, 1},      {"warmup", required_argument, 0, 1},
    {"repeats", required_argument, 0, 1},    {"data-threshold", required_argument, 0, 1},
    {"largest-only", no_argument, 0, 1}, {"threads", required_argument, 0, 1},
    {"seed", required_argument, 0, 1},          {"plot", required_argument, 0, 1},
    {"json", no_argument, 0, 1},                {"help", no_argument, 0, 1},
    {"device", required_argument, 0, 1},      {"conv-algo", required_argument, 0, 1},
    {"precision", required_argument, 0, 1}, {"recompute", required_argument, 0, 1},
    {"no-lean", no_argument, 0, 1},
    {"csv-header", required_argument, 0, 1},
    {"seq", required_argument, 0, 1}, {"attention", required_argument, 0, 1},
    {"mask-tokens", required_argument, 0, 1}, {"mask-id", required_argument, 0, 1},
    {"special-ids", required_argument, 0, 1},
    {0, 0, 0, 0}};

static const char *const local[] = {"json", NULL};

int cmd_find(int argc, char **argv)
{
    static const cli_cmd cmd = {"find", opts, help, local, NULL};
    bfit_config *c = bfit_config_new();
    bfit_result *res = NULL;
    unsigned flags;
    int code, rc;

    if (!c) {
        cli_lib_error();
        return EXIT_FAIL;
    }
    if ((code = cli_parse(&cmd, argc, argv, c, &flags)) >= 0)
        goto out;
    bfit_config_set_progress(c, stderr); /* which size is being confirmed, measured */
    rc = bfit_find(c, &res);
    if (rc == BFIT_OK || rc == BFIT_EDEVICE) /* a plan contradicted by a real step: the answers, then the error */
        cli_print(res, flags & 1);
    code = EXIT_OK;
    if (rc != BFIT_OK) {
        cli_lib_error();
        code = EXIT_FAIL;
    }
out:
    bfit_result_free(res);
    bfit_config_free(c);
    return code;
}
