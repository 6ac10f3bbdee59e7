/* control_cfg.c - the batch controller's configuration: its defaults (the
 * one owner of each) and the checks bfit_controller_new makes; and the names
 * of the lr rules and of the reasons for a decision. */
#include "batchfit.h"
#include "base/err.h"
#include "batch/control_int.h"
#include "base/sized.h"

#include <math.h>
#include <string.h>
#include <strings.h>

/* ---- names and parsing --------------------------------------------------- */

static const char *const rule_names[BFIT_LR_NRULES] = { "linear", "sqrt", "none", "adascale" };
static const char *const reason_names[BFIT_REASON_COUNT] = {
    "", "start", "out of memory", "memory shrank", "memory freed", "throughput", "schedule", "noise scale",
    "goodput", "plateau", "micro-batch option"
};

int bfit_lr_rule_parse(const char *name, bfit_lr_rule *out)
{
    if (!out)
        return bfit_fail(BFIT_EINVAL, "bfit_lr_rule_parse needs somewhere to put the rule");
    for (int r = 0; r < BFIT_LR_NRULES; r++) {
        if (name && strcasecmp(name, rule_names[r]) == 0) {
            *out = (bfit_lr_rule)r;
            return BFIT_OK;
        }
    }
    return bfit_fail(BFIT_EINVAL, "unknown lr scaling rule '%s' (valid: linear, sqrt, none, adascale)",
                     name ? name : "");
}

const char *bfit_lr_rule_name(bfit_lr_rule rule)
{
    return (unsigned)rule < BFIT_LR_NRULES ? rule_names[rule] : "?";
}

double bfit_lr_rule_scale(bfit_lr_rule rule, double ratio)
{
    switch (rule) {
    case BFIT_LR_LINEAR: return ratio;
    case BFIT_LR_SQRT: return sqrt(ratio);
    case BFIT_LR_ADASCALE: return ratio < 1 ? ratio : 1.0; /* the gain's bound without a noise scale */
    default: return 1.0;
    }
}

const char *bfit_batch_reason_name(bfit_batch_reason r)
{
    return (unsigned)r < BFIT_REASON_COUNT ? reason_names[r] : "?";
}

/* ---- configuration -------------------------------------------------------- */

void bfit_controller_config_init(bfit_controller_config *out, size_t size)
{
    bfit_controller_config full, *cfg = &full;

    memset(cfg, 0, sizeof *cfg);
    cfg->size = sizeof *cfg;
    cfg->rule = BFIT_LR_LINEAR;
    cfg->rewarmup_steps = 100;
    cfg->grow_after = 5;
    cfg->grow_gain = 0.05;
    cfg->shrink_holdoff = 50;
    cfg->flap_window = 200;
    cfg->tput_skip = 1;
    cfg->tput_alpha = 0.3;
    cfg->adapt_interval = 100;
    cfg->adapt_factor = 2.0;
    cfg->adapt_min_change = 0.1;
    cfg->noise_alpha = 0.05;
    cfg->noise_min_updates = 20;
    cfg->auto_gain = 0.1;
    cfg->auto_interval = 10000;
    cfg->auto_confirm = 20;
    cfg->auto_plateau_windows = 2;
    cfg->auto_plateau = 0.02;
    /* the caller's struct may be smaller (an older header) or larger (a newer one) */
    if (!out || size < BFIT_SIZED_MIN || size > BFIT_SIZED_MAX)
        return;
    memset(out, 0, size);
    memcpy(out, &full, size < sizeof full ? size : sizeof full);
    out->size = size;
}

static int check_schedule(const bfit_controller_config *cfg)
{
    const bfit_batch_point *s = cfg->schedule;

    if (cfg->nschedule < 0 || (cfg->nschedule > 0 && !s))
        return bfit_fail(BFIT_EINVAL, "controller: schedule of %d points without points", cfg->nschedule);
    for (int i = 0; i < cfg->nschedule; i++) {
        if (s[i].at < 0 || s[i].batch < 1)
            return bfit_fail(BFIT_EINVAL, "controller: schedule point %d (%lld:%d) needs at >= 0 and batch >= 1",
                             i + 1, (long long)s[i].at, s[i].batch);
        if (i > 0 && (s[i].by_epoch != s[0].by_epoch || s[i].at <= s[i - 1].at))
            return bfit_fail(BFIT_EINVAL, "controller: schedule point %d is not after point %d in the same unit",
                             i + 1, i);
    }
    if (cfg->batch < 1 && (cfg->nschedule == 0 || s[0].at != 0))
        return bfit_fail(BFIT_EINVAL, "controller: effective batch %d must be >= 1 (or the schedule must start "
                         "at 0)", cfg->batch);
    return BFIT_OK;
}

