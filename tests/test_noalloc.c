/* test_noalloc.c - a steady-state training step allocates nothing: over
 * several steps of mlp and cnn after a warm-up step, no arena block and no
 * heap call from our code, OpenMP or libc. A step is what the trainer does:
 * per micro-batch the input upload, forward, backward and the gradient norm
 * tracking of adaptive runs; then clipping, the update, zeroing the
 * gradients and the download of the loss statistics. oneDNN's execute
 * allocates inside itself (see from_onednn); those calls are counted apart
 * and must be the same number every step.
 *
 * Heap calls are counted by interposing malloc and friends in this binary
 * (they win over libc's for every library in the process); under
 * AddressSanitizer, which owns malloc, by its allocation hooks instead. The
 * counter is first shown to see a deliberate malloc, so a silent counter
 * cannot pass the test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "batchfit.h"
#include "internal.h"
#include "device/device.h"
#include "nn/model.h"
#include "nn/spec.h"
#include "optim/gradnorm.h"
#include "optim/optim.h"
#include "ttok.h"

/* ---- the heap counter ---------------------------------------------------- */

static int counting;            /* read by every thread: atomics */
static uint64_t nheap[2];       /* [0] ours (anything else), [1] inside oneDNN */
static __thread int in_count;   /* the stack walk must not count itself */
#define NCALLERS 8
static void *callers[NCALLERS]; /* where the first counted calls of ours came from */

/* oneDNN 2.6 allocates inside dnnl_primitive_execute (the argument map,
 * std::function in its parallel loops) with no way to supply an allocator
 * through the C API; those calls are told apart by a libdnnl frame on the
 * stack, counted separately and held to a constant per step. */
static int from_onednn(void)
{
    void *bt[64];
    int n = backtrace(bt, 64);
    for (int i = 1; i < n; i++) {
        Dl_info di;
        if (dladdr(bt[i], &di) && di.dli_fname && strstr(di.dli_fname, "libdnnl"))
            return 1;
    }
    return 0;
}

static void count(void *caller)
{
    int k;
    if (!__atomic_load_n(&counting, __ATOMIC_RELAXED) || in_count)
        return;
    in_count = 1;
    k = from_onednn();
    in_count = 0;
    uint64_t i = __atomic_fetch_add(&nheap[k], 1, __ATOMIC_RELAXED);
    if (!k && i < NCALLERS)
        callers[i] = caller;
}

#if defined(__SANITIZE_ADDRESS__)
/* ASan replaces malloc; its hooks see every allocation and free. */
int __sanitizer_install_malloc_and_free_hooks(void (*m)(const volatile void *, size_t),
                                              void (*f)(const volatile void *));
static void on_malloc(const volatile void *p, size_t n) { (void)p, (void)n, count(__builtin_return_address(0)); }
static void on_free(const volatile void *p) { (void)p, count(__builtin_return_address(0)); }
static void counter_install(void) { __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free); }
#else
/* glibc's own entry points: forwarding to them needs no dlsym, which could
 * itself allocate before the forwarders are known. */
void *__libc_malloc(size_t);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);
void *__libc_memalign(size_t, size_t);
void __libc_free(void *);

void *malloc(size_t n)
{
    count(__builtin_return_address(0));
    return __libc_malloc(n);
}
void *calloc(size_t k, size_t n)
{
    count(__builtin_return_address(0));
    return __libc_calloc(k, n);
}
void *realloc(void *p, size_t n)
{
    count(__builtin_return_address(0));
    return __libc_realloc(p, n);
}
void free(void *p)
{
    if (p)
        count(__builtin_return_address(0));
    __libc_free(p);
}
void *aligned_alloc(size_t a, size_t n)
{
    count(__builtin_return_address(0));
    return __libc_memalign(a, n);
}
void *memalign(size_t a, size_t n)
{
    count(__builtin_return_address(0));
    return __libc_memalign(a, n);
}
int posix_memalign(void **out, size_t a, size_t n)
{
    count(__builtin_return_address(0));
    *out = __libc_memalign(a, n);
    return *out ? 0 : 12; /* ENOMEM */
}
static void counter_install(void) {}
#endif

/* noinline: a debugger can stop here to trace the counted calls */
__attribute__((noinline)) static void counter_start(void)
{
    memset(callers, 0, sizeof callers);
    __atomic_store_n(&nheap[0], 0, __ATOMIC_RELAXED);
    __atomic_store_n(&nheap[1], 0, __ATOMIC_RELAXED);
    __atomic_store_n(&counting, 1, __ATOMIC_SEQ_CST);
}

