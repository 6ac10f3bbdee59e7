/* cuda_mem.c - the CUDA device's memory: blocks for the arena from
 * cudaMalloc, transfers on the device's stream, the memory query, and the
 * checking mode's pointer test.
 *
 * Blocks are asked for in 2 MiB multiples (the arena's granularity), so
 * small allocations share a block and cudaMalloc is called rarely. A refused
 * cudaMalloc is BFIT_ENOMEM with the runtime's error state cleared: the
 * trainer recovers from it with a smaller micro-batch, as from the arena's
 * own limit. Transfers are queued on the stream, after every op before them,
 * and waited for, so a download sees all earlier work and the host buffer of
 * an upload may be reused at once. */
#include "base/err.h"
#include "device/cuda.h"

#include <stdint.h>

#define CUDA_BLOCK_GRANULARITY ((size_t)2 << 20)

/* ---- blocks for the arena ---------------------------------------------------- */

static int src_alloc(void *ud, size_t n, void **out)
{
    cuda_device *d = ud;
    cudaError_t e;

    *out = NULL;
    if (cudaSetDevice(d->index) != cudaSuccess) {
        (void)cudaGetLastError();
        return BFIT_EDEVICE;
    }
    e = cudaMalloc(out, n);
    if (e == cudaSuccess)
        return BFIT_OK;
    *out = NULL;
    (void)cudaGetLastError(); /* a refused allocation leaves the context usable */
    if (e == cudaErrorMemoryAllocation)
        return BFIT_ENOMEM;
    /* anything else (a fault from earlier work, a lost device) is no
     * shortage: say so rather than let the trainer shrink and retry */
    return cuda_fail(e, "cudaMalloc of a block for the arena");
}

static void src_free(void *ud, void *p, size_t n)
{
    cuda_device *d = ud;
    (void)n;
    /* ops queued on the block finish before it goes back */
    if (cudaSetDevice(d->index) == cudaSuccess) {
        cudaStreamSynchronize(d->stream);
        cudaFree(p);
    }
    (void)cudaGetLastError();
}

static int src_fill(void *ud, void *p, int byte, size_t n) { return bfit_device_fill((bfit_device *)ud, p, byte, n); }

void cuda_blocks_init(cuda_device *d)
{
    d->base.blocks.alloc = src_alloc;
    d->base.blocks.free = src_free;
    d->base.blocks.fill = src_fill;
    d->base.blocks.ud = d;
    d->base.blocks.granularity = CUDA_BLOCK_GRANULARITY;
}

/* ---- transfers ------------------------------------------------------------------- */

static int wait(cuda_device *d, const char *what)
{
    CUDA_TRY(cudaStreamSynchronize(d->stream), what);
    return BFIT_OK;
}

int cuda_upload(bfit_device *base, void *dst, const void *host, size_t n)
{
    cuda_device *d = (cuda_device *)base;
    int rc = cuda_enter(d, "upload");
    if (rc != BFIT_OK)
        return rc;
    CUDA_TRY(cudaMemcpyAsync(dst, host, n, cudaMemcpyHostToDevice, d->stream), "upload (host to device copy)");
    return wait(d, "upload (host to device copy)");
}

int cuda_download(bfit_device *base, void *host, const void *src, size_t n)
{
    cuda_device *d = (cuda_device *)base;
    int rc = cuda_enter(d, "download");
    if (rc != BFIT_OK)
        return rc;
    CUDA_TRY(cudaMemcpyAsync(host, src, n, cudaMemcpyDeviceToHost, d->stream), "download (device to host copy)");
    return wait(d, "download (device to host copy, or an op before it)");
}

/* Device to device; overlapping ranges are moved in pieces no longer than
 * their distance, front first when moving down, back first when moving up,
 * so no piece overwrites bytes still to be read (memmove's result). */
int cuda_copy(bfit_device *base, void *dst, const void *src, size_t n)
{
    cuda_device *d = (cuda_device *)base;
    uintptr_t a = (uintptr_t)dst, b = (uintptr_t)src;
    size_t gap = a > b ? a - b : b - a;
    int rc = cuda_enter(d, "device copy");

    if (rc != BFIT_OK || dst == src)
        return rc;
    if (gap >= n) {
        CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, d->stream), "device copy");
        return BFIT_OK;
    }
    for (size_t done = 0; done < n; done += gap) {
        size_t len = n - done < gap ? n - done : gap, off = a < b ? done : n - done - len;
        CUDA_TRY(cudaMemcpyAsync((char *)dst + off, (const char *)src + off, len, cudaMemcpyDeviceToDevice, d->stream),
                 "device copy (overlapping)");
    }
    return BFIT_OK;
}

int cuda_fill(bfit_device *base, void *dst, int byte, size_t n)
{
    cuda_device *d = (cuda_device *)base;
    int rc = cuda_enter(d, "fill");
    if (rc != BFIT_OK)
        return rc;
    CUDA_TRY(cudaMemsetAsync(dst, byte, n, d->stream), "fill (memset)");
    return BFIT_OK;
}

int cuda_sync(bfit_device *base)
{
    cuda_device *d = (cuda_device *)base;
    int rc = cuda_enter(d, "sync");
    return rc == BFIT_OK ? wait(d, "waiting for the GPU") : rc;
}

int cuda_mem_info(bfit_device *base, uint64_t *free_bytes, uint64_t *total_bytes)
{
    cuda_device *d = (cuda_device *)base;
    size_t f = 0, t = 0;
    int rc = cuda_enter(d, "memory query");
    if (rc != BFIT_OK)
        return rc;
    CUDA_TRY(cudaMemGetInfo(&f, &t), "memory query (cudaMemGetInfo)");
    *free_bytes = f;
    *total_bytes = t;
    return BFIT_OK;
}

/* ---- the checking mode -------------------------------------------------------------- */

static int on_device(const cuda_device *d, const void *p)
{
    struct cudaPointerAttributes at;
    if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return at.type == cudaMemoryTypeDevice && at.device == d->index;
}

int cuda_check_args(cuda_device *d, const bfit_op_args *a, const char *what)
{
    const void *p[] = {a->src,         a->src2,      a->weights,    a->bias,     a->diff_dst, a->scale,
                       a->shift,       a->dst,       a->diff_src,   a->diff_weights, a->diff_bias, a->diff_scale,
                       a->diff_shift,  a->mean,      a->var,        a->rmean,    a->rvar,     a->saved,
                       a->workspace,   a->labels,    a->lens,       a->stats,    a->state0,   a->state1};
    static const char *const nm[] = {"src", "src2", "weights", "bias", "diff_dst", "scale", "shift", "dst",
                                     "diff_src", "diff_weights", "diff_bias", "diff_scale", "diff_shift", "mean",
                                     "var", "rmean", "rvar", "saved", "workspace", "labels", "lens", "stats",
                                     "state0", "state1"};
    for (unsigned i = 0; i < sizeof p / sizeof p[0]; i++)
        if (p[i] && !on_device(d, p[i]))
            return bfit_fail(BFIT_EINVAL, "%s (checking mode): %s: %s is not memory of this GPU (a host pointer "
                                          "passed where the device's is needed)", d->name, what, nm[i]);
    return BFIT_OK;
}
