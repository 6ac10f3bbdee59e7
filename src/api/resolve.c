/* resolve.c - what each command reads from a configuration: the internal
 * structs of the trainer, evaluation and find (their own defaults under
 * what was given), checked where options must agree with each other. */
#include "api/config_int.h"
#include "base/err.h"
#include "base/testctl.h"
#include "nn/zoo.h"

#include <cjson/cJSON.h>
#include <unistd.h>

#include <string.h>

static const char *const cmd_words[] = {"plan", "find", "train", "eval", "a device"};

static const char *cmd_word(unsigned cmd)
{
    for (int i = 0; i < 5; i++)
        if (cmd == 1u << i)
            return cmd_words[i];
    return "?";
}

/* Why an option has nothing to do for a command, where "another command's"
 * would not tell (NULL: nothing more to say). */
static const char *why_not(const char *opt, unsigned cmd)
{
    if (!strcmp(opt, "attention") && cmd == CMD_EVAL)
        return "keeps each attention matrix, or not, for backward, and eval takes no backward step (stored and "
               "lean score alike)";
    return NULL;
}

int bfit_config_check_cmd(const bfit_config *c, unsigned cmd, const char *cmd_name)
{
    int n;
    const bfit_opt *t = bfit_opt_table(&n);

    if (!c)
        return bfit_fail(BFIT_EINVAL, "%s: no configuration", cmd_name);
    if (bfit_config_arrays_check(c, cmd, cmd_name) != BFIT_OK)
        return BFIT_EINVAL;
    for (int i = 0; i < n; i++) {
        char who[64] = "";
        if (!c->given[i] || (t[i].cmds & cmd))
            continue;
        if (why_not(t[i].name, cmd))
            return bfit_fail_field(BFIT_EINVAL, bfit_opt_field(&t[i]), "%s: leave it out", why_not(t[i].name, cmd));
        for (int k = 0; k < 4; k++)
            if (t[i].cmds & (1u << k))
                snprintf(who + strlen(who), sizeof who - strlen(who), "%s%s", who[0] ? ", " : "",
                         cmd_word(1u << k));
        return bfit_fail_field(BFIT_EINVAL, bfit_opt_field(&t[i]), "%s does not read this option (it is one of "
                               "%s): leave it out", cmd_name, who);
    }
    return BFIT_OK;
}

int bfit_config_need_model(const bfit_config *c, unsigned cmd)
{
    if (c->t.model) {
        /* a model that names nothing is a bad option; one that fails to
         * load is not (its file says what is wrong with it) */
        if (bfit_model_source_is_file(c->t.model) && access(c->t.model, R_OK) != 0)
            return bfit_fail_field(BFIT_EINVAL, "model", "%s: no such file (give a preset name, a spec file or an "
                                   "ONNX file)", c->t.model);
        if (!bfit_model_source_is_file(c->t.model)) {
            bfit_graph_desc g;
            if (bfit_model_source_load(c->t.model, 0, &g) != BFIT_OK) /* its message lists the presets */
                return bfit_fail_field(BFIT_EINVAL, "model", "%s", bfit_errmsg());
            bfit_graph_fini(&g);
        }
        return BFIT_OK;
    }
    if (cmd == CMD_TRAIN && c->t.resume)
        return BFIT_OK;
    return bfit_fail_field(BFIT_EINVAL, "model", "is required: a preset (mlp, cnn, resnet18, resnet50, vgg16, "
                           "gpt-nano, gpt2, bert-base), a spec file (models/cnn.cfg) or an ONNX file%s",
                           cmd == CMD_TRAIN ? " (or resume to continue a run)" : "");
}

int bfit_config_optim(const bfit_config *c, bfit_optim_cfg *o)
{
    if (c->mom_set && c->opt_kind != BFIT_OPT_SGD)
        return bfit_fail_field(BFIT_EINVAL, "momentum", "applies to the sgd optimizer (AdamW's state is always two "
                               "tensors per parameter)");
    *o = bfit_optim_cfg_default(c->opt_kind);
    if (c->mom_set)
        o->momentum = c->momentum;
    if (c->wd_set)
        o->weight_decay = c->weight_decay;
    o->nesterov = c->nesterov;
    return bfit_optim_cfg_check(o);
}

/* The options that only make sense together. */
static int given(const bfit_config *c, const char *name)
{
    int i;
    return bfit_opt_find(name, &i) && c->given[i];
}

/* seq-max sets the model's length as seq does (its lines' longest piece). */
static int seq_agrees(const bfit_config *c)
{
    if (c->seq && c->t.seq_max)
        return bfit_fail_field(BFIT_EINVAL, "seq", "sets the length of windows of the data, and seq-max makes the "
                               "data's lines the samples, of at most seq-max tokens (the model's length then): give "
                               "one of them");
    return BFIT_OK;
}

