/* test_optim.c - optimizers, schedules and gradient norms without PyTorch:
 * state bytes equal the arena's accounting, OOM at creation leaves nothing
 * behind, state enumeration and restore, weight decay only where asked,
 * argument checks and name parsing, schedule shapes, clipping edge cases and
 * a norm that does not depend on the thread count. (test_optim_torch.c
 * compares the numbers with PyTorch.) Parameters, gradients and optimizer
 * state are device memory: initial values are uploaded, results downloaded
 * and compared on the host. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "batchfit.h"
#include "internal.h"
#include "optim/gradnorm.h"
#include "optim/lossscale.h"
#include "optim/optim.h"
#include "optim/schedule.h"
#include "tdev.h"

#define FSZ bfit_dtype_size(BFIT_F32)

/* A small model's parameters: two weights, two biases, a frozen buffer.
 * Their memory comes from the test device's own arena, so the arenas the
 * optimizers draw from account for optimizer state alone. */
#define NP 5
typedef struct model {
    tdev *t;
    bfit_param p[NP];
    bfit_param *pp[NP];
    float *data0[NP], *grad0[NP]; /* the initial values, host */
} model;

static size_t pbytes(const model *m, int i) { return bfit_param_bytes(&m->p[i]); }

static float *host_floats(int64_t n)
{
    float *h = malloc((size_t)(n ? n : 1) * FSZ);
    assert_non_null(h);
    return h;
}

static void model_init(model *m, tdev *t, int64_t big)
{
    static const char *names[NP] = { "weight", "bias", "running_mean", "weight", "bias" };
    const int64_t numel[NP] = { 30, 7, 7, big, 3 };
    const int trainable[NP] = { 1, 1, 0, 1, 1 };
    const int decay[NP] = { 1, 0, 0, 1, 0 };

    memset(m, 0, sizeof *m);
    m->t = t;
    for (int i = 0; i < NP; i++) {
        bfit_param *p = &m->p[i];
        p->name = names[i];
        p->ndim = 1;
        p->dim[0] = numel[i];
        p->dtype = BFIT_F32;
        p->trainable = trainable[i];
        p->decay = decay[i];
        m->data0[i] = host_floats(numel[i]);
        for (int64_t k = 0; k < numel[i]; k++)
            m->data0[i][k] = 0.5f + 0.01f * (float)((k * 7 + i) % 13);
        p->data = tdev_alloc(t, pbytes(m, i));
        assert_int_equal(bfit_device_upload(t->dev, p->data, m->data0[i], pbytes(m, i)), BFIT_OK);
        if (trainable[i]) {
            m->grad0[i] = host_floats(numel[i]);
            for (int64_t k = 0; k < numel[i]; k++)
                m->grad0[i][k] = 0.1f * (float)((k * 5 + i) % 11) - 0.5f;
            p->grad = tdev_alloc(t, pbytes(m, i));
            assert_int_equal(bfit_device_upload(t->dev, p->grad, m->grad0[i], pbytes(m, i)), BFIT_OK);
        }
        m->pp[i] = p;
    }
}

static void model_free(model *m)
{
    for (int i = 0; i < NP; i++) {
        tdev_release(m->t, m->p[i].data);
        tdev_release(m->t, m->p[i].grad);
        free(m->data0[i]);
        free(m->grad0[i]);
    }
}

/* Parameter i's values (or gradient) as the device has them, host copy to free. */
static float *download(const model *m, int i, int grad)
{
    float *h = host_floats(bfit_param_numel(&m->p[i]));
    assert_int_equal(bfit_device_download(m->t->dev, h, grad ? m->p[i].grad : m->p[i].data, pbytes(m, i)),
                     BFIT_OK);
    return h;
}

/* State tensor s of o, downloaded. */
static float *download_state(tdev *t, const bfit_optim_state *s)
{
    float *h = host_floats(s->numel);
    assert_int_equal(bfit_device_download(t->dev, h, s->data, (size_t)s->numel * FSZ), BFIT_OK);
    return h;
}

static void assert_state_zero(tdev *t, const bfit_optim *o)
{
    for (int k = 0; k < bfit_optim_state_count(o); k++) {
        bfit_optim_state s;
        float *h;
        assert_int_equal(bfit_optim_state_at(o, k, &s), BFIT_OK);
        h = download_state(t, &s);
        for (int64_t j = 0; j < s.numel; j++)
            assert_true(h[j] == 0.0f);
        free(h);
    }
}

static bfit_optim_cfg sgd(double momentum, double wd)
{
    bfit_optim_cfg c = bfit_optim_cfg_default(BFIT_OPT_SGD);
    c.momentum = momentum;
    c.weight_decay = wd;
    return c;
}

/* ---- memory -------------------------------------------------------------- */

