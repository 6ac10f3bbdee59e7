/* layer.h - the layer interface: shape inference, memory needs for a
 * micro-batch, forward and backward on buffers the model owns.
 *
 * A layer never allocates device memory. It says what it needs (bfit_layer_need)
 * and the model hands it pointers carved from blocks the plan sized: that is
 * what lets the plan equal the allocation to the byte.
 */
#ifndef BFIT_LAYER_H
#define BFIT_LAYER_H

#include "device/device.h"
#include "tensor/tensor.h"

typedef enum {
    BFIT_L_LINEAR,
    BFIT_L_CONV,
    BFIT_L_MAXPOOL,
    BFIT_L_AVGPOOL,
    BFIT_L_GAP,        /* global average pool: CxHxW -> C */
    BFIT_L_RELU,
    BFIT_L_GELU,
    BFIT_L_FLATTEN,
    BFIT_L_DROPOUT,
    BFIT_L_BATCHNORM,  /* over channels of CxHxW (BatchNorm2d), or features of a vector (BatchNorm1d) */
    BFIT_L_LAYERNORM,  /* over the C*H*W features of each sample */
    BFIT_L_ADD,        /* residual add of two inputs of equal shape */
    BFIT_L_XENT,       /* softmax cross-entropy loss over a vector of class scores, or per token of a
                          sequence [T, V] (negative labels, padding, ignored) */
    BFIT_L_EMBED,      /* token ids [T] -> [T, C]: token, position (and token-type 0) embeddings */
    BFIT_L_ATTENTION,  /* multi-head self-attention: [T, 3C] (q | k | v) -> [T, C] */
    BFIT_L_CLIP,       /* min(max(x, lo), hi): ReLU6 (an ONNX Clip) */
    BFIT_L_CONCAT,     /* 1 to BFIT_LAYER_MAXIN inputs side by side along dimension `axis` of a sample */
    BFIT_L_RESHAPE,    /* the sample's elements in the shape `to` (a copy) */
    BFIT_L_TRANSPOSE,  /* a sample [a, b] -> [b, a] (a ViT's image channels to tokens); an image CxHxW -> [H*W, C]
                          and back (ConvNeXt's channels-last); with `groups` g an image's channels as
                          [g, C/g] -> [C/g, g] (ShuffleNet's channel shuffle) */
    BFIT_L_CLS,        /* a learned token before a sample's tokens: [T, C] -> [T+1, C] (ViT's class token) */
    BFIT_L_ADDP,       /* a learned tensor of the sample's shape added (ViT's position embedding) */
    BFIT_L_SELECT,     /* token `units` of [T, C] -> [C] (ViT's head reads the class token; -1: each sequence's
                          last real token, GPT-2's classifier); with `to` an image's channels [units, units +
                          to.c) (ShuffleNet's chunks) */
    BFIT_L_SIGMOID,    /* 1 / (1 + e^-x) */
    BFIT_L_SILU,       /* x * sigmoid(x) (swish; PyTorch's SiLU) */
    BFIT_L_TANH,
    BFIT_L_HARDSIGMOID, /* min(max(alpha x + beta, 0), 1); PyTorch's: alpha 1/6, beta 1/2 */
    BFIT_L_HARDSWISH,  /* x * hardsigmoid(x) with alpha 1/6, beta 1/2 (PyTorch's Hardswish) */
    BFIT_L_SCALE,      /* an image's channels each times its own number, the second input (C of them):
                          squeeze-and-excitation's gate */
    BFIT_L_LEAKYRELU,  /* x > 0 ? x : alpha x (PyTorch's LeakyReLU: negative slope alpha, default 0.01) */
    BFIT_L_ELU,        /* x > 0 ? x : alpha (e^x - 1) (PyTorch's ELU: alpha default 1) */
    BFIT_L_SOFTPLUS,   /* log(1 + e^(beta x)) / beta, x where beta x > threshold (PyTorch's Softplus:
                          beta 1, threshold 20 by default) */
    BFIT_L_SELU,       /* scale (x > 0 ? x : alpha (e^x - 1)), PyTorch's SELU's fixed alpha and scale
                          (BFIT_SELU_ALPHA, BFIT_SELU_SCALE) */
    BFIT_L_CELU,       /* x > 0 ? x : alpha (e^(x / alpha) - 1) (PyTorch's CELU: alpha not 0, default 1) */
    BFIT_L_PRELU,      /* x > 0 ? x : a x with learned slopes a: `units` of them, 1 or one per channel of
                          CxHxW (feature of a vector); PyTorch's PReLU, starting at alpha (0.25) */
    BFIT_L_LAYERSCALE, /* a x with learned scales a, one per channel of CxHxW or feature of a vector or
                          sequence [T, C] (timm's LayerScale, ConvNeXt's gamma), starting at alpha (1e-5) */
    BFIT_L_GROUPNORM,  /* over each sample's `units` groups of channels of CxHxW (or a vector), then a learned
                          scale and shift per channel (PyTorch's GroupNorm) */
    BFIT_L_RMSNORM,    /* x / sqrt(mean(x^2) + eps) w over each token's features (or a sample's), a learned
                          scale w (offset: 1 + w, Gemma's): LLaMA's RMSNorm */
    BFIT_L_MUL,        /* the elementwise product of two inputs of one shape: SwiGLU's silu(x W1) * (x W3) */
    BFIT_L_ROPE,       /* rotary position embedding of a sequence [T, C] in heads of `units` columns, base
                          `theta` (Hugging Face's rotate_half form: LLaMA's q and k) */
    BFIT_L_REPEAT,     /* a sequence's heads of `units` columns each repeated `groups` times: [T, g d] ->
                          [T, g groups d] (grouped-query attention's keys and values) */
    BFIT_L_GATHER,     /* the K rows of [T, C] that the loss scores -> [K, C] (a masked LM's head at its masked
                          tokens; inserted by bfit_graph_gather_head, not a spec keyword) */
    BFIT_L_COUNT
} bfit_layer_kind;

