/* layout.c - the plan of a step's buffers: what is kept for backward, what
 * is regenerated, the schedule of actions, and where every buffer lives.
 *
 * Backward reads, for each layer, what its mode says: its inputs, its
 * output, or only its saved bytes (masks, indices, statistics). A value
 * that some backward reads is either kept from its forward until its last
 * read, or regenerated: its producer runs forward again, just before the
 * first backward that needs it, from inputs that are kept (or regenerated
 * first, recursively). So recomputation of a whole segment and the lean
 * regeneration of a relu's output from its kept input are the same thing.
 *
 * Every buffer has a lifetime on the schedule (action indices), and buffers
 * whose lifetimes do not overlap share bytes: greedy placement, largest
 * first, at the lowest offset clear of every overlapping buffer. A training
 * step's activations and activation gradients are placed together in one
 * block, so gradients take the bytes of activations that backward has
 * finished with (in ResNet-50 they then add almost nothing: 10% of the step);
 * the block's bytes are counted as the activations' own placement and what
 * the gradients add to it. */
#include "base/err.h"
#include "nn/model.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* A buffer with a lifetime [t0, t1] (inclusive) to be placed in a block. */
typedef struct lbuf {
    uint64_t size, off;
    int t0, t1;
    uint64_t *dst; /* where to write the offset */
} lbuf;

static int by_size_desc(const void *a, const void *b)
{
    const lbuf *x = a, *y = b;
    if (x->size != y->size)
        return x->size < y->size ? 1 : -1;
    return x->t0 - y->t0; /* deterministic */
}

/* Largest first, each at the lowest offset clear of every placed buffer
 * whose lifetime overlaps its own: a sweep of the placed ones in offset
 * order (ord[0..i), kept sorted as they are placed) to the first gap that
 * holds it. ord has room for n. */
static uint64_t place(lbuf *b, int n, int *ord)
{
    uint64_t total = 0;
    qsort(b, (size_t)n, sizeof *b, by_size_desc);
    for (int i = 0; i < n; i++) {
        uint64_t off = 0;
        int k;
        for (k = 0; k < i; k++) {
            const lbuf *o = &b[ord[k]];
            if (o->t1 < b[i].t0 || b[i].t1 < o->t0)
                continue;
            if (o->off >= off + b[i].size)
                break; /* this one and every later one start past the gap */
            if (o->off + o->size > off)
                off = o->off + o->size;
        }
        b[i].off = off;
        *b[i].dst = off;
        for (k = i; k > 0 && b[ord[k - 1]].off > off; k--)
            ord[k] = ord[k - 1];
        ord[k] = i;
        if (off + b[i].size > total)
            total = off + b[i].size;
    }
    return total;
}

void bfit_layout_fini(bfit_layout *lay)
{
    free(lay->act);
    free(lay->y_off);
    free(lay->r_off);
    free(lay->saved_off);
    free(lay->rsaved_off);
    free(lay->dy_off);
    free(lay->tmp_off);
    free(lay->tmp_input);
    free(lay->dx_add);
    memset(lay, 0, sizeof *lay);
}

static uint64_t value_bytes(const bfit_model *M, int v, int m)
{
    bfit_shape s = v == 0 ? M->input : M->nodes[v - 1].l->out;
    bfit_dtype t = v == 0 ? M->input_dtype : M->nodes[v - 1].l->out_dtype;
    return BFIT_ALIGN_UP((uint64_t)m * bfit_shape_numel(s) * bfit_dtype_size(t));
}

/* ---- the schedule ---------------------------------------------------------- */

typedef struct sched {
    bfit_model *M;
    bfit_layout *lay;
    unsigned char *done;   /* per value: regenerated already */
    int *bwd_at;           /* per node: the time of its backward, -1 none */
    int *regen_at;         /* per node: the time of its regeneration, -1 none */
    const bfit_layer_need *need;
    int *ord;              /* place()'s scratch, one per buffer */
} sched;

static void emit(sched *s, bfit_act_kind k, int node)
{
    bfit_layout *lay = s->lay;
    if (k == BFIT_ACT_BWD)
        s->bwd_at[node] = lay->nact;
    if (k == BFIT_ACT_REGEN)
        s->regen_at[node] = lay->nact;
    lay->act[lay->nact].kind = k;
    lay->act[lay->nact++].node = node;
}

/* Make value v readable in backward: regenerate it (and what it needs).
 * Its inputs are made readable earliest value first. A residual add's
 * earlier input is the shortcut: with lean regeneration a block output is
 * regenerated from the one before, a chain through the stage, and taking
 * the chain first lets each block's branch output (its last batch norm's)
 * die at its add, where the other order held every block's at once. */