/* Heap calls of ours since counter_start; *onednn gets oneDNN's. */
__attribute__((noinline)) static uint64_t counter_stop(uint64_t *onednn)
{
    __atomic_store_n(&counting, 0, __ATOMIC_SEQ_CST);
    if (onednn)
        *onednn = __atomic_load_n(&nheap[1], __ATOMIC_RELAXED);
    return __atomic_load_n(&nheap[0], __ATOMIC_RELAXED);
}

/* Name the libraries the counted calls came from, for a failure message. */
static void print_callers(uint64_t n)
{
    for (uint64_t i = 0; i < n && i < NCALLERS; i++) {
        Dl_info di;
        if (callers[i] && dladdr(callers[i], &di) && di.dli_fname)
            fprintf(stderr, "  heap call %llu from %s (%s+%#lx)\n", (unsigned long long)i, di.dli_fname,
                    di.dli_sname ? di.dli_sname : "?",
                    (unsigned long)((char *)callers[i] - (char *)(di.dli_sname ? di.dli_saddr : di.dli_fbase)));
        else
            fprintf(stderr, "  heap call %llu from %p\n", (unsigned long long)i, callers[i]);
    }
}

static int setup(void **st)
{
    void *bt[4];
    (void)st;
    backtrace(bt, 4); /* its first call loads the unwinder, which allocates */
    counter_install();
    return 0;
}

/* The counter must see a deliberate allocation, or its zero means nothing.
 * The volatile pointer keeps the compiler from eliding the pair. */
static void test_counter_sees_malloc(void **st)
{
    void *(*volatile alloc)(size_t) = malloc;
    void (*volatile release)(void *) = free;
    uint64_t n;
    (void)st;
    counter_start();
    release(alloc(100));
    n = counter_stop(NULL);
    assert_true(n >= 1);
}

/* ---- a model's steady-state step ------------------------------------------ */

typedef struct rig {
    bfit_device *dev;
    bfit_arena *arena;
    bfit_graph_desc g;
    bfit_model *M;
    bfit_optim *opt;
    bfit_gradnorm *gn;
    float *x;       /* host samples and labels, made before counting */
    int32_t *y;
} rig;

static int bidir; /* attention made bidirectional: the lengths of its padding mask are staged too */
/* Token models trained with --seq-max: each step at the length of its
 * longest sequence (rounded to 16). With nlens > 0 step s runs at
 * lens[s % nlens], and the warm-up visits every length once. */
static const int *lens;
static int nlens;

static void rig_new(rig *r, const char *file, int m)
{
    const char *src = getenv("BFIT_SOURCE_DIR");
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
    bfit_device_cfg cc = bfit_device_cfg_default();
    char path[512];
    int64_t n;

    memset(r, 0, sizeof *r);
    cc.threads = 2;
    snprintf(path, sizeof path, "%s/models/%s", src ? src : "..", file);
    assert_int_equal(bfit_device_cpu_new(&cc, &r->dev), BFIT_OK);
    r->arena = bfit_device_arena_new(r->dev, 1ull << 32);
    assert_non_null(r->arena);
    assert_int_equal(bfit_spec_parse_file(path, &r->g), BFIT_OK);
    for (int i = 0; bidir && i < r->g.nnodes; i++)
        if (r->g.nodes[i].cfg.kind == BFIT_L_ATTENTION)
            r->g.nodes[i].cfg.causal = 0;
    assert_int_equal(bfit_model_new(&r->g, r->dev, r->arena, &r->M), BFIT_OK);
    assert_int_equal(bfit_model_alloc_params(r->M, 1), BFIT_OK);
    assert_int_equal(bfit_model_init_params(r->M, 1), BFIT_OK);
    assert_int_equal(bfit_optim_new(&oc, r->M->trainable, r->M->ntrainable, r->dev, r->arena, &r->opt), BFIT_OK);
    /* tracking, as an adaptive run has it */
    assert_int_equal(bfit_gradnorm_new(r->M->trainable, r->M->ntrainable, 1, r->dev, r->arena, &r->gn), BFIT_OK);
    assert_int_equal(bfit_model_reserve(r->M, m, 1), BFIT_OK);
    n = (int64_t)m * bfit_shape_numel(r->M->input);
    r->x = malloc((size_t)n * sizeof *r->x); /* f32 samples, or int32 token ids (both 4 bytes) */
    r->y = malloc((size_t)m * (size_t)r->M->labels_per_sample * sizeof *r->y);
    assert_true(r->x && r->y);
    for (int64_t i = 0; i < n; i++) {
        if (r->M->input_dtype == BFIT_I32)
            ((int32_t *)r->x)[i] = (int32_t)(i % 13);
        else
            r->x[i] = (float)(i % 13) * 0.07f;
    }
    for (int64_t i = 0; i < (int64_t)m * r->M->labels_per_sample; i++)
        r->y[i] = i % 9 == 8 && r->M->labels_per_sample > 1 ? -1 /* a token model's padding */
                                                              : (int32_t)(i % r->M->nclasses);
}

