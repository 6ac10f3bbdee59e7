/* tdev.c - a device and paired host/device buffers for tests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tdev.h"
#include "batch/plan.h"
#include "nn/spec.h"

void tdev_open_at(tdev *t, int threads, uint64_t capacity)
{
    bfit_device_cfg c = bfit_device_cfg_default();
    c.threads = threads;
    memset(t, 0, sizeof *t);
    if (bfit_device_cpu_new(&c, &t->dev) != BFIT_OK)
        fail_msg("device: %s", bfit_errmsg());
    t->arena = bfit_device_arena_new(t->dev, capacity);
    assert_non_null(t->arena);
}

void tdev_open(tdev *t, int threads) { tdev_open_at(t, threads, 4ull << 30); }

/* The arena goes before its device. */
void tdev_close(tdev *t)
{
    bfit_arena_free(t->arena);
    bfit_device_free(t->dev);
    memset(t, 0, sizeof *t);
}

int tdev_setup(void **state)
{
    tdev *t = calloc(1, sizeof *t);
    if (!t)
        return -1;
    tdev_open(t, 0);
    *state = t;
    return 0;
}

int tdev_teardown(void **state)
{
    tdev *t = *state;
    tdev_close(t);
    free(t);
    return 0;
}

void *tdev_alloc(tdev *t, size_t n)
{
    void *p = NULL;
    if (bfit_arena_alloc(t->arena, n ? n : 1, BFIT_MEM_OTHER, &p) != BFIT_OK)
        fail_msg("device allocation of %zu bytes: %s", n, bfit_errmsg());
    return p;
}

void tdev_release(tdev *t, void *p) { bfit_arena_release(t->arena, p); }

tbuf tbuf_new(tdev *t, size_t bytes)
{
    tbuf b;
    size_t sz = BFIT_ALIGN_UP(bytes ? bytes : 1);
    b.bytes = bytes;
    b.h = aligned_alloc(64, sz);
    assert_non_null(b.h);
    memset(b.h, 0xff, sz);
    b.d = tdev_alloc(t, bytes);
    return b;
}

void tbuf_free(tdev *t, tbuf *b)
{
    free(b->h);
    tdev_release(t, b->d);
    memset(b, 0, sizeof *b);
}

void tbuf_up(tdev *t, const tbuf *b)
{
    if (bfit_device_upload(t->dev, b->d, b->h, b->bytes) != BFIT_OK)
        fail_msg("upload: %s", bfit_errmsg());
}

void tbuf_down(tdev *t, tbuf *b)
{
    if (bfit_device_download(t->dev, b->h, b->d, b->bytes) != BFIT_OK)
        fail_msg("download: %s", bfit_errmsg());
}

uint64_t tdev_plan_peak(const char *spec, bfit_opt_kind opt, int m)
{
    tdev t;
    bfit_graph_desc g;
    bfit_model *M;
    bfit_step_plan p;
    bfit_optim_cfg o = bfit_optim_cfg_default(opt);
    tdev_open(&t, 2);
    if (bfit_spec_parse_file(spec, &g) != BFIT_OK || bfit_model_new(&g, t.dev, t.arena, &M) != BFIT_OK)
        fail_msg("%s: %s", spec, bfit_errmsg());
    if (bfit_plan_compute(M, &o, m, 1, &p) != BFIT_OK)
        fail_msg("plan of %s at %d: %s", spec, m, bfit_errmsg());
    bfit_model_free(M);
    bfit_graph_fini(&g);
    tdev_close(&t);
    return p.peak;
}