static void test_state_bytes_equal_allocation(void **st)
{
    bfit_optim_cfg cfgs[4] = { sgd(0, 0), sgd(0.9, 0.1), bfit_optim_cfg_default(BFIT_OPT_ADAMW) };
    /* per state tensor: 30, 7, 1000, 3 floats -> 128 + 64 + 4032 + 64 bytes */
    const uint64_t want[4] = { 0, 4288, 2 * 4288, 2 * 4288 };
    tdev t;
    model m;
    (void)st;
    cfgs[3] = cfgs[2];
    cfgs[3].weight_decay = 0;
    tdev_open(&t, 0);
    model_init(&m, &t, 1000);
    for (int k = 0; k < 4; k++) {
        bfit_arena *a = bfit_device_arena_new(t.dev, 1 << 20);
        bfit_arena_stats s0, s1;
        bfit_optim *o;
        uint64_t bytes = bfit_optim_state_bytes(&cfgs[k], m.pp, NP);
        assert_int_equal(bytes, want[k]);
        bfit_arena_stats_get(a, &s0);
        assert_int_equal(bfit_optim_new(&cfgs[k], m.pp, NP, t.dev, a, &o), BFIT_OK);
        bfit_arena_stats_get(a, &s1);
        assert_int_equal(s1.cur[BFIT_MEM_OPTIMIZER], bytes);
        assert_int_equal(s1.current, bytes);
        assert_int_equal(s1.nalloc - s0.nalloc, bytes ? 1 : 0); /* one block */
        assert_state_zero(&t, o);                                /* the state starts at zero */
        assert_int_equal(bfit_optim_step(o, 0.01), BFIT_OK);
        bfit_arena_stats_get(a, &s0);
        assert_int_equal(s0.nalloc, s1.nalloc); /* the step allocates nothing */
        bfit_optim_free(o);
        bfit_arena_stats_get(a, &s1);
        assert_int_equal(s1.current, 0);
        bfit_arena_free(a);
    }
    model_free(&m);
    tdev_close(&t);
}

static void expect_enomem_unchanged(tdev *t, bfit_arena *a, const bfit_optim_cfg *cfg, model *m)
{
    bfit_arena_stats s0, s1;
    bfit_optim *o = (bfit_optim *)&o; /* must be reset to NULL */
    bfit_arena_stats_get(a, &s0);
    assert_int_equal(bfit_optim_new(cfg, m->pp, NP, t->dev, a, &o), BFIT_ENOMEM);
    assert_null(o);
    assert_non_null(strstr(bfit_errmsg(), "optimizer state"));
    bfit_arena_stats_get(a, &s1);
    assert_int_equal(s1.current, s0.current);
    assert_int_equal(s1.nalloc, s0.nalloc);
    assert_int_equal(s1.nfree, s0.nfree);
    assert_memory_equal(s1.cur, s0.cur, sizeof s0.cur);
}

static void test_oom_at_creation(void **st)
{
    bfit_optim_cfg cfg = bfit_optim_cfg_default(BFIT_OPT_ADAMW);
    bfit_arena *a;
    bfit_optim *o;
    uint64_t bytes;
    void *other;
    tdev t;
    model m;
    (void)st;
    tdev_open(&t, 0);
    a = bfit_device_arena_new(t.dev, 1 << 20);
    model_init(&m, &t, 1000);
    bytes = bfit_optim_state_bytes(&cfg, m.pp, NP);

    bfit_arena_fail_nth(a, 1);
    expect_enomem_unchanged(&t, a, &cfg, &m);
    assert_non_null(strstr(bfit_errmsg(), "injected"));

    /* something else holds memory; the state is 64 bytes too big, then fits */
    assert_int_equal(bfit_arena_alloc(a, 1000, BFIT_MEM_PARAMS, &other), BFIT_OK);
    bfit_arena_set_capacity(a, 1024 + bytes - 64);
    expect_enomem_unchanged(&t, a, &cfg, &m);
    assert_non_null(strstr(bfit_errmsg(), "out of memory"));
    bfit_arena_set_capacity(a, 1024 + bytes);
    assert_int_equal(bfit_optim_new(&cfg, m.pp, NP, t.dev, a, &o), BFIT_OK);
    assert_int_equal(bfit_arena_available(a), 0);
    bfit_optim_free(o);
    bfit_arena_release(a, other);
    bfit_arena_free(a);
    model_free(&m);
    tdev_close(&t);
}

/* ---- state --------------------------------------------------------------- */

