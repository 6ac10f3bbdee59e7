/* progress.c - a progress line for people (progress.h). */
#include "base/progress.h"
#include "base/clock.h"

#include <stdarg.h>
#include <unistd.h>

#define PLAIN_EVERY 5.0 /* seconds between plain lines */

void bfit_progress_init(bfit_progress *p, FILE *f)
{
    p->f = f;
    p->tty = f && isatty(fileno(f));
    p->open = 0;
    p->last = -1e9;
}

void bfit_progress_say(bfit_progress *p, int force, const char *fmt, ...)
{
    va_list ap;
    double t = bfit_clock_mono();
    if (!p->f || (!p->tty && !force && t - p->last < PLAIN_EVERY))
        return;
    if (p->tty)
        fputs("\r\033[K", p->f);
    va_start(ap, fmt);
    vfprintf(p->f, fmt, ap);
    va_end(ap);
    if (p->tty) {
        p->open = 1;
    } else {
        fputc('\n', p->f);
        p->last = t;
    }
    fflush(p->f);
}

void bfit_progress_end(bfit_progress *p)
{
    if (p->f && p->open) {
        fputs("\r\033[K", p->f);
        fflush(p->f);
    }
    p->open = 0;
}
