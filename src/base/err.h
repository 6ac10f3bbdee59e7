/* err.h - the thread's last error message, set where a failure is found. */
#ifndef BFIT_ERR_H
#define BFIT_ERR_H

#include <stdarg.h>

#include "batchfit.h"

/* Set the message for code and return code, so callers can write
 * `return bfit_fail(BFIT_EINVAL, "bad %s", x);`. */
int bfit_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A failure about a configuration field: the message is "name: ...", and
 * bfit_errfield() gives name so a front end can say it its own way (the CLI
 * names the option). */
int bfit_fail_field(int code, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Prefix the current message with context ("loading x: " + old message). */
int bfit_fail_prefix(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void bfit_clear_error(void);
/* The message and field, kept across calls that may set their own. */
typedef struct bfit_err_state {
    char msg[1024];
    char field[64];
} bfit_err_state;
void bfit_err_save(bfit_err_state *s);
void bfit_err_restore(const bfit_err_state *s);
/* The same with a va_list (the CUDA module reports through these). */
int bfit_vfail(int code, const char *fmt, va_list ap);
int bfit_vfail_prefix(int code, const char *fmt, va_list ap);

#endif
