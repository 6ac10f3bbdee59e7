/* options.c - the options of the public configuration: one table of names
 * (the command line's, without the dashes), what each takes, which
 * commands read it, and the setter that parses its text into the fields.
 * Every value is parsed here, once, for the CLI, the Python package and
 * any embedder alike; an error names the option (bfit_errfield). */
#include "api/config_int.h"
#include "base/err.h"
#include "base/values.h"
#include "batch/memsched.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define OFF(f) offsetof(bfit_config, f)
#define AT(c, o, T) ((T *)((char *)(c) + (o)->off))

const char *bfit_opt_field(const bfit_opt *o)
{
    static _Thread_local char b[64];
    size_t i;
    for (i = 0; o->name[i] && i + 1 < sizeof b; i++)
        b[i] = o->name[i] == '-' ? '_' : o->name[i];
    b[i] = '\0';
    return b;
}

#define field bfit_opt_field

/* The library's message of a failed parse, as the option's (once: a
 * parser that named the field already keeps its message). */
static int bad(const bfit_opt *o)
{
    const char *f = field(o), *m = bfit_errmsg();
    size_t n = strlen(f);
    return bfit_fail_field(BFIT_EINVAL, f, "%s", !strncmp(m, f, n) && m[n] == ':' && m[n + 1] == ' ' ? m + n + 2 : m);
}

static int get_int(const bfit_opt *o, const char *v, int64_t *x)
{
    /* (double)INT64_MAX rounds up to 2^63, which no int64_t holds */
    int64_t hi = o->hi >= 0x1p63 ? INT64_MAX : (int64_t)o->hi;
    return bfit_parse_int(v, (int64_t)o->lo, hi, x) == BFIT_OK ? BFIT_OK : bad(o);
}

/* ---- the generic setters --------------------------------------------------- */

static int set_int(bfit_config *c, const bfit_opt *o, const char *v)
{
    int64_t x;
    if (get_int(o, v, &x) != BFIT_OK)
        return BFIT_EINVAL;
    *AT(c, o, int) = (int)x;
    return BFIT_OK;
}

static int set_i64(bfit_config *c, const bfit_opt *o, const char *v)
{
    int64_t x;
    if (get_int(o, v, &x) != BFIT_OK)
        return BFIT_EINVAL;
    *AT(c, o, int64_t) = x;
    return BFIT_OK;
}

static int set_u64(bfit_config *c, const bfit_opt *o, const char *v)
{
    int64_t x;
    if (get_int(o, v, &x) != BFIT_OK)
        return BFIT_EINVAL;
    *AT(c, o, uint64_t) = (uint64_t)x;
    return BFIT_OK;
}

/* A crop: N (square) or HxW, into int[2] {H, W} with W 0 for a square
 * (as checkpoints from before HxW keep it). */
static int set_crop(bfit_config *c, const bfit_opt *o, const char *v)
{
    const char *x = v ? strchr(v, 'x') : NULL;
    char h[24];
    int64_t a, b = 0;

    if (x && (size_t)(x - v) >= sizeof h)
        return bfit_fail_field(BFIT_EINVAL, field(o), "'%s' is not N or HxW (e.g. 224 or 224x320)", v);
    snprintf(h, sizeof h, "%.*s", x ? (int)(x - v) : (int)sizeof h - 1, v ? v : "");
    if (bfit_parse_int(h, (int64_t)o->lo, (int64_t)o->hi, &a) != BFIT_OK ||
        (x && bfit_parse_int(x + 1, (int64_t)o->lo, (int64_t)o->hi, &b) != BFIT_OK))
        return bfit_fail_field(BFIT_EINVAL, field(o), "'%s' is not N or HxW (e.g. 224 or 224x320): %s", v ? v : "",
                               bfit_errmsg());
    AT(c, o, int)[0] = (int)a;
    AT(c, o, int)[1] = b == a ? 0 : (int)b;
    return BFIT_OK;
}

