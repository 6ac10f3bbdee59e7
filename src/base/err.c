/* err.c - the thread's last error message. */
#include "base/err.h"
#include "base/aslimit.h"
#include "batchfit.h" /* bfit_format_size */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char msg[1024];
static _Thread_local char field[64]; /* the configuration field the message is about */

const char *bfit_errmsg(void) { return msg; }
const char *bfit_errfield(void) { return field; }

void bfit_clear_error(void)
{
    msg[0] = '\0';
    field[0] = '\0';
}

/* Host memory that ran out under an address-space limit ran out of room
 * under it, long before RAM: a message that does not say so already (a
 * data set's, a buffer's: "out of host memory for 512 samples" under 600
 * MB) names the limit, what it leaves and what to do. */
static void name_limit(int code)
{
    uint64_t limit, room;
    size_t n = strlen(msg);
    char s1[32], s2[32];
    /* CUDA's runtime maps address space of its own as it starts: an H200 under
     * 4,000,000 KB said only "no usable GPU: out of memory" (64,000,000 KB trained) */
    int cuda = code == BFIT_EDEVICE && strstr(msg, "(cudaErrorMemoryAllocation)");

    if ((code != BFIT_ENOMEM || !strstr(msg, "out of host memory")) && !cuda)
        return;
    if (strstr(msg, "ulimit") || !bfit_as_room(&limit, &room))
        return;
    snprintf(msg + n, sizeof msg - n, ": %sthe address-space limit (ulimit -v) of %s leaves %s unmapped: raise "
             "ulimit -v%s", cuda ? "the CUDA driver maps more as it starts than " : "",
             bfit_format_size(limit, s1, sizeof s1), bfit_format_size(room, s2, sizeof s2),
             cuda ? " or lift it" : "");
}

int bfit_vfail(int code, const char *fmt, va_list ap)
{
    char b[sizeof msg]; /* the arguments may be the message itself */
    vsnprintf(b, sizeof b, fmt, ap);
    memcpy(msg, b, sizeof msg);
    field[0] = '\0';
    name_limit(code);
    return code;
}

int bfit_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bfit_vfail(code, fmt, ap);
    va_end(ap);
    return code;
}

int bfit_vfail_prefix(int code, const char *fmt, va_list ap)
{
    char old[sizeof msg];
    size_t n;

    memcpy(old, msg, sizeof old);
    vsnprintf(msg, sizeof msg, fmt, ap);
    n = strlen(msg);
    if (n < sizeof msg - 1)
        snprintf(msg + n, sizeof msg - n, "%s", old);
    return code;
}

int bfit_fail_prefix(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bfit_vfail_prefix(code, fmt, ap);
    va_end(ap);
    return code;
}

int bfit_fail_field(int code, const char *name, const char *fmt, ...)
{
    char b[sizeof msg], f[sizeof field]; /* the arguments may be the message itself */
    size_t n;
    va_list ap;
    snprintf(f, sizeof f, "%s", name);
    snprintf(b, sizeof b, "%s: ", name);
    n = strlen(b);
    va_start(ap, fmt);
    vsnprintf(b + n, sizeof b - n, fmt, ap);
    va_end(ap);
    memcpy(msg, b, sizeof msg);
    memcpy(field, f, sizeof field);
    return code;
}

void bfit_err_save(bfit_err_state *s)
{
    memcpy(s->msg, msg, sizeof s->msg);
    memcpy(s->field, field, sizeof s->field);
}

void bfit_err_restore(const bfit_err_state *s)
{
    memcpy(msg, s->msg, sizeof msg);
    memcpy(field, s->field, sizeof field);
}

const char *bfit_strerror(int code)
{
    switch (code) {
    case BFIT_OK: return "ok";
    case BFIT_ENOMEM: return "out of memory";
    case BFIT_EINVAL: return "invalid argument";
    case BFIT_EIO: return "i/o error";
    case BFIT_EFORMAT: return "bad format";
    case BFIT_EDEVICE: return "device error";
    case BFIT_ESTATE: return "invalid state";
    case BFIT_ESTOPPED: return "stopped";
    case BFIT_EPEER: return "another process failed";
    default: return "unknown error";
    }
}
