/* schedule.c - warmup, then constant, step or cosine learning rate. */
#include "optim/schedule.h"
#include "base/err.h"

#include <math.h>
#include <string.h>
#include <strings.h>

static const char *const names[BFIT_SCHED_COUNT] = { "constant", "step", "cosine" };

bfit_lr_schedule bfit_lr_schedule_default(bfit_sched_kind kind)
{
    bfit_lr_schedule s;
    memset(&s, 0, sizeof s);
    s.kind = kind;
    s.gamma = 0.1;
    return s;
}

int bfit_lr_schedule_check(const bfit_lr_schedule *s)
{
    if (!s || (unsigned)s->kind >= BFIT_SCHED_COUNT)
        return bfit_fail(BFIT_EINVAL, "schedule: unknown kind (valid: constant, step, cosine)");
    if (s->warmup_steps < 0)
        return bfit_fail(BFIT_EINVAL, "schedule: warmup steps %lld must be >= 0",
                         (long long)s->warmup_steps);
    if (!(s->warmup_start >= 0 && s->warmup_start <= 1))
        return bfit_fail(BFIT_EINVAL, "schedule: warmup start factor %g must be in [0, 1]",
                         s->warmup_start);
    if (s->kind == BFIT_SCHED_STEP) {
        if (s->step_size < 1)
            return bfit_fail_field(BFIT_EINVAL, "step_size", "the step schedule needs it: the lr is multiplied by "
                                   "gamma every N steps; give N >= 1 (got %lld)", (long long)s->step_size);
        if (!(s->gamma > 0 && isfinite(s->gamma)))
            return bfit_fail(BFIT_EINVAL, "step schedule: gamma %g must be finite and > 0", s->gamma);
    }
    if (s->kind == BFIT_SCHED_COSINE) {
        if (s->total_steps <= s->warmup_steps)
            return bfit_fail(BFIT_EINVAL, "cosine schedule: total steps %lld must exceed the "
                             "warmup steps %lld", (long long)s->total_steps,
                             (long long)s->warmup_steps);
        if (!(s->min_factor >= 0 && s->min_factor <= 1))
            return bfit_fail(BFIT_EINVAL, "cosine schedule: min factor %g must be in [0, 1]",
                             s->min_factor);
    }
    return BFIT_OK;
}

double bfit_lr_at(const bfit_lr_schedule *s, double base_lr, int64_t step)
{
    int64_t t, T;
    double lo;

    if (step < 0)
        step = 0;
    if (step < s->warmup_steps)
        return base_lr * (s->warmup_start +
                          (1.0 - s->warmup_start) * (double)step / (double)s->warmup_steps);
    t = step - s->warmup_steps;
    switch (s->kind) {
    case BFIT_SCHED_STEP:
        if (s->step_size < 1)
            return base_lr;
        return base_lr * pow(s->gamma, (double)(t / s->step_size));
    case BFIT_SCHED_COSINE:
        T = s->total_steps - s->warmup_steps;
        lo = base_lr * s->min_factor;
        if (T <= 0 || t >= T)
            return lo;
        return lo + (base_lr - lo) * (1.0 + cos(M_PI * (double)t / (double)T)) / 2.0;
    default:
        return base_lr;
    }
}

int bfit_lr_sched_parse(const char *name, bfit_sched_kind *out)
{
    for (int k = 0; k < BFIT_SCHED_COUNT; k++) {
        if (name && strcasecmp(name, names[k]) == 0) {
            *out = (bfit_sched_kind)k;
            return BFIT_OK;
        }
    }
    return bfit_fail(BFIT_EINVAL, "unknown learning-rate schedule '%s' (valid: constant, step, cosine)",
                     name ? name : "");
}

const char *bfit_lr_sched_name(bfit_sched_kind kind)
{
    return (unsigned)kind < BFIT_SCHED_COUNT ? names[kind] : "?";
}
