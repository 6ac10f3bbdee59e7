/* cmd_eval.c - `batchfit eval`: evaluate saved weights. */
#include "base/err.h"
#include "cli/cli.h"
#include "train/trainer.h"

#include "nn/zoo.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

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
         "                      directory: its t10k files; a CSV file: the whole file\n"
         "  --csv-header yes|no|auto   whether a CSV file's first row is a header (default\n"
         "                      auto: yes when it holds only names, no when only numbers)\n"
         "  --batch N           evaluation micro-batch (default 1000, or what fits)\n"
         "  --samples N         evaluate the first N test samples (default: all)\n"
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

enum { O_MODEL = 256, O_WEIGHTS, O_DATA, O_BATCH, O_SAMPLES, O_MEMORY, O_THREADS, O_NO_NORM, O_JSON, O_HELP, O_DEVICE, O_CSV_HEADER };

static const struct option opts[] = {
    {"model", required_argument, 0, O_MODEL},     {"weights", required_argument, 0, O_WEIGHTS},
    {"data", required_argument, 0, O_DATA},       {"batch", required_argument, 0, O_BATCH},
    {"samples", required_argument, 0, O_SAMPLES}, {"memory", required_argument, 0, O_MEMORY},
    {"threads", required_argument, 0, O_THREADS}, {"no-normalize", no_argument, 0, O_NO_NORM},
    {"json", no_argument, 0, O_JSON},             {"help", no_argument, 0, O_HELP},
    {"device", required_argument, 0, O_DEVICE},  {"csv-header", required_argument, 0, O_CSV_HEADER},
    {0, 0, 0, 0}};

/* A model reading token ids (its loss is per token). */
static int is_token_model(const char *model)
{
    bfit_graph_desc g;
    int yes = 0;
    if (bfit_model_source_load(model, &g) == BFIT_OK) {
        yes = g.input_dtype == BFIT_I32;
        bfit_graph_fini(&g);
    }
    return yes;
}

int cmd_eval(int argc, char **argv)
{
    bfit_eval_cfg c;
    int o, json = 0;
    long v;
    double loss, acc;
    int64_t n;

    memset(&c, 0, sizeof c);
    c.data = "fashion-mnist";
    c.normalize = 1;
    c.human = stderr;
    opterr = 0;
    optind = 1;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        const char *name = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
        switch (o) {
        case O_MODEL: c.model = optarg; break;
        case O_WEIGHTS: c.weights = optarg; break;
        case O_DATA: c.data = optarg; break;
        case O_CSV_HEADER:
            if (bfit_csv_header_parse(optarg, &c.csv_header) != BFIT_OK) { cli_error("--csv-header: %s", bfit_errmsg()); return cli_usage_hint("eval"); }
            break;
        case O_BATCH: if (cli_int("--batch", optarg, 1, BFIT_BATCH_MAX, &v)) return cli_usage_hint("eval"); c.batch = (int)v; break;
        case O_SAMPLES: if (cli_int("--samples", optarg, 1, BFIT_COUNT_MAX, &v)) return cli_usage_hint("eval"); c.samples = v; break;
        case O_MEMORY: if (cli_size("--memory", optarg, &c.memory)) return cli_usage_hint("eval"); break;
        case O_THREADS: if (cli_int("--threads", optarg, 1, 1024, &v)) return cli_usage_hint("eval"); c.threads = (int)v; break;
        case O_NO_NORM: c.normalize = 0; break;
        case O_DEVICE: if (cli_device_check("--device", optarg)) return cli_usage_hint("eval"); c.device_name = optarg; break;
        case O_JSON: json = 1; break;
        case O_HELP: help(); return EXIT_OK;
        default:
            cli_bad_option(name);
            return cli_usage_hint("eval");
        }
    }
    if (cli_no_extra(argc, argv))
        return cli_usage_hint("eval");
    if (!c.model || !c.weights) {
        cli_error("--model and --weights are both required");
        return cli_usage_hint("eval");
    }
    if (bfit_evaluate(&c, &loss, &acc, &n) != BFIT_OK) {
        cli_lib_error();
        return EXIT_FAIL;
    }
    if (json)
        printf("{\"samples\":%lld,\"loss\":%.6f,\"accuracy\":%.6f}\n", (long long)n, loss, acc);
    else if (is_token_model(c.model)) /* the figures are per token */
        printf("test loss %.4f per token (%.4f bits), next-token accuracy %.2f%% on %lld sequences\n", loss,
               loss / 0.69314718055994531, 100 * acc, (long long)n);
    else
        printf("test loss %.4f, test accuracy %.2f%% on %lld samples\n", loss, 100 * acc, (long long)n);
    return EXIT_OK;
}
