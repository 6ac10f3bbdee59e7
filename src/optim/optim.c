/* optim.c - SGD and AdamW over a parameter list, state carved from one arena
 * block (llm.c's plan-then-allocate), updates run as device ops.
 *
 * The coefficients of a step are computed here in double and rounded to
 * float where PyTorch passes a Python float to a float kernel; the element
 * loops (src/device/cpu_optim.c) follow torch.optim's single-tensor code
 * operation by operation. That keeps our results within an ulp or two of
 * PyTorch's, not merely close.
 */
#include "optim/optim.h"
#include "base/err.h"
#include "device/device.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct slot {
    bfit_param *p;
    int param_index;
    int64_t numel;
    char *s0;    /* momentum_buffer, or exp_avg (device) */
    char *s1;    /* exp_avg_sq (AdamW) */
    bfit_op *op; /* the update */
} slot;

struct bfit_optim {
    bfit_optim_cfg cfg;
    bfit_device *dev;
    bfit_arena *arena;
    void *block;          /* all state; NULL when there is none */
    uint64_t bytes;       /* of the block */
    int nslot;            /* trainable parameters */
    int nper;             /* state tensors per trainable parameter: 0, 1 or 2 */
    slot *slot;
    int64_t steps;
};

static const char *const kind_names[BFIT_OPT_COUNT] = { "sgd", "adamw" };

bfit_optim_cfg bfit_optim_cfg_default(bfit_opt_kind kind)
{
    bfit_optim_cfg c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    if (kind == BFIT_OPT_ADAMW) {
        c.beta1 = 0.9;
        c.beta2 = 0.999;
        c.eps = 1e-8;
        c.weight_decay = 0.01;
    } else {
        c.momentum = 0.9;
    }
    return c;
}

/* NaN fails every comparison, so "!(x >= lo)" also rejects it. */
int bfit_optim_cfg_check(const bfit_optim_cfg *c)
{
    if (!c || (unsigned)c->kind >= BFIT_OPT_COUNT)
        return bfit_fail_field(BFIT_EINVAL, "optimizer", "unknown kind (valid: sgd, adamw)");
    if (!(c->weight_decay >= 0 && isfinite(c->weight_decay)))
        return bfit_fail_field(BFIT_EINVAL, "weight_decay", "optimizer weight decay %g must be finite and >= 0",
                               c->weight_decay);
    if (c->kind == BFIT_OPT_SGD) {
        if (!(c->momentum >= 0 && isfinite(c->momentum)))
            return bfit_fail_field(BFIT_EINVAL, "momentum", "sgd momentum %g must be finite and >= 0", c->momentum);
        if (!isfinite(c->dampening))
            return bfit_fail_field(BFIT_EINVAL, "dampening", "sgd dampening %g must be finite", c->dampening);
        if (c->nesterov && (c->momentum <= 0 || c->dampening != 0))
            return bfit_fail_field(BFIT_EINVAL, "nesterov", "sgd Nesterov needs momentum > 0 and dampening 0 "
                                   "(have momentum %g, dampening %g)", c->momentum, c->dampening);
        return BFIT_OK;
    }
    if (!(c->beta1 >= 0 && c->beta1 < 1))
        return bfit_fail_field(BFIT_EINVAL, "beta1", "adamw beta1 %g must be in [0, 1)", c->beta1);
    if (!(c->beta2 >= 0 && c->beta2 < 1))
        return bfit_fail_field(BFIT_EINVAL, "beta2", "adamw beta2 %g must be in [0, 1)", c->beta2);
    if (!(c->eps >= 0 && isfinite(c->eps)))
        return bfit_fail_field(BFIT_EINVAL, "eps", "adamw eps %g must be finite and >= 0", c->eps);
    return BFIT_OK;
}

