/* device.c - backend-independent entry points: opening a device by name and
 * dispatching through its table. */
#include "base/aslimit.h"
#include "base/err.h"
#include "base/text.h"
#include "device/device.h"
#include "device/optime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifdef BFIT_HAVE_CUDA
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include "device/cuda_plugin.h"
#endif

bfit_cuda_cfg bfit_cuda_cfg_default(void)
{
    const char *e = getenv("BFIT_CUDA_POLICY");
    bfit_cuda_cfg c = {BFIT_CUDA_FASTEST, 1, -1, 0};
    if (e && !strcmp(e, "lean"))
        c.policy = BFIT_CUDA_LEAN;
    return c;
}

int bfit_device_cuda_new(int index, bfit_device **out) { return bfit_device_cuda_new_cfg(index, NULL, out); }

#ifdef BFIT_HAVE_CUDA
/* The CUDA backend is a module loaded on first use (cuda_plugin.h says why),
 * looked for in order: $BFIT_CUDA_PLUGIN, beside the program's
 * ../lib/batchfit/ (an installed tree that moved), the install directory,
 * the build directory. */
static void *plugin;
static pthread_once_t plugin_once = PTHREAD_ONCE_INIT;
static char plugin_err[1024];
static int plugin_err_found; /* plugin_err is about a file that is there */

/* The error kept is the first file's that is there and does not load (an
 * undefined symbol, another build's), else the first: a module in the build
 * directory that did not load was reported as the install directory's
 * missing file (the H200, 2026-12-04). */
static void *try_open(const char *path, char *why, size_t n)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    const char *e = h ? NULL : dlerror();
    int found = !h && access(path, F_OK) == 0;

    if (!h && (!why[0] || (found && !plugin_err_found))) {
        snprintf(why, n, "%.1000s", e ? e : path);
        plugin_err_found = found;
    }
    return h;
}

static void load_plugin(void)
{
    const char *env = getenv("BFIT_CUDA_PLUGIN");
    char exe[4096], path[4200] = "", *slash;
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);

    plugin_err[0] = '\0';
    if (env && *env) {
        plugin = try_open(env, plugin_err, sizeof plugin_err);
        return;
    }
    if (k > 0) {
        exe[k] = '\0';
        if ((slash = strrchr(exe, '/'))) {
            *slash = '\0';
            snprintf(path, sizeof path, "%s/../lib/batchfit/libbatchfit_cuda.so", exe);
            if ((plugin = try_open(path, plugin_err, sizeof plugin_err)))
                return;
        }
    }
    if ((plugin = try_open(BFIT_CUDA_PLUGIN_INSTALL, plugin_err, sizeof plugin_err)))
        return;
    plugin = try_open(BFIT_CUDA_PLUGIN_BUILD, plugin_err, sizeof plugin_err);
    if (!plugin && !plugin_err_found) /* none is there: say where it was looked for */
        snprintf(plugin_err, sizeof plugin_err, "it is in none of %.300s%s%.300s, %.300s", path, path[0] ? ", " : "",
                 BFIT_CUDA_PLUGIN_INSTALL, BFIT_CUDA_PLUGIN_BUILD);
}

/* Whether the NVIDIA driver's library loads. Without it no GPU can open, and
 * the backend module would map cuBLAS, cuDNN and NCCL (over a gigabyte of
 * libraries, 0.4 s of every command's start on a CPU-only machine) only to
 * say so: `auto` asks this first. */
static int driver_ok;
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static char driver_err[256];

static void load_driver(void)
{
    driver_ok = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL) != NULL;
    if (!driver_ok)
        snprintf(driver_err, sizeof driver_err, "%s", dlerror());
}

static int driver_present(char *why, size_t n)
{
    pthread_once(&driver_once, load_driver);
    if (!driver_ok)
        snprintf(why, n, "cuda: no usable GPU: no NVIDIA driver is loaded (%s)", driver_err);
    return driver_ok;
}

