/* test_threads.c - --threads auto (src/train/threads.h): its decisions,
 * driven with made-up clocks, CPU times and rates; and a real run whose
 * thread count changes mid-training (a test control forces the change),
 * which must make its ops again and train on. */
#include <dirent.h>
#include <math.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "internal.h"

#include "base/testctl.h"
#include "train/threads.h"
#include "train/trainer.h"
#include "tfiles.h"
#include "trun.h"

/* A made-up world: each step takes secs of wall and training time, its
 * samples, and the process gets cpu_per_s CPU seconds per second; the
 * machine has idle_per_s idle cores. */
typedef struct world {
    double now, cpu, idle;
} world;

static char said[256]; /* the last decision that said something */

/* Up to n steps of `secs` each at `samples`, stopping after the first
 * change of setting (made), whose thread count *changed_to gets (0: none;
 * its CPUs are g->cur.cpus). */
static void run_steps(bfit_tgov *g, world *w, int n, double secs, int64_t samples, double cpu_per_s,
                      double idle_per_s, int *changed_to)
{
    *changed_to = 0;
    for (int i = 0; i < n; i++) {
        bfit_tgov_set t;
        w->now += secs;
        w->cpu += secs * cpu_per_s;
        w->idle = w->idle < 0 ? -1 : w->idle + secs * idle_per_s;
        /* as the run does: the readings only where a window starts or
         * closes, anything else between */
        if (bfit_tgov_needs_readings(g, w->now))
            t = bfit_tgov_step(g, secs, samples, w->now, w->cpu, w->idle);
        else
            t = bfit_tgov_step(g, secs, samples, w->now, -7, -7);
        if (g->why[0])
            snprintf(said, sizeof said, "%s", g->why);
        if (!bfit_tgov_same(t, g->cur)) {
            bfit_tgov_changed(g, t, w->now, w->cpu, w->idle);
            *changed_to = t.threads;
            return;
        }
    }
}

/* Threads that get their cores: never a try, however long. */
static void test_busy_threads_stay(void **st)
{
    bfit_tgov g;
    world w = {100, 10, 0};
    int to;
    (void)st;
    bfit_tgov_init(&g, 2, 0, w.now, w.cpu, w.idle);
    run_steps(&g, &w, 2000, 0.05, 128, 1.7, 0, &to); /* 85% of 2 cores, 100 s */
    assert_int_equal(to, 0);
    assert_int_equal(g.cur.threads, 2);
    assert_int_equal(g.changes, 0);
}

/* Short of their cores: half the threads are tried after one window, and
 * kept when they train faster. */
static void test_short_threads_try_fewer_and_keep(void **st)
{
    bfit_tgov g;
    world w = {0, 0, 0};
    int to;
    (void)st;
    bfit_tgov_init(&g, 2, 0, w.now, w.cpu, w.idle);
    run_steps(&g, &w, 60, 0.05, 128, 0.7, 0, &to); /* 35% of 2 cores: 2560 samples/s */
    assert_int_equal(to, 1);
    assert_int_equal(g.state, BFIT_TGOV_TRYING);
    assert_non_null(strstr(said, "trying 1"));
    /* the first step after the change (ops made again) is slow: not counted */
    run_steps(&g, &w, 1, 1.0, 128, 0.7, 0, &to);
    run_steps(&g, &w, 60, 0.04, 128, 0.66, 0, &to); /* 3200 samples/s */
    assert_int_equal(to, 0);
    assert_int_equal(g.cur.threads, 1);
    assert_int_equal(g.state, BFIT_TGOV_SETTLED);
    assert_non_null(strstr(said, "kept"));
    assert_true(fabs(g.last_rate - 3200) < 1);
}

/* A try that is slower goes back, and the next waits twice as long each
 * time it loses again (up to the cap). */
