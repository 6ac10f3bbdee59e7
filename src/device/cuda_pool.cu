/* cuda_pool.cu - 2-d max and average pooling, forward and backward, nchw.
 *
 * Our own kernels rather than cuDNN's: cudnnPoolingBackward needs the
 * forward's input and output, which POOL_BWD does not get (the layer keeps
 * only `saved`). Max pooling saves, per output, the position of its window's
 * maximum in the input plane (int32). The backward is a gather: one thread
 * per input element adds the gradients of the windows that hold it, in
 * window order, so overlapping windows need no atomics and the sum is
 * deterministic. Average pooling divides by kh kw (count_include_pad; a
 * window never reaches past the padding, see cpu_pool.c's checks). */
#include "device/cuda_common.cuh"

#include <math.h>

template <class T> __global__ void k_pool_fwd(bk_pool g, int max, const T *x, T *y, int32_t *idx)
{
    const int64_t total = g.n * g.c * g.oh * g.ow;
    BK_FOR(o, total)
    {
        int64_t ox = o % g.ow, oy = (o / g.ow) % g.oh, plane = o / (g.ow * g.oh);
        int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
        int64_t ya = y0 < 0 ? 0 : y0, yb = y0 + g.kh < g.ih ? y0 + g.kh : g.ih;
        int64_t xa = x0 < 0 ? 0 : x0, xb = x0 + g.kw < g.iw ? x0 + g.kw : g.iw;
        const T *in = x + plane * g.ih * g.iw;
        if (max) {
            float best = 0.0f;
            int64_t at = -1;
            for (int64_t yy = ya; yy < yb; yy++)
                for (int64_t xx = xa; xx < xb; xx++) {
                    float v = bk_f(in[yy * g.iw + xx]);
                    if (at < 0 || v > best) {
                        best = v;
                        at = yy * g.iw + xx;
                    }
                }
            y[o] = bk_to<T>(best);
            if (idx)
                idx[o] = (int32_t)at;
        } else {
            float s = 0.0f;
            for (int64_t yy = ya; yy < yb; yy++)
                for (int64_t xx = xa; xx < xb; xx++)
                    s += bk_f(in[yy * g.iw + xx]);
            y[o] = bk_to<T>(s / (float)(g.kh * g.kw));
        }
    }
}

extern "C" cudaError_t bk_pool_fwd(cudaStream_t s, int dt, bk_pool g, int max, const void *x, void *y, int32_t *idx)
{
    BK_DTYPE(dt, T,
             k_pool_fwd<T><<<bk_grid(g.n * g.c * g.oh * g.ow, BK_THREADS), BK_THREADS, 0, s>>>(g, max, (const T *)x,
                                                                                             (T *)y, idx));
    return cudaGetLastError();
}

/* the first and last window index along one axis covering input position p */
__device__ __forceinline__ void windows(int64_t p, int64_t pad, int64_t k, int64_t st, int64_t nout, int64_t *lo,
                                        int64_t *hi)
{
    int64_t a = p + pad - k + 1; /* a window starting at o*st - pad covers p iff o*st >= a and o*st <= p + pad */
    *lo = a <= 0 ? 0 : (a + st - 1) / st;
    *hi = (p + pad) / st;
    if (*hi > nout - 1)
        *hi = nout - 1;
}

template <class T> __global__ void k_pool_bwd(bk_pool g, int max, const T *dy, const int32_t *idx, T *dx)
{
    const int64_t total = g.n * g.c * g.ih * g.iw;
    const float inv = 1.0f / (float)(g.kh * g.kw);
    BK_FOR(i, total)
    {
        int64_t xx = i % g.iw, yy = (i / g.iw) % g.ih, plane = i / (g.iw * g.ih);
        int64_t oy0, oy1, ox0, ox1;
        const int64_t base = plane * g.oh * g.ow;
        const int32_t me = (int32_t)(yy * g.iw + xx);
        float s = 0.0f;
        windows(yy, g.ph, g.kh, g.sh, g.oh, &oy0, &oy1);
        windows(xx, g.pw, g.kw, g.sw, g.ow, &ox0, &ox1);
        for (int64_t oy = oy0; oy <= oy1; oy++)
            for (int64_t ox = ox0; ox <= ox1; ox++) {
                int64_t o = base + oy * g.ow + ox;
                if (!max)
                    s += bk_f(dy[o]) * inv;
                else if (idx[o] == me)
                    s += bk_f(dy[o]);
            }
        dx[i] = bk_to<T>(s);
    }
}

extern "C" cudaError_t bk_pool_bwd(cudaStream_t s, int dt, bk_pool g, int max, const void *dy, const int32_t *idx,
                                   void *dx)
{
    BK_DTYPE(dt, T,
             k_pool_bwd<T><<<bk_grid(g.n * g.c * g.ih * g.iw, BK_THREADS), BK_THREADS, 0, s>>>(
                 g, max, (const T *)dy, idx, (T *)dx));
    return cudaGetLastError();
}
