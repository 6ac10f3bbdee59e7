/* version.c - the library's version at run time, and a device from a
 * configuration (the public face of device/device.h). */
#include "api/config_int.h"
#include "base/err.h"
#include "device/device.h"
#include "nn/needs.h"

const char *bfit_version(void) { return BFIT_VERSION_STRING; }

int bfit_version_number(void) { return BFIT_VERSION_NUMBER; }

int bfit_device_new(const bfit_config *c, bfit_device **out)
{
    bfit_device_cfg cc = bfit_device_cfg_default();
    int rc;

    if (!out)
        return bfit_fail(BFIT_EINVAL, "bfit_device_new needs somewhere to put the device");
    *out = NULL;
    if (c && (rc = bfit_config_check_cmd(c, CMD_DEVICE, "a device")) != BFIT_OK)
        return rc;
    if (c) {
        cc.threads = c->t.threads;
        cc.conv_algo = c->t.conv_algo;
        cc.host = c->t.host;
    }
    if (c && c->t.model) { /* auto chooses for the model it will run */
        bfit_dtype t;
        if ((rc = bfit_config_precision(c, &t)) != BFIT_OK)
            return rc;
        return bfit_device_open_for_model(c->t.device_name, &cc, c->t.model, bfit_config_seq(c), t, out, NULL, 0);
    }
    return bfit_device_open(c ? c->t.device_name : NULL, &cc, out);
}
