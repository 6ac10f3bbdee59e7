/* recompute.c - how a model stores a training step (bfit_model_set_storage),
 * and `--recompute auto`: which values to keep so that the target batch
 * fits with the least recomputed work.
 *
 * The graph's cuts (values every later node reads only at or after: block
 * outputs of a residual net, every value of a chain) split it into
 * elementary segments. A choice keeps or drops each cut and keeps each
 * segment's interior whole or regenerates it in backward. For a chain a
 * dynamic programme over cut positions is exact only under an additive
 * memory model, and a residual graph's peak is not additive (lifetimes
 * overlap across the backward), so the search here is greedy on the exact
 * plan instead: from keeping everything, take each time the move that frees
 * the most peak bytes per recomputed FLOP (regenerate a segment's interior,
 * or drop a cut between two regenerated segments; when no single move
 * frees, the best pair of them), every candidate costed by the real
 * layout. The path runs from no recomputation to the least
 * memory; auto takes its first point at which the target fits, or, with no
 * target, the point (or blocks, or sqrt) with the largest batch. */
#include "base/err.h"
#include "base/testctl.h"
#include "batch/plan.h"

#include <stdlib.h>
#include <string.h>

typedef struct search {
    bfit_model *M;
    const bfit_optim_cfg *opt;
    bfit_store_cfg sc;
    int K;               /* cuts */
    int *pos;            /* K + 2 positions: 0, the cuts, n */
    unsigned char *cutkeep, *segR, *keep, *best, *win;
    int m;               /* the micro-batch plans are made at */
} search;

/* The values to keep for the state (cutkeep, segR). */
static void state_keep(search *s)
{
    memset(s->keep, 0, (size_t)s->M->n + 1);
    for (int i = 0; i <= s->K; i++) {
        for (int v = s->pos[i] + 1; v < s->pos[i + 1]; v++)
            s->keep[v] = !s->segR[i];
        if (i >= 1)
            s->keep[s->pos[i]] = s->cutkeep[i];
    }
}

static int eval_state(search *s, bfit_step_plan *p)
{
    int rc;
    state_keep(s);
    s->sc.recompute = BFIT_RECOMPUTE_CUTS;
    s->sc.keep = s->keep;
    if ((rc = bfit_model_configure(s->M, &s->sc)) != BFIT_OK)
        return rc;
    return bfit_plan_compute(s->M, s->opt, s->m, 1, p);
}

/* Try move j (j <= K: regenerate segment j's interior; j > K: drop cut
 * j - K); returns 0 when it is not a legal move now. */
static int apply_move(search *s, int j, int undo)
{
    if (j <= s->K) {
        if (!undo && (s->segR[j] || s->pos[j + 1] - s->pos[j] < 2))
            return 0;
        s->segR[j] = !undo;
        return 1;
    }
    j -= s->K;
    if (!undo && (!s->cutkeep[j] || !s->segR[j - 1] || !s->segR[j]))
        return 0;
    s->cutkeep[j] = (unsigned char)undo;
    return 1;
}

/* The move set {a, b} (b < 0: a alone) as one step from cur, if legal now
 * (b may be legal only after a: a cut between segments a makes
 * regenerated); keeps it in *best when it frees the most peak bytes per
 * recomputed FLOP so far. */
static int try_moves(search *s, int a, int b, const bfit_step_plan *cur, double *best_ratio, int *best,
                     bfit_step_plan *bestp)
{
    bfit_step_plan p;
    int rc;
    if (!apply_move(s, a, 0))
        return BFIT_OK;
    if (b >= 0 && !apply_move(s, b, 0)) {
        apply_move(s, a, 1);
        return BFIT_OK;
    }
    rc = eval_state(s, &p);
    if (b >= 0)
        apply_move(s, b, 1);
    apply_move(s, a, 1);
    if (rc == BFIT_OK && p.peak < cur->peak) {
        double ratio = (double)(cur->peak - p.peak) / (p.regen_flops - cur->regen_flops + 1.0);
        if (best[0] < 0 || ratio > *best_ratio) {
            best[0] = a;
            best[1] = b;
            *best_ratio = ratio;
            *bestp = p;
        }
    }
    return rc;
}

/* Where move j acts along the graph: cut c at 2c, segment i (between cuts
 * i and i + 1) at 2i + 1. Pairs that merge segments are neighbours. */
static int move_place(const search *s, int j)
{
    return j <= s->K ? 2 * j + 1 : 2 * (j - s->K);
}

