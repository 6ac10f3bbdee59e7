/* device.h - the backend interface: device memory in blocks for the arena,
 * explicit host<->device transfers, and prepared operations ("ops") that run
 * on device buffers.
 *
 * Device memory is opaque to the host: nothing outside src/device/ reads or
 * writes it. Data goes in by bfit_device_upload and comes back by
 * bfit_device_download; everything else that touches it (init aside, which
 * is computed on the host and uploaded) is an op: the layers' mathematics,
 * the optimizer updates, gradient norms and clipping, the loss and the
 * accuracy count. A checking mode of the CPU device (BFIT_DEVICE_CHECK=1)
 * makes device blocks inaccessible outside device calls, so a host access
 * crashes at once instead of working by accident on the CPU.
 *
 * An op is created once for fixed shapes (a oneDNN primitive, a cuDNN plan),
 * reports the scratch bytes it needs, and is run with buffers the caller
 * owns: the device never allocates behind the arena's back. Tensors are
 * dense row-major (NCHW, OIHW; matmul [rows, cols]). Ops run in order on the
 * device's stream; bfit_device_download waits for what came before it.
 */
#ifndef BFIT_DEVICE_H
#define BFIT_DEVICE_H

#include "batchfit.h"
#include "mem/arena.h"
#include "tensor/tensor.h"

/* ---- opening a device ------------------------------------------------------ */
/* How the convolution algorithms are chosen on a GPU (cuDNN): the fastest,
 * the ones with the smallest workspace, or auto: the fastest unless a
 * leaner choice lets a larger micro-batch fit the effective batch. The CPU
 * device (oneDNN) has one choice and ignores this. */
typedef enum { BFIT_CONV_FASTEST = 0, BFIT_CONV_LEAN, BFIT_CONV_AUTO } bfit_conv_algo;
/* "fastest", "lean", "auto"; BFIT_EINVAL naming the valid ones otherwise. */
int bfit_conv_algo_parse(const char *name, bfit_conv_algo *out);
const char *bfit_conv_algo_name(bfit_conv_algo a);

typedef struct bfit_device_cfg {
    int threads;                 /* CPU: > 0: ops run on this many threads (set around each device
                                    call and restored); 0: OpenMP's own setting, untouched */
    int check;                   /* 1: op arguments must be device memory, and on the CPU device
                                    memory is inaccessible (PROT_NONE) outside device calls, a
                                    span's after its first runs (bfit_device_span_begin); 2: the
                                    same inside spans too; -1: from the environment
                                    (BFIT_DEVICE_CHECK=1 or 2), 0: off */
    const bfit_host_alloc *host; /* CPU: where device blocks come from; NULL: aligned_alloc
                                    (the checking mode maps its own pages) */
    bfit_conv_algo conv_algo;    /* GPU: fastest (default) or lean; auto is resolved by a run */
} bfit_device_cfg;

/* Defaults: threads 0, check -1, host NULL, fastest. */
bfit_device_cfg bfit_device_cfg_default(void);

/* Open a device by name: "cpu", "cuda" or "cuda:N" (N-th GPU), or NULL /
 * "auto" for a GPU when one is present, else the CPU. cfg may be NULL
 * (defaults). BFIT_EINVAL for an unknown name, BFIT_EDEVICE when the device
 * cannot be used (saying why: not built with CUDA, no GPU, driver error). */
int bfit_device_open(const char *name, const bfit_device_cfg *cfg, bfit_device **out);
/* The block source an arena over this device draws from. */
const bfit_block_source *bfit_device_blocks(const bfit_device *d);
/* An arena of capacity bytes over d's memory. */
bfit_arena *bfit_device_arena_new(bfit_device *d, uint64_t capacity);
/* The memory a run takes when none is given: what the device has free, in
 * *out. None free is refused saying why: under an address-space limit,
 * BFIT_ENOMEM naming the limit, the room left and the threads; else
 * BFIT_EINVAL on option "memory" (give one). Every command asks here. */
int bfit_device_free_memory(bfit_device *d, uint64_t *out);
/* The room an arena over d has now: what it holds (its blocks) and what the
 * device has free, in *room (and the free part in *free_b, may be NULL).
 * What a run, find and evaluation follow where the device's free memory moves
 * outside the arena (a shared GPU, the CPU under ulimit -v). */
int bfit_device_room(bfit_device *d, const bfit_arena *a, uint64_t *room, uint64_t *free_b);


typedef struct bfit_op bfit_op;

