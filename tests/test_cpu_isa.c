/* test_cpu_isa.c - the choice of instruction set for the CPU device's own
 * loops (device/cpu_isa.h), and the agreement of its variants.
 *
 * $BFIT_CPU_ISA is read once per process, so each setting is tried in a
 * fresh process (this program, run again with --ask): avx2 must select the
 * portable variants whatever the CPU, auto (or unset) what the CPU has
 * (read here from /proc/cpuinfo, not from the code under test), avx512 only
 * where the CPU has it, and a bad value must stop a device from opening
 * with a message naming the variable and the values it takes.
 *
 * Then, on a CPU with AVX-512, every dispatched loop whose result is
 * defined element by element runs under both variants (forced with
 * bfit_cpu_isa_force) on the same data, NaNs, ties, signed zeros and
 * partial vectors included, and the outputs must agree bit for bit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "device/cpu.h"
#include "device/cpu_isa.h"
#include "device/device.h"
#include "device/half.h"
#include "tdev.h"

/* ------------------------------------------------------------ the choice */

/* Whether /proc/cpuinfo's first flags line has every AVX-512 part the
 * variants are compiled for. */
static int cpuinfo_avx512(void)
{
    static const char *const need[] = {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"};
    char line[8192];
    int found = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");

    assert_non_null(f);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "flags", 5)) {
            found = 1;
            break;
        }
    fclose(f);
    assert_true(found);
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
        char word[32];
        snprintf(word, sizeof word, " %s", need[i]);
        const char *p = strstr(line, word);
        if (!p || (p[strlen(word)] != ' ' && p[strlen(word)] != '\n'))
            return 0;
    }
    return 1;
}

/* What a child saw: the level chosen, why, and opening a device. */
typedef struct seen {
    int isa;
    int open_rc;
    char why[120];
    char detail[64];
    char err[200];
} seen;

/* The child's side (this program run with --ask): open a device, say what
 * was chosen on fd 1. */
static int ask_main(void)
{
    bfit_device *d = NULL;
    seen s;

    memset(&s, 0, sizeof s);
    s.open_rc = bfit_device_cpu_new(NULL, &d);
    s.isa = (int)bfit_cpu_isa_get();
    snprintf(s.why, sizeof s.why, "%s", bfit_cpu_isa_why());
    if (s.open_rc == BFIT_OK) {
        bfit_device_info i;
        bfit_device_info_get(d, &i);
        snprintf(s.detail, sizeof s.detail, "%s", i.detail);
        bfit_device_free(d);
    } else {
        snprintf(s.err, sizeof s.err, "%s", bfit_errmsg());
        if (d)
            s.open_rc = 12345; /* a failed open must leave no device */
    }
    return write(1, &s, sizeof s) == (ssize_t)sizeof s ? 0 : 1;
}

/* A fresh process (this program again: the choice is made once per
 * process) with $BFIT_CPU_ISA = value (NULL: unset). */
