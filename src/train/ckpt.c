/* ckpt.c - checkpoints: a run written at an optimizer-step boundary and put
 * back exactly.
 *
 * A checkpoint is one safetensors file, DIR/ckpt-<step>.safetensors: the
 * model's parameters under the weights file's names (running statistics
 * included), so `batchfit eval` and PyTorch load it as weights; the
 * optimizer's state as "optimizer.<parameter>.<kind>"; with the noise
 * scale's tracking, the last step's gradient as "gradnorm.prev.<parameter>";
 * a CRC-32 of every tensor; and in the metadata the run's state
 * (ckpt_state.c) and its configuration (ckpt_cfg.c) as JSON, with a CRC-32
 * of the metadata itself. It is written to a temporary file,
 * synced, renamed and the directory synced (base/atomic.c); only then are
 * checkpoints beyond the newest K removed, so a good one is always there.
 *
 * Why a resumed run is the same run: at a step boundary the gradients are
 * zero and everything that decides what comes next is either on the device
 * (parameters, running statistics, optimizer state, the tracked gradient)
 * or in the state: the stream's cursor (its order and augmentation are
 * functions of (seed, epoch, index)), the dropout counter, the schedule (a
 * function of the step) and the controller's state. */
#include "base/atomic.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/text.h"
#include "tensor/safetensors.h"
#include "train/run_int.h"
#include "train/weights.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define CKPT_FORMAT "batchfit-checkpoint"
#define CKPT_VERSION 2 /* 2: auto_batch, lr_ref_batch, the tracked gradient */
#define CKPT_VERSION_TEXT "2"
#define CKPT_PREFIX "ckpt-"
#define CKPT_SUFFIX ".safetensors"
#define CKPT_DEFAULT_SECONDS 600.0

/* ---- the directory ------------------------------------------------------------ */

