/* test_layer_cache.c - prepared ops kept per micro-batch size
 * (src/nn/layer.c): a run whose effective batch is no multiple of its
 * micro-batch alternates two sizes, and the plan prepares a size and goes
 * back; neither may make the ops again (on a GPU each is a cuDNN descriptor
 * and a heuristics query). The plan's bytes and the step's results are
 * those of freshly made ops. Op creations are counted by wrapping the CPU
 * device's op_new; the adds of branching gradients (the model's, plain
 * kernels with no descriptors) are made with each reserve and not counted.
 * Past the cache, each layer remembers the needs it computed (the memo): a
 * plan asks for many sizes, many times. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/rand.h"
#include "batch/plan.h"
#include "nn/model.h"
#include "nn/zoo.h"

static const bfit_device_vt *cpu_vt;
static bfit_device_vt counting;
static int made;

static int count_op_new(bfit_device *d, const bfit_op_desc *desc, bfit_op **out)
{
    made += desc->kind != BFIT_OP_ADD;
    return cpu_vt->op_new(d, desc, out);
}

typedef struct fixture {
    bfit_device *dev;
    bfit_arena *arena;
    bfit_model *M;
} fixture;

/* A model on the counting device; params: its parameters allocated (the
 * precision cannot change after that), as training needs. */
static void open_model_as(fixture *f, const char *name, int params)
{
    bfit_graph_desc g;
    assert_int_equal(bfit_device_cpu_new(NULL, &f->dev), BFIT_OK);
    cpu_vt = f->dev->vt;
    counting = *cpu_vt;
    counting.op_new = count_op_new;
    f->dev->vt = &counting;
    f->arena = bfit_device_arena_new(f->dev, 2ull << 30);
    assert_int_equal(bfit_model_source_load(name, 0, &g), BFIT_OK);
    assert_int_equal(bfit_model_new(&g, f->dev, f->arena, &f->M), BFIT_OK);
    bfit_graph_fini(&g);
    if (!params)
        return;
    assert_int_equal(bfit_model_alloc_params(f->M, 1), BFIT_OK);
    assert_int_equal(bfit_model_init_params(f->M, 3), BFIT_OK);
}

static void open_model(fixture *f, const char *name) { open_model_as(f, name, 1); }

static void close_model(fixture *f)
{
    bfit_model_free(f->M);
    bfit_arena_free(f->arena);
    f->dev->vt = cpu_vt;
    bfit_device_free(f->dev);
}

/* ops made by reserving (m, training) */
static int reserve_count(fixture *f, int m)
{
    int before = made;
    assert_int_equal(bfit_model_reserve(f->M, m, 1), BFIT_OK);
    return made - before;
}

/* Sizes 7 and 5 alternating: each is made once, then swapped in. */
static void test_alternating_sizes(void **st)
{
    fixture f;
    (void)st;
    open_model(&f, "cnn");
    assert_true(reserve_count(&f, 7) > 0);
    assert_true(reserve_count(&f, 5) > 0);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(reserve_count(&f, 7), 0);
        assert_int_equal(reserve_count(&f, 5), 0);
    }
    close_model(&f);
}

/* A plan query of another size makes its ops once; asked again (or
 * reserved), nothing is made; the bytes are those of a fresh model. */
static void test_plan_queries(void **st)
{
    fixture f, fresh;
    bfit_optim_cfg opt = bfit_optim_cfg_default(BFIT_OPT_SGD);
    bfit_step_plan p, q;
    int before;
    (void)st;
    open_model(&f, "resnet18");
    assert_true(reserve_count(&f, 4) > 0);
    before = made;
    assert_int_equal(bfit_plan_compute(f.M, &opt, 9, 1, &p), BFIT_OK);
    assert_true(made > before);
    before = made;
    for (int k = 0; k < 3; k++) {
        assert_int_equal(bfit_plan_compute(f.M, &opt, 9, 1, &q), BFIT_OK);
        assert_memory_equal(&p.bytes, &q.bytes, sizeof p.bytes);
        assert_int_equal(p.peak, q.peak);
        assert_int_equal(bfit_plan_compute(f.M, &opt, 4, 1, &q), BFIT_OK);
    }
    assert_int_equal(made, before);
    assert_int_equal(reserve_count(&f, 9), 0);
    close_model(&f);
    open_model(&fresh, "resnet18");
    assert_int_equal(bfit_plan_compute(fresh.M, &opt, 9, 1, &q), BFIT_OK);
    assert_memory_equal(&p.bytes, &q.bytes, sizeof p.bytes);
    assert_int_equal(p.peak, q.peak);
    close_model(&fresh);
}

/* More sizes than the cache holds: the least recently used is made again. */
static void test_eviction(void **st)
{
    fixture f;
    (void)st;
    open_model(&f, "mlp");
    for (int m = 1; m <= 2 + BFIT_LAYER_CACHE; m++)
        assert_true(reserve_count(&f, m) > 0);
    assert_true(reserve_count(&f, 1) > 0);                      /* dropped */
    assert_int_equal(reserve_count(&f, 2 + BFIT_LAYER_CACHE), 0); /* kept */
    close_model(&f);
}

