/* cpu.h - internals shared by the CPU backend's files (oneDNN engine and
 * stream, the op record each family file fills in). */
#ifndef BFIT_CPU_H
#define BFIT_CPU_H

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <sched.h>

#include "base/par.h"

#include "device/device.h"

#define CPU_MAXOPEN (BFIT_OP_MAXCAT + 8) /* distinct blocks one device call may touch: a concatenation's inputs and more */
#define CPU_SPANS 16 /* span keys the checking mode counts (a model's forward and backward at a few shapes) */

/* oneDNN 3 names a pointer to a constant memory descriptor this way; 2.6
 * passes descriptors by pointer to a struct. The alias keeps our code in
 * the newer spelling. */
typedef const dnnl_memory_desc_t *const_dnnl_memory_desc_t;

/* A device block the checking mode knows: mapped pages, PROT_NONE outside
 * device calls. */
typedef struct cpu_block {
    char *p;
    size_t n;
} cpu_block;

typedef struct cpu_device {
    bfit_device base;
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    int threads;          /* > 0: set around each device call */
    int saved_threads;    /* the caller's, restored on leaving */
    int depth;            /* device calls in progress (a call may make another) */
    int check;            /* opaque-memory checking mode: 1, 2 with every span's calls checked */
    int bf16_f32;         /* oneDNN has no bf16 kernels for this CPU: bf16 primitives compute in f32
                             between f32 copies of their arguments (cpu_bf16.c) */
    bfit_host_alloc host; /* where blocks come from outside the checking mode */
    cpu_block *blocks;    /* checking mode: sorted by address */
    int nblocks, cap_blocks;
    int open[CPU_MAXOPEN]; /* blocks opened by the call in progress */
    int nopen;
    uint64_t span_key[CPU_SPANS]; /* checking mode: the spans seen (bfit_device_span_begin) */
    int span_seen[CPU_SPANS];     /* how many times each began */
    int span_next;                /* the entry a new key takes */
    int span_all;                 /* a span has every block open */
    char detail[96];
    double mon_cpu, mon_wall; /* process CPU seconds and the clock at the last sample (cpu_sample) */
    /* --threads auto's packing (cpu_pin.c): the team's threads on fewer CPUs */
    int pin_cpus;         /* CPUs the team is on now (0: not placed by us) */
    int pin_team;         /* the team's size when placed: the threads to restore */
    int have_allowed;
    cpu_set_t allowed;    /* the CPUs the caller's thread had before the first packing */
} cpu_device;

#define CPU_OP_MAXPRIM 5
#define CPU_OP_MAXARGS 12 /* arguments of one execution, the scratchpad included */
#define CPU_MAXSTAGE 4    /* bf16 arguments of one primitive computed in f32 */

/* A bf16 argument of a primitive that computes in f32 (cpu_bf16.c): its f32
 * copy in the op's workspace. */
typedef struct cpu_stage {
    int arg;    /* DNNL_ARG_* */
    int in;     /* the primitive reads it: converted to f32 before */
    int out;    /* the primitive writes it: converted to bf16 after */
    size_t off; /* of the copy, from the start of the workspace */
    size_t n;   /* elements */
} cpu_stage;

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
     * allocates nothing (bfit_cpu_exec). Slot i is args[i]; the last, the
     * scratchpad. */
    dnnl_memory_t mem[CPU_OP_MAXPRIM][CPU_OP_MAXARGS];
    size_t pd_ws[CPU_OP_MAXPRIM]; /* workspace bytes prim p runs with: its scratchpad, then its copies */
    cpu_stage stage[CPU_OP_MAXPRIM][CPU_MAXSTAGE];
    int nstage[CPU_OP_MAXPRIM];
    /* Work too small for a parallel region to pay: bit p, prim p is made
     * and run with one thread (bfit_cpu_exec); CPU_SERIAL_ALL, the whole
     * op, its primitive descriptors and loops too. */
    unsigned serial;
} cpu_op;