static int set_dbl(bfit_config *c, const bfit_opt *o, const char *v)
{
    return bfit_parse_double(v, o->lo, o->hi, AT(c, o, double)) == BFIT_OK ? BFIT_OK : bad(o);
}

/* A memory size: with a unit, since a bare number is bytes and "--memory
 * 10" is never meant as 10 bytes. */
static int set_size(bfit_config *c, const bfit_opt *o, const char *v)
{
    size_t n = v ? strlen(v) : 0;
    uint64_t b;
    if (n && v[n - 1] >= '0' && v[n - 1] <= '9' && bfit_parse_size(v, &b) == BFIT_OK && b > 0)
        return bfit_fail_field(BFIT_EINVAL, field(o), "'%s' has no unit: give one, e.g. %sGiB or %sMiB (B for bytes)",
                               v, v, v);
    return bfit_parse_capacity(v, AT(c, o, uint64_t)) == BFIT_OK ? BFIT_OK : bad(o);
}

static int set_str(bfit_config *c, const bfit_opt *o, const char *v)
{
    int i = (int)(o - bfit_opt_table(NULL));
    char *s;
    if (!v || !*v)
        return bfit_fail_field(BFIT_EINVAL, field(o), "needs a value (%s)", o->takes);
    if (!(s = strdup(v)))
        return bfit_fail_field(BFIT_ENOMEM, field(o), "out of host memory");
    free(c->str[i]);
    c->str[i] = s;
    *AT(c, o, const char *) = s;
    return BFIT_OK;
}

/* A flag sets its int to 1; a "no-" flag sets it to 0. */
static int set_flag(bfit_config *c, const bfit_opt *o, const char *v)
{
    int on;
    if (bfit_parse_flag(v, &on) != BFIT_OK)
        return bad(o);
    *AT(c, o, int) = strncmp(o->name, "no-", 3) ? on : !on;
    return BFIT_OK;
}

/* ---- options with their own syntax ------------------------------------------ */

static int cmp_int(const void *x, const void *y) { return *(const int *)x - *(const int *)y; }

/* "batch": auto, adaptive, or sizes (train takes one, plan a list). */
static int set_batch(bfit_config *c, const bfit_opt *o, const char *v)
{
    char buf[256], *tok, *save = NULL;
    int n = 0, b[BFIT_PLAN_REPORT_MAX];
    int64_t x;

    c->t.adaptive = v && !strcmp(v, "adaptive");
    c->t.auto_batch = v && !strcmp(v, "auto");
    if (c->t.adaptive || c->t.auto_batch) {
        c->t.batch = 0;
        c->nbatches = 0;
        return BFIT_OK;
    }
    if (!v || !*v || strlen(v) >= sizeof buf || v[0] == ',' || v[strlen(v) - 1] == ',' || strstr(v, ",,"))
        return bfit_fail_field(BFIT_EINVAL, "batch", "expected a batch size (128), auto, adaptive, or for plan a list "
                               "like 1,32,64; got '%s'", v ? v : "");
    strcpy(buf, v);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == BFIT_PLAN_REPORT_MAX)
            return bfit_fail_field(BFIT_EINVAL, "batch", "at most %d sizes, got more in '%s'", BFIT_PLAN_REPORT_MAX, v);
        if (get_int(o, tok, &x) != BFIT_OK)
            return BFIT_EINVAL;
        b[n++] = (int)x;
    }
    qsort(b, (size_t)n, sizeof b[0], cmp_int);
    c->nbatches = 0;
    for (int i = 0; i < n; i++)
        if (!c->nbatches || b[i] != c->batches[c->nbatches - 1])
            c->batches[c->nbatches++] = b[i];
    c->t.batch = c->nbatches == 1 ? c->batches[0] : 0;
    c->batch_given = 1;
    return BFIT_OK;
}

