/* tensor.h - data types, sample shapes of any rank, and tensors.
 *
 * A tensor is device memory with a dtype and a shape; the host never reads
 * it (only src/device/ does). Sizes always come from the dtype, never from
 * sizeof(float). A shape here is one sample's: the micro-batch is the
 * leading dimension every layer adds, so [m, C, H, W] images, [m, F]
 * vectors and [m, T, F] token sequences are all "m samples of a shape". */
#ifndef BFIT_TENSOR_H
#define BFIT_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "batchfit.h"

/* Element types of tensors. Sizes come from the type, never sizeof(float). */
typedef enum { BFIT_F32 = 0, BFIT_BF16, BFIT_F16, BFIT_I32, BFIT_NDTYPES } bfit_dtype;
/* "F32", "BF16", "F16", "I32" (the safetensors names). */
const char *bfit_dtype_name(bfit_dtype t);
size_t bfit_dtype_size(bfit_dtype t);
int bfit_dtype_is_float(bfit_dtype t);

#define BFIT_SHAPE_MAXD 4

/* One sample's shape: nd dimensions d[0..nd), the unused ones 1. The image
 * view c/h/w names the same ints: a CxHxW image is nd 3, a vector of F
 * features nd 1 (c = F, h = w = 1, so spatial layers see it as Fx1x1), a
 * sequence of T tokens of F features nd 2 (use d[], not c/h/w). */
typedef struct bfit_shape {
    int nd;
    union {
        int d[BFIT_SHAPE_MAXD];
        struct {
            int c, h, w, d3_;
        };
    };
} bfit_shape;

static inline bfit_shape bfit_shape_vec(int f) { return (bfit_shape){.nd = 1, .d = {f, 1, 1, 1}}; }
static inline bfit_shape bfit_shape_chw(int c, int h, int w) { return (bfit_shape){.nd = 3, .d = {c, h, w, 1}}; }
static inline bfit_shape bfit_shape_seq(int t, int f) { return (bfit_shape){.nd = 2, .d = {t, f, 1, 1}}; }

static inline int64_t bfit_shape_numel(bfit_shape s)
{
    int64_t n = 1;
    for (int i = 0; i < s.nd; i++)
        n *= s.d[i];
    return n;
}
/* The last dimension: features of a vector or of each token. */
static inline int bfit_shape_last(bfit_shape s) { return s.nd > 0 ? s.d[s.nd - 1] : 1; }
/* An image, or a vector seen as Fx1x1: what spatial layers accept. */
static inline int bfit_shape_is_image(bfit_shape s) { return s.nd == 3 || s.nd == 1; }
/* A vector [F], or a CxHxW with H = W = 1 (what a 1x1 convolution gives). */
static inline int bfit_shape_is_vector(bfit_shape s)
{
    return s.nd == 1 || (s.nd == 3 && s.h == 1 && s.w == 1);
}
/* Same dimensions; a vector [F] equals the image Fx1x1. */
int bfit_shape_eq(bfit_shape a, bfit_shape b);
/* "32x14x14", "784" for a vector, "128x64" for a sequence. */
char *bfit_shape_str(bfit_shape s, char *buf, size_t len);

#define BFIT_TENSOR_MAXD 8

/* Device memory with a dtype and a shape (PyTorch's layout). */
typedef struct bfit_tensor {
    void *data;
    bfit_dtype dtype;
    int ndim;
    int64_t dim[BFIT_TENSOR_MAXD];
} bfit_tensor;

int64_t bfit_tensor_numel(const bfit_tensor *t);
size_t bfit_tensor_bytes(const bfit_tensor *t);

/* A named tensor of a layer: weights, biases, and non-trained state such as
 * batch-norm running statistics. data and grad are device pointers into the
 * model's params/grads blocks. Parameters (the master copy under mixed
 * precision) are f32. */
#define BFIT_PARAM_MAXD 4
typedef struct bfit_param {
    const char *name;   /* "weight", "bias", "running_mean", "running_var" */
    int ndim;
    int64_t dim[BFIT_PARAM_MAXD]; /* PyTorch's layout: linear [out,in], conv [oc,ic,kh,kw] */
    bfit_dtype dtype;   /* BFIT_F32 */
    int trainable;      /* has a gradient and is updated by the optimizer */
    int decay;          /* weight decay applies (weights, not biases or norms) */
    int multiplies;     /* the weights a matmul or convolution multiplies by: under mixed
                           precision they get a compute copy in the layer's dtype */
    int shared;         /* another layer's parameter (a tied head's weight is the embedding's
                           table; a module applied twice): the model points data, grad and cdata at
                           its owner and counts it once */
    struct bfit_param *owner; /* shared: the parameter it is (set by the model) */
    void *data;
    void *grad;         /* NULL when not trainable */
    void *cdata;        /* the compute copy (refreshed after each update), NULL: none */
} bfit_param;

/* What an op multiplies by: the compute copy if there is one. */
static inline void *bfit_param_compute(const bfit_param *p) { return p->cdata ? p->cdata : p->data; }

static inline int64_t bfit_param_numel(const bfit_param *p)
{
    int64_t n = 1;
    for (int i = 0; i < p->ndim; i++)
        n *= p->dim[i];
    return n;
}
static inline size_t bfit_param_bytes(const bfit_param *p)
{
    return (size_t)bfit_param_numel(p) * bfit_dtype_size(p->dtype);
}

#endif
