/* test_arrays.c - samples in the caller's memory (bfit_config_set_arrays)
 * train exactly as the same samples read from a file: the same weights,
 * bit for bit, and the same test accuracy as a CSV file of them, with the
 * same seed and options; a run made from them outlives its configuration;
 * arrays that disagree with the model or the options are refused naming
 * the option; a language model's token stream trains as its token file.
 * Public API only. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <batchfit.h>

#define N 240   /* samples */
#define F 12    /* features */
#define NCLS 3

static char dir[64];
static char spec[128], csv[128];
static float x[N * F];
static int32_t y[N];

/* Features with a class in them (a noisy one-hot of the label, a spread
 * that normalisation changes), values exactly printable. */
static void make_data(void)
{
    uint32_t s = 12345;
    for (int i = 0; i < N; i++) {
        y[i] = i % NCLS;
        for (int f = 0; f < F; f++) {
            s = s * 1664525u + 1013904223u;
            x[i * F + f] = (float)((int)(s >> 20) % 512) / 64.0f + (f % NCLS == y[i] ? 3.0f : 0.0f) + 10.0f * (f == 0);
        }
    }
}

static int setup(void **state)
{
    FILE *f;
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/bfit_arrays_XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    make_data();
    snprintf(spec, sizeof spec, "%s/m.cfg", dir);
    snprintf(csv, sizeof csv, "%s/d.csv", dir);
    if (!(f = fopen(spec, "w")))
        return -1;
    fprintf(f, "input %d\nlinear 16\nrelu\nlinear %d\n", F, NCLS);
    fclose(f);
    if (!(f = fopen(csv, "w")))
        return -1;
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < F; k++)
            fprintf(f, "%.9g,", (double)x[i * F + k]); /* %.9g gives a float back exactly */
        fprintf(f, "%d\n", y[i]);
    }
    fclose(f);
    return 0;
}

static int teardown(void **state)
{
    char cmd[128];
    (void)state;
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static bfit_config *config(const char *save, int seed)
{
    bfit_config *c = bfit_config_new();
    assert_non_null(c);
    assert_int_equal(bfit_config_set(c, "model", spec), BFIT_OK);
    assert_int_equal(bfit_config_set_int(c, "epochs", 2), BFIT_OK);
    assert_int_equal(bfit_config_set_int(c, "batch", 16), BFIT_OK);
    assert_int_equal(bfit_config_set_int(c, "seed", seed), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "memory", "256MiB"), BFIT_OK);
    assert_int_equal(bfit_config_set_int(c, "threads", 1), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "save", save), BFIT_OK);
    return c;
}

/* Every tensor of two weights files, bit for bit. */
static int same_weights(const char *a, const char *b)
{
    bfit_tensors *ta, *tb;
    int same = 1;
    assert_int_equal(bfit_tensors_open(a, &ta), BFIT_OK);
    assert_int_equal(bfit_tensors_open(b, &tb), BFIT_OK);
    assert_int_equal(bfit_tensors_count(ta), bfit_tensors_count(tb));
    assert_true(bfit_tensors_count(ta) >= 4);
    for (int i = 0; i < bfit_tensors_count(ta); i++) {
        int64_t n = bfit_tensors_numel(ta, i);
        float *va = malloc(sizeof *va * (size_t)n), *vb = malloc(sizeof *vb * (size_t)n);
        assert_string_equal(bfit_tensors_name(ta, i), bfit_tensors_name(tb, i));
        assert_int_equal(bfit_tensors_numel(tb, i), n);
        assert_int_equal(bfit_tensors_read(ta, i, va, n), BFIT_OK);
        assert_int_equal(bfit_tensors_read(tb, i, vb, n), BFIT_OK);
        same &= memcmp(va, vb, sizeof *va * (size_t)n) == 0;
        free(va);
        free(vb);
    }
    bfit_tensors_free(ta);
    bfit_tensors_free(tb);
    return same;
}