#define CPU_SERIAL_ALL (~0u)
/* A region wakes the team's sleeping threads (the command's waits sleep:
 * docs/performance.md, "A loaded machine"), 20 us and more each on a
 * virtual machine: more than work under these sizes takes one thread. */
#define CPU_SMALL_FLOPS ((int64_t)1 << 20)
#define CPU_SMALL_BYTES ((size_t)BFIT_PAR_MIN * sizeof(float))
/* Whether an op of desc is small enough to run on one thread whole. */
int bfit_cpu_small(const bfit_op_desc *desc);
/* One thread from here to bfit_cpu_serial_end(the returned count). */
static inline int bfit_cpu_serial_begin(void)
{
    int t = omp_get_max_threads();
    omp_set_num_threads(1);
    return t;
}
static inline void bfit_cpu_serial_end(int t) { omp_set_num_threads(t); }

static inline cpu_device *cpu_dev(const cpu_op *op) { return (cpu_device *)op->base.dev; }

/* An op of the device's own, made from inside a device call (an op that
 * runs others: chunked convolutions); run it by its run function. */
int bfit_cpu_op_make(bfit_device *d, const bfit_op_desc *desc, cpu_op **out);
void bfit_cpu_op_destroy(cpu_op *op);

/* Turn a oneDNN status into ours, with what was being done. */
int bfit_cpu_dnnl_check(dnnl_status_t s, const char *what);
#define CPU_TRY(call, what)                                                                        \
    do {                                                                                           \
        dnnl_status_t s_ = (call);                                                                 \
        if (s_ != dnnl_success)                                                                    \
            return bfit_cpu_dnnl_check(s_, what);                                                       \
    } while (0)

/* oneDNN's name for a dtype. */
dnnl_data_type_t bfit_cpu_dt(bfit_dtype t);
/* Plain row-major memory descriptor of up to 5 dims, f32 or of dtype t. */
int bfit_cpu_md(dnnl_memory_desc_t *md, int ndims, const int64_t *dims);
int bfit_cpu_md_dt(dnnl_memory_desc_t *md, int ndims, const int64_t *dims, bfit_dtype t);
/* [n, c, h, w] of dtype t in nChw8c or nChw16c (block 8 or 16; c a multiple of it) */
int bfit_cpu_md_blocked(dnnl_memory_desc_t *md, const int64_t *dims, bfit_dtype t, int block);
/* Bytes of pd's scratchpad (0: none). */
size_t bfit_cpu_pd_scratch(const_dnnl_primitive_desc_t pd);
/* Primitive attributes with a user-managed scratchpad (caller destroys). */
int bfit_cpu_attr_user_scratchpad(dnnl_primitive_attr_t *attr);
/* Create op's pd in slot p from an op descriptor and raise *ws (a max) to
 * the workspace it runs with: its scratchpad, and where oneDNN has no bf16
 * kernels, f32 copies of its bf16 arguments (cpu_bf16.c), so pd_ws[p]. */
int bfit_cpu_pd_create(cpu_op *op, int p, const void *op_desc, const_dnnl_primitive_attr_t attr,
                       const_dnnl_primitive_desc_t hint, size_t *ws);
/* The same with op's bf16 arguments computed in f32 whatever the CPU (where
 * oneDNN's bf16 kernel is less exact than its f32 one: cpu_pool.c) */
int bfit_cpu_pd_create_f32(cpu_op *op, int p, const void *op_desc, const_dnnl_primitive_attr_t attr,
                           const_dnnl_primitive_desc_t hint, size_t *ws);
/* Execute prim[p] with (arg, pointer, md) triples; NULL pointers are
 * skipped. The primitive's scratchpad, if any, is placed at `scratch` (the
 * start of the op's workspace). A given p must always be called with the
 * same list (args[i] the same argument and md each time; only pointers,
 * or their being NULL, change): slot i's memory object is reused. */
