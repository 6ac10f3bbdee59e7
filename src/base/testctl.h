/* testctl.h - test controls (SQLite's sqlite3_test_control): hooks that
 * only tests use, kept out of the public configuration. A test program
 * sets them with bfit_test_control; a test of the command line sets them
 * in the environment (BFIT_TEST_FAIL_ALLOC=N, BFIT_TEST_POISON_STEP=N,
 * BFIT_TEST_SAMPLE_CHECK=1, BFIT_TEST_KILL_IN_CHECKPOINT=N,
 * BFIT_TEST_CONV_ELEMS=N, BFIT_TEST_LAYOUT=1|8|16,
 * BFIT_TEST_KEEP_ORDER=1, BFIT_TEST_SINGLE_MOVES=1, BFIT_TEST_THREADS_AT=N,
 * BFIT_TEST_THREADS_PACK_AT=N, BFIT_TEST_CONV_GEMM=1). They apply to
 * runs the public API starts afterwards (src/api/resolve.c). */
#ifndef BFIT_TESTCTL_H
#define BFIT_TESTCTL_H

#include <stdint.h>

typedef enum {
    BFIT_TC_FAIL_ALLOC = 0,     /* the N-th device allocation of a run fails (an out-of-memory) */
    BFIT_TC_POISON_STEP,        /* step N's gradients are made NaN, as an overflow would */
    BFIT_TC_SAMPLE_CHECK,       /* log each epoch's count and checksum of the samples trained on */
    BFIT_TC_KILL_IN_CHECKPOINT, /* SIGKILL in the write of the N-th checkpoint, half written */
    BFIT_TC_CONV_ELEMS,         /* the cpu refuses a convolution with a tensor of over N elements as out of
                                   memory, as cuDNN's 2^31 - 1 limit makes the GPU refuse one */
    BFIT_TC_LAYOUT,             /* the cpu's activations between convolutions (store.c): 1 every one in nchw,
                                   8 or 16 chains in nChw8c / nChw16c; 0 the device's block */
    BFIT_TC_KEEP_ORDER,         /* 1: models built afterwards keep relu before max pool (model.c) */
    BFIT_TC_SINGLE_MOVES,       /* 1: recompute auto's walk takes single moves only, no pairs (recompute.c) */
    BFIT_TC_THREADS_AT,         /* --threads auto halves its threads after step N (or goes back to all of
                                   them), measured or not (src/train/threads.c) */
    BFIT_TC_THREADS_PACK_AT,    /* --threads auto packs its threads onto half the cores after step N (or
                                   spreads them again) */
    BFIT_TC_CONV_GEMM,          /* 1: the cpu takes every dense f32 nchw weight gradient as one product over
                                   the samples (cpu_conv_gemm.c), not only where oneDNN would take its gemm */
    BFIT_TC_FULL_HEAD,          /* 1: a masked LM's head runs at every token, its masked ones not gathered first
                                   (session.c; tests and benches compare) */
    BFIT_TC_COUNT
} bfit_test_op;

/* Set op's value for this process (0: off), over the environment's. */
void bfit_test_control(bfit_test_op op, int64_t value);
/* op's value: set by bfit_test_control, else the environment's, else 0. */
int64_t bfit_test_value(bfit_test_op op);
/* The checkpoint writer's hook under BFIT_TC_KILL_IN_CHECKPOINT. */
void bfit_test_checkpoint_half_written(void *ud, const char *tmp_path);

#endif
