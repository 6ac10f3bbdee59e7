/* cuda_coll.c - the CUDA device's collectives over a group of processes:
 * NCCL, with its unique id broadcast over the group's host side (MPI).
 *
 * UNTESTED: this machine has no GPU. It compiles in every CUDA build with
 * NCCL; docs/distributed.md lists what has not been run. The sum and the
 * broadcast are queued on the device's stream, after every op before them,
 * so the optimizer step that follows sees the sum without a host wait.
 * NCCL keeps its own device buffers (NCCL_BUFFSIZE, 4 MiB per channel by
 * default) outside the arena, like cuBLAS's and cuDNN's handles: the run
 * reads the device's free memory after opening the group. */
#include "base/err.h"
#include "device/cuda.h"

#include <stdlib.h>

#ifdef BFIT_HAVE_NCCL
#include <nccl.h>

static int nccl_fail(ncclResult_t r, const char *what)
{
    return bfit_fail(BFIT_EDEVICE, "NCCL: %s: %s", what, ncclGetErrorString(r));
}

int cuda_coll_open(bfit_device *dev, const bfit_coll_host *h, void **state)
{
    cuda_device *d = (cuda_device *)dev;
    ncclUniqueId id;
    ncclComm_t *comm;
    ncclResult_t r;
    int rc;

    *state = NULL;
    if (h->rank == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess)
        return nccl_fail(r, "ncclGetUniqueId");
    if ((rc = h->bcast(h->ud, &id, sizeof id, 0)) != BFIT_OK)
        return rc;
    if ((rc = cuda_enter(d, "NCCL communicator")) != BFIT_OK)
        return rc;
    if (!(comm = calloc(1, sizeof *comm)))
        return bfit_fail(BFIT_ENOMEM, "cuda: out of host memory");
    if ((r = ncclCommInitRank(comm, h->size, id, h->rank)) != ncclSuccess) {
        free(comm);
        return nccl_fail(r, "ncclCommInitRank");
    }
    *state = comm;
    return BFIT_OK;
}

int cuda_coll_sum(bfit_device *dev, void *state, void *buf, size_t count)
{
    cuda_device *d = (cuda_device *)dev;
    ncclResult_t r;
    int rc = cuda_enter(d, "NCCL sum");

    if (rc != BFIT_OK)
        return rc;
    if ((r = ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, *(ncclComm_t *)state, d->stream)) != ncclSuccess)
        return nccl_fail(r, "ncclAllReduce");
    return BFIT_OK;
}

int cuda_coll_bcast(bfit_device *dev, void *state, void *buf, size_t n, int root)
{
    cuda_device *d = (cuda_device *)dev;
    ncclResult_t r;
    int rc = cuda_enter(d, "NCCL broadcast");

    if (rc != BFIT_OK)
        return rc;
    if ((r = ncclBroadcast(buf, buf, n, ncclUint8, root, *(ncclComm_t *)state, d->stream)) != ncclSuccess)
        return nccl_fail(r, "ncclBroadcast");
    return BFIT_OK;
}

void cuda_coll_close(bfit_device *dev, void *state)
{
    (void)dev;
    if (!state)
        return;
    ncclCommDestroy(*(ncclComm_t *)state);
    free(state);
}

#else /* a CUDA build without NCCL: GPUs cannot train data-parallel */

int cuda_coll_open(bfit_device *dev, const bfit_coll_host *h, void **state)
{
    (void)dev;
    (void)h;
    *state = NULL;
    return bfit_fail(BFIT_EDEVICE, "this batchfit's CUDA backend was built without NCCL, which data-parallel "
                                   "training on GPUs needs (install NCCL beside the CUDA toolkit and rebuild), "
                                   "or train on the cpu device");
}

int cuda_coll_sum(bfit_device *dev, void *state, void *buf, size_t count)
{
    (void)dev, (void)state, (void)buf, (void)count;
    return BFIT_EDEVICE;
}

int cuda_coll_bcast(bfit_device *dev, void *state, void *buf, size_t n, int root)
{
    (void)dev, (void)state, (void)buf, (void)n, (void)root;
    return BFIT_EDEVICE;
}

void cuda_coll_close(bfit_device *dev, void *state) { (void)dev, (void)state; }

#endif
