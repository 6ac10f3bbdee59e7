/* cmd_find.c - `batchfit find`: the largest batch that fits (planned, then
 * confirmed by real steps) and the batch that trains fastest (measured), as
 * a table, two answers, JSON, and an SVG chart. The probe is the library's
 * (batch/probe.h); this file parses options and reports. */
#include "base/err.h"
#include "batch/probe.h"
#include "base/atomic.h"
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
         "  --model PRESET|FILE   a preset (mlp, cnn, resnet18, resnet50, vgg16) or a\n"
         "                        model spec file (docs/model-spec.md)\n"
         "  --data NAME|PATH      fashion-mnist (default), an MNIST-format directory,\n"
         "                        IMAGES,LABELS IDX files, a CSV file, or synthetic\n"
         "                        (random samples of the model's input shape)\n"
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
    O_TOL, O_WARMUP, O_REPEATS, O_DATA_THR, O_LARGEST_ONLY, O_THREADS, O_SEED, O_PLOT, O_JSON, O_HELP
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
    {0, 0, 0, 0}};

typedef struct args {
    bfit_find_cfg c;
    const char *plot;
    int json, mom_set;
    double momentum;
    bfit_opt_kind kind;
} args;

/* Returns 0 to go on, or sets *done and returns the exit code. */
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
        case O_LIMIT: if (cli_int("--limit", optarg, 1, 1 << 24, &v)) goto usage; a->c.limit = (int)v; break;
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
        case O_JSON: a->json = 1; break;
        case O_HELP: help(); *done = 1; return EXIT_OK;
        default:
            cli_bad_option(name);
            goto usage;
        }
    }
    if (cli_no_extra(argc, argv))
        goto usage;
    if (!a->c.model) {
        cli_error("--model is required: a preset (mlp, cnn, resnet18, resnet50, vgg16) or a spec file, "
                  "e.g. --model cnn");
        goto usage;
    }
    if (a->mom_set && a->kind != BFIT_OPT_SGD) {
        cli_error("--momentum applies to --optimizer sgd (AdamW's state is always two tensors per parameter)");
        goto usage;
    }
    if (a->plot && !*a->plot) {
        cli_error("--plot needs a file name, e.g. --plot find.svg");
        goto usage;
    }
    if (a->plot && !a->c.probe.ladder) {
        cli_error("--plot draws the throughput measurement, which --largest-only skips: drop one of them");
        goto usage;
    }
    if (!bfit_model_source_is_file(a->c.model)) {
        /* an unknown preset is a usage error; a spec that fails to load is not */
        bfit_graph_desc g;
        if (bfit_model_source_load(a->c.model, &g) != BFIT_OK) {
            cli_error("--model: %s", bfit_errmsg());
            goto usage;
        }
        bfit_graph_fini(&g);
    }
    a->c.opt = bfit_optim_cfg_default(a->kind);
    if (a->mom_set)
        a->c.opt.momentum = a->momentum;
    if (bfit_optim_cfg_check(&a->c.opt) != BFIT_OK) {
        cli_error("%s", bfit_errmsg());
        goto usage;
    }
    return 0;
usage:
    *done = 1;
    return cli_usage_hint("find");
}

static const char *fmt(uint64_t b, char *buf) { return bfit_format_size(b, buf, 32); }

/* 1863690 -> "1,863,690" */
static const char *thousands(double x, char *buf, size_t n)
{
    char t[32];
    int len = snprintf(t, sizeof t, "%.0f", x), j = 0;
    for (int i = 0; i < len && (size_t)j + 2 < n; i++) {
        if (i > 0 && t[i - 1] != '-' && (len - i) % 3 == 0)
            buf[j++] = ',';
        buf[j++] = t[i];
    }
    buf[j] = '\0';
    return buf;
}

static const char *fmt_secs(double s, char *buf, size_t n)
{
    if (s < 1e-3)
        snprintf(buf, n, "%.0f us", s * 1e6);
    else if (s < 1)
        snprintf(buf, n, "%.2f ms", s * 1e3);
    else
        snprintf(buf, n, "%.2f s", s);
    return buf;
}

