/* onnx_int.h - what the ONNX lowering's files share: the values of the graph
 * as the lowering sees them, and the helpers op handlers use to read
 * attributes and constants, emit layers and refuse what they cannot map.
 *
 * A value is on the device (a tensor with the batch first: a node of the
 * graph description, value id and per-sample shape) or on the host (an
 * initializer, a Constant, or integers computed from shapes). Identity-like
 * ops (Identity, Flatten of a vector, Dropout of ratio 0, Pad of nothing)
 * alias their input: no layer. */
#ifndef BFIT_ONNX_INT_H
#define BFIT_ONNX_INT_H

#include "nn/onnx.h"
#include "nn/wsrc.h"

enum {
    OV_NONE = 0,
    OV_DEVICE,   /* a tensor on the device, batch first */
    OV_HOST,     /* numbers on the host: an initializer, a Constant, or shape arithmetic (h) */
    OV_UNAVAIL,  /* an output batchfit does not compute (why) */
    OV_VIEW,     /* a tensor inside a block mapped whole onto layers (an attention): only its shape */
    OV_WT,       /* the transpose of initializer t (nn.Linear's weight before a MatMul) */
    OV_BCAST,    /* initializer t broadcast over the batch (an Expand of a class token) */
    OV_ROWS,     /* rows 0 .. rb[0]-1 of initializer t (a position table gathered by torch.arange) */
    OV_KEYMASK,  /* the attention_mask input on its way to the scores (onnx_keymask.c): km, rank, ra, rb */
    OV_PADID,    /* made by comparing the ids with the pad token (onnx_padid.c): its stage `padid`, rank, ra, rb */
    OV_POOL      /* a mean of the real tokens weighted by the attention mask (onnx_pool.c): its stage `pool` */
};

/* Numbers computed on the host. Integers are affine in the micro-batch m,
 * a * m + b, so that shape arithmetic holds for every m at once (the batch
 * is free); floats are plain. */
typedef struct hval {
    int isf;
    int nd;
    int64_t dim[BFIT_ONNX_MAXD];
    int64_t n;
    int64_t *a, *b;               /* integers (and booleans) */
    double *f;                    /* floats */
} hval;
#define BFIT_ONNX_MAXHOST (1 << 22)  /* elements of a host value (a causal mask of 2048 x 2048 tokens) */
#define BFIT_ONNX_HOSTTOTAL (1 << 24) /* elements of all host values of a model together */

typedef struct oval {
    bfit_onnx_str name;
    int kind;
    int producer;                 /* node index, -1: a graph input or initializer */
    /* device */
    int id;                       /* the graph description's value (0: the model input) */
    bfit_shape shape;             /* per sample */
    int pad[2];                   /* a Pad's zero padding (h, w) waiting for the Conv or AveragePool after it */
    int cl[2];                    /* H and W of a value ONNX sees channels-last, [N,H,W,C], held as tokens
                                     [H*W, C] (the same bytes); 0: none */
    int typerow;                  /* OV_ROWS: row 0 of a token type table for every token (BERT's token_type_ids,
                                     all 0), not positions */
    int rows;                     /* tokens [T, C] a sample that ONNX sees flattened into rows [N*T, C]
                                     (transformers' Conv1D: x.view(-1, C), addmm, view back) */
    int shuf[2];                  /* OV_VIEW of a channel shuffle (onnx_shuffle.c): its groups, and 1 once
                                     transposed; the image's id and shape are the value's */
    int att[3];                   /* OV_VIEW inside self-attention written out by hand (onnx_mhsa.c): its
                                     stage (0: none), heads, and which of q, k, v (0-2; -1: all or none);
                                     the projection's (or the attention output's) id and shape */
    int att_sep;                  /* there: q, k and v are separate projections (LLaMA's wq, wk, wv), the
                                     view's id and shape one of them [T, C], not [T, 3C] */
    int att_qk[2];                /* there, the scores and after: q's and k's ids (separate projections) */
    float att_theta;              /* there, on the way through a rotary embedding: its base, read from a table */
    int att_rep;                  /* there, on the way through repeated heads: the copies of each */
    double att_scale;             /* there: the factor on the scores so far */
    int att_causal;               /* there: a causal mask is on the scores */
    float att_drop;               /* there, on the probabilities: the dropout on them (timm's attn_drop) */
    int gn[2];                    /* OV_VIEW inside a group norm's export (onnx_gnorm.c): its stage (0: none)
                                     and groups; the image's id and shape are the value's */
    float gn_eps;                 /* there: InstanceNormalization's epsilon */
    int padid;                    /* OV_PADID: the stage (onnx_padid.c); at the scores as rows, id and shape */
    int pos_off;                  /* OV_PADID at RoBERTa's positions, OV_ROWS: token 0's row of the table */
    int pool;                     /* OV_POOL: the stage (onnx_pool.c); id and shape the tokens averaged */
    int km[3];                    /* OV_KEYMASK: its form (onnx_keymask.c), the keys' T, and 1 where a causal
                                     mask is in it */
    bfit_onnx_str gn_w;           /* there, after the Mul: the scale's initializer */
    /* host */
    const bfit_onnx_tensor *t;    /* an initializer's or a Constant's tensor */
    int init;                     /* initializer index, -1: none */
    int preads;                   /* the layers that took this value (an initializer or its alias) as a parameter */
    int pnode, pk;                /* the first of them (a node id, 1-based) and the parameter it is there */
    int src;                      /* OV_WT: the value transposed, an index into the values (an initializer or an
                                     Identity's alias of one) */
    const char *why;              /* OV_UNAVAIL: what the value is (an output batchfit does not compute); OV_HOST:
                                     a graph input batchfit knows without feeding it (token_type_ids) */
    hval *h;                      /* OV_HOST: its numbers, once read or computed */
    /* device and OV_VIEW: the ONNX shape, the batch's dimension included, each a * m + b */
    int rank;
    int64_t ra[BFIT_ONNX_MAXD], rb[BFIT_ONNX_MAXD];
} oval;

