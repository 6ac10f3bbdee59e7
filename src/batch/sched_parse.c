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

/* Longer texts are quoted in part, so that the reason after them still fits
 * the message (its buffer is 1 KiB; a 100-point schedule is more). */
#define QUOTE_WHOLE 120
#define QUOTE_BEFORE 60
#define QUOTE_AFTER 30

/* text for a message: whole if short, else the part around the character at
 * at, "..." where cut. Returns buf. */
static const char *quote(const char *text, const char *at, char *buf, size_t n)
{
    size_t len = strlen(text), i = (size_t)(at - text), from, to;

    if (len <= QUOTE_WHOLE) {
        snprintf(buf, n, "%s", text);
        return buf;
    }
    if (i > len)
        i = len;
    from = i > QUOTE_BEFORE ? i - QUOTE_BEFORE : 0;
    to = len - i > QUOTE_AFTER ? i + QUOTE_AFTER : len;
    snprintf(buf, n, "%s%.*s%s", from ? "..." : "", (int)(to - from), text + from, to < len ? "..." : "");
    return buf;
}

#define QUOTE_MAX (QUOTE_WHOLE + 1) /* and more than QUOTE_BEFORE + QUOTE_AFTER + 6 */
#define Q(at) quote(text, (at), qb, sizeof qb)

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
    char qb[QUOTE_MAX];

    *p = skip_blanks(*p);
    *more = **p == ',';
    if (!**p || *more) {
        *p += *more;
        return BFIT_OK;
    }
    return bfit_fail(BFIT_EINVAL, "%s '%s': at character %d: expected ',' or the end", what, Q(*p), POS(*p));
}

/* The AT of an item: a step number, or with epochs_ok 'e' and an epoch. */
static int scan_at(const char *text, const char **p, const char *what, int epochs_ok, int64_t *at, int *by_epoch)
{
    const char *q;
    char qb[QUOTE_MAX];
    int r;

    *p = skip_blanks(*p);
    *by_epoch = epochs_ok && (**p == 'e' || **p == 'E');
    *p += *by_epoch;
    q = *p;
    r = scan_whole(p, *by_epoch ? BFIT_EPOCHS_MAX : BFIT_COUNT_MAX, at);
    if (r == -1)
        return bfit_fail(BFIT_EINVAL, "%s '%s': at character %d: expected a step number%s", what, Q(q), POS(q),
                         epochs_ok ? " or 'e' and an epoch number (like 0:32,1000:64 or e0:32,e2:64)"
                                   : " (like 200:150MiB,400:1GiB)");
    if (r == -2)
        return bfit_fail(BFIT_EINVAL, "%s '%s': at character %d: %s %.*s is out of range: expected 0 to %lld", what,
                         Q(q), POS(q), *by_epoch ? "epoch" : "step", (int)(*p - q), q,
                         (long long)(*by_epoch ? BFIT_EPOCHS_MAX : BFIT_COUNT_MAX));
    if (**p != ':')
        return bfit_fail(BFIT_EINVAL, "%s '%s': at character %d: expected ':' after %s %lld", what, Q(*p), POS(*p),
                         *by_epoch ? "epoch" : "step", (long long)*at);
    (*p)++;
    return BFIT_OK;
}

/* The point k (its text at item) after the one before, and within max. */
static int check_point(const char *text, const char *item, const char *what, int k, int max, int64_t at,
                       int64_t prev, int by_epoch)
{
    char qb[QUOTE_MAX];

    item = skip_blanks(item);
    if (k > 0 && at <= prev)
        return bfit_fail(BFIT_EINVAL, "%s '%s': point %d: %s %lld does not come after %lld", what, Q(item), k + 1,
                         by_epoch ? "epoch" : "step", (long long)at, (long long)prev);
    if (k == max)
        return bfit_fail(BFIT_EINVAL, "%s '%s': at character %d: point %d: more than %d points (the most it holds)",
                         what, Q(item), POS(item), k + 1, max);
    return BFIT_OK;
}

int bfit_batch_schedule_parse(const char *text, bfit_batch_point *out, int max, int *n)
{
    static const char what[] = "batch schedule";
    const char *p = text, *q, *item;
    char qb[QUOTE_MAX];
    int count = 0, more = 1, rc;

    if (!text || !out || !n || max < 1)
        return bfit_fail(BFIT_EINVAL, "batch schedule: no text or no room");
    *n = 0;
    while (more) {
        bfit_batch_point pt = {0};
        int64_t v;

        item = p;
        if ((rc = scan_at(text, &p, what, 1, &pt.at, &pt.by_epoch)) != BFIT_OK)
            return rc;
        q = p = skip_blanks(p);
        if (scan_whole(&p, BFIT_BATCH_MAX, &v) != 0 || v < 1)
            return bfit_fail(BFIT_EINVAL, "%s '%s': at character %d: expected a batch size from 1 to %d", what, Q(q),
                             POS(q), BFIT_BATCH_MAX);
        pt.batch = (int)v;
        if (count > 0 && pt.by_epoch != out[count - 1].by_epoch)
            return bfit_fail(BFIT_EINVAL, "%s '%s': point %d mixes epochs and steps (use one unit throughout)", what,
                             Q(skip_blanks(item)), count + 1);
        rc = check_point(text, item, what, count, max, pt.at, count ? out[count - 1].at : 0, pt.by_epoch);
        if (rc != BFIT_OK)
            return rc;
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
    const char *p = text, *q, *item;
    char qb[QUOTE_MAX];
    int count = 0, more = 1, rc, by_epoch;

    if (!text || !out || !n || max < 1)
        return bfit_fail(BFIT_EINVAL, "memory schedule: no text or no room");
    *n = 0;
    while (more) {
        bfit_mem_point pt = {0};
        char size[64];
        size_t len;

        item = p;
        if ((rc = scan_at(text, &p, what, 0, &pt.step, &by_epoch)) != BFIT_OK)
            return rc;
        q = p = skip_blanks(p);
        len = strcspn(p, ",");
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        if (len >= sizeof size)
            return bfit_fail(BFIT_EINVAL, "%s '%s': at character %d: the size is too long", what, Q(q), POS(q));
        memcpy(size, p, len);
        size[len] = '\0';
        if (bfit_parse_capacity(size, &pt.capacity) != BFIT_OK)
            return bfit_fail_prefix(BFIT_EINVAL, "%s '%s': at character %d: ", what, Q(q), POS(q));
        p += len;
        if ((rc = check_point(text, item, what, count, max, pt.step, count ? out[count - 1].step : 0, 0)) != BFIT_OK)
            return rc;
        out[count++] = pt;
        if ((rc = item_end(text, &p, what, &more)) != BFIT_OK)
            return rc;
    }
    *n = count;
    return BFIT_OK;
}
