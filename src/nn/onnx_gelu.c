/* onnx_gelu.c - GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x +
 * 0.044715 x^3))), as exports write it: nn.GELU(approximate='tanh') at
 * opset 17 (x * x * x and Muls), minGPT's NewGELU and Hugging Face's
 * gelu_new (torch.pow(x, 3.0), the factors in another order), and the
 * opset-20 Gelu with approximate='tanh'.
 *
 * Rather than one node order, the chain is recognised by what it computes:
 * the elementwise nodes (Mul, Add, Sub, Div, Pow, Tanh, Neg) that read only
 * a tensor x, constants and each other, up to the one whose output leaves
 * the chain, are
 * evaluated on the host at probe points; if they give GELU's tanh form
 * there (within 1e-6, where the exact GELU differs by up to 1e-3), the
 * chain is one `gelu tanh=1` layer on x. */
#include "base/err.h"
#include "nn/onnx_int.h"

#include <math.h>
#include <string.h>

#define MAXCHAIN 16

static const char *const ELT[] = {"Mul", "Add", "Sub", "Div", "Pow", "Tanh", "Neg"};

static int elt_op(const bfit_onnx_node *nd)
{
    for (unsigned i = 0; i < sizeof ELT / sizeof ELT[0]; i++)
        if (bfit_onnx_streq(nd->op, ELT[i]))
            return (int)i;
    return -1;
}

/* Input k of node i: 0 x itself, 1 a constant (*c), 2 the output of chain node set[*j], -1 none of these. */
static int operand(onnx_lower *L, int i, int k, const oval *x, const int *set, int n, double *c, int *j)
{
    oval *v = bfit_onnx_val(L, L->om->nodes[i].in[k]);
    if (!v)
        return -1;
    if (v == x)
        return 0;
    for (*j = 0; *j < n; (*j)++)
        if (v->producer == set[*j])
            return 2;
    return v->kind != OV_DEVICE && v->kind != OV_VIEW && bfit_onnx_scalar(L, v->name, c) ? 1 : -1;
}

/* Node i joins the chain: elementwise, every input x, a constant or a chain node's output. */
static int joins(onnx_lower *L, int i, const oval *x, const int *set, int n)
{
    const bfit_onnx_node *nd = &L->om->nodes[i];
    double c;
    int j, op = elt_op(nd);
    if (op < 0 || L->done[i] || nd->nin < 1 || nd->nin > 2 || nd->nout != 1)
        return 0;
    for (int k = 0; k < nd->nin; k++)
        if (operand(L, i, k, x, set, n, &c, &j) < 0)
            return 0;
    return 1;
}

static int in_set(const int *set, int n, int i)
{
    for (int t = 0; t < n; t++)
        if (set[t] == i)
            return 1;
    return 0;
}

/* The chain through the node being lowered: the nodes that read x (its roots: x * x, torch.pow(x, 3.0),
 * 0.5 * x) and their consumers, each reading only x, constants and the chain; their count and the one
 * read outside (its end); 0 if there is no such chain. */
static int chain(onnx_lower *L, const oval *x, int *set, int *end)
{
    int n = 0, grew = 1, out = -1;

    for (int i = 0; i < L->om->nnodes && n < MAXCHAIN; i++)
        for (int k = 0; k < L->om->nodes[i].nin; k++)
            if (bfit_onnx_val(L, L->om->nodes[i].in[k]) == x && !in_set(set, n, i) && joins(L, i, x, set, 0))
                set[n++] = i;
    if (!in_set(set, n, L->ndi))
        return 0;
    while (grew && n < MAXCHAIN) { /* the consumers of the chain that read only x, constants and it */
        int c[8], nc;
        grew = 0;
        for (int s = 0; s < n && !grew; s++) {
            if ((nc = bfit_onnx_consumers(L, set[s], 0, c, 8)) < 0)
                return 0;
            for (int k = 0; k < nc && !grew; k++)
                if (!in_set(set, n, c[k]) && joins(L, c[k], x, set, n))
                    set[n++] = c[k], grew = 1;
        }
    }
    for (int s = 0; s < n; s++) { /* every output read inside the chain, but one's */
        int c[8], nc = bfit_onnx_consumers(L, set[s], 0, c, 8), inside = nc > 0;
        for (int k = 0; k < nc; k++)
            inside &= in_set(set, n, c[k]);
        if (!inside) {
            if (out >= 0 || nc < 0)
                return 0;
            out = set[s];
        }
    }
    *end = out;
    return out >= 0 ? n : 0;
}

