/* cmd_plan.c - `batchfit plan`: the memory of a training (or eval) step per
 * category, its fixed and per-sample parts, what buffer reuse saves, and the
 * largest batch that fits, for a preset or a spec file. Plans only: the
 * model is built on a device but nothing is ever reserved. */
#include "base/err.h"
#include "batch/plan.h"
#include "batch/solve.h"
#include "batch/ways.h"
#include "base/text.h"
#include "cli/cli.h"
#include "nn/zoo.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLAN_LIMIT BFIT_PLAN_LIMIT
#define MAX_BATCHES BFIT_PLAN_REPORT_MAX
#define WS_WHY " (oneDNN picks its algorithms, and so their scratch, by batch size and thread count)"

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
         "  --seq N               token models: sequences of N tokens (default: the\n"
         "                        model's input; at most its positions)\n"
         "  --attention stored|lean  token models: keep each attention matrix for\n"
         "                        backward (stored, default) or only a log-sum-exp per\n"
         "                        row, recomputing the matrix in backward (lean)\n"
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

enum {
    O_MODEL = 256, O_MEMORY, O_MARGIN, O_BATCH, O_OPT, O_MOM, O_EVAL, O_THREADS, O_JSON, O_HELP, O_DEVICE, O_CONV,
    O_PRECISION, O_RECOMPUTE, O_NO_LEAN, O_WAYS, O_MEASURE, O_SEQ, O_ATTN
};

static const struct option opts[] = {
    {"model", required_argument, 0, O_MODEL},   {"memory", required_argument, 0, O_MEMORY},
    {"margin", required_argument, 0, O_MARGIN}, {"batch", required_argument, 0, O_BATCH},
    {"optimizer", required_argument, 0, O_OPT}, {"momentum", required_argument, 0, O_MOM},
    {"eval", no_argument, 0, O_EVAL},           {"threads", required_argument, 0, O_THREADS},
    {"json", no_argument, 0, O_JSON},           {"help", no_argument, 0, O_HELP},
    {"device", required_argument, 0, O_DEVICE}, {"conv-algo", required_argument, 0, O_CONV},
    {"precision", required_argument, 0, O_PRECISION}, {"recompute", required_argument, 0, O_RECOMPUTE},
    {"no-lean", no_argument, 0, O_NO_LEAN},     {"ways", no_argument, 0, O_WAYS},
    {"measure", no_argument, 0, O_MEASURE},
    {"seq", required_argument, 0, O_SEQ},       {"attention", required_argument, 0, O_ATTN},
    {0, 0, 0, 0}};

typedef struct args {
    const char *model, *device;
    bfit_conv_algo conv;
    uint64_t memory;
    double margin, momentum;
    int mom_set, eval, threads, json, ways, measure;
    int seq, lean, attn_set;
    bfit_opt_kind kind;
    bfit_storage st;
    int batch[MAX_BATCHES], nbatch;
} args;

/* Everything computed, for either printer: the library's analysis, and
 * what the command line asked. */
typedef struct report {
    const args *a;
    bfit_model *M;
    const bfit_optim_cfg *opt;  /* NULL for eval */
    bfit_plan_report pr;
} report;

static int cmp_int(const void *x, const void *y) { return *(const int *)x - *(const int *)y; }

/* "1,32,64" -> sorted distinct sizes. */
static int parse_batches(const char *s, args *a)
{
    char buf[256], *tok, *save = NULL;
    long v;

    if (strlen(s) >= sizeof buf || !*s) {
        cli_error("--batch: expected a list of batch sizes like 1,32,64, got '%s'", s);
        return -1;
    }
    strcpy(buf, s);
    a->nbatch = 0;
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (a->nbatch == MAX_BATCHES) {
            cli_error("--batch: at most %d sizes, got more in '%s'", MAX_BATCHES, s);
            return -1;
        }
        if (cli_int("--batch", tok, 1, PLAN_LIMIT, &v))
            return -1;
        a->batch[a->nbatch++] = (int)v;
    }
    if (!a->nbatch || s[strlen(s) - 1] == ',' || s[0] == ',' || strstr(s, ",,")) {
        cli_error("--batch: expected a list of batch sizes like 1,32,64, got '%s'", s);
        return -1;
    }
    qsort(a->batch, (size_t)a->nbatch, sizeof a->batch[0], cmp_int);
    {
        int n = 1;
        for (int i = 1; i < a->nbatch; i++)
            if (a->batch[i] != a->batch[n - 1])
                a->batch[n++] = a->batch[i];
        a->nbatch = n;
    }
    return 0;
}

