/* cpu_mem.c - the CPU device's memory: blocks for the arena, transfers, and
 * the checking mode that keeps device memory opaque to the host.
 *
 * On the CPU, device memory is host RAM, so a host read of a device buffer
 * works by accident and would only crash on a GPU. The checking mode makes
 * that crash here: blocks are mapped pages kept PROT_NONE, and a device
 * call opens just the blocks its arguments point into (checking that each
 * pointer is device memory and each host pointer is not) and closes them
 * when it returns. Entering a call also sets the thread count the caller
 * asked for and restores the previous one on leaving, so the library
 * changes no process-wide OpenMP setting.
 */
#include "base/aslimit.h"
#include "base/err.h"
#include "device/cpu.h"

#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- the checking mode's block table ------------------------------------- */

/* Index of the block holding p, or -1. */
static int block_of(const cpu_device *d, const void *p)
{
    int lo = 0, hi = d->nblocks - 1;
    const char *c = p;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (c < d->blocks[mid].p)
            hi = mid - 1;
        else if (c >= d->blocks[mid].p + d->blocks[mid].n)
            lo = mid + 1;
        else
            return mid;
    }
    return -1;
}

static int protect(const cpu_block *b, int prot)
{
    if (mprotect(b->p, b->n, prot) != 0)
        return bfit_fail(BFIT_EDEVICE, "cpu (checking mode): mprotect failed");
    return BFIT_OK;
}

int bfit_cpu_enter(cpu_device *d, const void *const *ptrs, const char *const *names, int n, const char *what)
{
    if (d->depth++ == 0) {
        if (d->threads > 0) {
            d->saved_threads = omp_get_max_threads();
            omp_set_num_threads(d->threads);
        }
        d->nopen = 0;
    }
    if (!d->check)
        return BFIT_OK;
    for (int i = 0; i < n; i++) {
        int b, seen = 0;
        if (!ptrs[i])
            continue;
        b = block_of(d, ptrs[i]);
        if (b < 0) {
            bfit_cpu_leave(d);
            return bfit_fail(BFIT_EINVAL, "cpu (checking mode): %s: %s is not device memory (a host pointer "
                                          "passed where the device's is needed)", what, names[i]);
        }
        if (d->span_all)
            continue; /* a span opened every block (bfit_cpu_span_begin) */
        for (int k = 0; k < d->nopen; k++)
            seen |= d->open[k] == b;
        if (seen)
            continue;
        if (d->nopen == CPU_MAXOPEN || protect(&d->blocks[b], PROT_READ | PROT_WRITE) != BFIT_OK) {
            bfit_cpu_leave(d);
            return bfit_fail(BFIT_EDEVICE, "cpu (checking mode): %s touches too many blocks", what);
        }
        d->open[d->nopen++] = b;
    }
    return BFIT_OK;
}

void bfit_cpu_leave(cpu_device *d)
{
    if (--d->depth > 0)
        return;
    for (int k = 0; k < d->nopen; k++)
        protect(&d->blocks[d->open[k]], PROT_NONE);
    d->nopen = 0;
    if (d->threads > 0)
        omp_set_num_threads(d->saved_threads);
}

/* ---- spans ----------------------------------------------------------------- */

/* A span's calls are checked one by one this many times per key: its first
 * run, and one more for what a first run may set up and the next skip. A
 * host access in a span comes from code every run of it runs (the key
 * changes with what its branches depend on: exec.c); after these, the span
 * runs with every block open, as one call. cli_onnx under the sanitizers
 * spent half its time toggling protection, 38 us a toggle here. */
#define SPAN_CHECKED 2

static void protect_all(cpu_device *d, int prot)
{
    for (int b = 0; b < d->nblocks; b++)
        protect(&d->blocks[b], prot);
}

int bfit_cpu_span_begin(bfit_device *base, uint64_t key)
{
    cpu_device *d = (cpu_device *)base;
    int k, rc;

    if (d->check != 1 || d->depth > 0 || d->span_all)
        return BFIT_OK; /* not checking, checking every call (2), or inside a call or a span */
    for (k = 0; k < CPU_SPANS && !(d->span_seen[k] > 0 && d->span_key[k] == key); k++)
        ;
    if (k == CPU_SPANS) {
        k = d->span_next;
        d->span_next = (k + 1) % CPU_SPANS;
        d->span_key[k] = key;
        d->span_seen[k] = 0;
    }
    if (++d->span_seen[k] <= SPAN_CHECKED)
        return BFIT_OK;
    if ((rc = bfit_cpu_enter(d, NULL, NULL, 0, "span")) != BFIT_OK)
        return rc;
    for (int b = 0; b < d->nblocks; b++)
        if (protect(&d->blocks[b], PROT_READ | PROT_WRITE) != BFIT_OK) {
            protect_all(d, PROT_NONE);
            bfit_cpu_leave(d);
            return BFIT_EDEVICE;
        }
    d->span_all = 1;
    return BFIT_OK;
}