/* SELU's constants, PyTorch's (and ONNX's Selu defaults), as float */
#define BFIT_SELU_ALPHA 1.6732632423543772848170429916717f
#define BFIT_SELU_SCALE 1.0507009873554804934193349852946f

typedef struct bfit_layer_cfg {
    bfit_layer_kind kind;
    int units;          /* linear: out features; conv: out channels; prelu: slopes (1 or the channels);
                           layerscale: the input's channels (0: taken from the input); groupnorm: the
                           groups */
    int kh, kw;         /* conv/pool kernel */
    int sh, sw;         /* stride (pool default: kernel) */
    int ph, pw;         /* zero padding */
    int ceil;           /* maxpool: PyTorch's ceil_mode, the output size rounded up (bfit_pool_out) */
    int bias;           /* linear/conv: has bias (default 1) */
    float p;            /* dropout probability (dropout: default 0.5); attention: on its weights (default 0) */
    float eps;          /* norms (default 1e-5) */
    float momentum;     /* batch norm running-stat momentum (default 0.1, PyTorch's meaning) */
    int vocab;          /* embed: token ids in [0, vocab) */
    int positions;      /* embed: learned positions (0: none; else T <= positions) */
    int pos_fixed;      /* embed: the positions a constant table (a sinusoidal buffer of an ONNX file), not
                           trained: no gradient, no optimizer state, the file's values even with --init random */
    int pos_off;        /* embed: token t's position row is t + pos_off (RoBERTa's start after its padding_idx);
                           rows before it get no gradient */
    float escale;       /* embed: the token rows times this (0: 1; the Transformer tutorial's sqrt(C)) */
    int types;          /* embed: token types (BERT's segments; row 0 is added); 0: none */
    int causal;         /* attention: token i attends to tokens j <= i (default 1) */
    int lean;           /* attention: keep no attention matrix, recompute it in backward */
    int tanh;           /* gelu: PyTorch's approximate='tanh' (GPT-2's, minGPT's NewGELU) */
    int offset;         /* rmsnorm: 1 where the scale is 1 + weight (Gemma's RMSNorm, the weight starting at 0) */
    int tie;            /* linear: the weight is the embedding's token table (a tied head) */
    int share;          /* the node (1-based, before this one, of the same kind) whose parameters are
                           this layer's too: a module applied twice (ONNX); 0: its own */
    int wt;             /* linear: the weight stored [in, out] (transformers' Conv1D: x W + b), not nn.Linear's
                           [out, in] (x W^T + b) */
    float std;          /* linear: weights drawn with this spread and biases 0 (GPT-2 and BERT: 0.02,
                           GPT-2's residual projections 0.02 / sqrt(2 layers)); 0: PyTorch's default */
    int groups;         /* conv: channel groups (PyTorch's groups; 0 or 1: dense) */
    float lo, hi;       /* clip bounds */
    float alpha, beta;  /* hardsigmoid: min(max(alpha x + beta, 0), 1) (default 1/6, 1/2); leakyrelu:
                           alpha the negative slope (0.01); elu, celu: alpha (1); softplus: beta (1);
                           prelu: alpha the slopes' initial value (0.25); layerscale: the scales' (1e-5) */
    float threshold;    /* softplus: linear where beta x > threshold (default 20) */
    float theta;        /* rope: the angles' base (default 10000) */
    int axis;           /* concat: the sample's dimension joined (0: channels of CxHxW) */
    bfit_shape to;      /* reshape: the new shape; addp: the learned tensor's dims (PyTorch's, e.g. [1, T, C]);
                           transpose: the image a sample [H*W, C] goes back to (nd 0: none); select: the
                           image of the channels taken */
} bfit_layer_cfg;