/* Returns 0 to go on, or the exit code (help: 0 after printing it). */
static int parse_args(int argc, char **argv, args *a, int *done)
{
    int o;
    long v;

    memset(a, 0, sizeof *a);
    a->margin = 0.1;
    a->kind = BFIT_OPT_SGD;
    a->st = bfit_storage_default();
    *done = 0;
    opterr = 0;
    optind = 1;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        const char *name = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
        switch (o) {
        case O_MODEL: a->model = optarg; break;
        case O_MEMORY: if (cli_size("--memory", optarg, &a->memory)) goto usage; break;
        case O_MARGIN: if (cli_double("--margin", optarg, 0, 0.99, &a->margin)) goto usage; break;
        case O_BATCH: if (parse_batches(optarg, a)) goto usage; break;
        case O_OPT:
            if (bfit_optim_kind_parse(optarg, &a->kind) != BFIT_OK) {
                cli_error("--optimizer: %s", bfit_errmsg());
                goto usage;
            }
            break;
        case O_MOM: if (cli_double("--momentum", optarg, 0, 0.999999, &a->momentum)) goto usage; a->mom_set = 1; break;
        case O_EVAL: a->eval = 1; break;
        case O_THREADS: if (cli_int("--threads", optarg, 1, 1024, &v)) goto usage; a->threads = (int)v; break;
        case O_JSON: a->json = 1; break;
        case O_DEVICE: if (cli_device_check("--device", optarg)) goto usage; a->device = optarg; break;
        case O_CONV: if (bfit_conv_algo_parse(optarg, &a->conv) != BFIT_OK) { cli_lib_error(); goto usage; } break;
        case O_PRECISION: if (cli_storage_opt("--precision", optarg, &a->st)) goto usage; break;
        case O_RECOMPUTE: if (cli_storage_opt("--recompute", optarg, &a->st)) goto usage; break;
        case O_NO_LEAN: a->st.lean = 0; break;
        case O_WAYS: a->ways = 1; break;
        case O_MEASURE: a->measure = 1; break;
        case O_SEQ: if (cli_int("--seq", optarg, 1, 1 << 24, &v)) goto usage; a->seq = (int)v; break;
        case O_ATTN:
            if (strcmp(optarg, "stored") && strcmp(optarg, "lean")) {
                cli_error("--attention: expected stored or lean, got '%s'", optarg);
                goto usage;
            }
            a->lean = strcmp(optarg, "lean") == 0;
            a->attn_set = 1;
            break;
        case O_HELP: help(); *done = 1; return EXIT_OK;
        default:
            cli_bad_option(name);
            goto usage;
        }
    }
    if (cli_no_extra(argc, argv))
        goto usage;
    if (!a->model) {
        cli_error("--model is required: a preset (mlp, cnn, resnet18, resnet50, vgg16, gpt-nano, gpt2, bert-base) "
                  "or a spec file, e.g. --model resnet50");
        goto usage;
    }
    if (a->mom_set && a->kind != BFIT_OPT_SGD) {
        cli_error("--momentum applies to --optimizer sgd (AdamW's state is always two tensors per parameter)");
        goto usage;
    }
    if (a->measure && !a->ways) {
        cli_error("--measure times the rows of --ways: give --ways too");
        goto usage;
    }
    if (a->ways && (a->eval || a->nbatch || a->st.recompute || a->st.precision || !a->st.lean)) {
        cli_error("--ways plans its own rows of training steps: drop --eval, --batch, --precision, --recompute "
                  "and --no-lean");
        goto usage;
    }
    if (a->eval && a->mom_set) {
        cli_error("--momentum has no effect with --eval, which plans no optimizer: drop one of them");
        goto usage;
    }
    return 0;
usage:
    *done = 1;
    return cli_usage_hint("plan");
}

