/* onnx_attn.c - nn.MultiheadAttention as PyTorch 1.13 exports it (batch
 * first, no mask, no dropout on the weights: torchvision's ViT), mapped
 * whole onto batchfit's layers: linear (in_proj, to q | k | v), attention
 * (bidirectional, H heads), linear (out_proj).
 *
 * Why whole, rather than op by op: the export folds the batch into other
 * dimensions ((L, N*H, d) for the heads, (L*N, E) before out_proj) and
 * moves it with transposes, where every batchfit layer keeps the batch
 * first. Following those tensors would need strided permutations of the
 * batch, batched matmuls over N*H and a softmax as device ops of their
 * own (and on CUDA), with a memory plan for each intermediate; the
 * attention layer already does the whole block, its backward included,
 * checked against PyTorch, with what it stores planned to the byte. So
 * the block is recognised from its data path (Softmax back to the input
 * projection, forward to the output's transpose), checked (perms, the
 * scale 1/sqrt(d), shapes), and lowered at its first node; the block's
 * other nodes are then checked against it (the slices take q, k, v in that
 * order, the reshapes give H heads of d) and compute nothing. Their
 * tensors keep their ONNX shapes (affine in the batch) for the Shape nodes
 * that read them. Attention written out by hand (timm's fused qkv reshape,
 * minGPT's split) is onnx_mhsa.c's; another (a mask) is refused at the
 * node that does not fit, but a causal attn_mask (a GPT built of
 * nn.TransformerEncoderLayer) makes the attention causal, and a
 * key_padding_mask made of an attention mask input (onnx_keymask.c) is
 * the padding's keys the layer masks itself. A model of token
 * ids [T, batch] (L->seq_first: nn.Transformer's default layout) has no
 * transposes around the block: its input and output are [T, N, E] already,
 * as the block works inside. */
#include "base/err.h"
#include "nn/onnx_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N_XT, N_MM, N_ADD, N_SQ, N_SK, N_SV, N_RQ, N_RK, N_RV, N_QT, N_KT, N_VT, N_QD, N_MM1, N_SM, N_MM2,
       N_TR5, N_R3, N_G, N_R4, N_TR6,
       N_SMUL, N_MADD, /* with attn_mask: the scores times 1 plus the mask (baddbmm's export); else -1 */
       N_DROP,         /* the dropout on the weights (nn.MultiheadAttention(dropout=p) in training); else -1 */
       N_KTS,          /* k.transpose(0, 1) read only for its size (src_len, with key_padding_mask); else -1 */
       N_COUNT };

typedef struct attn_match {
    int node[N_COUNT];
    oval *x;                      /* the block's input [N, T, E] */
    oval *w_in, *b_in, *w_out, *b_out;
    int T, E, H, hd;
    int lowered;
    int att_id;                   /* the attention layer's graph value, once lowered */
    float drop;                   /* N_DROP's ratio */
} attn_match;

/* The node producing node i's input k, if it is op (and, for a Transpose,
 * its perm is p0 p1 p2; p0 < 0: any); else -1. */
static int prod(onnx_lower *L, int i, int k, const char *op, int p0, int p1, int p2)
{
    const bfit_onnx_node *nd = &L->om->nodes[i];
    oval *v = k < nd->nin ? bfit_onnx_val(L, nd->in[k]) : NULL;
    int j = v ? v->producer : -1;
    if (j < 0 || !bfit_onnx_streq(L->om->nodes[j].op, op))
        return -1;
    if (p0 >= 0) {
        const bfit_onnx_node *t = &L->om->nodes[j];
        for (int a = 0; a < t->nattr; a++)
            if (bfit_onnx_streq(t->attr[a].name, "perm"))
                return t->attr[a].nints == 3 && t->attr[a].ints[0] == p0 && t->attr[a].ints[1] == p1 &&
                               t->attr[a].ints[2] == p2 ? j : -1;
        return -1;
    }
    return j;
}

static int perm_is(onnx_lower *L, int i, int p0, int p1, int p2)
{
    const bfit_onnx_node *t = &L->om->nodes[i];
    for (int a = 0; a < t->nattr; a++)
        if (bfit_onnx_streq(t->attr[a].name, "perm"))
            return t->attr[a].nints == 3 && t->attr[a].ints[0] == p0 && t->attr[a].ints[1] == p1 &&
                   t->attr[a].ints[2] == p2;
    return 0;
}

