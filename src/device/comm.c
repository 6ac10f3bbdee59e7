/* comm.c - the group of processes over MPI (comm.h): the only file that
 * calls MPI. The group is a duplicate of MPI_COMM_WORLD whose errors return
 * (MPI_ERRORS_RETURN) so that a failed collective becomes our error with
 * its reason; a process that dies is noticed by the launcher, which ends
 * the job (docs/distributed.md). */
#include "base/err.h"
#include "device/comm.h"

#include <stdlib.h>
#include <string.h>

/* The launcher's environment: Open MPI, then PMI (MPICH, Intel MPI), then
 * Slurm's srun: its step's task count, not the job's SLURM_NTASKS, which a
 * batch script run without srun has too (with SLURM_PROCID 0). */
void bfit_comm_launched(int *size, int *rank)
{
    static const char *const vars[][2] = {{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
                                          {"PMI_SIZE", "PMI_RANK"},
                                          {"SLURM_STEP_NUM_TASKS", "SLURM_PROCID"}};
    *size = 1;
    *rank = 0;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *s = getenv(vars[i][0]), *r = getenv(vars[i][1]);
        if (s && r && atoi(s) > 0) {
            *size = atoi(s);
            *rank = atoi(r);
            return;
        }
    }
}

#ifdef BFIT_HAVE_MPI
#include <mpi.h>

struct bfit_comm {
    MPI_Comm comm;
    bfit_device *dev;
    bfit_coll_host host;  /* what the device's collectives use */
    void *coll;           /* the device's collective state */
    int coll_open;
};

static int we_initialised;

int bfit_comm_available(void) { return 1; }

static int mpi_fail(int err, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "error %d", err);
    return bfit_fail(BFIT_EPEER, "MPI: %s failed: %s (another process of the group may have died)", what, msg);
}

static int host_sum_f32(void *ud, float *buf, size_t count)
{
    bfit_comm *c = ud;
    int err;
    /* MPI counts are int: large buffers go in pieces */
    for (size_t done = 0; done < count;) {
        int n = count - done > (size_t)1 << 30 ? 1 << 30 : (int)(count - done);
        if ((err = MPI_Allreduce(MPI_IN_PLACE, buf + done, n, MPI_FLOAT, MPI_SUM, c->comm)) != MPI_SUCCESS)
            return mpi_fail(err, "the sum of the gradients (MPI_Allreduce)");
        done += (size_t)n;
    }
    return BFIT_OK;
}

static int host_bcast(void *ud, void *buf, size_t n, int root)
{
    bfit_comm *c = ud;
    int err;
    for (size_t done = 0; done < n;) {
        int k = n - done > (size_t)1 << 30 ? 1 << 30 : (int)(n - done);
        if ((err = MPI_Bcast((char *)buf + done, k, MPI_BYTE, root, c->comm)) != MPI_SUCCESS)
            return mpi_fail(err, "a broadcast (MPI_Bcast)");
        done += (size_t)k;
    }
    return BFIT_OK;
}

static int init_mpi(void)
{
    int inited = 0, provided = 0, err;
    MPI_Initialized(&inited);
    if (inited)
        return BFIT_OK;
    if ((err = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided)) != MPI_SUCCESS)
        return bfit_fail(BFIT_EPEER, "MPI: MPI_Init_thread failed (error %d)", err);
    we_initialised = 1;
    return BFIT_OK;
}

int bfit_comm_world(int *size, int *rank)
{
    int rc = init_mpi();
    if (rc != BFIT_OK)
        return rc;
    MPI_Comm_size(MPI_COMM_WORLD, size);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    return BFIT_OK;
}

int bfit_comm_local(int *rank, int *size)
{
    MPI_Comm node;
    int rc = init_mpi(), err;
    *rank = 0;
    *size = 1;
    if (rc != BFIT_OK)
        return rc;
    /* the processes that share this machine (MPI-3) */
    if ((err = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node)) != MPI_SUCCESS)
        return mpi_fail(err, "MPI_Comm_split_type");
    MPI_Comm_rank(node, rank);
    MPI_Comm_size(node, size);
    MPI_Comm_free(&node);
    return BFIT_OK;
}

int bfit_comm_new(bfit_comm **out)
{
    bfit_comm *c;
    int rc, err;

    *out = NULL;
    if ((rc = init_mpi()) != BFIT_OK)
        return rc;
    if (!(c = calloc(1, sizeof *c)))
        return bfit_fail(BFIT_ENOMEM, "out of host memory");
    if ((err = MPI_Comm_dup(MPI_COMM_WORLD, &c->comm)) != MPI_SUCCESS) {
        free(c);
        return mpi_fail(err, "MPI_Comm_dup");
    }
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->comm, &c->host.rank);
    MPI_Comm_size(c->comm, &c->host.size);
    c->host.sum_f32 = host_sum_f32;
    c->host.bcast = host_bcast;
    c->host.ud = c;
    *out = c;
    return BFIT_OK;
}

