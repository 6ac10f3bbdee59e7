/* atomic.c - whole-or-nothing file writes (see atomic.h). */
#include "base/atomic.h"
#include "base/err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int write_full(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EIO;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Create path.tmp.XXXXXX exclusively, with mode 0666 less the umask (as the
 * final file should have; mkstemp would give 0600). */
static int open_temp(const char *path, char *tmp, size_t len)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    static _Thread_local uint64_t counter;
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    for (int attempt = 0; attempt < 100; attempt++) {
        uint64_t r = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid() << 32 ^
                     ++counter * 0xBF58476D1CE4E5B9ull;
        char suf[7];
        int fd;
        for (int i = 0; i < 6; i++, r /= 62)
            suf[i] = abc[r % 62];
        suf[6] = '\0';
        if ((size_t)snprintf(tmp, len, "%s.tmp.%s", path, suf) >= len) {
            errno = ENAMETOOLONG;
            return -1;
        }
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return -1;
}

/* fsync the directory holding path, so the rename itself is durable. */
static int sync_dir(const char *path)
{
    char *dir = strdup(path), *slash;
    int fd, rc = 0;
    if (!dir)
        return -1;
    slash = strrchr(dir, '/');
    if (!slash)
        strcpy(dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        rc = -1;
    } else {
        /* some file systems cannot sync a directory: nothing more to do there */
        if (fsync(fd) != 0 && errno != EINVAL && errno != EROFS)
            rc = -1;
        close(fd);
    }
    free(dir);
    return rc;
}

int bfit_atomic_open(bfit_atomic_file *af, const char *path)
{
    af->path = path;
    af->fd = open_temp(path, af->tmp, sizeof af->tmp);
    if (af->fd < 0)
        return bfit_fail(BFIT_EIO, "%s: cannot create a temporary file beside it: %s", path, strerror(errno));
    return BFIT_OK;
}

void bfit_atomic_abort(bfit_atomic_file *af)
{
    if (af->fd >= 0)
        close(af->fd);
    af->fd = -1;
    unlink(af->tmp);
}

int bfit_atomic_write(bfit_atomic_file *af, const void *buf, size_t n)
{
    if (write_full(af->fd, buf, n) != 0) {
        int rc = bfit_fail(BFIT_EIO, "%s: writing %s failed: %s", af->path, af->tmp, strerror(errno));
        bfit_atomic_abort(af);
        return rc;
    }
    return BFIT_OK;
}

int bfit_atomic_commit(bfit_atomic_file *af)
{
    int rc;
    if (fsync(af->fd) != 0) {
        rc = bfit_fail(BFIT_EIO, "%s: syncing %s failed: %s", af->path, af->tmp, strerror(errno));
        bfit_atomic_abort(af);
        return rc;
    }
    if (close(af->fd) != 0) {
        af->fd = -1;
        rc = bfit_fail(BFIT_EIO, "%s: writing %s failed: %s", af->path, af->tmp, strerror(errno));
        bfit_atomic_abort(af);
        return rc;
    }
    af->fd = -1;
    if (rename(af->tmp, af->path) != 0) {
        rc = bfit_fail(BFIT_EIO, "%s: cannot rename %s over it: %s", af->path, af->tmp, strerror(errno));
        unlink(af->tmp);
        return rc;
    }
    if (sync_dir(af->path) != 0) /* the new file is in place; only its durability is in doubt */
        return bfit_fail(BFIT_EIO, "%s: written, but its directory could not be synced: %s", af->path,
                         strerror(errno));
    return BFIT_OK;
}