static int same_in(onnx_lower *L, int i, int j)
{
    return bfit_onnx_val(L, L->om->nodes[i].in[0]) == bfit_onnx_val(L, L->om->nodes[j].in[0]);
}

static oval *init_in(onnx_lower *L, int i, int k)
{
    oval *v = k < L->om->nodes[i].nin ? bfit_onnx_val(L, L->om->nodes[i].in[k]) : NULL;
    return v && v->kind == OV_HOST && v->t && v->init >= 0 ? v : NULL;
}

/* The scores' MatMul before the Softmax: its input, or, with attn_mask, Add(Mul(MatMul, 1), mask) in either
 * order (the mask's own nodes are host arithmetic, checked at the Add). */
static int scores_mm(onnx_lower *L, int sm, int *n)
{
    int add = prod(L, sm, 0, "Add", -1, 0, 0), mm = prod(L, sm, 0, "MatMul", -1, 0, 0);
    n[N_SMUL] = n[N_MADD] = -1;
    for (int k = 0; mm < 0 && add >= 0 && k < 2; k++) {
        int mul = prod(L, add, k, "Mul", -1, 0, 0);
        mm = mul >= 0 ? prod(L, mul, 0, "MatMul", -1, 0, 0) : prod(L, add, k, "MatMul", -1, 0, 0);
        if (mm >= 0)
            n[N_SMUL] = mul, n[N_MADD] = add;
    }
    return mm;
}

/* Back from the Softmax: scores = (q / c) k^T, q k v slices of one projection. */
static int match_back(onnx_lower *L, int sm, int *n)
{
    n[N_SM] = sm;
    if ((n[N_MM1] = scores_mm(L, sm, n)) < 0 || (n[N_QD] = prod(L, n[N_MM1], 0, "Div", -1, 0, 0)) < 0 ||
        (n[N_KT] = prod(L, n[N_MM1], 1, "Transpose", 1, 2, 0)) < 0 ||
        (n[N_QT] = prod(L, n[N_QD], 0, "Transpose", 1, 0, 2)) < 0 ||
        (n[N_RQ] = prod(L, n[N_QT], 0, "Reshape", -1, 0, 0)) < 0 || (n[N_RK] = prod(L, n[N_KT], 0, "Reshape", -1, 0, 0)) < 0 ||
        (n[N_SQ] = prod(L, n[N_RQ], 0, "Slice", -1, 0, 0)) < 0 || (n[N_SK] = prod(L, n[N_RK], 0, "Slice", -1, 0, 0)) < 0)
        return 0;
    n[N_KTS] = -1;
    {
        int c[2];
        if (bfit_onnx_consumers(L, n[N_RK], 0, c, 2) == 2) /* k.size(1) for key_padding_mask's view */
            for (int j = 0; j < 2; j++)
                if (c[j] != n[N_KT] && bfit_onnx_streq(L->om->nodes[c[j]].op, "Transpose") &&
                    perm_is(L, c[j], 1, 0, 2) && bfit_onnx_consumers(L, c[j], 0, c, 1) == 0)
                    n[N_KTS] = c[j];
    }
    n[N_DROP] = bfit_onnx_next(L, sm, "Dropout");
    if ((n[N_MM2] = bfit_onnx_next(L, n[N_DROP] >= 0 ? n[N_DROP] : sm, "MatMul")) < 0 ||
        (n[N_VT] = prod(L, n[N_MM2], 1, "Transpose", 1, 0, 2)) < 0 ||
        (n[N_RV] = prod(L, n[N_VT], 0, "Reshape", -1, 0, 0)) < 0 || (n[N_SV] = prod(L, n[N_RV], 0, "Slice", -1, 0, 0)) < 0)
        return 0;
    if (!same_in(L, n[N_SQ], n[N_SK]) || !same_in(L, n[N_SQ], n[N_SV]) ||
        (n[N_ADD] = prod(L, n[N_SQ], 0, "Add", -1, 0, 0)) < 0)
        return 0;
    /* Add(bias, x W^T) in either order */
    n[N_MM] = prod(L, n[N_ADD], 0, "MatMul", -1, 0, 0);
    if (n[N_MM] < 0)
        n[N_MM] = prod(L, n[N_ADD], 1, "MatMul", -1, 0, 0);
    if (L->seq_first) { /* the tokens [T, N, E] as they come */
        n[N_XT] = -1;
        return n[N_MM] >= 0;
    }
    return n[N_MM] >= 0 && (n[N_XT] = prod(L, n[N_MM], 0, "Transpose", 1, 0, 2)) >= 0;
}