typedef enum {
    BFIT_OP_MATMUL,           /* dst[M,N] (+)= op(src)[M,K] x op(weights)[K,N] (+ bias[N]) */
    BFIT_OP_CONV_FWD,         /* dst = conv(src, weights) (+ bias) */
    BFIT_OP_CONV_BWD_DATA,    /* diff_src = conv^T(diff_dst, weights) */
    BFIT_OP_CONV_BWD_WEIGHTS, /* diff_weights (+)=, diff_bias (+)= from src, diff_dst */
    BFIT_OP_POOL_FWD,         /* max or average; training max writes `saved` (indices) */
    BFIT_OP_POOL_BWD,         /* diff_src from diff_dst (and `saved` for max) */
    BFIT_OP_BNORM_FWD,        /* training: batch stats into mean/var, running stats moved; eval: uses mean/var */
    BFIT_OP_BNORM_BWD,        /* diff_src, diff_scale (+)=, diff_shift (+)=; with u.bnorm.use_dst, src is
                                 the forward's dst and x^ = (dst - shift) / scale (in-place ABN) */
    BFIT_OP_LNORM_FWD,        /* over the last dim (cols) of [rows, cols]; mean/var per row */
    BFIT_OP_LNORM_BWD,
    BFIT_OP_ELTWISE_FWD,      /* dst = f(src); relu with u.elt.bits also writes sign bits to `saved` */
    BFIT_OP_ELTWISE_BWD,      /* diff_src = f'(src) * diff_dst; relu: src may be the forward's dst
                                 (u.elt.use_dst), or only the bits in `saved` are read (u.elt.bits) */
    BFIT_OP_REDUCE_ROWS,      /* dst[N] (+)= sum over rows of src[M,N] */
    BFIT_OP_ADD,              /* dst[n] = src[n] + src2[n] (dst may alias either); accumulate: dst += src */
    BFIT_OP_DROPOUT_FWD,      /* dst = src * mask / (1-p); mask into `saved`, one bit per element */
    BFIT_OP_DROPOUT_BWD,      /* diff_src = diff_dst * mask / (1-p) */
    BFIT_OP_XENT_FWD,         /* rows of logits src[M,N], labels: dst = softmax probs [M,N];
                                 stats[0] += sum of -log p[label], stats[1] += rows whose arg-max is the label */
    BFIT_OP_XENT_BWD,         /* diff_src = (probs - onehot(labels)) * scale */
    BFIT_OP_SCALE,            /* dst[n] *= alpha */
    BFIT_OP_NORMS,            /* stats[0] = sum src^2; with state0 (a copy of src from before):
                                 stats[1] = sum (src - state0)^2, then state0 = src. f64, fixed order */
    BFIT_OP_SGD,              /* dst (params) updated from src (grads), state0 the momentum buffer or NULL */
    BFIT_OP_ADAMW,            /* dst (params) updated from src (grads), state0/state1 the moments */
    BFIT_OP_CAST,             /* dst[n] (u.cast.to) = src[n] (dtype), rounded to nearest even */
    BFIT_OP_EMBED_FWD,        /* dst[n,T,C] = scale weights[id] + bias[t] (positions, or none) + shift[type]
                                 (token types, or none); src: the ids, device int32 [n,T], each id in [0, V)
                                 with its type (< u.embed.types, 0 without) in the bits from
                                 BFIT_TOKEN_TYPE_SHIFT; the tables f32 whatever desc.dtype */
    BFIT_OP_EMBED_BWD,        /* diff_weights[id] += scale diff_dst rows, diff_bias[t] += (not with
                                 pos_fixed), diff_shift[type] += (always accumulated: parameter gradients);
                                 src: the ids */
    BFIT_OP_ATTN_FWD,         /* multi-head self-attention: src [n,T,3C] (q | k | v, head h in columns
                                 h*hs of each), dst [n,T,C]; training stores the probabilities
                                 [n,H,T,T] (desc.dtype) in `saved`, or (lean) the log-sum-exp of each
                                 row [n,H,T] (f32) */
    BFIT_OP_ATTN_BWD,         /* diff_src [n,T,3C] (overwritten) from src, diff_dst and `saved`; lean
                                 recomputes the probabilities in the workspace */
    BFIT_OP_CONCAT_FWD,       /* dst [rows, sum cols] = the srcs[k] [rows, cols[k]] side by side */
    BFIT_OP_CONCAT_BWD,       /* dsts[k] [rows, cols[k]] = (or += where bit k of add_mask) its columns of
                                 diff_dst; a NULL dsts[k] is skipped */
    BFIT_OP_TRANSPOSE,        /* dst [n, b, a, q] = src [n, a, b, q] transposed, sample by sample: q (inner,
                                 0 taken as 1) elements move together (a channel shuffle moves maps) */
    BFIT_OP_ADD_ROWS,         /* dst [M, N] = src [M, N] + bias [N] (bias f32 whatever desc.dtype) */
    BFIT_OP_SLICE_FWD,        /* dst [rows, len] = columns [off, off + len) of src [rows, ld] */
    BFIT_OP_SLICE_BWD,        /* diff_src [rows, ld] = diff_dst in columns [off, off + len), 0 elsewhere */
    BFIT_OP_CHSCALE_FWD,      /* dst [n, c, hw] = src [n, c, hw] x src2 [n, c] (each channel by its scale:
                                 squeeze-and-excitation's gate) */
    BFIT_OP_CHSCALE_BWD,      /* diff_src [n, c, hw] = diff_dst x src2 (NULL: skipped); dst [n, c] = the
                                 sum over hw of diff_dst x src (the scales' gradient; NULL: skipped) */
    BFIT_OP_PRELU_FWD,        /* dst [n, c, hw] = src > 0 ? src : weights[c] src (PyTorch's PReLU: a learned
                                 slope per channel, or with u.prelu.shared one for all); with
                                 u.prelu.linear weights[c] src everywhere (a learned scale: LayerScale) */
    BFIT_OP_PRELU_BWD,        /* diff_src = diff_dst (src > 0 ? 1 : weights[c]) (NULL: skipped);
                                 diff_weights (+)= the sum over n and hw of diff_dst src where src <= 0
                                 (linear: weights[c] and every src) */
    BFIT_OP_GNORM_FWD,        /* group normalisation (PyTorch's GroupNorm): src [n, c, hw] in u.gnorm.groups
                                 groups of c/groups channels, each (sample, group) normalised over its
                                 c/groups * hw elements (biased variance), then scale[c] x + shift[c];
                                 mean and var f32 [n groups] written */
    BFIT_OP_GNORM_BWD,        /* diff_src (NULL: skipped; may be diff_dst) from src, mean, var, diff_dst,
                                 scale; diff_scale and diff_shift f32 [c] (+)= their gradients */
    BFIT_OP_ROPE_FWD,         /* rotary position embedding (RoPE, Hugging Face's rotate_half form): src
                                 [n, T, C] in heads of d columns; in each head column j < d/2 and j + d/2
                                 of token t turn by the angle t theta^(-2j/d): dst[j] = x[j] cos - x[j +
                                 d/2] sin, dst[j + d/2] = x[j + d/2] cos + x[j] sin (dst not src) */
    BFIT_OP_ROPE_BWD,         /* diff_src = diff_dst turned back (the rotation's transpose) */
    BFIT_OP_REPEAT_FWD,       /* grouped-query attention's key and value heads repeated: src [rows, g d] in g
                                 heads of d -> dst [rows, g r d], head q of dst = head q / r of src */
    BFIT_OP_REPEAT_BWD,       /* diff_src [rows, g d] = the sum of each head's r copies in diff_dst, in order */
    BFIT_OP_SEQMEAN_FWD,      /* dst [n, C] = the mean of src [n, T, C] over each sequence's real tokens,
                                 t < args.lens[i] (NULL: all T), summed in f32 in order; with u.seqm.last
                                 its last real token, t = len - 1 (GPT-2's classifier) */
    BFIT_OP_SEQMEAN_BWD,      /* diff_src [n, T, C] = diff_dst [n, C] / len at the real tokens, 0 at padding;
                                 with last diff_dst at the last real token, 0 elsewhere */
    BFIT_OP_GATHER_FWD,       /* dst [n, K, C] = the rows of src [n, T, C] that args.rows [n, K] names (row k of
                                 sample i is src row rows[i K + k] of that sample), a row of zeros where it is
                                 negative: a masked LM's head at its masked tokens only */
    BFIT_OP_GATHER_BWD,       /* diff_src [n, T, C] = diff_dst's rows where args.rows names them (distinct in a
                                 sample), 0 elsewhere */
    BFIT_OP_COUNT
} bfit_op_kind;

