/* cuda_dnn.c - convolution and batch normalisation on cuDNN 9's legacy
 * (non-graph) API, nchw/oihw f32.
 *
 * Convolution: cudnnConvolutionForward (+ cudnnAddTensor for the bias),
 * cudnnConvolutionBackwardData, cudnnConvolutionBackwardFilter (+
 * cudnnConvolutionBackwardBias), accumulating into the gradients with
 * beta = 1. The descriptor's math is CUDNN_FMA_MATH: no tensor cores, so
 * no TF32, and f32 results agree with the CPU's to rounding. The algorithm
 * is chosen once per op from cudnnGet*Algorithm_v7 (heuristics for the
 * descriptor, FMA math included; nothing is run or allocated) by the
 * device's policy:
 *   fastest  the heuristics' first usable algorithm;
 *   lean     the usable algorithm with the smallest workspace;
 * usable meaning supported for these shapes, its workspace size known, and,
 * with cfg.deterministic (the default), deterministic; when no
 * deterministic one is usable, any is taken. The op's workspace
 * is that algorithm's exact size (plus alignment slack), so the plan counts
 * what the convolution will use and cuDNN allocates nothing itself. A
 * workspace that grows with the batch is bounded by running the
 * convolution over the batch in chunks (conv_parts).
 *
 * Batch norm: cudnnBatchNormalizationForwardTraining returns the inverse
 * standard deviation where BNORM_FWD must give the variance, and its
 * running-variance update cannot be checked here against the CPU's; so the
 * batch statistics and running update are our kernel (bk_bn_stats, the CPU's
 * formulas), the normalisation is cudnnBatchNormalizationForwardInference
 * with those statistics (training and eval alike), and the backward is
 * cudnnBatchNormalizationBackward from the saved mean and an inverse
 * deviation computed from the saved variance into the workspace. Without
 * diff_src, only the parameter gradients are computed (bk_bn_param_grads).
 * Backward from the output (in-place activated batch norm) is our kernels
 * in f32 too: they take x^ from the output, where cuDNN would need the
 * input recovered into a workspace the size of the tensor. */
#include "base/err.h"
#include "device/cuda.h"

#include <limits.h>
#include <string.h>

static void part_fini(cuda_conv_part *p)
{
    if (p->tx)
        cudnnDestroyTensorDescriptor(p->tx);
    if (p->ty)
        cudnnDestroyTensorDescriptor(p->ty);
    memset(p, 0, sizeof *p);
}

void cuda_dnn_fini(cuda_op *op)
{
    if (op->tx)
        cudnnDestroyTensorDescriptor(op->tx);
    part_fini(&op->part[0]);
    part_fini(&op->part[1]);
    if (op->tb)
        cudnnDestroyTensorDescriptor(op->tb);
    if (op->tw)
        cudnnDestroyFilterDescriptor(op->tw);
    if (op->conv)
        cudnnDestroyConvolutionDescriptor(op->conv);
}

static int fits_int(const int64_t *v, int n)
{
    for (int i = 0; i < n; i++)
        if (v[i] < 0 || v[i] > INT_MAX)
            return 0;
    return 1;
}