typedef struct onnx_lower {
    const bfit_onnx_model *om;
    bfit_graph_desc *g;
    bfit_wsrc *w;
    oval *v;
    int nv, cap;
    int *slot;                    /* hash table of value names -> index into v, -1 empty */
    int nslot;                    /* a power of two */
    int *param_used;              /* per initializer: the layers that took it as a parameter so far */
    const bfit_onnx_node *nd;     /* the node being lowered */
    int ndi;                      /* its index */
    unsigned char *done;          /* per node: lowered already, as part of a block (attention, GELU) */
    int *cons, *coff;             /* each node's consumers (node indices, by input): cons[coff[i]..coff[i+1]) */
    hval **hv;                    /* host values made, freed at the end */
    int nhv, caphv;
    int64_t host_total;           /* their elements (at most BFIT_ONNX_HOSTTOTAL: a file cannot make the
                                     host compute without end) */
    struct attn_match *attn;      /* attention blocks found before lowering (onnx_attn.c) */
    int nattn;
    int64_t fixed_batch;          /* the input's batch in an export without a dynamic batch, 0: dynamic */
    int seq;                      /* the length a symbolic T of token ids takes (--seq), 0: none given */
    int seq_first;                /* token ids [T, batch] (nn.Transformer's default layout): every token tensor
                                     is [T, batch, C] in the file, [batch, T, C] on the device, the same math */
    int tok_table;                /* the initializer an embed layer took as its token table, -1: none */
    int keymask;                  /* the graph has an attention mask input (onnx_keymask.c) */
    int attn_miss;                /* 1 + the first Softmax that is no attention block batchfit knows, 0: none
                                     (a refusal inside such a block says so) */
} onnx_lower;

/* Value by name, or NULL. */
oval *bfit_onnx_val(onnx_lower *L, bfit_onnx_str name);
/* The node's input k: NULL when absent (optional, left out). */
oval *bfit_onnx_in(onnx_lower *L, int k);
/* Output k of the node being lowered. */
oval *bfit_onnx_out(onnx_lower *L, int k);

/* Refuse the node: BFIT_EINVAL, "SOURCE: node 'NAME' (OP, opset N) with
 * inputs 'a' [N,3,32,32], ...: " + the message. */
