/* ckpt_cfg.c - the configuration a checkpoint keeps, and how a resumed run
 * gets its own from it. Each field is written as text. On resuming, a field
 * the caller set (bfit_train_cfg.resume_set: the options given on the
 * command line) is compared with the checkpoint's when it defines the run's
 * mathematics (a different lr would not continue the same run): a
 * difference is an error naming the field and both values. Fields that may
 * change (memory, threads, device, outputs) take the caller's value. A
 * field the caller did not set takes the checkpoint's. */
#include "base/err.h"
#include "train/run_int.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    F_STR, F_INT, F_I64, F_U64, F_DBL, F_BOOL, F_NOT, F_OPT, F_SCHED, F_RULE, F_CSV, F_CONV, F_BSCHED, F_MSCHED,
    F_PREC, /* a dtype kept as its number (as checkpoints have it), shown by its name */
    F_IDS   /* a masked LM's special ids (a bfit_mlm at off), "101,102" */
} fkind;

typedef struct field {
    const char *key;   /* in the checkpoint */
    const char *opt;   /* the option that sets it (resume_set, messages): bfit_fail_field's name */
    fkind kind;
    size_t off;
    int fixed;         /* defines the run: may not change on resuming */
} field;

#define C(m) offsetof(bfit_train_cfg, m)
static const field fields[] = {
    {"model", "model", F_STR, C(model), 1},
    {"data", "data", F_STR, C(data), 1},
    {"test_data", "test_data", F_STR, C(test_data), 1},
    {"csv_header", "csv_header", F_CSV, C(csv_header), 1},
    {"epochs", "epochs", F_INT, C(epochs), 1},
    {"epoch_samples", "epoch_samples", F_I64, C(epoch_samples), 1},
    {"max_steps", "max_steps", F_I64, C(max_steps), 1},
    {"batch", "batch", F_INT, C(batch), 1},
    {"batch_tokens", "batch", F_BOOL, C(batch_tokens), 1},
    {"seq_max", "seq_max", F_INT, C(seq_max), 1},
    {"seq", "seq", F_INT, C(seq), 1},
    {"adaptive", "batch", F_BOOL, C(adaptive), 1},
    {"auto_batch", "batch", F_BOOL, C(auto_batch), 1},
    {"lr_ref_batch", "lr_ref_batch", F_INT, C(lr_ref_batch), 1},
    {"precision", "precision", F_PREC, C(storage.precision), 1},
    {"lean", "no_lean", F_BOOL, C(storage.lean), 1},
    {"loss_scale", "loss_scale", F_INT, C(loss_scale), 1},
    {"loss_scale_init", "loss_scale", F_DBL, C(loss_scale_init), 1},
    {"loss_scale_interval", "loss_scale_interval", F_I64, C(loss_scale_interval), 1},
    {"batch_min", "batch_min", F_INT, C(batch_min), 1},
    {"batch_max", "batch_max", F_INT, C(batch_max), 1},
    {"batch_schedule", "batch_schedule", F_BSCHED, C(batch_schedule), 1},
    {"batch_instead_of_decay", "batch_instead_of_decay", F_BOOL, C(batch_instead_of_decay), 1},
    {"lr_rule", "lr_scaling", F_RULE, C(lr_rule), 1},
    {"rewarmup_steps", "rewarmup", F_I64, C(rewarmup_steps), 1},
    {"optimizer", "optimizer", F_OPT, C(opt.kind), 1},
    {"momentum", "momentum", F_DBL, C(opt.momentum), 1},
    {"dampening", "dampening", F_DBL, C(opt.dampening), 1},
    {"nesterov", "nesterov", F_BOOL, C(opt.nesterov), 1},
    {"weight_decay", "weight_decay", F_DBL, C(opt.weight_decay), 1},
    {"beta1", "beta1", F_DBL, C(opt.beta1), 1},
    {"beta2", "beta2", F_DBL, C(opt.beta2), 1},
    {"eps", "eps", F_DBL, C(opt.eps), 1},
    {"lr", "lr", F_DBL, C(lr), 1},
    {"schedule", "schedule", F_SCHED, C(sched.kind), 1},
    {"warmup", "warmup", F_I64, C(sched.warmup_steps), 1},
    {"warmup_start", "warmup_start", F_DBL, C(sched.warmup_start), 1},
    {"step_size", "step_size", F_I64, C(sched.step_size), 1},
    {"gamma", "gamma", F_DBL, C(sched.gamma), 1},
    {"total_steps", "total_steps", F_I64, C(sched.total_steps), 1},
    {"min_factor", "min_factor", F_DBL, C(sched.min_factor), 1},
    {"clip", "clip", F_DBL, C(clip), 1},
    {"seed", "seed", F_U64, C(seed), 1},
    {"augment", "augment", F_BOOL, C(augment), 1},
    {"no_normalize", "no_normalize", F_NOT, C(normalize), 1},
    {"resize", "resize", F_INT, C(img.resize), 1},
    {"center_crop", "center_crop", F_INT, C(img.center_crop[0]), 1},
    {"center_crop_w", "center_crop", F_INT, C(img.center_crop[1]), 1},
    {"random_resized_crop", "random_resized_crop", F_INT, C(img.rrc[0]), 1},
    {"random_resized_crop_w", "random_resized_crop", F_INT, C(img.rrc[1]), 1},
    {"skip_bad_images", "skip_bad_images", F_BOOL, C(img.skip_bad), 1},
    {"no_dct_scaling", "no_dct_scaling", F_BOOL, C(img.no_dct), 1},
    {"tokens_split", "tokens_split", F_BOOL, C(tokens_split), 1},
    {"mask_tokens", "mask_tokens", F_DBL, C(mlm.p), 1},
    {"mask_id", "mask_id", F_INT, C(mlm.mask_id), 1},
    {"special_ids", "special_ids", F_IDS, C(mlm), 1},
    /* what may change when a run resumes elsewhere or later */
    {"micro_batch", "micro_batch", F_INT, C(micro_batch), 0},
    {"eval_batch", "eval_batch", F_INT, C(eval_batch), 0},
    {"eval_samples", "eval_samples", F_I64, C(eval_samples), 0},
    {"memory", "memory", F_U64, C(memory), 0},
    {"margin", "margin", F_DBL, C(margin), 0},
    {"memory_schedule", "memory_schedule", F_MSCHED, C(memory_schedule), 0},
    {"threads", "threads", F_INT, C(threads), 0},
    {"threads_auto", "threads", F_INT, C(threads_auto), 0},
    {"no_pack", "no_pack", F_NOT, C(pack), 0},
    {"device", "device", F_STR, C(device_name), 0},
    {"conv_algo", "conv_algo", F_CONV, C(conv_algo), 0},
    {"recompute", "recompute", F_INT, C(storage.recompute), 0},
    {"attention", "attention", F_INT, C(attention), 0},
    {"no_prefetch", "no_prefetch", F_NOT, C(prefetch), 0},
    {"loader_threads", "loader_threads", F_INT, C(img.loader_threads), 0},
    {"save", "save", F_STR, C(save), 0},
    {"log", "log", F_STR, C(log), 0},
    {"report", "report", F_STR, C(report), 0},
    {"checkpoint", "checkpoint", F_STR, C(checkpoint), 0},
    {"checkpoint_steps", "checkpoint_every", F_I64, C(checkpoint_steps), 0},
    {"checkpoint_seconds", "checkpoint_every", F_DBL, C(checkpoint_seconds), 0},
    {"checkpoint_keep", "keep", F_INT, C(checkpoint_keep), 0},
    {"wait_for_memory", "wait_for_memory", F_DBL, C(wait_for_memory), 0},
};
#undef C

