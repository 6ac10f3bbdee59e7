/* synth.c - random samples and labels for a step that is only timed
 * (profile's, plan --ways --measure): values in [0, 1), or a token model's
 * ids of its vocabulary and a label a token; with a masked LM's share p a
 * label at a drawn p of the tokens, up to the rows its head gathers, none
 * elsewhere. Reproducible, not good: xorshift. */
#include "base/err.h"
#include "nn/model.h"

#include <stdlib.h>

static uint32_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)(*s >> 32);
}

static void random_labels(const bfit_model *M, int32_t *y, int m, double p, uint64_t *seed)
{
    int L = M->labels_per_sample, K = M->gather ? bfit_model_loss_rows(M) : L;
    for (int i = 0; i < m; i++)
        for (int t = 0, k = 0; t < L; t++) {
            int draw = !(p > 0) || ((double)rng(seed) / 4294967296.0 < p && k < K);
            k += draw;
            y[(int64_t)i * L + t] = draw ? (int32_t)(rng(seed) % (uint32_t)M->nclasses) : BFIT_LABEL_UNSCORED;
        }
}

int bfit_model_random_input(bfit_model *M, int m, double p, uint64_t *seed)
{
    int64_t n = (int64_t)m * bfit_shape_numel(M->input), nl = (int64_t)m * M->labels_per_sample;
    uint32_t V = (uint32_t)(bfit_model_vocab(M) > 0 ? bfit_model_vocab(M) : M->nclasses);
    float *x = malloc(sizeof *x * (size_t)n); /* f32 or int32: 4 bytes either way */
    int32_t *y = malloc(sizeof *y * (size_t)nl);
    int rc;
    if (M->gather && !(p > 0)) /* the share its head was sized for */
        p = M->nodes[M->gather - 1].l->cfg.p;
    if (!x || !y)
        rc = bfit_fail(BFIT_ENOMEM, "model: out of host memory for %d random samples", m);
    else {
        for (int64_t i = 0; i < n; i++) {
            if (M->input_dtype == BFIT_I32)
                ((int32_t *)x)[i] = (int32_t)(rng(seed) % V);
            else
                x[i] = (float)rng(seed) / 4294967296.0f;
        }
        random_labels(M, y, m, p, seed);
        rc = bfit_model_set_input(M, x, y, m);
    }
    free(x);
    free(y);
    return rc;
}
