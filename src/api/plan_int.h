/* plan_int.h - `plan` inside the library: what it was asked (from the
 * configuration) and what it computed, shared by the command (plan.c) and
 * its renderings (plan_text.c). */
#ifndef BFIT_PLAN_INT_H
#define BFIT_PLAN_INT_H

#include "batch/plan.h"
#include "batch/ways.h"

#include <cjson/cJSON.h>
#include <stdio.h>

typedef struct plan_args {
    const char *model;
    uint64_t memory;          /* resolved: the device's free memory when not given */
    double margin;
    int eval, ways, measure, lean;
    bfit_opt_kind kind;
    bfit_storage st;          /* as asked (recompute auto not resolved; precision auto resolved) */
    int precision_auto;       /* st.precision was chosen for the device */
    const int *batch;         /* sizes asked for, sorted */
    int nbatch;
    char device_why[512];     /* which device, and why (device auto) */
} plan_args;

typedef struct plan_report {
    const plan_args *a;
    bfit_model *M;
    const bfit_optim_cfg *opt; /* NULL for an inference step */
    bfit_plan_report pr;
    FILE *f;                   /* where the text goes */
} plan_report;

void bfit_plan_text(const plan_report *r);
int bfit_plan_json(const plan_report *r, cJSON *root);
void bfit_ways_text(const plan_args *a, const bfit_way *w, uint64_t budget, FILE *f);
int bfit_ways_json(const plan_args *a, const bfit_way *w, uint64_t budget, cJSON *root);

#endif
