/* test_device_choice.c - --device auto: the ops a model needs, what each
 * device says it supports, the choice and its reason, and `plan --ways`
 * marking a row its device cannot run instead of stopping.
 *
 * Without a GPU (this machine) auto must take the CPU and say why; on a GPU
 * machine it takes the GPU for what the GPU runs. A device that refuses
 * some ops is made here by patching the CPU device's table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <cmocka.h>

#include "base/err.h"
#include "batch/plan.h"
#include "batch/ways.h"
#include "nn/model.h"
#include "nn/needs.h"
#include "nn/zoo.h"
#include "tfiles.h"

static int has(const bfit_op_needs *nd, bfit_op_kind k, bfit_dtype t) { return (nd->dtypes[k] >> t) & 1u; }

static void needs_of(const char *model, bfit_dtype t, bfit_op_needs *nd)
{
    bfit_graph_desc g;
    if (bfit_model_source_load(model, 0, &g) != BFIT_OK)
        fail_msg("%s: %s", model, bfit_errmsg());
    if (bfit_graph_op_needs(&g, t, nd) != BFIT_OK)
        fail_msg("needs of %s: %s", model, bfit_errmsg());
    bfit_graph_fini(&g);
}

/* A cnn in f32: convolutions, pooling, the loss, the optimizer; nothing of
 * a transformer, nothing in bf16. */
static void test_needs_cnn(void **st)
{
    bfit_op_needs nd;
    (void)st;
    needs_of("cnn", BFIT_F32, &nd);
    assert_true(has(&nd, BFIT_OP_CONV_FWD, BFIT_F32));
    assert_true(has(&nd, BFIT_OP_CONV_BWD_DATA, BFIT_F32));
    assert_true(has(&nd, BFIT_OP_CONV_BWD_WEIGHTS, BFIT_F32));
    assert_true(has(&nd, BFIT_OP_POOL_FWD, BFIT_F32));
    assert_true(has(&nd, BFIT_OP_XENT_FWD, BFIT_F32) && has(&nd, BFIT_OP_XENT_BWD, BFIT_F32));
    assert_true(has(&nd, BFIT_OP_SGD, BFIT_F32) && has(&nd, BFIT_OP_NORMS, BFIT_F32));
    assert_false(nd.dtypes[BFIT_OP_ATTN_FWD] || nd.dtypes[BFIT_OP_EMBED_FWD] || nd.dtypes[BFIT_OP_CAST]);
    for (int k = 0; k < BFIT_OP_COUNT; k++)
        assert_int_equal(nd.dtypes[k] & ~(1u << BFIT_F32), 0);
}

/* gpt-nano in bf16: embedding, attention, layer norm, GELU and the padded
 * loss in bf16, the casts to the compute copies, f32 updates. */
static void test_needs_gpt_bf16(void **st)
{
    bfit_op_needs nd;
    (void)st;
    needs_of("gpt-nano", BFIT_BF16, &nd);
    assert_true(has(&nd, BFIT_OP_EMBED_FWD, BFIT_BF16) && has(&nd, BFIT_OP_EMBED_BWD, BFIT_BF16));
    assert_true(has(&nd, BFIT_OP_ATTN_FWD, BFIT_BF16) && has(&nd, BFIT_OP_ATTN_BWD, BFIT_BF16));
    assert_true(has(&nd, BFIT_OP_LNORM_FWD, BFIT_BF16) && has(&nd, BFIT_OP_LNORM_BWD, BFIT_BF16));
    assert_true(has(&nd, BFIT_OP_ELTWISE_FWD, BFIT_BF16) && has(&nd, BFIT_OP_MATMUL, BFIT_BF16));
    assert_true(has(&nd, BFIT_OP_XENT_FWD, BFIT_BF16) && has(&nd, BFIT_OP_CAST, BFIT_BF16));
    assert_true(has(&nd, BFIT_OP_SGD, BFIT_F32) && has(&nd, BFIT_OP_ADAMW, BFIT_F32));
    assert_false(has(&nd, BFIT_OP_ATTN_FWD, BFIT_F32));
    assert_false(nd.dtypes[BFIT_OP_CONV_FWD]);
}

