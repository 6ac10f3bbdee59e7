/* find_text.c - what `batchfit find` says about its probe, for people (the
 * ladder's table, the largest and the fastest batch, whether the loader
 * keeps up, the steps it took) and as JSON. */
#include "api/find_int.h"
#include "base/text.h"
#include "nn/zoo.h"

#include <stdio.h>
#include <string.h>

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

static void print_table(const bfit_probe_result *r, FILE *f)
{
    char b1[32], b2[32], b3[32], b4[32];

    fprintf(f, "%7s  %13s  %13s  %10s  %10s  %9s\n", "batch", "planned peak", "measured peak", "samples/s", "step time",
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
        fprintf(f, "%7d  %13s  %13s  %10s  %10s  %8.0f%%%s\n", g->m, fmt(g->planned_peak, b1), fmt(g->measured_peak, b2),
               bfit_thousands(g->samples_per_s, b3, sizeof b3), bfit_format_secs(g->step_s, b4, sizeof b4), 100 * g->wait_share,
               mark);
    }
    if (r->next_refused)
        fprintf(f, "%7d  %13s  %13s  %10s  %10s  %9s  refused\n", r->largest + 1,
                r->next_unmade[0] ? "-" : fmt(r->plan_next.peak, b1), "-", "-", "-", "-");
}

/* The fastest batch and why, how noisy the measurements were, and whether
 * the loader keeps up (a ladder was run). */
static void text_fastest(const bfit_find_cfg *fc, const bfit_probe_result *r, FILE *f)
{
    const bfit_probe_rung *best = &r->rungs[r->best], *rec = &r->rungs[r->recommended];
    const bfit_probe_rung *top = &r->rungs[r->nrungs - 1];
    char b1[32];
    int noisy = -1;

    if (r->clear_best)
        fprintf(f, "fastest batch: %d, the best measured throughput (%s samples/s), ahead of every other size by "
                "more than their measured spread", rec->m, bfit_thousands(best->samples_per_s, b1, sizeof b1));
    else
        fprintf(f, "fastest batch: %d, the largest within %g%% of the best measured throughput (%s samples/s at "
                "%d), which leads by less than the measured spread", rec->m, 100 * fc->probe.tolerance,
                bfit_thousands(best->samples_per_s, b1, sizeof b1), best->m);
    if (top->samples_per_s < (1 - fc->probe.tolerance) * best->samples_per_s)
        fprintf(f, "; at the largest batch it is %.0f%% lower than the best",
               100 * (1 - top->samples_per_s / best->samples_per_s));
    fprintf(f, "\n");
    for (int i = 0; i < r->nrungs; i++)
        if (r->rungs[i].spread > 0.5 && (noisy < 0 || r->rungs[i].spread > r->rungs[noisy].spread))
            noisy = i;
    if (noisy >= 0)
        fprintf(f, "note: the measured steps at %d vary by %.0f%% of their median: something else is using the "
               "CPU, and the medians may mislead (rerun with more --repeats, or fewer --threads)\n",
               r->rungs[noisy].m, 100 * r->rungs[noisy].spread);
    if (r->loader_threads) {
        char b2[32], b3[32];
        fprintf(f, "loader: %d thread%s %s samples/s alone (decoding and transforming images); the step's "
                "compute alone runs %s samples/s at %d: ", r->loader_threads, r->loader_threads == 1 ? " makes" : "s make",
                bfit_thousands(r->loader_rate, b2, sizeof b2), bfit_thousands(r->compute_rate, b3, sizeof b3), rec->m);
        if (r->loader_bound)
            fprintf(f, "the loader bounds the speed at %s samples/s, so a batch whose compute is faster is not "
                    "faster (give more --loader-threads, fewer --threads, or smaller images)\n",
                    bfit_thousands(r->loader_rate, b2, sizeof b2));
        else
            fprintf(f, "the device bounds the speed, the loader keeps up\n");
    }
    if (r->data_bound) {
        fprintf(f, "data: %.0f%% of a step at %d waits for samples, over the %.0f%% threshold: the loader, not the "
               "batch size, is the limit. ",
               100 * r->data_share, rec->m, 100 * fc->probe.data_threshold);
        if (!fc->prefetch)
            fprintf(f, "Turn prefetching on (drop --no-prefetch) so samples are made while the step computes.\n");
        else if (r->threads > 1)
            fprintf(f, "The stream prefetches one take ahead on one thread, which shares the CPU with %d compute "
                   "threads: leave it a core (--threads %d)%s.\n",
                   r->threads, r->threads - 1, fc->augment ? " or make samples cheaper (drop --augment)" : "");
        else
            fprintf(f, "The stream prefetches one take ahead on one thread: give the run more cores%s.\n",
                   fc->augment ? " or make samples cheaper (drop --augment)" : "");
    } else {
        fprintf(f, "data: %.0f%% of a step at %d waits for samples (threshold %.0f%%): the loader keeps up\n",
               100 * r->data_share, rec->m, 100 * fc->probe.data_threshold);
    }
}

