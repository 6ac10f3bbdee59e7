/* needs.h - the ops a model makes, and the device --device auto chooses for
 * it (src/nn/needs.c). */
#ifndef BFIT_NEEDS_H
#define BFIT_NEEDS_H

#include "device/device.h"
#include "nn/graph.h"

/* Every (kind, dtype) of op a training step and an evaluation of g make in
 * precision: the layers' (found by preparing them on the recording device)
 * and the step's own (adds, optimizer updates, norms, casts). */
int bfit_graph_op_needs(const bfit_graph_desc *g, bfit_dtype precision, bfit_op_needs *out);
/* Open the device called name for g in precision: NULL or "auto" chooses
 * (bfit_device_open_auto), any other name opens as bfit_device_open. why
 * (n bytes, may be NULL) says which and why. */
int bfit_model_device_open(const char *name, const bfit_device_cfg *cfg, const bfit_graph_desc *g,
                           bfit_dtype precision, bfit_device **out, char *why, size_t n);

/* The same for a model named as the model option takes it (a preset, spec
 * or file; seq as bfit_model_source_load takes it), loaded only to choose;
 * its load's error if it cannot be. */
int bfit_device_open_for_model(const char *name, const bfit_device_cfg *cfg, const char *model, int seq,
                               bfit_dtype precision, bfit_device **out, char *why, size_t n);

#endif