static double train_acc(bfit_config *c)
{
    bfit_result *r = NULL;
    double acc;
    if (bfit_train(c, &r) != BFIT_OK)
        fail_msg("train: %s", bfit_errmsg());
    acc = bfit_result_number(r, "test_accuracy");
    bfit_result_free(r);
    return acc;
}

static void test_same_as_file(void **state)
{
    char wf[128], wa[128], wb[128];
    float copy[N * F];
    bfit_config *c;
    double acc_file, acc_arrays;
    (void)state;
    snprintf(wf, sizeof wf, "%s/file.safetensors", dir);
    snprintf(wa, sizeof wa, "%s/arrays.safetensors", dir);
    snprintf(wb, sizeof wb, "%s/seed2.safetensors", dir);
    memcpy(copy, x, sizeof x);

    c = config(wf, 7);
    assert_int_equal(bfit_config_set(c, "data", csv), BFIT_OK);
    acc_file = train_acc(c);
    bfit_config_free(c);

    c = config(wa, 7);
    assert_int_equal(bfit_config_set_arrays(c, 0, x, y, N, F), BFIT_OK);
    acc_arrays = train_acc(c);
    bfit_config_free(c);
    assert_true(same_weights(wf, wa));
    assert_true(acc_file == acc_arrays); /* evaluated on the same samples (the training ones: no test split) */
    assert_true(acc_arrays > 0.5);       /* it learnt something: chance is 1/3 */
    assert_memory_equal(copy, x, sizeof x); /* read, never written */

    /* the comparison can fail: another seed, other weights */
    c = config(wb, 8);
    assert_int_equal(bfit_config_set_arrays(c, 0, x, y, N, F), BFIT_OK);
    train_acc(c);
    bfit_config_free(c);
    assert_false(same_weights(wa, wb));
}

/* Test arrays of their own: the evaluation is on them. */
static void test_test_arrays(void **state)
{
    char w[128];
    bfit_config *c;
    int32_t wrong[N];
    double acc;
    (void)state;
    snprintf(w, sizeof w, "%s/t.safetensors", dir);
    for (int i = 0; i < N; i++)
        wrong[i] = (y[i] + 1) % NCLS; /* every label wrong: accuracy falls */
    c = config(w, 7);
    assert_int_equal(bfit_config_set_arrays(c, 0, x, y, N, F), BFIT_OK);
    assert_int_equal(bfit_config_set_arrays(c, 1, x, wrong, N, F), BFIT_OK);
    acc = train_acc(c);
    bfit_config_free(c);
    assert_true(acc < 0.4);
}

/* A run holds its own configuration and the data sets made of the arrays:
 * the caller's configuration may go at once. */
static void test_run_outlives_config(void **state)
{
    char w[128];
    bfit_config *c;
    bfit_run *run = NULL;
    int steps = 0;
    (void)state;
    snprintf(w, sizeof w, "%s/run.safetensors", dir);
    c = config(w, 7);
    assert_int_equal(bfit_config_set_arrays(c, 0, x, y, N, F), BFIT_OK);
    assert_int_equal(bfit_run_new(c, &run), BFIT_OK);
    bfit_config_free(c);
    while (!bfit_run_done(run)) {
        assert_int_equal(bfit_run_step(run, NULL), BFIT_OK);
        steps++;
    }
    assert_int_equal(steps, 2 * N / 16);
    assert_int_equal(bfit_run_evaluate(run, NULL), BFIT_OK);
    bfit_run_finish(run, BFIT_OK);
    bfit_run_free(run);
}

/* Many features are many channels of normalisation statistics: the weights
 * file's metadata holds them all (it once held 4096 characters: ~300). */