/* sigmoid 1 / (1 + e^-x); silu x * sigmoid(x) (swish, PyTorch's SiLU) */
typedef enum {
    BFIT_ELT_RELU,
    BFIT_ELT_GELU_ERF,
    BFIT_ELT_GELU_TANH,
    BFIT_ELT_CLIP,
    BFIT_ELT_SIGMOID,
    BFIT_ELT_SILU,
    BFIT_ELT_TANH,
    BFIT_ELT_HARDSIGMOID, /* min(max(lo x + hi, 0), 1): lo and hi are alpha and beta */
    BFIT_ELT_HARDSWISH,   /* x * min(max(x + 3, 0), 6) / 6 */
    BFIT_ELT_LEAKYRELU,   /* x > 0 ? x : lo x (lo: the negative slope; PyTorch's LeakyReLU) */
    BFIT_ELT_ELU,         /* x > 0 ? x : lo (e^x - 1) (lo: alpha; PyTorch's ELU) */
    BFIT_ELT_SOFTPLUS,    /* lo x > hi ? x : log(1 + e^(lo x)) / lo (lo: beta, hi: the threshold;
                             PyTorch's Softplus) */
    BFIT_ELT_SELU,        /* hi (x > 0 ? x : lo (e^x - 1)) (lo, hi: alpha and scale, finite; the selu
                             layer's are PyTorch's SELU's, layer.h's BFIT_SELU_ALPHA and _SCALE) */
    BFIT_ELT_CELU         /* x > 0 ? x : lo (e^(x / lo) - 1) (lo: alpha, not 0; PyTorch's CELU) */
} bfit_eltwise_alg;

#define BFIT_OP_MAXCAT 32 /* inputs of one concatenation */

/* Data types. desc.dtype is that of the data: activations, their gradients,
 * and the weights a MATMUL or convolution multiplies by (a compute copy of
 * f32 master weights under mixed precision). f32 whatever desc.dtype:
 * biases; parameter gradients (diff_weights, diff_bias, diff_scale,
 * diff_shift, a MATMUL dst that accumulates or has mm.grad, REDUCE_ROWS
 * dst); norm scale, shift and statistics; PRELU's slopes; XENT
 * probabilities (FWD dst, BWD src) and stats; and everything SCALE, NORMS,
 * SGD and ADAMW touch (desc.dtype must be f32 for them). */
