/* bench_step.c - the batchfit side of bench/run.sh: times full training steps
 * (forward, loss, backward, SGD momentum step, zeroing the gradients) of a
 * model spec on synthetic data through the calls the trainer makes, or times
 * oneDNN's f32 matmul on this machine (the practical limit the training runs
 * are compared with).
 *
 *   bfit_bench step MODEL.cfg BATCH [REPS [WARMUP [THREADS [REP_SECONDS]]]]
 *   bfit_bench matmul M N K [REPS [THREADS]]
 *
 * Prints one line of key=value pairs for the script to read. WARMUP steps
 * (default 3) are not timed; the last of them sets how many steps a timed
 * rep runs (about REP_SECONDS, default 0.5, at least 2 steps); samples/s is
 * the median over REPS (default 5). Peak resident memory is ru_maxrss of
 * this process. torch_peer.py does the same on the PyTorch side.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "batchfit.h"
#include "device/device.h"
#include "nn/model.h"
#include "nn/spec.h"
#include "optim/optim.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU seconds of the whole process: with one thread, a rate that the load
 * of other processes hardly disturbs (for comparing changes on a busy box) */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* BFIT_BENCH_PRECISION=bf16 (or f16): the step in that precision, with f32
 * masters refreshed after each update as the trainer does. */
static int set_precision(bfit_model *M)
{
    const char *p = getenv("BFIT_BENCH_PRECISION");
    bfit_storage st = bfit_storage_default();
    if (p && *p && bfit_precision_parse(p, &st.precision) != BFIT_OK)
        return BFIT_EINVAL;
    return bfit_model_set_storage(M, &st, NULL, 0, 0);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static long maxrss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* xorshift: synthetic inputs need only be reproducible, not good */
static uint32_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)(*s >> 32);
}

/* FLOPs of a training step per sample that the linear and conv layers do:
 * 2 MACs each for forward, weight gradient, and input gradient, the last
 * only where the layer's input needs a gradient (not for the first such
 * layer: neither batchfit nor PyTorch computes a gradient of the data). */
static double step_flops_per_sample(const bfit_model *M)
{
    double f = 0;
    int first = 1;
    if (M->input_dtype == BFIT_I32) { /* a token model: every layer's count, attention included */
        for (int i = 0; i < M->n; i++) {
            double fw, bw;
            bfit_layer_flops(M->nodes[i].l, 1, &fw, &bw);
            f += fw + bw;
        }
        return f;
    }
    for (int i = 0; i < M->n; i++) {
        const bfit_layer *l = M->nodes[i].l;
        double macs;
        if (l->cfg.kind == BFIT_L_LINEAR)
            macs = (double)l->in[0].c * l->cfg.units;
        else if (l->cfg.kind == BFIT_L_CONV)
            macs = (double)l->cfg.units * l->in[0].c * l->cfg.kh * l->cfg.kw * l->out.h * l->out.w;
        else
            continue;
        f += (first ? 4.0 : 6.0) * macs;
        first = 0;
    }
    return f;
}

static int threads_of(const bfit_device *d)
{
    bfit_device_info i;
    bfit_device_info_get(d, &i);
    return i.threads;
}

static int open_device(int threads, bfit_device **dev, bfit_arena **arena)
{
    bfit_device_cfg c = bfit_device_cfg_default();
    int rc;
    c.threads = threads;
    if ((rc = bfit_device_cpu_new(&c, dev)) != BFIT_OK)
        return rc;
    *arena = bfit_device_arena_new(*dev, bfit_host_available_memory());
    return *arena ? BFIT_OK : BFIT_ENOMEM;
}

/* Random samples and labels (token ids and a label per token for a token
 * model), uploaded into the reserved input. */
static int random_input(bfit_model *M, int batch, uint64_t *seed)
{
    int64_t n = (int64_t)batch * bfit_shape_numel(M->input), nl = (int64_t)batch * M->labels_per_sample;
    float *x = malloc(sizeof *x * (size_t)n); /* f32 or int32: 4 bytes either way */
    int32_t *y = malloc(sizeof *y * (size_t)nl);
    int rc = BFIT_ENOMEM;
    if (x && y) {
        for (int64_t i = 0; i < n; i++) {
            if (M->input_dtype == BFIT_I32)
                ((int32_t *)x)[i] = (int32_t)(rng(seed) % (uint32_t)M->nclasses);
            else
                x[i] = (float)rng(seed) / 4294967296.0f;
        }
        for (int64_t i = 0; i < nl; i++)
            y[i] = (int32_t)(rng(seed) % (uint32_t)M->nclasses);
        rc = bfit_model_set_input(M, x, y, batch);
    }
    free(x);
    free(y);
    return rc;
}

