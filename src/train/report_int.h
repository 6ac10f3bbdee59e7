/* report_int.h - a run's event log read into memory for the run report:
 * report_log.c reads and checks the JSON lines, report.c draws the HTML. */
#ifndef BFIT_REPORT_INT_H
#define BFIT_REPORT_INT_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* One optimizer step ("step" event). */
typedef struct rp_step {
    double step, loss, lr, mem, capacity, seconds, noise;
    double gnorm; /* the global gradient norm, -1 where the step did not compute it */
    double E, m, k; /* samples in the step, micro-batch, micro-steps */
    double data_share; /* the share of the step spent waiting for samples, -1 where the log has none */
} rp_step;

/* One evaluation ("eval" event). */
typedef struct rp_eval {
    double step, test_loss, test_acc;
} rp_eval;

/* One sample of the device ("monitor" event); a field it lacks is < 0. */
typedef struct rp_mon {
    double step, busy, self, others;
} rp_mon;

/* Something that happened at a step and is marked on every chart:
 * batch_change, batch_hold, memory, warning, error, and throttle (a monitor event whose
 * clock throttling differs from the one before). */
typedef struct rp_mark {
    double step;
    const char *kind; /* one of the event names above (static) */
    char *text;       /* what happened, for people */
} rp_mark;

typedef struct rp_log {
    const char *path;
    cJSON *start, *end, *error; /* the events themselves; NULL: not in the log */
    rp_step *st;
    size_t nst, cst;
    rp_eval *ev;
    size_t nev, cev;
    rp_mark *mk;
    size_t nmk, cmk;
    rp_mon *mon;
    size_t nmon, cmon;
    char throttled[128]; /* the last monitor event's throttling, to mark its changes */
    int nevents; /* lines that were events (known or not) */
    int cut_last; /* the last line, without its newline, was cut short (a killed writer, a full disk): left out */
} rp_log;

/* Read path: BFIT_EIO if it cannot be read, BFIT_EFORMAT naming path:line
 * and what is wrong for a line that is not an event or an event that lacks
 * a field, and for a log without events. On failure L is freed. */
int bfit_rp_log_read(const char *path, rp_log *L);
void bfit_rp_log_free(rp_log *L);

#endif
