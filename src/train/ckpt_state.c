/* ckpt_state.c - a run's state at a step boundary as JSON, for a
 * checkpoint's metadata: where the run is, the sample stream's cursor, the
 * dropout counter, the learning-rate schedule, the controller (E, m,
 * accumulation, noise-scale averages, hysteresis, throughput records) and
 * the figures so far. 64-bit integers are decimal strings (JSON numbers hold
 * 53 bits); doubles are numbers printed to round-trip exactly, or "nan",
 * "inf", "-inf". Reading checks every field's presence and type. */
#include "base/err.h"
#include "train/run_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- writing ----------------------------------------------------------------- */

static void put_i64(cJSON *o, const char *k, int64_t v)
{
    char b[32];
    snprintf(b, sizeof b, "%" PRId64, v);
    cJSON_AddStringToObject(o, k, b);
}

static void put_u64(cJSON *o, const char *k, uint64_t v)
{
    char b[32];
    snprintf(b, sizeof b, "%" PRIu64, v);
    cJSON_AddStringToObject(o, k, b);
}

static void put_dbl(cJSON *o, const char *k, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(o, k, v); /* cJSON prints 17 digits when 15 do not round-trip */
    else
        cJSON_AddStringToObject(o, k, isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
}

static void put_int(cJSON *o, const char *k, int v) { cJSON_AddNumberToObject(o, k, v); }

static cJSON *decision_json(const bfit_batch_decision *d)
{
    cJSON *o = cJSON_CreateObject();
    put_int(o, "m", d->m);
    put_int(o, "k", d->k);
    put_int(o, "last", d->last);
    put_int(o, "batch", d->batch);
    put_dbl(o, "lr_scale", d->lr_scale);
    put_int(o, "reason", (int)d->reason);
    put_int(o, "prev_m", d->prev_m);
    put_int(o, "prev_batch", d->prev_batch);
    put_int(o, "split", d->split);
    cJSON_AddStringToObject(o, "why", d->why);
    put_dbl(o, "noise_scale", d->noise_scale);
    put_dbl(o, "tput_old", d->tput_old);
    put_dbl(o, "tput_new", d->tput_new);
    put_dbl(o, "eff_old", d->eff_old);
    put_dbl(o, "eff_new", d->eff_new);
    return o;
}

/* --batch auto's ladder and bookkeeping, and the consecutive-step norms. */
static cJSON *auto_json(const bfit_controller_auto *a)
{
    cJSON *o = cJSON_CreateObject(), *m = cJSON_CreateArray(), *t = cJSON_CreateArray();
    put_int(o, "prev_norms", a->prev_norms);
    put_int(o, "prev_b", a->prev_b);
    put_dbl(o, "prev_g2", a->prev_g2);
    for (int i = 0; i < a->lad.n && i < GP_RUNGS; i++) {
        cJSON_AddItemToArray(m, cJSON_CreateNumber(a->lad.m[i]));
        cJSON_AddItemToArray(t, cJSON_CreateNumber(a->lad.secs[i]));
    }
    cJSON_AddItemToObject(o, "ladder_m", m);
    cJSON_AddItemToObject(o, "ladder_secs", t);
    put_int(o, "ladder_next", a->lad.next);
    put_int(o, "ladder_limit", a->lad.limit);
    put_int(o, "ladder_stalls", a->lad.stalls);
    put_dbl(o, "ladder_best_rate", a->lad.best_rate);
    put_dbl(o, "speed", a->speed);
    put_dbl(o, "overhead", a->overhead);
    put_i64(o, "seen", a->seen);
    put_i64(o, "change_seen", a->change_seen);
    put_i64(o, "ramp_seen", a->ramp_seen);
    put_int(o, "pending_E", a->pending_E);
    put_int(o, "pending_n", a->pending_n);
    put_i64(o, "nobs", a->nobs);
    put_int(o, "ladders", a->ladders);
    put_i64(o, "ladder_seen", a->ladder_seen);
    put_int(o, "ladder_ran", a->ladder_ran);
    put_dbl(o, "plat_sum", a->plat_sum);
    put_i64(o, "plat_n", a->plat_n);
    put_dbl(o, "plat_best", a->plat_best);
    put_int(o, "plat_windows", a->plat_windows);
    put_int(o, "plat_stalls", a->plat_stalls);
    put_int(o, "lr_ref", a->lr_ref);
    return o;
}

static cJSON *controller_json(const bfit_controller_state *c)
{
    cJSON *o = cJSON_CreateObject(), *nz = cJSON_CreateObject(), *tp = cJSON_CreateArray();
    put_u64(o, "capacity", c->capacity);
    put_u64(o, "free", c->free);
    put_int(o, "m", c->m);
    put_int(o, "E", c->E);
    put_int(o, "E0", c->E0);
    put_dbl(nz, "alpha", c->noise.alpha);
    put_dbl(nz, "g2_ema", c->noise.g2_ema);
    put_dbl(nz, "s_ema", c->noise.s_ema);
    put_dbl(nz, "g2_last", c->noise.g2_last);
    put_dbl(nz, "s_last", c->noise.s_last);
    put_i64(nz, "n", c->noise.n);
    cJSON_AddItemToObject(o, "noise", nz);
    put_int(o, "started", c->started);
    put_int(o, "decided", c->decided);
    put_int(o, "observed", c->observed);
    put_int(o, "oom_step", c->oom_step);
    put_i64(o, "step", c->step);
    cJSON_AddItemToObject(o, "decision", decision_json(&c->d));
    put_dbl(o, "scale", c->scale);
    put_dbl(o, "ramp_from", c->ramp_from);
    put_dbl(o, "ramp_to", c->ramp_to);
    put_i64(o, "ramp_start", c->ramp_start);
    put_int(o, "streak", c->streak);
    put_int(o, "at_m", c->at_m);
    put_i64(o, "hold_until", c->hold_until);
    put_i64(o, "holdoff", c->holdoff);
    put_i64(o, "last_grow", c->last_grow);
    put_i64(o, "last_E_change", c->last_E_change);
    for (int i = 0; i < BFIT_CONTROLLER_NTPUT; i++) {
        cJSON *t = cJSON_CreateObject();
        put_int(t, "m", c->tp[i].m);
        put_int(t, "n", c->tp[i].n);
        put_dbl(t, "rate", c->tp[i].rate);
        put_u64(t, "used", c->tp[i].used);
        cJSON_AddItemToArray(tp, t);
    }
    cJSON_AddItemToObject(o, "throughput", tp);
    put_u64(o, "tick", c->tick);
    cJSON_AddItemToObject(o, "auto", auto_json(&c->au));
    return o;
}

static cJSON *result_json(const bfit_train_result *r)
{
    cJSON *o = cJSON_CreateObject();
    put_int(o, "epochs", r->epochs);
    put_dbl(o, "train_loss", r->train_loss);
    put_dbl(o, "test_loss", r->test_loss);
    put_dbl(o, "test_acc", r->test_acc);
    put_int(o, "ooms", r->ooms);
    put_int(o, "batch_changes", r->batch_changes);
    put_int(o, "last_batch", r->last_batch);
    put_dbl(o, "noise_scale", r->noise_scale);
    return o;
}

static cJSON *sched_json(const bfit_lr_schedule *s)
{
    cJSON *o = cJSON_CreateObject();
    put_int(o, "kind", (int)s->kind);
    put_i64(o, "warmup_steps", s->warmup_steps);
    put_dbl(o, "warmup_start", s->warmup_start);
    put_i64(o, "step_size", s->step_size);
    put_dbl(o, "gamma", s->gamma);
    put_i64(o, "total_steps", s->total_steps);
    put_dbl(o, "min_factor", s->min_factor);
    return o;
}

cJSON *bfit_ckpt_state_to_json(const run_snap *s, const bfit_lr_schedule *sched)
{
    cJSON *o = cJSON_CreateObject();
    put_i64(o, "step", s->pos.step);
    put_int(o, "epoch", s->pos.epoch);
    put_i64(o, "taken", s->pos.taken);
    put_i64(o, "per_epoch", s->per_epoch);
    put_i64(o, "samples", s->pos.samples);
    put_u64(o, "micro", s->pos.micro);
    put_int(o, "m", s->pos.m);
    put_int(o, "warned_bn", s->pos.warned_bn);
    put_int(o, "nmem", s->pos.nmem);
    put_dbl(o, "train_time", s->pos.train_time);
    put_dbl(o, "ep_loss", s->pos.ep_loss);
    put_i64(o, "ep_count", s->pos.ep_count);
    put_i64(o, "cursor_epoch", s->cursor_epoch);
    put_i64(o, "cursor_pos", s->cursor_pos);
    put_i64(o, "optim_steps", s->optim_steps);
    put_dbl(o, "loss_scale", s->pos.ls.scale);
    put_i64(o, "loss_scale_interval", s->pos.ls.interval);
    put_i64(o, "loss_scale_good", s->pos.ls.good);
    put_i64(o, "loss_scale_skipped", s->pos.ls.skipped);
    put_int(o, "track_stale", s->pos.track_stale);
    cJSON_AddItemToObject(o, "result", result_json(&s->pos.res));
    cJSON_AddItemToObject(o, "decision", decision_json(&s->pos.d));
    cJSON_AddItemToObject(o, "controller", controller_json(&s->ctl));
    cJSON_AddItemToObject(o, "lr_schedule", sched_json(sched));
    return o;
}

/* ---- reading ----------------------------------------------------------------- */

/* The reader: the first problem is kept, with the field's path. */
typedef struct rd {
    const char *path;
    int rc;
    char at[128];
} rd;

static const cJSON *get(rd *r, const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
    if (!v && r->rc == BFIT_OK)
        r->rc = bfit_fail(BFIT_EFORMAT, "%s: the run's state lacks \"%s%s\"", r->path, r->at, k);
    return v;
}

static void bad(rd *r, const char *k, const char *what)
{
    if (r->rc == BFIT_OK)
        r->rc = bfit_fail(BFIT_EFORMAT, "%s: the run's state field \"%s%s\" is not %s", r->path, r->at, k, what);
}

static int64_t get_i64(rd *r, const cJSON *o, const char *k)
{
    const cJSON *v = get(r, o, k);
    char *end;
    long long x;
    if (!v)
        return 0;
    errno = 0;
    x = cJSON_IsString(v) && v->valuestring[0] ? strtoll(v->valuestring, &end, 10) : 0;
    if (!cJSON_IsString(v) || !v->valuestring[0] || *end || errno) {
        bad(r, k, "a whole number");
        return 0;
    }
    return x;
}

static uint64_t get_u64(rd *r, const cJSON *o, const char *k)
{
    const cJSON *v = get(r, o, k);
    char *end;
    unsigned long long x;
    if (!v)
        return 0;
    errno = 0;
    x = cJSON_IsString(v) && v->valuestring[0] >= '0' && v->valuestring[0] <= '9' ? strtoull(v->valuestring, &end, 10)
                                                                                  : 0;
    if (!cJSON_IsString(v) || !(v->valuestring[0] >= '0' && v->valuestring[0] <= '9') || *end || errno) {
        bad(r, k, "a whole number");
        return 0;
    }
    return x;
}

static double get_dbl(rd *r, const cJSON *o, const char *k)
{
    const cJSON *v = get(r, o, k);
    if (!v)
        return 0;
    if (cJSON_IsNumber(v))
        return v->valuedouble;
    if (cJSON_IsString(v) && !strcmp(v->valuestring, "nan"))
        return NAN;
    if (cJSON_IsString(v) && (!strcmp(v->valuestring, "inf") || !strcmp(v->valuestring, "-inf")))
        return v->valuestring[0] == '-' ? -INFINITY : INFINITY;
    bad(r, k, "a number");
    return 0;
}

static int get_int(rd *r, const cJSON *o, const char *k)
{
    const cJSON *v = get(r, o, k);
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 2147483647.0) {
        bad(r, k, "an integer");
        return 0;
    }
    return (int)v->valuedouble;
}

