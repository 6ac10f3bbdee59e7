/* log.h - what a run tells: a JSON-lines event log for programs, and for
 * people a progress line on a terminal or plain periodic lines otherwise. */
#ifndef BFIT_LOG_H
#define BFIT_LOG_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

typedef struct bfit_log {
    FILE *json;        /* NULL: no event log (or one given up: json_failed) */
    int json_failed;   /* a write failed (a full disk): the log was cut to its last whole line */
    char path[512];    /* the event log's, for that message */
    FILE *human;       /* NULL: quiet */
    int tty;           /* human is a terminal: redraw one line */
    int line_open;     /* a progress line is on screen without its newline */
    double last_plain; /* time of the last plain progress line */
    double interval;   /* seconds between plain progress lines */
    void (*on_event)(void *ud, const char *json); /* each event's line too (NULL: none) */
    void *ud;
} bfit_log;

/* Open path for the event log ("-": none). BFIT_EIO naming the path. */
int bfit_log_open(bfit_log *lg, const char *json_path, FILE *human, double interval);
/* The same, continuing an existing log cut to `at` bytes (a run resumed
 * from a checkpoint taken when the log was that long); at < 0: a new log. */
int bfit_log_open_at(bfit_log *lg, const char *json_path, FILE *human, double interval, int64_t at);
void bfit_log_close(bfit_log *lg);
/* One event: fields is the inside of a JSON object ("\"a\":1,\"b\":2"). */
void bfit_log_event(bfit_log *lg, const char *event, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A progress update: redrawn on a terminal; on a pipe printed at most every
 * interval seconds unless force. */
void bfit_log_progress(bfit_log *lg, int force, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A line for people that stays (ends any progress line first). */
void bfit_log_say(bfit_log *lg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
