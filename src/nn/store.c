/* store.c - what a training step stores for backward: the precision of the
 * activations, each layer's backward mode (what it reads), and the values
 * regenerated rather than kept (lean activations, recomputation).
 *
 * Lean choices (docs/memory.md says per layer what is stored):
 * - a batch norm whose output feeds only a relu keeps its output z, and
 *   its backward recovers its normalised input from z (in-place activated
 *   batch norm, Rota Bulo et al. 2018); the relu reads z for its mask, and
 *   the relu's output, which the next layer's backward reads, is
 *   regenerated from z when needed: one tensor where there were two or
 *   three;
 * - another relu reads whichever of its input and output is kept anyway,
 *   else keeps only a sign bit per element;
 * - another batch norm reads its input (exact), or its output if that is
 *   kept anyway.
 * Recomputation: the values between cuts of the graph (a cut: every later
 * node reads only it or later values, e.g. the output of a residual block)
 * are regenerated; `blocks` keeps every cut, `sqrt` every ~sqrt(K)-th of K
 * cuts, `cuts` the ones given. */
#include "base/err.h"
#include "base/testctl.h"
#include "nn/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

bfit_store_cfg bfit_store_cfg_default(void)
{
    bfit_store_cfg c = {BFIT_F32, 1, BFIT_RECOMPUTE_NONE, NULL, 0};
    return c;
}

bfit_storage bfit_storage_default(void)
{
    bfit_storage s = {BFIT_F32, 1, BFIT_RECOMPUTE_NONE};
    return s;
}

int bfit_precision_parse(const char *name, bfit_dtype *out)
{
    static const bfit_dtype t[] = {BFIT_F32, BFIT_BF16, BFIT_F16};
    for (unsigned i = 0; i < sizeof t / sizeof t[0]; i++)
        if (name && !strcasecmp(name, bfit_dtype_name(t[i]))) {
            *out = t[i];
            return BFIT_OK;
        }
    return bfit_fail(BFIT_EINVAL, "unknown precision '%s' (valid: f32, bf16, f16)", name ? name : "");
}

const char *bfit_precision_auto_note(bfit_dtype chosen)
{
    return chosen == BFIT_BF16 ? " (precision auto: native here)" : " (precision auto: no native bf16 here)";
}

static const char *const recompute_names[BFIT_RECOMPUTE_COUNT] = {"none", "blocks", "sqrt", "cuts", "auto"};

const char *bfit_recompute_name(bfit_recompute_kind k)
{
    return (unsigned)k < BFIT_RECOMPUTE_COUNT ? recompute_names[k] : "?";
}

int bfit_recompute_parse(const char *name, bfit_recompute_kind *out)
{
    for (int k = 0; k < BFIT_RECOMPUTE_COUNT; k++)
        if (k != BFIT_RECOMPUTE_CUTS && name && !strcasecmp(name, recompute_names[k])) {
            *out = (bfit_recompute_kind)k;
            return BFIT_OK;
        }
    return bfit_fail(BFIT_EINVAL, "unknown recomputation '%s' (valid: none, blocks, sqrt, auto)", name ? name : "");
}

/* Does any backward read value v, given the modes chosen so far? */
static int read_in_bwd(const bfit_model *M, int v)
{
    if (v >= 1 && bfit_bwd_reads_output(M->nodes[v - 1].l) && M->needs_grad[v])
        return 1;
    for (int j = v; j < M->n; j++) {
        const bfit_node *nd = &M->nodes[j];
        if (!M->needs_grad[j + 1] || !bfit_bwd_reads_input(nd->l))
            continue;
        for (int k = 0; k < nd->l->nin; k++)
            if (nd->in[k] == v)
                return 1;
    }
    return 0;
}

static int is(const bfit_model *M, int i, bfit_layer_kind k) { return M->nodes[i].l->cfg.kind == k; }

/* The relu reading node i's output, when it is the output's only reader. */
static int relu_after(const bfit_model *M, int i)
{
    if (M->nodes[i].nconsumers != 1)
        return -1;
    for (int j = i + 1; j < M->n; j++)
        if (M->nodes[j].in[0] == i + 1 && is(M, j, BFIT_L_RELU) && M->nodes[j].l->nin == 1)
            return j;
    return -1;
}