int bfit_ctl_check_config(const bfit_controller_config *cfg)
{
    if (!cfg || !cfg->plan_bytes)
        return bfit_fail(BFIT_EINVAL, "controller: no plan function");
    if (!(cfg->margin >= 0 && cfg->margin < 1))
        return bfit_fail(BFIT_EINVAL, "controller: margin %g must be in [0, 1)", cfg->margin);
    if (cfg->micro_batch < 0)
        return bfit_fail(BFIT_EINVAL, "controller: micro-batch %d must be 0 (auto) or >= 1", cfg->micro_batch);
    if ((unsigned)cfg->rule >= BFIT_LR_NRULES)
        return bfit_fail(BFIT_EINVAL, "controller: unknown lr scaling rule %d (valid: linear, sqrt, none, "
                         "adascale)", (int)cfg->rule);
    if (cfg->rule == BFIT_LR_ADASCALE && !cfg->auto_batch && !cfg->adaptive)
        return bfit_fail(BFIT_EINVAL, "controller: the adascale rule needs the noise scale: an auto or adaptive "
                         "batch");
    if (cfg->auto_batch) {
        if (cfg->adaptive || cfg->nschedule)
            return bfit_fail(BFIT_EINVAL, "controller: an auto batch excludes an adaptive batch and a batch "
                             "schedule");
        if (cfg->batch_min < 1 || cfg->batch_min > cfg->batch_max)
            return bfit_fail(BFIT_EINVAL, "controller: auto batch needs 1 <= minimum <= maximum, got %d and %d",
                             cfg->batch_min, cfg->batch_max);
        if (cfg->batch && (cfg->batch < cfg->batch_min || cfg->batch > cfg->batch_max))
            return bfit_fail(BFIT_EINVAL, "controller: initial batch %d is outside [%d, %d]", cfg->batch,
                             cfg->batch_min, cfg->batch_max);
        if (!(cfg->auto_gain >= 0 && isfinite(cfg->auto_gain)) || cfg->auto_interval < 0 || cfg->auto_confirm < 1)
            return bfit_fail(BFIT_EINVAL, "controller: auto needs gain >= 0 (got %g), interval >= 0 (%lld), "
                             "confirm >= 1 (%d)", cfg->auto_gain, (long long)cfg->auto_interval, cfg->auto_confirm);
        if (cfg->auto_plateau_windows < 0 || !(cfg->auto_plateau >= 0 && cfg->auto_plateau < 1))
            return bfit_fail(BFIT_EINVAL, "controller: auto's plateau check needs windows >= 0 (got %d) and a "
                             "relative fall in [0, 1) (got %g)", cfg->auto_plateau_windows, cfg->auto_plateau);
    } else if (cfg->adaptive) {
        if (cfg->nschedule)
            return bfit_fail(BFIT_EINVAL, "controller: adaptive batch and a batch schedule exclude each other");
        if (cfg->batch_min < 2 || cfg->batch_min > cfg->batch_max)
            return bfit_fail(BFIT_EINVAL, "controller: adaptive batch needs 2 <= minimum <= maximum, got %d and %d",
                             cfg->batch_min, cfg->batch_max);
        if (cfg->batch && (cfg->batch < cfg->batch_min || cfg->batch > cfg->batch_max))
            return bfit_fail(BFIT_EINVAL, "controller: initial batch %d is outside [%d, %d]", cfg->batch,
                             cfg->batch_min, cfg->batch_max);
    } else if (check_schedule(cfg) != BFIT_OK) {
        return BFIT_EINVAL;
    }
    if (cfg->lr_ref_batch < 0 || cfg->rewarmup_steps < 0)
        return bfit_fail(BFIT_EINVAL, "controller: lr reference batch %d and re-warmup steps %lld must be >= 0",
                         cfg->lr_ref_batch, (long long)cfg->rewarmup_steps);
    if (cfg->grow_after < 0 || cfg->shrink_holdoff < 0 || cfg->flap_window < 0 || cfg->tput_skip < 0)
        return bfit_fail(BFIT_EINVAL, "controller: grow-after, holdoff, flap window and skip must be >= 0");
    if (!(cfg->grow_gain >= 0 && isfinite(cfg->grow_gain)))
        return bfit_fail(BFIT_EINVAL, "controller: growth gain %g must be finite and >= 0", cfg->grow_gain);
    if (!(cfg->tput_alpha > 0 && cfg->tput_alpha <= 1) || !(cfg->noise_alpha > 0 && cfg->noise_alpha <= 1))
        return bfit_fail(BFIT_EINVAL, "controller: EMA weights (throughput %g, noise %g) must be in (0, 1]",
                         cfg->tput_alpha, cfg->noise_alpha);
    if (cfg->adapt_interval < 1 || !(cfg->adapt_factor > 1 && isfinite(cfg->adapt_factor)) ||
        !(cfg->adapt_min_change >= 0 && cfg->adapt_min_change < 1) || cfg->noise_min_updates < 1)
        return bfit_fail(BFIT_EINVAL, "controller: adaptive needs interval >= 1 (got %lld), factor > 1 (%g), "
                         "min change in [0, 1) (%g), noise updates >= 1 (%d)", (long long)cfg->adapt_interval,
                         cfg->adapt_factor, cfg->adapt_min_change, cfg->noise_min_updates);
    return BFIT_OK;
}
