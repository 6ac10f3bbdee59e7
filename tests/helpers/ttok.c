/* ttok.c - a source of token sequences for tests (ttok.h). */
#include "ttok.h"

int ttok_len(const ttok *s, int64_t i) { return s->full ? s->seq : s->lo + (int)(i * s->mul % s->mod); }

static int take(void *ud, int n, float *x, int32_t *labels, int *got)
{
    ttok *s = ud;
    int k = 0;
    for (; k < n && s->next < s->n; k++, s->next++) {
        int len = ttok_len(s, s->next);
        int32_t *xi = (int32_t *)x + (int64_t)k * s->seq, *yi = labels + (int64_t)k * s->seq;
        for (int j = 0; j < s->seq; j++) {
            xi[j] = j < len ? (int32_t)((s->next + j) % s->vocab) : 0;
            yi[j] = j < len ? (int32_t)((s->next + j + 1) % s->vocab) : -1;
        }
    }
    *got = k;
    return BFIT_OK;
}

static int rewind_to_start(void *ud)
{
    ((ttok *)ud)->next = 0;
    return BFIT_OK;
}

bfit_source ttok_source(ttok *s)
{
    bfit_source src = {.take = take, .next_epoch = rewind_to_start, .rewind = rewind_to_start, .samples = s->n,
                       .ud = s};
    return src;
}

const char *const ttok_tied_spec = "input tokens=6\n"
                                   "embed 8 vocab=11 positions=7\n"
                                   "residual {\n layernorm\n linear 24\n attention 2\n linear 8\n}\n"
                                   "residual {\n layernorm\n linear 16\n gelu\n linear 8\n}\n"
                                   "layernorm\n"
                                   "linear 11 tie=1 bias=0\n";
