/* mlm.c - the masked-LM objective's special ids as text: how an option
 * and a checkpoint spell them ("101,102,0"), parsed and written in one
 * place; and how many masked tokens a gathered head takes a sequence. */
#include "base/err.h"
#include "data/data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int bfit_mlm_special_parse(const char *t, bfit_mlm *m)
{
    const char *p = t;
    m->nspecial = 0;
    while (p && *p) {
        char *end;
        long v;
        errno = 0;
        v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > BFIT_TOKEN_ID_MASK || (*end && *end != ','))
            return bfit_fail(BFIT_EINVAL, "'%s' at column %d: expected ids from 0 to %d, separated by commas, "
                             "like 0,100,101,102,103", t, (int)(p - t) + 1, BFIT_TOKEN_ID_MASK);
        if (m->nspecial == BFIT_MLM_SPECIAL_MAX)
            return bfit_fail(BFIT_EINVAL, "'%s': at most %d ids", t, BFIT_MLM_SPECIAL_MAX);
        m->special[m->nspecial++] = (int32_t)v;
        p = *end ? end + 1 : end;
        if (*end && !*p)
            return bfit_fail(BFIT_EINVAL, "'%s' ends in a comma: expected an id after it", t);
    }
    return BFIT_OK;
}

void bfit_mlm_special_text(const bfit_mlm *m, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < m->nspecial && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%d", i ? "," : "", (int)m->special[i]);
}

int bfit_mlm_max_pred(double p, int T)
{
    double mu = p * T, k = ceil(mu + 4 * sqrt(mu * (1 - p))) + 1;
    return k < T ? (int)k : T;
}
