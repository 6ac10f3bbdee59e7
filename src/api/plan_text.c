/* plan_text.c - what `batchfit plan` says about a plan, for people (the
 * table of categories against micro-batches, the per-sample line, the
 * largest batch) and as JSON; and the same for the ways table. */
#include "api/plan_int.h"
#include "base/text.h"
#include "nn/zoo.h"

#include <stdio.h>
#include <string.h>


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

/* Why a workspace is not affine in m: the library choosing its algorithms */
static const char *ws_why(const plan_report *r, int cat)
{
    if (cat != BFIT_MEM_WORKSPACE)
        return "";
    return threads_of(r->M->dev) > 0 ? " (oneDNN picks its algorithms, and so their scratch, by batch size and thread count)"
                                     : " (cuDNN and cuBLAS pick their algorithms, and so their workspace, by batch size)";
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
static void print_storage(const plan_report *r)
{
    FILE *f = r->f;
    bfit_storage st = bfit_model_storage(r->M);
    const bfit_step_plan *p = &r->pr.shown[r->pr.nshown - 1];
    fprintf(f, "storage: %s%s%s, recompute %s", bfit_dtype_name(st.precision),
            r->a->precision_auto ? bfit_precision_auto_note(st.precision) : "",
            st.lean ? " lean" : "", bfit_recompute_name(r->a->st.recompute));
    if (r->a->st.recompute == BFIT_RECOMPUTE_AUTO)
        fprintf(f, " (chose the values to keep: %s)", bfit_recompute_name(st.recompute));
    if (!r->a->eval)
        fprintf(f, "; recomputed work at m=%d: %.1f%% of the step", p->m, p->flops > 0 ? 100 * p->regen_flops / p->flops : 0.0);
    fprintf(f, "\n\n");
}

/* Which model, which step, which device and memory, and the storage. */
static void text_header(const plan_report *r, FILE *f)
{
    const plan_args *a = r->a;
    char b1[32], b2[32], sh[32];
    int file = bfit_model_source_is_file(a->model), threads = threads_of(r->M->dev);

    if (r->M->input_dtype == BFIT_I32)
        snprintf(sh, sizeof sh, "%d tokens", r->M->input.d[0]);
    else
        bfit_shape_str(r->M->input, sh, sizeof sh);
    fprintf(f, "batchfit plan: %s (%s), input %s, %d classes%s, %s parameters\n", a->model,
           file ? (bfit_model_source_is_onnx(a->model) ? "ONNX file" : "spec file") : "preset",
           sh, r->M->nclasses, r->M->per_token ? " per token" : "",
           bfit_thousands((double)bfit_model_param_count(r->M), b1, sizeof b1));
    if (r->M->input_dtype == BFIT_I32)
        fprintf(f, "a sample is a sequence of %d tokens; attention %s\n", r->M->input.d[0],
               a->lean ? "lean (a log-sum-exp per row kept, the matrix recomputed in backward)"
                       : "stored (each head's T x T probabilities kept for backward)");
    if (r->M->gather) /* --mask-tokens */
        fprintf(f, "a masked LM: its head runs at the masked tokens only, %d rows of each sequence's %d (what "
                   "--mask-tokens draws, with room to spare)\n", bfit_model_loss_rows(r->M), r->M->input.d[0]);
    if (a->eval)
        fprintf(f, "inference step (--eval): parameters only, no gradients or optimizer state\n");
    else if (r->opt->kind == BFIT_OPT_ADAMW)
        fprintf(f, "training step, optimizer adamw: 2 state tensors per parameter\n");
    else if (r->opt->momentum > 0)
        fprintf(f, "training step, optimizer sgd with momentum %g: 1 state tensor per parameter\n", r->opt->momentum);
    else
        fprintf(f, "training step, optimizer sgd without momentum: no optimizer state\n");
    fprintf(f, "device %s\n", a->device_why);
    fprintf(f, "memory %s, margin %g%%: budget %s", fmt(a->memory, b1, sizeof b1), 100 * a->margin,
           fmt(r->pr.budget, b2, sizeof b2));
    if (threads > 0) /* a GPU's workspaces do not depend on host threads */
        fprintf(f, "; workspaces sized for %d thread%s", threads, threads == 1 ? "" : "s");
    fprintf(f, "\n");
    print_storage(r);
}

/* The table: bytes per category, fixed and per sample, at each batch shown. */
static void text_table(const plan_report *r, FILE *f)
{
    const plan_args *a = r->a;
    char b1[32], b2[32], b3[32];
    uint64_t fixed = r->pr.p1.fixed;

    fprintf(f, "%-14s %11s %11s", "category", "fixed", "per sample");
    for (int i = 0; i < r->pr.nshown; i++) {
        char h[24];
        snprintf(h, sizeof h, "m=%d", r->pr.shown[i].m);
        fprintf(f, " %11s", h);
    }
    fputc('\n', f);
    for (int k = 0; k < NROWS; k++) {
        bfit_mem_cat c = rows[k];
        int is_fixed = k < NFIXED;
        fprintf(f, "%-14s %11s %11s", row_name(c), is_fixed ? fmt(r->pr.p1.bytes[c], b1, sizeof b1) : "-",
               is_fixed ? "-" : fmt_d(r->pr.line.cat_slope[c], b2, sizeof b2));
        for (int i = 0; i < r->pr.nshown; i++)
            fprintf(f, " %11s", fmt(r->pr.shown[i].bytes[c], b3, sizeof b3));
        fputc('\n', f);
    }
    fprintf(f, "%-14s %11s %11s", "peak", fmt(fixed, b1, sizeof b1), fmt_d(r->pr.line.slope, b2, sizeof b2));
    for (int i = 0; i < r->pr.nshown; i++)
        fprintf(f, " %11s", fmt(r->pr.shown[i].peak, b3, sizeof b3));
    fprintf(f, "\n%-14s %11s %11s", "without reuse", "", "");
    for (int i = 0; i < r->pr.nshown; i++)
        fprintf(f, " %11s", fmt(r->pr.shown[i].no_reuse, b3, sizeof b3));
    fprintf(f, "\n%-14s %11s %11s", "reuse saves", "", "");
    for (int i = 0; i < r->pr.nshown; i++)
        fprintf(f, " %11s", fmt(r->pr.shown[i].no_reuse - r->pr.shown[i].peak, b3, sizeof b3));
    fprintf(f, "\n%-14s %11s %11s", "fits", "", "");
    for (int i = 0; i < r->pr.nshown; i++)
        fprintf(f, " %11s", r->pr.shown[i].peak <= r->pr.budget ? "yes" : r->pr.shown[i].peak <= a->memory ? "in margin" : "NO");
    fprintf(f, "\n\n");
}

/* How the peak grows with the batch, and the largest batch that fits. */
static void text_summary(const plan_report *r, FILE *f)
{
    const plan_args *a = r->a;
    char b1[32], b2[32], b3[32], sh[32];

    fprintf(f, "per sample: measured between m=%d and m=%d; ", r->pr.line.m1, r->pr.line.m2);
    if (!r->pr.affine)
        fprintf(f, "the plan is not affine: at m=%d it is %s %s that line, mostly in %s%s\n", r->pr.line.dev_m,
               fmt(r->pr.line.max_dev, b1, sizeof b1), r->pr.dev_signed < 0 ? "below" : "above",
               bfit_mem_cat_name(r->pr.dev_cat), ws_why(r, r->pr.dev_cat));
    else if (r->pr.affine1)
        fprintf(f, "the plan is affine: peak = %s + m x %s (within %s)\n", fmt_d(r->pr.line.intercept, b1, sizeof b1),
               fmt_d(r->pr.line.slope, b2, sizeof b2), fmt(r->pr.line.max_dev, b3, sizeof b3));
    else
        fprintf(f, "the plan is affine from m=2: peak = %s + m x %s (within %s);\n  at m=1 it is %s %s that line, "
               "mostly in %s%s\n",
               fmt_d(r->pr.line.intercept, b1, sizeof b1), fmt_d(r->pr.line.slope, b2, sizeof b2),
               fmt(r->pr.line.max_dev, b3, sizeof b3), fmt_d(r->pr.dev1 < 0 ? -r->pr.dev1 : r->pr.dev1, sh, sizeof sh),
               r->pr.dev1 < 0 ? "below" : "above", bfit_mem_cat_name(r->pr.dev1_cat),
               ws_why(r, r->pr.dev1_cat));
    if (r->pr.m_margin == 0)
        fprintf(f, "largest batch: none fits in the budget %s (batch 1 needs %s)", fmt(r->pr.budget, b1, sizeof b1),
               fmt(r->pr.p1.peak, b2, sizeof b2));
    else
        fprintf(f, "largest batch: %d%s within the budget %s (memory less the %g%% margin)", r->pr.m_margin,
               r->pr.m_margin == BFIT_PLAN_LIMIT ? " (the search limit)" : "", fmt(r->pr.budget, b1, sizeof b1),
               100 * a->margin);
    if (r->pr.m_full)
        fprintf(f, ", %d%s in all %s\n", r->pr.m_full, r->pr.m_full == BFIT_PLAN_LIMIT ? " (the search limit)" : "",
               fmt(a->memory, b2, sizeof b2));
    else
        fprintf(f, ", none in all %s\n", fmt(a->memory, b2, sizeof b2));
    if (r->M->per_token && r->pr.m_margin) /* what --batch-tokens plans a micro-batch as */
        fprintf(f, "in tokens: a micro-batch of %lld (%d sequences of %d) within the budget\n",
               (long long)r->pr.m_margin * r->M->input.d[0], r->pr.m_margin, r->M->input.d[0]);
}

void bfit_plan_text(const plan_report *r)
{
    text_header(r, r->f);
    text_table(r, r->f);
    text_summary(r, r->f);
}

static void add_cats(cJSON *o, const bfit_step_plan *p)
{
    for (int k = 0; k < NROWS; k++)
        cJSON_AddNumberToObject(o, row_name(rows[k]), (double)p->bytes[rows[k]]);
}

/* The model, the options and the storage the plan is of. */
static void json_setup(const plan_report *r, cJSON *root)
{
    const plan_args *a = r->a;
    bfit_storage st = bfit_model_storage(r->M);
    char sh[32];

    cJSON_AddStringToObject(root, "model", a->model);
    cJSON_AddStringToObject(root, "source", bfit_model_source_is_file(a->model) ? "file" : "preset");
    cJSON_AddStringToObject(root, "input", bfit_shape_str(r->M->input, sh, sizeof sh));
    if (r->M->input_dtype == BFIT_I32) {
        cJSON_AddNumberToObject(root, "seq", r->M->input.d[0]);
        cJSON_AddStringToObject(root, "attention", a->lean ? "lean" : "stored");
    }
    if (r->M->gather) /* a masked LM's head at its masked tokens: rows of each sequence */
        cJSON_AddNumberToObject(root, "head_rows", bfit_model_loss_rows(r->M));
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
    cJSON_AddStringToObject(root, "precision", bfit_dtype_name(st.precision));
    cJSON_AddBoolToObject(root, "lean", st.lean);
    cJSON_AddStringToObject(root, "recompute", bfit_recompute_name(a->st.recompute));
    cJSON_AddStringToObject(root, "recompute_chosen", bfit_recompute_name(st.recompute));
}

int bfit_plan_json(const plan_report *r, cJSON *root)
{
    const plan_args *a = r->a;
    cJSON *o, *arr;

    json_setup(r, root);
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
        const bfit_step_plan *p = &r->pr.shown[i];
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
    cJSON_AddNumberToObject(o, "limit", BFIT_PLAN_LIMIT);
    cJSON_AddNumberToObject(o, "batch1_peak", (double)r->pr.p1.peak);
    cJSON_AddStringToObject(root, "device_choice", r->a->device_why);

    return BFIT_OK;
}

void bfit_ways_text(const plan_args *a, const bfit_way *w, uint64_t budget, FILE *f)
{
    char b1[32], b2[32];
    fprintf(f, "batchfit plan --ways: %s in %s (budget %s), optimizer %s\n", a->model, fmt(a->memory, b1, sizeof b1),
           fmt(budget, b2, sizeof b2), bfit_optim_kind_name(a->kind));
    fprintf(f, "device %s\n\n", a->device_why);
    int conv = w[0].conv_algo >= 0; /* chosen per row */
    fprintf(f, "%-40s %9s %9s %11s %8s%s%s\n", "way", "micro", "batch", "peak", "extra", conv ? "  conv   " : "",
            a->measure ? "     step  samples/s" : "");
    for (int i = 0; i < BFIT_WAYS; i++) {
        fprintf(f, "%-40s %9d %9d %11s %7.1f%%", w[i].name, w[i].m, w[i].batch, w[i].m ? fmt(w[i].peak, b1, sizeof b1) : "-",
               100 * w[i].extra);
        if (conv)
            fprintf(f, "  %-7s", bfit_conv_algo_name((bfit_conv_algo)w[i].conv_algo));
        if (w[i].error[0])
            fprintf(f, "  %s", w[i].error);
        else if (a->measure && w[i].measure_failed)
            fprintf(f, "  out of memory while measuring");
        else if (a->measure && w[i].step_secs > 0)
            fprintf(f, " %7.3fs %10.1f%s", w[i].step_secs, w[i].samples_per_sec, w[i].accum > 1 ? " (2 micro-steps)" : "");
        fputc('\n', f);
    }
    fprintf(f, "\nmicro: the largest micro-batch that fits; batch: the effective batch (micro x accumulation);\n"
           "extra: recomputed FLOPs over the step's own (modelled)%s\n",
           a->measure ? "; step: median of 3 measured steps on random samples" : "");
    if (conv)
        fprintf(f, "conv: the GPU's convolution algorithms of the row, the fastest unless the leanest fit more\n");
}

int bfit_ways_json(const plan_args *a, const bfit_way *w, uint64_t budget, cJSON *root)
{
    cJSON *arr;
    cJSON_AddStringToObject(root, "model", a->model);
    cJSON_AddNumberToObject(root, "memory", (double)a->memory);
    cJSON_AddNumberToObject(root, "budget", (double)budget);
    cJSON_AddStringToObject(root, "device_choice", a->device_why);
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
        if (w[i].conv_algo >= 0)
            cJSON_AddStringToObject(o, "conv_algo", bfit_conv_algo_name((bfit_conv_algo)w[i].conv_algo));
        if (w[i].error[0])
            cJSON_AddStringToObject(o, "error", w[i].error);
        if (a->measure) {
            cJSON_AddNumberToObject(o, "step_seconds", w[i].step_secs);
            cJSON_AddNumberToObject(o, "samples_per_second", w[i].samples_per_sec);
            cJSON_AddBoolToObject(o, "measure_out_of_memory", w[i].measure_failed);
        }
    }
    return BFIT_OK;
}

