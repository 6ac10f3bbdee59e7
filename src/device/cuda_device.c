/* cuda_device.c - the CUDA backend: opening a GPU (stream, cuBLAS and cuDNN
 * handles), error conversion, the op life cycle and the device's table.
 * Memory and transfers are in cuda_mem.c; the op families in cuda_blas.c
 * (matmul), cuda_dnn.c (convolution, batch norm), cuda_attn.c (attention),
 * cuda_concat.c (concatenation, slices, transposition, broadcast add),
 * cuda_chscale.c (channel gates), cuda_prelu.c (PReLU), cuda_gnorm.c
 * (group normalisation) and cuda_simple.c (the rest of our own kernels,
 * cuda_*.cu).
 *
 * Nothing here allocates device memory: ops report the workspace they need
 * and get it from the caller (the arena), cuBLAS included (its workspace is
 * set to the op's before every call). The library's only GPU memory outside
 * the arena is what the CUDA context and the two library handles keep for
 * themselves. */
#include "base/err.h"
#include "device/cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(BK_F32 == (int)BFIT_F32 && BK_BF16 == (int)BFIT_BF16 && BK_F16 == (int)BFIT_F16,
               "the kernels' dtype numbers are bfit_dtype's");

/* ---- errors ------------------------------------------------------------------ */

/* Errors after which the context is unusable: every later call fails too. */
static int sticky(cudaError_t e)
{
    return e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure || e == cudaErrorHardwareStackError ||
           e == cudaErrorIllegalInstruction || e == cudaErrorMisalignedAddress ||
           e == cudaErrorInvalidAddressSpace || e == cudaErrorInvalidPc || e == cudaErrorAssert ||
           e == cudaErrorLaunchTimeout;
}

int cuda_fail(cudaError_t e, const char *what)
{
    /* read (and so clear) the error state; a sticky error stays regardless */
    (void)cudaGetLastError();
    if (e == cudaErrorMemoryAllocation)
        return bfit_fail(BFIT_ENOMEM, "cuda: out of device memory in %s", what);
    return bfit_fail(BFIT_EDEVICE, "cuda: %s failed: %s (%s)%s", what, cudaGetErrorString(e), cudaGetErrorName(e),
                     sticky(e) ? "; a kernel faulted, so this GPU context is unusable until the process restarts"
                               : "");
}

int cuda_blas_fail(cublasStatus_t s, const char *what)
{
    (void)cudaGetLastError();
    if (s == CUBLAS_STATUS_ALLOC_FAILED)
        return bfit_fail(BFIT_ENOMEM, "cuBLAS: out of memory in %s", what);
    return bfit_fail(BFIT_EDEVICE, "cuBLAS: %s failed: %s (%s)", what, cublasGetStatusString(s),
                     cublasGetStatusName(s));
}

int cuda_dnn_fail(cudnnStatus_t s, const char *what)
{
    char detail[256] = "";
    (void)cudaGetLastError();
    cudnnGetLastErrorString(detail, sizeof detail);
    if (s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED ||
        s == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED)
        return bfit_fail(BFIT_ENOMEM, "cuDNN: out of memory in %s", what);
    return bfit_fail(BFIT_EDEVICE, "cuDNN: %s failed: %s%s%s", what, cudnnGetErrorString(s), detail[0] ? ": " : "",
                     detail);
}

int cuda_enter(cuda_device *d, const char *what)
{
    CUDA_TRY(cudaSetDevice(d->index), what);
    return BFIT_OK;
}

void *cuda_ws(const cuda_op *op, const bfit_op_args *a)
{
    uintptr_t p = (uintptr_t)a->workspace;
    if (!op->ws || !p)
        return NULL;
    return (void *)((p + CUDA_WS_ALIGN - 1) & ~(uintptr_t)(CUDA_WS_ALIGN - 1));
}

/* ---- ops ------------------------------------------------------------------------ */

