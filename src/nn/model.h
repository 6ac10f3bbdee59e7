/* model.h - a built model: layers wired as a graph, its parameters, and the
 * per-micro-batch buffers carved from blocks whose sizes the layout computes.
 *
 * Plan, then allocate (llm.c): bfit_model_layout() is a pure function of the
 * model and (m, training) giving every byte of the step's activations,
 * activation gradients, workspace and input; bfit_model_reserve() allocates
 * exactly those blocks, and forward/backward touch nothing else. All of it
 * is device memory: samples go in by bfit_model_set_input, the loss, the
 * accuracy count and the probabilities come back by download.
 */
#ifndef BFIT_MODEL_H
#define BFIT_MODEL_H

#include "nn/graph.h"
#include "nn/layer.h"

/* ---- models and their memory plan ---------------------------------------- */
/* A model built from a preset name (mlp, cnn, resnet18, resnet50, vgg16) or
 * a spec file (docs/model-spec.md). */
typedef struct bfit_model bfit_model;

/* How a training step stores what backward needs (docs/memory.md). */
typedef enum {
    BFIT_RECOMPUTE_NONE = 0,  /* keep what backward reads (lean: as little as that) */
    BFIT_RECOMPUTE_BLOCKS,    /* keep only the values between residual blocks (every cut of the graph) */
    BFIT_RECOMPUTE_SQRT,      /* keep every ~sqrt(n)-th cut (Chen et al. 2016) */
    BFIT_RECOMPUTE_CUTS,      /* keep the values given (what auto resolves to) */
    BFIT_RECOMPUTE_AUTO,      /* the values to keep that make the target batch fit with the least
                                 recomputed work (src/batch/recompute.c) */
    BFIT_RECOMPUTE_COUNT
} bfit_recompute_kind;

/* Dynamic loss scaling (GradScaler's): the loss times S before backward;
 * a step with inf/NaN gradients is skipped (its samples still count) and S
 * halved; S doubles after an interval of clean steps. */
enum { BFIT_LOSS_SCALE_AUTO = 0, BFIT_LOSS_SCALE_NONE, BFIT_LOSS_SCALE_DYNAMIC };

typedef struct bfit_storage {
    bfit_dtype precision;           /* f32; bf16 or f16: 16-bit activations, gradients and compute,
                                       f32 master weights and optimizer state */
    int lean;                       /* 1: store as little as backward reads (relu bits, batch norm
                                       from its output); 0: inputs and outputs as they are */
    bfit_recompute_kind recompute;
} bfit_storage;

/* f32, lean, no recomputation. */
bfit_storage bfit_storage_default(void);
/* "f32", "bf16", "f16" (case-insensitive); BFIT_EINVAL naming the valid ones. */
int bfit_precision_parse(const char *name, bfit_dtype *out);
/* What the plan and the train log add after a precision --precision auto chose. */
const char *bfit_precision_auto_note(bfit_dtype chosen);
/* "none", "blocks", "sqrt", "auto"; BFIT_EINVAL naming the valid ones. */
int bfit_recompute_parse(const char *name, bfit_recompute_kind *out);
const char *bfit_recompute_name(bfit_recompute_kind k);

/* Load a model for planning on dev (its ops decide workspace sizes; NULL:
 * shapes only, no planning): a preset, a spec file or an ONNX file
 * (docs/onnx.md). Errors name file:line:col for a spec, the node for ONNX. */
int bfit_model_load(const char *preset_or_spec, bfit_device *dev, bfit_model **out);
/* The same from an ONNX model of len bytes in memory (copied; source names it
 * in messages). Its initializers are the parameters' starting values. */
int bfit_model_load_onnx(const void *buf, size_t len, const char *source, bfit_device *dev, bfit_model **out);
void bfit_model_free(bfit_model *M);
/* Trainable scalars. */
int64_t bfit_model_param_count(const bfit_model *M);
/* Class scores the model outputs. */
int bfit_model_classes(const bfit_model *M);
/* The storage a model has now, auto resolved: its recomputation reads
 * cuts then, with the number of values it keeps. */
bfit_storage bfit_model_storage(const bfit_model *M);



#define BFIT_OFF_NONE UINT64_MAX

