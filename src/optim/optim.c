/* optim.c - SGD and AdamW over a parameter list, state carved from one arena
 * block (llm.c's plan-then-allocate).
 *
 * The element loops follow torch.optim's single-tensor code operation by
 * operation: coefficients are computed in double and rounded to float where
 * PyTorch passes a Python float to a float kernel, and fmaf() stands where
 * PyTorch's vectorised add-with-alpha uses a fused multiply-add. That keeps
 * our results within an ulp or two of PyTorch's, not merely close.
 */
#include "optim/optim.h"
#include "base/err.h"
#include "base/par.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct slot {
    bfit_param *p;
    int param_index;
    int64_t numel;
    float *s0;   /* momentum_buffer, or exp_avg */
    float *s1;   /* exp_avg_sq (AdamW) */
} slot;

struct bfit_optim {
    bfit_optim_cfg cfg;
    bfit_arena *arena;
    void *block;          /* all state; NULL when there is none */
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
        return bfit_fail(BFIT_EINVAL, "optimizer: unknown kind (valid: sgd, adamw)");
    if (!(c->weight_decay >= 0 && isfinite(c->weight_decay)))
        return bfit_fail(BFIT_EINVAL, "optimizer: weight decay %g must be finite and >= 0",
                         c->weight_decay);
    if (c->kind == BFIT_OPT_SGD) {
        if (!(c->momentum >= 0 && isfinite(c->momentum)))
            return bfit_fail(BFIT_EINVAL, "sgd: momentum %g must be finite and >= 0", c->momentum);
        if (!isfinite(c->dampening))
            return bfit_fail(BFIT_EINVAL, "sgd: dampening %g must be finite", c->dampening);
        if (c->nesterov && (c->momentum <= 0 || c->dampening != 0))
            return bfit_fail(BFIT_EINVAL, "sgd: Nesterov needs momentum > 0 and dampening 0 "
                             "(have momentum %g, dampening %g)", c->momentum, c->dampening);
        return BFIT_OK;
    }
    if (!(c->beta1 >= 0 && c->beta1 < 1))
        return bfit_fail(BFIT_EINVAL, "adamw: beta1 %g must be in [0, 1)", c->beta1);
    if (!(c->beta2 >= 0 && c->beta2 < 1))
        return bfit_fail(BFIT_EINVAL, "adamw: beta2 %g must be in [0, 1)", c->beta2);
    if (!(c->eps >= 0 && isfinite(c->eps)))
        return bfit_fail(BFIT_EINVAL, "adamw: eps %g must be finite and >= 0", c->eps);
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
    uint64_t b = numel > 0 ? (uint64_t)numel * sizeof(float) : 0;
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
            s->s0 = (float *)cur;
            cur += b;
        }
        if (o->nper >= 2) {
            s->s1 = (float *)cur;
            cur += b;
        }
    }
}

int bfit_optim_new(const bfit_optim_cfg *cfg, bfit_param *const *params, int n, bfit_arena *arena,
                   bfit_optim **out)
{
    bfit_optim *o;
    uint64_t bytes;
    int ntrain, rc;

    if (!out)
        return bfit_fail(BFIT_EINVAL, "optimizer: out is NULL");
    *out = NULL;
    if (n < 0 || (n > 0 && !params) || !arena)
        return bfit_fail(BFIT_EINVAL, "optimizer: bad parameter list or arena");
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
    o->arena = arena;
    o->nslot = ntrain;
    o->nper = states_per_param(cfg);
    if (bytes) {
        rc = bfit_arena_alloc(arena, (size_t)bytes, BFIT_MEM_OPTIMIZER, &o->block);
        if (rc) {
            bfit_fail_prefix(rc, "%s optimizer state: ", kind_names[cfg->kind]);
            goto free_slots;
        }
        memset(o->block, 0, (size_t)bytes);
    }
    carve(o, params, n);
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
    bfit_arena_release(o->arena, o->block);
    free(o->slot);
    free(o);
}

/* Float coefficients of one step, rounded where PyTorch rounds them. */
typedef struct coef {
    float lr_neg;      /* SGD: -lr */
    float wd;          /* SGD: L2 factor */
    float mom, damp1;  /* SGD: momentum, 1 - dampening */
    float decay_mul;   /* AdamW: 1 - lr * wd */
    float b1, c1, b2, c2;
    float step_neg;    /* AdamW: -lr / (1 - beta1^t) */
    float bc2_sqrt;    /* AdamW: sqrt(1 - beta2^t) */
    float eps;
} coef;