static int op_init(cuda_op *op)
{
    switch (op->base.desc.kind) {
    case BFIT_OP_MATMUL: return cuda_matmul_init(op);
    case BFIT_OP_CONV_FWD:
    case BFIT_OP_CONV_BWD_DATA:
    case BFIT_OP_CONV_BWD_WEIGHTS: return cuda_conv_init(op);
    case BFIT_OP_BNORM_FWD:
    case BFIT_OP_BNORM_BWD: return cuda_bnorm_init(op);
    case BFIT_OP_ATTN_FWD:
    case BFIT_OP_ATTN_BWD: return cuda_attn_init(op);
    case BFIT_OP_CONCAT_FWD:
    case BFIT_OP_CONCAT_BWD:
    case BFIT_OP_TRANSPOSE:
    case BFIT_OP_ADD_ROWS:
    case BFIT_OP_SLICE_FWD:
    case BFIT_OP_SLICE_BWD: return cuda_concat_init(op);
    case BFIT_OP_CHSCALE_FWD:
    case BFIT_OP_CHSCALE_BWD: return cuda_chscale_init(op);
    case BFIT_OP_PRELU_FWD:
    case BFIT_OP_PRELU_BWD: return cuda_prelu_init(op);
    case BFIT_OP_GNORM_FWD:
    case BFIT_OP_GNORM_BWD: return cuda_gnorm_init(op);
    case BFIT_OP_ROPE_FWD:
    case BFIT_OP_ROPE_BWD: return cuda_rope_init(op);
    case BFIT_OP_REPEAT_FWD:
    case BFIT_OP_REPEAT_BWD: return cuda_repeat_init(op);
    case BFIT_OP_SEQMEAN_FWD:
    case BFIT_OP_SEQMEAN_BWD: return cuda_seqmean_init(op);
    case BFIT_OP_GATHER_FWD:
    case BFIT_OP_GATHER_BWD: return cuda_gather_init(op);
    default: return cuda_simple_init(op);
    }
}

static void cuda_op_free(bfit_op *base)
{
    cuda_op *op = (cuda_op *)base;
    if (op->fini)
        op->fini(op);
    free(op);
}

static int cuda_supports(const bfit_device *base, bfit_op_kind k, bfit_dtype t, char *why, size_t n);

static int cuda_op_new(bfit_device *d, const bfit_op_desc *desc, bfit_op **out)
{
    cuda_op *op;
    int rc;

    char why[160];
    if (!cuda_supports(d, desc->kind, desc->dtype, why, sizeof why))
        return bfit_fail(BFIT_EINVAL, "%s: %s in %s: %s", ((cuda_device *)d)->name, cuda_kind_name(desc->kind),
                         bfit_dtype_name(desc->dtype), why);
    if ((rc = cuda_enter((cuda_device *)d, "op creation")) != BFIT_OK)
        return rc;
    op = calloc(1, sizeof *op);
    if (!op)
        return bfit_fail(BFIT_ENOMEM, "cuda: cannot allocate an op record");
    op->base.dev = d;
    op->base.desc = *desc;
    if ((rc = op_init(op)) != BFIT_OK) {
        cuda_op_free(&op->base);
        return rc;
    }
    *out = &op->base;
    return BFIT_OK;
}

static size_t cuda_op_workspace(const bfit_op *op) { return ((const cuda_op *)op)->ws; }
static size_t cuda_op_saved(const bfit_op *op) { return ((const cuda_op *)op)->saved; }

/* An op's launches return launch errors only; a kernel that faults is
 * found when the stream is next waited for. So each op's name is noted for
 * that message (cuda_fail_async), and the checking mode waits after every
 * op, so that a fault is reported under the op that made it. */
static int cuda_op_run(bfit_op *base, const bfit_op_args *a)
{
    cuda_op *op = (cuda_op *)base;
    cuda_device *d = (cuda_device *)base->dev;
    const char *name = cuda_kind_name(base->desc.kind);
    bfit_op_kind k = base->desc.kind;
    int nlist = k == BFIT_OP_CONCAT_FWD || k == BFIT_OP_CONCAT_BWD ? base->desc.u.concat.n : 0; /* srcs, dsts */
    cudaError_t e;
    int rc = cuda_enter(d, name);

    if (rc == BFIT_OK && d->check)
        rc = cuda_check_args(d, a, nlist, name);
    if (rc != BFIT_OK || (rc = op->run(op, a)) != BFIT_OK)
        return rc;
    d->queued[d->nqueued++ % 4] = name;
    if (d->check && (e = cudaStreamSynchronize(d->stream)) != cudaSuccess)
        return cuda_fail(e, name);
    if (d->check)
        d->nqueued = 0;
    return BFIT_OK;
}