/* name is ckpt-<digits>.safetensors: *step gets the number. */
static int ckpt_step_of(const char *name, int64_t *step)
{
    size_t np = strlen(CKPT_PREFIX), ns = strlen(CKPT_SUFFIX), n = strlen(name), digits;
    if (n <= np + ns || strncmp(name, CKPT_PREFIX, np) || strcmp(name + n - ns, CKPT_SUFFIX))
        return 0;
    digits = n - np - ns;
    if (digits > 16 || strspn(name + np, "0123456789") != digits)
        return 0;
    *step = strtoll(name + np, NULL, 10);
    return 1;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The steps of the checkpoints in dir, oldest first (free *steps). */
static int list_ckpts(const char *dir, int64_t **steps, int *n)
{
    DIR *dp = opendir(dir);
    struct dirent *e;
    int cap = 16;

    *n = 0;
    *steps = NULL;
    if (!dp)
        return bfit_fail(BFIT_EIO, "%s: cannot read the checkpoint directory: %s", dir, strerror(errno));
    *steps = malloc(sizeof **steps * (size_t)cap);
    while (*steps && (e = readdir(dp))) {
        int64_t s;
        if (!ckpt_step_of(e->d_name, &s))
            continue;
        if (*n == cap) {
            int64_t *p = realloc(*steps, sizeof **steps * (size_t)(cap *= 2));
            if (!p) {
                free(*steps);
                *steps = NULL;
                break;
            }
            *steps = p;
        }
        (*steps)[(*n)++] = s;
    }
    closedir(dp);
    if (!*steps)
        return bfit_fail(BFIT_ENOMEM, "out of host memory");
    qsort(*steps, (size_t)*n, sizeof **steps, cmp_i64);
    return BFIT_OK;
}

static void ckpt_name(char *buf, size_t len, const char *dir, int64_t step)
{
    snprintf(buf, len, "%s/" CKPT_PREFIX "%012lld" CKPT_SUFFIX, dir, (long long)step);
}

int bfit_checkpoint_find(const char *file_or_dir, char *path, size_t len)
{
    struct stat st;
    int64_t *steps;
    int n, rc;

    if (!file_or_dir || !*file_or_dir)
        return bfit_fail_field(BFIT_EINVAL, "resume", "needs a checkpoint file or directory");
    if (stat(file_or_dir, &st) != 0)
        return bfit_fail_field(BFIT_EIO, "resume", "%s: %s", file_or_dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
        snprintf(path, len, "%s", file_or_dir);
        return BFIT_OK;
    }
    if ((rc = list_ckpts(file_or_dir, &steps, &n)) != BFIT_OK)
        return rc;
    if (n == 0) {
        free(steps);
        return bfit_fail_field(BFIT_EIO, "resume", "%s holds no checkpoint (" CKPT_PREFIX "<step>" CKPT_SUFFIX ")",
                               file_or_dir);
    }
    ckpt_name(path, len, file_or_dir, steps[n - 1]);
    free(steps);
    return BFIT_OK;
}

/* The directory is this run's while it lives: a lock on it (flock, which
 * goes with the process, a SIGKILL too), so that a second run into it, new
 * or resumed, is refused rather than mixing its checkpoints and pruning the
 * other's. */
static int lock_dir(bfit_run *r, const char *dir)
{
    int fd, made = mkdir(dir, 0777) == 0;

    if (!made && errno != EEXIST)
        return bfit_fail_field(BFIT_EIO, "checkpoint", "%s: cannot create the directory: %s", dir, strerror(errno));
    if (made) /* removed again if the run leaves it empty (it failed at its start) */
        snprintf(r->ckpt_made, sizeof r->ckpt_made, "%s", dir);
    if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return bfit_fail_field(BFIT_EIO, "checkpoint", "%s: cannot open the directory: %s", dir, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        if (e == EWOULDBLOCK)
            return bfit_fail_field(BFIT_EINVAL, "checkpoint", "%s: another run is writing its checkpoints there (a "
                                   "directory is one run's): wait for it to end, or give this run another directory",
                                   dir);
        return BFIT_OK; /* a file system without locks: as before */
    }
    r->ckpt_lock = fd + 1;
    return BFIT_OK;
}

int bfit_run_checkpoint_dir_claim(bfit_run *r)
{
    const char *dir = r->cfg.checkpoint;
    int64_t *steps;
    char newest[4200];
    int n, rc;

    if (!dir || !bfit_run_dist_writer(r))
        return BFIT_OK;
    if ((rc = lock_dir(r, dir)) != BFIT_OK)
        return rc;
    /* a resumed run goes on writing the run's own (wherever it was resumed from) */
    if (r->cfg.resume)
        return BFIT_OK;
    if ((rc = list_ckpts(dir, &steps, &n)) != BFIT_OK)
        return rc;
    if (n > 0)
        ckpt_name(newest, sizeof newest, dir, steps[n - 1]);
    free(steps);
    if (n == 0)
        return BFIT_OK;
    /* mixed, --resume DIR would take the newest step of either run, and
     * keeping the newest K would remove the older ones of either */
    return bfit_fail_field(BFIT_EINVAL, "checkpoint", "%s already holds the checkpoints of a run (the newest: %s): a new "
                           "run would mix its checkpoints with them; resume that run with --resume %s, or give the "
                           "new run a directory of its own", dir, newest, dir);
}

void bfit_run_checkpoint_dir_release(bfit_run *r)
{
    if (r->ckpt_made[0])
        rmdir(r->ckpt_made); /* only an empty one: what the run wrote stays */
    r->ckpt_made[0] = '\0';
    if (r->ckpt_lock)
        close(r->ckpt_lock - 1);
    r->ckpt_lock = 0;
}

/* The newest `keep` stay; older ones go, never the one just written. */
static void prune(bfit_run *r, int64_t written)
{
    int64_t *steps;
    int n, keep = r->cfg.checkpoint_keep > 0 ? r->cfg.checkpoint_keep : 3;
    char p[4200];

    if (list_ckpts(r->ckpt_dir, &steps, &n) != BFIT_OK)
        return;
    for (int i = 0; i < n - keep; i++)
        if (steps[i] != written) {
            ckpt_name(p, sizeof p, r->ckpt_dir, steps[i]);
            unlink(p);
        }
    free(steps);
}

/* ---- writing ------------------------------------------------------------------ */

/* The optimizer's state on the host as tensors "optimizer.<param>.<kind>". */
typedef struct opt_tensors {
    int n;
    bfit_st_tensor *t;
    char (*names)[128];
    float *host;
} opt_tensors;

static void opt_free(opt_tensors *o)
{
    free(o->t);
    free(o->names);
    free(o->host);
    memset(o, 0, sizeof *o);
}

/* The file name of trainable parameter i. */
static const char *param_name(const bfit_wparam *w, int nw, const bfit_param *p)
{
    for (int i = 0; i < nw; i++)
        if (w[i].p == p)
            return w[i].name;
    return "?";
}

/* With the noise scale's tracking: the copy of the last step's gradient,
 * which the first micro-step of the next step is measured against (none
 * when it is stale: at the start, after a rollback). */
static int gradprev_count(const bfit_run *r)
{
    return r->track && !r->pos.track_stale ? bfit_gradnorm_track_count(r->gn) : 0;
}

/* Tensor i of the checkpoint's extra ones: the optimizer's states first,
 * then the tracked copies. */
static int extra_at(bfit_run *r, const bfit_wparam *w, int nw, int i, char *name, size_t len, void **data,
                    int64_t *numel)
{
    int nopt = bfit_optim_state_count(r->opt), rc;
    if (i < nopt) {
        bfit_optim_state s;
        if ((rc = bfit_optim_state_at(r->opt, i, &s)) != BFIT_OK)
            return rc;
        snprintf(name, len, BFIT_OPTIM_PREFIX "%s.%s", param_name(w, nw, r->s.M->trainable[s.param_index]), s.kind);
        *data = s.data;
        *numel = s.numel;
        return BFIT_OK;
    }
    {
        const bfit_param *p;
        if ((rc = bfit_gradnorm_track_at(r->gn, i - nopt, &p, data, numel)) != BFIT_OK)
            return rc;
        snprintf(name, len, BFIT_GRADPREV_PREFIX "%s", param_name(w, nw, p));
    }
    return BFIT_OK;
}

static int opt_download(bfit_run *r, opt_tensors *o)
{
    bfit_wparam *w = NULL;
    int nw = 0, rc = bfit_weights_list(r->s.M, &w, &nw);
    int64_t total = 0, numel;
    size_t off = 0;
    void *data;

    memset(o, 0, sizeof *o);
    o->n = bfit_optim_state_count(r->opt) + gradprev_count(r);
    o->names = calloc((size_t)o->n + 1, sizeof *o->names);
    for (int i = 0; rc == BFIT_OK && o->names && i < o->n; i++)
        if ((rc = extra_at(r, w, nw, i, o->names[i], sizeof o->names[i], &data, &numel)) == BFIT_OK)
            total += numel;
    o->t = calloc((size_t)o->n + 1, sizeof *o->t);
    o->host = malloc((size_t)(total + 1) * bfit_dtype_size(BFIT_F32));
    if (rc == BFIT_OK && (!o->t || !o->names || !o->host))
        rc = bfit_fail(BFIT_ENOMEM, "checkpoint: out of host memory for the optimizer's state");
    for (int i = 0; rc == BFIT_OK && i < o->n; i++) {
        size_t bytes;
        if ((rc = extra_at(r, w, nw, i, o->names[i], sizeof o->names[i], &data, &numel)) != BFIT_OK)
            break;
        bytes = (size_t)numel * bfit_dtype_size(BFIT_F32);
        o->t[i] = (bfit_st_tensor){o->names[i], "F32", 1, {numel}, (char *)o->host + off, bytes};
        rc = bfit_device_download(r->s.dev, (char *)o->host + off, data, bytes);
        off += bytes;
    }
    free(w);
    if (rc != BFIT_OK)
        opt_free(o);
    return rc;
}

/* The log's length now (everything written so far is in it), -1 without a log. */
static int64_t log_bytes(bfit_run *r)
{
    if (!r->log_open || !r->lg.json)
        return -1;
    fflush(r->lg.json);
    return (int64_t)ftell(r->lg.json);
}

/* The metadata's own checksum: the tensors have theirs, and a damaged state
 * or configuration must not resume as another run. Over these keys and
 * their values, in this order; a key that is absent is skipped, when
 * writing and when reading alike. */
#define META_CRC_KEY "batchfit.crc32"
static const char *const meta_crc_keys[] = {"format", "version", "model", "data", "steps", "test_accuracy",
                                            "normalize_mean", "normalize_std", "normalize", "batchfit.state",
                                            "batchfit.config"};

typedef const char *(*meta_get)(const void *ud, const char *key);

static unsigned long meta_crc(meta_get get, const void *ud)
{
    unsigned long crc = crc32(0L, Z_NULL, 0);
    for (size_t i = 0; i < sizeof meta_crc_keys / sizeof meta_crc_keys[0]; i++) {
        const char *v = get(ud, meta_crc_keys[i]);
        if (!v)
            continue;
        crc = crc32(crc, (const Bytef *)meta_crc_keys[i], (uInt)strlen(meta_crc_keys[i]) + 1);
        for (size_t off = 0, n = strlen(v) + 1; off < n; off += 1u << 30) /* zlib takes uInt lengths */
            crc = crc32(crc, (const Bytef *)v + off, (uInt)(n - off < (1u << 30) ? n - off : 1u << 30));
    }
    return crc;
}

typedef struct meta_arrays {
    const char *const *keys, *const *vals;
    int n;
} meta_arrays;

static const char *from_arrays(const void *ud, const char *key)
{
    const meta_arrays *a = ud;
    for (int i = 0; i < a->n; i++)
        if (!strcmp(a->keys[i], key))
            return a->vals[i];
    return NULL;
}

static const char *from_file(const void *ud, const char *key) { return bfit_st_meta(ud, key); }

/* The metadata: what a weights file has (eval normalises as training did),
 * the format, the state and the configuration. */
static int write_file(bfit_run *r, const char *path, const char *state, const char *config)
{
    const char *keys[RUN_META_MAX + 5], *vals[RUN_META_MAX + 5];
    char version[16], crc[16], *bufs[3] = {NULL, NULL, NULL};
    opt_tensors ot;
    bfit_st_write_opts wo = {1, r->cfg.on_checkpoint_write, r->cfg.cb_ud};
    int nmeta, rc = bfit_run_weights_meta(r, keys, vals, &nmeta, bufs);

    snprintf(version, sizeof version, "%d", CKPT_VERSION);
    keys[0] = "format"; /* bfit_run_weights_meta's first key */
    vals[0] = CKPT_FORMAT;
    keys[nmeta] = "version";
    vals[nmeta++] = version;
    keys[nmeta] = "batchfit.state";
    vals[nmeta++] = state;
    keys[nmeta] = "batchfit.config";
    vals[nmeta++] = config;
    {
        meta_arrays a = {keys, vals, nmeta};
        snprintf(crc, sizeof crc, "%08lx", meta_crc(from_arrays, &a));
    }
    keys[nmeta] = META_CRC_KEY;
    vals[nmeta++] = crc;
    if (rc == BFIT_OK && (rc = opt_download(r, &ot)) == BFIT_OK) {
        rc = bfit_weights_save_ex(r->s.M, path, ot.t, ot.n, keys, vals, nmeta, &wo);
        opt_free(&ot);
    }
    free(bufs[0]);
    free(bufs[1]);
    free(bufs[2]);
    return rc;
}

static int checkpoint(bfit_run *r, char *out, size_t len)
{
    run_snap s;
    cJSON *st, *cf;
    char *state = NULL, *config = NULL, path[4096 + 64];
    double t0 = bfit_clock_mono();
    int64_t lb;
    int rc;

    if (!r->ckpt_dir[0])
        return bfit_fail_field(BFIT_EINVAL, "checkpoint", "no checkpoint directory was given");
    if (r->broken)
        return bfit_fail(BFIT_ESTATE, "checkpoint: the run failed in step %lld, after its update: its state is not "
                         "that of a step boundary", (long long)r->pos.step + 1);
    if (mkdir(r->ckpt_dir, 0777) != 0 && errno != EEXIST)
        return bfit_fail_field(BFIT_EIO, "checkpoint", "%s: cannot create the directory: %s", r->ckpt_dir,
                               strerror(errno));
    ckpt_name(path, sizeof path, r->ckpt_dir, r->pos.step);
    bfit_atomic_sweep(r->ckpt_dir, CKPT_PREFIX, CKPT_SUFFIX); /* temporary files of a writer that was killed */
    bfit_run_snap_take(r, &s);
    lb = log_bytes(r);
    st = bfit_ckpt_state_to_json(&s, &r->sched);
    /* a group's shares and every rank's own state, brought together at this
     * boundary (bfit_run_dist_ckpt_sync): without them a resumed group
     * starts at equal shares, and its other ranks with rank 0's controller */
    if (st && r->dp && r->dp->group.n == r->dp->size && r->dp->group.step == r->pos.step)
        cJSON_AddItemToObject(st, "group", bfit_ckpt_group_to_json(&r->dp->group));
    {
        bfit_train_cfg c = r->cfg;
        if (r->tmp_log)
            c.log = NULL; /* the report's temporary log goes with this process */
        cf = bfit_ckpt_cfg_to_json(&c);
    }
    if (st && lb >= 0) {
        char b[32];
        snprintf(b, sizeof b, "%lld", (long long)lb);
        cJSON_AddStringToObject(st, "log_bytes", b);
    }
    state = st ? cJSON_PrintUnformatted(st) : NULL;
    config = cf ? cJSON_PrintUnformatted(cf) : NULL;
    rc = state && config ? write_file(r, path, state, config) : bfit_fail(BFIT_ENOMEM, "out of host memory");
    cJSON_Delete(st);
    cJSON_Delete(cf);
    free(state);
    free(config);
    if (rc != BFIT_OK)
        return bfit_fail_prefix(rc, "checkpoint at step %lld: ", (long long)r->pos.step);
    prune(r, r->pos.step);
    r->ckpt_t = bfit_clock_mono();
    r->ckpt_step = r->pos.step;
    snprintf(r->pos.res.checkpoint, sizeof r->pos.res.checkpoint, "%s", path);
    {
        char esc[8400];
        bfit_json_escape(path, esc, sizeof esc);
        bfit_log_event(&r->lg, "checkpoint", "\"step\":%lld,\"path\":\"%s\",\"seconds\":%.3f", (long long)r->pos.step,
                       esc, r->ckpt_t - t0);
    }
    if (out)
        snprintf(out, len, "%s", path);
    return BFIT_OK;
}

int bfit_run_checkpoint(bfit_run *r, char *out, size_t len)
{
    if (!r)
        return bfit_fail(BFIT_EINVAL, "bfit_run_checkpoint needs a run");
    return checkpoint(r, out, len);
}

int bfit_run_checkpoint_due(const bfit_run *r)
{
    double every = r->cfg.checkpoint_seconds;
    if (!r->ckpt_dir[0] || r->pos.step == r->ckpt_step)
        return 0;
    if (r->cfg.checkpoint_steps > 0 && r->pos.step - (r->ckpt_step < 0 ? 0 : r->ckpt_step) >= r->cfg.checkpoint_steps)
        return 1;
    if (every <= 0 && r->cfg.checkpoint_steps <= 0)
        every = CKPT_DEFAULT_SECONDS;
    return every > 0 && bfit_clock_mono() - r->ckpt_t >= every;
}

/* ---- reading and resuming -------------------------------------------------------- */

/* Everything a checkpoint must be before anything of it is used: ours, a
 * version we read, every tensor with its checksum (verified on reading). */
static int check_file(const bfit_st_file *f, const char *path)
{
    const char *fmt = bfit_st_meta(f, "format"), *ver = bfit_st_meta(f, "version");
    char key[256];

    if (fmt && !strcmp(fmt, "batchfit"))
        return bfit_fail(BFIT_EFORMAT, "%s is a weights file (from saving), not a checkpoint: a run resumes from a "
                         "checkpoint directory or a " CKPT_PREFIX "<step>" CKPT_SUFFIX " file in it", path);
    if (!fmt || strcmp(fmt, CKPT_FORMAT))
        return bfit_fail(BFIT_EFORMAT, "%s is not a batchfit checkpoint (its metadata has no \"format\": \""
                         CKPT_FORMAT "\")", path);
    if (!ver || strcmp(ver, CKPT_VERSION_TEXT))
        return bfit_fail(BFIT_EFORMAT, "%s is a checkpoint of version %s; this batchfit reads version %d", path,
                         ver ? ver : "(none)", CKPT_VERSION);
    for (int i = 0; i < bfit_st_count(f); i++) {
        snprintf(key, sizeof key, "%s%s", BFIT_ST_CRC_PREFIX, bfit_st_get(f, i)->name);
        if (!bfit_st_meta(f, key))
            return bfit_fail(BFIT_EFORMAT, "%s: tensor \"%s\" has no checksum: not a complete checkpoint", path,
                             bfit_st_get(f, i)->name);
    }
    if (!bfit_st_meta(f, "batchfit.state") || !bfit_st_meta(f, "batchfit.config"))
        return bfit_fail(BFIT_EFORMAT, "%s: the metadata lacks the run's %s", path,
                         bfit_st_meta(f, "batchfit.state") ? "configuration" : "state");
    {
        const char *rec = bfit_st_meta(f, META_CRC_KEY);
        unsigned long got = meta_crc(from_file, f);
        char want[16];
        snprintf(want, sizeof want, "%08lx", got);
        if (!rec)
            return bfit_fail(BFIT_EFORMAT, "%s: the metadata has no checksum (\"" META_CRC_KEY "\"): not a complete "
                             "checkpoint", path);
        if (strcmp(rec, want))
            return bfit_fail(BFIT_EFORMAT, "%s: the metadata fails its checksum (crc32 %s, recorded %.16s): the file "
                             "is damaged", path, want, rec);
    }
    return BFIT_OK;
}

static cJSON *parse_meta_json(const bfit_st_file *f, const char *key, const char *path, int *rc)
{
    cJSON *j = cJSON_Parse(bfit_st_meta(f, key));
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        *rc = bfit_fail(BFIT_EFORMAT, "%s: metadata \"%s\" is not a JSON object", path, key);
        return NULL;
    }
    return j;
}

