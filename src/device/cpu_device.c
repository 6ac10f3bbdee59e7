/* cpu_device.c - the CPU backend: oneDNN engine and stream, op life cycle,
 * shared helpers. The families of ops live in cpu_*.c beside it. */
#include "base/aslimit.h"
#include "base/clock.h"
#include "base/err.h"
#include "device/cpu.h"
#include "device/cpu_isa.h"
#include "device/optime.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

int bfit_cpu_dnnl_check(dnnl_status_t s, const char *what)
{
    if (s == dnnl_out_of_memory)
        return bfit_fail(BFIT_ENOMEM, "oneDNN: out of memory in %s", what);
    if (s == dnnl_unimplemented)
        return bfit_fail(BFIT_EDEVICE, "oneDNN: %s is not implemented for these shapes", what);
    return bfit_fail(BFIT_EDEVICE, "oneDNN: %s failed (status %d)", what, (int)s);
}

dnnl_data_type_t bfit_cpu_dt(bfit_dtype t)
{
    switch (t) {
    case BFIT_BF16: return dnnl_bf16;
    case BFIT_F16: return dnnl_f16;
    case BFIT_I32: return dnnl_s32;
    default: return dnnl_f32;
    }
}

int bfit_cpu_md(dnnl_memory_desc_t *md, int ndims, const int64_t *dims) { return bfit_cpu_md_dt(md, ndims, dims, BFIT_F32); }

int bfit_cpu_md_dt(dnnl_memory_desc_t *md, int ndims, const int64_t *dims, bfit_dtype t)
{
    static const dnnl_format_tag_t tags[] = {dnnl_format_tag_undef, dnnl_a, dnnl_ab, dnnl_abc, dnnl_abcd, dnnl_abcde};
    dnnl_dims_t d;
    if (ndims < 1 || ndims > 5)
        return bfit_fail(BFIT_EINVAL, "cpu: %d dims not supported", ndims);
    for (int i = 0; i < ndims; i++)
        d[i] = dims[i];
    CPU_TRY(dnnl_memory_desc_init_by_tag(md, ndims, d, bfit_cpu_dt(t), tags[ndims]), "memory descriptor");
    return BFIT_OK;
}

int bfit_cpu_md_blocked(dnnl_memory_desc_t *md, const int64_t *dims, bfit_dtype t, int block)
{
    dnnl_dims_t d = {dims[0], dims[1], dims[2], dims[3]};
    if (block != 8 && block != 16)
        return bfit_fail(BFIT_EINVAL, "cpu: a channel block of %d (8 or 16: nChw8c, nChw16c)", block);
    CPU_TRY(dnnl_memory_desc_init_by_tag(md, 4, d, bfit_cpu_dt(t), block == 8 ? dnnl_nChw8c : dnnl_nChw16c),
            "memory descriptor (nChw8c/16c)");
    return BFIT_OK;
}

int bfit_cpu_attr_user_scratchpad(dnnl_primitive_attr_t *attr)
{
    CPU_TRY(dnnl_primitive_attr_create(attr), "attribute");
    if (dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user) != dnnl_success) {
        dnnl_primitive_attr_destroy(*attr);
        return bfit_fail(BFIT_EDEVICE, "oneDNN: cannot set user scratchpad mode");
    }
    return BFIT_OK;
}

size_t bfit_cpu_pd_scratch(const_dnnl_primitive_desc_t pd)
{
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    return smd ? dnnl_memory_desc_get_size(smd) : 0;
}

static int pd_create(cpu_op *op, int p, const void *op_desc, const_dnnl_primitive_attr_t attr,
                     const_dnnl_primitive_desc_t hint, size_t *ws, int in_f32)
{
    size_t end;
    int rc;

    op->nstage[p] = 0;
    if (in_f32) {
        if ((rc = bfit_cpu_bf16_pd_create(op, p, op_desc, attr, hint, &end)) != BFIT_OK)
            return rc;
    } else {
        CPU_TRY(dnnl_primitive_desc_create(&op->pd[p], op_desc, attr, cpu_dev(op)->eng, hint), "primitive descriptor");
        end = bfit_cpu_pd_scratch(op->pd[p]);
    }
    op->pd_ws[p] = end;
    if (end > *ws)
        *ws = end;
    return BFIT_OK;
}