/* Forward from the second MatMul: heads back together, out_proj, batch first again. */
static int match_forward(onnx_lower *L, int *n)
{
    n[N_TR6] = -1; /* [T, batch] tokens: the block's output is the Reshape's */
    return (n[N_TR5] = bfit_onnx_next(L, n[N_MM2], "Transpose")) >= 0 && perm_is(L, n[N_TR5], 1, 0, 2) &&
           (n[N_R3] = bfit_onnx_next(L, n[N_TR5], "Reshape")) >= 0 && (n[N_G] = bfit_onnx_next(L, n[N_R3], "Gemm")) >= 0 &&
           (n[N_R4] = bfit_onnx_next(L, n[N_G], "Reshape")) >= 0 &&
           (L->seq_first ||
            ((n[N_TR6] = bfit_onnx_next(L, n[N_R4], "Transpose")) >= 0 && perm_is(L, n[N_TR6], 1, 0, 2)));
}

/* Each tensor inside is read by the block's next node only (Shape nodes aside). */
static int closed(onnx_lower *L, const int *n)
{
    static const struct { int from, to; } e[] = {
        {N_XT, N_MM}, {N_MM, N_ADD}, {N_SQ, N_RQ}, {N_SK, N_RK}, {N_SV, N_RV}, {N_RQ, N_QT}, {N_RK, N_KT},
        {N_RV, N_VT}, {N_QT, N_QD}, {N_QD, N_MM1}, {N_KT, N_MM1}, {N_VT, N_MM2},
    };
    int c[4], chain[4] = {n[N_MM1], n[N_SMUL], n[N_MADD], n[N_SM]}, from = n[N_MM1];
    for (unsigned i = 0; i < sizeof e / sizeof e[0]; i++) {
        int two = e[i].from == N_RK && n[N_KTS] >= 0; /* and N_KTS, read for its size */
        if (n[e[i].from] >= 0 && (bfit_onnx_consumers(L, n[e[i].from], 0, c, 2) != 1 + two ||
                                  (c[0] != n[e[i].to] && (!two || c[1] != n[e[i].to]))))
            return 0;
    }
    for (int i = 1; i < 4; i++) /* the scores to the Softmax, through the mask's Mul and Add if there */
        if (chain[i] >= 0) {
            if (bfit_onnx_consumers(L, from, 0, c, 1) != 1 || c[0] != chain[i])
                return 0;
            from = chain[i];
        }
    return bfit_onnx_consumers(L, n[N_ADD], 0, c, 4) == 3;
}

/* Dropout node i's ratio, read ahead (an attribute before opset 12, then
 * input 1, default 0.5): 1 if it is a number in [0, 1). */
static int drop_ratio(onnx_lower *L, int i, float *out)
{
    const bfit_onnx_node *nd = &L->om->nodes[i];
    const bfit_onnx_attr *at = bfit_onnx_node_attr(nd, "ratio");
    double r = at ? at->f : 0.5;
    if (nd->nin > 1 && nd->in[1].n && !bfit_onnx_scalar(L, nd->in[1], &r))
        return 0;
    *out = (float)r;
    return r >= 0 && r < 1;
}

/* Weights, sizes and the scale; 1 if they are nn.MultiheadAttention's. */
static int weights(onnx_lower *L, attn_match *a)
{
    const int *n = a->node;
    double c;
    oval *wt = bfit_onnx_val(L, L->om->nodes[n[N_MM]].in[1]);
    int wnode = wt ? wt->producer : -1;
    int64_t ta = 0, tb = 0;

    a->x = bfit_onnx_val(L, L->om->nodes[n[N_XT] >= 0 ? n[N_XT] : n[N_MM]].in[0]);
    a->b_in = init_in(L, n[N_ADD], 0) ? init_in(L, n[N_ADD], 0) : init_in(L, n[N_ADD], 1);
    a->w_in = wnode >= 0 && bfit_onnx_streq(L->om->nodes[wnode].op, "Transpose") ? init_in(L, wnode, 0) : NULL;
    a->w_out = init_in(L, n[N_G], 1);
    a->b_out = init_in(L, n[N_G], 2);
    for (int i = 0; i < L->om->nodes[n[N_G]].nattr; i++) {
        const bfit_onnx_attr *at = &L->om->nodes[n[N_G]].attr[i];
        ta |= bfit_onnx_streq(at->name, "transA") && at->i;
        tb |= bfit_onnx_streq(at->name, "transB") && at->i;
    }
    if (!a->w_in || !a->b_in || !a->w_out || !a->b_out || ta || !tb || a->w_in->t->ndim != 2)
        return 0;
    a->E = (int)a->w_in->t->dim[1];
    if (a->w_in->t->dim[0] != 3 * a->E || a->b_in->t->numel != 3 * a->E || a->w_out->t->ndim != 2 ||
        a->w_out->t->dim[0] != a->E || a->w_out->t->dim[1] != a->E || a->b_out->t->numel != a->E)
        return 0;
    if (!bfit_onnx_scalar(L, L->om->nodes[n[N_QD]].in[1], &c) || c <= 0)
        return 0;
    if (n[N_DROP] >= 0 && !drop_ratio(L, n[N_DROP], &a->drop))
        return 0;
    a->hd = (int)lround(c * c);
    if (a->hd < 1 || a->E % a->hd || fabs(c - sqrt((double)a->hd)) > 1e-5 * c)
        return 0;
    a->H = a->E / a->hd;
    return 1;
}

