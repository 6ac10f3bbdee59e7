/* device.c - backend-independent entry points: dispatch through the table. */
#include "base/err.h"
#include "device/device.h"

void bfit_device_free(bfit_device *d)
{
    if (d)
        d->vt->destroy(d);
}

int bfit_op_new(bfit_device *d, const bfit_op_desc *desc, bfit_op **out)
{
    *out = NULL;
    if ((unsigned)desc->kind >= BFIT_OP_COUNT)
        return bfit_fail(BFIT_EINVAL, "device: unknown op kind %d", (int)desc->kind);
    if (desc->dtype != BFIT_F32)
        return bfit_fail(BFIT_EINVAL, "device %s: data type %s is not supported yet", d->vt->name,
                         bfit_dtype_name(desc->dtype));
    return d->vt->op_new(d, desc, out);
}

size_t bfit_op_workspace_bytes(const bfit_op *op) { return op->dev->vt->op_workspace(op); }
size_t bfit_op_saved_bytes(const bfit_op *op) { return op->dev->vt->op_saved(op); }
int bfit_op_run(bfit_op *op, const bfit_op_args *args) { return op->dev->vt->op_run(op, args); }

void bfit_op_free(bfit_op *op)
{
    if (op)
        op->dev->vt->op_free(op);
}

int bfit_device_copy(bfit_device *d, void *dst, const void *src, size_t n) { return d->vt->copy(d, dst, src, n); }
int bfit_device_zero(bfit_device *d, void *dst, size_t n) { return d->vt->zero(d, dst, n); }
