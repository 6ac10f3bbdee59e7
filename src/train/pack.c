/* pack.c - the samples of a step cut into micro-batches: how many a
 * micro-batch takes, and for token models the labels a loss counts and
 * variable-length sequences (seq_max) sorted, sized and packed at their
 * length. */
#include "base/err.h"
#include "train/run_int.h"

#include <stdlib.h>
#include <string.h>

int64_t bfit_run_counted(const bfit_model *M, const int32_t *y, int n)
{
    int64_t c = 0;
    /* a sample model's -1: an unreadable test image, left out */
    for (int64_t i = 0; i < (int64_t)n * M->labels_per_sample; i++)
        c += y[i] >= 0;
    return c;
}

int64_t bfit_run_real_tokens(const int32_t *y, int64_t n)
{
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++)
        c += y[i] != BFIT_LABEL_PAD;
    return c;
}

/* ---- variable-length sequences (seq_max) ----
 * The step's sequences are sorted by length, longest first, and each
 * micro-batch runs at the length of its longest (rounded up to LEN_ROUND, so
 * few lengths occur): the padding of short sequences is not computed. The
 * lengths fall within a step, so a micro-batch that fits fits the next. */
#define LEN_ROUND 16

/* Real tokens of staged sample i: up to its last label that is not
 * padding (a masked LM's unscored tokens are real). */
static int seq_len(const bfit_run *r, int i)
{
    const int32_t *y = r->stage_y + (size_t)i * (size_t)r->cfg.seq_max;
    int n = r->cfg.seq_max;
    while (n > 0 && y[n - 1] == BFIT_LABEL_PAD)
        n--;
    return n;
}

static int by_len_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0; /* (length << 32 | ~index): longest first, then by index */
}

/* The step's E staged rows (T ids and ny labels each) sorted by len, longest first. */
static void sort_rows(bfit_run *r, int E, size_t T, size_t ny, int (*len)(const bfit_run *, int))
{
    for (int i = 0; i < E; i++)
        r->order[i] = (int64_t)len(r, i) << 32 | (uint32_t)~(uint32_t)i;
    qsort(r->order, (size_t)E, sizeof *r->order, by_len_desc);
    for (int i = 0; i < E; i++) {
        int j = (int)~(uint32_t)(r->order[i] & 0xffffffffu);
        memcpy(r->pack_x + (size_t)i * T, (const int32_t *)r->stage_x + (size_t)j * T, T * sizeof(int32_t));
        memcpy(r->pack_y + (size_t)i * ny, r->stage_y + (size_t)j * ny, ny * sizeof(int32_t));
    }
    memcpy(r->stage_x, r->pack_x, (size_t)E * T * sizeof(int32_t));
    memcpy(r->stage_y, r->pack_y, (size_t)E * ny * sizeof(int32_t));
}

void bfit_run_sort_by_length(bfit_run *r, int E)
{
    sort_rows(r, E, (size_t)r->cfg.seq_max, (size_t)r->cfg.seq_max, seq_len);
}

/* The model at the length of micro-batch [done, done + want). A model
 * that takes no other length than its own (an imported learned position
 * tensor [1, T, C] added whole) runs every micro-batch at it, padded: the
 * same losses, the padding computed. */
int bfit_run_trim(bfit_run *r, int done)
{
    int L = (seq_len(r, done) + LEN_ROUND - 1) / LEN_ROUND * LEN_ROUND, rc; /* sorted: the first is the longest */
    if (L > r->cfg.seq_max || r->len_fixed)
        L = r->cfg.seq_max;
    rc = bfit_model_set_seq(r->s.M, L > 0 ? L : 1);
    if (rc == BFIT_EINVAL && L != r->cfg.seq_max) {
        r->len_fixed = 1;
        rc = bfit_model_set_seq(r->s.M, r->cfg.seq_max);
    }
    return rc;
}

/* ---- a classifier of token ids (cls_T) ----
 * Its padded sequences (-1 after the last token) run at the micro-batch's
 * longest, rounded to LEN_ROUND, as --seq-max lines do: the padding past it
 * is not computed. The lengths within a step are similar: a shuffling
 * stream sorts each 1024 sequences of an epoch's order by length. */
static int ids_len(const int32_t *x, int T)
{
    int n = T;
    while (n > 0 && x[n - 1] < 0)
        n--;
    return n;
}

/* Real tokens of staged classifier row i. */
static int cls_len(const bfit_run *r, int i)
{
    return ids_len((const int32_t *)r->stage_x + (size_t)i * (size_t)r->cls_T, r->cls_T);
}

void bfit_run_sort_cls(bfit_run *r, int E) { sort_rows(r, E, (size_t)r->cls_T, 1, cls_len); }

int bfit_run_trim_cls(bfit_run *r, int done, int want)
{
    int L = 1, rc;
    for (int i = done; i < done + want; i++) {
        int n = ids_len((const int32_t *)r->stage_x + (size_t)i * (size_t)r->cls_T, r->cls_T);
        L = n > L ? n : L;
    }
    L = (L + LEN_ROUND - 1) / LEN_ROUND * LEN_ROUND;
    if (L > r->cls_T || r->len_fixed)
        L = r->cls_T;
    rc = bfit_model_set_seq(r->s.M, L);
    if (rc == BFIT_EINVAL && L != r->cls_T) { /* a model of one length (a learned [1, T, C] added whole) */
        r->len_fixed = 1;
        rc = bfit_model_set_seq(r->s.M, r->cls_T);
    }
    return rc;
}

