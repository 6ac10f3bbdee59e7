/* gradset.c - a step's first writes set the parameter gradients.
 *
 * Gradients sum over a step's micro-batches, so they were zeroed between
 * steps and every op added to them: a pass writing the whole gradient block
 * and, in each op, a read of what it adds to (the mlp's step at batch 32
 * went 1.22x faster without them, docs/performance.md). Instead the first
 * backward to write a parameter's gradient in a step sets it
 * (bfit_bwd_args.grad_set) and only the gradients no backward sets are
 * zeroed: an embedding's table (its backward scatters rows) or a layer
 * without ops that set.
 *
 * Backward runs the nodes in reverse order (layout.c, schedule: every node
 * with a trainable parameter, every micro-batch), so the first write to a
 * gradient is its last node's in the graph; a tied table is written first
 * by its head, a module applied twice by its last place. A node sets when its layer can and it is the first writer of
 * every trainable parameter it has. */
#include "base/err.h"
#include "nn/model.h"

#include <stdlib.h>

/* The owner of p's memory: p, or the parameter a shared one is. */
static const bfit_param *owner(const bfit_param *p) { return p->shared && p->owner ? p->owner : p; }

static int index_of(const bfit_model *M, const bfit_param *p)
{
    for (int j = 0; j < M->ntrainable; j++)
        if (M->trainable[j] == p)
            return j;
    return -1;
}

int bfit_gradset_plan(bfit_model *M)
{
    unsigned char *seen = calloc((size_t)M->ntrainable + 1, 1);
    free(M->grad_zero);
    M->grad_zero = calloc((size_t)M->ntrainable + 1, 1);
    if (!seen || !M->grad_zero) {
        free(seen);
        return bfit_fail(BFIT_ENOMEM, "model: out of host memory");
    }
    for (int i = M->n - 1; i >= 0; i--) {
        const bfit_layer *L = M->nodes[i].l;
        int set = L->vt->grad_set, any = 0;
        for (int k = 0; k < L->nparams; k++) {
            int j = L->params[k].trainable ? index_of(M, owner(&L->params[k])) : -1;
            if (j >= 0) {
                any = 1;
                set &= !seen[j];
            }
        }
        M->nodes[i].grad_set = set && any;
        for (int k = 0; k < L->nparams; k++) {
            int j = L->params[k].trainable ? index_of(M, owner(&L->params[k])) : -1;
            if (j >= 0 && !seen[j]) {
                seen[j] = 1;
                M->grad_zero[j] = !M->nodes[i].grad_set;
            }
        }
    }
    for (int j = 0; j < M->ntrainable; j++)
        M->grad_zero[j] |= !seen[j]; /* written by no backward: kept zero */
    free(seen);
    return BFIT_OK;
}

/* Zero the gradients no backward sets, in runs of neighbours (the block
 * holds them in M->trainable's order, each aligned). */
int bfit_gradset_zero(bfit_model *M)
{
    for (int j = 0; j < M->ntrainable;) {
        char *at = M->trainable[j]->grad, *end = at;
        int rc;
        for (; j < M->ntrainable && M->grad_zero[j] && (char *)M->trainable[j]->grad == end; j++)
            end += BFIT_ALIGN_UP(bfit_param_bytes(M->trainable[j]));
        if (end == at) {
            j++;
            continue;
        }
        if ((rc = bfit_device_zero(M->dev, at, (size_t)(end - at))) != BFIT_OK)
            return rc;
    }
    M->grads_stale = 1;
    return BFIT_OK;
}