static seen ask_child(const char *value)
{
    seen s;
    int fd[2], status = 0;
    pid_t pid;

    assert_int_equal(pipe(fd), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (value)
            setenv("BFIT_CPU_ISA", value, 1);
        else
            unsetenv("BFIT_CPU_ISA");
        dup2(fd[1], 1);
        close(fd[0]);
        execl("/proc/self/exe", "test_cpu_isa", "--ask", (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    assert_int_equal(read(fd[0], &s, sizeof s), (ssize_t)sizeof s);
    close(fd[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return s;
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

/* Whether oneDNN makes bf16 kernels here: a CPU with AVX-512 (avx512_core)
 * whose oneDNN is not capped below it ($ONEDNN_MAX_CPU_ISA=AVX2, as the
 * test script's second pass sets). */
static int onednn_bf16(void)
{
    const char *cap = getenv("ONEDNN_MAX_CPU_ISA");
    if (!cap || !*cap)
        cap = getenv("DNNL_MAX_CPU_ISA");
    return cpuinfo_avx512() && (!cap || !*cap || strstr(cap, "AVX512") || strstr(cap, "avx512") ||
                                strstr(cap, "AMX") || strstr(cap, "ALL") || strstr(cap, "all"));
}

/* The device's detail: "oneDNN 2.6, N threads, ISA" and, where oneDNN has
 * no bf16 kernels, ", bf16 computed in f32" (src/device/cpu_bf16.c). */
static int says_isa(const char *detail, const char *isa)
{
    char tail[64];
    snprintf(tail, sizeof tail, ", %s%s", isa, onednn_bf16() ? "" : ", bf16 computed in f32");
    return ends_with(detail, tail);
}

static void test_forced_avx2(void **st)
{
    seen s = ask_child("avx2");
    (void)st;
    assert_int_equal(s.open_rc, BFIT_OK);
    assert_int_equal(s.isa, BFIT_CPU_ISA_AVX2);
    assert_string_equal(s.why, "BFIT_CPU_ISA=avx2");
    if (!says_isa(s.detail, "avx2"))
        fail_msg("device detail \"%s\" does not say avx2 (and whether bf16 is computed in f32)", s.detail);
}

static void test_auto(void **st)
{
    const char *values[] = {NULL, "", "auto"};
    int want = cpuinfo_avx512() ? BFIT_CPU_ISA_AVX512 : BFIT_CPU_ISA_AVX2;
    (void)st;
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        seen s = ask_child(values[i]);
        assert_int_equal(s.open_rc, BFIT_OK);
        if (s.isa != want)
            fail_msg("BFIT_CPU_ISA=%s: chose %s, the CPU says %s", values[i] ? values[i] : "(unset)",
                     bfit_cpu_isa_name((bfit_cpu_isa)s.isa), bfit_cpu_isa_name((bfit_cpu_isa)want));
        assert_non_null(strstr(s.why, "the CPU has"));
        if (!says_isa(s.detail, want == BFIT_CPU_ISA_AVX512 ? "avx512" : "avx2"))
            fail_msg("device detail \"%s\": not the instruction set or the bf16 kernels expected", s.detail);
    }
}

static void test_forced_avx512(void **st)
{
    seen s = ask_child("avx512");
    (void)st;
    if (cpuinfo_avx512()) {
        assert_int_equal(s.open_rc, BFIT_OK);
        assert_int_equal(s.isa, BFIT_CPU_ISA_AVX512);
        assert_string_equal(s.why, "BFIT_CPU_ISA=avx512");
    } else {
        assert_int_equal(s.open_rc, BFIT_EINVAL);
        assert_string_equal(s.err, "BFIT_CPU_ISA=avx512: this CPU has no AVX-512 (F, BW, CD, DQ, VL); unset it "
                                   "or use avx2");
        assert_int_equal(s.isa, BFIT_CPU_ISA_AVX2);
    }
}

static void test_bad_value(void **st)
{
    const char *values[] = {"sse9", "AVX2", "avx2 "};
    (void)st;
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        seen s = ask_child(values[i]);
        char want[120];
        snprintf(want, sizeof want, "BFIT_CPU_ISA=%s: expected auto, avx2 or avx512", values[i]);
        assert_int_equal(s.open_rc, BFIT_EINVAL);
        assert_string_equal(s.err, want);
    }
}

/* --------------------------------------------- the variants agree, bit for bit */

#define NB 6 /* buffers of a case at most */

enum { F_OUT, F_F32, F_BF16, F_POS };

/* One case: up to two ops run in turn (a forward, then its backward) over
 * shared buffers; every buffer is compared after both variants ran. */
typedef struct vcase {
    const char *name;
    int nops;
    bfit_op_desc d[2];
    void (*bind[2])(bfit_op_args *a, void *const *b);
    size_t bytes[NB];
    int fill[NB];
} vcase;

static uint64_t rs = 7;
static uint32_t rnd(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs >> 32);
}

/* Values with what a vector loop must get right: ties (a few values),
 * signed zeros, NaNs of both signs, infinities, and rounding cases. */
static float special(int64_t i)
{
    switch (rnd() % 16) {
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return i % 2 ? NAN : -NAN;
    case 3: return i % 2 ? INFINITY : -INFINITY;
    case 4: return (float)(rnd() % 5) - 2.0f;           /* ties */
    case 5: return 1.0f + (float)(rnd() % 256) / 32768; /* bf16 round-to-even cases */
    default: return ((float)(rnd() % 2000001) - 1000000.0f) / 65536.0f;
    }
}

static void fill(void *h, size_t bytes, int how)
{
    if (how == F_OUT) {
        memset(h, 0xff, bytes);
    } else if (how == F_BF16) {
        for (size_t i = 0; i < bytes / 2; i++)
            ((uint16_t *)h)[i] = bfit_f32_to_bf16(special((int64_t)i));
    } else {
        for (size_t i = 0; i < bytes / 4; i++)
            ((float *)h)[i] = how == F_POS ? (float)(rnd() % 100000) / 1e5f : special((int64_t)i);
    }
}

/* Run the case under isa from fresh buffers; out[i] gets buffer i. */
static void run_case(tdev *t, const vcase *c, bfit_cpu_isa isa, void **out)
{
    tbuf b[NB];
    void *dp[NB] = {0};

    assert_int_equal(bfit_cpu_isa_force(isa), BFIT_OK);
    rs = 7; /* the same data for both variants */
    for (int i = 0; i < NB; i++)
        if (c->bytes[i]) {
            b[i] = tbuf_new(t, c->bytes[i]);
            fill(b[i].h, c->bytes[i], c->fill[i]);
            tbuf_up(t, &b[i]);
            dp[i] = b[i].d;
        }
    for (int k = 0; k < c->nops; k++) {
        bfit_op *op = NULL;
        bfit_op_args a;
        void *ws = NULL;
        memset(&a, 0, sizeof a);
        if (bfit_op_new(t->dev, &c->d[k], &op) != BFIT_OK)
            fail_msg("%s: op %d: %s", c->name, k, bfit_errmsg());
        /* oneDNN's ops of a case (bf16 GELU's forward) take f32 copies in a
         * workspace where oneDNN has no bf16 kernels (ONEDNN_MAX_CPU_ISA=AVX2) */
        if (bfit_op_workspace_bytes(op))
            assert_int_equal(bfit_arena_alloc(t->arena, bfit_op_workspace_bytes(op), BFIT_MEM_WORKSPACE, &ws), BFIT_OK);
        c->bind[k](&a, dp);
        a.workspace = ws;
        if (bfit_op_run(op, &a) != BFIT_OK)
            fail_msg("%s (%s): op %d: %s", c->name, bfit_cpu_isa_name(isa), k, bfit_errmsg());
        bfit_arena_release(t->arena, ws);
        bfit_op_free(op);
    }
    for (int i = 0; i < NB; i++)
        if (c->bytes[i]) {
            tbuf_down(t, &b[i]);
            out[i] = b[i].h;
            b[i].h = NULL;
            tbuf_free(t, &b[i]);
        }
}

static void check_case(tdev *t, const vcase *c)
{
    void *v512[NB] = {0}, *v2[NB] = {0};
    run_case(t, c, BFIT_CPU_ISA_AVX512, v512);
    run_case(t, c, BFIT_CPU_ISA_AVX2, v2);
    for (int i = 0; i < NB; i++) {
        if (!c->bytes[i])
            continue;
        for (size_t j = 0; j < c->bytes[i]; j++)
            if (((uint8_t *)v512[i])[j] != ((uint8_t *)v2[i])[j])
                fail_msg("%s: buffer %d differs at byte %zu of %zu: avx512 %02x, avx2 %02x", c->name, i, j,
                         c->bytes[i], ((uint8_t *)v512[i])[j], ((uint8_t *)v2[i])[j]);
        free(v512[i]);
        free(v2[i]);
    }
}

/* the buffers' roles, case by case */
static void b_pool_fwd(bfit_op_args *a, void *const *b) { a->src = b[0], a->dst = b[1], a->saved = b[2]; }
static void b_pool_bwd(bfit_op_args *a, void *const *b) { a->diff_dst = b[3], a->diff_src = b[4], a->saved = b[2]; }
static void b_pool_eval(bfit_op_args *a, void *const *b) { a->src = b[0], a->dst = b[1]; }
static void b_bits_fwd(bfit_op_args *a, void *const *b) { a->src = b[0], a->dst = b[1], a->saved = b[2]; }
static void b_bits_bwd(bfit_op_args *a, void *const *b) { a->diff_dst = b[3], a->diff_src = b[4], a->saved = b[2]; }
static void b_src_dst(bfit_op_args *a, void *const *b) { a->src = b[0], a->dst = b[1]; }

static void b_sgd(bfit_op_args *a, void *const *b)
{
    a->dst = b[0], a->src = b[1], a->state0 = b[2];
    a->hyper[BFIT_SGD_LR_NEG] = -0.01f, a->hyper[BFIT_SGD_WD] = 5e-4f, a->hyper[BFIT_SGD_MOM] = 0.9f;
    a->hyper[BFIT_SGD_DAMP1] = 0.75f, a->hyper[BFIT_SGD_FIRST] = 0.0f;
}

static void b_adamw(bfit_op_args *a, void *const *b)
{
    a->dst = b[0], a->src = b[1], a->state0 = b[2], a->state1 = b[3];
    a->hyper[BFIT_ADAMW_DECAY_MUL] = 0.9999f, a->hyper[BFIT_ADAMW_B1] = 0.9f, a->hyper[BFIT_ADAMW_C1] = 0.1f;
    a->hyper[BFIT_ADAMW_B2] = 0.999f, a->hyper[BFIT_ADAMW_C2] = 0.001f, a->hyper[BFIT_ADAMW_STEP_NEG] = -0.003f;
    a->hyper[BFIT_ADAMW_BC2_SQRT] = 0.2f, a->hyper[BFIT_ADAMW_EPS] = 1e-8f;
}

static vcase pool_case(bfit_dtype dt, int training)
{
    /* 2x3 planes of 9x71: rows of 35 outputs (two 16s and 3, four 8s and 3), an odd row and column left over */
    const int64_t n = 2, c = 3, ih = 9, iw = 71, oh = 4, ow = 35, es = dt == BFIT_F32 ? 4 : 2;
    vcase v = {.name = training ? "maxpool 2x2 forward and backward" : "maxpool 2x2 inference", .nops = training ? 2 : 1};
    v.d[0] = (bfit_op_desc){.kind = BFIT_OP_POOL_FWD, .dtype = dt};
    v.d[0].u.pool = (typeof(v.d[0].u.pool)){.n = n, .c = c, .ih = ih, .iw = iw, .oh = oh, .ow = ow, .kh = 2, .kw = 2,
                                             .sh = 2, .sw = 2, .max = 1, .training = training};
    v.d[1] = v.d[0];
    v.d[1].kind = BFIT_OP_POOL_BWD;
    v.bind[0] = training ? b_pool_fwd : b_pool_eval;
    v.bind[1] = b_pool_bwd;
    v.bytes[0] = (size_t)(n * c * ih * iw * es), v.fill[0] = dt == BFIT_F32 ? F_F32 : F_BF16;
    v.bytes[1] = (size_t)(n * c * oh * ow * es);
    if (training) {
        v.bytes[2] = (size_t)(n * c * oh * ow); /* the indices, a byte each */
        v.bytes[3] = v.bytes[1], v.fill[3] = v.fill[0];
        v.bytes[4] = v.bytes[0];
    }
    return v;
}

static vcase bits_case(bfit_dtype dt, int64_t n)
{
    const int64_t es = dt == BFIT_F32 ? 4 : 2;
    vcase v = {.name = "relu with sign bits, forward and backward", .nops = 2};
    v.d[0] = (bfit_op_desc){.kind = BFIT_OP_ELTWISE_FWD, .dtype = dt};
    v.d[0].u.elt = (typeof(v.d[0].u.elt)){.n = n, .alg = BFIT_ELT_RELU, .bits = 1};
    v.d[1] = v.d[0];
    v.d[1].kind = BFIT_OP_ELTWISE_BWD;
    v.bind[0] = b_bits_fwd, v.bind[1] = b_bits_bwd;
    v.bytes[0] = (size_t)(n * es), v.fill[0] = dt == BFIT_F32 ? F_F32 : F_BF16;
    v.bytes[1] = v.bytes[0];
    v.bytes[2] = (size_t)(n + 63) / 64 * 8;
    v.bytes[3] = v.bytes[0], v.fill[3] = v.fill[0];
    v.bytes[4] = v.bytes[0];
    return v;
}

/* GELU (erf; ours in f32, and bf16's backward) forward, then its backward
 * from the forward's input */
static void b_elt_fwd(bfit_op_args *a, void *const *b) { a->src = b[0], a->dst = b[1]; }
static void b_elt_bwd(bfit_op_args *a, void *const *b) { a->src = b[0], a->diff_dst = b[2], a->diff_src = b[3]; }

static vcase gelu_case(bfit_dtype dt, int64_t n)
{
    const int64_t es = dt == BFIT_F32 ? 4 : 2;
    vcase v = {.name = dt == BFIT_F32 ? "gelu forward and backward" : "gelu forward and backward (bf16)", .nops = 2,
               .bind = {b_elt_fwd, b_elt_bwd}};
    v.d[0] = (bfit_op_desc){.kind = BFIT_OP_ELTWISE_FWD, .dtype = dt};
    v.d[0].u.elt = (typeof(v.d[0].u.elt)){.n = n, .alg = BFIT_ELT_GELU_ERF};
    v.d[1] = v.d[0];
    v.d[1].kind = BFIT_OP_ELTWISE_BWD;
    v.bytes[0] = (size_t)(n * es), v.fill[0] = dt == BFIT_F32 ? F_F32 : F_BF16;
    v.bytes[1] = v.bytes[0];
    v.bytes[2] = v.bytes[0], v.fill[2] = v.fill[0];
    v.bytes[3] = v.bytes[0];
    return v;
}

static void test_variants_agree(void **st)
{
    tdev *t = *st;
    /* 100003: past the parallel threshold, with a partial vector at the end */
    const int64_t n = 100003;
    vcase c;

    if (!cpuinfo_avx512())
        skip(); /* one variant only on this CPU: nothing to compare */
    for (int dt = 0; dt < 2; dt++) {
        bfit_dtype t16 = dt ? BFIT_BF16 : BFIT_F32;
        c = pool_case(t16, 1), check_case(t, &c);
        c = pool_case(t16, 0), check_case(t, &c);
        c = bits_case(t16, 1003), check_case(t, &c);
        c = bits_case(t16, 200003), check_case(t, &c);
        /* bias gradients: column sums of 37 x 1000 accumulated onto dst */
        c = (vcase){.name = "reduce rows", .nops = 1, .bind = {b_src_dst}};
        c.d[0] = (bfit_op_desc){.kind = BFIT_OP_REDUCE_ROWS, .dtype = t16, .accumulate = 1};
        c.d[0].u.reduce.M = 37, c.d[0].u.reduce.N = 1000;
        c.bytes[0] = (size_t)(37 * 1000 * (dt ? 2 : 4)), c.fill[0] = dt ? F_BF16 : F_F32;
        c.bytes[1] = 1000 * 4, c.fill[1] = F_POS;
        check_case(t, &c);
        /* the casts between f32 and bf16, both ways */
        c = (vcase){.name = "cast", .nops = 1, .bind = {b_src_dst}};
        c.d[0] = (bfit_op_desc){.kind = BFIT_OP_CAST, .dtype = t16};
        c.d[0].u.cast.n = n, c.d[0].u.cast.to = dt ? BFIT_F32 : BFIT_BF16;
        c.bytes[0] = (size_t)n * (dt ? 2 : 4), c.fill[0] = dt ? F_BF16 : F_F32;
        c.bytes[1] = (size_t)n * (dt ? 4 : 2);
        check_case(t, &c);
    }
    c = gelu_case(BFIT_F32, n), check_case(t, &c);
    c = gelu_case(BFIT_BF16, n), check_case(t, &c); /* the backward ours, the forward oneDNN's (cpu_gelu.c) */
    for (int nesterov = 0; nesterov < 2; nesterov++) {
        c = (vcase){.name = nesterov ? "sgd (nesterov)" : "sgd", .nops = 1, .bind = {b_sgd}};
        c.d[0] = (bfit_op_desc){.kind = BFIT_OP_SGD, .dtype = BFIT_F32};
        c.d[0].u.sgd.n = n, c.d[0].u.sgd.momentum = 1, c.d[0].u.sgd.nesterov = nesterov;
        for (int i = 0; i < 3; i++)
            c.bytes[i] = (size_t)n * 4, c.fill[i] = F_F32;
        check_case(t, &c);
    }
    c = (vcase){.name = "adamw", .nops = 1, .bind = {b_adamw}};
    c.d[0] = (bfit_op_desc){.kind = BFIT_OP_ADAMW, .dtype = BFIT_F32};
    c.d[0].u.adamw.n = n;
    for (int i = 0; i < 4; i++)
        c.bytes[i] = (size_t)n * 4, c.fill[i] = i == 3 ? F_POS : F_F32; /* v, the second moment, >= 0 */
    check_case(t, &c);
}

/* bf16 activations to and from oneDNN's nChw16c: our transposes, called
 * directly (host memory: a plain function of two pointers). */
static void test_blk16_agree(void **st)
{
    /* hw = 199: 12 tiles of 16 and 7 columns element by element */
    const int64_t n = 3, c = 32, hw = 199, len = n * c * hw;
    uint16_t *src = malloc((size_t)len * 2), *d512 = malloc((size_t)len * 2), *d2 = malloc((size_t)len * 2);
    (void)st;

    if (!cpuinfo_avx512()) {
        free(src), free(d512), free(d2);
        skip();
    }
    for (int64_t i = 0; i < len; i++)
        src[i] = (uint16_t)rnd();
    for (int to_plain = 0; to_plain < 2; to_plain++) {
        memset(d512, 0xab, (size_t)len * 2), memset(d2, 0xcd, (size_t)len * 2);
        assert_int_equal(bfit_cpu_isa_force(BFIT_CPU_ISA_AVX512), BFIT_OK);
        bfit_cpu_blk16_run(src, d512, n, c, hw, to_plain);
        assert_int_equal(bfit_cpu_isa_force(BFIT_CPU_ISA_AVX2), BFIT_OK);
        bfit_cpu_blk16_run(src, d2, n, c, hw, to_plain);
        assert_memory_equal(d512, d2, (size_t)len * 2);
        /* and it is the transpose: element (channel k, position s) of tile 0 */
        for (int64_t k = 0; k < 16; k++)
            for (int64_t s = 0; s < hw; s++)
                assert_int_equal(to_plain ? d2[k * hw + s] : d2[s * 16 + k],
                                 to_plain ? src[s * 16 + k] : src[k * hw + s]);
    }
    free(src), free(d512), free(d2);
}

static int setup(void **st)
{
    tdev *t = calloc(1, sizeof *t);
    tdev_open(t, 2);
    *st = t;
    return 0;
}

static int teardown(void **st)
{
    tdev *t = *st;
    tdev_close(t);
    free(t);
    return 0;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forced_avx2),
        cmocka_unit_test(test_auto),
        cmocka_unit_test(test_forced_avx512),
        cmocka_unit_test(test_bad_value),
        cmocka_unit_test(test_variants_agree),
        cmocka_unit_test(test_blk16_agree),
    };
    if (argc == 2 && !strcmp(argv[1], "--ask"))
        return ask_main();
    return cmocka_run_group_tests(tests, setup, teardown);
}
