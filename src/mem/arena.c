/* arena.c - capacity-limited, category-accounted device memory.
 *
 * Like Lua's allocator and SQLite's malloc.c: the limit and the fault switch
 * live here, so every device byte in the library is counted and every
 * allocation can be made to fail in tests. The arena carves blocks that its
 * block source (a device) gives it and never touches them: its bookkeeping
 * (blocks, live allocations, categories, peaks) stays on the host, so
 * cudaMalloc'd memory is carved the same way as host RAM.
 *
 * Blocks come in multiples of the source's granularity (64 bytes on the CPU,
 * so each allocation is a block of its own; 2 MiB on a GPU, where small
 * allocations share). First fit within the blocks held, else a new block;
 * a block whose last allocation is released goes back to the source, so the
 * device holds little more than the arena has handed out.
 */
#include "base/err.h"
#include "mem/arena.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct block {
    char *base;
    uint64_t size;
    uint64_t used;   /* accounted bytes of live allocations in it */
} block;

typedef struct live {
    char *p;
    uint64_t size;   /* accounted (aligned) */
    uint64_t size2;  /* of it, the bytes counted to cat2 (a shared allocation), else 0 */
    uint32_t cat, cat2;
    uint32_t blk;    /* index into blocks, kept up to date when blocks move */
} live;

struct bfit_arena {
    bfit_block_source src;
    uint64_t capacity;
    uint64_t fail_countdown; /* 0: off; 1: next allocation fails */
    bfit_arena_stats st;
    block *blocks;
    int nblocks, cap_blocks;
    live *lv;                /* sorted by address */
    int nlive, cap_live;
};

static int host_block_alloc(void *ud, size_t n, void **out)
{
    (void)ud;
    *out = aligned_alloc(BFIT_ALIGN, n);
    return *out ? BFIT_OK : BFIT_ENOMEM;
}

static void host_block_free(void *ud, void *p, size_t n)
{
    (void)ud;
    (void)n;
    free(p);
}

static int host_block_fill(void *ud, void *p, int byte, size_t n)
{
    (void)ud;
    memset(p, byte, n);
    return BFIT_OK;
}

bfit_arena *bfit_arena_new(uint64_t capacity, const bfit_block_source *src)
{
    bfit_arena *a = calloc(1, sizeof *a);
    if (!a) {
        bfit_fail(BFIT_ENOMEM, "arena: cannot allocate the arena itself");
        return NULL;
    }
    if (src) {
        a->src = *src;
    } else {
        a->src.alloc = host_block_alloc;
        a->src.free = host_block_free;
        a->src.fill = host_block_fill;
    }
    if (a->src.granularity < BFIT_ALIGN)
        a->src.granularity = BFIT_ALIGN;
    a->capacity = capacity;
    a->st.capacity = capacity;
    return a;
}

void bfit_arena_free(bfit_arena *a)
{
    if (!a)
        return;
    /* whatever is still held goes back: an owner that forgot is a leak the
     * counters show, not one the device keeps */
    for (int i = 0; i < a->nblocks; i++)
        a->src.free(a->src.ud, a->blocks[i].base, (size_t)a->blocks[i].size);
    free(a->blocks);
    free(a->lv);
    free(a);
}

