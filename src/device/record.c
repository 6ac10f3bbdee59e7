/* record.c - a device that runs nothing and records the ops made on it.
 *
 * --device auto must choose a device that can run every op a model will
 * make, before the model is built on it. The layers alone know which ops
 * they make (and in which dtype), and only when they prepare; so the model
 * is built and prepared on this device, whose op_new notes each (kind,
 * dtype) pair and returns an empty op (no workspace, nothing saved). The
 * pairs are then asked of a real device (bfit_device_supports_needs). */
#include "base/err.h"
#include "device/device.h"

#include <stdlib.h>

typedef struct rec_device {
    bfit_device base;
    bfit_op_needs *into;
} rec_device;

static int rec_mem_info(bfit_device *d, uint64_t *free_bytes, uint64_t *total_bytes)
{
    (void)d;
    *free_bytes = *total_bytes = 0;
    return BFIT_OK;
}

static int rec_refuse(const char *what)
{
    return bfit_fail(BFIT_ESTATE, "the recording device has no memory and runs nothing (%s)", what);
}

static int rec_upload(bfit_device *d, void *dst, const void *h, size_t n)
{
    (void)d, (void)dst, (void)h, (void)n;
    return rec_refuse("upload");
}

static int rec_download(bfit_device *d, void *h, const void *src, size_t n)
{
    (void)d, (void)h, (void)src, (void)n;
    return rec_refuse("download");
}

static int rec_copy(bfit_device *d, void *dst, const void *src, size_t n)
{
    (void)d, (void)dst, (void)src, (void)n;
    return rec_refuse("copy");
}

static int rec_fill(bfit_device *d, void *dst, int byte, size_t n)
{
    (void)d, (void)dst, (void)byte, (void)n;
    return rec_refuse("fill");
}

static int rec_sync(bfit_device *d)
{
    (void)d;
    return BFIT_OK;
}

/* A cast is recorded under its 16-bit side: the dtype it makes exist. */
static int rec_op_new(bfit_device *d, const bfit_op_desc *desc, bfit_op **out)
{
    bfit_op *op = calloc(1, sizeof *op);
    bfit_dtype t = desc->kind == BFIT_OP_CAST && desc->dtype == BFIT_F32 ? desc->u.cast.to : desc->dtype;
    if (!op)
        return bfit_fail(BFIT_ENOMEM, "out of host memory");
    bfit_op_needs_add(((rec_device *)d)->into, desc->kind, t);
    if (!((rec_device *)d)->into->cpu_only)
        ((rec_device *)d)->into->cpu_only = bfit_op_cpu_only(desc);
    op->dev = d;
    op->desc = *desc;
    *out = op;
    return BFIT_OK;
}

static size_t rec_op_zero(const bfit_op *op)
{
    (void)op;
    return 0;
}

static int rec_op_run(bfit_op *op, const bfit_op_args *a)
{
    (void)op, (void)a;
    return rec_refuse("op");
}

static void rec_op_free(bfit_op *op) { free(op); }

static void rec_info(const bfit_device *d, bfit_device_info *out)
{
    (void)d;
    *out = (bfit_device_info){.name = "recorder", .detail = "records the ops a model makes"};
}

static void rec_destroy(bfit_device *d) { free(d); }

static int rec_alloc(void *ud, size_t n, void **out)
{
    (void)ud, (void)n;
    *out = NULL;
    return BFIT_ENOMEM;
}

static const bfit_device_vt rec_vt = {
    .name = "recorder",
    .mem_info = rec_mem_info,
    .upload = rec_upload,
    .download = rec_download,
    .copy = rec_copy,
    .fill = rec_fill,
    .sync = rec_sync,
    .op_new = rec_op_new,
    .op_workspace = rec_op_zero,
    .op_saved = rec_op_zero,
    .op_run = rec_op_run,
    .op_free = rec_op_free,
    .info = rec_info,
    .destroy = rec_destroy,
};

int bfit_device_recorder_new(bfit_op_needs *into, bfit_device **out)
{
    rec_device *d = calloc(1, sizeof *d);
    *out = NULL;
    if (!d)
        return bfit_fail(BFIT_ENOMEM, "out of host memory");
    d->base.vt = &rec_vt;
    d->into = into;
    d->base.blocks.alloc = rec_alloc;
    d->base.blocks.ud = d;
    *out = &d->base;
    return BFIT_OK;
}
