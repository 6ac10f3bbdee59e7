/* arena.c - capacity-limited, category-accounted device memory (CPU: host RAM).
 *
 * Like Lua's allocator and SQLite's malloc.c: the limit and the fault switch
 * live here, so every device byte in the library is counted and every
 * allocation can be made to fail in tests. Each block carries a small header
 * recording its accounted size and category so release needs no lookup.
 */
#include "base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The header sits in its own 64-byte slot before the block so the block
 * stays aligned; it is host bookkeeping, not counted against capacity. */
typedef struct block_hdr {
    uint64_t size;   /* accounted bytes (aligned) */
    uint32_t cat;
    uint32_t magic;
} block_hdr;

#define HDR_SLOT 64
#define BLOCK_MAGIC 0xBF17A11Cu

struct bfit_arena {
    bfit_host_alloc host;
    uint64_t capacity;
    uint64_t fail_countdown; /* 0: off; 1: next allocation fails */
    bfit_arena_stats st;
};

static void *default_alloc(void *ud, size_t size, size_t align)
{
    (void)ud;
    return aligned_alloc(align, (size + align - 1) / align * align);
}

static void default_free(void *ud, void *p)
{
    (void)ud;
    free(p);
}

bfit_arena *bfit_arena_new(uint64_t capacity, const bfit_host_alloc *host)
{
    bfit_arena *a = calloc(1, sizeof *a);
    if (!a) {
        bfit_fail(BFIT_ENOMEM, "arena: cannot allocate the arena itself");
        return NULL;
    }
    if (host) {
        a->host = *host;
    } else {
        a->host.alloc = default_alloc;
        a->host.free = default_free;
    }
    a->capacity = capacity;
    a->st.capacity = capacity;
    return a;
}

void bfit_arena_free(bfit_arena *a)
{
    free(a);
}

int bfit_arena_alloc(bfit_arena *a, size_t n, bfit_mem_cat cat, void **out)
{
    char *raw;
    block_hdr *h;
    uint64_t sz;

    *out = NULL;
    if ((unsigned)cat >= BFIT_MEM_NCAT)
        return bfit_fail(BFIT_EINVAL, "arena: bad category %d", (int)cat);
    if (n > SIZE_MAX - 2 * BFIT_ALIGN)
        return bfit_fail(BFIT_ENOMEM, "arena: request of %zu bytes is too large", n);
    sz = BFIT_ALIGN_UP(n ? n : 1);
    if (a->fail_countdown && --a->fail_countdown == 0) {
        a->st.nfail++;
        return bfit_fail(BFIT_ENOMEM, "arena: injected failure allocating %llu bytes for %s",
                         (unsigned long long)sz, bfit_mem_cat_name(cat));
    }
    if (a->st.current > a->capacity || sz > a->capacity - a->st.current) {
        char need[32], avail[32];
        a->st.nfail++;
        return bfit_fail(BFIT_ENOMEM, "arena: out of memory: %s for %s, %s available",
                         bfit_format_size(sz, need, sizeof need), bfit_mem_cat_name(cat),
                         bfit_format_size(bfit_arena_available(a), avail, sizeof avail));
    }
    raw = a->host.alloc(a->host.ud, (size_t)sz + HDR_SLOT, BFIT_ALIGN);
    if (!raw) {
        a->st.nfail++;
        return bfit_fail(BFIT_ENOMEM, "arena: host allocation of %llu bytes failed",
                         (unsigned long long)sz);
    }
    h = (block_hdr *)raw;
    h->size = sz;
    h->cat = (uint32_t)cat;
    h->magic = BLOCK_MAGIC;
    a->st.current += sz;
    a->st.cur[cat] += sz;
    if (a->st.current > a->st.peak)
        a->st.peak = a->st.current;
    if (a->st.cur[cat] > a->st.peak_cat[cat])
        a->st.peak_cat[cat] = a->st.cur[cat];
    a->st.nalloc++;
    *out = raw + HDR_SLOT;
#ifdef BFIT_ARENA_POISON
    /* test builds: every byte starts as a NaN pattern, so reading memory
     * before writing it shows up as NaN instead of passing by luck */
    memset(*out, 0xFF, (size_t)sz);
#endif
    return BFIT_OK;
}

void bfit_arena_release(bfit_arena *a, void *p)
{
    block_hdr *h;

    if (!p)
        return;
    h = (block_hdr *)((char *)p - HDR_SLOT);
    if (h->magic != BLOCK_MAGIC) /* a foreign pointer: refuse rather than corrupt */
        return;
    h->magic = 0;
    a->st.current -= h->size;
    a->st.cur[h->cat] -= h->size;
    a->st.nfree++;
    a->host.free(a->host.ud, h);
}

void bfit_arena_set_capacity(bfit_arena *a, uint64_t capacity)
{
    a->capacity = capacity;
    a->st.capacity = capacity;
}

uint64_t bfit_arena_capacity(const bfit_arena *a) { return a->capacity; }

uint64_t bfit_arena_available(const bfit_arena *a)
{
    return a->st.current >= a->capacity ? 0 : a->capacity - a->st.current;
}

void bfit_arena_stats_get(const bfit_arena *a, bfit_arena_stats *s) { *s = a->st; }

void bfit_arena_reset_peak(bfit_arena *a)
{
    a->st.peak = a->st.current;
    memcpy(a->st.peak_cat, a->st.cur, sizeof a->st.cur);
}

void bfit_arena_fail_nth(bfit_arena *a, uint64_t n) { a->fail_countdown = n; }

const char *bfit_mem_cat_name(bfit_mem_cat c)
{
    static const char *names[BFIT_MEM_NCAT] = {
        "params", "grads", "optimizer", "activations", "act_grads", "workspace", "input", "other"};
    return (unsigned)c < BFIT_MEM_NCAT ? names[c] : "?";
}

uint64_t bfit_host_available_memory(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;

    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb * 1024;
}