/* A training step is a schedule of actions: every node's forward, then in
 * backward order each node's backward, preceded where needed by the
 * regeneration (a second forward) of outputs that were not kept. */
typedef enum { BFIT_ACT_FWD, BFIT_ACT_REGEN, BFIT_ACT_BWD } bfit_act_kind;
typedef struct bfit_act {
    bfit_act_kind kind;
    int node;
} bfit_act;

/* Where every buffer of a step lives. Offsets are into the category's block. */
typedef struct bfit_layout {
    int m, training;
    uint64_t bytes[BFIT_MEM_NCAT];   /* activations, act_grads, workspace, input (params etc. 0) */
    uint64_t no_reuse[BFIT_MEM_NCAT];/* the same without any buffer sharing (for reports) */
    int nvalues;                     /* nodes + 1 */
    int nact;                        /* the schedule: FWD 0..n-1 first (eval: only those) */
    bfit_act *act;
    uint64_t *y_off;                 /* per value: activations offset in forward (value 0: input block) */
    uint64_t *r_off;                 /* per value: offset of its regenerated copy, or NONE */
    uint64_t *saved_off;             /* per node: activations offset of its forward's saved bytes */
    uint64_t *rsaved_off;            /* per node: of its regeneration's saved bytes, or NONE */
    uint64_t *dy_off;                /* per value: act_grads offset of its gradient, or NONE */
    uint64_t *tmp_off;               /* per node: act_grads offset of a temp for a summed dx, or NONE */
    int *tmp_input;                  /* per node: which input uses tmp_off, -1 none */
    uint32_t *dx_add;                /* per node: bit k, its backward adds into input k's gradient (a
                                        concatenation: another consumer wrote it first), or NULL */
    uint64_t labels_off;             /* input block: labels after the samples */
    uint64_t rows_off;               /* input block: with a gather (model.h's gather), the rows each
                                        sample's loss scores, int32 [m, K] after the lengths; else NONE */
    uint64_t lens_off;               /* input block: the sequences' real lengths after the labels
                                        (int32 [m]; a model with bidirectional attention), or NONE */
    double flops, regen_flops;       /* of the step, and of its regenerations (a part of it) */
} bfit_layout;

/* How a model stores a training step. */
typedef struct bfit_store_cfg {
    bfit_dtype precision;            /* compute dtype of activations and their gradients */
    int lean;                        /* choose what backward reads so that little is kept, and
                                        regenerate what cheap layers (batch norm, elementwise
                                        activations, add, max pool; store.c cheap()) compute
                                        from kept values (docs/memory.md) */
    bfit_recompute_kind recompute;
    const unsigned char *keep;       /* CUTS: per value, 1 to keep a cut value (copied) */
    int keep_cheap;                  /* lean but keep what cheap layers compute, but for relu
                                        outputs (auto may choose it; tests compare) */
} bfit_store_cfg;

/* The model's fixed statistics block (BFIT_MEM_OTHER): f64 loss sum and
 * samples right, added to by every forward with labels. */
#define BFIT_MODEL_STATS_BYTES BFIT_ALIGN_UP(2 * sizeof(double))

typedef struct bfit_node {
    bfit_layer *l;
    int in[BFIT_LAYER_MAXIN];        /* value ids, -1 past l->nin */
    int nconsumers;                  /* of this node's output value */
    bfit_op *acc;                    /* adds a temp gradient into its value's (tmp_input >= 0) */
    int id;                          /* its number in the model as written (a gather inserted before it
                                        does not count: graph.h's inserted): names, file weights, init */
    int grad_set;                    /* its backward sets its parameters' gradients in a step's first
                                        micro-batch (gradset.c) */
} bfit_node;

/* A token model's prepared state at one sequence length (seq.c): each
 * layer's shapes and ops, the nodes' accumulation ops, and the step laid out
 * at that length, kept while the model runs at another. */
typedef struct bfit_seq_node {
    bfit_shape in[BFIT_LAYER_MAXIN], out;
    int prep_m, prep_training;
    bfit_bwd_mode prep_mode;
    bfit_layer_need need;
    bfit_op *ops[BFIT_LAYER_MAXOPS];
    bfit_op *acc;
} bfit_seq_node;