static int set_batch_tokens(bfit_config *c, const bfit_opt *o, const char *v)
{
    int64_t x;
    if (v && !strcmp(v, "auto"))
        return bfit_fail_field(BFIT_EINVAL, "batch_tokens", "auto is not supported yet: give a number of tokens or "
                               "adaptive (or `batch` auto, in sequences)");
    c->t.batch_tokens = 1;
    c->tokens_given = 1;
    c->t.adaptive = v && !strcmp(v, "adaptive");
    c->t.auto_batch = 0;
    if (c->t.adaptive) {
        c->t.batch = 0;
        return BFIT_OK;
    }
    if (get_int(o, v, &x) != BFIT_OK)
        return BFIT_EINVAL;
    c->t.batch = (int)x;
    return BFIT_OK;
}

static int set_micro(bfit_config *c, const bfit_opt *o, const char *v)
{
    if (v && !strcmp(v, "auto")) {
        c->t.micro_batch = 0;
        return BFIT_OK;
    }
    return set_int(c, o, v);
}

/* "threads": N, or auto (train: the count changes while it runs,
 * src/train/threads.h; elsewhere all the cores). */
static int set_threads(bfit_config *c, const bfit_opt *o, const char *v)
{
    c->t.threads_auto = v && !strcmp(v, "auto");
    if (c->t.threads_auto) {
        c->t.threads = 0;
        return BFIT_OK;
    }
    if (!v || !*v || (strspn(v, "0123456789+- ") != strlen(v)))
        return bfit_fail_field(BFIT_EINVAL, "threads", "expected a number of threads (1 to 1024) or auto; got '%s'",
                               v ? v : "");
    return set_int(c, o, v);
}

static int set_loss_scale(bfit_config *c, const bfit_opt *o, const char *v)
{
    if (v && !strcmp(v, "none")) {
        c->t.loss_scale = BFIT_LOSS_SCALE_NONE;
        return BFIT_OK;
    }
    c->t.loss_scale = BFIT_LOSS_SCALE_DYNAMIC;
    if (v && !strcmp(v, "dynamic"))
        return BFIT_OK;
    return bfit_parse_double(v, o->lo, o->hi, &c->t.loss_scale_init) == BFIT_OK ? BFIT_OK : bad(o);
}

static int set_bsched(bfit_config *c, const bfit_opt *o, const char *v)
{
    if (bfit_batch_schedule_parse(v, c->bpts, BFIT_BATCH_SCHEDULE_MAX, &c->t.nbatch_schedule) != BFIT_OK)
        return bad(o);
    c->t.batch_schedule = c->bpts;
    return BFIT_OK;
}

static int set_msched(bfit_config *c, const bfit_opt *o, const char *v)
{
    if (bfit_mem_schedule_parse(v, c->mpts, BFIT_MEM_SCHEDULE_MAX, &c->t.nmemory_schedule) != BFIT_OK)
        return bad(o);
    c->t.memory_schedule = c->mpts;
    return BFIT_OK;
}

static int set_every(bfit_config *c, const bfit_opt *o, const char *v)
{
    return bfit_parse_every(v, &c->t.checkpoint_steps, &c->t.checkpoint_seconds) == BFIT_OK ? BFIT_OK : bad(o);
}

static int set_duration(bfit_config *c, const bfit_opt *o, const char *v)
{
    return bfit_parse_duration(v, AT(c, o, double)) == BFIT_OK ? BFIT_OK : bad(o);
}

