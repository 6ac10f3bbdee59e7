/* cuda_nvml.c - what the driver says of a GPU, through NVML (libnvidia-ml,
 * which comes with the driver), loaded at run time so that neither building
 * nor running needs it: the memory this process holds (the context and the
 * library handles are memory outside the arena: measured this way, not
 * guessed), and for the run's monitor what `nvidia-smi dmon` shows: how
 * busy the GPU is, the memory of this and other processes, the clocks and
 * the reasons they are held down (power, heat), power and temperature.
 * These are driver queries: none waits for the device's queued work. */
#include "base/err.h"
#include "device/cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* nvmlProcessInfo_t as NVML's v2 structs lay it out */
typedef struct nvml_proc {
    unsigned int pid;
    unsigned long long used;
    unsigned int gpu_instance, compute_instance;
} nvml_proc;

typedef struct nvml_util {
    unsigned int gpu, memory; /* % of the last sample period */
} nvml_util;

typedef struct nvml_mem {
    unsigned long long total, free, used;
} nvml_mem;

typedef int (*init_fn)(void);
typedef int (*by_bus_fn)(const char *bus, void **dev);
typedef int (*procs_fn)(void *dev, unsigned int *count, nvml_proc *infos);
typedef int (*util_fn)(void *dev, nvml_util *u);
typedef int (*mem_fn)(void *dev, nvml_mem *m);
typedef int (*ull_fn)(void *dev, unsigned long long *v);
typedef int (*uint_fn)(void *dev, unsigned int *v);
typedef int (*uint_of_fn)(void *dev, int which, unsigned int *v);

static struct {
    void *lib;
    by_bus_fn by_bus;
    procs_fn procs;
    util_fn util;
    mem_fn mem;
    ull_fn throttle;
    uint_of_fn clock, temp;
    uint_fn power, power_limit;
} nv;
static pthread_once_t nv_once = PTHREAD_ONCE_INIT;

static void nv_load(void)
{
    init_fn init;
    nv.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!nv.lib)
        return;
    init = (init_fn)dlsym(nv.lib, "nvmlInit_v2");
    nv.by_bus = (by_bus_fn)dlsym(nv.lib, "nvmlDeviceGetHandleByPciBusId_v2");
    nv.procs = (procs_fn)dlsym(nv.lib, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (!init || !nv.by_bus || !nv.procs || init() != 0) {
        nv.procs = NULL;
        return;
    }
    /* the monitor's: each may be missing from an older driver, then left out */
    nv.util = (util_fn)dlsym(nv.lib, "nvmlDeviceGetUtilizationRates");
    nv.mem = (mem_fn)dlsym(nv.lib, "nvmlDeviceGetMemoryInfo");
    nv.throttle = (ull_fn)dlsym(nv.lib, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!nv.throttle)
        nv.throttle = (ull_fn)dlsym(nv.lib, "nvmlDeviceGetCurrentClocksThrottleReasons");
    nv.clock = (uint_of_fn)dlsym(nv.lib, "nvmlDeviceGetClockInfo");
    nv.temp = (uint_of_fn)dlsym(nv.lib, "nvmlDeviceGetTemperature");
    nv.power = (uint_fn)dlsym(nv.lib, "nvmlDeviceGetPowerUsage");
    nv.power_limit = (uint_fn)dlsym(nv.lib, "nvmlDeviceGetEnforcedPowerLimit");
}

/* NVML's handle of GPU index (the runtime's numbering, by PCI bus id) */
static int nv_device(int index, void **dev)
{
    char bus[32];
    pthread_once(&nv_once, nv_load);
    if (!nv.procs)
        return bfit_fail(BFIT_EDEVICE, "NVML (libnvidia-ml.so.1) is not available");
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, index) != cudaSuccess) {
        (void)cudaGetLastError();
        return bfit_fail(BFIT_EDEVICE, "cuda:%d: no PCI bus id", index);
    }
    if (nv.by_bus(bus, dev) != 0)
        return bfit_fail(BFIT_EDEVICE, "NVML: no GPU at %s", bus);
    return BFIT_OK;
}

