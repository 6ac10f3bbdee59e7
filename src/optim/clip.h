/* clip.h - the global L2 norm of the gradients and clipping by it, as
 * torch.nn.utils.clip_grad_norm_ does.
 *
 * Sums are taken in double over fixed chunks and added in a fixed order, so
 * the norm is the same bit for bit whatever the thread count: a resumed run
 * clips exactly as the original did. */
#ifndef BFIT_CLIP_H
#define BFIT_CLIP_H

#include "tensor/tensor.h"

/* Sum of the squares of every trainable parameter's gradient (NULL entries
 * and non-trainable parameters are skipped). Pure. */
double bfit_grad_sqnorm(bfit_param *const *params, int n);
/* sqrt(bfit_grad_sqnorm): the global L2 norm, without clipping. */
double bfit_grad_norm(bfit_param *const *params, int n);
/* Clip like clip_grad_norm_: with total = the global norm, scale every
 * gradient by max_norm / (total + 1e-6) when that is below 1. *total_norm
 * (may be NULL) gets the norm before clipping. A non-finite norm leaves the
 * gradients untouched (PyTorch would scale them by NaN): the caller sees it
 * in *total_norm and can skip the step. BFIT_EINVAL for max_norm <= 0 or
 * non-finite. */
int bfit_clip_grad_norm(bfit_param *const *params, int n, double max_norm, double *total_norm);

#endif
