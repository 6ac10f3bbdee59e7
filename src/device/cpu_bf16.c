/* cpu_bf16.c - bf16 ops on a CPU for which oneDNN has no bf16 kernels.
 *
 * oneDNN 2.6 computes bf16 only on CPUs with AVX-512 (avx512_core): on an
 * AVX2-only one (AMD Zen 2 and 3, most laptops) every bf16 primitive is
 * "not implemented", reference kernels included. A bf16 model must still
 * train and plan there, with the same tensors: what batchfit stores in bf16
 * (activations, their gradients, weight copies) stays bf16, so the plan's
 * activations and the numbers kept from step to step are the same as on an
 * AVX-512 CPU. Only the primitive computes in f32: its operation descriptor
 * is rewritten with f32 memory descriptors (same dims and strides), and each
 * bf16 argument is staged through an f32 copy in the op's workspace,
 * converted before (inputs) or after (outputs) the primitive runs. Like
 * oneDNN's own bf16 kernels, it reads bf16 exactly, accumulates in f32 and
 * rounds the output once to nearest even. The copies are part of the
 * workspace the op reports, so the plan counts them; they cost a pass over
 * each argument, so such an op is slower than its f32 twin.
 *
 * Convolutions choose blocked layouts and reorder into them anyway: they
 * ask for f32 layouts (bfit_cpu_compute_dt) and their reorders convert. */
#include "base/err.h"
#include "base/par.h"
#include "device/cpu.h"
#include "device/cpu_isa.h"
#include "device/half.h"

#include <stddef.h>
#include <string.h>

#define PAR_MIN 65536

/* Whether oneDNN makes bf16 primitives here: a property of the CPU and of
 * $ONEDNN_MAX_CPU_ISA, so probed once per process (with the first device's
 * engine). */
int bfit_cpu_bf16_native(dnnl_engine_t eng)
{
    static int known = -1; /* -1: not probed yet; two first callers probe alike */
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {16, 16};
    dnnl_matmul_desc_t mm;
    dnnl_primitive_desc_t pd;
    int native = __atomic_load_n(&known, __ATOMIC_RELAXED);

    if (native >= 0)
        return native;
    native = dnnl_memory_desc_init_by_tag(&md, 2, dims, dnnl_bf16, dnnl_ab) == dnnl_success &&
             dnnl_matmul_desc_init(&mm, &md, &md, NULL, &md) == dnnl_success &&
             dnnl_primitive_desc_create(&pd, &mm, NULL, eng, NULL) == dnnl_success;
    if (native)
        dnnl_primitive_desc_destroy(pd);
    __atomic_store_n(&known, native, __ATOMIC_RELAXED);
    return native;
}

bfit_dtype bfit_cpu_compute_dt(const cpu_device *d, bfit_dtype t) { return t == BFIT_BF16 && d->bf16_f32 ? BFIT_F32 : t; }

/* f32 <-> bf16 of n elements, rounded to nearest even (half.h), one
 * variant per instruction set (cpu_isa.h): the casts of every bf16 step and
 * the staging copies here. */
BFIT_CPU_VARIANTS(void, cast_loop, (const void *src, void *dst, int64_t n, int to_bf16), {
    if (to_bf16) {
        const float *x = src;
        uint16_t *y = dst;
        BFIT_PAR_FOR_IF(n > PAR_MIN, for (int64_t i = 0; i < n; i++) y[i] = bfit_f32_to_bf16(x[i]););
    } else {
        const uint16_t *x = src;
        float *y = dst;
        BFIT_PAR_FOR_IF(n > PAR_MIN, for (int64_t i = 0; i < n; i++) y[i] = bfit_bf16_to_f32(x[i]););
    }
})

void bfit_cpu_bf16_cast(const void *src, void *dst, int64_t n, int to_bf16)
{
    BFIT_CPU_PICK(cast_loop)(src, dst, n, to_bf16);
}

void bfit_cpu_widen(const void *src, bfit_dtype t, int64_t off, float *dst, int64_t n)
{
    if (t == BFIT_BF16)
        bfit_cpu_bf16_cast((const uint16_t *)src + off, dst, n, 0);
    else
        for (int64_t i = 0; i < n; i++)
            dst[i] = bfit_ld(src, t, off + i);
}