static void test_state_enumeration(void **st)
{
    static const char *want[] = { "0.exp_avg", "0.exp_avg_sq", "1.exp_avg", "1.exp_avg_sq",
                                  "3.exp_avg", "3.exp_avg_sq", "4.exp_avg", "4.exp_avg_sq" };
    static const int64_t numel[] = { 30, 30, 7, 7, 1000, 1000, 3, 3 };
    bfit_optim_cfg cfg = bfit_optim_cfg_default(BFIT_OPT_ADAMW);
    bfit_optim_state s, prev;
    bfit_arena *a;
    bfit_optim *o;
    tdev t;
    model m;
    (void)st;
    tdev_open(&t, 0);
    a = bfit_device_arena_new(t.dev, 1 << 20);
    model_init(&m, &t, 1000);
    assert_int_equal(bfit_optim_new(&cfg, m.pp, NP, t.dev, a, &o), BFIT_OK);
    assert_int_equal(bfit_optim_state_count(o), 8);
    for (int i = 0; i < 8; i++) {
        float *h;
        assert_int_equal(bfit_optim_state_at(o, i, &s), BFIT_OK);
        assert_string_equal(s.name, want[i]);
        assert_int_equal(s.numel, numel[i]);
        assert_int_equal((uintptr_t)s.data % BFIT_ALIGN, 0);
        h = download_state(&t, &s);
        for (int64_t k = 0; k < s.numel; k++)
            assert_true(h[k] == 0.0f);
        free(h);
        if (i > 0) /* slices follow one another without overlap (addresses only: never dereferenced) */
            assert_true((char *)s.data >= (char *)prev.data + (size_t)prev.numel * FSZ);
        prev = s;
    }
    assert_int_equal(bfit_optim_state_at(o, 8, &s), BFIT_EINVAL);
    assert_int_equal(bfit_optim_state_at(o, -1, &s), BFIT_EINVAL);
    bfit_optim_free(o);

    cfg = sgd(0.9, 0);
    assert_int_equal(bfit_optim_new(&cfg, m.pp, NP, t.dev, a, &o), BFIT_OK);
    assert_int_equal(bfit_optim_state_count(o), 4);
    assert_int_equal(bfit_optim_state_at(o, 2, &s), BFIT_OK);
    assert_string_equal(s.name, "3.momentum_buffer");
    assert_string_equal(s.kind, "momentum_buffer");
    assert_int_equal(s.param_index, 3);
    bfit_optim_free(o);

    cfg = sgd(0, 0);
    assert_int_equal(bfit_optim_new(&cfg, m.pp, NP, t.dev, a, &o), BFIT_OK);
    assert_int_equal(bfit_optim_state_count(o), 0);
    bfit_optim_free(o);
    bfit_arena_free(a);
    model_free(&m);
    tdev_close(&t);
}

/* Save state and step count from one optimizer, restore them into a fresh
 * one on a copy of the weights: the next steps agree bit for bit. */
static void check_restore(const bfit_optim_cfg *cfg)
{
    bfit_optim *o1, *o2;
    bfit_arena *a;
    tdev t;
    model m1, m2;
    tdev_open(&t, 0);
    a = bfit_device_arena_new(t.dev, 1 << 22);
    model_init(&m1, &t, 5000);
    model_init(&m2, &t, 5000);
    assert_int_equal(bfit_optim_new(cfg, m1.pp, NP, t.dev, a, &o1), BFIT_OK);
    for (int s = 0; s < 3; s++)
        assert_int_equal(bfit_optim_step(o1, 0.05), BFIT_OK);
    assert_int_equal(bfit_optim_steps(o1), 3);

    assert_int_equal(bfit_optim_new(cfg, m2.pp, NP, t.dev, a, &o2), BFIT_OK);
    for (int i = 0; i < NP; i++)
        assert_int_equal(bfit_device_copy(t.dev, m2.p[i].data, m1.p[i].data, pbytes(&m1, i)), BFIT_OK);
    for (int k = 0; k < bfit_optim_state_count(o1); k++) {
        bfit_optim_state s1, s2;
        assert_int_equal(bfit_optim_state_at(o1, k, &s1), BFIT_OK);
        assert_int_equal(bfit_optim_state_at(o2, k, &s2), BFIT_OK);
        assert_string_equal(s1.name, s2.name);
        assert_int_equal(bfit_device_copy(t.dev, s2.data, s1.data, (size_t)s1.numel * FSZ), BFIT_OK);
    }
    assert_int_equal(bfit_optim_set_steps(o2, bfit_optim_steps(o1)), BFIT_OK);
    assert_int_equal(bfit_optim_set_steps(o2, -1), BFIT_EINVAL);
    for (int s = 0; s < 2; s++) {
        assert_int_equal(bfit_optim_step(o1, 0.03), BFIT_OK);
        assert_int_equal(bfit_optim_step(o2, 0.03), BFIT_OK);
    }
    for (int i = 0; i < NP; i++) {
        float *h1 = download(&m1, i, 0), *h2 = download(&m2, i, 0);
        assert_memory_equal(h1, h2, pbytes(&m1, i));
        free(h1);
        free(h2);
    }

    /* reset: zero state, step 0, same memory */
    assert_int_equal(bfit_optim_reset(o1), BFIT_OK);
    assert_int_equal(bfit_optim_steps(o1), 0);
    assert_state_zero(&t, o1);
    bfit_optim_free(o1);
    bfit_optim_free(o2);
    bfit_arena_free(a);
    model_free(&m1);
    model_free(&m2);
    tdev_close(&t);
}

