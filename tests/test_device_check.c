/* test_device_check.c - the CPU device's checking mode and the arena over a
 * device's blocks.
 *
 * The checking mode (bfit_device_cfg.check = 1, or BFIT_DEVICE_CHECK=1) keeps
 * device memory PROT_NONE outside device calls, so a host read of it crashes
 * here as it would on a GPU, and refuses host pointers where the device's
 * are needed. Around each device call the thread count the device was
 * given is set and the caller's restored. The arena carves the blocks a
 * source gives it (granularity, sharing, first fit, giving blocks back) and
 * never touches them itself; a fake source here counts the calls and checks
 * that the memory holds what the source itself last wrote. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "internal.h"

#include "device/device.h"

/* A CPU device with this checking mode and thread count, and an arena. */
static bfit_device *open_dev(int check, int threads, bfit_arena **arena)
{
    bfit_device_cfg c = bfit_device_cfg_default();
    bfit_device *d = NULL;
    c.check = check;
    c.threads = threads;
    if (bfit_device_cpu_new(&c, &d) != BFIT_OK)
        fail_msg("device: %s", bfit_errmsg());
    *arena = bfit_device_arena_new(d, 1ull << 30);
    assert_non_null(*arena);
    return d;
}

static void close_dev(bfit_device *d, bfit_arena *a)
{
    bfit_arena_free(a);
    bfit_device_free(d);
}

static void *dalloc(bfit_arena *a, size_t n)
{
    void *p = NULL;
    if (bfit_arena_alloc(a, n, BFIT_MEM_OTHER, &p) != BFIT_OK)
        fail_msg("device allocation: %s", bfit_errmsg());
    return p;
}

/* ---- (a) a host read of device memory crashes in the checking mode ------- */

typedef struct reader {
    bfit_device *dev;
    bfit_arena *arena;
    void *p;      /* NULL: the child allocates and uploads itself */
    int spans;    /* the child runs this many spans of key first (device.h) */
    int inside;   /* and reads inside the last of them, not after it */
    uint64_t key;
} reader;

/* The child: (allocate and upload 1.5f, run spans, then) read the first
 * float on the host. Exits 0 when it read 1.5f, 2 when another value, 3 on
 * an error. */
static void child_read(const reader *r)
{
    void *p = r->p;
    float v = 1.5f;
    if (!p && (bfit_arena_alloc(r->arena, 256, BFIT_MEM_OTHER, &p) != BFIT_OK ||
               bfit_device_upload(r->dev, p, &v, sizeof v) != BFIT_OK))
        _exit(3);
    for (int i = 1; i <= r->spans; i++) {
        if (bfit_device_span_begin(r->dev, r->key) != BFIT_OK)
            _exit(3);
        if (i == r->spans && r->inside)
            break;
        bfit_device_span_end(r->dev);
    }
    v = *(volatile const float *)p;
    _exit(v == 1.5f ? 0 : 2);
}

/* Run child_read in a forked child and return its wait status. The child
 * takes SIGSEGV's default action (cmocka's handler, and ASan's, would catch
 * it otherwise) and writes no core. */