typedef struct bfit_op_desc {
    bfit_op_kind kind;
    bfit_dtype dtype;  /* of the data tensors (see above) */
    int accumulate;    /* gradient outputs (diff_weights, diff_bias, diff_scale, diff_shift,
                          MATMUL dst, REDUCE_ROWS dst, ADD dst) are added to, not overwritten */
    union {
        /* grad: dst is a parameter gradient, f32 whatever dtype, set rather than added to
           (accumulate implies f32: bfit_mm_dst_f32) */
        struct { int64_t M, N, K; int trans_src, trans_weights, bias, grad; } mm;
        /* src [n,ic,ih,iw], weights [oc,ic/groups,kh,kw], dst [n,oc,oh,ow]; groups 0 or 1: dense
           (more: each of `groups` slices of the channels convolved apart, PyTorch's groups).
           blk_src, blk_dst (conv and pool, the cpu only): 0, or 8 or 16: that tensor and its
           gradient are in nChw8c / nChw16c (oneDNN's aBcd8b / aBcd16b: blocks of that many
           channels innermost; channels a multiple of it), not nchw, so that no layout changes
           between such layers (bfit_device_layout_block says which the device computes in) */
        struct { int64_t n, ic, ih, iw, oc, oh, ow, kh, kw, sh, sw, ph, pw; int bias, groups, blk_src, blk_dst; } conv;
        /* avg pooling counts padding like PyTorch's default (count_include_pad); oh, ow PyTorch's floor
           size, or for max pooling its ceil_mode size (bfit_pool_out): windows past the right or bottom
           edge see only the input there */
        struct { int64_t n, c, ih, iw, oh, ow, kh, kw, sh, sw, ph, pw; int max, training, blk_src, blk_dst; } pool;
        /* scale/shift [c]; mean/var [c]; training: batch statistics (biased var), and with
           args.rmean/rvar the running statistics moved PyTorch's way by momentum. blk (the cpu
           only, f32): 0, or 8 or 16: src, dst and their gradients in nChw8c / nChw16c, as conv's */
        struct { int64_t n, c, h, w; float eps, momentum; int training, use_dst, blk; } bnorm;
        /* src [rows, cols]; scale/shift [cols]; mean/var [rows]; noshift: no shift (nanoGPT's
           LayerNorm(bias=False)): no shift argument, no diff_shift; rms (noshift too): the root mean
           square norm (LLaMA's RMSNorm), x / sqrt(mean(x^2) + eps) scale: mean written 0, var the
           mean of the squares; the f32 and bf16 loops our own on the cpu */
        struct { int64_t rows, cols; float eps; int noshift, rms; float goff; } lnorm; /* goff: added to each scale
                                                                                   (RMS: Gemma's 1 + w) */
        /* use_dst: relu and clip; bits: relu only; clip: min(max(x, lo), hi), the gradient passed where
           lo < x < hi (PyTorch's hardtanh) */
        struct { int64_t n; bfit_eltwise_alg alg; int use_dst, bits; float lo, hi; } elt;
        struct { int64_t M, N; } reduce;
        struct { int64_t n; } add;
        struct { int64_t n; float p; } drop;
        /* ignore: a negative label marks a row (a padding token) that adds nothing: no loss, no
           gradient, not counted right */
        struct { int64_t M, N; int ignore; } xent;
        struct { int64_t n; } scale;
        struct { int64_t n; } norms;
        /* optimizer updates of n elements; the coefficients of a step come in args.hyper */
        struct { int64_t n; int momentum, nesterov; } sgd; /* momentum: state0 is the buffer */
        struct { int64_t n; } adamw;
        struct { int64_t n; bfit_dtype to; } cast;
        /* n sequences of T tokens, C features; V ids; P positions (0: none, else T <= P);
           types: a token-type table (BERT's segments) of which row 0 is added; scale: the
           token rows times it (0: 1; the Transformer tutorial's sqrt(C)); pos_fixed: the
           positions a constant (a sinusoidal buffer), given no gradient */
        struct { int64_t n, T, C, V, P; int types, pos_fixed; float scale; } embed;
        /* n sequences of T tokens, H heads of hs features (C = H hs); scores scaled by
           1/sqrt(hs); causal: token i attends to j <= i; with args.lens, only to j < lens[b]
           (a key-padding mask); lean: keep no probabilities; p: dropout on the weights in
           training (0: none), its mask f(args.seed, lane, row, column), the same in forward
           and backward (the caller passes both the same seed) */
        struct { int64_t n, T, H, hs; int causal, lean, training; float p; } attn;
        /* rows of n inputs side by side: cols[k] elements of input k a row; bcast bit k: input k is
           one row used for every row (a learned token: its gradient sums the rows, always added) */
        struct { int64_t rows; int n; int64_t cols[BFIT_OP_MAXCAT]; uint32_t bcast; } concat;
        struct { int64_t n, a, b, inner; } tr;
        struct { int64_t M, N; } rows;
        struct { int64_t rows, ld, off, len; } slice;
        /* CHSCALE: blk (the cpu only, f32): 0, or 8 or 16: src, dst and their gradients in
           nChw8c / nChw16c, as conv's; src2 and its gradient [n, c] either way */
        struct { int64_t n, c, hw; int blk; } chs;
        /* PRELU: weights and diff_weights f32 [c], or [1] with shared; blk as CHSCALE's (the cpu only,
           f32 and bf16); the backward's workspace holds a partial sum per (sample, channel), so that
           the slopes' gradient has one order whatever the threads and layout; with hw == 1 (channels
           innermost: vectors, tokens) one per (chunk of 256 samples, channel) instead (cuda_core.h's
           BK_PRELU_CH), ceil(n / 256) c doubles, the same bits on every device; linear: the slope
           applies to src > 0 too, y = weights[c] src (LayerScale) */
        struct { int64_t n, c, hw; int shared, blk, linear; } prelu;
        /* GNORM: scale, shift and their gradients f32 whatever desc.dtype; plain nchw; the backward's
           workspace holds two doubles per (sample, channel), the scale's and shift's partial sums, so
           that their gradients have one order whatever the threads */
        struct { int64_t n, c, hw; int groups; float eps; } gnorm;
        /* ROPE: d even, dividing C; the angles' cos and sin in the workspace, T d floats (bfit_rope_angle) */
        struct { int64_t n, T, C, d; float theta; } rope;
        struct { int64_t rows, g, r, d; } rep;
        struct { int64_t n, T, C; int last; } seqm; /* last: the last real token instead of the mean */
        struct { int64_t n, T, K, C; } gat; /* GATHER: K <= T rows of each sample's T */
    } u;
} bfit_op_desc;