static int train_agrees(const bfit_config *c)
{
    const bfit_train_cfg *t = &c->t;
    if (c->nbatches > 1)
        return bfit_fail_field(BFIT_EINVAL, "batch", "train takes one effective batch (or auto, adaptive), not a list");
    if (c->batch_given && c->tokens_given)
        return bfit_fail_field(BFIT_EINVAL, "batch_tokens", "`batch` and batch_tokens both give the effective batch: "
                               "give one (samples or tokens)");
    if ((t->adaptive || t->auto_batch) && t->batch_schedule)
        return bfit_fail_field(BFIT_EINVAL, "batch_schedule", "cannot be combined with `batch` %s",
                               t->auto_batch ? "auto" : "adaptive");
    /* the bounds E moves within: a fixed batch has none to move (but for
     * batch-instead-of-decay's growth, which batch-max caps); a resumed run
     * takes its batch from the checkpoint */
    if (!t->auto_batch && !t->adaptive && !t->resume && (given(c, "batch-min") ||
        (given(c, "batch-max") && !t->batch_instead_of_decay)))
        return bfit_fail_field(BFIT_EINVAL, given(c, "batch-min") ? "batch_min" : "batch_max", "bounds the "
                               "effective batch of `batch` auto and adaptive%s; `batch` %d is fixed: leave it out, "
                               "or give `batch` auto or adaptive", given(c, "batch-min") ? "" : " (and the growth of "
                               "batch_instead_of_decay)", t->batch);
    if (t->lr_rule == BFIT_LR_ADASCALE && !t->auto_batch && !t->adaptive)
        return bfit_fail_field(BFIT_EINVAL, "lr_scaling", "adascale needs the noise scale: use it with `batch` auto (or "
                               "adaptive)");
    if (t->train_source && !t->test_source && !bfit_config_has_arrays(c, 1) && !given(c, "test-data") && !given(c, "data"))
        return bfit_fail_field(BFIT_EINVAL, "test_data", "the training samples come from a source "
                               "(bfit_config_set_source 0): give the test samples too (a test source, test arrays "
                               "or test-data), else the evaluation would read the default data set, "
                               "fashion-mnist");
    return BFIT_OK;
}

int bfit_config_given_json(const bfit_config *c, char **out)
{
    int n;
    const bfit_opt *t = bfit_opt_table(&n);
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; o && i < n; i++)
        if (c->given[i] && c->text[i])
            cJSON_AddStringToObject(o, t[i].name, c->text[i]);
    *out = o ? cJSON_PrintUnformatted(o) : NULL; /* cJSON's allocator is malloc: free() it */
    cJSON_Delete(o);
    return *out ? BFIT_OK : bfit_fail(BFIT_ENOMEM, "out of host memory");
}

int bfit_config_train_cfg(const bfit_config *c, bfit_train_cfg *t)
{
    int rc, i;

    if ((rc = bfit_config_check_cmd(c, CMD_TRAIN, "train")) != BFIT_OK ||
        (rc = bfit_config_need_model(c, CMD_TRAIN)) != BFIT_OK || (rc = train_agrees(c)) != BFIT_OK ||
        (rc = seq_agrees(c)) != BFIT_OK)
        return rc;
    if (bfit_opt_find("checkpoint-every", &i) && c->given[i] && !c->t.checkpoint && !c->t.resume)
        return bfit_fail_field(BFIT_EINVAL, "checkpoint_every", "says how often to write checkpoints, but no "
                               "checkpoint directory is given: give `checkpoint` a directory");
    /* a resumed run's weights are its checkpoint's; an ONNX model's
     * initializers or drawn weights are replaced by the saved ones */
    if (c->weights && c->t.resume)
        return bfit_fail_field(BFIT_EINVAL, "weights", "starts a new run from saved weights, and resume continues "
                               "a run from its checkpoint (its weights with it): give one of them");
    if (c->weights && given(c, "init"))
        return bfit_fail_field(BFIT_EINVAL, "init", "chooses the starting weights, and weights gives them: give one "
                               "of them");
    *t = c->t;
    t->init_weights = c->weights;
    t->seq = c->seq;
    t->attention = c->attn_set ? (c->attn_lean ? BFIT_ATTN_LEAN : BFIT_ATTN_STORED) : BFIT_ATTN_MODEL;
    if ((rc = bfit_config_optim(c, &t->opt)) != BFIT_OK)
        return rc;
    t->sched = bfit_lr_schedule_default(c->sched_kind);
    t->sched.warmup_steps = c->warmup;
    if (c->step_size)
        t->sched.step_size = c->step_size;
    t->sched.gamma = c->gamma;
    t->resume_set = c->given_names;
    t->nresume_set = c->ngiven;

    /* test controls (base/testctl.h), never in the public configuration */
    t->fail_nth_alloc = (uint64_t)bfit_test_value(BFIT_TC_FAIL_ALLOC);
    t->poison_step = bfit_test_value(BFIT_TC_POISON_STEP);
    t->sample_check = bfit_test_value(BFIT_TC_SAMPLE_CHECK) != 0;
    if (bfit_test_value(BFIT_TC_KILL_IN_CHECKPOINT) > 0)
        t->on_checkpoint_write = bfit_test_checkpoint_half_written;
    return BFIT_OK;
}

