/* cuda_mem.c - the CUDA device's memory: blocks for the arena from
 * cudaMalloc, transfers on the device's stream, the memory query, and the
 * checking mode's pointer test.
 *
 * Blocks are asked for in 2 MiB multiples (the arena's granularity), so
 * small allocations share a block and cudaMalloc is called rarely. A refused
 * cudaMalloc is BFIT_ENOMEM with the runtime's error state cleared: the
 * trainer recovers from it with a smaller micro-batch, as from the arena's
 * own limit. Transfers are queued on the stream, after every op before them:
 * a download waits for its copy, so it sees all earlier work; an upload goes
 * through pinned staging and returns at once (the host buffer may be reused
 * as soon as it returns), with no wait for the GPU. */
#include "base/err.h"
#include "device/cuda.h"

#include <stdint.h>
#include <string.h>

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

/* Two pinned host buffers of STAGE_BYTES: an upload is copied into one and
 * queued from it (a DMA the stream runs in order, after the ops before it),
 * so the call returns without waiting for the GPU; the buffer is reused
 * only after its previous copy has finished (its event). A download queues
 * its copy into a buffer and waits for that copy alone, which the stream
 * runs after everything before it. Larger transfers go in pieces,
 * alternating buffers, so one piece's copy overlaps the next one's memcpy.
 * Without the buffers (cudaHostAlloc refused), transfers are pageable
 * copies waited for. Pinned memory is host memory: nothing of the arena. */
#define STAGE_BYTES ((size_t)8 << 20)

void cuda_stage_init(cuda_device *d)
{
    for (int i = 0; i < 2; i++)
        if (cudaHostAlloc(&d->stage[i], STAGE_BYTES, cudaHostAllocDefault) != cudaSuccess ||
            cudaEventCreateWithFlags(&d->stage_ev[i], cudaEventDisableTiming) != cudaSuccess) {
            (void)cudaGetLastError();
            cuda_stage_fini(d);
            return;
        }
    d->stage_bytes = STAGE_BYTES;
}

void cuda_stage_fini(cuda_device *d)
{
    for (int i = 0; i < 2; i++) {
        if (d->stage_ev[i])
            cudaEventDestroy(d->stage_ev[i]);
        if (d->stage[i])
            cudaFreeHost(d->stage[i]);
        d->stage[i] = NULL;
        d->stage_ev[i] = NULL;
    }
    d->stage_bytes = 0;
}

static int wait(cuda_device *d, const char *what)
{
    cudaError_t e = cudaStreamSynchronize(d->stream);
    if (e != cudaSuccess)
        return cuda_fail_async(d, e, what);
    d->nqueued = 0;
    return BFIT_OK;
}

/* The next staging buffer, once its last copy is done; that copy ran after
 * every op queued before it, and a fault among them shows here. */
static int stage_take(cuda_device *d, int *k, const char *what)
{
    cudaError_t e;
    *k = d->stage_next;
    d->stage_next ^= 1;
    if ((e = cudaEventSynchronize(d->stage_ev[*k])) != cudaSuccess)
        return cuda_fail_async(d, e, what);
    return BFIT_OK;
}

int cuda_upload(bfit_device *base, void *dst, const void *host, size_t n)
{
    cuda_device *d = (cuda_device *)base;
    int rc = cuda_enter(d, "upload"), k;
    if (rc != BFIT_OK)
        return rc;
    if (!d->stage_bytes) {
        CUDA_TRY(cudaMemcpyAsync(dst, host, n, cudaMemcpyHostToDevice, d->stream), "upload (host to device copy)");
        return wait(d, "upload (host to device copy)");
    }
    for (size_t off = 0; off < n; off += d->stage_bytes) {
        size_t len = n - off < d->stage_bytes ? n - off : d->stage_bytes;
        if ((rc = stage_take(d, &k, "upload (waiting for a staging buffer)")) != BFIT_OK)
            return rc;
        memcpy(d->stage[k], (const char *)host + off, len);
        CUDA_TRY(cudaMemcpyAsync((char *)dst + off, d->stage[k], len, cudaMemcpyHostToDevice, d->stream),
                 "upload (host to device copy)");
        CUDA_TRY(cudaEventRecord(d->stage_ev[k], d->stream), "upload (recording its copy)");
    }
    return BFIT_OK;
}

