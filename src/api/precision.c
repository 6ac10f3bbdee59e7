/* precision.c - --precision auto: bf16 where the device a command runs on
 * computes it natively and faster than f32 (bfit_device_info.bf16_fast: a
 * CPU with AVX512_BF16 or AMX, a GPU of compute capability 8.0 or later),
 * else f32. It is resolved once, when a command starts (bfit_plan,
 * bfit_train, bfit_run_new, bfit_find, bfit_profile, bfit_device_new; not
 * bfit_config_check, which opens no device), before anything reads the
 * precision (the device's
 * choice for the model, the plan, a checkpoint's configuration): the
 * device is opened as the command opens it (auto choosing for the model in
 * bf16), asked, and closed. On a CPU with AVX-512 but no AVX512_BF16 bf16
 * is emulated and slower than f32 (docs/performance.md), so auto keeps f32
 * there. */
#include "api/config_int.h"
#include "base/err.h"
#include "device/device.h"
#include "nn/needs.h"

int bfit_config_precision(const bfit_config *c, bfit_dtype *out)
{
    bfit_device_cfg cc = bfit_device_cfg_default();
    bfit_device_info info;
    bfit_device *d = c->device;
    int rc = BFIT_OK;

    *out = c->t.storage.precision;
    if (!c->t.precision_auto)
        return BFIT_OK;
    if (!d) {
        cc.threads = c->t.threads;
        cc.conv_algo = c->t.conv_algo;
        cc.host = c->t.host;
        rc = c->t.model ? bfit_device_open_for_model(c->t.device_name, &cc, c->t.model, bfit_config_seq(c), BFIT_BF16,
                                                     &d, NULL, 0)
                        : bfit_device_open(c->t.device_name, &cc, &d);
        if (rc != BFIT_OK) /* the device's, unless it named another option (the model, read to choose) */
            return bfit_errfield()[0] ? rc : bfit_fail_field(rc, "device", "%s", bfit_errmsg());
    }
    bfit_device_info_get(d, &info);
    *out = info.bf16_fast ? BFIT_BF16 : BFIT_F32;
    if (d != c->device)
        bfit_device_free(d);
    return BFIT_OK;
}