static void set_mode(bfit_model *M, int i, bfit_bwd_mode mode)
{
    if (M->nodes[i].l->vt->modes & BFIT_MODE(mode))
        M->nodes[i].l->mode = mode;
}

/* The lean modes and the relu outputs to regenerate; defaults otherwise. */
static void choose_modes(bfit_model *M, int lean)
{
    for (int i = 0; i < M->n; i++)
        M->nodes[i].l->mode = bfit_layer_default_mode(M->nodes[i].l->vt);
    if (!lean)
        return;
    /* batch norm then relu: keep z, read it on both sides, regenerate relu(z) */
    for (int i = 0; i < M->n; i++) {
        int r = is(M, i, BFIT_L_BATCHNORM) ? relu_after(M, i) : -1;
        if (r < 0)
            continue;
        set_mode(M, i, BFIT_MODE_Y);
        set_mode(M, r, BFIT_MODE_X);
        M->regen[r + 1] = 1;
    }
    /* the others read what is read anyway; relu else keeps bits */
    for (int i = 0; i < M->n; i++) {
        int x = M->nodes[i].in[0], pair = i > 0 && is(M, i, BFIT_L_RELU) && M->regen[i + 1];
        if (pair || (!is(M, i, BFIT_L_RELU) && !is(M, i, BFIT_L_BATCHNORM)))
            continue;
        if (is(M, i, BFIT_L_BATCHNORM) && M->nodes[i].l->mode == BFIT_MODE_Y)
            continue;
        M->nodes[i].l->mode = BFIT_MODE_NONE; /* out of the count while deciding */
        if (x > 0 && read_in_bwd(M, x))
            set_mode(M, i, BFIT_MODE_X);
        else if (read_in_bwd(M, i + 1))
            set_mode(M, i, BFIT_MODE_Y);
        else
            set_mode(M, i, is(M, i, BFIT_L_RELU) ? BFIT_MODE_BITS : BFIT_MODE_X);
    }
}

/* cut[v]: every node after v's producer reads only values >= v. */
static void find_cuts(bfit_model *M)
{
    int lo = M->n + 1;
    memset(M->cut, 0, (size_t)M->n + 1);
    for (int j = M->n - 1; j >= 1; j--) {
        for (int k = 0; k < M->nodes[j].l->nin; k++)
            if (M->nodes[j].in[k] < lo)
                lo = M->nodes[j].in[k];
        /* now lo = the smallest value read by nodes j..n-1 */
        M->cut[j] = lo >= j;
    }
}

/* Regenerate every value but the kept cuts (blocks, sqrt) or the values
 * given (cuts: any value, so a segment may be kept whole; the loss's output
 * is never regenerated). */
static void recompute(bfit_model *M, const bfit_store_cfg *c)
{
    int ncut = 0, every = 1, k = 0;
    if (c->recompute == BFIT_RECOMPUTE_NONE)
        return;
    for (int v = 1; v < M->n; v++)
        ncut += M->cut[v];
    if (c->recompute == BFIT_RECOMPUTE_SQRT)
        every = (int)lround(sqrt((double)ncut)) > 1 ? (int)lround(sqrt((double)ncut)) : 1;
    for (int v = 1; v < M->n; v++) {
        int keep;
        if (c->recompute == BFIT_RECOMPUTE_CUTS)
            keep = M->keep[v];
        else
            keep = M->cut[v] && (c->recompute == BFIT_RECOMPUTE_BLOCKS || ++k % every == 0);
        if (!keep)
            M->regen[v] = 1;
    }
}

/* Layers whose forward is cheap next to a convolution or a matmul: a few
 * operations per element (batch and group norms: two passes for their statistics and
 * one to apply them; the sigmoids and tanh an exp, gelu an erf), so
 * regenerating their output in backward costs little time, where keeping
 * it costs a whole tensor (a transformer's T x 4C per block, for gelu). */
