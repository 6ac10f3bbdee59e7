/* plan.c - `plan` in the library (bfit_plan): the memory of a training (or
 * inference) step per category for a model from any source, the largest
 * batch that fits, the ways to a larger one, and when something does not
 * fit, by how much and what memory would. Plans only: the model is built
 * on a device, but nothing is reserved. */
#include "api/config_int.h"
#include "api/plan_int.h"
#include "api/result.h"
#include "base/err.h"
#include "batch/session.h"
#include "batch/solve.h"
#include "nn/needs.h"
#include "nn/zoo.h"

#include <stdio.h>

#include <string.h>

static const char *fmt(uint64_t b, char *buf) { return bfit_format_size(b, buf, 32); }

/* The asked sequence length and attention kind set on a loaded graph
 * (freed when it cannot take them). */
static int graph_options(const bfit_config *c, bfit_graph_desc *g)
{
    int rc = BFIT_OK;
    if ((c->seq && (rc = bfit_graph_set_seq(g, c->seq, "seq")) != BFIT_OK) ||
        (c->attn_set && (rc = bfit_graph_set_attention(g, c->attn_lean)) != BFIT_OK) ||
        (rc = bfit_session_gather_head(g, c->t.mlm.p, c->t.model)) < 0) /* a masked LM's, as its run has it */
        bfit_graph_fini(g);
    return rc < 0 ? rc : BFIT_OK;
}

/* The model's graph from its source, at the asked sequence length. */
static int load_graph(const bfit_config *c, bfit_graph_desc *g)
{
    int rc = bfit_model_source_load(c->t.model, c->seq, g);
    if (rc != BFIT_OK)
        return bfit_fail_field(rc, "model", "%s", bfit_errmsg());
    return graph_options(c, g);
}

/* The options plan reads, checked against each other. */
static int plan_args_of(const bfit_config *c, plan_args *a, bfit_optim_cfg *opt)
{
    int rc;
    if ((rc = bfit_config_check_cmd(c, CMD_PLAN, "plan")) != BFIT_OK || (rc = bfit_config_need_model(c, CMD_PLAN)) != BFIT_OK)
        return rc;
    memset(a, 0, sizeof *a);
    a->model = c->t.model;
    a->memory = c->t.memory;
    a->margin = c->t.margin;
    a->eval = c->plan_eval;
    a->ways = c->ways;
    a->measure = c->measure;
    a->lean = c->attn_lean;
    a->kind = c->opt_kind;
    a->st = c->t.storage;
    a->batch = c->batches;
    a->nbatch = c->nbatches;
    if (c->t.adaptive || c->t.auto_batch)
        return bfit_fail_field(BFIT_EINVAL, "batch", "plan takes batch sizes (a list like 1,32,64), not %s",
                               c->t.auto_batch ? "auto" : "adaptive");
    if (a->measure && !a->ways)
        return bfit_fail_field(BFIT_EINVAL, "measure", "times the rows of ways: set ways too");
    if (a->ways && (a->eval || a->nbatch || a->st.recompute || a->st.precision || c->t.precision_auto || !a->st.lean))
        return bfit_fail_field(BFIT_EINVAL, "ways", "plans its own rows of training steps: leave out eval, batch, "
                               "precision, recompute and no-lean");
    if (a->eval && c->mom_set)
        return bfit_fail_field(BFIT_EINVAL, "momentum", "has no effect with eval, which plans no optimizer: leave "
                               "one of them out");
    for (int i = 0; i < a->nbatch; i++)
        if (a->batch[i] > BFIT_PLAN_LIMIT)
            return bfit_fail_field(BFIT_EINVAL, "batch", "%d is out of range: expected 1 to %d", a->batch[i],
                                   BFIT_PLAN_LIMIT);
    /* A length or attention kind the model cannot take is a bad option; a
     * model that does not load is not (bfit_plan says why, as train does). */
    if (c->seq || c->attn_set) {
        bfit_graph_desc g;
        if (bfit_model_source_load(c->t.model, c->seq, &g) == BFIT_OK) {
            if ((rc = graph_options(c, &g)) != BFIT_OK)
                return rc;
            bfit_graph_fini(&g);
        }
    }
    a->precision_auto = c->t.precision_auto; /* resolved by bfit_plan: a check of the options opens no device */
    return bfit_config_optim(c, opt);
}

