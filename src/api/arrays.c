/* arrays.c - samples in the caller's memory as data sets
 * (bfit_config_set_arrays): read in place, and shuffled, normalised,
 * augmented and evaluated exactly as the same samples read from a file,
 * so a program (the Python package's NumPy arrays) trains to the same
 * weights as the command line on that file. */
#include "api/config_int.h"
#include "base/err.h"
#include "data/data.h"
#include "nn/zoo.h"

#include <math.h>
#include <string.h>

static const char *const which_field[2] = {"data", "test_data"};

int bfit_config_has_arrays(const bfit_config *c, int which)
{
    return c->arr[which].x || c->arr[which].ids || c->arr[which].stream;
}

/* The checks both kinds of arrays share. */
static int arrays_given(int which, const void *x, const int32_t *labels, int64_t n, int64_t per,
                        const char *per_what)
{
    if (!x || !labels)
        return bfit_fail_field(BFIT_EINVAL, which_field[which], "arrays: give both the samples and the labels");
    if (n < 1 || n > INT32_MAX)
        return bfit_fail_field(BFIT_EINVAL, which_field[which], "arrays: %lld samples is out of range: expected 1 "
                               "to %d", (long long)n, INT32_MAX);
    if (per < 1)
        return bfit_fail_field(BFIT_EINVAL, which_field[which], "arrays: %lld %s", (long long)per, per_what);
    return BFIT_OK;
}

int bfit_config_set_arrays(bfit_config *c, int which, const float *x, const int32_t *labels, int64_t n,
                           int64_t sample_floats)
{
    int rc;
    if (!c || (which != 0 && which != 1))
        return bfit_fail(BFIT_EINVAL, "bfit_config_set_arrays: which is 0 (training) or 1 (test)");
    if (!x && !labels) { /* back to the "data" (or "test-data") option */
        memset(&c->arr[which], 0, sizeof c->arr[which]);
        return BFIT_OK;
    }
    if ((rc = arrays_given(which, x, labels, n, sample_floats, "floats per sample: expected the size of the "
                           "model's input (784 for 1x28x28)")) != BFIT_OK)
        return rc;
    c->arr[which] = (struct bfit_cfg_arrays){.x = x, .y = labels, .n = n, .floats = sample_floats};
    return BFIT_OK;
}

/* Token arrays of set which: y a class a sequence, a class a token (tags),
 * or NULL (a masked LM's sequences); ids and y NULL: back to the option. */
static int set_tokens(bfit_config *c, const char *fn, int which, const int32_t *ids, const int32_t *y, int tags,
                      int64_t n, int64_t T)
{
    int rc;
    if (!c || (which != 0 && which != 1))
        return bfit_fail(BFIT_EINVAL, "%s: which is 0 (training) or 1 (test)", fn);
    if (!ids && !y) {
        memset(&c->arr[which], 0, sizeof c->arr[which]);
        return BFIT_OK;
    }
    if ((rc = arrays_given(which, ids, y || tags ? y : ids, n, T, "ids per sequence: expected the model's T")))
        return rc;
    c->arr[which] = (struct bfit_cfg_arrays){.ids = ids, .y = y, .n = n, .floats = T, .tags = tags};
    return BFIT_OK;
}

int bfit_config_set_token_arrays(bfit_config *c, int which, const int32_t *ids, const int32_t *labels, int64_t n,
                                 int64_t T)
{
    /* labels NULL: a masked LM's sequences, labelled by the tokens it masks */
    return set_tokens(c, "bfit_config_set_token_arrays", which, ids, labels, 0, n, T);
}

int bfit_config_set_token_tags(bfit_config *c, int which, const int32_t *ids, const int32_t *tags, int64_t n,
                               int64_t T)
{
    return set_tokens(c, "bfit_config_set_token_tags", which, ids, tags, 1, n, T);
}

int bfit_config_set_token_stream(bfit_config *c, int which, const int32_t *ids, int64_t n)
{
    if (!c || (which != 0 && which != 1))
        return bfit_fail(BFIT_EINVAL, "bfit_config_set_token_stream: which is 0 (training) or 1 (test)");
    memset(&c->arr[which], 0, sizeof c->arr[which]);
    if (!ids) /* back to the "data" (or "test-data") option */
        return BFIT_OK;
    if (n < 2)
        return bfit_fail_field(BFIT_EINVAL, which_field[which], "a token stream of %lld ids: a sample needs its ids "
                               "and the ids after them, 2 or more", (long long)n);
    c->arr[which] = (struct bfit_cfg_arrays){.stream = ids, .n = n};
    return BFIT_OK;
}