void bfit_cpu_narrow(const float *src, void *dst, bfit_dtype t, int64_t off, int64_t n)
{
    if (t == BFIT_BF16)
        bfit_cpu_bf16_cast(src, (uint16_t *)dst + off, n, 1);
    else
        for (int64_t i = 0; i < n; i++)
            bfit_st(dst, t, off + i, src[i]);
}

/* ---- the rewrite ------------------------------------------------------------ */

/* A memory descriptor of an op descriptor and the arguments it describes. */
typedef struct md_field {
    size_t off;
    int args[2];
} md_field;

#define F(type, field, a0, a1) {offsetof(type, field), {a0, a1}}
static const md_field matmul_f[] = {
    F(dnnl_matmul_desc_t, src_desc, DNNL_ARG_SRC, 0),
    F(dnnl_matmul_desc_t, weights_desc, DNNL_ARG_WEIGHTS, 0),
    F(dnnl_matmul_desc_t, bias_desc, DNNL_ARG_BIAS, 0),
    F(dnnl_matmul_desc_t, dst_desc, DNNL_ARG_DST, 0),
};
static const md_field eltwise_f[] = {
    F(dnnl_eltwise_desc_t, data_desc, DNNL_ARG_SRC, DNNL_ARG_DST),
    F(dnnl_eltwise_desc_t, diff_data_desc, DNNL_ARG_DIFF_SRC, DNNL_ARG_DIFF_DST),
};
static const md_field pool_f[] = {
    F(dnnl_pooling_desc_t, src_desc, DNNL_ARG_SRC, 0),
    F(dnnl_pooling_desc_t, diff_src_desc, DNNL_ARG_DIFF_SRC, 0),
    F(dnnl_pooling_desc_t, dst_desc, DNNL_ARG_DST, 0),
    F(dnnl_pooling_desc_t, diff_dst_desc, DNNL_ARG_DIFF_DST, 0),
};
static const md_field bnorm_f[] = {
    F(dnnl_batch_normalization_desc_t, data_desc, DNNL_ARG_SRC, DNNL_ARG_DST),
    F(dnnl_batch_normalization_desc_t, diff_data_desc, DNNL_ARG_DIFF_SRC, DNNL_ARG_DIFF_DST),
};
static const md_field lnorm_f[] = {
    F(dnnl_layer_normalization_desc_t, data_desc, DNNL_ARG_SRC, DNNL_ARG_DST),
    F(dnnl_layer_normalization_desc_t, diff_data_desc, DNNL_ARG_DIFF_SRC, DNNL_ARG_DIFF_DST),
};
#undef F

typedef struct kind_fields {
    dnnl_primitive_kind_t kind;
    size_t size;
    const md_field *f;
    int n;
} kind_fields;

/* room for a copy of any descriptor of the kinds below */
typedef union any_desc {
    dnnl_matmul_desc_t mm;
    dnnl_eltwise_desc_t elt;
    dnnl_pooling_desc_t pool;
    dnnl_batch_normalization_desc_t bn;
    dnnl_layer_normalization_desc_t ln;
} any_desc;

#define K(kind, type, f) {kind, sizeof(type), f, (int)(sizeof f / sizeof f[0])}
static const kind_fields kinds[] = {
    K(dnnl_matmul, dnnl_matmul_desc_t, matmul_f),
    K(dnnl_eltwise, dnnl_eltwise_desc_t, eltwise_f),
    K(dnnl_pooling, dnnl_pooling_desc_t, pool_f),
    K(dnnl_batch_normalization, dnnl_batch_normalization_desc_t, bnorm_f),
    K(dnnl_layer_normalization, dnnl_layer_normalization_desc_t, lnorm_f),
};
#undef K

static const kind_fields *kind_of(const void *op_desc)
{
    dnnl_primitive_kind_t k;
    memcpy(&k, op_desc, sizeof k); /* every oneDNN 2.6 op descriptor starts with its kind */
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (kinds[i].kind == k)
            return &kinds[i];
    return NULL;
}

/* Whether the primitive reads argument arg (else it only writes it). DST is
 * read by a backward pass that works from the forward's output. */
