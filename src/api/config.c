/* config.c - the public configuration object: made with every default,
 * set option by option (options.c parses), copied, read back; and the
 * setters of what is not text (callbacks, the caller's samples, a device,
 * an allocator, a stop flag, where progress goes). */
#include "api/config_int.h"
#include "base/err.h"
#include "data/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bfit_config *bfit_config_new(void)
{
    bfit_config *c = calloc(1, sizeof *c);
    if (!c) {
        bfit_fail(BFIT_ENOMEM, "out of host memory for a configuration");
        return NULL;
    }
    bfit_config_defaults(c);
    return c;
}

void bfit_config_free(bfit_config *c)
{
    if (!c)
        return;
    for (int i = 0; i < BFIT_CFG_NOPT; i++) {
        free(c->str[i]);
        free(c->text[i]);
    }
    bfit_dataset_free(c->arr_sets[0]);
    bfit_dataset_free(c->arr_sets[1]);
    free(c);
}

/* The pointers into c itself, moved to point into d. */
static void repoint(bfit_config *d, const bfit_config *c)
{
    int n;
    const bfit_opt *t = bfit_opt_table(&n);
    for (int i = 0; i < n; i++)
        if (t[i].set && c->str[i])
            *(const char **)((char *)d + t[i].off) = d->str[i];
    if (c->t.batch_schedule == c->bpts)
        d->t.batch_schedule = d->bpts;
    if (c->t.memory_schedule == c->mpts)
        d->t.memory_schedule = d->mpts;
    for (int w = 0; w < 2; w++)
        if ((w ? c->t.test_source : c->t.train_source) == &c->src[w])
            *(w ? &d->t.test_source : &d->t.train_source) = &d->src[w];
    if (c->t.host == &c->host)
        d->t.host = &d->host;
}

bfit_config *bfit_config_copy(const bfit_config *c)
{
    bfit_config *d;
    if (!c || !(d = bfit_config_new()))
        return NULL;
    memcpy(d, c, sizeof *d);
    memset(d->str, 0, sizeof d->str);
    memset(d->text, 0, sizeof d->text);
    memset(d->arr_sets, 0, sizeof d->arr_sets); /* the arrays' memory is the caller's; the sets are a run's */
    for (int i = 0; i < BFIT_CFG_NOPT; i++) {
        if ((c->str[i] && !(d->str[i] = strdup(c->str[i]))) || (c->text[i] && !(d->text[i] = strdup(c->text[i])))) {
            bfit_config_free(d);
            bfit_fail(BFIT_ENOMEM, "out of host memory for a configuration");
            return NULL;
        }
    }
    repoint(d, c);
    return d;
}

/* Record that an option was given, by the names a checkpoint compares
 * (docs/checkpoints.md: options given on resuming must agree). */
static void mark_given(bfit_config *c, const bfit_opt *o, int i)
{
    static char names[BFIT_CFG_NOPT][48];
    if (c->given[i])
        return;
    c->given[i] = 1;
    if (o->marks) {
        /* "batch adaptive": static strings, two words at most */
        static const char *const batch = "batch", *const adaptive = "adaptive";
        c->given_names[c->ngiven++] = batch;
        c->given_names[c->ngiven++] = adaptive;
        return;
    }
    /* '_' spelt; the table is static, so the spelling is made once per option */
    if (!names[i][0]) {
        size_t k;
        for (k = 0; o->name[k] && k + 1 < sizeof names[i]; k++)
            names[i][k] = o->name[k] == '-' ? '_' : o->name[k];
        names[i][k] = '\0';
    }
    c->given_names[c->ngiven++] = names[i];
}

/* The closest option name, for "did you mean". */
static const char *closest(const char *name)
{
    int n, best = 1 << 30;
    const bfit_opt *t = bfit_opt_table(&n);
    const char *who = NULL;
    for (int i = 0; i < n; i++) {
        /* edit distance, small strings */
        int la = (int)strlen(name), lb = (int)strlen(t[i].name), d[64];
        if (la > 62 || lb > 62)
            continue;
        for (int j = 0; j <= lb; j++)
            d[j] = j;
        for (int a = 1; a <= la; a++) {
            int prev = d[0], cur;
            d[0] = a;
            for (int j = 1; j <= lb; j++) {
                char x = name[a - 1] == '_' ? '-' : name[a - 1];
                cur = d[j];
                d[j] = prev + (x != t[i].name[j - 1]);
                if (d[j - 1] + 1 < d[j])
                    d[j] = d[j - 1] + 1;
                if (cur + 1 < d[j])
                    d[j] = cur + 1;
                prev = cur;
            }
        }
        if (d[lb] < best) {
            best = d[lb];
            who = t[i].name;
        }
    }
    /* up to a third of the name's letters wrong ("lr-schedule" for "schedule") */
    return best <= 1 || best * 3 <= (int)strlen(name) ? who : NULL;
}

