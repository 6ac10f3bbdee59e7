/* memsched.c - parsing a memory schedule. */
#include "base/err.h"
#include "batch/memsched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int bfit_mem_schedule_parse(const char *text, bfit_mem_point *out, int max, int *n)
{
    char buf[4096], *save = NULL, *item;
    int k = 0;
    if (strlen(text) >= sizeof buf)
        return bfit_fail(BFIT_EINVAL, "memory schedule is too long");
    snprintf(buf, sizeof buf, "%s", text);
    for (item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(item, ':'), *end;
        long long st;
        if (!colon)
            return bfit_fail(BFIT_EINVAL, "memory schedule item %d '%s': expected STEP:SIZE, e.g. 200:150MiB", k + 1, item);
        *colon = '\0';
        st = strtoll(item, &end, 10);
        if (!*item || *end || st < 0)
            return bfit_fail(BFIT_EINVAL, "memory schedule item %d: step '%s' is not a whole number >= 0", k + 1, item);
        if (k >= max)
            return bfit_fail(BFIT_EINVAL, "memory schedule has more than %d items", max);
        if (k > 0 && st <= out[k - 1].step)
            return bfit_fail(BFIT_EINVAL, "memory schedule item %d: step %lld is not after step %lld", k + 1, st,
                             (long long)out[k - 1].step);
        if (bfit_parse_size(colon + 1, &out[k].capacity) != BFIT_OK)
            return bfit_fail_prefix(BFIT_EINVAL, "memory schedule item %d: ", k + 1);
        out[k].step = st;
        k++;
    }
    if (k == 0)
        return bfit_fail(BFIT_EINVAL, "memory schedule is empty: expected STEP:SIZE,... e.g. 200:150MiB,400:1GiB");
    *n = k;
    return BFIT_OK;
}
