/* cpu_isa.c - the choice of instruction set for the CPU device's own loops
 * (cpu_isa.h says what and why), made once per process from the CPU's
 * features and $BFIT_CPU_ISA. */
#include "base/err.h"
#include "device/cpu_isa.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int chosen;        /* a bfit_cpu_isa; atomic: bfit_cpu_isa_force may change it */
static int init_rc;       /* BFIT_OK, or what bfit_cpu_isa_init reports */
static char init_msg[200];
static char why[120];

static int has_avx512(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
}

/* What -march=x86-64-v3 lets the compiler use everywhere in the library
 * (the rest of v3, LZCNT and MOVBE, comes with these on every such CPU). */
static int has_baseline(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
           __builtin_cpu_supports("bmi2");
}

static void choose(void)
{
    const char *e = getenv("BFIT_CPU_ISA");
    int avx512;

    __builtin_cpu_init();
    avx512 = has_avx512();
    chosen = avx512 ? BFIT_CPU_ISA_AVX512 : BFIT_CPU_ISA_AVX2;
    snprintf(why, sizeof why, "%s", avx512 ? "the CPU has AVX-512 (F, BW, CD, DQ, VL)" : "the CPU has no AVX-512");
    if (!has_baseline()) {
        init_rc = BFIT_EDEVICE;
        snprintf(init_msg, sizeof init_msg,
                 "cpu: this CPU lacks AVX2, FMA or BMI2, which this build of batchfit needs (x86-64-v3)");
    } else if (!e || !*e || !strcmp(e, "auto")) {
        /* the CPU decides */
    } else if (!strcmp(e, "avx2")) {
        chosen = BFIT_CPU_ISA_AVX2;
        snprintf(why, sizeof why, "BFIT_CPU_ISA=avx2");
    } else if (!strcmp(e, "avx512") && avx512) {
        snprintf(why, sizeof why, "BFIT_CPU_ISA=avx512");
    } else if (!strcmp(e, "avx512")) {
        init_rc = BFIT_EINVAL;
        snprintf(init_msg, sizeof init_msg,
                 "BFIT_CPU_ISA=avx512: this CPU has no AVX-512 (F, BW, CD, DQ, VL); unset it or use avx2");
    } else {
        init_rc = BFIT_EINVAL;
        snprintf(init_msg, sizeof init_msg, "BFIT_CPU_ISA=%.40s: expected auto, avx2 or avx512", e);
    }
}

int bfit_cpu_isa_init(void)
{
    pthread_once(&once, choose);
    return init_rc == BFIT_OK ? BFIT_OK : bfit_fail(init_rc, "%s", init_msg);
}

bfit_cpu_isa bfit_cpu_isa_get(void)
{
    pthread_once(&once, choose);
    return (bfit_cpu_isa)__atomic_load_n(&chosen, __ATOMIC_RELAXED);
}

const char *bfit_cpu_isa_name(bfit_cpu_isa isa) { return isa == BFIT_CPU_ISA_AVX512 ? "avx512" : "avx2"; }

const char *bfit_cpu_isa_why(void)
{
    pthread_once(&once, choose);
    return why;
}

int bfit_cpu_isa_force(bfit_cpu_isa isa)
{
    pthread_once(&once, choose);
    if (isa == BFIT_CPU_ISA_AVX512 && !has_avx512())
        return bfit_fail(BFIT_EINVAL, "cpu: cannot force avx512: this CPU has no AVX-512 (F, BW, CD, DQ, VL)");
    __atomic_store_n(&chosen, (int)isa, __ATOMIC_RELAXED);
    snprintf(why, sizeof why, "forced to %s by a test", bfit_cpu_isa_name(isa));
    return BFIT_OK;
}
