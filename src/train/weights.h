/* weights.h - a model's parameters to and from safetensors files.
 *
 * Tensor names are "<node>.<param>" with node the layer's position in the
 * model (0-based, every layer counted, as in torch.nn.Sequential), so a
 * sequential model's file loads into the equivalent PyTorch Sequential; a
 * model from an ONNX file keeps its initializers' names (the exported
 * module's state_dict names). */
#ifndef BFIT_WEIGHTS_H
#define BFIT_WEIGHTS_H

#include "nn/model.h"
#include "tensor/safetensors.h"

/* Tensors named so are a checkpoint's optimizer state and the noise
 * scale's copy of the last step's gradient, not parameters: loading
 * weights from a checkpoint skips them. */
#define BFIT_OPTIM_PREFIX "optimizer."
#define BFIT_GRADPREV_PREFIX "gradnorm.prev."
/* Whether a tensor of that name is a checkpoint's own (one of the above). */
int bfit_weights_ckpt_tensor(const char *name);

/* A parameter with its name and shape in files (the model file's, where
 * it gives one: PyTorch's state_dict). */
typedef struct bfit_wparam {
    char name[128];
    int ndim;
    int64_t dim[BFIT_PARAM_MAXD];
    bfit_param *p;
} bfit_wparam;
/* The parameters in model order with their names (free *out). */
int bfit_weights_list(const bfit_model *M, bfit_wparam **out, int *n);

/* Write all parameters (running statistics included) with metadata pairs
 * and a checksum per tensor; atomic: a temp file, synced, renamed. */
int bfit_weights_save(const bfit_model *M, const char *path, const char *const *meta_keys,
                      const char *const *meta_vals, int nmeta);
/* The same with more tensors (host memory) after the parameters, and the
 * writer's options (checksums, a test's hook). */
int bfit_weights_save_ex(const bfit_model *M, const char *path, const bfit_st_tensor *extra, int nextra,
                         const char *const *meta_keys, const char *const *meta_vals, int nmeta,
                         const bfit_st_write_opts *o);
/* Load every parameter; a missing tensor, a shape that differs, or a tensor
 * the model does not have is BFIT_EFORMAT naming it. The model is unchanged
 * on failure. */
int bfit_weights_load(bfit_model *M, const char *path);
/* The same from a file already read (path names it in messages). */
int bfit_weights_load_from(bfit_model *M, const bfit_st_file *f, const char *path);
/* Only the checks of loading: whether f's tensors are this model's
 * parameters (names, shapes, float types); the model is not touched. */
int bfit_weights_check_from(const bfit_model *M, const bfit_st_file *f, const char *path);

/* Normalisation statistics travel with the weights, so evaluation applies
 * what training applied: metadata "normalize_mean" and "normalize_std", n
 * comma-separated values each. */
/* Room for the text of n values: "%.9g" of a float is at most 15
 * characters, with its comma 16 (a CSV file's features are channels, so n
 * may be thousands). */
#define BFIT_NORM_TEXT_LEN(n) ((size_t)(n) * 16 + 1)
int bfit_norm_to_text(const float *v, int n, char *buf, size_t len);
/* Read them from a weights file: *found 1 if it has them, -1 if training
 * applied none (metadata "normalize" is "none": --no-normalize), 0 if it
 * says neither (older files); BFIT_EFORMAT if present but not n numbers. */
int bfit_weights_read_norm(const char *path, int n, float *mean, float *std, int *found);
/* The class names training on images saved (metadata "classes", a JSON
 * array of strings by index): *names is one allocation (free it), *n 0 for
 * a file without them; BFIT_EFORMAT if present but not such an array. */
int bfit_weights_read_classes(const char *path, char ***names, int *n);

#endif
