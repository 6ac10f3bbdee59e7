/* cmd_plan.c - `batchfit plan`: the memory of a training (or eval) step per
 * category, its fixed and per-sample parts, what buffer reuse saves, and the
 * largest batch that fits (bfit_plan). Parses, calls and prints. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>

static void help(void)
{
    puts("Usage: batchfit plan --model PRESET|FILE [OPTIONS]\n"
         "\n"
         "Print the device memory a training step needs, per category, without\n"
         "allocating it: the fixed part (parameters, gradients, optimizer state), the\n"
         "part that grows with the batch, the peak at the batch sizes asked for, what\n"
         "buffer reuse saves, and the largest batch that fits. The trainer reserves\n"
         "exactly this plan (docs/memory.md).\n"
         "\n"
         "  --model PRESET|FILE   a preset (mlp, cnn, resnet18, resnet50, vgg16, gpt-nano,\n"
         "                        gpt2, bert-base), a model spec file (docs/model-spec.md)\n"
         "                        or an ONNX file exported from PyTorch (docs/onnx.md)\n"
         CLI_SEQ_HELP
         CLI_ATTENTION_HELP
         "  --mask-tokens P       a masked LM (train's option): its head planned at the\n"
         "                        masked tokens only, as its run computes it\n"
         "  --memory SIZE         device memory, e.g. 11GiB, 512MiB, 8GB (default: what\n"
         "                        the device has free: available RAM on the cpu)\n"
         "  --margin F            fraction of memory kept free, 0 <= F < 1 (default 0.1)\n"
         "  --batch LIST          batch sizes to show, e.g. 1,32,64 (default: 1 and the\n"
         "                        largest that fits); each must fit\n"
         "  --optimizer sgd|adamw optimizer whose state is planned (default sgd)\n"
         "  --momentum X          SGD momentum (default 0.9); 0: plain SGD, no state\n"
         "  --eval                plan an inference step (no gradients, no optimizer)\n"
         CLI_STORAGE_HELP
         "  --device NAME         cpu, cuda, cuda:N or auto: whose ops (and their\n"
         "                        workspaces) to plan (default auto)\n"
         "  --conv-algo fastest|lean|auto  a GPU's convolution algorithms (default\n"
         "                        fastest; auto plans the fastest)\n"
         "  --threads N           CPU threads the step will run with (default: all\n"
         "                        cores); oneDNN's workspaces depend on it\n"
         "  --ways                the ways to a larger batch in this memory, side by side:\n"
         "                        f32, lean f32, bf16, bf16 + recompute blocks, bf16 +\n"
         "                        recompute auto, and x2 accumulation (docs/memory.md)\n"
         "  --measure             with --ways: time a few real steps of each (random\n"
         "                        samples; this allocates and runs every row)\n"
         "  --json                print the plan as JSON\n"
         "\n"
         "Example:\n"
         "  batchfit plan --model resnet50 --memory 11GiB --optimizer sgd --batch 1,32,64\n"
         "  batchfit plan --model bert-base --seq 128 --memory 12GB --optimizer adamw\n"
         "\n"
         "Exit status: 0 planned and everything fits, 1 a batch (or the model) does\n"
         "not fit or the model cannot be loaded, 2 usage error.");
}

static const struct option opts[] = {
    {"model", required_argument, 0, 1},   {"memory", required_argument, 0, 1},
    {"margin", required_argument, 0, 1}, {"batch", required_argument, 0, 1},
    {"optimizer", required_argument, 0, 1}, {"momentum", required_argument, 0, 1},
    {"eval", no_argument, 0, 1},           {"threads", required_argument, 0, 1},
    {"json", no_argument, 0, 1},           {"help", no_argument, 0, 1},
    {"device", required_argument, 0, 1}, {"conv-algo", required_argument, 0, 1},
    {"precision", required_argument, 0, 1}, {"recompute", required_argument, 0, 1},
    {"no-lean", no_argument, 0, 1},     {"ways", no_argument, 0, 1},
    {"measure", no_argument, 0, 1},
    {"seq", required_argument, 0, 1},       {"attention", required_argument, 0, 1},
    {"mask-tokens", required_argument, 0, 1},
    {0, 0, 0, 0}};

static const char *const local[] = {"json", NULL};

int cmd_plan(int argc, char **argv)
{
    static const cli_cmd cmd = {"plan", opts, help, local, NULL};
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
    rc = bfit_plan(c, &res);
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