int bfit_optim_kind_parse(const char *name, bfit_opt_kind *out)
{
    for (int k = 0; k < BFIT_OPT_COUNT; k++) {
        if (name && strcasecmp(name, kind_names[k]) == 0) {
            *out = (bfit_opt_kind)k;
            return BFIT_OK;
        }
    }
    return bfit_fail(BFIT_EINVAL, "unknown optimizer '%s' (valid: sgd, adamw)", name ? name : "");
}

const char *bfit_optim_kind_name(bfit_opt_kind kind)
{
    return (unsigned)kind < BFIT_OPT_COUNT ? kind_names[kind] : "?";
}

static int states_per_param(const bfit_optim_cfg *c)
{
    if (c->kind == BFIT_OPT_ADAMW)
        return 2;
    return c->momentum != 0 ? 1 : 0;
}

static uint64_t slice_bytes(int64_t numel)
{
    uint64_t b = numel > 0 ? (uint64_t)numel * bfit_dtype_size(BFIT_F32) : 0; /* state is f32 */
    return (b + (BFIT_ALIGN - 1)) & ~(uint64_t)(BFIT_ALIGN - 1);
}

static int is_updated(const bfit_param *p) { return p && p->trainable; }

uint64_t bfit_optim_state_bytes(const bfit_optim_cfg *cfg, bfit_param *const *params, int n)
{
    uint64_t total = 0;
    int nper;

    if (!cfg || !params || (unsigned)cfg->kind >= BFIT_OPT_COUNT)
        return 0;
    nper = states_per_param(cfg);
    for (int i = 0; i < n; i++)
        if (is_updated(params[i]))
            total += nper * slice_bytes(bfit_param_numel(params[i]));
    return total;
}

static int check_params(bfit_param *const *params, int n, int *ntrain)
{
    *ntrain = 0;
    for (int i = 0; i < n; i++) {
        const bfit_param *p = params[i];
        if (!p)
            return bfit_fail(BFIT_EINVAL, "optimizer: parameter %d is NULL", i);
        if (!p->trainable)
            continue;
        if (p->ndim < 0 || p->ndim > 4 || bfit_param_numel(p) < 0)
            return bfit_fail(BFIT_EINVAL, "optimizer: parameter %d (%s) has a bad shape", i,
                             p->name ? p->name : "?");
        if (!p->data || !p->grad)
            return bfit_fail(BFIT_EINVAL, "optimizer: parameter %d (%s) is trainable but has no %s",
                             i, p->name ? p->name : "?", p->data ? "gradient" : "data");
        (*ntrain)++;
    }
    return BFIT_OK;
}

/* Point each slot at its slices of the block, in the order the state is
 * enumerated. */
static void carve(bfit_optim *o, bfit_param *const *params, int n)
{
    char *cur = o->block;
    int k = 0;

    for (int i = 0; i < n; i++) {
        slot *s;
        uint64_t b;
        if (!is_updated(params[i]))
            continue;
        s = &o->slot[k++];
        s->p = params[i];
        s->param_index = i;
        s->numel = bfit_param_numel(params[i]);
        b = slice_bytes(s->numel);
        if (o->nper >= 1) {
            s->s0 = cur;
            cur += b;
        }
        if (o->nper >= 2) {
            s->s1 = cur;
            cur += b;
        }
    }
}

/* One update op per slot, for its element count. */
static int make_ops(bfit_optim *o)
{
    for (int k = 0; k < o->nslot; k++) {
        bfit_op_desc d = {.kind = o->cfg.kind == BFIT_OPT_SGD ? BFIT_OP_SGD : BFIT_OP_ADAMW, .dtype = BFIT_F32};
        int rc;
        if (o->cfg.kind == BFIT_OPT_SGD) {
            d.u.sgd.n = o->slot[k].numel;
            d.u.sgd.nesterov = o->cfg.nesterov;
            d.u.sgd.momentum = o->nper > 0;
        } else {
            d.u.adamw.n = o->slot[k].numel;
        }
        if (o->slot[k].numel < 1)
            continue; /* an empty tensor has nothing to update */
        rc = bfit_op_new(o->dev, &d, &o->slot[k].op);
        if (rc != BFIT_OK)
            return rc;
    }
    return BFIT_OK;
}

