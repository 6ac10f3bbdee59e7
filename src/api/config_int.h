/* config_int.h - the public configuration's insides (src/api/): options
 * set by name into the internal structs of the commands, the table of
 * options, and what each command resolves from them.
 *
 * A configuration holds the run's struct (bfit_train_cfg, trainer.h) and
 * the few options of plan, find and eval besides; an option's text is
 * parsed when it is set, so a bad value fails at once naming the option,
 * and what depends on several options (the optimizer's defaults under
 * what was given) is resolved when a command starts. */
#ifndef BFIT_CONFIG_INT_H
#define BFIT_CONFIG_INT_H

#include "batchfit.h"
#include "batch/plan.h"
#include "batch/probe.h"
#include "train/trainer.h"

/* The commands an option belongs to. */
enum { CMD_PLAN = 1, CMD_FIND = 2, CMD_TRAIN = 4, CMD_EVAL = 8, CMD_DEVICE = 16, CMD_PROFILE = 32 };

#define BFIT_CFG_NOPT 128  /* room for the table's options (config.c checks it) */

struct bfit_config {
    bfit_train_cfg t;          /* the run's options; others' where they share them */
    /* the optimizer and lr schedule, resolved when a command starts */
    bfit_opt_kind opt_kind;
    double momentum, weight_decay;
    int mom_set, wd_set, nesterov;
    bfit_sched_kind sched_kind;
    int64_t warmup;            /* train: lr warm-up steps; find: unmeasured steps per size */
    int warmup_set;
    int64_t step_size;
    double gamma;
    /* "batch": train's one E (or auto, adaptive), plan's list */
    int batches[BFIT_PLAN_REPORT_MAX];
    int nbatches;
    int batch_given, tokens_given;
    /* plan */
    int plan_eval, ways, measure, seq, attn_lean, attn_set;
    /* find */
    bfit_probe_cfg probe;
    int limit;
    const char *plot;
    /* eval */
    const char *weights;
    /* profile */
    double rep_seconds;
    const char *matmul;
    /* owned copies of what the run's struct points to */
    bfit_batch_point bpts[BFIT_BATCH_SCHEDULE_MAX];
    bfit_mem_point mpts[BFIT_MEM_SCHEDULE_MAX];
    bfit_source src[2];
    bfit_host_alloc host;
    char *str[BFIT_CFG_NOPT];  /* the string options' copies, by option index */
    char *text[BFIT_CFG_NOPT]; /* each given option's text, as given (bfit_config_get) */
    /* what was given (in order, the names a checkpoint compares) */
    unsigned char given[BFIT_CFG_NOPT];
    const char *given_names[2 * BFIT_CFG_NOPT];
    int ngiven;
    bfit_device *device;       /* the caller's (not owned) */
    bfit_event_fn on_event;
    /* samples in the caller's memory (arrays.c), by which: 0 training, 1 test */
    struct bfit_cfg_arrays {
        const float *x;
        const int32_t *ids;    /* token arrays (bfit_config_set_token_arrays) instead of x */
        const int32_t *stream; /* a language model's token stream (bfit_config_set_token_stream): n ids */
        const int32_t *y;
        int64_t n, floats;     /* samples, floats (or ids) per sample */
        int tags;              /* token arrays: y holds a class a token (bfit_config_set_token_tags), n * floats */
    } arr[2];
    bfit_dataset *arr_sets[2]; /* a run's own configuration: the data sets made of them (owned, not copied) */
};

/* One option: its name, what it takes, which commands read it, and how its
 * text becomes the fields. */
typedef struct bfit_opt bfit_opt;
typedef int (*bfit_opt_set_fn)(bfit_config *c, const bfit_opt *o, const char *v);
struct bfit_opt {
    const char *name;          /* with '-', as the command line spells it */
    const char *takes;         /* "N", "SIZE", "" (a flag) ... */
    unsigned cmds;             /* CMD_* */
    bfit_opt_set_fn set;
    size_t off;                /* the field in bfit_config the generic setters write */
    double lo, hi;             /* the range of a number */
    const char *marks;         /* the names a checkpoint compares it by (NULL: its own, '_'-spelt) */
};

/* options.c: the table. */
const bfit_opt *bfit_opt_table(int *n);
/* The option called name ('-' or '_'), or NULL. */
const bfit_opt *bfit_opt_find(const char *name, int *index);
/* Its name with '_' (bfit_errfield's spelling). */
const char *bfit_opt_field(const bfit_opt *o);
/* The text of an option not given: its default, or what it is now. */
void bfit_opt_default_text(const bfit_config *c, const bfit_opt *o, char *buf, size_t len);
/* The defaults of every option (bfit_config_new). */
void bfit_config_defaults(bfit_config *c);

/* precision.c: the precision a command runs in: the one given, or for
 * auto bf16 where the device the command opens computes it natively
 * (bfit_device_info.bf16_fast), else f32. The commands call it as they
 * start; the option checks (bfit_config_check) open no device. */
int bfit_config_precision(const bfit_config *c, bfit_dtype *out);
/* The token length the model is loaded at: seq-max's, or seq's (0: the
 * model's own; bfit_model_source_load's seq). */
static inline int bfit_config_seq(const bfit_config *c) { return c->t.seq_max ? c->t.seq_max : c->seq; }

/* resolve.c: what each command reads, from the options. BFIT_EINVAL naming
 * the option for a given option the command does not read, or options that
 * contradict each other. */
int bfit_config_check_cmd(const bfit_config *c, unsigned cmd, const char *cmd_name);
int bfit_config_train_cfg(const bfit_config *c, bfit_train_cfg *t);
int bfit_config_optim(const bfit_config *c, bfit_optim_cfg *o);
int bfit_config_eval_cfg(const bfit_config *c, bfit_eval_cfg *e);
int bfit_config_find_cfg(const bfit_config *c, bfit_find_cfg *f);
/* The options given, as a JSON object of their texts ({"model":"mlp",
 * "batch":"auto"}), for the run's start event: its report then says how it
 * was run. *out is malloc'd. */
int bfit_config_given_json(const bfit_config *c, char **out);
/* plan's options, checked (plan.c). */
int bfit_config_plan_check(const bfit_config *c, bfit_optim_cfg *o);
/* arrays.c: the data sets of the caller's arrays for a run (own[w] the
 * caller frees after the run), set in t as its training and test sets;
 * BFIT_EINVAL naming the option for arrays that disagree with the model or
 * the other options. Nothing to do without arrays. */
int bfit_config_arrays_sets(const bfit_config *c, bfit_train_cfg *t, bfit_dataset *own[2]);
/* Whether set which (0 training, 1 test) comes from arrays (of floats or of token ids). */
int bfit_config_has_arrays(const bfit_config *c, int which);
/* BFIT_EINVAL for arrays set for a command other than train. */
int bfit_config_arrays_check(const bfit_config *c, unsigned cmd, const char *cmd_name);
/* eval: the arrays given (the test ones, or else the training ones) as the
 * set to score; *own NULL without arrays, else the caller frees it. */
int bfit_config_arrays_eval(const bfit_config *c, bfit_dataset **own);
/* "model" is given: BFIT_EINVAL naming it otherwise, saying what it takes. */
int bfit_config_need_model(const bfit_config *c, unsigned cmd);

#endif
