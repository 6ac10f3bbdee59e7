/* cpu_pin.c - --threads auto's packing: the CPU device's team of threads
 * placed on fewer CPUs than it has threads. Beside busy processes, threads
 * that meet at every barrier on CPUs of their own wait for a sibling the
 * kernel took off its CPU; on shared CPUs the kernel runs the one they wait
 * for as soon as they sleep, and its balancer moves the other processes to
 * the rest (docs/performance.md, "Packing the threads"). The placement is
 * each thread's own (sched_setaffinity on the calling thread), so it is
 * made in a parallel region of the team, and undone the same way: when the
 * threads spread again, and when the device is destroyed. */
#include "base/err.h"
#include "device/cpu.h"

#include <errno.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* libgomp places its threads itself when asked to (OMP_PROC_BIND, or
 * OMP_PLACES or GOMP_CPU_AFFINITY, which imply it): ours would fight it. */
static int gomp_binds(void)
{
    const char *e = getenv("OMP_PROC_BIND");
    if (e && *e)
        return strcasecmp(e, "false") != 0;
    return (getenv("OMP_PLACES") && *getenv("OMP_PLACES")) || (getenv("GOMP_CPU_AFFINITY") && *getenv("GOMP_CPU_AFFINITY"));
}

static int remember_allowed(cpu_device *d)
{
    if (d->have_allowed)
        return BFIT_OK;
    CPU_ZERO(&d->allowed);
    if (sched_getaffinity(0, sizeof d->allowed, &d->allowed) != 0)
        return bfit_fail(BFIT_EDEVICE, "cpu: cannot read the CPUs this thread may run on (%s)", strerror(errno));
    d->have_allowed = 1;
    return BFIT_OK;
}

int bfit_cpu_allowed(cpu_device *d)
{
    if (gomp_binds() || remember_allowed(d) != BFIT_OK)
        return 0;
    return CPU_COUNT(&d->allowed);
}

/* Each of a team of n sets its own CPUs to *set; 0, or an errno of one
 * that failed. */
static int place_team(int n, const cpu_set_t *set)
{
    int err = 0;
#pragma omp parallel num_threads(n) reduction(max : err)
    err = sched_setaffinity(0, sizeof *set, set) != 0 ? errno : 0;
    return err;
}

/* k of the allowed CPUs: first those the team's threads run on now (the
 * balancer has already moved other work off them; two packed runs then
 * keep apart), then the lowest numbered. */
static void choose(const cpu_device *d, int threads, int k, cpu_set_t *out)
{
    int on[256], got = 0, nt = threads < 256 ? threads : 256;

#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num();
        if (t < nt)
            on[t] = sched_getcpu();
    }
    CPU_ZERO(out);
    for (int t = 0; t < nt && got < k; t++)
        if (on[t] >= 0 && on[t] < CPU_SETSIZE && CPU_ISSET(on[t], &d->allowed) && !CPU_ISSET(on[t], out)) {
            CPU_SET(on[t], out);
            got++;
        }
    for (int c = 0; c < CPU_SETSIZE && got < k; c++)
        if (CPU_ISSET(c, &d->allowed) && !CPU_ISSET(c, out)) {
            CPU_SET(c, out);
            got++;
        }
}

int bfit_cpu_pin(cpu_device *d, int threads, int cpus)
{
    cpu_set_t set;
    int rc, n, err;

    if (cpus <= 0) {
        if (!d->pin_cpus)
            return BFIT_OK;
        /* every thread placed, and the caller's (thread 0 of the team) */
        n = d->pin_team > threads ? d->pin_team : threads;
        d->pin_cpus = 0;
        if ((err = place_team(n, &d->allowed)) != 0)
            return bfit_fail(BFIT_EDEVICE, "cpu: cannot let the threads run on all their CPUs again (%s)",
                             strerror(err));
        return BFIT_OK;
    }
    if (gomp_binds())
        return bfit_fail(BFIT_EINVAL, "cpu: OMP_PROC_BIND is set, so libgomp places the threads; batchfit does not "
                                      "pack them");
    if ((rc = remember_allowed(d)) != BFIT_OK)
        return rc;
    n = CPU_COUNT(&d->allowed);
    if (cpus >= n)
        return bfit_cpu_pin(d, threads, 0);
    choose(d, threads, cpus, &set);
    d->pin_cpus = cpus;
    d->pin_team = threads > d->pin_team ? threads : d->pin_team;
    if ((err = place_team(threads, &set)) != 0) {
        bfit_cpu_pin(d, threads, 0);
        return bfit_fail(BFIT_EDEVICE, "cpu: cannot place the threads on %d CPU%s (%s)", cpus, cpus == 1 ? "" : "s",
                         strerror(err));
    }
    return BFIT_OK;
}
