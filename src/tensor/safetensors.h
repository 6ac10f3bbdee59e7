/* safetensors.h - reading and writing safetensors files: the weights and
 * checkpoint format PyTorch and friends read.
 *
 * Layout: an 8-byte little-endian header length N, N bytes of JSON
 *   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
 *    ..., "__metadata__": {"key": "value", ...}}
 * (padded with spaces), then the byte buffer; offsets are relative to the
 * buffer's start, and the tensors cover the buffer exactly, without overlaps
 * or holes. The reader checks all of that and says which file and which
 * tensor or field is wrong; the writer never leaves half a file at its path.
 */
#ifndef BFIT_SAFETENSORS_H
#define BFIT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define BFIT_ST_MAXDIM 8
/* Largest header accepted, as the reference implementation (100 MB). */
#define BFIT_ST_MAX_HEADER 100000000ull

typedef struct bfit_st_tensor {
    const char *name;
    const char *dtype;              /* safetensors name: "F32", "BF16", "I32", ... */
    int ndim;                       /* 0..BFIT_ST_MAXDIM; 0 is a scalar */
    int64_t shape[BFIT_ST_MAXDIM];
    const void *data;               /* nbytes bytes; see bfit_st_read on alignment */
    size_t nbytes;
} bfit_st_tensor;

typedef struct bfit_st_file bfit_st_file;

/* Bytes per element of a safetensors dtype name, 0 if unknown. Known: BOOL,
 * U8, I8, F8_E4M3, F8_E5M2, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64. */
size_t bfit_st_dtype_size(const char *dtype);
/* Elements of a tensor (product of its shape; 1 for a scalar). */
int64_t bfit_st_numel(const bfit_st_tensor *t);

/* Metadata "crc32.<tensor name>" holds the CRC-32 (zlib's) of the tensor's
 * bytes as 8 lowercase hex digits; readers that do not know it ignore it. */
#define BFIT_ST_CRC_PREFIX "crc32."
unsigned long bfit_st_crc32(const void *p, size_t n);

/* Read and validate a whole file. The byte buffer is held in one 64-byte
 * aligned block, so a tensor's data is aligned as its begin offset is (files
 * we write keep every tensor at a multiple of its element size). Errors:
 * BFIT_EIO (cannot open/read), BFIT_EFORMAT (contents; the message names the
 * file and the tensor or field), BFIT_ENOMEM (host memory). Every tensor
 * with a checksum in the metadata is verified (BFIT_EFORMAT naming it). */
int bfit_st_read(const char *path, bfit_st_file **out);
/* The same over len bytes in memory (copied); name is what messages call it. */
int bfit_st_parse(const void *data, size_t len, const char *name, bfit_st_file **out);
void bfit_st_free(bfit_st_file *f);

/* Tensors in the order the header lists them. */
int bfit_st_count(const bfit_st_file *f);
const bfit_st_tensor *bfit_st_get(const bfit_st_file *f, int i);
const bfit_st_tensor *bfit_st_find(const bfit_st_file *f, const char *name); /* NULL if absent */
/* Metadata: value of key or NULL; and by index, for listing. */
const char *bfit_st_meta(const bfit_st_file *f, const char *key);
int bfit_st_meta_count(const bfit_st_file *f);
int bfit_st_meta_get(const bfit_st_file *f, int i, const char **key, const char **val);

/* 1 for a floating dtype (F32, F64, F16, BF16), which bfit_st_to_f32 converts. */
int bfit_st_is_float(const bfit_st_tensor *t);
/* Convert a floating tensor (F32, F64, BF16, F16) to n floats in dst; n must
 * equal its element count. BFIT_EFORMAT otherwise. Works on unaligned data. */
int bfit_st_to_f32(const bfit_st_tensor *t, float *dst, int64_t n);

/* Write n tensors and nmeta metadata pairs to path. The buffer holds the
 * tensors by element size, largest first, otherwise in the given order, so
 * each is aligned to its element size; the header lists them in that order.
 * The bytes go to "path.tmp.XXXXXX" beside path, which is fsynced, renamed
 * over path, and the directory fsynced.
 * Names must be unique and not "__metadata__"; nbytes must equal the shape's
 * element count times the dtype size. On failure the temporary file is
 * removed and an existing file at path is untouched. BFIT_EINVAL for bad
 * arguments, BFIT_EIO for the file system, BFIT_ENOMEM for host memory. */
int bfit_st_write(const char *path, const bfit_st_tensor *tensors, int n, const char *const *meta_keys,
                  const char *const *meta_vals, int nmeta);

typedef struct bfit_st_write_opts {
    int checksums;                               /* add "crc32.<name>" for every tensor */
    void (*mid)(void *ud, const char *tmp_path); /* tests: called with half the tensors in the temporary file */
    void *ud;
} bfit_st_write_opts;
/* bfit_st_write with options (NULL: none). Caller metadata may not use the
 * checksum prefix. */
int bfit_st_write_ex(const char *path, const bfit_st_tensor *tensors, int n, const char *const *meta_keys,
                     const char *const *meta_vals, int nmeta, const bfit_st_write_opts *o);

#endif
