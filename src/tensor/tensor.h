/* tensor.h - data types, per-sample shapes and parameter tensors.
 *
 * Activations are NCHW batches of per-sample CHW shapes (a vector of F
 * features is F x 1 x 1), so every layer sees the same 4-d picture. */
#ifndef BFIT_TENSOR_H
#define BFIT_TENSOR_H

#include <stddef.h>
#include <stdint.h>

typedef enum { BFIT_F32 = 0, BFIT_BF16, BFIT_F16 } bfit_dtype;

size_t bfit_dtype_size(bfit_dtype t);
const char *bfit_dtype_name(bfit_dtype t); /* "F32", "BF16", "F16" (safetensors names) */

typedef struct bfit_shape {
    int c, h, w;
} bfit_shape;

static inline int64_t bfit_shape_numel(bfit_shape s) { return (int64_t)s.c * s.h * s.w; }
static inline int bfit_shape_eq(bfit_shape a, bfit_shape b) { return a.c == b.c && a.h == b.h && a.w == b.w; }
/* "32x14x14", or "784" for a vector. */
char *bfit_shape_str(bfit_shape s, char *buf, size_t len);

/* A named tensor of a layer: weights, biases, and non-trained state such as
 * batch-norm running statistics. The model points data/grad into its
 * params/grads blocks. */
typedef struct bfit_param {
    const char *name;   /* "weight", "bias", "running_mean", "running_var" */
    int ndim;
    int64_t dim[4];     /* PyTorch's layout: linear [out,in], conv [oc,ic,kh,kw] */
    int trainable;      /* has a gradient and is updated by the optimizer */
    int decay;          /* weight decay applies (weights, not biases or norms) */
    float *data;
    float *grad;        /* NULL when not trainable */
} bfit_param;

static inline int64_t bfit_param_numel(const bfit_param *p)
{
    int64_t n = 1;
    for (int i = 0; i < p->ndim; i++)
        n *= p->dim[i];
    return n;
}

#endif
