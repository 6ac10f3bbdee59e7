/* memsched.c - the memory a run may use, as it changes while it trains:
 * the memory schedule (another tenant taking or returning memory,
 * simulated, at given steps), the free memory of a device shared with
 * other processes (read every step), and what counts as free for a step.
 * The controller learns of a change from the next step it observes. */
#include "base/text.h"
#include "train/run_int.h"

/* The step's blocks held now count as free: any m may take them. */
uint64_t bfit_run_free_for_step(const bfit_run *r)
{
    return bfit_arena_available(r->s.arena) + bfit_model_step_bytes(r->s.M);
}

/* Tell the controller what memory there is now (it learns it otherwise
 * only from a step it observed). */
void bfit_run_memory_now(bfit_run *r)
{
    bfit_controller_set_memory(r->ctl, bfit_arena_capacity(r->s.arena), bfit_run_free_for_step(r));
}

/* Apply the memory schedule's changes due by step `upto` (another tenant
 * taking or returning memory, simulated). The step's blocks are handed back
 * on a change, so the next reservation is made under the new capacity. */
int bfit_run_apply_memory_schedule(bfit_run *r, int64_t upto)
{
    const bfit_train_cfg *c = &r->cfg;
    int changed = 0;
    char s1[32];
    for (; r->pos.nmem < c->nmemory_schedule && c->memory_schedule[r->pos.nmem].step <= upto; r->pos.nmem++) {
        uint64_t cap = c->memory_schedule[r->pos.nmem].capacity;
        bfit_arena_set_capacity(r->s.arena, cap);
        changed = 1;
        bfit_log_event(&r->lg, "memory", "\"step\":%lld,\"capacity\":%llu", (long long)upto, (unsigned long long)cap);
        bfit_log_say(&r->lg, "batchfit: step %lld: device capacity is now %s", (long long)upto,
                     bfit_format_size(cap, s1, sizeof s1));
    }
    if (changed) {
        r->configured = bfit_arena_capacity(r->s.arena);
        bfit_model_unreserve(r->s.M);
    }
    return changed;
}

/* Changes of the device's free memory smaller than this are not followed:
 * a GPU's free memory moves by a few MiB with its own bookkeeping. */
#define WATCH_STEP (16ull << 20)

/* On a device shared with other processes, the capacity in force is no more
 * than this process holds plus what the device has free now, read every
 * step: another process taking memory makes the controller shrink the
 * micro-batch before an allocation fails, and giving it back lets it grow.
 * The CPU under an address-space limit is read the same way: the host
 * buffers, the data and oneDNN's kernels take room under the limit that the
 * capacity read at the start still counted. */
void bfit_run_watch_device(bfit_run *r)
{
    bfit_device_info di;
    uint64_t free_b, room, cap, now;
    char s1[32], s2[32];

    bfit_device_info_get(r->s.dev, &di);
    if (!(di.shared || di.limited) || bfit_device_room(r->s.dev, r->s.arena, &room, &free_b) != BFIT_OK)
        return;
    cap = room < r->configured ? room : r->configured;
    now = bfit_arena_capacity(r->s.arena);
    if (cap == now || (cap > now ? cap - now : now - cap) < WATCH_STEP)
        return;
    bfit_arena_set_capacity(r->s.arena, cap);
    bfit_log_event(&r->lg, "memory", "\"step\":%lld,\"capacity\":%llu,\"device_free\":%llu,\"source\":\"device\"",
                   (long long)r->pos.step, (unsigned long long)cap, (unsigned long long)free_b);
    bfit_log_say(&r->lg, "batchfit: step %lld: the device has %s free: capacity now %s", (long long)r->pos.step,
                 bfit_format_size(free_b, s1, sizeof s1), bfit_format_size(cap, s2, sizeof s2));
}