static cudnnDataType_t dnn_type(bfit_dtype t)
{
    return t == BFIT_BF16 ? CUDNN_DATA_BFLOAT16 : t == BFIT_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

static int tensor4(cudnnTensorDescriptor_t *t, bfit_dtype dt, int64_t n, int64_t c, int64_t h, int64_t w,
                   const char *what)
{
    CUDNN_TRY(cudnnCreateTensorDescriptor(t), what);
    CUDNN_TRY(cudnnSetTensor4dDescriptor(*t, CUDNN_TENSOR_NCHW, dnn_type(dt), (int)n, (int)c, (int)h, (int)w), what);
    return BFIT_OK;
}

/* cuDNN's legacy API indexes a tensor with 32-bit ints: one of more than
 * 2^31 - 1 elements is refused here, before cuDNN would fail on it, as out
 * of memory (BFIT_ENOMEM): the plan's solver and the trainer then take a
 * smaller micro-batch, as for any micro-batch too large for the device. */
static int within_limit(const char *what, const char *tensor, int64_t elems)
{
    if (elems <= INT_MAX)
        return BFIT_OK;
    return bfit_fail(BFIT_ENOMEM, "cuda %s: its %s tensor would have %lld elements, over cuDNN's limit of 2^31 - 1 "
                                  "per tensor: use a smaller micro-batch", what, tensor, (long long)elems);
}

/* ---- convolution ------------------------------------------------------------------ */

/* groups 0 or 1 is dense (device.h) */
static int groups_of(const bfit_op_desc *d)
{
    return d->u.conv.groups > 1 ? d->u.conv.groups : 1;
}

static int check_conv(const bfit_op_desc *d)
{
    int rc;
    const int64_t v[] = {d->u.conv.n,  d->u.conv.ic, d->u.conv.ih, d->u.conv.iw, d->u.conv.oc, d->u.conv.oh,
                         d->u.conv.ow, d->u.conv.kh, d->u.conv.kw, d->u.conv.sh, d->u.conv.sw, d->u.conv.ph,
                         d->u.conv.pw};
    if (d->u.conv.blk_src || d->u.conv.blk_dst)
        return bfit_fail(BFIT_EINVAL, "cuda conv: nChw16c tensors are the cpu's; cuDNN's here are nchw");
    if (d->u.conv.n < 1 || d->u.conv.ic < 1 || d->u.conv.ih < 1 || d->u.conv.iw < 1 || d->u.conv.oc < 1 ||
        d->u.conv.kh < 1 || d->u.conv.kw < 1 || d->u.conv.sh < 1 || d->u.conv.sw < 1 || !fits_int(v, 13))
        return bfit_fail(BFIT_EINVAL, "cuda conv: bad sizes (n %lld ic %lld %lldx%lld oc %lld k %lldx%lld s %lldx%lld "
                         "p %lldx%lld)", (long long)v[0], (long long)v[1], (long long)v[2], (long long)v[3],
                         (long long)v[4], (long long)v[7], (long long)v[8], (long long)v[9], (long long)v[10],
                         (long long)v[11], (long long)v[12]);
    if ((rc = within_limit("conv", "input", v[0] * v[1] * v[2] * v[3])) != BFIT_OK ||
        (rc = within_limit("conv", "output", v[0] * v[4] * v[5] * v[6])) != BFIT_OK ||
        (rc = within_limit("conv", "weight", v[4] * (v[1] / groups_of(d)) * v[7] * v[8])) != BFIT_OK)
        return rc;
    if (d->u.conv.ic % groups_of(d) || d->u.conv.oc % groups_of(d))
        return bfit_fail(BFIT_EINVAL, "cuda conv: %d groups do not divide %lld input and %lld output channels",
                         groups_of(d), (long long)v[1], (long long)v[4]);
    if (d->u.conv.ih + 2 * d->u.conv.ph < d->u.conv.kh || d->u.conv.iw + 2 * d->u.conv.pw < d->u.conv.kw ||
        d->u.conv.oh != (d->u.conv.ih + 2 * d->u.conv.ph - d->u.conv.kh) / d->u.conv.sh + 1 ||
        d->u.conv.ow != (d->u.conv.iw + 2 * d->u.conv.pw - d->u.conv.kw) / d->u.conv.sw + 1)
        return bfit_fail(BFIT_EINVAL, "cuda conv: output %lldx%lld does not match input %lldx%lld, kernel %lldx%lld, "
                         "stride %lldx%lld, padding %lldx%lld", (long long)d->u.conv.oh, (long long)d->u.conv.ow,
                         (long long)v[2], (long long)v[3], (long long)v[7], (long long)v[8], (long long)v[9],
                         (long long)v[10], (long long)v[11], (long long)v[12]);
    return BFIT_OK;
}

static int conv_descs(cuda_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    int rc;

    if ((rc = tensor4(&op->tb, BFIT_F32, 1, d->u.conv.oc, 1, 1, "conv bias descriptor")))
        return rc;
    CUDNN_TRY(cudnnCreateFilterDescriptor(&op->tw), "conv filter descriptor");
    /* grouped (depthwise where groups = ic): weights [oc, ic/groups, kh, kw], as PyTorch's */
    CUDNN_TRY(cudnnSetFilter4dDescriptor(op->tw, dnn_type(d->dtype), CUDNN_TENSOR_NCHW, (int)d->u.conv.oc,
                                         (int)(d->u.conv.ic / groups_of(d)), (int)d->u.conv.kh, (int)d->u.conv.kw),
              "conv filter descriptor");
    CUDNN_TRY(cudnnCreateConvolutionDescriptor(&op->conv), "convolution descriptor");
    /* PyTorch's conv is a cross-correlation; dilation 1; f32 accumulation */
    CUDNN_TRY(cudnnSetConvolution2dDescriptor(op->conv, (int)d->u.conv.ph, (int)d->u.conv.pw, (int)d->u.conv.sh,
                                              (int)d->u.conv.sw, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
              "convolution descriptor");
    CUDNN_TRY(cudnnSetConvolutionGroupCount(op->conv, groups_of(d)), "convolution group count");
    /* f32: no tensor cores (no TF32); 16-bit: tensor cores, f32 accumulation */
    CUDNN_TRY(cudnnSetConvolutionMathType(op->conv, d->dtype == BFIT_F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH),
              "convolution math type");
    return BFIT_OK;
}

/* A candidate from the heuristics, in their order. */
typedef struct conv_cand {
    int algo;
    cudnnStatus_t status;
    cudnnDeterminism_t det;
} conv_cand;

#define MAX_CANDS 16

/* The heuristics' candidates for the op's kind over part p, best first. */
static int candidates(cuda_op *op, const cuda_conv_part *p, conv_cand *c, int *n)
{
    cudnnHandle_t h = cuda_dev(op)->dnn;
    int got = 0;

    *n = 0;
    switch (op->base.desc.kind) {
    case BFIT_OP_CONV_FWD: {
        cudnnConvolutionFwdAlgoPerf_t r[MAX_CANDS];
        CUDNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7(h, p->tx, op->tw, op->conv, p->ty, MAX_CANDS, &got, r),
                  "convolution forward heuristics");
        for (int i = 0; i < got; i++)
            c[i] = (conv_cand){(int)r[i].algo, r[i].status, r[i].determinism};
        break;
    }
    case BFIT_OP_CONV_BWD_DATA: {
        cudnnConvolutionBwdDataAlgoPerf_t r[MAX_CANDS];
        CUDNN_TRY(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, op->tw, p->ty, op->conv, p->tx, MAX_CANDS, &got, r),
                  "convolution backward data heuristics");
        for (int i = 0; i < got; i++)
            c[i] = (conv_cand){(int)r[i].algo, r[i].status, r[i].determinism};
        break;
    }
    default: {
        cudnnConvolutionBwdFilterAlgoPerf_t r[MAX_CANDS];
        CUDNN_TRY(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->tx, p->ty, op->conv, op->tw, MAX_CANDS, &got,
                                                                r),
                  "convolution backward filter heuristics");
        for (int i = 0; i < got; i++)
            c[i] = (conv_cand){(int)r[i].algo, r[i].status, r[i].determinism};
        break;
    }
    }
    *n = got < MAX_CANDS ? got : MAX_CANDS;
    return BFIT_OK;
}

