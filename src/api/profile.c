/* profile.c - a training step timed alone, or the device's matmul, through
 * the public API (bfit_profile; the work is train/profile.c). */
#include "api/config_int.h"
#include "api/result.h"
#include "base/err.h"
#include "train/profile.h"

#include <inttypes.h>
#include <stdio.h>

static int matmul(const bfit_config *c, bfit_result *res)
{
    long long m, n, k;
    double gflops;
    int threads, rc;
    char tail;

    if (sscanf(c->matmul, "%lldx%lldx%lld%c", &m, &n, &k, &tail) != 3 || m < 1 || n < 1 || k < 1 ||
        m > (1 << 20) || n > (1 << 20) || k > (1 << 20))
        return bfit_fail_field(BFIT_EINVAL, "matmul", "expected MxNxK, each 1 to 1048576, e.g. 512x1024x1024; got "
                               "'%s'", c->matmul);
    if ((rc = bfit_profile_matmul(c->t.device_name, m, n, k, c->probe.repeats, c->t.threads, &gflops, &threads)) != BFIT_OK)
        return rc;
    cJSON_AddNumberToObject(res->root, "m", (double)m);
    cJSON_AddNumberToObject(res->root, "n", (double)n);
    cJSON_AddNumberToObject(res->root, "k", (double)k);
    cJSON_AddNumberToObject(res->root, "gflops", gflops);
    cJSON_AddNumberToObject(res->root, "reps", c->probe.repeats);
    cJSON_AddNumberToObject(res->root, "threads", threads);
    if (bfit_result_out(res))
        fprintf(bfit_result_out(res), "matmul %lldx%lldx%lld f32: %.1f GFLOP/s (median of %d, %d threads)\n", m, n, k,
                gflops, c->probe.repeats, threads);
    return BFIT_OK;
}

static int step(const bfit_config *c, bfit_result *res)
{
    bfit_profile_cfg pc = {.model = c->t.model, .device_name = c->t.device_name, .batch = c->t.batch,
                           .reps = c->probe.repeats, .warmup = 3, .threads = c->t.threads,
                           .rep_seconds = c->rep_seconds, .precision = c->t.storage.precision,
                           .seq = c->seq, .mask = c->t.mlm.p};
    bfit_profile_result r;
    int rc;

    if ((rc = bfit_config_precision(c, &pc.precision)) != BFIT_OK)
        return rc;
    if (c->warmup_set)
        pc.warmup = c->warmup < 1 ? 1 : (int)c->warmup;
    if (c->nbatches != 1)
        return bfit_fail_field(BFIT_EINVAL, "batch", "profile times one micro-batch: give one size");
    if ((rc = bfit_profile_step(&pc, &r)) != BFIT_OK)
        return rc;
    cJSON_AddNumberToObject(res->root, "batch", pc.batch);
    cJSON_AddNumberToObject(res->root, "samples_per_s", r.samples_per_s);
    if (r.tokens_per_sample)
        cJSON_AddNumberToObject(res->root, "tokens_per_s", r.samples_per_s * r.tokens_per_sample);
    cJSON_AddNumberToObject(res->root, "samples_per_cpu_s", r.samples_per_cpu_s);
    if (r.op_share >= 0)
        cJSON_AddNumberToObject(res->root, "op_share", r.op_share);
    cJSON_AddNumberToObject(res->root, "flops_per_sample", r.flops_per_sample);
    cJSON_AddNumberToObject(res->root, "loss", r.loss);
    cJSON_AddNumberToObject(res->root, "reps", r.reps);
    cJSON_AddNumberToObject(res->root, "steps", r.steps);
    cJSON_AddNumberToObject(res->root, "warmup", r.warmup);
    cJSON_AddNumberToObject(res->root, "threads", r.threads);
    cJSON_AddStringToObject(res->root, "precision", r.precision == BFIT_BF16 ? "bf16" : r.precision == BFIT_F16 ? "f16"
                                                                                                           : "f32");
    if (bfit_result_out(res))
        fprintf(bfit_result_out(res), "%s at micro-batch %d: %.1f samples/s (median of %d repetitions of %d steps, %d "
                "threads)\n", pc.model, pc.batch, r.samples_per_s, r.reps, r.steps, r.threads);
    return BFIT_OK;
}

int bfit_profile(const bfit_config *c, bfit_result **out)
{
    bfit_result *res;
    int rc;

    if (!out)
        return bfit_fail(BFIT_EINVAL, "bfit_profile needs somewhere to put the result");
    *out = NULL;
    if ((rc = bfit_config_check_cmd(c, CMD_PROFILE, "profile")) != BFIT_OK)
        return rc;
    if (!c->matmul && (rc = bfit_config_need_model(c, CMD_PROFILE)) != BFIT_OK)
        return rc;
    if (!(res = bfit_result_make()))
        return BFIT_ENOMEM;
    rc = c->matmul ? matmul(c, res) : step(c, res);
    bfit_result_close(res);
    if (rc != BFIT_OK) {
        bfit_result_free(res);
        return rc;
    }
    *out = res;
    return BFIT_OK;
}
