/* cuda.h - internals shared by the CUDA backend's C files (cuda_*.c): the
 * device record (stream, cuBLAS and cuDNN handles, settings), the op
 * record, and the error conversion. Kernels of our own are declared in
 * cuda_kern.h. Every call that touches the GPU first makes the device
 * current on the calling thread (cuda_enter). */
#ifndef BFIT_CUDA_H
#define BFIT_CUDA_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "device/cuda_memo.h"
#include "device/cuda_kern.h"
#include "device/device.h"

typedef struct cuda_device {
    bfit_device base;
    int index;
    bfit_cuda_cfg cfg;
    size_t blas_ws;        /* workspace bytes a MATMUL op asks for (cuBLAS's, from the arena) */
    int check;             /* op arguments are checked to be device memory (BFIT_DEVICE_CHECK) */
    cudaStream_t stream;   /* every transfer, kernel, cuBLAS and cuDNN call goes here, in order */
    cublasHandle_t blas;
    cudnnHandle_t dnn;
    char name[24];
    char detail[384];
    uint64_t overhead;     /* the process's GPU memory outside the arena after warm-up (context, handles,
                              lazily loaded modules), NVML; 0 if NVML cannot say */
    int cc_major, cc_minor;
    double *norm_part;     /* NORMS' partial sums (BK_NORM_PART_BYTES, cudaMalloc'd at opening) */
    /* pinned host staging of transfers (cuda_mem.c): two buffers, each with
     * the event of the last copy that used it; NULL: pageable transfers */
    void *stage[2];
    size_t stage_bytes;
    cudaEvent_t stage_ev[2];
    int stage_next;
    /* the ops queued since the stream was last waited for, so that a fault
     * found at a sync can be put to them (cuda_fail_async) */
    const char *queued[4];
    unsigned long nqueued;
    cuda_memo memo;   /* convolution algorithms chosen, by shape (cuda_dnn.c) */
} cuda_device;

/* An error found when waiting for the stream (what: the wait): a kernel
 * fault is put to the ops queued since the last wait, by name. */
int cuda_fail_async(cuda_device *d, cudaError_t e, const char *what);

/* Bytes the driver attributes to this process on GPU index (NVML);
 * BFIT_EDEVICE when NVML cannot say (cuda_nvml.c). */
int cuda_process_bytes(int index, uint64_t *bytes);
/* A sample of the GPU for the monitor (cuda_nvml.c; NVML, no stream wait). */
int cuda_nvml_sample(int index, bfit_device_sample *out);

/* workspace alignment we give cuBLAS and cuDNN (cuBLAS refuses a workspace
 * aligned to less than 256 bytes; the arena aligns to 64): an op with a
 * workspace asks for this much more and aligns the pointer (cuda_ws) */
#define CUDA_WS_ALIGN 256
/* a part of a workspace, rounded up so that the next part stays aligned */
#define CUDA_WS_PART(n) (((size_t)(n) + CUDA_WS_ALIGN - 1) / CUDA_WS_ALIGN * CUDA_WS_ALIGN)

/* A convolution runs over its batch in parts of n samples (cuda_dnn.c):
 * each part's tensors and algorithm. */
typedef struct cuda_conv_part {
    cudnnTensorDescriptor_t tx, ty; /* input, output of n samples */
    int64_t n;                      /* 0: no such part */
    int algo;                       /* the chosen convolution algorithm */
    size_t algo_ws;                 /* its workspace */
} cuda_conv_part;

/* One prepared op. A family's init fills what it needs and sets ws, saved
 * and run. */
typedef struct cuda_op {
    bfit_op base;
    size_t ws, saved;
    int (*run)(struct cuda_op *op, const bfit_op_args *a);
    void (*fini)(struct cuda_op *op);
    /* cuDNN state (conv, batch norm) */
    cudnnTensorDescriptor_t tx, tb;       /* batch norm's data, per-channel [1,c,1,1] */
    cudnnFilterDescriptor_t tw;
    cudnnConvolutionDescriptor_t conv;
    /* a convolution: the chunk's part, then the tail's (batch % chunk
     * samples; n 0 when none); algo_ws is the larger part's workspace */
    cuda_conv_part part[2];
    size_t algo_ws;
} cuda_op;

static inline cuda_device *cuda_dev(const cuda_op *op) { return (cuda_device *)op->base.dev; }

/* "matmul", "attention forward", ... (the library's names, through the
 * plugin's host table) */
const char *cuda_kind_name(bfit_op_kind k);

/* Make d's GPU current on this thread (a process may use several). */
int cuda_enter(cuda_device *d, const char *what);