/* The newest checkpoint of a directory is damaged (a disk that failed
 * under it): name the one before it, which the run can resume instead. */
static int point_to_older(const char *resume, int rc)
{
    struct stat st;
    int64_t *steps;
    int n;
    char prev[4200];

    if (stat(resume, &st) != 0 || !S_ISDIR(st.st_mode) || list_ckpts(resume, &steps, &n) != BFIT_OK)
        return rc;
    if (n >= 2) {
        ckpt_name(prev, sizeof prev, resume, steps[n - 2]);
        rc = bfit_fail(rc, "%s; the checkpoint before it may be whole: --resume %s", bfit_errmsg(), prev);
    }
    free(steps);
    return rc;
}

int bfit_run_resume_open(bfit_run *r)
{
    cJSON *st;
    const cJSON *lb, *lp;
    int rc;

    r->log_offset = -1;
    if ((rc = bfit_checkpoint_find(r->cfg.resume, r->ck_path, sizeof r->ck_path)) != BFIT_OK)
        return rc;
    if ((rc = bfit_st_read(r->ck_path, &r->ck)) != BFIT_OK || (rc = check_file(r->ck, r->ck_path)) != BFIT_OK)
        return point_to_older(r->cfg.resume, rc);
    if (!(r->ck_cfg = parse_meta_json(r->ck, "batchfit.config", r->ck_path, &rc)))
        return rc;
    lp = cJSON_GetObjectItemCaseSensitive(r->ck_cfg, "log");
    if ((rc = bfit_ckpt_cfg_merge(&r->cfg, r->ck_cfg, r->ck_path, r->ck_bpts, r->ck_mpts)) != BFIT_OK)
        return rc;
    if (!r->cfg.checkpoint)
        r->cfg.checkpoint = r->cfg.resume; /* a run resumed from a directory keeps writing there */
    /* the same log as before: cut back to where it was at the checkpoint and
     * continued, so it reads as one run */
    if (!(st = parse_meta_json(r->ck, "batchfit.state", r->ck_path, &rc)))
        return rc;
    lb = cJSON_GetObjectItemCaseSensitive(st, "log_bytes");
    if (r->cfg.log && cJSON_IsString(lp) && !strcmp(lp->valuestring, r->cfg.log) && cJSON_IsString(lb)) {
        struct stat ls;
        int64_t at = strtoll(lb->valuestring, NULL, 10);
        /* a log shorter than it was at the checkpoint is not that log: a new one */
        if (at >= 0 && stat(r->cfg.log, &ls) == 0 && S_ISREG(ls.st_mode) && (int64_t)ls.st_size >= at)
            r->log_offset = at;
    }
    cJSON_Delete(st);
    return BFIT_OK;
}