static int cheap(const bfit_model *M, int i)
{
    static const bfit_layer_kind k[] = {BFIT_L_BATCHNORM, BFIT_L_GROUPNORM, BFIT_L_RELU, BFIT_L_CLIP, BFIT_L_ADD, BFIT_L_MAXPOOL,
                                        BFIT_L_SIGMOID, BFIT_L_SILU, BFIT_L_TANH, BFIT_L_GELU,
                                        BFIT_L_HARDSIGMOID, BFIT_L_HARDSWISH, BFIT_L_SCALE, BFIT_L_LEAKYRELU,
                                        BFIT_L_ELU, BFIT_L_SOFTPLUS, BFIT_L_SELU, BFIT_L_CELU, BFIT_L_PRELU,
                                        BFIT_L_LAYERSCALE};
    for (unsigned j = 0; j < sizeof k / sizeof k[0]; j++)
        if (is(M, i, k[j]))
            return 1;
    return 0;
}

/* Lean: a kept value that cheap layers alone compute from values that are
 * there in backward anyway is regenerated rather than kept. There: the
 * model input, a value kept because some backward reads it, or one
 * regenerated so (recursively, in graph order). A residual block's output
 * relu(bn(conv) + shortcut) is so when its batch norm reads the convolution
 * output and the shortcut is there: the block outputs of a stage are then
 * regenerated in backward, one from the other, and the forward keeps only
 * the convolutions' outputs and the batch norms' (docs/memory.md). Only
 * elementwise work is repeated, and the same bits come out. It runs after
 * the recomputation's choices, whose regenerated values (a convolution's
 * output) are not there. */
static void regen_cheap(bfit_model *M)
{
    unsigned char *ok = calloc((size_t)M->n + 1, 1); /* per value: there in backward */
    if (!ok)
        return; /* keep it all: more memory, never a wrong plan */
    ok[0] = 1;
    for (int v = 1; v < M->n; v++) {
        const bfit_node *p = &M->nodes[v - 1];
        int from_there = cheap(M, v - 1);
        for (int k = 0; k < p->l->nin && from_there; k++)
            from_there = ok[p->in[k]];
        if (from_there)
            ok[v] = M->regen[v] = 1; /* not kept, if it was (unread, the flag costs nothing) */
        else
            ok[v] = !M->regen[v] && read_in_bwd(M, v);
    }
    free(ok);
}

/* ---- nChw8c / nChw16c chains on the cpu ------------------------------------- */

/* A 2x2/2 unpadded max pool (cpu_maxpool_blk.c's; a ceil_mode one is
 * cpu_maxpool_kblk.c's, which clips the windows at the edge) */
static int pool2(const bfit_layer *l)
{
    const bfit_layer_cfg *c = &l->cfg;
    return c->kind == BFIT_L_MAXPOOL && c->kh == 2 && c->kw == 2 && (c->sh == 2 || c->sh == 0) &&
           (c->sw == 2 || c->sw == 0) && c->ph == 0 && c->pw == 0 && !c->ceil;
}

/* Another max pool of at most 255 window positions (cpu_maxpool_kblk.c's:
 * ResNet's 3x3/2 stem pool), its input and output in one layout */
static int pool_k(const bfit_layer *l)
{
    const bfit_layer_cfg *c = &l->cfg;
    return c->kind == BFIT_L_MAXPOOL && !pool2(l) && c->kh * c->kw <= 255;
}

/* An average over the whole map, no padding (a squeeze-and-excitation
 * block's, cpu_avgpool_g.c's): one value per channel out, the same bytes
 * in nchw and in blocks */
static int global_avg(const bfit_layer *l)
{
    const bfit_layer_cfg *c = &l->cfg;
    return c->kind == BFIT_L_GAP || (c->kind == BFIT_L_AVGPOOL && c->kh == l->in[0].h && c->kw == l->in[0].w &&
                                    c->ph == 0 && c->pw == 0 && l->out.h == 1 && l->out.w == 1);
}

/* Another average pool (DenseNet's transitions' 2x2/2, Inception's
 * branches' 3x3/1): oneDNN's pooling takes nChw8c/16c itself, bf16 too
 * (cpu_pool.c; computed in f32 where the CPU has no bf16, and where the
 * windows overlap), its input and output in one layout */
static int avg_blk(const bfit_layer *l)
{
    return l->cfg.kind == BFIT_L_AVGPOOL && !global_avg(l) && (l->dtype == BFIT_F32 || l->dtype == BFIT_BF16);
}