/* Defaults for a kind (bias 1, eps 1e-5, momentum 0.1, stride 1, causal 1). */
bfit_layer_cfg bfit_layer_cfg_default(bfit_layer_kind kind);
/* (pools treat a stride <= 0 as "the kernel"; the spec sets it explicitly) */
const char *bfit_layer_kind_name(bfit_layer_kind kind); /* spec keyword: "linear", "conv", ... */

/* What a layer needs for micro-batch m besides its output buffer and the
 * gradient of its output, which the model sizes from the output shape. */
typedef struct bfit_layer_need {
    size_t saved;       /* activations: kept from forward to backward (masks, indices, stats) */
    size_t ws_fwd;      /* workspace during forward */
    size_t ws_bwd;      /* workspace during backward */
} bfit_layer_need;

#define BFIT_LAYER_MAXIN 32 /* inputs of one layer (add takes 2, a concatenation up to this) */

/* Buffers are device memory of the layer's dtype, [m, shape] each. */
typedef struct bfit_fwd_args {
    int m;
    int training;
    const void *x[BFIT_LAYER_MAXIN]; /* inputs, [m, in shape] */
    void *y;                   /* output, [m, out shape] */
    void *saved;               /* need.saved bytes (training only) */
    void *ws;                  /* need.ws_fwd bytes */
    uint64_t seed;             /* dropout: fresh per micro-step */
    int regen;                 /* a recomputation in backward: the same output, no side effects
                                  (batch norm leaves its running statistics alone) */
    const int32_t *labels;     /* XENT: [m] class indices (device) */
    const int32_t *lens;       /* ATTENTION: [m] real tokens of each sequence (device), NULL: all */
    const int32_t *rows;       /* GATHER: [m, K] the rows each sample's loss scores (device), -1 past them */
    void *stats;               /* XENT: device f64[2], += the summed loss and the samples right */
} bfit_fwd_args;

typedef struct bfit_bwd_args {
    int m;
    const void *x[BFIT_LAYER_MAXIN]; /* the forward's inputs */
    const void *y;             /* the forward's output */
    const void *dy;            /* gradient of the output (XENT: NULL) */
    void *dx[BFIT_LAYER_MAXIN];/* gradient of the inputs, overwritten; NULL: not wanted */
    void *saved;
    void *ws;                  /* need.ws_bwd bytes */
    const int32_t *labels;     /* XENT */
    const int32_t *lens;       /* ATTENTION, as in forward */
    const int32_t *rows;       /* GATHER, as in forward */
    float loss_scale;          /* XENT: dL/dloss_i, e.g. 1/E for a mean over the optimizer step */
    uint64_t seed;             /* the forward's (attention draws its dropout's mask again) */
    uint32_t dx_add;           /* bit k: add into dx[k] rather than overwrite it (a layer whose vt has
                                  dx_add: another consumer of that input wrote its gradient first) */
    int grad_set;              /* set the parameter gradients rather than add to them (a layer whose vt
                                  has grad_set: the first write to them in the step, src/nn/gradset.c) */
} bfit_bwd_args;