/* Whether name is one of the n extra tensors this run expects. */
static int expected(bfit_run *r, const bfit_wparam *w, int nw, int n, const char *name, int *rc)
{
    char want[160];
    void *data;
    int64_t numel;
    for (int j = 0; j < n && *rc == BFIT_OK; j++)
        if ((*rc = extra_at(r, w, nw, j, want, sizeof want, &data, &numel)) == BFIT_OK && !strcmp(want, name))
            return 1;
    return 0;
}

/* The optimizer's state and (gradprev: the state says it is valid) the
 * tracked gradient from the file, every tensor checked before any is
 * uploaded; a checkpoint tensor this run has no place for is an error. */
static int extras_upload(bfit_run *r, int gradprev)
{
    bfit_wparam *w = NULL;
    int nw = 0, n = bfit_optim_state_count(r->opt) + (gradprev ? bfit_gradnorm_track_count(r->gn) : 0);
    int rc = bfit_weights_list(r->s.M, &w, &nw);
    char name[160];

    for (int pass = 0; pass < 2 && rc == BFIT_OK; pass++)
        for (int i = 0; i < n && rc == BFIT_OK; i++) {
            const bfit_st_tensor *t;
            void *data;
            int64_t numel;
            if ((rc = extra_at(r, w, nw, i, name, sizeof name, &data, &numel)) != BFIT_OK)
                break;
            t = bfit_st_find(r->ck, name);
            if (!t || strcmp(t->dtype, "F32") || bfit_st_numel(t) != numel)
                rc = bfit_fail(BFIT_EFORMAT, "%s: the %s tensor \"%s\" is %s (wanted F32 of %lld values)", r->ck_path,
                               i < bfit_optim_state_count(r->opt) ? "optimizer's" : "tracked gradient's", name,
                               t ? "of another type or size" : "missing", (long long)numel);
            else if (pass == 1)
                rc = bfit_device_upload(r->s.dev, data, t->data, t->nbytes);
        }
    for (int i = 0; rc == BFIT_OK && i < bfit_st_count(r->ck); i++) {
        const char *tn = bfit_st_get(r->ck, i)->name;
        if (bfit_weights_ckpt_tensor(tn) && !expected(r, w, nw, n, tn, &rc) && rc == BFIT_OK)
            rc = bfit_fail(BFIT_EFORMAT, "%s: tensor \"%s\" belongs to no %s of this run", r->ck_path, tn,
                           strncmp(tn, BFIT_OPTIM_PREFIX, strlen(BFIT_OPTIM_PREFIX)) ? "tracked gradient"
                                                                                    : "optimizer state");
    }
    free(w);
    return rc;
}

