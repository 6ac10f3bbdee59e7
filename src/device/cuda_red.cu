/* cuda_red.cu - the CUDA backend's reductions: REDUCE_ROWS, layer norm,
 * softmax cross-entropy, gradient norms and batch-norm statistics.
 *
 * Every sum is in double and deterministic: a block reduces its part in a
 * fixed tree (bk_block_sum), column sums go over fixed chunks of rows whose
 * partial sums are added in chunk order, and nothing depends on the grid
 * size or on atomics. */
#include "device/cuda_common.cuh"

#include <math.h>

/* ---- column sums over fixed chunks of rows ---------------------------------- */

#define COL_X 32       /* columns per block (one warp: coalesced rows) */
#define COL_Y 8        /* row lanes per block */
#define ROW_CHUNK 256  /* rows per partial sum */

static inline __host__ __device__ int64_t nchunks(int64_t M) { return (M + ROW_CHUNK - 1) / ROW_CHUNK; }
static inline unsigned cap_grid(int64_t b) { return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b); }

/* part[(v * nchunk + chunk) * N + col] = sum over the chunk's rows of the
 * functor's value v at (row, col); lanes are added in lane order. */
template <int NV, class F> __global__ void k_colpart(F f, int64_t M, int64_t N, double *part)
{
    __shared__ double sh[NV][COL_Y][COL_X];
    const int64_t col = (int64_t)blockIdx.x * COL_X + threadIdx.x, nch = nchunks(M);

    for (int64_t ch = blockIdx.y; ch < nch; ch += gridDim.y) {
        int64_t r1 = (ch + 1) * ROW_CHUNK < M ? (ch + 1) * ROW_CHUNK : M;
        double acc[NV];
        for (int v = 0; v < NV; v++)
            acc[v] = 0;
        if (col < N)
            for (int64_t r = ch * ROW_CHUNK + threadIdx.y; r < r1; r += COL_Y) {
                double val[NV];
                f(r, col, val);
                for (int v = 0; v < NV; v++)
                    acc[v] += val[v];
            }
        for (int v = 0; v < NV; v++)
            sh[v][threadIdx.y][threadIdx.x] = acc[v];
        __syncthreads();
        if (threadIdx.y == 0 && col < N)
            for (int v = 0; v < NV; v++) {
                double s = 0;
                for (int y = 0; y < COL_Y; y++)
                    s += sh[v][y][threadIdx.x];
                part[((int64_t)v * nch + ch) * N + col] = s;
            }
        __syncthreads();
    }
}

/* out_v[col] = (acc ? out_v[col] + S : S), S the chunks' sum in order,
 * rounded once as the CPU's double sums are. */
__global__ void k_colfin(const double *part, int64_t nch, int64_t N, float *out0, float *out1, int acc)
{
    BK_FOR(col, N)
    {
        float *out[2] = {out0, out1};
        for (int v = 0; v < 2 && out[v]; v++) {
            double s = 0;
            for (int64_t ch = 0; ch < nch; ch++)
                s += part[((int64_t)v * nch + ch) * N + col];
            out[v][col] = (float)(acc ? (double)out[v][col] + s : s);
        }
    }
}

template <int NV, class F> static cudaError_t colsums(cudaStream_t s, F f, int64_t M, int64_t N, double *part)
{
    /* x may be up to 2^31 - 1 blocks, y at most 65535 (chunks loop beyond) */
    dim3 block(COL_X, COL_Y), grid((unsigned)((N + COL_X - 1) / COL_X), cap_grid(nchunks(M)));
    k_colpart<NV, F><<<grid, block, 0, s>>>(f, M, N, part);
    return cudaGetLastError();
}

/* ---- REDUCE_ROWS ------------------------------------------------------------- */

template <class T> struct rows_val {
    const T *src;
    int64_t N;
    __device__ void operator()(int64_t r, int64_t c, double *v) const { v[0] = bk_f(src[r * N + c]); }
};

extern "C" size_t bk_reduce_rows_ws(int64_t M, int64_t N) { return (size_t)(nchunks(M) * N) * sizeof(double); }

