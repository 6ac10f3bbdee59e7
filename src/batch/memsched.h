/* memsched.h - a memory schedule: capacity changes at optimizer steps, to
 * simulate another process taking and giving back device memory. */
#ifndef BFIT_MEMSCHED_H
#define BFIT_MEMSCHED_H

#include <stdint.h>


#endif
