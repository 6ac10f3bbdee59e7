/* outpath.h - the files a command will write, checked before the work that
 * makes them: finding out after hours of training that the weights cannot
 * be written loses the training. */
#ifndef BFIT_OUTPATH_H
#define BFIT_OUTPATH_H

/* Whether a file can be made or replaced at path: path not a directory, its
 * folder an existing directory we may write into. BFIT_EIO naming field
 * (the option) and saying why and what would do. */
int bfit_outpath_check(const char *field, const char *path);

/* Whether a and b name the same file, existing or still to be made
 * ("x", "./x" and a link to x alike). */
int bfit_outpath_same(const char *a, const char *b);

#endif