/* An activation of one input: element by element, any layout */
static int elementwise(const bfit_layer *l)
{
    static const bfit_layer_kind k[] = {BFIT_L_RELU,      BFIT_L_CLIP,      BFIT_L_SIGMOID, BFIT_L_SILU,
                                        BFIT_L_TANH,      BFIT_L_GELU,      BFIT_L_HARDSIGMOID,
                                        BFIT_L_HARDSWISH, BFIT_L_LEAKYRELU, BFIT_L_ELU,     BFIT_L_SOFTPLUS,
                                        BFIT_L_SELU,      BFIT_L_CELU};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (l->cfg.kind == k[i])
            return l->nin == 1;
    return 0;
}

/* A concatenation of images along their channels (GoogLeNet's and
 * Inception's branches, DenseNet's features, SqueezeNet's expands). With
 * every input in whole blocks, a sample's input is one run of bytes in
 * nChwBc as in nchw, and starts at the same place in the output's
 * (channel offset c: c/B blocks of H W B values = c H W values): the same
 * copies (cpu_concat.c's rows and columns) in either layout. */
static int channel_concat(const bfit_layer *l)
{
    return l->cfg.kind == BFIT_L_CONCAT && l->cfg.axis == 0 && bfit_shape_is_image(l->out);
}

/* Layers that take a blocked input (of B channels a block): dense and
 * depthwise convolutions (MobileNet's, EfficientNet's: oneDNN's jit_dw
 * computes in the block), grouped ones whose groups are whole blocks,
 * activations (prelu's slopes and layer scales per channel too), max pools of such windows,
 * batch norms, global average pools (one value per channel out, the same
 * bytes in either layout), residual adds (elementwise: both inputs and the
 * output in one layout), a squeeze-and-excitation block's channel
 * scale, f32 average pools, and concatenations along the channels (all
 * inputs and the output in one layout) */
static int takes_blocked(const bfit_layer *l, int B)
{
    int g = l->cfg.groups, dw = l->cfg.kind == BFIT_L_CONV && g > 1 && g == l->in[0].c && l->out.c == l->in[0].c;
    /* grouped (ResNeXt's, RegNet's): each group's channels in whole blocks */
    int grouped = l->cfg.kind == BFIT_L_CONV && g > 1 && !dw && (l->in[0].c / g) % B == 0 && (l->out.c / g) % B == 0;
    return (l->cfg.kind == BFIT_L_CONV && g <= 1) || dw || grouped || elementwise(l) || pool2(l) ||
           pool_k(l) || l->cfg.kind == BFIT_L_BATCHNORM || l->cfg.kind == BFIT_L_ADD || global_avg(l) ||
           l->cfg.kind == BFIT_L_SCALE || l->cfg.kind == BFIT_L_PRELU || l->cfg.kind == BFIT_L_LAYERSCALE ||
           channel_concat(l) || avg_blk(l);
}

/* Value v (v >= 1) may be blocked: channels in whole blocks of B, made by
 * such a layer, and read only by such layers. */
static int may_block(const bfit_model *M, int v, int B)
{
    const bfit_layer *p = M->nodes[v - 1].l;
    /* a 1x1 map is the same bytes either way: blocked, it would only steer
     * oneDNN to other kernels (its reference backward for an SE block's
     * squeeze of fewer than 16 channels) */
    if (!bfit_shape_is_image(p->out) || p->out.c % B || (p->out.h == 1 && p->out.w == 1) || !takes_blocked(p, B) ||
        !M->nodes[v - 1].nconsumers)
        return 0;
    for (int j = v; j < M->n; j++)
        for (int k = 0; k < M->nodes[j].l->nin; k++)
            if (M->nodes[j].in[k] == v && !takes_blocked(M->nodes[j].l, B))
                return 0;
    return 1;
}

/* A concatenation's inputs and output in one layout, or all plain; 1 if
 * one was blocked and is no more. */
static int unblock_concat(const bfit_model *M, uint8_t *blk, int i)
{
    const bfit_node *n = &M->nodes[i];
    int same = 1, was = blk[i + 1];

    for (int k = 0; k < n->l->nin; k++)
        same &= n->in[k] >= 0 && blk[n->in[k]] == blk[i + 1];
    if (same)
        return 0;
    for (int k = 0; k < n->l->nin; k++)
        if (n->in[k] >= 0) {
            was |= blk[n->in[k]];
            blk[n->in[k]] = 0;
        }
    blk[i + 1] = 0;
    return was;
}

