/* memsched.h - a memory schedule: capacity changes at optimizer steps, to
 * simulate another process taking and giving back device memory. */
#ifndef BFIT_MEMSCHED_H
#define BFIT_MEMSCHED_H

#include <stdint.h>

/* ---- memory schedules (simulating a co-tenant) ------------------------------ */
typedef struct bfit_mem_point {
    int64_t step;
    uint64_t capacity;
} bfit_mem_point;

#define BFIT_MEM_SCHEDULE_MAX 64
/* Parse "STEP:SIZE,..." ("200:150MiB,400:1GiB"): steps 0..BFIT_COUNT_MAX,
 * strictly increasing; sizes as bfit_parse_capacity (not 0); blanks around
 * items allowed, empty items not. BFIT_EINVAL naming the 1-based character
 * position otherwise (the batch schedule's rules). */
int bfit_mem_schedule_parse(const char *text, bfit_mem_point *out, int max, int *n);



#endif