static void test_restore_continues_exactly(void **st)
{
    bfit_optim_cfg c = sgd(0.9, 0.01);
    (void)st;
    check_restore(&c);
    c.nesterov = 1;
    check_restore(&c);
    c = bfit_optim_cfg_default(BFIT_OPT_ADAMW);
    check_restore(&c);
}

/* ---- the update ---------------------------------------------------------- */

/* With zero gradients only weight decay moves anything, and only weights
 * (decay=1) move; the frozen buffer never does. */
static void test_weight_decay_only_on_decay_params(void **st)
{
    bfit_optim_cfg cfgs[2] = { sgd(0.9, 0.1), bfit_optim_cfg_default(BFIT_OPT_ADAMW) };
    (void)st;
    cfgs[1].weight_decay = 0.1;
    for (int k = 0; k < 2; k++) {
        bfit_arena *a;
        bfit_optim *o;
        tdev t;
        model m;
        tdev_open(&t, 0);
        a = bfit_device_arena_new(t.dev, 1 << 20);
        model_init(&m, &t, 50);
        for (int i = 0; i < NP; i++)
            if (m.p[i].grad)
                assert_int_equal(bfit_device_zero(t.dev, m.p[i].grad, pbytes(&m, i)), BFIT_OK);
        assert_int_equal(bfit_optim_new(&cfgs[k], m.pp, NP, t.dev, a, &o), BFIT_OK);
        assert_int_equal(bfit_optim_step(o, 0.5), BFIT_OK);
        for (int i = 0; i < NP; i++) {
            float *after = download(&m, i, 0);
            for (int64_t j = 0; j < bfit_param_numel(&m.p[i]); j++) {
                /* SGD: p - lr*wd*p; AdamW: p*(1 - lr*wd), the moment term is 0/eps */
                float want = m.p[i].decay ? m.data0[i][j] * 0.95f : m.data0[i][j];
                assert_true(fabsf(after[j] - want) <= 1e-6f);
            }
            free(after);
        }
        bfit_optim_free(o);
        bfit_arena_free(a);
        model_free(&m);
        tdev_close(&t);
    }
}

/* Hand-checked first steps: SGD p - lr*g; AdamW's bias-corrected first
 * step is lr * g / (|g| + eps), about lr * sign(g). */
static void test_first_step_by_hand(void **st)
{
    bfit_optim_cfg cs = sgd(0.9, 0), ca = bfit_optim_cfg_default(BFIT_OPT_ADAMW);
    bfit_arena *a;
    bfit_optim *o;
    tdev t;
    model m;
    (void)st;
    ca.weight_decay = 0;
    tdev_open(&t, 0);
    a = bfit_device_arena_new(t.dev, 1 << 20);
    model_init(&m, &t, 40000); /* large enough for the parallel path */
    assert_int_equal(bfit_optim_new(&cs, m.pp, NP, t.dev, a, &o), BFIT_OK);
    assert_int_equal(bfit_optim_step(o, 0.1), BFIT_OK);
    for (int i = 0; i < NP; i++) {
        float *after = download(&m, i, 0);
        for (int64_t j = 0; j < bfit_param_numel(&m.p[i]); j++) {
            float want = m.grad0[i] ? m.data0[i][j] - 0.1f * m.grad0[i][j] : m.data0[i][j];
            assert_true(fabsf(after[j] - want) <= 1e-6f);
        }
        free(after);
    }
    bfit_optim_free(o);

    for (int i = 0; i < NP; i++)
        assert_int_equal(bfit_device_upload(t.dev, m.p[i].data, m.data0[i], pbytes(&m, i)), BFIT_OK);
    assert_int_equal(bfit_optim_new(&ca, m.pp, NP, t.dev, a, &o), BFIT_OK);
    assert_int_equal(bfit_optim_step(o, 0.01), BFIT_OK);
    for (int i = 0; i < NP; i++) {
        float *after = download(&m, i, 0);
        for (int64_t j = 0; j < bfit_param_numel(&m.p[i]); j++) {
            double g = m.grad0[i] ? m.grad0[i][j] : 0.0;
            double want = m.data0[i][j] - 0.01 * g / (fabs(g) + 1e-8);
            assert_true(fabs(after[j] - want) <= 1e-6);
        }
        free(after);
    }
    bfit_optim_free(o);
    bfit_arena_free(a);
    model_free(&m);
    tdev_close(&t);
}

