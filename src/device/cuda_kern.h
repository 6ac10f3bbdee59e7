/* cuda_kern.h - the CUDA backend's own kernels, as plain C launchers.
 *
 * Shared by the C side (cuda_*.c, which checks arguments and turns errors
 * into ours) and the .cu files that implement them, so it uses only C types
 * and the runtime API. Every launcher queues work on stream s and returns
 * the launch status (cudaGetLastError); results are ready when the stream
 * is. Sizes are element counts, indices 64-bit. The formulas are the CPU
 * device's (cpu_*.c): each launcher says where its rounding or order
 * differs. Reductions are deterministic: partial sums over fixed chunks in a
 * fixed tree order, whatever the GPU, so a run repeats bit for bit.
 *
 * dt is the dtype of the data (BK_F32, BK_BF16, BK_F16: bfit_dtype's
 * values); pointers typed float are f32 whatever dt (biases, statistics,
 * parameter gradients, probabilities), as device.h lays the op arguments
 * out. 16-bit data is computed on in f32 and rounded once when stored.
 */
#ifndef BFIT_CUDA_KERN_H
#define BFIT_CUDA_KERN_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { BK_F32 = 0, BK_BF16 = 1, BK_F16 = 2 }; /* bfit_dtype's values (checked in cuda_device.c) */

/* ---- cuda_elt.cu: one thread per element ---------------------------------- */

/* A kernel of this build can run on the current GPU (an architecture the
 * binary has code for). */
cudaError_t bk_probe(void);

/* alg: bfit_eltwise_alg (cuda_core.h's bk_act); lo, hi: clip's bounds.
 * bwd: dx = f'(x) dy. */
cudaError_t bk_eltwise_fwd(cudaStream_t s, int dt, int alg, float lo, float hi, const void *x, void *y, int64_t n);
cudaError_t bk_eltwise_bwd(cudaStream_t s, int dt, int alg, float lo, float hi, const void *x, const void *dy,
                           void *dx, int64_t n);
/* y = a + b (y may alias either) */
cudaError_t bk_add(cudaStream_t s, int dt, const void *a, const void *b, void *y, int64_t n);
cudaError_t bk_scale(cudaStream_t s, float *x, float alpha, int64_t n);
/* keep i when (mix64(seed_mixed + i) >> 32) >= thresh: the CPU's mask bit for
 * bit, one bit per element in 64-bit words ((n + 63) / 64 * 8 bytes) */
cudaError_t bk_dropout_fwd(cudaStream_t s, int dt, const void *x, void *y, void *mask, int64_t n,
                           uint64_t seed_mixed, uint64_t thresh, float scale);
cudaError_t bk_dropout_bwd(cudaStream_t s, int dt, const void *dy, const void *mask, void *dx, int64_t n,
                           float scale);
/* relu writing its sign bits (laid out as dropout's mask); backward from them */
cudaError_t bk_relu_bits_fwd(cudaStream_t s, int dt, const void *x, void *y, void *bits, int64_t n);
cudaError_t bk_relu_bits_bwd(cudaStream_t s, int dt, const void *bits, const void *dy, void *dx, int64_t n);
/* dx = (p - onehot(label)) * scale; a negative label (padding) gives the
 * row no gradient, one at N or above subtracts nothing */
cudaError_t bk_xent_bwd(cudaStream_t s, int dt, const float *p, const int32_t *labels, void *dx, int64_t M,
                        int64_t N, float scale);