static int reads(const void *op_desc, const kind_fields *k, int arg)
{
    dnnl_prop_kind_t prop = dnnl_forward_training;
    if (k->kind != dnnl_matmul)
        memcpy(&prop, (const char *)op_desc + sizeof(dnnl_primitive_kind_t), sizeof prop);
    if (arg == DNNL_ARG_DIFF_SRC || arg == DNNL_ARG_DIFF_WEIGHTS || arg == DNNL_ARG_DIFF_BIAS)
        return 0;
    if (arg == DNNL_ARG_DST)
        return prop == dnnl_backward || prop == dnnl_backward_data;
    return 1;
}

static int has_sum(const_dnnl_primitive_attr_t attr)
{
    const_dnnl_post_ops_t po = NULL;
    if (!attr || dnnl_primitive_attr_get_post_ops(attr, &po) != dnnl_success || !po)
        return 0;
    for (int i = 0; i < dnnl_post_ops_len(po); i++)
        if (dnnl_post_ops_get_kind(po, i) == dnnl_sum)
            return 1;
    return 0;
}

/* *use: op_desc, or its copy in buf with its bf16 memory descriptors made
 * f32; args: the arguments of those with a layout given (not "any"), the
 * ones to stage. */
static void rewrite(const void *op_desc, any_desc *buf, const void **use, int *args, int *nargs)
{
    const kind_fields *k = kind_of(op_desc);
    *use = op_desc;
    *nargs = 0;
    if (!k)
        return;
    memcpy(buf, op_desc, k->size);
    for (int i = 0; i < k->n; i++) {
        dnnl_memory_desc_t *md = (dnnl_memory_desc_t *)((char *)buf + k->f[i].off);
        if (md->data_type != dnnl_bf16)
            continue;
        /* strides count elements, so the same layout in f32 */
        md->data_type = dnnl_f32;
        *use = buf;
        /* a layout oneDNN chooses is the family's to reorder into (conv) */
        if (md->format_kind == dnnl_format_kind_any)
            continue;
        for (int j = 0; j < 2 && k->f[i].args[j]; j++)
            args[(*nargs)++] = k->f[i].args[j];
    }
}

/* op's stage list for slot p (its pd made) from args, the copies placed
 * from *end, which moves past them. */
static int stage_plan(cpu_op *op, int p, const void *op_desc, const_dnnl_primitive_attr_t attr, const int *args,
                      int nargs, size_t *end)
{
    const kind_fields *k = kind_of(op_desc);
    int sum = has_sum(attr);

    for (int i = 0; i < nargs; i++) {
        const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(op->pd[p], dnnl_query_exec_arg_md, args[i]);
        cpu_stage *s = &op->stage[p][op->nstage[p]];
        if (!md || md->ndims == 0) /* an argument this primitive does not take */
            continue;
        if (op->nstage[p] == CPU_MAXSTAGE)
            return bfit_fail(BFIT_EINVAL, "cpu: more than %d bf16 arguments to compute in f32", CPU_MAXSTAGE);
        s->arg = args[i];
        s->in = reads(op_desc, k, args[i]) || sum;
        s->out = !reads(op_desc, k, args[i]);
        s->n = dnnl_memory_desc_get_size(md) / sizeof(float);
        s->off = *end;
        *end += BFIT_ALIGN_UP(s->n * sizeof(float));
        op->nstage[p]++;
    }
    return BFIT_OK;
}

int bfit_cpu_bf16_pd_create(cpu_op *op, int p, const void *op_desc, const_dnnl_primitive_attr_t attr,
                            const_dnnl_primitive_desc_t hint, size_t *ws)
{
    any_desc buf;
    const void *use;
    int args[8], nargs;

    rewrite(op_desc, &buf, &use, args, &nargs);
    CPU_TRY(dnnl_primitive_desc_create(&op->pd[p], use, attr, cpu_dev(op)->eng, hint), "primitive descriptor");
    *ws = bfit_cpu_pd_scratch(op->pd[p]);
    if (!nargs)
        return BFIT_OK;
    *ws = BFIT_ALIGN_UP(*ws); /* the f32 copies after the scratchpad */
    return stage_plan(op, p, op_desc, attr, args, nargs, ws);
}

const cpu_stage *bfit_cpu_bf16_stage_of(const cpu_op *op, int p, int arg)
{
    for (int i = 0; i < op->nstage[p]; i++)
        if (op->stage[p][i].arg == arg)
            return &op->stage[p][i];
    return NULL;
}