int bfit_config_eval_cfg(const bfit_config *c, bfit_eval_cfg *e)
{
    int rc;
    if ((rc = bfit_config_check_cmd(c, CMD_EVAL, "eval")) != BFIT_OK || (rc = bfit_config_need_model(c, CMD_EVAL)) != BFIT_OK ||
        (rc = seq_agrees(c)) != BFIT_OK)
        return rc;
    if (!c->weights)
        return bfit_fail_field(BFIT_EINVAL, "weights", "is required: the safetensors file `train --save` wrote");
    memset(e, 0, sizeof *e);
    e->model = c->t.model;
    e->weights = c->weights;
    e->data = c->t.data;
    e->test_data = c->t.test_data;
    e->seq_max = c->t.seq_max;
    e->mlm = c->t.mlm;
    e->seq = c->seq;
    e->batch = c->t.eval_batch;
    e->samples = c->t.eval_samples;
    e->threads = c->t.threads;
    e->device = c->device;
    e->device_name = c->t.device_name;
    e->conv_algo = c->t.conv_algo;
    e->memory = c->t.memory;
    e->normalize = c->t.normalize;
    e->csv_header = c->t.csv_header;
    e->img = c->t.img;
    e->human = c->t.human;
    return BFIT_OK;
}

int bfit_config_find_cfg(const bfit_config *c, bfit_find_cfg *f)
{
    int rc;
    if ((rc = bfit_config_check_cmd(c, CMD_FIND, "find")) != BFIT_OK || (rc = bfit_config_need_model(c, CMD_FIND)) != BFIT_OK)
        return rc;
    if (c->t.conv_algo == BFIT_CONV_AUTO)
        return bfit_fail_field(BFIT_EINVAL, "conv_algo", "find takes fastest or lean (it reports the largest batch "
                               "of one)");
    if (c->plot && !c->probe.ladder)
        return bfit_fail_field(BFIT_EINVAL, "plot", "draws the throughput measurement, which largest-only skips: "
                               "drop one of them");
    if (c->warmup_set && c->warmup > 1000)
        return bfit_fail_field(BFIT_EINVAL, "warmup", "%lld is out of range: expected 0 to 1000 unmeasured steps per "
                               "size", (long long)c->warmup);
    *f = bfit_find_cfg_default();
    f->model = c->t.model;
    f->data = c->t.data;
    f->csv_header = c->t.csv_header;
    f->device_name = c->t.device_name;
    f->conv_algo = c->t.conv_algo;
    f->storage = c->t.storage;
    f->memory = c->t.memory;
    f->threads = c->t.threads;
    f->normalize = c->t.normalize;
    f->prefetch = c->t.prefetch;
    f->augment = c->t.augment;
    f->img = c->t.img;
    f->seed = c->t.seed;
    f->limit = c->limit;
    f->seq = c->seq;
    f->mlm = c->t.mlm;
    f->attention = c->attn_set ? (c->attn_lean ? BFIT_ATTN_LEAN : BFIT_ATTN_STORED) : BFIT_ATTN_MODEL;
    f->probe = c->probe;
    f->probe.margin = c->t.margin;
    f->probe.human = c->t.human;
    if (c->warmup_set)
        f->probe.warmup = (int)c->warmup;
    return bfit_config_optim(c, &f->opt);
}

int bfit_config_check(const bfit_config *c, const char *command)
{
    bfit_train_cfg t;
    bfit_eval_cfg e;
    bfit_find_cfg f;
    bfit_optim_cfg o;

    if (!c || !command)
        return bfit_fail(BFIT_EINVAL, "bfit_config_check needs a configuration and a command");
    if (!strcmp(command, "train"))
        return bfit_config_train_cfg(c, &t);
    if (!strcmp(command, "eval"))
        return bfit_config_eval_cfg(c, &e);
    if (!strcmp(command, "find"))
        return bfit_config_find_cfg(c, &f);
    if (!strcmp(command, "plan"))
        return bfit_config_plan_check(c, &o);
    return bfit_fail(BFIT_EINVAL, "unknown command '%s': plan, find, train or eval", command);
}
