/* bench_step.c - the batchfit side of bench/run.sh, through the public API
 * (bfit_profile): times full training steps (forward, loss, backward, SGD
 * momentum step, zeroing the gradients) of a model on synthetic data, or
 * times the device's f32 matmul on this machine (the practical limit the
 * training runs are compared with).
 *
 *   bfit_bench step MODEL BATCH [REPS [WARMUP [THREADS [REP_SECONDS]]]]
 *   bfit_bench matmul M N K [REPS [THREADS]]
 *
 * Prints one line of key=value pairs for the script to read. WARMUP steps
 * (default 3) are not timed; the last of them sets how many steps a timed
 * rep runs (about REP_SECONDS, default 0.5, at least 2 steps); samples/s is
 * the median over REPS (default 5). BFIT_BENCH_PRECISION=bf16 (or f16) runs
 * the step in that precision; BFIT_BENCH_MASK=0.15 a masked LM's step (that
 * share of the tokens scored, its head gathered as its run's; the peer
 * scores the same share with its head at every token, as transformers').
 * Peak resident memory is ru_maxrss of this
 * process. With BFIT_OPTIME=1 each device op is waited for and timed, and
 * op_share is the ops' share of the timed steps (bench/overhead.py). torch_peer.py does the same on the PyTorch side.
 */
#include <batchfit.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static long maxrss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static int set(bfit_config *c, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int set(bfit_config *c, const char *name, const char *fmt, ...)
{
    char v[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    return bfit_config_set(c, name, v) == BFIT_OK ? 0 : -1;
}

static double num(const bfit_result *r, const char *k) { return bfit_result_number(r, k); }

static int bench_step(bfit_config *c, const char *model, int batch, int reps, int warmup, int threads, double rep_s)
{
    const char *prec = getenv("BFIT_BENCH_PRECISION"), *mask = getenv("BFIT_BENCH_MASK");
    bfit_result *r = NULL;

    if (set(c, "model", "%s", model) || set(c, "batch", "%d", batch) || set(c, "repeats", "%d", reps) ||
        set(c, "warmup", "%d", warmup) || set(c, "threads", "%d", threads) || set(c, "rep-seconds", "%g", rep_s) ||
        set(c, "device", "cpu") || (prec && *prec && set(c, "precision", "%s", prec)) ||
        (mask && *mask && set(c, "mask-tokens", "%s", mask)) || bfit_profile(c, &r) != BFIT_OK)
        return -1;
    printf("side=batchfit batch=%d samples_per_s=%.1f ", batch, num(r, "samples_per_s"));
    if (!isnan(num(r, "tokens_per_s")))
        printf("tokens_per_s=%.1f ", num(r, "tokens_per_s"));
    if (!isnan(num(r, "op_share"))) /* BFIT_OPTIME=1 */
        printf("op_share=%.4f ", num(r, "op_share"));
    printf("flops_per_sample=%.0f maxrss_kib=%ld reps=%.0f steps=%.0f warmup=%.0f threads=%.0f loss=%.4f "
           "samples_per_cpu_s=%.1f precision=%s\n",
           num(r, "flops_per_sample"), maxrss_kib(), num(r, "reps"), num(r, "steps"), num(r, "warmup"),
           num(r, "threads"), num(r, "loss"), num(r, "samples_per_cpu_s"), bfit_result_string(r, "precision"));
    bfit_result_free(r);
    return 0;
}

static int bench_matmul(bfit_config *c, long long m, long long n, long long k, int reps, int threads)
{
    bfit_result *r = NULL;
    if (set(c, "matmul", "%lldx%lldx%lld", m, n, k) || set(c, "repeats", "%d", reps) ||
        set(c, "threads", "%d", threads) || set(c, "device", "cpu") || bfit_profile(c, &r) != BFIT_OK)
        return -1;
    printf("side=onednn_matmul m=%lld n=%lld k=%lld gflops=%.1f reps=%d threads=%.0f\n", m, n, k, num(r, "gflops"),
           reps, num(r, "threads"));
    bfit_result_free(r);
    return 0;
}

static int arg(int argc, char **argv, int i, int def) { return argc > i ? atoi(argv[i]) : def; }

int main(int argc, char **argv)
{
    bfit_config *c = bfit_config_new();
    int rc = -2;

    if (!c)
        return 1;
    if (argc >= 4 && strcmp(argv[1], "step") == 0) {
        int batch = atoi(argv[3]), reps = arg(argc, argv, 4, 5), warmup = arg(argc, argv, 5, 3);
        if (batch < 1 || reps < 1 || warmup < 1) {
            fprintf(stderr, "bfit_bench: batch, reps and warm-up steps must be at least 1\n");
            bfit_config_free(c);
            return 2;
        }
        rc = bench_step(c, argv[2], batch, reps, warmup, arg(argc, argv, 6, 2), argc > 7 ? atof(argv[7]) : 0.5);
    } else if (argc >= 5 && strcmp(argv[1], "matmul") == 0) {
        rc = bench_matmul(c, atoll(argv[2]), atoll(argv[3]), atoll(argv[4]), arg(argc, argv, 5, 5),
                          arg(argc, argv, 6, 2));
    }
    bfit_config_free(c);
    if (rc == -2) {
        fprintf(stderr, "usage: bfit_bench step MODEL BATCH [REPS [WARMUP [THREADS [REP_SECONDS]]]]\n"
                        "       bfit_bench matmul M N K [REPS [THREADS]]\n");
        return 2;
    }
    if (rc) {
        fprintf(stderr, "bfit_bench: %s\n", bfit_errmsg());
        return 1;
    }
    return 0;
}