/* Say why something does not fit: BFIT_ENOMEM with the message, or BFIT_OK.
 * A batch fits when its step fits in the memory: the margin only keeps the
 * automatic choice (the solver, the trainer's micro-batch) from the edge. */
static int check_fits(const plan_report *r)
{
    const plan_args *a = r->a;
    char b[8][32];
    const bfit_step_plan *p1 = &r->pr.p1;

    char b8[32];

    if (p1->fixed > a->memory)
        return bfit_fail(BFIT_ENOMEM, "%s does not fit in %s at any batch size: its fixed part alone "
                  "(parameters %s + gradients %s + optimizer state %s + statistics %s = %s) exceeds the memory by %s; "
                  "batch 1 needs --memory of at least %s (%s with the %g%% margin)%s",
                  a->model, fmt(a->memory, b[0]), fmt(p1->bytes[BFIT_MEM_PARAMS], b[1]),
                  fmt(p1->bytes[BFIT_MEM_GRADS], b[2]), fmt(p1->bytes[BFIT_MEM_OPTIMIZER], b[3]),
                  fmt(p1->bytes[BFIT_MEM_OTHER], b[7]), fmt(p1->fixed, b[4]), fmt(p1->fixed - a->memory, b[5]),
                  fmt(p1->peak, b[6]), fmt(bfit_capacity_for(p1->peak, a->margin), b8), 100 * a->margin,
                  p1->bytes[BFIT_MEM_OPTIMIZER] ? "; or plan less optimizer state: --optimizer sgd --momentum 0" : "");
    if (r->pr.m_full == 0)
        return bfit_fail(BFIT_ENOMEM, "%s does not fit in %s even at batch 1: batch 1 needs %s, %s "
                  "more than the memory; give --memory of at least %s (%s with the %g%% margin)",
                  a->model, fmt(a->memory, b[0]), fmt(p1->peak, b[1]), fmt(p1->peak - a->memory, b[2]),
                  fmt(p1->peak, b[3]), fmt(bfit_capacity_for(p1->peak, a->margin), b[4]), 100 * a->margin);
    if (r->pr.m_margin == 0) /* train refuses this: its micro-batches must fit the budget */
        return bfit_fail_field(BFIT_ENOMEM, "margin", "with the %g%% margin nothing trains: batch 1 needs %s, the margin leaves %s of "
                  "%s; a margin of at most %.2f trains (or a memory of at least %s)", 100 * a->margin, fmt(p1->peak, b[0]),
                  fmt(r->pr.budget, b[1]), fmt(a->memory, b[2]), bfit_margin_for(p1->peak, a->memory) / 100.0,
                  fmt(bfit_capacity_for(p1->peak, a->margin), b[3]));
    for (int i = r->pr.nshown - 1; i >= 0; i--) {
        const bfit_step_plan *p = &r->pr.shown[i];
        bfit_step_plan best;
        int rc;
        if (p->peak <= a->memory)
            continue;
        if ((rc = bfit_plan_compute(r->M, r->opt, r->pr.m_full, !a->eval, &best)) != BFIT_OK)
            return rc;
        return bfit_fail(BFIT_ENOMEM, "batch %d does not fit in %s: it needs %s, %s more (give --memory "
                  "of at least %s, or %s to keep the %g%% margin); the largest batch that fits is %d (%s), %d within "
                  "the margin", p->m, fmt(a->memory, b[0]), fmt(p->peak, b[1]), fmt(p->peak - a->memory, b[2]),
                  fmt(p->peak, b[3]), fmt(bfit_capacity_for(p->peak, a->margin), b[4]), 100 * a->margin,
                  r->pr.m_full, fmt(best.peak, b[5]), r->pr.m_margin);
    }
    return BFIT_OK;
}