int bfit_cpu_pd_create(cpu_op *op, int p, const void *op_desc, const_dnnl_primitive_attr_t attr,
                       const_dnnl_primitive_desc_t hint, size_t *ws)
{
    return pd_create(op, p, op_desc, attr, hint, ws, cpu_dev(op)->bf16_f32);
}

int bfit_cpu_pd_create_f32(cpu_op *op, int p, const void *op_desc, const_dnnl_primitive_attr_t attr,
                           const_dnnl_primitive_desc_t hint, size_t *ws)
{
    return pd_create(op, p, op_desc, attr, hint, ws, 1);
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

/* Point slot i at args[i]'s buffer, or at its f32 copy in the workspace
 * where prim p computes a bf16 argument in f32 (converted into it first if
 * the primitive reads it). */
static int bind_arg(cpu_op *op, int p, int i, const cpu_arg *a, char *scratch, dnnl_memory_t *out, const char *what)
{
    const cpu_stage *st = bfit_cpu_bf16_stage_of(op, p, a->arg);
    if (!st)
        return bind(op, p, i, a->md, a->ptr, out, what);
    if (!scratch)
        return bfit_fail(BFIT_EINVAL, "cpu: %s needs a workspace and got none", what);
    if (st->in)
        bfit_cpu_bf16_cast(a->ptr, scratch + st->off, (int64_t)st->n, 0);
    return bind(op, p, i, dnnl_primitive_desc_query_md(op->pd[p], dnnl_query_exec_arg_md, a->arg),
                scratch + st->off, out, what);
}

/* The bf16 outputs of prim p back from their f32 copies. */
static void unstage(const cpu_op *op, int p, const cpu_arg *args, int nargs, char *scratch)
{
    for (int i = 0; i < nargs; i++) {
        const cpu_stage *st = args[i].ptr ? bfit_cpu_bf16_stage_of(op, p, args[i].arg) : NULL;
        if (st && st->out)
            bfit_cpu_bf16_cast(scratch + st->off, (void *)args[i].ptr, (int64_t)st->n, 1);
    }
}

static int exec(cpu_op *op, int p, const cpu_arg *args, int nargs, void *scratch, const char *what)
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
        if ((rc = bind_arg(op, p, i, &args[i], scratch, &ex[n].memory, what)) != BFIT_OK)
            return rc;
        ex[n++].arg = args[i].arg;
    }
    /* made at the first execution, not with the op: planning makes ops by
     * the thousand to learn their workspaces, and a primitive's creation
     * (its code generated) is most of an op's */
    if (!op->prim[p] && (rc = bfit_cpu_kernel_room(what)) != BFIT_OK)
        return rc;
    if (!op->prim[p] && (s = dnnl_primitive_create(&op->prim[p], op->pd[p])) != dnnl_success)
        return bfit_cpu_dnnl_check(s, what);
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
    if (s != dnnl_success)
        return bfit_cpu_dnnl_check(s, what);
    if (op->nstage[p])
        unstage(op, p, args, nargs, scratch);
    return BFIT_OK;
}

/* A small primitive is made for one thread and run with one: oneDNN then
 * opens no parallel region (no thread to wake). */
int bfit_cpu_exec(cpu_op *op, int p, const cpu_arg *args, int nargs, void *scratch, const char *what)
{
    int t, rc;
    if (!(op->serial >> p & 1u))
        return exec(op, p, args, nargs, scratch, what);
    t = bfit_cpu_serial_begin();
    rc = exec(op, p, args, nargs, scratch, what);
    bfit_cpu_serial_end(t);
    return rc;
}