int bfit_optim_new(const bfit_optim_cfg *cfg, bfit_param *const *params, int n, bfit_device *dev,
                   bfit_arena *arena, bfit_optim **out)
{
    bfit_optim *o;
    uint64_t bytes;
    int ntrain, rc;

    if (!out)
        return bfit_fail(BFIT_EINVAL, "optimizer: out is NULL");
    *out = NULL;
    if (n < 0 || (n > 0 && !params) || !arena || !dev)
        return bfit_fail(BFIT_EINVAL, "optimizer: bad parameter list, device or arena");
    rc = bfit_optim_cfg_check(cfg);
    if (rc)
        return rc;
    rc = check_params(params, n, &ntrain);
    if (rc)
        return rc;
    bytes = bfit_optim_state_bytes(cfg, params, n);
    if (bytes > SIZE_MAX)
        return bfit_fail(BFIT_ENOMEM, "optimizer: state of %llu bytes is too large",
                         (unsigned long long)bytes);

    o = calloc(1, sizeof *o);
    if (!o)
        return bfit_fail(BFIT_ENOMEM, "optimizer: host allocation failed");
    o->slot = calloc(ntrain ? (size_t)ntrain : 1, sizeof *o->slot);
    if (!o->slot) {
        rc = bfit_fail(BFIT_ENOMEM, "optimizer: host allocation failed");
        goto free_struct;
    }
    o->cfg = *cfg;
    o->dev = dev;
    o->arena = arena;
    o->nslot = ntrain;
    o->nper = states_per_param(cfg);
    o->bytes = bytes;
    if (bytes) {
        rc = bfit_arena_alloc(arena, (size_t)bytes, BFIT_MEM_OPTIMIZER, &o->block);
        if (rc) {
            bfit_fail_prefix(rc, "%s optimizer state: ", kind_names[cfg->kind]);
            goto free_slots;
        }
    }
    carve(o, params, n);
    rc = make_ops(o);
    if (rc == BFIT_OK && bytes)
        rc = bfit_device_zero(dev, o->block, (size_t)bytes);
    if (rc != BFIT_OK) {
        bfit_optim_free(o);
        return rc;
    }
    *out = o;
    return BFIT_OK;

free_slots:
    free(o->slot);
free_struct:
    free(o);
    return rc;
}

void bfit_optim_free(bfit_optim *o)
{
    if (!o)
        return;
    for (int k = 0; k < o->nslot; k++)
        bfit_op_free(o->slot[k].op);
    bfit_arena_release(o->arena, o->block);
    free(o->slot);
    free(o);
}

/* PyTorch: d = g + wd*p; buf = first ? d : mom*buf + (1-damp)*d;
 * d = nesterov ? d + mom*buf : buf; p -= lr*d. The coefficients as PyTorch
 * rounds them; weight decay only where the parameter takes it. */
static void sgd_hyper(const bfit_optim *o, double lr, int decay, bfit_op_args *a)
{
    a->hyper[BFIT_SGD_LR_NEG] = (float)-lr;
    a->hyper[BFIT_SGD_WD] = decay ? (float)o->cfg.weight_decay : 0.0f;
    a->hyper[BFIT_SGD_MOM] = (float)o->cfg.momentum;
    a->hyper[BFIT_SGD_DAMP1] = (float)(1.0 - o->cfg.dampening);
    a->hyper[BFIT_SGD_FIRST] = o->steps == 0 ? 1.0f : 0.0f;
}

/* PyTorch AdamW: p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
 * p += (-lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps). */
