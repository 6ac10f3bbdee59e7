/* cmd_find.c - `batchfit find`: the largest batch that fits (planned, then
 * confirmed by real steps) and the batch that trains fastest (measured), as
 * a table, two answers, JSON, and an SVG chart. The probe is the library's
 * (batch/probe.h); this file parses options and reports. */
#include "base/err.h"
#include "batch/probe.h"
#include "base/atomic.h"
#include "batch/solve.h"
#include "base/text.h"
#include "cli/cli.h"
#include "nn/zoo.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void help(void)
{
    puts("Usage: batchfit find --model PRESET|FILE [OPTIONS]\n"
         "\n"
         "Answer two questions with few real training steps: the largest micro-batch\n"
         "that fits the memory, and the micro-batch that trains fastest.\n"
         "\n"
         "The largest comes from the memory plan for the budget (memory less the\n"
         "margin) and is confirmed on the device: with the arena's capacity set to the\n"
         "budget, a real step (forward and backward on real samples) runs at that size\n"
         "and the next size up is refused. The fastest is measured: samples/s at\n"
         "1, 2, 4, ... and the largest (warm-up steps excluded, median of the\n"
         "measured), and the smallest size within --tolerance of the best is\n"
         "recommended. The model's weights are left as they were: no optimizer step\n"
         "is taken and parameters (batch-norm statistics included) are restored.\n"
         "\n"
         "Model and data:\n"
         "  --model PRESET|FILE   a preset (mlp, cnn, resnet18, resnet50, vgg16), a\n"
         "                        model spec file (docs/model-spec.md) or an ONNX file\n"
         "                        exported from PyTorch (docs/onnx.md)\n"
         "  --data NAME|PATH      fashion-mnist (default), an MNIST-format directory,\n"
         "                        IMAGES,LABELS IDX files, a CSV file, or synthetic\n"
         "                        (random samples of the model's input shape)\n"
         "  --csv-header yes|no|auto   whether a CSV file's first row is a header\n"
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
         "  --tolerance F         recommend the smallest batch within F of the best\n"
         "                        samples/s, 0 <= F < 1 (default 0.05)\n"
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

enum {
    O_MODEL = 256, O_DATA, O_AUGMENT, O_NO_NORM, O_NO_PREFETCH, O_MEMORY, O_MARGIN, O_OPT, O_MOM, O_LIMIT,
    O_TOL, O_WARMUP, O_REPEATS, O_DATA_THR, O_LARGEST_ONLY, O_THREADS, O_SEED, O_PLOT, O_JSON, O_HELP, O_DEVICE, O_CONV, O_CSV_HEADER,
    O_PRECISION, O_RECOMPUTE, O_NO_LEAN
};

static const struct option opts[] = {
    {"model", required_argument, 0, O_MODEL},       {"data", required_argument, 0, O_DATA},
    {"augment", no_argument, 0, O_AUGMENT},          {"no-normalize", no_argument, 0, O_NO_NORM},
    {"no-prefetch", no_argument, 0, O_NO_PREFETCH},  {"memory", required_argument, 0, O_MEMORY},
    {"margin", required_argument, 0, O_MARGIN},      {"optimizer", required_argument, 0, O_OPT},
    {"momentum", required_argument, 0, O_MOM},       {"limit", required_argument, 0, O_LIMIT},
    {"tolerance", required_argument, 0, O_TOL},      {"warmup", required_argument, 0, O_WARMUP},
    {"repeats", required_argument, 0, O_REPEATS},    {"data-threshold", required_argument, 0, O_DATA_THR},
    {"largest-only", no_argument, 0, O_LARGEST_ONLY}, {"threads", required_argument, 0, O_THREADS},
    {"seed", required_argument, 0, O_SEED},          {"plot", required_argument, 0, O_PLOT},
    {"json", no_argument, 0, O_JSON},                {"help", no_argument, 0, O_HELP},
    {"device", required_argument, 0, O_DEVICE},      {"conv-algo", required_argument, 0, O_CONV},
    {"precision", required_argument, 0, O_PRECISION}, {"recompute", required_argument, 0, O_RECOMPUTE},
    {"no-lean", no_argument, 0, O_NO_LEAN},
    {"csv-header", required_argument, 0, O_CSV_HEADER},
    {0, 0, 0, 0}};

typedef struct args {
    bfit_find_cfg c;
    const char *plot;
    int json, mom_set;
    double momentum;
    bfit_opt_kind kind;
} args;

/* Returns 0 to go on, or sets *done and returns the exit code. */
/* What getopt cannot check: required and contradicting options, the preset's
 * name and the optimizer's settings. 0, or -1 after saying what was wrong. */
static int check_args(int argc, char **argv, args *a)
{
    if (cli_no_extra(argc, argv))
        return -1;
    if (!a->c.model) {
        cli_error("--model is required: a preset (mlp, cnn, resnet18, resnet50, vgg16) or a spec file, "
                  "e.g. --model cnn");
        return -1;
    }
    if (a->mom_set && a->kind != BFIT_OPT_SGD) {
        cli_error("--momentum applies to --optimizer sgd (AdamW's state is always two tensors per parameter)");
        return -1;
    }
    if (a->plot && !*a->plot) {
        cli_error("--plot needs a file name, e.g. --plot find.svg");
        return -1;
    }
    if (a->plot && !a->c.probe.ladder) {
        cli_error("--plot draws the throughput measurement, which --largest-only skips: drop one of them");
        return -1;
    }
    if (!bfit_model_source_is_file(a->c.model)) {
        /* an unknown preset is a usage error; a spec that fails to load is not */
        bfit_graph_desc g;
        if (bfit_model_source_load(a->c.model, &g) != BFIT_OK) {
            cli_error("--model: %s", bfit_errmsg());
            return -1;
        }
        bfit_graph_fini(&g);
    }
    a->c.opt = bfit_optim_cfg_default(a->kind);
    if (a->mom_set)
        a->c.opt.momentum = a->momentum;
    if (bfit_optim_cfg_check(&a->c.opt) != BFIT_OK) {
        cli_lib_error();
        return -1;
    }
    return 0;
}

static int parse_args(int argc, char **argv, args *a, int *done)
{
    int o;
    long v;

    memset(a, 0, sizeof *a);
    a->c = bfit_find_cfg_default();
    a->kind = BFIT_OPT_SGD;
    *done = 0;
    opterr = 0;
    optind = 1;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        const char *name = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
        switch (o) {
        case O_MODEL: a->c.model = optarg; break;
        case O_DATA: a->c.data = optarg; break;
        case O_CSV_HEADER:
            if (bfit_csv_header_parse(optarg, &a->c.csv_header) != BFIT_OK) {
                cli_error("--csv-header: %s", bfit_errmsg());
                goto usage;
            }
            break;
        case O_AUGMENT: a->c.augment = 1; break;
        case O_NO_NORM: a->c.normalize = 0; break;
        case O_NO_PREFETCH: a->c.prefetch = 0; break;
        case O_MEMORY: if (cli_size("--memory", optarg, &a->c.memory)) goto usage; break;
        case O_MARGIN: if (cli_double("--margin", optarg, 0, 0.99, &a->c.probe.margin)) goto usage; break;
        case O_OPT:
            if (bfit_optim_kind_parse(optarg, &a->kind) != BFIT_OK) {
                cli_error("--optimizer: %s", bfit_errmsg());
                goto usage;
            }
            break;
        case O_MOM: if (cli_double("--momentum", optarg, 0, 0.999999, &a->momentum)) goto usage; a->mom_set = 1; break;
        case O_LIMIT: if (cli_int("--limit", optarg, 1, BFIT_BATCH_MAX, &v)) goto usage; a->c.limit = (int)v; break;
        case O_TOL: if (cli_double("--tolerance", optarg, 0, 0.99, &a->c.probe.tolerance)) goto usage; break;
        case O_WARMUP: if (cli_int("--warmup", optarg, 0, 1000, &v)) goto usage; a->c.probe.warmup = (int)v; break;
        case O_REPEATS: if (cli_int("--repeats", optarg, 1, 1000, &v)) goto usage; a->c.probe.repeats = (int)v; break;
        case O_DATA_THR:
            if (cli_double("--data-threshold", optarg, 0.001, 1, &a->c.probe.data_threshold)) goto usage;
            break;
        case O_LARGEST_ONLY: a->c.probe.ladder = 0; break;
        case O_THREADS: if (cli_int("--threads", optarg, 1, 1024, &v)) goto usage; a->c.threads = (int)v; break;
        case O_SEED: if (cli_int("--seed", optarg, 0, INT64_MAX, &v)) goto usage; a->c.seed = (uint64_t)v; break;
        case O_PLOT: a->plot = optarg; break;
        case O_DEVICE: if (cli_device_check("--device", optarg)) goto usage; a->c.device_name = optarg; break;
        case O_PRECISION: if (cli_storage_opt("--precision", optarg, &a->c.storage)) goto usage; break;
        case O_RECOMPUTE: if (cli_storage_opt("--recompute", optarg, &a->c.storage)) goto usage; break;
        case O_NO_LEAN: a->c.storage.lean = 0; break;
        case O_CONV:
            if (bfit_conv_algo_parse(optarg, &a->c.conv_algo) != BFIT_OK || a->c.conv_algo == BFIT_CONV_AUTO) {
                cli_error("--conv-algo: '%s': find takes fastest or lean (it reports the largest batch of one)", optarg);
                goto usage;
            }
            break;
        case O_JSON: a->json = 1; break;
        case O_HELP: help(); *done = 1; return EXIT_OK;
        default:
            cli_bad_option(name);
            goto usage;
        }
    }
    if (check_args(argc, argv, a))
        goto usage;
    return 0;
usage:
    *done = 1;
    return cli_usage_hint("find");
}

static const char *fmt(uint64_t b, char *buf) { return bfit_format_size(b, buf, 32); }

static bfit_shape input_shape(const bfit_probe_result *r)
{
    bfit_shape s = {.nd = r->input_nd, .d = {r->input_dims[0], r->input_dims[1], r->input_dims[2], r->input_dims[3]}};
    return s;
}



static const char *optim_desc(const bfit_optim_cfg *o, char *buf, size_t n)
{
    if (o->kind == BFIT_OPT_ADAMW)
        snprintf(buf, n, "adamw");
    else if (o->momentum > 0)
        snprintf(buf, n, "sgd (momentum %g)", o->momentum);
    else
        snprintf(buf, n, "sgd (no momentum)");
    return buf;
}

/* ---- human output -------------------------------------------------------- */

static void print_table(const bfit_probe_result *r)
{
    char b1[32], b2[32], b3[32], b4[32];

    printf("%7s  %13s  %13s  %10s  %10s  %9s\n", "batch", "planned peak", "measured peak", "samples/s", "step time",
           "data wait");
    for (int i = 0; i < r->nrungs; i++) {
        const bfit_probe_rung *g = &r->rungs[i];
        char mark[64] = "";
        if (i == r->recommended)
            strcat(mark, "  recommended");
        if (i == r->best)
            strcat(mark, i == r->recommended ? ", best" : "  best");
        if (g->m == r->largest)
            strcat(mark, *mark ? ", largest" : "  largest");
        printf("%7d  %13s  %13s  %10s  %10s  %8.0f%%%s\n", g->m, fmt(g->planned_peak, b1), fmt(g->measured_peak, b2),
               bfit_thousands(g->samples_per_s, b3, sizeof b3), bfit_format_secs(g->step_s, b4, sizeof b4), 100 * g->wait_share,
               mark);
    }
    if (r->next_refused)
        printf("%7d  %13s  %13s  %10s  %10s  %9s  refused\n", r->largest + 1, fmt(r->plan_next.peak, b1), "-", "-",
               "-", "-");
}

static void print_human(const args *a, const bfit_probe_result *r)
{
    char b1[32], b2[32], b3[32], b4[32], sh[32];
    int file = bfit_model_source_is_file(a->c.model);

    printf("batchfit find: %s (%s) on %s: %s parameters, input %s, %d thread%s\n", a->c.model,
           file ? (bfit_model_source_is_onnx(a->c.model) ? "ONNX file" : "spec file") : "preset", a->c.data, bfit_thousands((double)r->params, b1, sizeof b1),
           bfit_shape_str(input_shape(r), sh, sizeof sh), r->threads, r->threads == 1 ? "" : "s");
    if (r->data_note[0])
        printf("data: %s\n", r->data_note);
    printf("memory %s, margin %g%%: budget %s; optimizer %s; fixed part %s\n\n", fmt(r->capacity, b1),
           100 * a->c.probe.margin, fmt(r->budget, b2), optim_desc(&a->c.opt, b3, sizeof b3), fmt(r->p1.fixed, b4));

    if (r->nrungs) {
        print_table(r);
        putchar('\n');
    }

    printf("largest batch: %d", r->largest);
    if (r->plan_agrees) {
        printf(" (planned %s within the budget %s); confirmed: a real step ran at %d, measured peak %s",
               fmt(r->plan_largest.peak, b1), fmt(r->budget, b2), r->largest, fmt(r->measured_largest, b3));
        if (r->next_refused)
            printf(", and reserving %d (%s) was refused\n", r->largest + 1, fmt(r->plan_next.peak, b4));
        else
            printf("; %d is the limit searched (--limit, or the training set's size)\n", r->limit);
    } else {
        printf(" (from a search with real steps, since the plan was contradicted; measured peak %s)\n",
               fmt(r->measured_largest, b1));
    }
    if (r->nrungs) {
        const bfit_probe_rung *best = &r->rungs[r->best], *rec = &r->rungs[r->recommended];
        const bfit_probe_rung *top = &r->rungs[r->nrungs - 1];
        printf("fastest batch: %d, the smallest within %g%% of the best measured throughput (%s samples/s at %d); "
               "throughput stops growing there",
               rec->m, 100 * a->c.probe.tolerance, bfit_thousands(best->samples_per_s, b1, sizeof b1), best->m);
        if (top->samples_per_s < (1 - a->c.probe.tolerance) * best->samples_per_s)
            printf(", and at the largest batch it is %.0f%% lower than the best",
                   100 * (1 - top->samples_per_s / best->samples_per_s));
        printf("\n");
        {
            int noisy = -1;
            for (int i = 0; i < r->nrungs; i++)
                if (r->rungs[i].spread > 0.5 && (noisy < 0 || r->rungs[i].spread > r->rungs[noisy].spread))
                    noisy = i;
            if (noisy >= 0)
                printf("note: the measured steps at %d vary by %.0f%% of their median: something else is using the "
                       "CPU, and the medians may mislead (rerun with more --repeats, or fewer --threads)\n",
                       r->rungs[noisy].m, 100 * r->rungs[noisy].spread);
        }
        if (r->data_bound) {
            printf("data: %.0f%% of a step at %d waits for samples, over the %.0f%% threshold: the loader, not the "
                   "batch size, is the limit. ",
                   100 * r->data_share, rec->m, 100 * a->c.probe.data_threshold);
            if (!a->c.prefetch)
                printf("Turn prefetching on (drop --no-prefetch) so samples are made while the step computes.\n");
            else if (r->threads > 1)
                printf("The stream prefetches one take ahead on one thread, which shares the CPU with %d compute "
                       "threads: leave it a core (--threads %d)%s.\n",
                       r->threads, r->threads - 1, a->c.augment ? " or make samples cheaper (drop --augment)" : "");
            else
                printf("The stream prefetches one take ahead on one thread: give the run more cores%s.\n",
                       a->c.augment ? " or make samples cheaper (drop --augment)" : "");
        } else {
            printf("data: %.0f%% of a step at %d waits for samples (threshold %.0f%%): the loader keeps up\n",
                   100 * r->data_share, rec->m, 100 * a->c.probe.data_threshold);
        }
    }
    printf("real steps for the largest batch: %d (", r->largest_steps);
    if (r->plan_agrees)
        printf("a step at %d%s)", r->largest, r->largest < r->limit ? ", a refusal one up" : "");
    else
        printf("including a search with real steps)");
    printf("; a doubling-then-bisecting search with %d steps per trial needs %d (%d trial%s) to answer %d",
           BFIT_PROBE_SEARCH_STEPS, r->search_steps, r->search_trials, r->search_trials == 1 ? "" : "s",
           r->search_m);
    if (3 * r->largest_steps <= r->search_steps)
        printf(": find used %s a third of that\n", r->largest_steps * 3 == r->search_steps ? "exactly" : "less than");
    else
        printf(": MORE than a third of that\n");
    if (r->nrungs) {
        printf("real steps for the fastest batch: %d more (%d size%s x (%d warm-up + %d measured)); %d in all\n",
               r->ladder_steps, r->nrungs, r->nrungs == 1 ? "" : "s", a->c.probe.warmup, a->c.probe.repeats,
               r->largest_steps + r->ladder_steps);
    }
}

/* ---- JSON ---------------------------------------------------------------- */

static int print_json(const args *a, const bfit_probe_result *r)
{
    cJSON *root = cJSON_CreateObject(), *o, *arr;
    char sh[32];

    if (!root)
        return -1;
    cJSON_AddStringToObject(root, "model", a->c.model);
    cJSON_AddStringToObject(root, "source", bfit_model_source_is_file(a->c.model) ? "file" : "preset");
    cJSON_AddStringToObject(root, "data", a->c.data);
    cJSON_AddStringToObject(root, "input", bfit_shape_str(input_shape(r), sh, sizeof sh));
    cJSON_AddNumberToObject(root, "parameters", (double)r->params);
    cJSON_AddNumberToObject(root, "threads", r->threads);
    cJSON_AddStringToObject(root, "optimizer", bfit_optim_kind_name(a->c.opt.kind));
    if (a->c.opt.kind == BFIT_OPT_SGD)
        cJSON_AddNumberToObject(root, "momentum", a->c.opt.momentum);
    cJSON_AddNumberToObject(root, "memory", (double)r->capacity);
    cJSON_AddNumberToObject(root, "margin", a->c.probe.margin);
    cJSON_AddNumberToObject(root, "budget", (double)r->budget);
    cJSON_AddNumberToObject(root, "fixed", (double)r->p1.fixed);
    cJSON_AddNumberToObject(root, "limit", r->limit);

    o = cJSON_AddObjectToObject(root, "largest");
    cJSON_AddNumberToObject(o, "batch", r->largest);
    cJSON_AddNumberToObject(o, "planned", r->plan_m);
    cJSON_AddNumberToObject(o, "planned_peak", (double)r->plan_largest.peak);
    cJSON_AddNumberToObject(o, "measured_peak", (double)r->measured_largest);
    cJSON_AddBoolToObject(o, "next_refused", r->next_refused);
    if (r->largest < r->limit)
        cJSON_AddNumberToObject(o, "next_planned_peak", (double)r->plan_next.peak);
    cJSON_AddBoolToObject(o, "plan_agrees", r->plan_agrees);
    if (!r->plan_agrees)
        cJSON_AddStringToObject(o, "disagreement", r->disagreement);

    if (r->nrungs) {
        o = cJSON_AddObjectToObject(root, "fastest");
        cJSON_AddNumberToObject(o, "recommended", r->rungs[r->recommended].m);
        cJSON_AddNumberToObject(o, "best", r->rungs[r->best].m);
        cJSON_AddNumberToObject(o, "best_samples_per_s", r->rungs[r->best].samples_per_s);
        cJSON_AddNumberToObject(o, "tolerance", a->c.probe.tolerance);
        cJSON_AddNumberToObject(o, "data_wait_share", r->data_share);
        cJSON_AddNumberToObject(o, "data_threshold", a->c.probe.data_threshold);
        cJSON_AddBoolToObject(o, "data_bound", r->data_bound);
        arr = cJSON_AddArrayToObject(root, "ladder");
        for (int i = 0; i < r->nrungs; i++) {
            const bfit_probe_rung *g = &r->rungs[i];
            cJSON *e = cJSON_CreateObject();
            cJSON_AddItemToArray(arr, e);
            cJSON_AddNumberToObject(e, "batch", g->m);
            cJSON_AddNumberToObject(e, "planned_peak", (double)g->planned_peak);
            cJSON_AddNumberToObject(e, "measured_peak", (double)g->measured_peak);
            cJSON_AddNumberToObject(e, "samples_per_s", g->samples_per_s);
            cJSON_AddNumberToObject(e, "step_seconds", g->step_s);
            cJSON_AddNumberToObject(e, "step_spread", g->spread);
            cJSON_AddNumberToObject(e, "data_wait_share", g->wait_share);
        }
    }
    o = cJSON_AddObjectToObject(root, "steps");
    cJSON_AddNumberToObject(o, "largest", r->largest_steps);
    cJSON_AddNumberToObject(o, "ladder", r->ladder_steps);
    cJSON_AddNumberToObject(o, "total", r->largest_steps + r->ladder_steps);
    cJSON_AddNumberToObject(o, "search_trials", r->search_trials);
    cJSON_AddNumberToObject(o, "search_steps", r->search_steps);
    cJSON_AddNumberToObject(o, "search_answer", r->search_m);

    return cli_json_print(root);
}

static int save_chart(const args *a, const bfit_probe_result *r)
{
    if (bfit_probe_chart_save(a->plot, a->c.model, a->c.probe.tolerance, a->c.probe.margin, r) == BFIT_OK)
        return 0;
    cli_error("--plot %s", bfit_errmsg()); /* the message starts with the path */
    return -1;
}

/* ---- the command --------------------------------------------------------- */

static int explain_failure(const args *a, const bfit_probe_result *r, int rc)
{
    char b1[32], b2[32], hint[160] = "";
    double margin = a->c.probe.margin;

    if (rc != BFIT_ENOMEM || r->no_fit == BFIT_PROBE_FITS) {
        cli_lib_error();
        return EXIT_FAIL;
    }
    if (r->p1.bytes[BFIT_MEM_OPTIMIZER])
        snprintf(hint, sizeof hint, ", or hold no optimizer state (%s of it): --optimizer sgd --momentum 0",
                 fmt(r->p1.bytes[BFIT_MEM_OPTIMIZER], b1));
    if (margin > 0)
        cli_error("%s: %s; give --memory of at least %s for batch 1 (%s with --margin 0)%s", a->c.model, bfit_errmsg(),
                  fmt(bfit_capacity_for(r->p1.peak + r->held_other, margin), b1), fmt(r->p1.peak + r->held_other, b2), hint);
    else
        cli_error("%s: %s; give --memory of at least %s for batch 1%s", a->c.model, bfit_errmsg(),
                  fmt(r->p1.peak + r->held_other, b1), hint);
    return EXIT_FAIL;
}

int cmd_find(int argc, char **argv)
{
    args a;
    bfit_probe_result *r;
    int done, ret, rc;

    ret = parse_args(argc, argv, &a, &done);
    if (done)
        return ret;
    r = calloc(1, sizeof *r);
    if (!r) {
        cli_error("out of host memory");
        return EXIT_FAIL;
    }
    rc = bfit_probe_find(&a.c, r);
    if (rc != BFIT_OK) {
        ret = explain_failure(&a, r, rc);
        goto out;
    }
    if (a.json) {
        if (print_json(&a, r)) {
            cli_error("out of host memory");
            ret = EXIT_FAIL;
            goto out;
        }
    } else {
        print_human(&a, r);
    }
    fflush(stdout);
    ret = EXIT_OK;
    if (a.plot) {
        if (save_chart(&a, r))
            ret = EXIT_FAIL;
        else if (!a.json)
            printf("chart: %s\n", a.plot);
    }
    if (!r->plan_agrees) {
        cli_error("THE MEMORY PLAN DISAGREES WITH A REAL STEP: %s. This is a bug in batchfit: please report it with "
                  "this output. The largest batch printed comes from a doubling-then-bisecting search with real "
                  "steps, not from the plan.",
                  r->disagreement);
        ret = EXIT_FAIL;
    }
out:
    free(r);
    return ret;
}