static int bench_step(const char *spec, int batch, int reps, int warmup, int threads, double rep_s)
{
    bfit_arena *arena = NULL;
    bfit_device *dev = NULL;
    bfit_graph_desc g;
    bfit_model *M = NULL;
    bfit_optim *opt = NULL;
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
    double *rate = calloc((size_t)reps, sizeof *rate), loss = 0;
    double *cpu_rate = calloc((size_t)reps, sizeof *cpu_rate);
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    double t_step = 0;
    int rc, steps = 2;

    memset(&g, 0, sizeof g);
    if (!rate || !cpu_rate) {
        rc = BFIT_ENOMEM;
        goto out;
    }
    if ((rc = open_device(threads, &dev, &arena)) != BFIT_OK || (rc = bfit_spec_parse_file(spec, &g)) != BFIT_OK ||
        (rc = bfit_model_new(&g, dev, arena, &M)) != BFIT_OK || (rc = set_precision(M)) != BFIT_OK ||
        (rc = bfit_model_alloc_params(M, 1)) != BFIT_OK ||
        (rc = bfit_model_init_params(M, 1)) != BFIT_OK)
        goto out;
    oc.momentum = 0.9;
    if ((rc = bfit_optim_new(&oc, M->trainable, M->ntrainable, dev, arena, &opt)) != BFIT_OK ||
        (rc = bfit_model_reserve(M, batch, 1)) != BFIT_OK || (rc = random_input(M, batch, &seed)) != BFIT_OK)
        goto out;
    for (int r = -1; r < reps; r++) {
        int n = r < 0 ? warmup : steps;
        double t0 = now(), c0 = cpu_now();
        for (int s = 0; s < n; s++) {
            /* the trainer's step: reserve (a no-op at the same m), forward,
             * backward with the 1/E loss scale, optimizer, zero grads */
            t_step = now();
            if ((rc = bfit_model_reserve(M, batch, 1)) != BFIT_OK ||
                (rc = bfit_model_stats_reset(M)) != BFIT_OK ||
                (rc = bfit_model_forward(M, (uint64_t)s)) != BFIT_OK ||
                (rc = bfit_model_backward(M, 1.0f / (float)batch)) != BFIT_OK ||
                (rc = bfit_optim_step(opt, 0.01)) != BFIT_OK || (rc = bfit_model_refresh_copies(M)) != BFIT_OK ||
                (rc = bfit_model_zero_grads(M)) != BFIT_OK ||
                (rc = bfit_model_stats_read(M, &loss, NULL)) != BFIT_OK)
                goto out;
            t_step = now() - t_step;
        }
        if (r >= 0) {
            rate[r] = (double)n * batch / (now() - t0);
            cpu_rate[r] = (double)n * batch / (cpu_now() - c0);
        } else if (t_step > 0 && rep_s / t_step > steps)
            steps = (int)(rep_s / t_step + 0.5);
    }
    if (M->input_dtype == BFIT_I32)
        printf("side=batchfit batch=%d samples_per_s=%.1f tokens_per_s=%.1f flops_per_sample=%.0f maxrss_kib=%ld "
               "reps=%d steps=%d warmup=%d threads=%d loss=%.4f samples_per_cpu_s=%.1f precision=%s\n",
               batch, median(rate, reps), median(rate, reps) * M->input.d[0], step_flops_per_sample(M), maxrss_kib(),
               reps, steps, warmup, threads_of(dev), loss / ((double)batch * M->input.d[0]), median(cpu_rate, reps),
               bfit_dtype_name(bfit_model_storage(M).precision));
    else
        printf("side=batchfit batch=%d samples_per_s=%.1f flops_per_sample=%.0f maxrss_kib=%ld reps=%d steps=%d "
               "warmup=%d threads=%d loss=%.4f samples_per_cpu_s=%.1f precision=%s\n",
               batch, median(rate, reps), step_flops_per_sample(M), maxrss_kib(), reps, steps, warmup,
               threads_of(dev), loss / batch, median(cpu_rate, reps), bfit_dtype_name(bfit_model_storage(M).precision));
out:
    if (rc != BFIT_OK)
        fprintf(stderr, "bfit_bench: %s\n", bfit_errmsg());
    bfit_optim_free(opt);
    bfit_model_free(M);
    bfit_graph_fini(&g);
    bfit_arena_free(arena);
    bfit_device_free(dev);
    free(rate);
    free(cpu_rate);
    return rc == BFIT_OK ? 0 : 1;
}

