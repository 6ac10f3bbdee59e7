/* wsrc.c - starting weights from a model file (wsrc.h). */
#include "base/err.h"
#include "nn/wsrc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct bfit_wsrc {
    int refs;
    void *buf;
    size_t len;
    int mapped;
    bfit_onnx_model *om;
    bfit_wsrc_entry *e;
    int n, cap;
};

int bfit_wsrc_new(void *buf, size_t len, int mapped, bfit_onnx_model *om, bfit_wsrc **out)
{
    bfit_wsrc *w = calloc(1, sizeof *w);
    *out = NULL;
    if (!w)
        return bfit_fail(BFIT_ENOMEM, "onnx: out of host memory");
    w->refs = 1;
    w->buf = buf;
    w->len = len;
    w->mapped = mapped;
    w->om = om;
    *out = w;
    return BFIT_OK;
}

void bfit_wsrc_retain(bfit_wsrc *w)
{
    if (w)
        __atomic_add_fetch(&w->refs, 1, __ATOMIC_RELAXED);
}

void bfit_wsrc_release(bfit_wsrc *w)
{
    if (!w || __atomic_sub_fetch(&w->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    for (int i = 0; i < w->n; i++)
        free(w->e[i].name);
    free(w->e);
    bfit_onnx_model_free(w->om);
    if (w->mapped && w->buf)
        munmap(w->buf, w->len);
    else
        free(w->buf);
    free(w);
}

const bfit_onnx_model *bfit_wsrc_model(const bfit_wsrc *w) { return w->om; }
int bfit_wsrc_count(const bfit_wsrc *w) { return w ? w->n : 0; }

int bfit_wsrc_add(bfit_wsrc *w, int node, int param, const bfit_onnx_tensor *t, int copy)
{
    char *name, sfx[16] = "";
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 64;
        bfit_wsrc_entry *p = realloc(w->e, sizeof *p * (size_t)cap);
        if (!p)
            return bfit_fail(BFIT_ENOMEM, "onnx: out of host memory");
        w->e = p;
        w->cap = cap;
    }
    if (copy)
        snprintf(sfx, sizeof sfx, ".%d", copy);
    if (!(name = malloc(t->name.n + strlen(sfx) + 1)))
        return bfit_fail(BFIT_ENOMEM, "onnx: out of host memory");
    memcpy(name, t->name.p, t->name.n);
    strcpy(name + t->name.n, sfx);
    /* in (node, param) order: an ONNX embedding gets its position table after it was emitted
       (onnx_tokens.c), when later layers may have taken theirs */
    {
        int i = w->n++;
        for (; i > 0 && (w->e[i - 1].node > node || (w->e[i - 1].node == node && w->e[i - 1].param > param)); i--)
            w->e[i] = w->e[i - 1];
        w->e[i] = (bfit_wsrc_entry){node, param, name, t};
    }
    return BFIT_OK;
}

/* Entries are in (node, param) order: a binary search. */
const bfit_wsrc_entry *bfit_wsrc_find(const bfit_wsrc *w, int node, int param)
{
    int lo = 0, hi = w ? w->n - 1 : -1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const bfit_wsrc_entry *e = &w->e[mid];
        if (e->node == node && e->param == param)
            return e;
        if (e->node < node || (e->node == node && e->param < param))
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

int bfit_wsrc_move(bfit_wsrc *w, int node, int from, int to)
{
    const bfit_wsrc_entry *f = bfit_wsrc_find(w, node, from);
    int i;

    if (!f || bfit_wsrc_find(w, node, to))
        return bfit_fail(BFIT_EINVAL, "onnx: no parameter %d of node %d to move, or %d taken", from, node, to);
    i = (int)(f - w->e);
    w->e[i].param = to;
    for (; i + 1 < w->n && w->e[i + 1].node == node && w->e[i + 1].param < to; i++) { /* keep (node, param) order */
        bfit_wsrc_entry t = w->e[i];
        w->e[i] = w->e[i + 1], w->e[i + 1] = t;
    }
    for (; i > 0 && w->e[i - 1].node == node && w->e[i - 1].param > to; i--) {
        bfit_wsrc_entry t = w->e[i];
        w->e[i] = w->e[i - 1], w->e[i - 1] = t;
    }
    return BFIT_OK;
}

int bfit_wsrc_upload(const bfit_wsrc *w, int node, int param, bfit_device *dev, void *dst, size_t bytes)
{
    const bfit_wsrc_entry *e = bfit_wsrc_find(w, node, param);
    float *tmp;
    int rc;

    if (!e)
        return 0;
    if ((uint64_t)e->t->numel * sizeof(float) != bytes)
        return bfit_fail(BFIT_EINVAL, "%s: initializer '%s' has %lld values for a parameter of %zu bytes",
                         w->om->source, e->name, (long long)e->t->numel, bytes);
    /* little-endian f32 in the file, as on the hosts we run on: from the mapping itself */
    if (e->t->raw && e->t->dtype == BFIT_ONNX_FLOAT)
        return (rc = bfit_device_upload(dev, dst, e->t->raw, bytes)) == BFIT_OK ? 1 : rc;
    if (!(tmp = malloc(bytes ? bytes : 1)))
        return bfit_fail(BFIT_ENOMEM, "onnx: out of host memory converting '%s'", e->name);
    rc = bfit_onnx_tensor_f32(e->t, tmp);
    if (rc == BFIT_OK)
        rc = bfit_device_upload(dev, dst, tmp, bytes);
    free(tmp);
    return rc == BFIT_OK ? 1 : rc;
}
