/* eval.c - evaluation on a test split: in a run after each epoch, and of
 * saved weights (bfit_evaluate). The micro-batch comes from the plan and
 * the memory free at that moment, never from a fixed guess: a run that
 * trained in tight memory must not fail at its evaluation. */
#include "base/clock.h"
#include "base/err.h"
#include "base/sized.h"
#include "nn/zoo.h"
#include "train/run_int.h"
#include "train/weights.h"

#include <stdlib.h>
#include <string.h>

int bfit_run_open_stream(bfit_run *r, const bfit_dataset *d, int shuffle, int max_take, int prefetch, int augment,
                    bfit_feed *out)
{
    bfit_stream_cfg sc;
    memset(&sc, 0, sizeof sc);
    sc.seed = shuffle ? r->cfg.seed : 0; /* a test set's masked tokens: the same in every run, and in eval's */
    sc.shuffle = shuffle;
    sc.max_take = max_take;
    sc.prefetch = prefetch;
    sc.epoch_len = shuffle ? r->per_epoch : 0; /* training: --epoch-samples */
    if (bfit_dataset_is_images(d)) { /* training: RandomResizedCrop if asked, flip with --augment */
        sc.aug_rrc = shuffle && r->cfg.img.rrc[0];
        sc.loader_threads = bfit_img_loader_threads(&r->cfg.img, r->cfg.threads);
    } else
        sc.aug_crop_pad = augment ? 2 : 0;
    sc.aug_hflip = augment;
    sc.norm_mean = r->s.mean;
    sc.norm_std = r->s.std;
    sc.bad_unscored = !shuffle; /* evaluation: an unreadable image is left out, not scored as its neighbour */
    bfit_session_mlm(&r->cfg.mlm, r->s.M, d, &sc.mlm);
    return bfit_stream_new(d, &sc, &out->s);
}

const char *bfit_token_acc_name(const bfit_mlm *mlm, int tags)
{
    return tags ? "token" : mlm && mlm->p > 0 ? "masked-token" : "next-token";
}

/* The largest eval micro-batch up to want that fits what is free now. The
 * eval plan counts the parameters and the model's statistics, which are
 * held already: they come back into the budget. The margin is kept if it
 * can be; if not even 1 fits within it, the bare capacity is used. */
static int choose_eval_batch(bfit_model *M, bfit_arena *a, double margin, int want, int *m)
{
    uint64_t counted = bfit_model_param_bytes(M) + BFIT_MODEL_STATS_BYTES, cap = bfit_arena_capacity(a);
    uint64_t held = cap - bfit_arena_available(a), other = held > counted ? held - counted : 0;
    uint64_t with_margin = bfit_plan_budget(cap, margin), bare = bfit_arena_available(a) + counted;
    char s1[32], s2[32];
    bfit_step_plan p1;
    int rc;

    rc = bfit_plan_max_batch(M, NULL, 0, with_margin > other ? with_margin - other : 0, want, m, &p1);
    if (rc == BFIT_OK && *m == 0)
        rc = bfit_plan_max_batch(M, NULL, 0, bare, want, m, &p1);
    if (rc == BFIT_OK && *m == 0)
        rc = bfit_fail_field(BFIT_ENOMEM, "memory",
                             "evaluation at micro-batch 1 needs %s besides the parameters, but only %s is free",
                             bfit_format_size(p1.peak - counted, s1, sizeof s1),
                             bfit_format_size(bfit_arena_available(a), s2, sizeof s2));
    return rc;
}

/* Samples [from, n) of the stream's epoch 0 in micro-batches of m,
 * through host staging of at least m samples (from > 0: a stream). ev gets
 * sums: test_loss the summed loss, test_acc the samples right. */