/* dst[M,N] = src[M,K] x weights[K,N], all row-major: oneDNN's best case */
static int bench_matmul(int64_t m, int64_t n, int64_t k, int reps, int threads)
{
    bfit_arena *arena = NULL;
    bfit_device *dev = NULL;
    bfit_op *op = NULL;
    float *host = NULL;
    bfit_op_desc d = {.kind = BFIT_OP_MATMUL, .dtype = BFIT_F32};
    bfit_op_args a = {0};
    void *buf[4] = {0};
    double *gf = calloc((size_t)reps, sizeof *gf);
    int rc, per = 10;

    d.u.mm.M = m;
    d.u.mm.N = n;
    d.u.mm.K = k;
    host = malloc(sizeof(float) * (size_t)(m * k > k * n ? m * k : k * n));
    if (!gf || !host) {
        rc = BFIT_ENOMEM;
        goto out;
    }
    if ((rc = open_device(threads, &dev, &arena)) != BFIT_OK || (rc = bfit_op_new(dev, &d, &op)) != BFIT_OK ||
        (rc = bfit_arena_alloc(arena, (size_t)(m * k) * 4, BFIT_MEM_INPUT, &buf[0])) != BFIT_OK ||
        (rc = bfit_arena_alloc(arena, (size_t)(k * n) * 4, BFIT_MEM_PARAMS, &buf[1])) != BFIT_OK ||
        (rc = bfit_arena_alloc(arena, (size_t)(m * n) * 4, BFIT_MEM_ACTIVATIONS, &buf[2])) != BFIT_OK ||
        (rc = bfit_arena_alloc(arena, bfit_op_workspace_bytes(op) + 1, BFIT_MEM_WORKSPACE, &buf[3])) != BFIT_OK)
        goto out;
    for (int64_t i = 0; i < m * k; i++)
        host[i] = (float)(i % 7) * 0.1f;
    if ((rc = bfit_device_upload(dev, buf[0], host, (size_t)(m * k) * 4)) != BFIT_OK)
        goto out;
    for (int64_t i = 0; i < k * n; i++)
        host[i] = (float)(i % 5) * 0.1f;
    if ((rc = bfit_device_upload(dev, buf[1], host, (size_t)(k * n) * 4)) != BFIT_OK)
        goto out;
    a.src = buf[0];
    a.weights = buf[1];
    a.dst = buf[2];
    a.workspace = buf[3];
    for (int r = -1; r < reps; r++) {
        double t0 = now();
        for (int i = 0; i < per; i++)
            if ((rc = bfit_op_run(op, &a)) != BFIT_OK)
                goto out;
        if (r >= 0)
            gf[r] = 2.0 * m * n * k * per / (now() - t0) / 1e9;
    }
    printf("side=onednn_matmul m=%lld n=%lld k=%lld gflops=%.1f reps=%d threads=%d\n", (long long)m, (long long)n,
           (long long)k, median(gf, reps), reps, threads_of(dev));
out:
    if (rc != BFIT_OK)
        fprintf(stderr, "bfit_bench: %s\n", bfit_errmsg());
    for (int i = 0; i < 4; i++)
        bfit_arena_release(arena, buf[i]);
    bfit_op_free(op);
    bfit_arena_free(arena);
    bfit_device_free(dev);
    free(gf);
    free(host);
    return rc == BFIT_OK ? 0 : 1;
}

static int arg(int argc, char **argv, int i, int def)
{
    return argc > i ? atoi(argv[i]) : def;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "step") == 0) {
        int batch = atoi(argv[3]);
        int reps = arg(argc, argv, 4, 5), warmup = arg(argc, argv, 5, 3);
        if (batch < 1 || reps < 1 || warmup < 1) {
            fprintf(stderr, "bfit_bench: batch, reps and warm-up steps must be at least 1\n");
            return 2;
        }
        return bench_step(argv[2], batch, reps, warmup, arg(argc, argv, 6, 2),
                          argc > 7 ? atof(argv[7]) : 0.5);
    }
    if (argc >= 5 && strcmp(argv[1], "matmul") == 0)
        return bench_matmul(atoll(argv[2]), atoll(argv[3]), atoll(argv[4]), arg(argc, argv, 5, 5),
                            arg(argc, argv, 6, 2));
    fprintf(stderr, "usage: bfit_bench step MODEL.cfg BATCH [REPS [WARMUP [THREADS [REP_SECONDS]]]]\n"
                    "       bfit_bench matmul M N K [REPS [THREADS]]\n");
    return 2;
}