/* A ROPE's sizes hold: n and T positive, heads of an even d (at most 8192) dividing C, a positive base. */
static inline int bfit_rope_ok(const bfit_op_desc *d)
{
    return d->u.rope.n >= 1 && d->u.rope.T >= 1 && d->u.rope.d >= 2 && d->u.rope.d % 2 == 0 && d->u.rope.d <= 8192 &&
           d->u.rope.C % d->u.rope.d == 0 && d->u.rope.theta > 0;
}
#define BFIT_ROPE_BAD "rotary embedding: n %lld and T %lld positive, heads of d %lld (even, at most 8192) dividing C " \
                      "%lld, theta %g positive"
#define BFIT_ROPE_BAD_ARGS(d) (long long)(d)->u.rope.n, (long long)(d)->u.rope.T, (long long)(d)->u.rope.d, \
                              (long long)(d)->u.rope.C, (double)(d)->u.rope.theta

/* A MATMUL's dst is f32 whatever its inputs: a parameter gradient. */
static inline int bfit_mm_dst_f32(const bfit_op_desc *d) { return d->accumulate || d->u.mm.grad; }

/* A pool's output size along an axis of in (kernel k, stride s, padding p on
 * both sides, in + 2p >= k): PyTorch's floor, or with ceil its ceil_mode,
 * rounded up less a last window that would start past the input and the
 * left padding, so that every window holds an input. */
static inline int64_t bfit_pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int ceil)
{
    int64_t o = (in + 2 * p - k + (ceil ? s - 1 : 0)) / s + 1;
    return ceil && (o - 1) * s >= in + p ? o - 1 : o;
}

/* The pool's output size is its input's floor size, or for max pooling the ceil one. */
static inline int bfit_pool_out_ok(const bfit_op_desc *d)
{
    int64_t ih = d->u.pool.ih, iw = d->u.pool.iw, kh = d->u.pool.kh, kw = d->u.pool.kw;
    int64_t sh = d->u.pool.sh, sw = d->u.pool.sw, ph = d->u.pool.ph, pw = d->u.pool.pw;
    for (int c = 0; c <= d->u.pool.max; c++)
        if (d->u.pool.oh == bfit_pool_out(ih, kh, sh, ph, c) && d->u.pool.ow == bfit_pool_out(iw, kw, sw, pw, c))
            return 1;
    return 0;
}

/* Coefficients of one optimizer update (args.hyper), computed on the host
 * in double and rounded where PyTorch rounds them (src/optim/optim.c). */
enum { BFIT_SGD_LR_NEG, BFIT_SGD_WD, BFIT_SGD_MOM, BFIT_SGD_DAMP1, BFIT_SGD_FIRST };
enum { BFIT_ADAMW_DECAY_MUL, BFIT_ADAMW_B1, BFIT_ADAMW_C1, BFIT_ADAMW_B2, BFIT_ADAMW_C2, BFIT_ADAMW_STEP_NEG,
       BFIT_ADAMW_BC2_SQRT, BFIT_ADAMW_EPS };
#define BFIT_OP_NHYPER 8