int cuda_fail_async(cuda_device *d, cudaError_t e, const char *what)
{
    unsigned long n = d->nqueued, k = n < 4 ? n : 4;
    char last[160] = "";
    size_t len = 0;

    if (!sticky(e) || !n)
        return cuda_fail(e, what);
    (void)cudaGetLastError();
    for (unsigned long i = 0; i < k && len < sizeof last; i++)
        len += (size_t)snprintf(last + len, sizeof last - len, "%s%s", i ? ", " : "", d->queued[(n - k + i) % 4]);
    d->nqueued = 0;
    return bfit_fail(BFIT_EDEVICE, "cuda: a kernel faulted (%s: %s), found at %s: it is one of the %lu op(s) "
                                   "queued since the GPU was last waited for, the last of them %s; "
                                   "BFIT_DEVICE_CHECK=1 waits after every op and names the one; this GPU context is "
                                   "unusable until the process restarts",
                     cudaGetErrorName(e), cudaGetErrorString(e), what, n, last);
}

/* ---- the device ---------------------------------------------------------------- */

static void cuda_info(const bfit_device *base, bfit_device_info *out)
{
    const cuda_device *d = (const cuda_device *)base;
    out->name = d->name;
    out->detail = d->detail;
    out->threads = 0;
    out->cpus = 0;
    out->check = d->check;
    out->shared = 1;
    out->limited = 0;
    out->overhead = d->overhead;
    out->bf16_fast = d->cc_major >= 8; /* tensor cores take bf16 from Ampere on */
}

static void cuda_destroy(bfit_device *base)
{
    cuda_device *d = (cuda_device *)base;
    if (cudaSetDevice(d->index) == cudaSuccess && d->stream)
        cudaStreamSynchronize(d->stream);
    cuda_stage_fini(d);
    if (d->norm_part)
        cudaFree(d->norm_part);
    if (d->dnn)
        cudnnDestroy(d->dnn);
    if (d->blas)
        cublasDestroy(d->blas);
    if (d->stream)
        cudaStreamDestroy(d->stream);
    (void)cudaGetLastError();
    free(d);
}

static int cuda_sample(bfit_device *base, bfit_device_sample *out)
{
    cuda_device *d = (cuda_device *)base;
    return cuda_nvml_sample(d->index, out);
}

/* The kinds op_init makes: listed, so that a kind added to the device
 * interface later is refused until the GPU has it. */
static int kind_made(bfit_op_kind k)
{
    switch (k) {
    case BFIT_OP_MATMUL:
    case BFIT_OP_CONV_FWD:
    case BFIT_OP_CONV_BWD_DATA:
    case BFIT_OP_CONV_BWD_WEIGHTS:
    case BFIT_OP_POOL_FWD:
    case BFIT_OP_POOL_BWD:
    case BFIT_OP_BNORM_FWD:
    case BFIT_OP_BNORM_BWD:
    case BFIT_OP_LNORM_FWD:
    case BFIT_OP_LNORM_BWD:
    case BFIT_OP_ELTWISE_FWD:
    case BFIT_OP_ELTWISE_BWD:
    case BFIT_OP_REDUCE_ROWS:
    case BFIT_OP_ADD:
    case BFIT_OP_DROPOUT_FWD:
    case BFIT_OP_DROPOUT_BWD:
    case BFIT_OP_XENT_FWD:
    case BFIT_OP_XENT_BWD:
    case BFIT_OP_SCALE:
    case BFIT_OP_NORMS:
    case BFIT_OP_SGD:
    case BFIT_OP_ADAMW:
    case BFIT_OP_CAST:
    case BFIT_OP_EMBED_FWD:
    case BFIT_OP_EMBED_BWD:
    case BFIT_OP_ATTN_FWD:
    case BFIT_OP_ATTN_BWD:
    case BFIT_OP_CONCAT_FWD:
    case BFIT_OP_CONCAT_BWD:
    case BFIT_OP_TRANSPOSE:
    case BFIT_OP_ADD_ROWS:
    case BFIT_OP_SLICE_FWD:
    case BFIT_OP_SLICE_BWD:
    case BFIT_OP_CHSCALE_FWD:
    case BFIT_OP_CHSCALE_BWD:
    case BFIT_OP_PRELU_FWD:
    case BFIT_OP_PRELU_BWD:
    case BFIT_OP_GNORM_FWD:
    case BFIT_OP_GNORM_BWD:
    case BFIT_OP_ROPE_FWD:
    case BFIT_OP_ROPE_BWD:
    case BFIT_OP_REPEAT_FWD:
    case BFIT_OP_REPEAT_BWD:
    case BFIT_OP_SEQMEAN_FWD:
    case BFIT_OP_SEQMEAN_BWD:
    case BFIT_OP_GATHER_FWD:
    case BFIT_OP_GATHER_BWD: return 1;
    default: return 0;
    }
}

