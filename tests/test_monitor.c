/* test_monitor.c - the monitor (src/train/monitor.c, the devices' sample):
 * on the CPU, this process's CPU use and resident memory; a run's "monitor"
 * events, at the start, the end and every monitor_seconds at a step
 * boundary, or none. (A GPU's NVML fields are read only on a GPU:
 * bench/gpu/run.sh's cotenant phase looks at them.) */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "internal.h"
#include "device/device.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A thread of ours busy for 0.3 s on a one-thread device: the sample's use
 * is the process's CPU time over the wall time between the two samples,
 * which this test measures itself around the spin (on a loaded machine the
 * spinning thread gets less than all of a core: both see that); a sleeping
 * process's is little. The resident memory grows by a touched 64 MiB. */
static void test_cpu_sample(void **st)
{
    bfit_device_cfg c = bfit_device_cfg_default();
    bfit_device *d;
    bfit_device_sample s;
    volatile double x = 0;
    double w0, c0, want;
    char *big;
    uint64_t rss0;
    (void)st;
    c.threads = 1;
    assert_int_equal(bfit_device_cpu_new(&c, &d), BFIT_OK);
    assert_int_equal(bfit_device_sample_get(d, &s), BFIT_OK);
    assert_true((s.have & BFIT_SAMPLE_SELF) && (s.have & BFIT_SAMPLE_FREE));
    assert_false(s.have & (BFIT_SAMPLE_OTHERS | BFIT_SAMPLE_THROTTLE)); /* a GPU's fields */
    assert_true(s.self_bytes > (1u << 20) && s.total_bytes >= s.free_bytes && s.free_bytes > 0);
    rss0 = s.self_bytes;
    w0 = now();
    c0 = cpu_now();
    for (double t0 = now(); now() - t0 < 0.3;)
        x += 1;
    assert_int_equal(bfit_device_sample_get(d, &s), BFIT_OK);
    want = 100 * (cpu_now() - c0) / (now() - w0);
    assert_true(s.have & BFIT_SAMPLE_BUSY);
    print_message("  busy thread: %.0f%% (measured here: %.0f%%)\n", s.busy, want);
    assert_true(want > 1 && fabs(s.busy - want) < 10);
    usleep(300000);
    assert_int_equal(bfit_device_sample_get(d, &s), BFIT_OK);
    print_message("  sleeping: %.0f%%\n", s.busy);
    assert_true(s.busy < 20);
    big = malloc(64u << 20);
    assert_non_null(big);
    memset(big, 1, 64u << 20);
    assert_int_equal(bfit_device_sample_get(d, &s), BFIT_OK);
    assert_true(s.self_bytes >= rss0 + (60u << 20));
    free(big);
    bfit_device_free(d);
}

static int count_events(const char *path, const char *ev, const char *field)
{
    FILE *f = fopen(path, "r");
    char line[8192], pat[64];
    int n = 0;
    assert_non_null(f);
    snprintf(pat, sizeof pat, "\"event\":\"%s\"", ev);
    while (fgets(line, sizeof line, f))
        if (strstr(line, pat) && (!field || strstr(line, field)))
            n++;
    fclose(f);
    return n;
}

static void run_with(double secs, const char *log)
{
    bfit_train_cfg c = bfit_train_cfg_default();
    bfit_train_result r;
    c.device_name = "cpu";
    c.model = "mlp";
    c.data = "synthetic";
    c.batch = 64;
    c.max_steps = 6;
    c.threads = 2;
    c.prefetch = 0;
    c.log = log;
    if (secs == secs) /* NAN: the default */
        c.monitor_seconds = secs;
    if (bfit_train_from(&c, &r) != BFIT_OK)
        fail_msg("%s", bfit_errmsg());
}

static void test_run_events(void **st)
{
    char log[64];
    (void)st;
    snprintf(log, sizeof log, "/tmp/bfit_monitor_%d.jsonl", (int)getpid());
    /* every step boundary (an interval shorter than any step), the start and the end */
    run_with(1e-9, log);
    assert_int_equal(count_events(log, "monitor", NULL), 6 + 2);
    assert_int_equal(count_events(log, "monitor", "\"busy\":"), 6 + 2);
    assert_int_equal(count_events(log, "monitor", "\"self_bytes\":"), 6 + 2);
    assert_int_equal(count_events(log, "monitor", "\"device\":\"cpu\""), 6 + 2);
    /* the default (10 s): the start and the end of a short run */
    run_with(NAN, log);
    assert_int_equal(count_events(log, "monitor", NULL), 2);
    run_with(0, log);
    assert_int_equal(count_events(log, "monitor", NULL), 0);
    unlink(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_sample),
        cmocka_unit_test(test_run_events),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