static int same_data(const bfit_run *r, const run_snap *s, int64_t per_epoch)
{
    if (s->per_epoch != per_epoch || s->pos.taken > per_epoch)
        return bfit_fail_field(BFIT_EINVAL, "data", "the checkpoint %s is of a run with %lld samples per epoch, this "
                               "data gives %lld: not the data it trained on", r->ck_path, (long long)s->per_epoch,
                               (long long)per_epoch);
    return BFIT_OK;
}

/* The run's counters, the controller and the stream from the state. */
static int put_state(bfit_run *r, const run_snap *s)
{
    bfit_controller_state cs = s->ctl;
    int rc;

    if ((rc = same_data(r, s, r->per_epoch)) != BFIT_OK)
        return rc;
    /* the memory now, which may differ from the run's before (a resume elsewhere) */
    cs.capacity = bfit_arena_capacity(r->s.arena);
    cs.free = bfit_arena_available(r->s.arena) + bfit_model_step_bytes(r->s.M);
    if ((rc = bfit_controller_state_set(r->ctl, &cs)) != BFIT_OK)
        return bfit_fail_prefix(BFIT_EFORMAT, "%s: ", r->ck_path);
    if (r->tr.s) {
        bfit_cursor c = {s->cursor_epoch, s->cursor_pos};
        if ((rc = bfit_stream_seek(r->tr.s, c)) != BFIT_OK)
            return bfit_fail_prefix(BFIT_EFORMAT, "%s: ", r->ck_path);
    }
    r->pos = s->pos;
    /* the memory schedule is this process's (a resumed run may give
     * another, as it may give other memory): its entries up to the step are
     * applied afresh, whatever the checkpoint's run had applied */
    r->pos.nmem = 0;
    bfit_model_unreserve(r->s.M);
    bfit_run_apply_memory_schedule(r, r->pos.step);
    /* the result's loss-scaling figures are the loss scaler's, which the
     * checkpoint keeps (a step sets them; a run resumed at its end takes none) */
    r->pos.res.skipped_steps = r->pos.ls.skipped;
    r->pos.res.loss_scale = r->scaling ? r->pos.ls.scale : 0;
    r->ep_t0 = bfit_clock_mono(); /* the progress line's rate: from here, over the samples from here */
    r->ep_taken0 = s->pos.taken;
    r->ep_count0 = s->pos.ep_count;
    return bfit_optim_set_steps(r->opt, s->optim_steps);
}

