/* atomic.h - write a file so that it is either the old one or the whole new
 * one, never half: a temporary file beside it, synced, renamed over it, and
 * the directory synced. */
#ifndef BFIT_ATOMIC_H
#define BFIT_ATOMIC_H

#include <stddef.h>

typedef struct bfit_atomic_file {
    int fd;
    const char *path;  /* the caller's; must outlive the write */
    char tmp[4096];    /* path.tmp.XXXXXX */
} bfit_atomic_file;

/* Create the temporary file beside path (mode 0666 less the umask, as the
 * final file should have), locked while it is written. Temporary files of
 * earlier writes to path whose writer died (unlocked) are removed now, so a
 * save killed half-way leaves nothing behind for long. BFIT_EIO naming path
 * on failure. */
int bfit_atomic_open(bfit_atomic_file *af, const char *path);
/* Remove the stale temporary files (their writer died) of any file in dir
 * named <prefix>...<suffix>: a directory of checkpoints, each a new name. */
void bfit_atomic_sweep(const char *dir, const char *prefix, const char *suffix);
/* Write all n bytes; on failure the temporary file is removed (no commit or
 * abort needed) and BFIT_EIO says why. */
int bfit_atomic_write(bfit_atomic_file *af, const void *buf, size_t n);
/* fsync, close, rename over path, fsync the directory. On failure before the
 * rename the temporary file is removed and an existing file at path is
 * untouched. */
int bfit_atomic_commit(bfit_atomic_file *af);
/* Give up: close and remove the temporary file. */
void bfit_atomic_abort(bfit_atomic_file *af);

#endif