typedef struct bfit_layer bfit_layer;

/* What a layer's backward reads besides its saved bytes. A layer may offer
 * alternatives: relu needs the sign of its input, which its input, its
 * output or a bit mask each give; batch norm recovers its normalised input
 * from its output. The model picks one per layer (l->mode) so that backward
 * reads what is kept anyway (src/nn/layout.c). */
typedef enum {
    BFIT_MODE_X = 0,  /* its inputs (those it has) */
    BFIT_MODE_Y,      /* its output */
    BFIT_MODE_BITS,   /* neither: a sign bit per element in its saved bytes */
    BFIT_MODE_NONE,   /* nothing but its saved bytes */
    BFIT_NMODES
} bfit_bwd_mode;
#define BFIT_MODE(m) (1u << (m))

typedef struct bfit_layer_vt {
    bfit_layer_kind kind;
    int nin;   /* inputs: 1, or 2 for add; 0: any number from 1 to BFIT_LAYER_MAXIN */
    int dx_add; /* backward can add into an input's gradient (bfit_bwd_args.dx_add) */
    int grad_set; /* backward can set its parameters' gradients rather than add to them
                     (bfit_bwd_args.grad_set): each is written whole */
    unsigned modes; /* the BFIT_MODE()s its backward offers; the lowest is the default */
    /* Check cfg and input shapes, set out shape and params[] (names, dims,
     * flags); on a bad combination write a message saying which shapes and
     * what would be right into err and return BFIT_EINVAL. */
    int (*init)(bfit_layer *l, char *err, size_t errlen);
    /* Create device ops for micro-batch m (training or eval) and report the
     * needs; replaces ops prepared for another m. */
    int (*prepare)(bfit_layer *l, int m, int training, bfit_layer_need *need);
    /* Fill host[i] (numel floats) with params[i]'s initial values for a
     * fresh model (PyTorch's default init, seeded); the model uploads them. */
    void (*init_params)(bfit_layer *l, uint64_t seed, float *const *host);
    /* forward/backward are called through bfit_layer_forward/_backward, which
     * have checked that a->m and the mode match what was prepared */
    int (*forward)(bfit_layer *l, const bfit_fwd_args *a);
    /* Adds parameter gradients into params[i].grad (accumulation across
     * micro-batches); overwrites dx. */
    int (*backward)(bfit_layer *l, const bfit_bwd_args *a);
    void (*unprepare)(bfit_layer *l); /* free ops */
    /* The smallest micro-batch a training step can run (NULL: 1). Prepare
     * still takes any m >= 1, so that every size can be planned. */
    int (*min_batch)(const bfit_layer *l);
} bfit_layer_vt;

#define BFIT_LAYER_MAXP 16
#define BFIT_LAYER_MAXOPS 8
/* Prepared op sets kept besides the current one (src/nn/layer.c): a run
 * whose effective batch is no multiple of the micro-batch alternates two
 * sizes, and a plan query prepares a size and returns to the old. */
#define BFIT_LAYER_CACHE 3

/* Needs already computed, by everything they depend on: a plan asks for
 * the same sizes many times over (`plan --ways` made ResNet-50's ops
 * 156,625 times, 27 thousand of them different). The input shapes are
 * keyed by a 64-bit hash; the device's settings are fixed for its life and
 * no part of the key. */
#define BFIT_LAYER_MEMO 128
typedef struct bfit_layer_memo {
    uint64_t shapes;                /* hash of in[0..nin) */
    int m, training;                /* m 0: an empty entry */
    bfit_bwd_mode mode;
    bfit_dtype dtype;
    int blk_in, blk_out;
    bfit_layer_need need;
    uint64_t used;
} bfit_layer_memo;