static void ensure(sched *s, int v)
{
    const bfit_node *p;
    int done = 0, last = -1;
    if (v <= 0 || !s->M->regen[v] || s->done[v])
        return;
    p = &s->M->nodes[v - 1];
    while (done < p->l->nin) { /* ascending, duplicates once */
        int next = INT_MAX;
        for (int k = 0; k < p->l->nin; k++)
            if (p->in[k] > last && p->in[k] < next)
                next = p->in[k];
        for (int k = 0; k < p->l->nin; k++)
            done += p->in[k] == next;
        ensure(s, next);
        last = next;
    }
    emit(s, BFIT_ACT_REGEN, v - 1);
    s->done[v] = 1;
}

static void schedule(sched *s)
{
    bfit_model *M = s->M;
    for (int i = 0; i < M->n; i++)
        emit(s, BFIT_ACT_FWD, i);
    if (!s->lay->training)
        return;
    for (int i = M->n - 1; i >= 0; i--) {
        const bfit_layer *L = M->nodes[i].l;
        if (!M->needs_grad[i + 1])
            continue; /* no parameter here or upstream: nothing to compute */
        if (bfit_bwd_reads_input(L))
            for (int k = 0; k < L->nin; k++)
                ensure(s, M->nodes[i].in[k]);
        /* its own output, or its saved bytes from a regeneration rather than
         * kept from the forward; but a batch norm's saved bytes are its
         * statistics, a few per channel: they are kept from the forward
         * (the same bits) where a regeneration would write a whole output */
        if (bfit_bwd_reads_output(L) ||
            (M->regen[i + 1] && s->need[i].saved && L->cfg.kind != BFIT_L_BATCHNORM))
            ensure(s, i + 1);
        emit(s, BFIT_ACT_BWD, i);
    }
}

/* ---- lifetimes ------------------------------------------------------------- */

/* Activations-block buffers: A (forward output), B (regenerated output), S
 * (forward's saved), R (regeneration's saved), indexed per value / node. */
typedef struct life {
    int *a0, *a1, *b0, *b1, *s0, *s1, *r0, *r1;
} life;

static void touch(int *t1, int t)
{
    if (t > *t1)
        *t1 = t;
}

/* Where backward finds value v: its regenerated copy if it has one. */
static int *bwd_end(const sched *s, life *L, int v)
{
    return s->done[v] ? &L->b1[v] : &L->a1[v];
}

/* Each action's reads extend the lifetimes of what it reads. */
static void lifetimes(const sched *s, life *L)
{
    const bfit_model *M = s->M;
    const bfit_layout *lay = s->lay;
    for (int t = 0; t < lay->nact; t++) {
        int i = lay->act[t].node;
        const bfit_node *nd = &M->nodes[i];
        switch (lay->act[t].kind) {
        case BFIT_ACT_FWD:
            L->a0[i + 1] = L->a1[i + 1] = L->s0[i] = L->s1[i] = t;
            for (int k = 0; k < nd->l->nin; k++)
                touch(&L->a1[nd->in[k]], t);
            break;
        case BFIT_ACT_REGEN:
            L->b0[i + 1] = L->b1[i + 1] = L->r0[i] = L->r1[i] = t;
            for (int k = 0; k < nd->l->nin; k++)
                touch(bwd_end(s, L, nd->in[k]), t);
            break;
        case BFIT_ACT_BWD:
            if (bfit_bwd_reads_input(nd->l))
                for (int k = 0; k < nd->l->nin; k++)
                    touch(bwd_end(s, L, nd->in[k]), t);
            if (bfit_bwd_reads_output(nd->l))
                touch(bwd_end(s, L, i + 1), t);
            touch(s->done[i + 1] ? &L->r1[i] : &L->s1[i], t);
            break;
        }
    }
    /* the probabilities are read after the forward */
    L->a1[M->n] = lay->nact;
}

/* ---- placement ------------------------------------------------------------- */

