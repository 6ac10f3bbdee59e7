/* report_log.c - reading a run's JSON-lines event log for the run report.
 * Every line must be an event (a JSON object with an "event" name); the
 * events the report draws must carry the fields it draws, so that a wrong
 * or cut log is refused with its line instead of drawn wrong, but for a
 * last line cut short (a killed writer), which is left out. Events of
 * kinds it does not know are skipped (a newer log). */
#include "base/err.h"
#include "base/text.h"
#include "train/report_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rd {
    rp_log *L;
    int line;
} rd;

static int grow(void **p, size_t *cap, size_t n, size_t size)
{
    void *q;
    size_t c;
    if (n < *cap)
        return BFIT_OK;
    c = *cap ? *cap * 2 : 64;
    q = realloc(*p, c * size);
    if (!q)
        return bfit_fail(BFIT_ENOMEM, "out of host memory reading the log");
    *p = q;
    *cap = c;
    return BFIT_OK;
}

/* A number the event must have. */
static int num(const rd *r, const cJSON *o, const char *ev, const char *name, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(v))
        return bfit_fail(BFIT_EFORMAT, "%s:%d: a \"%s\" event without the number \"%s\"%s", r->L->path, r->line, ev,
                         name, v ? " (it is there, but not a number)" : "");
    *out = v->valuedouble;
    return BFIT_OK;
}

