/* session.c - the shared set-up of a run (see session.h). */
#include "base/err.h"
#include "base/rand.h"
#include "base/testctl.h"
#include "batch/session.h"
#include "nn/needs.h"
#include "nn/onnx.h"
#include "nn/zoo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SYNTHETIC_COUNT 512 /* samples of "synthetic" data; streams cycle through them */
/* ... fewer where they would pass this many bytes a set (at least 8): 512
 * samples of 3x2048x2048 were 24 GiB a set, and a run on a GPU spent about
 * 110 s making them (the H200, 2026-12-04); ResNet-50's 224x224 stay 512 */
#define SYNTHETIC_BYTES (512ull << 20)
#define SYNTHETIC_FEWEST 8

/* The device asked for, or the one --device auto chooses for the model in
 * the run's precision; the choice and its reason are kept for the log. */
static int open_device(bfit_session *s, const bfit_session_cfg *c, const char *name)
{
    bfit_device_cfg cpu = bfit_device_cfg_default();
    int rc;

    if (c->device) {
        s->dev = c->device;
        snprintf(s->device_why, sizeof s->device_why, "%s, as given", bfit_device_name(s->dev));
        return BFIT_OK;
    }
    cpu.threads = c->threads;
    cpu.host = c->host;
    cpu.conv_algo = c->conv_algo;
    rc = bfit_model_device_open(name, &cpu, &s->g, c->precision, &s->dev_own, s->device_why, sizeof s->device_why);
    s->dev = s->dev_own;
    return rc;
}

/* A model a masked LM can be: token ids in, scores at every token,
 * attention that sees both sides; else BFIT_EINVAL, said when model names
 * it. (A classifier's data is refused apart: check_mlm.) */
static int mlm_model(const bfit_model *M, const char *model)
{
    if (M->input_dtype == BFIT_I32 && M->per_token && !bfit_model_causal(M))
        return BFIT_OK;
    if (!model)
        return BFIT_EINVAL;
    if (M->input_dtype != BFIT_I32)
        return bfit_fail_field(BFIT_EINVAL, "mask_tokens", "masks token ids, but %s's input is not token ids",
                               model);
    if (!M->per_token)
        return bfit_fail_field(BFIT_EINVAL, "mask_tokens", "predicts the masked tokens, but %s gives one vector of "
                               "scores a sequence: a masked LM ends in scores over the vocabulary at every token "
                               "(BertForMaskedLM, `linear V` without `select`)", model);
    return bfit_fail_field(BFIT_EINVAL, "mask_tokens", "%s has causal attention: a token sees none after it, so a "
                           "masked token's right side is hidden from it; masked-LM training is for bidirectional "
                           "encoders (BERT's). Leave mask_tokens out to train it on the next token", model);
}

int bfit_session_gather_head(bfit_graph_desc *g, double p, const char *refuse)
{
    bfit_model *M = NULL;
    int rc;
    if (!(p > 0) || bfit_test_value(BFIT_TC_FULL_HEAD))
        return 0;
    if (bfit_model_new(g, NULL, NULL, &M) != BFIT_OK) /* the shapes only; a bad model is said when it is built */
        return 0;
    rc = mlm_model(M, refuse);
    bfit_model_free(M);
    if (rc != BFIT_OK)
        return refuse ? rc : 0;
    return bfit_graph_gather_head(g, bfit_mlm_max_pred(p, g->input.d[0]), p);
}

void bfit_session_mlm(const bfit_mlm *given, const bfit_model *M, const bfit_dataset *d, bfit_mlm *out)
{
    memset(out, 0, sizeof *out);
    if (given->p <= 0 || !bfit_dataset_is_tokens(d) || bfit_dataset_label_len(d) == 1)
        return;
    *out = *given;
    out->vocab = bfit_model_vocab(M) > 0 ? bfit_model_vocab(M) : bfit_dataset_classes(d);
    out->max_pred = M->gather ? M->nodes[M->gather - 1].l->cfg.units : 0; /* what its head gathers */
}