int bfit_device_cuda_new_cfg(int index, const bfit_cuda_cfg *cfg, bfit_device **out)
{
    static const bfit_cuda_host host = {BFIT_CUDA_PLUGIN_ABI ^ (unsigned)sizeof(bfit_cuda_host), bfit_vfail,
                                        bfit_vfail_prefix, bfit_dtype_name, bfit_op_kind_name};
    bfit_cuda_cfg c = cfg ? *cfg : bfit_cuda_cfg_default();
    bfit_cuda_plugin_open_fn open_fn;
    int rc;

    *out = NULL;
    bfit_as_one_heap(); /* before CUDA's threads and the streams' */
    pthread_once(&plugin_once, load_plugin);
    if (!plugin)
        return bfit_fail(BFIT_EDEVICE, "the CUDA backend (libbatchfit_cuda.so) could not be loaded: %s; set "
                                       "BFIT_CUDA_PLUGIN to its path, or use the cpu device", plugin_err);
    open_fn = (bfit_cuda_plugin_open_fn)dlsym(plugin, BFIT_CUDA_PLUGIN_ENTRY);
    if (!open_fn)
        return bfit_fail(BFIT_EDEVICE, "libbatchfit_cuda.so has no entry point %s: it is not this batchfit's",
                         BFIT_CUDA_PLUGIN_ENTRY);
    bfit_clear_error();
    rc = open_fn(&host, index, &c, out);
    if (rc == BFIT_OK)
        bfit_optime_attach(*out);
    if (rc == BFIT_EDEVICE && !*out && !bfit_errmsg()[0])
        return bfit_fail(BFIT_EDEVICE, "libbatchfit_cuda.so is from another build of batchfit (its device "
                                       "interface differs): rebuild it with this library");
    return rc;
}
#else
int bfit_device_cuda_new_cfg(int index, const bfit_cuda_cfg *cfg, bfit_device **out)
{
    (void)index;
    (void)cfg;
    *out = NULL;
    return bfit_fail(BFIT_EDEVICE, "this batchfit was built without CUDA (configure with -DBFIT_CUDA=ON on a "
                                   "machine with the CUDA toolkit): use the cpu device");
}
#endif

bfit_device_cfg bfit_device_cfg_default(void)
{
    bfit_device_cfg c = {0, -1, NULL, BFIT_CONV_FASTEST};
    return c;
}

static const char *const conv_names[] = {"fastest", "lean", "auto"};

int bfit_conv_algo_parse(const char *name, bfit_conv_algo *out)
{
    for (int i = 0; i < 3; i++)
        if (name && !strcasecmp(name, conv_names[i])) {
            *out = (bfit_conv_algo)i;
            return BFIT_OK;
        }
    return bfit_fail_field(BFIT_EINVAL, "conv_algo", "unknown choice '%s' (valid: fastest, lean, auto)",
                           name ? name : "");
}

const char *bfit_conv_algo_name(bfit_conv_algo a) { return (unsigned)a < 3 ? conv_names[a] : "?"; }

/* A GPU with the configuration's choices (auto opens as fastest: a run
 * resolves it once it knows the effective batch). */
static int open_cuda(int idx, const bfit_device_cfg *cfg, bfit_device **out)
{
    bfit_cuda_cfg c = bfit_cuda_cfg_default();
    if (cfg) {
        if (cfg->conv_algo == BFIT_CONV_LEAN)
            c.policy = BFIT_CUDA_LEAN;
        else
            c.policy = BFIT_CUDA_FASTEST;
        c.check = cfg->check;
    }
    return bfit_device_cuda_new_cfg(idx, &c, out);
}

#ifdef BFIT_HAVE_CUDA
/* auto's GPU: the first, where a driver is; why says what stopped it. */
static int open_first_gpu(const bfit_device_cfg *cfg, bfit_device **out, char *why, size_t n)
{
    if (!driver_present(why, n))
        return BFIT_EDEVICE;
    if (open_cuda(0, cfg, out) != BFIT_OK) {
        snprintf(why, n, "%s", bfit_errmsg());
        bfit_clear_error();
        return BFIT_EDEVICE;
    }
    return BFIT_OK;
}
#endif

int bfit_device_supports(const bfit_device *d, bfit_op_kind k, bfit_dtype t, char *why, size_t n)
{
    char none[8];
    if (!why || !n) {
        why = none;
        n = sizeof none;
    }
    why[0] = '\0';
    if ((unsigned)k >= BFIT_OP_COUNT || (unsigned)t >= BFIT_NDTYPES) {
        snprintf(why, n, "unknown op kind %d or dtype %d", (int)k, (int)t);
        return 0;
    }
    return d->vt->supports ? d->vt->supports(d, k, t, why, n) : 1;
}

