/* cpu_device.c - the CPU backend: oneDNN engine and stream, op life cycle,
 * shared helpers. The families of ops live in cpu_*.c beside it. */
#include "base/err.h"
#include "device/cpu.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

int cpu_dnnl_check(dnnl_status_t s, const char *what)
{
    if (s == dnnl_out_of_memory)
        return bfit_fail(BFIT_ENOMEM, "oneDNN: out of memory in %s", what);
    if (s == dnnl_unimplemented)
        return bfit_fail(BFIT_EDEVICE, "oneDNN: %s is not implemented for these shapes", what);
    return bfit_fail(BFIT_EDEVICE, "oneDNN: %s failed (status %d)", what, (int)s);
}

int cpu_md(dnnl_memory_desc_t *md, int ndims, const int64_t *dims)
{
    static const dnnl_format_tag_t tags[] = {dnnl_format_tag_undef, dnnl_a, dnnl_ab, dnnl_abc, dnnl_abcd};
    dnnl_dims_t d;
    if (ndims < 1 || ndims > 4)
        return bfit_fail(BFIT_EINVAL, "cpu: %d dims not supported", ndims);
    for (int i = 0; i < ndims; i++)
        d[i] = dims[i];
    CPU_TRY(dnnl_memory_desc_init_by_tag(md, ndims, d, dnnl_f32, tags[ndims]), "memory descriptor");
    return BFIT_OK;
}

int cpu_attr_user_scratchpad(dnnl_primitive_attr_t *attr)
{
    CPU_TRY(dnnl_primitive_attr_create(attr), "attribute");
    if (dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user) != dnnl_success) {
        dnnl_primitive_attr_destroy(*attr);
        return bfit_fail(BFIT_EDEVICE, "oneDNN: cannot set user scratchpad mode");
    }
    return BFIT_OK;
}

int cpu_pd_create(dnnl_primitive_desc_t *pd, const void *op_desc, const_dnnl_primitive_attr_t attr,
                  dnnl_engine_t eng, const_dnnl_primitive_desc_t hint, size_t *ws)
{
    const dnnl_memory_desc_t *smd;
    size_t sz;
    CPU_TRY(dnnl_primitive_desc_create(pd, op_desc, attr, eng, hint), "primitive descriptor");
    smd = dnnl_primitive_desc_query_md(*pd, dnnl_query_scratchpad_md, 0);
    sz = smd ? dnnl_memory_desc_get_size(smd) : 0;
    if (sz > *ws)
        *ws = sz;
    return BFIT_OK;
}

/* The memory object in op's cache slot for (prim p, slot i), pointed at ptr;
 * made on first use (the only host allocation an op makes after init). */
static int bind(cpu_op *op, int p, int i, const_dnnl_memory_desc_t md, const void *ptr, dnnl_memory_t *out,
                const char *what)
{
    dnnl_memory_t *m = &op->mem[p][i];
    if (!*m) {
        if (dnnl_memory_create(m, md, cpu_dev(op)->eng, (void *)ptr) != dnnl_success) {
            *m = NULL;
            return bfit_fail(BFIT_EDEVICE, "oneDNN: cannot wrap memory for %s", what);
        }
    } else if (dnnl_memory_set_data_handle(*m, (void *)ptr) != dnnl_success) {
        return bfit_fail(BFIT_EDEVICE, "oneDNN: cannot point memory at a buffer for %s", what);
    }
    *out = *m;
    return BFIT_OK;
}

int cpu_exec(cpu_op *op, int p, const cpu_arg *args, int nargs, void *scratch, const char *what)
{
    /* Memory objects wrap the caller's buffers (oneDNN allocates no data for
     * them); they are small host structs, kept in the op between calls. */
    dnnl_exec_arg_t ex[CPU_OP_MAXARGS];
    int n = 0, rc;
    const_dnnl_primitive_desc_t pd;
    const dnnl_memory_desc_t *smd;
    dnnl_status_t s;

    if (nargs > CPU_OP_MAXARGS - 1)
        return bfit_fail(BFIT_EINVAL, "cpu: %s has %d arguments, at most %d are supported", what, nargs,
                         CPU_OP_MAXARGS - 1);
    for (int i = 0; i < nargs; i++) {
        if (!args[i].ptr)
            continue;
        if ((rc = bind(op, p, i, args[i].md, args[i].ptr, &ex[n].memory, what)) != BFIT_OK)
            return rc;
        ex[n++].arg = args[i].arg;
    }
    dnnl_primitive_get_primitive_desc(op->prim[p], &pd);
    smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (smd && dnnl_memory_desc_get_size(smd) > 0) {
        /* the scratchpad sits at the start of the op's workspace */
        if (!scratch)
            return bfit_fail(BFIT_EINVAL, "cpu: %s needs a workspace and got none", what);
        if ((rc = bind(op, p, CPU_OP_MAXARGS - 1, smd, scratch, &ex[n].memory, what)) != BFIT_OK)
            return rc;
        ex[n++].arg = DNNL_ARG_SCRATCHPAD;
    }
    s = dnnl_primitive_execute(op->prim[p], cpu_dev(op)->stream, n, ex);
    if (s == dnnl_success)
        s = dnnl_stream_wait(cpu_dev(op)->stream);
    return s == dnnl_success ? BFIT_OK : cpu_dnnl_check(s, what);
}