static void adamw_hyper(const bfit_optim *o, double lr, int decay, bfit_op_args *a)
{
    const bfit_optim_cfg *c = &o->cfg;
    double t = (double)(o->steps + 1);
    a->hyper[BFIT_ADAMW_DECAY_MUL] = decay ? (float)(1.0 - lr * c->weight_decay) : 1.0f;
    a->hyper[BFIT_ADAMW_B1] = (float)c->beta1;
    a->hyper[BFIT_ADAMW_C1] = (float)(1.0 - c->beta1);
    a->hyper[BFIT_ADAMW_B2] = (float)c->beta2;
    a->hyper[BFIT_ADAMW_C2] = (float)(1.0 - c->beta2);
    a->hyper[BFIT_ADAMW_STEP_NEG] = (float)-(lr / (1.0 - pow(c->beta1, t)));
    a->hyper[BFIT_ADAMW_BC2_SQRT] = (float)sqrt(1.0 - pow(c->beta2, t));
    a->hyper[BFIT_ADAMW_EPS] = (float)c->eps;
}

int bfit_optim_step(bfit_optim *o, double lr)
{
    int rc;

    if (!o)
        return bfit_fail(BFIT_EINVAL, "optimizer: NULL");
    if (!(lr >= 0 && isfinite(lr)))
        return bfit_fail(BFIT_EINVAL, "optimizer: learning rate %g must be finite and >= 0", lr);
    /* one span of device calls (device.h), the first step apart (SGD's momentum starts there) */
    if ((rc = bfit_device_span_begin(o->dev, (uintptr_t)o * 2 + (o->steps == 0))) != BFIT_OK)
        return rc;
    for (int k = 0; k < o->nslot && rc == BFIT_OK; k++) {
        const slot *s = &o->slot[k];
        bfit_op_args a = {0};
        if (!s->op)
            continue;
        if (o->cfg.kind == BFIT_OPT_SGD)
            sgd_hyper(o, lr, s->p->decay, &a);
        else
            adamw_hyper(o, lr, s->p->decay, &a);
        a.dst = s->p->data;
        a.src = s->p->grad;
        a.state0 = s->s0;
        a.state1 = s->s1;
        rc = bfit_op_run(s->op, &a);
        if (rc != BFIT_OK)
            bfit_fail_prefix(rc, "%s update of parameter %d (%s): ", kind_names[o->cfg.kind], s->param_index,
                             s->p->name ? s->p->name : "?");
    }
    bfit_device_span_end(o->dev);
    if (rc != BFIT_OK)
        return rc;
    o->steps++;
    return BFIT_OK;
}

int64_t bfit_optim_steps(const bfit_optim *o) { return o->steps; }

int bfit_optim_set_steps(bfit_optim *o, int64_t steps)
{
    if (steps < 0)
        return bfit_fail(BFIT_EINVAL, "optimizer: step count %lld must be >= 0", (long long)steps);
    o->steps = steps;
    return BFIT_OK;
}

int bfit_optim_reset(bfit_optim *o)
{
    int rc = BFIT_OK;
    if (o->block)
        rc = bfit_device_zero(o->dev, o->block, (size_t)o->bytes);
    o->steps = 0;
    return rc;
}

int bfit_optim_state_count(const bfit_optim *o) { return o->nslot * o->nper; }

int bfit_optim_state_at(const bfit_optim *o, int i, bfit_optim_state *out)
{
    const slot *s;
    int which;

    if (i < 0 || i >= bfit_optim_state_count(o))
        return bfit_fail(BFIT_EINVAL, "optimizer: state index %d out of range (have %d)", i,
                         bfit_optim_state_count(o));
    s = &o->slot[i / o->nper];
    which = i % o->nper;
    if (o->cfg.kind == BFIT_OPT_SGD)
        out->kind = "momentum_buffer";
    else
        out->kind = which == 0 ? "exp_avg" : "exp_avg_sq";
    out->param_index = s->param_index;
    out->data = which == 0 ? s->s0 : s->s1;
    out->numel = s->numel;
    snprintf(out->name, sizeof out->name, "%d.%s", s->param_index, out->kind);
    return BFIT_OK;
}

const bfit_optim_cfg *bfit_optim_config(const bfit_optim *o) { return &o->cfg; }