static int lay_alloc(bfit_layout *lay, int n)
{
    lay->nvalues = n + 1;
    lay->act = malloc(sizeof *lay->act * (size_t)(3 * n + 1));
    lay->y_off = malloc(sizeof(uint64_t) * (size_t)(n + 1));
    lay->r_off = malloc(sizeof(uint64_t) * (size_t)(n + 1));
    lay->saved_off = malloc(sizeof(uint64_t) * (size_t)n);
    lay->rsaved_off = malloc(sizeof(uint64_t) * (size_t)n);
    lay->dy_off = malloc(sizeof(uint64_t) * (size_t)(n + 1));
    lay->tmp_off = malloc(sizeof(uint64_t) * (size_t)n);
    lay->tmp_input = malloc(sizeof(int) * (size_t)n);
    lay->dx_add = calloc((size_t)n + 1, sizeof *lay->dx_add);
    if (!lay->dx_add || !lay->act || !lay->y_off || !lay->r_off || !lay->saved_off || !lay->rsaved_off || !lay->dy_off ||
        !lay->tmp_off || !lay->tmp_input)
        return bfit_fail(BFIT_ENOMEM, "layout: out of host memory");
    for (int i = 0; i <= n; i++)
        lay->dy_off[i] = lay->y_off[i] = lay->r_off[i] = BFIT_OFF_NONE;
    for (int i = 0; i < n; i++) {
        lay->saved_off[i] = lay->rsaved_off[i] = lay->tmp_off[i] = BFIT_OFF_NONE;
        lay->tmp_input[i] = -1;
    }
    return BFIT_OK;
}

/* Every layer's needs at m; the workspace is one region shared by all; the
 * input block holds the samples (value 0), the labels, then (bidirectional
 * attention) the sequences' lengths. */
static int lay_needs(bfit_model *M, bfit_layout *lay, bfit_layer_need *need)
{
    uint64_t ws = 0, ws_sum = 0;
    for (int i = 0; i < M->n; i++) {
        uint64_t w;
        int rc = bfit_layer_query(M->nodes[i].l, lay->m, lay->training, &need[i]);
        if (rc != BFIT_OK)
            return rc;
        w = BFIT_ALIGN_UP(need[i].ws_fwd > need[i].ws_bwd || !lay->training ? need[i].ws_fwd : need[i].ws_bwd);
        ws = w > ws ? w : ws;
        ws_sum += w;
    }
    lay->bytes[BFIT_MEM_WORKSPACE] = ws;
    lay->no_reuse[BFIT_MEM_WORKSPACE] = ws_sum;
    lay->y_off[0] = 0;
    lay->labels_off = value_bytes(M, 0, lay->m);
    lay->bytes[BFIT_MEM_INPUT] =
        lay->labels_off + BFIT_ALIGN_UP((uint64_t)lay->m * (uint64_t)bfit_model_loss_rows(M) * sizeof(int32_t));
    lay->lens_off = M->seq_lens ? lay->bytes[BFIT_MEM_INPUT] : BFIT_OFF_NONE;
    if (M->seq_lens)
        lay->bytes[BFIT_MEM_INPUT] += BFIT_ALIGN_UP((uint64_t)lay->m * sizeof(int32_t));
    lay->rows_off = M->gather ? lay->bytes[BFIT_MEM_INPUT] : BFIT_OFF_NONE;
    if (M->gather)
        lay->bytes[BFIT_MEM_INPUT] +=
            BFIT_ALIGN_UP((uint64_t)lay->m * (uint64_t)bfit_model_loss_rows(M) * sizeof(int32_t));
    lay->no_reuse[BFIT_MEM_INPUT] = lay->bytes[BFIT_MEM_INPUT];
    return BFIT_OK;
}

static void add_buf(lbuf *b, int *nb, uint64_t size, int t0, int t1, uint64_t *dst, uint64_t *no_reuse)
{
    if (!size)
        return;
    b[(*nb)++] = (lbuf){size, 0, t0, t1, dst};
    *no_reuse += size;
}

/* The activations' buffers (outputs, regenerated copies, saved bytes),
 * placed alone; the step block's size when there is no backward. Returns
 * how many buffers. */
static int lay_activations(const sched *s, const life *L, lbuf *b)
{
    bfit_model *M = s->M;
    bfit_layout *lay = s->lay;
    uint64_t *nr = &lay->no_reuse[BFIT_MEM_ACTIVATIONS];
    int nb = 0, m = lay->m;
    for (int i = 0; i < M->n; i++) {
        uint64_t vb = value_bytes(M, i + 1, m), sv = lay->training ? BFIT_ALIGN_UP(s->need[i].saved) : 0;
        add_buf(b, &nb, vb, L->a0[i + 1], L->a1[i + 1], &lay->y_off[i + 1], nr);
        add_buf(b, &nb, sv, L->s0[i], L->s1[i], &lay->saved_off[i], nr);
        if (s->done[i + 1]) {
            add_buf(b, &nb, vb, L->b0[i + 1], L->b1[i + 1], &lay->r_off[i + 1], nr);
            add_buf(b, &nb, sv, L->r0[i], L->r1[i], &lay->rsaved_off[i], nr);
        }
    }
    lay->bytes[BFIT_MEM_ACTIVATIONS] = place(b, nb, s->ord);
    return nb;
}

