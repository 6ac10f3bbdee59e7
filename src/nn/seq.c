/* seq.c - a token model's sequence length, and the state prepared at each
 * length kept for when the model comes back to it.
 *
 * A run with --seq-max moves between lengths every step (each micro-batch at
 * its longest sequence, rounded to 16). Reshaping the layers drops their
 * ops, and the next reserve would lay the step out and create the ops again:
 * heap calls, and oneDNN primitives made anew, in every step. So a length's
 * state moves into a slot when the model leaves it and back when the model
 * returns: the layers' shapes and ops, the nodes' accumulation ops and the
 * step's layout. After each length has been seen once, a change of length
 * allocates nothing (test_noalloc). Ownership moves with the state: what is
 * in a slot is in no layer, so nothing is freed twice. */
#include "base/err.h"
#include "nn/model.h"

#include <stdlib.h>
#include <string.h>

/* The trainer's lengths are multiples of 16 up to --seq-max, and --seq-max,
 * each with a few micro-batch sizes (a token budget's steps take varying
 * counts of sequences, rounded to size classes): 128 slots. Past that the
 * least recently used goes. */
#define SEQ_SLOTS 128

static void slot_drop(bfit_model *M, bfit_seq_slot *s)
{
    for (int i = 0; s->nodes && i < M->n; i++) {
        for (int k = 0; k < BFIT_LAYER_MAXOPS; k++)
            bfit_op_free(s->nodes[i].ops[k]);
        bfit_op_free(s->nodes[i].acc);
        memset(&s->nodes[i], 0, sizeof s->nodes[i]);
    }
    bfit_layout_fini(&s->lay);
    s->T = 0;
    s->m = 0;
}

void bfit_model_seq_forget(bfit_model *M)
{
    for (int i = 0; M->seq && i < M->nseq; i++) {
        slot_drop(M, &M->seq[i]);
        free(M->seq[i].nodes);
        M->seq[i].nodes = NULL;
    }
}

/* The state kept at length T, the most recently used if several (one per
 * micro-batch size); with m > 0 only the one laid out for (m, training). */
static bfit_seq_slot *find(bfit_model *M, int T, int m, int training)
{
    bfit_seq_slot *s = NULL;
    for (int i = 0; i < M->nseq; i++) {
        bfit_seq_slot *q = &M->seq[i];
        if (q->T == T && (!m || (q->m == m && q->training == training)) && (!s || q->used > s->used))
            s = q;
    }
    return s;
}

/* An empty slot (one whose node array is made, if any), else the least
 * recently used, emptied. */
static int take(bfit_model *M, bfit_seq_slot **out)
{
    bfit_seq_slot *s = NULL;
    for (int i = 0; i < M->nseq; i++)
        if (!M->seq[i].T && (!s || (M->seq[i].nodes && !s->nodes)))
            s = &M->seq[i];
    if (!s) {
        s = &M->seq[0];
        for (int i = 1; i < M->nseq; i++)
            if (M->seq[i].used < s->used)
                s = &M->seq[i];
        slot_drop(M, s);
    }
    if (!s->nodes && !(s->nodes = calloc((size_t)M->n, sizeof *s->nodes)))
        return bfit_fail(BFIT_ENOMEM, "model: out of host memory for the state at a sequence length");
    *out = s;
    return BFIT_OK;
}

/* The model's state at its current length into a slot. */
static int stash(bfit_model *M)
{
    bfit_seq_slot *s = NULL;
    int rc = take(M, &s);
    if (rc != BFIT_OK)
        return rc;
    for (int i = 0; i < M->n; i++) {
        bfit_layer *l = M->nodes[i].l;
        bfit_seq_node *q = &s->nodes[i];
        memcpy(q->in, l->in, sizeof q->in);
        q->out = l->out;
        q->prep_m = l->prep_m;
        q->prep_training = l->prep_training;
        q->prep_mode = l->prep_mode;
        q->need = l->need;
        memcpy(q->ops, l->ops, sizeof q->ops);
        memset(l->ops, 0, sizeof l->ops);
        l->prep_m = 0;
        q->acc = M->nodes[i].acc;
        M->nodes[i].acc = NULL;
    }
    s->T = M->input.d[0];
    s->used = ++M->seq_tick;
    s->m = M->m;
    s->training = M->training;
    s->lay = M->lay; /* an empty layout when nothing was reserved (M->m 0) */
    memset(&M->lay, 0, sizeof M->lay);
    M->m = 0;
    return BFIT_OK;
}

/* A slot's state back into the model; the step only if the blocks held
 * still fit it (they may have been released or taken smaller since). */