#define AT(c, f, T) ((T *)((char *)(c) + (f)->off))

/* Fields added after checkpoint version 2 came out: a checkpoint without
 * one is from a run that had it 0 (or no ids): token budgets, the image
 * folders' options, a token file's parts (trained on whole before), the masked LM. */
static int added_later(const field *f)
{
    static const char *const later[] = {"batch_tokens", "seq_max", "resize", "center_crop", "random_resized_crop",
                                        "center_crop_w", "random_resized_crop_w",
                                        "skip_bad_images", "no_dct_scaling", "loader_threads", "threads_auto",
                                        "no_pack", "seq", "attention", "tokens_split", "mask_tokens", "mask_id",
                                        "special_ids"};
    for (size_t i = 0; i < sizeof later / sizeof later[0]; i++)
        if (!strcmp(f->key, later[i]))
            return 1;
    return 0;
}

static void sched_text(const bfit_batch_point *p, int n, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; p && i < n && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s%lld:%d", i ? "," : "", p[i].by_epoch ? "e" : "",
                                 (long long)p[i].at, p[i].batch);
}

static void msched_text(const bfit_mem_point *p, int n, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; p && i < n && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld:%llu", i ? "," : "", (long long)p[i].step,
                                 (unsigned long long)p[i].capacity);
}