static void test_step_rejects_bad_lr(void **st)
{
    bfit_optim_cfg cfg = sgd(0.9, 0);
    bfit_arena *a;
    float *w;
    bfit_optim *o;
    tdev t;
    model m;
    (void)st;
    tdev_open(&t, 0);
    a = bfit_device_arena_new(t.dev, 1 << 20);
    model_init(&m, &t, 10);
    assert_int_equal(bfit_optim_new(&cfg, m.pp, NP, t.dev, a, &o), BFIT_OK);
    assert_int_equal(bfit_optim_step(o, -0.1), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "learning rate"));
    assert_int_equal(bfit_optim_step(o, NAN), BFIT_EINVAL);
    assert_int_equal(bfit_optim_step(o, INFINITY), BFIT_EINVAL);
    assert_int_equal(bfit_optim_steps(o), 0);
    w = download(&m, 0, 0);
    assert_memory_equal(w, m.data0[0], pbytes(&m, 0));
    free(w);
    assert_int_equal(bfit_optim_step(o, 0), BFIT_OK); /* lr 0 is allowed and moves nothing */
    w = download(&m, 0, 0);
    assert_memory_equal(w, m.data0[0], pbytes(&m, 0));
    free(w);
    assert_int_equal(bfit_optim_steps(o), 1);
    bfit_optim_free(o);
    bfit_arena_free(a);
    model_free(&m);
    tdev_close(&t);
}

/* ---- configuration and names ---------------------------------------------- */

static void expect_bad_cfg(bfit_optim_cfg c, const char *msg)
{
    assert_int_equal(bfit_optim_cfg_check(&c), BFIT_EINVAL);
    if (!strstr(bfit_errmsg(), msg))
        fail_msg("message '%s' lacks '%s'", bfit_errmsg(), msg);
}

static void test_cfg_check(void **st)
{
    bfit_optim_cfg c = sgd(0, 0);
    bfit_arena_stats s;
    bfit_arena *a;
    bfit_optim *o;
    tdev t;
    model m;
    (void)st;
    assert_int_equal(bfit_optim_cfg_check(&c), BFIT_OK);
    c.nesterov = 1;
    expect_bad_cfg(c, "Nesterov");
    c = sgd(-0.5, 0);
    expect_bad_cfg(c, "momentum");
    c = sgd(0.9, -1);
    expect_bad_cfg(c, "weight decay");
    c = sgd(0.9, NAN);
    expect_bad_cfg(c, "weight decay");
    c = bfit_optim_cfg_default(BFIT_OPT_ADAMW);
    assert_int_equal(bfit_optim_cfg_check(&c), BFIT_OK);
    c.beta1 = 1.0;
    expect_bad_cfg(c, "beta1");
    c = bfit_optim_cfg_default(BFIT_OPT_ADAMW);
    c.beta2 = NAN;
    expect_bad_cfg(c, "beta2");
    c = bfit_optim_cfg_default(BFIT_OPT_ADAMW);
    c.eps = -1;
    expect_bad_cfg(c, "eps");
    c.kind = (bfit_opt_kind)7;
    expect_bad_cfg(c, "sgd, adamw");

    /* creation checks the config and the parameters, and holds nothing */
    tdev_open(&t, 0);
    a = bfit_device_arena_new(t.dev, 1 << 20);
    model_init(&m, &t, 10);
    c = sgd(0.9, 0);
    c.nesterov = 1;
    c.dampening = 0.5;
    assert_int_equal(bfit_optim_new(&c, m.pp, NP, t.dev, a, &o), BFIT_EINVAL);
    c = sgd(0.9, 0);
    tdev_release(&t, m.p[3].grad);
    m.p[3].grad = NULL;
    assert_int_equal(bfit_optim_new(&c, m.pp, NP, t.dev, a, &o), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "parameter 3 (weight)"));
    assert_non_null(strstr(bfit_errmsg(), "gradient"));
    m.pp[3] = NULL;
    assert_int_equal(bfit_optim_new(&c, m.pp, NP, t.dev, a, &o), BFIT_EINVAL);
    m.pp[3] = &m.p[3];
    assert_int_equal(bfit_optim_new(&c, m.pp, -1, t.dev, a, &o), BFIT_EINVAL);
    assert_null(o);
    assert_int_equal(bfit_optim_new(&c, m.pp, NP, NULL, a, &o), BFIT_EINVAL); /* no device */
    assert_null(o);
    bfit_arena_stats_get(a, &s);
    assert_int_equal(s.current, 0);
    assert_int_equal(s.nalloc, 0);
    /* an empty list is a valid, idle optimizer */
    assert_int_equal(bfit_optim_new(&c, NULL, 0, t.dev, a, &o), BFIT_OK);
    assert_int_equal(bfit_optim_step(o, 0.1), BFIT_OK);
    bfit_optim_free(o);
    bfit_optim_free(NULL);
    bfit_arena_free(a);
    model_free(&m);
    tdev_close(&t);
}