void bfit_find_text(const bfit_find_cfg *fc, const bfit_probe_result *r, FILE *f)
{
    char b1[32], b2[32], b3[32], b4[32], sh[32];
    int file = bfit_model_source_is_file(fc->model);

    if (r->input_tokens) /* as plan says it */
        snprintf(sh, sizeof sh, "%d tokens", r->input_dims[0]);
    else
        bfit_shape_str(input_shape(r), sh, sizeof sh);
    fprintf(f, "batchfit find: %s (%s) on %s: %s parameters, input %s, %d thread%s\n", fc->model,
           file ? (bfit_model_source_is_onnx(fc->model) ? "ONNX file" : "spec file") : "preset", fc->data, bfit_thousands((double)r->params, b1, sizeof b1),
           sh, r->threads, r->threads == 1 ? "" : "s");
    if (r->data_note[0])
        fprintf(f, "data: %s\n", r->data_note);
    fprintf(f, "memory %s, margin %g%%: budget %s; optimizer %s; fixed part %s\n\n", fmt(r->capacity, b1),
           100 * fc->probe.margin, fmt(r->budget, b2), optim_desc(&fc->opt, b3, sizeof b3), fmt(r->p1.fixed, b4));

    if (r->nrungs) {
        print_table(r, f);
        fputc('\n', f);
    }

    fprintf(f, "largest batch: %d", r->largest);
    if (r->plan_agrees) {
        fprintf(f, " (planned %s within the budget %s); confirmed: a real step ran at %d, measured peak %s",
               fmt(r->plan_largest.peak, b1), fmt(r->budget, b2), r->largest, fmt(r->measured_largest, b3));
        if (r->next_refused && r->next_unmade[0])
            fprintf(f, ", and %d cannot be made on this device (%s)\n", r->largest + 1, r->next_unmade);
        else if (r->next_refused)
            fprintf(f, ", and reserving %d (%s) was refused\n", r->largest + 1, fmt(r->plan_next.peak, b4));
        else
            fprintf(f, "; %d is the limit searched (--limit, or the training set's size)\n", r->limit);
    } else {
        fprintf(f, " (from a search with real steps, since the plan was contradicted; measured peak %s)\n",
               fmt(r->measured_largest, b1));
    }
    if (r->nrungs)
        text_fastest(fc, r, f);
    fprintf(f, "real steps for the largest batch: %d (", r->largest_steps);
    if (r->plan_agrees)
        fprintf(f, "a step at %d%s)", r->largest, r->largest < r->limit ? ", a refusal one up" : "");
    else
        fprintf(f, "including a search with real steps)");
    fprintf(f, "; a doubling-then-bisecting search with %d steps per trial needs %d (%d trial%s) to answer %d",
           BFIT_PROBE_SEARCH_STEPS, r->search_steps, r->search_trials, r->search_trials == 1 ? "" : "s",
           r->search_m);
    if (3 * r->largest_steps <= r->search_steps)
        fprintf(f, ": find used %s a third of that\n", r->largest_steps * 3 == r->search_steps ? "exactly" : "less than");
    else
        fprintf(f, ": MORE than a third of that\n");
    if (r->nrungs) {
        fprintf(f, "real steps for the fastest batch: %d more (%d size%s x (%d warm-up + %d measured)); %d in all\n",
               r->ladder_steps, r->nrungs, r->nrungs == 1 ? "" : "s", fc->probe.warmup, fc->probe.repeats,
               r->largest_steps + r->ladder_steps);
    }
}

/* ---- JSON ---------------------------------------------------------------- */

/* Image folders: the loader's figures and which side bounds the speed (the
 * text's `loader:` line); nothing for data held in memory. */
