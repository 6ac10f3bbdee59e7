/* size.c - sizes with units, parsed and printed in one place. */
#include "base/err.h"
#include "base/values.h"
#include "mem/arena.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static const struct { const char *name; double mult; } units[] = {
    {"", 1}, {"B", 1},
    {"K", 1024.0}, {"KiB", 1024.0}, {"kB", 1e3}, {"KB", 1e3},
    {"M", 1048576.0}, {"MiB", 1048576.0}, {"MB", 1e6},
    {"G", 1073741824.0}, {"GiB", 1073741824.0}, {"GB", 1e9},
    {"T", 1099511627776.0}, {"TiB", 1099511627776.0}, {"TB", 1e12},
};

int bfit_parse_size(const char *text, uint64_t *out)
{
    const char *p = text;
    double whole = 0, frac = 0, scale = 1, v;
    int digits = 0;
    size_t i;

    if (!out)
        return bfit_fail(BFIT_EINVAL, "bfit_parse_size needs somewhere to put the bytes");
    if (!text || !*text)
        return bfit_fail(BFIT_EINVAL, "empty size: expected a number with an optional unit, e.g. 512MiB");
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '-')
        return bfit_fail(BFIT_EINVAL, "size '%s' is negative: expected a size such as 512MiB", text);
    if (*p == '+')
        p++;
    while (isdigit((unsigned char)*p)) {
        whole = whole * 10 + (*p++ - '0');
        digits++;
    }
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) {
            scale /= 10;
            frac += (*p++ - '0') * scale;
            digits++;
        }
    }
    if (!digits)
        return bfit_fail(BFIT_EINVAL, "size '%s' does not start with a number: expected e.g. 512MiB, 1.5GiB, 8GB", text);
    if ((*p == 'e' || *p == 'E') && (isdigit((unsigned char)p[1]) || ((p[1] == '+' || p[1] == '-') && isdigit((unsigned char)p[2]))))
        return bfit_fail(BFIT_EINVAL, "size '%s' has an exponent, which sizes do not take: write the number out "
                         "(1e3MiB is 1000MiB)", text);
    while (isspace((unsigned char)*p))
        p++;
    for (i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(p, units[i].name) == 0)
            break;
    }
    if (i == sizeof units / sizeof units[0]) {
        /* accept case variants of the binary units (mib, gib) but keep the
         * decimal/binary distinction: only exact "kB/KB/MB/GB/TB" are decimal */
        for (i = 0; i < sizeof units / sizeof units[0]; i++)
            if (strlen(units[i].name) == 3 && strcasecmp(p, units[i].name) == 0)
                break;
        if (i == sizeof units / sizeof units[0])
            return bfit_fail(BFIT_EINVAL, "size '%s' has unknown unit '%s': use B, KiB, MiB, GiB, TiB, kB, MB, GB or TB", text, p);
    }
    v = (whole + frac) * units[i].mult;
    if (!(v < 18446744073709551616.0))
        return bfit_fail(BFIT_EINVAL, "size '%s' is too large (2^64 bytes or more, counted in doubles)", text);
    if (units[i].mult == 1 && frac != 0)
        return bfit_fail(BFIT_EINVAL, "size '%s' is a fraction of a byte", text);
    *out = (uint64_t)llround(floor(v));
    if (v >= 9223372036854775808.0) /* llround is signed: redo in unsigned */
        *out = (uint64_t)floor(v);
    return BFIT_OK;
}

char *bfit_format_size(uint64_t bytes, char *buf, size_t len)
{
    static const char *names[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;

    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, len, "%.2f %s", v, names[u]);
    return buf;
}