int bfit_onnx_find_attention(onnx_lower *L)
{
    for (int i = 0; i < L->om->nnodes; i++) {
        attn_match a, *p;
        if (!bfit_onnx_streq(L->om->nodes[i].op, "Softmax"))
            continue;
        memset(&a, 0, sizeof a);
        if (!match_back(L, i, a.node) || !match_forward(L, a.node) || !closed(L, a.node) || !weights(L, &a)) {
            if (!L->attn_miss)
                L->attn_miss = i + 1;
            continue; /* not this block: the Softmax is refused where it stands */
        }
        if (!(p = realloc(L->attn, sizeof *p * (size_t)(L->nattn + 1))))
            return bfit_fail(BFIT_ENOMEM, "onnx: out of host memory");
        L->attn = p;
        L->attn[L->nattn++] = a;
        for (int k = 0; k < N_COUNT; k++)
            if (a.node[k] >= 0)
                L->done[a.node[k]] = 1;
    }
    return BFIT_OK;
}

void bfit_onnx_attention_free(onnx_lower *L)
{
    free(L->attn);
    L->attn = NULL;
    L->nattn = 0;
}

/* Node i's output: a tensor inside the block, of ONNX shape d (each a * m + b). */
static void view(onnx_lower *L, int i, int rank, const int64_t (*d)[2])
{
    oval *o = bfit_onnx_val(L, L->om->nodes[i].out[0]);
    o->kind = OV_VIEW;
    o->rank = rank;
    for (int k = 0; k < rank; k++)
        o->ra[k] = d[k][0], o->rb[k] = d[k][1];
}

static void views(onnx_lower *L, const attn_match *a)
{
    const int *n = a->node;
    int64_t T = a->T, E = a->E, H = a->H, d = a->hd;
    const int64_t tme[3][2] = {{0, T}, {1, 0}, {0, E}}, tm3e[3][2] = {{0, T}, {1, 0}, {0, 3 * E}};
    const int64_t heads[3][2] = {{0, T}, {H, 0}, {0, d}}, bh[3][2] = {{H, 0}, {0, T}, {0, d}};
    const int64_t kt[3][2] = {{H, 0}, {0, d}, {0, T}}, sc[3][2] = {{H, 0}, {0, T}, {0, T}}, rows[2][2] = {{T, 0}, {0, E}};

    if (n[N_XT] >= 0)
        view(L, n[N_XT], 3, tme);
    view(L, n[N_MM], 3, tm3e), view(L, n[N_ADD], 3, tm3e);
    view(L, n[N_SQ], 3, tme), view(L, n[N_SK], 3, tme), view(L, n[N_SV], 3, tme);
    view(L, n[N_RQ], 3, heads), view(L, n[N_RK], 3, heads), view(L, n[N_RV], 3, heads);
    view(L, n[N_QT], 3, bh), view(L, n[N_VT], 3, bh), view(L, n[N_QD], 3, bh), view(L, n[N_MM2], 3, bh);
    view(L, n[N_KT], 3, kt);
    if (n[N_KTS] >= 0)
        view(L, n[N_KTS], 3, bh);
    view(L, n[N_MM1], 3, sc), view(L, n[N_SM], 3, sc);
    if (n[N_DROP] >= 0)
        view(L, n[N_DROP], 3, sc);
    if (n[N_MADD] >= 0)
        view(L, n[N_MADD], 3, sc);
    if (n[N_SMUL] >= 0)
        view(L, n[N_SMUL], 3, sc);
    view(L, n[N_TR5], 3, heads);
    view(L, n[N_R3], 2, rows), view(L, n[N_G], 2, rows);
    if (n[N_TR6] >= 0) /* else the Reshape's output is the block's */
        view(L, n[N_R4], 3, tme);
}

