/* ckpt_state.c - a run's state at a step boundary as JSON, for a
 * checkpoint's metadata: where the run is, the sample stream's cursor, the
 * dropout counter, the learning-rate schedule, the controller (E, m,
 * accumulation, noise-scale averages, hysteresis, throughput records) and
 * the figures so far. 64-bit integers are decimal strings (JSON numbers hold
 * 53 bits); doubles are numbers printed to read back exactly, or "nan",
 * "inf", "-inf". Reading checks every field's presence and type.
 *
 * Every field is one line of a table (its key, kind and place) that writing
 * and reading both walk, as ckpt_cfg.c's does for the configuration: a
 * field is added in one place. A field added after checkpoints were out
 * names the key that says a checkpoint has it (`since`); an older one
 * without it leaves it 0. */
#include "base/err.h"
#include "train/run_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    K_INT,    /* int: a JSON number */
    K_I64,    /* int64_t: a decimal string */
    K_U64,    /* uint64_t: a decimal string */
    K_DBL,    /* double: a number, or "nan", "inf", "-inf" */
    K_ENUM,   /* an enum: a number below n */
    K_TEXT,   /* char[n]: a string */
    K_OBJ,    /* a struct: an object of the fields in sub */
    K_LIST,   /* n structs: a list of n objects of the fields in sub */
    K_LADDER, /* --batch auto's ladder: "ladder_m" and "ladder_secs", two lists */
} kind;

typedef struct table table;

typedef struct field {
    const char *key;
    kind kind;
    size_t off;        /* in the struct the table describes */
    const table *sub;  /* K_OBJ, K_LIST */
    size_t n;          /* K_ENUM: the values (0 .. n-1); K_TEXT: the buffer's bytes; K_LIST: the structs */
    const char *what;  /* K_ENUM, K_LIST: what a value must be, for the message */
    const char *since; /* added later: a checkpoint has it when it has this key (NULL: always) */
} field;

struct table {
    const field *f;
    size_t n;
    size_t size;       /* the struct's bytes (a K_LIST's stride) */
};

/* The offset of member m of T, which must be of type `type` (a kind that
 * does not match its field does not compile). */
#define OFF(T, m, type) (offsetof(T, m) + 0 * sizeof(char[_Generic(((T *)0)->m, type: 1, default: -1)]))
#define INT(T, k, m, ...) {.key = k, .kind = K_INT, .off = OFF(T, m, int), __VA_ARGS__}
#define I64(T, k, m, ...) {.key = k, .kind = K_I64, .off = OFF(T, m, int64_t), __VA_ARGS__}
#define U64(T, k, m, ...) {.key = k, .kind = K_U64, .off = OFF(T, m, uint64_t), __VA_ARGS__}
#define DBL(T, k, m, ...) {.key = k, .kind = K_DBL, .off = OFF(T, m, double), __VA_ARGS__}
#define ENUM(T, k, m, type, count, w) {.key = k, .kind = K_ENUM, .off = OFF(T, m, type), .n = count, .what = w}
#define TEXT(T, k, m) {.key = k, .kind = K_TEXT, .off = OFF(T, m, char *), .n = sizeof(((T *)0)->m)}
#define OBJ(T, k, m, type, tab) {.key = k, .kind = K_OBJ, .off = OFF(T, m, type), .sub = &tab}
#define LIST(T, k, m, type, tab, count, w)                                                                           \
    {.key = k, .kind = K_LIST, .off = OFF(T, m, type *), .sub = &tab, .n = count, .what = w}