/* The options whose text is a name: each kind's own parser. */
static int set_named(bfit_config *c, const bfit_opt *o, const char *v)
{
    int rc;
    const char *n = o->name;
    if (!strcmp(n, "optimizer")) rc = bfit_optim_kind_parse(v, &c->opt_kind);
    else if (!strcmp(n, "schedule")) rc = bfit_lr_sched_parse(v, &c->sched_kind);
    else if (!strcmp(n, "precision") && v && !strcmp(v, "auto"))
        rc = BFIT_OK, c->t.precision_auto = 1, c->t.storage.precision = BFIT_F32;
    else if (!strcmp(n, "precision") && (rc = bfit_precision_parse(v, &c->t.storage.precision)) == BFIT_OK)
        c->t.precision_auto = 0;
    else if (!strcmp(n, "precision"))
        return bfit_fail_field(BFIT_EINVAL, field(o), "unknown precision '%s' (valid: f32, bf16, f16, auto)",
                               v ? v : "");
    else if (!strcmp(n, "recompute")) rc = bfit_recompute_parse(v, &c->t.storage.recompute);
    else if (!strcmp(n, "conv-algo")) rc = bfit_conv_algo_parse(v, &c->t.conv_algo);
    else if (!strcmp(n, "csv-header")) rc = bfit_csv_header_parse(v, &c->t.csv_header);
    else if (!strcmp(n, "dist")) rc = bfit_dist_mode_parse(v, &c->t.dist);
    else {
        bfit_lr_rule rule;
        rc = bfit_lr_rule_parse(v, &rule);
        c->t.lr_rule = (int)rule;
    }
    return rc == BFIT_OK ? BFIT_OK : bad(o);
}

static int set_device(bfit_config *c, const bfit_opt *o, const char *v)
{
    if (v && (!strcmp(v, "cpu") || !strcmp(v, "auto") || !strcmp(v, "cuda")))
        return set_str(c, o, v);
    if (v && !strncmp(v, "cuda:", 5) && v[5]) {
        int64_t i;
        if (bfit_parse_int(v + 5, 0, 1024, &i) == BFIT_OK)
            return set_str(c, o, v);
    }
    return bfit_fail_field(BFIT_EINVAL, "device", "unknown device '%s': expected cpu, cuda, cuda:N (a GPU index) or "
                           "auto", v ? v : "");
}

static int set_attention(bfit_config *c, const bfit_opt *o, const char *v)
{
    if (!v || (strcmp(v, "stored") && strcmp(v, "lean")))
        return bfit_fail_field(BFIT_EINVAL, "attention", "expected stored or lean, got '%s'", v ? v : "");
    c->attn_lean = !strcmp(v, "lean");
    c->attn_set = 1;
    return BFIT_OK;
}

/* Numbers whose being given matters (they override the optimizer's or the
 * schedule's defaults). */
static int set_given_dbl(bfit_config *c, const bfit_opt *o, const char *v)
{
    int rc = set_dbl(c, o, v);
    if (rc == BFIT_OK)
        *(o->off == OFF(momentum) ? &c->mom_set : &c->wd_set) = 1;
    return rc;
}

static int set_warmup(bfit_config *c, const bfit_opt *o, const char *v)
{
    int rc = set_i64(c, o, v);
    if (rc == BFIT_OK)
        c->warmup_set = 1;
    return rc;
}

/* "init": an ONNX model's starting weights, the file's or drawn. */
static int set_init(bfit_config *c, const bfit_opt *o, const char *v)
{
    (void)o;
    if (!v || (strcmp(v, "file") && strcmp(v, "random")))
        return bfit_fail_field(BFIT_EINVAL, "init", "expected file or random, got '%s'", v ? v : "");
    c->t.init_random = !strcmp(v, "random");
    return BFIT_OK;
}

/* A flag whose field is what the name says, "no-" or not ("no-dct-scaling"). */
static int set_plain_flag(bfit_config *c, const bfit_opt *o, const char *v)
{
    int on;
    if (bfit_parse_flag(v, &on) != BFIT_OK)
        return bad(o);
    *AT(c, o, int) = on;
    return BFIT_OK;
}

/* "mean", "std": per-channel values, "0.485,0.456,0.406" (images: 1 or 3). */
static int set_norm(bfit_config *c, const bfit_opt *o, const char *v)
{
    int is_std = !strcmp(o->name, "std"), n = 0;
    float *dst = is_std ? c->t.img.std : c->t.img.mean;
    char buf[256], *tok, *save = NULL;
    double x;

    if (!v || !*v || strlen(v) >= sizeof buf)
        return bfit_fail_field(BFIT_EINVAL, field(o), "expected per-channel values like 0.485,0.456,0.406");
    strcpy(buf, v);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == 4)
            return bfit_fail_field(BFIT_EINVAL, field(o), "at most 4 values (one per channel), got more in '%s'", v);
        if (bfit_parse_double(tok, is_std ? 1e-12 : -1e6, 1e6, &x) != BFIT_OK)
            return bad(o);
        dst[n++] = (float)x;
    }
    *(is_std ? &c->t.img.nstd : &c->t.img.nmean) = n;
    return BFIT_OK;
}