/* Backward that may write its input's gradient over its output's: relu in
 * every mode and dropout (elementwise, read before written), and batch norm
 * on the CPU (oneDNN documents in-place backward; our loops from the output
 * read each element before writing it) and on the GPU where it runs our
 * kernels, from the output or in 16 bits (cuda_dnn.c: sums, then an
 * elementwise pass); cuDNN, the GPU's f32 from the input, documents no such
 * guarantee. Their input gradient then takes no bytes of its own; add's
 * first input gradient to be written is its dy itself. */
static int bwd_in_place(const bfit_model *M, const bfit_layer *l)
{
    if (l->cfg.kind == BFIT_L_ADD) /* dy handed on: one input may take it as it is */
        return 1;
    if (l->nin != 1)
        return 0;
    if (l->cfg.kind == BFIT_L_BATCHNORM)
        return (M->dev && !strcmp(bfit_device_name(M->dev), "cpu")) || l->mode == BFIT_MODE_Y ||
               l->dtype != BFIT_F32;
    return l->cfg.kind == BFIT_L_RELU || l->cfg.kind == BFIT_L_DROPOUT;
}

/* The step block: the nact activation buffers (placed alone already) and
 * the gradients after them in b, placed together. The activations count
 * their own placement's bytes (unless the joint one packed them tighter
 * still), the gradients what they add to it. apart (tests): the gradients
 * after the activations, sharing none of their bytes. */
static void place_step(bfit_layout *lay, lbuf *b, int *ord, int nact, int nb, int apart)
{
    uint64_t joint, act = lay->bytes[BFIT_MEM_ACTIVATIONS];
    if (apart) {
        joint = act + place(b + nact, nb - nact, ord);
        for (int q = nact; q < nb; q++)
            *b[q].dst += act;
    } else {
        joint = place(b, nb, ord);
    }
    lay->bytes[BFIT_MEM_ACTIVATIONS] = joint < act ? joint : act;
    lay->bytes[BFIT_MEM_ACT_GRADS] = joint - lay->bytes[BFIT_MEM_ACTIVATIONS];
}

/* Activation gradients, appended to the nact activation buffers in b and
 * placed with them. The gradient of value v is written first by its
 * consumer whose backward comes first, and read last by its producer's
 * backward. A further consumer writes into a temp that is added in at once,
 * or adds into the gradient itself if its backward can (a concatenation).
 * An in-place backward's input gradient shares its output gradient's
 * buffer, whose lifetime then runs on (alias[v]: that value). The model
 * input needs no gradient. */
static int lay_act_grads(const sched *s, lbuf *b, int nact)
{
    bfit_model *M = s->M;
    bfit_layout *lay = s->lay;
    int nb = nact, *buf = malloc(sizeof(int) * ((size_t)M->n + 1)), *alias = malloc(sizeof(int) * ((size_t)M->n + 1));
    unsigned char *written = calloc((size_t)M->n + 1, 1);

    if (!written || !buf || !alias) {
        free(written), free(buf), free(alias);
        return bfit_fail(BFIT_ENOMEM, "layout: out of host memory");
    }
    for (int v = 0; v <= M->n; v++)
        buf[v] = alias[v] = -1;
    for (int t = 0; t < lay->nact; t++) {
        int i = lay->act[t].node, aliased = 0;
        if (lay->act[t].kind != BFIT_ACT_BWD)
            continue;
        for (int k = 0; k < M->nodes[i].l->nin; k++) {
            int v = M->nodes[i].in[k], y = i + 1;
            uint64_t sz;
            if (v <= 0 || !M->needs_grad[v])
                continue;
            sz = value_bytes(M, v, lay->m);
            if (!written[v] && !aliased && !M->no_inplace && bwd_in_place(M, M->nodes[i].l) && buf[y] >= 0 && b[buf[y]].size == sz) {
                written[v] = aliased = 1;
                alias[v] = y;
                buf[v] = buf[y];
                if (s->bwd_at[v - 1] > b[buf[v]].t1)
                    b[buf[v]].t1 = s->bwd_at[v - 1];
            } else if (!written[v]) {
                written[v] = 1;
                buf[v] = nb;
                add_buf(b, &nb, sz, t, s->bwd_at[v - 1], &lay->dy_off[v], &lay->no_reuse[BFIT_MEM_ACT_GRADS]);
            } else if (M->nodes[i].l->vt->dx_add) {
                lay->dx_add[i] |= 1u << k; /* it adds its share in: no bytes */
            } else if (lay->tmp_input[i] < 0) {
                lay->tmp_input[i] = k;
                add_buf(b, &nb, sz, t, t, &lay->tmp_off[i], &lay->no_reuse[BFIT_MEM_ACT_GRADS]);
            } else {
                free(written), free(buf), free(alias);
                return bfit_fail(BFIT_EINVAL, "layout: layer %d (%s) takes two inputs whose values feed other layers "
                                              "too; one temporary gradient per layer is supported",
                                 i + 1, bfit_layer_kind_name(M->nodes[i].l->cfg.kind));
            }
        }
    }
    place_step(lay, b, s->ord, nact, nb, M->grads_apart);
    /* an alias takes its root's offset (the root was placed above) */
    for (int v = 1; v <= M->n; v++) {
        int r = v;
        while (alias[r] >= 0)
            r = alias[r];
        if (r != v)
            lay->dy_off[v] = lay->dy_off[r];
    }
    free(written), free(buf), free(alias);
    return BFIT_OK;
}

