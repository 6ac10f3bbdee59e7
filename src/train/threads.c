/* threads.c - the threads' packing (every CPU run unless --no-pack) and
 * --threads auto: the decisions (pure, threads.h), and the run's side: the
 * clocks they read, and a change of thread count made as a change of
 * micro-batch is, by making the ops again. */
#include "train/threads.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/testctl.h"
#include "device/device.h"
#include "train/run_int.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void window_start(bfit_tgov *g, double now, double cpu, double idle)
{
    g->steps = 0;
    g->secs = 0;
    g->samples = 0;
    g->t0 = now;
    g->cpu0 = cpu;
    g->idle0 = idle;
}

bfit_tgov_set bfit_tgov_top(const bfit_tgov *g) { return (bfit_tgov_set){g->max, g->top_cpus}; }
bfit_tgov_set bfit_tgov_packed(const bfit_tgov *g) { return (bfit_tgov_set){g->max, g->top_cpus / 2}; }
bfit_tgov_set bfit_tgov_halved(const bfit_tgov *g) { return (bfit_tgov_set){g->max / 2, g->top_cpus}; }
int bfit_tgov_same(bfit_tgov_set a, bfit_tgov_set b) { return a.threads == b.threads && a.cpus == b.cpus; }

/* The cores a setting's threads can use at once. */
static int used(bfit_tgov_set s) { return s.threads < s.cpus ? s.threads : s.cpus; }

void bfit_tgov_name(const bfit_tgov *g, bfit_tgov_set s, char *buf, size_t n)
{
    if (s.cpus < g->top_cpus && s.cpus < s.threads)
        snprintf(buf, n, "%d threads on %d core%s", s.threads, s.cpus, s.cpus == 1 ? "" : "s");
    else
        snprintf(buf, n, "%d thread%s", s.threads, s.threads == 1 ? "" : "s");
}

void bfit_tgov_init(bfit_tgov *g, int max, int cpus, double now, double cpu, double idle)
{
    memset(g, 0, sizeof *g);
    g->max = max < 1 ? 1 : max;
    g->top_cpus = cpus > 0 && cpus < g->max ? cpus : g->max;
    g->can_pack = g->pack_next = cpus >= 2 && g->top_cpus >= 2;
    g->cur = bfit_tgov_top(g);
    g->wait_down = g->wait_up = BFIT_TGOV_WAIT_S;
    g->skip = 1; /* the first step makes the ops */
    window_start(g, now, cpu, idle);
}

void bfit_tgov_changed(bfit_tgov *g, bfit_tgov_set s, double now, double cpu, double idle)
{
    g->cur = s;
    g->changes++;
    g->skip = 1;
    window_start(g, now, cpu, idle);
}

void bfit_tgov_keep_count(bfit_tgov *g) { g->keep_count = 1; }

void bfit_tgov_no_pack(bfit_tgov *g)
{
    g->can_pack = g->pack_next = 0;
    g->state = BFIT_TGOV_SETTLED;
}

static bfit_tgov_set try_set(bfit_tgov *g, bfit_tgov_set to, double rate)
{
    g->state = BFIT_TGOV_TRYING;
    g->from = g->cur;
    g->from_rate = rate;
    return to;
}

static double twice(double w) { return w * 2 < BFIT_TGOV_WAIT_MAX_S ? w * 2 : BFIT_TGOV_WAIT_MAX_S; }

/* A try's window is over: keep it, or go back (and wait longer before the
 * next try that way; a lost packing is followed by half the threads at
 * the next window that finds them short, unless the count stays). */
static bfit_tgov_set judge(bfit_tgov *g, double rate, double now)
{
    int down = bfit_tgov_same(g->from, bfit_tgov_top(g)), packed = down && g->cur.threads == g->max;
    char a[48], b[48];

    g->state = BFIT_TGOV_SETTLED;
    bfit_tgov_name(g, g->cur, a, sizeof a);
    bfit_tgov_name(g, g->from, b, sizeof b);
    if (rate > g->from_rate * BFIT_TGOV_GAIN) {
        snprintf(g->why, sizeof g->why, "%s trained %.4g samples/s against %.4g on %s: kept", a, rate, g->from_rate, b);
        g->pack_next = g->can_pack;
        if (down)
            g->next_up = now + g->wait_up;
        else {
            g->wait_up = BFIT_TGOV_WAIT_S;
            g->next_down = now + g->wait_down;
        }
        return g->cur;
    }
    snprintf(g->why, sizeof g->why, "%s trained %.4g samples/s against %.4g on %s: back to %s", a, rate, g->from_rate, b,
             b);
    if (packed && !g->keep_count) {
        g->pack_next = 0;
        g->next_down = now;
    } else if (down) {
        g->pack_next = g->can_pack;
        g->wait_down = twice(g->wait_down);
        g->next_down = now + g->wait_down;
    } else {
        if (g->up_idle)
            g->idle_lied = 1; /* idle cores that were not ours to have: time alone decides from now */
        g->wait_up = twice(g->wait_up);
        g->next_up = now + g->wait_up;
    }
    return g->from;
}