/* Every kind above in f32; in bf16 and f16 from compute capability 8.0
 * (Ampere), where cuBLAS and cuDNN compute bf16 with f32 accumulation. The
 * updates, norms and scaling touch only f32 parameters (device.h). */
static int cuda_supports(const bfit_device *base, bfit_op_kind k, bfit_dtype t, char *why, size_t n)
{
    const cuda_device *d = (const cuda_device *)base;
    if (!kind_made(k)) {
        snprintf(why, n, "not implemented on the GPU");
        return 0;
    }
    if (t == BFIT_F32)
        return 1;
    if (t != BFIT_BF16 && t != BFIT_F16) {
        snprintf(why, n, "ops compute in f32, bf16 or f16");
        return 0;
    }
    if (k == BFIT_OP_SCALE || k == BFIT_OP_NORMS || k == BFIT_OP_SGD || k == BFIT_OP_ADAMW) {
        snprintf(why, n, "parameters and their gradients are f32");
        return 0;
    }
    if (d->cc_major < 8) {
        snprintf(why, n, "%s needs compute capability 8.0 (Ampere) or later; this GPU is %d.%d",
                 t == BFIT_BF16 ? "bf16" : "f16", d->cc_major, d->cc_minor);
        return 0;
    }
    return 1;
}

static const bfit_device_vt cuda_vt = {
    .name = "cuda",
    .mem_info = cuda_mem_info,
    .upload = cuda_upload,
    .download = cuda_download,
    .copy = cuda_copy,
    .fill = cuda_fill,
    .sync = cuda_sync,
    .op_new = cuda_op_new,
    .op_workspace = cuda_op_workspace,
    .op_saved = cuda_op_saved,
    .op_run = cuda_op_run,
    .op_free = cuda_op_free,
    .info = cuda_info,
    .destroy = cuda_destroy,
    .coll_open = cuda_coll_open,
    .coll_sum = cuda_coll_sum,
    .coll_bcast = cuda_coll_bcast,
    .coll_close = cuda_coll_close,
    .supports = cuda_supports,
    .sample = cuda_sample,
};

/* The GPU exists, and this build has code it can run. */
static int find_gpu(int index, struct cudaDeviceProp *prop)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return bfit_fail(BFIT_EDEVICE, "cuda: no usable GPU: %s (%s)%s", cudaGetErrorString(e), cudaGetErrorName(e),
                         e == cudaErrorInsufficientDriver ? ": no NVIDIA driver is loaded, or one older than this "
                                                            "build's CUDA runtime"
                                                          : "");
    }
    if (n == 0)
        return bfit_fail(BFIT_EDEVICE, "cuda: no GPU found");
    if (index >= n)
        return bfit_fail(BFIT_EDEVICE, "cuda:%d: there %s only %d GPU%s (cuda:0 to cuda:%d)", index,
                         n == 1 ? "is" : "are", n, n == 1 ? "" : "s", n - 1);
    CUDA_TRY(cudaSetDevice(index), "selecting the GPU");
    CUDA_TRY(cudaGetDeviceProperties(prop, index), "reading the GPU's properties");
    if ((e = bk_probe()) != cudaSuccess) {
        (void)cudaGetLastError();
        return bfit_fail(BFIT_EDEVICE, "cuda:%d: %s (compute capability %d.%d) cannot run this build's kernels (%s): "
                                       "rebuild with CMAKE_CUDA_ARCHITECTURES including %d%d",
                         index, prop->name, prop->major, prop->minor, cudaGetErrorName(e), prop->major, prop->minor);
    }
    return BFIT_OK;
}

/* Stream and library handles; the math stays IEEE f32 (no TF32) so results
 * match the CPU's: cuBLAS's default math mode does not use TF32 for f32
 * GEMMs, and convolutions are set to CUDNN_FMA_MATH (cuda_dnn.c). */
