/* par.h - loops spread over the OpenMP team only when they are large enough
 * to pay for it. */
#ifndef BFIT_PAR_H
#define BFIT_PAR_H

/* Below this many elements a parallel region costs more than it saves. */
#define BFIT_PAR_MIN 32768

/* The for statement given across the thread team when cond holds, else
 * serially. Not an if() clause: a region with a false if() still makes a
 * one-thread team, which libgomp allocates afresh whenever the last team had
 * another size - a heap call per small loop in every step. */
#define BFIT_PAR_FOR_IF(cond, ...)                                                                 \
    do {                                                                                           \
        if (cond) {                                                                                \
            _Pragma("omp parallel for simd schedule(static)") __VA_ARGS__                          \
        } else {                                                                                   \
            __VA_ARGS__                                                                            \
        }                                                                                          \
    } while (0)

#endif
