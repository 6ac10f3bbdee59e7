/* cpu_gather.c - GATHER_FWD/BWD: the rows of each sample that args.rows
 * names (a masked LM's head at its masked tokens only), and their gradient
 * put back in place, in any float dtype. Rows are copied as bytes, so every
 * device gives the same bits. */
#include "base/err.h"
#include "device/cpu.h"

#include <string.h>

/* An index past the sample is the caller's bug: refused before anything is
 * written (negative ones are the padding, skipped). */
static int check_rows(const int32_t *rows, int64_t N, int64_t T, int64_t K, const char *what)
{
    for (int64_t i = 0; i < N; i++)
        for (int64_t k = 0; k < K; k++)
            if (rows[i * K + k] >= T)
                return bfit_fail(BFIT_EINVAL, "%s: sample %lld, k %lld: row %d is not below T %lld", what,
                                 (long long)i, (long long)k, (int)rows[i * K + k], (long long)T);
    return BFIT_OK;
}

static int run(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t N = d->u.gat.n, T = d->u.gat.T, K = d->u.gat.K, C = d->u.gat.C;
    size_t row = (size_t)C * bfit_dtype_size(d->dtype); /* a copy: the bytes, whatever the dtype */
    int back = d->kind == BFIT_OP_GATHER_BWD;
    const char *what = back ? "rows gather backward" : "rows gather";
    const int32_t *r = a->rows;
    const char *x = back ? a->diff_dst : a->src;
    char *y = back ? a->diff_src : a->dst;

    if (!x || !y || !r)
        return bfit_fail(BFIT_EINVAL, "%s: %s and rows are required", what,
                         back ? "diff_dst, diff_src" : "src, dst");
    if (check_rows(r, N, T, K, what) != BFIT_OK)
        return BFIT_EINVAL;
    if (!back) {
        BFIT_PAR_ROWS_IF(N * K * C > BFIT_PAR_MIN, for (int64_t i = 0; i < N; i++) {
            for (int64_t k = 0; k < K; k++) {
                char *o = y + (size_t)(i * K + k) * row;
                if (r[i * K + k] < 0)
                    memset(o, 0, row);
                else
                    memcpy(o, x + (size_t)(i * T + r[i * K + k]) * row, row);
            }
        });
        return BFIT_OK;
    }
    BFIT_PAR_ROWS_IF(N * T * C > BFIT_PAR_MIN, for (int64_t i = 0; i < N; i++) {
        memset(y + (size_t)(i * T) * row, 0, (size_t)T * row);
        for (int64_t k = 0; k < K; k++)
            if (r[i * K + k] >= 0)
                memcpy(y + (size_t)(i * T + r[i * K + k]) * row, x + (size_t)(i * K + k) * row, row);
    });
    return BFIT_OK;
}

int bfit_cpu_gather_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t n = d->u.gat.n, T = d->u.gat.T, K = d->u.gat.K, C = d->u.gat.C;

    if (n < 1 || T < 1 || K < 1 || C < 1 || K > T)
        return bfit_fail(BFIT_EINVAL, "rows gather: n %lld, T %lld, K %lld and C %lld must be positive, K <= T",
                         (long long)n, (long long)T, (long long)K, (long long)C);
    op->ws = op->saved = 0;
    op->run = run;
    return BFIT_OK;
}