int bfit_tgov_needs_readings(const bfit_tgov *g, double now)
{
    return g->max > 1 && (g->skip > 0 || (g->steps + 1 >= BFIT_TGOV_WINDOW_STEPS && now - g->t0 >= BFIT_TGOV_WINDOW_S));
}

/* A window closed at the top setting or below it, settled: a try, or none. */
static bfit_tgov_set decide(bfit_tgov *g, double rate, double busy, double free_cores, double now)
{
    char a[48], b[48];
    bfit_tgov_set top = bfit_tgov_top(g), to;

    bfit_tgov_name(g, g->cur, a, sizeof a);
    if (bfit_tgov_same(g->cur, top)) {
        if (busy >= BFIT_TGOV_BUSY || now < g->next_down || (g->keep_count && !g->pack_next))
            return g->cur;
        to = g->pack_next ? bfit_tgov_packed(g) : bfit_tgov_halved(g);
        bfit_tgov_name(g, to, b, sizeof b);
        snprintf(g->why, sizeof g->why, "%s got %.0f%% of their cores (%.4g samples/s): trying %s", a, 100 * busy,
                 rate, b);
        return try_set(g, to, rate);
    }
    g->up_idle = !g->idle_lied && free_cores >= 0.75 * (used(top) - used(g->cur));
    if (!g->up_idle && now < g->next_up)
        return g->cur;
    bfit_tgov_name(g, top, b, sizeof b);
    snprintf(g->why, sizeof g->why, "%s (%s at %.4g samples/s): trying %s",
             g->up_idle ? "cores came free" : "time to try again", a, rate, b);
    return try_set(g, top, rate);
}

bfit_tgov_set bfit_tgov_step(bfit_tgov *g, double secs, int64_t samples, double now, double cpu, double idle)
{
    double rate, busy, free_cores;
    g->why[0] = '\0';
    if (g->max <= 1)
        return g->cur;
    if (g->skip > 0) {
        g->skip--;
        window_start(g, now, cpu, idle);
        return g->cur;
    }
    g->steps++;
    g->secs += secs;
    g->samples += samples;
    if (g->steps < BFIT_TGOV_WINDOW_STEPS || now - g->t0 < BFIT_TGOV_WINDOW_S || g->secs <= 0)
        return g->cur;
    rate = (double)g->samples / g->secs;
    busy = (cpu - g->cpu0) / ((now - g->t0) * used(g->cur));
    free_cores = idle >= 0 && g->idle0 >= 0 ? (idle - g->idle0) / (now - g->t0) : -1;
    g->last_rate = rate;
    g->last_busy = busy;
    window_start(g, now, cpu, idle);
    if (g->state == BFIT_TGOV_TRYING)
        return judge(g, rate, now);
    return decide(g, rate, busy, free_cores, now);
}

/* ---- the run's side ------------------------------------------------------ */

/* The machine's idle core-seconds so far (/proc/stat's idle and iowait),
 * -1 where unknown. Read with open/read into the stack: it runs between
 * steps, which allocate nothing. */