/* One greedy step: the best move by freed bytes per recomputed FLOP; when
 * no single move frees memory, the best pair of neighbouring moves (two
 * adjacent cuts, a segment and a cut of its own, two adjacent segments;
 * pairs farther apart found nothing more on ResNet-50 and cost 20 times
 * the plans). A cut dropped alone can make the block before hold its
 * insides longer, raising the peak as much as it lowers it; dropping two
 * adjacent cuts together (one segment regenerated from further back) then
 * frees (ResNet-50 bf16: 783 -> 821 in 9.21 GiB). Returns 1 if a step was
 * taken (*cur updated), 0 when none frees memory. */
static int greedy_step(search *s, bfit_step_plan *cur, int *rc)
{
    int best[2] = {-1, -1}, nm = 2 * s->K + 1, pairs;
    double best_ratio = 0;
    bfit_step_plan bestp;
    for (int a = 0; a < nm && *rc == BFIT_OK; a++)
        *rc = try_moves(s, a, -1, cur, &best_ratio, best, &bestp);
    pairs = best[0] < 0 && !bfit_test_value(BFIT_TC_SINGLE_MOVES);
    for (int a = 0; a < nm && *rc == BFIT_OK && pairs; a++)
        for (int b = a + 1; b < nm && *rc == BFIT_OK; b++)
            if (abs(move_place(s, a) - move_place(s, b)) <= 2)
                *rc = try_moves(s, a, b, cur, &best_ratio, best, &bestp);
    if (*rc != BFIT_OK || best[0] < 0)
        return 0;
    apply_move(s, best[0], 0);
    if (best[1] >= 0)
        apply_move(s, best[1], 0);
    *cur = bestp;
    return 1;
}

static int search_init(search *s, bfit_model *M, const bfit_optim_cfg *opt, const bfit_storage *st)
{
    int n = M->n, k = 0, rc;
    memset(s, 0, sizeof *s);
    s->M = M;
    s->opt = opt;
    s->sc = (bfit_store_cfg){st->precision, st->lean, BFIT_RECOMPUTE_NONE, NULL, 0};
    if ((rc = bfit_model_configure(M, &s->sc)) != BFIT_OK) /* finds the cuts */
        return rc;
    for (int v = 1; v < n; v++)
        s->K += M->cut[v];
    s->pos = malloc(sizeof(int) * (size_t)(s->K + 2));
    s->cutkeep = calloc((size_t)s->K + 1, 1);
    s->segR = calloc((size_t)s->K + 1, 1);
    s->keep = calloc((size_t)n + 1, 1);
    s->best = calloc((size_t)n + 1, 1);
    s->win = calloc((size_t)n + 1, 1);
    if (!s->pos || !s->cutkeep || !s->segR || !s->keep || !s->best || !s->win)
        return bfit_fail(BFIT_ENOMEM, "recompute: out of host memory");
    s->pos[0] = 0;
    for (int v = 1; v < n; v++)
        if (M->cut[v])
            s->pos[++k] = v;
    s->pos[s->K + 1] = n;
    return BFIT_OK;
}

static void search_fini(search *s)
{
    free(s->pos);
    free(s->cutkeep);
    free(s->segR);
    free(s->keep);
    free(s->best);
    free(s->win);
}

/* From keeping everything, walk the greedy path at micro-batch s->m. With
 * budget: stop at the first point that fits (*fits = 1). Else (or if none
 * fits) end at the least peak. s->best holds the chosen point's values. */
static int walk(search *s, uint64_t budget, int *fits, bfit_step_plan *out)
{
    bfit_step_plan cur;
    int rc = BFIT_OK;
    for (int i = 1; i <= s->K; i++)
        s->cutkeep[i] = 1;
    for (int i = 0; i <= s->K; i++)
        s->segR[i] = s->pos[i + 1] - s->pos[i] < 2; /* nothing inside: nothing to keep */
    if ((rc = eval_state(s, &cur)) != BFIT_OK)
        return rc;
    *fits = budget && cur.peak <= budget;
    while (!*fits && greedy_step(s, &cur, &rc))
        *fits = budget && cur.peak <= budget;
    if (rc != BFIT_OK)
        return rc;
    state_keep(s);
    memcpy(s->best, s->keep, (size_t)s->M->n + 1);
    *out = cur;
    return BFIT_OK;
}

static int largest(search *s, const bfit_store_cfg *sc, uint64_t budget, int *m)
{
    int rc = bfit_model_configure(s->M, sc);
    if (rc == BFIT_OK)
        rc = bfit_plan_max_batch(s->M, s->opt, 1, budget, BFIT_PLAN_LIMIT, m, NULL);
    return rc;
}

/* sc's largest batch *m; if more than *bm, sc is the new best (its values
 * kept in s->win when it keeps values given). */
