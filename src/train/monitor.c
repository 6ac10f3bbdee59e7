/* monitor.c - the device as a person watching `nvidia-smi dmon` or `top`
 * would see it, in the run's log: a "monitor" event at the first step
 * boundary past every cfg.monitor_seconds (10 s by default), and at the
 * start and the end. On a GPU: how busy it was (NVML's utilization over its
 * last sample period), this process's and the other processes' memory,
 * the SM clock, power and temperature, and the reasons the clocks are held
 * down (power cap, heat); on the CPU: this process's CPU use and resident
 * memory. So a run's report shows whether the device was busy, shared or
 * throttled when the batch changed. A sample is a handful of driver (or
 * /proc) queries: it never waits for the device's queued work, and it uses
 * the real clock, not base/clock.h's, since no decision reads it. */
#include "base/err.h"
#include "base/text.h"
#include "train/run_int.h"

#include <stdio.h>
#include <string.h>
#include <time.h>


static double real_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* the sample's fields that the device gave, as the inside of a JSON object */
static void sample_json(const bfit_device_sample *s, char *buf, size_t n)
{
    size_t len = 0;
    char esc[200];
#define PUT(...) (len += len < n ? (size_t)snprintf(buf + len, n - len, __VA_ARGS__) : 0)
    if (s->have & BFIT_SAMPLE_BUSY)
        PUT(",\"busy\":%.1f", s->busy);
    if (s->have & BFIT_SAMPLE_MEM_BUSY)
        PUT(",\"mem_busy\":%.1f", s->mem_busy);
    if (s->have & BFIT_SAMPLE_SELF)
        PUT(",\"self_bytes\":%llu", (unsigned long long)s->self_bytes);
    if (s->have & BFIT_SAMPLE_OTHERS)
        PUT(",\"others_bytes\":%llu,\"others\":%d", (unsigned long long)s->others_bytes, s->others);
    if (s->have & BFIT_SAMPLE_FREE)
        PUT(",\"free_bytes\":%llu,\"total_bytes\":%llu", (unsigned long long)s->free_bytes,
            (unsigned long long)s->total_bytes);
    if (s->have & BFIT_SAMPLE_THROTTLE) {
        bfit_json_escape(s->throttle_text, esc, sizeof esc);
        PUT(",\"throttle\":%llu,\"throttled\":\"%s\"", s->throttle, esc);
    }
    if (s->have & BFIT_SAMPLE_CLOCK)
        PUT(",\"sm_mhz\":%.0f", s->sm_mhz);
    if (s->have & BFIT_SAMPLE_POWER)
        PUT(",\"power_w\":%.1f,\"power_limit_w\":%.1f", s->power_w, s->power_limit_w);
    if (s->have & BFIT_SAMPLE_TEMP)
        PUT(",\"temp_c\":%.0f", s->temp_c);
#undef PUT
}

void bfit_run_monitor(bfit_run *r, int force)
{
    double every = r->cfg.monitor_seconds, now = real_seconds();
    bfit_device_sample s;
    char fields[1024];

    if (r->cfg.monitor_seconds <= 0 || !r->log_open || (!force && r->mon_t > 0 && now - r->mon_t < every))
        return;
    r->mon_t = now;
    if (bfit_device_sample_get(r->s.dev, &s) != BFIT_OK || !s.have) {
        bfit_clear_error(); /* a device that cannot say: no event, no failure */
        return;
    }
    sample_json(&s, fields, sizeof fields);
    bfit_log_event(&r->lg, "monitor", "\"step\":%lld,\"device\":\"%s\"%s", (long long)r->pos.step,
                   bfit_device_name(r->s.dev), fields);
    if ((s.have & BFIT_SAMPLE_THROTTLE) && strcmp(s.throttle_text, r->mon_throttle) != 0) {
        if (s.throttle_text[0])
            bfit_log_say(&r->lg, "batchfit: step %lld: %s runs slowed down: %s", (long long)r->pos.step,
                         bfit_device_name(r->s.dev), s.throttle_text);
        else if (r->mon_throttle[0])
            bfit_log_say(&r->lg, "batchfit: step %lld: %s no longer slowed down", (long long)r->pos.step,
                         bfit_device_name(r->s.dev));
        snprintf(r->mon_throttle, sizeof r->mon_throttle, "%s", s.throttle_text);
    }
}
