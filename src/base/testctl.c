/* testctl.c - test controls (testctl.h). */
#include "base/testctl.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>

static const char *const env_names[BFIT_TC_COUNT] = {
    "BFIT_TEST_FAIL_ALLOC", "BFIT_TEST_POISON_STEP", "BFIT_TEST_SAMPLE_CHECK", "BFIT_TEST_KILL_IN_CHECKPOINT",
                                                         "BFIT_TEST_CONV_ELEMS", "BFIT_TEST_LAYOUT", "BFIT_TEST_KEEP_ORDER",
    "BFIT_TEST_SINGLE_MOVES", "BFIT_TEST_THREADS_AT", "BFIT_TEST_THREADS_PACK_AT", "BFIT_TEST_CONV_GEMM",
    "BFIT_TEST_FULL_HEAD"};
static _Atomic int64_t set_values[BFIT_TC_COUNT];
static atomic_int set_given[BFIT_TC_COUNT];

void bfit_test_control(bfit_test_op op, int64_t value)
{
    if ((unsigned)op >= BFIT_TC_COUNT)
        return;
    atomic_store(&set_values[op], value);
    atomic_store(&set_given[op], 1);
}

int64_t bfit_test_value(bfit_test_op op)
{
    const char *e;
    if ((unsigned)op >= BFIT_TC_COUNT)
        return 0;
    if (atomic_load(&set_given[op]))
        return atomic_load(&set_values[op]);
    e = getenv(env_names[op]);
    return e ? strtoll(e, NULL, 10) : 0;
}

void bfit_test_checkpoint_half_written(void *ud, const char *tmp_path)
{
    static atomic_long writes;
    (void)ud;
    (void)tmp_path;
    if (atomic_fetch_add(&writes, 1) + 1 == bfit_test_value(BFIT_TC_KILL_IN_CHECKPOINT))
        raise(SIGKILL); /* a crash, simulated: only a test that asked for it gets here */
}