/* Every pointer is device memory, except none: host values come by value. */
typedef struct bfit_op_args {
    const void *src, *src2, *weights, *bias, *diff_dst, *scale, *shift;
    void *dst, *diff_src, *diff_weights, *diff_bias, *diff_scale, *diff_shift;
    void *mean, *var;        /* norm statistics */
    void *rmean, *rvar;      /* BNORM_FWD training: running statistics to move (NULL: leave them) */
    void *saved;             /* op state kept from forward to backward (bfit_op_saved_bytes) */
    void *workspace;         /* scratch, bfit_op_workspace_bytes, contents not kept */
    const int32_t *labels;   /* XENT: [M] class indices */
    const int32_t *lens;     /* ATTN, SEQMEAN: [n] real tokens of each sequence, the rest padding (whose
                                keys attention ignores, which the mean leaves out); NULL: all T real */
    const int32_t *rows;     /* GATHER: [n, K] the rows taken of each sample, each in [0, T) or negative */
    void *stats;             /* XENT_FWD, NORMS: f64 results (see the kinds) */
    void *state0, *state1;   /* NORMS: the previous copy; SGD/ADAMW: optimizer state */
    float loss_scale;        /* XENT_BWD scale, e.g. 1/E */
    float alpha;             /* SCALE */
    float hyper[BFIT_OP_NHYPER]; /* SGD/ADAMW step coefficients */
    uint64_t seed;           /* DROPOUT_FWD: mask = f(seed, index); ATTN_FWD and ATTN_BWD with p > 0 */
    const void *const *srcs; /* CONCAT_FWD: the inputs */
    void *const *dsts;       /* CONCAT_BWD: the inputs' gradients */
    uint32_t add_mask;       /* CONCAT_BWD: bit k set: dsts[k] is added to */
} bfit_op_args;

/* What a device says of itself. */
typedef struct bfit_device_info {
    const char *name;        /* "cpu", "cuda:0" */
    const char *detail;      /* "oneDNN 2.6, 2 threads, avx512", the GPU's name */
    int threads;             /* CPU threads ops run on (0 for a GPU) */
    int cpus;                /* CPUs they may run on, where batchfit may pack them onto fewer
                                (bfit_device_set_threads); 0 for a GPU, or where libgomp
                                places them (OMP_PROC_BIND) */
    int check;               /* opaque-memory checking mode is on */
    int shared;              /* its memory is shared with other processes (a GPU): a run reads
                                what is free every step */
    int limited;             /* what it has free is bounded by all this process maps, not only
                                the arena (the CPU under an address-space limit, ulimit -v):
                                a run reads it every step, as a shared device's */
    uint64_t overhead;       /* device bytes held outside the arena (a GPU's context and library
                                handles), as measured when the device was opened; 0 if none or
                                unknown */
    int bf16_fast;           /* bf16 is computed natively, faster than f32: a CPU with AVX512_BF16 or
                                AMX (as oneDNN sees it, $ONEDNN_MAX_CPU_ISA included), a GPU of compute
                                capability 8.0 or later (--precision auto takes bf16 there) */
} bfit_device_info;

/* What a device says of its state now, for the run's monitor events: as
 * a person watching `nvidia-smi dmon` or `top` would see it. Each field is
 * set only when its BFIT_SAMPLE_ bit is in `have`. Taking one never waits
 * for the device's queued work. */
enum {
    BFIT_SAMPLE_BUSY = 1,     /* busy */
    BFIT_SAMPLE_MEM_BUSY = 2, /* mem_busy */
    BFIT_SAMPLE_SELF = 4,     /* self_bytes */
    BFIT_SAMPLE_OTHERS = 8,   /* others_bytes, others */
    BFIT_SAMPLE_FREE = 16,    /* free_bytes, total_bytes */
    BFIT_SAMPLE_THROTTLE = 32,/* throttle, throttle_text */
    BFIT_SAMPLE_CLOCK = 64,   /* sm_mhz */
    BFIT_SAMPLE_POWER = 128,  /* power_w, power_limit_w */
    BFIT_SAMPLE_TEMP = 256,   /* temp_c */
};
typedef struct bfit_device_sample {
    unsigned have;
    double busy;              /* GPU: % of the last sample period a kernel ran (NVML); CPU: this process's
                                 CPU time over wall time since the last sample, in % of all its threads */
    double mem_busy;          /* GPU: % of the period device memory was read or written */
    uint64_t self_bytes;      /* GPU: device memory the driver puts to this process; CPU: resident memory */
    uint64_t others_bytes;    /* GPU: device memory of the other processes on it */
    int others;               /* how many other processes */
    uint64_t free_bytes, total_bytes;
    unsigned long long throttle; /* NVML's clock-event (throttle) reasons, bits; 0: running free */
    char throttle_text[96];   /* the reasons that slow it, in words ("power cap, thermal"); "" if none */
    double sm_mhz, power_w, power_limit_w, temp_c;
} bfit_device_sample;

/* The host side of a group of processes (src/device/comm.c fills it from
 * MPI), as a device's collectives use it: this process's rank of size,
 * an in-place sum of host floats over the group, and a broadcast of host
 * bytes from root. */
typedef struct bfit_coll_host {
    int rank, size;
    int (*sum_f32)(void *ud, float *buf, size_t count);
    int (*bcast)(void *ud, void *buf, size_t n, int root);
    void *ud;
} bfit_coll_host;

/* The table a backend implements. Every entry that touches device memory
 * is a device call: the CPU checking mode opens memory only inside them. */
