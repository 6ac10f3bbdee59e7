/* progress.h - a progress line for people: redrawn in place on a terminal,
 * plain lines (at most one every few seconds) otherwise. For the parts of
 * the library below the run's log (find's probe). */
#ifndef BFIT_PROGRESS_H
#define BFIT_PROGRESS_H

#include <stdio.h>

typedef struct bfit_progress {
    FILE *f;           /* NULL: quiet */
    int tty, open;     /* a terminal; a line is on screen without its newline */
    double last;       /* when the last plain line went out */
} bfit_progress;

void bfit_progress_init(bfit_progress *p, FILE *f);
/* The line now (a plain line only every few seconds unless force). */
void bfit_progress_say(bfit_progress *p, int force, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* End a line left open on a terminal (before other output). */
void bfit_progress_end(bfit_progress *p);

#endif