typedef struct bfit_seq_slot {
    int T;                 /* 0: empty */
    uint64_t used;         /* for replacement: the least recently used goes */
    int m, training;       /* the step laid out at T (lay), m 0: none */
    bfit_layout lay;
    bfit_seq_node *nodes;  /* [M->n] */
} bfit_seq_slot;

typedef struct bfit_model {
    bfit_device *dev;
    bfit_arena *arena;
    bfit_shape input;
    bfit_dtype input_dtype;
    int nclasses;
    int labels_per_sample; /* 1, or T for a sequence model: one label per token (-1: padding) */
    int per_token;         /* a sequence model: its loss is per token, whatever T (1 too) */
    int seq_lens;          /* has bidirectional attention: stages each sequence's real length (up to
                              its last label that counts) for its key-padding mask */
    int32_t *stage_lens;   /* host staging of those lengths */
    int64_t stage_lens_n;
    int gather;            /* 1 + the node of a masked LM's gather (head.c), 0 none: the loss reads K labels a
                              sample, those that count, where the rows gathered were (exec.c compacts them) */
    int32_t *stage_rows;   /* host staging of the compacted labels and their rows, [2, m, K] */
    int64_t stage_rows_n;
    int32_t *stage_ids;    /* host staging of ids with padding (-1) made 0 */
    int64_t stage_ids_n;
    int n;                 /* nodes, the loss last */
    bfit_node *nodes;
    int in0_consumers;     /* consumers of the model input */
    bfit_store_cfg store;  /* precision, lean, recompute */
    unsigned char *regen;  /* per value: not kept, regenerated when backward needs it */
    unsigned char *cut;    /* per value: every later node reads only it or later values */
    unsigned char *keep;   /* per value: the CUTS configuration's */
    int no_inplace;        /* tests: every activation gradient its own bytes (layout.c) */
    int grads_apart;       /* tests: activation gradients placed apart from the activations (layout.c) */
    int ncopies;           /* parameters with a compute copy (mixed precision) */
    bfit_op **cast;        /* per parameter: the cast refreshing its compute copy, or NULL */
    uint64_t copy_bytes;   /* of the compute copies, in the params block after the masters */
    uint64_t seed;         /* of the last forward: regenerations redraw its dropout */
    uint16_t *stage16;     /* host staging of 16-bit samples */
    int64_t stage16_n;
    unsigned char *needs_grad; /* per value: a trainable parameter upstream, so backward computes its
                                  gradient (never the input's: PyTorch's requires_grad) */
    char source[256];
    struct bfit_wsrc *wsrc; /* starting weights from the model file (a reference), or NULL */
    int init_random;       /* 1: bfit_model_init_params draws every parameter, ignoring wsrc */
    /* parameters: one block each for values and gradients */
    int nparams, ntrainable;
    bfit_param **params;   /* all (incl. running stats), in node order */
    bfit_param **trainable;
    void *param_block, *grad_block;
    uint64_t param_bytes, grad_bytes;  /* param: masters + compute copies */
    unsigned char *grad_zero; /* per trainable parameter: zeroed between steps, as no backward sets it */
    int grads_stale;       /* the gradients no backward sets are zeroed, the others hold an earlier
                              step's values until their first writer sets them (gradset.c) */
    uint64_t master_bytes;
    void *stats;           /* BFIT_MODEL_STATS_BYTES in BFIT_MEM_OTHER */
    /* the reserved step */
    int m, training;
    bfit_layout lay;
    void *block[BFIT_MEM_NCAT];      /* activations, act_grads, workspace, input */
    uint64_t block_bytes[BFIT_MEM_NCAT];
    /* token models: the state prepared at other lengths (seq.c) */
    bfit_seq_slot *seq;
    int nseq;
    uint64_t seq_tick;
    bfit_shape *seq_val;   /* [n + 1]: the values' shapes while reshaping */
} bfit_model;

/* The labels the loss reads a sample: labels_per_sample, or with a gather its K
 * rows at the model's length now. */
static inline int bfit_model_loss_rows(const bfit_model *M)
{
    return M->gather ? M->nodes[M->gather - 1].l->out.d[0] : M->labels_per_sample;
}

/* Build layers from a graph description (shape inference; no device memory).
 * Errors name file:line:col of the node at fault. dev and arena may be NULL
 * for a shape-only model (no prepare/reserve then). */