extern "C" cudaError_t bk_reduce_rows(cudaStream_t s, int dt, const void *src, float *dst, int64_t M, int64_t N,
                                      int acc, void *ws)
{
    cudaError_t e;
    BK_DTYPE(dt, T, rows_val<T> f = {(const T *)src, N}; e = colsums<1>(s, f, M, N, (double *)ws));
    if (e != cudaSuccess)
        return e;
    k_colfin<<<bk_grid(N, BK_THREADS), BK_THREADS, 0, s>>>((const double *)ws, nchunks(M), N, dst, NULL, acc);
    return cudaGetLastError();
}

/* ---- layer norm ---------------------------------------------------------------- */

#define ROW_THREADS 256

template <class T>
__global__ void k_lnorm_fwd(const T *x, T *y, const float *scale, const float *shift, float *mean, float *var,
                            int64_t rows, int64_t cols, float eps, int rms, float goff)
{
    __shared__ double sh[ROW_THREADS / 32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *xr = x + r * cols;
        T *yr = y + r * cols;
        double s = 0, q = 0, mu = 0, v, rstd;
        if (!rms) { /* the same for every thread of the block: the sums' barriers are reached by all */
            for (int64_t j = threadIdx.x; j < cols; j += ROW_THREADS)
                s += bk_f(xr[j]);
            mu = bk_block_sum<ROW_THREADS>(s, sh) / (double)cols;
        }
        for (int64_t j = threadIdx.x; j < cols; j += ROW_THREADS)
            q += ((double)bk_f(xr[j]) - mu) * ((double)bk_f(xr[j]) - mu);
        v = bk_block_sum<ROW_THREADS>(q, sh) / (double)cols;
        rstd = 1.0 / sqrt(v + (double)eps);
        if (threadIdx.x == 0) {
            mean[r] = (float)mu;
            var[r] = (float)v;
        }
        for (int64_t j = threadIdx.x; j < cols; j += ROW_THREADS)
            yr[j] = bk_to<T>((scale[j] + goff) * (float)(((double)bk_f(xr[j]) - mu) * rstd) +
                             (shift ? shift[j] : 0.0f));
    }
}

extern "C" cudaError_t bk_lnorm_fwd(cudaStream_t s, int dt, const void *x, void *y, const float *scale,
                                    const float *shift, float *mean, float *var, int64_t rows, int64_t cols, float eps,
                                    int rms, float goff)
{
    BK_DTYPE(dt, T,
             k_lnorm_fwd<T><<<bk_grid(rows, 1), ROW_THREADS, 0, s>>>((const T *)x, (T *)y, scale, shift, mean, var,
                                                                      rows, cols, eps, rms, goff));
    return cudaGetLastError();
}

/* the parameter gradients: dy (x - mean) rstd and dy, summed over rows */
template <class T> struct lnorm_val {
    const T *x, *dy;
    const float *mean, *var;
    int64_t N;
    float eps;
    __device__ void operator()(int64_t r, int64_t c, double *v) const
    {
        double rstd = 1.0 / sqrt((double)var[r] + (double)eps), g = bk_f(dy[r * N + c]);
        v[0] = g * ((double)bk_f(x[r * N + c]) - mean[r]) * rstd;
        v[1] = g;
    }
};

/* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy (scale + goff), per
 * row (RMS: without mean(g), the mean being 0). Each thread reads then
 * writes its own elements only, so dx may be dy. */
template <class T>
__global__ void k_lnorm_dx(const T *x, const float *mean, const float *var, const T *dy, const float *scale, T *dx,
                           int64_t rows, int64_t cols, float eps, int rms, float goff)
{
    __shared__ double sh[ROW_THREADS / 32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *xr = x + r * cols, *dyr = dy + r * cols;
        double mu = mean[r], rstd = 1.0 / sqrt((double)var[r] + (double)eps), s1 = 0, s2 = 0, m1, m2;
        for (int64_t j = threadIdx.x; j < cols; j += ROW_THREADS) {
            double g = (double)bk_f(dyr[j]) * (scale[j] + goff);
            s1 += g;
            s2 += g * ((double)bk_f(xr[j]) - mu) * rstd;
        }
        m1 = rms ? 0.0 : bk_block_sum<ROW_THREADS>(s1, sh) / (double)cols;
        m2 = bk_block_sum<ROW_THREADS>(s2, sh) / (double)cols;
        for (int64_t j = threadIdx.x; j < cols; j += ROW_THREADS) {
            double g = (double)bk_f(dyr[j]) * (scale[j] + goff), xh = ((double)bk_f(xr[j]) - mu) * rstd;
            dx[r * cols + j] = bk_to<T>((float)(rstd * (g - m1 - xh * m2)));
        }
    }
}

