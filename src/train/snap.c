/* snap.c - stopping a run and going back to a step boundary. The state
 * at each step's start is kept (on the host: the counters, the
 * controller's state, the stream's cursor, the running statistics), so a
 * step abandoned before its update (a stop request, memory that did not
 * come back) leaves the run exactly where it was; a checkpoint writes the
 * same snapshot (ckpt.c). */
#include "base/err.h"
#include "train/run_int.h"

#include <string.h>

/* A stop was asked for (bfit_run_request_stop, or cfg.stop set by a signal
 * handler): the step in progress is abandoned at its next micro-step. */
int bfit_run_stop_requested(bfit_run *r)
{
    return atomic_load_explicit(&r->stop_req, memory_order_relaxed) || (r->cfg.stop && *r->cfg.stop);
}

void bfit_run_request_stop(bfit_run *r)
{
    if (r)
        atomic_store(&r->stop_req, 1);
}

/* The running statistics (parameters that are not trained: batch norm's)
 * to (up 0) or from (up 1) the host snapshot: a forward in training mode
 * moves them, so an abandoned step must put them back. */
static int stats_io(bfit_run *r, int up)
{
    uint64_t off = 0;
    int rc = BFIT_OK;
    for (int i = 0; i < r->s.M->nparams && rc == BFIT_OK; i++) {
        bfit_param *p = r->s.M->params[i];
        size_t n = bfit_param_bytes(p);
        if (p->trainable)
            continue;
        rc = up ? bfit_device_upload(r->s.dev, p->data, (char *)r->stats_snap + off, n)
                : bfit_device_download(r->s.dev, (char *)r->stats_snap + off, p->data, n);
        off += n;
    }
    return rc;
}

/* The run's state at a step boundary: its position whole, the controller's
 * state, the stream's cursor, the optimizer's step count. */
void bfit_run_snap_take(bfit_run *r, run_snap *s)
{
    memset(s, 0, sizeof *s);
    s->pos = r->pos;
    s->per_epoch = r->per_epoch;
    bfit_controller_state_get(r->ctl, &s->ctl);
    if (r->tr.s) {
        bfit_cursor c = bfit_stream_tell(r->tr.s);
        s->cursor_epoch = c.epoch;
        s->cursor_pos = c.pos;
    }
    s->optim_steps = bfit_optim_steps(r->opt);
}

/* The snapshot at a step's start: the state and the running statistics. */
int bfit_run_snap_step(bfit_run *r)
{
    bfit_run_snap_take(r, &r->snap);
    return r->stats_bytes ? stats_io(r, 0) : BFIT_OK;
}

/* Back to the step's start: nothing of the abandoned step remains. The
 * memory schedule is applied between steps only, so the snapshot's nmem is
 * the run's still. */
int bfit_run_rollback(bfit_run *r)
{
    const run_snap *s = &r->snap;
    int dirty = r->track && r->track_dirty;
    int rc = bfit_model_zero_grads(r->s.M);
    if (rc == BFIT_OK && dirty)
        rc = bfit_gradnorm_track_reset(r->gn);
    if (rc == BFIT_OK && r->stats_bytes)
        rc = stats_io(r, 1);
    if (rc == BFIT_OK)
        rc = bfit_controller_state_set(r->ctl, &s->ctl);
    if (rc == BFIT_OK && r->tr.s) {
        bfit_cursor c = {s->cursor_epoch, s->cursor_pos};
        rc = bfit_stream_seek(r->tr.s, c);
    }
    if (rc != BFIT_OK)
        return rc;
    r->pos = s->pos;
    /* the step's micro-steps changed the noise scale's copy of the last
     * gradient (now reset): it no longer holds the last step's gradient,
     * whatever it did at the snapshot */
    if (dirty)
        r->pos.track_stale = 1;
    bfit_model_unreserve(r->s.M);
    return BFIT_OK;
}
