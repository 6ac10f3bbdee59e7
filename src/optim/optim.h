/* optim.h - optimizers over a list of parameters: SGD (momentum, Nesterov,
 * L2 weight decay) and AdamW (decoupled weight decay), with PyTorch's
 * torch.optim formulas.
 *
 * The state (momentum buffers, Adam moments) is planned, then allocated from
 * the arena in BFIT_MEM_OPTIMIZER as one block carved into per-parameter
 * slices, so bfit_optim_state_bytes() is exactly what bfit_optim_new() takes.
 * The updates are device ops (one per parameter, made at creation), so a
 * step allocates nothing and the host never touches a parameter. Only trainable parameters are updated; weight
 * decay applies only to parameters with decay=1 (weights, not biases or norm
 * parameters). Hyperparameters are doubles, like PyTorch's Python floats, so
 * the derived float coefficients round the same way.
 */
#ifndef BFIT_OPTIM_H
#define BFIT_OPTIM_H

#include "batchfit.h"
#include "mem/arena.h"
#include "tensor/tensor.h"

/* ---- optimizers ------------------------------------------------------------ */
typedef enum { BFIT_OPT_SGD = 0, BFIT_OPT_ADAMW, BFIT_OPT_COUNT } bfit_opt_kind;

typedef struct bfit_optim_cfg {
    bfit_opt_kind kind;
    double weight_decay;   /* SGD: L2 term added to the gradient; AdamW: decoupled */
    /* SGD */
    double momentum;       /* 0: plain SGD, no state */
    double dampening;      /* PyTorch's dampening (first step is undamped, as there) */
    int nesterov;          /* needs momentum > 0 and dampening 0 */
    /* AdamW */
    double beta1, beta2, eps;
} bfit_optim_cfg;

/* Defaults: SGD momentum 0.9, dampening 0, no Nesterov, weight decay 0;
 * AdamW PyTorch's betas (0.9, 0.999), eps 1e-8, weight decay 0.01. */
bfit_optim_cfg bfit_optim_cfg_default(bfit_opt_kind kind);
/* Check a configuration (ranges as PyTorch checks them); BFIT_EINVAL with a
 * message naming the bad field and its valid range. */
int bfit_optim_cfg_check(const bfit_optim_cfg *cfg);
/* "sgd" / "adamw" (case-insensitive) -> kind; BFIT_EINVAL listing the valid
 * names otherwise. */
int bfit_optim_kind_parse(const char *name, bfit_opt_kind *out);
const char *bfit_optim_kind_name(bfit_opt_kind kind);



typedef struct bfit_optim bfit_optim;

/* One state tensor, for checkpoints. data points into the arena block. */
typedef struct bfit_optim_state {
    char name[48];         /* "<param index>.momentum_buffer", ".exp_avg", ".exp_avg_sq" */
    const char *kind;      /* the part after the dot */
    int param_index;       /* index into the list given to bfit_optim_new */
    void *data;            /* device memory, f32 */
    int64_t numel;
} bfit_optim_state;


/* Arena bytes the state takes for these parameters: per trainable parameter
 * and state tensor, numel floats rounded up to BFIT_ALIGN. 0 when there is no
 * state (plain SGD), in which case nothing is allocated. Pure. */
uint64_t bfit_optim_state_bytes(const bfit_optim_cfg *cfg, bfit_param *const *params, int n);

/* Create an optimizer over params[0..n) (pointers kept: the params must
 * outlive it) with zeroed state from the arena, updating on dev. On any
 * failure (BFIT_EINVAL, BFIT_ENOMEM) nothing is held and the arena is as
 * before. */
int bfit_optim_new(const bfit_optim_cfg *cfg, bfit_param *const *params, int n, bfit_device *dev,
                   bfit_arena *arena, bfit_optim **out);
/* Release the state block and the optimizer. NULL is fine. */
void bfit_optim_free(bfit_optim *o);

/* One update of every trainable parameter from its .grad with learning rate
 * lr (the caller applies schedule and scaling); advances the step count.
 * BFIT_EINVAL (nothing changed) for a negative or non-finite lr. */
int bfit_optim_step(bfit_optim *o, double lr);

/* Optimizer steps taken (PyTorch's state["step"]). */
int64_t bfit_optim_steps(const bfit_optim *o);
/* Set the step count after restoring the state tensors from a checkpoint;
 * BFIT_EINVAL if negative. With steps > 0 SGD uses the momentum buffer as is. */
int bfit_optim_set_steps(bfit_optim *o, int64_t steps);
/* Zero all state and the step count: a fresh start with the same memory. */
int bfit_optim_reset(bfit_optim *o);
/* The state tensors, in order: per trainable parameter (list order), its
 * momentum_buffer, or exp_avg then exp_avg_sq. */
int bfit_optim_state_count(const bfit_optim *o);
/* Fill *out for state tensor i; BFIT_EINVAL if i is out of range. */
int bfit_optim_state_at(const bfit_optim *o, int i, bfit_optim_state *out);
const bfit_optim_cfg *bfit_optim_config(const bfit_optim *o);

#endif