static void test_lost_try_goes_back_and_waits(void **st)
{
    bfit_tgov g;
    world w = {0, 0, 0};
    int to;
    double first_wait;
    (void)st;
    bfit_tgov_init(&g, 2, 0, w.now, w.cpu, w.idle);
    run_steps(&g, &w, 60, 0.05, 128, 0.8, 0, &to);
    assert_int_equal(to, 1);
    run_steps(&g, &w, 60, 0.08, 128, 0.6, 0, &to); /* 1600 samples/s: slower */
    assert_int_equal(to, 2);
    assert_non_null(strstr(said, "back to 2 threads"));
    first_wait = g.next_down - w.now;
    assert_true(first_wait > BFIT_TGOV_WAIT_S * 2 - 3 && first_wait <= BFIT_TGOV_WAIT_S * 2);
    /* still short of cores, but no try before the wait is over */
    run_steps(&g, &w, (int)((first_wait - 1) / 0.05), 0.05, 128, 0.8, 0, &to);
    assert_int_equal(to, 0);
    run_steps(&g, &w, 100, 0.05, 128, 0.8, 0, &to);
    assert_int_equal(to, 1);
    run_steps(&g, &w, 60, 0.08, 128, 0.6, 0, &to);
    assert_int_equal(to, 2);
    assert_true(g.wait_down == BFIT_TGOV_WAIT_S * 4);
    /* losing on: 160, 320, then the cap holds */
    for (int i = 0; i < 4; i++) {
        run_steps(&g, &w, 100000, 0.05, 128, 0.8, 0, &to);
        assert_int_equal(to, 1);
        run_steps(&g, &w, 60, 0.08, 128, 0.6, 0, &to);
        assert_int_equal(to, 2);
    }
    assert_true(g.wait_down == BFIT_TGOV_WAIT_MAX_S);
    assert_true(g.changes == 12);
}

/* From fewer threads: all of them tried again at once when the machine's
 * cores come free; an idle figure that a try proves wrong (another
 * cgroup's cores) is not believed again, and time alone decides. */
static void test_fewer_threads_try_all_when_idle(void **st)
{
    bfit_tgov g;
    world w = {0, 0, 0};
    int to;
    (void)st;
    bfit_tgov_init(&g, 2, 0, w.now, w.cpu, w.idle);
    run_steps(&g, &w, 60, 0.05, 128, 0.7, 0, &to);
    run_steps(&g, &w, 60, 0.04, 128, 0.66, 0, &to);
    assert_int_equal(g.cur.threads, 1);
    /* a core comes free: tried at the next window */
    run_steps(&g, &w, 60, 0.04, 128, 0.95, 1.0, &to);
    assert_int_equal(to, 2);
    assert_non_null(strstr(said, "cores came free"));
    /* but 2 are slower: back, and the idle figure is not believed again */
    run_steps(&g, &w, 60, 0.06, 128, 1.0, 1.0, &to);
    assert_int_equal(to, 1);
    assert_int_equal(g.idle_lied, 1);
    run_steps(&g, &w, (int)((g.next_up - w.now - 1) / 0.04), 0.04, 128, 0.95, 1.0, &to);
    assert_int_equal(to, 0);
    /* once the wait is over, tried again, on time alone */
    run_steps(&g, &w, 100, 0.04, 128, 0.95, 1.0, &to);
    assert_int_equal(to, 2);
    assert_non_null(strstr(said, "time to try again"));
}

/* One thread: nothing to choose. Unknown idle (-1): only time decides. */
static void test_one_thread_and_no_idle(void **st)
{
    bfit_tgov g;
    world w = {0, 0, -1};
    int to;
    (void)st;
    bfit_tgov_init(&g, 1, 0, w.now, w.cpu, w.idle);
    run_steps(&g, &w, 500, 0.05, 128, 0.2, 0, &to);
    assert_int_equal(to, 0);
    bfit_tgov_init(&g, 4, 0, w.now, w.cpu, w.idle);
    run_steps(&g, &w, 60, 0.05, 128, 1.0, 0, &to); /* 25% of 4 */
    assert_int_equal(to, 2);
    run_steps(&g, &w, 60, 0.04, 128, 1.0, 0, &to);
    assert_int_equal(g.cur.threads, 2);
    run_steps(&g, &w, (int)((g.next_up - w.now - 1) / 0.04), 0.04, 128, 1.0, 0, &to);
    assert_int_equal(to, 0);
    run_steps(&g, &w, 100, 0.04, 128, 1.0, 0, &to);
    assert_int_equal(to, 4);
}

/* The count kept (the default outside --threads auto): packing is the only
 * try. Lost, it goes back and waits twice as long, and the next try is
 * packing again, never half the threads; won, it stays packed until the
 * cores come free. */