static int read_in_child(const reader *r)
{
    pid_t pid;
    int status = 0;
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct sigaction sa;
        struct rlimit none = {0, 0};
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_DFL;
        sigaction(SIGSEGV, &sa, NULL);
        setrlimit(RLIMIT_CORE, &none);
        child_read(r);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static void assert_segv(int status)
{
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGSEGV)
        fail_msg("the host read did not crash: %s %d", WIFSIGNALED(status) ? "signal" : "exit code",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

static void test_host_read_crashes(void **st)
{
    bfit_arena *a;
    bfit_device *d = open_dev(1, 0, &a);
    reader r = {d, a, NULL, 0, 0, 0};
    bfit_device_info info;
    float v = 1.5f, back = 0;
    (void)st;
    bfit_device_info_get(d, &info);
    assert_int_equal(info.check, 1);
    /* allocated and written in the child, then read on the host */
    assert_segv(read_in_child(&r));
    /* after a device call that opened the block, it is closed again */
    r.p = dalloc(a, 256);
    assert_int_equal(bfit_device_upload(d, r.p, &v, sizeof v), BFIT_OK);
    assert_int_equal(bfit_device_download(d, &back, r.p, sizeof back), BFIT_OK);
    assert_true(back == 1.5f);
    assert_segv(read_in_child(&r));
    /* the last float of a block over one 2 MiB page (checking-mode blocks
     * are whole huge pages, cpu_mem.c) is closed too */
    {
        size_t n = (3u << 20) + 4;
        char *big = dalloc(a, n);
        float *last = (float *)(big + n - sizeof v);
        assert_int_equal(bfit_device_upload(d, last, &v, sizeof v), BFIT_OK);
        back = 0;
        assert_int_equal(bfit_device_download(d, &back, last, sizeof back), BFIT_OK);
        assert_true(back == 1.5f);
        r.p = last;
        assert_segv(read_in_child(&r));
    }
    close_dev(d, a);
}

/* Outside the checking mode the same read works: device memory is host
 * RAM on the CPU (which is why the mode exists). */
static void test_host_read_works_unchecked(void **st)
{
    bfit_arena *a;
    bfit_device *d = open_dev(0, 0, &a);
    reader r = {d, a, NULL, 0, 0, 0};
    int status;
    (void)st;
    status = read_in_child(&r);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    close_dev(d, a);
}

/* ---- (b) host pointers given to ops are refused ---------------------------- */

/* ADD n floats: dst = src + src2. */
static int run_add(bfit_device *d, int64_t n, const void *src, const void *src2, void *dst)
{
    bfit_op_desc desc = {.kind = BFIT_OP_ADD, .dtype = BFIT_F32};
    bfit_op_args a = {0};
    bfit_op *op;
    int rc;
    desc.u.add.n = n;
    assert_int_equal(bfit_op_new(d, &desc, &op), BFIT_OK);
    a.src = src, a.src2 = src2, a.dst = dst;
    rc = bfit_op_run(op, &a);
    bfit_op_free(op);
    return rc;
}

static void assert_refused(int rc, const char *needle)
{
    assert_int_equal(rc, BFIT_EINVAL);
    if (!strstr(bfit_errmsg(), needle))
        fail_msg("message '%s' does not say '%s'", bfit_errmsg(), needle);
}

static void test_host_pointer_refused(void **st)
{
    bfit_arena *a;
    bfit_device *d = open_dev(1, 0, &a);
    float *host = aligned_alloc(64, 64 * sizeof(float)), back[16];
    float *x = dalloc(a, 64 * sizeof(float)), *y = dalloc(a, 64 * sizeof(float));
    reader r = {d, a, x, 0, 0, 0};
    (void)st;
    for (int i = 0; i < 64; i++)
        host[i] = (float)i;
    assert_int_equal(bfit_device_upload(d, x, host, 64 * sizeof(float)), BFIT_OK);
    /* each argument is named: src, src2, dst */
    assert_refused(run_add(d, 16, host, x, y), "op: src is not device memory");
    assert_refused(run_add(d, 16, x, host, y), "op: src2 is not device memory");
    assert_refused(run_add(d, 16, x, x, host), "op: dst is not device memory");
    /* a refused call leaves the blocks it had opened closed */
    assert_segv(read_in_child(&r));
    /* transfers: the device side must be device memory too */
    assert_refused(bfit_device_copy(d, y, host, 16), "source is not device memory");
    assert_refused(bfit_device_copy(d, host, y, 16), "destination is not device memory");
    assert_refused(bfit_device_fill(d, host, 0, 16), "destination is not device memory");
    assert_refused(bfit_device_upload(d, host, back, 16), "destination is not device memory");
    assert_refused(bfit_device_download(d, back, host, 16), "source is not device memory");
    /* a pointer into an allocation (a layer's offset views) is device memory */
    assert_int_equal(run_add(d, 16, x + 16, x + 32, y + 8), BFIT_OK);
    assert_int_equal(bfit_device_download(d, back, y + 8, sizeof back), BFIT_OK);
    for (int i = 0; i < 16; i++)
        assert_true(back[i] == (float)(16 + i) + (float)(32 + i));
    free(host);
    close_dev(d, a);
}

/* ---- (b2) spans: checked call by call at first, then open ------------------ */

static void assert_read_ok(int status)
{
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("the host read inside an open span did not read the value: %s %d",
                 WIFSIGNALED(status) ? "signal" : "exit code",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

/* A span (a model's forward, its backward, an optimizer step) keeps every
 * block closed between its calls its first two runs per key, so a host
 * access in it crashes there; from the third it runs with every block open,
 * still refusing a host pointer as a device argument; after it, the blocks
 * are closed again, a block the arena took during it too. Checking mode 2
 * checks every run. */
static void test_span_checked_then_open(void **st)
{
    bfit_arena *a;
    bfit_device *d = open_dev(1, 0, &a), *plain;
    float v = 1.5f, back = 0, host[4] = {0};
    reader r = {d, a, dalloc(a, 256), 0, 1, 7};
    char *big;
    (void)st;
    assert_int_equal(bfit_device_upload(d, r.p, &v, sizeof v), BFIT_OK);
    r.spans = 1;
    assert_segv(read_in_child(&r));
    r.spans = 2;
    assert_segv(read_in_child(&r));
    r.spans = 3;
    assert_read_ok(read_in_child(&r));
    r.inside = 0; /* after the third span's end */
    assert_segv(read_in_child(&r));
    /* here: two checked runs of key 7, then an open one */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(bfit_device_span_begin(d, 7), BFIT_OK);
        bfit_device_span_end(d);
    }
    assert_int_equal(bfit_device_span_begin(d, 7), BFIT_OK);
    assert_refused(bfit_device_copy(d, r.p, host, sizeof host), "source is not device memory");
    assert_refused(bfit_device_upload(d, r.p, r.p, sizeof v), "upload: the host buffer is device memory");
    /* a block taken inside the open span (bigger than the first's room) is open to its calls */
    big = dalloc(a, 4u << 20);
    assert_int_equal(bfit_device_upload(d, big + (4u << 20) - sizeof v, &v, sizeof v), BFIT_OK);
    assert_int_equal(bfit_device_download(d, &back, big + (4u << 20) - sizeof v, sizeof back), BFIT_OK);
    assert_true(back == 1.5f);
    bfit_device_span_end(d);
    r.inside = 1;
    r.spans = 1; /* key 7's fourth run: open */
    assert_read_ok(read_in_child(&r));
    r.key = 8; /* another key's first: checked */
    assert_segv(read_in_child(&r));
    r.p = big + (4u << 20) - sizeof v;
    r.spans = 0;
    assert_segv(read_in_child(&r));
    close_dev(d, a);
    /* check 2 (BFIT_DEVICE_CHECK=2) checks every run of a span */
    d = open_dev(2, 0, &a);
    r = (reader){d, a, dalloc(a, 256), 5, 1, 7};
    assert_int_equal(bfit_device_upload(d, r.p, &v, sizeof v), BFIT_OK);
    assert_segv(read_in_child(&r));
    close_dev(d, a);
    /* outside the checking mode a span does nothing */
    plain = open_dev(0, 0, &a);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(bfit_device_span_begin(plain, 7), BFIT_OK);
        bfit_device_span_end(plain);
    }
    close_dev(plain, a);
}

/* ---- (c) a device pointer is not a host buffer ---------------------------- */

static void test_transfer_host_side_refused(void **st)
{
    bfit_arena *a;
    bfit_device *d = open_dev(1, 0, &a);
    float *x = dalloc(a, 256), *y = dalloc(a, 256), v[4] = {1, 2, 3, 4}, back[4] = {0};
    (void)st;
    assert_int_equal(bfit_device_upload(d, x, v, sizeof v), BFIT_OK);
    assert_int_equal(bfit_device_fill(d, y, 0, 256), BFIT_OK);
    assert_refused(bfit_device_upload(d, y, x, sizeof v), "upload: the host buffer is device memory");
    assert_refused(bfit_device_download(d, x, y, sizeof v), "download: the host buffer is device memory");
    /* nothing moved */
    assert_int_equal(bfit_device_download(d, back, y, sizeof back), BFIT_OK);
    for (int i = 0; i < 4; i++)
        assert_true(back[i] == 0);
    assert_int_equal(bfit_device_download(d, back, x, sizeof back), BFIT_OK);
    assert_memory_equal(back, v, sizeof v);
    /* device to device is bfit_device_copy's */
    assert_int_equal(bfit_device_copy(d, y, x, sizeof v), BFIT_OK);
    assert_int_equal(bfit_device_download(d, back, y, sizeof back), BFIT_OK);
    assert_memory_equal(back, v, sizeof v);
    close_dev(d, a);
}

/* BFIT_DEVICE_CHECK decides when the configuration says -1. */
static void test_check_from_env(void **st)
{
    const char *old = getenv("BFIT_DEVICE_CHECK");
    char *saved = old ? strdup(old) : NULL;
    static const char *const vals[] = {"1", "0", ""};
    (void)st;
    for (int i = 0; i < 3; i++) {
        bfit_arena *a;
        bfit_device *d;
        bfit_device_info info;
        setenv("BFIT_DEVICE_CHECK", vals[i], 1);
        d = open_dev(-1, 0, &a);
        bfit_device_info_get(d, &info);
        assert_int_equal(info.check, i == 0);
        close_dev(d, a);
    }
    if (saved)
        setenv("BFIT_DEVICE_CHECK", saved, 1);
    else
        unsetenv("BFIT_DEVICE_CHECK");
    free(saved);
}

/* ---- (d) the caller's OpenMP setting survives device calls --------------- */

/* SCALE then NORMS over n floats x[i] = i % 7 - 3 on d: each result is
 * exact (small integers), and the caller's thread count must be `want`
 * after every call. */
static void threads_round(bfit_device *d, bfit_arena *ar, int64_t n, int want)
{
    bfit_op_desc sd = {.kind = BFIT_OP_SCALE, .dtype = BFIT_F32}, nd = {.kind = BFIT_OP_NORMS, .dtype = BFIT_F32};
    bfit_op_args a = {0};
    bfit_op *scale, *norms;
    float *h = malloc((size_t)n * sizeof(float)), *x = dalloc(ar, (size_t)n * sizeof(float));
    double *stats = dalloc(ar, 2 * sizeof(double)), res[2], ref = 0;

    for (int64_t i = 0; i < n; i++)
        h[i] = (float)(i % 7 - 3);
    sd.u.scale.n = nd.u.norms.n = n;
    assert_int_equal(bfit_op_new(d, &sd, &scale), BFIT_OK);
    assert_int_equal(omp_get_max_threads(), want);
    assert_int_equal(bfit_op_new(d, &nd, &norms), BFIT_OK);
    assert_int_equal(bfit_device_upload(d, x, h, (size_t)n * sizeof(float)), BFIT_OK);
    assert_int_equal(omp_get_max_threads(), want);
    a.dst = x, a.alpha = 2.0f;
    assert_int_equal(bfit_op_run(scale, &a), BFIT_OK);
    assert_int_equal(omp_get_max_threads(), want);
    a = (bfit_op_args){0};
    a.src = x, a.stats = stats;
    assert_int_equal(bfit_op_run(norms, &a), BFIT_OK);
    assert_int_equal(bfit_device_download(d, res, stats, sizeof(double)), BFIT_OK);
    assert_int_equal(bfit_device_download(d, h, x, (size_t)n * sizeof(float)), BFIT_OK);
    assert_int_equal(omp_get_max_threads(), want);
    for (int64_t i = 0; i < n; i++) {
        assert_true(h[i] == 2.0f * (float)(i % 7 - 3));
        ref += (double)h[i] * h[i];
    }
    assert_true(res[0] == ref); /* integers well inside double's 53 bits */
    bfit_op_free(scale);
    bfit_op_free(norms);
    bfit_arena_release(ar, x);
    bfit_arena_release(ar, stats);
    free(h);
}

static void test_threads_restored(void **st)
{
    int before = omp_get_max_threads();
    bfit_arena *a;
    bfit_device *d;
    bfit_device_info info;
    float host[4] = {0};
    (void)st;
    omp_set_num_threads(3);
    /* threads = 1: set around each call, the caller's 3 restored */
    d = open_dev(1, 1, &a);
    bfit_device_info_get(d, &info);
    assert_int_equal(info.threads, 1);
    assert_int_equal(omp_get_max_threads(), 3);
    threads_round(d, a, 7, 3);
    threads_round(d, a, 200003, 3); /* large enough for the threaded loops */
    /* a refused call restores it too */
    assert_refused(bfit_device_fill(d, host, 0, sizeof host), "destination is not device memory");
    assert_int_equal(omp_get_max_threads(), 3);
    close_dev(d, a);
    /* threads = 0: OpenMP's own setting, untouched */
    d = open_dev(0, 0, &a);
    bfit_device_info_get(d, &info);
    assert_int_equal(info.threads, 3);
    threads_round(d, a, 200003, 3);
    close_dev(d, a);
    omp_set_num_threads(before);
}

/* ---- (e) the arena over a block source ------------------------------------ */

#define FAKE_GRAN 4096
#define FAKE_MAX 32

/* A block source handing out aligned_alloc memory filled with a pattern;
 * `shadow` is what the source itself last wrote (alloc's pattern, fill's
 * bytes), so free can tell whether anyone else wrote the block. */
typedef struct fake_src {
    int nalloc, nfree, nfill, refuse, corrupt, bad_size;
    int nblk;
    struct {
        unsigned char *p, *shadow;
        size_t n;
    } blk[FAKE_MAX];
} fake_src;

static int fake_alloc(void *ud, size_t n, void **out)
{
    fake_src *f = ud;
    *out = NULL;
    if (f->refuse || f->nblk == FAKE_MAX)
        return BFIT_ENOMEM;
    if (n == 0 || n % FAKE_GRAN)
        f->bad_size++;
    f->blk[f->nblk].p = aligned_alloc(FAKE_GRAN, n);
    f->blk[f->nblk].shadow = malloc(n);
    f->blk[f->nblk].n = n;
    for (size_t i = 0; i < n; i++)
        f->blk[f->nblk].p[i] = (unsigned char)(i * 7 + 3 + (size_t)f->nalloc);
    memcpy(f->blk[f->nblk].shadow, f->blk[f->nblk].p, n);
    *out = f->blk[f->nblk++].p;
    f->nalloc++;
    return BFIT_OK;
}

static int fake_find(const fake_src *f, const void *p)
{
    for (int b = 0; b < f->nblk; b++)
        if ((const unsigned char *)p >= f->blk[b].p && (const unsigned char *)p < f->blk[b].p + f->blk[b].n)
            return b;
    return -1;
}

static void fake_free(void *ud, void *p, size_t n)
{
    fake_src *f = ud;
    int b = fake_find(f, p);
    if (b < 0 || f->blk[b].p != p || f->blk[b].n != n) {
        f->bad_size++;
        return;
    }
    if (memcmp(f->blk[b].p, f->blk[b].shadow, n) != 0)
        f->corrupt++;
    free(f->blk[b].p);
    free(f->blk[b].shadow);
    f->blk[b] = f->blk[--f->nblk];
    f->nfree++;
}

/* The source's own write (the poisoning of test builds goes through it). */
static int fake_fill(void *ud, void *p, int byte, size_t n)
{
    fake_src *f = ud;
    int b = fake_find(f, p);
    if (b < 0 || (unsigned char *)p + n > f->blk[b].p + f->blk[b].n) {
        f->bad_size++;
        return BFIT_EINVAL;
    }
    memset(p, byte, n);
    memset(f->blk[b].shadow + ((unsigned char *)p - f->blk[b].p), byte, n);
    f->nfill++;
    return BFIT_OK;
}

static bfit_arena *fake_arena(fake_src *f, uint64_t capacity)
{
    bfit_block_source s = {fake_alloc, fake_free, fake_fill, f, FAKE_GRAN};
    bfit_arena *a;
    memset(f, 0, sizeof *f);
    a = bfit_arena_new(capacity, &s);
    assert_non_null(a);
    return a;
}

static void *aalloc(bfit_arena *a, size_t n)
{
    void *p = NULL;
    if (bfit_arena_alloc(a, n, BFIT_MEM_ACTIVATIONS, &p) != BFIT_OK)
        fail_msg("arena: %s", bfit_errmsg());
    return p;
}

static void assert_reserved(const bfit_arena *a, uint64_t reserved, uint64_t current)
{
    bfit_arena_stats s;
    bfit_arena_stats_get(a, &s);
    assert_int_equal(s.reserved, reserved);
    assert_int_equal(s.current, current);
}

/* The source was called as expected and its memory untouched by the arena:
 * under BFIT_ARENA_POISON the arena has the source fill new allocations
 * (with the source's own fill, which the shadow records), else never. */
static void assert_source_clean(const fake_src *f, int nalloc)
{
    assert_int_equal(f->corrupt, 0);
    assert_int_equal(f->bad_size, 0);
#ifdef BFIT_ARENA_POISON
    assert_int_equal(f->nfill, nalloc);
#else
    (void)nalloc;
    assert_int_equal(f->nfill, 0);
#endif
}

static void test_arena_blocks_shared_and_returned(void **st)
{
    fake_src f;
    bfit_arena *a = fake_arena(&f, 1 << 20);
    char *p1, *p2, *p3, *big;
    (void)st;
    /* small allocations share one block, first fit in address order */
    p1 = aalloc(a, 100);
    p2 = aalloc(a, 200);
    assert_int_equal(f.nalloc, 1);
    assert_ptr_equal(p2, p1 + 128);
    assert_reserved(a, FAKE_GRAN, 128 + 256);
    /* larger than the granularity: a block of its multiple */
    big = aalloc(a, 5000);
    assert_int_equal(f.nalloc, 2);
    assert_reserved(a, FAKE_GRAN + 2 * FAKE_GRAN, 128 + 256 + 5056);
    /* a freed gap is reused by what fits in it, first fit: exactly */
    bfit_arena_release(a, p1);
    assert_int_equal(f.nfree, 0); /* p2 still holds the block */
    p3 = aalloc(a, 128);
    assert_ptr_equal(p3, p1);
    bfit_arena_release(a, p3);
    p3 = aalloc(a, 64); /* and with room to spare */
    assert_ptr_equal(p3, p1);
    p1 = aalloc(a, 128); /* 64 bytes left in the gap: goes after p2 */
    assert_ptr_equal(p1, p2 + 256);
    assert_int_equal(f.nalloc, 2);
    /* the block goes back with its last allocation */
    bfit_arena_release(a, p2);
    bfit_arena_release(a, p3);
    assert_int_equal(f.nfree, 0);
    bfit_arena_release(a, p1);
    assert_int_equal(f.nfree, 1);
    assert_reserved(a, 2 * FAKE_GRAN, 5056);
    bfit_arena_release(a, big);
    assert_int_equal(f.nfree, 2);
    assert_reserved(a, 0, 0);
    assert_source_clean(&f, 6);
    bfit_arena_free(a);
}

/* Dropping a block that is not the last moves the last into its place: the
 * moved block's allocations must follow it, or their releases would count
 * against whatever block takes the old index next (w here). */
static void test_arena_block_table_moves(void **st)
{
    fake_src f;
    bfit_arena *a = fake_arena(&f, 1 << 20);
    char *xa, *xb, *ya, *za, *zb, *zc, *w;
    bfit_arena_stats s;
    (void)st;
    xa = aalloc(a, 2048), xb = aalloc(a, 2048); /* block 0, full */
    ya = aalloc(a, 4096);                       /* block 1 */
    za = aalloc(a, 1024), zb = aalloc(a, 1024); /* block 2 */
    assert_int_equal(f.nalloc, 3);
    bfit_arena_release(a, ya); /* z's block takes index 1 */
    assert_int_equal(f.nfree, 1);
    assert_reserved(a, 2 * FAKE_GRAN, 6144);
    w = aalloc(a, 2 * FAKE_GRAN); /* a new block at index 2 */
    bfit_arena_release(a, za);
    assert_int_equal(f.nfree, 1); /* zb still there */
    zc = aalloc(a, 2048);         /* first fit in z's block: after zb */
    assert_ptr_equal(zc, zb + 1024);
    assert_int_equal(f.nalloc, 4);
    bfit_arena_release(a, zb);
    bfit_arena_release(a, zc);
    assert_int_equal(f.nfree, 2);
    assert_reserved(a, 3 * FAKE_GRAN, 4096 + 2 * FAKE_GRAN);
    bfit_arena_release(a, w);
    assert_int_equal(f.nfree, 3);
    assert_reserved(a, FAKE_GRAN, 4096);
    bfit_arena_release(a, xa);
    bfit_arena_release(a, xb);
    assert_int_equal(f.nfree, 4);
    bfit_arena_stats_get(a, &s);
    assert_int_equal(s.reserved, 0);
    assert_int_equal(s.reserved_peak, 4 * FAKE_GRAN); /* x, z and w */
    assert_int_equal(s.peak, 4096 + 1024 + 2048 + 2 * FAKE_GRAN); /* x, zb, zc and w */
    assert_source_clean(&f, 7);
    bfit_arena_free(a);
}

static void test_arena_source_faults_and_capacity(void **st)
{
    fake_src f;
    bfit_arena *a = fake_arena(&f, 3 * FAKE_GRAN);
    bfit_arena_stats before, after;
    void *p, *q = (void *)1, *r;
    (void)st;
    p = aalloc(a, 100);
    /* injected failure: nothing asked of the source, nothing changed */
    bfit_arena_stats_get(a, &before);
    bfit_arena_fail_nth(a, 1);
    assert_int_equal(bfit_arena_alloc(a, 100, BFIT_MEM_OTHER, &q), BFIT_ENOMEM);
    assert_null(q);
    assert_non_null(strstr(bfit_errmsg(), "injected"));
    bfit_arena_stats_get(a, &after);
    assert_int_equal(f.nalloc, 1);
    assert_int_equal(after.nfail, before.nfail + 1);
    assert_int_equal(after.current, before.current);
    assert_int_equal(after.reserved, before.reserved);
    /* the source refuses a new block: an error naming it, nothing held */
    f.refuse = 1;
    assert_int_equal(bfit_arena_alloc(a, 2 * FAKE_GRAN, BFIT_MEM_OTHER, &q), BFIT_ENOMEM);
    assert_non_null(strstr(bfit_errmsg(), "refused"));
    r = aalloc(a, 64); /* fits in the held block: the source is not asked */
    bfit_arena_release(a, r);
    f.refuse = 0;
    bfit_arena_stats_get(a, &after);
    assert_int_equal(after.nfail, before.nfail + 2);
    assert_int_equal(after.current, before.current);
    assert_int_equal(after.reserved, FAKE_GRAN);
    /* capacity counts what is handed out (current), not the blocks */
    q = aalloc(a, 2 * FAKE_GRAN);
    assert_int_equal(bfit_arena_available(a), FAKE_GRAN - 128);
    assert_int_equal(bfit_arena_alloc(a, FAKE_GRAN, BFIT_MEM_OTHER, &r), BFIT_ENOMEM);
    assert_non_null(strstr(bfit_errmsg(), "out of memory"));
    r = aalloc(a, FAKE_GRAN - 128); /* exactly what is left, in the first block's rest */
    assert_int_equal(bfit_arena_available(a), 0);
    assert_reserved(a, 3 * FAKE_GRAN, 3 * FAKE_GRAN);
    assert_int_equal(f.nalloc, 2);
    bfit_arena_release(a, p);
    bfit_arena_release(a, q);
    bfit_arena_release(a, r);
    assert_reserved(a, 0, 0);
    assert_int_equal(f.nfree, f.nalloc);
    assert_source_clean(&f, 4);
    bfit_arena_free(a);
}

/* Blocks still held when the arena is freed go back to the source. */
static void test_arena_free_returns_blocks(void **st)
{
    fake_src f;
    bfit_arena *a = fake_arena(&f, 1 << 20);
    (void)st;
    aalloc(a, 10);
    aalloc(a, 3 * FAKE_GRAN);
    aalloc(a, 100);
    assert_int_equal(f.nalloc, 2);
    bfit_arena_free(a);
    assert_int_equal(f.nfree, 2);
    assert_int_equal(f.nblk, 0);
    assert_source_clean(&f, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_read_crashes),
        cmocka_unit_test(test_host_read_works_unchecked),
        cmocka_unit_test(test_host_pointer_refused),
        cmocka_unit_test(test_span_checked_then_open),
        cmocka_unit_test(test_transfer_host_side_refused),
        cmocka_unit_test(test_check_from_env),
        cmocka_unit_test(test_threads_restored),
        cmocka_unit_test(test_arena_blocks_shared_and_returned),
        cmocka_unit_test(test_arena_block_table_moves),
        cmocka_unit_test(test_arena_source_faults_and_capacity),
        cmocka_unit_test(test_arena_free_returns_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
