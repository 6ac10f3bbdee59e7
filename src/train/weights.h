/* weights.h - a model's parameters to and from safetensors files.
 *
 * Tensor names are "<node>.<param>" with node the layer's position in the
 * model (0-based, every layer counted, as in torch.nn.Sequential), so a
 * sequential model's file loads into the equivalent PyTorch Sequential. */
#ifndef BFIT_WEIGHTS_H
#define BFIT_WEIGHTS_H

#include "nn/model.h"

/* Write all parameters (running statistics included) with metadata pairs;
 * atomic: a temp file, synced, renamed. */
int bfit_weights_save(const bfit_model *M, const char *path, const char *const *meta_keys,
                      const char *const *meta_vals, int nmeta);
/* Load every parameter; a missing tensor, a shape that differs, or a tensor
 * the model does not have is BFIT_EFORMAT naming it. The model is unchanged
 * on failure. */
int bfit_weights_load(bfit_model *M, const char *path);

/* Normalisation statistics travel with the weights, so evaluation applies
 * what training applied: metadata "normalize_mean" and "normalize_std", n
 * comma-separated values each. */
#define BFIT_NORM_TEXT_MAX 4096
int bfit_norm_to_text(const float *v, int n, char *buf, size_t len);
/* Read them from a weights file: *found 0 if the file has none (trained
 * with --no-normalize); BFIT_EFORMAT if present but not n numbers. */
int bfit_weights_read_norm(const char *path, int n, float *mean, float *std, int *found);

#endif
