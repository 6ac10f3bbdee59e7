/* fuzz_ckpt.c - a checkpoint's metadata as a resume reads it: the run's
 * state (JSON: counters, cursor, controller, schedule) and its
 * configuration (JSON: every field as text, merged into the caller's, with
 * its comparisons and value parsers). The input is the state, a NUL, the
 * configuration. The configuration is merged twice: into the defaults (no
 * option given: all taken from it) and into one that set a few options
 * (compared with it). */
#include "train/run_int.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static void merge(const cJSON *j)
{
    static const char *const set[] = {"lr", "batch", "batch_min", "model", "memory", "micro_batch", "checkpoint_every"};
    bfit_batch_point bpts[BFIT_BATCH_SCHEDULE_MAX];
    bfit_mem_point mpts[BFIT_MEM_SCHEDULE_MAX];
    bfit_train_cfg c = bfit_train_cfg_default();
    (void)bfit_ckpt_cfg_merge(&c, j, "fuzz", bpts, mpts);
    c = bfit_train_cfg_default();
    c.lr = 0.1;
    c.auto_batch = 1;
    c.batch = c.batch_min = 16;
    c.model = "models/mlp.cfg";
    c.memory = 1 << 30;
    c.resume_set = set;
    c.nresume_set = (int)(sizeof set / sizeof set[0]);
    (void)bfit_ckpt_cfg_merge(&c, j, "fuzz", bpts, mpts);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    const uint8_t *z = memchr(d, 0, n);
    size_t ns = z ? (size_t)(z - d) : n;
    cJSON *st = cJSON_ParseWithLength((const char *)d, ns), *cf;
    run_snap s;
    bfit_lr_schedule sched;

    if (st) {
        (void)bfit_ckpt_state_from_json(st, "fuzz", &s, &sched);
        cJSON_Delete(st);
    }
    if (z && (cf = cJSON_ParseWithLength((const char *)z + 1, n - ns - 1))) {
        merge(cf);
        cJSON_Delete(cf);
    }
    return 0;
}
