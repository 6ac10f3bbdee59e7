/* aslimit.h - the address-space limit (RLIMIT_AS, `ulimit -v`) and the room
 * it leaves this process. Under such a limit host memory runs out when the
 * address space is full, long before RAM does, and oneDNN does not check
 * every allocation it makes while generating a kernel (a full address space
 * crashed it there: SIGSEGV in dnnl_primitive_create, read under gdb as a
 * write through a null buffer, without oneDNN's symbols): batchfit counts
 * the room itself and refuses first. */
#ifndef BFIT_ASLIMIT_H
#define BFIT_ASLIMIT_H

#include <stdint.h>

/* Room that oneDNN must have to make one kernel (its code, the primitive).
 * Measured on resnet50 under ulimit -v (2 threads): one primitive's
 * creation grew the address space by 1.8 MiB at most; with no check, limits
 * of 2.3-2.5 GB crashed in it, and refusing below 4 MiB of room already
 * kept every such run from crashing. 16 MiB leaves a margin. */
#define BFIT_AS_KERNEL_ROOM ((uint64_t)16 << 20)

/* Room kept free under a limit when the device's free memory is told,
 * beside the step's plan, so that a step's kernels are made in it: on
 * resnet50 (2 threads) they grew the address space by about 115 MiB over
 * the first step. Threads add their stacks (8 MiB) and glibc's per-thread
 * heaps (64 MiB each): machines with more cores may need more, not
 * measured here; there BFIT_AS_KERNEL_ROOM still refuses before a crash.
 * 256 MiB refused the small CNN under 400 MB, which trains there. */
#define BFIT_AS_HEADROOM ((uint64_t)128 << 20)

/* 1 and the limit and the room left under it (limit less the address
 * space mapped now, 0 when past it) if this process has an address-space
 * limit, 0 if none (or it cannot be read). Allocates nothing on the heap
 * (a run asks between steps, which allocate nothing there). */
int bfit_as_room(uint64_t *limit, uint64_t *room);

/* This process's mapped address space and resident memory
 * (/proc/self/statm), 1 if read, else 0 with both 0. Read with open/read
 * into the stack: no heap (stdio's fopen would allocate). */
int bfit_statm(uint64_t *mapped, uint64_t *resident);

#endif
