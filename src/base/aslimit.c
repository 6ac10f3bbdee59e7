/* aslimit.c - the address-space limit and the room it leaves (aslimit.h). */
#include "base/aslimit.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

/* The address space this process has mapped (the first field of
 * /proc/self/statm, in pages), 0 if unknown; read with open/read into the
 * stack, no heap. */
static uint64_t mapped_bytes(void)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    unsigned long long pages = 0;
    long page = sysconf(_SC_PAGESIZE);

    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return sscanf(buf, "%llu", &pages) == 1 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

int bfit_as_room(uint64_t *limit, uint64_t *room)
{
    struct rlimit rl;
    uint64_t used;

    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return 0;
    used = mapped_bytes();
    *limit = (uint64_t)rl.rlim_cur;
    *room = used < *limit ? *limit - used : 0;
    return 1;
}