static void test_many_features_saved(void **state)
{
    enum { NF = 800, NS = 64 };
    char sp[128], w[128];
    float *big = malloc(sizeof *big * NF * NS);
    bfit_tensors *t = NULL;
    bfit_config *c = bfit_config_new();
    bfit_result *r = NULL;
    const char *mean;
    int commas = 0;
    FILE *f;
    (void)state;
    snprintf(sp, sizeof sp, "%s/wide.cfg", dir);
    snprintf(w, sizeof w, "%s/wide.safetensors", dir);
    assert_non_null(f = fopen(sp, "w"));
    fprintf(f, "input %d\nlinear %d\n", NF, NCLS);
    fclose(f);
    for (int i = 0; i < NF * NS; i++)
        big[i] = (float)(i % 97) / 7.0f;
    assert_int_equal(bfit_config_set(c, "model", sp), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "save", w), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "memory", "256MiB"), BFIT_OK);
    assert_int_equal(bfit_config_set_int(c, "batch", 32), BFIT_OK);
    assert_int_equal(bfit_config_set_arrays(c, 0, big, y, NS, NF), BFIT_OK);
    if (bfit_train(c, &r) != BFIT_OK)
        fail_msg("train: %s", bfit_errmsg());
    assert_int_equal(bfit_tensors_open(w, &t), BFIT_OK);
    assert_non_null(mean = bfit_tensors_meta(t, "normalize_mean"));
    for (const char *p = mean; *p; p++)
        commas += *p == ',';
    assert_int_equal(commas, NF - 1);
    bfit_tensors_free(t);
    bfit_result_free(r);
    bfit_config_free(c);
    free(big);
}

static void fails(int rc, int want, const char *field, const char *msg)
{
    assert_int_equal(rc, want);
    assert_string_equal(bfit_errfield(), field);
    if (!strstr(bfit_errmsg(), msg))
        fail_msg("message '%s' lacks '%s'", bfit_errmsg(), msg);
}

