/* values.c - one parser and one set of limits for each kind of value a
 * configuration holds (whole numbers, capacities), shared by the command
 * line and the schedule parsers, so no option accepts what another refuses. */
#include "base/err.h"
#include "base/values.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int bfit_parse_int(const char *text, int64_t min, int64_t max, int64_t *out)
{
    const char *p = text;
    int neg = 0;
    uint64_t v = 0;

    if (!text || !*text)
        return bfit_fail(BFIT_EINVAL, "'' is not a whole number");
    if (*p == '-' || *p == '+')
        neg = *p++ == '-';
    if (*p < '0' || *p > '9')
        return bfit_fail(BFIT_EINVAL, "'%s' is not a whole number", text);
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - 9) / 10) { /* far past any limit: stop before it wraps */
            while (*p >= '0' && *p <= '9')
                p++;
            if (*p)
                return bfit_fail(BFIT_EINVAL, "'%s' is not a whole number", text);
            return bfit_fail(BFIT_EINVAL, "%s is out of range: expected %lld to %lld", text, (long long)min,
                             (long long)max);
        }
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (*p)
        return bfit_fail(BFIT_EINVAL, "'%s' is not a whole number", text);
    if ((!neg && v > (uint64_t)max) || (neg && (min >= 0 ? v > 0 : v > (uint64_t)-(min + 1) + 1)) ||
        (!neg && (int64_t)v < min))
        return bfit_fail(BFIT_EINVAL, "%s is out of range: expected %lld to %lld", text, (long long)min,
                         (long long)max);
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return BFIT_OK;
}

int bfit_parse_double(const char *text, double min, double max, double *out)
{
    char *end;
    double x;

    if (!text || !*text)
        return bfit_fail(BFIT_EINVAL, "'' is not a number: expected %g to %g", min, max);
    errno = 0;
    x = strtod(text, &end);
    if (*end || end == text)
        return bfit_fail(BFIT_EINVAL, "'%s' is not a number: expected %g to %g", text, min, max);
    if (isnan(x) || isinf(x)) {
        if (errno == ERANGE)
            return bfit_fail(BFIT_EINVAL, "%s is too large for a number: expected %g to %g", text, min, max);
        return bfit_fail(BFIT_EINVAL, "'%s' is not a finite number: expected %g to %g", text, min, max);
    }
    if (errno == ERANGE) /* underflow: the value is 0 or a denormal, not what was written */
        return bfit_fail(BFIT_EINVAL, "%s is too small to represent (it would round to %g): expected %g to %g",
                         text, x, min, max);
    if (x < min || x > max)
        return bfit_fail(BFIT_EINVAL, "%s is out of range: expected %g to %g", text, min, max);
    *out = x;
    return BFIT_OK;
}

int bfit_parse_flag(const char *text, int *on)
{
    static const char *const yes[] = {"", "1", "true", "yes", "on"}, *const no[] = {"0", "false", "no", "off"};

    for (size_t i = 0; !text || i < sizeof yes / sizeof yes[0]; i++)
        if (!text || !strcasecmp(text, yes[i])) {
            *on = 1;
            return BFIT_OK;
        }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        if (!strcasecmp(text, no[i])) {
            *on = 0;
            return BFIT_OK;
        }
    return bfit_fail(BFIT_EINVAL, "'%s' is not yes or no: a flag takes nothing, 1/0, true/false, yes/no", text);
}

int bfit_parse_capacity(const char *text, uint64_t *out)
{
    int rc = bfit_parse_size(text, out);
    if (rc != BFIT_OK)
        return rc;
    if (*out == 0)
        return bfit_fail(BFIT_EINVAL, "a size of 0 bytes leaves no memory: expected e.g. 512MiB");
    return BFIT_OK;
}

/* "Ns", "Nmin", "Nh" (N a non-negative decimal, a fraction allowed) into
 * seconds; 0 if text has no time unit (*is_time 0), -1 if it is malformed. */
static int parse_time(const char *text, double *seconds, int *is_time)
{
    static const struct { const char *unit; double mult; } units[] = {{"s", 1}, {"min", 60}, {"h", 3600}};
    const char *p = text;
    double v = 0, scale = 1;
    int digits = 0;

    *is_time = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++)
        v = v * 10 + (*p - '0');
    if (*p == '.')
        for (p++; *p >= '0' && *p <= '9'; p++, digits++)
            v += (*p - '0') * (scale /= 10);
    if (!digits)
        return -1;
    if (!*p)
        return 0;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcmp(p, units[i].unit)) {
            *seconds = v * units[i].mult;
            *is_time = 1;
            return isfinite(*seconds) && *seconds < 1e12 ? 0 : -2; /* -2: a time, too long */
        }
    return -1;
}

int bfit_parse_every(const char *text, int64_t *steps, double *seconds)
{
    int is_time;
    *steps = 0;
    *seconds = 0;
    if (!text || parse_time(text, seconds, &is_time) != 0)
        return bfit_fail(BFIT_EINVAL, "'%s' is neither a number of steps nor a time (like 500, 30s, 10min, 2h)",
                         text ? text : "");
    if (!is_time)
        return bfit_parse_int(text, 1, BFIT_COUNT_MAX, steps);
    if (!(*seconds > 0))
        return bfit_fail(BFIT_EINVAL, "'%s': the time must be more than 0", text);
    return BFIT_OK;
}

/* A duration: seconds (a number, 1.5 too) or a time with its unit. */
int bfit_parse_duration(const char *text, double *seconds)
{
    int is_time, rc = text ? parse_time(text, seconds, &is_time) : -1;

    if (rc == 0 && !is_time && bfit_parse_double(text, 0, 1e9, seconds) != BFIT_OK)
        rc = -2;
    if (rc == 0 && *seconds > 1e9)
        rc = -2;
    if (rc == -2)
        return bfit_fail(BFIT_EINVAL, "'%s' is out of range: at most 1e9 seconds (about 31 years)", text);
    if (rc != 0) {
        *seconds = 0;
        return bfit_fail(BFIT_EINVAL, "'%s' is not a duration (like 90, 1.5, 30s, 5min, 1h)", text ? text : "");
    }
    return BFIT_OK;
}