static void test_parse_names(void **st)
{
    bfit_opt_kind k;
    bfit_sched_kind s;
    (void)st;
    assert_int_equal(bfit_optim_kind_parse("sgd", &k), BFIT_OK);
    assert_int_equal(k, BFIT_OPT_SGD);
    assert_int_equal(bfit_optim_kind_parse("AdamW", &k), BFIT_OK);
    assert_int_equal(k, BFIT_OPT_ADAMW);
    assert_int_equal(bfit_optim_kind_parse("adam", &k), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "'adam'"));
    assert_non_null(strstr(bfit_errmsg(), "valid: sgd, adamw"));
    assert_int_equal(bfit_optim_kind_parse(NULL, &k), BFIT_EINVAL);
    assert_string_equal(bfit_optim_kind_name(BFIT_OPT_ADAMW), "adamw");

    assert_int_equal(bfit_lr_sched_parse("cosine", &s), BFIT_OK);
    assert_int_equal(s, BFIT_SCHED_COSINE);
    assert_int_equal(bfit_lr_sched_parse("STEP", &s), BFIT_OK);
    assert_int_equal(s, BFIT_SCHED_STEP);
    assert_int_equal(bfit_lr_sched_parse("constant", &s), BFIT_OK);
    assert_int_equal(s, BFIT_SCHED_CONSTANT);
    assert_int_equal(bfit_lr_sched_parse("linear", &s), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "valid: constant, step, cosine"));
    assert_string_equal(bfit_lr_sched_name(BFIT_SCHED_STEP), "step");
}

/* ---- schedules ------------------------------------------------------------ */

static void test_schedule_shapes(void **st)
{
    bfit_lr_schedule s = bfit_lr_schedule_default(BFIT_SCHED_CONSTANT);
    (void)st;
    assert_int_equal(bfit_lr_schedule_check(&s), BFIT_OK);
    assert_true(bfit_lr_at(&s, 0.1, 0) == 0.1);
    assert_true(bfit_lr_at(&s, 0.1, 1000000) == 0.1);

    s.warmup_steps = 4; /* from 0: 0, 1/4, 1/2, 3/4, then 1 */
    assert_true(bfit_lr_at(&s, 1.0, -3) == 0.0);
    assert_true(bfit_lr_at(&s, 1.0, 0) == 0.0);
    assert_true(bfit_lr_at(&s, 1.0, 2) == 0.5);
    assert_true(bfit_lr_at(&s, 1.0, 4) == 1.0);
    s.warmup_start = 0.5;
    assert_true(bfit_lr_at(&s, 1.0, 0) == 0.5);
    assert_true(bfit_lr_at(&s, 1.0, 2) == 0.75);

    s = bfit_lr_schedule_default(BFIT_SCHED_STEP);
    assert_int_equal(bfit_lr_schedule_check(&s), BFIT_EINVAL); /* step size unset */
    assert_non_null(strstr(bfit_errmsg(), "the step schedule needs it"));
    assert_string_equal(bfit_errfield(), "step_size");
    s.step_size = 10;
    s.warmup_steps = 5;
    assert_int_equal(bfit_lr_schedule_check(&s), BFIT_OK);
    assert_true(fabs(bfit_lr_at(&s, 1.0, 14) - 1.0) < 1e-15);
    assert_true(fabs(bfit_lr_at(&s, 1.0, 15) - 0.1) < 1e-15); /* counts from the warmup's end */
    assert_true(fabs(bfit_lr_at(&s, 1.0, 25) - 0.01) < 1e-15);
    s.gamma = 0;
    assert_int_equal(bfit_lr_schedule_check(&s), BFIT_EINVAL);

    s = bfit_lr_schedule_default(BFIT_SCHED_COSINE);
    s.warmup_steps = 10;
    s.total_steps = 10;
    assert_int_equal(bfit_lr_schedule_check(&s), BFIT_EINVAL); /* nothing left to decay */
    assert_non_null(strstr(bfit_errmsg(), "total steps"));
    s.total_steps = 110;
    s.min_factor = 0.1;
    assert_int_equal(bfit_lr_schedule_check(&s), BFIT_OK);
    assert_true(fabs(bfit_lr_at(&s, 2.0, 10) - 2.0) < 1e-15);
    assert_true(fabs(bfit_lr_at(&s, 2.0, 60) - 1.1) < 1e-12); /* halfway: mean of 2 and 0.2 */
    assert_true(fabs(bfit_lr_at(&s, 2.0, 110) - 0.2) < 1e-15);
    assert_true(fabs(bfit_lr_at(&s, 2.0, 500) - 0.2) < 1e-15); /* held, not rising again */
    for (int64_t t = 11; t <= 110; t++) /* decreasing */
        assert_true(bfit_lr_at(&s, 2.0, t) < bfit_lr_at(&s, 2.0, t - 1));
    s.min_factor = 1.5;
    assert_int_equal(bfit_lr_schedule_check(&s), BFIT_EINVAL);
    s.min_factor = 0;
    s.warmup_start = -0.1;
    assert_int_equal(bfit_lr_schedule_check(&s), BFIT_EINVAL);
    s.warmup_start = 0;
    s.warmup_steps = -1;
    assert_int_equal(bfit_lr_schedule_check(&s), BFIT_EINVAL);
    s.kind = BFIT_SCHED_COUNT;
    assert_int_equal(bfit_lr_schedule_check(&s), BFIT_EINVAL);
}