/* Ops prepared for (m, training, mode) at the input shapes in[]. */
typedef struct bfit_layer_prep {
    int m, training;                /* m 0: an empty entry */
    bfit_bwd_mode mode;
    bfit_shape in[BFIT_LAYER_MAXIN];
    bfit_layer_need need;
    bfit_op *ops[BFIT_LAYER_MAXOPS];
    uint64_t used;                  /* when it was last current (the layer's tick) */
} bfit_layer_prep;

struct bfit_layer {
    const bfit_layer_vt *vt;
    bfit_layer_cfg cfg;
    bfit_device *dev;
    int nin;
    bfit_shape in[BFIT_LAYER_MAXIN];
    bfit_shape out;
    bfit_dtype dtype;               /* compute dtype: of its inputs, their gradients, its ops */
    bfit_dtype out_dtype;           /* of its output: dtype, but f32 for the loss's probabilities */
    int blk_in, blk_out;            /* conv, max pool, batch norm (relu, add: either) on the cpu: input /
                                       output (and their gradients) in blocks of 8 or 16 channels
                                       (0: nchw), chosen by the model (store.c) */
    int nparams;
    bfit_param params[BFIT_LAYER_MAXP];
    /* prepared state */
    int prep_m, prep_training;      /* 0: not prepared */
    bfit_bwd_mode mode, prep_mode;  /* what backward reads: chosen by the model before preparing */
    bfit_layer_need need;
    bfit_op *ops[BFIT_LAYER_MAXOPS];
    /* other prepared sets, swapped in by bfit_layer_prepare instead of made
     * again; only for layers whose prepared state is ops[] and need alone
     * (no unprepare of their own) */
    bfit_layer_prep cache[BFIT_LAYER_CACHE];
    bfit_layer_memo memo[BFIT_LAYER_MEMO];
    uint64_t tick;
};

/* Compute in dtype t (mixed precision): the output follows, but the loss's
 * probabilities stay f32. Unprepares the layer. */
void bfit_layer_set_dtype(bfit_layer *l, bfit_dtype t);
/* Input and output in blocks of 8 or 16 channels (nChw8c, nChw16c) or
 * nchw (0): device.h's blk_src, blk_dst; unprepares the layer when that
 * changes. */
void bfit_layer_set_blocked(bfit_layer *l, int in, int out);
/* Floating-point operations of a forward (and of a backward) at micro-batch
 * m, counting a multiply-add as 2: matmul and convolution exactly, others
 * a few per element. For reports of recomputed work. */
void bfit_layer_flops(const bfit_layer *l, int m, double *fwd, double *bwd);
/* The mode a layer uses unless the model chooses another. */
bfit_bwd_mode bfit_layer_default_mode(const bfit_layer_vt *vt);
/* What backward reads in the layer's mode: its inputs, its output. */
static inline int bfit_bwd_reads_input(const bfit_layer *l) { return l->mode == BFIT_MODE_X; }
static inline int bfit_bwd_reads_output(const bfit_layer *l) { return l->mode == BFIT_MODE_Y; }

/* Backward's op in slot, made from d at its first use rather than when the
 * layer is prepared: an op that sets a step's gradients (grad_set), which
 * plans, never running a step, do not make. Its workspace must fit the
 * one planned (need.ws_bwd), as an op that sets needs no more than the one
 * that adds (no temporaries to add). */
int bfit_layer_late_op(bfit_layer *l, int slot, const bfit_op_desc *d);

/* Make a layer of cfg.kind for the given input shapes (init runs). */
int bfit_layer_new(const bfit_layer_cfg *cfg, bfit_device *dev, const bfit_shape *in, int nin,
                   bfit_layer **out, char *err, size_t errlen);
void bfit_layer_free(bfit_layer *l);
/* Everything prepared goes, and every need remembered: the device's ops
 * would now be made differently (its thread count changed). */
void bfit_layer_forget(bfit_layer *l);
/* New input shapes for a built layer (a token model's sequence length):
 * shape inference again, the parameters (same shapes) kept, ops dropped.
 * On a refusal the layer is as it was. */