/* "special-ids": the ids a masked LM never masks. */
static int set_special(bfit_config *c, const bfit_opt *o, const char *v)
{
    return bfit_mlm_special_parse(v, &c->t.mlm) == BFIT_OK ? BFIT_OK : bad(o);
}

/* "largest-only": find's ladder off. */
static int set_largest_only(bfit_config *c, const bfit_opt *o, const char *v)
{
    int on;
    if (bfit_parse_flag(v, &on) != BFIT_OK)
        return bad(o);
    c->probe.ladder = !on;
    return BFIT_OK;
}

/* ---- the table ------------------------------------------------------------------ */

#define P CMD_PLAN
#define F CMD_FIND
#define T CMD_TRAIN
#define E CMD_EVAL
#define D CMD_DEVICE
#define X CMD_PROFILE
#define BMAX BFIT_BATCH_MAX
#define CMAX ((double)BFIT_COUNT_MAX)

static const bfit_opt table[] = {
    /* model and data */
    {"model", "PRESET|FILE", P | F | T | E | D | X, set_str, OFF(t.model), 0, 0, NULL},
    {"data", "NAME|PATH", F | T | E, set_str, OFF(t.data), 0, 0, NULL},
    {"init", "file|random", T, set_init, OFF(t.init_random), 0, 0, NULL},
    {"test-data", "PATH", T | E, set_str, OFF(t.test_data), 0, 0, NULL},
    {"csv-header", "yes|no|auto", F | T | E, set_named, 0, 0, 0, NULL},
    {"weights", "FILE", T | E, set_str, OFF(weights), 0, 0, NULL},
    {"epochs", "N", T, set_int, OFF(t.epochs), 1, BFIT_EPOCHS_MAX, NULL},
    {"epoch-samples", "N", T, set_i64, OFF(t.epoch_samples), 1, CMAX, NULL},
    {"eval-samples", "N", T | E, set_i64, OFF(t.eval_samples), 1, CMAX, NULL},
    {"max-steps", "N", T, set_i64, OFF(t.max_steps), 1, CMAX, NULL},
    {"augment", "", F | T, set_flag, OFF(t.augment), 0, 0, NULL},
    {"no-normalize", "", F | T | E, set_flag, OFF(t.normalize), 0, 0, NULL},
    {"no-prefetch", "", F | T, set_flag, OFF(t.prefetch), 0, 0, NULL},
    {"no-pack", "", T, set_flag, OFF(t.pack), 0, 0, NULL},
    /* image folders (docs/data.md, "Image folders") */
    {"resize", "N", F | T | E, set_int, OFF(t.img.resize), 1, 65535, NULL},
    {"center-crop", "N|HxW", F | T | E, set_crop, OFF(t.img.center_crop), 1, 65535, NULL},
    {"random-resized-crop", "N|HxW", F | T, set_crop, OFF(t.img.rrc), 1, 65535, NULL},
    {"loader-threads", "N", F | T | E, set_int, OFF(t.img.loader_threads), 1, 1024, NULL},
    {"skip-bad-images", "", F | T | E, set_flag, OFF(t.img.skip_bad), 0, 0, NULL},
    {"no-dct-scaling", "", F | T | E, set_plain_flag, OFF(t.img.no_dct), 0, 0, NULL},
    {"mean", "M,M,M", F | T | E, set_norm, 0, 0, 0, NULL},
    {"std", "S,S,S", F | T | E, set_norm, 0, 0, 0, NULL},
    {"seq-max", "N", T | E, set_int, OFF(t.seq_max), 1, 1 << 24, NULL},
    {"seq", "N", P | F | T | E | D | X, set_int, OFF(seq), 1, 1 << 24, NULL},
    {"attention", "stored|lean", P | F | T, set_attention, 0, 0, 0, NULL},
    {"mask-tokens", "P", P | F | T | E | X, set_dbl, OFF(t.mlm.p), 1e-6, 1, NULL},
    {"mask-id", "ID", F | T | E, set_int, OFF(t.mlm.mask_id), 0, BFIT_TOKEN_ID_MASK, NULL},
    {"special-ids", "ID,...", F | T | E, set_special, 0, 0, 0, NULL},
    /* batch and memory */
    {"batch", "N|auto|adaptive", P | T | X, set_batch, 0, 1, BMAX, "batch adaptive"},
    {"batch-tokens", "N|adaptive", T, set_batch_tokens, 0, 1, BMAX, "batch adaptive"},
    {"batch-min", "N", T, set_int, OFF(t.batch_min), 2, BMAX, NULL},
    {"batch-max", "N", T, set_int, OFF(t.batch_max), 2, BMAX, NULL},
    {"lr-ref-batch", "N", T, set_int, OFF(t.lr_ref_batch), 1, BMAX, NULL},
    {"batch-schedule", "AT:E,...", T, set_bsched, 0, 0, 0, NULL},
    {"batch-instead-of-decay", "", T, set_flag, OFF(t.batch_instead_of_decay), 0, 0, NULL},
    {"lr-scaling", "linear|sqrt|none|adascale", T, set_named, 0, 0, 0, NULL},
    {"rewarmup", "N", T, set_i64, OFF(t.rewarmup_steps), 0, CMAX, NULL},
    {"memory-schedule", "STEP:SIZE,...", T, set_msched, 0, 0, 0, NULL},
    {"micro-batch", "auto|N", T, set_micro, OFF(t.micro_batch), 1, BMAX, NULL},
    {"eval-batch", "N", T | E, set_int, OFF(t.eval_batch), 1, BMAX, NULL},
    {"memory", "SIZE", P | F | T | E, set_size, OFF(t.memory), 0, 0, NULL},
    {"margin", "F", P | F | T, set_dbl, OFF(t.margin), 0, 0.99, NULL},
    /* optimisation */
    {"optimizer", "sgd|adamw", P | F | T, set_named, 0, 0, 0, NULL},
    {"lr", "X", T, set_dbl, OFF(t.lr), 1e-12, 1e6, NULL},
    {"momentum", "X", P | F | T, set_given_dbl, OFF(momentum), 0, 0.999999, NULL},
    {"nesterov", "", T, set_flag, OFF(nesterov), 0, 0, NULL},
    {"weight-decay", "X", T, set_given_dbl, OFF(weight_decay), 0, 10, NULL},
    {"schedule", "constant|step|cosine", T, set_named, 0, 0, 0, NULL},
    {"warmup", "N", F | T | X, set_warmup, OFF(warmup), 0, CMAX, NULL},
    {"step-size", "N", T, set_i64, OFF(step_size), 1, CMAX, NULL},
    {"gamma", "X", T, set_dbl, OFF(gamma), 1e-9, 1, NULL},
    {"clip", "X", T, set_dbl, OFF(t.clip), 1e-12, 1e12, NULL},
    /* precision and storage */
    {"precision", "f32|bf16|f16|auto", P | F | T | D | X, set_named, 0, 0, 0, NULL},
    {"recompute", "none|blocks|sqrt|auto", P | F | T, set_named, 0, 0, 0, NULL},
    {"no-lean", "", P | F | T, set_flag, OFF(t.storage.lean), 0, 0, NULL},
    {"loss-scale", "none|dynamic|S", T, set_loss_scale, 0, 1e-7, 1e30, NULL},
    {"loss-scale-interval", "N", T, set_i64, OFF(t.loss_scale_interval), 1, CMAX, NULL},
    /* the run */
    {"seed", "N", F | T, set_u64, OFF(t.seed), 0, (double)INT64_MAX, NULL},
    {"threads", "N|auto", P | F | T | E | D | X, set_threads, OFF(t.threads), 1, 1024, NULL},
    {"device", "cpu|cuda|cuda:N|auto", P | F | T | E | D | X, set_device, OFF(t.device_name), 0, 0, NULL},
    {"conv-algo", "fastest|lean|auto", P | F | T | E | D, set_named, 0, 0, 0, NULL},
    {"save", "FILE", T, set_str, OFF(t.save), 0, 0, NULL},
    {"log", "FILE", T, set_str, OFF(t.log), 0, 0, NULL},
    {"report", "FILE", T, set_str, OFF(t.report), 0, 0, NULL},
    {"checkpoint", "DIR", T, set_str, OFF(t.checkpoint), 0, 0, NULL},
    {"checkpoint-every", "N|Ns|Nmin|Nh", T, set_every, 0, 0, 0, NULL},
    {"keep", "K", T, set_int, OFF(t.checkpoint_keep), 1, 1000000, NULL},
    {"resume", "DIR|FILE", T, set_str, OFF(t.resume), 0, 0, NULL},
    {"wait-for-memory", "T", T, set_duration, OFF(t.wait_for_memory), 0, 0, NULL},
    {"progress-interval", "SECONDS", T, set_dbl, OFF(t.progress_interval), 0.01, 86400, NULL},
    {"monitor", "SECONDS", T, set_dbl, OFF(t.monitor_seconds), 0, 1e9, NULL},
    {"dist", "auto|on|off", T, set_named, 0, 0, 0, NULL},
    {"memory-schedule-rank", "R", T, set_int, OFF(t.memory_schedule_rank), 0, 1 << 20, NULL},
    /* plan */
    {"eval", "", P, set_flag, OFF(plan_eval), 0, 0, NULL},
    {"ways", "", P, set_flag, OFF(ways), 0, 0, NULL},
    {"measure", "", P, set_flag, OFF(measure), 0, 0, NULL},
    /* find */
    {"limit", "N", F, set_int, OFF(limit), 1, BMAX, NULL},
    {"tolerance", "F", F, set_dbl, OFF(probe.tolerance), 0, 0.99, NULL},
    {"repeats", "N", F | X, set_int, OFF(probe.repeats), 1, 1000, NULL},
    {"data-threshold", "F", F, set_dbl, OFF(probe.data_threshold), 0.001, 1, NULL},
    {"largest-only", "", F, set_largest_only, 0, 0, 0, NULL},
    {"plot", "FILE", F, set_str, OFF(plot), 0, 0, NULL},
    /* profile */
    {"rep-seconds", "SECONDS", X, set_dbl, OFF(rep_seconds), 0.001, 3600, NULL},
    {"matmul", "MxNxK", X, set_str, OFF(matmul), 0, 0, NULL},
};

