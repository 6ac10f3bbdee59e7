/* cuda_plugin.c - the CUDA module's side of the plugin boundary: its entry
 * point, and the few library functions its code calls, forwarded to the
 * library that loaded it (cuda_plugin.h says why it is a module). */
#include "base/err.h"
#include "device/cuda_plugin.h"

#include <stdio.h>

static const bfit_cuda_host *host;

int bfit_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    code = host->vfail(code, fmt, ap);
    va_end(ap);
    return code;
}

int bfit_fail_prefix(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    code = host->vfail_prefix(code, fmt, ap);
    va_end(ap);
    return code;
}

const char *bfit_dtype_name(bfit_dtype t) { return host->dtype_name(t); }

const char *cuda_kind_name(bfit_op_kind k) { return host->op_kind_name(k); }

int bfit_device_fill(bfit_device *d, void *dst, int byte, size_t n)
{
    return n ? d->vt->fill(d, dst, byte, n) : BFIT_OK;
}

/* the library always hands over a filled configuration */
bfit_cuda_cfg bfit_cuda_cfg_default(void)
{
    bfit_cuda_cfg c = {BFIT_CUDA_FASTEST, 1, 0, 0};
    return c;
}

__attribute__((visibility("default"))) int bfit_cuda_plugin_open(const bfit_cuda_host *h, int index,
                                                                  const bfit_cuda_cfg *cfg, bfit_device **out)
{
    *out = NULL;
    if (!h || h->abi != (BFIT_CUDA_PLUGIN_ABI ^ (unsigned)sizeof(bfit_cuda_host)))
        return BFIT_EDEVICE; /* no message: the host's error functions may not match */
    host = h;
    return bfit_device_cuda_new_cfg(index, cfg, out);
}