/* Index of the first live allocation at an address >= p. */
static int live_lower(const bfit_arena *a, const char *p)
{
    int lo = 0, hi = a->nlive;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (a->lv[mid].p < p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The lowest offset in block b with sz free bytes, or UINT64_MAX. */
static uint64_t find_gap(const bfit_arena *a, int b, uint64_t sz)
{
    const block *k = &a->blocks[b];
    uint64_t at = 0;
    if (k->size - k->used < sz)
        return UINT64_MAX;
    for (int i = live_lower(a, k->base); i < a->nlive && a->lv[i].p < k->base + k->size; i++) {
        uint64_t off = (uint64_t)(a->lv[i].p - k->base);
        if (off - at >= sz)
            return at;
        at = off + a->lv[i].size;
    }
    return k->size - at >= sz ? at : UINT64_MAX;
}

/* Room for one more block and one more live record, so that what follows
 * cannot fail half way. */
static int grow_tables(bfit_arena *a)
{
    if (a->nblocks == a->cap_blocks) {
        int n = a->cap_blocks ? 2 * a->cap_blocks : 16;
        block *p = realloc(a->blocks, (size_t)n * sizeof *p);
        if (!p)
            return BFIT_ENOMEM;
        a->blocks = p;
        a->cap_blocks = n;
    }
    if (a->nlive == a->cap_live) {
        int n = a->cap_live ? 2 * a->cap_live : 32;
        live *p = realloc(a->lv, (size_t)n * sizeof *p);
        if (!p)
            return BFIT_ENOMEM;
        a->lv = p;
        a->cap_live = n;
    }
    return BFIT_OK;
}

/* Place sz bytes: first fit in a held block, else a new block. */
static int place(bfit_arena *a, uint64_t sz, char **out, int *blk)
{
    uint64_t g = a->src.granularity, bsz;
    void *p;
    int rc;

    for (int b = 0; b < a->nblocks; b++) {
        uint64_t off = find_gap(a, b, sz);
        if (off != UINT64_MAX) {
            *out = a->blocks[b].base + off;
            *blk = b;
            return BFIT_OK;
        }
    }
    bsz = (sz + g - 1) / g * g;
    rc = a->src.alloc(a->src.ud, (size_t)bsz, &p);
    if (rc != BFIT_OK || !p)
        /* a device failure that is no shortage (its message set) stays one */
        return rc == BFIT_OK || rc == BFIT_ENOMEM ? BFIT_ENOMEM : rc;
    a->blocks[a->nblocks] = (block){p, bsz, 0};
    *out = p;
    *blk = a->nblocks++;
    a->st.reserved += bsz;
    if (a->st.reserved > a->st.reserved_peak)
        a->st.reserved_peak = a->st.reserved;
    return BFIT_OK;
}

static void count(bfit_arena *a, uint32_t cat, uint64_t sz)
{
    a->st.cur[cat] += sz;
    if (a->st.cur[cat] > a->st.peak_cat[cat])
        a->st.peak_cat[cat] = a->st.cur[cat];
}

static void record(bfit_arena *a, const live *r)
{
    int at = live_lower(a, r->p);
    memmove(&a->lv[at + 1], &a->lv[at], (size_t)(a->nlive - at) * sizeof *a->lv);
    a->lv[at] = *r;
    a->nlive++;
    a->blocks[r->blk].used += r->size;
    a->st.current += r->size;
    if (a->st.current > a->st.peak)
        a->st.peak = a->st.current;
    count(a, r->cat, r->size - r->size2);
    count(a, r->cat2, r->size2);
    a->st.nalloc++;
}

int bfit_arena_alloc(bfit_arena *a, size_t n, bfit_mem_cat cat, void **out)
{
    return bfit_arena_alloc_shared(a, n, cat, 0, cat, out);
}

int bfit_arena_alloc_shared(bfit_arena *a, size_t n, bfit_mem_cat cat, size_t n2, bfit_mem_cat cat2, void **out)
{
    uint64_t sz, sz2;
    char *p;
    int blk, rc;

    *out = NULL;
    if ((unsigned)cat >= BFIT_MEM_NCAT || (unsigned)cat2 >= BFIT_MEM_NCAT)
        return bfit_fail(BFIT_EINVAL, "arena: bad category %d", (unsigned)cat >= BFIT_MEM_NCAT ? (int)cat : (int)cat2);
    if (n > SIZE_MAX / 4 || n2 > SIZE_MAX / 4)
        return bfit_fail(BFIT_ENOMEM, "arena: request of %zu bytes is too large", n > n2 ? n : n2);
    sz2 = BFIT_ALIGN_UP(n2);
    sz = BFIT_ALIGN_UP(n || n2 ? n : 1) + sz2;
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
    if (grow_tables(a) != BFIT_OK)
        return bfit_fail(BFIT_ENOMEM, "arena: out of host memory for its bookkeeping");
    if ((rc = place(a, sz, &p, &blk)) != BFIT_OK) {
        char need[32];
        a->st.nfail++;
        if (rc != BFIT_ENOMEM)
            return bfit_fail_prefix(rc, "arena: getting a block for %s: ", bfit_mem_cat_name(cat));
        return bfit_fail(BFIT_ENOMEM, "arena: the device refused a block of %s for %s",
                         bfit_format_size((sz + a->src.granularity - 1) / a->src.granularity * a->src.granularity,
                                          need, sizeof need),
                         bfit_mem_cat_name(cat));
    }
    record(a, &(live){p, sz, sz2, (uint32_t)cat, (uint32_t)cat2, (uint32_t)blk});
#ifdef BFIT_ARENA_POISON
    /* test builds: every byte starts as a NaN pattern, so reading memory
     * before writing it shows up as NaN instead of passing by luck */
    if (a->src.fill)
        a->src.fill(a->src.ud, p, 0xFF, (size_t)sz);
#endif
    *out = p;
    return BFIT_OK;
}

/* Give block b back to the source and close the gap in the table. */
static void drop_block(bfit_arena *a, int b)
{
    a->src.free(a->src.ud, a->blocks[b].base, (size_t)a->blocks[b].size);
    a->st.reserved -= a->blocks[b].size;
    a->blocks[b] = a->blocks[--a->nblocks];
    if (b == a->nblocks)
        return;
    /* the moved block's allocations point at its new index */
    for (int i = live_lower(a, a->blocks[b].base);
         i < a->nlive && a->lv[i].p < a->blocks[b].base + a->blocks[b].size; i++)
        a->lv[i].blk = (uint32_t)b;
}

void bfit_arena_release(bfit_arena *a, void *ptr)
{
    char *p = ptr;
    int i;
    live r;

    if (!p)
        return;
    i = live_lower(a, p);
    if (i == a->nlive || a->lv[i].p != p) /* a foreign pointer: refuse rather than corrupt */
        return;
    r = a->lv[i];
    memmove(&a->lv[i], &a->lv[i + 1], (size_t)(a->nlive - i - 1) * sizeof *a->lv);
    a->nlive--;
    a->st.current -= r.size;
    a->st.cur[r.cat] -= r.size - r.size2;
    a->st.cur[r.cat2] -= r.size2;
    a->st.nfree++;
    a->blocks[r.blk].used -= r.size;
    if (a->blocks[r.blk].used == 0)
        drop_block(a, (int)r.blk);
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
    a->st.reserved_peak = a->st.reserved;
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
