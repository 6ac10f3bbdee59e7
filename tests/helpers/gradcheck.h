/* gradcheck.h - finite-difference check of a layer's backward.
 *
 * The scalar checked is L = sum_j y_j * r_j (r random, fixed), accumulated
 * in double; for the loss layer L is the loss itself. Central differences
 * with step h on sampled elements of every input and trainable parameter are
 * compared with what backward returns. */
#ifndef BFIT_GRADCHECK_H
#define BFIT_GRADCHECK_H

#include "nn/layer.h"

typedef struct gc_case {
    const char *label;
    bfit_layer_cfg cfg;
    int nin;
    bfit_shape in[BFIT_LAYER_MAXIN];
    int m;
    double h;          /* FD step; 0: 1e-2 */
    double tol;        /* max relative error; 0: 2e-2 */
    double kink_gap;   /* skip input elements with |x| < kink_gap (relu); 0: none */
    int samples;       /* elements checked per tensor; 0: 40 */
    uint64_t seed;
    int token_vocab;   /* > 0: input 0 holds int32 token ids in [0, token_vocab) (embed), not checked */
    const int32_t *lens; /* attention: [m] real tokens of each sequence (a key-padding mask), NULL: none */
} gc_case;

typedef struct gc_result {
    double max_rel_err;     /* over all checked elements */
    int checked;            /* number of elements compared */
    char worst[160];        /* where the worst error was */
} gc_result;

/* Run the check; returns 0 if it could run (result filled), -1 if the layer
 * could not be built or run (message printed). */
int gc_run(const gc_case *c, gc_result *r);

/* cmocka-friendly wrapper: runs and asserts max_rel_err <= tol. */
void gc_assert(const gc_case *c);

#endif