static void test_refused(void **state)
{
    char w[128];
    bfit_config *c;
    bfit_result *r = NULL;
    int32_t neg[N];
    (void)state;
    snprintf(w, sizeof w, "%s/bad.safetensors", dir);
    memcpy(neg, y, sizeof y);
    neg[5] = -1;

    c = config(w, 7);
    fails(bfit_config_set_arrays(c, 2, x, y, N, F), BFIT_EINVAL, "", "which is 0 (training) or 1 (test)");
    fails(bfit_config_set_arrays(c, 0, x, NULL, N, F), BFIT_EINVAL, "data", "both the samples and the labels");
    fails(bfit_config_set_arrays(c, 1, x, y, 0, F), BFIT_EINVAL, "test_data", "0 samples is out of range");
    fails(bfit_config_set_arrays(c, 0, x, y, N, 0), BFIT_EINVAL, "data", "floats per sample");
    /* token arrays: the same checks; a float model refuses them (tests/python test_token_arrays_*: the rest) */
    {
        static int32_t ids[N * F];
        fails(bfit_config_set_token_arrays(c, 2, ids, y, N, F), BFIT_EINVAL, "", "which is 0 (training) or 1 (test)");
        fails(bfit_config_set_token_arrays(c, 0, NULL, y, N, F), BFIT_EINVAL, "data", "both the samples and the labels");
        fails(bfit_config_set_token_arrays(c, 0, ids, y, N, 0), BFIT_EINVAL, "data", "ids per sequence: expected the "
              "model's T");
        assert_int_equal(bfit_config_set_token_arrays(c, 0, ids, y, N, F), BFIT_OK);
        fails(bfit_train(c, &r), BFIT_EINVAL, "data", "arrays hold token ids, but");
        assert_int_equal(bfit_config_set_token_arrays(c, 0, NULL, NULL, 0, 0), BFIT_OK);
    }

    /* the model's input is F floats */
    assert_int_equal(bfit_config_set_arrays(c, 0, x, y, N / 2, 2 * F), BFIT_OK);
    fails(bfit_train(c, &r), BFIT_EINVAL, "data", "(12 floats) but the training arrays hold 24 floats per sample");
    assert_null(r);
    assert_int_equal(bfit_config_set_arrays(c, 0, x, neg, N, F), BFIT_OK);
    fails(bfit_train(c, &r), BFIT_EINVAL, "data", "label of sample 5 is -1");
    {
        static float bad[N * F];
        memcpy(bad, x, sizeof bad);
        bad[7 * F + 2] = NAN; /* said where, not as a normalisation of NaN */
        assert_int_equal(bfit_config_set_arrays(c, 0, bad, y, N, F), BFIT_OK);
        fails(bfit_train(c, &r), BFIT_EINVAL, "data", "the training arrays' sample 7 holds NaN at float 2");
    }
    assert_int_equal(bfit_config_set_arrays(c, 0, x, y, N, F), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "data", csv), BFIT_OK);
    fails(bfit_train(c, &r), BFIT_EINVAL, "data", "is given and so are training arrays");
    bfit_config_free(c);

    /* other commands do not read arrays */
    c = bfit_config_new();
    assert_int_equal(bfit_config_set(c, "model", spec), BFIT_OK);
    assert_int_equal(bfit_config_set_arrays(c, 1, x, y, N, F), BFIT_OK);
    fails(bfit_plan(c, &r), BFIT_EINVAL, "test_data", "plan does not read arrays");
    fails(bfit_find(c, &r), BFIT_EINVAL, "test_data", "find does not read arrays");
    fails(bfit_config_check(c, "eval"), BFIT_EINVAL, "weights", "is required"); /* not the arrays: eval scores them */
    assert_int_equal(bfit_config_check(c, "train"), BFIT_OK);
    assert_int_equal(bfit_config_set_arrays(c, 1, NULL, NULL, 0, 0), BFIT_OK); /* back to the option */
    assert_int_equal(bfit_config_check(c, "find"), BFIT_OK);

    /* a token model takes ids from a file */
    assert_int_equal(bfit_config_set(c, "model", "gpt-nano"), BFIT_OK);
    assert_int_equal(bfit_config_set_arrays(c, 0, x, y, N, F), BFIT_OK);
    fails(bfit_train(c, &r), BFIT_EINVAL, "data", "takes token ids");
    bfit_config_free(c);
}

/* A token stream in memory (bfit_config_set_token_stream) trains as the
 * same ids in a token file (llm.c's format, written here, vocabulary 0):
 * split alike into a train and a test part (every 20th block of 4096 ids),
 * the same weights bit for bit and the same test loss; read, never written;
 * refused where it cannot serve, naming the option and position. */