static const cJSON *enter(rd *r, const cJSON *o, const char *k, char *saved)
{
    const cJSON *v = get(r, o, k);
    snprintf(saved, 128, "%s", r->at);
    if (v && !cJSON_IsObject(v))
        bad(r, k, "an object");
    snprintf(r->at + strlen(r->at), sizeof r->at - strlen(r->at), "%s.", k);
    return v && cJSON_IsObject(v) ? v : NULL;
}

static void leave(rd *r, const char *saved) { snprintf(r->at, sizeof r->at, "%s", saved); }

static void read_decision(rd *r, const cJSON *o, bfit_batch_decision *d)
{
    const cJSON *why;
    d->m = get_int(r, o, "m");
    d->k = get_int(r, o, "k");
    d->last = get_int(r, o, "last");
    d->batch = get_int(r, o, "batch");
    d->lr_scale = get_dbl(r, o, "lr_scale");
    d->reason = (bfit_batch_reason)get_int(r, o, "reason");
    if ((unsigned)d->reason >= BFIT_REASON_COUNT)
        bad(r, "reason", "a known reason");
    d->prev_m = get_int(r, o, "prev_m");
    d->prev_batch = get_int(r, o, "prev_batch");
    d->split = get_int(r, o, "split");
    why = get(r, o, "why");
    if (why && !cJSON_IsString(why))
        bad(r, "why", "text");
    else if (why)
        snprintf(d->why, sizeof d->why, "%s", why->valuestring);
    d->noise_scale = get_dbl(r, o, "noise_scale");
    d->tput_old = get_dbl(r, o, "tput_old");
    d->tput_new = get_dbl(r, o, "tput_new");
    d->eff_old = get_dbl(r, o, "eff_old");
    d->eff_new = get_dbl(r, o, "eff_new");
}