static int evaluate(bfit_model *M, bfit_feed *s, int m, int64_t from, int64_t n, float *sx, int32_t *sy,
                    bfit_eval_info *ev, bfit_log *lg)
{
    int64_t seen = 0, counted = 0;
    double loss, right;
    int rc;

    if ((rc = bfit_feed_rewind(s)) != BFIT_OK || (rc = bfit_model_stats_reset(M)) != BFIT_OK)
        return rc;
    if (from > 0) {
        bfit_cursor c = bfit_stream_tell(s->s);
        c.pos = from;
        if ((rc = bfit_stream_seek(s->s, c)) != BFIT_OK)
            return rc;
    }
    n -= from;
    while (seen < n) {
        int want = (int)(n - seen < m ? n - seen : m), got;
        rc = bfit_model_reserve(M, want, 0);
        if (rc == BFIT_ENOMEM && want > 1) {
            /* memory went since the micro-batch was chosen: choose again in
             * what is free now, as training does */
            int m2 = 0;
            bfit_model_unreserve(M);
            if (choose_eval_batch(M, M->arena, 0, want - 1, &m2) == BFIT_OK) {
                m = m2;
                continue;
            }
        }
        if (rc != BFIT_OK)
            return bfit_fail_prefix(rc, "evaluation with micro-batch %d: ", want);
        if ((rc = bfit_feed_take(s, want, sx, sy, &got)) != BFIT_OK)
            return rc;
        if (got != want)
            return bfit_fail(BFIT_ESTATE, "evaluation: the stream gave %d samples, expected %d", got, want);
        if ((rc = bfit_model_set_input(M, sx, sy, got)) != BFIT_OK || (rc = bfit_model_forward(M, 0)) != BFIT_OK)
            return rc;
        seen += got;
        counted += bfit_run_counted(M, sy, got);
        if (lg) /* on a terminal; plain lines at the log's interval */
            bfit_log_progress(lg, 0, "evaluating: %lld of %lld samples (%.0f%%)", (long long)seen, (long long)n,
                              100.0 * (double)seen / (double)n);
    }
    if ((rc = bfit_model_stats_read(M, &loss, &right)) != BFIT_OK)
        return rc;
    ev->test_loss = loss; /* sums: eval_means makes them means */
    ev->test_acc = right;
    ev->counted = counted;
    ev->samples = seen;
    ev->m = m;
    return BFIT_OK;
}

/* The sums evaluate() gave as means: per sample scored, or per token of a
 * token model (counted: the samples or tokens whose labels count). */
static void eval_means(bfit_eval_info *ev)
{
    int64_t n = ev->counted > 0 ? ev->counted : ev->samples;
    ev->test_loss /= (double)(n > 0 ? n : 1);
    ev->test_acc /= (double)(n > 0 ? n : 1);
}

static int64_t test_count(const bfit_run *r)
{
    return r->te.src ? r->te.src->samples : bfit_dataset_count(r->s.test);
}

const char *bfit_eval_skipped_str(int64_t skipped, char *buf, size_t n)
{
    if (skipped <= 0)
        return "";
    snprintf(buf, n, ", %lld unreadable image%s skipped: not scored", (long long)skipped, skipped == 1 ? "" : "s");
    return buf;
}

/* The eval event's ,"images_skipped":N when N > 0. */
static const char *skipped_field(int64_t skipped, char *buf, size_t n)
{
    if (skipped <= 0)
        return "";
    snprintf(buf, n, ",\"images_skipped\":%lld", (long long)skipped);
    return buf;
}