/* ---- gradient norms and clipping ------------------------------------------ */

/* Three gradients a = (3, 0), b = (4), and a frozen c = (100) on the device. */
typedef struct clip_case {
    tdev t;
    bfit_param p[3];
    bfit_param *pp[3];
    bfit_gradnorm *g;
} clip_case;

static void clip_set(clip_case *c, float a0, float a1, float b0)
{
    const float a[2] = { a0, a1 };
    assert_int_equal(bfit_device_upload(c->t.dev, c->p[0].grad, a, sizeof a), BFIT_OK);
    assert_int_equal(bfit_device_upload(c->t.dev, c->p[1].grad, &b0, sizeof b0), BFIT_OK);
}

static float clip_get(clip_case *c, int i, int k)
{
    float h[2];
    assert_int_equal(bfit_device_download(c->t.dev, h, c->p[i].grad, bfit_param_bytes(&c->p[i])), BFIT_OK);
    return h[k];
}

static void clip_open(clip_case *c)
{
    const float frozen = 100;
    bfit_arena_stats s0, s1;
    memset(c, 0, sizeof *c);
    tdev_open(&c->t, 0);
    c->p[0] = (bfit_param){ .name = "a", .ndim = 1, .dim = { 2 }, .dtype = BFIT_F32, .trainable = 1 };
    c->p[1] = (bfit_param){ .name = "b", .ndim = 1, .dim = { 1 }, .dtype = BFIT_F32, .trainable = 1 };
    c->p[2] = (bfit_param){ .name = "c", .ndim = 1, .dim = { 1 }, .dtype = BFIT_F32, .trainable = 0 };
    for (int i = 0; i < 3; i++) {
        c->p[i].data = tdev_alloc(&c->t, bfit_param_bytes(&c->p[i]));
        c->p[i].grad = tdev_alloc(&c->t, bfit_param_bytes(&c->p[i]));
        c->pp[i] = &c->p[i];
    }
    clip_set(c, 3, 0, 4);
    assert_int_equal(bfit_device_upload(c->t.dev, c->p[2].grad, &frozen, sizeof frozen), BFIT_OK);
    /* what it takes from the arena is what bfit_gradnorm_bytes says */
    bfit_arena_stats_get(c->t.arena, &s0);
    assert_int_equal(bfit_gradnorm_new(c->pp, 3, 0, c->t.dev, c->t.arena, &c->g), BFIT_OK);
    bfit_arena_stats_get(c->t.arena, &s1);
    assert_int_equal(s1.current - s0.current, bfit_gradnorm_bytes(c->pp, 3, 0));
}

static void clip_close(clip_case *c)
{
    bfit_gradnorm_free(c->g);
    for (int i = 0; i < 3; i++) {
        tdev_release(&c->t, c->p[i].data);
        tdev_release(&c->t, c->p[i].grad);
    }
    tdev_close(&c->t);
}

static void test_clip_by_hand(void **st)
{
    clip_case c;
    double total = 0, sq = 0;
    (void)st;
    clip_open(&c);
    assert_int_equal(bfit_gradnorm_sq(c.g, &sq), BFIT_OK);
    assert_true(sq == 25.0);
    /* above the norm: untouched */
    assert_int_equal(bfit_gradnorm_clip(c.g, 10.0, &total), BFIT_OK);
    assert_true(total == 5.0);
    assert_true(clip_get(&c, 0, 0) == 3 && clip_get(&c, 1, 0) == 4);
    /* below: scaled to norm max_norm (minus PyTorch's 1e-6 guard) */
    assert_int_equal(bfit_gradnorm_clip(c.g, 1.0, &total), BFIT_OK);
    assert_true(total == 5.0);
    assert_int_equal(bfit_gradnorm_sq(c.g, &sq), BFIT_OK);
    assert_true(fabs(sqrt(sq) - 1.0) < 1e-6);
    assert_true(clip_get(&c, 2, 0) == 100); /* not trainable: not clipped */
    assert_int_equal(bfit_gradnorm_clip(c.g, 0.0, &total), BFIT_EINVAL);
    assert_int_equal(bfit_gradnorm_clip(c.g, NAN, NULL), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "max norm"));

    /* zero gradients: norm 0, nothing scaled */
    clip_set(&c, 0, 0, 0);
    assert_int_equal(bfit_gradnorm_clip(c.g, 1.0, &total), BFIT_OK);
    assert_true(total == 0.0);
    /* a non-finite gradient: reported, not spread over the others */
    clip_set(&c, INFINITY, 0, 2);
    assert_int_equal(bfit_gradnorm_clip(c.g, 1.0, &total), BFIT_OK);
    assert_true(isinf(total));
    assert_true(clip_get(&c, 1, 0) == 2);
    clip_set(&c, NAN, 0, 2);
    assert_int_equal(bfit_gradnorm_clip(c.g, 1.0, &total), BFIT_OK);
    assert_true(isnan(total));
    assert_true(clip_get(&c, 1, 0) == 2);
    clip_close(&c);
}

