/* cmd_plan.c - `batchfit plan`: the memory of a training (or eval) step per
 * category, its fixed and per-sample parts, what buffer reuse saves, and the
 * largest batch that fits, for a preset or a spec file. Plans only: the
 * model is built on a device but nothing is ever reserved. */
#include "base/err.h"
#include "batch/plan.h"
#include "cli/cli.h"
#include "nn/zoo.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLAN_LIMIT (1 << 20) /* the largest batch the solver looks for */
#define MAX_BATCHES 16       /* sizes in --batch */
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
         "  --model PRESET|FILE   a preset (mlp, cnn, resnet18, resnet50, vgg16) or a\n"
         "                        model spec file (docs/model-spec.md)\n"
         "  --memory SIZE         device memory, e.g. 11GiB, 512MiB, 8GB (default:\n"
         "                        available RAM)\n"
         "  --margin F            fraction of memory kept free, 0 <= F < 1 (default 0.1)\n"
         "  --batch LIST          batch sizes to show, e.g. 1,32,64 (default: 1 and the\n"
         "                        largest that fits); each must fit\n"
         "  --optimizer sgd|adamw optimizer whose state is planned (default sgd)\n"
         "  --momentum X          SGD momentum (default 0.9); 0: plain SGD, no state\n"
         "  --eval                plan an inference step (no gradients, no optimizer)\n"
         "  --threads N           CPU threads the step will run with (default: all\n"
         "                        cores); oneDNN's workspaces depend on it\n"
         "  --json                print the plan as JSON\n"
         "\n"
         "Example:\n"
         "  batchfit plan --model resnet50 --memory 11GiB --optimizer sgd --batch 1,32,64\n"
         "\n"
         "Exit status: 0 planned and everything fits, 1 a batch (or the model) does\n"
         "not fit or the model cannot be loaded, 2 usage error.");
}

enum { O_MODEL = 256, O_MEMORY, O_MARGIN, O_BATCH, O_OPT, O_MOM, O_EVAL, O_THREADS, O_JSON, O_HELP };

static const struct option opts[] = {
    {"model", required_argument, 0, O_MODEL},   {"memory", required_argument, 0, O_MEMORY},
    {"margin", required_argument, 0, O_MARGIN}, {"batch", required_argument, 0, O_BATCH},
    {"optimizer", required_argument, 0, O_OPT}, {"momentum", required_argument, 0, O_MOM},
    {"eval", no_argument, 0, O_EVAL},           {"threads", required_argument, 0, O_THREADS},
    {"json", no_argument, 0, O_JSON},           {"help", no_argument, 0, O_HELP},
    {0, 0, 0, 0}};

typedef struct args {
    const char *model;
    uint64_t memory;
    double margin, momentum;
    int mom_set, eval, threads, json;
    bfit_opt_kind kind;
    int batch[MAX_BATCHES], nbatch;
} args;