/* dst[i, j] = (acc ? dst[i, j] : 0) + bias[j] over [M, N], dst of dtype dt */
cudaError_t bk_bias_rows(cudaStream_t s, int dt, void *dst, const float *bias, int64_t M, int64_t N, int acc);
/* y[b, k, p] += bias[k] over [n, c, hw] (a 16-bit convolution's bias) */
cudaError_t bk_bias_chan(cudaStream_t s, int dt, void *y, const float *bias, int64_t n, int64_t c, int64_t hw);
/* y (+)= x, x of dtype dt, y f32: a 16-bit gradient into its f32 one */
cudaError_t bk_to_f32(cudaStream_t s, int dt, const void *x, float *y, int64_t n, int acc);
/* y (dtype to) = x (dtype from), rounded to nearest even */
cudaError_t bk_cast(cudaStream_t s, int from, int to, const void *x, void *y, int64_t n);
/* batch norm: inv[k] = 1 / sqrt(var[k] + eps) */
cudaError_t bk_invstd(cudaStream_t s, const float *var, float *inv, int64_t c, float eps);
/* batch norm with given statistics: y = scale (x - mean) / sqrt(var + eps) + shift */
cudaError_t bk_bn_fwd(cudaStream_t s, int dt, const void *x, void *y, const float *scale, const float *shift,
                      const float *mean, const float *var, int64_t n, int64_t c, int64_t hw, float eps);
/* batch norm's input gradient in training, from sums[2c] (bk_bn_param_grads:
 * per channel sum dy, then sum dy x^): dx = scale rstd (dy - sum dy / cnt -
 * x^ sum dy x^ / cnt); dx may be dy. With shift, x is the forward's output
 * and x^ = (x - shift) / scale (0 where scale is 0), so the input need not
 * be kept or recovered. */
cudaError_t bk_bn_dx(cudaStream_t s, int dt, const void *x, const void *dy, const float *scale, const float *shift,
                     const float *mean, const float *var, const double *sums, void *dx, int64_t n, int64_t c,
                     int64_t hw, float eps);

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
cudaError_t bk_reduce_rows(cudaStream_t s, int dt, const void *src, float *dst, int64_t M, int64_t N, int acc,
                           void *ws);

/* Layer norm over the cols of [rows, cols]; statistics in double. rms: no
 * mean (written 0; var the mean square) and no shift: RMSNorm. goff is
 * added to every scale (Gemma's 1 + w). */
cudaError_t bk_lnorm_fwd(cudaStream_t s, int dt, const void *x, void *y, const float *scale, const float *shift,
                         float *mean, float *var, int64_t rows, int64_t cols, float eps, int rms, float goff);
/* dx may alias dy (the parameter gradients are taken first). */
size_t bk_lnorm_bwd_ws(int64_t rows, int64_t cols);
cudaError_t bk_lnorm_bwd(cudaStream_t s, int dt, const void *x, const float *mean, const float *var, const void *dy,
                         const float *scale, void *dx, float *dscale, float *dshift, int64_t rows, int64_t cols,
                         float eps, int rms, float goff, int acc, void *ws);

/* Softmax rows of x[M, N] into p (f32); with labels, stats[0] += sum of
 * -log p[label] and stats[1] += rows whose first arg-max is the label, via
 * per-row results in ws summed by one block. A negative label (padding)
 * adds nothing; one at N or above makes the loss NaN. */
size_t bk_xent_fwd_ws(int64_t M);
cudaError_t bk_xent_fwd(cudaStream_t s, int dt, const void *x, float *p, const int32_t *labels, double *stats,
                        int64_t M, int64_t N, void *ws);

/* NORMS: stats[0] = sum g^2; with prev: stats[1] = sum (g - prev)^2 and
 * prev = g. Blocks over fixed chunks (their number set by n alone), their
 * partial sums added in block order by a second kernel: deterministic. The
 * partial sums go to part (BK_NORM_PART_BYTES of the device's own: the op
 * has no workspace), which the device's one stream keeps from being shared. */
#define BK_NORM_BLOCKS 256
#define BK_NORM_PART_BYTES (2 * BK_NORM_BLOCKS * sizeof(double))
cudaError_t bk_norms(cudaStream_t s, const float *g, float *prev, double *stats, int64_t n, double *part);

/* Batch norm's sums run over bk_bn_segs(c) segments of the batch per
 * channel, a block each, so that a layer of few channels still fills the
 * GPU; the segments' partial sums go to a workspace of bk_bn_part_bytes(c),
 * the same at any batch. A segment is indexed in 32 bits: bk_bn_fits says
 * whether [n, c, hw] can be (any tensor that fits in a GPU's memory can). */
