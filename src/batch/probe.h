/* probe.h - the finder: the largest micro-batch that fits a device's memory
 * and the micro-batch that trains fastest, answered with few real steps.
 *
 * The largest batch comes from the plan (bfit_plan_max_batch) for the budget
 * capacity * (1 - margin), and is then confirmed on the device: with the
 * arena's capacity set to exactly the budget, a real training micro-step
 * (reserve, forward, backward on real samples) runs at m and reserving m + 1
 * is refused. Since the arena enforces the capacity, that proves the answer;
 * two step attempts replace the log2(m) to 2 log2(m) trials of a
 * doubling-then-bisecting search. If a real step disagrees with the plan
 * (a bug), the result says so and the answer comes from such a search, run
 * with real steps.
 *
 * The fastest batch: samples/s measured at a geometric ladder of sizes
 * (1, 2, 4, ... and the largest), warm-up steps excluded, the median of the
 * measured steps; the recommendation is the smallest size within a
 * tolerance of the best. A step is what the trainer's micro-step does: take
 * the samples from the stream, forward, backward. The optimizer runs once
 * per effective batch whatever the micro-batch, so it is not timed.
 *
 * The model is left as found: probe steps compute gradients but no optimizer
 * step is taken, and parameters (batch-norm running statistics included) and
 * gradients are snapshotted to host memory and restored.
 *
 * Inputs of varying size would be planned on the largest; the data sets
 * batchfit reads have one sample shape, the model's input shape, which is
 * what the plan uses.
 */
#ifndef BFIT_PROBE_H
#define BFIT_PROBE_H

#include "batch/plan.h"
#include "data/data.h"

/* Probe model M, whose parameters and gradients are allocated on its
 * device's arena, with samples of data set d drawn by a stream made from sc
 * (its max_take is set here). opt: the optimizer whose state a training step
 * holds; the probe allocates it for its run and never steps it (NULL if the
 * caller already holds its optimizer in this arena, which then counts among
 * what the arena holds). Whatever else the arena holds counts against the
 * budget. During the probe the arena's capacity is the budget; it is
 * restored, and the model is left with its parameters and gradients as
 * found and no step reserved.
 *
 * Returns BFIT_OK with res filled; BFIT_ENOMEM when even batch 1 does not
 * fit (res->no_fit says why, res->missing by how much); BFIT_EINVAL for a
 * bad cfg or a data set that does not match the model; BFIT_ESTATE for a
 * model without parameters or gradients. A real step that disagrees with the
 * plan is not an error: res->plan_agrees is 0 and res->disagreement says
 * what happened. */
int bfit_probe_run(bfit_model *M, const bfit_dataset *d, const bfit_stream_cfg *sc, const bfit_optim_cfg *opt,
                   const bfit_probe_cfg *cfg, bfit_probe_result *res);

/* The throughput analysis on res->rungs (best, recommended, data share and
 * bound) for a tolerance and a threshold. Pure; bfit_probe_run calls it. */
void bfit_probe_analyse(bfit_probe_result *res, double tolerance, double data_threshold);


#endif