/* The field's value as text; NULL for a string that is not set. */
static const char *text(const bfit_train_cfg *c, const field *f, char *buf, size_t len)
{
    switch (f->kind) {
    case F_STR: return *AT(c, f, const char *const);
    case F_INT:
    case F_PREC: snprintf(buf, len, "%d", *AT(c, f, const int)); break;
    case F_I64: snprintf(buf, len, "%" PRId64, *AT(c, f, const int64_t)); break;
    case F_U64: snprintf(buf, len, "%" PRIu64, *AT(c, f, const uint64_t)); break;
    case F_DBL: snprintf(buf, len, "%.17g", *AT(c, f, const double)); break;
    case F_BOOL: snprintf(buf, len, "%s", *AT(c, f, const int) ? "yes" : "no"); break;
    case F_NOT: snprintf(buf, len, "%s", *AT(c, f, const int) ? "no" : "yes"); break;
    case F_OPT: snprintf(buf, len, "%s", bfit_optim_kind_name(*AT(c, f, const bfit_opt_kind))); break;
    case F_SCHED: snprintf(buf, len, "%s", bfit_lr_sched_name(*AT(c, f, const bfit_sched_kind))); break;
    case F_RULE: {
        int rule = *AT(c, f, const int);
        snprintf(buf, len, "%s", rule < 0 ? "default" : bfit_lr_rule_name((bfit_lr_rule)rule));
        break;
    }
    case F_CSV: snprintf(buf, len, "%s", bfit_csv_header_name(*AT(c, f, const bfit_csv_header))); break;
    case F_CONV: snprintf(buf, len, "%s", bfit_conv_algo_name(*AT(c, f, const bfit_conv_algo))); break;
    case F_BSCHED: sched_text(c->batch_schedule, c->nbatch_schedule, buf, len); break;
    case F_MSCHED: msched_text(c->memory_schedule, c->nmemory_schedule, buf, len); break;
    case F_IDS: bfit_mlm_special_text(AT(c, f, const bfit_mlm), buf, len); break;
    }
    return buf;
}

#define TEXT_MAX 4096

cJSON *bfit_ckpt_cfg_to_json(const bfit_train_cfg *c)
{
    cJSON *o = cJSON_CreateObject();
    char *buf = malloc(TEXT_MAX);
    for (size_t i = 0; o && buf && i < sizeof fields / sizeof fields[0]; i++) {
        const char *t = text(c, &fields[i], buf, TEXT_MAX);
        if (t)
            cJSON_AddStringToObject(o, fields[i].key, t);
        else
            cJSON_AddNullToObject(o, fields[i].key);
    }
    free(buf);
    return o;
}