int bfit_model_new(const bfit_graph_desc *g, bfit_device *dev, bfit_arena *arena, bfit_model **out);
void bfit_model_free(bfit_model *M);

/* How the model stores a step (defaults: f32, lean, no recomputation).
 * Before parameters are allocated (compute copies are sized by it); sets the
 * layers' dtypes and backward modes and the values to regenerate. */
bfit_store_cfg bfit_store_cfg_default(void);
int bfit_model_configure(bfit_model *M, const bfit_store_cfg *c);
/* The block of channels M's layout chains use on a device that computes in
 * B (its layout block): B, or 8 for 16 where that keeps far more of the
 * convolutions' inputs and outputs in chains (groups of 8 channels). */
int bfit_model_pick_block(const bfit_model *M, int B, int *pick);
/* Refresh the compute copies of the parameters (mixed precision) from the f32
 * masters: after init, an optimizer step, a load. Nothing without copies. */
int bfit_model_refresh_copies(bfit_model *M);
uint64_t bfit_model_copy_bytes(const bfit_model *M);

/* A token model's sequence length T (at most its positions): every layer
 * reshaped, the parameters unchanged; the plan (bfit_model_layout) is then
 * at T, and the next reserve lays the step out again, reusing the blocks
 * held when they are large enough. The state prepared at a length (shapes,
 * ops, the step's layout) is kept when the model moves to another, so that
 * going back is a lookup that allocates nothing (seq.c). BFIT_EINVAL (field
 * "seq") leaves the model at its length. */
int bfit_model_set_seq(bfit_model *M, int T);
/* bfit_model_reserve's first look: the state kept for the model's length
 * and (m, training), taken back if the blocks held fit its step (1), so a
 * micro-batch size met before at this length allocates nothing; 0: lay out. */
int bfit_model_seq_reserve(bfit_model *M, int m, int training);
/* Drop the state kept per length (a configuration change makes it stale). */
void bfit_model_seq_forget(bfit_model *M);
/* Whether the step blocks held are large enough for lay (seq.c's check
 * before it takes back a step laid out earlier). */
int bfit_model_blocks_fit(const bfit_model *M, const bfit_layout *lay);

/* Bytes of params (and grads if training) the model allocates, and of its
 * fixed statistics block. */
uint64_t bfit_model_param_bytes(const bfit_model *M);
uint64_t bfit_model_grad_bytes(const bfit_model *M);
int64_t bfit_model_param_count(const bfit_model *M); /* trainable scalars */
/* The smallest micro-batch a training step can run: 1, or more where a
 * layer needs it (batch norm over vectors needs two values per channel). */
int bfit_model_min_batch(const bfit_model *M);
/* A sample's bytes in the host's staging: its input as f32 and its labels
 * as int32 (labels_per_sample). */
uint64_t bfit_model_sample_host_bytes(const bfit_model *M);
/* A token model's embedding vocabulary: its ids are [0, vocab); 0 for a
 * model whose input is not token ids. */
int bfit_model_vocab(const bfit_model *M);
/* The token types its embedding has rows for (a sentence pair's segments): 1 without a table. */
int bfit_model_types(const bfit_model *M);

/* 1 if an attention layer of M is causal (a decoder's: a token sees none
 * after it). */
int bfit_model_causal(const bfit_model *M);

/* Allocate the params block, the statistics block (and the grads block if
 * with_grads); OOM leaves nothing allocated. Then bfit_model_init_params
 * fills the parameters with PyTorch-style init from seed (computed on the
 * host, uploaded). */
int bfit_model_alloc_params(bfit_model *M, int with_grads);
int bfit_model_init_params(bfit_model *M, uint64_t seed);
/* Parameters the model file gives (an ONNX model's initializers) start from
 * the file's values in bfit_model_init_params unless random is set; the
 * others are drawn. Whether the model file has any. */
void bfit_model_set_init_random(bfit_model *M, int random);
int bfit_model_has_file_weights(const bfit_model *M);
/* The name node's parameter k has in the model file (PyTorch's state_dict
 * name, for weights files), or NULL: none (then "<node>.<param>"). */