/* NVML's clock-event reasons that slow the GPU down, in words (idle and
 * application clocks are no slowdown) */
static void throttle_words(unsigned long long r, char *out, size_t n)
{
    static const struct {
        unsigned long long bit;
        const char *word;
    } w[] = {{0x4, "power cap"},           {0x8, "hardware slowdown"}, {0x10, "sync boost"},
             {0x20, "thermal (software)"}, {0x40, "thermal (hardware)"}, {0x80, "power brake"}};
    size_t len = 0;
    out[0] = '\0';
    for (unsigned i = 0; i < sizeof w / sizeof w[0] && len < n; i++)
        if (r & w[i].bit)
            len += (size_t)snprintf(out + len, n - len, "%s%s", len ? ", " : "", w[i].word);
}

int cuda_nvml_sample(int index, bfit_device_sample *out)
{
    void *dev = NULL;
    nvml_proc p[64];
    unsigned int np = 64, v;
    nvml_util u;
    nvml_mem m;
    pid_t me = getpid();
    int rc = nv_device(index, &dev);

    memset(out, 0, sizeof *out);
    if (rc != BFIT_OK)
        return rc;
    if (nv.util && nv.util(dev, &u) == 0) {
        out->busy = u.gpu;
        out->mem_busy = u.memory;
        out->have |= BFIT_SAMPLE_BUSY | BFIT_SAMPLE_MEM_BUSY;
    }
    /* in a container whose process ids NVML does not see, this process is
     * not found: then neither figure is given, rather than all as others' */
    if (nv.procs(dev, &np, p) == 0) {
        int found = 0;
        for (unsigned int i = 0; i < np && i < 64; i++)
            if (p[i].pid == (unsigned int)me) {
                out->self_bytes = p[i].used;
                found = 1;
            } else {
                out->others_bytes += p[i].used;
                out->others++;
            }
        if (found)
            out->have |= BFIT_SAMPLE_SELF | BFIT_SAMPLE_OTHERS;
    }
    if (nv.mem && nv.mem(dev, &m) == 0) {
        out->free_bytes = m.free;
        out->total_bytes = m.total;
        out->have |= BFIT_SAMPLE_FREE;
    }
    if (nv.throttle && nv.throttle(dev, &out->throttle) == 0) {
        throttle_words(out->throttle, out->throttle_text, sizeof out->throttle_text);
        out->have |= BFIT_SAMPLE_THROTTLE;
    }
    if (nv.clock && nv.clock(dev, 1 /* NVML_CLOCK_SM */, &v) == 0) {
        out->sm_mhz = v;
        out->have |= BFIT_SAMPLE_CLOCK;
    }
    if (nv.power && nv.power(dev, &v) == 0) {
        out->power_w = v / 1000.0;
        out->power_limit_w = nv.power_limit && nv.power_limit(dev, &v) == 0 ? v / 1000.0 : 0;
        out->have |= BFIT_SAMPLE_POWER;
    }
    if (nv.temp && nv.temp(dev, 0 /* NVML_TEMPERATURE_GPU */, &v) == 0) {
        out->temp_c = v;
        out->have |= BFIT_SAMPLE_TEMP;
    }
    return BFIT_OK;
}

int cuda_process_bytes(int index, uint64_t *bytes)
{
    void *dev = NULL;
    nvml_proc p[64];
    unsigned int n = 64;
    pid_t me = getpid();
    int rc = nv_device(index, &dev);

    *bytes = 0;
    if (rc != BFIT_OK)
        return rc;
    if (nv.procs(dev, &n, p) != 0)
        return bfit_fail(BFIT_EDEVICE, "NVML: cannot list the processes on cuda:%d", index);
    for (unsigned int i = 0; i < n && i < 64; i++)
        if (p[i].pid == (unsigned int)me) {
            *bytes = p[i].used;
            return BFIT_OK;
        }
    return bfit_fail(BFIT_EDEVICE, "NVML: this process is not listed on cuda:%d", index);
}
