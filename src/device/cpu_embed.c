/* cpu_embed.c - EMBED_FWD and EMBED_BWD: token (and position, and token
 * type) embeddings looked up by id, and their gradients scattered back. A
 * token's type rides in its id's high bits (BFIT_TOKEN_TYPE_SHIFT).
 *
 * The backward adds many rows into the same table row (a token that occurs
 * twice). Threads split the columns, never the rows, so no two threads
 * write one element and every element sums its rows in their order: the
 * result does not depend on the number of threads. */
#include "base/err.h"
#include "base/par.h"
#include "device/cpu.h"
#include "device/half.h"

#include <math.h>

#define COL_BLOCK 16

/* Ids are checked on the host before upload (bfit_model_check_tokens); the
 * CPU checks again because it can, and a bad id would read outside the table. */
static int check_ids(const int32_t *ids, int64_t n, int64_t V, int types)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t id = BFIT_TOKEN_ID(ids[i]), type = BFIT_TOKEN_TYPE(ids[i]);
        if (ids[i] < 0 || id >= V || type >= (types > 0 ? types : 1))
            return bfit_fail(BFIT_EINVAL, "embedding: token id %lld of type %lld at position %lld is outside [0, %lld) "
                             "or its types [0, %d)", (long long)id, (long long)type, (long long)i, (long long)V,
                             types > 0 ? types : 1);
    }
    return BFIT_OK;
}

/* The token rows' factor (0 in a desc that sets none: 1). */
static float tok_scale(const bfit_op_desc *d) { return d->u.embed.scale != 0.0f ? d->u.embed.scale : 1.0f; }

static void fwd_row(const bfit_op_desc *d, const bfit_op_args *a, int64_t r)
{
    int32_t v0 = ((const int32_t *)a->src)[r];
    int64_t C = d->u.embed.C, t = r % d->u.embed.T, id = BFIT_TOKEN_ID(v0);
    const float *w = (const float *)a->weights + id * C, *p = a->bias ? (const float *)a->bias + t * C : NULL;
    const float *ty = a->shift ? (const float *)a->shift + (int64_t)BFIT_TOKEN_TYPE(v0) * C : NULL;
    const float s = tok_scale(d);
    for (int64_t c = 0; c < C; c++) {
        /* fmaf: one rounding, as the GPU's kernel and cuda_core.h's host copy round (s = 1: w[c] + p[c]) */
        float v = fmaf(s, w[c], p ? p[c] : 0.0f) + (ty ? ty[c] : 0.0f);
        if (d->dtype == BFIT_F32)
            ((float *)a->dst)[r * C + c] = v;
        else
            bfit_st(a->dst, d->dtype, r * C + c, v);
    }
}

static int run_fwd(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t rows = d->u.embed.n * d->u.embed.T;
    int rc;

    if (!a->src || !a->weights || !a->dst || (d->u.embed.P && !a->bias) || (d->u.embed.types && !a->shift))
        return bfit_fail(BFIT_EINVAL, "embedding forward: src (the ids), weights, dst%s%s are required",
                         d->u.embed.P ? ", bias (positions)" : "", d->u.embed.types ? ", shift (token types)" : "");
    if ((rc = check_ids(a->src, rows, d->u.embed.V, d->u.embed.types)) != BFIT_OK)
        return rc;
    BFIT_PAR_FOR_IF(rows * d->u.embed.C > BFIT_PAR_MIN, for (int64_t r = 0; r < rows; r++) fwd_row(d, a, r););
    return BFIT_OK;
}

/* Columns [c0, c1) of every row, added into the tables' gradients; a
 * 16-bit row's columns widened first, so that each loop is a vector. */
static void bwd_cols(const bfit_op_desc *d, const bfit_op_args *a, int64_t c0, int64_t c1)
{
    int64_t C = d->u.embed.C, T = d->u.embed.T, rows = d->u.embed.n * T, n = c1 - c0;
    const int32_t *ids = a->src;
    float *dw = (float *)a->diff_weights + c0;
    float *dp = a->diff_bias && !d->u.embed.pos_fixed ? (float *)a->diff_bias + c0 : NULL;
    float *dt = a->diff_shift ? (float *)a->diff_shift + c0 : NULL, buf[COL_BLOCK], s = tok_scale(d);
    for (int64_t r = 0; r < rows; r++) {
        const float *g = buf;
        float *w = dw + (int64_t)BFIT_TOKEN_ID(ids[r]) * C;
        float *dtr = dt ? dt + (int64_t)BFIT_TOKEN_TYPE(ids[r]) * C : NULL;
        if (d->dtype == BFIT_F32)
            g = (const float *)a->diff_dst + r * C + c0;
        else
            bfit_cpu_widen(a->diff_dst, d->dtype, r * C + c0, buf, n);
        for (int64_t c = 0; c < n; c++)
            w[c] = fmaf(s, g[c], w[c]); /* as fwd_row: one rounding everywhere */
        for (int64_t c = 0; dp && c < n; c++)
            dp[r % T * C + c] += g[c];
        for (int64_t c = 0; dtr && c < n; c++)
            dtr[c] += g[c];
    }
}

static int run_bwd(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t C = d->u.embed.C, rows = d->u.embed.n * d->u.embed.T, nblk = (C + COL_BLOCK - 1) / COL_BLOCK;
    int rc;

    if (!a->src || !a->diff_dst || !a->diff_weights || (d->u.embed.P && !d->u.embed.pos_fixed && !a->diff_bias) ||
        (d->u.embed.types && !a->diff_shift))
        return bfit_fail(BFIT_EINVAL, "embedding backward: src (the ids), diff_dst, diff_weights%s%s are required",
                         d->u.embed.P && !d->u.embed.pos_fixed ? ", diff_bias" : "",
                         d->u.embed.types ? ", diff_shift" : "");
    if ((rc = check_ids(a->src, rows, d->u.embed.V, d->u.embed.types)) != BFIT_OK)
        return rc;
    BFIT_PAR_FOR_IF(rows * C > BFIT_PAR_MIN && nblk > 1, for (int64_t b = 0; b < nblk; b++) {
        int64_t c0 = b * COL_BLOCK, c1 = c0 + COL_BLOCK < C ? c0 + COL_BLOCK : C;
        bwd_cols(d, a, c0, c1);
    });
    return BFIT_OK;
}

int bfit_cpu_embed_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;

    op->ws = op->saved = 0;
    if (d->u.embed.n < 1 || d->u.embed.T < 1 || d->u.embed.C < 1 || d->u.embed.V < 1 || d->u.embed.P < 0)
        return bfit_fail(BFIT_EINVAL, "embedding: sizes must be positive, got n=%lld T=%lld C=%lld V=%lld P=%lld",
                         (long long)d->u.embed.n, (long long)d->u.embed.T, (long long)d->u.embed.C,
                         (long long)d->u.embed.V, (long long)d->u.embed.P);
    if (d->u.embed.P && d->u.embed.T > d->u.embed.P)
        return bfit_fail(BFIT_EINVAL, "embedding: %lld tokens but only %lld positions", (long long)d->u.embed.T,
                         (long long)d->u.embed.P);
    op->run = d->kind == BFIT_OP_EMBED_FWD ? run_fwd : run_bwd;
    return BFIT_OK;
}