/* conv_algo auto on a GPU: each row planned again with the leanest
 * convolution algorithms, the larger micro-batch of the two kept: what
 * `train --conv-algo auto` would run at that row's batch. */
static int ways_lean_too(const bfit_config *c, const plan_args *a, const bfit_graph_desc *g,
                         const bfit_optim_cfg *opt, uint64_t budget, bfit_way *w)
{
    bfit_device_cfg cc = bfit_device_cfg_default();
    bfit_device *lean = NULL;
    bfit_arena *arena = NULL;
    bfit_way l[BFIT_WAYS];
    char why[512];
    int rc;

    cc.threads = c->t.threads;
    cc.conv_algo = BFIT_CONV_LEAN;
    rc = bfit_model_device_open(c->t.device_name, &cc, g, a->st.precision, &lean, why, sizeof why);
    if (rc == BFIT_OK && !(arena = bfit_device_arena_new(lean, a->memory)))
        rc = bfit_fail(BFIT_ENOMEM, "out of host memory");
    if (rc == BFIT_OK)
        rc = bfit_plan_ways(g, lean, arena, opt, budget, a->measure ? 3 : 0, l);
    for (int i = 0; rc == BFIT_OK && i < BFIT_WAYS; i++) {
        w[i].conv_algo = BFIT_CONV_FASTEST;
        if (!l[i].error[0] && l[i].m > w[i].m) {
            w[i] = l[i];
            w[i].conv_algo = BFIT_CONV_LEAN;
        }
    }
    bfit_arena_free(arena);
    bfit_device_free(lean);
    return rc;
}

/* No row trains even micro-batch 1 in the budget: that is no fit (exit 1),
 * as plan without ways says of its batches. */
static int none_fits(const plan_args *a, const bfit_way *w, uint64_t budget)
{
    char b1[32], b2[32];
    for (int i = 0; i < BFIT_WAYS; i++)
        if (w[i].m > 0)
            return BFIT_OK;
    return bfit_fail(BFIT_ENOMEM, "%s: no way trains even micro-batch 1 in %s (the budget of %s with the %g%% "
                     "margin): give more memory", a->model, fmt(budget, b1), fmt(a->memory, b2), 100 * a->margin);
}

/* The ways table (plan's "ways") into the result. */
static int run_ways(const bfit_config *c, const plan_args *a, const bfit_graph_desc *g, bfit_device *dev, int own,
                    bfit_arena *arena, const bfit_optim_cfg *opt, bfit_result *res)
{
    bfit_way w[BFIT_WAYS];
    uint64_t budget = bfit_plan_budget(a->memory, a->margin);
    int rc = bfit_plan_ways(g, dev, arena, opt, budget, a->measure ? 3 : 0, w);
    if (rc == BFIT_OK && own && c->t.conv_algo == BFIT_CONV_AUTO && !strncmp(bfit_device_name(dev), "cuda", 4))
        rc = ways_lean_too(c, a, g, opt, budget, w);
    if (rc != BFIT_OK)
        return bfit_fail_prefix(rc, "planning %s: ", a->model);
    if (bfit_result_out(res))
        bfit_ways_text(a, w, budget, bfit_result_out(res));
    if ((rc = bfit_ways_json(a, w, budget, res->root)) != BFIT_OK)
        return rc;
    return none_fits(a, w, budget);
}

/* The plan of the built model into the result, then whether it fits. */
static int report_plan(const plan_args *a, bfit_model *M, const bfit_optim_cfg *opt, bfit_result *res)
{
    plan_report r;
    int rc;

    memset(&r, 0, sizeof r);
    r.a = a;
    r.M = M;
    r.opt = a->eval ? NULL : opt;
    r.f = bfit_result_out(res);
    rc = bfit_plan_report_make(M, r.opt, !a->eval, a->memory, a->margin, a->batch, a->nbatch, &r.pr);
    if (rc != BFIT_OK)
        return bfit_fail_prefix(rc, "planning %s: ", a->model);
    if (r.f)
        bfit_plan_text(&r);
    if ((rc = bfit_plan_json(&r, res->root)) != BFIT_OK)
        return rc;
    rc = check_fits(&r);
    cJSON_AddBoolToObject(res->root, "fits", rc == BFIT_OK);
    if (rc == BFIT_ENOMEM)
        cJSON_AddStringToObject(res->root, "why", bfit_errmsg());
    return rc;
}