int bfit_onnx_refuse(onnx_lower *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Attributes: the value or the default; an attribute of another type is refused. */
const bfit_onnx_attr *bfit_onnx_attr_get(onnx_lower *L, const char *name);
/* Any node's attribute, or NULL: a look-ahead reads it without refusing (the readers below refuse on the
   node being lowered). */
const bfit_onnx_attr *bfit_onnx_node_attr(const bfit_onnx_node *nd, const char *name);
int bfit_onnx_attr_int(onnx_lower *L, const char *name, int64_t dflt, int64_t *out);
int bfit_onnx_attr_float(onnx_lower *L, const char *name, float dflt, float *out);
/* An ints attribute of exactly n values (n 0: any up to BFIT_ONNX_MAXATTR, count in *got); absent: *got 0. */
int bfit_onnx_attr_ints(onnx_lower *L, const char *name, int64_t *out, int n, int *got);

/* A host value's numbers (an initializer or Constant), at most max of them:
 * the node's input k must be on the host. */
int bfit_onnx_host_i64(onnx_lower *L, int k, int64_t *out, int max, int *n);
int bfit_onnx_host_f32(onnx_lower *L, int k, float *out, int max, int *n);

/* Input k on the device without a pending Pad (refused otherwise). */
int bfit_onnx_dev_in(onnx_lower *L, int k, oval **out);

/* Emit a layer for the node: cfg over the device inputs in[0..nin), with
 * params[p] (NULL: drawn) the initializers of its parameters in the layer's
 * order, checked against the shapes the layer gives them; output 0 of the
 * node becomes the layer's output. */
int bfit_onnx_emit(onnx_lower *L, const bfit_layer_cfg *cfg, oval *const *in, int nin, oval *const *params,
                   int nparams);
/* Output 0 is input value x itself (no layer). */
void bfit_onnx_alias(onnx_lower *L, const oval *x);
/* Outputs from k on may not be read (what they are, for the message). */
void bfit_onnx_unavail(onnx_lower *L, int from, const char *why);

/* The op handlers of the CNN operators (onnx_ops.c): 1 and the handler's
 * result if op is one of them, 0 if not. */
int bfit_onnx_lower_cnn(onnx_lower *L, int *rc);

/* ---- the host (onnx_host.c) ---- */
hval *bfit_onnx_hval_new(onnx_lower *L, int isf, int nd, const int64_t *dim);
/* The numbers of a host value (read from its tensor on first use), or NULL
 * with the node refused. */
hval *bfit_onnx_host(onnx_lower *L, oval *v, int k);
/* Shape arithmetic: 1 and the result if the node is one the host evaluates
 * (every input on the host, or Shape), 0 if not. */
int bfit_onnx_lower_host(onnx_lower *L, int *rc);
/* Whether a * m + b is wa * m + wb: exactly, or, in an export with a fixed
 * batch B (where tracing baked B into the constants), as the constant
 * wa * B + wb. */
int bfit_onnx_affine_is(const onnx_lower *L, int64_t a, int64_t b, int64_t wa, int64_t wb);
/* Whether host value h, [1, ...], is expanded by shape s (an Expand's input 1) to [batch, the same ...]
 * (s's other sizes h's or 1): the same for every sequence (BERT's token types, a causal mask), so readers
 * that broadcast may take h. */
int bfit_onnx_over_batch(const onnx_lower *L, const hval *h, const oval *s);
/* The ONNX shape of a device value: [m, its sample's dimensions]. */
void bfit_onnx_set_rank(const onnx_lower *L, oval *v, const bfit_shape *s);
/* v's ONNX shape is dims[0..rank), BFIT_ONNX_BATCH where it is the batch (a view's: onnx_mhsa.c's and after) */
#define BFIT_ONNX_BATCH INT64_MIN
void bfit_onnx_set_dims(oval *v, int rank, const int64_t *dims);
/* The target (input 1) of the Reshape being lowered, of x, that keeps the
 * batch first (as it is, 0 or -1): its other dimensions into d[0..max), a
 * 0 resolved to x's dimension there (allowzero 0), -1 left as it is; their
 * count, or -1 where the target is no such thing (a view of a block reads
 * it: onnx_shuffle.c, onnx_mhsa.c, onnx_gnorm.c). */
int bfit_onnx_reshape_target(onnx_lower *L, const oval *x, int64_t *d, int max);
/* Device value v, tokens [h*w, C], is ONNX's channels-last [m, h, w, C]. */
void bfit_onnx_set_cl(oval *v, int h, int w);

/* ---- the activations with a parameter (onnx_act.c) ---- */
/* The initializer a learned input is: s itself, or what an Unsqueeze on the
 * host made it from (torch.onnx unsqueezes nn.PReLU's and nn.GroupNorm's
 * [C] weights to [C,1,1] for an image); NULL if neither. */
oval *bfit_onnx_param_init(onnx_lower *L, oval *s);
/* LeakyRelu, Elu, Softplus, Selu, Celu, PRelu, and the Mul that starts nn.Softplus(beta)'s
 * export: 1 and the result if the node is one, 0 if not. */
int bfit_onnx_lower_act(onnx_lower *L, int *rc);

/* ---- ShuffleNet's chunks and channel shuffle (onnx_shuffle.c) ---- */
int bfit_onnx_lower_shuffle(onnx_lower *L, int *rc);

/* ---- self-attention written out by hand: timm's, minGPT's (onnx_mhsa.c) ---- */
int bfit_onnx_lower_mhsa(onnx_lower *L, int *rc);
/* Whether host value c, [.., T, T] with ones before, is the causal mask: for a boolean c, nonzero where a
 * key comes after the query (hide) or where it does not (!hide); for a float c (additive), 0 where the key
 * does not come after the query and -inf (or at most -1e4) where it does. */
int bfit_onnx_causal_mask(const hval *c, int64_t T, int hide, int additive);
/* The same of [.., R, K], K >= R: a key column past the queries hidden from every one (transformers 4.42's
 * LLaMA mask of T + 1 keys, cut to the keys where the scores read it). */
int bfit_onnx_causal_rows(const hval *c, int hide, int additive);

/* ---- a language model's attention_mask input (onnx_keymask.c): 1 (rc set) for a node reading it ---- */
int bfit_onnx_lower_keymask(onnx_lower *L, int *rc);
/* Whether m is an attention mask made additive, [B * heads, 1 or T, T] (nn.MultiheadAttention's), and
 * whether a causal mask is in it (*causal). */
int bfit_onnx_keymask_on(onnx_lower *L, const oval *m, int heads, int64_t T, int *causal);

/* ---- the mean of the real tokens weighted by the attention mask (onnx_pool.c) ---- */
/* A node reading the token mask m [B, T, 1 or C] (mask.unsqueeze(-1)): h times it, or its sum. */
int bfit_onnx_tokmask(onnx_lower *L, oval *m, int T);
int bfit_onnx_lower_pool(onnx_lower *L, int *rc);

/* ---- the ids compared with the pad token: RoBERTa's positions, GPT2ForSequenceClassification's last
   token (onnx_padid.c) ---- */
int bfit_onnx_lower_padid(onnx_lower *L, int *rc);
const char *bfit_onnx_padid_what(const oval *v); /* what an OV_PADID holds, for messages */

/* ---- GELU's tanh approximation, recognised by what it computes (onnx_gelu.c) ---- */
int bfit_onnx_lower_gelu(onnx_lower *L, int *rc);

/* ---- rotary embeddings on q or k by heads (onnx_rope.c): the stage of q, k or v by heads [N, H, T, d]
   (onnx_mhsa.c's), and the first of the rope's own stages; for a node reading view v at one of them, 1
   (rc set: a view, the rope layer, or a refusal), 0 where a node reading q by heads starts none ---- */
enum { BFIT_ATT_HEADS = 6, BFIT_ATT_SCORES = 8, BFIT_ATT_ROPE = 32, BFIT_ATT_GQA = 48 };
int bfit_onnx_rope(onnx_lower *L, oval *v, int *rc);
/* ---- grouped-query attention's repeated keys and values (onnx_gqa.c), as bfit_onnx_rope ---- */
int bfit_onnx_gqa(onnx_lower *L, oval *v, int *rc);

/* ---- LLaMA's RMSNorm, SwiGLU's product, float casts (onnx_rms.c) ---- */
int bfit_onnx_lower_rms(onnx_lower *L, int *rc);

/* ---- a language model's embeddings (onnx_tokens.c) ---- */
/* Whether v is a float matrix initializer (an embedding's table). */
int bfit_onnx_is_table(const oval *v);
/* Output 0 is rows off .. off + n - 1 of table (OV_ROWS: the embed layer's positions). */
void bfit_onnx_rows_out(onnx_lower *L, const oval *table, int64_t n, int off);
int bfit_onnx_lower_tokens(onnx_lower *L, int *rc);

/* ---- nn.GroupNorm's export (onnx_gnorm.c) ---- */
int bfit_onnx_lower_gnorm(onnx_lower *L, int *rc);

/* ---- the transformer's operators (onnx_vit.c, onnx_attn.c) ---- */
int bfit_onnx_lower_vit(onnx_lower *L, int *rc);
/* Find the attention blocks (nn.MultiheadAttention's export) before lowering. */
int bfit_onnx_find_attention(onnx_lower *L);
/* Node L->ndi belongs to an attention block: lower the block at its first
 * node, check the others against it. 1 if it does (rc set), 0 if not. */
int bfit_onnx_lower_attention(onnx_lower *L, int *rc);
void bfit_onnx_attention_free(onnx_lower *L);
/* The value of name as one float, if it is a constant (an initializer, a
 * Constant node's value, or host arithmetic done), read from the file when
 * its node was not lowered yet: 1, else 0. */
int bfit_onnx_scalar(onnx_lower *L, bfit_onnx_str name, double *out);
/* The one consumer (Shape nodes aside) of node i's output 0 if it is op, else -1. */
int bfit_onnx_next(onnx_lower *L, int i, const char *op);
/* If the node being lowered, x * x, starts GELU's tanh approximation as
 * PyTorch exports it (x * x * x, then * c, + x, * c, Tanh, + 1, * x, * 0.5),
 * the chain's last node found; else -1. */
int bfit_onnx_gelu_tanh_end(onnx_lower *L);
/* Node j's output 0 takes what node i's output 0 is; i's becomes internal
 * (why: what it was, for a node that reads it). */
void bfit_onnx_move_out(onnx_lower *L, int i, int j, const char *why);
/* The consumers of node i's output k other than Shape nodes (-1: more than max). */
int bfit_onnx_consumers(onnx_lower *L, int node, int k, int *out, int max);

#endif