typedef struct cpu_arg { int arg; const void *ptr; const_dnnl_memory_desc_t md; } cpu_arg;
int bfit_cpu_exec(cpu_op *op, int p, const cpu_arg *args, int nargs, void *scratch, const char *what);

/* Entering and leaving a device call: the thread count is set for the
 * call, and in the checking mode the blocks the call touches (those holding
 * ptrs[0..n)) are opened, each pointer having been checked to be device
 * memory; what names it says which argument, for the message. */
int bfit_cpu_enter(cpu_device *d, const void *const *ptrs, const char *const *names, int n, const char *what);
void bfit_cpu_leave(cpu_device *d);
/* The table's spans (device.h bfit_device_span_begin). */
int bfit_cpu_span_begin(bfit_device *d, uint64_t key);
void bfit_cpu_span_end(bfit_device *d);

/* cpu_mem.c: the block source, transfers and memory query of the table */
void bfit_cpu_blocks_init(cpu_device *d);
void bfit_cpu_blocks_fini(cpu_device *d);
int bfit_cpu_copy(bfit_device *d, void *dst, const void *src, size_t n);
int bfit_cpu_upload(bfit_device *d, void *dst, const void *host, size_t n);
int bfit_cpu_download(bfit_device *d, void *host, const void *src, size_t n);
int bfit_cpu_fill(bfit_device *d, void *dst, int byte, size_t n);
int bfit_cpu_sync(bfit_device *d);
int bfit_cpu_mem_info(bfit_device *d, uint64_t *free_bytes, uint64_t *total_bytes);
/* BFIT_OK if the address space has room for oneDNN to make a kernel (there
 * is no limit, or it leaves BFIT_AS_KERNEL_ROOM), else BFIT_ENOMEM saying
 * so: oneDNN would crash on the allocation it does not check. */
int bfit_cpu_kernel_room(const char *what);
/* Under an address-space limit, the malloc arenas of a team of `threads`
 * made now, so that the room read between steps counts them; BFIT_ENOMEM
 * if the room cannot hold the threads' stacks (libgomp would exit). */
int bfit_cpu_make_arenas(int threads);

/* cpu_pin.c: the team of `threads` on `cpus` of the allowed CPUs (0: on
 * all of them again); the CPUs the caller's thread may run on, 0 where
 * libgomp places the threads itself (OMP_PROC_BIND). */
int bfit_cpu_pin(cpu_device *d, int threads, int cpus);
int bfit_cpu_allowed(cpu_device *d);

/* cpu_coll.c: collectives over a group of processes, through its host side */
int bfit_cpu_coll_open(bfit_device *d, const bfit_coll_host *h, void **state);
int bfit_cpu_coll_sum(bfit_device *d, void *state, void *buf, size_t count);
int bfit_cpu_coll_bcast(bfit_device *d, void *state, void *buf, size_t n, int root);
void bfit_cpu_coll_close(bfit_device *d, void *state);

/* Family initialisers: each sets op->run, op->ws, op->saved (and pd/prim). */
int bfit_cpu_matmul_init(cpu_op *op);   /* MATMUL */
int bfit_cpu_conv_init(cpu_op *op);     /* CONV_FWD, CONV_BWD_DATA, CONV_BWD_WEIGHTS */
int bfit_cpu_conv_block(cpu_device *d, bfit_dtype t); /* the vt's layout_block: oneDNN's choice here */
/* cpu_conv_c1.c: 1 when it takes op (sets op->run): the f32 weight gradient
 * of a one-channel input (channels out a multiple of 8), where oneDNN chose
 * a source layout other than the plain one (padding the channel to a block) */
int bfit_cpu_conv_c1_take(cpu_op *op, const dnnl_memory_desc_t *plain_src, const dnnl_memory_desc_t *chosen_src);
/* cpu_conv_dw.c: 1 when it takes op (sets op->run): the f32 or bf16 weight
 * gradient of a depthwise convolution where oneDNN chose its gemm fallback */