/* The device and its arena: the caller's device, or the configured one;
 * the memory the device has free when none is given. */
static int open_device(const bfit_config *c, const bfit_graph_desc *g, plan_args *a, bfit_device **own,
                       bfit_device **dev, bfit_arena **arena)
{
    int rc = BFIT_OK;
    *dev = c->device;
    if (*dev) {
        snprintf(a->device_why, sizeof a->device_why, "%s, as given", bfit_device_name(*dev));
    } else {
        bfit_device_cfg cc = bfit_device_cfg_default();
        cc.threads = c->t.threads;
        cc.conv_algo = c->t.conv_algo;
        rc = bfit_model_device_open(c->t.device_name, &cc, g, a->st.precision, own, a->device_why,
                                    sizeof a->device_why);
        if (rc != BFIT_OK) /* the device's, unless it named another option (the model, built to choose) */
            return bfit_errfield()[0] ? rc : bfit_fail_field(rc, "device", "%s", bfit_errmsg());
        *dev = *own;
    }
    if (!a->memory && (rc = bfit_device_free_memory(*dev, &a->memory)) != BFIT_OK)
        return rc;
    if (!(*arena = bfit_device_arena_new(*dev, a->memory)))
        return bfit_fail(BFIT_ENOMEM, "out of host memory");
    return BFIT_OK;
}

int bfit_plan(const bfit_config *c, bfit_result **out)
{
    plan_args a;
    bfit_optim_cfg opt;
    bfit_graph_desc g;
    bfit_device *own = NULL, *dev = NULL;
    bfit_arena *arena = NULL;
    bfit_model *M = NULL;
    bfit_result *res;
    int rc, planned;

    if (!out)
        return bfit_fail(BFIT_EINVAL, "bfit_plan needs somewhere to put the result");
    *out = NULL;
    if ((rc = plan_args_of(c, &a, &opt)) != BFIT_OK || (rc = bfit_config_precision(c, &a.st.precision)) != BFIT_OK ||
        (rc = load_graph(c, &g)) != BFIT_OK)
        return rc;
    if (!(res = bfit_result_make())) {
        bfit_graph_fini(&g);
        return BFIT_ENOMEM;
    }
    rc = open_device(c, &g, &a, &own, &dev, &arena);
    if (rc == BFIT_OK && a.ways) {
        rc = run_ways(c, &a, &g, dev, own != NULL, arena, &opt, res);
        goto out;
    }
    if (rc == BFIT_OK)
        rc = bfit_model_new(&g, dev, arena, &M);
    if (rc == BFIT_OK)
        rc = bfit_model_set_storage(M, &a.st, a.eval ? NULL : &opt, bfit_plan_budget(a.memory, a.margin),
                                    a.nbatch ? a.batch[a.nbatch - 1] : 0);
    if (rc == BFIT_OK)
        rc = report_plan(&a, M, &opt, res);
out:
    /* no arena: the device or its memory failed, and nothing was planned
     * (no room under ulimit -v is BFIT_ENOMEM too) */
    planned = arena != NULL;
    bfit_result_close(res);
    bfit_model_free(M);
    bfit_arena_free(arena);
    bfit_device_free(own);
    bfit_graph_fini(&g);
    if (rc != BFIT_OK && (rc != BFIT_ENOMEM || !planned)) {
        bfit_result_free(res); /* nothing planned to say */
        return rc;
    }
    *out = res;
    return rc;
}

int bfit_config_plan_check(const bfit_config *c, bfit_optim_cfg *o)
{
    plan_args a;
    return plan_args_of(c, &a, o);
}