static int consider(search *s, const bfit_store_cfg *sc, uint64_t budget, int *m, int *bm, bfit_store_cfg *best)
{
    int rc = largest(s, sc, budget, m);
    if (rc == BFIT_OK && *m > *bm) {
        *bm = *m;
        *best = *sc;
        if (sc->keep) {
            memcpy(s->win, sc->keep, (size_t)s->M->n + 1);
            best->keep = s->win;
        }
    }
    return rc;
}

/* The greedy path walked with lean's cheap regenerations on or off
 * (kc: keep_cheap), at the largest batch it allows, twice (the best choice
 * depends on m); each end is tried with them on and off, since a path
 * walked without them can end where they free more still. */
static int auto_walks(search *s, uint64_t budget, int kc, int *bm, bfit_store_cfg *best)
{
    bfit_store_cfg sc = s->sc;
    int m[2], fits, rc;
    bfit_step_plan p;
    sc.recompute = BFIT_RECOMPUTE_NONE;
    sc.keep_cheap = s->sc.keep_cheap = kc;
    if ((rc = largest(s, &sc, budget, &s->m)) != BFIT_OK)
        return rc;
    for (int round = 0; round < 2; round++) {
        s->m = s->m > 0 ? s->m : 1;
        if ((rc = walk(s, 0, &fits, &p)) != BFIT_OK)
            return rc;
        sc.recompute = BFIT_RECOMPUTE_CUTS;
        sc.keep = s->best;
        for (int k = 0; k < 2 && rc == BFIT_OK; k++) {
            sc.keep_cheap = k;
            rc = consider(s, &sc, budget, &m[k], bm, best);
        }
        if (rc != BFIT_OK)
            return rc;
        s->m = m[kc]; /* the next round walks where this path's end reached */
    }
    return BFIT_OK;
}

/* No target: the largest batch among the greedy paths' ends, blocks and
 * sqrt. Leaves the model configured with the winner. */
static int auto_largest(search *s, uint64_t budget)
{
    static const bfit_recompute_kind fixed[] = {BFIT_RECOMPUTE_BLOCKS, BFIT_RECOMPUTE_SQRT};
    bfit_store_cfg best = s->sc, sc = s->sc;
    int bm = 0, rc = BFIT_OK;
    for (int kc = 0; kc < 2 && rc == BFIT_OK; kc++)
        rc = auto_walks(s, budget, kc, &bm, &best);
    for (unsigned i = 0; i < sizeof fixed / sizeof fixed[0] && rc == BFIT_OK; i++) {
        int m;
        sc = s->sc;
        sc.recompute = fixed[i];
        sc.keep_cheap = 0;
        rc = consider(s, &sc, budget, &m, &bm, &best);
    }
    return rc == BFIT_OK ? bfit_model_configure(s->M, &best) : rc;
}

int bfit_model_set_storage(bfit_model *M, const bfit_storage *st, const bfit_optim_cfg *opt, uint64_t budget,
                           int target)
{
    bfit_store_cfg sc;
    search s;
    bfit_step_plan p;
    int rc, fits = 0;

    if (!M || !st)
        return bfit_fail(BFIT_EINVAL, "storage: no model or storage");
    if ((unsigned)st->recompute >= BFIT_RECOMPUTE_COUNT || st->recompute == BFIT_RECOMPUTE_CUTS)
        return bfit_fail_field(BFIT_EINVAL, "recompute", "expected none, blocks, sqrt or auto");
    sc = (bfit_store_cfg){st->precision, st->lean, st->recompute, NULL, 0};
    if (st->recompute != BFIT_RECOMPUTE_AUTO)
        return bfit_model_configure(M, &sc);
    if (target < 0 || (target > 0 && !budget))
        return bfit_fail(BFIT_EINVAL, "storage: auto needs a budget for its target micro-batch %d", target);
    rc = search_init(&s, M, opt, st);
    if (rc == BFIT_OK && target > 0) {
        s.m = target;
        /* the first fit on the path with lean's cheap regenerations, else on the one without */
        for (int kc = 0; kc < 2 && rc == BFIT_OK && !fits; kc++) {
            s.sc.keep_cheap = kc;
            rc = walk(&s, budget, &fits, &p);
        }
        sc = s.sc;
        sc.recompute = BFIT_RECOMPUTE_CUTS;
        sc.keep = s.best;
        if (rc == BFIT_OK && fits)
            rc = bfit_model_configure(M, &sc);
        else if (rc == BFIT_OK)
            rc = auto_largest(&s, budget); /* the target cannot fit: as large a micro-batch as can */
    } else if (rc == BFIT_OK) {
        rc = budget ? auto_largest(&s, budget) : bfit_fail(BFIT_EINVAL, "storage: auto needs a budget");
    }
    search_fini(&s);
    return rc;
}
