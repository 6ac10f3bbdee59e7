/* device.h - the backend interface: memory through the arena, and prepared
 * operations ("ops") that run on device buffers.
 *
 * An op is created once for fixed shapes (oneDNN primitive, later a cuDNN
 * plan), reports the scratch bytes it needs, and is run with buffers the
 * caller owns: the device never allocates behind the arena's back. All
 * tensors are dense row-major (NCHW, OIHW; matmul row-major [rows, cols]).
 */
#ifndef BFIT_DEVICE_H
#define BFIT_DEVICE_H

#include "batchfit.h"
#include "tensor/tensor.h"

typedef struct bfit_device bfit_device;
typedef struct bfit_op bfit_op;

typedef enum {
    BFIT_OP_MATMUL,           /* dst[M,N] (+)= op(src)[M,K] x op(weights)[K,N] (+ bias[N]) */
    BFIT_OP_CONV_FWD,         /* dst = conv(src, weights) (+ bias) */
    BFIT_OP_CONV_BWD_DATA,    /* diff_src = conv^T(diff_dst, weights) */
    BFIT_OP_CONV_BWD_WEIGHTS, /* diff_weights (+)=, diff_bias (+)= from src, diff_dst */
    BFIT_OP_POOL_FWD,         /* max or average; training max writes `saved` (indices) */
    BFIT_OP_POOL_BWD,         /* diff_src from diff_dst (and `saved` for max) */
    BFIT_OP_BNORM_FWD,        /* training: batch stats into mean/var; eval: uses mean/var */
    BFIT_OP_BNORM_BWD,        /* diff_src, diff_scale (+)=, diff_shift (+)= */
    BFIT_OP_LNORM_FWD,        /* over the last dim (cols) of [rows, cols]; mean/var per row */
    BFIT_OP_LNORM_BWD,
    BFIT_OP_ELTWISE_FWD,      /* dst = f(src) */
    BFIT_OP_ELTWISE_BWD,      /* diff_src = f'(src) * diff_dst */
    BFIT_OP_REDUCE_ROWS,      /* dst[N] (+)= sum over rows of src[M,N] */
    BFIT_OP_ADD,              /* dst[n] = src[n] + src2[n] (dst may alias either); accumulate: dst += src */
    BFIT_OP_DROPOUT_FWD,      /* dst = src * mask / (1-p); mask (uint8, n bytes) into `saved` */
    BFIT_OP_DROPOUT_BWD,      /* diff_src = diff_dst * mask / (1-p) */
    BFIT_OP_XENT_FWD,         /* rows of logits src[M,N], labels: dst = softmax probs [M,N], *loss = sum of -log p[label] */
    BFIT_OP_XENT_BWD,         /* diff_src = (probs - onehot(labels)) * scale */
    BFIT_OP_COUNT
} bfit_op_kind;

typedef enum { BFIT_ELT_RELU, BFIT_ELT_GELU_ERF, BFIT_ELT_GELU_TANH } bfit_eltwise_alg;

typedef struct bfit_op_desc {
    bfit_op_kind kind;
    bfit_dtype dtype;  /* BFIT_F32 now; the seam for BF16 */
    int accumulate;    /* gradient outputs (diff_weights, diff_bias, diff_scale, diff_shift,
                          MATMUL dst, REDUCE_ROWS dst, ADD dst) are added to, not overwritten */
    union {
        struct { int64_t M, N, K; int trans_src, trans_weights, bias; } mm;
        /* src [n,ic,ih,iw], weights [oc,ic,kh,kw], dst [n,oc,oh,ow] */
        struct { int64_t n, ic, ih, iw, oc, oh, ow, kh, kw, sh, sw, ph, pw; int bias; } conv;
        /* avg pooling counts padding like PyTorch's default (count_include_pad) */
        struct { int64_t n, c, ih, iw, oh, ow, kh, kw, sh, sw, ph, pw; int max; int training; } pool;
        /* scale/shift [c]; mean/var [c]; training: batch statistics (biased var) */
        struct { int64_t n, c, h, w; float eps; int training; } bnorm;
        /* src [rows, cols]; scale/shift [cols]; mean/var [rows] */
        struct { int64_t rows, cols; float eps; } lnorm;
        struct { int64_t n; bfit_eltwise_alg alg; } elt;
        struct { int64_t M, N; } reduce;
        struct { int64_t n; } add;
        struct { int64_t n; float p; } drop;
        struct { int64_t M, N; } xent;
    } u;
} bfit_op_desc;

typedef struct bfit_op_args {
    const void *src, *src2, *weights, *bias, *diff_dst, *scale, *shift;
    void *dst, *diff_src, *diff_weights, *diff_bias, *diff_scale, *diff_shift;
    void *mean, *var;        /* norm statistics */
    void *saved;             /* op state kept from forward to backward (bfit_op_saved_bytes) */
    void *workspace;         /* scratch, bfit_op_workspace_bytes, contents not kept */
    const int32_t *labels;   /* XENT */
    double *loss;            /* XENT_FWD: sum of per-row losses */
    float loss_scale;        /* XENT_BWD scale, e.g. 1/E */
    uint64_t seed;           /* DROPOUT_FWD: mask = f(seed, index) */
} bfit_op_args;

/* The table a backend implements. */
typedef struct bfit_device_vt {
    const char *name;
    int (*op_new)(bfit_device *d, const bfit_op_desc *desc, bfit_op **out);
    size_t (*op_workspace)(const bfit_op *op);
    size_t (*op_saved)(const bfit_op *op);
    int (*op_run)(bfit_op *op, const bfit_op_args *args);
    void (*op_free)(bfit_op *op);
    int (*copy)(bfit_device *d, void *dst, const void *src, size_t n); /* any direction */
    int (*zero)(bfit_device *d, void *dst, size_t n);
    void (*destroy)(bfit_device *d);
} bfit_device_vt;

struct bfit_device {
    const bfit_device_vt *vt;
    bfit_arena *arena;   /* not owned */
    int nthreads;
};

/* The CPU device on oneDNN. nthreads <= 0: all cores. */
int bfit_device_cpu_new(bfit_arena *arena, int nthreads, bfit_device **out);
void bfit_device_free(bfit_device *d);

static inline int bfit_device_alloc(bfit_device *d, size_t n, bfit_mem_cat cat, void **out)
{
    return bfit_arena_alloc(d->arena, n, cat, out);
}
static inline void bfit_device_release(bfit_device *d, void *p) { bfit_arena_release(d->arena, p); }

/* Create an op for fixed shapes. Allocates no device memory. */
int bfit_op_new(bfit_device *d, const bfit_op_desc *desc, bfit_op **out);
size_t bfit_op_workspace_bytes(const bfit_op *op);
size_t bfit_op_saved_bytes(const bfit_op *op);
int bfit_op_run(bfit_op *op, const bfit_op_args *args);
void bfit_op_free(bfit_op *op);
int bfit_device_copy(bfit_device *d, void *dst, const void *src, size_t n);
int bfit_device_zero(bfit_device *d, void *dst, size_t n);

/* Every op starts with this header so the generic functions can dispatch. */
struct bfit_op {
    bfit_device *dev;
    bfit_op_desc desc;
};

#endif