static void test_cpu_supports(void **st)
{
    bfit_device *d;
    bfit_op_needs nd;
    char why[256];
    (void)st;
    assert_int_equal(bfit_device_cpu_new(NULL, &d), BFIT_OK);
    assert_true(bfit_device_supports(d, BFIT_OP_ATTN_FWD, BFIT_BF16, why, sizeof why));
    assert_false(bfit_device_supports(d, BFIT_OP_MATMUL, BFIT_F16, why, sizeof why));
    assert_non_null(strstr(why, "f32 and bf16 only"));
    needs_of("gpt-nano", BFIT_F16, &nd);
    assert_false(bfit_device_supports_needs(d, &nd, why, sizeof why));
    assert_non_null(strstr(why, "in F16: "));
    bfit_device_free(d);
}

/* ONNX imports could make ops only the CPU device had: the needs name the
 * first made (bfit_op_cpu_only), which rules out any other device (the
 * recorder stands in for one here). A MobileNet block (grouped
 * convolution, clip), a ViT (transposition, broadcast add, slices,
 * concatenation), a DenseNet block, MobileNetV3's block (channel gates;
 * the GPU has these since 2026-12-04) and a PReLU head (since the CUDA
 * device made PRELU) were such: no import is now, so what is left to check
 * is that their needs, and the cnn preset's, name none and rule out no
 * device. */
static void test_cpu_only_needs(void **st)
{
    static const char *const gpu_too[] = {"fuzz/corpus/onnx/mobilenet_block.onnx", "fuzz/corpus/onnx/vit_tiny.onnx",
                                          "fuzz/corpus/onnx/dense_block.onnx", "tests/fixtures/se-mini.onnx",
                                          "fuzz/corpus/onnx/prelu_head.onnx"};
    bfit_op_needs nd, none;
    bfit_device *cpu, *rec;
    char path[1024], why[512];
    (void)st;
    assert_int_equal(bfit_device_cpu_new(NULL, &cpu), BFIT_OK);
    assert_int_equal(bfit_device_recorder_new(&none, &rec), BFIT_OK);
    needs_of("cnn", BFIT_F32, &nd);
    assert_null(nd.cpu_only);
    assert_true(bfit_device_supports_needs(rec, &nd, why, sizeof why));
    for (int i = 0; i < 5; i++) {
        src_path(path, sizeof path, gpu_too[i]);
        needs_of(path, BFIT_F32, &nd);
        if (nd.cpu_only)
            fail_msg("%s: only the cpu has its %s", gpu_too[i], nd.cpu_only);
        if (!bfit_device_supports_needs(rec, &nd, why, sizeof why))
            fail_msg("%s: another device is ruled out: %s", gpu_too[i], why);
        assert_true(bfit_device_supports_needs(cpu, &nd, why, sizeof why));
    }
    bfit_device_free(rec);
    bfit_device_free(cpu);
}

static int gpu_present(void)
{
    bfit_device *g = NULL;
    int ok = bfit_device_open("cuda", NULL, &g) == BFIT_OK;
    bfit_device_free(g);
    bfit_clear_error();
    return ok;
}

/* auto for a cnn in f32: the GPU when there is one, else the CPU, saying why */
static void test_auto_choice(void **st)
{
    bfit_device *d = NULL;
    char why[512];
    (void)st;
    assert_int_equal(bfit_device_open_for_model(NULL, NULL, "cnn", 0, BFIT_F32, &d, why, sizeof why), BFIT_OK);
    print_message("  auto: %s\n", why);
    if (gpu_present()) {
        assert_string_equal(bfit_device_name(d), "cuda:0");
        assert_non_null(strstr(why, "runs every op of the model in f32"));
    } else {
        assert_string_equal(bfit_device_name(d), "cpu");
        assert_true(!strncmp(why, "cpu, since ", 11) && strlen(why) > 20);
    }
    bfit_device_free(d);
    /* a name is opened as asked */
    assert_int_equal(bfit_device_open_for_model("cpu", NULL, "no-such-model", 0, BFIT_F16, &d, why, sizeof why), BFIT_OK);
    assert_string_equal(why, "cpu, as asked");
    bfit_device_free(d);
}