static void test_keep_count_packs_only(void **st)
{
    bfit_tgov g;
    world w = {0, 0, 0};
    int to;
    (void)st;
    bfit_tgov_init(&g, 2, 2, w.now, w.cpu, w.idle);
    bfit_tgov_keep_count(&g);
    run_steps(&g, &w, 60, 0.05, 128, 0.8, 0, &to); /* 40% of 2 cores */
    assert_int_equal(to, 2);
    assert_int_equal(g.cur.cpus, 1);
    assert_non_null(strstr(said, "trying 2 threads on 1 core"));
    run_steps(&g, &w, 60, 0.08, 128, 0.6, 0, &to); /* packed: slower */
    assert_int_equal(to, 2);
    assert_int_equal(g.cur.cpus, 2);
    assert_non_null(strstr(said, "back to 2 threads"));
    assert_true(g.wait_down == BFIT_TGOV_WAIT_S * 2);
    /* short of cores at once, but no try (a halving would come now without
     * the kept count) until the wait is over */
    run_steps(&g, &w, (int)((g.next_down - w.now - 1) / 0.05), 0.05, 128, 0.8, 0, &to);
    assert_int_equal(to, 0);
    assert_int_equal(g.changes, 2);
    run_steps(&g, &w, 100, 0.05, 128, 0.8, 0, &to);
    assert_int_equal(to, 2);
    assert_int_equal(g.cur.cpus, 1);
    run_steps(&g, &w, 60, 0.04, 128, 0.66, 0, &to); /* packed: faster, kept */
    assert_int_equal(to, 0);
    assert_int_equal(g.cur.threads, 2);
    assert_int_equal(g.cur.cpus, 1);
    assert_non_null(strstr(said, "kept"));
    /* the cores come free: spread again at the next window */
    run_steps(&g, &w, 60, 0.04, 128, 0.95, 1.5, &to);
    assert_int_equal(to, 2);
    assert_int_equal(g.cur.cpus, 2);
    assert_non_null(strstr(said, "cores came free"));
    /* no packing possible (the system refused it): no try at all */
    bfit_tgov_no_pack(&g);
    run_steps(&g, &w, 100000, 0.05, 128, 0.8, 0, &to);
    assert_int_equal(to, 0);
    assert_int_equal(g.cur.threads, 2);
}

/* ---- a real run -------------------------------------------------------------- */

typedef struct seen {
    int threads_events, to1, to2, packed, start_auto;
    int narrow_packed;  /* threads of the process on one CPU, seen when packed */
    int spread, narrow_spread; /* and when spread again */
} seen;

/* How many of this process's threads may run on one CPU only. */
static int narrow_threads(void)
{
    DIR *dir = opendir("/proc/self/task");
    struct dirent *e;
    int n = 0;
    assert_non_null(dir);
    while ((e = readdir(dir))) {
        cpu_set_t set;
        if (e->d_name[0] == '.')
            continue;
        CPU_ZERO(&set);
        if (sched_getaffinity(atoi(e->d_name), sizeof set, &set) == 0 && CPU_COUNT(&set) == 1)
            n++;
    }
    closedir(dir);
    return n;
}

static int allowed_cpus(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
}

static void on_event(void *ud, const char *json)
{
    seen *s = ud;
    if (strstr(json, "\"event\":\"threads\"")) {
        s->threads_events++;
        s->to1 += strstr(json, "\"threads\":1,\"cpus\":2,\"was\":2,\"was_cpus\":2") != NULL;
        s->to2 += strstr(json, "\"threads\":2,\"cpus\":2,\"was\":1") != NULL;
        if (strstr(json, "\"threads\":2,\"cpus\":1,\"was\":2,\"was_cpus\":2")) {
            s->packed++;
            s->narrow_packed = narrow_threads();
        }
        if (strstr(json, "\"threads\":2,\"cpus\":2,\"was\":2,\"was_cpus\":1")) {
            s->spread++;
            s->narrow_spread = narrow_threads();
        }
    }
    if (strstr(json, "\"event\":\"start\"") && strstr(json, "\"threads\":2,\"threads_auto\":1"))
        s->start_auto = 1;
}

/* cnn (convolutions, pooling, batch norm's kin: oneDNN primitives made for
 * a thread count) from 2 threads to 1 after step 3, then the evaluation
 * and training on: the run finishes and learns. */
static void test_run_changes_threads(void **st)
{
    char model[512];
    bfit_train_cfg c;
    bfit_train_result res;
    seen s = {0};
    (void)st;
    src_path(model, sizeof model, "models/cnn.cfg");
    c = trun_cfg(model, 64, 3200, 500);
    c.data = "fashion-mnist";
    c.epochs = 1;
    c.lr = 0.05;
    c.threads = 2;
    c.threads_auto = 1;
    c.on_event = on_event;
    c.cb_ud = &s;
    bfit_test_control(BFIT_TC_THREADS_AT, 3);
    memset(&res, 0, sizeof res);
    assert_int_equal(bfit_train_from(&c, &res), BFIT_OK);
    bfit_test_control(BFIT_TC_THREADS_AT, 0);
    assert_int_equal(s.start_auto, 1);
    assert_int_equal(s.to1, 1);
    assert_true(isfinite(res.train_loss));
    assert_true(res.test_acc > 0.55); /* 50 steps of 64: well past chance (0.10) */
}