/* PyTorch: d = g + wd*p; buf = first ? d : mom*buf + (1-damp)*d;
 * d = nesterov ? d + mom*buf : buf; p -= lr*d. */
static void sgd_update(const slot *s, const coef *c, int decay, int nesterov, int first)
{
    float *restrict p = s->p->data;
    const float *restrict g = s->p->grad;
    float *restrict buf = s->s0;
    const int64_t n = s->numel;
    const float wd = decay ? c->wd : 0.0f;

    if (!buf) {
        BFIT_PAR_FOR_IF(n >= BFIT_PAR_MIN, for (int64_t i = 0; i < n; i++) {
            float d = wd != 0.0f ? fmaf(p[i], wd, g[i]) : g[i];
            p[i] = fmaf(d, c->lr_neg, p[i]);
        });
        return;
    }
    BFIT_PAR_FOR_IF(n >= BFIT_PAR_MIN, for (int64_t i = 0; i < n; i++) {
        float d = wd != 0.0f ? fmaf(p[i], wd, g[i]) : g[i];
        float b = first ? d : fmaf(d, c->damp1, buf[i] * c->mom);
        buf[i] = b;
        d = nesterov ? fmaf(b, c->mom, d) : b;
        p[i] = fmaf(d, c->lr_neg, p[i]);
    });
}

/* PyTorch AdamW: p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g
 * (one fused multiply-add, as PyTorch's addcmul compiles);
 * p += (-lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps). */
static void adamw_update(const slot *s, const coef *c, int decay)
{
    float *restrict p = s->p->data;
    const float *restrict g = s->p->grad;
    float *restrict m = s->s0;
    float *restrict v = s->s1;
    const int64_t n = s->numel;
    const float dm = decay ? c->decay_mul : 1.0f;

    BFIT_PAR_FOR_IF(n >= BFIT_PAR_MIN, for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        float pi = p[i] * dm;
        float mi = fmaf(gi, c->c1, m[i] * c->b1);
        float vi = fmaf(c->c2 * gi, gi, v[i] * c->b2);
        float den = sqrtf(vi) / c->bc2_sqrt + c->eps;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi + c->step_neg * mi / den;
    });
}

int bfit_optim_step(bfit_optim *o, double lr)
{
    const bfit_optim_cfg *cfg;
    coef c;

    if (!o)
        return bfit_fail(BFIT_EINVAL, "optimizer: NULL");
    if (!(lr >= 0 && isfinite(lr)))
        return bfit_fail(BFIT_EINVAL, "optimizer: learning rate %g must be finite and >= 0", lr);
    cfg = &o->cfg;
    memset(&c, 0, sizeof c);
    if (cfg->kind == BFIT_OPT_SGD) {
        int first = o->steps == 0;
        c.lr_neg = (float)-lr;
        c.wd = (float)cfg->weight_decay;
        c.mom = (float)cfg->momentum;
        c.damp1 = (float)(1.0 - cfg->dampening);
        for (int k = 0; k < o->nslot; k++)
            sgd_update(&o->slot[k], &c, o->slot[k].p->decay, cfg->nesterov, first);
    } else {
        double t = (double)(o->steps + 1);
        c.decay_mul = (float)(1.0 - lr * cfg->weight_decay);
        c.b1 = (float)cfg->beta1;
        c.c1 = (float)(1.0 - cfg->beta1);
        c.b2 = (float)cfg->beta2;
        c.c2 = (float)(1.0 - cfg->beta2);
        c.step_neg = (float)-(lr / (1.0 - pow(cfg->beta1, t)));
        c.bc2_sqrt = (float)sqrt(1.0 - pow(cfg->beta2, t));
        c.eps = (float)cfg->eps;
        for (int k = 0; k < o->nslot; k++)
            adamw_update(&o->slot[k], &c, o->slot[k].p->decay);
    }
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

void bfit_optim_reset(bfit_optim *o)
{
    for (int k = 0; k < o->nslot; k++) {
        size_t b = (size_t)o->slot[k].numel * sizeof(float);
        if (o->slot[k].s0)
            memset(o->slot[k].s0, 0, b);
        if (o->slot[k].s1)
            memset(o->slot[k].s1, 0, b);
    }
    o->steps = 0;
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