static inline int64_t bk_bn_segs(int64_t c) { return (1024 + c - 1) / c; }
static inline size_t bk_bn_part_bytes(int64_t c) { return (size_t)(c * bk_bn_segs(c)) * 2 * sizeof(double); }
static inline int bk_bn_fits(int64_t n, int64_t c, int64_t hw)
{
    return hw <= 0x7fffffff && (n + bk_bn_segs(c) - 1) / bk_bn_segs(c) * hw <= 0x7fffffff;
}

/* Batch norm over the channels of [n, c, hw]: the batch mean and biased
 * variance (shifted sums in double), and with rmean/rvar the running
 * statistics moved as cpu_bnorm.c moves them (PyTorch's: the unbiased
 * variance, var n/(n-1), into running_var). part: bk_bn_part_bytes(c). */
cudaError_t bk_bn_stats(cudaStream_t s, int dt, const void *x, float *mean, float *var, float *rmean, float *rvar,
                        int64_t n, int64_t c, int64_t hw, float momentum, double *part);
/* dscale (+)= sum dy x^, dshift (+)= sum dy, with x^ = (x - mean) /
 * sqrt(var + eps), or with shift (x the forward's output) x^ = (x - shift)
 * / scale; each NULL to skip; with sums (NULL: none), the two sums of this
 * call into sums[0..c) (sum dy) and sums[c..2c) (sum dy x^), for bk_bn_dx.
 * part: bk_bn_part_bytes(c), required. */
cudaError_t bk_bn_param_grads(cudaStream_t s, int dt, const void *x, const void *dy, const float *mean,
                              const float *var, const float *scale, const float *shift, float *dscale, float *dshift,
                              double *sums, int64_t n, int64_t c, int64_t hw, float eps, int acc, double *part);
/* db[k] (+)= sum of dy over channel k of [n, c, hw] (a convolution's bias) */
cudaError_t bk_chan_sum(cudaStream_t s, int dt, const void *dy, float *db, int64_t n, int64_t c, int64_t hw, int acc);

/* ---- cuda_pool.cu ----------------------------------------------------------- */

typedef struct bk_pool {
    int64_t n, c, ih, iw, oh, ow, kh, kw, sh, sw, ph, pw;
} bk_pool;
/* max: y the window maximum (the first on ties), idx (when not NULL) its
 * position in the input plane; average: the window sum / (kh kw). */
cudaError_t bk_pool_fwd(cudaStream_t s, int dt, bk_pool g, int max, const void *x, void *y, int32_t *idx);
/* one thread per input element gathers from the windows that hold it */
cudaError_t bk_pool_bwd(cudaStream_t s, int dt, bk_pool g, int max, const void *dy, const int32_t *idx, void *dx);

/* ---- cuda_attn.cu: embeddings and attention (cuda_core.h's per-thread work) --- */

#include "device/cuda_core.h"

/* EMBED_FWD: one thread per output element. EMBED_BWD: the gradients of
 * the tables added in row order (no atomics), so they are the CPU's bit for
 * bit. */
cudaError_t bk_embed_fwd(cudaStream_t s, const bk_embed *e, const int32_t *ids, const float *tok, const float *pos,
                         const float *type, void *y);
cudaError_t bk_embed_bwd(cudaStream_t s, const bk_embed *e, const int32_t *ids, const void *dy, float *dtok,
                         float *dpos, float *dtype);
/* Attention's kernels between its cuBLAS products (cuda_attn.c): the
 * head-major f32 copy of qkv (qkv 1: [n H, 3, T, hs]) or of y, dy (qkv 0:
 * [n H, T, hs]) made from the op's buffer, and back; then on the scores of
 * lanes g0 .. g0 + lanes - 1 ([lanes, T, T] f32), one warp a row: softmax in
 * place (kept: the probabilities also in the data's dtype, lse: the rows'
 * log-sum-exp [n H, T]; either NULL), P
 * again from what the forward kept, and dP into dS given P. */