/* A number the event may have. */
static double opt_num(const cJSON *o, const char *name, double dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static const char *opt_str(const cJSON *o, const char *name, const char *dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

static int add_step(rd *r, const cJSON *o)
{
    rp_log *L = r->L;
    rp_step s;
    int rc;
    memset(&s, 0, sizeof s);
    if ((rc = num(r, o, "step", "step", &s.step)) || (rc = num(r, o, "step", "loss", &s.loss)) ||
        (rc = num(r, o, "step", "E", &s.E)) || (rc = num(r, o, "step", "m", &s.m)) ||
        (rc = num(r, o, "step", "k", &s.k)) || (rc = num(r, o, "step", "mem", &s.mem)) ||
        (rc = num(r, o, "step", "capacity", &s.capacity)) || (rc = num(r, o, "step", "seconds", &s.seconds)))
        return rc;
    s.lr = opt_num(o, "lr", 0);
    s.noise = opt_num(o, "noise_scale", 0);
    s.gnorm = opt_num(o, "grad_norm", -1);
    s.data_share = opt_num(o, "data_share", -1);
    if ((rc = grow((void **)&L->st, &L->cst, L->nst, sizeof s)) != BFIT_OK)
        return rc;
    L->st[L->nst++] = s;
    return BFIT_OK;
}

static int add_eval(rd *r, const cJSON *o)
{
    rp_log *L = r->L;
    rp_eval e;
    int rc;
    if ((rc = num(r, o, "eval", "step", &e.step)) || (rc = num(r, o, "eval", "test_loss", &e.test_loss)) ||
        (rc = num(r, o, "eval", "test_acc", &e.test_acc)))
        return rc;
    if ((rc = grow((void **)&L->ev, &L->cev, L->nev, sizeof e)) != BFIT_OK)
        return rc;
    L->ev[L->nev++] = e;
    return BFIT_OK;
}

/* The step of the last step event: where an event without a step of its
 * own happened. */
static double last_step(const rp_log *L)
{
    return L->nst ? L->st[L->nst - 1].step + 1 : 0;
}

/* batch_change, batch_hold, memory, warning, error: a marker with what happened. */
static int add_mark(rd *r, const cJSON *o, const char *kind)
{
    rp_log *L = r->L;
    rp_mark mk;
    char text[1024], b[32];
    int rc;

    mk.kind = kind;
    mk.step = opt_num(o, "step", last_step(L));
    if (!strcmp(kind, "batch_change")) {
        if ((rc = num(r, o, kind, "step", &mk.step)) != BFIT_OK)
            return rc;
        snprintf(text, sizeof text, "%s", opt_str(o, "why", opt_str(o, "reason", "the batch changed")));
    } else if (!strcmp(kind, "memory")) {
        double cap = 0;
        if ((rc = num(r, o, kind, "step", &mk.step)) != BFIT_OK || (rc = num(r, o, kind, "capacity", &cap)) != BFIT_OK)
            return rc;
        snprintf(text, sizeof text, "device capacity is now %s", bfit_format_size((uint64_t)cap, b, sizeof b));
    } else if (!strcmp(kind, "batch_hold")) { /* a change the loader's speed held back */
        snprintf(text, sizeof text, "%s", opt_str(o, "why", "the loader held the batch"));
    } else if (!strcmp(kind, "warning")) {
        snprintf(text, sizeof text, "%s", opt_str(o, "what", "(no text)"));
    } else {
        snprintf(text, sizeof text, "%s: %s", opt_str(o, "code", "error"), opt_str(o, "message", "(no message)"));
    }
    if ((rc = grow((void **)&L->mk, &L->cmk, L->nmk, sizeof mk)) != BFIT_OK)
        return rc;
    if (!(mk.text = strdup(text)))
        return bfit_fail(BFIT_ENOMEM, "out of host memory reading the log");
    L->mk[L->nmk++] = mk;
    return BFIT_OK;
}

/* monitor: a sample of the device for its charts; a change of its clock
 * throttling is a mark (a GPU slowed down by power or heat as the batch
 * changed shows on every chart). */
static int add_monitor(rd *r, const cJSON *o)
{
    rp_log *L = r->L;
    rp_mon m;
    const char *thr = opt_str(o, "throttled", NULL);
    int rc;
    if ((rc = num(r, o, "monitor", "step", &m.step)) != BFIT_OK)
        return rc;
    m.busy = opt_num(o, "busy", -1);
    m.self = opt_num(o, "self_bytes", -1);
    m.others = opt_num(o, "others_bytes", -1);
    if ((rc = grow((void **)&L->mon, &L->cmon, L->nmon, sizeof m)) != BFIT_OK)
        return rc;
    L->mon[L->nmon++] = m;
    if (thr && strcmp(thr, L->throttled) != 0) {
        rp_mark mk = {m.step, "throttle", NULL};
        char text[256];
        if (thr[0])
            snprintf(text, sizeof text, "the device is slowed down: %s", thr);
        else
            snprintf(text, sizeof text, "the device is no longer slowed down");
        snprintf(L->throttled, sizeof L->throttled, "%s", thr);
        if ((rc = grow((void **)&L->mk, &L->cmk, L->nmk, sizeof mk)) != BFIT_OK)
            return rc;
        if (!(mk.text = strdup(text)))
            return bfit_fail(BFIT_ENOMEM, "out of host memory reading the log");
        L->mk[L->nmk++] = mk;
    }
    return BFIT_OK;
}

/* start, end, error: the whole event is kept (its fields are shown as they
 * are). *keep is set when o now belongs to L. */
static int keep_event(rd *r, cJSON *o, const char *ev, int *keep)
{
    rp_log *L = r->L;
    cJSON **slot = !strcmp(ev, "start") ? &L->start : !strcmp(ev, "end") ? &L->end : &L->error;
    if (*slot)
        return bfit_fail(BFIT_EFORMAT, "%s:%d: a second \"%s\" event: a log holds one run", L->path, r->line, ev);
    *slot = o;
    *keep = 1;
    return BFIT_OK;
}

static int add_event(rd *r, cJSON *o, int *keep)
{
    static const char *marks[] = {"batch_change", "batch_hold", "memory", "warning", "error"};
    const char *ev = opt_str(o, "event", NULL);
    int rc = BFIT_OK;

    if (!ev)
        return bfit_fail(BFIT_EFORMAT, "%s:%d: not an event: the object has no \"event\" name", r->L->path, r->line);
    r->L->nevents++;
    if (!strcmp(ev, "step"))
        return add_step(r, o);
    if (!strcmp(ev, "eval"))
        return add_eval(r, o);
    if (!strcmp(ev, "monitor"))
        return add_monitor(r, o);
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++)
        if (!strcmp(ev, marks[i]) && (rc = add_mark(r, o, marks[i])) != BFIT_OK)
            return rc;
    if (!strcmp(ev, "start") || !strcmp(ev, "end") || !strcmp(ev, "error"))
        rc = keep_event(r, o, ev, keep);
    return rc;
}

static int blank(const char *s)
{
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\r' && *s != '\n')
            return 0;
    return 1;
}

static int read_line(rd *r, char *line)
{
    const char *end = NULL;
    cJSON *o;
    int keep = 0, rc;
    size_t n = strlen(line);
    int whole = n && line[n - 1] == '\n'; /* only the last line can lack it */

    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    if (blank(line))
        return BFIT_OK;
    o = cJSON_ParseWithOpts(line, &end, 1);
    if (!o && !whole) { /* the writer died mid-line: the lines before it are the run's */
        r->L->cut_last = 1;
        return BFIT_OK;
    }
    if (!o)
        return bfit_fail(BFIT_EFORMAT, "%s:%d: not valid JSON (at column %d)%s", r->L->path, r->line,
                         end ? (int)(end - line) + 1 : 1,
                         end && !*end ? ": the line ends early (a cut log?)" : "");
    if (!cJSON_IsObject(o))
        rc = bfit_fail(BFIT_EFORMAT, "%s:%d: not an event: a JSON object was expected", r->L->path, r->line);
    else
        rc = add_event(r, o, &keep);
    if (!keep)
        cJSON_Delete(o);
    return rc;
}

int bfit_rp_log_read(const char *path, rp_log *L)
{
    FILE *f;
    char *line = NULL;
    size_t cap = 0;
    rd r;
    int rc = BFIT_OK;

    memset(L, 0, sizeof *L);
    L->path = path;
    if (!(f = fopen(path, "r")))
        return bfit_fail(BFIT_EIO, "%s: cannot open the log: %s", path, strerror(errno));
    r.L = L;
    r.line = 0;
    errno = 0;
    while (rc == BFIT_OK && getline(&line, &cap, f) != -1) {
        r.line++;
        rc = read_line(&r, line);
    }
    if (rc == BFIT_OK && ferror(f))
        rc = bfit_fail(BFIT_EIO, "%s: cannot read the log: %s", path, strerror(errno));
    free(line);
    fclose(f);
    if (rc == BFIT_OK && L->nevents == 0)
        rc = bfit_fail(BFIT_EFORMAT, "%s: the log is empty: it holds no events", path);
    if (rc != BFIT_OK)
        bfit_rp_log_free(L);
    return rc;
}

void bfit_rp_log_free(rp_log *L)
{
    cJSON_Delete(L->start);
    cJSON_Delete(L->end);
    cJSON_Delete(L->error);
    for (size_t i = 0; i < L->nmk; i++)
        free(L->mk[i].text);
    free(L->st);
    free(L->ev);
    free(L->mk);
    free(L->mon);
    memset(L, 0, sizeof *L);
}