#undef P
#undef F
#undef T
#undef E
#undef D
#undef X

_Static_assert(sizeof table / sizeof table[0] <= BFIT_CFG_NOPT, "BFIT_CFG_NOPT holds every option");

const bfit_opt *bfit_opt_table(int *n)
{
    if (n)
        *n = (int)(sizeof table / sizeof table[0]);
    return table;
}

const bfit_opt *bfit_opt_find(const char *name, int *index)
{
    for (int i = 0; name && i < (int)(sizeof table / sizeof table[0]); i++) {
        const char *a = table[i].name, *b = name;
        while (*a && (*a == *b || (*a == '-' && *b == '_')))
            a++, b++;
        if (!*a && !*b) {
            if (index)
                *index = i;
            return &table[i];
        }
    }
    return NULL;
}

void bfit_config_defaults(bfit_config *c)
{
    c->t = bfit_train_cfg_default();
    c->t.dist = BFIT_DIST_AUTO; /* under a launcher the processes train together */
    c->opt_kind = BFIT_OPT_SGD;
    c->sched_kind = BFIT_SCHED_CONSTANT;
    c->gamma = 0.1;
    c->probe = bfit_probe_cfg_default();
    c->rep_seconds = 0.5;
}

/* ---- reading back ------------------------------------------------------------ */