int bfit_cpu_conv_dw_take(cpu_op *op, int onednn_gemm);
/* cpu_conv_gemm.c: 1 when it takes op (sets op->run, *ws its workspace): the
 * f32 nchw weight gradient of a dense convolution where oneDNN chose its gemm
 * fallback (onednn_gemm), or anywhere under BFIT_TC_CONV_GEMM */
int bfit_cpu_conv_gemm_take(cpu_op *op, int onednn_gemm, size_t *ws);
/* A convolution's weight elements: oc x ic / groups x kh x kw. */
static inline int64_t bfit_cpu_conv_wnumel(const bfit_op_desc *d)
{
    return d->u.conv.oc * (d->u.conv.ic / (d->u.conv.groups > 1 ? d->u.conv.groups : 1)) * d->u.conv.kh *
           d->u.conv.kw;
}
/* cpu_conv_split.c: the weight gradient (f32 or bf16 data) with the
 * samples split among the threads, each part a one-thread op run by
 * onednn_run. *out NULL where it does not apply; else the split, and *ws
 * the op's workspace. */
typedef struct bfit_conv_split bfit_conv_split;
int bfit_cpu_conv_split_make(cpu_op *op, int (*onednn_run)(cpu_op *, const bfit_op_args *), bfit_conv_split **out,
                             size_t *ws);
/* run: the arguments and the workspace checked by the caller */
int bfit_cpu_conv_split_run(cpu_op *op, bfit_conv_split *k, const bfit_op_args *a);
void bfit_cpu_conv_split_free(bfit_conv_split *k);
/* The output positions [*lo, *hi) of [0, on) whose window offset k (stride
 * s, padding p) reads inside an input of in: o s - p + k in [0, in). */
void bfit_cpu_conv_span(int64_t k, int64_t s, int64_t p, int64_t in, int64_t on, int64_t *lo, int64_t *hi);
int bfit_cpu_pool_init(cpu_op *op);     /* POOL_FWD, POOL_BWD */
int bfit_cpu_maxpool2_init(cpu_op *op, int *done); /* 2x2/2 max pools of our own (bfit_cpu_pool_init asks) */
int bfit_cpu_maxpool_blk_init(cpu_op *op);         /* its run with nChw8c/16c input (blk_src; maxpool2_init asks) */
int bfit_cpu_maxpool_k_init(cpu_op *op, int *done); /* other max pools of our own on nchw (pool_init asks) */
typedef int (*bfit_cpu_run_fn)(cpu_op *op, const bfit_op_args *a);
bfit_cpu_run_fn bfit_cpu_maxpool_kblk_run(const bfit_op_desc *d); /* those on nChw8c/16c, f32 and bf16, or NULL */
void bfit_cpu_pool_windows(int64_t i, int64_t k, int64_t s, int64_t pad, int64_t on, int64_t *o0, int64_t *o1);
int bfit_cpu_avgpool_g_init(cpu_op *op, int *done); /* global average pools of our own on nchw (pool_init asks) */
/* Our max pools' saved indices: a byte per output (oneDNN's for windows
 * under 256 positions), for training forward and backward; 0 in eval. */
size_t bfit_cpu_maxpool_saved(const bfit_op_desc *d);

/* cpu_bf16.c: bf16 where oneDNN has no bf16 kernels. native: 1 when
 * oneDNN makes bf16 primitives on this CPU. compute_dt: the dtype oneDNN
 * computes data of dtype t in on d. cast: f32 <-> bf16, n elements.
 * pd_create: bfit_cpu_pd_create's work on such a CPU: op's pd in slot p
 * from op_desc with its bf16 memory descriptors made f32, the stage list of
 * its bf16 arguments, *ws the bytes it runs with (scratchpad, copies);
 * stage_of: prim p's copy of argument arg, or NULL. */
