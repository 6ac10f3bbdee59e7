/* aslimit.h - the address-space limit (RLIMIT_AS, `ulimit -v`) and the room
 * it leaves this process. Under such a limit host memory runs out when the
 * address space is full, long before RAM does, and oneDNN does not check
 * every allocation it makes while generating a kernel (a full address space
 * crashed it there: SIGSEGV in dnnl_primitive_create, read under gdb as a
 * write through a null buffer, without oneDNN's symbols): batchfit counts
 * the room itself and refuses first. */
#ifndef BFIT_ASLIMIT_H
#define BFIT_ASLIMIT_H

#include <stddef.h>
#include <stdint.h>

/* Room that oneDNN must have to make one kernel (its code, the primitive).
 * Measured on resnet50 under ulimit -v (2 threads): one primitive's
 * creation grew the address space by 1.8 MiB at most; with no check, limits
 * of 2.3-2.5 GB crashed in it, and refusing below 4 MiB of room already
 * kept every such run from crashing. 16 MiB leaves a margin. */
#define BFIT_AS_KERNEL_ROOM ((uint64_t)16 << 20)

/* Room kept free under a limit when the device's free memory is told,
 * beside the step's plan, so that a step's kernels are made in it. What
 * the threads map is not in it but counted in the room, being mapped
 * before the room is read: the compute threads' stacks and malloc arenas
 * (glibc: 64 MiB each, made at a thread's first heap call, which oneDNN's
 * threads made inside the first step) when the CPU device is made
 * (bfit_cpu_make_arenas), a stream's loader threads' when it is made.
 * Measured on resnet50 (ulimit -v, oversubscribed on 2 cores), the address
 * space then grew over the first steps and evaluation by 76, 77, 77 and
 * 78 MiB on 1, 2, 4 and 8 threads (with the arenas made in the step: 76,
 * 141, 269 and 526 MiB, 64 MiB a thread beyond the first): the room kept
 * does not grow with the threads. 96 MiB keeps a margin; 128 MiB (with the
 * arenas made up front) refused the small CNN at batch 512 under 420 MB on
 * 2 threads, which trains there (tests/cli/aslimit_log.sh). */
#define BFIT_AS_HEADROOM ((uint64_t)96 << 20)

/* 1 and the limit and the room left under it (limit less the address
 * space mapped now, 0 when past it) if this process has an address-space
 * limit, 0 if none (or it cannot be read). Allocates nothing on the heap
 * (a run asks between steps, which allocate nothing there). */
int bfit_as_room(uint64_t *limit, uint64_t *room);

/* "raise ulimit -v by at least RAISE (`ulimit -v N` or more)" into buf,
 * N in KiB as ulimit -v takes it: the limit plus raise rounded up to a
 * whole MiB. Raise is what the refusal computed the device lacks; the room
 * a rerun gets grows with the limit byte for byte (Fashion-MNIST's CNN
 * refused at set-up under 225,000 KiB: 854.01 KiB short, so 225,854 said;
 * 225,850 was refused and 225,855 trained). "raise ulimit -v" alone when
 * raise is 0 or there is no limit. */
void bfit_as_raise(uint64_t raise, char *buf, size_t n);

/* Under an address-space limit, one malloc heap for every thread (glibc's
 * M_ARENA_MAX 1) unless the environment's MALLOC_ARENA_MAX says otherwise:
 * glibc gives a thread that allocates a heap of 64 MiB of address space of
 * its own while the limit leaves room for one, so the room a step had
 * depended on how many were made (Python training Fashion-MNIST's CNN on 2
 * threads was refused under 350 to 500 MB and trained under 600; with one
 * heap from 350 MB). Devices call it as they are made, before their
 * threads; a training step does not allocate, so no thread waits on the
 * heap. Arenas made before stay (glibc applies the limit to the next). */
void bfit_as_one_heap(void);

/* This process's mapped address space and resident memory
 * (/proc/self/statm), 1 if read, else 0 with both 0. Read with open/read
 * into the stack: no heap (stdio's fopen would allocate). */
int bfit_statm(uint64_t *mapped, uint64_t *resident);

#endif