/* The smallest --memory whose budget under this margin holds need bytes. */
static uint64_t memory_for(uint64_t need, double margin)
{
    uint64_t m = (uint64_t)((double)need / (1.0 - margin));
    while (bfit_plan_budget(m, margin) < need)
        m++;
    while (m > need && bfit_plan_budget(m - 1, margin) >= need)
        m--;
    return m;
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
               thousands(g->samples_per_s, b3, sizeof b3), fmt_secs(g->step_s, b4, sizeof b4), 100 * g->wait_share,
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
           file ? "spec file" : "preset", a->c.data, thousands((double)r->params, b1, sizeof b1),
           bfit_shape_str(r->input, sh, sizeof sh), r->threads, r->threads == 1 ? "" : "s");
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
               rec->m, 100 * a->c.probe.tolerance, thousands(best->samples_per_s, b1, sizeof b1), best->m);
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
    char sh[32], *s;

    if (!root)
        return -1;
    cJSON_AddStringToObject(root, "model", a->c.model);
    cJSON_AddStringToObject(root, "source", bfit_model_source_is_file(a->c.model) ? "file" : "preset");
    cJSON_AddStringToObject(root, "data", a->c.data);
    cJSON_AddStringToObject(root, "input", bfit_shape_str(r->input, sh, sizeof sh));
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

    s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!s)
        return -1;
    puts(s);
    cJSON_free(s);
    return 0;
}

/* ---- the chart ----------------------------------------------------------- */

#define W 760
#define PL 86   /* plot area left */
#define PR 700  /* plot area right */
#define T1 70   /* throughput panel top, bottom */
#define B1 270
#define T2 330  /* memory panel top, bottom */
#define B2 530
#define H 600

typedef struct axis {
    double lo, hi;   /* data range */
    double px0, px1; /* pixels for lo, hi */
} axis;

static double ax(const axis *a, double v) { return a->px0 + (v - a->lo) / (a->hi - a->lo) * (a->px1 - a->px0); }

/* A step of 1, 2 or 5 times a power of ten giving about n ticks to max. */
static double nice_step(double max, int n)
{
    double raw = max / n, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '&')
            fputs("&amp;", f);
        else if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else
            fputc(*s, f);
    }
}

/* Units that keep memory tick labels short. */
static void mem_unit(uint64_t max, double *div, const char **name)
{
    if (max >= (3ull << 30)) {
        *div = 1024.0 * 1024 * 1024;
        *name = "GiB";
    } else if (max >= (3ull << 20)) {
        *div = 1024.0 * 1024;
        *name = "MiB";
    } else {
        *div = 1024;
        *name = "KiB";
    }
}

static void y_ticks(FILE *f, const axis *y, double step, double div, int decimals)
{
    char b[32];
    for (double v = 0; v <= y->hi * 1.0001; v += step) {
        double py = ax(y, v);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", PL, py, PR, py);
        if (decimals)
            snprintf(b, sizeof b, "%.*f", decimals, v / div);
        else
            thousands(v / div, b, sizeof b);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" class=\"tick\">%s</text>\n", PL - 6, py + 4, b);
    }
}

static void x_ticks(FILE *f, const axis *x, int top, int bottom, int labels, int largest)
{
    double last_label = -1e9;
    for (int64_t m = 1; m <= largest; m *= 2) {
        double px = ax(x, log2((double)m));
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e4e4e4\"/>\n", px, top, px, bottom);
        /* keep labels apart; the largest gets its own below */
        if (labels && px - last_label >= 30 && ax(x, log2((double)largest)) - px >= 30) {
            fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" class=\"tick\">%lld</text>\n", px, bottom + 16,
                    (long long)m);
            last_label = px;
        }
    }
    if (labels)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" class=\"tick\">%d</text>\n",
                ax(x, log2((double)largest)), bottom + 16, largest);
}