typedef struct bfit_device_vt {
    const char *name;
    int (*mem_info)(bfit_device *d, uint64_t *free_bytes, uint64_t *total_bytes);
    /* transfers; copy is device to device, ranges may overlap */
    int (*upload)(bfit_device *d, void *dst, const void *host_src, size_t n);
    int (*download)(bfit_device *d, void *host_dst, const void *src, size_t n);
    int (*copy)(bfit_device *d, void *dst, const void *src, size_t n);
    int (*fill)(bfit_device *d, void *dst, int byte, size_t n);
    int (*sync)(bfit_device *d);
    /* ops */
    int (*op_new)(bfit_device *d, const bfit_op_desc *desc, bfit_op **out);
    size_t (*op_workspace)(const bfit_op *op);
    size_t (*op_saved)(const bfit_op *op);
    int (*op_run)(bfit_op *op, const bfit_op_args *args);
    void (*op_free)(bfit_op *op);
    void (*info)(const bfit_device *d, bfit_device_info *out);
    void (*destroy)(bfit_device *d);
    /* collectives over a group of processes (comm.h), each process with its
     * own device: open (the group's host side h must outlive the state), an
     * in-place sum of count f32 of device memory, a broadcast of device
     * bytes from root, close. NULL coll_open: the backend has none. */
    int (*coll_open)(bfit_device *d, const bfit_coll_host *h, void **state);
    int (*coll_sum)(bfit_device *d, void *state, void *buf, size_t count);
    int (*coll_bcast)(bfit_device *d, void *state, void *buf, size_t n, int root);
    void (*coll_close)(bfit_device *d, void *state);
    /* 1 when ops of kind k on data of dtype t can be made here, else 0 with
     * a reason in why (n bytes); asked before a model is built (--device
     * auto). NULL: every kind in every float dtype. A backend says 0 for a
     * kind it does not know, so op kinds added later are refused, not
     * mis-run. */
    int (*supports)(const bfit_device *d, bfit_op_kind k, bfit_dtype t, char *why, size_t n);
    /* the device's state now, without waiting for its work (NULL: nothing
     * to say) */
    int (*sample)(bfit_device *d, bfit_device_sample *out);
    /* the host threads ops made from now on run on (> 0); NULL: the
     * backend's ops do not run on host threads */
    int (*set_threads)(bfit_device *d, int threads, int cpus);
    /* the channel block its convolutions compute in for data of dtype t
     * (8, 16), 0 for none; NULL: none */
    int (*layout_block)(bfit_device *d, bfit_dtype t);
    /* a span of calls that repeats the same way every step (a forward, a
     * backward), named by key; NULL: nothing to do (see bfit_device_span_begin) */
    int (*span_begin)(bfit_device *d, uint64_t key);
    void (*span_end)(bfit_device *d);
} bfit_device_vt;

struct bfit_device {
    const bfit_device_vt *vt;
    bfit_block_source blocks; /* device memory in blocks, for an arena (bfit_device_arena_new) */
    struct bfit_optime *optime; /* op times, with BFIT_OPTIME=1 (optime.c); NULL: off */
};

/* The CPU device on oneDNN (cfg NULL: defaults; see bfit_device_cfg). */
int bfit_device_cpu_new(const bfit_device_cfg *cfg, bfit_device **out);

/* The CUDA device's settings. The policy decides the workspace ops ask for
 * (and so what the plan counts): fastest takes the first convolution
 * algorithm of cuDNN's heuristics and gives cuBLAS its recommended
 * workspace; lean takes the algorithm with the smallest workspace and runs
 * cuBLAS without one. */
typedef enum { BFIT_CUDA_FASTEST = 0, BFIT_CUDA_LEAN } bfit_cuda_policy;
typedef struct bfit_cuda_cfg {
    bfit_cuda_policy policy;
    int deterministic; /* 1: only cuDNN algorithms whose results repeat bit for bit */
    int check;         /* 1: op arguments must be device memory (checked per call); -1: from
                          the environment (BFIT_DEVICE_CHECK=1), 0: off */
    int conv_chunk;    /* > 0: convolutions run over their batch in chunks of this many samples
                          (the tests); 0: in chunks only where that bounds a workspace growing
                          with the batch (cuda_dnn.c) */
} bfit_cuda_cfg;

/* fastest (lean when the environment has BFIT_CUDA_POLICY=lean),
 * deterministic, check -1, conv_chunk 0. */
bfit_cuda_cfg bfit_cuda_cfg_default(void);
/* GPU number index (cfg NULL: defaults). BFIT_EDEVICE saying why when the
 * build has no CUDA, no GPU or driver is found, or the GPU is too old for
 * this build's code. */
int bfit_device_cuda_new_cfg(int index, const bfit_cuda_cfg *cfg, bfit_device **out);
int bfit_device_cuda_new(int index, bfit_device **out);

/* The (kind, dtype) pairs a model's ops take: bit t of dtypes[k] is set
 * when an op of kind k on dtype t is made (src/nn/needs.c fills it);
 * cpu_only names the first op only the CPU device makes (bfit_op_cpu_only;
 * none now), or NULL. */
typedef struct bfit_op_needs {
    unsigned dtypes[BFIT_OP_COUNT];
    const char *cpu_only;
} bfit_op_needs;

/* What an op of desc is, when only the CPU device makes it (a name, such
 * as "prelu" was), else NULL: NULL for every op now. */
