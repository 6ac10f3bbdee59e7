/* sched_parse.c - the batch and the memory schedule: one list syntax
 * ("AT:VALUE, AT:VALUE"), one scanner, and the limits of bfit_parse_int and
 * bfit_parse_capacity, so the two options accept and refuse alike (and like
 * --batch, --max-steps and --memory). Messages name the character. */
#include "base/err.h"
#include "base/values.h"
#include "batch/memsched.h"

#include <stdio.h>
#include <string.h>

#define POS(p) ((int)((p) - text) + 1)

static const char *skip_blanks(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/* The digits at *p as a number in [0, max]: 0, -1 no digits, -2 past max
 * (all the digits are consumed either way). */
static int scan_whole(const char **p, int64_t max, int64_t *v)
{
    const char *s = *p;
    int64_t x = 0;
    int over = 0;

    if (*s < '0' || *s > '9')
        return -1;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (!over && x > (max - (*s - '0')) / 10)
            over = 1;
        if (!over)
            x = x * 10 + (*s - '0');
    }
    *p = s;
    *v = x;
    return over ? -2 : 0;
}

/* After an item: blanks, then ',' (another item follows: *more = 1) or the
 * end. */
static int item_end(const char *text, const char **p, const char *what, int *more)
{
    *p = skip_blanks(*p);
    *more = **p == ',';
    if (!**p || *more) {
        *p += *more;
        return BFIT_OK;
    }
    return bfit_fail(BFIT_EINVAL, "%s '%s': at character %d: expected ',' or the end", what, text, POS(*p));
}

/* The AT of an item: a step number, or with epochs_ok 'e' and an epoch. */
static int scan_at(const char *text, const char **p, const char *what, int epochs_ok, int64_t *at, int *by_epoch)
{
    const char *q;
    int r;

    *p = skip_blanks(*p);
    *by_epoch = epochs_ok && (**p == 'e' || **p == 'E');
    *p += *by_epoch;
    q = *p;
    r = scan_whole(p, *by_epoch ? BFIT_EPOCHS_MAX : BFIT_COUNT_MAX, at);
    if (r == -1)
        return bfit_fail(BFIT_EINVAL, "%s '%s': at character %d: expected a step number%s", what, text, POS(q),
                         epochs_ok ? " or 'e' and an epoch number (like 0:32,1000:64 or e0:32,e2:64)"
                                   : " (like 200:150MiB,400:1GiB)");
    if (r == -2)
        return bfit_fail(BFIT_EINVAL, "%s '%s': at character %d: %s %.*s is out of range: expected 0 to %lld", what,
                         text, POS(q), *by_epoch ? "epoch" : "step", (int)(*p - q), q,
                         (long long)(*by_epoch ? BFIT_EPOCHS_MAX : BFIT_COUNT_MAX));
    if (**p != ':')
        return bfit_fail(BFIT_EINVAL, "%s '%s': at character %d: expected ':' after %s %lld", what, text, POS(*p),
                         *by_epoch ? "epoch" : "step", (long long)*at);
    (*p)++;
    return BFIT_OK;
}

static int check_order(const char *text, const char *what, int k, int64_t at, int64_t prev, int by_epoch)
{
    if (k > 0 && at <= prev)
        return bfit_fail(BFIT_EINVAL, "%s '%s': point %d: %s %lld does not come after %lld", what, text, k + 1,
                         by_epoch ? "epoch" : "step", (long long)at, (long long)prev);
    return BFIT_OK;
}

int bfit_batch_schedule_parse(const char *text, bfit_batch_point *out, int max, int *n)
{
    static const char what[] = "batch schedule";
    const char *p = text, *q;
    int count = 0, more = 1, rc;

    if (!text || !out || !n || max < 1)
        return bfit_fail(BFIT_EINVAL, "batch schedule: no text or no room");
    *n = 0;
    while (more) {
        bfit_batch_point pt = {0};
        int64_t v;

        if ((rc = scan_at(text, &p, what, 1, &pt.at, &pt.by_epoch)) != BFIT_OK)
            return rc;
        q = p = skip_blanks(p);
        if (scan_whole(&p, BFIT_BATCH_MAX, &v) != 0 || v < 1)
            return bfit_fail(BFIT_EINVAL, "%s '%s': at character %d: expected a batch size from 1 to %d", what, text,
                             POS(q), BFIT_BATCH_MAX);
        pt.batch = (int)v;
        if (count > 0 && pt.by_epoch != out[count - 1].by_epoch)
            return bfit_fail(BFIT_EINVAL, "%s '%s': point %d mixes epochs and steps (use one unit throughout)", what,
                             text, count + 1);
        if ((rc = check_order(text, what, count, pt.at, count ? out[count - 1].at : 0, pt.by_epoch)) != BFIT_OK)
            return rc;
        if (count == max)
            return bfit_fail(BFIT_EINVAL, "%s '%s': more than %d points", what, text, max);
        out[count++] = pt;
        if ((rc = item_end(text, &p, what, &more)) != BFIT_OK)
            return rc;
    }
    *n = count;
    return BFIT_OK;
}

int bfit_mem_schedule_parse(const char *text, bfit_mem_point *out, int max, int *n)
{
    static const char what[] = "memory schedule";
    const char *p = text, *q;
    int count = 0, more = 1, rc, by_epoch;

    if (!text || !out || !n || max < 1)
        return bfit_fail(BFIT_EINVAL, "memory schedule: no text or no room");
    *n = 0;
    while (more) {
        bfit_mem_point pt = {0};
        char size[64];
        size_t len;

        if ((rc = scan_at(text, &p, what, 0, &pt.step, &by_epoch)) != BFIT_OK)
            return rc;
        q = p = skip_blanks(p);
        len = strcspn(p, ",");
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        if (len >= sizeof size)
            return bfit_fail(BFIT_EINVAL, "%s '%s': at character %d: the size is too long", what, text, POS(q));
        memcpy(size, p, len);
        size[len] = '\0';
        if (bfit_parse_capacity(size, &pt.capacity) != BFIT_OK)
            return bfit_fail_prefix(BFIT_EINVAL, "%s '%s': at character %d: ", what, text, POS(q));
        p += len;
        if ((rc = check_order(text, what, count, pt.step, count ? out[count - 1].step : 0, 0)) != BFIT_OK)
            return rc;
        if (count == max)
            return bfit_fail(BFIT_EINVAL, "%s '%s': more than %d points", what, text, max);
        out[count++] = pt;
        if ((rc = item_end(text, &p, what, &more)) != BFIT_OK)
            return rc;
    }
    *n = count;
    return BFIT_OK;
}