static int state_tensors(const bfit_optim_cfg *o)
{
    if (!o)
        return 0;
    return o->kind == BFIT_OPT_ADAMW ? 2 : o->momentum > 0 ? 1 : 0;
}

static const char *fmt(uint64_t b, char *buf, size_t n) { return bfit_format_size(b, buf, n); }

static int threads_of(const bfit_device *d)
{
    bfit_device_info i;
    bfit_device_info_get(d, &i);
    return i.threads;
}

/* Sizes with a sign and fractions (slopes, deviations). */
static const char *fmt_d(double b, char *buf, size_t n)
{
    char t[32];
    if (b < 0) {
        snprintf(buf, n, "-%s", bfit_format_size((uint64_t)(-b + 0.5), t, sizeof t));
        return buf;
    }
    return bfit_format_size((uint64_t)(b + 0.5), buf, n);
}

/* Categories in the order shown: the fixed part, then what grows with m. */
static const bfit_mem_cat rows[] = {BFIT_MEM_PARAMS,      BFIT_MEM_GRADS,     BFIT_MEM_OPTIMIZER,
                                    BFIT_MEM_OTHER,       BFIT_MEM_ACTIVATIONS, BFIT_MEM_ACT_GRADS,
                                    BFIT_MEM_WORKSPACE,   BFIT_MEM_INPUT};
#define NROWS ((int)(sizeof rows / sizeof rows[0]))
#define NFIXED 4

static const char *row_name(bfit_mem_cat c) { return c == BFIT_MEM_OTHER ? "statistics" : bfit_mem_cat_name(c); }


/* Precision, lean, recomputation (auto: what it chose) and the share of
 * the step's work recomputed at the largest batch shown. */
static void print_storage(const report *r)
{
    bfit_storage st = bfit_model_storage(r->M);
    const bfit_plan *p = &r->pr.shown[r->pr.nshown - 1];
    printf("storage: %s%s, recompute %s", bfit_dtype_name(st.precision), st.lean ? " lean" : "",
           bfit_recompute_name(r->a->st.recompute));
    if (r->a->st.recompute == BFIT_RECOMPUTE_AUTO)
        printf(" (chose the values to keep: %s)", bfit_recompute_name(st.recompute));
    if (!r->a->eval)
        printf("; recomputed work at m=%d: %.1f%% of the step", p->m, p->flops > 0 ? 100 * p->regen_flops / p->flops : 0.0);
    printf("\n\n");
}