/* The piece in staging buffer k, once its copy is done, out to host. */
static int stage_out(cuda_device *d, int k, void *host, size_t len)
{
    cudaError_t e = cudaEventSynchronize(d->stage_ev[k]);
    if (e != cudaSuccess)
        return cuda_fail_async(d, e, "download (device to host copy, or an op queued before it)");
    memcpy(host, d->stage[k], len);
    return BFIT_OK;
}

int cuda_download(bfit_device *base, void *host, const void *src, size_t n)
{
    cuda_device *d = (cuda_device *)base;
    int rc = cuda_enter(d, "download"), pk = 0, k = 0;
    size_t off = 0, plen = 0, pat = 0;
    if (rc != BFIT_OK)
        return rc;
    if (!d->stage_bytes) {
        CUDA_TRY(cudaMemcpyAsync(host, src, n, cudaMemcpyDeviceToHost, d->stream), "download (device to host copy)");
        return wait(d, "download (device to host copy, or an op queued before it)");
    }
    /* a piece is queued, then the one before it (in the other buffer) copied out */
    while (off < n || plen) {
        size_t len = n - off < d->stage_bytes ? n - off : d->stage_bytes, at = off;
        if (off < n) {
            if ((rc = stage_take(d, &k, "download (waiting for a staging buffer)")) != BFIT_OK)
                return rc;
            CUDA_TRY(cudaMemcpyAsync(d->stage[k], (const char *)src + off, len, cudaMemcpyDeviceToHost, d->stream),
                     "download (device to host copy)");
            CUDA_TRY(cudaEventRecord(d->stage_ev[k], d->stream), "download (recording its copy)");
            off += len;
        }
        if (plen && (rc = stage_out(d, pk, (char *)host + pat, plen)) != BFIT_OK)
            return rc;
        plen = at < n ? len : 0;
        pk = k;
        pat = at;
        if (at >= n)
            break;
    }
    d->nqueued = 0; /* everything queued before the last copy is done */
    return BFIT_OK;
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

int cuda_check_args(cuda_device *d, const bfit_op_args *a, int nlist, const char *what)
{
    const void *p[] = {a->src,         a->src2,      a->weights,    a->bias,     a->diff_dst, a->scale,
                       a->shift,       a->dst,       a->diff_src,   a->diff_weights, a->diff_bias, a->diff_scale,
                       a->diff_shift,  a->mean,      a->var,        a->rmean,    a->rvar,     a->saved,
                       a->workspace,   a->labels,    a->lens,       a->stats,    a->state0,   a->state1,
                       a->rows};
    static const char *const nm[] = {"src", "src2", "weights", "bias", "diff_dst", "scale", "shift", "dst",
                                     "diff_src", "diff_weights", "diff_bias", "diff_scale", "diff_shift", "mean",
                                     "var", "rmean", "rvar", "saved", "workspace", "labels", "lens", "stats",
                                     "state0", "state1", "rows"};
    for (unsigned i = 0; i < sizeof p / sizeof p[0]; i++)
        if (p[i] && !on_device(d, p[i]))
            return bfit_fail(BFIT_EINVAL, "%s (checking mode): %s: %s is not memory of this GPU (a host pointer "
                                          "passed where the device's is needed)", d->name, what, nm[i]);
    for (int i = 0; i < nlist && i < BFIT_OP_MAXCAT; i++) {
        const void *q = a->srcs ? a->srcs[i] : a->dsts ? a->dsts[i] : NULL;
        if (q && !on_device(d, q))
            return bfit_fail(BFIT_EINVAL, "%s (checking mode): %s: %s[%d] is not memory of this GPU", d->name, what,
                             a->srcs ? "srcs" : "dsts", i);
    }
    return BFIT_OK;
}
