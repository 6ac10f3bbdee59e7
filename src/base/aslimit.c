/* aslimit.c - the address-space limit and the room it leaves (aslimit.h). */
#include "base/aslimit.h"
#include "batchfit.h" /* bfit_format_size */

#include <fcntl.h>
#include <malloc.h>
#include <stdlib.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

int bfit_statm(uint64_t *mapped, uint64_t *resident)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    unsigned long long size = 0, res = 0;
    long page = sysconf(_SC_PAGESIZE);

    *mapped = *resident = 0;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    if (sscanf(buf, "%llu %llu", &size, &res) != 2 || page <= 0)
        return 0;
    *mapped = (uint64_t)size * (uint64_t)page;
    *resident = (uint64_t)res * (uint64_t)page;
    return 1;
}

int bfit_as_room(uint64_t *limit, uint64_t *room)
{
    struct rlimit rl;
    uint64_t used, resident;

    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return 0;
    bfit_statm(&used, &resident);
    *limit = (uint64_t)rl.rlim_cur;
    *room = used < *limit ? *limit - used : 0;
    return 1;
}

void bfit_as_raise(uint64_t raise, char *buf, size_t n)
{
    uint64_t limit, room, kib;
    char s1[32];

    if (!raise || !bfit_as_room(&limit, &room)) {
        snprintf(buf, n, "raise ulimit -v");
        return;
    }
    kib = (limit + raise + (1u << 20) - 1) / (1u << 20) * 1024; /* up to a whole MiB */
    snprintf(buf, n, "raise ulimit -v by at least %s (`ulimit -v %llu` or more)",
             bfit_format_size(raise, s1, sizeof s1), (unsigned long long)kib);
}

void bfit_as_one_heap(void)
{
    struct rlimit rl;

    if (getenv("MALLOC_ARENA_MAX") || getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return;
#ifdef M_ARENA_MAX
    mallopt(M_ARENA_MAX, 1);
#endif
}