/* A group's shares and this rank's own state, when the checkpoint keeps
 * them for as many ranks as this run has. */
static int resume_group(bfit_run *r, const cJSON *st)
{
    run_group g = r->dp->group; /* its arrays, of this run's ranks */
    int found, rc;

    g.n = r->dp->size;
    if ((rc = bfit_ckpt_group_from_json(st, r->ck_path, &g, &found)) != BFIT_OK)
        return rc;
    return bfit_run_dist_resume(r, found ? &g : NULL, r->ck_path);
}

int bfit_run_resume_check(bfit_run *r)
{
    cJSON *st;
    run_snap s;
    bfit_lr_schedule sched;
    int rc;

    if (!(st = parse_meta_json(r->ck, "batchfit.state", r->ck_path, &rc)))
        return rc;
    rc = bfit_ckpt_state_from_json(st, r->ck_path, &s, &sched);
    cJSON_Delete(st);
    if (rc == BFIT_OK)
        rc = bfit_weights_check_from(r->s.M, r->ck, r->ck_path);
    if (rc == BFIT_OK)
        rc = same_data(r, &s, bfit_run_epoch_samples(r, bfit_run_train_count(r)));
    return rc;
}

int bfit_run_resume_state(bfit_run *r)
{
    cJSON *st;
    run_snap s;
    bfit_lr_schedule sched;
    char s1[32];
    int rc;

    if (!(st = parse_meta_json(r->ck, "batchfit.state", r->ck_path, &rc)))
        return rc;
    rc = bfit_ckpt_state_from_json(st, r->ck_path, &s, &sched);
    if (rc == BFIT_OK && s.pos.epoch > r->cfg.epochs)
        rc = bfit_fail(BFIT_EFORMAT, "%s: the run is at epoch %d of %d", r->ck_path, s.pos.epoch, r->cfg.epochs);
    if (rc == BFIT_OK)
        rc = bfit_weights_load_from(r->s.M, r->ck, r->ck_path);
    if (rc == BFIT_OK)
        rc = extras_upload(r, r->track && !s.pos.track_stale);
    if (rc == BFIT_OK)
        rc = put_state(r, &s);
    if (rc == BFIT_OK && r->dp)
        rc = resume_group(r, st);
    cJSON_Delete(st);
    if (rc != BFIT_OK)
        return rc;
    r->sched = sched;
    snprintf(r->pos.res.resumed_from, sizeof r->pos.res.resumed_from, "%s", r->ck_path);
    r->ckpt_step = r->pos.step;
    {
        char esc[8400];
        bfit_json_escape(r->ck_path, esc, sizeof esc);
        bfit_log_event(&r->lg, "resume", "\"step\":%lld,\"epoch\":%d,\"from\":\"%s\",\"samples\":%lld,\"m\":%d,\"E\":%d",
                       (long long)r->pos.step, r->pos.epoch + 1, esc, (long long)r->pos.samples, r->pos.m,
                       r->pos.d.batch);
    }
    if (bfit_run_done(r)) /* the checkpoint at the end: nothing left to train */
        bfit_log_say(&r->lg, "batchfit: resuming from %s at step %lld: the run had finished its training", r->ck_path,
                     (long long)r->pos.step);
    else
        bfit_log_say(&r->lg, "batchfit: resuming from %s at step %lld (epoch %d, sample %lld of %lld; batch %d, "
                     "micro-batch %d; capacity %s)", r->ck_path, (long long)r->pos.step, r->pos.epoch + 1,
                     (long long)r->pos.taken, (long long)r->per_epoch, r->pos.d.batch, r->pos.m,
                     bfit_format_size(bfit_arena_capacity(r->s.arena), s1, sizeof s1));
    return BFIT_OK;
}

void bfit_run_resume_close(bfit_run *r)
{
    bfit_st_free(r->ck);
    r->ck = NULL;
}