static void rig_free(rig *r)
{
    free(r->x);
    free(r->y);
    bfit_gradnorm_free(r->gn);
    bfit_optim_free(r->opt);
    bfit_model_free(r->M);
    bfit_graph_fini(&r->g);
    bfit_arena_free(r->arena);
    bfit_device_free(r->dev);
}

/* One optimizer step of two micro-batches (accumulation), as the trainer
 * runs it; *loss gets the step's summed loss. */
static int train_step(rig *r, int m, int step, double *loss)
{
    double acc, dsq, norm;
    int rc = nlens ? bfit_model_set_seq(r->M, lens[step % nlens]) : BFIT_OK;
    if (rc == BFIT_OK)
        rc = bfit_model_stats_reset(r->M);
    for (int k = 0; k < 2 && rc == BFIT_OK; k++) {
        rc = bfit_model_reserve(r->M, m, 1);
        if (rc == BFIT_OK)
            rc = bfit_model_set_input(r->M, r->x, r->y, m);
        if (rc == BFIT_OK)
            rc = bfit_model_forward(r->M, (uint64_t)(step * 2 + k));
        if (rc == BFIT_OK)
            rc = bfit_model_backward(r->M, 0.5f / (float)m);
        if (rc == BFIT_OK)
            rc = bfit_gradnorm_track(r->gn, &acc, &dsq);
    }
    if (rc == BFIT_OK)
        rc = bfit_gradnorm_clip(r->gn, 5.0, &norm);
    if (rc == BFIT_OK)
        rc = bfit_optim_step(r->opt, 0.01);
    if (rc == BFIT_OK)
        rc = bfit_model_zero_grads(r->M);
    if (rc == BFIT_OK)
        rc = bfit_gradnorm_track_reset(r->gn);
    if (rc == BFIT_OK)
        rc = bfit_model_stats_read(r->M, loss, NULL);
    return rc;
}

static void steady_state(const char *file, int m)
{
    rig r;
    bfit_arena_stats s0, s1;
    uint64_t heap = 0, dnnl[9] = {0};
    double loss = 0;
    int rc = BFIT_OK;

    rig_new(&r, file, m);
    /* step 0 warms up (thread team, lazily made memory objects); then 4
     * steps are counted one by one. With a length cycle the warm-up is a
     * cycle and a step (every length entered and left once), and two cycles
     * are counted: oneDNN's own calls differ by length, so each step is held
     * to the same length's step a cycle before */
    int warm = nlens > 1 ? nlens + 1 : 1, period = nlens > 1 ? nlens : 1, counted = nlens > 1 ? 2 * nlens : 4;
    assert_true(counted <= 8);
    for (int step = 0; step < warm + counted && rc == BFIT_OK; step++) {
        int c = step - warm + 1; /* the counted step, 1..counted */
        if (c == 1)
            bfit_arena_stats_get(r.arena, &s0);
        if (c >= 1)
            counter_start();
        rc = train_step(&r, m, step, &loss);
        if (c >= 1) {
            uint64_t h = counter_stop(&dnnl[c]);
            if (h && !heap)
                print_callers(h);
            heap += h;
        }
    }
    bfit_arena_stats_get(r.arena, &s1);
    if (rc != BFIT_OK)
        fail_msg("%s m=%d: %s", file, m, bfit_errmsg());
    printf("  %s m=%d, %d steps: %llu arena allocations, %llu arena frees, %llu heap calls; "
           "inside oneDNN's execute, per step:", file, m, counted, (unsigned long long)(s1.nalloc - s0.nalloc),
           (unsigned long long)(s1.nfree - s0.nfree), (unsigned long long)heap);
    for (int i = 1; i <= counted; i++)
        printf(" %llu", (unsigned long long)dnnl[i]);
    printf("\n");
    /* the steps ran: a finite, positive loss came back */
    assert_true(loss > 0 && loss < 1e9);
    assert_int_equal(s1.nalloc - s0.nalloc, 0);
    assert_int_equal(s1.nfree - s0.nfree, 0);
    assert_int_equal(heap, 0);
    /* oneDNN's own: the same every step (at the same length), so nothing
     * accumulates */
    for (int i = period + 1; i <= counted; i++)
        assert_int_equal(dnnl[i], dnnl[i - period]);
    rig_free(&r);
}

static void test_mlp_steady_state(void **st)
{
    (void)st;
    steady_state("mlp.cfg", 64);
}

static void test_cnn_steady_state(void **st)
{
    (void)st;
    steady_state("cnn.cfg", 32);
}