static void test_token_stream(void **state)
{
    enum { NT = 20 * 4096 + 100 };
    static int32_t ids[NT], copy[NT];
    static uint16_t u16[NT];
    char tspec[128], tok[128], wf[128], ws[128];
    int32_t hdr[256] = {20240520, 1, NT, 0};
    bfit_config *c;
    bfit_result *r = NULL;
    double loss[2];
    FILE *f;
    (void)state;
    for (int i = 0; i < NT; i++)
        ids[i] = (int32_t)((i * 7 + i / 13) % 24), u16[i] = (uint16_t)ids[i];
    memcpy(copy, ids, sizeof ids);
    snprintf(tspec, sizeof tspec, "%s/lm.cfg", dir);
    snprintf(tok, sizeof tok, "%s/ids.bin", dir);
    assert_non_null(f = fopen(tspec, "w"));
    fprintf(f, "input tokens=8\nembed 16 vocab=24 positions=8\nresidual {\n linear 48\n attention 2\n linear 16\n}\n"
               "layernorm\nlinear 24\n");
    fclose(f);
    assert_non_null(f = fopen(tok, "wb"));
    assert_int_equal(fwrite(hdr, sizeof hdr, 1, f), 1);
    assert_int_equal(fwrite(u16, sizeof u16, 1, f), 1);
    fclose(f);
    for (int k = 0; k < 2; k++) {
        bfit_result *res = NULL;
        snprintf(k ? ws : wf, sizeof wf, "%s/%s.safetensors", dir, k ? "stream" : "tokfile");
        c = config(k ? ws : wf, 7);
        assert_int_equal(bfit_config_set(c, "model", tspec), BFIT_OK);
        assert_int_equal(bfit_config_set_int(c, "epochs", 1), BFIT_OK);
        assert_int_equal(bfit_config_set_int(c, "max-steps", 30), BFIT_OK);
        assert_int_equal(k ? bfit_config_set_token_stream(c, 0, ids, NT) : bfit_config_set(c, "data", tok), BFIT_OK);
        if (bfit_train(c, &res) != BFIT_OK)
            fail_msg("train: %s", bfit_errmsg());
        loss[k] = bfit_result_number(res, "test_loss");
        bfit_result_free(res);
        bfit_config_free(c);
    }
    assert_true(same_weights(wf, ws));
    assert_true(loss[0] == loss[1] && loss[1] > 0);
    assert_memory_equal(copy, ids, sizeof ids);

    c = config(ws, 7);
    fails(bfit_config_set_token_stream(c, 2, ids, NT), BFIT_EINVAL, "", "which is 0 (training) or 1 (test)");
    fails(bfit_config_set_token_stream(c, 0, ids, 1), BFIT_EINVAL, "data", "a token stream of 1 ids");
    assert_int_equal(bfit_config_set_token_stream(c, 0, ids, NT), BFIT_OK); /* a float model: refused */
    fails(bfit_train(c, &r), BFIT_EINVAL, "data", "a token stream is a language model's data, but");
    assert_int_equal(bfit_config_set(c, "model", tspec), BFIT_OK);
    ids[4097] = -1;
    fails(bfit_train(c, &r), BFIT_EINVAL, "data", "(arrays): id -1 at position 4097: token ids are 0 to");
    ids[4097] = copy[4097];
    assert_int_equal(bfit_config_set_token_stream(c, 0, ids, 5000), BFIT_OK); /* no test part: said so */
    fails(bfit_train(c, &r), BFIT_EINVAL, "data", "a token file's test part is every 20th block of 4096 ids");
    assert_null(r);
    bfit_config_free(c);
}

/* A bidirectional encoder of 8 tokens (ids below 24) ending in head, as a
 * spec file at path. */
static void write_encoder(const char *path, const char *head)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "input tokens=8\nembed 16 vocab=24 positions=8\nresidual {\n linear 48\n attention 2 causal=0\n "
               "linear 16\n}\n%s", head);
    fclose(f);
}

/* A token classifier's tags (bfit_config_set_token_tags): a class a
 * token, negative where none counts, not read after a sequence's last
 * token (there 77, more classes than the model has). A bidirectional
 * model learns each token's tag, the next id mod 3 (only its right side
 * tells), and eval on the same arrays gives the run's last figures (the
 * loss to rounding: other micro-batches); the refusals name what is
 * wrong. */