void bfit_run_pack_cls(bfit_run *r, int done, int want, const float **x)
{
    size_t T = (size_t)r->cls_T, L = (size_t)r->s.M->input.d[0];
    for (int i = 0; i < want; i++)
        memcpy(r->pack_x + (size_t)i * L, (const int32_t *)r->stage_x + (size_t)(done + i) * T, L * sizeof(int32_t));
    *x = (const float *)r->pack_x;
    r->pos.res.tokens_computed += (int64_t)want * (int64_t)L;
}

/* The bytes a micro-batch is sized by: micro-batch m's (planned at the
 * longest length). With a token budget and m = E (memory does not bound m
 * and nothing caps it) all the step may take now, within the margin: a
 * step of E tokens holds more than E / T sequences when they are shorter
 * than T or the last one goes past E, and it should still run whole. */
static uint64_t sizing_bytes(bfit_run *r)
{
    uint64_t bytes = bfit_run_plan_bytes(r, r->pos.m), room;
    if (!r->cfg.batch_tokens || r->cfg.micro_batch || r->cfg.adaptive || r->pos.m < r->pos.d.batch)
        return bytes;
    room = bfit_plan_budget(bfit_arena_capacity(r->s.arena), r->cfg.margin);
    if (r->fixed_bytes + bfit_run_free_for_step(r) < room)
        room = r->fixed_bytes + bfit_run_free_for_step(r);
    return room > bytes ? room : bytes;
}

/* The sequences of the micro-batch that starts at staged sequence done
 * (left of them) at the model's length L: as many as fit in the sizing
 * bytes at L (the plan at L: at a shorter length more fit than at the
 * longest), at least 1. A micro-batch the user fixed, or adaptive mode's
 * (two per step for the noise scale), is also a cap: m samples, or m
 * tokens. And it ends before a sequence of half its length or less (where
 * a step spans two length buckets), so padding stays under half of it.
 * Without lengths, it is m samples, less where that would leave fewer than
 * the model can train on for the last micro-batch. */
int bfit_run_micro_size(bfit_run *r, int done, int left, int *want)
{
    int L = r->s.M->input.d[0], i = (L + 15) / 16, b, cap;
    uint64_t bytes;
    if (!r->fit_seqs || (r->cls_T && !r->cls_sorted)) {
        int least = bfit_model_min_batch(r->s.M);
        *want = left < r->pos.m ? left : r->pos.m;
        if (left - *want > 0 && left - *want < least && left - least >= least)
            *want = left - least; /* leave no remainder too small to train on */
        return BFIT_OK;
    }
    if ((bytes = sizing_bytes(r)) != r->fit_bytes) { /* sized for other bytes: forget */
        memset(r->fit_seqs, 0, sizeof *r->fit_seqs * (size_t)r->nfit);
        r->fit_bytes = bytes;
    }
    if (i >= r->nfit)
        return bfit_fail(BFIT_ESTATE, "length %d is past the longest planned (%d)", L, r->pc.T);
    if (!r->fit_seqs[i]) {
        int rc = bfit_plan_max_batch(r->s.M, &r->cfg.opt, 1, bytes > r->pc.extra ? bytes - r->pc.extra : 0,
                                     r->max_take, &b, NULL);
        if (rc != BFIT_OK)
            return rc;
        r->fit_seqs[i] = b > 0 ? b : 1; /* 0: not even 1 (the reserve says so, and the controller shrinks m) */
    }
    b = r->fit_seqs[i];
    if (r->cfg.micro_batch || r->cfg.adaptive) {
        cap = r->cfg.batch_tokens ? r->pos.m / L : r->pos.m;
        b = cap < 1 ? 1 : cap < b ? cap : b;
    }
    b = left < b ? left : b;
    for (int j = 1; (r->cfg.seq_max || r->cls_sorted) && j < b; j++)
        if (2 * (((r->cls_sorted ? cls_len(r, done + j) : seq_len(r, done + j)) + LEN_ROUND - 1) / LEN_ROUND *
                 LEN_ROUND) <= L) {
            b = j;
            break;
        }
    *want = b;
    return BFIT_OK;
}

/* Samples [done, done + want) at the model's length L into the pack buffers. */
void bfit_run_pack(bfit_run *r, int done, int want, const float **x, const int32_t **y)
{
    size_t T = (size_t)r->cfg.seq_max, L = (size_t)r->s.M->input.d[0];
    for (int i = 0; i < want; i++) {
        memcpy(r->pack_x + (size_t)i * L, (const int32_t *)r->stage_x + (size_t)(done + i) * T, L * sizeof(int32_t));
        memcpy(r->pack_y + (size_t)i * L, r->stage_y + (size_t)(done + i) * T, L * sizeof(int32_t));
    }
    *x = (const float *)r->pack_x;
    *y = r->pack_y;
    r->pos.res.tokens_computed += (int64_t)want * (int64_t)L;
}