int bfit_cpu_small(const bfit_op_desc *d)
{
    switch (d->kind) {
    case BFIT_OP_MATMUL: return 2 * d->u.mm.M * d->u.mm.N * d->u.mm.K < CPU_SMALL_FLOPS;
    case BFIT_OP_ELTWISE_FWD:
    case BFIT_OP_ELTWISE_BWD: return d->u.elt.n < BFIT_PAR_MIN;
    default: return 0;
    }
}

static int op_init_kind(cpu_op *op)
{
    switch (op->base.desc.kind) {
    case BFIT_OP_MATMUL: return bfit_cpu_matmul_init(op);
    case BFIT_OP_CONV_FWD:
    case BFIT_OP_CONV_BWD_DATA:
    case BFIT_OP_CONV_BWD_WEIGHTS: return bfit_cpu_conv_init(op);
    case BFIT_OP_POOL_FWD:
    case BFIT_OP_POOL_BWD: return bfit_cpu_pool_init(op);
    case BFIT_OP_BNORM_FWD:
    case BFIT_OP_BNORM_BWD: return bfit_cpu_bnorm_init(op);
    case BFIT_OP_LNORM_FWD:
    case BFIT_OP_LNORM_BWD: return bfit_cpu_lnorm_init(op);
    case BFIT_OP_ELTWISE_FWD:
    case BFIT_OP_ELTWISE_BWD: return bfit_cpu_eltwise_init(op);
    case BFIT_OP_SGD:
    case BFIT_OP_ADAMW: return bfit_cpu_optim_init(op);
    case BFIT_OP_EMBED_FWD:
    case BFIT_OP_EMBED_BWD: return bfit_cpu_embed_init(op);
    case BFIT_OP_ATTN_FWD:
    case BFIT_OP_ATTN_BWD: return bfit_cpu_attn_init(op);
    case BFIT_OP_CONCAT_FWD:
    case BFIT_OP_CONCAT_BWD:
    case BFIT_OP_TRANSPOSE:
    case BFIT_OP_ADD_ROWS:
    case BFIT_OP_SLICE_FWD:
    case BFIT_OP_SLICE_BWD: return bfit_cpu_concat_init(op);
    case BFIT_OP_CHSCALE_FWD:
    case BFIT_OP_CHSCALE_BWD: return bfit_cpu_chscale_init(op);
    case BFIT_OP_PRELU_FWD:
    case BFIT_OP_PRELU_BWD: return bfit_cpu_prelu_init(op);
    case BFIT_OP_GNORM_FWD:
    case BFIT_OP_GNORM_BWD: return bfit_cpu_gnorm_init(op);
    case BFIT_OP_ROPE_FWD:
    case BFIT_OP_ROPE_BWD: return bfit_cpu_rope_init(op);
    case BFIT_OP_REPEAT_FWD:
    case BFIT_OP_REPEAT_BWD: return bfit_cpu_repeat_init(op);
    case BFIT_OP_SEQMEAN_FWD:
    case BFIT_OP_SEQMEAN_BWD: return bfit_cpu_seqmean_init(op);
    case BFIT_OP_GATHER_FWD:
    case BFIT_OP_GATHER_BWD: return bfit_cpu_gather_init(op);
    default: return bfit_cpu_simple_init(op);
    }
}

/* A small op is made with one thread: a primitive descriptor may split its
 * work for the count it is made with. */
static int op_init(cpu_op *op)
{
    int t, rc;
    if (!bfit_cpu_small(&op->base.desc))
        return op_init_kind(op);
    t = bfit_cpu_serial_begin();
    rc = op_init_kind(op);
    bfit_cpu_serial_end(t);
    op->serial = CPU_SERIAL_ALL;
    return rc;
}

static void cpu_op_free(bfit_op *base);