int bfit_device_supports_needs(const bfit_device *d, const bfit_op_needs *nd, char *why, size_t n)
{
    if (nd->cpu_only && strcmp(d->vt->name, "cpu") != 0) {
        if (why && n)
            snprintf(why, n, "%s (only the cpu device has it yet)", nd->cpu_only);
        return 0;
    }
    for (int k = 0; k < BFIT_OP_COUNT; k++)
        for (int t = 0; t < BFIT_NDTYPES; t++) {
            char r[256];
            if (!(nd->dtypes[k] & (1u << t)) || bfit_device_supports(d, (bfit_op_kind)k, (bfit_dtype)t, r, sizeof r))
                continue;
            if (why && n)
                snprintf(why, n, "%s in %s: %s", bfit_op_kind_name((bfit_op_kind)k), bfit_dtype_name((bfit_dtype)t),
                         r);
            return 0;
        }
    return 1;
}

#ifdef BFIT_HAVE_CUDA
/* The most precise dtype of the needs (what a reason names). */
static const char *needs_dtype(const bfit_op_needs *nd)
{
    unsigned all = 0;
    for (int k = 0; k < BFIT_OP_COUNT; k++)
        all |= nd->dtypes[k];
    return all & (1u << BFIT_F16) ? "f16" : all & (1u << BFIT_BF16) ? "bf16" : "f32";
}
#endif

int bfit_device_open_auto(const bfit_device_cfg *cfg, const bfit_op_needs *nd, bfit_device **out, char *why,
                          size_t n)
{
    char gpu[512] = "", cpu[512] = "";
    bfit_device *d = NULL;
    int rc;

    *out = NULL;
#ifdef BFIT_HAVE_CUDA
    if (open_first_gpu(cfg, &d, gpu, sizeof gpu) == BFIT_OK) {
        char r[384];
        if (bfit_device_supports_needs(d, nd, r, sizeof r)) {
            snprintf(why, n, "%s, the first GPU, runs every op of the model in %s", bfit_device_name(d),
                     needs_dtype(nd));
            *out = d;
            return BFIT_OK;
        }
        snprintf(gpu, sizeof gpu, "%s does not run %s", bfit_device_name(d), r);
        bfit_device_free(d);
        d = NULL;
    }
#else
    snprintf(gpu, sizeof gpu, "this batchfit was built without CUDA");
#endif
    if ((rc = bfit_device_cpu_new(cfg, &d)) != BFIT_OK)
        return rc;
    if (!bfit_device_supports_needs(d, nd, cpu, sizeof cpu)) {
        bfit_device_free(d);
        return bfit_fail(BFIT_EINVAL, "auto: no device here runs this model: %s; the cpu does not run %s",
                         gpu, cpu);
    }
    snprintf(why, n, "cpu, since %s", gpu);
    *out = d;
    return BFIT_OK;
}

int bfit_device_open(const char *name, const bfit_device_cfg *cpu, bfit_device **out)
{
    char *end;
    long idx = 0;

    *out = NULL;
    if (!name || !strcmp(name, "auto")) {
#ifdef BFIT_HAVE_CUDA
        char why[512];
        if (open_first_gpu(cpu, out, why, sizeof why) == BFIT_OK)
            return BFIT_OK;
#endif
        return bfit_device_cpu_new(cpu, out);
    }
    if (!strcmp(name, "cpu"))
        return bfit_device_cpu_new(cpu, out);
    if (!strncmp(name, "cuda", 4)) {
        if (name[4] == ':') {
            idx = strtol(name + 5, &end, 10);
            if (!name[5] || *end || idx < 0 || idx > 1024)
                return bfit_fail(BFIT_EINVAL, "device '%s': expected cuda:N with N a GPU index, e.g. cuda:0", name);
        } else if (name[4]) {
            return bfit_fail(BFIT_EINVAL, "unknown device '%s' (valid: cpu, cuda, cuda:N, auto)", name);
        }
        return open_cuda((int)idx, cpu, out);
    }
    return bfit_fail(BFIT_EINVAL, "unknown device '%s' (valid: cpu, cuda, cuda:N, auto)", name);
}

void bfit_device_free(bfit_device *d)
{
    if (d) {
        bfit_optime_detach(d);
        d->vt->destroy(d);
    }
}

const char *bfit_device_name(const bfit_device *d)
{
    bfit_device_info i;
    if (!d)
        return "(no device)";
    d->vt->info(d, &i);
    return i.name;
}

void bfit_device_info_get(const bfit_device *d, bfit_device_info *out) { d->vt->info(d, out); }