int bfit_session_open_model(bfit_session *s, const bfit_session_cfg *c)
{
    uint64_t memory = c->memory;
    int rc;

    memset(s, 0, sizeof *s);
    rc = bfit_model_source_load(c->model, c->seq_max ? c->seq_max : c->seq, &s->g);
    if (rc == BFIT_OK && c->seq_max)
        rc = bfit_graph_set_seq(&s->g, c->seq_max, "seq_max");
    else if (rc == BFIT_OK && c->seq)
        rc = bfit_graph_set_seq(&s->g, c->seq, "seq");
    if (rc == BFIT_OK && c->attention)
        rc = bfit_graph_set_attention(&s->g, c->attention == BFIT_ATTN_LEAN);
    if (rc != BFIT_OK || (rc = open_device(s, c, c->device_name)) != BFIT_OK)
        return rc;
    if (!memory && (rc = bfit_device_free_memory(s->dev, &memory)) != BFIT_OK)
        return rc;
    s->arena = bfit_device_arena_new(s->dev, memory);
    if (!s->arena)
        return bfit_fail(BFIT_ENOMEM, "out of host memory");
    if ((rc = bfit_session_gather_head(&s->g, c->mlm ? c->mlm->p : 0, NULL)) < 0)
        return rc;
    return bfit_model_new(&s->g, s->dev, s->arena, &s->M);
}

/* Random samples of the model's input shape, labels 0..nclasses-1. */
/* A token model's: random ids of its vocabulary (its class count), enough
 * for SYNTHETIC_COUNT windows of its T */
static int synthetic_tokens(const bfit_model *M, uint64_t seed, bfit_dataset **out)
{
    int T = (int)M->input.d[0];
    int64_t n = (int64_t)SYNTHETIC_COUNT * T + 1;
    int32_t *ids = malloc(sizeof *ids * (size_t)n);
    int rc;

    if (!ids)
        return bfit_fail(BFIT_ENOMEM, "out of host memory for %d synthetic sequences", SYNTHETIC_COUNT);
    for (int64_t i = 0; i < n; i++)
        ids[i] = (int32_t)(bfit_rand_unit(seed, (uint64_t)i) * M->nclasses) % M->nclasses;
    rc = bfit_dataset_from_tokens("synthetic", ids, n, M->nclasses, T, out);
    free(ids);
    return rc;
}

int bfit_synthetic_count(bfit_shape input)
{
    uint64_t each = (uint64_t)bfit_shape_numel(input) * sizeof(float), most = each ? SYNTHETIC_BYTES / each : 0;
    return most >= SYNTHETIC_COUNT ? SYNTHETIC_COUNT : most > SYNTHETIC_FEWEST ? (int)most : SYNTHETIC_FEWEST;
}

static int synthetic_data(const bfit_model *M, uint64_t seed, bfit_dataset **out)
{
    int count = bfit_synthetic_count(M->input);
    int64_t numel = bfit_shape_numel(M->input), n = (int64_t)count * numel;
    float *x;
    int32_t *y;
    int rc;

    if (M->input_dtype == BFIT_I32)
        return synthetic_tokens(M, seed, out);
    x = malloc(sizeof *x * (size_t)n);
    y = malloc(sizeof *y * (size_t)count);
    if (!x || !y) {
        free(x);
        free(y);
        return bfit_fail(BFIT_ENOMEM, "out of host memory for %d synthetic samples", count);
    }
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(bfit_rand_unit(seed, (uint64_t)i) - 0.5);
    for (int i = 0; i < count; i++)
        y[i] = i % M->nclasses;
    rc = bfit_dataset_from_floats(M->input, count, M->nclasses, x, y, out);
    free(x);
    free(y);
    return rc;
}

/* A crop {H, W} (W 0: as H; H 0: none) given for a model's input: only
 * its size is a crop the model takes. */
static int crop_fits(const char *model, bfit_shape in, const int *hw, const char *opt)
{
    int h = hw[0], w = hw[1] ? hw[1] : hw[0];
    char a[64];

    if (!h || (h == in.h && w == in.w))
        return BFIT_OK;
    bfit_shape_str(in, a, sizeof a);
    if (in.h == in.w)
        return bfit_fail_field(BFIT_EINVAL, opt, "%s takes inputs of %s; a crop of %dx%d would not be: give the "
                               "model's size, %d", model, a, h, w, in.h);
    return bfit_fail_field(BFIT_EINVAL, opt, "%s takes inputs of %s; a crop of %dx%d would not be: give the "
                           "model's size, %dx%d (height x width)", model, a, h, w, in.h, in.w);
}