void bfit_cpu_span_end(bfit_device *base)
{
    cpu_device *d = (cpu_device *)base;

    if (!d->span_all || d->depth != 1)
        return; /* the span was checked call by call (or this end is not its) */
    d->span_all = 0;
    protect_all(d, PROT_NONE);
    bfit_cpu_leave(d);
}

/* A host pointer must not be device memory (an upload from a device buffer
 * is a confusion of the two kinds the CPU would forgive). */
static int host_side(cpu_device *d, const void *p, const char *what)
{
    if (d->check && block_of(d, p) >= 0)
        return bfit_fail(BFIT_EINVAL, "cpu (checking mode): %s: the host buffer is device memory", what);
    return BFIT_OK;
}

/* ---- blocks for the arena ----------------------------------------------- */

/* Checking-mode blocks are whole, aligned 2 MiB pages (transparent huge
 * pages where the kernel gives them). Reopening a block after mprotect costs
 * a fault per page on its first touch, and on virtual machines that shadow
 * the guest's page tables each fault is an exit: 10 us a 4 KiB page on the
 * machine this was measured on, a 2 MiB toggle-and-touch cycle 9.8 ms in
 * small pages and 0.27 ms in one huge page. The CLI tests spent half their
 * time under the sanitizers in those faults. */
#define CHECK_HUGE ((size_t)2 << 20)

static void *map_huge(size_t len)
{
    char *raw = mmap(NULL, len + CHECK_HUGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0), *p;
    size_t head;

    if (raw == MAP_FAILED)
        return NULL;
    p = (char *)(((uintptr_t)raw + CHECK_HUGE - 1) & ~(uintptr_t)(CHECK_HUGE - 1));
    head = (size_t)(p - raw);
    if (head)
        munmap(raw, head);
    munmap(p + len, CHECK_HUGE - head); /* head < CHECK_HUGE: a tail is always left */
    madvise(p, len, MADV_HUGEPAGE); /* a hint: small pages where refused */
    return p;
}

static int check_block_alloc(cpu_device *d, size_t n, void **out)
{
    size_t len = (n + CHECK_HUGE - 1) / CHECK_HUGE * CHECK_HUGE;
    void *p;
    int at;

    if (d->nblocks == d->cap_blocks) {
        int cap = d->cap_blocks ? 2 * d->cap_blocks : 32;
        cpu_block *b = realloc(d->blocks, (size_t)cap * sizeof *b);
        if (!b)
            return BFIT_ENOMEM;
        d->blocks = b;
        d->cap_blocks = cap;
    }
    if (!(p = map_huge(len)))
        return BFIT_ENOMEM;
    if (d->span_all && mprotect(p, len, PROT_READ | PROT_WRITE) != 0) { /* a span has every block open */
        munmap(p, len);
        return BFIT_ENOMEM;
    }
    for (at = 0; at < d->nblocks && d->blocks[at].p < (char *)p; at++)
        ;
    memmove(&d->blocks[at + 1], &d->blocks[at], (size_t)(d->nblocks - at) * sizeof *d->blocks);
    d->blocks[at] = (cpu_block){p, len};
    d->nblocks++;
    *out = p;
    return BFIT_OK;
}

static void check_block_free(cpu_device *d, void *p)
{
    int b = block_of(d, p);
    if (b < 0)
        return;
    munmap(d->blocks[b].p, d->blocks[b].n);
    memmove(&d->blocks[b], &d->blocks[b + 1], (size_t)(d->nblocks - b - 1) * sizeof *d->blocks);
    d->nblocks--;
}

static int src_alloc(void *ud, size_t n, void **out)
{
    cpu_device *d = ud;
    *out = NULL;
    if (d->check)
        return check_block_alloc(d, n, out);
    *out = d->host.alloc ? d->host.alloc(d->host.ud, n, BFIT_ALIGN) : aligned_alloc(BFIT_ALIGN, n);
    return *out ? BFIT_OK : BFIT_ENOMEM;
}

static void src_free(void *ud, void *p, size_t n)
{
    cpu_device *d = ud;
    (void)n;
    if (d->check)
        check_block_free(d, p);
    else if (d->host.free)
        d->host.free(d->host.ud, p);
    else
        free(p);
}

static int src_fill(void *ud, void *p, int byte, size_t n) { return bfit_device_fill((bfit_device *)ud, p, byte, n); }

void bfit_cpu_blocks_init(cpu_device *d)
{
    d->base.blocks.alloc = src_alloc;
    d->base.blocks.free = src_free;
    d->base.blocks.fill = src_fill;
    d->base.blocks.ud = d;
    d->base.blocks.granularity = BFIT_ALIGN;
}

