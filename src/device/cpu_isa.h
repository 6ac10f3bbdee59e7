/* cpu_isa.h - which x86 instruction set the CPU device's own loops use.
 *
 * The library is compiled for x86-64-v3 (AVX2, FMA, F16C, BMI1/2), so the
 * same binary runs on any x86-64 with AVX2. Loops that gain from AVX-512
 * have a second variant compiled for it (BFIT_CPU_AVX512), and which one
 * runs is decided here, once per process: AVX-512 when the CPU has the
 * x86-64-v4 set (F, BW, CD, DQ, VL), unless $BFIT_CPU_ISA says otherwise
 * ("avx2" forces the portable variants, so a test run can cover them on a
 * machine with AVX-512). oneDNN chooses its own kernels by itself. */
#ifndef BFIT_CPU_ISA_H
#define BFIT_CPU_ISA_H

typedef enum bfit_cpu_isa {
    BFIT_CPU_ISA_AVX2,   /* the portable baseline: the library's compile flags */
    BFIT_CPU_ISA_AVX512, /* AVX-512 F, BW, CD, DQ, VL (x86-64-v4) */
} bfit_cpu_isa;

/* A function compiled for AVX-512: it may only run when bfit_cpu_isa_get()
 * says BFIT_CPU_ISA_AVX512. An OpenMP region inside it is compiled for
 * AVX-512 too, which is why the attribute goes on the function holding the
 * loop (a region in an always_inline helper would be outlined before it is
 * inlined, and keep the baseline). */
#define BFIT_CPU_AVX512 __attribute__((target("avx512f,avx512bw,avx512cd,avx512dq,avx512vl")))

/* Two variants of one static function from one body: name_avx512, compiled
 * for AVX-512, and name_avx2, the baseline. For loops the compiler
 * vectorises (the optimizer updates, casts, reductions): the body's OpenMP
 * regions and the always_inline helpers it calls are compiled for each.
 * BFIT_CPU_PICK(name) is the variant to call. */
#define BFIT_CPU_VARIANTS(ret, name, params, ...)                                                  \
    BFIT_CPU_AVX512 static ret name##_avx512 params __VA_ARGS__                                    \
    static ret name##_avx2 params __VA_ARGS__
#define BFIT_CPU_PICK(name) (bfit_cpu_isa_get() == BFIT_CPU_ISA_AVX512 ? name##_avx512 : name##_avx2)

/* Check $BFIT_CPU_ISA (auto, avx2 or avx512; unset is auto) and that this
 * CPU can run what the library was compiled for; BFIT_OK, or BFIT_EINVAL
 * for a bad value or avx512 on a CPU without it, BFIT_EDEVICE for a CPU
 * without AVX2. Opening a CPU device calls it. */
int bfit_cpu_isa_init(void);

/* The instruction set the loops use (decided on first call). */
bfit_cpu_isa bfit_cpu_isa_get(void);

/* "avx2" or "avx512", and why it was chosen ("BFIT_CPU_ISA=avx2", "the CPU
 * has AVX-512 (F, BW, CD, DQ, VL)", ...). */
const char *bfit_cpu_isa_name(bfit_cpu_isa isa);
const char *bfit_cpu_isa_why(void);

/* Tests: use isa from now on (a dispatched loop asks at each call; not
 * while another thread runs ops). BFIT_EINVAL if this CPU cannot run it. */
int bfit_cpu_isa_force(bfit_cpu_isa isa);

#endif