/* The norm must not depend on the thread count, or a resumed run on another
 * machine would clip differently. Each thread count is its own device (the
 * count is the device's setting); the caller's OpenMP setting is left as it
 * was. */
static void test_norm_independent_of_threads(void **st)
{
    const int64_t n = 1000003;
    float *g = host_floats(n);
    double norms[3];
    int threads[3] = { 1, 2, 3 }, omp_before = omp_get_max_threads();
    (void)st;
    for (int64_t i = 0; i < n; i++)
        g[i] = sinf((float)i * 0.37f) * (1.0f + (float)(i % 1000) * 1e-3f);
    for (int k = 0; k < 3; k++) {
        bfit_param p = { .name = "w", .ndim = 1, .dim = { n }, .dtype = BFIT_F32, .trainable = 1 };
        bfit_param *pp = &p;
        bfit_device_info info;
        bfit_gradnorm *gn;
        tdev t;
        tdev_open(&t, threads[k]);
        bfit_device_info_get(t.dev, &info);
        assert_int_equal(info.threads, threads[k]);
        p.data = tdev_alloc(&t, bfit_param_bytes(&p));
        p.grad = tdev_alloc(&t, bfit_param_bytes(&p));
        assert_int_equal(bfit_device_upload(t.dev, p.grad, g, bfit_param_bytes(&p)), BFIT_OK);
        assert_int_equal(bfit_gradnorm_new(&pp, 1, 0, t.dev, t.arena, &gn), BFIT_OK);
        assert_int_equal(bfit_gradnorm_sq(gn, &norms[k]), BFIT_OK);
        bfit_gradnorm_free(gn);
        tdev_release(&t, p.data);
        tdev_release(&t, p.grad);
        tdev_close(&t);
    }
    assert_int_equal(omp_get_max_threads(), omp_before);
    assert_memory_equal(&norms[0], &norms[1], sizeof(double));
    assert_memory_equal(&norms[0], &norms[2], sizeof(double));
    free(g);
}

/* Dynamic loss scaling: an overflow skips the step and halves S; S doubles
 * after `interval` clean steps in a row (an overflow restarts the count);
 * S stays within [2^-24, 2^72]; defaults are GradScaler's. */
static void test_loss_scaler(void **st)
{
    bfit_loss_scaler s;
    (void)st;
    bfit_loss_scaler_init(&s, 0, 0);
    assert_true(s.scale == 65536.0);
    assert_int_equal(s.interval, 2000);
    bfit_loss_scaler_init(&s, 1024, 3);
    assert_int_equal(bfit_loss_scaler_update(&s, 0), 0);
    assert_true(s.scale == 512.0);
    assert_int_equal(s.skipped, 1);
    assert_int_equal(bfit_loss_scaler_update(&s, 1), 1);
    assert_int_equal(bfit_loss_scaler_update(&s, 1), 1);
    assert_true(s.scale == 512.0); /* two clean steps: not yet */
    assert_int_equal(bfit_loss_scaler_update(&s, 0), 0); /* the count restarts */
    assert_true(s.scale == 256.0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(bfit_loss_scaler_update(&s, 1), 1);
    assert_true(s.scale == 256.0);
    assert_int_equal(bfit_loss_scaler_update(&s, 1), 1);
    assert_true(s.scale == 512.0);
    assert_int_equal(s.skipped, 2);
    for (int i = 0; i < 200; i++)
        bfit_loss_scaler_update(&s, 0);
    assert_true(s.scale == BFIT_LOSS_SCALE_MIN);
    for (int i = 0; i < 3 * 200; i++)
        bfit_loss_scaler_update(&s, 1);
    assert_true(s.scale == BFIT_LOSS_SCALE_MAX);
}

int main(void)

{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_state_bytes_equal_allocation),
        cmocka_unit_test(test_oom_at_creation),
        cmocka_unit_test(test_state_enumeration),
        cmocka_unit_test(test_restore_continues_exactly),
        cmocka_unit_test(test_weight_decay_only_on_decay_params),
        cmocka_unit_test(test_first_step_by_hand),
        cmocka_unit_test(test_step_rejects_bad_lr),
        cmocka_unit_test(test_cfg_check),
        cmocka_unit_test(test_parse_names),
        cmocka_unit_test(test_schedule_shapes),
        cmocka_unit_test(test_clip_by_hand),
        cmocka_unit_test(test_norm_independent_of_threads),
        cmocka_unit_test(test_loss_scaler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
