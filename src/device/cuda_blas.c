/* cuda_blas.c - MATMUL on cuBLAS: dst[M,N] (+)= op(src)[M,K] op(weights)[K,N]
 * (+ bias[N]).
 *
 * cuBLAS is column-major and our tensors row-major. A row-major [r, c]
 * buffer is the column-major [c, r] matrix, its transpose, so dst^T =
 * op(W)^T op(src)^T is one column-major SGEMM with weights as A and src as
 * B and no copies: m = N, n = M, k = K. A transposed operand is the same
 * buffer with the other leading dimension and op.
 *
 * Accumulation is beta = 1. The bias is broadcast into dst first (added to
 * it when accumulating), then the product is added with beta = 1: dst + b +
 * AB where the CPU has dst + (AB + b); the sums differ in rounding only.
 *
 * cuBLAS's workspace is the op's, from the arena: set before every call
 * (cublasSetWorkspace) to the op's aligned workspace, or to none under the
 * lean policy, so cuBLAS never draws on its own pool. The math mode is the
 * default, which keeps f32 products IEEE (no TF32).
 *
 * bf16 and f16 (mixed precision, as on the CPU): cublasGemmEx with 16-bit
 * operands, f32 accumulation (CUBLAS_COMPUTE_32F, tensor cores) and a dst in
 * the data's dtype, or in f32 for a parameter gradient (one that
 * accumulates, or mm.grad: device.h). A 16-bit dst with a bias gets the
 * bias rounded to 16 bits first, then the product added and rounded once
 * more: the CPU (oneDNN) rounds once, so the two may differ in the last bit
 * of a 16-bit value. */
#include "base/err.h"
#include "device/cuda.h"

static int run(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    cuda_device *dev = cuda_dev(op);
    int64_t M = d->u.mm.M, N = d->u.mm.N, K = d->u.mm.K;
    int ts = d->u.mm.trans_src, tw = d->u.mm.trans_weights, bias = d->u.mm.bias;
    const float one = 1.0f, zero = 0.0f;
    const float *beta = d->accumulate || bias ? &one : &zero;
    size_t blas_ws = dev->blas_ws;
    cudaDataType_t in = d->dtype == BFIT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    cudaDataType_t out = bfit_mm_dst_f32(d) ? CUDA_R_32F : in;
    cudaError_t e;

    if (!a->src || !a->weights || !a->dst || (bias && !a->bias))
        return bfit_fail(BFIT_EINVAL, "matmul: src, weights, dst%s are required", bias ? " and bias" : "");
    if (op->ws && !a->workspace)
        return bfit_fail(BFIT_EINVAL, "matmul: the workspace (%zu bytes, cuBLAS's) is required", op->ws);
    if (bias && (e = bk_bias_rows(dev->stream, bfit_mm_dst_f32(d) ? BK_F32 : (int)d->dtype, a->dst, a->bias, M, N,
                                  d->accumulate)) != cudaSuccess)
        return cuda_fail(e, "matmul bias");
    CUBLAS_TRY(cublasSetWorkspace(dev->blas, cuda_ws(op, a), blas_ws), "matmul: setting the cuBLAS workspace");
    if (d->dtype == BFIT_F32) {
        CUBLAS_TRY(cublasSgemm_64(dev->blas, tw ? CUBLAS_OP_T : CUBLAS_OP_N, ts ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                                  &one, a->weights, tw ? K : N, a->src, ts ? M : K, beta, a->dst, N),
                   "matmul (cublasSgemm)");
        return BFIT_OK;
    }
    CUBLAS_TRY(cublasGemmEx_64(dev->blas, tw ? CUBLAS_OP_T : CUBLAS_OP_N, ts ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                               &one, a->weights, in, tw ? K : N, a->src, in, ts ? M : K, beta, a->dst, out, N,
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "matmul (cublasGemmEx, 16-bit operands, f32 accumulation)");
    return BFIT_OK;
}

int cuda_matmul_init(cuda_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    cuda_device *dev = cuda_dev(op);

    if (d->u.mm.M < 1 || d->u.mm.N < 1 || d->u.mm.K < 1)
        return bfit_fail(BFIT_EINVAL, "matmul: sizes must be positive, got M=%lld N=%lld K=%lld",
                         (long long)d->u.mm.M, (long long)d->u.mm.N, (long long)d->u.mm.K);
    op->ws = dev->blas_ws ? dev->blas_ws + CUDA_WS_ALIGN : 0;
    op->saved = 0;
    op->run = run;
    return BFIT_OK;
}