const char *bfit_model_param_name(const bfit_model *M, int node, int k);
/* The shape node's parameter k has in the model file, where it has one of
 * the same elements in another shape (a layer scale's [C,1,1] or [1,1,C],
 * which the layer holds as [C]; one learned number, 0-d in the file, held
 * as [1]), else its own: the number of dimensions (0 for a 0-d one),
 * dim[0..BFIT_PARAM_MAXD) set. */
int bfit_model_param_dims(const bfit_model *M, int node, int k, int64_t *dim);
/* Start a step's gradients: the next backward's first writes set them, the
 * rest are zeroed (gradset.c). Read them only after that backward. */
int bfit_model_zero_grads(bfit_model *M);
/* gradset.c: which nodes set their gradients (after tying), and the zeroing
 * of the others. */
int bfit_gradset_plan(bfit_model *M);
int bfit_gradset_zero(bfit_model *M);

/* The pure plan of a step's buffers for micro-batch m. Prepares nothing that
 * stays and allocates no device memory. Free with bfit_layout_fini. */
int bfit_model_layout(bfit_model *M, int m, int training, bfit_layout *lay);
void bfit_layout_fini(bfit_layout *lay);

/* Reserve exactly the layout's blocks for (m, training) and prepare layers.
 * All-or-nothing: on BFIT_ENOMEM nothing of the step is held (m = 0). If the
 * blocks already held are large enough they are reused without allocating. */
int bfit_model_reserve(bfit_model *M, int m, int training);
void bfit_model_unreserve(bfit_model *M);
/* The step's blocks released and every op and need the layers prepared
 * dropped (a token model's other lengths too): the device now makes its
 * ops differently (bfit_device_set_threads). The next reserve makes them
 * again. */
void bfit_model_forget_ops(bfit_model *M);
/* Bytes of the step blocks held now (activations, act_grads, workspace, input). */
uint64_t bfit_model_step_bytes(const bfit_model *M);

/* Upload n = M->m samples (host: f32, or int32 token ids) and their labels
 * (labels_per_sample each) into the reserved input block; 16-bit inputs are
 * converted on the host. Token ids and labels are checked here, on the host.
 * Token ids may end in -1, padding (uploaded as id 0). A model with
 * bidirectional attention also gets each sequence's real length: up to its
 * last label that counts (all T without labels), or with one label a
 * sequence (a classifier) up to its -1 padding. */
int bfit_model_set_input(bfit_model *M, const void *x, const int32_t *labels, int n);
/* m random samples and labels set as the input (synth.c): for a step that is
 * only timed; a token model's ids of its vocabulary, with a masked LM's share
 * p > 0 (a gathered head's own where 0) a label at p of the tokens. *seed
 * moves on. */
int bfit_model_random_input(bfit_model *M, int m, double p, uint64_t *seed);
int bfit_model_upload_samples(bfit_model *M, const void *x, int n);
/* Whether n sequences of T ids (checked, bfit_model_check_tokens) hold padding: a -1 last. */
int bfit_model_padded(const int32_t *ids, int n, int64_t T);
int bfit_model_check_labels(const bfit_model *M, const int32_t *labels, int n);
int bfit_model_check_tokens(const bfit_model *M, const int32_t *ids, int n);
/* The labels in the reserved input block (device). */
const int32_t *bfit_model_labels(bfit_model *M);
/* The sequences' real lengths in it (device), or NULL (no bidirectional attention). */
const int32_t *bfit_model_lens(bfit_model *M);

/* Forward the reserved micro-batch; the loss summed over its samples and the
 * samples whose arg-max class is the label are added to the model's
 * statistics on the device. */
int bfit_model_forward(bfit_model *M, uint64_t seed);
/* Backward; parameter gradients are ADDED to (accumulation), scaled so that
 * the loss of the step is sum(losses) * loss_scale. */
int bfit_model_backward(bfit_model *M, float loss_scale);

/* The statistics since the last reset: summed loss and samples right
 * (downloaded; waits for the device). */
int bfit_model_stats_reset(bfit_model *M);
int bfit_model_stats_read(bfit_model *M, double *loss, double *correct);

/* The output (softmax probabilities) of the last forward, [m, nclasses]
 * ([m, T, nclasses] for a sequence model), downloaded into host. */
int bfit_model_read_probs(bfit_model *M, float *host);

#endif