/* Image folders' options given for token data: refused, not ignored. */
static int no_image_options(const bfit_img_opts *o, const char *name)
{
    const char *opt = o->resize ? "resize" : o->center_crop[0] ? "center_crop" : o->rrc[0] ? "random_resized_crop"
                    : o->nmean ? "mean" : o->nstd ? "std" : o->skip_bad ? "skip_bad_images" : NULL;
    if (!opt)
        return BFIT_OK;
    return bfit_fail_field(BFIT_EINVAL, opt, "is an image folders' option, and %s holds token ids: leave it out",
                           name);
}

/* " (a, b, c)": a folder's class names, the first 10 (aclImdb's train/ holds unsup/ beside neg/ and pos/:
 * a third class a user did not mean); "" for classes without names. */
static void class_names(const bfit_dataset *d, char *buf, size_t len)
{
    size_t k = 0;
    int n = bfit_dataset_classes(d);
    buf[0] = '\0';
    for (int i = 0; i < n && i < 10 && bfit_dataset_class_name(d, i) && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%s", i ? ", " : " (", bfit_dataset_class_name(d, i));
    if (k && k < len)
        snprintf(buf + k, len - k, "%s)", n > 10 ? ", ..." : "");
}

/* BERT's objective: a language model's token data, a model that scores
 * every token and sees both sides of one, a mask id it has a row for. */
static int check_mlm(const bfit_session *s, const bfit_session_cfg *c, const bfit_dataset *d, const char *name)
{
    int vocab = bfit_model_vocab(s->M);
    if (bfit_dataset_label_len(d) == 1 || bfit_dataset_is_tags(d))
        return bfit_fail_field(BFIT_EINVAL, "mask_tokens", "masks the tokens of a language model's text, but %s holds "
                               "%s: leave it out", name, bfit_dataset_is_tags(d) ? "a class a token (a token "
                               "classifier's tags)" : "one class a sequence (a classifier's data)");
    if (mlm_model(s->M, c->model) != BFIT_OK)
        return BFIT_EINVAL;
    if (c->mlm->mask_id < 0)
        return bfit_fail_field(BFIT_EINVAL, "mask_id", "mask_tokens needs the id a masked token becomes: give "
                               "mask_id (a tokenizer's mask_token_id, 103 for bert-base-uncased's [MASK])");
    if (vocab > 0 && c->mlm->mask_id >= vocab)
        return bfit_fail_field(BFIT_EINVAL, "mask_id", "%d is outside the vocabulary [0, %d) of %s's embedding",
                               (int)c->mlm->mask_id, vocab, c->model);
    return BFIT_OK;
}

static int check_data(const bfit_session *s, const bfit_session_cfg *c, const bfit_dataset *d)
{
    char a[32], b[32];
    /* the option that named d: a test set of its own (a file, arrays) is test_data's */
    int own = d == s->test &&
              ((c->test_data && !s->test_is_data) || (c->given_test && c->given_test != c->given_train));
    const char *opt = own ? "test_data" : "data", *given = own ? c->test_data : c->data;
    const char *name = given ? given : bfit_dataset_source(d);
    int tokens = bfit_dataset_is_tokens(d), rc;
    if (s->M->input_dtype == BFIT_I32 && !tokens)
        return bfit_fail_field(BFIT_EINVAL, opt, "%s is a token model (its input is %d token ids) but the data "
                               "set %s%s holds samples of %s: give it token data, e.g. kjv, a token file or a .txt "
                               "file (docs/data.md)", c->model, s->M->input.d[0], name,
                               given ? "" : " (the default)", bfit_shape_str(bfit_dataset_shape(d), b, sizeof b));
    if (s->M->input_dtype != BFIT_I32 && tokens)
        return bfit_fail_field(BFIT_EINVAL, opt, "the data set %s holds token ids, for token models (`input "
                               "tokens=T`), but %s takes inputs of %s", name, c->model,
                               bfit_shape_str(s->M->input, a, sizeof a));
    /* token data labels every token; a model ending in one score vector per
     * sample (`flatten`, `linear N`) has room for one label per sample */
    if (tokens && c->mlm && c->mlm->p > 0 && (rc = check_mlm(s, c, d, name)) != BFIT_OK)
        return rc;
    if (bfit_dataset_is_unlabelled(d) && !(c->mlm && c->mlm->p > 0))
        return bfit_fail_field(BFIT_EINVAL, opt, "%s holds token "
                               "sequences without labels, which train a masked LM: give mask_tokens and mask_id "
                               "(a language model on the next token takes its text as one stream, a classifier "
                               "a label a sequence)", bfit_dataset_source(d));
    if (tokens && s->M->per_token && bfit_dataset_label_len(d) == 1 && s->M->labels_per_sample > 1)
        return bfit_fail_field(BFIT_EINVAL, opt, "%s scores every token (a language model), but %s holds one "
                               "class a sequence: a classifier ends in `select 0` (or `gap`) and `linear N` "
                               "(docs/model-spec.md), or give a language model its text", c->model, name);
    if (tokens && s->M->labels_per_sample != bfit_dataset_label_len(d))
        return bfit_fail_field(BFIT_EINVAL, opt, "%s gives one vector of class scores per sample, but the token "
                               "data %s has a label per token (%d per sample: %s): end the model with "
                               "scores per token (a `linear V` on the sequence, without `flatten`), or give a "
                               "classifier a folder of class folders of texts (docs/data.md)", c->model, name,
                               bfit_dataset_label_len(d), bfit_dataset_is_tags(d) ? "its tags" : "the next token");
    if (tokens && bfit_model_vocab(s->M) > 0) { /* ids the embedding has no row for: said before any step */
        int64_t at;
        int32_t id, most;
        int type;
        char fix[96];
        bfit_dataset_ids_above(d, bfit_model_vocab(s->M), &at, &id, &most);
        /* what to change: a spec's option, or the module an ONNX file was exported from */
        snprintf(fix, sizeof fix, bfit_onnx_sniff(c->model) ? "export it with an nn.Embedding of %d rows or more"
                                                            : "give it vocab=%d or more", most + 1);
        if (at >= 0)
            return bfit_fail_field(BFIT_EINVAL, opt, "%s holds token "
                                   "id %d at position %lld (ids counted from 0), outside the vocabulary [0, %d) of the "
                                   "embed of %s: %s (the data's largest id is %d)", bfit_dataset_source(d), (int)id,
                                   (long long)at, bfit_model_vocab(s->M), c->model, fix, most);
        if ((at = bfit_dataset_type_above(d, bfit_model_types(s->M), &type)) >= 0)
            return bfit_fail_field(BFIT_EINVAL, opt, "%s holds a "
                                   "token of type %d at position %lld (ids counted from 0; sentence pairs), but %s "
                                   "has %s", bfit_dataset_source(d), type, (long long)at, c->model,
                                   bfit_model_types(s->M) > 1 ? "fewer token types"
                                                              : "no token types (BERT's token_type_embeddings): "
                                                                "give it one segment a sequence");
    }
    if (!bfit_shape_eq(bfit_dataset_shape(d), s->M->input))
        return bfit_fail(BFIT_EINVAL, "%s: the model takes inputs of %s but the data set %s has samples of %s", c->model,
                         bfit_shape_str(s->M->input, a, sizeof a), name, bfit_shape_str(bfit_dataset_shape(d), b, sizeof b));
    if (tokens && c->img && (rc = no_image_options(c->img, name)) != BFIT_OK)
        return rc;
    if (bfit_dataset_is_images(d) && c->img && ((rc = crop_fits(c->model, s->M->input, c->img->rrc,
        "random_resized_crop")) != BFIT_OK || (rc = crop_fits(c->model, s->M->input, c->img->center_crop,
        "center_crop")) != BFIT_OK))
        return rc;
    if (!bfit_dataset_labels_fit(d, s->M->nclasses)) { /* a character model's text: its ids, not 256 */
        char names[512];
        class_names(d, names, sizeof names);
        return bfit_fail(BFIT_EINVAL, "%s: the model has %d class scores but the data set %s has %d classes%s",
                         c->model, s->M->nclasses, name, bfit_dataset_classes(d), names);
    }
    return BFIT_OK;
}

/* A loaded test set's classes are matched by name to those the model was
 * trained on: the weights' when given, else the training set's; a test
 * folder of other classes would otherwise be labelled by its own sorted
 * order, and measured wrong without a word. */
static int match_test_classes(bfit_session *s, const bfit_session_cfg *c)
{
    const bfit_dataset *t = s->train;
    const char **names;
    char whose[600];
    int n, rc;

    if (c->class_names)
        return bfit_dataset_match_classes(s->test_own, c->class_names, c->nclass_names,
                                          c->class_names_from ? c->class_names_from : "the weights");
    if (!t || t == s->test || !bfit_dataset_class_name(t, 0) || !bfit_dataset_class_name(s->test_own, 0))
        return BFIT_OK;
    if (!(names = malloc(sizeof *names * (size_t)bfit_dataset_classes(t))))
        return bfit_fail(BFIT_ENOMEM, "out of host memory for class names");
    n = bfit_dataset_classes(t);
    for (int k = 0; k < n; k++)
        names[k] = bfit_dataset_class_name(t, k);
    snprintf(whose, sizeof whose, "the training data %s", bfit_dataset_source(t));
    rc = bfit_dataset_match_classes(s->test_own, names, n, whose);
    free(names);
    return rc;
}

/* A text's or a token file's test part too short for a sample: how to
 * give test data (the message says which part; a same-named --test-data
 * chose it). */
static int test_part_hint(int rc, int same)
{
    const char *what = strstr(bfit_errmsg(), BFIT_TOKENS_TEST_PART) ? "token file" : "text";
    if (!strstr(bfit_errmsg(), "(test part"))
        return rc;
    if (same)
        return bfit_fail_field(rc, "test_data", "%s; --test-data names the training data, so its held-out part is "
                               "the test: give another %s as --test-data", bfit_errmsg(), what);
    return bfit_fail(rc, "%s; give the test %s as --test-data (read whole)", bfit_errmsg(), what);
}

int bfit_session_open_data(bfit_session *s, const bfit_session_cfg *c)
{
    int synthetic = c->data && !strcmp(c->data, "synthetic"), rc;
    bfit_data_opts o = BFIT_DATA_OPTS_INIT, *op = &o;

    o.header = c->csv_header == BFIT_CSV_HEADER_YES ? 1 : c->csv_header == BFIT_CSV_HEADER_NO ? 0 : -1;
    o.seq = s->M->input_dtype == BFIT_I32 ? s->M->input.d[0] : 0; /* token data: the model's T */
    o.lines = c->seq_max > 0;
    /* a classifier of token ids: texts with a class each (a folder of class folders of texts) */
    o.classes = s->M->input_dtype == BFIT_I32 && !s->M->per_token;
    if (o.classes && o.lines)
        return bfit_fail_field(BFIT_EINVAL, "seq_max", "makes a text's lines a language model's samples, but %s "
                               "gives one vector of class scores per sequence: a classifier's samples are its texts, "
                               "each cut to the model's length (its `input tokens=T`); leave --seq-max out", c->model);
    o.tokens_whole = c->tokens_whole;
    if (s->M->input.nd == 3 && s->M->input_dtype != BFIT_I32) { /* images are made to the model's shape */
        o.img_c = s->M->input.c, o.img_h = s->M->input.h, o.img_w = s->M->input.w;
    }
    if (c->img) {
        o.img_resize = c->img->resize;
        o.img_no_dct = c->img->no_dct;
        o.img_skip_bad = c->img->skip_bad;
    }

    s->train = c->given_train;
    s->test = c->given_test;
    /* the training split only for normalisation statistics, which token ids have none of */
    if (!s->train && (c->want_train || (c->normalize && s->M->input_dtype != BFIT_I32 && !c->given_mean &&
                                        !(c->img && (c->img->nmean || c->img->nstd))))) {
        rc = synthetic ? synthetic_data(s->M, c->seed, &s->train_own) : bfit_dataset_load(c->data, 1, op, &s->train_own);
        if (rc != BFIT_OK)
            return rc;
        s->train = s->train_own;
    }
    if (!s->test && c->want_test) {
        /* the training data named again as the test data: its test split,
         * as without it (a text read whole would test on what it trains on) */
        s->test_is_data = c->test_data && bfit_dataset_same(c->data, c->test_data);
        if (c->test_data && !s->test_is_data) { /* a text or token file given as the test data is read whole */
            bfit_data_opts whole = o;
            whole.whole = 1;
            rc = bfit_dataset_load(c->test_data, 0, &whole, &s->test_own);
        } else {
            rc = synthetic ? synthetic_data(s->M, c->seed + 1, &s->test_own)
                           : bfit_dataset_load(c->data, 0, op, &s->test_own);
        }
        if (rc != BFIT_OK)
            return test_part_hint(rc, s->test_is_data);
        s->test = s->test_own;
        if ((rc = match_test_classes(s, c)) != BFIT_OK)
            return rc;
    }
    if (s->train && (rc = check_data(s, c, s->train)) != BFIT_OK)
        return rc;
    if (s->test && (rc = check_data(s, c, s->test)) != BFIT_OK)
        return rc;
    if (c->normalize && s->M->input_dtype != BFIT_I32) { /* token ids are not normalised */
        int ch = s->M->input.c;
        s->mean = calloc((size_t)ch, sizeof *s->mean);
        s->std = calloc((size_t)ch, sizeof *s->std);
        if (!s->mean || !s->std)
            return bfit_fail(BFIT_ENOMEM, "out of host memory");
        if (!c->given_mean && c->img && (c->img->nmean || c->img->nstd)) {
            if (c->img->nmean != ch || c->img->nstd != ch)
                return bfit_fail_field(BFIT_EINVAL, c->img->nmean != ch ? "mean" : "std", "%d mean and %d std "
                                       "values for a model input of %d channels: give one of each per channel",
                                       c->img->nmean, c->img->nstd, ch);
            memcpy(s->mean, c->img->mean, sizeof *s->mean * (size_t)ch);
            memcpy(s->std, c->img->std, sizeof *s->std * (size_t)ch);
            return BFIT_OK;
        }
        if (c->given_mean) {
            memcpy(s->mean, c->given_mean, sizeof *s->mean * (size_t)ch);
            memcpy(s->std, c->given_std, sizeof *s->std * (size_t)ch);
            return BFIT_OK;
        }
        return bfit_dataset_norm_stats(s->train, s->mean, s->std);
    }
    return BFIT_OK;
}

int bfit_session_reopen(bfit_session *s, const bfit_session_cfg *c, bfit_conv_algo algo)
{
    bfit_session_cfg c2 = *c;
    uint64_t cap = bfit_arena_capacity(s->arena);
    char name[32], why[sizeof s->device_why];
    int rc;

    if (!s->dev_own)
        return bfit_fail(BFIT_ESTATE, "session: the device is the caller's, it cannot be reopened");
    /* the same device again (auto chose it already), with the other algorithms */
    snprintf(name, sizeof name, "%s", bfit_device_name(s->dev_own));
    memcpy(why, s->device_why, sizeof why);
    bfit_model_free(s->M);
    bfit_arena_free(s->arena);
    bfit_device_free(s->dev_own);
    s->M = NULL;
    s->arena = NULL;
    s->dev = s->dev_own = NULL;
    c2.conv_algo = algo;
    if ((rc = open_device(s, &c2, name)) != BFIT_OK)
        return rc;
    memcpy(s->device_why, why, sizeof why);
    if (!(s->arena = bfit_device_arena_new(s->dev, cap)))
        return bfit_fail(BFIT_ENOMEM, "out of host memory");
    return bfit_model_new(&s->g, s->dev, s->arena, &s->M);
}

void bfit_session_close(bfit_session *s)
{
    bfit_model_free(s->M);
    bfit_graph_fini(&s->g);
    bfit_dataset_free(s->train_own);
    bfit_dataset_free(s->test_own);
    bfit_arena_free(s->arena); /* its blocks go back to the device, so before it */
    bfit_device_free(s->dev_own);
    free(s->mean);
    free(s->std);
    memset(s, 0, sizeof *s);
}
