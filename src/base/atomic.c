/* atomic.c - whole-or-nothing file writes (see atomic.h). */
#include "base/atomic.h"
#include "base/err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
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
static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
#define SUFFIX_LEN 6

/* The temporary file is locked (flock) while it is written, so a writer
 * that died (a kill during a save) is told from one still at work: the lock
 * goes with the process. 0: ours and locked (or the file system has no
 * locks: then no sweep removes anything either); -1: another process's
 * stale-file sweep holds it or removed it between our create and our lock. */
static int lock_new(int fd)
{
    struct stat st;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0)
        return errno == EWOULDBLOCK ? -1 : 0;
    return fstat(fd, &st) == 0 && st.st_nlink > 0 ? 0 : -1;
}

static int open_temp(const char *path, char *tmp, size_t len)
{
    static _Thread_local uint64_t counter;
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    for (int attempt = 0; attempt < 100; attempt++) {
        uint64_t r = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid() << 32 ^
                     ++counter * 0xBF58476D1CE4E5B9ull;
        char suf[7];
        int fd;
        for (int i = 0; i < SUFFIX_LEN; i++, r /= 62)
            suf[i] = abc[r % 62];
        suf[SUFFIX_LEN] = '\0';
        if ((size_t)snprintf(tmp, len, "%s.tmp.%s", path, suf) >= len) {
            errno = ENAMETOOLONG;
            return -1;
        }
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0 && lock_new(fd) == 0)
            return fd;
        if (fd >= 0) {
            close(fd); /* swept away under us: another name */
            continue;
        }
        if (errno != EEXIST)
            return -1;
    }
    return -1;
}

/* name is "<prefix>...<suffix>.tmp.XXXXXX" with our alphabet (exact: the
 * name is prefix + suffix), one of our temporary files. */
static int is_our_temp(const char *name, const char *prefix, const char *suffix, int exact)
{
    size_t n = strlen(name), np = strlen(prefix), ns = strlen(suffix), tail = 5 + SUFFIX_LEN;
    const char *t;
    if (n < np + ns + tail || strncmp(name, prefix, np) != 0 || (exact && n != np + ns + tail))
        return 0;
    t = name + n - tail;
    if (strncmp(t - ns, suffix, ns) != 0 || strncmp(t, ".tmp.", 5) != 0)
        return 0;
    for (int i = 0; i < SUFFIX_LEN; i++)
        if (!t[5 + i] || !strchr(abc, t[5 + i]))
            return 0;
    return 1;
}

/* Remove the temporary files in dir whose writer is gone (killed during a
 * save: they can be hundreds of MB). One still being written holds its lock
 * and stays. Best effort: nothing here fails a write. */
static void sweep(const char *dir, const char *prefix, const char *suffix, int exact, const char *mine)
{
    DIR *dp;
    struct dirent *e;
    int dfd;

    if (!(dp = opendir(dir)))
        return;
    dfd = dirfd(dp);
    while ((e = readdir(dp))) {
        struct stat a, b;
        int fd;
        if (!is_our_temp(e->d_name, prefix, suffix, exact) || (mine && !strcmp(e->d_name, mine)))
            continue;
        fd = openat(dfd, e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0)
            continue;
        /* unlocked: its writer is dead; and still the file of that name */
        if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &a) == 0 && S_ISREG(a.st_mode) &&
            fstatat(dfd, e->d_name, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
            unlinkat(dfd, e->d_name, 0);
        close(fd);
    }
    closedir(dp);
}

/* The temporary files of earlier writes to path. */
static void sweep_stale(const char *path, const char *mine)
{
    char dir[4096];
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;

    if (slash)
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    else
        snprintf(dir, sizeof dir, ".");
    sweep(dir, base, "", 1, mine);
}

void bfit_atomic_sweep(const char *dir, const char *prefix, const char *suffix)
{
    sweep(dir, prefix, suffix, 0, NULL);
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
    {
        const char *slash = strrchr(af->tmp, '/');
        sweep_stale(path, slash ? slash + 1 : af->tmp);
    }
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
