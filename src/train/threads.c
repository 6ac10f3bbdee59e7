/* threads.c - --threads auto: the decisions (pure, threads.h), and the
 * run's side: the clocks they read, and a change of thread count made as a
 * change of micro-batch is, by making the ops again. */
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

void bfit_tgov_init(bfit_tgov *g, int max, double now, double cpu, double idle)
{
    memset(g, 0, sizeof *g);
    g->max = g->cur = max < 1 ? 1 : max;
    g->wait_down = g->wait_up = BFIT_TGOV_WAIT_S;
    g->skip = 1; /* the first step makes the ops */
    window_start(g, now, cpu, idle);
}

void bfit_tgov_changed(bfit_tgov *g, int t, double now, double cpu, double idle)
{
    g->cur = t;
    g->changes++;
    g->skip = 1;
    window_start(g, now, cpu, idle);
}

static int try_count(bfit_tgov *g, int to, double rate)
{
    g->state = BFIT_TGOV_TRYING;
    g->from = g->cur;
    g->from_rate = rate;
    return to;
}

/* A try's window is over: keep it, or go back (and wait longer before the
 * next try that way). */
static int judge(bfit_tgov *g, double rate, double now)
{
    int down = g->cur < g->from;
    g->state = BFIT_TGOV_SETTLED;
    if (rate > g->from_rate * BFIT_TGOV_GAIN) {
        snprintf(g->why, sizeof g->why, "%d thread%s trained %.4g samples/s against %.4g on %d: kept", g->cur,
                 g->cur == 1 ? "" : "s", rate, g->from_rate, g->from);
        if (down)
            g->next_up = now + g->wait_up;
        else {
            g->wait_up = BFIT_TGOV_WAIT_S;
            g->next_down = now + g->wait_down;
        }
        return g->cur;
    }
    snprintf(g->why, sizeof g->why, "%d thread%s trained %.4g samples/s against %.4g on %d: back to %d", g->cur,
             g->cur == 1 ? "" : "s", rate, g->from_rate, g->from, g->from);
    if (down) {
        g->wait_down = g->wait_down * 2 < BFIT_TGOV_WAIT_MAX_S ? g->wait_down * 2 : BFIT_TGOV_WAIT_MAX_S;
        g->next_down = now + g->wait_down;
    } else {
        if (g->up_idle)
            g->idle_lied = 1; /* idle cores that were not ours to have: time alone decides from now */
        g->wait_up = g->wait_up * 2 < BFIT_TGOV_WAIT_MAX_S ? g->wait_up * 2 : BFIT_TGOV_WAIT_MAX_S;
        g->next_up = now + g->wait_up;
    }
    return g->from;
}

int bfit_tgov_needs_readings(const bfit_tgov *g, double now)
{
    return g->max > 1 && (g->skip > 0 || (g->steps + 1 >= BFIT_TGOV_WINDOW_STEPS && now - g->t0 >= BFIT_TGOV_WINDOW_S));
}

int bfit_tgov_step(bfit_tgov *g, double secs, int64_t samples, double now, double cpu, double idle)
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
    busy = (cpu - g->cpu0) / ((now - g->t0) * g->cur);
    free_cores = idle >= 0 && g->idle0 >= 0 ? (idle - g->idle0) / (now - g->t0) : -1;
    g->last_rate = rate;
    g->last_busy = busy;
    window_start(g, now, cpu, idle);
    if (g->state == BFIT_TGOV_TRYING)
        return judge(g, rate, now);
    if (g->cur == g->max && busy < BFIT_TGOV_BUSY && now >= g->next_down) {
        int to = g->max / 2;
        snprintf(g->why, sizeof g->why, "%d threads got %.0f%% of their cores (%.4g samples/s): trying %d", g->cur,
                 100 * busy, rate, to);
        return try_count(g, to, rate);
    }
    if (g->cur < g->max) {
        g->up_idle = !g->idle_lied && free_cores >= 0.75 * (g->max - g->cur);
        if (g->up_idle || now >= g->next_up) {
            snprintf(g->why, sizeof g->why, "%s (%d thread%s at %.4g samples/s): trying %d",
                     g->up_idle ? "cores came free" : "time to try again", g->cur, g->cur == 1 ? "" : "s", rate,
                     g->max);
            return try_count(g, g->max, rate);
        }
    }
    return g->cur;
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
    if (!r->cfg.threads_auto)
        return BFIT_OK;
    memset(&di, 0, sizeof di);
    bfit_device_info_get(r->s.dev, &di);
    if (di.threads < 2) /* a GPU (0), or one core: nothing to choose */
        return BFIT_OK;
    /* the count explicit from now on, set around every device call */
    if ((rc = bfit_device_set_threads(r->s.dev, di.threads)) != BFIT_OK)
        return rc;
    bfit_tgov_init(&r->tg, di.threads, bfit_clock_mono(), bfit_clock_process_cpu(), idle_seconds());
    r->tg_force_at = bfit_test_value(BFIT_TC_THREADS_AT);
    r->tg_on = 1;
    return BFIT_OK;
}

int bfit_run_threads_step(bfit_run *r, double secs, int64_t samples)
{
    double now, cpu, idle;
    int from = r->tg.cur, t, rc, need;

    if (!r->tg_on)
        return BFIT_OK;
    now = bfit_clock_mono();
    /* a getrusage and a read of /proc/stat only where a window starts or
     * closes (a change made at any other step starts by skipping one) */
    need = bfit_tgov_needs_readings(&r->tg, now);
    cpu = need ? bfit_clock_process_cpu() : 0;
    idle = need ? idle_seconds() : -1;
    t = bfit_tgov_step(&r->tg, secs, samples, now, cpu, idle);
    if (r->tg_force_at && r->pos.step == r->tg_force_at) {
        t = from == r->tg.max ? r->tg.max / 2 : r->tg.max;
        snprintf(r->tg.why, sizeof r->tg.why, "a test asked for %d thread%s", t, t == 1 ? "" : "s");
    }
    if (!r->tg.why[0])
        return BFIT_OK;
    if (t != from) {
        if ((rc = bfit_device_set_threads(r->s.dev, t)) != BFIT_OK)
            return rc;
        /* the ops were made for the old count: made again at the next
         * reserve, and the plan asked again (oneDNN's scratch is sized by it) */
        bfit_model_forget_ops(r->s.M);
        memset(r->pc.memo_m, 0, sizeof r->pc.memo_m);
        bfit_tgov_changed(&r->tg, t, now, cpu, idle);
    }
    bfit_log_event(&r->lg, "threads", "\"step\":%lld,\"threads\":%d,\"was\":%d,\"samples_per_s\":%.6g,"
                   "\"cpu_use\":%.4f,\"why\":\"%s\"", (long long)r->pos.step, r->tg.cur, from, r->tg.last_rate,
                   r->tg.last_busy, r->tg.why);
    bfit_log_say(&r->lg, "batchfit: step %lld: %s", (long long)r->pos.step, r->tg.why);
    return BFIT_OK;
}