/* Everything computed, for either printer. */
typedef struct report {
    const args *a;
    bfit_model *M;
    const bfit_optim_cfg *opt;  /* NULL for eval */
    uint64_t budget;
    int m_margin, m_full;       /* largest batch within the budget / the whole memory */
    bfit_plan p1;               /* m = 1 */
    bfit_plan shown[MAX_BATCHES + 1];
    int nshown;
    bfit_plan_line line;
    int affine;                 /* every plan with m >= 2 lies on the line (up to padding) */
    int affine1;                /* and so does m = 1 */
    double dev_signed, dev1;    /* plan - line at line.dev_m, and at m = 1 */
    bfit_mem_cat dev_cat, dev1_cat; /* the categories that stray most there */
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
        case O_HELP: help(); *done = 1; return EXIT_OK;
        default:
            cli_bad_option(name);
            goto usage;
        }
    }
    if (cli_no_extra(argc, argv))
        goto usage;
    if (!a->model) {
        cli_error("--model is required: a preset (mlp, cnn, resnet18, resnet50, vgg16) or a spec file, "
                  "e.g. --model resnet50");
        goto usage;
    }
    if (a->mom_set && a->kind != BFIT_OPT_SGD) {
        cli_error("--momentum applies to --optimizer sgd (AdamW's state is always two tensors per parameter)");
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

/* The category of plan p farthest from its per-sample line. */
static bfit_mem_cat worst_cat(const report *r, const bfit_plan *p)
{
    const bfit_plan *ref = &r->shown[r->nshown - 1];
    bfit_mem_cat cat = BFIT_MEM_WORKSPACE;
    double worst = -1;
    for (int c = 0; c < BFIT_MEM_NCAT; c++) {
        double e = (double)p->bytes[c] - ((double)ref->bytes[c] + r->line.cat_slope[c] * (p->m - ref->m));
        if (e < 0)
            e = -e;
        if (e > worst) {
            worst = e;
            cat = (bfit_mem_cat)c;
        }
    }
    return cat;
}

/* Plan every size that will be shown, fit the per-sample line and check it
 * against all plans made. */
static int compute(report *r)
{
    const args *a = r->a;
    int training = !a->eval, rc, extra[6], nextra = 0;
    bfit_plan all[MAX_BATCHES + 8];
    int nall = 0;
    uint64_t tol;

    rc = bfit_plan_max_batch(r->M, r->opt, training, r->budget, PLAN_LIMIT, &r->m_margin, &r->p1);
    if (rc == BFIT_OK)
        rc = bfit_plan_max_batch(r->M, r->opt, training, a->memory, PLAN_LIMIT, &r->m_full, NULL);
    if (rc != BFIT_OK)
        return rc;
    r->nshown = 0;
    if (a->nbatch) {
        for (int i = 0; i < a->nbatch; i++)
            r->shown[r->nshown++].m = a->batch[i];
    } else {
        /* 1 and 2 show the small-batch steps, the largest what fits */
        r->shown[r->nshown++].m = 1;
        r->shown[r->nshown++].m = 2;
        if (r->m_margin > 2)
            r->shown[r->nshown++].m = r->m_margin;
    }
    for (int i = 0; i < r->nshown; i++) {
        rc = bfit_plan_compute(r->M, r->opt, r->shown[i].m, training, &r->shown[i]);
        if (rc != BFIT_OK)
            return rc;
        all[nall++] = r->shown[i];
    }
    /* one size shown: the slope is taken to the next size up */
    if (r->nshown == 1)
        extra[nextra++] = r->shown[0].m < PLAN_LIMIT ? r->shown[0].m + 1 : r->shown[0].m - 1;
    /* independent checks of the line: small sizes, a size between the
     * slope's ends, and the largest that fits */
    extra[nextra++] = 1;
    extra[nextra++] = 2;
    extra[nextra++] = (r->shown[0].m + r->shown[r->nshown - 1].m) / 2 + 1;
    if (r->m_margin > 0)
        extra[nextra++] = r->m_margin;
    if (r->m_full > 0)
        extra[nextra++] = r->m_full;
    for (int i = 0; i < nextra; i++) {
        int seen = 0;
        for (int j = 0; j < nall; j++)
            seen |= all[j].m == extra[i];
        if (seen)
            continue;
        rc = bfit_plan_compute(r->M, r->opt, extra[i], training, &all[nall]);
        if (rc != BFIT_OK)
            return rc;
        nall++;
    }
    /* the slope between the two largest sizes shown (or the shown size and
     * the next): per-sample growth, clear of the small-m steps where oneDNN
     * picks other algorithms */
    {
        bfit_plan ends[2];
        if (r->nshown >= 2) {
            ends[0] = r->shown[r->nshown - 2];
            ends[1] = r->shown[r->nshown - 1];
        } else {
            ends[0] = r->shown[0];
            for (int j = 0; j < nall; j++)
                if (all[j].m == extra[0])
                    ends[1] = all[j];
        }
        rc = bfit_plan_line_fit(ends, 2, &r->line);
        if (rc != BFIT_OK)
            return rc;
    }
    /* deviation against every plan made; m = 1 kept apart, since there
     * oneDNN often runs single-threaded kernels with other scratch */
    {
        bfit_plan_line l = r->line;
        l.max_dev = 0;
        l.dev_m = 0;
        for (int j = 0; j < nall; j++) {
            double d = (double)all[j].peak - (l.intercept + l.slope * all[j].m);
            uint64_t dev = (uint64_t)(d < 0 ? -d + 0.5 : d + 0.5);
            if (all[j].m == 1) {
                r->dev1 = d;
                r->dev1_cat = worst_cat(r, &all[j]);
                continue;
            }
            if (dev > l.max_dev) {
                l.max_dev = dev;
                l.dev_m = all[j].m;
                r->dev_signed = d;
                r->dev_cat = worst_cat(r, &all[j]);
            }
        }
        r->line = l;
    }
    /* alignment padding (at most 64 bytes per buffer, a few buffers per
     * layer) and a 0.1% wobble are not departures from affine, for a person
     * reading the slope; anything larger is */
    tol = (uint64_t)BFIT_ALIGN * 4 * (uint64_t)(r->M->n + 1);
    r->affine = r->line.max_dev <= tol || r->line.max_dev <= r->line.slope * r->line.dev_m / 1000;
    r->affine1 = (r->dev1 < 0 ? -r->dev1 : r->dev1) <= (double)tol ||
                 (r->dev1 < 0 ? -r->dev1 : r->dev1) <= r->p1.peak / 1000.0;
    return BFIT_OK;
}

static const char *row_names[BFIT_MEM_INPUT + 1] = {"params",      "grads",     "optimizer", "activations",
                                                    "act_grads",   "workspace", "input"};

/* 25557032 -> "25,557,032": counts people compare with other tools' */
static const char *thousands(int64_t v, char *buf, size_t n)
{
    char t[32];
    int len = snprintf(t, sizeof t, "%lld", (long long)v), j = 0;
    for (int i = 0; i < len && (size_t)j + 2 < n; i++) {
        if (i > 0 && t[i - 1] != '-' && (len - i) % 3 == 0)
            buf[j++] = ',';
        buf[j++] = t[i];
    }
    buf[j] = '\0';
    return buf;
}

static void print_human(const report *r)
{
    const args *a = r->a;
    char b1[32], b2[32], b3[32], sh[32];
    uint64_t fixed = r->p1.fixed;
    int file = bfit_model_source_is_file(a->model);

    printf("batchfit plan: %s (%s), input %s, %d classes, %s parameters\n", a->model,
           file ? "spec file" : "preset", bfit_shape_str(r->M->input, sh, sizeof sh), r->M->nclasses,
           thousands(bfit_model_param_count(r->M), b1, sizeof b1));
    if (a->eval)
        printf("inference step (--eval): parameters only, no gradients or optimizer state\n");
    else if (r->opt->kind == BFIT_OPT_ADAMW)
        printf("training step, optimizer adamw: 2 state tensors per parameter\n");
    else if (r->opt->momentum > 0)
        printf("training step, optimizer sgd with momentum %g: 1 state tensor per parameter\n", r->opt->momentum);
    else
        printf("training step, optimizer sgd without momentum: no optimizer state\n");
    printf("memory %s, margin %g%%: budget %s; workspaces sized for %d threads\n\n", fmt(a->memory, b1, sizeof b1),
           100 * a->margin, fmt(r->budget, b2, sizeof b2), threads_of(r->M->dev));

    printf("%-14s %11s %11s", "category", "fixed", "per sample");
    for (int i = 0; i < r->nshown; i++) {
        char h[24];
        snprintf(h, sizeof h, "m=%d", r->shown[i].m);
        printf(" %11s", h);
    }
    putchar('\n');
    for (int c = 0; c <= BFIT_MEM_INPUT; c++) {
        int is_fixed = c <= BFIT_MEM_OPTIMIZER;
        printf("%-14s %11s %11s", row_names[c], is_fixed ? fmt(r->p1.bytes[c], b1, sizeof b1) : "-",
               is_fixed ? "-" : fmt_d(r->line.cat_slope[c], b2, sizeof b2));
        for (int i = 0; i < r->nshown; i++)
            printf(" %11s", fmt(r->shown[i].bytes[c], b3, sizeof b3));
        putchar('\n');
    }
    printf("%-14s %11s %11s", "peak", fmt(fixed, b1, sizeof b1), fmt_d(r->line.slope, b2, sizeof b2));
    for (int i = 0; i < r->nshown; i++)
        printf(" %11s", fmt(r->shown[i].peak, b3, sizeof b3));
    printf("\n%-14s %11s %11s", "without reuse", "", "");
    for (int i = 0; i < r->nshown; i++)
        printf(" %11s", fmt(r->shown[i].no_reuse, b3, sizeof b3));
    printf("\n%-14s %11s %11s", "reuse saves", "", "");
    for (int i = 0; i < r->nshown; i++)
        printf(" %11s", fmt(r->shown[i].no_reuse - r->shown[i].peak, b3, sizeof b3));
    printf("\n%-14s %11s %11s", "fits", "", "");
    for (int i = 0; i < r->nshown; i++)
        printf(" %11s", r->shown[i].peak <= r->budget ? "yes" : r->shown[i].peak <= a->memory ? "in margin" : "NO");
    printf("\n\n");

    printf("per sample: measured between m=%d and m=%d; ", r->line.m1, r->line.m2);
    if (!r->affine)
        printf("the plan is not affine: at m=%d it is %s %s that line, mostly in %s%s\n", r->line.dev_m,
               fmt(r->line.max_dev, b1, sizeof b1), r->dev_signed < 0 ? "below" : "above",
               bfit_mem_cat_name(r->dev_cat), r->dev_cat == BFIT_MEM_WORKSPACE ? WS_WHY : "");
    else if (r->affine1)
        printf("the plan is affine: peak = %s + m x %s (within %s)\n", fmt_d(r->line.intercept, b1, sizeof b1),
               fmt_d(r->line.slope, b2, sizeof b2), fmt(r->line.max_dev, b3, sizeof b3));
    else
        printf("the plan is affine from m=2: peak = %s + m x %s (within %s);\n  at m=1 it is %s %s that line, "
               "mostly in %s%s\n",
               fmt_d(r->line.intercept, b1, sizeof b1), fmt_d(r->line.slope, b2, sizeof b2),
               fmt(r->line.max_dev, b3, sizeof b3), fmt_d(r->dev1 < 0 ? -r->dev1 : r->dev1, sh, sizeof sh),
               r->dev1 < 0 ? "below" : "above", bfit_mem_cat_name(r->dev1_cat),
               r->dev1_cat == BFIT_MEM_WORKSPACE ? WS_WHY : "");
    if (r->m_margin == 0)
        printf("largest batch: none fits in the budget %s (batch 1 needs %s)", fmt(r->budget, b1, sizeof b1),
               fmt(r->p1.peak, b2, sizeof b2));
    else
        printf("largest batch: %d%s within the budget %s (memory less the %g%% margin)", r->m_margin,
               r->m_margin == PLAN_LIMIT ? " (the search limit)" : "", fmt(r->budget, b1, sizeof b1),
               100 * a->margin);
    if (r->m_full)
        printf(", %d%s in all %s\n", r->m_full, r->m_full == PLAN_LIMIT ? " (the search limit)" : "",
               fmt(a->memory, b2, sizeof b2));
    else
        printf(", none in all %s\n", fmt(a->memory, b2, sizeof b2));
}

static void add_cats(cJSON *o, const bfit_plan *p)
{
    for (int c = 0; c <= BFIT_MEM_INPUT; c++)
        cJSON_AddNumberToObject(o, row_names[c], (double)p->bytes[c]);
}

static int print_json(const report *r)
{
    const args *a = r->a;
    cJSON *root = cJSON_CreateObject(), *o, *arr;
    char sh[32], *s;

    if (!root)
        return -1;
    cJSON_AddStringToObject(root, "model", a->model);
    cJSON_AddStringToObject(root, "source", bfit_model_source_is_file(a->model) ? "file" : "preset");
    cJSON_AddStringToObject(root, "input", bfit_shape_str(r->M->input, sh, sizeof sh));
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
    cJSON_AddNumberToObject(root, "budget", (double)r->budget);

    o = cJSON_AddObjectToObject(root, "fixed");
    for (int c = 0; c <= BFIT_MEM_OPTIMIZER; c++)
        cJSON_AddNumberToObject(o, row_names[c], (double)r->p1.bytes[c]);
    cJSON_AddNumberToObject(o, "total", (double)r->p1.fixed);
    o = cJSON_AddObjectToObject(root, "per_sample");
    for (int c = BFIT_MEM_ACTIVATIONS; c <= BFIT_MEM_INPUT; c++)
        cJSON_AddNumberToObject(o, row_names[c], r->line.cat_slope[c]);
    cJSON_AddNumberToObject(o, "total", r->line.slope);
    arr = cJSON_AddArrayToObject(o, "between");
    cJSON_AddItemToArray(arr, cJSON_CreateNumber(r->line.m1));
    cJSON_AddItemToArray(arr, cJSON_CreateNumber(r->line.m2));
    cJSON_AddNumberToObject(o, "intercept", r->line.intercept);
    cJSON_AddBoolToObject(o, "affine", r->affine && r->affine1);
    cJSON_AddBoolToObject(o, "affine_from_2", r->affine);
    cJSON_AddNumberToObject(o, "deviation_at_1", r->dev1);
    cJSON_AddNumberToObject(o, "max_deviation", (double)r->line.max_dev);
    cJSON_AddNumberToObject(o, "deviation_at", r->line.dev_m);

    arr = cJSON_AddArrayToObject(root, "plans");
    for (int i = 0; i < r->nshown; i++) {
        const bfit_plan *p = &r->shown[i];
        o = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, o);
        cJSON_AddNumberToObject(o, "m", p->m);
        add_cats(o, p);
        cJSON_AddNumberToObject(o, "fixed", (double)p->fixed);
        cJSON_AddNumberToObject(o, "step", (double)p->step);
        cJSON_AddNumberToObject(o, "peak", (double)p->peak);
        cJSON_AddNumberToObject(o, "no_reuse", (double)p->no_reuse);
        cJSON_AddNumberToObject(o, "reuse_saves", (double)(p->no_reuse - p->peak));
        cJSON_AddBoolToObject(o, "fits", p->peak <= a->memory);
        cJSON_AddBoolToObject(o, "within_margin", p->peak <= r->budget);
    }
    o = cJSON_AddObjectToObject(root, "max_batch");
    cJSON_AddNumberToObject(o, "with_margin", r->m_margin);
    cJSON_AddNumberToObject(o, "without_margin", r->m_full);
    cJSON_AddNumberToObject(o, "limit", PLAN_LIMIT);
    cJSON_AddNumberToObject(o, "batch1_peak", (double)r->p1.peak);

    s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!s)
        return -1;
    puts(s);
    cJSON_free(s);
    return 0;
}