static void test_token_tags(void **state)
{
    enum { NS = 400, TT = 8 };
    static int32_t ids[NS * TT], tags[NS * TT], none[NS * TT];
    char tspec[128], cspec[128], w[128];
    bfit_config *c;
    bfit_result *r = NULL;
    double acc, loss;
    int32_t was;
    (void)state;
    for (int i = 0; i < NS; i++) {
        int len = 3 + i % 6;
        for (int j = 0; j < TT; j++) {
            ids[i * TT + j] = j < len ? (int32_t)((i * 7 + j * 5 + i / 3) % 24) : -1;
            none[i * TT + j] = -100;
        }
        for (int j = 0; j < TT; j++)
            tags[i * TT + j] = j >= len ? 77 : j == len - 1 || j % 3 == 2 ? -100 : ids[i * TT + j + 1] % 3;
    }
    snprintf(tspec, sizeof tspec, "%s/tok.cfg", dir);
    snprintf(cspec, sizeof cspec, "%s/seqcls.cfg", dir);
    snprintf(w, sizeof w, "%s/tags.safetensors", dir);
    write_encoder(tspec, "layernorm\nlinear 3\n");
    write_encoder(cspec, "select 0\nlinear 3\n");
    c = config(w, 3);
    assert_int_equal(bfit_config_set(c, "model", tspec), BFIT_OK);
    assert_int_equal(bfit_config_set_int(c, "epochs", 8), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "optimizer", "adamw"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "lr", "0.01"), BFIT_OK);
    assert_int_equal(bfit_config_set_token_tags(c, 0, ids, tags, NS, TT), BFIT_OK);
    if (bfit_train(c, &r) != BFIT_OK)
        fail_msg("train: %s", bfit_errmsg());
    acc = bfit_result_number(r, "test_accuracy");
    loss = bfit_result_number(r, "test_loss");
    bfit_result_free(r);
    r = NULL;
    print_message("  tags: test accuracy %.4f, loss %.4f (chance: a third)\n", acc, loss);
    assert_true(acc > 0.6);
    bfit_config_free(c);

    c = bfit_config_new();
    assert_int_equal(bfit_config_set(c, "model", tspec), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "weights", w), BFIT_OK);
    assert_int_equal(bfit_config_set_token_tags(c, 1, ids, tags, NS, TT), BFIT_OK);
    if (bfit_evaluate(c, &r) != BFIT_OK)
        fail_msg("eval: %s", bfit_errmsg());
    /* the same tokens scored; the loss summed in eval's micro-batches, not the run's: to rounding */
    assert_true(bfit_result_number(r, "accuracy") == acc && fabs(bfit_result_number(r, "loss") - loss) < 1e-9 * loss);
    bfit_result_free(r);
    r = NULL;
    bfit_config_free(c);

    c = config(w, 3);
    assert_int_equal(bfit_config_set(c, "model", tspec), BFIT_OK);
    assert_int_equal(bfit_config_set_token_tags(c, 0, ids, none, NS, TT), BFIT_OK);
    fails(bfit_train(c, &r), BFIT_EINVAL, "data", "no token has a tag");
    bfit_result_free(r); /* a run that failed once started has a result too */
    r = NULL;
    was = tags[1];
    tags[1] = 5;
    assert_int_equal(bfit_config_set_token_tags(c, 0, ids, tags, NS, TT), BFIT_OK);
    fails(bfit_train(c, &r), BFIT_EINVAL, "", "has 3 class scores but the data set (arrays) has 6 classes");
    bfit_result_free(r);
    r = NULL;
    tags[1] = was;
    assert_int_equal(bfit_config_set(c, "mask-tokens", "0.15"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "mask-id", "1"), BFIT_OK);
    fails(bfit_train(c, &r), BFIT_EINVAL, "mask_tokens", "holds a class a token (a token classifier's tags)");
    bfit_result_free(r);
    r = NULL;
    bfit_config_free(c);
    c = config(w, 3);
    assert_int_equal(bfit_config_set_token_tags(c, 0, ids, tags, NS, TT), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "model", cspec), BFIT_OK);
    fails(bfit_train(c, &r), BFIT_EINVAL, "data", "has a label per token (8 per sample: its tags)");
    bfit_result_free(r);
    r = NULL;
    bfit_config_free(c);
}

/* Token arrays without labels (bfit_config_set_token_arrays, labels NULL)
 * are a masked LM's sequences: they train with mask-tokens, read in place;
 * without it they are refused, saying what they are for. */