static void read_auto(rd *r, const cJSON *o, bfit_controller_auto *a)
{
    const cJSON *m = get(r, o, "ladder_m"), *t = get(r, o, "ladder_secs");
    a->prev_norms = get_int(r, o, "prev_norms");
    a->prev_b = get_int(r, o, "prev_b");
    a->prev_g2 = get_dbl(r, o, "prev_g2");
    if (m && t && cJSON_IsArray(m) && cJSON_IsArray(t) && cJSON_GetArraySize(m) == cJSON_GetArraySize(t) &&
        cJSON_GetArraySize(m) <= GP_RUNGS) {
        a->lad.n = cJSON_GetArraySize(m);
        for (int i = 0; i < a->lad.n; i++) {
            const cJSON *mi = cJSON_GetArrayItem(m, i), *ti = cJSON_GetArrayItem(t, i);
            if (!cJSON_IsNumber(mi) || !cJSON_IsNumber(ti) || mi->valuedouble < 1 || mi->valuedouble > BFIT_BATCH_MAX) {
                bad(r, "ladder_m", "micro-batches and their seconds");
                break;
            }
            a->lad.m[i] = (int)mi->valuedouble;
            a->lad.secs[i] = ti->valuedouble;
        }
    } else if (m || t) {
        bad(r, "ladder_m", "two lists of equal length (at most 24) of micro-batches and seconds");
    }
    a->lad.next = get_int(r, o, "ladder_next");
    a->lad.limit = get_int(r, o, "ladder_limit");
    a->lad.stalls = get_int(r, o, "ladder_stalls");
    a->lad.best_rate = get_dbl(r, o, "ladder_best_rate");
    a->speed = get_dbl(r, o, "speed");
    a->overhead = get_dbl(r, o, "overhead");
    a->seen = get_i64(r, o, "seen");
    a->change_seen = get_i64(r, o, "change_seen");
    a->ramp_seen = get_i64(r, o, "ramp_seen");
    a->pending_E = get_int(r, o, "pending_E");
    a->pending_n = get_int(r, o, "pending_n");
    a->nobs = get_i64(r, o, "nobs");
    a->ladders = get_int(r, o, "ladders");
    a->ladder_seen = get_i64(r, o, "ladder_seen");
    a->ladder_ran = get_int(r, o, "ladder_ran");
    /* the plateau check came later: a checkpoint without it starts its windows afresh */
    if (cJSON_GetObjectItemCaseSensitive(o, "lr_ref")) {
        a->plat_sum = get_dbl(r, o, "plat_sum");
        a->plat_n = get_i64(r, o, "plat_n");
        a->plat_best = get_dbl(r, o, "plat_best");
        a->plat_windows = get_int(r, o, "plat_windows");
        a->plat_stalls = get_int(r, o, "plat_stalls");
        a->lr_ref = get_int(r, o, "lr_ref");
    }
}