int bfit_config_arrays_check(const bfit_config *c, unsigned cmd, const char *cmd_name)
{
    for (int w = 0; w < 2; w++)
        if (bfit_config_has_arrays(c, w) && cmd != CMD_TRAIN && cmd != CMD_EVAL)
            return bfit_fail_field(BFIT_EINVAL, which_field[w], "%s does not read arrays (bfit_config_set_arrays "
                                   "is for train and eval): give a data set by name or path", cmd_name);
    return BFIT_OK;
}

/* The arrays against the other options: one source of samples each. */
static int arrays_agree(const bfit_config *c)
{
    int i;
    for (int w = 0; w < 2; w++) {
        if (!bfit_config_has_arrays(c, w))
            continue;
        if (bfit_opt_find(w ? "test-data" : "data", &i) && c->given[i])
            return bfit_fail_field(BFIT_EINVAL, which_field[w], "is given and so are %s arrays: give one of them",
                                   w ? "test" : "training");
        if (w ? c->t.test_source : c->t.train_source)
            return bfit_fail_field(BFIT_EINVAL, which_field[w], "%s samples come from arrays and from a source "
                                   "(bfit_config_set_source): give one of them", w ? "test" : "training");
    }
    if (!c->t.model)
        return bfit_fail_field(BFIT_EINVAL, "model", "is required with arrays (they take the shape of its input), "
                               "also to resume");
    return BFIT_OK;
}

/* The model's input shape, from its source: floats for float arrays, token
 * ids for token arrays. */
static int input_shape(const bfit_config *c, bfit_shape *shape)
{
    bfit_graph_desc g;
    int rc = bfit_model_source_load(c->t.model, bfit_config_seq(c), &g), tokens;
    int w = bfit_config_has_arrays(c, 0) ? 0 : 1;
    if (rc != BFIT_OK)
        return bfit_fail_field(rc, "model", "%s", bfit_errmsg());
    *shape = g.input;
    tokens = g.input_dtype == BFIT_I32;
    bfit_graph_fini(&g);
    if (!tokens && c->arr[w].stream)
        return bfit_fail_field(BFIT_EINVAL, which_field[w], "a token stream is a language model's data, but %s "
                               "takes samples of floats (its input is not `input tokens=T`)", c->t.model);
    if (tokens && c->arr[w].x)
        return bfit_fail_field(BFIT_EINVAL, which_field[w], "arrays hold float samples, but %s takes token ids: give "
                               "a classifier's ids as int32 arrays (bfit_config_set_token_arrays; Python: an integer "
                               "array [n, T]), or a language model's as one stream (bfit_config_set_token_stream; "
                               "Python: a 1-d integer array) or a token file", c->t.model);
    if (!tokens && c->arr[w].ids)
        return bfit_fail_field(BFIT_EINVAL, which_field[w], "arrays hold token ids, but %s takes samples of floats "
                               "(its input is not `input tokens=T`)", c->t.model);
    return BFIT_OK;
}

static const char *const names[2] = {"(arrays)", "(test arrays)"};

/* Token arrays of set w as a data set of sequences of T ids, a class each
 * or a class a token (tags). */
static int borrow_tokens(const bfit_config *c, int w, bfit_shape shape, bfit_dataset **out)
{
    const struct bfit_cfg_arrays *a = &c->arr[w];
    int rc;

    if (a->floats != shape.d[0])
        return bfit_fail_field(BFIT_EINVAL, which_field[w], "%s takes sequences of %d token ids but the %s arrays "
                               "hold %lld ids per sequence", c->t.model, shape.d[0], w ? "test" : "training",
                               (long long)a->floats);
    if (!a->y)
        rc = bfit_dataset_borrow_token_seqs(names[w], a->ids, a->n, (int)a->floats, out);
    else
        rc = (a->tags ? bfit_dataset_borrow_token_tags : bfit_dataset_borrow_tokens)(names[w], a->ids, a->n,
                                                                                    (int)a->floats, a->y, out);
    if (rc)
        return bfit_fail_field(rc, which_field[w], "%s", bfit_errmsg());
    return BFIT_OK;
}

/* The token stream of set w: part (1 train, 0 test, -1 all) of it, in
 * windows of the model's T. */
