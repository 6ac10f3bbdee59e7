/* values.c - one parser and one set of limits for each kind of value a
 * configuration holds (whole numbers, capacities), shared by the command
 * line and the schedule parsers, so no option accepts what another refuses. */
#include "base/err.h"

#include <stdint.h>

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

int bfit_parse_capacity(const char *text, uint64_t *out)
{
    int rc = bfit_parse_size(text, out);
    if (rc != BFIT_OK)
        return rc;
    if (*out == 0)
        return bfit_fail(BFIT_EINVAL, "a size of 0 bytes leaves no memory: expected e.g. 512MiB");
    return BFIT_OK;
}