/* The chain at x = p (the nodes in order: each joined after its inputs). */
static int eval(onnx_lower *L, const oval *x, const int *set, int n, double p, double *y)
{
    double v[MAXCHAIN];
    for (int s = 0; s < n; s++) {
        const bfit_onnx_node *nd = &L->om->nodes[set[s]];
        double a[2] = {0, 0}, c;
        int j;
        for (int k = 0; k < nd->nin; k++) {
            int w = operand(L, set[s], k, x, set, s, &c, &j);
            if (w < 0)
                return 0; /* an input from a chain node after this one: not in order */
            a[k] = w == 0 ? p : w == 1 ? c : v[j];
        }
        switch (elt_op(nd)) {
        case 0: v[s] = a[0] * a[1]; break;
        case 1: v[s] = a[0] + a[1]; break;
        case 2: v[s] = a[0] - a[1]; break;
        case 3: v[s] = a[0] / a[1]; break;
        case 4: v[s] = pow(a[0], a[1]); break;
        case 5: v[s] = tanh(a[0]); break;
        default: v[s] = -a[0]; break;
        }
    }
    *y = v[n - 1];
    return 1;
}

static double gelu_tanh(double x) { return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

/* Whether the chain (in order, its end last) computes GELU's tanh form: at probe points across its bend,
 * and far out where it is x or 0 (the exact GELU differs from it by up to 1.5e-3 near |x| = 2). Where it
 * does not: the first point and the chain's value there. */
static int is_gelu_tanh(onnx_lower *L, const oval *x, const int *set, int n, double *at, double *got)
{
    static const double probe[] = {-6, -3, -2, -1.5, -0.7, -0.1, 0.05, 0.3, 1, 1.7, 2.5, 6};
    for (unsigned i = 0; i < sizeof probe / sizeof probe[0]; i++) {
        double y = NAN, want = gelu_tanh(probe[i]);
        if (!eval(L, x, set, n, probe[i], &y) || !(fabs(y - want) <= 1e-6 * (1 + fabs(want)))) {
            *at = probe[i], *got = y;
            return 0;
        }
    }
    return 1;
}

/* Put the chain in an order where each node follows the chain nodes it reads, the end last. */
static int order(onnx_lower *L, const oval *x, int *set, int n, int end)
{
    int done[MAXCHAIN] = {0}, out[MAXCHAIN], m = 0;
    while (m < n) {
        int moved = 0;
        for (int s = 0; s < n; s++) {
            const bfit_onnx_node *nd = &L->om->nodes[set[s]];
            int ready = !done[s] && (set[s] != end || m == n - 1);
            for (int k = 0; ready && k < nd->nin; k++) {
                double c;
                int j, w = operand(L, set[s], k, x, set, n, &c, &j);
                ready = w != 2 || done[j];
            }
            if (ready)
                done[s] = 1, out[m++] = set[s], moved = 1;
        }
        if (!moved)
            return 0;
    }
    memcpy(set, out, sizeof *set * (size_t)n);
    return 1;
}

int bfit_onnx_lower_gelu(onnx_lower *L, int *rc)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_GELU);
    int set[MAXCHAIN], n, end = -1;
    double at = 0, got = 0;
    oval *x = NULL;

    if (elt_op(L->nd) < 0)
        return 0;
    for (int k = 0; k < L->nd->nin && !x; k++) {
        oval *v = bfit_onnx_in(L, k);
        x = v && v->kind == OV_DEVICE ? v : NULL;
    }
    if (!x || (n = chain(L, x, set, &end)) < 3 || !order(L, x, set, n, end))
        return 0;
    if (!is_gelu_tanh(L, x, set, n, &at, &got)) {
        int tanh = 0;
        char nm[128];
        for (int s = 0; s < n; s++)
            tanh |= elt_op(&L->om->nodes[set[s]]) == 5;
        if (!tanh) /* some other arithmetic: the other handlers say what they read */
            return 0;
        *rc = bfit_onnx_refuse(L, "the %d elementwise nodes from here to '%s', with a Tanh, look like GELU's tanh "
                                  "approximation but compute something else: %g at x = %g, where 0.5 x (1 + "
                                  "tanh(sqrt(2/pi) (x + 0.044715 x^3))) is %g (nn.GELU(approximate='tanh') and "
                                  "minGPT's NewGELU are read)", n, bfit_onnx_cstr(L->om->nodes[end].name, nm, sizeof nm),
                               got, at, gelu_tanh(at));
        return 1;
    }
    c.tanh = 1;
    if ((*rc = bfit_onnx_emit(L, &c, &x, 1, NULL, 0)) != BFIT_OK)
        return 1;
    for (int s = 0; s < n; s++)
        L->done[set[s]] = 1;
    if (end != L->ndi)
        bfit_onnx_move_out(L, L->ndi, end, "a step of GELU's tanh approximation, which batchfit computes whole");
    return 1;
}