/* linear (in_proj) -> attention -> linear (out_proj), at the block's entry. */
static int lower_block(onnx_lower *L, attn_match *a)
{
    bfit_layer_cfg in = bfit_layer_cfg_default(BFIT_L_LINEAR), at = bfit_layer_cfg_default(BFIT_L_ATTENTION);
    bfit_layer_cfg out = in;
    oval *x = a->x, *p[2], v, *o = bfit_onnx_out(L, 0), *exit;
    bfit_onnx_str name;
    int rc, producer;

    if (!x || x->kind != OV_DEVICE || x->shape.nd != 2 || x->shape.d[1] != a->E)
        return bfit_onnx_refuse(L, "the attention block's input must be tokens [N, T, %d]", a->E);
    a->T = x->shape.d[0];
    in.units = 3 * a->E;
    p[0] = a->w_in, p[1] = a->b_in;
    if ((rc = bfit_onnx_emit(L, &in, &x, 1, p, 2)) != BFIT_OK)
        return rc;
    v = *o;
    x = &v;
    at.units = a->H;
    at.causal = 0; /* a causal attn_mask makes it causal at the mask's Add (check_mask) */
    at.p = a->drop;
    if ((rc = bfit_onnx_emit(L, &at, &x, 1, NULL, 0)) != BFIT_OK)
        return rc;
    v = *o;
    a->att_id = o->id;
    out.units = a->E;
    p[0] = a->w_out, p[1] = a->b_out;
    if ((rc = bfit_onnx_emit(L, &out, &x, 1, p, 2)) != BFIT_OK)
        return rc;
    exit = bfit_onnx_val(L, L->om->nodes[a->node[a->node[N_TR6] >= 0 ? N_TR6 : N_R4]].out[0]);
    name = exit->name, producer = exit->producer;
    *exit = *o;
    exit->name = name, exit->producer = producer;
    views(L, a);
    a->lowered = 1;
    return BFIT_OK;
}

/* A host input as constants (nmax of them at most). */
static int consts(onnx_lower *L, int k, int64_t *v, int nmax, int *n)
{
    hval *h = bfit_onnx_host(L, bfit_onnx_in(L, k), k);
    if (!h || h->isf || h->n > nmax)
        return 0;
    for (int64_t i = 0; i < h->n; i++) {
        if (h->a[i])
            return 0;
        v[i] = h->b[i];
    }
    *n = (int)h->n;
    return 1;
}

/* The slice takes q, k or v (which = 0, 1, 2) of the projection's last axis. */
static int check_slice(onnx_lower *L, const attn_match *a, int which)
{
    int64_t st[2] = {0}, en[2] = {0}, ax[2] = {-1, 0};
    int ns, ne, na = 1;
    if (!consts(L, 1, st, 1, &ns) || !consts(L, 2, en, 1, &ne) ||
        (bfit_onnx_in(L, 3) && !consts(L, 3, ax, 1, &na)) || (bfit_onnx_in(L, 4) && bfit_onnx_in(L, 4)->kind != OV_HOST) ||
        (ax[0] != -1 && ax[0] != 2) || st[0] != (int64_t)which * a->E ||
        (en[0] != (int64_t)(which + 1) * a->E && !(which == 2 && en[0] >= 3 * (int64_t)a->E)))
        return bfit_onnx_refuse(L, "this Slice of the attention's projection does not take %s as columns [%d, %d) of "
                                   "the last axis", which == 0 ? "q" : which == 1 ? "k" : "v", which * a->E,
                                (which + 1) * a->E);
    return BFIT_OK;
}

/* The reshape's target is want (a * m + b each; 0 copies the input's dimension). */
static int check_reshape(onnx_lower *L, int n, const int64_t (*want)[2], const char *what)
{
    hval *t = bfit_onnx_host(L, bfit_onnx_in(L, 1), 1);
    oval *x = bfit_onnx_in(L, 0);
    int ok = t && !t->isf && t->n == n;
    for (int d = 0; ok && d < n; d++) {
        int64_t a = t->a[d], b = t->b[d];
        if (!a && !b && x && d < x->rank) /* 0: the input's dimension */
            a = x->ra[d], b = x->rb[d];
        ok = bfit_onnx_affine_is(L, a, b, want[d][0], want[d][1]);
    }
    return ok ? BFIT_OK : bfit_onnx_refuse(L, "this Reshape in the attention does not give %s", what);
}