/* Our status for a CUDA, cuBLAS or cuDNN one, with what was being done.
 * Out of memory is BFIT_ENOMEM, anything else BFIT_EDEVICE; the runtime's
 * error state is cleared where it can be (a kernel fault is sticky and
 * says so). */
int cuda_fail(cudaError_t e, const char *what);
int cuda_blas_fail(cublasStatus_t s, const char *what);
int cuda_dnn_fail(cudnnStatus_t s, const char *what);
/* BFIT_OK, or cuda_fail for a launch of our kernels that returned e */
static inline int cuda_launched(cudaError_t e, const char *what)
{
    return e == cudaSuccess ? BFIT_OK : cuda_fail(e, what);
}
#define CUDA_TRY(call, what)                                                                       \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return cuda_fail(e_, what);                                                            \
    } while (0)
#define CUBLAS_TRY(call, what)                                                                     \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return cuda_blas_fail(s_, what);                                                       \
    } while (0)
#define CUDNN_TRY(call, what)                                                                      \
    do {                                                                                           \
        cudnnStatus_t s_ = (call);                                                                 \
        if (s_ != CUDNN_STATUS_SUCCESS)                                                            \
            return cuda_dnn_fail(s_, what);                                                        \
    } while (0)

/* The op's workspace, aligned up to CUDA_WS_ALIGN (op->ws includes the
 * slack); NULL when the op reports none or the caller gave none. */
void *cuda_ws(const cuda_op *op, const bfit_op_args *a);

/* cuda_mem.c: the block source, transfers and memory query of the table */
void cuda_blocks_init(cuda_device *d);
int cuda_upload(bfit_device *d, void *dst, const void *host, size_t n);
int cuda_download(bfit_device *d, void *host, const void *src, size_t n);
int cuda_copy(bfit_device *d, void *dst, const void *src, size_t n);
int cuda_fill(bfit_device *d, void *dst, int byte, size_t n);
int cuda_sync(bfit_device *d);
/* pinned staging for transfers, made at opening (none: pageable copies) */
void cuda_stage_init(cuda_device *d);
void cuda_stage_fini(cuda_device *d);
int cuda_mem_info(bfit_device *d, uint64_t *free_bytes, uint64_t *total_bytes);
/* Checking mode: every non-NULL pointer of an op's arguments is device
 * memory of this GPU, with the first nlist of its list (a concatenation's
 * srcs or dsts). */
int cuda_check_args(cuda_device *d, const bfit_op_args *a, int nlist, const char *what);

/* cuda_coll.c: collectives over a group of processes (NCCL; untested) */
int cuda_coll_open(bfit_device *d, const bfit_coll_host *h, void **state);
int cuda_coll_sum(bfit_device *d, void *state, void *buf, size_t count);
int cuda_coll_bcast(bfit_device *d, void *state, void *buf, size_t n, int root);
void cuda_coll_close(bfit_device *d, void *state);

/* Family initialisers: each sets op->run, op->ws, op->saved. */
int cuda_matmul_init(cuda_op *op);  /* MATMUL (cuBLAS) */
int cuda_conv_init(cuda_op *op);    /* CONV_FWD, CONV_BWD_DATA, CONV_BWD_WEIGHTS (cuDNN) */
int cuda_bnorm_init(cuda_op *op);   /* BNORM_FWD, BNORM_BWD (cuDNN and statistics kernels) */
int cuda_attn_init(cuda_op *op);    /* ATTN_FWD, ATTN_BWD (cuBLAS and our kernels) */
int cuda_concat_init(cuda_op *op);  /* CONCAT_FWD/BWD, TRANSPOSE, ADD_ROWS, SLICE_FWD/BWD (cuda_concat.cu) */
int cuda_chscale_init(cuda_op *op); /* CHSCALE_FWD/BWD (cuda_chscale.cu) */
int cuda_rope_init(cuda_op *op);    /* ROPE_FWD/BWD (cuda_rope.cu) */
int cuda_repeat_init(cuda_op *op);  /* REPEAT_FWD/BWD (cuda_repeat.cu) */
int cuda_seqmean_init(cuda_op *op); /* SEQMEAN_FWD/BWD (cuda_seqmean.cu) */
int cuda_gather_init(cuda_op *op);  /* GATHER_FWD/BWD (cuda_gather.cu) */
int cuda_prelu_init(cuda_op *op);   /* PRELU_FWD/BWD (cuda_prelu.cu) */
int cuda_gnorm_init(cuda_op *op);   /* GNORM_FWD/BWD (cuda_gnorm.cu) */
int cuda_simple_init(cuda_op *op);  /* everything else: our own kernels */
void cuda_dnn_fini(cuda_op *op);    /* destroys the cuDNN descriptors an op made */

#endif
