/* device.c - backend-independent entry points: opening a device by name and
 * dispatching through its table. */
#include "base/err.h"
#include "device/device.h"

#include <stdlib.h>
#include <string.h>

bfit_cuda_cfg bfit_cuda_cfg_default(void)
{
    const char *e = getenv("BFIT_CUDA_POLICY");
    bfit_cuda_cfg c = {BFIT_CUDA_FASTEST, 1, -1};
    if (e && !strcmp(e, "lean"))
        c.policy = BFIT_CUDA_LEAN;
    return c;
}

int bfit_device_cuda_new(int index, bfit_device **out) { return bfit_device_cuda_new_cfg(index, NULL, out); }

#ifndef BFIT_HAVE_CUDA
/* cuda_device.c when built with CUDA */
int bfit_device_cuda_new_cfg(int index, const bfit_cuda_cfg *cfg, bfit_device **out)
{
    (void)index;
    (void)cfg;
    *out = NULL;
    return bfit_fail(BFIT_EDEVICE, "this batchfit was built without CUDA (configure with -DBFIT_CUDA=ON on a "
                                   "machine with the CUDA toolkit): use the cpu device");
}
#endif

int bfit_device_open(const char *name, const bfit_cpu_cfg *cpu, bfit_device **out)
{
    char *end;
    long idx = 0;

    *out = NULL;
    if (!name || !strcmp(name, "auto")) {
#ifdef BFIT_HAVE_CUDA
        if (bfit_device_cuda_new(0, out) == BFIT_OK)
            return BFIT_OK;
        bfit_clear_error();
#endif
        return bfit_device_cpu_new(cpu, out);
    }
    if (!strcmp(name, "cpu"))
        return bfit_device_cpu_new(cpu, out);
    if (!strncmp(name, "cuda", 4)) {
        if (name[4] == ':') {
            idx = strtol(name + 5, &end, 10);
            if (!name[5] || *end || idx < 0 || idx > 1024)
                return bfit_fail(BFIT_EINVAL, "device '%s': expected cuda:N with N a GPU index, e.g. cuda:0", name);
        } else if (name[4]) {
            return bfit_fail(BFIT_EINVAL, "unknown device '%s' (valid: cpu, cuda, cuda:N, auto)", name);
        }
        return bfit_device_cuda_new((int)idx, out);
    }
    return bfit_fail(BFIT_EINVAL, "unknown device '%s' (valid: cpu, cuda, cuda:N, auto)", name);
}

void bfit_device_free(bfit_device *d)
{
    if (d)
        d->vt->destroy(d);
}

const char *bfit_device_name(const bfit_device *d)
{
    bfit_device_info i;
    d->vt->info(d, &i);
    return i.name;
}

void bfit_device_info_get(const bfit_device *d, bfit_device_info *out) { d->vt->info(d, out); }

int bfit_device_memory(bfit_device *d, uint64_t *free_bytes, uint64_t *total_bytes)
{
    return d->vt->mem_info(d, free_bytes, total_bytes);
}

const bfit_block_source *bfit_device_blocks(const bfit_device *d) { return &d->blocks; }

bfit_arena *bfit_device_arena_new(bfit_device *d, uint64_t capacity) { return bfit_arena_new(capacity, &d->blocks); }

int bfit_op_new(bfit_device *d, const bfit_op_desc *desc, bfit_op **out)
{
    *out = NULL;
    if ((unsigned)desc->kind >= BFIT_OP_COUNT)
        return bfit_fail(BFIT_EINVAL, "device: unknown op kind %d", (int)desc->kind);
    if ((unsigned)desc->dtype >= BFIT_NDTYPES || !bfit_dtype_is_float(desc->dtype))
        return bfit_fail(BFIT_EINVAL, "device: ops compute in f32, bf16 or f16, not %s", bfit_dtype_name(desc->dtype));
    if ((desc->kind == BFIT_OP_SCALE || desc->kind == BFIT_OP_NORMS || desc->kind == BFIT_OP_SGD ||
         desc->kind == BFIT_OP_ADAMW) && desc->dtype != BFIT_F32)
        return bfit_fail(BFIT_EINVAL, "device: parameters and their gradients are f32: an op of kind %d must be f32",
                         (int)desc->kind);
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

int bfit_device_upload(bfit_device *d, void *dst, const void *host_src, size_t n)
{
    return n ? d->vt->upload(d, dst, host_src, n) : BFIT_OK;
}

int bfit_device_download(bfit_device *d, void *host_dst, const void *src, size_t n)
{
    return n ? d->vt->download(d, host_dst, src, n) : BFIT_OK;
}

int bfit_device_copy(bfit_device *d, void *dst, const void *src, size_t n)
{
    return n ? d->vt->copy(d, dst, src, n) : BFIT_OK;
}

int bfit_device_fill(bfit_device *d, void *dst, int byte, size_t n)
{
    return n ? d->vt->fill(d, dst, byte, n) : BFIT_OK;
}

int bfit_device_sync(bfit_device *d) { return d->vt->sync(d); }