int bfit_config_set(bfit_config *c, const char *name, const char *value)
{
    int i, rc;
    const bfit_opt *o;

    if (!c || !name)
        return bfit_fail(BFIT_EINVAL, "bfit_config_set needs a configuration and an option name");
    if (!(o = bfit_opt_find(name, &i))) {
        const char *near = closest(name);
        if (near)
            return bfit_fail(BFIT_EINVAL, "unknown option '%s': did you mean '%s'?", name, near);
        return bfit_fail(BFIT_EINVAL, "unknown option '%s' (bfit_config_option lists them)", name);
    }
    if (o->takes[0] && !value)
        return bfit_fail_field(BFIT_EINVAL, bfit_opt_field(o), "needs a value (%s)", o->takes);
    rc = o->set(c, o, value);
    if (rc != BFIT_OK)
        return rc;
    free(c->text[i]);
    if (!(c->text[i] = strdup(value ? value : "")))
        return bfit_fail(BFIT_ENOMEM, "out of host memory for a configuration");
    mark_given(c, o, i);
    return BFIT_OK;
}

int bfit_config_set_int(bfit_config *c, const char *name, int64_t value)
{
    char b[32];
    snprintf(b, sizeof b, "%lld", (long long)value);
    return bfit_config_set(c, name, b);
}

int bfit_config_set_double(bfit_config *c, const char *name, double value)
{
    char b[40];
    snprintf(b, sizeof b, "%.17g", value);
    return bfit_config_set(c, name, b);
}

int bfit_config_get(const bfit_config *c, const char *name, char *buf, size_t len)
{
    int i;
    const bfit_opt *o = bfit_opt_find(name, &i);
    if (!c || !o || !buf || !len)
        return bfit_fail(BFIT_EINVAL, "unknown option '%s'", name ? name : "");
    if (c->text[i])
        snprintf(buf, len, "%s", c->text[i]);
    else
        bfit_opt_default_text(c, o, buf, len);
    return BFIT_OK;
}

const char *bfit_config_option(int i, const char **takes, const char **commands)
{
    static const char *const cmd_names[] = {"", "plan", "find", "plan find", "train", "plan train", "find train",
        "plan find train", "eval", "plan eval", "find eval", "plan find eval", "train eval", "plan train eval",
        "find train eval", "plan find train eval"};
    int n;
    const bfit_opt *t = bfit_opt_table(&n);
    if (i < 0 || i >= n)
        return NULL;
    if (takes)
        *takes = t[i].takes;
    if (commands)
        *commands = cmd_names[t[i].cmds & 15];
    return t[i].name;
}

/* ---- what is not text ----------------------------------------------------- */

int bfit_config_set_progress(bfit_config *c, FILE *human)
{
    if (!c)
        return bfit_fail(BFIT_EINVAL, "no configuration");
    c->t.human = human;
    return BFIT_OK;
}

int bfit_config_set_stop_flag(bfit_config *c, volatile sig_atomic_t *flag)
{
    if (!c)
        return bfit_fail(BFIT_EINVAL, "no configuration");
    c->t.stop = flag;
    return BFIT_OK;
}

int bfit_config_set_callbacks(bfit_config *c, bfit_step_fn on_step, bfit_eval_fn on_eval,
                              bfit_change_fn on_batch_change, bfit_event_fn on_event, void *ud)
{
    if (!c)
        return bfit_fail(BFIT_EINVAL, "no configuration");
    c->t.on_step = on_step;
    c->t.on_eval = on_eval;
    c->t.on_batch_change = on_batch_change;
    c->t.on_event = on_event;
    c->t.cb_ud = ud;
    return BFIT_OK;
}

int bfit_config_set_source(bfit_config *c, int which, bfit_take_fn take, bfit_epoch_fn next_epoch,
                           bfit_epoch_fn rewind, int64_t samples, void *ud)
{
    if (!c || (which != 0 && which != 1))
        return bfit_fail(BFIT_EINVAL, "bfit_config_set_source: which is 0 (training) or 1 (test)");
    if (!take) { /* back to the "data" option */
        *(which ? &c->t.test_source : &c->t.train_source) = NULL;
        return BFIT_OK;
    }
    if (!next_epoch || !rewind || samples < 1)
        return bfit_fail(BFIT_EINVAL, "bfit_config_set_source: needs take, next_epoch, rewind and samples >= 1");
    c->src[which] = (bfit_source){.take = take, .next_epoch = next_epoch, .rewind = rewind, .samples = samples,
                                  .ud = ud};
    *(which ? &c->t.test_source : &c->t.train_source) = &c->src[which];
    return BFIT_OK;
}

int bfit_config_set_allocator(bfit_config *c, bfit_alloc_fn alloc, bfit_free_fn free_fn, void *ud)
{
    if (!c || (!alloc) != (!free_fn))
        return bfit_fail(BFIT_EINVAL, "bfit_config_set_allocator: give both functions or neither");
    c->host = (bfit_host_alloc){.alloc = alloc, .free = free_fn, .ud = ud};
    c->t.host = alloc ? &c->host : NULL;
    return BFIT_OK;
}

int bfit_config_set_device(bfit_config *c, bfit_device *d)
{
    if (!c)
        return bfit_fail(BFIT_EINVAL, "no configuration");
    c->device = d;
    c->t.device = d;
    return BFIT_OK;
}