static void json_loader(const bfit_probe_result *r, cJSON *root)
{
    cJSON *o;

    if (!r->loader_threads)
        return;
    o = cJSON_AddObjectToObject(root, "loader");
    cJSON_AddNumberToObject(o, "threads", r->loader_threads);
    cJSON_AddNumberToObject(o, "samples_per_s", r->loader_rate);
    cJSON_AddNumberToObject(o, "compute_samples_per_s", r->compute_rate);
    cJSON_AddNumberToObject(o, "at_batch", r->nrungs ? r->rungs[r->recommended].m : r->largest);
    cJSON_AddBoolToObject(o, "bounds", r->loader_bound);
}

int bfit_find_json(const bfit_find_cfg *fc, const bfit_probe_result *r, cJSON *root)
{
    cJSON *o, *arr;
    char sh[32];

    cJSON_AddStringToObject(root, "model", fc->model);
    cJSON_AddStringToObject(root, "source", bfit_model_source_is_file(fc->model) ? "file" : "preset");
    cJSON_AddStringToObject(root, "data", fc->data);
    cJSON_AddStringToObject(root, "input", bfit_shape_str(input_shape(r), sh, sizeof sh));
    cJSON_AddNumberToObject(root, "parameters", (double)r->params);
    cJSON_AddNumberToObject(root, "threads", r->threads);
    cJSON_AddStringToObject(root, "optimizer", bfit_optim_kind_name(fc->opt.kind));
    if (fc->opt.kind == BFIT_OPT_SGD)
        cJSON_AddNumberToObject(root, "momentum", fc->opt.momentum);
    cJSON_AddNumberToObject(root, "memory", (double)r->capacity);
    cJSON_AddNumberToObject(root, "margin", fc->probe.margin);
    cJSON_AddNumberToObject(root, "budget", (double)r->budget);
    cJSON_AddNumberToObject(root, "fixed", (double)r->p1.fixed);
    cJSON_AddNumberToObject(root, "limit", r->limit);

    o = cJSON_AddObjectToObject(root, "largest");
    cJSON_AddNumberToObject(o, "batch", r->largest);
    cJSON_AddNumberToObject(o, "planned", r->plan_m);
    cJSON_AddNumberToObject(o, "planned_peak", (double)r->plan_largest.peak);
    cJSON_AddNumberToObject(o, "measured_peak", (double)r->measured_largest);
    cJSON_AddBoolToObject(o, "next_refused", r->next_refused);
    if (r->largest < r->limit && r->next_unmade[0])
        cJSON_AddStringToObject(o, "next_unmade", r->next_unmade);
    else if (r->largest < r->limit)
        cJSON_AddNumberToObject(o, "next_planned_peak", (double)r->plan_next.peak);
    cJSON_AddBoolToObject(o, "plan_agrees", r->plan_agrees);
    if (!r->plan_agrees)
        cJSON_AddStringToObject(o, "disagreement", r->disagreement);

    if (r->nrungs) {
        o = cJSON_AddObjectToObject(root, "fastest");
        cJSON_AddNumberToObject(o, "recommended", r->rungs[r->recommended].m);
        cJSON_AddNumberToObject(o, "best", r->rungs[r->best].m);
        cJSON_AddNumberToObject(o, "best_samples_per_s", r->rungs[r->best].samples_per_s);
        cJSON_AddBoolToObject(o, "clear_lead", r->clear_best);
        cJSON_AddNumberToObject(o, "tolerance", fc->probe.tolerance);
        cJSON_AddNumberToObject(o, "data_wait_share", r->data_share);
        cJSON_AddNumberToObject(o, "data_threshold", fc->probe.data_threshold);
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
    json_loader(r, root);
    o = cJSON_AddObjectToObject(root, "steps");
    cJSON_AddNumberToObject(o, "largest", r->largest_steps);
    cJSON_AddNumberToObject(o, "ladder", r->ladder_steps);
    cJSON_AddNumberToObject(o, "total", r->largest_steps + r->ladder_steps);
    cJSON_AddNumberToObject(o, "search_trials", r->search_trials);
    cJSON_AddNumberToObject(o, "search_steps", r->search_steps);
    cJSON_AddNumberToObject(o, "search_answer", r->search_m);

    return BFIT_OK;
}

