/* trig.h - a model on a device for tests: the CPU device, an arena over it,
 * a model built from a preset, a spec file or a graph, and its optimizer
 * when the test makes one. Failures fail the test. */
#ifndef BFIT_TRIG_H
#define BFIT_TRIG_H

#include "nn/model.h"
#include "optim/optim.h"

typedef struct trig {
    bfit_device *dev;
    bfit_arena *arena;
    bfit_model *M;
    bfit_optim *opt;     /* NULL until the test makes one */
} trig;

/* The device (threads, 0: OpenMP's) and an arena of capacity; no model yet. */
void trig_open(trig *r, int threads, uint64_t capacity);
/* The model of g on them (g is finished here). */
void trig_model(trig *r, bfit_graph_desc *g);
/* The model of a preset name or a spec file (bfit_model_source_load). */
void trig_load(trig *r, const char *src);
/* The optimizer, the model, the arena, then the device. */
void trig_free(trig *r);

#endif