cudaError_t bk_attn_gather(cudaStream_t s, const bk_attn *a, const void *src, float *dst, int qkv);
cudaError_t bk_attn_scatter(cudaStream_t s, const bk_attn *a, const float *src, void *dst, int qkv);
cudaError_t bk_attn_softmax(cudaStream_t s, const bk_attn *a, const int32_t *lens, float *sc, int64_t g0,
                            int64_t lanes, void *kept, float *lse);
cudaError_t bk_attn_p_again(cudaStream_t s, const bk_attn *a, const int32_t *lens, const void *saved, float *p,
                            int64_t g0, int64_t lanes);
cudaError_t bk_attn_ds(cudaStream_t s, const bk_attn *a, const int32_t *lens, const float *p, float *dp, int64_t g0,
                       int64_t lanes);
/* dropout's mask on a group's [lanes, T, T] matrix m, in place (bk_attn_drop_el) */
cudaError_t bk_attn_drop(cudaStream_t s, const bk_attn *a, const int32_t *lens, float *m, int64_t g0, int64_t lanes);

/* ---- cuda_concat.cu: copies between rows and columns (cuda_core.h's) ------------- */

/* The copy c (bk_copy2d) from src to dst: the elements' bits, or with add
 * dst += src in f32 rounded once (a gradient another consumer wrote
 * first). The source and the destination do not overlap. */
cudaError_t bk_copy2d_run(cudaStream_t s, int dt, const bk_copy2d *c, const void *src, void *dst, int add);
/* g[j] += the sum over rows of dy[r, off + j], j < cols, in double in row
 * order (a broadcast input's f32 gradient): the CPU's bit for bit */
cudaError_t bk_col_sum_rows(cudaStream_t s, int dt, const void *dy, float *g, int64_t rows, int64_t ld,
                            int64_t off, int64_t cols);
/* dx [rows, ld] = dy [rows, len] in columns [off, off + len), 0 elsewhere */
cudaError_t bk_slice_bwd(cudaStream_t s, int dt, const void *dy, void *dx, int64_t rows, int64_t ld, int64_t off,
                         int64_t len);
/* y [n, b, a] = x [n, a, b] transposed, sample by sample */
cudaError_t bk_transpose(cudaStream_t s, int dt, const void *x, void *y, int64_t n, int64_t a, int64_t b, int64_t q);
/* y [M, N] = x + bias [N] (f32), rounded once; y may be x */
cudaError_t bk_add_rows(cudaStream_t s, int dt, const void *x, const float *bias, void *y, int64_t M, int64_t N);

/* ---- cuda_repeat.cu: grouped-query attention's repeated heads ---------------------- */

/* back 0: out [rows, g r d] from in [rows, g d]; back 1: out [rows, g d] = the sum of in's r copies of each
 * head (in [rows, g r d]) */
cudaError_t bk_repeat(cudaStream_t s, int dt, const void *in, void *out, int64_t rows, int64_t g, int64_t r,
                      int64_t d, int back);

/* ---- cuda_seqmean.cu: the mean of a sequence's real tokens ---------------------------- */

/* back 0: out [n, C] = the mean of in [n, T, C] over t < lens[i] (NULL: T); back 1: out [n, T, C] = in [n, C] / len
 * at the real tokens, 0 at padding; last: the last real token alone, t = len - 1 */
cudaError_t bk_seqmean(cudaStream_t s, int dt, const void *in, void *out, const int32_t *lens, int64_t n, int64_t T,
                       int64_t C, int last, int back);

/* ---- cuda_gather.cu: the rows of each sample that a list names ------------------------ */

/* back 0: out [n, K, C] = row rows[i K + k] of sample i of in [n, T, C], zeros where it is negative; back 1:
 * out [n, T, C] = zeros but those rows, in [n, K, C]'s (distinct in a sample); an index >= T is skipped */
