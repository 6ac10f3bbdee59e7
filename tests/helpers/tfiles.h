/* tfiles.h - files for tests: a temporary folder for the test program (made
 * in its cmocka group set-up, removed with everything in it at the end),
 * paths in it and in the source tree, whole files read and written, and
 * weight files compared. Failures fail the test (cmocka), except in the
 * set-up and tear-down, which return -1 as cmocka wants. */
#ifndef BFIT_TFILES_H
#define BFIT_TFILES_H

#include <stddef.h>

/* The test program's temporary folder, "/tmp/bfit_<tag>_XXXXXX" once
 * tmp_setup has made it. */
extern char tmpdir[256];

/* Make the folder: 0, or -1 (cmocka's group set-up failed). */
int tmp_setup(const char *tag);
/* Remove it and everything in it: 0, or -1. */
int tmp_teardown(void);
/* tmpdir/name. */
void tmp_path(char *buf, size_t n, const char *name);

/* $BFIT_SOURCE_DIR/rel (CTest sets it; ../rel without it). */
void src_path(char *buf, size_t n, const char *rel);

/* A file's bytes (*n of them, NUL after them; free them). */
char *file_bytes(const char *path, long *n);
/* Write n bytes, or a string, as the whole file. */
void put_bytes(const char *path, const void *b, long n);
void put_text(const char *path, const char *text);

/* Every tensor of two safetensors files the same, bit for bit (their
 * metadata, the steps and accuracy, may differ in how they were reached). */
void assert_same_tensors(const char *pa, const char *pb);

#endif