static void write_svg(FILE *f, const args *a, const bfit_probe_result *r)
{
    axis x, y1, y2;
    double best = r->rungs[r->best].samples_per_s, tol = a->c.probe.tolerance, div, step;
    uint64_t mmax = r->capacity;
    const char *unit;
    char b1[32], b2[32];
    int rec = r->rungs[r->recommended].m, dec;

    x.lo = -0.4;
    x.hi = log2((double)r->largest + 1) + 0.4;
    x.px0 = PL;
    x.px1 = PR;
    y1.lo = 0;
    step = nice_step(best * 1.1, 5);
    y1.hi = ceil(best * 1.1 / step) * step;
    y1.px0 = B1;
    y1.px1 = T1;

    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n", W, H, W, H);
    fprintf(f, "<style>.tick{fill:#444;font-size:11px}.lab{fill:#222}.title{font-size:15px;font-weight:bold}"
               ".note{font-size:11px}</style>\n");
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text x=\"%d\" y=\"24\" class=\"title\">batchfit find: ", PL);
    xml_text(f, a->c.model);
    fprintf(f, ", memory %s, budget %s</text>\n", fmt(r->capacity, b1), fmt(r->budget, b2));
    fprintf(f, "<text x=\"%d\" y=\"42\" class=\"note\">%d thread%s; largest batch %d, recommended %d (the "
               "smallest within %g%% of the best throughput)</text>\n", PL, r->threads, r->threads == 1 ? "" : "s",
            r->largest, rec, 100 * tol);

    /* throughput panel */
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"lab\" font-weight=\"bold\">training throughput (samples/s, "
               "forward + backward, median)</text>\n", PL, T1 - 8);
    y_ticks(f, &y1, step, 1, 0);
    x_ticks(f, &x, T1, B1, 1, r->largest);
    fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"#2ca02c\" fill-opacity=\"0.12\"/>\n", PL,
            ax(&y1, best), PR - PL, ax(&y1, best * (1 - tol)) - ax(&y1, best));
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"note\" fill=\"#2a7a2a\">within %g%% of the best</text>\n",
            PL + 6, ax(&y1, best) - 5, 100 * tol);
    fprintf(f, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"");
    for (int i = 0; i < r->nrungs; i++)
        fprintf(f, "%.1f,%.1f ", ax(&x, log2(r->rungs[i].m)), ax(&y1, r->rungs[i].samples_per_s));
    fprintf(f, "\"/>\n");
    for (int i = 0; i < r->nrungs; i++)
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#1f77b4\"/>\n", ax(&x, log2(r->rungs[i].m)),
                ax(&y1, r->rungs[i].samples_per_s));
    {
        double px = ax(&x, log2(rec)), py = ax(&y1, r->rungs[r->recommended].samples_per_s);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#2ca02c\" stroke-width=\"1.5\" "
                   "stroke-dasharray=\"5,4\"/>\n", px, T1, px, B1);
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"6\" fill=\"none\" stroke=\"#2ca02c\" stroke-width=\"2\"/>\n",
                px, py);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"%s\" class=\"note\" fill=\"#2a7a2a\">recommended %d"
                   "</text>\n", px + (px > (PL + PR) / 2 ? -5 : 5), B1 - 8, px > (PL + PR) / 2 ? "end" : "start", rec);
    }
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#222\"/>\n", PL, B1, PR, B1);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#222\"/>\n", PL, T1, PL, B1);

    /* memory panel */
    mem_unit(mmax, &div, &unit);
    y2.lo = 0;
    step = nice_step((double)mmax * 1.05 / div, 5);
    y2.hi = ceil((double)mmax * 1.05 / div / step) * step * div;
    y2.px0 = B2;
    y2.px1 = T2;
    dec = step < 1 ? 1 : 0;
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"lab\" font-weight=\"bold\">memory of a training step (%s)</text>\n",
            PL, T2 - 8, unit);
    y_ticks(f, &y2, step * div, div, dec);
    x_ticks(f, &x, T2, B2, 1, r->largest);
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#888\" stroke-dasharray=\"2,3\"/>\n", PL,
            ax(&y2, (double)r->capacity), PR, ax(&y2, (double)r->capacity));
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"note\" fill=\"#555\">memory %s</text>\n", PL + 6,
            ax(&y2, (double)r->capacity) - 4, fmt(r->capacity, b1));
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#d62728\" stroke-dasharray=\"6,4\"/>\n", PL,
            ax(&y2, (double)r->budget), PR, ax(&y2, (double)r->budget));
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"note\" fill=\"#b22222\">budget %s (memory less the %g%% "
               "margin)</text>\n", PL + 6, ax(&y2, (double)r->budget) + 14, fmt(r->budget, b1),
            100 * a->c.probe.margin);
    fprintf(f, "<polyline fill=\"none\" stroke=\"#ff7f0e\" stroke-width=\"2\" points=\"");
    for (int i = 0; i < r->nrungs; i++)
        fprintf(f, "%.1f,%.1f ", ax(&x, log2(r->rungs[i].m)), ax(&y2, (double)r->rungs[i].planned_peak));
    fprintf(f, "\"/>\n");
    for (int i = 0; i < r->nrungs; i++) {
        double px = ax(&x, log2(r->rungs[i].m)), py = ax(&y2, (double)r->rungs[i].measured_peak);
        fprintf(f, "<path d=\"M%.1f,%.1f l8,8 m0,-8 l-8,8\" stroke=\"#222\" stroke-width=\"1.5\"/>\n", px - 4, py - 4);
    }
    {
        double px = ax(&x, log2(r->largest));
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#d62728\" stroke-width=\"1.5\" "
                   "stroke-dasharray=\"5,4\"/>\n", px, T2, px, B2);
        if (r->largest < r->limit)
            fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"end\" class=\"note\" fill=\"#b22222\">largest %d "
                       "(%d was refused)</text>\n", px - 5, B2 - 8, r->largest, r->largest + 1);
        else
            fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"end\" class=\"note\" fill=\"#b22222\">largest %d "
                       "(the limit)</text>\n", px - 5, B2 - 8, r->largest);
    }
    /* legend, in the lower left where the peaks are small */
    fprintf(f, "<g class=\"note\" transform=\"translate(%d,%d)\">"
               "<line x1=\"0\" y1=\"0\" x2=\"22\" y2=\"0\" stroke=\"#ff7f0e\" stroke-width=\"2\"/>"
               "<text x=\"28\" y=\"4\">planned peak</text>"
               "<path d=\"M7,14 l8,8 m0,-8 l-8,8\" stroke=\"#222\" stroke-width=\"1.5\"/>"
               "<text x=\"28\" y=\"22\">measured peak of a real step</text></g>\n",
            PL + 14, T2 + (B2 - T2) * 2 / 5);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#222\"/>\n", PL, B2, PR, B2);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#222\"/>\n", PL, T2, PL, B2);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" class=\"lab\">micro-batch size (log2 scale)</text>\n",
            (PL + PR) / 2, B2 + 40);
    fprintf(f, "</svg>\n");
}

