/* bfit_gpu.c - the batchfit side of the GPU proof kit (bench/gpu/run.sh):
 * the plan against the arena's measured peak, and the speed of training
 * steps, on any device (the kit's dry run uses the CPU).
 *
 *   bfit_gpu plan DEVICE MODEL PRECISION M[,M...]
 *   bfit_gpu speed DEVICE MODEL PRECISION M [STEPS]
 *
 * plan: for each micro-batch m, a fresh arena and model in that precision
 * (lean, SGD with momentum), the plan computed, then everything the plan
 * counts allocated and one training step run on random samples; one JSON
 * line per m with the planned and measured peaks and the categories that
 * differ (a refused allocation is reported as such, not as a mismatch).
 * speed: WARMUP 3 untimed steps, then STEPS (default 20) timed ones, each
 * waited for; one JSON line with the median step and samples (and tokens)
 * per second. Inputs are random: samples in [0, 1), token ids, labels.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "batch/plan.h"
#include "batchfit.h"
#include "device/device.h"
#include "nn/model.h"
#include "nn/zoo.h"
#include "optim/optim.h"

#define WARMUP 3

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static uint32_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)(*s >> 32);
}

/* m random samples (token ids for a token model) and labels, uploaded */
static int random_input(bfit_model *M, int m, uint64_t *seed)
{
    int64_t n = (int64_t)m * bfit_shape_numel(M->input), nl = (int64_t)m * M->labels_per_sample;
    int vocab = M->input_dtype == BFIT_I32 ? M->nodes[0].l->cfg.vocab : 0;
    float *x = malloc(sizeof *x * (size_t)n);
    int32_t *y = malloc(sizeof *y * (size_t)nl);
    int rc = BFIT_ENOMEM;
    if (x && y) {
        for (int64_t i = 0; i < n; i++) {
            if (vocab)
                ((int32_t *)x)[i] = (int32_t)(rng(seed) % (uint32_t)vocab);
            else
                x[i] = (float)rng(seed) / 4294967296.0f;
        }
        for (int64_t i = 0; i < nl; i++)
            y[i] = (int32_t)(rng(seed) % (uint32_t)M->nclasses);
        rc = bfit_model_set_input(M, x, y, m);
    }
    free(x);
    free(y);
    return rc;
}

typedef struct setup {
    bfit_arena *arena;
    bfit_model *M;
    bfit_optim *opt;
    bfit_optim_cfg oc;
} setup;

static void setup_free(setup *s)
{
    bfit_optim_free(s->opt);
    bfit_model_free(s->M);
    bfit_arena_free(s->arena);
    memset(s, 0, sizeof *s);
}

/* model in precision t on dev, with a fresh arena; with m > 0 planned into
 * *p and then allocated as the trainer does */
static int setup_new(bfit_device *dev, const char *model, bfit_dtype t, int m, bfit_step_plan *p, setup *s)
{
    bfit_graph_desc g;
    bfit_storage st = bfit_storage_default();
    uint64_t free_b = 0, total = 0;
    int rc;

    memset(s, 0, sizeof *s);
    s->oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
    st.precision = t;
    if (bfit_device_memory(dev, &free_b, &total) != BFIT_OK || !free_b)
        free_b = 8ull << 30;
    if (!(s->arena = bfit_device_arena_new(dev, free_b)))
        return BFIT_ENOMEM;
    if ((rc = bfit_model_source_load(model, 0, &g)) != BFIT_OK)
        return rc;
    rc = bfit_model_new(&g, dev, s->arena, &s->M);
    bfit_graph_fini(&g);
    if (rc == BFIT_OK)
        rc = bfit_model_set_storage(s->M, &st, &s->oc, free_b, 0);
    if (rc == BFIT_OK && p)
        rc = bfit_plan_compute(s->M, &s->oc, m, 1, p);
    if (rc == BFIT_OK)
        rc = bfit_model_alloc_params(s->M, 1);
    if (rc == BFIT_OK)
        rc = bfit_model_init_params(s->M, 7);
    if (rc == BFIT_OK)
        rc = bfit_optim_new(&s->oc, s->M->trainable, s->M->ntrainable, dev, s->arena, &s->opt);
    if (rc == BFIT_OK)
        rc = bfit_model_reserve(s->M, m, 1);
    return rc;
}

/* one training step as the trainer runs it, waited for */
static int train_step(bfit_device *dev, setup *s, int m, uint64_t seed)
{
    double loss;
    int rc;
    if ((rc = bfit_model_stats_reset(s->M)) != BFIT_OK || (rc = bfit_model_forward(s->M, seed)) != BFIT_OK ||
        (rc = bfit_model_backward(s->M, 1.0f / (float)m)) != BFIT_OK || (rc = bfit_optim_step(s->opt, 0.01)) != BFIT_OK ||
        (rc = bfit_model_refresh_copies(s->M)) != BFIT_OK || (rc = bfit_model_zero_grads(s->M)) != BFIT_OK ||
        (rc = bfit_model_stats_read(s->M, &loss, NULL)) != BFIT_OK)
        return rc;
    return bfit_device_sync(dev);
}