static void restore(bfit_model *M, bfit_seq_slot *s)
{
    for (int i = 0; i < M->n; i++) {
        bfit_layer *l = M->nodes[i].l;
        bfit_seq_node *q = &s->nodes[i];
        for (int k = 0; k < BFIT_LAYER_MAXOPS; k++)
            bfit_op_free(l->ops[k]); /* none, unless the model was reshaped in between */
        memcpy(l->in, q->in, sizeof q->in);
        l->out = q->out;
        l->prep_m = q->prep_m;
        l->prep_training = q->prep_training;
        l->prep_mode = q->prep_mode;
        l->need = q->need;
        memcpy(l->ops, q->ops, sizeof l->ops);
        memset(q->ops, 0, sizeof q->ops);
        bfit_op_free(M->nodes[i].acc);
        M->nodes[i].acc = q->acc;
        q->acc = NULL;
    }
    M->input = bfit_shape_seq(s->T, 1);
    if (M->per_token) /* a classifier's label is the sequence's */
        M->labels_per_sample = s->T;
    bfit_layout_fini(&M->lay);
    if (s->m && bfit_model_blocks_fit(M, &s->lay)) {
        M->lay = s->lay;
        memset(&s->lay, 0, sizeof s->lay);
        M->m = s->m;
        M->training = s->training;
    } else {
        bfit_layout_fini(&s->lay);
        M->m = 0;
    }
    s->T = 0;
    s->m = 0;
}

/* Every layer's input shapes again from a token input of T. */
static int reshape_all(bfit_model *M, int T, bfit_shape *val)
{
    char err[512];
    val[0] = bfit_shape_seq(T, 1);
    for (int i = 0; i < M->n; i++) {
        bfit_layer *L = M->nodes[i].l;
        bfit_shape in[BFIT_LAYER_MAXIN];
        int rc;
        for (int k = 0; k < L->nin; k++)
            in[k] = val[M->nodes[i].in[k]];
        if ((rc = bfit_layer_reshape(L, in, err, sizeof err)) != BFIT_OK)
            return bfit_fail(rc, "%d tokens: layer %d (%s): %s", T, i + 1, bfit_layer_kind_name(L->cfg.kind), err);
        val[i + 1] = L->out;
    }
    return BFIT_OK;
}

int bfit_model_set_seq(bfit_model *M, int T)
{
    bfit_seq_slot *s;
    int old, rc;

    if (M->input_dtype != BFIT_I32)
        return bfit_fail_field(BFIT_EINVAL, "seq", "applies to token models; this model's input is not token ids");
    old = M->input.d[0];
    if (T == old)
        return BFIT_OK;
    if (T < 1)
        return bfit_fail_field(BFIT_EINVAL, "seq", "must be at least 1, got %d", T);
    if (!M->seq) {
        M->seq = calloc(SEQ_SLOTS, sizeof *M->seq);
        M->seq_val = malloc(sizeof *M->seq_val * ((size_t)M->n + 1));
        if (!M->seq || !M->seq_val) {
            free(M->seq), free(M->seq_val);
            M->seq = NULL, M->seq_val = NULL;
            return bfit_fail(BFIT_ENOMEM, "model: out of host memory");
        }
        M->nseq = SEQ_SLOTS;
    }
    if ((rc = stash(M)) != BFIT_OK)
        return rc;
    if ((s = find(M, T, 0, 0))) {
        restore(M, s);
        return BFIT_OK;
    }
    rc = reshape_all(M, T, M->seq_val);
    if (rc != BFIT_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", bfit_errmsg());
        restore(M, find(M, old, 0, 0)); /* as it was, ops and step included */
        return bfit_fail_field(rc, "seq", "%s", msg);
    }
    M->input = M->seq_val[0];
    if (M->per_token) /* a classifier's label is the sequence's, whatever its length */
        M->labels_per_sample = T;
    M->m = 0; /* the next reserve lays the step out at T, in the blocks held if they fit */
    return BFIT_OK;
}

int bfit_model_seq_reserve(bfit_model *M, int m, int training)
{
    bfit_seq_slot *s;
    if (!M->seq)
        return 0;
    if (!(s = find(M, M->input.d[0], m, training)) || !bfit_model_blocks_fit(M, &s->lay)) {
        /* the step laid out now is kept for when this size comes back */
        if (M->m)
            stash(M);
        return 0;
    }
    s->used = ++M->seq_tick; /* not the one stash makes room in */
    if (stash(M) != BFIT_OK) /* nothing moved: lay out anew */
        return 0;
    restore(M, s);
    return M->m == m && M->training == training;
}