/* The smallest --memory whose budget under this margin holds peak bytes. */
static uint64_t memory_for(uint64_t peak, double margin)
{
    uint64_t need = (uint64_t)((double)peak / (1.0 - margin));
    while (bfit_plan_budget(need, margin) < peak)
        need++;
    while (need > peak && bfit_plan_budget(need - 1, margin) >= peak)
        need--;
    return need;
}

/* Say why something does not fit; returns the exit code. A batch fits when
 * its step fits in the memory: the margin only keeps the automatic choice
 * (the solver, the trainer's micro-batch) away from the edge. */
static int check_fits(const report *r)
{
    const args *a = r->a;
    char b[8][32];
    const bfit_plan *p1 = &r->p1;

    if (p1->fixed > a->memory) {
        cli_error("%s does not fit in %s at any batch size: its fixed part alone (parameters %s + gradients %s + "
                  "optimizer state %s = %s) exceeds the memory by %s; batch 1 needs --memory of at least %s (%s "
                  "with the %g%% margin)%s",
                  a->model, fmt(a->memory, b[0], 32), fmt(p1->bytes[BFIT_MEM_PARAMS], b[1], 32),
                  fmt(p1->bytes[BFIT_MEM_GRADS], b[2], 32), fmt(p1->bytes[BFIT_MEM_OPTIMIZER], b[3], 32),
                  fmt(p1->fixed, b[4], 32), fmt(p1->fixed - a->memory, b[5], 32), fmt(p1->peak, b[6], 32),
                  fmt(memory_for(p1->peak, a->margin), b[7], 32), 100 * a->margin,
                  p1->bytes[BFIT_MEM_OPTIMIZER] ? "; or plan less optimizer state: --optimizer sgd --momentum 0" : "");
        return EXIT_FAIL;
    }
    if (r->m_full == 0) {
        cli_error("%s does not fit in %s even at batch 1: batch 1 needs %s, %s more than the memory; give "
                  "--memory of at least %s (%s with the %g%% margin)",
                  a->model, fmt(a->memory, b[0], 32), fmt(p1->peak, b[1], 32), fmt(p1->peak - a->memory, b[2], 32),
                  fmt(p1->peak, b[3], 32), fmt(memory_for(p1->peak, a->margin), b[4], 32), 100 * a->margin);
        return EXIT_FAIL;
    }
    for (int i = r->nshown - 1; i >= 0; i--) {
        const bfit_plan *p = &r->shown[i];
        bfit_plan best;
        if (p->peak <= a->memory)
            continue;
        if (bfit_plan_compute(r->M, r->opt, r->m_full, !a->eval, &best) != BFIT_OK) {
            cli_error("%s", bfit_errmsg());
            return EXIT_FAIL;
        }
        cli_error("batch %d does not fit in %s: it needs %s, %s more (give --memory of at least %s, or %s to keep "
                  "the %g%% margin); the largest batch that fits is %d (%s), %d within the margin",
                  p->m, fmt(a->memory, b[0], 32), fmt(p->peak, b[1], 32), fmt(p->peak - a->memory, b[2], 32),
                  fmt(p->peak, b[3], 32), fmt(memory_for(p->peak, a->margin), b[4], 32), 100 * a->margin, r->m_full,
                  fmt(best.peak, b[5], 32), r->m_margin);
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

int cmd_plan(int argc, char **argv)
{
    args a;
    report r;
    bfit_graph_desc g;
    bfit_arena *arena = NULL;
    bfit_device *dev = NULL;
    bfit_model *M = NULL;
    bfit_optim_cfg opt;
    int done, ret, rc;

    ret = parse_args(argc, argv, &a, &done);
    if (done)
        return ret;
    if (!a.memory) {
        a.memory = bfit_host_available_memory();
        if (!a.memory) {
            cli_error("cannot tell the available memory: give --memory, e.g. --memory 16GiB");
            return cli_usage_hint("plan");
        }
    }
    opt = bfit_optim_cfg_default(a.kind);
    if (a.mom_set)
        opt.momentum = a.momentum;
    if (bfit_optim_cfg_check(&opt) != BFIT_OK) {
        cli_error("%s", bfit_errmsg());
        return cli_usage_hint("plan");
    }

    rc = bfit_model_source_load(a.model, &g);
    if (rc != BFIT_OK) {
        cli_error("--model: %s", bfit_errmsg());
        /* an unknown preset is a usage error; a spec that fails to load is not */
        return rc == BFIT_EINVAL ? cli_usage_hint("plan") : EXIT_FAIL;
    }
    ret = EXIT_FAIL;
    {
        /* the arena is only the device's accounting here: nothing is reserved */
        bfit_cpu_cfg cc = bfit_cpu_cfg_default();
        cc.threads = a.threads;
        rc = bfit_device_cpu_new(&cc, &dev);
    }
    if (rc == BFIT_OK && !(arena = bfit_device_arena_new(dev, a.memory)))
        rc = BFIT_ENOMEM;
    if (rc == BFIT_OK)
        rc = bfit_model_new(&g, dev, arena, &M);
    if (rc != BFIT_OK) {
        cli_error("%s", bfit_errmsg());
        goto out_model;
    }

    memset(&r, 0, sizeof r);
    r.a = &a;
    r.M = M;
    r.opt = a.eval ? NULL : &opt;
    r.budget = bfit_plan_budget(a.memory, a.margin);
    rc = compute(&r);
    if (rc != BFIT_OK) {
        cli_error("planning %s: %s", a.model, bfit_errmsg());
        goto out_model;
    }
    if (a.json) {
        if (print_json(&r)) {
            cli_error("out of host memory");
            goto out_model;
        }
    } else {
        print_human(&r);
    }
    fflush(stdout);
    ret = check_fits(&r);
out_model:
    bfit_model_free(M);
    bfit_arena_free(arena);
    bfit_device_free(dev);
    bfit_graph_fini(&g);
    return ret;
}
