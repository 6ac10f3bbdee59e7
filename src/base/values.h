/* values.h - one parser and one set of limits for each kind of value:
 * the options, the schedules and the configuration fields obey them alike. */
#ifndef BFIT_VALUES_H
#define BFIT_VALUES_H

#include "batchfit.h"
#include <stdint.h>

/* ---- values: one parser and one set of limits for each kind --------------- */
/* Limits every option, schedule and configuration field of that kind obeys
 * (the command line, the schedule parsers and bfit_run_new alike). */
#define BFIT_BATCH_MAX (1 << 24)                  /* samples in a batch or micro-batch */
#define BFIT_COUNT_MAX ((int64_t)1000000000000000) /* optimizer steps, samples (10^15) */
#define BFIT_EPOCHS_MAX 1000000
/* A whole decimal number (optional sign, digits, nothing else) in
 * [min, max]; BFIT_EINVAL: "'x' is not a whole number" or "N is out of
 * range: expected MIN to MAX" (no overflow, however long). */
int bfit_parse_int(const char *text, int64_t min, int64_t max, int64_t *out);
/* A finite decimal number in [min, max] (strtod's syntax): BFIT_EINVAL
 * saying what is wrong: not a number, not finite (inf, nan), too large or
 * too small to represent (1e309, 1e-400), out of range. */
int bfit_parse_double(const char *text, double min, double max, double *out);
/* A flag's value: NULL, "", 1, true, yes, on; or 0, false, no, off. */
int bfit_parse_flag(const char *text, int *on);
/* A memory capacity: bfit_parse_size, and not 0. */
int bfit_parse_capacity(const char *text, uint64_t *out);
/* How often: "N" optimizer steps (1..BFIT_COUNT_MAX), or a time: "Ns",
 * "Nmin", "Nh" (N may have a fraction; more than 0). Sets one of *steps and
 * *seconds, the other to 0. */
int bfit_parse_every(const char *text, int64_t *steps, double *seconds);
/* A duration: "N" or "Ns" seconds, "Nmin", "Nh"; 0 allowed. */
int bfit_parse_duration(const char *text, double *seconds);


/* Points a batch schedule may have. */
#define BFIT_BATCH_SCHEDULE_MAX 64

#endif