static double idle_seconds(void)
{
    char buf[256];
    unsigned long long v[5] = {0};
    long hz = sysconf(_SC_CLK_TCK);
    ssize_t n;
    int fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return -1;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0 || hz <= 0)
        return -1;
    buf[n] = '\0';
    /* cpu user nice system idle iowait ... */
    if (sscanf(buf, "cpu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4]) != 5)
        return -1;
    return (double)(v[3] + v[4]) / (double)hz;
}

int bfit_run_threads_start(bfit_run *r)
{
    bfit_device_info di;
    int rc;

    r->tg_on = 0;
    if (!r->cfg.threads_auto && !r->cfg.pack)
        return BFIT_OK;
    memset(&di, 0, sizeof di);
    bfit_device_info_get(r->s.dev, &di);
    if (di.threads < 2) /* a GPU (0), or one core: nothing to choose */
        return BFIT_OK;
    if (!r->cfg.threads_auto && di.cpus < 2) /* one CPU, or libgomp places the threads: no packing */
        return BFIT_OK;
    /* the count explicit from now on, set around every device call */
    if ((rc = bfit_device_set_threads(r->s.dev, di.threads, 0)) != BFIT_OK)
        return rc;
    bfit_tgov_init(&r->tg, di.threads, di.cpus, bfit_clock_mono(), bfit_clock_process_cpu(), idle_seconds());
    if (!r->cfg.threads_auto)
        bfit_tgov_keep_count(&r->tg);
    else if (!r->cfg.pack)
        bfit_tgov_no_pack(&r->tg); /* auto, spread: the count is the only thing to change */
    r->tg_force_at = bfit_test_value(BFIT_TC_THREADS_AT);
    r->tg_pack_at = bfit_test_value(BFIT_TC_THREADS_PACK_AT);
    r->tg_on = 1;
    return BFIT_OK;
}

/* The tests' forced change at this step, if any (BFIT_TEST_THREADS_AT:
 * half the threads, unless the count stays; BFIT_TEST_THREADS_PACK_AT:
 * packed; from either back to the top). */
static int forced(bfit_run *r, bfit_tgov_set *t)
{
    bfit_tgov *g = &r->tg;
    int top = bfit_tgov_same(g->cur, bfit_tgov_top(g)), half = r->tg_force_at && r->pos.step == r->tg_force_at;
    char name[48];

    if (half && top && g->keep_count)
        half = 0;

    if (!half && !(r->tg_pack_at && r->pos.step == r->tg_pack_at && (g->can_pack || !top)))
        return 0;
    *t = !top ? bfit_tgov_top(g) : half ? bfit_tgov_halved(g) : bfit_tgov_packed(g);
    bfit_tgov_name(g, *t, name, sizeof name);
    g->state = BFIT_TGOV_SETTLED;
    snprintf(g->why, sizeof g->why, "a test asked for %s", name);
    return 1;
}

/* Run on setting t from now: the device's threads (the ops made again for
 * a new count: oneDNN splits a primitive's work, and sizes its scratch, for
 * it) and CPUs. A packing the system refuses leaves things as they were. */
static int change(bfit_run *r, bfit_tgov_set t, double now, double cpu, double idle)
{
    bfit_tgov *g = &r->tg;
    int rc = bfit_device_set_threads(r->s.dev, t.threads, t.cpus < g->top_cpus ? t.cpus : 0);

    if (rc != BFIT_OK && t.threads == g->cur.threads) {
        snprintf(g->why, sizeof g->why, "cannot move the threads (%s): they stay", bfit_errmsg());
        bfit_tgov_no_pack(g);
        return BFIT_OK;
    }
    if (rc != BFIT_OK)
        return rc;
    if (t.threads != g->cur.threads) {
        bfit_model_forget_ops(r->s.M);
        memset(r->pc.memo_m, 0, sizeof r->pc.memo_m);
    }
    bfit_tgov_changed(g, t, now, cpu, idle);
    return BFIT_OK;
}

int bfit_run_threads_step(bfit_run *r, double secs, int64_t samples)
{
    double now, cpu, idle;
    bfit_tgov_set from = r->tg.cur, t;
    int rc, need;

    if (!r->tg_on)
        return BFIT_OK;
    now = bfit_clock_mono();
    /* a getrusage and a read of /proc/stat only where a window starts or
     * closes (a change made at any other step starts by skipping one) */
    need = bfit_tgov_needs_readings(&r->tg, now);
    cpu = need ? bfit_clock_process_cpu() : 0;
    idle = need ? idle_seconds() : -1;
    if (r->tg_force_at || r->tg_pack_at) { /* a test's changes only, the same in every run */
        t = r->tg.cur;
        r->tg.why[0] = '\0';
        forced(r, &t);
    } else
        t = bfit_tgov_step(&r->tg, secs, samples, now, cpu, idle);
    if (!r->tg.why[0])
        return BFIT_OK;
    if (!bfit_tgov_same(t, from) && (rc = change(r, t, now, cpu, idle)) != BFIT_OK)
        return rc;
    bfit_log_event(&r->lg, "threads", "\"step\":%lld,\"threads\":%d,\"cpus\":%d,\"was\":%d,\"was_cpus\":%d,"
                   "\"samples_per_s\":%.6g,\"cpu_use\":%.4f,\"why\":\"%s\"", (long long)r->pos.step, r->tg.cur.threads,
                   r->tg.cur.cpus, from.threads, from.cpus, r->tg.last_rate, r->tg.last_busy, r->tg.why);
    bfit_log_say(&r->lg, "batchfit: step %lld: %s", (long long)r->pos.step, r->tg.why);
    return BFIT_OK;
}