int bfit_layer_reshape(bfit_layer *l, const bfit_shape *in, char *err, size_t errlen);
/* Prepare for (m, training) unless already prepared so; need is filled.
 * The ops prepared before are kept (BFIT_LAYER_CACHE sets, the least
 * recently used dropped) and come back without being made again. */
int bfit_layer_prepare(bfit_layer *l, int m, int training);
/* Forward / backward of the prepared micro-batch. BFIT_ESTATE if a->m (or,
 * for forward, the training mode) is not what was prepared: the ops and the
 * caller's buffers are sized for that. */
int bfit_layer_forward(bfit_layer *l, const bfit_fwd_args *a);
int bfit_layer_backward(bfit_layer *l, const bfit_bwd_args *a);
/* The layer's needs for m without disturbing what is prepared (creates and
 * frees ops if m differs). */
/* The smallest micro-batch l can be trained on (batch norm over vectors: 2). */
int bfit_layer_min_batch(const bfit_layer *l);
int bfit_layer_query(bfit_layer *l, int m, int training, bfit_layer_need *need);

/* The usual pair of ops: ops[0] from d, and when training ops[1] from d
 * with kind bwd; need's saved is set to 0 and its workspaces to the ops'. */
int bfit_layer_op_pair(bfit_layer *l, bfit_op_desc *d, bfit_op_kind bwd, int training, bfit_layer_need *need);
/* Such a pair run on one input: ops[0] from x[0] to y, ops[1] from dy to
 * dx[0] (nothing when no one wants dx[0]), each with the workspace. */
int bfit_layer_fwd1(bfit_layer *l, const bfit_fwd_args *a);
int bfit_layer_bwd1(bfit_layer *l, const bfit_bwd_args *a);
/* Where a norm's per-row statistics go for its forward: `saved` when l was
 * prepared for training (kept for backward, whatever the forward's mode),
 * else scratch after its forward op's (ops[0]) own workspace in ws, which
 * the layer's ws_fwd sized so (layer_layernorm.c, layer_groupnorm.c). */
char *bfit_layer_stats_at(const bfit_layer *l, void *saved, void *ws);

/* Layer bytes per category for micro-batch m, 64-byte aligned per buffer:
 * params/grads from params[], activations = output + saved, act_grads =
 * gradient of the output, workspace = max(ws_fwd, ws_bwd). */
int bfit_layer_memory(bfit_layer *l, int m, int training, uint64_t bytes[BFIT_MEM_NCAT]);

/* The vtables, one per file in src/nn/. */
extern const bfit_layer_vt bfit_linear_vt, bfit_conv_vt, bfit_maxpool_vt, bfit_avgpool_vt,
    bfit_gap_vt, bfit_relu_vt, bfit_gelu_vt, bfit_flatten_vt, bfit_dropout_vt, bfit_batchnorm_vt,
    bfit_layernorm_vt, bfit_add_vt, bfit_xent_vt, bfit_embed_vt, bfit_attention_vt, bfit_clip_vt, bfit_concat_vt,
    bfit_reshape_vt, bfit_transpose_vt, bfit_cls_vt, bfit_addp_vt, bfit_select_vt, bfit_sigmoid_vt, bfit_silu_vt,
    bfit_tanh_vt, bfit_hardsigmoid_vt, bfit_hardswish_vt, bfit_chscale_vt, bfit_leakyrelu_vt, bfit_elu_vt,
    bfit_softplus_vt, bfit_selu_vt, bfit_celu_vt, bfit_prelu_vt,
    bfit_layerscale_vt, bfit_groupnorm_vt, bfit_rmsnorm_vt, bfit_mul_vt, bfit_rope_vt,
    bfit_repeat_vt, bfit_gather_vt;

/* Deterministic init helpers shared by layers (host buffers): uniform(-bound,
 * bound) from a counter-based generator so results do not depend on call
 * order. */
void bfit_fill_uniform(float *x, int64_t n, float bound, uint64_t seed);
void bfit_fill_const(float *x, int64_t n, float v);

#endif