static void test_token_seqs(void **state)
{
    enum { NS = 300, TT = 8 };
    static int32_t ids[NS * TT], copy[NS * TT];
    char mspec[128], w[128];
    bfit_config *c;
    bfit_result *r = NULL;
    (void)state;
    for (int i = 0; i < NS * TT; i++)
        ids[i] = i % TT < 3 + (i / TT) % 6 ? (int32_t)((i * 5 + i / 7) % 20) : -1;
    memcpy(copy, ids, sizeof ids);
    snprintf(mspec, sizeof mspec, "%s/mlm.cfg", dir);
    snprintf(w, sizeof w, "%s/mlm.safetensors", dir);
    write_encoder(mspec, "layernorm\nlinear 24\n");
    c = config(w, 3);
    assert_int_equal(bfit_config_set(c, "model", mspec), BFIT_OK);
    assert_int_equal(bfit_config_set_token_arrays(c, 0, ids, NULL, NS, TT), BFIT_OK);
    fails(bfit_train(c, &r), BFIT_EINVAL, "data", "(arrays) holds token sequences without labels, which train a "
                                                  "masked LM: give mask_tokens and mask_id");
    bfit_result_free(r);
    r = NULL;
    assert_int_equal(bfit_config_set(c, "mask-tokens", "0.15"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "mask-id", "23"), BFIT_OK);
    if (bfit_train(c, &r) != BFIT_OK)
        fail_msg("train: %s", bfit_errmsg());
    assert_true(bfit_result_number(r, "test_loss") > 0 && bfit_result_number(r, "steps") > 0);
    assert_memory_equal(copy, ids, sizeof ids); /* read, never written: the masks are made in the staging */
    bfit_result_free(r);
    bfit_config_free(c);
}

/* A masked LM's head runs at its masked tokens only (nn/head.c): the run's
 * figures are those of the head at every token (BFIT_TEST_FULL_HEAD=1,
 * what transformers' BertForMaskedLM computes) but for rounding (the head's
 * weight gradients sum over other rows: the full head's have zeros among
 * them), in less memory; the saved weights keep the names of the model as
 * written. */
static void test_gathered_head(void **state)
{
    enum { NS = 240, TT = 32 };
    static int32_t ids[NS * TT];
    char mspec[128], w[2][128];
    double loss[2], train[2], acc[2], peak[2];
    bfit_tensors *t[2];
    (void)state;
    for (int i = 0; i < NS * TT; i++)
        ids[i] = i % TT < 12 + (i / TT) % 20 ? (int32_t)((i * 5 + i / 7) % 20) : -1;
    snprintf(mspec, sizeof mspec, "%s/mlmhead.cfg", dir);
    {
        FILE *f = fopen(mspec, "w");
        assert_non_null(f);
        /* post-norm, as BERT: the last layer's layer norm and feed-forward are gathered too */
        fprintf(f, "input tokens=%d\nembed 16 vocab=24 positions=%d\nresidual {\n linear 48\n attention 2 causal=0\n "
                   "linear 16\n}\nlayernorm\nresidual {\n linear 32\n gelu\n linear 16\n}\nlayernorm\nlinear 16\n"
                   "gelu\nlayernorm\nlinear 24\n", TT, TT);
        fclose(f);
    }
    for (int k = 0; k < 2; k++) {
        bfit_config *c;
        bfit_result *r = NULL;
        snprintf(w[k], sizeof w[k], "%s/mlmhead%d.safetensors", dir, k);
        c = config(w[k], 3);
        assert_int_equal(bfit_config_set(c, "model", mspec), BFIT_OK);
        assert_int_equal(bfit_config_set_token_arrays(c, 0, ids, NULL, NS, TT), BFIT_OK);
        assert_int_equal(bfit_config_set(c, "mask-tokens", "0.15"), BFIT_OK);
        assert_int_equal(bfit_config_set(c, "mask-id", "23"), BFIT_OK);
        assert_int_equal(setenv("BFIT_TEST_FULL_HEAD", k ? "1" : "0", 1), 0);
        if (bfit_train(c, &r) != BFIT_OK)
            fail_msg("train: %s", bfit_errmsg());
        loss[k] = bfit_result_number(r, "test_loss");
        train[k] = bfit_result_number(r, "train_loss");
        acc[k] = bfit_result_number(r, "test_accuracy");
        peak[k] = bfit_result_number(r, "peak_bytes");
        bfit_result_free(r);
        bfit_config_free(c);
    }
    unsetenv("BFIT_TEST_FULL_HEAD");
    print_message("  gathered / every token: test loss %.9f / %.9f, train loss %.9f / %.9f, accuracy %.6f / %.6f, "
                  "peak %.0f / %.0f bytes\n", loss[0], loss[1], train[0], train[1], acc[0], acc[1], peak[0], peak[1]);
    assert_true(fabs(loss[0] - loss[1]) <= 1e-7 * loss[1] && fabs(train[0] - train[1]) <= 1e-7 * train[1]);
    assert_true(acc[0] == acc[1]);
    assert_true(peak[0] < peak[1]);
    /* the head's layers (after the inserted gather) keep their numbers: the same names */
    assert_int_equal(bfit_tensors_open(w[0], &t[0]), BFIT_OK);
    assert_int_equal(bfit_tensors_open(w[1], &t[1]), BFIT_OK);
    assert_int_equal(bfit_tensors_count(t[0]), bfit_tensors_count(t[1]));
    for (int i = 0; i < bfit_tensors_count(t[0]); i++)
        assert_string_equal(bfit_tensors_name(t[0], i), bfit_tensors_name(t[1], i));
    bfit_tensors_free(t[0]);
    bfit_tensors_free(t[1]);
}