extern "C" size_t bk_lnorm_bwd_ws(int64_t rows, int64_t cols)
{
    return 2 * (size_t)(nchunks(rows) * cols) * sizeof(double);
}

extern "C" cudaError_t bk_lnorm_bwd(cudaStream_t s, int dt, const void *x, const float *mean, const float *var,
                                    const void *dy, const float *scale, void *dx, float *dscale, float *dshift,
                                    int64_t rows, int64_t cols, float eps, int rms, float goff, int acc, void *ws)
{
    cudaError_t e;
    /* parameter gradients first: dx may overwrite dy */
    BK_DTYPE(dt, T, lnorm_val<T> f = {(const T *)x, (const T *)dy, mean, var, cols, eps};
             e = colsums<2>(s, f, rows, cols, (double *)ws));
    if (e != cudaSuccess)
        return e;
    k_colfin<<<bk_grid(cols, BK_THREADS), BK_THREADS, 0, s>>>((const double *)ws, nchunks(rows), cols, dscale,
                                                              dshift, acc);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
    BK_DTYPE(dt, T,
             k_lnorm_dx<T><<<bk_grid(rows, 1), ROW_THREADS, 0, s>>>((const T *)x, mean, var, (const T *)dy, scale,
                                                                     (T *)dx, rows, cols, eps, rms, goff));
    return cudaGetLastError();
}

/* ---- softmax cross-entropy --------------------------------------------------- */

#define XENT_THREADS 128

/* Per row: the first arg-max (a tree over (value, index), the smaller index
 * on ties), the probabilities from exp in double, and with labels the row's
 * loss log(sum) + max - x[label] and hit into ws (a negative label, padding:
 * 0 and no hit, as cpu_simple.c; one at N or above: NaN). */
template <class T>
__global__ void k_xent_rows(const T *x, float *p, const int32_t *labels, double *row_loss, uint8_t *row_hit, int64_t M,
                            int64_t N)
{
    __shared__ float sv[XENT_THREADS];
    __shared__ int64_t si[XENT_THREADS];
    __shared__ double sh[XENT_THREADS / 32];
    const int t = threadIdx.x;

    for (int64_t r = blockIdx.x; r < M; r += gridDim.x) {
        const T *xr = x + r * N;
        float mx = 0.0f;
        int64_t bi = -1;
        double sum, part = 0;
        for (int64_t j = t; j < N; j += XENT_THREADS)
            if (bi < 0 || bk_f(xr[j]) > mx) {
                mx = bk_f(xr[j]);
                bi = j;
            }
        sv[t] = mx;
        si[t] = bi;
        __syncthreads();
        for (int st = XENT_THREADS / 2; st > 0; st >>= 1) {
            if (t < st && si[t + st] >= 0 &&
                (si[t] < 0 || sv[t + st] > sv[t] || (sv[t + st] == sv[t] && si[t + st] < si[t]))) {
                sv[t] = sv[t + st];
                si[t] = si[t + st];
            }
            __syncthreads();
        }
        mx = sv[0];
        bi = si[0];
        for (int64_t j = t; j < N; j += XENT_THREADS)
            part += exp((double)bk_f(xr[j]) - (double)mx);
        sum = bk_block_sum<XENT_THREADS>(part, sh);
        for (int64_t j = t; j < N; j += XENT_THREADS)
            p[r * N + j] = (float)(exp((double)bk_f(xr[j]) - (double)mx) / sum);
        if (labels && t == 0) {
            int32_t lab = labels[r];
            int ok = lab >= 0 && lab < N;
            row_loss[r] = lab < 0 ? 0.0 : ok ? log(sum) + (double)mx - (double)bk_f(xr[lab]) : (double)NAN;
            row_hit[r] = ok && bi == lab;
        }
        __syncthreads(); /* sv/si are rewritten for the next row */
    }
}

#define TOTAL_THREADS 256