int bfit_cpu_bf16_native(dnnl_engine_t eng);
bfit_dtype bfit_cpu_compute_dt(const cpu_device *d, bfit_dtype t);
void bfit_cpu_bf16_cast(const void *src, void *dst, int64_t n, int to_bf16);
/* n elements between a 16-bit buffer (from element off) and f32, for the
 * loops that compute 16-bit data in f32: bf16 by bfit_cpu_bf16_cast, f16
 * element by element (bfit_ld / bfit_st, whose switch on the dtype would
 * keep a bf16 loop scalar). */
void bfit_cpu_widen(const void *src, bfit_dtype t, int64_t off, float *dst, int64_t n);
void bfit_cpu_narrow(const float *src, void *dst, bfit_dtype t, int64_t off, int64_t n);
int bfit_cpu_bf16_pd_create(cpu_op *op, int p, const void *op_desc, const_dnnl_primitive_attr_t attr,
                            const_dnnl_primitive_desc_t hint, size_t *ws);
const cpu_stage *bfit_cpu_bf16_stage_of(const cpu_op *op, int p, int arg);

/* cpu_blk16.c: bf16 nchw <-> nChw16c of our own (oneDNN 2.6's is its slow
 * generic reorder for bf16). match: 1, with the sizes, when `plain` is
 * bf16 nchw with c % 16 == 0 and `chosen` its nChw16c. */
int bfit_cpu_blk16_match(const dnnl_memory_desc_t *plain, const dnnl_memory_desc_t *chosen, int64_t *n, int64_t *c,
                    int64_t *hw);
void bfit_cpu_blk16_run(const void *src, void *dst, int64_t n, int64_t c, int64_t hw, int to_plain);
int bfit_cpu_bnorm_init(cpu_op *op);    /* BNORM_FWD, BNORM_BWD */
int bfit_cpu_lnorm_init(cpu_op *op);    /* LNORM_FWD, LNORM_BWD */
int bfit_cpu_eltwise_init(cpu_op *op);  /* ELTWISE_FWD, ELTWISE_BWD */
int bfit_cpu_gelu_init(cpu_op *op, int *done); /* GELU (erf) of our own in f32 (eltwise_init asks) */
int bfit_cpu_simple_init(cpu_op *op);   /* REDUCE_ROWS, ADD, DROPOUT_*, XENT_*, SCALE, NORMS (plain loops) */
int bfit_cpu_optim_init(cpu_op *op);    /* SGD, ADAMW */
int bfit_cpu_embed_init(cpu_op *op);    /* EMBED_FWD, EMBED_BWD */
int bfit_cpu_attn_init(cpu_op *op);     /* ATTN_FWD, ATTN_BWD */
int bfit_cpu_concat_init(cpu_op *op);   /* CONCAT_FWD/BWD, TRANSPOSE, ADD_ROWS, SLICE_FWD/BWD (rows and columns) */
int bfit_cpu_chscale_init(cpu_op *op);  /* CHSCALE_FWD/BWD (a gate per channel) */
int bfit_cpu_prelu_init(cpu_op *op);    /* PRELU_FWD/BWD (a learned slope per channel, or one) */
int bfit_cpu_gnorm_init(cpu_op *op);    /* GNORM_FWD/BWD (group normalisation, PyTorch's GroupNorm) */
int bfit_cpu_rope_init(cpu_op *op);     /* ROPE_FWD/BWD (rotary position embeddings) */
int bfit_cpu_repeat_init(cpu_op *op);   /* REPEAT_FWD/BWD (grouped-query attention's repeated heads) */
int bfit_cpu_seqmean_init(cpu_op *op);  /* SEQMEAN_FWD/BWD (the mean of a sequence's real tokens) */
int bfit_cpu_gather_init(cpu_op *op);   /* GATHER_FWD/BWD (the rows of each sample that args.rows names) */

#endif
