/* comm.h - a group of processes that train together (data-parallel), each
 * with its own device: MPI between the hosts, and the device's collectives
 * for device buffers (MPI on the CPU device's memory, NCCL on GPUs).
 *
 * comm.c is the one file that calls MPI. Built without MPI, bfit_comm_new
 * fails saying so, and the launcher's environment still tells whether the
 * process was started by mpirun (so a run can refuse to train alone what
 * was meant to be trained together). Only the thread that made the group
 * calls it (MPI_THREAD_FUNNELED). */
#ifndef BFIT_COMM_H
#define BFIT_COMM_H

#include "device/device.h"

typedef struct bfit_comm bfit_comm;

/* 1 when this build has MPI. */
int bfit_comm_available(void);

/* The group size and rank the launcher gave this process, read from its
 * environment (Open MPI, MPICH/PMI, Slurm) without calling MPI; 1 and 0
 * when it was not launched as one of several. */
void bfit_comm_launched(int *size, int *rank);

/* The job's size and this process's rank from MPI, initialising it unless
 * the program did (BFIT_EDEVICE without MPI). */
int bfit_comm_world(int *size, int *rank);

/* This process's rank among the job's processes on its machine, and how
 * many they are (each takes the GPU of its number, and its part of the
 * cores). Every process calls it. */
int bfit_comm_local(int *rank, int *size);

/* Join the group of all the job's processes (every process calls it),
 * initialising MPI unless the program did. BFIT_EDEVICE saying why when
 * the build has no MPI. */
int bfit_comm_new(bfit_comm **out);
/* Open dev's collectives over the group (every process, each its device):
 * BFIT_EDEVICE when the device has none. */
int bfit_comm_attach(bfit_comm *c, bfit_device *dev);
void bfit_comm_free(bfit_comm *c);

int bfit_comm_rank(const bfit_comm *c);
int bfit_comm_size(const bfit_comm *c);

/* Host memory: every rank's n bytes, in rank order, into all (size * n). */
int bfit_comm_allgather(bfit_comm *c, const void *mine, void *all, size_t n);

/* Device memory: an in-place sum of count f32 over the group; n bytes from
 * root to every rank. */
int bfit_comm_sum(bfit_comm *c, void *buf, size_t count);
int bfit_comm_bcast(bfit_comm *c, void *buf, size_t n, int root);

/* Finalise MPI if this library initialised it (a program's last call). */
void bfit_comm_finalize(void);

/* End every process of the job with code: a program's last resort when one
 * rank fails where the others cannot learn of it. Never called by the
 * library itself (it never exits). Returns only without MPI. */
void bfit_comm_abort(int code);

#endif