static void lay_flops(const sched *s)
{
    bfit_layout *lay = s->lay;
    for (int t = 0; t < lay->nact; t++) {
        double f, b;
        bfit_layer_flops(s->M->nodes[lay->act[t].node].l, lay->m, &f, &b);
        lay->flops += lay->act[t].kind == BFIT_ACT_BWD ? b : f;
        if (lay->act[t].kind == BFIT_ACT_REGEN)
            lay->regen_flops += f;
    }
}

static int life_alloc(life *L, int n)
{
    int **all[] = {&L->a0, &L->a1, &L->b0, &L->b1, &L->s0, &L->s1, &L->r0, &L->r1};
    for (unsigned k = 0; k < sizeof all / sizeof all[0]; k++)
        if (!(*all[k] = calloc((size_t)n + 1, sizeof(int))))
            return bfit_fail(BFIT_ENOMEM, "layout: out of host memory");
    return BFIT_OK;
}

static void life_free(life *L)
{
    int *all[] = {L->a0, L->a1, L->b0, L->b1, L->s0, L->s1, L->r0, L->r1};
    for (unsigned k = 0; k < sizeof all / sizeof all[0]; k++)
        free(all[k]);
}

int bfit_model_layout(bfit_model *M, int m, int training, bfit_layout *lay)
{
    int n = M->n, rc;
    size_t nbuf = (size_t)(6 * n + BFIT_LAYER_MAXIN * n + 2); /* 4 per node + gradients, temps */
    sched s = {M, lay, NULL, NULL, NULL, NULL, NULL};
    life L = {0};
    lbuf *b = NULL;
    bfit_layer_need *need = calloc((size_t)n, sizeof *need);

    memset(lay, 0, sizeof *lay);
    if (m < 1) {
        free(need);
        return bfit_fail(BFIT_EINVAL, "micro-batch must be at least 1, got %d", m);
    }
    lay->m = m;
    lay->training = training;
    s.need = need;
    s.done = calloc((size_t)n + 1, 1);
    s.bwd_at = malloc(sizeof(int) * (size_t)n);
    s.regen_at = malloc(sizeof(int) * (size_t)n);
    b = calloc(nbuf, sizeof *b);
    s.ord = malloc(sizeof(int) * nbuf);
    rc = lay_alloc(lay, n);
    if (rc == BFIT_OK && (!need || !s.done || !s.bwd_at || !s.regen_at || !b || !s.ord))
        rc = bfit_fail(BFIT_ENOMEM, "layout: out of host memory");
    if (rc == BFIT_OK)
        rc = life_alloc(&L, n);
    if (rc == BFIT_OK)
        rc = lay_needs(M, lay, need);
    if (rc == BFIT_OK) {
        for (int i = 0; i < n; i++)
            s.bwd_at[i] = s.regen_at[i] = -1;
        schedule(&s);
        lifetimes(&s, &L);
        int nb = lay_activations(&s, &L, b);
        if (training)
            rc = lay_act_grads(&s, b, nb);
        lay_flops(&s);
    }
    life_free(&L);
    free(b);
    free(need);
    free(s.done);
    free(s.bwd_at);
    free(s.regen_at);
    free(s.ord);
    if (rc != BFIT_OK)
        bfit_layout_fini(lay);
    return rc;
}
