/* needs.c - which ops a model makes, and the device --device auto chooses
 * for it.
 *
 * The layers alone know the ops they make, so the model is built on the
 * recording device (src/device/record.c) in the precision asked for and
 * prepared at one sample for training and for evaluation: every layer
 * makes its ops, which the device notes as (kind, dtype) pairs. To them are
 * added the ops of the step around the layers, which are made elsewhere:
 * the adds of branching gradients, the optimizer updates, gradient norms
 * and clipping, and under mixed precision the casts to the compute copies.
 * The first GPU is chosen when it makes every one of them, else the CPU. */
#include "base/err.h"
#include "nn/model.h"
#include "nn/needs.h"
#include "nn/zoo.h"

#include <stdio.h>
#include <string.h>

static void step_needs(bfit_dtype precision, bfit_op_needs *nd)
{
    static const bfit_op_kind f32_kinds[] = {BFIT_OP_SGD, BFIT_OP_ADAMW, BFIT_OP_NORMS, BFIT_OP_SCALE};
    for (unsigned i = 0; i < sizeof f32_kinds / sizeof f32_kinds[0]; i++)
        bfit_op_needs_add(nd, f32_kinds[i], BFIT_F32);
    bfit_op_needs_add(nd, BFIT_OP_ADD, precision);
    if (precision != BFIT_F32)
        bfit_op_needs_add(nd, BFIT_OP_CAST, precision);
}

int bfit_graph_op_needs(const bfit_graph_desc *g, bfit_dtype precision, bfit_op_needs *out)
{
    bfit_store_cfg sc = {precision, 1, BFIT_RECOMPUTE_NONE, NULL, 0};
    bfit_device *rec = NULL;
    bfit_model *M = NULL;
    int rc;

    memset(out, 0, sizeof *out);
    if ((rc = bfit_device_recorder_new(out, &rec)) != BFIT_OK)
        return rc;
    rc = bfit_model_new(g, rec, NULL, &M);
    if (rc == BFIT_OK)
        rc = bfit_model_configure(M, &sc);
    for (int training = 1; training >= 0; training--)
        for (int i = 0; rc == BFIT_OK && i < M->n; i++) {
            bfit_layer_need need;
            rc = bfit_layer_query(M->nodes[i].l, 1, training, &need);
        }
    if (rc == BFIT_OK)
        step_needs(precision, out);
    bfit_model_free(M);
    bfit_device_free(rec);
    return rc;
}

int bfit_model_device_open(const char *name, const bfit_device_cfg *cfg, const bfit_graph_desc *g,
                           bfit_dtype precision, bfit_device **out, char *why, size_t n)
{
    bfit_op_needs nd;
    int rc;

    *out = NULL;
    if (why && n)
        why[0] = '\0';
    if (name && strcmp(name, "auto") != 0) {
        rc = bfit_device_open(name, cfg, out);
        if (rc == BFIT_OK && why && n)
            snprintf(why, n, "%s, as asked", bfit_device_name(*out));
        return rc;
    }
    if ((rc = bfit_graph_op_needs(g, precision, &nd)) != BFIT_OK) /* the model is built to ask: its errors */
        return bfit_errfield()[0] ? rc : bfit_fail_field(rc, "model", "%s", bfit_errmsg());
    return bfit_device_open_auto(cfg, &nd, out, why, why ? n : 0);
}

int bfit_device_open_for_model(const char *name, const bfit_device_cfg *cfg, const char *model, int seq,
                               bfit_dtype precision, bfit_device **out, char *why, size_t n)
{
    bfit_graph_desc g;
    int rc;

    *out = NULL;
    if (name && strcmp(name, "auto") != 0)
        return bfit_model_device_open(name, cfg, NULL, precision, out, why, n);
    if ((rc = bfit_model_source_load(model, seq, &g)) != BFIT_OK)
        return rc;
    rc = bfit_model_device_open(name, cfg, &g, precision, out, why, n);
    bfit_graph_fini(&g);
    return rc;
}