int bfit_device_memory(bfit_device *d, uint64_t *free_bytes, uint64_t *total_bytes)
{
    uint64_t f = 0, t = 0;
    int rc;
    if (!d)
        return bfit_fail(BFIT_EINVAL, "bfit_device_memory needs a device");
    rc = d->vt->mem_info(d, &f, &t); /* either out may be NULL: the other only is wanted */
    if (free_bytes)
        *free_bytes = f;
    if (total_bytes)
        *total_bytes = t;
    return rc;
}

int bfit_device_room(bfit_device *d, const bfit_arena *a, uint64_t *room, uint64_t *free_b)
{
    bfit_arena_stats st;
    uint64_t f = 0;
    int rc = bfit_device_memory(d, &f, NULL);

    if (rc != BFIT_OK)
        return rc;
    bfit_arena_stats_get(a, &st);
    *room = st.reserved + f;
    if (free_b)
        *free_b = f;
    return BFIT_OK;
}

/* Under an address-space limit the device told no room because the limit
 * leaves no more than the room kept beside a step (the threads' stacks and
 * malloc arenas, made with the device, took the rest): that is said, not
 * that the memory is unknown. */
int bfit_device_free_memory(bfit_device *d, uint64_t *out)
{
    bfit_device_info di;
    uint64_t total, limit, room;
    char s1[32], s2[32], s3[32], heaps[128] = "";
    const char *arenas = getenv("MALLOC_ARENA_MAX");
    int rc = bfit_device_memory(d, out, &total);

    if (rc == BFIT_OK && *out)
        return BFIT_OK;
    *out = 0;
    bfit_device_info_get(d, &di);
    if (rc != BFIT_OK || !di.limited || !bfit_as_room(&limit, &room))
        return bfit_fail_field(BFIT_EINVAL, "memory", "cannot tell the device's free memory: give one, e.g. 16GiB");
    if (arenas && strcmp(arenas, "1")) /* else one heap for all (bfit_as_one_heap) */
        snprintf(heaps, sizeof heaps, ", and a malloc heap of 64 MiB of its own: MALLOC_ARENA_MAX is %.16s", arenas);
    return bfit_fail(BFIT_ENOMEM, "out of host memory: the address-space limit (ulimit -v) of %s leaves %s unmapped "
                     "once the device and its %d threads are set up, no more than the %s kept beside a step for "
                     "oneDNN's kernels: raise ulimit -v or use fewer threads (each maps its stack%s)",
                     bfit_format_size(limit, s1, sizeof s1), bfit_format_size(room, s2, sizeof s2), di.threads,
                     bfit_format_size(BFIT_AS_HEADROOM, s3, sizeof s3), heaps);
}

const bfit_block_source *bfit_device_blocks(const bfit_device *d) { return &d->blocks; }

bfit_arena *bfit_device_arena_new(bfit_device *d, uint64_t capacity) { return bfit_arena_new(capacity, &d->blocks); }

