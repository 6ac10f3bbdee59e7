/* batchfit.h - the public API of libbatchfit.
 *
 * Opaque handles with _new/_free pairs. Every function that can fail returns
 * an int status (BFIT_OK or a negative BFIT_E* code) and leaves a message in
 * bfit_errmsg(); the library never exits or aborts on a recoverable condition.
 */
#ifndef BATCHFIT_H
#define BATCHFIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status codes -------------------------------------------------------- */
enum {
    BFIT_OK = 0,
    BFIT_ENOMEM = -1,   /* arena capacity or fault injection: recoverable */
    BFIT_EINVAL = -2,   /* bad argument or input */
    BFIT_EIO = -3,      /* file system */
    BFIT_EFORMAT = -4,  /* malformed file contents */
    BFIT_EDEVICE = -5,  /* backend failure (oneDNN, CUDA) */
    BFIT_ESTATE = -6    /* call not valid in the object's current state */
};

/* The message of the last failure on this thread ("" if none). */
const char *bfit_errmsg(void);
/* A short name for a status code ("out of memory", ...). */
const char *bfit_strerror(int code);

/* ---- sizes --------------------------------------------------------------- */
/* Parse "512MiB", "1.5GiB", "8GB", "4096" (bytes) into *out. Binary units
 * (KiB, MiB, GiB, TiB) are powers of 1024, decimal ones (kB/KB, MB, GB, TB)
 * powers of 1000; "B" is optional. Returns BFIT_EINVAL with a message that
 * says what was wrong for negative, empty, unknown unit, or overflow. */
int bfit_parse_size(const char *text, uint64_t *out);
/* Format bytes for people: "1.50 GiB", "512 B". Returns buf. */
char *bfit_format_size(uint64_t bytes, char *buf, size_t len);

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
} bfit_arena_stats;

/* The host allocator the arena draws from (Lua's lua_Alloc idea): NULL
 * means aligned_alloc/free. */
typedef struct bfit_host_alloc {
    void *(*alloc)(void *ud, size_t size, size_t align);
    void (*free)(void *ud, void *p);
    void *ud;
} bfit_host_alloc;

bfit_arena *bfit_arena_new(uint64_t capacity, const bfit_host_alloc *host);
void bfit_arena_free(bfit_arena *a);
/* Allocate n bytes (64-byte aligned, accounted as BFIT_ALIGN_UP(n)) to a
 * category. Fails with BFIT_ENOMEM, leaving the arena unchanged, when the
 * capacity would be exceeded or a fault is injected. */
int bfit_arena_alloc(bfit_arena *a, size_t n, bfit_mem_cat cat, void **out);
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

#ifdef __cplusplus
}
#endif
#endif
