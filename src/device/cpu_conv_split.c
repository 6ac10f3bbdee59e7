/* cpu_conv_split.c - a convolution's weight gradient (f32 or bf16 data, an
 * f32 gradient) with the samples split among the threads: each thread runs
 * a one-thread primitive over its share, into a partial gradient of its
 * own, and the partials are summed after, in a fixed order.
 *
 * Why: oneDNN's direct kernel for this gradient splits the samples among
 * the threads by itself, but its threads meet at a barrier of its own
 * that spins. Where the threads share cores (packed beside another job,
 * src/train/threads.c) the thread that arrives first spins until the
 * kernel takes the core from it, while the one it waits for cannot run:
 * the cnn's weight gradients took 1.8 times as long with two threads on
 * one core as with one (docs/performance.md). The threads of this split
 * meet at libgomp's barrier, which sleeps. The sums depend on the thread
 * count only, not on where the threads run, so packing keeps its bits. */
#include "base/err.h"
#include "base/par.h"
#include "device/cpu.h"

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

#define SPLIT_MAX 8          /* parts, at most: each holds a primitive and a partial gradient */
#define SPLIT_MIN_SAMPLES 8  /* per part: below it oneDNN's kernels lose more than the split saves */
#define SPLIT_MAX_PARTIAL ((size_t)4 << 20) /* bytes of partial gradients, at most */

struct bfit_conv_split {
    int parts;
    cpu_op *sub[SPLIT_MAX];     /* part p's op: its samples, overwriting */
    int64_t first[SPLIT_MAX];   /* its first sample */
    size_t ws_part;             /* each part's workspace, from p * ws_part */
    size_t partial;             /* from here, the partial gradients (weights then bias) of parts 0.. */
    size_t in_bytes, out_bytes; /* per sample, of the input and the output gradient */
    int ready;                  /* the parts' primitives made */
};

/* A part's gradient: the weights, then the bias. */
static size_t part_floats(const bfit_op_desc *d)
{
    return (size_t)bfit_cpu_conv_wnumel(d) + (d->u.conv.bias ? (size_t)d->u.conv.oc : 0);
}

void bfit_cpu_conv_split_free(bfit_conv_split *k)
{
    if (k)
        for (int p = 0; p < k->parts; p++)
            bfit_cpu_op_destroy(k->sub[p]);
    free(k);
}

/* dst (+)= part 0 + part 1 + ...: per element the same order whatever
 * the threads and cores. */
static void sum_parts(float *dst, const float *part, size_t stride, int parts, int64_t n, int acc)
{
    BFIT_PAR_FOR_IF(n > 65536, for (int64_t i = 0; i < n; i++) {
        float s = acc ? dst[i] : 0.0f;
        for (int p = 0; p < parts; p++)
            s += part[(size_t)p * stride + (size_t)i];
        dst[i] = s;
    });
}

/* The parts' primitives, made before the region and with one thread.
 * Made inside it, oneDNN would look them up in its cache under the
 * count outside, where an op of a part's size made for the whole team
 * may sit (the finder makes every size): its threads would wait at its
 * barrier for partners that never come. Slot 0 is the forward hint. */
static int make_part_prims(bfit_conv_split *k)
{
    int saved = omp_get_max_threads(), rc = BFIT_OK;
    dnnl_status_t s;

    omp_set_num_threads(1);
    for (int p = 0; p < k->parts && rc == BFIT_OK; p++)
        for (int i = 1; i < CPU_OP_MAXPRIM && rc == BFIT_OK; i++)
            if (k->sub[p]->pd[i] && !k->sub[p]->prim[i] &&
                (rc = bfit_cpu_kernel_room("convolution backward weights (a part)")) == BFIT_OK &&
                (s = dnnl_primitive_create(&k->sub[p]->prim[i], k->sub[p]->pd[i])) != dnnl_success)
                rc = bfit_cpu_dnnl_check(s, "convolution backward weights (a part)");
    omp_set_num_threads(saved);
    k->ready = rc == BFIT_OK;
    return rc;
}

