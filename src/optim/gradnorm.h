/* gradnorm.h - the global L2 norm of the gradients, clipping by it as
 * torch.nn.utils.clip_grad_norm_ does, and the norms the gradient noise
 * scale needs, all computed on the device.
 *
 * Each tensor's sum of squares is taken in double over fixed chunks (the
 * NORMS op) and the tensors are added in a fixed order on the host, so the
 * norm is the same bit for bit whatever the thread count: a resumed run
 * clips exactly as the original did. The results live in a small device
 * block (BFIT_MEM_OTHER) and come back by one download. */
#ifndef BFIT_GRADNORM_H
#define BFIT_GRADNORM_H

#include "device/device.h"

typedef struct bfit_gradnorm bfit_gradnorm;

/* Device bytes bfit_gradnorm_new takes for these parameters: the f64
 * results, and with track a copy of every gradient (for the increment of a
 * micro-batch). Pure. */
uint64_t bfit_gradnorm_bytes(bfit_param *const *params, int n, int track);

/* Norms over the trainable parameters of params[0..n) (kept: they must
 * outlive it). BFIT_ENOMEM leaves nothing held. */
int bfit_gradnorm_new(bfit_param *const *params, int n, int track, bfit_device *dev, bfit_arena *arena,
                      bfit_gradnorm **out);
void bfit_gradnorm_free(bfit_gradnorm *g);

/* The squared global norm of the gradients. */
int bfit_gradnorm_sq(bfit_gradnorm *g, double *sq);

/* Clip like clip_grad_norm_: with total = the global norm, scale every
 * gradient by max_norm / (total + 1e-6) when that is below 1. *total_norm
 * (may be NULL) gets the norm before clipping. A non-finite norm leaves the
 * gradients untouched (PyTorch would scale them by NaN): the caller sees it
 * and can skip the step. BFIT_EINVAL for max_norm <= 0 or non-finite. */
int bfit_gradnorm_clip(bfit_gradnorm *g, double max_norm, double *total_norm);

/* Multiply every gradient by factor (unscaling a scaled loss's). */
int bfit_gradnorm_scale(bfit_gradnorm *g, double factor);

/* (track only) The squared norm of the gradients, and of what was added to
 * them since the last call or reset; the copy then holds the gradients. */
int bfit_gradnorm_track(bfit_gradnorm *g, double *acc_sq, double *delta_sq);
/* (track only) The copy back to zero, as the gradients are after a step. */
int bfit_gradnorm_track_reset(bfit_gradnorm *g);
/* (track only) The copies, one per counted parameter, for a checkpoint:
 * how many (0 without tracking), and copy i: its parameter and its device
 * memory (numel f32 values). */
int bfit_gradnorm_track_count(const bfit_gradnorm *g);
int bfit_gradnorm_track_at(const bfit_gradnorm *g, int i, const bfit_param **p, void **copy, int64_t *numel);

#endif
