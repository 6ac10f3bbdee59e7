/* cotenant.c - another process on the same GPU, for the proof kit's
 * cotenant phase (bench/gpu/run.sh): it takes and gives back device memory
 * on a script while a batchfit run trains, as a colleague's job would.
 *
 *   bfit_cotenant DEVICE SCRIPT
 *
 * SCRIPT is a comma-separated list of actions, run in order:
 *   take=F      take the fraction F (0 < F < 1) of what the GPU has free now
 *   take=-MIB   take all that is free but MIB mebibytes
 *   take=MIB    take MIB mebibytes (an integer)
 *   wait=S      sleep S seconds (what was taken stays taken)
 *   free        give back everything taken
 * e.g. "take=0.5,wait=20,free,wait=20,take=-1024,wait=30,free".
 *
 * Memory is taken in 256 MiB pieces with cudaMalloc and written
 * (cudaMemset), so it is really held; a refused piece ends the take there
 * (whatever was got stays). One JSON line per action: the time since the
 * start, the bytes held, the GPU's free and total memory after it. Without a
 * GPU (the kit's dry run) it says why in its first line and runs the waits
 * only, so the script's timing is the same. Exits 0 unless the script is
 * malformed (2).
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PIECE ((size_t)256 << 20)
#define MAXPIECES 4096

static void *piece[MAXPIECES];
static int npiece;
static double t0;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void say(const char *action, int gpu)
{
    size_t f = 0, t = 0;
    if (gpu && cudaMemGetInfo(&f, &t) != cudaSuccess)
        (void)cudaGetLastError();
    printf("{\"t\":%.2f,\"action\":\"%s\",\"held\":%zu,\"free\":%zu,\"total\":%zu}\n", now() - t0, action,
           (size_t)npiece * PIECE, f, t);
    fflush(stdout);
}

static void take(size_t bytes)
{
    while (bytes >= PIECE && npiece < MAXPIECES) {
        void *p = NULL;
        if (cudaMalloc(&p, PIECE) != cudaSuccess) {
            (void)cudaGetLastError();
            return;
        }
        cudaMemset(p, 0x5a, PIECE);
        piece[npiece++] = p;
        bytes -= PIECE;
    }
    cudaDeviceSynchronize();
}

static void give_back(void)
{
    while (npiece > 0)
        cudaFree(piece[--npiece]);
    cudaDeviceSynchronize();
}

/* bytes for a take= argument, from the free memory now */
static int take_bytes(const char *arg, size_t free_now, size_t *out)
{
    char *end;
    double v = strtod(arg, &end);
    if (*end || end == arg)
        return -1;
    if (v > 0 && v < 1)
        *out = (size_t)(v * (double)free_now);
    else if (v <= 0)
        *out = free_now > (size_t)(-v) * (1u << 20) ? free_now - (size_t)(-v) * (1u << 20) : 0;
    else
        *out = (size_t)v << 20;
    return 0;
}

int main(int argc, char **argv)
{
    char *script, *tok, *save = NULL;
    int gpu;
    cudaError_t e;

    if (argc != 3) {
        fprintf(stderr, "usage: bfit_cotenant DEVICE SCRIPT (e.g. 0 take=0.5,wait=20,free)\n");
        return 2;
    }
    t0 = now();
    e = cudaSetDevice(atoi(argv[1]));
    if (e == cudaSuccess)
        e = cudaFree(NULL); /* the context, now: its memory is not the script's */
    gpu = e == cudaSuccess;
    if (!gpu)
        printf("{\"t\":0,\"action\":\"no GPU: %s (%s): waits only\",\"held\":0,\"free\":0,\"total\":0}\n",
               cudaGetErrorString(e), cudaGetErrorName(e));
    script = strdup(argv[2]);
    for (tok = strtok_r(script, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!strncmp(tok, "take=", 5)) {
            size_t f = 0, t = 0, b;
            if (gpu && cudaMemGetInfo(&f, &t) != cudaSuccess)
                (void)cudaGetLastError();
            if (take_bytes(tok + 5, f, &b) != 0)
                goto bad;
            if (gpu)
                take(b);
        } else if (!strncmp(tok, "wait=", 5)) {
            char *end;
            double s = strtod(tok + 5, &end);
            if (*end || s < 0)
                goto bad;
            usleep((useconds_t)(s * 1e6));
        } else if (!strcmp(tok, "free")) {
            if (gpu)
                give_back();
        } else {
            goto bad;
        }
        say(tok, gpu);
    }
    if (gpu)
        give_back();
    free(script);
    return 0;
bad:
    fprintf(stderr, "bfit_cotenant: bad action '%s' (take=F, take=-MIB, take=MIB, wait=S, free)\n", tok);
    free(script);
    return 2;
}