static int stream_part(const bfit_config *c, int w, bfit_shape shape, int part, bfit_dataset **out)
{
    int rc;
    if (c->t.seq_max)
        return bfit_fail_field(BFIT_EINVAL, "seq_max", "makes a text's lines the samples; a token stream is cut "
                               "into windows of the model's T (or seq): leave seq_max out");
    if ((rc = bfit_dataset_token_stream(names[w], c->arr[w].stream, c->arr[w].n, part, shape.d[0], out)) != BFIT_OK)
        return bfit_fail_field(rc, which_field[w], "%s", bfit_errmsg());
    return BFIT_OK;
}

/* The arrays of set w as a data set of the model's input shape. */
static int borrow(const bfit_config *c, int w, bfit_shape shape, bfit_dataset **out)
{
    const struct bfit_cfg_arrays *a = &c->arr[w];
    char sh[48];
    int rc;

    if (a->stream) /* as a token file: the training data its train part, the test data whole */
        return stream_part(c, w, shape, w ? -1 : 1, out);
    if (a->ids)
        return borrow_tokens(c, w, shape, out);
    if (a->floats != bfit_shape_numel(shape))
        return bfit_fail_field(BFIT_EINVAL, which_field[w], "%s takes samples of %s (%lld floats) but the %s "
                               "arrays hold %lld floats per sample", c->t.model, bfit_shape_str(shape, sh, sizeof sh),
                               (long long)bfit_shape_numel(shape), w ? "test" : "training", (long long)a->floats);
    for (int64_t i = 0; i < a->n * a->floats; i++) /* one pass, cheap beside training on them */
        if (!isfinite(a->x[i]))
            return bfit_fail_field(BFIT_EINVAL, which_field[w], "the %s arrays' sample %lld holds %s at float %lld: "
                                   "give finite values", w ? "test" : "training", (long long)(i / a->floats),
                                   isnan(a->x[i]) ? "NaN" : "an infinity", (long long)(i % a->floats));
    if ((rc = bfit_dataset_borrow_floats(names[w], shape, a->n, a->x, a->y, out)) != BFIT_OK)
        return bfit_fail_field(rc, which_field[w], "%s", bfit_errmsg());
    return BFIT_OK;
}

int bfit_config_arrays_sets(const bfit_config *c, bfit_train_cfg *t, bfit_dataset *own[2])
{
    bfit_shape shape;
    int rc, split;

    own[0] = own[1] = NULL;
    if (!bfit_config_has_arrays(c, 0) && !bfit_config_has_arrays(c, 1))
        return BFIT_OK;
    if ((rc = arrays_agree(c)) != BFIT_OK || (rc = input_shape(c, &shape)) != BFIT_OK)
        return rc;
    split = c->arr[0].stream && !bfit_config_has_arrays(c, 1) && !c->t.test_data;
    for (int w = 0; w < 2 && rc == BFIT_OK; w++)
        if (bfit_config_has_arrays(c, w))
            rc = borrow(c, w, shape, &own[w]);
    if (rc == BFIT_OK && split) /* alone: tested on its test part, as a token file is */
        rc = stream_part(c, 0, shape, 0, &own[1]);
    if (rc != BFIT_OK) {
        bfit_dataset_free(own[0]);
        bfit_dataset_free(own[1]);
        own[0] = own[1] = NULL;
        return rc;
    }
    if (own[0]) {
        t->train_set = own[0];
        t->data = names[0];
        /* no test arrays and no test data: as a single file, evaluated on itself */
        if (!own[1] && !c->t.test_data)
            t->test_set = own[0];
    }
    if (own[1])
        t->test_set = own[1];
    return BFIT_OK;
}

int bfit_config_arrays_eval(const bfit_config *c, bfit_dataset **own)
{
    bfit_shape shape;
    int rc, w = bfit_config_has_arrays(c, 1) ? 1 : 0;

    *own = NULL;
    if (!bfit_config_has_arrays(c, 0) && !bfit_config_has_arrays(c, 1))
        return BFIT_OK;
    if (bfit_config_has_arrays(c, 0) && bfit_config_has_arrays(c, 1))
        return bfit_fail_field(BFIT_EINVAL, "test_data", "eval scores one set: give either the test arrays or the "
                               "training arrays, not both");
    if ((rc = arrays_agree(c)) != BFIT_OK || (rc = input_shape(c, &shape)) != BFIT_OK)
        return rc;
    if (w == 0 && c->arr[0].stream) /* as a token file given as the data: its test part */
        return stream_part(c, 0, shape, 0, own);
    return borrow(c, w, shape, own);
}
