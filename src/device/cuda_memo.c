/* cuda_memo.c - the algorithms a device chose, by the op's shapes. */
#include "device/cuda_memo.h"
#include "base/hash.h"

#include <string.h>

void cuda_memo_key_conv(const bfit_op_desc *d, cuda_memo_key *k)
{
    const int64_t v[] = {d->kind,       d->dtype,      d->u.conv.n,  d->u.conv.ic, d->u.conv.ih, d->u.conv.iw,
                         d->u.conv.oc,  d->u.conv.oh,  d->u.conv.ow, d->u.conv.kh, d->u.conv.kw, d->u.conv.sh,
                         d->u.conv.sw,  d->u.conv.ph,  d->u.conv.pw, d->u.conv.groups};
    memset(k, 0, sizeof *k);
    memcpy(k->v, v, sizeof v);
}

/* Set-associative: a key lives in one set of CUDA_MEMO_WAYS slots,
 * chosen by its hash; the set's least recently used slot gives way. */
static int set_of(const cuda_memo_key *k)
{
    return (int)(bfit_fnv1a(BFIT_FNV_OFFSET, k, sizeof *k) % (CUDA_MEMO / CUDA_MEMO_WAYS));
}

static int slot_of(const cuda_memo *m, const cuda_memo_key *k)
{
    int s = set_of(k) * CUDA_MEMO_WAYS;
    for (int i = s; i < s + CUDA_MEMO_WAYS; i++)
        if (m->e[i].used && !memcmp(&m->e[i].key, k, sizeof *k))
            return i;
    return -1;
}

int cuda_memo_find(cuda_memo *m, const cuda_memo_key *k, int *algo, size_t *ws)
{
    int i = slot_of(m, k);
    if (i < 0) {
        m->misses++;
        return 0;
    }
    m->hits++;
    m->e[i].used = ++m->tick;
    *algo = m->e[i].algo;
    *ws = m->e[i].ws;
    return 1;
}

void cuda_memo_put(cuda_memo *m, const cuda_memo_key *k, int algo, size_t ws)
{
    int i = slot_of(m, k);
    if (i < 0) {
        int s = set_of(k) * CUDA_MEMO_WAYS;
        i = s;
        for (int j = s + 1; j < s + CUDA_MEMO_WAYS; j++)
            if (m->e[j].used < m->e[i].used) /* an empty one's 0 is the least */
                i = j;
    }
    m->e[i].key = *k;
    m->e[i].used = ++m->tick;
    m->e[i].algo = algo;
    m->e[i].ws = ws;
}