static int evaluate_run(bfit_run *r, bfit_eval_info *ev)
{
    int64_t scored, skipped;
    char note[80], field[48];
    int m, rc;

    int64_t n = r->cfg.eval_samples && r->cfg.eval_samples < test_count(r) ? r->cfg.eval_samples : test_count(r);
    int64_t from = 0, to = n;

    memset(ev, 0, sizeof *ev);
    ev->size = sizeof *ev;
    /* data-parallel: each rank evaluates its slice of a stream's samples */
    if (r->dp && r->te.s)
        bfit_run_dist_eval_slice(r, n, &from, &to);
    /* evaluation reuses the step's memory: release it first */
    bfit_model_unreserve(r->s.M);
    /* variable-length runs evaluate whole rows, at the longest length */
    if (r->cfg.seq_max && (rc = bfit_model_set_seq(r->s.M, r->cfg.seq_max)) != BFIT_OK)
        return rc;
    if (r->cls_T && (rc = bfit_model_set_seq(r->s.M, r->cls_T)) != BFIT_OK) /* a classifier's staged rows */
        return rc;
    /* no larger than the samples evaluated */
    rc = choose_eval_batch(r->s.M, r->s.arena, r->cfg.margin, to - from < r->eval_m ? (int)(to - from > 0 ? to - from
                                                                                                       : 1) : r->eval_m,
                           &m);
    if (rc == BFIT_OK)
        rc = evaluate(r->s.M, &r->te, m, from, to, r->stage_x, r->stage_y, ev, r->log_open ? &r->lg : NULL);
    bfit_model_unreserve(r->s.M);
    if (r->dp && r->te.s)
        rc = bfit_run_dist_eval_sums(r, rc, ev); /* every rank gets here, also after a failure */
    if (rc != BFIT_OK)
        return rc;
    eval_means(ev);
    /* a sample model's samples not counted: unreadable images left out */
    scored = r->s.M->per_token ? ev->samples : ev->counted;
    skipped = ev->samples - scored;
    ev->epoch = r->pos.epoch + (r->pos.taken > 0); /* max_steps may stop inside an epoch */
    ev->step = r->pos.step;
    ev->train_loss = r->pos.ep_count ? r->pos.ep_loss / (double)r->pos.ep_count : 0;
    ev->epoch_seconds = bfit_clock_mono() - r->ep_t0;
    r->pos.res.test_loss = ev->test_loss;
    r->pos.res.test_acc = ev->test_acc;
    r->pos.res.evaluated = 1;
    r->pos.res.epochs = ev->epoch;
    bfit_log_event(&r->lg, "eval",
                   "\"epoch\":%d,\"step\":%lld,\"train_loss\":%.6f,\"test_loss\":%.6f,\"test_acc\":%.6f,"
                   "\"test_samples\":%lld,\"epoch_seconds\":%.3f,\"eval_batch\":%d%s",
                   ev->epoch, (long long)ev->step, ev->train_loss, ev->test_loss, ev->test_acc, (long long)scored,
                   ev->epoch_seconds, m, skipped_field(skipped, field, sizeof field));
    if (r->s.M->per_token) /* a token model: per token, and in bits (per byte for byte tokens) */
        bfit_log_say(&r->lg, "epoch %d/%d: train loss %.4f, test loss %.4f per token (%.4f bits), %s accuracy "
                             "%.2f%% (%lld sequences), %.1f s",
                     ev->epoch, r->cfg.epochs, ev->train_loss, ev->test_loss, ev->test_loss / 0.69314718055994531,
                     bfit_token_acc_name(&r->cfg.mlm, r->s.train && bfit_dataset_is_tags(r->s.train)),
                     100 * ev->test_acc, (long long)ev->samples,
                     ev->epoch_seconds);
    else
        bfit_log_say(&r->lg, "epoch %d/%d: train loss %.4f, test loss %.4f, test accuracy %.2f%% (%lld samples%s), "
                     "%.1f s", ev->epoch, r->cfg.epochs, ev->train_loss, ev->test_loss, 100 * ev->test_acc,
                     (long long)scored, bfit_eval_skipped_str(skipped, note, sizeof note), ev->epoch_seconds);
    if (r->cfg.on_eval)
        r->cfg.on_eval(r->cfg.cb_ud, ev);
    return BFIT_OK;
}

int bfit_run_evaluate(bfit_run *r, bfit_eval_info *info)
{
    bfit_eval_info ev = {.size = sizeof ev};
    int rc;

    if (!r)
        return bfit_fail(BFIT_EINVAL, "bfit_run_evaluate needs a run");
    /* the caller's struct carries its size (batchfit.h) */
    if (info && (info->size < BFIT_SIZED_MIN || info->size > BFIT_SIZED_MAX))
        return bfit_sized_out(info, &ev, sizeof ev, "bfit_eval_info");
    rc = evaluate_run(r, &ev);
    if (info)
        bfit_sized_out(info, &ev, sizeof ev, "bfit_eval_info");
    return rc;
}

/* The normalisation training used, saved with the weights: C values each
 * into mean/std (*found 0 for a file without them). */