int bfit_cpu_conv_split_run(cpu_op *op, bfit_conv_split *k, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t nw = bfit_cpu_conv_wnumel(d), nb = d->u.conv.bias ? d->u.conv.oc : 0;
    float *part = (float *)((char *)a->workspace + k->partial);
    size_t pf = part_floats(d);
    int rc = BFIT_OK;

    if (!k->ready && (rc = make_part_prims(k)) != BFIT_OK)
        return rc;
#pragma omp parallel num_threads(k->parts) reduction(min : rc)
    {
        int p = omp_get_thread_num();
        bfit_op_args b = *a;
        float *w = part + (size_t)p * pf;
        b.src = (const char *)a->src + (size_t)k->first[p] * k->in_bytes;
        b.diff_dst = (const char *)a->diff_dst + (size_t)k->first[p] * k->out_bytes;
        b.diff_weights = w;
        b.diff_bias = nb ? w + nw : NULL;
        b.workspace = (char *)a->workspace + (size_t)p * k->ws_part;
        /* a team smaller than asked for leaves parts undone: an error, not a wrong gradient */
        rc = omp_get_num_threads() == k->parts ? k->sub[p]->run(k->sub[p], &b) : BFIT_EDEVICE;
    }
    if (rc != BFIT_OK)
        return rc == BFIT_EDEVICE ? bfit_fail(rc, "conv backward weights: the threads to split it among were not "
                                                  "given")
                                  : rc;
    sum_parts(a->diff_weights, part, pf, k->parts, nw, d->accumulate);
    if (nb)
        sum_parts(a->diff_bias, part + nw, pf, k->parts, nb, d->accumulate);
    return BFIT_OK;
}

int bfit_cpu_conv_split_make(cpu_op *op, int (*onednn_run)(cpu_op *, const bfit_op_args *), bfit_conv_split **out,
                             size_t *ws)
{
    const bfit_op_desc *d = &op->base.desc;
    int parts = omp_get_max_threads(), saved = parts, rc = BFIT_OK;
    int64_t n = d->u.conv.n;
    size_t es = bfit_dtype_size(d->dtype), fs = sizeof(float); /* the data's; the gradients' */
    bfit_op_desc sd = *d;
    bfit_conv_split *k;

    *out = NULL;
    if (d->kind != BFIT_OP_CONV_BWD_WEIGHTS || (d->dtype != BFIT_F32 && d->dtype != BFIT_BF16) ||
        d->u.conv.groups > 1 || parts < 2 || parts > SPLIT_MAX || n < (int64_t)parts * SPLIT_MIN_SAMPLES ||
        (size_t)parts * part_floats(d) * fs > SPLIT_MAX_PARTIAL || omp_in_parallel())
        return BFIT_OK;
    if (!(k = calloc(1, sizeof *k)))
        return bfit_fail(BFIT_ENOMEM, "cpu conv: cannot allocate the op's record");
    k->parts = parts;
    k->in_bytes = (size_t)d->u.conv.ic * d->u.conv.ih * d->u.conv.iw * es;
    k->out_bytes = (size_t)d->u.conv.oc * d->u.conv.oh * d->u.conv.ow * es;
    sd.accumulate = 0;
    /* one thread's primitives: they run inside the split's region */
    omp_set_num_threads(1);
    for (int p = 0; p < parts && rc == BFIT_OK; p++) {
        int64_t lo = n * p / parts, hi = n * (p + 1) / parts;
        k->first[p] = lo;
        sd.u.conv.n = hi - lo;
        if ((rc = bfit_cpu_op_make(op->base.dev, &sd, &k->sub[p])) != BFIT_OK)
            break;
        if (k->sub[p]->ws > k->ws_part)
            k->ws_part = k->sub[p]->ws;
        /* a part that another path takes (our own kernels, with loops of
         * their own) would run them inside the split's region: no split */
        if (k->sub[p]->run != onednn_run)
            rc = 1;
    }
    omp_set_num_threads(saved);
    if (rc != BFIT_OK) {
        bfit_cpu_conv_split_free(k);
        return rc == 1 ? BFIT_OK : rc;
    }
    k->ws_part = BFIT_ALIGN_UP(k->ws_part);
    k->partial = (size_t)parts * k->ws_part;
    *ws = k->partial + BFIT_ALIGN_UP((size_t)parts * part_floats(d) * fs);
    *out = k;
    return BFIT_OK;
}