/* The cnn run packed onto one core after step 3 and spread again after
 * step 20: while packed the run's threads (the caller's and libgomp's) may
 * run on one CPU only, spread none is, and it trains on. Then a run that
 * ends packed: its end leaves no thread narrowed. */
static void test_run_packs_threads(void **st)
{
    char model[512];
    bfit_train_cfg c;
    bfit_train_result res;
    seen s = {0};
    int before = narrow_threads();
    (void)st;
    if (allowed_cpus() < 2)
        skip(); /* one CPU: nothing to pack onto */
    src_path(model, sizeof model, "models/cnn.cfg");
    c = trun_cfg(model, 64, 3200, 500);
    c.data = "fashion-mnist";
    c.epochs = 1;
    c.lr = 0.05;
    c.threads = 2;
    c.threads_auto = 1;
    c.on_event = on_event;
    c.cb_ud = &s;
    bfit_test_control(BFIT_TC_THREADS_PACK_AT, 3);
    bfit_test_control(BFIT_TC_THREADS_AT, 20); /* from packed: back to the top */
    memset(&res, 0, sizeof res);
    assert_int_equal(bfit_train_from(&c, &res), BFIT_OK);
    assert_int_equal(s.packed, 1);
    assert_true(s.narrow_packed >= before + 2); /* this thread and libgomp's other */
    assert_int_equal(s.spread, 1);
    assert_int_equal(s.narrow_spread, before);
    assert_true(isfinite(res.train_loss));
    assert_true(res.test_acc > 0.55);

    bfit_test_control(BFIT_TC_THREADS_AT, 0);
    memset(&s, 0, sizeof s);
    c.epoch_samples = 1280;
    assert_int_equal(bfit_train_from(&c, &res), BFIT_OK);
    bfit_test_control(BFIT_TC_THREADS_PACK_AT, 0);
    assert_int_equal(s.packed, 1);
    assert_int_equal(s.spread, 0);
    assert_int_equal(narrow_threads(), before);
    assert_int_equal(allowed_cpus() >= 2, 1);
}

/* The default (the count kept): a request for half the threads (after
 * step 2) is not followed, and the cnn run packed after step 4 trains the
 * same weights to the bit as a run that never packs: packing moves the
 * threads, not the work. */
static void test_run_packed_same_bits(void **st)
{
    char model[512], a[512], b[512];
    bfit_train_cfg c;
    bfit_train_result res;
    seen s = {0};
    (void)st;
    if (allowed_cpus() < 2)
        skip();
    src_path(model, sizeof model, "models/cnn.cfg");
    tmp_path(a, sizeof a, "packed.safetensors");
    tmp_path(b, sizeof b, "spread.safetensors");
    c = trun_cfg(model, 64, 1920, 200);
    c.data = "fashion-mnist";
    c.lr = 0.05;
    c.threads = 2;
    assert_int_equal(c.threads_auto, 0);
    assert_int_equal(c.pack, 1);
    c.on_event = on_event;
    c.cb_ud = &s;
    c.save = a;
    bfit_test_control(BFIT_TC_THREADS_AT, 2);
    bfit_test_control(BFIT_TC_THREADS_PACK_AT, 4);
    assert_int_equal(bfit_train_from(&c, &res), BFIT_OK);
    bfit_test_control(BFIT_TC_THREADS_AT, 0);
    bfit_test_control(BFIT_TC_THREADS_PACK_AT, 0);
    assert_int_equal(s.to1, 0);
    assert_int_equal(s.packed, 1);
    assert_int_equal(s.threads_events, 1);
    assert_true(res.test_acc > 0.3);

    memset(&s, 0, sizeof s);
    c.pack = 0;
    c.save = b;
    assert_int_equal(bfit_train_from(&c, &res), BFIT_OK);
    assert_int_equal(s.threads_events, 0);
    assert_same_tensors(a, b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_busy_threads_stay),
        cmocka_unit_test(test_short_threads_try_fewer_and_keep),
        cmocka_unit_test(test_lost_try_goes_back_and_waits),
        cmocka_unit_test(test_fewer_threads_try_all_when_idle),
        cmocka_unit_test(test_one_thread_and_no_idle),
        cmocka_unit_test(test_run_changes_threads),
        cmocka_unit_test(test_run_packs_threads),
        cmocka_unit_test(test_keep_count_packs_only),
        cmocka_unit_test(test_run_packed_same_bits),
    };
    int rc;
    tmp_setup("threads");
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    tmp_teardown();
    return rc;
}