/* Whether the caller set the field: named in resume_set, or (no list)
 * different from the default. */
static int is_set(const bfit_train_cfg *c, const field *f, char *b1, char *b2)
{
    static bfit_train_cfg defaults;
    static int have;
    const char *a, *d;
    if (c->resume_set) {
        for (int i = 0; i < c->nresume_set; i++)
            if (c->resume_set[i] && !strcmp(c->resume_set[i], f->opt))
                return 1;
        return 0;
    }
    if (!have) {
        defaults = bfit_train_cfg_default();
        have = 1;
    }
    a = text(c, f, b1, TEXT_MAX);
    d = text(&defaults, f, b2, TEXT_MAX);
    return (!a != !d) || (a && strcmp(a, d));
}

/* The value to show people: numbers as %g reads them. */
static const char *shown(const field *f, const char *t, char *buf)
{
    if (!t)
        return "(none)";
    if (!strcmp(f->key, "max_steps") && !strcmp(t, "0")) /* 0: none given */
        return "no step limit";
    if (!strcmp(f->key, "lean")) /* kept as lean, said as --no-lean's value */
        return !strcmp(t, "yes") ? "no" : !strcmp(t, "no") ? "yes" : t;
    if (f->kind == F_RULE && !strcmp(t, "default")) /* none given: the optimizer's */
        return "the default (linear for SGD, sqrt for AdamW)";
    if (!strcmp(f->key, "loss_scale")) { /* the mode, in --loss-scale's words (a scale given sets dynamic) */
        long k = strtol(t, NULL, 10);
        return k == BFIT_LOSS_SCALE_NONE      ? "none"
               : k == BFIT_LOSS_SCALE_DYNAMIC ? "dynamic"
               : k == BFIT_LOSS_SCALE_AUTO    ? "the default (dynamic for f16 only)"
                                              : t;
    }
    if (f->kind == F_DBL) {
        snprintf(buf, 64, "%g", strtod(t, NULL));
        return buf;
    }
    if (f->kind == F_PREC) { /* as --precision takes it: f32, bf16, f16 */
        long d = strtol(t, NULL, 10);
        const char *name = d >= 0 && d < BFIT_NDTYPES ? bfit_dtype_name((bfit_dtype)d) : t;
        size_t i;
        for (i = 0; name[i] && i < 63; i++)
            buf[i] = (char)tolower((unsigned char)name[i]);
        buf[i] = '\0';
        return buf;
    }
    return t[0] ? t : "(none)";
}