static int make_handles(cuda_device *d)
{
    size_t ver = cudnnGetVersion();
    CUDA_TRY(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking), "creating a stream");
    CUBLAS_TRY(cublasCreate(&d->blas), "creating the cuBLAS handle");
    /* the stream first: setting it resets the workspace to cuBLAS's own */
    CUBLAS_TRY(cublasSetStream(d->blas, d->stream), "setting the cuBLAS stream");
    CUBLAS_TRY(cublasSetMathMode(d->blas, CUBLAS_DEFAULT_MATH), "setting the cuBLAS math mode");
    if (ver / 10000 != CUDNN_MAJOR)
        return bfit_fail(BFIT_EDEVICE, "cuDNN: the library loaded is version %zu, this batchfit was built for %d.x",
                         ver, CUDNN_MAJOR);
    CUDNN_TRY(cudnnCreate(&d->dnn), "creating the cuDNN handle");
    CUDNN_TRY(cudnnSetStream(d->dnn, d->stream), "setting the cuDNN stream");
    /* NORMS' partial sums: a few KiB of the device's own, outside the arena
     * (counted in the overhead measured below) */
    CUDA_TRY(cudaMalloc((void **)&d->norm_part, BK_NORM_PART_BYTES), "allocating the norms' partial sums");
    cuda_stage_init(d);
    return BFIT_OK;
}

/* A tiny convolution forward and backward in dtype t on the scratch x
 * (room for 2 KiB of each tensor and 64 KiB of workspace). */
static cudnnStatus_t warm_conv(cuda_device *d, cudnnDataType_t t, char *x)
{
    cudnnTensorDescriptor_t tx = NULL, ty = NULL;
    cudnnFilterDescriptor_t tw = NULL;
    cudnnConvolutionDescriptor_t cv = NULL;
    const float one = 1.0f, zero = 0.0f;
    cudnnStatus_t st;

    st = cudnnCreateTensorDescriptor(&tx);
    if (st == CUDNN_STATUS_SUCCESS && (st = cudnnCreateTensorDescriptor(&ty)) == CUDNN_STATUS_SUCCESS &&
        (st = cudnnCreateFilterDescriptor(&tw)) == CUDNN_STATUS_SUCCESS &&
        (st = cudnnCreateConvolutionDescriptor(&cv)) == CUDNN_STATUS_SUCCESS &&
        (st = cudnnSetTensor4dDescriptor(tx, CUDNN_TENSOR_NCHW, t, 2, 8, 8, 8)) == CUDNN_STATUS_SUCCESS &&
        (st = cudnnSetTensor4dDescriptor(ty, CUDNN_TENSOR_NCHW, t, 2, 8, 8, 8)) == CUDNN_STATUS_SUCCESS &&
        (st = cudnnSetFilter4dDescriptor(tw, t, CUDNN_TENSOR_NCHW, 8, 8, 3, 3)) == CUDNN_STATUS_SUCCESS &&
        (st = cudnnSetConvolution2dDescriptor(cv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT)) ==
            CUDNN_STATUS_SUCCESS &&
        (st = cudnnSetConvolutionMathType(cv, t == CUDNN_DATA_FLOAT ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH)) ==
            CUDNN_STATUS_SUCCESS)
        st = cudnnConvolutionForward(d->dnn, &one, tx, x, tw, x + 8192, cv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                     x + 65536, 65536, &zero, ty, x + 16384);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnConvolutionBackwardFilter(d->dnn, &one, tx, x, ty, x + 16384, cv,
                                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, x + 65536, 65536, &zero, tw,
                                            x + 8192);
    if (cv)
        cudnnDestroyConvolutionDescriptor(cv);
    if (tw)
        cudnnDestroyFilterDescriptor(tw);
    if (ty)
        cudnnDestroyTensorDescriptor(ty);
    if (tx)
        cudnnDestroyTensorDescriptor(tx);
    return st;
}

/* Warm-up before the memory is measured: the CUDA runtime loads kernel
 * modules lazily and cuBLAS and cuDNN load their kernels (and cuDNN may
 * compile some) at their first call, each taking device memory outside the
 * arena. A kernel of ours, a small GEMM and a small convolution in f32 (and
 * bf16 where the GPU has it) load the common ones now, so the overhead and
 * the free memory read at opening include them; what loads later (kernels
 * for other shapes) is seen by the run's per-step reading of the free
 * memory. Nothing here is an error of the device: a call that fails leaves
 * its kernels to load when the real op runs (which then reports its own
 * error). The scratch is freed before returning. */