/* attn_mask: the scores times 1, plus the causal mask [T, T] (-inf above the diagonal; a bool mask is
 * exported as such a float one too), which makes the block's attention layer causal. */
static int check_mask(onnx_lower *L, const attn_match *a, int role)
{
    double one;
    int k = bfit_onnx_in(L, 0) && bfit_onnx_in(L, 0)->kind == OV_VIEW ? 1 : 0;
    oval *m = bfit_onnx_in(L, k);
    hval *h;

    if (role == N_SMUL)
        return bfit_onnx_scalar(L, L->nd->in[1], &one) && one == 1
                   ? BFIT_OK
                   : bfit_onnx_refuse(L, "the attention's scores are scaled twice (batchfit reads them scaled by "
                                         "1/sqrt(head size) once)");
    if (m && m->kind == OV_KEYMASK) { /* key_padding_mask: the padding's keys, which the layer masks itself */
        int causal = 0;
        if (!bfit_onnx_keymask_on(L, m, a->H, a->T, &causal))
            return bfit_onnx_refuse(L, "the attention's mask is made from the attention mask input but is not "
                                       "its padding's keys: batchfit reads src_key_padding_mask (True at padding), "
                                       "with or without a causal attn_mask");
        L->g->nodes[a->att_id - 1].cfg.causal |= causal;
        return BFIT_OK;
    }
    if (!m || m->kind != OV_HOST || !(h = bfit_onnx_host(L, m, k)) || !bfit_onnx_causal_mask(h, a->T, 1, 1))
        return bfit_onnx_refuse(L, "the attention's attn_mask is not the causal one (-inf where a token would see "
                                   "a later one, 0 elsewhere: nn.Transformer.generate_square_subsequent_mask(%d)), "
                                   "the only mask batchfit reads", a->T);
    L->g->nodes[a->att_id - 1].cfg.causal = 1;
    return BFIT_OK;
}

int bfit_onnx_lower_attention(onnx_lower *L, int *rc)
{
    for (int m = 0; m < L->nattn; m++) {
        attn_match *a = &L->attn[m];
        int role = -1, first = a->node[N_XT] >= 0 ? N_XT : N_MM; /* the block's entry */
        for (int k = 0; k < N_COUNT && role < 0; k++)
            role = a->node[k] == L->ndi ? k : -1;
        if (role < 0)
            continue;
        if (!a->lowered && role != first) {
            *rc = bfit_onnx_refuse(L, "a node of an attention block comes before the block's input");
            return 1;
        }
        {
            int64_t T = a->T, E = a->E;
            const int64_t heads[3][2] = {{0, T}, {a->H, 0}, {0, a->hd}}, rows[2][2] = {{T, 0}, {0, E}};
            const int64_t back[3][2] = {{0, T}, {1, 0}, {0, E}};
            if (role == first) {
                *rc = lower_block(L, a);
                return 1;
            }
            switch (role) {
            case N_SQ: case N_SK: case N_SV: *rc = check_slice(L, a, role - N_SQ); break;
            case N_RQ: case N_RK: case N_RV: *rc = check_reshape(L, 3, heads, "[T, N * heads, head size]"); break;
            case N_R3: *rc = check_reshape(L, 2, rows, "[T * N, E]"); break;
            case N_R4: *rc = check_reshape(L, 3, back, "[T, N, E]"); break;
            case N_SMUL: case N_MADD: *rc = check_mask(L, a, role); break;
            case N_DROP: /* its ratio is the attention layer's dropout */
                bfit_onnx_unavail(L, 1, "the mask output of Dropout");
                *rc = BFIT_OK;
                break;
            case N_SM: {
                int64_t axis = -1;
                *rc = bfit_onnx_attr_int(L, "axis", -1, &axis);
                if (*rc == BFIT_OK && axis != -1 && axis != 2)
                    *rc = bfit_onnx_refuse(L, "the attention's softmax must run over the keys (the last axis)");
                break;
            }
            default: *rc = BFIT_OK; break;
            }
        }
        return 1;
    }
    return 0;
}
