/* wsrc.h - a model file's starting weights: for node i's parameter k, the
 * file's tensor and its name (an ONNX initializer, which is PyTorch's
 * state_dict name). A graph and every model built from it share one
 * (reference counted); the last to go unmaps the file. Parameters are
 * uploaded to the device straight from the mapping: the host makes no copy
 * of f32 data. */
#ifndef BFIT_WSRC_H
#define BFIT_WSRC_H

#include "device/device.h"
#include "nn/onnx.h"

typedef struct bfit_wsrc bfit_wsrc;

typedef struct bfit_wsrc_entry {
    int node, param;
    char *name;
    const bfit_onnx_tensor *t;
} bfit_wsrc_entry;

/* A source over the bytes [buf, buf+len) and the model read from them, both
 * owned from here on: mapped (munmap) or malloc'd (free). */
int bfit_wsrc_new(void *buf, size_t len, int mapped, bfit_onnx_model *om, bfit_wsrc **out);
void bfit_wsrc_retain(bfit_wsrc *w);
void bfit_wsrc_release(bfit_wsrc *w);
const bfit_onnx_model *bfit_wsrc_model(const bfit_wsrc *w);

/* Record t as node's parameter param (nodes in increasing order). copy > 0:
 * the copy-th other parameter starting from the same tensor (its name gets
 * ".copy": an exporter's merged constants become parameters of their own). */
int bfit_wsrc_add(bfit_wsrc *w, int node, int param, const bfit_onnx_tensor *t, int copy);
const bfit_wsrc_entry *bfit_wsrc_find(const bfit_wsrc *w, int node, int param);
/* Node's parameter from becomes its parameter to (an embedding's type table moves past the position table
   added after it); BFIT_OK, or BFIT_EINVAL where there is none or to is taken. */
int bfit_wsrc_move(bfit_wsrc *w, int node, int from, int to);
int bfit_wsrc_count(const bfit_wsrc *w);

/* Upload the file's values of (node, param) as f32 into the device buffer
 * dst of bytes: 1 if done, 0 if the file has none for it; < 0 on failure. */
int bfit_wsrc_upload(const bfit_wsrc *w, int node, int param, bfit_device *dev, void *dst, size_t bytes);

#endif
