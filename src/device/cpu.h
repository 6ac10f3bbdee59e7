/* cpu.h - internals shared by the CPU backend's files (oneDNN engine and
 * stream, the op record each family file fills in). */
#ifndef BFIT_CPU_H
#define BFIT_CPU_H

#include <oneapi/dnnl/dnnl.h>

#include "device/device.h"

/* oneDNN 3 names a pointer to a constant memory descriptor this way; 2.6
 * passes descriptors by pointer to a struct. The alias keeps our code in
 * the newer spelling. */
typedef const dnnl_memory_desc_t *const_dnnl_memory_desc_t;

typedef struct cpu_device {
    bfit_device base;
    dnnl_engine_t eng;
    dnnl_stream_t stream;
} cpu_device;

#define CPU_OP_MAXPRIM 5
#define CPU_OP_MAXARGS 12 /* arguments of one execution, the scratchpad included */

/* One prepared op. A family's init fills prim/pd (oneDNN) or nothing (plain
 * loops), sets ws/saved bytes and the run function. Scratchpads are
 * user-managed: ws includes the primitive's scratchpad, so the arena counts it. */
typedef struct cpu_op {
    bfit_op base;
    dnnl_primitive_desc_t pd[CPU_OP_MAXPRIM];
    dnnl_primitive_t prim[CPU_OP_MAXPRIM];
    size_t ws;
    size_t saved;
    int (*run)(struct cpu_op *op, const bfit_op_args *a);
    void (*fini)(struct cpu_op *op); /* extra cleanup; pd/prim are freed generically */
    void *extra;
    /* Memory objects for prim[p]'s arguments, made at its first execution
     * and re-pointed at the caller's buffers on every later one, so a step
     * allocates nothing (cpu_exec). Slot i is args[i]; the last, the
     * scratchpad. */
    dnnl_memory_t mem[CPU_OP_MAXPRIM][CPU_OP_MAXARGS];
} cpu_op;

static inline cpu_device *cpu_dev(const cpu_op *op) { return (cpu_device *)op->base.dev; }

/* Turn a oneDNN status into ours, with what was being done. */
int cpu_dnnl_check(dnnl_status_t s, const char *what);
#define CPU_TRY(call, what)                                                                        \
    do {                                                                                           \
        dnnl_status_t s_ = (call);                                                                 \
        if (s_ != dnnl_success)                                                                    \
            return cpu_dnnl_check(s_, what);                                                       \
    } while (0)

/* Plain row-major memory descriptor of up to 4 dims. */
int cpu_md(dnnl_memory_desc_t *md, int ndims, const int64_t *dims);
/* Primitive attributes with a user-managed scratchpad (caller destroys). */
int cpu_attr_user_scratchpad(dnnl_primitive_attr_t *attr);
/* Create pd from an op descriptor and record its scratchpad size in *ws (max). */
int cpu_pd_create(dnnl_primitive_desc_t *pd, const void *op_desc, const_dnnl_primitive_attr_t attr,
                  dnnl_engine_t eng, const_dnnl_primitive_desc_t hint, size_t *ws);
/* Execute prim[p] with (arg, pointer, md) triples; NULL pointers are
 * skipped. The primitive's scratchpad, if any, is placed at `scratch` (the
 * start of the op's workspace). A given p must always be called with the
 * same list (args[i] the same argument and md each time; only pointers,
 * or their being NULL, change): slot i's memory object is reused. */
typedef struct cpu_arg { int arg; const void *ptr; const_dnnl_memory_desc_t md; } cpu_arg;
int cpu_exec(cpu_op *op, int p, const cpu_arg *args, int nargs, void *scratch, const char *what);

/* Run the for statement given across the thread team when cond holds,
 * else serially. Not an if() clause: a region with a false if() still
 * makes a one-thread team, which libgomp allocates afresh whenever the
 * last team had another size - a heap call per op in every step. */
#define PAR_FOR_IF(cond, ...)                                                                      \
    do {                                                                                           \
        if (cond) {                                                                                \
            _Pragma("omp parallel for") __VA_ARGS__                                                \
        } else {                                                                                   \
            __VA_ARGS__                                                                            \
        }                                                                                          \
    } while (0)

/* Family initialisers: each sets op->run, op->ws, op->saved (and pd/prim). */
int cpu_matmul_init(cpu_op *op);   /* MATMUL */
int cpu_conv_init(cpu_op *op);     /* CONV_FWD, CONV_BWD_DATA, CONV_BWD_WEIGHTS */
int cpu_pool_init(cpu_op *op);     /* POOL_FWD, POOL_BWD */
int cpu_bnorm_init(cpu_op *op);    /* BNORM_FWD, BNORM_BWD */
int cpu_lnorm_init(cpu_op *op);    /* LNORM_FWD, LNORM_BWD */
int cpu_eltwise_init(cpu_op *op);  /* ELTWISE_FWD, ELTWISE_BWD */
int cpu_simple_init(cpu_op *op);   /* REDUCE_ROWS, ADD, DROPOUT_*, XENT_* (plain loops) */

#endif