static void warm_up(cuda_device *d)
{
    const float one = 1.0f, zero = 0.0f;
    char *x = NULL;

    if (cudaMalloc((void **)&x, 131072) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    if (cudaMemsetAsync(x, 0, 131072, d->stream) == cudaSuccess)
        (void)bk_scale(d->stream, (float *)x, 1.0f, 64);
    if (cublasSetWorkspace(d->blas, NULL, 0) == CUBLAS_STATUS_SUCCESS) {
        (void)cublasSgemm(d->blas, CUBLAS_OP_N, CUBLAS_OP_N, 16, 16, 16, &one, (float *)x, 16, (float *)x, 16, &zero,
                          (float *)(x + 4096), 16);
        if (d->cc_major >= 8)
            (void)cublasGemmEx(d->blas, CUBLAS_OP_N, CUBLAS_OP_N, 16, 16, 16, &one, x, CUDA_R_16BF, 16, x,
                               CUDA_R_16BF, 16, &zero, x + 4096, CUDA_R_16BF, 16, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT);
    }
    (void)warm_conv(d, CUDNN_DATA_FLOAT, x);
    if (d->cc_major >= 8)
        (void)warm_conv(d, CUDNN_DATA_BFLOAT16, x);
    (void)cudaStreamSynchronize(d->stream);
    cudaFree(x);
    (void)cudaGetLastError();
}

static void describe(cuda_device *d, const struct cudaDeviceProp *p)
{
    int drv = 0, rt = 0;
    size_t v = cudnnGetVersion();
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    snprintf(d->name, sizeof d->name, "cuda:%d", d->index);
    snprintf(d->detail, sizeof d->detail,
             "%.120s, %.1f GiB, compute %d.%d, %d SMs; driver %d.%d, runtime %d.%d, cuDNN %zu.%zu.%zu; %s%s", p->name,
             (double)p->totalGlobalMem / (1024.0 * 1024 * 1024), p->major, p->minor, p->multiProcessorCount,
             drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10, v / 10000, v % 10000 / 100, v % 100,
             d->cfg.policy == BFIT_CUDA_LEAN ? "lean" : "fastest",
             d->cfg.deterministic ? ", deterministic" : "");
    if (d->overhead) {
        size_t k = strlen(d->detail);
        snprintf(d->detail + k, sizeof d->detail - k, "; context, handles and loaded kernels %.1f MiB (NVML)",
                 (double)d->overhead / (1024.0 * 1024));
    }
}

static int check_from_env(void)
{
    const char *e = getenv("BFIT_DEVICE_CHECK");
    return e && *e && strcmp(e, "0") != 0;
}

int bfit_device_cuda_new_cfg(int index, const bfit_cuda_cfg *cfg, bfit_device **out)
{
    bfit_cuda_cfg c = cfg ? *cfg : bfit_cuda_cfg_default();
    struct cudaDeviceProp prop;
    cuda_device *d;
    int rc;

    *out = NULL;
    if (index < 0)
        return bfit_fail(BFIT_EINVAL, "cuda: GPU index must be >= 0, got %d", index);
    if (c.policy != BFIT_CUDA_FASTEST && c.policy != BFIT_CUDA_LEAN)
        return bfit_fail(BFIT_EINVAL, "cuda: unknown workspace policy %d (fastest or lean)", (int)c.policy);
    if (c.conv_chunk < 0)
        return bfit_fail(BFIT_EINVAL, "cuda: conv_chunk %d: give 0 (chunks where they save workspace) or a size",
                         c.conv_chunk);
    if ((rc = find_gpu(index, &prop)) != BFIT_OK)
        return rc;
    d = calloc(1, sizeof *d);
    if (!d)
        return bfit_fail(BFIT_ENOMEM, "cuda: cannot allocate the device");
    d->base.vt = &cuda_vt;
    d->index = index;
    d->cfg = c;
    d->check = c.check < 0 ? check_from_env() : c.check != 0;
    /* cuBLAS's recommended workspace: 32 MiB from Hopper on, 4 MiB before */
    d->blas_ws = c.policy == BFIT_CUDA_LEAN ? 0 : (size_t)(prop.major >= 9 ? 32 : 4) << 20;
    cuda_blocks_init(d);
    d->cc_major = prop.major;
    d->cc_minor = prop.minor;
    if ((rc = make_handles(d)) != BFIT_OK) {
        cuda_destroy(&d->base);
        return bfit_fail_prefix(rc, "cuda:%d: ", index);
    }
    warm_up(d);
    /* nothing of the arena yet: all the process holds is the context, the
     * handles and what the warm-up loaded (0 where NVML cannot say) */
    if (cuda_process_bytes(index, &d->overhead) != BFIT_OK)
        d->overhead = 0;
    describe(d, &prop);
    *out = &d->base;
    return BFIT_OK;
}