static void json_error(const char *cmd, const char *model, bfit_dtype t, int m, int rc)
{
    char esc[1024];
    size_t k = 0;
    for (const char *e = bfit_errmsg(); *e && k + 2 < sizeof esc; e++) {
        if (*e == '"' || *e == '\\')
            esc[k++] = '\\';
        esc[k++] = *e >= 32 ? *e : ' ';
    }
    esc[k] = '\0';
    printf("{\"cmd\":\"%s\",\"model\":\"%s\",\"precision\":\"%s\",\"m\":%d,\"ok\":false,\"out_of_memory\":%s,"
           "\"error\":\"%s\"}\n",
           cmd, model, bfit_dtype_name(t), m, rc == BFIT_ENOMEM ? "true" : "false", esc);
}

static int cmd_plan(bfit_device *dev, const char *model, bfit_dtype t, const char *list)
{
    int bad = 0;
    for (const char *p = list; *p;) {
        int m = atoi(p), rc;
        bfit_step_plan plan;
        bfit_arena_stats st;
        setup s;
        uint64_t seed = 0x9E3779B97F4A7C15ull;
        char diff[512] = "";
        size_t len = 0;

        rc = setup_new(dev, model, t, m, &plan, &s);
        if (rc == BFIT_OK)
            rc = random_input(s.M, m, &seed);
        if (rc == BFIT_OK)
            rc = train_step(dev, &s, m, 1);
        if (rc != BFIT_OK) {
            json_error("plan", model, t, m, rc);
            bad += rc != BFIT_ENOMEM;
        } else {
            bfit_arena_stats_get(s.arena, &st);
            for (int c = 0; c < BFIT_MEM_NCAT && len < sizeof diff; c++)
                if (st.peak_cat[c] != plan.bytes[c])
                    len += (size_t)snprintf(diff + len, sizeof diff - len, "%s\"%s\":[%llu,%llu]", len ? "," : "",
                                            bfit_mem_cat_name((bfit_mem_cat)c), (unsigned long long)plan.bytes[c],
                                            (unsigned long long)st.peak_cat[c]);
            printf("{\"cmd\":\"plan\",\"device\":\"%s\",\"model\":\"%s\",\"precision\":\"%s\",\"m\":%d,\"ok\":true,"
                   "\"planned\":%llu,\"measured\":%llu,\"equal\":%s,\"differ\":{%s}}\n",
                   bfit_device_name(dev), model, bfit_dtype_name(t), m, (unsigned long long)plan.peak,
                   (unsigned long long)st.peak, st.peak == plan.peak && !len ? "true" : "false", diff);
            bad += st.peak != plan.peak || len;
        }
        fflush(stdout);
        setup_free(&s);
        p = strchr(p, ',');
        p = p ? p + 1 : "";
    }
    return bad ? 1 : 0;
}

static int cmd_speed(bfit_device *dev, const char *model, bfit_dtype t, int m, int steps)
{
    setup s;
    double *dt = calloc((size_t)steps, sizeof *dt), med;
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    int rc = dt ? setup_new(dev, model, t, m, NULL, &s) : BFIT_ENOMEM, tokens;

    if (rc == BFIT_OK)
        rc = random_input(s.M, m, &seed);
    for (int i = -WARMUP; rc == BFIT_OK && i < steps; i++) {
        double t0 = now();
        rc = train_step(dev, &s, m, (uint64_t)i + 10);
        if (i >= 0)
            dt[i] = now() - t0;
    }
    if (rc != BFIT_OK) {
        json_error("speed", model, t, m, rc);
        setup_free(&s);
        free(dt);
        return rc == BFIT_ENOMEM ? 0 : 1;
    }
    qsort(dt, (size_t)steps, sizeof *dt, cmp_double);
    med = dt[steps / 2];
    tokens = s.M->input_dtype == BFIT_I32 ? s.M->input.d[0] : 1;
    printf("{\"cmd\":\"speed\",\"device\":\"%s\",\"model\":\"%s\",\"precision\":\"%s\",\"m\":%d,\"ok\":true,"
           "\"steps\":%d,\"median_step_s\":%.6f,\"samples_per_s\":%.2f,\"tokens_per_s\":%.1f}\n",
           bfit_device_name(dev), model, bfit_dtype_name(t), m, steps, med, m / med, (double)m * tokens / med);
    setup_free(&s);
    free(dt);
    return 0;
}

int main(int argc, char **argv)
{
    bfit_device *dev = NULL;
    bfit_dtype t;
    int rc;

    if (argc < 6 || (strcmp(argv[1], "plan") && strcmp(argv[1], "speed"))) {
        fprintf(stderr, "usage: bfit_gpu plan DEVICE MODEL PRECISION M[,M...]\n"
                        "       bfit_gpu speed DEVICE MODEL PRECISION M [STEPS]\n");
        return 2;
    }
    if (bfit_precision_parse(argv[4], &t) != BFIT_OK) {
        fprintf(stderr, "bfit_gpu: %s\n", bfit_errmsg());
        return 2;
    }
    if (bfit_device_open(argv[2], NULL, &dev) != BFIT_OK) {
        fprintf(stderr, "bfit_gpu: %s\n", bfit_errmsg());
        return 1;
    }
    if (!strcmp(argv[1], "plan"))
        rc = cmd_plan(dev, argv[3], t, argv[5]);
    else
        rc = cmd_speed(dev, argv[3], t, atoi(argv[5]), argc > 6 && atoi(argv[6]) > 0 ? atoi(argv[6]) : 20);
    bfit_device_free(dev);
    return rc;
}
