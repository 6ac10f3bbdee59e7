/* onnx_gqa.c - grouped-query attention's repeated keys and values: fewer
 * key and value heads than query heads (LLaMA 2 70B, LLaMA 3, Mistral), each
 * repeated before the scores as Hugging Face's repeat_kv writes it:
 * x[:, :, None, :, :].expand(B, Hkv, r, T, d).reshape(B, Hkv r, T, d).
 *
 * Exported (opset 17) from k or v by heads [N, Hkv, T, d] (onnx_mhsa.c's
 * view of a separate projection [T, Hkv d]): Unsqueeze at axis 2, Expand to
 * [N, Hkv, r, T, d], Reshape to [N, Hkv r, T, d]. The first two are views
 * (att[0] from BFIT_ATT_GQA on); the Reshape emits a `repeat` layer on the
 * projection, whose output [T, Hkv r d] is k or v by heads again, of the
 * query's width, which the attention then reads as any separate projection. */
#include "base/err.h"
#include "nn/onnx_int.h"

#include <stdint.h>

enum { G_UNSQ = BFIT_ATT_GQA, G_EXP };

#define BATCH BFIT_ONNX_BATCH

static const char *const WANT =
    "batchfit reads grouped-query attention's repeated keys and values as Hugging Face's repeat_kv writes them: "
    "x[:, :, None, :, :].expand(B, Hkv, r, T, d).reshape(B, Hkv * r, T, d) on k and v by heads [B, Hkv, T, d] of "
    "separate projections";

/* Output 0 is view v at a stage, its ONNX dimensions dims[0..rank) (BATCH: the batch). */
static void gview(onnx_lower *L, const oval *v, int stage, int rank, const int64_t *dims)
{
    bfit_onnx_alias(L, v);
    bfit_onnx_out(L, 0)->att[0] = stage;
    bfit_onnx_set_dims(bfit_onnx_out(L, 0), rank, dims);
}

/* Input k of the node being lowered is the n host ints want (BATCH: the batch, a * m + b with a 1, b 0). */
static int ints_are(onnx_lower *L, int k, const int64_t *want, int n)
{
    oval *v = bfit_onnx_in(L, k);
    hval *h = v && v->kind == OV_HOST ? bfit_onnx_host(L, v, k) : NULL;
    if (!h || h->isf || h->n != n)
        return 0;
    for (int i = 0; i < n; i++)
        if (want[i] == BATCH ? h->a[i] != 1 || h->b[i] != 0 : h->a[i] != 0 || h->b[i] != want[i])
            return 0;
    return 1;
}

int bfit_onnx_gqa(onnx_lower *L, oval *v, int *rc)
{
    const bfit_onnx_str op = L->nd->op;
    int64_t T = v->shape.d[0], g = v->att[1], d = v->shape.d[1] / (g ? g : 1), r = v->att_rep;

    if (v->att[0] == BFIT_ATT_HEADS) { /* a start: Unsqueeze at axis 2 (opset 13: an input; before: an attribute) */
        const bfit_onnx_attr *ax = bfit_onnx_node_attr(L->nd, "axes");
        if (!bfit_onnx_streq(op, "Unsqueeze"))
            return 0;
        if (L->nd->nin > 1 ? !ints_are(L, 1, (int64_t[]){2}, 1)
                           : !ax || ax->type != BFIT_ONNX_A_INTS || ax->nints != 1 || ax->ints[0] != 2)
            return 0;
        if (!v->att_sep)
            *rc = bfit_onnx_refuse(L, "%s (q, k and v of one projection to 3C have as many heads each)", WANT);
        else
            gview(L, v, G_UNSQ, 5, (int64_t[]){BATCH, g, 1, T, d}), *rc = BFIT_OK;
        return 1;
    }
    if (v->att[0] == G_UNSQ && bfit_onnx_streq(op, "Expand") && L->nd->nin == 2) {
        oval *s = bfit_onnx_in(L, 1);
        hval *h = s && s->kind == OV_HOST ? bfit_onnx_host(L, s, 1) : NULL;
        if (!h || h->isf || h->n != 5 || h->a[2] || h->b[2] < 1 || h->b[2] > 4096 ||
            !ints_are(L, 1, (int64_t[]){BATCH, g, h->b[2], T, d}, 5))
            *rc = bfit_onnx_refuse(L, "%s (the Expand to [B, Hkv, r, T, d])", WANT);
        else {
            gview(L, v, G_EXP, 5, (int64_t[]){BATCH, g, h->b[2], T, d});
            bfit_onnx_out(L, 0)->att_rep = (int)h->b[2];
            *rc = BFIT_OK;
        }
        return 1;
    }
    if (v->att[0] == G_EXP && bfit_onnx_streq(op, "Reshape") && ints_are(L, 1, (int64_t[]){BATCH, g * r, T, d}, 4)) {
        bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_REPEAT);
        oval x = *v, *o;
        int id;
        x.kind = OV_DEVICE;
        x.att[0] = x.att_sep = x.att_rep = 0;
        c.units = (int)d, c.groups = (int)r;
        if ((*rc = bfit_onnx_emit(L, &c, (oval *const[]){&x}, 1, NULL, 0)) != BFIT_OK)
            return 1;
        o = bfit_onnx_out(L, 0);
        id = o->id;
        gview(L, v, BFIT_ATT_HEADS, 4, (int64_t[]){BATCH, g * r, T, d}); /* k or v by heads, of the query's width */
        o->id = id, o->shape.d[1] = (int)(g * r * d), o->att[1] = (int)(g * r), o->att_rep = 0;
        return 1;
    }
    *rc = bfit_onnx_refuse(L, "%s", WANT);
    return 1;
}