/* The exact workspace of algorithm algo for the op's kind over part p
 * (the candidate is skipped when cuDNN cannot say). */
static cudnnStatus_t algo_ws(cuda_op *op, const cuda_conv_part *p, int algo, size_t *bytes)
{
    cudnnHandle_t h = cuda_dev(op)->dnn;
    switch (op->base.desc.kind) {
    case BFIT_OP_CONV_FWD:
        return cudnnGetConvolutionForwardWorkspaceSize(h, p->tx, op->tw, op->conv, p->ty,
                                                       (cudnnConvolutionFwdAlgo_t)algo, bytes);
    case BFIT_OP_CONV_BWD_DATA:
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, op->tw, p->ty, op->conv, p->tx,
                                                            (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
    default:
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p->tx, p->ty, op->conv, op->tw,
                                                              (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
    }
}

static size_t wgrad_bytes(const bfit_op_desc *d)
{
    return (size_t)(d->u.conv.oc * d->u.conv.ic * d->u.conv.kh * d->u.conv.kw) * 2;
}

/* The op's workspace: the larger part's algorithm's exact bytes (plus
 * alignment slack). */
static void set_ws(cuda_op *op)
{
    size_t aw = op->part[0].algo_ws > op->part[1].algo_ws ? op->part[0].algo_ws : op->part[1].algo_ws;
    op->algo_ws = aw;
    op->ws = aw ? aw + CUDA_WS_ALIGN : 0;
    /* 16-bit weight gradient: cuDNN writes it in the data's dtype to the
     * workspace, after the algorithm's part, and it is added to the f32
     * gradient from there (PyTorch's autocast rounds it the same way) */
    if (op->base.desc.kind == BFIT_OP_CONV_BWD_WEIGHTS && op->base.desc.dtype != BFIT_F32)
        op->ws = CUDA_WS_PART(aw) + CUDA_WS_PART(wgrad_bytes(&op->base.desc)) + CUDA_WS_ALIGN;
}

/* Choose part p's algorithm by the policy among the usable candidates;
 * deterministic ones only unless there is none (or the device allows
 * any). A shape chosen for before is the device's memo's (cuda_memo.h):
 * the same policy, the same heuristics, so the same choice. */
static int choose_algo(cuda_op *op, cuda_conv_part *p)
{
    cuda_device *dev = cuda_dev(op);
    bfit_op_desc at = op->base.desc;
    conv_cand c[MAX_CANDS];
    int n, rc, best = -1;
    cuda_memo_key key;

    at.u.conv.n = p->n;
    cuda_memo_key_conv(&at, &key);
    if (cuda_memo_find(&dev->memo, &key, &p->algo, &p->algo_ws))
        return BFIT_OK;
    if ((rc = candidates(op, p, c, &n)) != BFIT_OK)
        return rc;
    for (int pass = dev->cfg.deterministic ? 0 : 1; pass < 2 && best < 0; pass++)
        for (int i = 0; i < n; i++) {
            size_t ws = 0;
            if (c[i].status != CUDNN_STATUS_SUCCESS || (pass == 0 && c[i].det != CUDNN_DETERMINISTIC) ||
                algo_ws(op, p, c[i].algo, &ws) != CUDNN_STATUS_SUCCESS)
                continue;
            if (best < 0 || (dev->cfg.policy == BFIT_CUDA_LEAN && ws < p->algo_ws)) {
                best = i;
                p->algo_ws = ws;
            }
            if (dev->cfg.policy == BFIT_CUDA_FASTEST)
                break;
        }
    (void)cudaGetLastError();
    if (best < 0)
        return bfit_fail(BFIT_EDEVICE, "cuDNN: no usable algorithm for convolution kind %d (n %lld, %lldx%lldx%lld -> "
                         "%lld channels, kernel %lldx%lld)", (int)at.kind, (long long)p->n, (long long)at.u.conv.ic,
                         (long long)at.u.conv.ih, (long long)at.u.conv.iw, (long long)at.u.conv.oc,
                         (long long)at.u.conv.kh, (long long)at.u.conv.kw);
    p->algo = c[best].algo;
    cuda_memo_put(&dev->memo, &key, p->algo, p->algo_ws);
    return BFIT_OK;
}

/* The part of n samples: its tensors, and its algorithm. */
static int part_make(cuda_op *op, int64_t n, cuda_conv_part *p)
{
    const bfit_op_desc *d = &op->base.desc;
    int rc, on, oc, oh, ow;

    p->n = n;
    if ((rc = tensor4(&p->tx, d->dtype, n, d->u.conv.ic, d->u.conv.ih, d->u.conv.iw, "conv input descriptor")) ||
        (rc = tensor4(&p->ty, d->dtype, n, d->u.conv.oc, d->u.conv.oh, d->u.conv.ow, "conv output descriptor")))
        return rc;
    CUDNN_TRY(cudnnGetConvolution2dForwardOutputDim(op->conv, p->tx, op->tw, &on, &oc, &oh, &ow),
              "convolution output size");
    if (oh != d->u.conv.oh || ow != d->u.conv.ow)
        return bfit_fail(BFIT_EDEVICE, "cuDNN: convolution output %dx%d where %lldx%lld was planned", oh, ow,
                         (long long)d->u.conv.oh, (long long)d->u.conv.ow);
    return choose_algo(op, p);
}

/* Workspace that grows with the batch (cuDNN's 16-bit algorithms take
 * nchw tensors through nhwc copies in it; some fast f32 ones keep buffers
 * per sample) would cost the batch it is for: over CONV_WS_CAP, the
 * convolution runs over the batch in chunks of at least CONV_MIN_CHUNK
 * samples (enough to fill the GPU), the workspace being a chunk's. The
 * device's conv_chunk forces a chunk size (the tests). */
#define CONV_WS_CAP ((size_t)64 << 20)
#define CONV_MIN_CHUNK 32

static int64_t chunk_size(const cuda_op *op)
{
    int64_t n = op->base.desc.u.conv.n, forced = cuda_dev(op)->cfg.conv_chunk, c;
    size_t ws = op->part[0].algo_ws, per;

    if (forced > 0)
        return forced < n ? forced : n;
    if (ws <= CONV_WS_CAP || n <= CONV_MIN_CHUNK)
        return n;
    per = ws / (size_t)n ? ws / (size_t)n : 1;
    c = (int64_t)(CONV_WS_CAP / per);
    return c < CONV_MIN_CHUNK ? CONV_MIN_CHUNK : c > n ? n : c;
}

/* The parts: the whole batch, or chunks and a tail when a chunk's
 * workspace is smaller (or chunks are forced). */
static int conv_parts(cuda_op *op)
{
    const int64_t n = op->base.desc.u.conv.n;
    cuda_conv_part whole;
    int64_t c;
    int rc;

    if ((rc = part_make(op, n, &op->part[0])) != BFIT_OK)
        return rc;
    if ((c = chunk_size(op)) >= n)
        return BFIT_OK;
    whole = op->part[0];
    memset(&op->part[0], 0, sizeof op->part[0]);
    if ((rc = part_make(op, c, &op->part[0])) != BFIT_OK ||
        (n % c && (rc = part_make(op, n % c, &op->part[1])) != BFIT_OK)) {
        part_fini(&whole);
        return rc;
    }
    if (cuda_dev(op)->cfg.conv_chunk <= 0 &&
        (op->part[0].algo_ws >= whole.algo_ws || op->part[1].algo_ws >= whole.algo_ws)) {
        /* no smaller: not worth the chunks' launches */
        part_fini(&op->part[0]);
        part_fini(&op->part[1]);
        op->part[0] = whole;
        return BFIT_OK;
    }
    part_fini(&whole);
    return BFIT_OK;
}

/* The part that runs from sample s on: chunks, then the tail. */
static const cuda_conv_part *part_at(const cuda_op *op, int64_t s)
{
    return op->base.desc.u.conv.n - s >= op->part[0].n ? &op->part[0] : &op->part[1];
}

/* bytes of one sample's input (x) and output (y) */
static size_t x_bytes(const bfit_op_desc *d)
{
    return (size_t)(d->u.conv.ic * d->u.conv.ih * d->u.conv.iw) * (d->dtype == BFIT_F32 ? 4 : 2);
}

static size_t y_bytes(const bfit_op_desc *d)
{
    return (size_t)(d->u.conv.oc * d->u.conv.oh * d->u.conv.ow) * (d->dtype == BFIT_F32 ? 4 : 2);
}

#define AT(ptr, s, per) ((char *)(ptr) + (size_t)(s) * (per))

static int run_conv_fwd(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    cudnnHandle_t h = cuda_dev(op)->dnn;
    int bias = d->u.conv.bias;
    const float one = 1.0f, zero = 0.0f;
    const cuda_conv_part *p;
    size_t xb = x_bytes(d), yb = y_bytes(d);

    if (!a->src || !a->weights || !a->dst || (bias && !a->bias) || (op->ws && !a->workspace))
        return bfit_fail(BFIT_EINVAL, "conv forward: src, weights, dst%s%s are required", bias ? ", bias" : "",
                         op->ws ? ", workspace" : "");
    for (int64_t s = 0; s < d->u.conv.n; s += p->n) {
        p = part_at(op, s);
        CUDNN_TRY(cudnnConvolutionForward(h, &one, p->tx, AT(a->src, s, xb), op->tw, a->weights, op->conv,
                                          (cudnnConvolutionFwdAlgo_t)p->algo, cuda_ws(op, a), p->algo_ws, &zero,
                                          p->ty, AT(a->dst, s, yb)),
                  "convolution forward");
        if (bias && d->dtype == BFIT_F32)
            CUDNN_TRY(cudnnAddTensor(h, &one, op->tb, a->bias, &one, p->ty, AT(a->dst, s, yb)), "convolution bias");
    }
    if (bias && d->dtype != BFIT_F32) {
        cudaError_t e = bk_bias_chan(cuda_dev(op)->stream, (int)d->dtype, a->dst, a->bias, d->u.conv.n, d->u.conv.oc,
                                     d->u.conv.oh * d->u.conv.ow);
        if (e != cudaSuccess)
            return cuda_fail(e, "convolution bias");
    }
    return BFIT_OK;
}

static int run_conv_bwd_data(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    const float one = 1.0f, zero = 0.0f;
    const cuda_conv_part *p;
    size_t xb = x_bytes(d), yb = y_bytes(d);

    if (!a->diff_dst || !a->weights || !a->diff_src || (op->ws && !a->workspace))
        return bfit_fail(BFIT_EINVAL, "conv backward data: diff_dst, weights, diff_src%s are required",
                         op->ws ? ", workspace" : "");
    for (int64_t s = 0; s < d->u.conv.n; s += p->n) {
        p = part_at(op, s);
        CUDNN_TRY(cudnnConvolutionBackwardData(cuda_dev(op)->dnn, &one, op->tw, a->weights, p->ty,
                                               AT(a->diff_dst, s, yb), op->conv, (cudnnConvolutionBwdDataAlgo_t)p->algo,
                                               cuda_ws(op, a), p->algo_ws, &zero, p->tx, AT(a->diff_src, s, xb)),
                  "convolution backward data");
    }
    return BFIT_OK;
}

/* 16-bit: each part's weight gradient into the workspace, then added (or
 * copied, the first part without accumulate) to the f32 one; the bias
 * gradient by our channel sums */
static int run_conv_bwd_weights16(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    cuda_device *dev = cuda_dev(op);
    char *ws = cuda_ws(op, a), *tmp = ws + CUDA_WS_PART(op->algo_ws);
    const float one = 1.0f, zero = 0.0f;
    const cuda_conv_part *p;
    size_t xb = x_bytes(d), yb = y_bytes(d);
    cudaError_t e;

    for (int64_t s = 0; s < d->u.conv.n; s += p->n) {
        p = part_at(op, s);
        CUDNN_TRY(cudnnConvolutionBackwardFilter(dev->dnn, &one, p->tx, AT(a->src, s, xb), p->ty,
                                                 AT(a->diff_dst, s, yb), op->conv,
                                                 (cudnnConvolutionBwdFilterAlgo_t)p->algo, p->algo_ws ? ws : NULL,
                                                 p->algo_ws, &zero, op->tw, tmp),
                  "convolution backward weights");
        if ((e = bk_to_f32(dev->stream, (int)d->dtype, tmp, a->diff_weights, (int64_t)(wgrad_bytes(d) / 2),
                           s > 0 || d->accumulate)) != cudaSuccess)
            return cuda_fail(e, "convolution backward weights (into the f32 gradient)");
    }
    if (d->u.conv.bias && (e = bk_chan_sum(dev->stream, (int)d->dtype, a->diff_dst, a->diff_bias, d->u.conv.n,
                                           d->u.conv.oc, d->u.conv.oh * d->u.conv.ow, d->accumulate)) != cudaSuccess)
        return cuda_fail(e, "convolution backward bias");
    return BFIT_OK;
}

static int run_conv_bwd_weights(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    cudnnHandle_t h = cuda_dev(op)->dnn;
    int bias = d->u.conv.bias;
    const float one = 1.0f, zero = 0.0f;
    const cuda_conv_part *p;
    size_t xb = x_bytes(d), yb = y_bytes(d);

    if (!a->src || !a->diff_dst || !a->diff_weights || (bias && !a->diff_bias) || (op->ws && !a->workspace))
        return bfit_fail(BFIT_EINVAL, "conv backward weights: src, diff_dst, diff_weights%s%s are required",
                         bias ? ", diff_bias" : "", op->ws ? ", workspace" : "");
    if (d->dtype != BFIT_F32)
        return run_conv_bwd_weights16(op, a);
    for (int64_t s = 0; s < d->u.conv.n; s += p->n) {
        /* the first part adds to the gradients or overwrites them; the rest add */
        const float *beta = s > 0 || d->accumulate ? &one : &zero;
        p = part_at(op, s);
        CUDNN_TRY(cudnnConvolutionBackwardFilter(h, &one, p->tx, AT(a->src, s, xb), p->ty, AT(a->diff_dst, s, yb),
                                                 op->conv, (cudnnConvolutionBwdFilterAlgo_t)p->algo, cuda_ws(op, a),
                                                 p->algo_ws, beta, op->tw, a->diff_weights),
                  "convolution backward weights");
        if (bias)
            CUDNN_TRY(cudnnConvolutionBackwardBias(h, &one, p->ty, AT(a->diff_dst, s, yb), beta, op->tb,
                                                   a->diff_bias),
                      "convolution backward bias");
    }
    return BFIT_OK;
}

int cuda_conv_init(cuda_op *op)
{
    int rc;

    op->fini = cuda_dnn_fini;
    if ((rc = check_conv(&op->base.desc)) != BFIT_OK || (rc = conv_descs(op)) != BFIT_OK ||
        (rc = conv_parts(op)) != BFIT_OK)
        return rc;
    set_ws(op);
    op->saved = 0;
    op->run = op->base.desc.kind == BFIT_OP_CONV_FWD        ? run_conv_fwd
              : op->base.desc.kind == BFIT_OP_CONV_BWD_DATA ? run_conv_bwd_data
                                                            : run_conv_bwd_weights;
    return BFIT_OK;
}

/* ---- batch normalisation ----------------------------------------------------------------- */

static int run_bn_fwd(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    cuda_device *dev = cuda_dev(op);
    const float one = 1.0f, zero = 0.0f;
    int dt = (int)d->dtype;
    cudaError_t e;

    if (!a->src || !a->dst || !a->scale || !a->shift || !a->mean || !a->var)
        return bfit_fail(BFIT_EINVAL, "batch norm forward: src, dst, scale, shift, mean, var are required");
    if (!a->rmean != !a->rvar)
        return bfit_fail(BFIT_EINVAL, "batch norm forward: rmean and rvar go together");
    if (op->ws && !a->workspace)
        return bfit_fail(BFIT_EINVAL, "batch norm forward: the workspace is required");
    if (d->u.bnorm.training &&
        (e = bk_bn_stats(dev->stream, dt, a->src, a->mean, a->var, a->rmean, a->rvar, d->u.bnorm.n, d->u.bnorm.c,
                         d->u.bnorm.h * d->u.bnorm.w, d->u.bnorm.momentum, (double *)cuda_ws(op, a))) != cudaSuccess)
        return cuda_fail(e, "batch norm statistics");
    if (d->dtype != BFIT_F32) {
        e = bk_bn_fwd(dev->stream, dt, a->src, a->dst, a->scale, a->shift, a->mean, a->var, d->u.bnorm.n,
                      d->u.bnorm.c, d->u.bnorm.h * d->u.bnorm.w, d->u.bnorm.eps);
        return e == cudaSuccess ? BFIT_OK : cuda_fail(e, "batch norm forward");
    }
    /* y = scale (x - mean) / sqrt(var + eps) + shift with the statistics given */
    CUDNN_TRY(cudnnBatchNormalizationForwardInference(dev->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, op->tx, a->src,
                                                      op->tx, a->dst, op->tb, a->scale, a->shift, a->mean, a->var,
                                                      d->u.bnorm.eps),
              "batch normalization forward");
    return BFIT_OK;
}

/* the backward's workspace: the channel sums (ours) or the inverse
 * deviation (cuDNN's), then the segments' partial sums */
static size_t bn_ws_first(const bfit_op_desc *d)
{
    return CUDA_WS_PART(d->dtype == BFIT_F32 && !d->u.bnorm.use_dst ? (size_t)d->u.bnorm.c * sizeof(float)
                                                                     : 2 * (size_t)d->u.bnorm.c * sizeof(double));
}

/* Our kernels: 16-bit, or from the forward's output (use_dst: src is y,
 * and x^ = (y - shift) / scale needs no input, kept or recovered); the
 * channel sums of this micro-batch into the workspace, the parameter
 * gradients from them, then the input gradient. */
static int bn_bwd_own(cuda_op *op, const bfit_op_args *a, double *sums, double *part)
{
    const bfit_op_desc *d = &op->base.desc;
    cudaStream_t s = cuda_dev(op)->stream;
    int64_t n = d->u.bnorm.n, c = d->u.bnorm.c, hw = d->u.bnorm.h * d->u.bnorm.w;
    const float *shift = d->u.bnorm.use_dst ? a->shift : NULL;
    cudaError_t e;

    if ((e = bk_bn_param_grads(s, (int)d->dtype, a->src, a->diff_dst, a->mean, a->var, a->scale, shift,
                               a->diff_scale, a->diff_shift, a->diff_src ? sums : NULL, n, c, hw, d->u.bnorm.eps,
                               d->accumulate, part)) != cudaSuccess)
        return cuda_fail(e, "batch norm parameter gradients");
    if (a->diff_src && (e = bk_bn_dx(s, (int)d->dtype, a->src, a->diff_dst, a->scale, shift, a->mean, a->var, sums,
                                     a->diff_src, n, c, hw, d->u.bnorm.eps)) != cudaSuccess)
        return cuda_fail(e, "batch norm backward data");
    return BFIT_OK;
}

static int run_bn_bwd(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    cuda_device *dev = cuda_dev(op);
    const float one = 1.0f, zero = 0.0f;
    char *ws = cuda_ws(op, a);
    float *inv = (float *)ws;
    double *part = ws ? (double *)(ws + bn_ws_first(d)) : NULL;
    cudaError_t e;

    if (!a->src || !a->diff_dst || !a->scale || !a->mean || !a->var || !a->diff_scale || !a->diff_shift)
        return bfit_fail(BFIT_EINVAL, "batch norm backward: src, diff_dst, scale, mean, var, diff_scale, "
                                      "diff_shift are required");
    if (!ws)
        return bfit_fail(BFIT_EINVAL, "batch norm backward: the workspace is required");
    if (d->u.bnorm.use_dst && !a->shift)
        return bfit_fail(BFIT_EINVAL, "batch norm backward from the output: shift is required");
    if (d->u.bnorm.use_dst || d->dtype != BFIT_F32)
        return bn_bwd_own(op, a, (double *)ws, part);
    if (!a->diff_src) {
        e = bk_bn_param_grads(dev->stream, (int)d->dtype, a->src, a->diff_dst, a->mean, a->var, NULL, NULL,
                              a->diff_scale, a->diff_shift, NULL, d->u.bnorm.n, d->u.bnorm.c,
                              d->u.bnorm.h * d->u.bnorm.w, d->u.bnorm.eps, d->accumulate, part);
        return e == cudaSuccess ? BFIT_OK : cuda_fail(e, "batch norm parameter gradients");
    }
    if ((e = bk_invstd(dev->stream, a->var, inv, d->u.bnorm.c, d->u.bnorm.eps)) != cudaSuccess)
        return cuda_fail(e, "batch norm inverse deviation");
    CUDNN_TRY(cudnnBatchNormalizationBackward(dev->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one,
                                              d->accumulate ? &one : &zero, op->tx, a->src, op->tx, a->diff_dst,
                                              op->tx, a->diff_src, op->tb, a->scale, a->diff_scale, a->diff_shift,
                                              d->u.bnorm.eps, a->mean, inv),
              "batch normalization backward");
    return BFIT_OK;
}

/* f32 on cuDNN (its descriptors); 16-bit and backward from the output on
 * our kernels, which take any size. Workspace: the statistics' and the
 * gradients' partial sums per segment of the batch, and the backward's
 * inverse deviation (cuDNN's) or channel sums (ours); nothing per sample. */
int cuda_bnorm_init(cuda_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    const int64_t v[] = {d->u.bnorm.n, d->u.bnorm.c, d->u.bnorm.h, d->u.bnorm.w};
    int f32 = d->dtype == BFIT_F32, rc;

    op->fini = cuda_dnn_fini;
    if (d->u.bnorm.blk)
        return bfit_fail(BFIT_EINVAL, "cuda batch norm: nChw8c/16c tensors are the cpu's; the GPU's here are nchw");
    if (v[0] < 1 || v[1] < 1 || v[2] < 1 || v[3] < 1 || !fits_int(v, 4) || !(d->u.bnorm.eps >= CUDNN_BN_MIN_EPSILON))
        return bfit_fail(BFIT_EINVAL, "cuda batch norm: bad sizes %lldx%lldx%lldx%lld or eps %g",
                         (long long)v[0], (long long)v[1], (long long)v[2], (long long)v[3], (double)d->u.bnorm.eps);
    if (f32 && (rc = within_limit("batch norm", "data", v[0] * v[1] * v[2] * v[3])) != BFIT_OK)
        return rc;
    if (!bk_bn_fits(v[0], v[1], v[2] * v[3]))
        return bfit_fail(BFIT_ENOMEM, "cuda batch norm: %lld samples of %lldx%lld are more than its sums index: use a "
                         "smaller micro-batch", (long long)v[0], (long long)v[2], (long long)v[3]);
    if (f32 && (rc = tensor4(&op->tx, d->dtype, v[0], v[1], v[2], v[3], "batch norm data descriptor")) != BFIT_OK)
        return rc;
    if (f32) {
        CUDNN_TRY(cudnnCreateTensorDescriptor(&op->tb), "batch norm parameter descriptor");
        CUDNN_TRY(cudnnDeriveBNTensorDescriptor(op->tb, op->tx, CUDNN_BATCHNORM_SPATIAL),
                  "batch norm parameter descriptor");
    }
    op->saved = 0;
    if (d->kind == BFIT_OP_BNORM_FWD) {
        op->ws = d->u.bnorm.training ? CUDA_WS_PART(bk_bn_part_bytes(v[1])) + CUDA_WS_ALIGN : 0;
        op->run = run_bn_fwd;
    } else {
        op->ws = bn_ws_first(d) + CUDA_WS_PART(bk_bn_part_bytes(v[1])) + CUDA_WS_ALIGN;
        op->run = run_bn_bwd;
    }
    return BFIT_OK;
}
