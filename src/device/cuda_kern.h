/* cuda_kern.h - the CUDA backend's own kernels, as plain C launchers.
 *
 * Shared by the C side (cuda_*.c, which checks arguments and turns errors
 * into ours) and the .cu files that implement them, so it uses only C types
 * and the runtime API. Every launcher queues work on stream s and returns
 * the launch status (cudaGetLastError); results are ready when the stream
 * is. Sizes are element counts. The formulas are the CPU device's (cpu_*.c):
 * each launcher says where its rounding or order differs. Reductions are
 * deterministic: partial sums over fixed chunks in a fixed tree order,
 * whatever the GPU, so a run repeats bit for bit.
 */
#ifndef BFIT_CUDA_KERN_H
#define BFIT_CUDA_KERN_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- cuda_elt.cu: one thread per element ---------------------------------- */

/* A kernel of this build can run on the current GPU (an architecture the
 * binary has code for). */
cudaError_t bk_probe(void);

/* alg: bfit_eltwise_alg (relu, gelu erf, gelu tanh). bwd: dx = f'(x) dy. */
cudaError_t bk_eltwise_fwd(cudaStream_t s, int alg, const float *x, float *y, int64_t n);
cudaError_t bk_eltwise_bwd(cudaStream_t s, int alg, const float *x, const float *dy, float *dx, int64_t n);
/* y = a + b (y may alias either) */
cudaError_t bk_add(cudaStream_t s, const float *a, const float *b, float *y, int64_t n);
cudaError_t bk_scale(cudaStream_t s, float *x, float alpha, int64_t n);
/* keep i when (mix64(seed_mixed + i) >> 32) >= thresh: the CPU's mask bit for
 * bit, one bit per element in 64-bit words ((n + 63) / 64 * 8 bytes) */
cudaError_t bk_dropout_fwd(cudaStream_t s, const float *x, float *y, void *mask, int64_t n, uint64_t seed_mixed,
                           uint64_t thresh, float scale);
cudaError_t bk_dropout_bwd(cudaStream_t s, const float *dy, const void *mask, float *dx, int64_t n, float scale);
/* relu writing its sign bits (laid out as dropout's mask); backward from them */
cudaError_t bk_relu_bits_fwd(cudaStream_t s, const float *x, float *y, void *bits, int64_t n);
cudaError_t bk_relu_bits_bwd(cudaStream_t s, const void *bits, const float *dy, float *dx, int64_t n);
/* dx = (p - onehot(label)) * scale; a label outside [0, N) subtracts nothing */
cudaError_t bk_xent_bwd(cudaStream_t s, const float *p, const int32_t *labels, float *dx, int64_t M, int64_t N,
                        float scale);
/* dst[i, j] = (acc ? dst[i, j] : 0) + bias[j] over [M, N] */
cudaError_t bk_bias_rows(cudaStream_t s, float *dst, const float *bias, int64_t M, int64_t N, int acc);
/* batch norm: inv[k] = 1 / sqrt(var[k] + eps) */
cudaError_t bk_invstd(cudaStream_t s, const float *var, float *inv, int64_t c, float eps);

/* Optimizer updates: the same float operations as cpu_optim.c, with
 * explicit rounding intrinsics so nvcc fuses nothing the CPU does not. */
typedef struct bk_sgd_hyper {
    float lr_neg, wd, mom, damp1;
    int first, nesterov;
} bk_sgd_hyper;
cudaError_t bk_sgd(cudaStream_t s, float *p, const float *g, float *buf, int64_t n, bk_sgd_hyper h);
typedef struct bk_adamw_hyper {
    float dm, b1, c1, b2, c2, step_neg, bc2_sqrt, eps;
} bk_adamw_hyper;
cudaError_t bk_adamw(cudaStream_t s, float *p, const float *g, float *m, float *v, int64_t n, bk_adamw_hyper h);

/* ---- cuda_red.cu: reductions ----------------------------------------------- */

/* REDUCE_ROWS: dst[N] (+)= sum over rows of src[M, N], in double over fixed
 * chunks of rows; ws holds the chunks' partial sums. */
size_t bk_reduce_rows_ws(int64_t M, int64_t N);
cudaError_t bk_reduce_rows(cudaStream_t s, const float *src, float *dst, int64_t M, int64_t N, int acc, void *ws);

/* Layer norm over the cols of [rows, cols]; statistics in double. */
cudaError_t bk_lnorm_fwd(cudaStream_t s, const float *x, float *y, const float *scale, const float *shift,
                         float *mean, float *var, int64_t rows, int64_t cols, float eps);
/* dx may alias dy (the parameter gradients are taken first). */
size_t bk_lnorm_bwd_ws(int64_t rows, int64_t cols);
cudaError_t bk_lnorm_bwd(cudaStream_t s, const float *x, const float *mean, const float *var, const float *dy,
                         const float *scale, float *dx, float *dscale, float *dshift, int64_t rows, int64_t cols,
                         float eps, int acc, void *ws);

/* Softmax rows of x[M, N] into p; with labels, stats[0] += sum of
 * -log p[label] and stats[1] += rows whose first arg-max is the label, via
 * per-row results in ws summed by one block (a label outside [0, N) makes
 * the loss NaN). */
size_t bk_xent_fwd_ws(int64_t M);
cudaError_t bk_xent_fwd(cudaStream_t s, const float *x, float *p, const int32_t *labels, double *stats, int64_t M,
                        int64_t N, void *ws);

/* NORMS: stats[0] = sum g^2; with prev: stats[1] = sum (g - prev)^2 and
 * prev = g. One block of fixed size: no workspace, a fixed order. */
cudaError_t bk_norms(cudaStream_t s, const float *g, float *prev, double *stats, int64_t n);

/* Batch norm over the channels of [n, c, hw]: the batch mean and biased
 * variance (two passes, double), and with rmean/rvar the running statistics
 * moved as cpu_bnorm.c moves them. */
cudaError_t bk_bn_stats(cudaStream_t s, const float *x, float *mean, float *var, float *rmean, float *rvar,
                        int64_t n, int64_t c, int64_t hw, float momentum);
/* x = mean + (y - shift) / scale * sqrt(var + eps) (x = mean where scale = 0):
 * batch norm's input back from its output */
cudaError_t bk_bn_unnorm(cudaStream_t s, const float *y, const float *scale, const float *shift, const float *mean,
                         const float *var, float *x, int64_t n, int64_t c, int64_t hw, float eps);
/* dscale (+)= sum dy (x - mean) / sqrt(var + eps), dshift (+)= sum dy */
cudaError_t bk_bn_param_grads(cudaStream_t s, const float *x, const float *dy, const float *mean, const float *var,
                              float *dscale, float *dshift, int64_t n, int64_t c, int64_t hw, float eps, int acc);

/* ---- cuda_pool.cu ----------------------------------------------------------- */

typedef struct bk_pool {
    int64_t n, c, ih, iw, oh, ow, kh, kw, sh, sw, ph, pw;
} bk_pool;
/* max: y the window maximum (the first on ties), idx (when not NULL) its
 * position in the input plane; average: the window sum / (kh kw). */
cudaError_t bk_pool_fwd(cudaStream_t s, bk_pool g, int max, const float *x, float *y, int32_t *idx);
/* one thread per input element gathers from the windows that hold it */
cudaError_t bk_pool_bwd(cudaStream_t s, bk_pool g, int max, const float *dy, const int32_t *idx, float *dx);

#ifdef __cplusplus
}
#endif

#endif
