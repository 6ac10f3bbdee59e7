/* session.c - the shared set-up of a run (see session.h). */
#include "base/err.h"
#include "batch/session.h"
#include "nn/zoo.h"

#include <stdlib.h>
#include <string.h>

#define SYNTHETIC_COUNT 512 /* samples of "synthetic" data; streams cycle through them */

int bfit_session_open_model(bfit_session *s, const bfit_session_cfg *c)
{
    uint64_t memory = c->memory;
    int rc;

    memset(s, 0, sizeof *s);
    if (!memory)
        memory = bfit_host_available_memory();
    if (!memory)
        return bfit_fail(BFIT_EINVAL, "cannot tell the available memory: give --memory");
    s->arena = bfit_arena_new(memory, NULL);
    if (!s->arena)
        return bfit_fail(BFIT_ENOMEM, "out of host memory");
    rc = bfit_device_cpu_new(s->arena, c->threads, &s->dev);
    if (rc != BFIT_OK)
        return rc;
    rc = bfit_model_source_load(c->model, &s->g);
    if (rc != BFIT_OK)
        return rc;
    return bfit_model_new(&s->g, s->dev, &s->M);
}

/* Random samples of the model's input shape, labels 0..nclasses-1. */
static int synthetic_data(const bfit_model *M, uint64_t seed, bfit_dataset **out)
{
    int64_t numel = bfit_shape_numel(M->input), n = (int64_t)SYNTHETIC_COUNT * numel;
    float *x = malloc(sizeof *x * (size_t)n);
    int32_t *y = malloc(sizeof *y * SYNTHETIC_COUNT);
    uint64_t r = seed * 0x9E3779B97F4A7C15ull + 1;
    int rc;

    if (!x || !y) {
        free(x);
        free(y);
        return bfit_fail(BFIT_ENOMEM, "out of host memory for %d synthetic samples", SYNTHETIC_COUNT);
    }
    for (int64_t i = 0; i < n; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(r >> 40) / (double)(1ull << 24)) - 0.5f;
    }
    for (int i = 0; i < SYNTHETIC_COUNT; i++)
        y[i] = i % M->nclasses;
    rc = bfit_dataset_from_floats(M->input, SYNTHETIC_COUNT, M->nclasses, x, y, out);
    free(x);
    free(y);
    return rc;
}

static int check_data(const bfit_session *s, const bfit_session_cfg *c, const bfit_dataset *d)
{
    char a[32], b[32];
    const char *name = c->data ? c->data : bfit_dataset_source(d);
    if (!bfit_shape_eq(bfit_dataset_shape(d), s->M->input))
        return bfit_fail(BFIT_EINVAL, "%s: the model takes inputs of %s but the data set %s has samples of %s", c->model,
                         bfit_shape_str(s->M->input, a, sizeof a), name, bfit_shape_str(bfit_dataset_shape(d), b, sizeof b));
    if (bfit_dataset_classes(d) > s->M->nclasses)
        return bfit_fail(BFIT_EINVAL, "%s: the model has %d class scores but the data set %s has %d classes", c->model,
                         s->M->nclasses, name, bfit_dataset_classes(d));
    return BFIT_OK;
}

int bfit_session_open_data(bfit_session *s, const bfit_session_cfg *c)
{
    int synthetic = c->data && !strcmp(c->data, "synthetic"), rc;

    s->train = c->given_train;
    s->test = c->given_test;
    if (!s->train && (c->want_train || (c->normalize && !c->given_mean))) {
        rc = synthetic ? synthetic_data(s->M, c->seed, &s->train_own) : bfit_dataset_load(c->data, 1, NULL, &s->train_own);
        if (rc != BFIT_OK)
            return rc;
        s->train = s->train_own;
    }
    if (!s->test && c->want_test) {
        if (c->test_data)
            rc = bfit_dataset_load(c->test_data, 0, NULL, &s->test_own);
        else
            rc = synthetic ? synthetic_data(s->M, c->seed + 1, &s->test_own)
                           : bfit_dataset_load(c->data, 0, NULL, &s->test_own);
        if (rc != BFIT_OK)
            return rc;
        s->test = s->test_own;
    }
    if (s->train && (rc = check_data(s, c, s->train)) != BFIT_OK)
        return rc;
    if (s->test && (rc = check_data(s, c, s->test)) != BFIT_OK)
        return rc;
    if (c->normalize) {
        int ch = s->M->input.c;
        s->mean = calloc((size_t)ch, sizeof *s->mean);
        s->std = calloc((size_t)ch, sizeof *s->std);
        if (!s->mean || !s->std)
            return bfit_fail(BFIT_ENOMEM, "out of host memory");
        if (c->given_mean) {
            memcpy(s->mean, c->given_mean, sizeof *s->mean * (size_t)ch);
            memcpy(s->std, c->given_std, sizeof *s->std * (size_t)ch);
            return BFIT_OK;
        }
        return bfit_dataset_norm_stats(s->train, s->mean, s->std);
    }
    return BFIT_OK;
}

void bfit_session_close(bfit_session *s)
{
    bfit_model_free(s->M);
    bfit_graph_fini(&s->g);
    bfit_dataset_free(s->train_own);
    bfit_dataset_free(s->test_own);
    bfit_device_free(s->dev);
    bfit_arena_free(s->arena);
    free(s->mean);
    free(s->std);
    memset(s, 0, sizeof *s);
}
