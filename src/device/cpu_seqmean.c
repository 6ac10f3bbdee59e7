/* cpu_seqmean.c - SEQMEAN_FWD/BWD: the mean of each sequence's real tokens
 * (a sentence classifier's pooling, padding left out), or with last its last
 * real token (GPT-2's classifier reads that one), in any float dtype.
 * Forward sums a feature's tokens in f32, in token order, so the result does
 * not depend on the threads; the CUDA kernel sums in the same order. */
#include "base/err.h"
#include "device/cpu.h"
#include "device/half.h"

/* Sequence i's real tokens: lens[i] clamped to [1, T] (a sequence of none
 * is refused on the host, bfit_model_check_tokens). */
static int64_t seq_len(const int32_t *lens, int64_t i, int64_t T)
{
    int64_t n = lens ? lens[i] : T;
    return n < 1 ? 1 : n > T ? T : n;
}

static int run(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t N = d->u.seqm.n, T = d->u.seqm.T, C = d->u.seqm.C, last = d->u.seqm.last;
    bfit_dtype t = d->dtype;

    if (d->kind == BFIT_OP_SEQMEAN_FWD) {
        if (!a->src || !a->dst)
            return bfit_fail(BFIT_EINVAL, "mean of the tokens: src and dst are required");
        BFIT_PAR_ROWS_IF(N * T * C > BFIT_PAR_MIN, for (int64_t i = 0; i < N; i++) {
            int64_t len = seq_len(a->lens, i, T), k0 = last ? len - 1 : 0;
            for (int64_t c = 0; c < C; c++) {
                float s = 0.0f;
                for (int64_t k = k0; k < len; k++)
                    s += bfit_ld(a->src, t, (i * T + k) * C + c);
                bfit_st(a->dst, t, i * C + c, s / (float)(len - k0));
            }
        });
        return BFIT_OK;
    }
    if (!a->diff_dst || !a->diff_src)
        return bfit_fail(BFIT_EINVAL, "mean of the tokens backward: diff_dst and diff_src are required");
    BFIT_PAR_ROWS_IF(N * T * C > BFIT_PAR_MIN, for (int64_t i = 0; i < N; i++) {
        int64_t len = seq_len(a->lens, i, T), k0 = last ? len - 1 : 0;
        for (int64_t k = 0; k < T; k++)
            for (int64_t c = 0; c < C; c++)
                bfit_st(a->diff_src, t, (i * T + k) * C + c,
                        k >= k0 && k < len ? bfit_ld(a->diff_dst, t, i * C + c) / (float)(len - k0) : 0.0f);
    });
    return BFIT_OK;
}

int bfit_cpu_seqmean_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;

    if (d->u.seqm.n < 1 || d->u.seqm.T < 1 || d->u.seqm.C < 1)
        return bfit_fail(BFIT_EINVAL, "mean of the tokens: n %lld, T %lld and C %lld must be positive",
                         (long long)d->u.seqm.n, (long long)d->u.seqm.T, (long long)d->u.seqm.C);
    op->ws = op->saved = 0;
    op->run = run;
    return BFIT_OK;
}