/* ops made by a plan at m, its peak in *peak */
static int plan_count(fixture *f, int m, uint64_t *peak)
{
    bfit_optim_cfg opt = bfit_optim_cfg_default(BFIT_OPT_SGD);
    bfit_step_plan p;
    int before = made;
    assert_int_equal(bfit_plan_compute(f->M, &opt, m, 1, &p), BFIT_OK);
    *peak = p.peak;
    return made - before;
}

/* The needs memo: past the op cache, a plan at a size asked before makes no
 * ops; its bytes are a fresh model's; a dtype is part of the key (bf16's
 * needs are made, f32's come back); past the memo's size the least recently
 * used is made again. */
static void test_needs_memo(void **st)
{
    enum { N = 3 * BFIT_LAYER_CACHE };
    fixture f, fresh;
    bfit_optim_cfg opt = bfit_optim_cfg_default(BFIT_OPT_SGD);
    bfit_storage bf16 = {BFIT_BF16, 0, BFIT_RECOMPUTE_NONE}, f32 = {BFIT_F32, 0, BFIT_RECOMPUTE_NONE};
    uint64_t peak[N + 1], q, r;
    (void)st;
    open_model_as(&f, "cnn", 0);
    assert_int_equal(bfit_model_set_storage(f.M, &f32, &opt, 1ull << 40, 2), BFIT_OK);
    for (int m = 1; m <= N; m++)
        assert_true(plan_count(&f, m, &peak[m]) > 0);
    for (int m = 1; m <= N; m++) {
        assert_int_equal(plan_count(&f, m, &q), 0);
        assert_int_equal(q, peak[m]);
    }
    open_model_as(&fresh, "cnn", 0);
    assert_int_equal(bfit_model_set_storage(fresh.M, &f32, &opt, 1ull << 40, 2), BFIT_OK);
    assert_true(plan_count(&fresh, 2, &q) > 0);
    assert_int_equal(q, peak[2]);
    assert_int_equal(bfit_model_set_storage(f.M, &bf16, &opt, 1ull << 40, 2), BFIT_OK);
    assert_int_equal(bfit_model_set_storage(fresh.M, &bf16, &opt, 1ull << 40, 2), BFIT_OK);
    assert_true(plan_count(&f, 2, &q) > 0);
    assert_true(plan_count(&fresh, 2, &r) > 0);
    assert_int_equal(q, r);
    assert_true(q != peak[2]);
    assert_int_equal(bfit_model_set_storage(f.M, &f32, &opt, 1ull << 40, 2), BFIT_OK);
    assert_int_equal(plan_count(&f, 2, &q), 0);
    assert_int_equal(q, peak[2]);
    close_model(&fresh);
    close_model(&f);
    open_model_as(&f, "mlp", 0);
    for (int m = 1; m <= BFIT_LAYER_MEMO + 1; m++)
        assert_true(plan_count(&f, m, &q) > 0);
    assert_true(plan_count(&f, 1, &q) > 0);                     /* dropped */
    assert_int_equal(plan_count(&f, BFIT_LAYER_MEMO + 1, &q), 0); /* kept */
    close_model(&f);
}

/* The loss of a forward after the sizes alternated is the fresh one's. */
static double loss_at(fixture *f, int m)
{
    int64_t per = bfit_shape_numel(f->M->input);
    float *x = malloc(sizeof(float) * (size_t)(m * per));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)m);
    double loss, hits;
    for (int64_t i = 0; i < m * per; i++)
        x[i] = (float)bfit_rand_unit(5, (uint64_t)i);
    for (int i = 0; i < m; i++)
        y[i] = i % 10;
    assert_int_equal(bfit_model_reserve(f->M, m, 1), BFIT_OK);
    assert_int_equal(bfit_model_stats_reset(f->M), BFIT_OK);
    assert_int_equal(bfit_model_set_input(f->M, x, y, m), BFIT_OK);
    assert_int_equal(bfit_model_forward(f->M, 1), BFIT_OK);
    assert_int_equal(bfit_model_stats_read(f->M, &loss, &hits), BFIT_OK);
    free(x);
    free(y);
    return loss;
}

static void test_same_results(void **st)
{
    fixture f, fresh;
    double a, b;
    (void)st;
    open_model(&f, "cnn");
    open_model(&fresh, "cnn");
    assert_int_equal(reserve_count(&f, 7), reserve_count(&fresh, 7));
    assert_true(reserve_count(&f, 5) > 0);
    a = loss_at(&f, 7);
    b = loss_at(&fresh, 7);
    assert_true(a > 0 && a == b);
    close_model(&f);
    close_model(&fresh);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alternating_sizes),
        cmocka_unit_test(test_plan_queries),
        cmocka_unit_test(test_eviction),
        cmocka_unit_test(test_same_results),
        cmocka_unit_test(test_needs_memo),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
