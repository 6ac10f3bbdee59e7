/* cuda_plugin.h - the CUDA backend as a module the library loads when a
 * cuda device is opened (dlopen), so that a program using only the CPU
 * neither needs the CUDA libraries at start-up nor maps them (about 150 MiB
 * of resident memory for cuBLAS and cuDNN, measured).
 *
 * The module calls back into the library for what it shares with it (the
 * thread's error message), through the table handed over at loading; the
 * ABI number catches a module from another build of the device interface. */
#ifndef BFIT_CUDA_PLUGIN_H
#define BFIT_CUDA_PLUGIN_H

#include <stdarg.h>

#include "device/device.h"

/* Changes whenever the op table, its argument shapes or the device base do. */
#define BFIT_CUDA_PLUGIN_ABI                                                                       \
    ((unsigned)BFIT_OP_COUNT * 1000003u ^ (unsigned)sizeof(bfit_op_args) * 8191u ^                 \
     (unsigned)sizeof(bfit_op_desc) * 131u ^ (unsigned)sizeof(bfit_device_vt) * 7u ^                \
     (unsigned)sizeof(bfit_cuda_cfg) * 3u ^ (unsigned)sizeof(bfit_device_sample) * 524287u ^         \
     (unsigned)sizeof(bfit_device) * 8388593u)

typedef struct bfit_cuda_host {
    unsigned abi;
    int (*vfail)(int code, const char *fmt, va_list ap);
    int (*vfail_prefix)(int code, const char *fmt, va_list ap);
    const char *(*dtype_name)(bfit_dtype t);
    const char *(*op_kind_name)(bfit_op_kind k);
} bfit_cuda_host;

/* The module's one exported function: open GPU index with cfg (not NULL). */
#define BFIT_CUDA_PLUGIN_ENTRY "bfit_cuda_plugin_open"
typedef int (*bfit_cuda_plugin_open_fn)(const bfit_cuda_host *host, int index, const bfit_cuda_cfg *cfg,
                                        bfit_device **out);

#endif
