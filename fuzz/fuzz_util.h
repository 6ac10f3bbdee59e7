/* fuzz_util.h - what the harnesses share: the library's error state is
 * quiet (errors are expected), and inputs that the loaders read from a path
 * are written to a file of this process's own (in /dev/shm when there is
 * one: no disk in the loop). */
#ifndef BFIT_FUZZ_UTIL_H
#define BFIT_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* path gets "<dir>/bfit_fuzz_<pid>_<name>" holding the n bytes; 0 on success. */
static inline int fuzz_file(const char *name, const uint8_t *d, size_t n, char *path, size_t len)
{
    FILE *f;
    snprintf(path, len, "%s/bfit_fuzz_%d_%s", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid(),
             name);
    if (!(f = fopen(path, "wb")))
        return -1;
    if (n && fwrite(d, 1, n, f) != n) {
        fclose(f);
        return -1;
    }
    return fclose(f);
}

#endif
