/* profile.c - a training step timed alone (bfit_profile): the trainer's
 * micro-step (reserve, forward, backward with the 1/E loss scale, the
 * optimizer, zeroing the gradients) on random samples already on the
 * device, repeated for a median samples/s; and the device's matmul on its
 * best case, the practical limit a step is compared with. The benchmarks
 * against PyTorch (bench/) read these. */
#include "train/profile.h"
#include "base/clock.h"
#include "base/err.h"
#include "batch/plan.h"
#include "batch/session.h"
#include "device/device.h"
#include "nn/model.h"
#include "nn/zoo.h"
#include "optim/optim.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* The step in the asked precision, with f32 masters refreshed after each
 * update as the trainer does. */
static int set_precision(bfit_model *M, bfit_dtype precision)
{
    bfit_storage st = bfit_storage_default();
    st.precision = precision;
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
        if (l->cfg.kind == BFIT_L_LINEAR) /* per output element, a dot product over the input features: on
                                             tokens [T, C] (a ViT's, ConvNeXt's) each token's */
            macs = (double)bfit_shape_numel(l->out) * (double)l->params[0].dim[1];
        else if (l->cfg.kind == BFIT_L_CONV) /* a group's outputs see its share of the inputs */
            macs = (double)l->cfg.units * l->in[0].c / (l->cfg.groups > 1 ? l->cfg.groups : 1) * l->cfg.kh *
                   l->cfg.kw * l->out.h * l->out.w;
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

static int open_device(const char *name, int threads, bfit_device **dev, bfit_arena **arena)
{
    bfit_device_cfg c = bfit_device_cfg_default();
    int rc;
    c.threads = threads;
    if ((rc = bfit_device_open(name ? name : "cpu", &c, dev)) != BFIT_OK)
        return rc;
    *arena = bfit_device_arena_new(*dev, bfit_host_available_memory());
    return *arena ? BFIT_OK : BFIT_ENOMEM;
}

/* The trainer's step, n times: reserve (a no-op at the same m), forward,
 * backward with the loss per label, optimizer, zero grads. *t_step: the
 * last step's seconds. */
static int steps(bfit_model *M, bfit_optim *opt, int batch, int64_t units, int n, double *loss, double *t_step)
{
    int rc = BFIT_OK;
    for (int s = 0; s < n && rc == BFIT_OK; s++) {
        *t_step = now();
        if ((rc = bfit_model_reserve(M, batch, 1)) != BFIT_OK || (rc = bfit_model_stats_reset(M)) != BFIT_OK ||
            (rc = bfit_model_forward(M, (uint64_t)s)) != BFIT_OK ||
            (rc = bfit_model_backward(M, 1.0f / (float)units)) != BFIT_OK ||
            (rc = bfit_optim_step(opt, 0.01)) != BFIT_OK || (rc = bfit_model_refresh_copies(M)) != BFIT_OK ||
            (rc = bfit_model_zero_grads(M)) != BFIT_OK || (rc = bfit_model_stats_read(M, loss, NULL)) != BFIT_OK)
            break;
        *t_step = now() - *t_step;
    }
    return rc;
}

/* The warm-up, which sets how many steps a rep runs (about rep_seconds),
 * then reps timed reps: samples/s and per CPU second, and with BFIT_OPTIME
 * the ops' seconds and the steps' (*ops, *wall). */
static int timed_reps(const bfit_profile_cfg *pc, bfit_device *dev, bfit_model *M, bfit_optim *opt, int64_t units,
                      double *rate, double *cpu_rate, int *nsteps, double *loss, double *ops, double *wall)
{
    double t_step = 0;
    int rc = BFIT_OK;

    *nsteps = 2;
    for (int r = -1; r < pc->reps && rc == BFIT_OK; r++) {
        int n = r < 0 ? pc->warmup : *nsteps;
        double t0 = now(), c0 = cpu_now(), o0 = bfit_device_op_seconds(dev);
        if ((rc = steps(M, opt, pc->batch, units, n, loss, &t_step)) != BFIT_OK)
            break;
        if (r >= 0) {
            rate[r] = (double)n * pc->batch / (now() - t0);
            cpu_rate[r] = (double)n * pc->batch / (cpu_now() - c0);
            if (o0 >= 0) { /* BFIT_OPTIME: the ops' own share of the steps' time */
                *ops += bfit_device_op_seconds(dev) - o0;
                *wall += (double)n * pc->batch / rate[r];
            }
        } else if (t_step > 0 && pc->rep_seconds / t_step > *nsteps)
            *nsteps = (int)(pc->rep_seconds / t_step + 0.5);
    }
    return rc;
}

int bfit_profile_step(const bfit_profile_cfg *pc, bfit_profile_result *res)
{
    int batch = pc->batch, reps = pc->reps;
    bfit_arena *arena = NULL;
    bfit_device *dev = NULL;
    bfit_graph_desc g;
    bfit_model *M = NULL;
    bfit_optim *opt = NULL;
    bfit_optim_cfg oc = bfit_optim_cfg_default(BFIT_OPT_SGD);
    double *rate = calloc((size_t)reps, sizeof *rate), loss = 0;
    double *cpu_rate = calloc((size_t)reps, sizeof *cpu_rate);
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    double ops = 0, wall = 0;
    int64_t units;
    int rc, nsteps = 2;

    memset(&g, 0, sizeof g);
    if (!rate || !cpu_rate) {
        rc = BFIT_ENOMEM;
        goto out;
    }
    if ((rc = open_device(pc->device_name, pc->threads, &dev, &arena)) != BFIT_OK ||
        (rc = bfit_model_source_load(pc->model, pc->seq, &g)) != BFIT_OK ||
        (pc->seq && (rc = bfit_graph_set_seq(&g, pc->seq, "seq")) != BFIT_OK) ||
        (rc = bfit_session_gather_head(&g, pc->mask, pc->model)) < 0 ||
        (rc = bfit_model_new(&g, dev, arena, &M)) != BFIT_OK || (rc = set_precision(M, pc->precision)) != BFIT_OK ||
        (rc = bfit_model_alloc_params(M, 1)) != BFIT_OK ||
        (rc = bfit_model_init_params(M, 1)) != BFIT_OK)
        goto out;
    oc.momentum = 0.9;
    if ((rc = bfit_optim_new(&oc, M->trainable, M->ntrainable, dev, arena, &opt)) != BFIT_OK ||
        (rc = bfit_model_reserve(M, batch, 1)) != BFIT_OK ||
        (rc = bfit_model_random_input(M, batch, pc->mask, &seed)) != BFIT_OK)
        goto out;
    /* the loss per label, as the peer's mean (a token model's per token:
     * per sequence, SGD at 0.01 diverged to NaN within 20 steps) */
    units = (int64_t)batch * (M->labels_per_sample > 0 ? M->labels_per_sample : 1);
    if (pc->mask > 0) /* the scored ones, about p of them */
        units = (int64_t)((double)units * pc->mask + 0.5) > 0 ? (int64_t)((double)units * pc->mask + 0.5) : 1;
    if ((rc = timed_reps(pc, dev, M, opt, units, rate, cpu_rate, &nsteps, &loss, &ops, &wall)) != BFIT_OK)
        goto out;
    memset(res, 0, sizeof *res);
    res->samples_per_s = median(rate, reps);
    res->samples_per_cpu_s = median(cpu_rate, reps);
    res->op_share = wall > 0 ? ops / wall : -1;
    res->tokens_per_sample = M->input_dtype == BFIT_I32 ? M->input.d[0] : 0;
    res->flops_per_sample = step_flops_per_sample(M);
    res->loss = loss / ((double)batch * (res->tokens_per_sample ? res->tokens_per_sample : 1));
    res->reps = reps;
    res->steps = nsteps;
    res->warmup = pc->warmup;
    res->threads = threads_of(dev);
    res->precision = bfit_model_storage(M).precision;
out:
    bfit_optim_free(opt);
    bfit_model_free(M);
    bfit_graph_fini(&g);
    bfit_arena_free(arena);
    bfit_device_free(dev);
    free(rate);
    free(cpu_rate);
    return rc;
}

/* dst[M,N] = src[M,K] x weights[K,N], all row-major: oneDNN's best case */
int bfit_profile_matmul(const char *device, int64_t m, int64_t n, int64_t k, int reps, int threads, double *gflops,
                        int *threads_used)
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
    if ((rc = open_device(device, threads, &dev, &arena)) != BFIT_OK || (rc = bfit_op_new(dev, &d, &op)) != BFIT_OK ||
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
    *gflops = median(gf, reps);
    *threads_used = threads_of(dev);
out:
    for (int i = 0; i < 4; i++)
        bfit_arena_release(arena, buf[i]);
    bfit_op_free(op);
    bfit_arena_free(arena);
    bfit_device_free(dev);
    free(gf);
    free(host);
    return rc;
}