static void read_controller(rd *r, const cJSON *o, bfit_controller_state *c)
{
    char s1[128], s2[128];
    const cJSON *nz, *tp, *d;
    c->capacity = get_u64(r, o, "capacity");
    c->free = get_u64(r, o, "free");
    c->m = get_int(r, o, "m");
    c->E = get_int(r, o, "E");
    c->E0 = get_int(r, o, "E0");
    if ((nz = enter(r, o, "noise", s1))) {
        c->noise.alpha = get_dbl(r, nz, "alpha");
        c->noise.g2_ema = get_dbl(r, nz, "g2_ema");
        c->noise.s_ema = get_dbl(r, nz, "s_ema");
        c->noise.g2_last = get_dbl(r, nz, "g2_last");
        c->noise.s_last = get_dbl(r, nz, "s_last");
        c->noise.n = get_i64(r, nz, "n");
    }
    leave(r, s1);
    c->started = get_int(r, o, "started");
    c->decided = get_int(r, o, "decided");
    c->observed = get_int(r, o, "observed");
    c->oom_step = get_int(r, o, "oom_step");
    c->step = get_i64(r, o, "step");
    if ((d = enter(r, o, "decision", s1)))
        read_decision(r, d, &c->d);
    leave(r, s1);
    c->scale = get_dbl(r, o, "scale");
    c->ramp_from = get_dbl(r, o, "ramp_from");
    c->ramp_to = get_dbl(r, o, "ramp_to");
    c->ramp_start = get_i64(r, o, "ramp_start");
    c->streak = get_int(r, o, "streak");
    c->at_m = get_int(r, o, "at_m");
    c->hold_until = get_i64(r, o, "hold_until");
    c->holdoff = get_i64(r, o, "holdoff");
    c->last_grow = get_i64(r, o, "last_grow");
    c->last_E_change = get_i64(r, o, "last_E_change");
    tp = get(r, o, "throughput");
    if (tp && (!cJSON_IsArray(tp) || cJSON_GetArraySize(tp) != BFIT_CONTROLLER_NTPUT))
        bad(r, "throughput", "a list of the throughput records");
    for (int i = 0; tp && cJSON_IsArray(tp) && i < cJSON_GetArraySize(tp) && i < BFIT_CONTROLLER_NTPUT; i++) {
        const cJSON *t = cJSON_GetArrayItem(tp, i);
        snprintf(s2, sizeof s2, "%s", r->at);
        snprintf(r->at + strlen(r->at), sizeof r->at - strlen(r->at), "throughput[%d].", i);
        c->tp[i].m = get_int(r, t, "m");
        c->tp[i].n = get_int(r, t, "n");
        c->tp[i].rate = get_dbl(r, t, "rate");
        c->tp[i].used = get_u64(r, t, "used");
        leave(r, s2);
    }
    c->tick = get_u64(r, o, "tick");
    if ((d = enter(r, o, "auto", s1)))
        read_auto(r, d, &c->au);
    leave(r, s1);
}