__global__ void k_xent_total(const double *row_loss, const uint8_t *row_hit, int64_t M, double *stats)
{
    __shared__ double sh[TOTAL_THREADS / 32];
    double l = 0, h = 0;
    for (int64_t i = threadIdx.x; i < M; i += TOTAL_THREADS) {
        l += row_loss[i];
        h += row_hit[i];
    }
    l = bk_block_sum<TOTAL_THREADS>(l, sh);
    h = bk_block_sum<TOTAL_THREADS>(h, sh);
    if (threadIdx.x == 0) {
        stats[0] += l;
        stats[1] += h;
    }
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

extern "C" size_t bk_xent_fwd_ws(int64_t M) { return align64((size_t)M * sizeof(double)) + align64((size_t)M); }

extern "C" cudaError_t bk_xent_fwd(cudaStream_t s, int dt, const void *x, float *p, const int32_t *labels,
                                   double *stats, int64_t M, int64_t N, void *ws)
{
    double *row_loss = (double *)ws;
    uint8_t *row_hit = labels ? (uint8_t *)ws + align64((size_t)M * sizeof(double)) : NULL;
    cudaError_t e;

    BK_DTYPE(dt, T,
             k_xent_rows<T><<<bk_grid(M, 1), XENT_THREADS, 0, s>>>((const T *)x, p, labels, row_loss, row_hit, M, N));
    if ((e = cudaGetLastError()) != cudaSuccess || !labels)
        return e;
    k_xent_total<<<1, TOTAL_THREADS, 0, s>>>(row_loss, row_hit, M, stats);
    return cudaGetLastError();
}

/* ---- NORMS ---------------------------------------------------------------------- */

/* Blocks of NORM_THREADS, each over a fixed chunk of the tensor in float4
 * loads, UNROLL in flight; the number of blocks is set by n alone (at most
 * BK_NORM_BLOCKS), so the sums' order is too. The blocks' partial sums go
 * to the device's own small buffer (the op has no workspace: the
 * gradient-norm code gives none) and one thread adds them in block order. */
#define NORM_THREADS 512
#define NORM_BLOCKS BK_NORM_BLOCKS
#define UNROLL 4

static int64_t norm_blocks(int64_t n)
{
    int64_t per = (int64_t)NORM_THREADS * UNROLL * 4 * 4, b = (n + per - 1) / per;
    return b < 1 ? 1 : b > NORM_BLOCKS ? NORM_BLOCKS : b;
}

__global__ void __launch_bounds__(NORM_THREADS)
    k_norms(const float *g, float *prev, int64_t n, int64_t nb, double *part)
{
    __shared__ double sh[NORM_THREADS / 32];
    const int t = threadIdx.x;
    const int vec = ((uintptr_t)g % 16 == 0) && (!prev || (uintptr_t)prev % 16 == 0);
    const int64_t n4 = vec ? n / 4 : 0, len = (n4 + nb - 1) / nb;
    const int64_t lo = blockIdx.x * len, hi = lo + len < n4 ? lo + len : n4;
    const float4 *g4 = (const float4 *)g;
    float4 *p4 = (float4 *)prev;
    double s = 0, d = 0;

    for (int64_t base = lo; base < hi; base += (int64_t)NORM_THREADS * UNROLL) {
        float4 a[UNROLL], b[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            int64_t i = base + (int64_t)u * NORM_THREADS + t;
            a[u] = i < hi ? g4[i] : make_float4(0, 0, 0, 0);
            b[u] = prev && i < hi ? p4[i] : make_float4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const float ga[4] = {a[u].x, a[u].y, a[u].z, a[u].w}, pb[4] = {b[u].x, b[u].y, b[u].z, b[u].w};
            for (int k = 0; k < 4; k++) {
                double x = ga[k], y = x - pb[k];
                s += x * x;
                d += y * y;
            }
            if (prev && base + (int64_t)u * NORM_THREADS + t < hi)
                p4[base + (int64_t)u * NORM_THREADS + t] = a[u];
        }
    }
    /* the tail past the float4s (all of it when unaligned): the last block's */
    for (int64_t i = n4 * 4 + t; blockIdx.x == nb - 1 && i < n; i += NORM_THREADS) {
        double x = g[i];
        s += x * x;
        if (prev) {
            double y = x - prev[i];
            d += y * y;
            prev[i] = g[i];
        }
    }
    s = bk_block_sum<NORM_THREADS>(s, sh);
    d = bk_block_sum<NORM_THREADS>(d, sh);
    if (t == 0) {
        part[blockIdx.x] = s;
        part[NORM_BLOCKS + blockIdx.x] = d;
    }
}

__global__ void k_norms_total(const double *part, double *stats, int64_t nb, int with_prev)
{
    if (threadIdx.x == 0) {
        double s = 0, d = 0;
        for (int64_t b = 0; b < nb; b++) {
            s += part[b];
            d += part[NORM_BLOCKS + b];
        }
        stats[0] = s;
        if (with_prev)
            stats[1] = d;
    }
}

extern "C" cudaError_t bk_norms(cudaStream_t s, const float *g, float *prev, double *stats, int64_t n, double *part)
{
    int64_t nb = norm_blocks(n);
    cudaError_t e;
    k_norms<<<(unsigned)nb, NORM_THREADS, 0, s>>>(g, prev, n, nb, part);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
    k_norms_total<<<1, 32, 0, s>>>(part, stats, nb, prev != NULL);
    return cudaGetLastError();
}

/* ---- batch-norm statistics and parameter gradients ------------------------------- */

#define CH_THREADS 256

/* element t of channel k in [n, c, hw] */
__device__ __forceinline__ int64_t ch_at(int64_t t, int64_t k, int64_t c, int64_t hw)
{
    int64_t i = t / hw;
    return (i * c + k) * hw + (t - i * hw);
}

/* db[k] (+)= the sum of dy over channel k, one block per channel: a
 * convolution's bias gradient, which has no workspace for partial sums */
template <class T>
__global__ void k_chan_sum(const T *dy, float *db, int64_t n, int64_t c, int64_t hw, int acc)
{
    __shared__ double sh[CH_THREADS / 32];
    const int64_t cnt = n * hw;
    for (int64_t k = blockIdx.x; k < c; k += gridDim.x) {
        double sb = 0;
        for (int64_t t = threadIdx.x; t < cnt; t += CH_THREADS)
            sb += bk_f(dy[ch_at(t, k, c, hw)]);
        sb = bk_block_sum<CH_THREADS>(sb, sh);
        if (threadIdx.x == 0)
            db[k] = (float)((acc ? (double)db[k] : 0.0) + sb);
    }
}

/* Batch norm's sums over many blocks: block (k, s) sums channel k over the
 * samples [s n / S, (s + 1) n / S) of S = bk_bn_segs(c) segments, into
 * part[2 (k S + s)], the two sums; then one thread per channel adds its
 * segments in order (the same result on every run). Within a segment
 * indexes are 32-bit (bk_bn_fits). STATS: sum (x - r) and sum (x - r)^2,
 * r the channel's first element (shifted sums: one pass over x, and in
 * double no cancellation that reaches a float's bits); else sum dy and
 * sum dy (x - off[k]) (x and off NULL: dy's sum alone). */
template <class T, bool STATS>
__global__ void k_bn_part(const T *x, const T *dy, const float *off, int64_t n, int64_t c, uint32_t hw, int64_t S,
                          double *part)
{
    __shared__ double sh[CH_THREADS / 32];
    const int64_t k = blockIdx.x, s = blockIdx.y, i0 = s * n / S, i1 = (s + 1) * n / S;
    const uint32_t cnt = (uint32_t)((i1 - i0) * (int64_t)hw);
    const double r = STATS ? (double)bk_f(x[k * (int64_t)hw]) : x && off ? (double)off[k] : 0.0;
    double a = 0, b = 0;
    for (uint32_t t = threadIdx.x; t < cnt; t += CH_THREADS) {
        uint32_t i = t / hw;
        int64_t at = ((i0 + i) * c + k) * (int64_t)hw + (t - i * hw);
        if (STATS) {
            double e = (double)bk_f(x[at]) - r;
            a += e;
            b += e * e;
        } else {
            double g = bk_f(dy[at]);
            a += g;
            if (x)
                b += g * ((double)bk_f(x[at]) - r);
        }
    }
    a = bk_block_sum<CH_THREADS>(a, sh);
    b = bk_block_sum<CH_THREADS>(b, sh);
    if (threadIdx.x == 0) {
        part[2 * (k * S + s)] = a;
        part[2 * (k * S + s) + 1] = b;
    }
}

template <class T>
__global__ void k_bn_stats_fin(const T *x, const double *part, int64_t S, float *mean, float *var, float *rmean,
                               float *rvar, int64_t n, int64_t c, int64_t hw, float momentum)
{
    BK_FOR(k, c)
    {
        const double cnt = (double)(n * hw);
        double a = 0, b = 0;
        for (int64_t s = 0; s < S; s++)
            a += part[2 * (k * S + s)], b += part[2 * (k * S + s) + 1];
        double d = a / cnt, mu = (double)bk_f(x[k * hw]) + d, v = b / cnt - d * d;
        float mf = (float)mu, vf = (float)(v > 0 ? v : 0.0);
        mean[k] = mf;
        var[k] = vf;
        if (rmean) {
            /* cpu_bnorm.c's update_running, from the stored float
             * statistics: PyTorch moves running_var by the unbiased
             * variance, var cnt / (cnt - 1) (the layer refuses cnt 1) */
            double mom = momentum, unbias = cnt / (cnt - 1);
            rmean[k] = (float)((1 - mom) * rmean[k] + mom * mf);
            rvar[k] = (float)((1 - mom) * rvar[k] + mom * vf * unbias);
        }
    }
}

/* x^ = (x - off) mul: from the input, off = mean and mul = rstd; from the
 * output (shift given), off = shift and mul = 1 / scale (0 where scale is
 * 0, whose channel has no x^ left: cpu_bnorm.c's bwd_from_dst) */
__global__ void k_bn_grads_fin(const double *part, int64_t S, int has_x, const float *var, const float *scale,
                               const float *shift, float *dscale, float *dshift, double *sums, int64_t c, float eps,
                               int acc)
{
    BK_FOR(k, c)
    {
        double sb = 0, ss = 0, mul = 0;
        for (int64_t s = 0; s < S; s++)
            sb += part[2 * (k * S + s)], ss += part[2 * (k * S + s) + 1];
        if (has_x && shift)
            mul = scale[k] != 0.0f ? 1.0 / scale[k] : 0.0;
        else if (has_x)
            mul = 1.0 / sqrt((double)var[k] + (double)eps);
        if (dscale)
            dscale[k] = (float)((acc ? (double)dscale[k] : 0.0) + ss * mul);
        if (dshift)
            dshift[k] = (float)((acc ? (double)dshift[k] : 0.0) + sb);
        if (sums) {
            sums[k] = sb;
            sums[c + k] = ss * mul;
        }
    }
}

extern "C" cudaError_t bk_bn_stats(cudaStream_t s, int dt, const void *x, float *mean, float *var, float *rmean,
                                   float *rvar, int64_t n, int64_t c, int64_t hw, float momentum, double *part)
{
    const int64_t S = bk_bn_segs(c);
    if (!bk_bn_fits(n, c, hw))
        return cudaErrorInvalidValue;
    BK_DTYPE(dt, T, {
        k_bn_part<T, true><<<dim3((unsigned)c, (unsigned)S), CH_THREADS, 0, s>>>((const T *)x, NULL, NULL, n, c,
                                                                                (uint32_t)hw, S, part);
        k_bn_stats_fin<T><<<bk_grid(c, 128), 128, 0, s>>>((const T *)x, part, S, mean, var, rmean, rvar, n, c, hw,
                                                          momentum);
    });
    return cudaGetLastError();
}

extern "C" cudaError_t bk_bn_param_grads(cudaStream_t s, int dt, const void *x, const void *dy, const float *mean,
                                         const float *var, const float *scale, const float *shift, float *dscale,
                                         float *dshift, double *sums, int64_t n, int64_t c, int64_t hw, float eps,
                                         int acc, double *part)
{
    const int64_t S = bk_bn_segs(c);
    if (!part || !bk_bn_fits(n, c, hw))
        return cudaErrorInvalidValue;
    BK_DTYPE(dt, T,
             k_bn_part<T, false><<<dim3((unsigned)c, (unsigned)S), CH_THREADS, 0, s>>>(
                 (const T *)x, (const T *)dy, shift ? shift : mean, n, c, (uint32_t)hw, S, part));
    k_bn_grads_fin<<<bk_grid(c, 128), 128, 0, s>>>(part, S, x != NULL, var, scale, shift, dscale, dshift, sums, c,
                                                   eps, acc);
    return cudaGetLastError();
}

extern "C" cudaError_t bk_chan_sum(cudaStream_t s, int dt, const void *dy, float *db, int64_t n, int64_t c, int64_t hw,
                                   int acc)
{
    BK_DTYPE(dt, T, k_chan_sum<T><<<bk_grid(c, 1), CH_THREADS, 0, s>>>((const T *)dy, db, n, c, hw, acc));
    return cudaGetLastError();
}