/* Put the checkpoint's text t into field f of c. */
static int apply(bfit_train_cfg *c, const field *f, const cJSON *v, const char *path, bfit_batch_point *bpts,
                 bfit_mem_point *mpts)
{
    const char *t = cJSON_IsString(v) ? v->valuestring : NULL;
    char *end = NULL;
    int rc = BFIT_OK;

    if (f->kind == F_STR) {
        if (!cJSON_IsNull(v) && !t)
            return bfit_fail(BFIT_EFORMAT, "%s: configuration field \"%s\" is not text", path, f->key);
        *AT(c, f, const char *) = t;
        return BFIT_OK;
    }
    if (!t)
        return bfit_fail(BFIT_EFORMAT, "%s: configuration field \"%s\" is not text", path, f->key);
    errno = 0;
    switch (f->kind) {
    case F_INT:
    case F_PREC: {
        long x = strtol(t, &end, 10);
        rc = *t && !*end && !errno && x >= INT32_MIN && x <= INT32_MAX ? BFIT_OK : BFIT_EFORMAT;
        *AT(c, f, int) = (int)x;
        break;
    }
    case F_I64: *AT(c, f, int64_t) = strtoll(t, &end, 10); rc = *t && !*end && !errno ? BFIT_OK : BFIT_EFORMAT; break;
    case F_U64: *AT(c, f, uint64_t) = strtoull(t, &end, 10); rc = *t && !*end && !errno ? BFIT_OK : BFIT_EFORMAT; break;
    case F_DBL: *AT(c, f, double) = strtod(t, &end); rc = *t && !*end ? BFIT_OK : BFIT_EFORMAT; break;
    case F_BOOL:
    case F_NOT:
        rc = !strcmp(t, "yes") || !strcmp(t, "no") ? BFIT_OK : BFIT_EFORMAT;
        *AT(c, f, int) = !strcmp(t, "yes") == (f->kind == F_BOOL);
        break;
    case F_OPT: rc = bfit_optim_kind_parse(t, AT(c, f, bfit_opt_kind)); break;
    case F_SCHED: rc = bfit_lr_sched_parse(t, AT(c, f, bfit_sched_kind)); break;
    case F_RULE: {
        bfit_lr_rule rule = BFIT_LR_LINEAR;
        rc = strcmp(t, "default") ? bfit_lr_rule_parse(t, &rule) : BFIT_OK;
        *AT(c, f, int) = strcmp(t, "default") ? (int)rule : -1;
        break;
    }
    case F_CSV: rc = bfit_csv_header_parse(t, AT(c, f, bfit_csv_header)); break;
    case F_CONV: rc = bfit_conv_algo_parse(t, AT(c, f, bfit_conv_algo)); break;
    case F_BSCHED:
        c->batch_schedule = *t ? bpts : NULL;
        c->nbatch_schedule = 0;
        rc = *t ? bfit_batch_schedule_parse(t, bpts, BFIT_BATCH_SCHEDULE_MAX, &c->nbatch_schedule) : BFIT_OK;
        break;
    case F_MSCHED:
        c->memory_schedule = *t ? mpts : NULL;
        c->nmemory_schedule = 0;
        rc = *t ? bfit_mem_schedule_parse(t, mpts, BFIT_MEM_SCHEDULE_MAX, &c->nmemory_schedule) : BFIT_OK;
        break;
    case F_IDS: rc = bfit_mlm_special_parse(t, AT(c, f, bfit_mlm)) == BFIT_OK ? BFIT_OK : BFIT_EFORMAT; break;
    case F_STR: break;
    }
    if (rc != BFIT_OK)
        return bfit_fail(BFIT_EFORMAT, "%s: configuration field \"%s\" holds '%.80s', not a value it can have", path,
                         f->key, t);
    return BFIT_OK;
}

/* --batch (or --batch-tokens) as people give it: a number, auto or
 * adaptive, of samples or tokens (four fields). */
static const char *batch_mode(int batch, int adaptive, int auto_batch, int tokens, char *buf)
{
    if (auto_batch || adaptive)
        snprintf(buf, 64, "%s%s", auto_batch ? "auto" : "adaptive", tokens ? " (tokens)" : "");
    else
        snprintf(buf, 64, "%d%s", batch, tokens ? " tokens" : "");
    return buf;
}

#define SHOWN_WHOLE 100 /* longer values are shown in part */
#define SHOWN_PART 80

/* A long value (a schedule of many points, a long path) shown from a little
 * before d, where it differs from the other, so that the message's reason
 * after the two still fits the message. */
static const char *around(const char *t, size_t d, char *buf, size_t n)
{
    size_t len = strlen(t), from;

    if (len <= SHOWN_WHOLE)
        return t;
    from = d > SHOWN_PART / 2 ? d - SHOWN_PART / 2 : 0;
    if (from > len)
        from = len;
    snprintf(buf, n, "%s%.*s%s", from ? "..." : "", SHOWN_PART, t + from, from + SHOWN_PART < len ? "..." : "");
    return buf;
}

static size_t differs_at(const char *a, const char *b)
{
    size_t i = 0;
    while (a && b && a[i] && a[i] == b[i])
        i++;
    return i;
}