static void read_result(rd *r, const cJSON *o, bfit_train_result *res)
{
    res->epochs = get_int(r, o, "epochs");
    res->train_loss = get_dbl(r, o, "train_loss");
    res->test_loss = get_dbl(r, o, "test_loss");
    res->test_acc = get_dbl(r, o, "test_acc");
    res->ooms = get_int(r, o, "ooms");
    res->batch_changes = get_int(r, o, "batch_changes");
    res->last_batch = get_int(r, o, "last_batch");
    res->noise_scale = get_dbl(r, o, "noise_scale");
}

static void read_sched(rd *r, const cJSON *o, bfit_lr_schedule *s)
{
    s->kind = (bfit_sched_kind)get_int(r, o, "kind");
    if ((unsigned)s->kind >= BFIT_SCHED_COUNT)
        bad(r, "kind", "a known schedule");
    s->warmup_steps = get_i64(r, o, "warmup_steps");
    s->warmup_start = get_dbl(r, o, "warmup_start");
    s->step_size = get_i64(r, o, "step_size");
    s->gamma = get_dbl(r, o, "gamma");
    s->total_steps = get_i64(r, o, "total_steps");
    s->min_factor = get_dbl(r, o, "min_factor");
}

/* Values no run can have: a bad file must not become a strange run. */
static void check_ranges(rd *r, const run_snap *s)
{
    if (r->rc != BFIT_OK)
        return;
    if (s->pos.step < 0 || s->pos.step > BFIT_COUNT_MAX || s->pos.epoch < 0 || s->pos.epoch > BFIT_EPOCHS_MAX ||
        s->pos.taken < 0 || s->pos.samples < 0 || s->pos.ep_count < 0 || s->cursor_epoch < 0 || s->cursor_pos < 0 ||
        s->optim_steps < 0 || s->pos.m < 1 || s->pos.m > BFIT_BATCH_MAX || s->pos.nmem < 0 ||
        s->pos.nmem > BFIT_MEM_SCHEDULE_MAX || !(s->pos.ls.scale > 0) || s->pos.ls.scale > 1e300 ||
        s->pos.ls.interval < 1 || s->pos.ls.good < 0 || s->pos.ls.skipped < 0 ||
        (s->pos.track_stale != 0 && s->pos.track_stale != 1))
        r->rc = bfit_fail(BFIT_EFORMAT, "%s: the run's state is out of range (step %lld, epoch %d, micro-batch %d, "
                          "cursor %lld:%lld): the file is not from a run", r->path, (long long)s->pos.step,
                          s->pos.epoch, s->pos.m, (long long)s->cursor_epoch, (long long)s->cursor_pos);
}