const char *bfit_op_kind_name(bfit_op_kind k)
{
    static const char *const names[BFIT_OP_COUNT] = {
        [BFIT_OP_MATMUL] = "matmul", [BFIT_OP_CONV_FWD] = "convolution forward",
        [BFIT_OP_CONV_BWD_DATA] = "convolution backward (data)",
        [BFIT_OP_CONV_BWD_WEIGHTS] = "convolution backward (weights)", [BFIT_OP_POOL_FWD] = "pooling forward",
        [BFIT_OP_POOL_BWD] = "pooling backward", [BFIT_OP_BNORM_FWD] = "batch norm forward",
        [BFIT_OP_BNORM_BWD] = "batch norm backward", [BFIT_OP_LNORM_FWD] = "layer norm forward",
        [BFIT_OP_LNORM_BWD] = "layer norm backward", [BFIT_OP_ELTWISE_FWD] = "activation forward",
        [BFIT_OP_ELTWISE_BWD] = "activation backward", [BFIT_OP_REDUCE_ROWS] = "row sum", [BFIT_OP_ADD] = "add",
        [BFIT_OP_DROPOUT_FWD] = "dropout forward", [BFIT_OP_DROPOUT_BWD] = "dropout backward",
        [BFIT_OP_XENT_FWD] = "cross-entropy forward", [BFIT_OP_XENT_BWD] = "cross-entropy backward",
        [BFIT_OP_SCALE] = "scale", [BFIT_OP_NORMS] = "norms", [BFIT_OP_SGD] = "sgd", [BFIT_OP_ADAMW] = "adamw",
        [BFIT_OP_CAST] = "cast", [BFIT_OP_EMBED_FWD] = "embedding forward", [BFIT_OP_EMBED_BWD] = "embedding backward",
        [BFIT_OP_ATTN_FWD] = "attention forward", [BFIT_OP_ATTN_BWD] = "attention backward",
        [BFIT_OP_CONCAT_FWD] = "concatenation forward", [BFIT_OP_CONCAT_BWD] = "concatenation backward",
        [BFIT_OP_TRANSPOSE] = "transpose", [BFIT_OP_ADD_ROWS] = "broadcast add", [BFIT_OP_SLICE_FWD] = "slice",
        [BFIT_OP_SLICE_BWD] = "slice backward", [BFIT_OP_CHSCALE_FWD] = "channel scaling",
        [BFIT_OP_CHSCALE_BWD] = "channel scaling backward", [BFIT_OP_PRELU_FWD] = "prelu",
        [BFIT_OP_PRELU_BWD] = "prelu backward", [BFIT_OP_GNORM_FWD] = "group norm forward",
        [BFIT_OP_GNORM_BWD] = "group norm backward", [BFIT_OP_ROPE_FWD] = "rotary embedding",
        [BFIT_OP_ROPE_BWD] = "rotary embedding backward", [BFIT_OP_REPEAT_FWD] = "head repeat",
        [BFIT_OP_REPEAT_BWD] = "head repeat backward", [BFIT_OP_SEQMEAN_FWD] = "mean of the tokens",
        [BFIT_OP_SEQMEAN_BWD] = "mean of the tokens backward", [BFIT_OP_GATHER_FWD] = "rows gather",
        [BFIT_OP_GATHER_BWD] = "rows gather backward",
    };
    return (unsigned)k < BFIT_OP_COUNT && names[k] ? names[k] : "?";
}

/* What only the CPU device has: another device refuses it here, by name,
 * rather than run an op that ignores it. Nothing is CPU-only now (the GPU
 * has concatenation, slices, transposition, broadcast add, channel gates
 * and grouped convolutions since 2026-12-04, PReLU since, and group
 * normalisation since 2026-12-05); the mechanism stays for the next op the
 * CPU gets first. */
const char *bfit_op_cpu_only(const bfit_op_desc *d)
{
    switch (d->kind) {
    default: return NULL;
    }
}

/* The parameters of leaky relu, elu, softplus, selu and celu: finite (beta
 * and celu's alpha nonzero: they divide). */
static int eltwise_check_params(const bfit_op_desc *d)
{
    float lo = d->u.elt.lo, hi = d->u.elt.hi;
    int fin = lo > -1e30f && lo < 1e30f;

    if (d->u.elt.alg == BFIT_ELT_LEAKYRELU && !fin)
        return bfit_fail(BFIT_EINVAL, "eltwise: leakyrelu needs a finite negative slope, got %g", (double)lo);
    if (d->u.elt.alg == BFIT_ELT_ELU && !fin)
        return bfit_fail(BFIT_EINVAL, "eltwise: elu needs a finite alpha, got %g", (double)lo);
    if (d->u.elt.alg == BFIT_ELT_SOFTPLUS && !(fin && lo != 0 && hi > -1e30f && hi < 1e30f))
        return bfit_fail(BFIT_EINVAL, "eltwise: softplus needs a finite, nonzero beta and a finite threshold, got "
                         "beta %g, threshold %g", (double)lo, (double)hi);
    if (d->u.elt.alg == BFIT_ELT_SELU && !(fin && hi > -1e30f && hi < 1e30f))
        return bfit_fail(BFIT_EINVAL, "eltwise: selu needs a finite alpha and scale, got alpha %g, scale %g",
                         (double)lo, (double)hi);
    if (d->u.elt.alg == BFIT_ELT_CELU && !(fin && lo != 0))
        return bfit_fail(BFIT_EINVAL, "eltwise: celu needs a finite, nonzero alpha, got %g", (double)lo);
    return BFIT_OK;
}