/* f16: the CPU never runs it, so without a GPU auto refuses, naming both */
static void test_auto_refuses(void **st)
{
    bfit_device *d = NULL;
    char why[512] = "";
    (void)st;
    if (gpu_present())
        skip();
    assert_int_equal(bfit_device_open_for_model("auto", NULL, "mlp", 0, BFIT_F16, &d, why, sizeof why), BFIT_EINVAL);
    assert_null(d);
    assert_non_null(strstr(bfit_errmsg(), "no device here runs this model"));
    assert_non_null(strstr(bfit_errmsg(), "the cpu does not run"));
    assert_non_null(strstr(bfit_errmsg(), "F16"));
}

/* ---- a CPU device that refuses f32 convolutions --------------------------------- */

static const bfit_device_vt *cpu_vt;
static bfit_device_vt patched;

static int refuse_supports(const bfit_device *d, bfit_op_kind k, bfit_dtype t, char *why, size_t n)
{
    if (k == BFIT_OP_CONV_FWD && t == BFIT_F32) {
        snprintf(why, n, "the test refuses it");
        return 0;
    }
    return cpu_vt->supports(d, k, t, why, n);
}

static int refuse_op_new(bfit_device *d, const bfit_op_desc *desc, bfit_op **out)
{
    if (desc->kind == BFIT_OP_CONV_FWD && desc->dtype == BFIT_F32) {
        *out = NULL;
        return bfit_fail(BFIT_EINVAL, "test: no f32 convolution here");
    }
    return cpu_vt->op_new(d, desc, out);
}

/* the ways table of the cnn on the patched device: the f32 rows marked,
 * the bf16 rows after them filled */
static void ways_with(int in_supports, const char *marked)
{
    bfit_device *d;
    bfit_arena *a;
    bfit_graph_desc g;
    bfit_optim_cfg opt = bfit_optim_cfg_default(BFIT_OPT_SGD);
    bfit_way w[BFIT_WAYS];

    assert_int_equal(bfit_device_cpu_new(NULL, &d), BFIT_OK);
    cpu_vt = d->vt;
    patched = *cpu_vt;
    if (in_supports)
        patched.supports = refuse_supports;
    else
        patched.op_new = refuse_op_new;
    d->vt = &patched;
    a = bfit_device_arena_new(d, 1ull << 30);
    assert_int_equal(bfit_model_source_load("cnn", 0, &g), BFIT_OK);
    assert_int_equal(bfit_plan_ways(&g, d, a, &opt, 256ull << 20, 0, w), BFIT_OK);
    for (int i = 0; i < BFIT_WAYS; i++) {
        int f32 = w[i].storage.precision == BFIT_F32;
        print_message("  %-40s m %6d  %s\n", w[i].name, w[i].m, w[i].error);
        if (f32) {
            assert_non_null(strstr(w[i].error, marked));
            assert_int_equal(w[i].m, 0);
        } else {
            assert_string_equal(w[i].error, "");
            assert_true(w[i].m > 0 && w[i].peak > 0);
        }
    }
    bfit_graph_fini(&g);
    bfit_arena_free(a);
    d->vt = cpu_vt;
    bfit_device_free(d);
}

static void test_ways_marks_rows(void **st)
{
    (void)st;
    ways_with(1, "unsupported on cpu: convolution forward in F32: the test refuses it");
    ways_with(0, "failed: ");
    ways_with(0, "no f32 convolution here");
}

/* A device that cannot make a convolution of more than 100 samples (as
 * cuDNN cannot past 2^31 elements a tensor) says so as out of memory, and
 * the plan's largest batch stops there instead of failing. */