cudaError_t bk_gather(cudaStream_t s, int dt, const void *in, void *out, const int32_t *rows, int64_t n, int64_t T,
                      int64_t K, int64_t C, int back);

/* ---- cuda_rope.cu: rotary position embeddings ------------------------------------ */

/* y = x turned pair by pair (back: by the opposite angles), x [n, T, C] in heads of d; cs the workspace's
 * T d floats, the angles' cos and sin written first (rope.h) */
cudaError_t bk_rope(cudaStream_t s, int dt, const void *x, void *y, float *cs, int64_t n, int64_t T, int64_t C,
                    int64_t d, float theta, int back);

/* ---- cuda_chscale.cu: channel gates (cuda_core.h's) ------------------------------ */

/* y [rows, hw] = x times sc[row] (rows = n c; sc of dtype dt) */
cudaError_t bk_chs_fwd(cudaStream_t s, int dt, const void *x, const void *sc, void *y, int64_t rows, int64_t hw);
/* dx = dy sc[row] (dx NULL: skipped; dx may be dy) and ds[row] = the sum
 * over the row of dy x (ds NULL: skipped), of dtype dt: a warp per row,
 * in double (bk_chs_bwd_part says how it may differ from the CPU's) */
cudaError_t bk_chs_bwd(cudaStream_t s, int dt, const void *x, const void *sc, const void *dy, void *dx, void *ds,
                       int64_t rows, int64_t hw);

/* ---- cuda_prelu.cu: PReLU (cuda_core.h's) ----------------------------------------- */

/* y [n c, hw] = x > 0 ? x : a x (linear: a x; a: f32 slopes, bk_prelu's) */
cudaError_t bk_prelu_fwd(cudaStream_t s, const bk_prelu *p, const void *x, const float *a, void *y);
/* dx = dy (x > 0 ? 1 : a) (linear: a dy; dx NULL: skipped; dx may be dy);
 * with dw, the sums of dy x where x <= 0 (linear: everywhere) in double
 * into rs (a workspace): a warp per row, rs [n c], for hw > 1
 * (bk_prelu_bwd_part says where it may differ from the CPU's); for hw == 1
 * a thread per part of BK_PRELU_CH samples and a channel, rs
 * [ceil(n / CH) c], the CPU's bits; then a thread per slope adds its rows
 * (parts) in the CPU's order into dw, set or (acc) added */
cudaError_t bk_prelu_bwd(cudaStream_t s, const bk_prelu *p, const void *x, const float *a, const void *dy, void *dx,
                         float *dw, int acc, double *rs);

/* ---- cuda_gnorm.cu: group normalisation (cuda_core.h's) --------------------------- */

/* y = ((x - mean) rstd) scale[ch] + shift[ch] per row (sample, group) of
 * bk_gnorm's [n, c, hw] (y may be x), the rows' mean and biased variance
 * (f32 [n g]) written: a warp per row, its sums in double in a warp's tree
 * (the CPU's one ordered sum rounded in another order) */
cudaError_t bk_gnorm_fwd(cudaStream_t s, const bk_gnorm *q, const void *x, const float *sc, const float *sh, void *y,
                         float *mean, float *var);
/* From the forward's mean and var: the (sample, channel) parts of the
 * scale's and shift's gradients, sum dy xhat and sum dy in double, into ws
 * [2 n c] (a warp a row from BK_GN_WARP elements, where the order of double
 * additions may differ from the CPU's; a thread a row below it: the CPU's
 * sums); with dx (may be dy) the rows' sums into ws's next 3 n g doubles,
 * then dx a thread per element; then a thread per channel adds its
 * samples' parts in the CPU's order into dsc and dsh, set or (acc) added */
cudaError_t bk_gnorm_bwd(cudaStream_t s, const bk_gnorm *q, const void *x, const float *mean, const float *var,
                         const void *dy, const float *sc, void *dx, float *dsc, float *dsh, int acc, double *ws);

#ifdef __cplusplus
}
#endif

#endif