static const char *saved_batch_mode(const cJSON *saved, char *buf)
{
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(saved, "batch"),
                *ad = cJSON_GetObjectItemCaseSensitive(saved, "adaptive"),
                *au = cJSON_GetObjectItemCaseSensitive(saved, "auto_batch"),
                *tk = cJSON_GetObjectItemCaseSensitive(saved, "batch_tokens");
    return batch_mode(cJSON_IsString(b) ? atoi(b->valuestring) : 0, cJSON_IsString(ad) && !strcmp(ad->valuestring, "yes"),
                      cJSON_IsString(au) && !strcmp(au->valuestring, "yes"),
                      cJSON_IsString(tk) && !strcmp(tk->valuestring, "yes"), buf);
}

int bfit_ckpt_cfg_merge(bfit_train_cfg *c, const cJSON *saved, const char *path, bfit_batch_point *bpts,
                   bfit_mem_point *mpts)
{
    char *b1 = malloc(TEXT_MAX), *b2 = malloc(TEXT_MAX), s1[64], s2[64], a1[SHOWN_PART + 8], a2[SHOWN_PART + 8];
    int rc = b1 && b2 ? BFIT_OK : bfit_fail(BFIT_ENOMEM, "out of host memory");

    if (rc == BFIT_OK && !cJSON_IsObject(saved))
        rc = bfit_fail(BFIT_EFORMAT, "%s: the run's configuration is not a JSON object", path);
    for (size_t i = 0; rc == BFIT_OK && i < sizeof fields / sizeof fields[0]; i++) {
        const field *f = &fields[i];
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(saved, f->key);
        const char *mine, *theirs = cJSON_IsString(v) ? v->valuestring : NULL;
        if (!v && added_later(f)) { /* a checkpoint from before the field: 0 then, unless the caller says */
            if (!is_set(c, f, b1, b2) && f->kind == F_DBL)
                *AT(c, f, double) = 0;
            else if (!is_set(c, f, b1, b2) && f->kind == F_IDS)
                AT(c, f, bfit_mlm)->nspecial = 0;
            else if (!is_set(c, f, b1, b2))
                *AT(c, f, int) = 0;
            continue;
        }
        if (!v) {
            rc = bfit_fail(BFIT_EFORMAT, "%s: the run's configuration lacks \"%s\"", path, f->key);
            break;
        }
        /* --batch auto|adaptive sets the start E from --batch-min, compared on its own */
        if (!is_set(c, f, b1, b2) || (!strcmp(f->key, "batch") && (c->auto_batch || c->adaptive) &&
                                       !strcmp(saved_batch_mode(saved, s1),
                                               batch_mode(0, c->adaptive, c->auto_batch, c->batch_tokens, s2)))) {
            rc = apply(c, f, v, path, bpts, mpts);
            continue;
        }
        mine = text(c, f, b1, TEXT_MAX);
        if (!f->fixed || (!mine == !theirs && (!mine || !strcmp(mine, theirs))))
            continue;
        if (!strcmp(f->opt, "batch")) /* one option, three fields: say it as it was given */
            rc = bfit_fail_field(BFIT_EINVAL, f->opt, "the checkpoint %s holds %s, not %s: a resumed run keeps the "
                                 "configuration it started with (leave it out to continue the run, or start a new "
                                 "one)", path, saved_batch_mode(saved, s1),
                                 batch_mode(c->batch, c->adaptive, c->auto_batch, c->batch_tokens, s2));
        else
            rc = bfit_fail_field(BFIT_EINVAL, f->opt, "the checkpoint %s holds %s, not %s: a resumed run keeps the "
                                 "configuration it started with (leave it out to continue the run, or start a new "
                                 "one)", path, around(shown(f, theirs, s1), differs_at(theirs, mine), a1, sizeof a1),
                                 around(shown(f, mine, s2), differs_at(theirs, mine), a2, sizeof a2));
    }
    free(b1);
    free(b2);
    return rc;
}