static void print_human(const report *r)
{
    const args *a = r->a;
    char b1[32], b2[32], b3[32], sh[32];
    uint64_t fixed = r->pr.p1.fixed;
    int file = bfit_model_source_is_file(a->model);

    if (r->M->input_dtype == BFIT_I32)
        snprintf(sh, sizeof sh, "%d tokens", r->M->input.d[0]);
    else
        bfit_shape_str(r->M->input, sh, sizeof sh);
    printf("batchfit plan: %s (%s), input %s, %d classes%s, %s parameters\n", a->model,
           file ? (bfit_model_source_is_onnx(a->model) ? "ONNX file" : "spec file") : "preset",
           sh, r->M->nclasses, r->M->labels_per_sample > 1 ? " per token" : "",
           bfit_thousands((double)bfit_model_param_count(r->M), b1, sizeof b1));
    if (r->M->input_dtype == BFIT_I32)
        printf("a sample is a sequence of %d tokens; attention %s\n", r->M->input.d[0],
               a->lean ? "lean (a log-sum-exp per row kept, the matrix recomputed in backward)"
                       : "stored (each head's T x T probabilities kept for backward)");
    if (a->eval)
        printf("inference step (--eval): parameters only, no gradients or optimizer state\n");
    else if (r->opt->kind == BFIT_OPT_ADAMW)
        printf("training step, optimizer adamw: 2 state tensors per parameter\n");
    else if (r->opt->momentum > 0)
        printf("training step, optimizer sgd with momentum %g: 1 state tensor per parameter\n", r->opt->momentum);
    else
        printf("training step, optimizer sgd without momentum: no optimizer state\n");
    printf("memory %s, margin %g%%: budget %s; workspaces sized for %d threads\n", fmt(a->memory, b1, sizeof b1),
           100 * a->margin, fmt(r->pr.budget, b2, sizeof b2), threads_of(r->M->dev));
    print_storage(r);

    printf("%-14s %11s %11s", "category", "fixed", "per sample");
    for (int i = 0; i < r->pr.nshown; i++) {
        char h[24];
        snprintf(h, sizeof h, "m=%d", r->pr.shown[i].m);
        printf(" %11s", h);
    }
    putchar('\n');
    for (int k = 0; k < NROWS; k++) {
        bfit_mem_cat c = rows[k];
        int is_fixed = k < NFIXED;
        printf("%-14s %11s %11s", row_name(c), is_fixed ? fmt(r->pr.p1.bytes[c], b1, sizeof b1) : "-",
               is_fixed ? "-" : fmt_d(r->pr.line.cat_slope[c], b2, sizeof b2));
        for (int i = 0; i < r->pr.nshown; i++)
            printf(" %11s", fmt(r->pr.shown[i].bytes[c], b3, sizeof b3));
        putchar('\n');
    }
    printf("%-14s %11s %11s", "peak", fmt(fixed, b1, sizeof b1), fmt_d(r->pr.line.slope, b2, sizeof b2));
    for (int i = 0; i < r->pr.nshown; i++)
        printf(" %11s", fmt(r->pr.shown[i].peak, b3, sizeof b3));
    printf("\n%-14s %11s %11s", "without reuse", "", "");
    for (int i = 0; i < r->pr.nshown; i++)
        printf(" %11s", fmt(r->pr.shown[i].no_reuse, b3, sizeof b3));
    printf("\n%-14s %11s %11s", "reuse saves", "", "");
    for (int i = 0; i < r->pr.nshown; i++)
        printf(" %11s", fmt(r->pr.shown[i].no_reuse - r->pr.shown[i].peak, b3, sizeof b3));
    printf("\n%-14s %11s %11s", "fits", "", "");
    for (int i = 0; i < r->pr.nshown; i++)
        printf(" %11s", r->pr.shown[i].peak <= r->pr.budget ? "yes" : r->pr.shown[i].peak <= a->memory ? "in margin" : "NO");
    printf("\n\n");

    printf("per sample: measured between m=%d and m=%d; ", r->pr.line.m1, r->pr.line.m2);
    if (!r->pr.affine)
        printf("the plan is not affine: at m=%d it is %s %s that line, mostly in %s%s\n", r->pr.line.dev_m,
               fmt(r->pr.line.max_dev, b1, sizeof b1), r->pr.dev_signed < 0 ? "below" : "above",
               bfit_mem_cat_name(r->pr.dev_cat), r->pr.dev_cat == BFIT_MEM_WORKSPACE ? WS_WHY : "");
    else if (r->pr.affine1)
        printf("the plan is affine: peak = %s + m x %s (within %s)\n", fmt_d(r->pr.line.intercept, b1, sizeof b1),
               fmt_d(r->pr.line.slope, b2, sizeof b2), fmt(r->pr.line.max_dev, b3, sizeof b3));
    else
        printf("the plan is affine from m=2: peak = %s + m x %s (within %s);\n  at m=1 it is %s %s that line, "
               "mostly in %s%s\n",
               fmt_d(r->pr.line.intercept, b1, sizeof b1), fmt_d(r->pr.line.slope, b2, sizeof b2),
               fmt(r->pr.line.max_dev, b3, sizeof b3), fmt_d(r->pr.dev1 < 0 ? -r->pr.dev1 : r->pr.dev1, sh, sizeof sh),
               r->pr.dev1 < 0 ? "below" : "above", bfit_mem_cat_name(r->pr.dev1_cat),
               r->pr.dev1_cat == BFIT_MEM_WORKSPACE ? WS_WHY : "");
    if (r->pr.m_margin == 0)
        printf("largest batch: none fits in the budget %s (batch 1 needs %s)", fmt(r->pr.budget, b1, sizeof b1),
               fmt(r->pr.p1.peak, b2, sizeof b2));
    else
        printf("largest batch: %d%s within the budget %s (memory less the %g%% margin)", r->pr.m_margin,
               r->pr.m_margin == PLAN_LIMIT ? " (the search limit)" : "", fmt(r->pr.budget, b1, sizeof b1),
               100 * a->margin);
    if (r->pr.m_full)
        printf(", %d%s in all %s\n", r->pr.m_full, r->pr.m_full == PLAN_LIMIT ? " (the search limit)" : "",
               fmt(a->memory, b2, sizeof b2));
    else
        printf(", none in all %s\n", fmt(a->memory, b2, sizeof b2));
    if (r->M->labels_per_sample > 1 && r->pr.m_margin) /* what --batch-tokens plans a micro-batch as */
        printf("in tokens: a micro-batch of %lld (%d sequences of %d) within the budget\n",
               (long long)r->pr.m_margin * r->M->input.d[0], r->pr.m_margin, r->M->input.d[0]);
}