int bfit_ckpt_state_from_json(const cJSON *j, const char *path, run_snap *s, bfit_lr_schedule *sched)
{
    rd r = {path, BFIT_OK, ""};
    char s1[128];
    const cJSON *o;

    memset(s, 0, sizeof *s);
    if (!cJSON_IsObject(j))
        return bfit_fail(BFIT_EFORMAT, "%s: the run's state is not a JSON object", path);
    s->pos.step = get_i64(&r, j, "step");
    s->pos.epoch = get_int(&r, j, "epoch");
    s->pos.taken = get_i64(&r, j, "taken");
    s->per_epoch = get_i64(&r, j, "per_epoch");
    s->pos.samples = get_i64(&r, j, "samples");
    s->pos.micro = get_u64(&r, j, "micro");
    s->pos.m = get_int(&r, j, "m");
    s->pos.warned_bn = get_int(&r, j, "warned_bn");
    s->pos.nmem = get_int(&r, j, "nmem");
    s->pos.train_time = get_dbl(&r, j, "train_time");
    s->pos.ep_loss = get_dbl(&r, j, "ep_loss");
    s->pos.ep_count = get_i64(&r, j, "ep_count");
    s->cursor_epoch = get_i64(&r, j, "cursor_epoch");
    s->cursor_pos = get_i64(&r, j, "cursor_pos");
    s->optim_steps = get_i64(&r, j, "optim_steps");
    s->pos.ls.scale = get_dbl(&r, j, "loss_scale");
    s->pos.ls.interval = get_i64(&r, j, "loss_scale_interval");
    s->pos.ls.good = get_i64(&r, j, "loss_scale_good");
    s->pos.ls.skipped = get_i64(&r, j, "loss_scale_skipped");
    s->pos.track_stale = get_int(&r, j, "track_stale");
    if ((o = enter(&r, j, "result", s1)))
        read_result(&r, o, &s->pos.res);
    leave(&r, s1);
    if ((o = enter(&r, j, "decision", s1)))
        read_decision(&r, o, &s->pos.d);
    leave(&r, s1);
    if ((o = enter(&r, j, "controller", s1)))
        read_controller(&r, o, &s->ctl);
    leave(&r, s1);
    if ((o = enter(&r, j, "lr_schedule", s1)))
        read_sched(&r, o, sched);
    leave(&r, s1);
    check_ranges(&r, s);
    return r.rc;
}