int bfit_comm_attach(bfit_comm *c, bfit_device *dev)
{
    int rc;
    if (c->coll_open)
        return bfit_fail(BFIT_ESTATE, "the group's collectives are open already");
    if (!dev->vt->coll_open)
        return bfit_fail(BFIT_EDEVICE, "the %s device has no collectives: it cannot train data-parallel",
                         dev->vt->name);
    if ((rc = dev->vt->coll_open(dev, &c->host, &c->coll)) != BFIT_OK)
        return rc;
    c->dev = dev;
    c->coll_open = 1;
    return BFIT_OK;
}

void bfit_comm_free(bfit_comm *c)
{
    if (!c)
        return;
    if (c->coll_open)
        c->dev->vt->coll_close(c->dev, c->coll);
    MPI_Comm_free(&c->comm);
    free(c);
}

int bfit_comm_rank(const bfit_comm *c) { return c->host.rank; }
int bfit_comm_size(const bfit_comm *c) { return c->host.size; }

int bfit_comm_allgather(bfit_comm *c, const void *mine, void *all, size_t n)
{
    int err = MPI_Allgather(mine, (int)n, MPI_BYTE, all, (int)n, MPI_BYTE, c->comm);
    return err == MPI_SUCCESS ? BFIT_OK : mpi_fail(err, "the status exchange (MPI_Allgather)");
}

int bfit_comm_sum(bfit_comm *c, void *buf, size_t count)
{
    if (!c->coll_open)
        return bfit_fail(BFIT_ESTATE, "the group's collectives are not open");
    return count ? c->dev->vt->coll_sum(c->dev, c->coll, buf, count) : BFIT_OK;
}

int bfit_comm_bcast(bfit_comm *c, void *buf, size_t n, int root)
{
    if (!c->coll_open)
        return bfit_fail(BFIT_ESTATE, "the group's collectives are not open");
    return n ? c->dev->vt->coll_bcast(c->dev, c->coll, buf, n, root) : BFIT_OK;
}

void bfit_comm_finalize(void)
{
    int fin = 0;
    MPI_Finalized(&fin);
    if (we_initialised && !fin)
        MPI_Finalize();
}

void bfit_comm_abort(int code)
{
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited)
        MPI_Abort(MPI_COMM_WORLD, code);
}

#else /* built without MPI */

int bfit_comm_available(void) { return 0; }

static const char no_mpi[] = "this batchfit was built without MPI, so it cannot train data-parallel (install "
                             "libopenmpi-dev and configure with -DBFIT_MPI=ON)";

int bfit_comm_world(int *size, int *rank)
{
    *size = 1;
    *rank = 0;
    return bfit_fail(BFIT_EDEVICE, "%s", no_mpi);
}

int bfit_comm_local(int *rank, int *size)
{
    *rank = 0;
    *size = 1;
    return bfit_fail(BFIT_EDEVICE, "%s", no_mpi);
}

int bfit_comm_new(bfit_comm **out)
{
    *out = NULL;
    return bfit_fail(BFIT_EDEVICE, "%s", no_mpi);
}

int bfit_comm_attach(bfit_comm *c, bfit_device *dev)
{
    (void)c, (void)dev;
    return bfit_fail(BFIT_EDEVICE, "%s", no_mpi);
}

void bfit_comm_free(bfit_comm *c) { (void)c; }
int bfit_comm_rank(const bfit_comm *c) { (void)c; return 0; }
int bfit_comm_size(const bfit_comm *c) { (void)c; return 1; }

int bfit_comm_allgather(bfit_comm *c, const void *mine, void *all, size_t n)
{
    (void)c, (void)mine, (void)all, (void)n;
    return bfit_fail(BFIT_ESTATE, "no MPI in this build");
}

int bfit_comm_sum(bfit_comm *c, void *buf, size_t count)
{
    (void)c, (void)buf, (void)count;
    return bfit_fail(BFIT_ESTATE, "no MPI in this build");
}

int bfit_comm_bcast(bfit_comm *c, void *buf, size_t n, int root)
{
    (void)c, (void)buf, (void)n, (void)root;
    return bfit_fail(BFIT_ESTATE, "no MPI in this build");
}

void bfit_comm_finalize(void) {}
void bfit_comm_abort(int code) { (void)code; }

#endif