/* An activation's description, whichever device runs it. */
static int eltwise_check(const bfit_op_desc *d)
{
    if (d->u.elt.n < 1)
        return bfit_fail(BFIT_EINVAL, "eltwise: need at least one element, got %lld", (long long)d->u.elt.n);
    if ((unsigned)d->u.elt.alg > BFIT_ELT_CELU)
        return bfit_fail(BFIT_EINVAL, "eltwise: unknown algorithm %d", (int)d->u.elt.alg);
    if ((d->u.elt.use_dst && d->u.elt.alg != BFIT_ELT_RELU && d->u.elt.alg != BFIT_ELT_CLIP) ||
        (d->u.elt.bits && d->u.elt.alg != BFIT_ELT_RELU))
        return bfit_fail(BFIT_EINVAL, "eltwise: only relu's and clip's backward can use the output, relu's sign bits");
    if (d->u.elt.alg == BFIT_ELT_CLIP && !(d->u.elt.lo < d->u.elt.hi))
        return bfit_fail(BFIT_EINVAL, "eltwise: clip needs lo < hi, got [%g, %g]", (double)d->u.elt.lo,
                         (double)d->u.elt.hi);
    if (d->u.elt.alg == BFIT_ELT_HARDSIGMOID && !(d->u.elt.lo > 0 && d->u.elt.lo < 1e30f && d->u.elt.hi > -1e30f &&
                                                  d->u.elt.hi < 1e30f))
        return bfit_fail(BFIT_EINVAL, "eltwise: hardsigmoid needs a positive, finite alpha and a finite beta, got "
                         "alpha %g, beta %g", (double)d->u.elt.lo, (double)d->u.elt.hi);
    return eltwise_check_params(d);
}

/* The shapes of the ops on rows and columns (transpose, broadcast add,
 * slices), for every device alike. */
static int rows_check(const bfit_op_desc *d)
{
    if (d->kind == BFIT_OP_TRANSPOSE && (d->u.tr.n < 1 || d->u.tr.a < 1 || d->u.tr.b < 1 || d->u.tr.inner < 0))
        return bfit_fail(BFIT_EINVAL, "transpose: sizes must be positive, got n %lld, %lld x %lld, inner %lld",
                         (long long)d->u.tr.n, (long long)d->u.tr.a, (long long)d->u.tr.b, (long long)d->u.tr.inner);
    if (d->kind == BFIT_OP_ADD_ROWS && (d->u.rows.M < 1 || d->u.rows.N < 1))
        return bfit_fail(BFIT_EINVAL, "broadcast add: sizes must be positive, got %lld x %lld", (long long)d->u.rows.M,
                         (long long)d->u.rows.N);
    if ((d->kind == BFIT_OP_SLICE_FWD || d->kind == BFIT_OP_SLICE_BWD) &&
        (d->u.slice.rows < 1 || d->u.slice.len < 1 || d->u.slice.off < 0 ||
         d->u.slice.off + d->u.slice.len > d->u.slice.ld))
        return bfit_fail(BFIT_EINVAL, "slice: columns [%lld, %lld) of %lld, %lld rows", (long long)d->u.slice.off,
                         (long long)(d->u.slice.off + d->u.slice.len), (long long)d->u.slice.ld,
                         (long long)d->u.slice.rows);
    return BFIT_OK;
}

/* A concatenation's shape, for every device alike. */
static int concat_check(const bfit_op_desc *d)
{
    if (d->u.concat.rows < 1 || d->u.concat.n < 1 || d->u.concat.n > BFIT_OP_MAXCAT)
        return bfit_fail(BFIT_EINVAL, "concat: %lld rows of %d inputs (1 to %d inputs)", (long long)d->u.concat.rows,
                         d->u.concat.n, BFIT_OP_MAXCAT);
    for (int k = 0; k < d->u.concat.n; k++)
        if (d->u.concat.cols[k] < 1)
            return bfit_fail(BFIT_EINVAL, "concat: input %d has %lld columns", k, (long long)d->u.concat.cols[k]);
    return BFIT_OK;
}