static int saved_norm(const bfit_eval_cfg *cfg, float **mean, float **std, int *found)
{
    bfit_graph_desc g;
    bfit_model *shape_only = NULL;
    int rc = bfit_model_source_load(cfg->model, cfg->seq_max ? cfg->seq_max : cfg->seq, &g), c;

    *found = 0;
    if (rc == BFIT_OK) {
        rc = bfit_model_new(&g, NULL, NULL, &shape_only);
        bfit_graph_fini(&g);
    }
    if (rc != BFIT_OK)
        return rc;
    c = shape_only->input_dtype == BFIT_I32 ? 0 : shape_only->input.c; /* token ids are not normalised */
    bfit_model_free(shape_only);
    if (!c)
        return BFIT_OK;
    *mean = calloc((size_t)c, sizeof **mean);
    *std = calloc((size_t)c, sizeof **std);
    if (!*mean || !*std)
        return bfit_fail(BFIT_ENOMEM, "out of host memory");
    return bfit_weights_read_norm(cfg->weights, c, *mean, *std, found);
}

static int eval_session(const bfit_eval_cfg *cfg, int normalize, const float *mean, const float *std,
                        bfit_session *s)
{
    bfit_session_cfg c;
    char **classes = NULL, whose[600];
    int rc, nclasses = 0;
    memset(&c, 0, sizeof c);
    c.model = cfg->model;
    c.data = cfg->data;
    c.test_data = cfg->test_data;
    c.seq_max = cfg->seq_max;
    c.seq = cfg->seq;
    c.mlm = &cfg->mlm;
    c.given_test = cfg->given_test;
    c.csv_header = cfg->csv_header;
    c.want_test = 1;
    c.device = cfg->device;
    c.device_name = cfg->device_name;
    c.memory = cfg->memory;
    c.threads = cfg->threads;
    c.normalize = normalize;
    c.given_mean = mean;
    c.given_std = std;
    c.img = &cfg->img;
    rc = bfit_session_open_model(s, &c);
    /* an image test set is labelled by the names the weights were trained on */
    if (rc == BFIT_OK)
        rc = bfit_weights_read_classes(cfg->weights, &classes, &nclasses);
    snprintf(whose, sizeof whose, "the weights %s (metadata 'classes')", cfg->weights);
    c.class_names = nclasses ? (const char *const *)classes : NULL;
    c.nclass_names = nclasses;
    c.class_names_from = whose;
    if (rc == BFIT_OK)
        rc = bfit_session_open_data(s, &c);
    free(classes);
    if (rc == BFIT_OK && cfg->human && s->test_own && bfit_dataset_note(s->test_own)[0])
        fprintf(cfg->human, "batchfit: %s: %s\n", bfit_dataset_source(s->test_own), bfit_dataset_note(s->test_own));
    if (rc == BFIT_OK && cfg->human && s->test_is_data && s->test_own)
        fprintf(cfg->human, "batchfit: --test-data names --data: testing on its held-out part, %s\n",
                bfit_dataset_source(s->test_own));
    if (rc == BFIT_OK)
        rc = bfit_model_alloc_params(s->M, 0);
    if (rc == BFIT_OK)
        rc = bfit_weights_load(s->M, cfg->weights);
    return rc;
}

/* The samples bfit_evaluate scores: --samples of the test set, or all. */
static int64_t eval_count(const bfit_eval_cfg *cfg, const bfit_dataset *test)
{
    int64_t n = bfit_dataset_count(test);
    return cfg->samples && cfg->samples < n ? cfg->samples : n;
}

/* Its micro-batch at most: --batch (or 1000), never more than it scores
 * (its staging is sized by it). */
static int eval_want(const bfit_eval_cfg *cfg, const bfit_dataset *test)
{
    int64_t want = cfg->batch ? cfg->batch : 1000, n = eval_count(cfg, test);
    return (int)(n > 0 && n < want ? n : want);
}

