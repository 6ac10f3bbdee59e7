/* clock.c - monotonic seconds, or the test clock (see clock.h). */
#include "base/clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static double test_tick;
static atomic_llong test_reads;
static pthread_once_t test_once = PTHREAD_ONCE_INIT;

static void test_clock_init(void)
{
    const char *e = getenv("BFIT_TEST_CLOCK");
    double t = e ? strtod(e, NULL) : 0;
    test_tick = t > 0 && t < 1e6 ? t : 0;
}

void bfit_clock_test_tick(double tick)
{
    pthread_once(&test_once, test_clock_init);
    test_tick = tick > 0 && tick < 1e6 ? tick : 0;
    atomic_store(&test_reads, 0);
}

double bfit_clock_mono(void)
{
    struct timespec t;

    pthread_once(&test_once, test_clock_init);
    if (test_tick > 0)
        return (double)atomic_fetch_add(&test_reads, 1) * test_tick;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double bfit_clock_thread(void)
{
    static _Thread_local long long reads;

    pthread_once(&test_once, test_clock_init);
    if (test_tick > 0)
        return (double)reads++ * test_tick;
    return bfit_clock_mono();
}

double bfit_clock_process_cpu(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}
