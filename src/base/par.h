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
#define BFIT_PAR_IF_(cond, pragma, ...)                                                            \
    do {                                                                                           \
        if (cond) {                                                                                \
            _Pragma(pragma) __VA_ARGS__                                                            \
        } else {                                                                                   \
            __VA_ARGS__                                                                            \
        }                                                                                          \
    } while (0)
#define BFIT_PAR_FOR_IF(cond, ...) BFIT_PAR_IF_(cond, "omp parallel for simd schedule(static)", __VA_ARGS__)
/* The same without simd, for loops over rows whose own loops are the vectors
 * (an omp simd may not nest inside another) */
#define BFIT_PAR_ROWS_IF(cond, ...) BFIT_PAR_IF_(cond, "omp parallel for schedule(static)", __VA_ARGS__)

#endif