static int cpu_op_new(bfit_device *d, const bfit_op_desc *desc, bfit_op **out)
{
    cpu_op *op = calloc(1, sizeof *op);
    int rc;

    if (!op)
        return bfit_fail(BFIT_ENOMEM, "cpu: cannot allocate an op record");
    op->base.dev = d;
    op->base.desc = *desc;
    switch (desc->kind) {
    case BFIT_OP_MATMUL: rc = cpu_matmul_init(op); break;
    case BFIT_OP_CONV_FWD:
    case BFIT_OP_CONV_BWD_DATA:
    case BFIT_OP_CONV_BWD_WEIGHTS: rc = cpu_conv_init(op); break;
    case BFIT_OP_POOL_FWD:
    case BFIT_OP_POOL_BWD: rc = cpu_pool_init(op); break;
    case BFIT_OP_BNORM_FWD:
    case BFIT_OP_BNORM_BWD: rc = cpu_bnorm_init(op); break;
    case BFIT_OP_LNORM_FWD:
    case BFIT_OP_LNORM_BWD: rc = cpu_lnorm_init(op); break;
    case BFIT_OP_ELTWISE_FWD:
    case BFIT_OP_ELTWISE_BWD: rc = cpu_eltwise_init(op); break;
    default: rc = cpu_simple_init(op); break;
    }
    if (rc != BFIT_OK) {
        bfit_op_free(&op->base);
        return rc;
    }
    *out = &op->base;
    return BFIT_OK;
}

static void cpu_op_free(bfit_op *base)
{
    cpu_op *op = (cpu_op *)base;
    if (op->fini)
        op->fini(op);
    for (int i = 0; i < CPU_OP_MAXPRIM; i++) {
        for (int k = 0; k < CPU_OP_MAXARGS; k++)
            if (op->mem[i][k])
                dnnl_memory_destroy(op->mem[i][k]);
        if (op->prim[i])
            dnnl_primitive_destroy(op->prim[i]);
        if (op->pd[i])
            dnnl_primitive_desc_destroy(op->pd[i]);
    }
    free(op);
}

static size_t cpu_op_workspace(const bfit_op *op) { return ((const cpu_op *)op)->ws; }
static size_t cpu_op_saved(const bfit_op *op) { return ((const cpu_op *)op)->saved; }
static int cpu_op_run(bfit_op *op, const bfit_op_args *a) { return ((cpu_op *)op)->run((cpu_op *)op, a); }

/* Large fills and copies (zeroing the gradients every step, flatten) go
 * faster on every core than on one; below this, waking the team costs more. */
#define PAR_BYTES (1u << 20)

/* [t*chunk, (t+1)*chunk) of n bytes for thread t, in whole cache lines */
static size_t share(size_t n, size_t *len)
{
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    size_t chunk = (n / (size_t)nt + 63) & ~(size_t)63, b = (size_t)t * chunk;
    *len = b >= n ? 0 : (n - b < chunk ? n - b : chunk);
    return b;
}

static int cpu_copy(bfit_device *d, void *dst, const void *src, size_t n)
{
    (void)d;
    /* overlapping ranges keep memmove's one-pass semantics */
    if (n < PAR_BYTES || ((char *)dst < (const char *)src + n && (const char *)src < (char *)dst + n)) {
        if (n)
            memmove(dst, src, n);
        return BFIT_OK;
    }
#pragma omp parallel
    {
        size_t len, b = share(n, &len);
        if (len)
            memcpy((char *)dst + b, (const char *)src + b, len);
    }
    return BFIT_OK;
}

static int cpu_zero(bfit_device *d, void *dst, size_t n)
{
    (void)d;
    if (n < PAR_BYTES) {
        if (n)
            memset(dst, 0, n);
        return BFIT_OK;
    }
#pragma omp parallel
    {
        size_t len, b = share(n, &len);
        if (len)
            memset((char *)dst + b, 0, len);
    }
    return BFIT_OK;
}

static void cpu_destroy(bfit_device *base)
{
    cpu_device *d = (cpu_device *)base;
    if (d->stream)
        dnnl_stream_destroy(d->stream);
    if (d->eng)
        dnnl_engine_destroy(d->eng);
    free(d);
}

static const bfit_device_vt cpu_vt = {
    .name = "cpu",
    .op_new = cpu_op_new,
    .op_workspace = cpu_op_workspace,
    .op_saved = cpu_op_saved,
    .op_run = cpu_op_run,
    .op_free = cpu_op_free,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .destroy = cpu_destroy,
};

int bfit_device_cpu_new(bfit_arena *arena, int nthreads, bfit_device **out)
{
    cpu_device *d = calloc(1, sizeof *d);

    *out = NULL;
    if (!d)
        return bfit_fail(BFIT_ENOMEM, "cpu: cannot allocate the device");
    d->base.vt = &cpu_vt;
    d->base.arena = arena;
    if (nthreads > 0)
        omp_set_num_threads(nthreads);
    d->base.nthreads = omp_get_max_threads();
    if (dnnl_engine_create(&d->eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&d->stream, d->eng, dnnl_stream_default_flags) != dnnl_success) {
        cpu_destroy(&d->base);
        return bfit_fail(BFIT_EDEVICE, "oneDNN: cannot create the CPU engine");
    }
    *out = &d->base;
    return BFIT_OK;
}