/* Token ids in, per-token loss; attention's lanes run on the thread team
 * with sgemm inside (oneDNN's, counted apart) */
static void test_gpt_nano_steady_state(void **st)
{
    (void)st;
    steady_state("gpt-nano.cfg", 2);
}

/* Bidirectional: each step also stages the sequences' lengths (host side
 * grown once, at the first micro-batch) */
static void test_encoder_steady_state(void **st)
{
    (void)st;
    bidir = 1;
    steady_state("gpt-nano.cfg", 2);
    bidir = 0;
}

/* --seq-max: steps at changing lengths, each entered and left once in the
 * warm-up; after it a change of length is a lookup, not a new layout or new
 * ops (before seq.c kept them: 2,088 heap calls of ours in 4 such steps) */
static void test_gpt_nano_lengths(void **st)
{
    static const int cycle[] = {128, 48, 16, 96};
    (void)st;
    lens = cycle;
    nlens = 4;
    steady_state("gpt-nano.cfg", 2);
    bidir = 1; /* and with the padding mask's lengths staged */
    steady_state("gpt-nano.cfg", 2);
    bidir = 0;
    nlens = 0;
    lens = NULL;
}

/* ---- a whole run's step: --batch-tokens with --seq-max ----------------------- */

/* bfit_run_step as bfit_train calls it, with a token budget over sequences
 * of varying length: taking the sequences, sorting them, each micro-batch
 * sized at its length, the update and the controller. The first epoch warms
 * up (every length and micro-batch size seen once); the next two, which see
 * the same sequences, allocate nothing of ours, and oneDNN's calls in each
 * step equal those of the same step an epoch before. */
static void test_run_token_budget(void **st)
{
    const char *src = getenv("BFIT_SOURCE_DIR");
    char path[512];
    ttok ts = {.n = 40, .seq = 128, .vocab = 251, .lo = 8, .mul = 37, .mod = 121}; /* 8 to 128 tokens long */
    bfit_source s = ttok_source(&ts);
    bfit_train_cfg c = bfit_train_cfg_default();
    bfit_run *run;
    bfit_step_info in = BFIT_SIZED(bfit_step_info);
    uint64_t heap = 0, dnnl[3][16] = {{0}};
    int steps[3] = {0}, epoch = 0, rc = BFIT_OK;
    (void)st;
    c.device_name = "cpu"; /* the CPU is meant: --device auto could take a GPU */
    snprintf(path, sizeof path, "%s/models/gpt-nano.cfg", src ? src : "..");
    c.model = path;
    c.train_source = c.test_source = &s;
    c.batch_tokens = 1;
    c.batch = 1024;
    c.seq_max = 128;
    c.epochs = 3;
    c.threads = 2;
    c.prefetch = 0;
    c.memory = 1ull << 30;
    c.opt = bfit_optim_cfg_default(BFIT_OPT_ADAMW);
    c.lr = 1e-3;
    if (bfit_run_new_from(&c, &run) != BFIT_OK)
        fail_msg("run: %s", bfit_errmsg());
    while (!bfit_run_done(run) && rc == BFIT_OK) {
        int counted = epoch > 0;
        assert_true(steps[epoch] < 16);
        if (counted)
            counter_start();
        rc = bfit_run_step(run, &in);
        if (counted) {
            uint64_t h = counter_stop(&dnnl[epoch][steps[epoch]]);
            if (h && !heap)
                print_callers(h);
            heap += h;
        }
        steps[epoch]++;
        epoch += in.epoch_end;
    }
    if (rc != BFIT_OK)
        fail_msg("step: %s", bfit_errmsg());
    printf("  gpt-nano, 1024-token steps over lengths 8..128: %d steps an epoch (last: %d micro-batches); "
           "heap calls of ours in epochs 2-3: %llu; oneDNN's per step:", steps[0], in.k, (unsigned long long)heap);
    for (int e = 1; e < 3; e++)
        for (int i = 0; i < steps[e]; i++)
            printf(" %llu", (unsigned long long)dnnl[e][i]);
    printf("\n");
    assert_int_equal(steps[1], steps[0]);
    assert_int_equal(steps[2], steps[0]);
    assert_int_equal(heap, 0);
    for (int i = 0; i < steps[2]; i++)
        assert_int_equal(dnnl[2][i], dnnl[1][i]);
    bfit_run_free(run);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counter_sees_malloc),
        cmocka_unit_test(test_mlp_steady_state),
        cmocka_unit_test(test_cnn_steady_state),
        cmocka_unit_test(test_gpt_nano_steady_state),
        cmocka_unit_test(test_encoder_steady_state),
        cmocka_unit_test(test_gpt_nano_lengths),
        cmocka_unit_test(test_run_token_budget),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