#define TABLE(name, T, ...)                                                                                          \
    static const field name##_f[] = {__VA_ARGS__};                                                                   \
    static const table name = {name##_f, sizeof name##_f / sizeof name##_f[0], sizeof(T)}

/* An enum is read and written as an int. */
_Static_assert(sizeof(bfit_batch_reason) == sizeof(int) && sizeof(bfit_sched_kind) == sizeof(int),
               "enums are ints");

#define D bfit_batch_decision
TABLE(decision_t, D,
      INT(D, "m", m),
      INT(D, "k", k),
      INT(D, "last", last),
      INT(D, "batch", batch),
      DBL(D, "lr_scale", lr_scale),
      ENUM(D, "reason", reason, bfit_batch_reason, BFIT_REASON_COUNT, "a known reason"),
      INT(D, "prev_m", prev_m),
      INT(D, "prev_batch", prev_batch),
      INT(D, "split", split),
      TEXT(D, "why", why),
      DBL(D, "noise_scale", noise_scale),
      DBL(D, "tput_old", tput_old),
      DBL(D, "tput_new", tput_new),
      DBL(D, "eff_old", eff_old),
      DBL(D, "eff_new", eff_new),
      DBL(D, "loader_rate", loader_rate, .since = "loader_rate"),
      {.key = "held", .kind = K_TEXT, .off = OFF(D, held, char *), .n = sizeof(((D *)0)->held),
       .since = "loader_rate"});
#undef D

/* --batch auto's ladder and bookkeeping, and the consecutive-step norms;
 * the plateau check came later: a checkpoint without it starts its windows
 * afresh; so did the ladder's confirmation (one without it has none) and
 * its extension (one without it is not extending) */
#define A bfit_controller_auto
#define PLAT .since = "lr_ref"
#define CONF .since = "ladder_allow"
#define EXT .since = "ladder_ext_ref"
TABLE(auto_t, A,
      INT(A, "prev_norms", prev_norms),
      INT(A, "prev_b", prev_b),
      DBL(A, "prev_g2", prev_g2),
      {.key = "ladder", .kind = K_LADDER, .off = OFF(A, lad, gp_ladder)},
      INT(A, "ladder_next", lad.next),
      INT(A, "ladder_limit", lad.limit),
      INT(A, "ladder_stalls", lad.stalls),
      INT(A, "ladder_reach", lad.reach, .since = "ladder_reach"),
      DBL(A, "ladder_best_rate", lad.best_rate),
      INT(A, "ladder_confirm", lad.confirm, CONF),
      INT(A, "ladder_against", lad.against, CONF),
      DBL(A, "ladder_confirm_secs", lad.confirm_secs, CONF),
      INT(A, "ladder_rounds", lad.rounds, CONF),
      INT(A, "ladder_allow", lad.allow, CONF),
      INT(A, "ladder_ext_ref", lad.ext_ref, EXT),
      DBL(A, "ladder_ext_pace", lad.ext_pace, EXT),
      DBL(A, "speed", speed),
      DBL(A, "overhead", overhead),
      I64(A, "seen", seen),
      I64(A, "change_seen", change_seen),
      I64(A, "ramp_seen", ramp_seen),
      INT(A, "pending_E", pending_E),
      INT(A, "pending_n", pending_n),
      I64(A, "nobs", nobs),
      INT(A, "ladders", ladders),
      I64(A, "ladder_seen", ladder_seen),
      INT(A, "ladder_ran", ladder_ran),
      DBL(A, "plat_sum", plat_sum, PLAT),
      I64(A, "plat_n", plat_n, PLAT),
      DBL(A, "plat_best", plat_best, PLAT),
      INT(A, "plat_windows", plat_windows, PLAT),
      INT(A, "plat_stalls", plat_stalls, PLAT),
      INT(A, "lr_ref", lr_ref, PLAT));
#undef EXT
#undef CONF
#undef PLAT
#undef A

#define N bfit_noise
TABLE(noise_t, N,
      DBL(N, "alpha", alpha),
      DBL(N, "g2_ema", g2_ema),
      DBL(N, "s_ema", s_ema),
      DBL(N, "g2_last", g2_last),
      DBL(N, "s_last", s_last),
      I64(N, "n", n));
#undef N

#define P bfit_controller_tput
TABLE(tput_t, P,
      INT(P, "m", m),
      INT(P, "n", n),
      DBL(P, "rate", rate),
      U64(P, "used", used),
      DBL(P, "var", var, .since = "var"));
#undef P

#define C bfit_controller_state
TABLE(controller_t, C,
      U64(C, "capacity", capacity),
      U64(C, "free", free),
      INT(C, "m", m),
      INT(C, "E", E),
      INT(C, "E0", E0),
      OBJ(C, "noise", noise, bfit_noise, noise_t),
      INT(C, "started", started),
      INT(C, "decided", decided),
      INT(C, "observed", observed),
      INT(C, "oom_step", oom_step),
      I64(C, "step", step),
      OBJ(C, "decision", d, bfit_batch_decision, decision_t),
      DBL(C, "scale", scale),
      DBL(C, "ramp_from", ramp_from),
      DBL(C, "ramp_to", ramp_to),
      I64(C, "ramp_start", ramp_start),
      INT(C, "streak", streak),
      INT(C, "at_m", at_m),
      I64(C, "hold_until", hold_until),
      I64(C, "holdoff", holdoff),
      I64(C, "last_grow", last_grow),
      I64(C, "last_E_change", last_E_change),
      INT(C, "prev_m", prev_m, .since = "prev_m"),
      I64(C, "m_changed", m_changed, .since = "prev_m"),
      U64(C, "free_at_shrink", free_at_shrink, .since = "prev_m"),
      LIST(C, "throughput", tp, bfit_controller_tput, tput_t, BFIT_CONTROLLER_NTPUT,
           "a list of the throughput records"),
      U64(C, "tick", tick),
      OBJ(C, "auto", au, bfit_controller_auto, auto_t),
      DBL(C, "loader_rate", loader_rate, .since = "loader_rate"),
      INT(C, "loader_held", loader_held, .since = "loader_rate"));
#undef C

/* The figures so far; the token counts came later (a run resumed from a
 * checkpoint without them counts from the resume), and whether the test
 * figures are of the checkpoint's weights later still (without it: not) */
#define R bfit_train_result
TABLE(result_t, R,
      INT(R, "epochs", epochs),
      DBL(R, "train_loss", train_loss),
      DBL(R, "test_loss", test_loss),
      DBL(R, "test_acc", test_acc),
      INT(R, "ooms", ooms),
      INT(R, "batch_changes", batch_changes),
      INT(R, "last_batch", last_batch),
      DBL(R, "noise_scale", noise_scale),
      I64(R, "tokens", tokens, .since = "tokens"),
      I64(R, "tokens_computed", tokens_computed, .since = "tokens"),
      INT(R, "evaluated", evaluated, .since = "evaluated"));
#undef R

#define L bfit_lr_schedule
TABLE(sched_t, L,
      ENUM(L, "kind", kind, bfit_sched_kind, BFIT_SCHED_COUNT, "a known schedule"),
      I64(L, "warmup_steps", warmup_steps),
      DBL(L, "warmup_start", warmup_start),
      I64(L, "step_size", step_size),
      DBL(L, "gamma", gamma),
      I64(L, "total_steps", total_steps),
      DBL(L, "min_factor", min_factor));
#undef L

#define S run_snap
TABLE(state_t, S,
      I64(S, "step", pos.step),
      INT(S, "epoch", pos.epoch),
      I64(S, "taken", pos.taken),
      I64(S, "per_epoch", per_epoch),
      I64(S, "samples", pos.samples),
      I64(S, "sched_units", pos.sched_units, .since = "sched_units"),
      U64(S, "micro", pos.micro),
      INT(S, "m", pos.m),
      INT(S, "warned_bn", pos.warned_bn),
      INT(S, "nmem", pos.nmem),
      DBL(S, "train_time", pos.train_time),
      DBL(S, "ep_loss", pos.ep_loss),
      I64(S, "ep_count", pos.ep_count),
      I64(S, "cursor_epoch", cursor_epoch),
      I64(S, "cursor_pos", cursor_pos),
      I64(S, "optim_steps", optim_steps),
      DBL(S, "loss_scale", pos.ls.scale),
      I64(S, "loss_scale_interval", pos.ls.interval),
      I64(S, "loss_scale_good", pos.ls.good),
      I64(S, "loss_scale_skipped", pos.ls.skipped),
      INT(S, "track_stale", pos.track_stale),
      OBJ(S, "result", pos.res, bfit_train_result, result_t),
      OBJ(S, "decision", pos.d, bfit_batch_decision, decision_t),
      OBJ(S, "controller", ctl, bfit_controller_state, controller_t));
#undef S

/* A data-parallel rank's own state (dist_run.h), in the group's "rank" list */
#define K run_rank
TABLE(rank_t, K,
      INT(K, "m", m),
      INT(K, "prev_m", prev_m),
      U64(K, "micro", micro),
      OBJ(K, "decision", d, bfit_batch_decision, decision_t),
      OBJ(K, "controller", ctl, bfit_controller_state, controller_t));
#undef K

#define AT(p, f, T) ((T *)((char *)(p) + (f)->off))
#define CAT(p, f, T) ((const T *)((const char *)(p) + (f)->off))

/* ---- writing ----------------------------------------------------------------- */

/* A finite double as a JSON number that reads back exactly: 15 digits, or
 * 17 when those do not give v back. (cJSON's own printing makes the same
 * choice, but its test lets a value an ulp off pass, so it comes back an
 * ulp off.) Not finite: cJSON's null. */
static cJSON *number(double v)
{
    char b[32];
    if (!isfinite(v))
        return cJSON_CreateNumber(v);
    snprintf(b, sizeof b, "%1.15g", v);
    if (strtod(b, NULL) != v)
        snprintf(b, sizeof b, "%1.17g", v);
    return cJSON_CreateRaw(b);
}

static void put_dbl(cJSON *o, const char *k, double v)
{
    if (isfinite(v))
        cJSON_AddItemToObject(o, k, number(v));
    else
        cJSON_AddStringToObject(o, k, isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
}

static cJSON *obj_json(const table *t, const void *p);

static void ladder_json(cJSON *o, const gp_ladder *l)
{
    cJSON *m = cJSON_CreateArray(), *t = cJSON_CreateArray();
    for (int i = 0; i < l->n && i < GP_RUNGS; i++) {
        cJSON_AddItemToArray(m, cJSON_CreateNumber(l->m[i]));
        cJSON_AddItemToArray(t, number(l->secs[i]));
    }
    cJSON_AddItemToObject(o, "ladder_m", m);
    cJSON_AddItemToObject(o, "ladder_secs", t);
}

static void put(cJSON *o, const field *f, const void *p)
{
    char b[32];
    switch (f->kind) {
    case K_INT: cJSON_AddNumberToObject(o, f->key, *CAT(p, f, int)); break;
    case K_ENUM: cJSON_AddNumberToObject(o, f->key, *CAT(p, f, int)); break;
    case K_I64:
        snprintf(b, sizeof b, "%" PRId64, *CAT(p, f, int64_t));
        cJSON_AddStringToObject(o, f->key, b);
        break;
    case K_U64:
        snprintf(b, sizeof b, "%" PRIu64, *CAT(p, f, uint64_t));
        cJSON_AddStringToObject(o, f->key, b);
        break;
    case K_DBL: put_dbl(o, f->key, *CAT(p, f, double)); break;
    case K_TEXT: cJSON_AddStringToObject(o, f->key, CAT(p, f, char)); break;
    case K_OBJ: cJSON_AddItemToObject(o, f->key, obj_json(f->sub, CAT(p, f, char))); break;
    case K_LIST: {
        cJSON *a = cJSON_CreateArray();
        for (size_t i = 0; i < f->n; i++)
            cJSON_AddItemToArray(a, obj_json(f->sub, CAT(p, f, char) + i * f->sub->size));
        cJSON_AddItemToObject(o, f->key, a);
        break;
    }
    case K_LADDER: ladder_json(o, CAT(p, f, gp_ladder)); break;
    }
}

static cJSON *obj_json(const table *t, const void *p)
{
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; i < t->n; i++)
        put(o, &t->f[i], p);
    return o;
}

cJSON *bfit_ckpt_state_to_json(const run_snap *s, const bfit_lr_schedule *sched)
{
    cJSON *o = obj_json(&state_t, s);
    cJSON_AddItemToObject(o, "lr_schedule", obj_json(&sched_t, sched));
    return o;
}

cJSON *bfit_ckpt_group_to_json(const run_group *g)
{
    cJSON *o = cJSON_CreateObject(), *sh = cJSON_CreateArray(), *rk = cJSON_CreateArray();
    cJSON_AddNumberToObject(o, "ranks", g->n);
    cJSON_AddNumberToObject(o, "E", g->E);
    cJSON_AddNumberToObject(o, "streak", g->streak);
    for (int q = 0; q < g->n; q++) {
        cJSON_AddItemToArray(sh, cJSON_CreateNumber(g->share[q]));
        cJSON_AddItemToArray(rk, obj_json(&rank_t, &g->ranks[q]));
    }
    cJSON_AddItemToObject(o, "shares", sh);
    cJSON_AddItemToObject(o, "rank", rk);
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

static int64_t get_i64(rd *r, const cJSON *v, const char *k)
{
    char *end;
    long long x;
    errno = 0;
    x = cJSON_IsString(v) && v->valuestring[0] ? strtoll(v->valuestring, &end, 10) : 0;
    if (!cJSON_IsString(v) || !v->valuestring[0] || *end || errno) {
        bad(r, k, "a whole number");
        return 0;
    }
    return x;
}

static uint64_t get_u64(rd *r, const cJSON *v, const char *k)
{
    char *end;
    unsigned long long x;
    int digit = cJSON_IsString(v) && v->valuestring[0] >= '0' && v->valuestring[0] <= '9';
    errno = 0;
    x = digit ? strtoull(v->valuestring, &end, 10) : 0;
    if (!digit || *end || errno) {
        bad(r, k, "a whole number");
        return 0;
    }
    return x;
}

static double get_dbl(rd *r, const cJSON *v, const char *k)
{
    if (cJSON_IsNumber(v))
        return v->valuedouble;
    if (cJSON_IsString(v) && !strcmp(v->valuestring, "nan"))
        return NAN;
    if (cJSON_IsString(v) && (!strcmp(v->valuestring, "inf") || !strcmp(v->valuestring, "-inf")))
        return v->valuestring[0] == '-' ? -INFINITY : INFINITY;
    bad(r, k, "a number");
    return 0;
}

static int get_int(rd *r, const cJSON *v, const char *k)
{
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 2147483647.0) {
        bad(r, k, "an integer");
        return 0;
    }
    return (int)v->valuedouble;
}

static void read_obj(rd *r, const cJSON *o, const table *t, void *p);

/* Object v (at key k) into p, its fields' paths under "k." (or, in a list,
 * "k[i].") for messages. */
static void read_sub(rd *r, const cJSON *v, const char *k, int i, const table *t, void *p)
{
    char saved[128];
    snprintf(saved, sizeof saved, "%s", r->at);
    if (!cJSON_IsObject(v) && i < 0)
        bad(r, k, "an object");
    if (i < 0)
        snprintf(r->at + strlen(r->at), sizeof r->at - strlen(r->at), "%s.", k);
    else
        snprintf(r->at + strlen(r->at), sizeof r->at - strlen(r->at), "%s[%d].", k, i);
    if (cJSON_IsObject(v) || i >= 0)
        read_obj(r, v, t, p);
    snprintf(r->at, sizeof r->at, "%s", saved);
}

static void read_ladder(rd *r, const cJSON *o, gp_ladder *l)
{
    const cJSON *m = get(r, o, "ladder_m"), *t = get(r, o, "ladder_secs");
    if (m && t && cJSON_IsArray(m) && cJSON_IsArray(t) && cJSON_GetArraySize(m) == cJSON_GetArraySize(t) &&
        cJSON_GetArraySize(m) <= GP_RUNGS) {
        l->n = cJSON_GetArraySize(m);
        for (int i = 0; i < l->n; i++) {
            const cJSON *mi = cJSON_GetArrayItem(m, i), *ti = cJSON_GetArrayItem(t, i);
            if (!cJSON_IsNumber(mi) || !cJSON_IsNumber(ti) || mi->valuedouble < 1 || mi->valuedouble > BFIT_BATCH_MAX) {
                bad(r, "ladder_m", "micro-batches and their seconds");
                break;
            }
            l->m[i] = (int)mi->valuedouble;
            l->secs[i] = ti->valuedouble;
        }
    } else if (m || t) {
        bad(r, "ladder_m", "two lists of equal length (at most 24) of micro-batches and seconds");
    }
}

static void read_field(rd *r, const cJSON *o, const field *f, void *p)
{
    const cJSON *v;
    if (f->kind == K_LADDER) {
        read_ladder(r, o, AT(p, f, gp_ladder));
        return;
    }
    if (!(v = get(r, o, f->key)))
        return;
    switch (f->kind) {
    case K_INT: *AT(p, f, int) = get_int(r, v, f->key); break;
    case K_ENUM:
        *AT(p, f, int) = get_int(r, v, f->key);
        if ((unsigned)*AT(p, f, int) >= f->n)
            bad(r, f->key, f->what);
        break;
    case K_I64: *AT(p, f, int64_t) = get_i64(r, v, f->key); break;
    case K_U64: *AT(p, f, uint64_t) = get_u64(r, v, f->key); break;
    case K_DBL: *AT(p, f, double) = get_dbl(r, v, f->key); break;
    case K_TEXT:
        if (!cJSON_IsString(v))
            bad(r, f->key, "text");
        else
            snprintf(AT(p, f, char), f->n, "%s", v->valuestring);
        break;
    case K_OBJ: read_sub(r, v, f->key, -1, f->sub, AT(p, f, char)); break;
    case K_LIST:
        if (!cJSON_IsArray(v) || (size_t)cJSON_GetArraySize(v) != f->n)
            bad(r, f->key, f->what);
        for (int i = 0; cJSON_IsArray(v) && i < cJSON_GetArraySize(v) && (size_t)i < f->n; i++)
            read_sub(r, cJSON_GetArrayItem(v, i), f->key, i, f->sub, AT(p, f, char) + (size_t)i * f->sub->size);
        break;
    case K_LADDER: break;
    }
}

static void read_obj(rd *r, const cJSON *o, const table *t, void *p)
{
    for (size_t i = 0; i < t->n; i++)
        if (!t->f[i].since || cJSON_GetObjectItemCaseSensitive(o, t->f[i].since))
            read_field(r, o, &t->f[i], p);
}

/* Values no run can have: a bad file must not become a strange run. */
static void check_ranges(rd *r, const run_snap *s)
{
    if (r->rc != BFIT_OK)
        return;
    if (s->pos.step < 0 || s->pos.step > BFIT_COUNT_MAX || s->pos.epoch < 0 || s->pos.epoch > BFIT_EPOCHS_MAX ||
        s->pos.taken < 0 || s->pos.samples < 0 || s->pos.sched_units < 0 || s->pos.ep_count < 0 ||
        s->cursor_epoch < 0 || s->cursor_pos < 0 || s->optim_steps < 0 || s->pos.m < 1 ||
        s->pos.m > BFIT_BATCH_MAX || s->pos.nmem < 0 || s->pos.nmem > BFIT_MEM_SCHEDULE_MAX ||
        !(s->pos.ls.scale > 0) || s->pos.ls.scale > 1e300 ||
        s->pos.ls.interval < 1 || s->pos.ls.good < 0 || s->pos.ls.skipped < 0 ||
        (s->pos.track_stale != 0 && s->pos.track_stale != 1) || s->pos.res.tokens < 0 ||
        s->pos.res.tokens_computed < 0)
        r->rc = bfit_fail(BFIT_EFORMAT, "%s: the run's state is out of range (step %lld, epoch %d, micro-batch %d, "
                          "cursor %lld:%lld): the file is not from a run", r->path, (long long)s->pos.step,
                          s->pos.epoch, s->pos.m, (long long)s->cursor_epoch, (long long)s->cursor_pos);
}

int bfit_ckpt_state_from_json(const cJSON *j, const char *path, run_snap *s, bfit_lr_schedule *sched)
{
    rd r = {path, BFIT_OK, ""};
    const cJSON *o;

    memset(s, 0, sizeof *s);
    if (!cJSON_IsObject(j))
        return bfit_fail(BFIT_EFORMAT, "%s: the run's state is not a JSON object", path);
    read_obj(&r, j, &state_t, s);
    if (!cJSON_GetObjectItemCaseSensitive(j, "sched_units"))
        s->pos.sched_units = s->pos.samples; /* an older run counted the samples */
    if ((o = get(&r, j, "lr_schedule")))
        read_sub(&r, o, "lr_schedule", -1, &sched_t, sched);
    check_ranges(&r, s);
    return r.rc;
}

int bfit_ckpt_group_from_json(const cJSON *state, const char *path, run_group *g, int *found)
{
    rd r = {path, BFIT_OK, "group."};
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(state, "group"), *sh, *rk;
    int n;

    *found = o != NULL;
    if (!o) /* a run alone, or a group's checkpoint from before they were kept */
        return BFIT_OK;
    n = get_int(&r, get(&r, o, "ranks"), "ranks");
    if (r.rc == BFIT_OK && n < 1)
        bad(&r, "ranks", "a count of ranks");
    if (r.rc != BFIT_OK || n != g->n) {
        g->n = n;
        return r.rc;
    }
    g->E = get_int(&r, get(&r, o, "E"), "E");
    g->streak = get_int(&r, get(&r, o, "streak"), "streak");
    sh = get(&r, o, "shares");
    rk = get(&r, o, "rank");
    if (r.rc == BFIT_OK && (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) != n))
        bad(&r, "shares", "a list of a share per rank");
    if (r.rc == BFIT_OK && (!cJSON_IsArray(rk) || cJSON_GetArraySize(rk) != n))
        bad(&r, "rank", "a list of each rank's state");
    for (int q = 0; r.rc == BFIT_OK && q < n; q++) {
        g->share[q] = get_int(&r, cJSON_GetArrayItem(sh, q), "shares");
        memset(&g->ranks[q], 0, sizeof g->ranks[q]);
        read_sub(&r, cJSON_GetArrayItem(rk, q), "rank", q, &rank_t, &g->ranks[q]);
        if (r.rc == BFIT_OK && (g->ranks[q].m < 1 || g->ranks[q].m > BFIT_BATCH_MAX))
            bad(&r, "rank", "each rank's state with a micro-batch from 1 to 16777216");
    }
    return r.rc;
}
