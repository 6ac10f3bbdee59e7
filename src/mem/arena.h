/* arena.h - the arena: the only way to device memory. Host-side
 * bookkeeping over blocks a device gives it, a capacity, a category for
 * every byte, peaks, and fault injection (src/mem/arena.c). */
#ifndef BFIT_ARENA_H
#define BFIT_ARENA_H

#include "batchfit.h"
#include <stddef.h>
#include <stdint.h>

/* ---- the arena: the only way to device memory ---------------------------- */
typedef enum {
    BFIT_MEM_PARAMS = 0,
    BFIT_MEM_GRADS,
    BFIT_MEM_OPTIMIZER,
    BFIT_MEM_ACTIVATIONS,
    BFIT_MEM_ACT_GRADS,
    BFIT_MEM_WORKSPACE,
    BFIT_MEM_INPUT,
    BFIT_MEM_OTHER,
    BFIT_MEM_NCAT
} bfit_mem_cat;

#define BFIT_ALIGN 64
/* Bytes an allocation of n bytes takes in the arena: n rounded up to 64. */
#define BFIT_ALIGN_UP(n) (((size_t)(n) + (BFIT_ALIGN - 1)) & ~(size_t)(BFIT_ALIGN - 1))

typedef struct bfit_arena bfit_arena;

typedef struct bfit_arena_stats {
    uint64_t capacity;
    uint64_t current;                  /* total bytes held now */
    uint64_t peak;                     /* high-water mark of current */
    uint64_t cur[BFIT_MEM_NCAT];       /* per category, now */
    uint64_t peak_cat[BFIT_MEM_NCAT];  /* per category, high-water */
    uint64_t nalloc;                   /* allocations made (successful) */
    uint64_t nfree;
    uint64_t nfail;                    /* allocations refused */
    uint64_t reserved;                 /* bytes of device blocks held (>= current: granularity) */
    uint64_t reserved_peak;
} bfit_arena_stats;

/* Where the arena's memory comes from: blocks of device memory that the
 * arena carves and never touches itself (it keeps its bookkeeping on the
 * host). A device gives its own (bfit_device_blocks); NULL means host memory
 * from aligned_alloc, for an arena that only accounts. */
typedef struct bfit_block_source {
    /* n bytes, 64-byte aligned at least; BFIT_ENOMEM (nothing held) when refused */
    int (*alloc)(void *ud, size_t n, void **out);
    void (*free)(void *ud, void *p, size_t n);
    /* optional: set n bytes at p to byte (test builds poison new memory) */
    int (*fill)(void *ud, void *p, int byte, size_t n);
    void *ud;
    size_t granularity;   /* blocks are asked for in multiples of this (0: BFIT_ALIGN) */
} bfit_block_source;

/* A host allocator (Lua's lua_Alloc idea), for the CPU device's blocks:
 * NULL means aligned_alloc/free. */
typedef struct bfit_host_alloc {
    void *(*alloc)(void *ud, size_t size, size_t align);
    void (*free)(void *ud, void *p);
    void *ud;
} bfit_host_alloc;

/* capacity: bytes the arena may hand out (accounted as BFIT_ALIGN_UP of each
 * request). src: copied; NULL for host memory. */
bfit_arena *bfit_arena_new(uint64_t capacity, const bfit_block_source *src);
void bfit_arena_free(bfit_arena *a);
/* Allocate n bytes (64-byte aligned, accounted as BFIT_ALIGN_UP(n)) to a
 * category. Fails with BFIT_ENOMEM, leaving the arena unchanged, when the
 * capacity would be exceeded, a fault is injected, or the block source
 * refuses. The memory is the device's: the arena never reads or writes it. */
int bfit_arena_alloc(bfit_arena *a, size_t n, bfit_mem_cat cat, void **out);
/* One allocation of BFIT_ALIGN_UP(n) + BFIT_ALIGN_UP(n2) bytes, the first
 * part counted to cat and the second to cat2: for buffers of two categories
 * whose lifetimes let them share bytes (a step's activations and their
 * gradients), so each category still says what it adds. */
int bfit_arena_alloc_shared(bfit_arena *a, size_t n, bfit_mem_cat cat, size_t n2, bfit_mem_cat cat2, void **out);
/* Release p (NULL is fine; a pointer the arena did not give is ignored). */
void bfit_arena_release(bfit_arena *a, void *p);
/* Change capacity at run time. Lowering below what is held is allowed: the
 * holdings stay, new allocations fail until enough is released. */
void bfit_arena_set_capacity(bfit_arena *a, uint64_t capacity);
uint64_t bfit_arena_capacity(const bfit_arena *a);
uint64_t bfit_arena_available(const bfit_arena *a); /* capacity - current, or 0 */
void bfit_arena_stats_get(const bfit_arena *a, bfit_arena_stats *s);
void bfit_arena_reset_peak(bfit_arena *a);
/* Fault injection: the n-th allocation from now (1 = the next) fails; 0 turns
 * it off. */
void bfit_arena_fail_nth(bfit_arena *a, uint64_t n);
const char *bfit_mem_cat_name(bfit_mem_cat c);
/* Bytes of RAM the OS says are available (MemAvailable), 0 if unknown. */
uint64_t bfit_host_available_memory(void);

#endif