/* Write the chart beside path under a temporary name, sync, rename: never
 * half a file. */
static int save_svg(const char *path, const args *a, const bfit_probe_result *r)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    bfit_atomic_file af;
    int rc;

    if (!mem) {
        cli_error("--plot %s: out of host memory", path);
        return -1;
    }
    write_svg(mem, a, r);
    if (fclose(mem) != 0 || !buf) {
        cli_error("--plot %s: out of host memory", path);
        free(buf);
        return -1;
    }
    rc = bfit_atomic_open(&af, path);
    if (rc == BFIT_OK)
        rc = bfit_atomic_write(&af, buf, len);
    if (rc == BFIT_OK)
        rc = bfit_atomic_commit(&af);
    if (rc != BFIT_OK)
        cli_error("--plot %s", bfit_errmsg());
    free(buf);
    return rc == BFIT_OK ? 0 : -1;
}

/* ---- the command --------------------------------------------------------- */

static int explain_failure(const args *a, const bfit_probe_result *r, int rc)
{
    char b1[32], b2[32], hint[160] = "";
    double margin = a->c.probe.margin;

    if (rc != BFIT_ENOMEM || r->no_fit == BFIT_PROBE_FITS) {
        cli_error("%s", bfit_errmsg());
        return EXIT_FAIL;
    }
    if (r->p1.bytes[BFIT_MEM_OPTIMIZER])
        snprintf(hint, sizeof hint, ", or hold no optimizer state (%s of it): --optimizer sgd --momentum 0",
                 fmt(r->p1.bytes[BFIT_MEM_OPTIMIZER], b1));
    if (margin > 0)
        cli_error("%s: %s; give --memory of at least %s for batch 1 (%s with --margin 0)%s", a->c.model, bfit_errmsg(),
                  fmt(memory_for(r->p1.peak + r->held_other, margin), b1), fmt(r->p1.peak + r->held_other, b2), hint);
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
        if (save_svg(a.plot, &a, r))
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