void bfit_cpu_blocks_fini(cpu_device *d)
{
    while (d->nblocks > 0)
        check_block_free(d, d->blocks[0].p);
    free(d->blocks);
    d->blocks = NULL;
}

/* ---- transfers ------------------------------------------------------------ */

/* Large fills and copies (zeroing the gradients every step, flatten) go
 * faster on every core than on one; below this, waking the team costs more. */
#define PAR_BYTES (1u << 20)

/* [t*chunk, (t+1)*chunk) of n bytes for thread t, in whole cache lines */
static size_t share(size_t n, size_t *len)
{
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    size_t chunk = (n / (size_t)nt + 63) & ~(size_t)63, b = (size_t)t * chunk;
    *len = b >= n ? 0 : (n - b < chunk ? n - b : chunk);
    return b;
}

static void move_bytes(void *dst, const void *src, size_t n)
{
    /* overlapping ranges keep memmove's one-pass semantics */
    if (n < PAR_BYTES || ((char *)dst < (const char *)src + n && (const char *)src < (char *)dst + n)) {
        memmove(dst, src, n);
        return;
    }
#pragma omp parallel
    {
        size_t len, b = share(n, &len);
        if (len)
            memcpy((char *)dst + b, (const char *)src + b, len);
    }
}

int bfit_cpu_copy(bfit_device *base, void *dst, const void *src, size_t n)
{
    cpu_device *d = (cpu_device *)base;
    const void *p[] = {dst, src};
    const char *nm[] = {"destination", "source"};
    int rc = bfit_cpu_enter(d, p, nm, 2, "device copy");
    if (rc != BFIT_OK)
        return rc;
    move_bytes(dst, src, n);
    bfit_cpu_leave(d);
    return BFIT_OK;
}

int bfit_cpu_upload(bfit_device *base, void *dst, const void *host, size_t n)
{
    cpu_device *d = (cpu_device *)base;
    const void *p[] = {dst};
    const char *nm[] = {"destination"};
    int rc = host_side(d, host, "upload");
    if (rc == BFIT_OK)
        rc = bfit_cpu_enter(d, p, nm, 1, "upload");
    if (rc != BFIT_OK)
        return rc;
    move_bytes(dst, host, n);
    bfit_cpu_leave(d);
    return BFIT_OK;
}

int bfit_cpu_download(bfit_device *base, void *host, const void *src, size_t n)
{
    cpu_device *d = (cpu_device *)base;
    const void *p[] = {src};
    const char *nm[] = {"source"};
    int rc = host_side(d, host, "download");
    if (rc == BFIT_OK)
        rc = bfit_cpu_enter(d, p, nm, 1, "download");
    if (rc != BFIT_OK)
        return rc;
    move_bytes(host, src, n);
    bfit_cpu_leave(d);
    return BFIT_OK;
}

int bfit_cpu_fill(bfit_device *base, void *dst, int byte, size_t n)
{
    cpu_device *d = (cpu_device *)base;
    const void *p[] = {dst};
    const char *nm[] = {"destination"};
    int rc = bfit_cpu_enter(d, p, nm, 1, "fill");
    if (rc != BFIT_OK)
        return rc;
    if (n < PAR_BYTES) {
        memset(dst, byte, n);
    } else {
#pragma omp parallel
        {
            size_t len, b = share(n, &len);
            if (len)
                memset((char *)dst + b, byte, len);
        }
    }
    bfit_cpu_leave(d);
    return BFIT_OK;
}

int bfit_cpu_sync(bfit_device *base)
{
    (void)base; /* every CPU op has finished when it returns */
    return BFIT_OK;
}

/* A /proc/meminfo field in bytes (0 if absent), read with open/read into
 * the stack: the monitor asks between training steps, which allocate
 * nothing on the heap (stdio's fopen would). */
static uint64_t meminfo(const char *key)
{
    char buf[8192], *p;
    int fd = open("/proc/meminfo", O_RDONLY | O_CLOEXEC);
    ssize_t n = 0, got;
    unsigned long long kb = 0;
    size_t klen = strlen(key);

    if (fd < 0)
        return 0;
    while (n < (ssize_t)sizeof buf - 1 && (got = read(fd, buf + n, sizeof buf - 1 - (size_t)n)) > 0)
        n += got;
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    for (p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, key, klen) && p[klen] == ':' && sscanf(p + klen + 1, "%llu", &kb) == 1)
            break;
    return (uint64_t)kb * 1024;
}

/* What is free is what RAM has available, and under an address-space
 * limit no more than the room it leaves less BFIT_AS_HEADROOM: the arena's
 * blocks count against the limit like any mapping, and oneDNN's kernels
 * need room beside them (the threads' stacks and arenas, mapped before, are
 * counted in the room). */
