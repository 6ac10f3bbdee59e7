/* cuda_nvml.c - what the driver says this process holds on a GPU, through
 * NVML (libnvidia-ml, which comes with the driver), loaded at run time so
 * that neither building nor running needs it. The context and the library
 * handles are memory outside the arena: measured this way, not guessed. */
#include "base/err.h"
#include "device/cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

/* nvmlProcessInfo_t as NVML's v2 structs lay it out */
typedef struct nvml_proc {
    unsigned int pid;
    unsigned long long used;
    unsigned int gpu_instance, compute_instance;
} nvml_proc;

typedef int (*init_fn)(void);
typedef int (*by_bus_fn)(const char *bus, void **dev);
typedef int (*procs_fn)(void *dev, unsigned int *count, nvml_proc *infos);

static struct {
    void *lib;
    by_bus_fn by_bus;
    procs_fn procs;
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
    if (!init || !nv.by_bus || !nv.procs || init() != 0)
        nv.procs = NULL;
}

int cuda_process_bytes(int index, uint64_t *bytes)
{
    char bus[32];
    void *dev = NULL;
    nvml_proc p[64];
    unsigned int n = 64;
    pid_t me = getpid();

    *bytes = 0;
    pthread_once(&nv_once, nv_load);
    if (!nv.procs)
        return bfit_fail(BFIT_EDEVICE, "NVML (libnvidia-ml.so.1) is not available");
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, index) != cudaSuccess) {
        (void)cudaGetLastError();
        return bfit_fail(BFIT_EDEVICE, "cuda:%d: no PCI bus id", index);
    }
    if (nv.by_bus(bus, &dev) != 0 || nv.procs(dev, &n, p) != 0)
        return bfit_fail(BFIT_EDEVICE, "NVML: cannot list the processes on %s", bus);
    for (unsigned int i = 0; i < n && i < 64; i++)
        if (p[i].pid == (unsigned int)me) {
            *bytes = p[i].used;
            return BFIT_OK;
        }
    return bfit_fail(BFIT_EDEVICE, "NVML: this process is not listed on %s", bus);
}