int bfit_op_new(bfit_device *d, const bfit_op_desc *desc, bfit_op **out)
{
    const char *what;

    *out = NULL;
    if ((unsigned)desc->kind >= BFIT_OP_COUNT)
        return bfit_fail(BFIT_EINVAL, "device: unknown op kind %d", (int)desc->kind);
    if ((unsigned)desc->dtype >= BFIT_NDTYPES || !bfit_dtype_is_float(desc->dtype))
        return bfit_fail(BFIT_EINVAL, "device: ops compute in f32, bf16 or f16, not %s", bfit_dtype_name(desc->dtype));
    if ((desc->kind == BFIT_OP_SCALE || desc->kind == BFIT_OP_NORMS || desc->kind == BFIT_OP_SGD ||
         desc->kind == BFIT_OP_ADAMW) && desc->dtype != BFIT_F32)
        return bfit_fail(BFIT_EINVAL, "device: parameters and their gradients are f32: an op of kind %d must be f32",
                         (int)desc->kind);
    if ((desc->kind == BFIT_OP_ELTWISE_FWD || desc->kind == BFIT_OP_ELTWISE_BWD) && eltwise_check(desc) != BFIT_OK)
        return BFIT_EINVAL;
    if ((desc->kind == BFIT_OP_CONCAT_FWD || desc->kind == BFIT_OP_CONCAT_BWD) && concat_check(desc) != BFIT_OK)
        return BFIT_EINVAL;
    if (rows_check(desc) != BFIT_OK)
        return BFIT_EINVAL;
    /* the recorder notes it in the needs, which then rule out every other device */
    if ((what = bfit_op_cpu_only(desc)) && strcmp(d->vt->name, "cpu") != 0 && strcmp(d->vt->name, "recorder") != 0)
        return bfit_fail(BFIT_EDEVICE, "%s is not supported on %s yet (the cpu device has it): use --device cpu",
                         what, d->vt->name);
    return d->vt->op_new(d, desc, out);
}

size_t bfit_op_workspace_bytes(const bfit_op *op) { return op->dev->vt->op_workspace(op); }
size_t bfit_op_saved_bytes(const bfit_op *op) { return op->dev->vt->op_saved(op); }
int bfit_op_run(bfit_op *op, const bfit_op_args *args)
{
    double t0 = bfit_optime_begin(op->dev);
    int rc = op->dev->vt->op_run(op, args);

    bfit_optime_end(op->dev, op->desc.kind, op->desc.dtype, t0);
    return rc;
}

void bfit_op_free(bfit_op *op)
{
    if (op)
        op->dev->vt->op_free(op);
}

int bfit_device_upload(bfit_device *d, void *dst, const void *host_src, size_t n)
{
    return n ? d->vt->upload(d, dst, host_src, n) : BFIT_OK;
}

int bfit_device_download(bfit_device *d, void *host_dst, const void *src, size_t n)
{
    return n ? d->vt->download(d, host_dst, src, n) : BFIT_OK;
}

int bfit_device_copy(bfit_device *d, void *dst, const void *src, size_t n)
{
    double t0;
    int rc;

    if (!n)
        return BFIT_OK;
    t0 = bfit_optime_begin(d);
    rc = d->vt->copy(d, dst, src, n);
    bfit_optime_end(d, BFIT_OPTIME_COPY, BFIT_F32, t0);
    return rc;
}

int bfit_device_fill(bfit_device *d, void *dst, int byte, size_t n)
{
    double t0;
    int rc;

    if (!n)
        return BFIT_OK;
    t0 = bfit_optime_begin(d);
    rc = d->vt->fill(d, dst, byte, n);
    bfit_optime_end(d, BFIT_OPTIME_FILL, BFIT_F32, t0);
    return rc;
}

int bfit_device_sync(bfit_device *d) { return d->vt->sync(d); }

int bfit_device_layout_block(bfit_device *d, bfit_dtype t) { return d->vt->layout_block ? d->vt->layout_block(d, t) : 0; }

int bfit_device_span_begin(bfit_device *d, uint64_t key)
{
    return d->vt->span_begin ? d->vt->span_begin(d, key) : BFIT_OK;
}

void bfit_device_span_end(bfit_device *d)
{
    if (d->vt->span_end)
        d->vt->span_end(d);
}

int bfit_device_set_threads(bfit_device *d, int threads, int cpus)
{
    if (!d->vt->set_threads)
        return bfit_fail(BFIT_EINVAL, "%s: ops do not run on host threads; the thread count is the CPU's",
                         d->vt->name);
    if (threads < 1 || cpus < 0)
        return bfit_fail(BFIT_EINVAL, "%s: threads must be at least 1 and cpus at least 0, got %d and %d",
                         d->vt->name, threads, cpus);
    return d->vt->set_threads(d, threads, cpus);
}

int bfit_device_sample_get(bfit_device *d, bfit_device_sample *out)
{
    memset(out, 0, sizeof *out);
    return d->vt->sample ? d->vt->sample(d, out) : BFIT_OK;
}