void bfit_opt_default_text(const bfit_config *c, const bfit_opt *o, char *buf, size_t len)
{
    const char *n = o->name;
    buf[0] = '\0';
    if (o->set == set_int || o->set == set_micro)
        snprintf(buf, len, "%d", *(const int *)((const char *)c + o->off));
    else if (o->set == set_i64 || o->set == set_warmup)
        snprintf(buf, len, "%lld", (long long)*(const int64_t *)((const char *)c + o->off));
    else if (o->set == set_u64 || o->set == set_size)
        snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)((const char *)c + o->off));
    else if (o->set == set_dbl || o->set == set_given_dbl || o->set == set_duration)
        snprintf(buf, len, "%g", *(const double *)((const char *)c + o->off));
    else if (o->set == set_str || o->set == set_device)
        snprintf(buf, len, "%s", *(const char *const *)((const char *)c + o->off) ? *(const char *const *)((const char *)c + o->off) : "");
    else if (o->set == set_flag)
        snprintf(buf, len, "%s", (*(const int *)((const char *)c + o->off) != 0) == (strncmp(n, "no-", 3) != 0) ? "yes" : "no");
    else if (o->set == set_init)
        snprintf(buf, len, "%s", c->t.init_random ? "random" : "file");
    else if (o->set == set_plain_flag)
        snprintf(buf, len, "%s", *(const int *)((const char *)c + o->off) ? "yes" : "no");
    else if (o->set == set_norm) {
        const float *v = strcmp(n, "std") ? c->t.img.mean : c->t.img.std;
        int k = strcmp(n, "std") ? c->t.img.nmean : c->t.img.nstd;
        for (int i = 0; i < k; i++)
            snprintf(buf + strlen(buf), len - strlen(buf), "%s%g", i ? "," : "", (double)v[i]);
    } else if (o->set == set_crop) {
        const int *hw = (const int *)((const char *)c + o->off);
        snprintf(buf, len, hw[1] ? "%dx%d" : "%d", hw[0], hw[1]);
    } else if (o->set == set_largest_only)
        snprintf(buf, len, "%s", c->probe.ladder ? "no" : "yes");
    else if (o->set == set_threads)
        snprintf(buf, len, c->t.threads_auto ? "auto" : "%d", c->t.threads);
    else if (o->set == set_batch)
        snprintf(buf, len, c->t.auto_batch ? "auto" : c->t.adaptive ? "adaptive" : "%d", c->t.batch);
    else if (!strcmp(n, "optimizer"))
        snprintf(buf, len, "%s", bfit_optim_kind_name(c->opt_kind));
    else if (!strcmp(n, "schedule"))
        snprintf(buf, len, "%s", bfit_lr_sched_name(c->sched_kind));
    else if (!strcmp(n, "recompute"))
        snprintf(buf, len, "%s", bfit_recompute_name(c->t.storage.recompute));
    else if (!strcmp(n, "conv-algo"))
        snprintf(buf, len, "%s", bfit_conv_algo_name(c->t.conv_algo));
    else if (!strcmp(n, "csv-header"))
        snprintf(buf, len, "%s", bfit_csv_header_name(c->t.csv_header));
    else if (!strcmp(n, "precision"))
        snprintf(buf, len, "%s", c->t.precision_auto ? "auto" : c->t.storage.precision == BFIT_BF16 ? "bf16"
                                 : c->t.storage.precision == BFIT_F16 ? "f16" : "f32");
    else if (!strcmp(n, "dist"))
        snprintf(buf, len, "%s", c->t.dist == BFIT_DIST_ON ? "on" : c->t.dist == BFIT_DIST_OFF ? "off" : "auto");
    else if (!strcmp(n, "lr-scaling"))
        snprintf(buf, len, "%s", c->t.lr_rule < 0 ? "" : bfit_lr_rule_name((bfit_lr_rule)c->t.lr_rule));
}