/* bfit_evaluate's micro-batch. Under an address-space limit (no --memory
 * given) the room was read before the data and the weights were loaded,
 * and the host staging and the test stream (m samples each) take room the
 * arena would count too: resnet50's 512 synthetic samples (616 MB of
 * staging) took the room kept for kernels, and evaluation was refused a
 * kernel under every limit up to 4 GB. The room is read again, and m is
 * the largest whose plan fits beside its staging; the arena keeps the rest. */
static int choose_saved_eval_batch(bfit_session *s, const bfit_eval_cfg *cfg, int want, int *m)
{
    uint64_t host = 2 * bfit_model_sample_host_bytes(s->M), cap;
    bfit_device_info di;
    int lo = 0, hi = want, k;

    bfit_device_info_get(s->dev, &di);
    if (cfg->memory || !di.limited || bfit_device_room(s->dev, s->arena, &cap, NULL) != BFIT_OK)
        return choose_eval_batch(s->M, s->arena, 0, want, m);
    while (lo < hi) { /* the largest k whose plan fits in the room less k samples' staging */
        int mid = lo + (hi - lo + 1) / 2;
        bfit_arena_set_capacity(s->arena, cap > host * (uint64_t)mid ? cap - host * (uint64_t)mid : 0);
        if (choose_eval_batch(s->M, s->arena, 0, mid, &k) == BFIT_OK && k >= mid)
            lo = mid;
        else
            hi = mid - 1;
    }
    k = lo > 1 ? lo : 1;
    bfit_arena_set_capacity(s->arena, cap > host * (uint64_t)k ? cap - host * (uint64_t)k : 0);
    return choose_eval_batch(s->M, s->arena, 0, k, m);
}

int bfit_evaluate_from(const bfit_eval_cfg *cfg, double *loss, double *acc, int64_t *n, int64_t *skipped)
{
    bfit_session s;
    bfit_feed st = {0};
    bfit_stream_cfg sc;
    bfit_eval_info ev;
    float *mean = NULL, *std = NULL, *sx = NULL;
    int32_t *sy = NULL;
    int rc, m, found = 0;

    memset(&s, 0, sizeof s);
    /* --mean/--std given: those (the session applies them); else what training applied */
    if (cfg->normalize && !cfg->img.nmean && !cfg->img.nstd &&
        (rc = saved_norm(cfg, &mean, &std, &found)) != BFIT_OK)
        goto out;
    if ((rc = eval_session(cfg, cfg->normalize && found >= 0, found > 0 ? mean : NULL, found > 0 ? std : NULL,
                           &s)) != BFIT_OK ||
        (rc = choose_saved_eval_batch(&s, cfg, eval_want(cfg, s.test), &m)) != BFIT_OK)
        goto out;
    memset(&sc, 0, sizeof sc);
    sc.max_take = m;
    sc.prefetch = 1;
    sc.bad_unscored = 1; /* an unreadable image is left out, not scored as its neighbour */
    sc.loader_threads = bfit_dataset_is_images(s.test) ? bfit_img_loader_threads(&cfg->img, cfg->threads) : 0;
    sc.norm_mean = s.mean;
    sc.norm_std = s.std;
    bfit_session_mlm(&cfg->mlm, s.M, s.test, &sc.mlm);
    sx = malloc(sizeof(float) * (size_t)m * (size_t)bfit_shape_numel(s.M->input));
    sy = malloc(sizeof(int32_t) * (size_t)m * (size_t)s.M->labels_per_sample);
    if (!sx || !sy)
        rc = bfit_fail(BFIT_ENOMEM, "out of host memory");
    if (rc == BFIT_OK && (rc = bfit_stream_new(s.test, &sc, &st.s)) == BFIT_OK &&
        (rc = evaluate(s.M, &st, m, 0, eval_count(cfg, s.test), sx, sy, &ev, NULL)) == BFIT_OK) {
        eval_means(&ev);
        *loss = ev.test_loss;
        *acc = ev.test_acc;
        *n = s.M->per_token ? ev.samples : ev.counted; /* a sample model's uncounted: images left out */
        if (skipped)
            *skipped = ev.samples - *n;
    }
out:
    bfit_feed_close(&st);
    bfit_session_close(&s);
    free(mean);
    free(std);
    free(sx);
    free(sy);
    return rc;
}
