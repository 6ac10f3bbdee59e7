/* layer_gather.c - the rows of a sequence [T, C] that the loss scores,
 * [K, C]: a masked LM's head (BERT's transform and decoder) then runs on
 * its masked tokens only, not on the 85% whose scores nothing reads. The
 * rows a sample takes come with its labels (args.rows, the host's
 * compaction in exec.c); a sample with fewer than K takes rows of zeros,
 * whose labels are padding. Inserted by bfit_graph_gather_head, never
 * written in a spec. */
#include "base/err.h"
#include "nn/layer.h"

#include <stdio.h>

enum { OP_FWD, OP_BWD };

/* K rows, at most T of them (a micro-batch trimmed to a short length). */
static int gather_init(bfit_layer *l, char *err, size_t errlen)
{
    const bfit_shape *x = &l->in[0];
    char a[48];
    if (x->nd != 2 || l->cfg.units < 1) {
        snprintf(err, errlen, "gather takes %d rows of tokens [T, C], got %s", l->cfg.units,
                 bfit_shape_str(*x, a, sizeof a));
        return BFIT_EINVAL;
    }
    l->out = bfit_shape_seq(l->cfg.units < x->d[0] ? l->cfg.units : x->d[0], x->d[1]);
    return BFIT_OK;
}

static int gather_prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    bfit_op_desc d = {.kind = BFIT_OP_GATHER_FWD, .dtype = l->dtype};
    d.u.gat.n = m;
    d.u.gat.T = l->in[0].d[0];
    d.u.gat.K = l->out.d[0];
    d.u.gat.C = l->in[0].d[1];
    return bfit_layer_op_pair(l, &d, BFIT_OP_GATHER_BWD, training, need);
}

static int gather_fwd(bfit_layer *l, const bfit_fwd_args *a)
{
    bfit_op_args o = {0};
    if (!a->rows)
        return bfit_fail(BFIT_ESTATE, "gather: the model has no rows for it (labels not given)");
    o.src = a->x[0];
    o.dst = a->y;
    o.rows = a->rows;
    return bfit_op_run(l->ops[OP_FWD], &o);
}

static int gather_bwd(bfit_layer *l, const bfit_bwd_args *a)
{
    bfit_op_args o = {0};
    if (!a->dx[0])
        return BFIT_OK;
    o.diff_dst = a->dy;
    o.diff_src = a->dx[0];
    o.rows = a->rows;
    return bfit_op_run(l->ops[OP_BWD], &o);
}

const bfit_layer_vt bfit_gather_vt = {
    .kind = BFIT_L_GATHER, .nin = 1, .modes = BFIT_MODE(BFIT_MODE_NONE), .init = gather_init,
    .prepare = gather_prepare, .forward = gather_fwd, .backward = gather_bwd,
};
