/* log.c - JSON-lines events and human progress. */
#include "base/clock.h"
#include "base/err.h"
#include "train/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int bfit_log_open(bfit_log *lg, const char *json_path, FILE *human, double interval)
{
    return bfit_log_open_at(lg, json_path, human, interval, -1);
}

int bfit_log_open_at(bfit_log *lg, const char *json_path, FILE *human, double interval, int64_t at)
{
    memset(lg, 0, sizeof *lg);
    lg->human = human;
    lg->tty = human && isatty(fileno(human));
    lg->interval = interval;
    lg->last_plain = -1e9;
    if (json_path && strcmp(json_path, "-") != 0) {
        snprintf(lg->path, sizeof lg->path, "%s", json_path);
        lg->json = fopen(json_path, at >= 0 ? "r+" : "w");
        if (!lg->json)
            return bfit_fail(BFIT_EIO, "%s: cannot open the log for writing: %s", json_path, strerror(errno));
        if (at >= 0 && (ftruncate(fileno(lg->json), (off_t)at) != 0 || fseek(lg->json, (long)at, SEEK_SET) != 0)) {
            int e = errno;
            fclose(lg->json);
            lg->json = NULL;
            return bfit_fail(BFIT_EIO, "%s: cannot continue the log at byte %lld: %s", json_path, (long long)at,
                             strerror(e));
        }
    }
    return BFIT_OK;
}

void bfit_log_close(bfit_log *lg)
{
    if (lg->line_open && lg->human) {
        fputc('\n', lg->human);
        lg->line_open = 0;
    }
    if (lg->json)
        fclose(lg->json);
    lg->json = NULL;
}

/* A log that cannot be written (a full disk) is given up, cut back to its
 * last whole line so that it still reads as a log, and said once on the
 * human side: the training goes on, it is worth more than its log. */
static void write_line(bfit_log *lg, const char *line)
{
    long whole = ftell(lg->json);
    int e, fd;

    errno = 0;
    if (fputs(line, lg->json) >= 0 && fputc('\n', lg->json) != EOF && fflush(lg->json) == 0)
        return;
    e = errno ? errno : EIO;
    fd = dup(fileno(lg->json));
    fclose(lg->json); /* its last flush may yet write part of the line: cut after it */
    lg->json = NULL;
    if (fd < 0 || whole < 0 || ftruncate(fd, (off_t)whole) != 0)
        whole = -1;
    if (fd >= 0)
        close(fd);
    lg->json_failed = 1;
    if (lg->human) {
        if (lg->line_open)
            fputc('\n', lg->human);
        lg->line_open = 0;
        fprintf(lg->human, "batchfit: warning: the event log %s cannot be written (%s): it ends %s; the training "
                "goes on\n", lg->path, strerror(e), whole >= 0 ? "at its last whole event" : "where the write failed");
        fflush(lg->human);
    }
}

void bfit_log_event(bfit_log *lg, const char *event, const char *fmt, ...)
{
    va_list ap;
    struct timespec ts;
    char head[96], *body = NULL, *line = NULL;
    if (!lg->json && !lg->on_event)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(head, sizeof head, "{\"event\":\"%s\",\"time\":%.3f", event, (double)ts.tv_sec + ts.tv_nsec * 1e-9);
    if (fmt && *fmt) {
        va_start(ap, fmt);
        if (vasprintf(&body, fmt, ap) < 0)
            body = NULL;
        va_end(ap);
    }
    if (asprintf(&line, "%s%s%s}", head, body ? "," : "", body ? body : "") < 0)
        line = NULL;
    free(body);
    if (!line)
        return; /* out of host memory: the event is lost, the run goes on */
    if (lg->json)
        write_line(lg, line);
    if (lg->on_event)
        lg->on_event(lg->ud, line);
    free(line);
}

void bfit_log_progress(bfit_log *lg, int force, const char *fmt, ...)
{
    va_list ap;
    double t = bfit_clock_mono();
    if (!lg->human)
        return;
    if (!lg->tty && !force && t - lg->last_plain < lg->interval)
        return;
    if (lg->tty)
        fputs("\r\033[K", lg->human);
    va_start(ap, fmt);
    vfprintf(lg->human, fmt, ap);
    va_end(ap);
    if (lg->tty) {
        lg->line_open = 1;
    } else {
        fputc('\n', lg->human);
        lg->last_plain = t;
    }
    fflush(lg->human);
}

void bfit_log_say(bfit_log *lg, const char *fmt, ...)
{
    va_list ap;
    if (!lg->human)
        return;
    if (lg->line_open) {
        fputs("\r\033[K", lg->human);
        lg->line_open = 0;
    }
    va_start(ap, fmt);
    vfprintf(lg->human, fmt, ap);
    va_end(ap);
    fputc('\n', lg->human);
    fflush(lg->human);
}