static void add_cats(cJSON *o, const bfit_plan *p)
{
    for (int k = 0; k < NROWS; k++)
        cJSON_AddNumberToObject(o, row_name(rows[k]), (double)p->bytes[rows[k]]);
}

static int print_json(const report *r)
{
    const args *a = r->a;
    cJSON *root = cJSON_CreateObject(), *o, *arr;
    char sh[32];

    if (!root)
        return -1;
    cJSON_AddStringToObject(root, "model", a->model);
    cJSON_AddStringToObject(root, "source", bfit_model_source_is_file(a->model) ? "file" : "preset");
    cJSON_AddStringToObject(root, "input", bfit_shape_str(r->M->input, sh, sizeof sh));
    if (r->M->input_dtype == BFIT_I32) {
        cJSON_AddNumberToObject(root, "seq", r->M->input.d[0]);
        cJSON_AddStringToObject(root, "attention", a->lean ? "lean" : "stored");
    }
    cJSON_AddNumberToObject(root, "classes", r->M->nclasses);
    cJSON_AddNumberToObject(root, "parameters", (double)bfit_model_param_count(r->M));
    cJSON_AddStringToObject(root, "mode", a->eval ? "eval" : "training");
    if (r->opt) {
        cJSON_AddStringToObject(root, "optimizer", bfit_optim_kind_name(r->opt->kind));
        if (r->opt->kind == BFIT_OPT_SGD)
            cJSON_AddNumberToObject(root, "momentum", r->opt->momentum);
    } else {
        cJSON_AddNullToObject(root, "optimizer");
    }
    cJSON_AddNumberToObject(root, "state_tensors", state_tensors(r->opt));
    cJSON_AddNumberToObject(root, "threads", threads_of(r->M->dev));
    cJSON_AddNumberToObject(root, "memory", (double)a->memory);
    cJSON_AddNumberToObject(root, "margin", a->margin);
    cJSON_AddNumberToObject(root, "budget", (double)r->pr.budget);
    {
        bfit_storage st = bfit_model_storage(r->M);
        cJSON_AddStringToObject(root, "precision", bfit_dtype_name(st.precision));
        cJSON_AddBoolToObject(root, "lean", st.lean);
        cJSON_AddStringToObject(root, "recompute", bfit_recompute_name(a->st.recompute));
        cJSON_AddStringToObject(root, "recompute_chosen", bfit_recompute_name(st.recompute));
    }

    o = cJSON_AddObjectToObject(root, "fixed");
    for (int k = 0; k < NFIXED; k++)
        cJSON_AddNumberToObject(o, row_name(rows[k]), (double)r->pr.p1.bytes[rows[k]]);
    cJSON_AddNumberToObject(o, "total", (double)r->pr.p1.fixed);
    o = cJSON_AddObjectToObject(root, "per_sample");
    for (int k = NFIXED; k < NROWS; k++)
        cJSON_AddNumberToObject(o, row_name(rows[k]), r->pr.line.cat_slope[rows[k]]);
    cJSON_AddNumberToObject(o, "total", r->pr.line.slope);
    arr = cJSON_AddArrayToObject(o, "between");
    cJSON_AddItemToArray(arr, cJSON_CreateNumber(r->pr.line.m1));
    cJSON_AddItemToArray(arr, cJSON_CreateNumber(r->pr.line.m2));
    cJSON_AddNumberToObject(o, "intercept", r->pr.line.intercept);
    cJSON_AddBoolToObject(o, "affine", r->pr.affine && r->pr.affine1);
    cJSON_AddBoolToObject(o, "affine_from_2", r->pr.affine);
    cJSON_AddNumberToObject(o, "deviation_at_1", r->pr.dev1);
    cJSON_AddNumberToObject(o, "max_deviation", (double)r->pr.line.max_dev);
    cJSON_AddNumberToObject(o, "deviation_at", r->pr.line.dev_m);

    arr = cJSON_AddArrayToObject(root, "plans");
    for (int i = 0; i < r->pr.nshown; i++) {
        const bfit_plan *p = &r->pr.shown[i];
        o = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, o);
        cJSON_AddNumberToObject(o, "m", p->m);
        add_cats(o, p);
        cJSON_AddNumberToObject(o, "fixed", (double)p->fixed);
        cJSON_AddNumberToObject(o, "step", (double)p->step);
        cJSON_AddNumberToObject(o, "peak", (double)p->peak);
        cJSON_AddNumberToObject(o, "no_reuse", (double)p->no_reuse);
        cJSON_AddNumberToObject(o, "reuse_saves", (double)(p->no_reuse - p->peak));
        cJSON_AddNumberToObject(o, "flops", p->flops);
        cJSON_AddNumberToObject(o, "recomputed_flops", p->regen_flops);
        cJSON_AddBoolToObject(o, "fits", p->peak <= a->memory);
        cJSON_AddBoolToObject(o, "within_margin", p->peak <= r->pr.budget);
    }
    o = cJSON_AddObjectToObject(root, "max_batch");
    cJSON_AddNumberToObject(o, "with_margin", r->pr.m_margin);
    cJSON_AddNumberToObject(o, "without_margin", r->pr.m_full);
    cJSON_AddNumberToObject(o, "limit", PLAN_LIMIT);
    cJSON_AddNumberToObject(o, "batch1_peak", (double)r->pr.p1.peak);

    return cli_json_print(root);
}


