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

enum { OV_NONE = 0, OV_DEVICE, OV_HOST, OV_UNAVAIL };

typedef struct oval {
    bfit_onnx_str name;
    int kind;
    int producer;                 /* node index, -1: a graph input or initializer */
    /* device */
    int id;                       /* the graph description's value (0: the model input) */
    bfit_shape shape;             /* per sample */
    int pad[2];                   /* a Pad's zero padding (h, w) waiting for the Conv or AveragePool after it */
    /* host */
    const bfit_onnx_tensor *t;    /* an initializer's or a Constant's tensor */
    int init;                     /* initializer index, -1: none */
    const char *why;              /* OV_UNAVAIL: what the value is (an output batchfit does not compute) */
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

#endif