static int small_convs(bfit_device *d, const bfit_op_desc *desc, bfit_op **out)
{
    if (desc->kind >= BFIT_OP_CONV_FWD && desc->kind <= BFIT_OP_CONV_BWD_WEIGHTS && desc->u.conv.n > 100) {
        *out = NULL;
        return bfit_fail(BFIT_ENOMEM, "test: a convolution of %lld samples is over the limit",
                         (long long)desc->u.conv.n);
    }
    return cpu_vt->op_new(d, desc, out);
}

static void test_plan_op_limit(void **st)
{
    bfit_device *d;
    bfit_model *M;
    bfit_graph_desc g;
    bfit_optim_cfg opt = bfit_optim_cfg_default(BFIT_OPT_SGD);
    int m = 0;
    (void)st;
    assert_int_equal(bfit_device_cpu_new(NULL, &d), BFIT_OK);
    cpu_vt = d->vt;
    patched = *cpu_vt;
    patched.op_new = small_convs;
    d->vt = &patched;
    assert_int_equal(bfit_model_source_load("cnn", 0, &g), BFIT_OK);
    assert_int_equal(bfit_model_new(&g, d, NULL, &M), BFIT_OK);
    assert_int_equal(bfit_plan_max_batch(M, &opt, 1, 64ull << 30, 100000, &m, NULL), BFIT_OK);
    assert_int_equal(m, 100);
    bfit_model_free(M);
    bfit_graph_fini(&g);
    d->vt = cpu_vt;
    bfit_device_free(d);
}

/* CUDA's runtime maps address space of its own as it starts: under ulimit
 * -v it fails with an out-of-memory that said nothing of the limit (an
 * H200 under 4,000,000 KB, 2026-12-04). Under a limit the message names
 * it; without one, and for another device error, it is as given. The soft
 * limit set here (64 TiB) refuses nothing and is put back. */
static void test_cuda_start_names_limit(void **st)
{
    static const char gpu[] = "cuda: no usable GPU: out of memory (cudaErrorMemoryAllocation)";
    struct rlimit old, lim;
    (void)st;
    assert_int_equal(getrlimit(RLIMIT_AS, &old), 0);
    if (old.rlim_cur == RLIM_INFINITY) {
        bfit_fail(BFIT_EDEVICE, "%s", gpu);
        assert_string_equal(bfit_errmsg(), gpu);
    }
    lim = old;
    lim.rlim_cur = old.rlim_max == RLIM_INFINITY || old.rlim_max > (1ull << 46) ? 1ull << 46 : old.rlim_max;
    assert_int_equal(setrlimit(RLIMIT_AS, &lim), 0);
    bfit_fail(BFIT_EDEVICE, "%s", gpu);
    print_message("%s\n", bfit_errmsg());
    assert_memory_equal(bfit_errmsg(), gpu, sizeof gpu - 1);
    assert_non_null(strstr(bfit_errmsg(), ": the CUDA driver maps more as it starts than the address-space limit "
                                          "(ulimit -v) of 64.00 TiB leaves"));
    assert_non_null(strstr(bfit_errmsg(), "unmapped: raise ulimit -v or lift it"));
    bfit_fail(BFIT_EDEVICE, "cuda: no usable GPU: no CUDA-capable device is detected (cudaErrorNoDevice)");
    assert_null(strstr(bfit_errmsg(), "ulimit"));
    assert_int_equal(setrlimit(RLIMIT_AS, &old), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_needs_cnn),       cmocka_unit_test(test_needs_gpt_bf16),
        cmocka_unit_test(test_cpu_supports),    cmocka_unit_test(test_auto_choice),
        cmocka_unit_test(test_auto_refuses),    cmocka_unit_test(test_ways_marks_rows),
        cmocka_unit_test(test_plan_op_limit),   cmocka_unit_test(test_cpu_only_needs),
        cmocka_unit_test(test_cuda_start_names_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