/* Node i's layer cannot join its values' layouts (an activation or batch
 * norm between a blocked and a plain value, a pool from plain to blocked, an add
 * or a concatenation of two layouts): all of them plain then; 1 if one was blocked. */
static int unblock(const bfit_model *M, uint8_t *blk, int i)
{
    const bfit_layer *l = M->nodes[i].l;
    int u = M->nodes[i].in[0], w = i + 1, x = l->nin > 1 ? M->nodes[i].in[1] : -1, was;

    if (u < 0)
        return 0;
    if (l->cfg.kind == BFIT_L_CONCAT)
        return unblock_concat(M, blk, i);
    if (l->cfg.kind == BFIT_L_ADD && x >= 0) {
        if (blk[u] == blk[x] && blk[x] == blk[w])
            return 0;
        was = blk[u] || blk[x] || blk[w];
        blk[u] = blk[x] = blk[w] = 0;
        return was;
    }
    if (((elementwise(l) || pool_k(l) || avg_blk(l) || l->cfg.kind == BFIT_L_BATCHNORM || l->cfg.kind == BFIT_L_SCALE ||
          l->cfg.kind == BFIT_L_PRELU || l->cfg.kind == BFIT_L_LAYERSCALE) &&
         blk[u] != blk[w]) ||
        (pool2(l) && blk[w] && !blk[u])) {
        was = blk[u] || blk[w];
        blk[u] = blk[w] = 0;
        return was;
    }
    return 0;
}

/* blk[v] = 1 for each value kept in blocks of B channels (none if B is 0) */
static void mark_blocked(const bfit_model *M, uint8_t *blk, int B)
{
    int changed = 1;

    blk[0] = 0;
    for (int v = 1; v <= M->n; v++)
        blk[v] = B && may_block(M, v, B);
    while (changed) {
        changed = 0;
        for (int i = 0; i < M->n; i++)
            changed |= unblock(M, blk, i);
    }
}

/* The elements of the convolutions' inputs and outputs left in nchw under
 * blk (each one oneDNN reorders into its block and back, forward and
 * backward); *all the elements of all of them. */
static int64_t plain_conv_io(const bfit_model *M, const uint8_t *blk, int64_t *all)
{
    int64_t plain = 0;

    *all = 0;
    for (int i = 0; i < M->n; i++) {
        const bfit_layer *l = M->nodes[i].l;
        int u = M->nodes[i].in[0];
        if (l->cfg.kind != BFIT_L_CONV || u < 0)
            continue;
        *all += bfit_shape_numel(l->in[0]) + bfit_shape_numel(l->out);
        plain += (blk[u] ? 0 : bfit_shape_numel(l->in[0])) + (blk[i + 1] ? 0 : bfit_shape_numel(l->out));
    }
    return plain;
}

static int has_depthwise(const bfit_model *M)
{
    for (int i = 0; i < M->n; i++) {
        const bfit_layer *l = M->nodes[i].l;
        if (l->cfg.kind == BFIT_L_CONV && l->cfg.groups > 1 && l->cfg.groups == l->in[0].c)
            return 1;
    }
    return 0;
}

/* A device computing in 16 channels a block also runs nChw8c (oneDNN's
 * AVX2 kernels, slower there: resnet18's step 8% slower, regnet_x_400mf's
 * 17%, mnasnet0_5's 3.5x with its depthwise convolutions, measured on an
 * AVX-512 EPYC). Blocks of 8 pay only where they keep in chains more than
 * half of the convolutions' inputs and outputs that blocks of 16 leave to
 * reorders: RegNet-Y's groups of 8 channels (regnet_y_400mf 1.10-1.17x,
 * f32 and bf16; resnext50_32x4d, whose groups of 8 are one stage of four,
 * was 12-16% slower). docs/performance.md "The block chosen per model". */
int bfit_model_pick_block(const bfit_model *M, int B, int *pick)
{
    uint8_t *blk = malloc((size_t)M->n + 1);
    int64_t all, at_b, at_half;

    if (!blk)
        return bfit_fail(BFIT_ENOMEM, "model: out of host memory choosing layouts");
    *pick = B;
    if (B == 16 && !has_depthwise(M)) {
        mark_blocked(M, blk, B);
        at_b = plain_conv_io(M, blk, &all);
        mark_blocked(M, blk, B / 2);
        at_half = plain_conv_io(M, blk, &all);
        if (2 * (at_b - at_half) > all)
            *pick = B / 2;
    }
    free(blk);
    return BFIT_OK;
}