/* eval scores arrays with the weights' saved normalisation: the figures
 * of the training's last evaluation on the same test arrays, bit for bit. */
static void test_eval_arrays(void **state)
{
    char w[128];
    bfit_config *c;
    bfit_result *r = NULL;
    int32_t half[N];
    double acc, loss;
    (void)state;
    snprintf(w, sizeof w, "%s/e.safetensors", dir);
    for (int i = 0; i < N; i++)
        half[i] = i % 2 ? y[i] : (y[i] + 1) % NCLS; /* half the labels wrong: not a trivial score */
    c = config(w, 7);
    assert_int_equal(bfit_config_set_arrays(c, 0, x, y, N, F), BFIT_OK);
    assert_int_equal(bfit_config_set_arrays(c, 1, x, half, N, F), BFIT_OK);
    if (bfit_train(c, &r) != BFIT_OK)
        fail_msg("train: %s", bfit_errmsg());
    acc = bfit_result_number(r, "test_accuracy");
    loss = bfit_result_number(r, "test_loss");
    bfit_result_free(r);
    bfit_config_free(c);

    c = bfit_config_new();
    assert_int_equal(bfit_config_set(c, "model", spec), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "weights", w), BFIT_OK);
    assert_int_equal(bfit_config_set_arrays(c, 1, x, half, N, F), BFIT_OK);
    if (bfit_evaluate(c, &r) != BFIT_OK)
        fail_msg("eval: %s", bfit_errmsg());
    assert_true(bfit_result_number(r, "accuracy") == acc);
    assert_true(bfit_result_number(r, "loss") == loss);
    assert_true(bfit_result_number(r, "samples") == N);
    assert_true(acc > 0.2 && acc < 0.8);
    bfit_result_free(r);
    assert_int_equal(bfit_config_set_arrays(c, 0, x, y, N, F), BFIT_OK); /* both: which one? */
    fails(bfit_evaluate(c, &r), BFIT_EINVAL, "test_data", "eval scores one set");
    bfit_config_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_as_file), cmocka_unit_test(test_test_arrays),
        cmocka_unit_test(test_run_outlives_config), cmocka_unit_test(test_refused), cmocka_unit_test(test_eval_arrays),
        cmocka_unit_test(test_many_features_saved), cmocka_unit_test(test_token_stream),
        cmocka_unit_test(test_token_tags),
        cmocka_unit_test(test_token_seqs), cmocka_unit_test(test_gathered_head),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