int bfit_cpu_op_make(bfit_device *d, const bfit_op_desc *desc, cpu_op **out)
{
    cpu_op *op = calloc(1, sizeof *op);
    int rc;
    *out = NULL;
    if (!op)
        return bfit_fail(BFIT_ENOMEM, "cpu: cannot allocate an op record");
    op->base.dev = d;
    op->base.desc = *desc;
    if ((rc = op_init(op)) != BFIT_OK) {
        cpu_op_free(&op->base);
        return rc;
    }
    *out = op;
    return BFIT_OK;
}

void bfit_cpu_op_destroy(cpu_op *op)
{
    if (op)
        cpu_op_free(&op->base);
}

static int cpu_op_new(bfit_device *d, const bfit_op_desc *desc, bfit_op **out)
{
    cpu_op *op;
    int rc;

    if (desc->dtype == BFIT_F16)
        return bfit_fail(BFIT_EINVAL, "cpu: f16 is not supported on this device (oneDNN has no f16 kernels for this "
                                      "CPU): use bf16");
    op = calloc(1, sizeof *op);
    if (!op)
        return bfit_fail(BFIT_ENOMEM, "cpu: cannot allocate an op record");
    op->base.dev = d;
    op->base.desc = *desc;
    /* primitives are made for the thread count they will run with */
    rc = bfit_cpu_enter((cpu_device *)d, NULL, NULL, 0, "op creation");
    if (rc == BFIT_OK) {
        rc = op_init(op);
        bfit_cpu_leave((cpu_device *)d);
    }
    if (rc != BFIT_OK) {
        cpu_op_free(&op->base);
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

/* The pointers of a's lists (a concatenation's inputs or their gradients)
 * after the named ones in p; returns the new count. */
static int list_ptrs(const bfit_op *base, const bfit_op_args *a, const void **p, const char **nm, int n)
{
    int k = base->desc.kind == BFIT_OP_CONCAT_FWD || base->desc.kind == BFIT_OP_CONCAT_BWD ? base->desc.u.concat.n : 0;
    for (int i = 0; i < k && i < BFIT_OP_MAXCAT; i++) {
        p[n] = a->srcs ? a->srcs[i] : a->dsts ? a->dsts[i] : NULL;
        nm[n++] = a->srcs ? "srcs[]" : "dsts[]";
    }
    return n;
}

static int cpu_op_run(bfit_op *base, const bfit_op_args *a)
{
    cpu_op *op = (cpu_op *)base;
    cpu_device *d = (cpu_device *)base->dev;
    const void *p[25 + BFIT_OP_MAXCAT] = {a->src,  a->src2,      a->weights,   a->bias,      a->diff_dst,   a->scale,
                       a->shift, a->dst,       a->diff_src,  a->diff_weights, a->diff_bias, a->diff_scale,
                       a->diff_shift, a->mean, a->var,       a->rmean,     a->rvar,       a->saved,
                       a->workspace, a->labels, a->lens,     a->stats,     a->state0,    a->state1, a->rows};
    const char *nm[25 + BFIT_OP_MAXCAT] = {"src", "src2", "weights", "bias", "diff_dst", "scale", "shift", "dst",
                                     "diff_src", "diff_weights", "diff_bias", "diff_scale", "diff_shift", "mean",
                                     "var", "rmean", "rvar", "saved", "workspace", "labels", "lens", "stats",
                                     "state0", "state1", "rows"};
    int rc = bfit_cpu_enter(d, p, nm, list_ptrs(base, a, p, nm, 25), "op");
    if (rc != BFIT_OK)
        return rc;
    if (op->serial == CPU_SERIAL_ALL) {
        int t = bfit_cpu_serial_begin();
        rc = op->run(op, a);
        bfit_cpu_serial_end(t);
    } else {
        rc = op->run(op, a);
    }
    bfit_cpu_leave(d);
    return rc;
}

static void cpu_info(const bfit_device *base, bfit_device_info *out)
{
    cpu_device *d = (cpu_device *)base;
    const dnnl_version_t *v = dnnl_version();
    int t = d->threads > 0 ? d->threads : omp_get_max_threads();
    uint64_t limit, room;
    snprintf(d->detail, sizeof d->detail, "oneDNN %d.%d, %d thread%s, %s%s", v->major, v->minor, t, t == 1 ? "" : "s",
             bfit_cpu_isa_name(bfit_cpu_isa_get()), d->bf16_f32 ? ", bf16 computed in f32" : "");
    out->name = "cpu";
    out->detail = d->detail;
    out->threads = t;
    out->cpus = bfit_cpu_allowed(d);
    out->check = d->check != 0;
    out->shared = 0;   /* host RAM: MemAvailable moves with the page cache; not followed */
    out->limited = bfit_as_room(&limit, &room); /* the host buffers, the data and oneDNN share the limit */
    out->overhead = 0;
    /* AVX-512 alone emulates bf16 (0.44x of f32 on the main job's CNN, docs/performance.md) */
    out->bf16_fast = !d->bf16_f32 && (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core_bf16) ==
                                         dnnl_cpu_isa_avx512_core_bf16;
}

static void cpu_destroy(bfit_device *base)
{
    cpu_device *d = (cpu_device *)base;
    bfit_cpu_pin(d, d->pin_team, 0); /* the caller's thread, and libgomp's, as they were */
    if (d->stream)
        dnnl_stream_destroy(d->stream);
    if (d->eng)
        dnnl_engine_destroy(d->eng);
    bfit_cpu_blocks_fini(d);
    free(d);
}

/* The real monotonic clock: the monitor only reports, so it does not read
 * base/clock.h's (whose test clock advances at every reading). */
static double wall_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Resident memory of this process, 0 if unknown (base/aslimit.c reads it
 * without the heap: the monitor samples between training steps, which
 * allocate nothing there). */
static uint64_t resident_bytes(void)
{
    uint64_t mapped, res;
    bfit_statm(&mapped, &res);
    return res;
}

/* The monitor's view of the CPU: this process's CPU use since the last
 * sample (or the device's opening) as a share of the threads ops run on
 * (past 100% when the data loader's threads are busy too), its resident
 * memory, and the machine's available memory. */
static int cpu_sample(bfit_device *base, bfit_device_sample *out)
{
    cpu_device *d = (cpu_device *)base;
    double cpu = bfit_clock_process_cpu(), wall = wall_seconds();
    int t = d->threads > 0 ? d->threads : omp_get_max_threads();
    uint64_t rss = resident_bytes();

    if (wall > d->mon_wall && d->mon_wall > 0) {
        out->busy = 100.0 * (cpu - d->mon_cpu) / ((wall - d->mon_wall) * (t > 0 ? t : 1));
        out->have |= BFIT_SAMPLE_BUSY;
    }
    d->mon_cpu = cpu;
    d->mon_wall = wall;
    if (rss) {
        out->self_bytes = rss;
        out->have |= BFIT_SAMPLE_SELF;
    }
    if (bfit_cpu_mem_info(base, &out->free_bytes, &out->total_bytes) == BFIT_OK)
        out->have |= BFIT_SAMPLE_FREE;
    return BFIT_OK;
}

/* Every kind, in f32 and bf16: oneDNN has no f16 kernels for this CPU. */
static int cpu_supports(const bfit_device *d, bfit_op_kind k, bfit_dtype t, char *why, size_t n)
{
    (void)d;
    (void)k;
    if (t == BFIT_F32 || t == BFIT_BF16)
        return 1;
    snprintf(why, n, "the cpu computes in f32 and bf16 only (oneDNN has no %s kernels for this CPU)",
             bfit_dtype_name(t));
    return 0;
}

static int cpu_set_threads(bfit_device *base, int threads, int cpus)
{
    cpu_device *d = (cpu_device *)base;
    int rc;
    if (d->depth > 0)
        return bfit_fail(BFIT_ESTATE, "cpu: the thread count cannot change inside a device call");
    /* the team made (or refused) first: placing it makes it otherwise */
    if ((rc = bfit_cpu_make_arenas(threads)) != BFIT_OK || (rc = bfit_cpu_pin(d, threads, cpus)) != BFIT_OK)
        return rc;
    d->threads = threads;
    return BFIT_OK;
}

static int cpu_layout_block(bfit_device *d, bfit_dtype t) { return bfit_cpu_conv_block((cpu_device *)d, t); }

static const bfit_device_vt cpu_vt = {
    .name = "cpu",
    .mem_info = bfit_cpu_mem_info,
    .upload = bfit_cpu_upload,
    .download = bfit_cpu_download,
    .copy = bfit_cpu_copy,
    .fill = bfit_cpu_fill,
    .sync = bfit_cpu_sync,
    .op_new = cpu_op_new,
    .op_workspace = cpu_op_workspace,
    .op_saved = cpu_op_saved,
    .op_run = cpu_op_run,
    .op_free = cpu_op_free,
    .info = cpu_info,
    .destroy = cpu_destroy,
    .coll_open = bfit_cpu_coll_open,
    .coll_sum = bfit_cpu_coll_sum,
    .coll_bcast = bfit_cpu_coll_bcast,
    .coll_close = bfit_cpu_coll_close,
    .supports = cpu_supports,
    .sample = cpu_sample,
    .set_threads = cpu_set_threads,
    .layout_block = cpu_layout_block,
    .span_begin = bfit_cpu_span_begin,
    .span_end = bfit_cpu_span_end,
};


/* BFIT_DEVICE_CHECK: 0 or unset off, 2 every call of every span checked
 * (cpu_mem.c), anything else on */
static int check_from_env(void)
{
    const char *e = getenv("BFIT_DEVICE_CHECK");
    return !e || !*e || !strcmp(e, "0") ? 0 : !strcmp(e, "2") ? 2 : 1;
}

int bfit_device_cpu_new(const bfit_device_cfg *cfg, bfit_device **out)
{
    bfit_device_cfg c = cfg ? *cfg : bfit_device_cfg_default();
    cpu_device *d;
    int rc;

    *out = NULL;
    if (c.threads < 0)
        return bfit_fail(BFIT_EINVAL, "cpu: threads must be >= 0 (0: OpenMP's setting), got %d", c.threads);
    bfit_as_one_heap(); /* before the threads are made (bfit_cpu_make_arenas) */
    if ((rc = bfit_cpu_isa_init()) != BFIT_OK) /* a bad $BFIT_CPU_ISA, or a CPU the build cannot run on */
        return rc;
    d = calloc(1, sizeof *d);
    if (!d)
        return bfit_fail(BFIT_ENOMEM, "cpu: cannot allocate the device");
    d->base.vt = &cpu_vt;
    d->threads = c.threads;
    d->check = c.check < 0 ? check_from_env() : c.check >= 2 ? 2 : c.check != 0;
    if (c.host)
        d->host = *c.host;
    bfit_cpu_blocks_init(d);
    d->mon_cpu = bfit_clock_process_cpu();
    d->mon_wall = wall_seconds();
    if (dnnl_engine_create(&d->eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&d->stream, d->eng, dnnl_stream_default_flags) != dnnl_success) {
        cpu_destroy(&d->base);
        return bfit_fail(BFIT_EDEVICE, "oneDNN: cannot create the CPU engine");
    }
    d->bf16_f32 = !bfit_cpu_bf16_native(d->eng);
    if ((rc = bfit_cpu_make_arenas(d->threads > 0 ? d->threads : omp_get_max_threads())) != BFIT_OK) {
        cpu_destroy(&d->base);
        return rc;
    }
    *out = &d->base;
    bfit_optime_attach(*out);
    return BFIT_OK;
}
