/* trig.c - a model on a device for tests (trig.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "trig.h"
#include "nn/zoo.h"

void trig_open(trig *r, int threads, uint64_t capacity)
{
    bfit_device_cfg c = bfit_device_cfg_default();
    memset(r, 0, sizeof *r);
    c.threads = threads;
    if (bfit_device_cpu_new(&c, &r->dev) != BFIT_OK)
        fail_msg("device: %s", bfit_errmsg());
    r->arena = bfit_device_arena_new(r->dev, capacity);
    assert_non_null(r->arena);
}

void trig_model(trig *r, bfit_graph_desc *g)
{
    int rc = bfit_model_new(g, r->dev, r->arena, &r->M);
    bfit_graph_fini(g);
    if (rc != BFIT_OK)
        fail_msg("model: %s", bfit_errmsg());
}

void trig_load(trig *r, const char *src)
{
    bfit_graph_desc g;
    if (bfit_model_source_load(src, 0, &g) != BFIT_OK)
        fail_msg("%s: %s", src, bfit_errmsg());
    trig_model(r, &g);
}

void trig_free(trig *r)
{
    bfit_optim_free(r->opt);
    bfit_model_free(r->M);
    bfit_arena_free(r->arena);
    bfit_device_free(r->dev);
    memset(r, 0, sizeof *r);
}