/* The cpu's convolutions compute in blocks of B channels (nChw16c with
 * AVX-512, nChw8c with AVX2: the device says; bfit_model_pick_block may
 * halve 16) and oneDNN reorders to and
 * from nchw around each (a fifth of the cnn's step): activations between
 * convolutions, activation layers, max pools, f32 batch norms and
 * depthwise convolutions and residual adds stay blocked instead. An
 * activation layer, a batch norm and a max pool other than 2x2/2 keep
 * their input's layout, an add its inputs' (both the same); a 2x2/2 pool
 * may turn nChw16c into nchw (before a flatten), not back; a convolution takes either and makes
 * either. Convolutions, relus and pools compute the same numbers in another
 * order, so a step without batch norm gives bit for bit the gradients of
 * nchw (test_plan's test_blocked_same_grads); batch norm's sums over a
 * channel go in another order in a block, so with it they agree to
 * rounding (test_blocked_bnorm_grads). */
static int choose_layouts(bfit_model *M)
{
    uint8_t *blk = malloc((size_t)M->n + 1);
    int64_t t = bfit_test_value(BFIT_TC_LAYOUT);
    int B = M->dev && (M->store.precision == BFIT_F32 || M->store.precision == BFIT_BF16)
                ? bfit_device_layout_block(M->dev, M->store.precision)
                : 0;
    int rc = BFIT_OK;

    if (!blk)
        return bfit_fail(BFIT_ENOMEM, "model: out of host memory choosing layouts");
    if (B && t)
        B = t == 8 || t == 16 ? (int)t : 0; /* a test's: plain, or the other block */
    else if ((rc = bfit_model_pick_block(M, B, &B)) != BFIT_OK)
        goto out;
    mark_blocked(M, blk, B);
    for (int i = 0; i < M->n; i++)
        bfit_layer_set_blocked(M->nodes[i].l, M->nodes[i].in[0] >= 0 && blk[M->nodes[i].in[0]] ? B : 0,
                               blk[i + 1] ? B : 0);
out:
    free(blk);
    return rc;
}

int bfit_model_configure(bfit_model *M, const bfit_store_cfg *c)
{
    int rc;

    if (!bfit_dtype_is_float(c->precision))
        return bfit_fail_field(BFIT_EINVAL, "precision", "must be f32, bf16 or f16, not %s",
                               bfit_dtype_name(c->precision));
    if ((unsigned)c->recompute > BFIT_RECOMPUTE_CUTS || (c->recompute == BFIT_RECOMPUTE_CUTS && !c->keep))
        return bfit_fail_field(BFIT_EINVAL, "recompute", "%s (auto is resolved by bfit_model_set_storage; cuts "
                               "needs the values to keep)", bfit_recompute_name(c->recompute));
    if (M->param_block && c->precision != M->store.precision)
        return bfit_fail(BFIT_ESTATE, "model: the precision must be set before the parameters are allocated");
    bfit_model_unreserve(M);
    bfit_model_seq_forget(M); /* prepared for the old dtypes and modes */
    M->store = *c;
    M->store.keep = NULL;
    if (c->recompute == BFIT_RECOMPUTE_CUTS)
        memcpy(M->keep, c->keep, (size_t)M->n + 1);
    for (int i = 0; i < M->n; i++)
        bfit_layer_set_dtype(M->nodes[i].l, c->precision);
    if ((rc = choose_layouts(M)) != BFIT_OK)
        return rc;
    if (bfit_dtype_is_float(M->input_dtype))
        M->input_dtype = c->precision;
    memset(M->regen, 0, (size_t)M->n + 1);
    find_cuts(M);
    choose_modes(M, c->lean);
    recompute(M, c);
    if (c->lean && !c->keep_cheap)
        regen_cheap(M);
    M->regen[M->n] = 0; /* the loss's probabilities are read after the forward */
    M->param_bytes = M->master_bytes + bfit_model_copy_bytes(M);
    return BFIT_OK;
}

bfit_storage bfit_model_storage(const bfit_model *M)
{
    bfit_storage s = {M->store.precision, M->store.lean, M->store.recompute};
    return s;
}