const char *bfit_op_cpu_only(const bfit_op_desc *desc);
/* A concatenation's output columns: the sum of its inputs' (CONCAT_FWD/BWD).
 * Inline: the CUDA module reaches no library function but its host table. */
static inline int64_t bfit_op_concat_cols(const bfit_op_desc *d)
{
    int64_t c = 0;
    for (int k = 0; k < d->u.concat.n; k++)
        c += d->u.concat.cols[k];
    return c;
}

static inline void bfit_op_needs_add(bfit_op_needs *nd, bfit_op_kind k, bfit_dtype t)
{
    if ((unsigned)k < BFIT_OP_COUNT && (unsigned)t < BFIT_NDTYPES)
        nd->dtypes[k] |= 1u << t;
}

/* Whether d makes ops of kind k on dtype t (1), or not (0, why filled when
 * not NULL). */
int bfit_device_supports(const bfit_device *d, bfit_op_kind k, bfit_dtype t, char *why, size_t n);
/* Whether d makes every op in nd (1); 0 with why naming the first it does
 * not ("attention forward in bf16: ..."). */
int bfit_device_supports_needs(const bfit_device *d, const bfit_op_needs *nd, char *why, size_t n);
/* A device that runs nothing and records in *into every op made on it
 * (which it makes as an empty op of no workspace and nothing saved): how a
 * model's needs are found without a real device. Its memory query says
 * nothing is free; transfers and runs fail. */
int bfit_device_recorder_new(bfit_op_needs *into, bfit_device **out);
/* --device auto for a model needing nd: the first GPU when one opens and
 * makes every op in nd, else the CPU when it does; why (n bytes) says which
 * and why, in a sentence. BFIT_EINVAL (naming what each refused) when
 * neither does. */
int bfit_device_open_auto(const bfit_device_cfg *cfg, const bfit_op_needs *nd, bfit_device **out, char *why,
                          size_t n);

/* Create an op for fixed shapes. Allocates no device memory. */
int bfit_op_new(bfit_device *d, const bfit_op_desc *desc, bfit_op **out);
/* "matmul", "attention forward", ... for messages. */
const char *bfit_op_kind_name(bfit_op_kind k);
size_t bfit_op_workspace_bytes(const bfit_op *op);
size_t bfit_op_saved_bytes(const bfit_op *op);
int bfit_op_run(bfit_op *op, const bfit_op_args *args);
void bfit_op_free(bfit_op *op);

int bfit_device_upload(bfit_device *d, void *dst, const void *host_src, size_t n);
int bfit_device_download(bfit_device *d, void *host_dst, const void *src, size_t n);
int bfit_device_copy(bfit_device *d, void *dst, const void *src, size_t n);
int bfit_device_fill(bfit_device *d, void *dst, int byte, size_t n);
static inline int bfit_device_zero(bfit_device *d, void *dst, size_t n) { return bfit_device_fill(d, dst, 0, n); }
int bfit_device_sync(bfit_device *d);
/* Seconds the device's ops, copies and fills have taken so far, each waited
 * for (BFIT_OPTIME=1, optime.h); -1 when that is off. */
double bfit_device_op_seconds(const bfit_device *d);
/* The device's state for the monitor (out->have 0: nothing known). */
int bfit_device_sample_get(bfit_device *d, bfit_device_sample *out);
void bfit_device_info_get(const bfit_device *d, bfit_device_info *out);
/* CPU: ops made from now on run on threads (> 0) host threads; ops made
 * before keep the count they were made for (oneDNN splits a primitive's
 * work, and sizes its scratchpad, for the threads at its creation), so the
 * caller makes its ops again (--threads auto, src/train/threads.c). With
 * cpus > 0 the threads (the caller's among them) run on that many of their
 * CPUs only, from now until a call with cpus 0 or the device's destruction
 * (a change of CPUs alone keeps the ops). Not inside a device call.
 * BFIT_EINVAL where ops do not run on host threads (a GPU), threads < 1 or
 * cpus < 0, or cpus > 0 where libgomp places the threads (info.cpus 0). */
int bfit_device_set_threads(bfit_device *d, int threads, int cpus);
/* The channel block (8 or 16) in which the device's convolutions compute on
 * data of dtype t, which activations between them may keep (blk_src,
 * blk_dst); 0 where they take plain nchw only (a GPU). The CPU's is what
 * oneDNN chooses on this machine: 16 with AVX-512, 8 with AVX2. */
int bfit_device_layout_block(bfit_device *d, bfit_dtype t);
/* Spans: calls the caller makes the same way every step (a model's forward,
 * its backward), named by a key that changes when their arguments' shapes,
 * places or branches may (the micro-batch, the layout, training or not).
 * The CPU checking mode toggles block protection twice a call, a system call
 * each; it checks a span's calls one by one its first times per key
 * (cpu_mem.c), then opens every block for the span, still checking each
 * argument to be device memory. Other devices do nothing. Spans do not
 * nest; every successful begin is followed by an end. */
int bfit_device_span_begin(bfit_device *d, uint64_t key);
void bfit_device_span_end(bfit_device *d);

/* Every op starts with this header so the generic functions can dispatch. */
struct bfit_op {
    bfit_device *dev;
    bfit_op_desc desc;
};

#endif