int bfit_cpu_mem_info(bfit_device *base, uint64_t *free_bytes, uint64_t *total_bytes)
{
    uint64_t limit, room;
    (void)base;
    *free_bytes = meminfo("MemAvailable");
    *total_bytes = meminfo("MemTotal");
    if (!*total_bytes)
        return bfit_fail(BFIT_EDEVICE, "cpu: cannot read /proc/meminfo");
    if (bfit_as_room(&limit, &room)) {
        room = room > BFIT_AS_HEADROOM ? room - BFIT_AS_HEADROOM : 0;
        *free_bytes = room < *free_bytes ? room : *free_bytes;
        *total_bytes = limit < *total_bytes ? limit : *total_bytes;
    }
    return BFIT_OK;
}

int bfit_cpu_kernel_room(const char *what)
{
    uint64_t limit, room, need = BFIT_AS_KERNEL_ROOM;
    char s1[32], s2[32], s3[32];

    if (!bfit_as_room(&limit, &room) || room >= need)
        return BFIT_OK;
    return bfit_fail(BFIT_ENOMEM, "out of host memory: the address-space limit (ulimit -v) of %s leaves %s, and "
                     "oneDNN needs about %s to make the kernel for %s: raise ulimit -v or lower the batch",
                     bfit_format_size(limit, s1, sizeof s1), bfit_format_size(room, s2, sizeof s2),
                     bfit_format_size(need, s3, sizeof s3), what);
}

/* OMP_STACKSIZE (libgomp reads GOMP_STACKSIZE too): a size in KiB, or
 * with B, K, M or G; 0 if not set or not read (the default then). */
static uint64_t omp_stack_env(void)
{
    const char *e = getenv("OMP_STACKSIZE") ? getenv("OMP_STACKSIZE") : getenv("GOMP_STACKSIZE");
    char *end;
    unsigned long long v;

    if (!e || !*e)
        return 0;
    v = strtoull(e, &end, 10);
    while (*end == ' ')
        end++;
    switch (*end) {
    case 'b': case 'B': return v;
    case 'm': case 'M': return (uint64_t)v << 20;
    case 'g': case 'G': return (uint64_t)v << 30;
    default: return (uint64_t)v << 10;
    }
}

/* The stack (and guard page) each thread libgomp makes maps. */
static uint64_t omp_thread_stack(void)
{
    uint64_t env = omp_stack_env();
    pthread_attr_t a;
    size_t size = (size_t)8 << 20;

    if (env)
        return env + 4096;
    if (pthread_getattr_default_np(&a) == 0) {
        pthread_attr_getstacksize(&a, &size);
        pthread_attr_destroy(&a);
    }
    return (uint64_t)size + 4096;
}

/* The largest team this thread's parallel regions have had: libgomp keeps
 * one per calling thread and makes only the threads it lacks. */
static _Thread_local int team_made = 1;

/* Under an address-space limit, each compute thread's malloc arena is made
 * now: glibc gives a thread its own (64 MiB of address space) at its first
 * heap call, which oneDNN's threads make inside the first step, beside a
 * room that was read without them (resnet50 under ulimit -v: the step's
 * address space grew by 76 MiB on 1 thread, 64 MiB more per thread). Made
 * here, they are mapped when the room is read, and counted in it. First the
 * room for the threads' stacks is checked: libgomp exits the process when
 * it cannot make a thread (Python's train, in a thread of its own, after a
 * plan under 600 MB with 8 threads: "libgomp: Thread creation failed"). */
int bfit_cpu_make_arenas(int threads)
{
    uint64_t limit, room, stack, need;
    char s1[32], s2[32], s3[32], s4[32];

    if (threads < 2 || !bfit_as_room(&limit, &room))
        return BFIT_OK;
    if (threads > team_made) {
        stack = omp_thread_stack();
        need = (uint64_t)(threads - team_made) * stack + BFIT_AS_KERNEL_ROOM;
        if (room < need)
            return bfit_fail(BFIT_ENOMEM, "out of host memory: the address-space limit (ulimit -v) of %s leaves %s: "
                             "the device's %d more threads (OpenMP makes a team for each calling thread) map %s of "
                             "stack each, and a kernel needs %s: raise ulimit -v or use fewer threads",
                             bfit_format_size(limit, s1, sizeof s1),
                             bfit_format_size(room, s2, sizeof s2), threads - team_made,
                             bfit_format_size(stack, s3, sizeof s3),
                             bfit_format_size(BFIT_AS_KERNEL_ROOM, s4, sizeof s4));
    }
#pragma omp parallel num_threads(threads)
    {
        void *volatile p = malloc(1); /* volatile: not elided with its free */
        free(p);
    }
    team_made = threads > team_made ? threads : team_made;
    return BFIT_OK;
}