/* Say why something does not fit; returns the exit code. A batch fits when
 * its step fits in the memory: the margin only keeps the automatic choice
 * (the solver, the trainer's micro-batch) away from the edge. */
static int check_fits(const report *r)
{
    const args *a = r->a;
    char b[8][32];
    const bfit_plan *p1 = &r->pr.p1;

    if (p1->fixed > a->memory) {
        char st[32];
        cli_error("%s does not fit in %s at any batch size: its fixed part alone (parameters %s + gradients %s + "
                  "optimizer state %s + statistics %s = %s) exceeds the memory by %s; batch 1 needs --memory of "
                  "at least %s (%s with the %g%% margin)%s",
                  a->model, fmt(a->memory, b[0], 32), fmt(p1->bytes[BFIT_MEM_PARAMS], b[1], 32),
                  fmt(p1->bytes[BFIT_MEM_GRADS], b[2], 32), fmt(p1->bytes[BFIT_MEM_OPTIMIZER], b[3], 32),
                  fmt(p1->bytes[BFIT_MEM_OTHER], st, 32), fmt(p1->fixed, b[4], 32), fmt(p1->fixed - a->memory, b[5], 32),
                  fmt(p1->peak, b[6], 32), fmt(bfit_capacity_for(p1->peak, a->margin), b[7], 32), 100 * a->margin,
                  p1->bytes[BFIT_MEM_OPTIMIZER] ? "; or plan less optimizer state: --optimizer sgd --momentum 0" : "");
        return EXIT_FAIL;
    }
    if (r->pr.m_full == 0) {
        cli_error("%s does not fit in %s even at batch 1: batch 1 needs %s, %s more than the memory; give "
                  "--memory of at least %s (%s with the %g%% margin)",
                  a->model, fmt(a->memory, b[0], 32), fmt(p1->peak, b[1], 32), fmt(p1->peak - a->memory, b[2], 32),
                  fmt(p1->peak, b[3], 32), fmt(bfit_capacity_for(p1->peak, a->margin), b[4], 32), 100 * a->margin);
        return EXIT_FAIL;
    }
    for (int i = r->pr.nshown - 1; i >= 0; i--) {
        const bfit_plan *p = &r->pr.shown[i];
        bfit_plan best;
        if (p->peak <= a->memory)
            continue;
        if (bfit_plan_compute(r->M, r->opt, r->pr.m_full, !a->eval, &best) != BFIT_OK) {
            cli_lib_error();
            return EXIT_FAIL;
        }
        cli_error("batch %d does not fit in %s: it needs %s, %s more (give --memory of at least %s, or %s to keep "
                  "the %g%% margin); the largest batch that fits is %d (%s), %d within the margin",
                  p->m, fmt(a->memory, b[0], 32), fmt(p->peak, b[1], 32), fmt(p->peak - a->memory, b[2], 32),
                  fmt(p->peak, b[3], 32), fmt(bfit_capacity_for(p->peak, a->margin), b[4], 32), 100 * a->margin, r->pr.m_full,
                  fmt(best.peak, b[5], 32), r->pr.m_margin);
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

static void print_ways(const args *a, const bfit_way *w, uint64_t budget)
{
    char b1[32], b2[32];
    printf("batchfit plan --ways: %s in %s (budget %s), optimizer %s\n\n", a->model, fmt(a->memory, b1, sizeof b1),
           fmt(budget, b2, sizeof b2), bfit_optim_kind_name(a->kind));
    printf("%-40s %9s %9s %11s %8s%s\n", "way", "micro", "batch", "peak", "extra", a->measure ? "     step  samples/s" : "");
    for (int i = 0; i < BFIT_WAYS; i++) {
        printf("%-40s %9d %9d %11s %7.1f%%", w[i].name, w[i].m, w[i].batch, w[i].m ? fmt(w[i].peak, b1, sizeof b1) : "-",
               100 * w[i].extra);
        if (a->measure && w[i].measure_failed)
            printf("  out of memory while measuring");
        else if (a->measure && w[i].step_secs > 0)
            printf(" %7.3fs %10.1f%s", w[i].step_secs, w[i].samples_per_sec, w[i].accum > 1 ? " (2 micro-steps)" : "");
        putchar('\n');
    }
    printf("\nmicro: the largest micro-batch that fits; batch: the effective batch (micro x accumulation);\n"
           "extra: recomputed FLOPs over the step's own (modelled)%s\n",
           a->measure ? "; step: median of 3 measured steps on random samples" : "");
}

static int ways_json(const args *a, const bfit_way *w, uint64_t budget)
{
    cJSON *root = cJSON_CreateObject(), *arr;
    if (!root)
        return -1;
    cJSON_AddStringToObject(root, "model", a->model);
    cJSON_AddNumberToObject(root, "memory", (double)a->memory);
    cJSON_AddNumberToObject(root, "budget", (double)budget);
    arr = cJSON_AddArrayToObject(root, "ways");
    for (int i = 0; i < BFIT_WAYS; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, o);
        cJSON_AddStringToObject(o, "way", w[i].name);
        cJSON_AddStringToObject(o, "precision", bfit_dtype_name(w[i].storage.precision));
        cJSON_AddBoolToObject(o, "lean", w[i].storage.lean);
        cJSON_AddStringToObject(o, "recompute", bfit_recompute_name(w[i].storage.recompute));
        cJSON_AddNumberToObject(o, "accumulation", w[i].accum);
        cJSON_AddNumberToObject(o, "micro_batch", w[i].m);
        cJSON_AddNumberToObject(o, "batch", w[i].batch);
        cJSON_AddNumberToObject(o, "peak", (double)w[i].peak);
        cJSON_AddNumberToObject(o, "extra_compute", w[i].extra);
        if (a->measure) {
            cJSON_AddNumberToObject(o, "step_seconds", w[i].step_secs);
            cJSON_AddNumberToObject(o, "samples_per_second", w[i].samples_per_sec);
            cJSON_AddBoolToObject(o, "measure_out_of_memory", w[i].measure_failed);
        }
    }
    return cli_json_print(root);
}

static int run_ways(const args *a, const bfit_graph_desc *g, bfit_device *dev, bfit_arena *arena,
                    const bfit_optim_cfg *opt)
{
    bfit_way w[BFIT_WAYS];
    uint64_t budget = bfit_plan_budget(a->memory, a->margin);
    if (bfit_plan_ways(g, dev, arena, opt, budget, a->measure ? 3 : 0, w) != BFIT_OK) {
        cli_error("planning %s: %s", a->model, bfit_errmsg());
        return EXIT_FAIL;
    }
    if (a->json) {
        if (ways_json(a, w, budget)) {
            cli_error("out of host memory");
            return EXIT_FAIL;
        }
    } else {
        print_ways(a, w, budget);
    }
    return EXIT_OK;
}

/* The plan of a built model, printed; returns the exit code. */
static int report_plan(const args *a, bfit_model *M, const bfit_optim_cfg *opt)
{
    report r;
    memset(&r, 0, sizeof r);
    r.a = a;
    r.M = M;
    r.opt = a->eval ? NULL : opt;
    if (bfit_plan_report_make(M, r.opt, !a->eval, a->memory, a->margin, a->batch, a->nbatch, &r.pr) != BFIT_OK) {
        cli_error("planning %s: %s", a->model, bfit_errmsg());
        return EXIT_FAIL;
    }
    if (a->json) {
        if (print_json(&r)) {
            cli_error("out of host memory");
            return EXIT_FAIL;
        }
    } else {
        print_human(&r);
    }
    fflush(stdout);
    return check_fits(&r);
}

int cmd_plan(int argc, char **argv)
{
    args a;
    bfit_graph_desc g;
    bfit_arena *arena = NULL;
    bfit_device *dev = NULL;
    bfit_model *M = NULL;
    bfit_optim_cfg opt;
    int done, ret, rc;

    ret = parse_args(argc, argv, &a, &done);
    if (done)
        return ret;
    opt = bfit_optim_cfg_default(a.kind);
    if (a.mom_set)
        opt.momentum = a.momentum;
    if (bfit_optim_cfg_check(&opt) != BFIT_OK) {
        cli_lib_error();
        return cli_usage_hint("plan");
    }

    rc = bfit_model_source_load(a.model, &g);
    if (rc != BFIT_OK) {
        cli_error("--model: %s", bfit_errmsg());
        /* an unknown preset is a usage error; a spec that fails to load is not */
        return rc == BFIT_EINVAL ? cli_usage_hint("plan") : EXIT_FAIL;
    }
    if ((a.seq && bfit_graph_set_seq(&g, a.seq) != BFIT_OK) ||
        (a.attn_set && bfit_graph_set_attention(&g, a.lean) != BFIT_OK)) {
        cli_lib_error();
        bfit_graph_fini(&g);
        return cli_usage_hint("plan");
    }
    ret = EXIT_FAIL;
    {
        /* the arena is only the device's accounting here: nothing is reserved */
        bfit_device_cfg cc = bfit_device_cfg_default();
        cc.threads = a.threads;
        cc.conv_algo = a.conv;
        rc = bfit_device_open(a.device, &cc, &dev);
    }
    if (rc == BFIT_OK && !a.memory) {
        uint64_t total;
        if (bfit_device_memory(dev, &a.memory, &total) != BFIT_OK || !a.memory) {
            cli_error("cannot tell the device's free memory: give --memory, e.g. --memory 16GiB");
            ret = cli_usage_hint("plan");
            goto out_model;
        }
    }
    if (rc == BFIT_OK && !(arena = bfit_device_arena_new(dev, a.memory)))
        rc = BFIT_ENOMEM;
    if (rc == BFIT_OK && a.ways) {
        ret = run_ways(&a, &g, dev, arena, &opt);
        goto out_model;
    }
    if (rc == BFIT_OK)
        rc = bfit_model_new(&g, dev, arena, &M);
    if (rc == BFIT_OK)
        rc = bfit_model_set_storage(M, &a.st, a.eval ? NULL : &opt, bfit_plan_budget(a.memory, a.margin),
                                    a.nbatch ? a.batch[a.nbatch - 1] : 0);
    if (rc != BFIT_OK) {
        cli_lib_error();
        goto out_model;
    }

    ret = report_plan(&a, M, &opt);
out_model:
    bfit_model_free(M);
    bfit_arena_free(arena);
    bfit_device_free(dev);
    bfit_graph_fini(&g);
    return ret;
}
