/* head.c - a masked LM's head at its masked tokens only. BERT's head (a
 * linear, GELU and layer norm, then the decoder over the vocabulary) works
 * token by token after the encoder's last layer, and the loss scores 15% of
 * the tokens: gathering those rows first skips the rest of the head's work
 * and memory, as NVIDIA's BERT gathers its masked_lm_positions. The nodes
 * keep their numbers (bfit_node_desc.inserted): names, starting weights and
 * the seeded init are those of the model as written. */
#include "base/err.h"
#include "nn/graph.h"

#include <string.h>

/* Kinds that work on each token's row alone, so that they may run on the
 * gathered rows and give those rows what they gave before. */
static int row_wise(bfit_layer_kind k)
{
    switch (k) {
    case BFIT_L_LINEAR: case BFIT_L_GELU: case BFIT_L_RELU: case BFIT_L_LAYERNORM: case BFIT_L_RMSNORM:
    case BFIT_L_DROPOUT: case BFIT_L_SIGMOID: case BFIT_L_SILU: case BFIT_L_TANH: case BFIT_L_CLIP:
    case BFIT_L_HARDSIGMOID: case BFIT_L_HARDSWISH: case BFIT_L_LEAKYRELU: case BFIT_L_ELU: case BFIT_L_SOFTPLUS:
    case BFIT_L_SELU: case BFIT_L_CELU: case BFIT_L_LAYERSCALE:
        return 1;
    default:
        return 0;
    }
}

static int readers(const bfit_graph_desc *g, int v)
{
    int n = 0;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++)
            n += g->nodes[i].in[k] == v;
    return n;
}

/* The first node of the head: the earliest of the chain of one-input
 * row-wise nodes, each the only reader of the one before, that ends at the
 * last node; -1 where the chain holds no linear (nothing worth skipping). */
static int head_start(const bfit_graph_desc *g)
{
    int i = g->nnodes - 1, linear = 0;
    if (i < 0 || !row_wise(g->nodes[i].cfg.kind) || g->nodes[i].nin != 1)
        return -1;
    for (;;) {
        int v = g->nodes[i].in[0];
        linear |= g->nodes[i].cfg.kind == BFIT_L_LINEAR;
        if (v < 1 || !row_wise(g->nodes[v - 1].cfg.kind) || g->nodes[v - 1].nin != 1 || readers(g, v) != 1)
            break;
        i = v - 1;
    }
    return linear ? i : -1;
}

int bfit_graph_gather_head(bfit_graph_desc *g, int K, double p)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_GATHER);
    int s, rc;

    if (K < 1)
        return bfit_fail(BFIT_EINVAL, "graph: a head gathers at least 1 row, got %d", K);
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].cfg.kind == BFIT_L_GATHER)
            return bfit_fail(BFIT_ESTATE, "graph: the head gathers its rows already");
    if ((s = head_start(g)) < 0)
        return 0;
    c.units = K;
    c.p = (float)p;
    /* appended, then moved to before node s: values from s + 1 on move up one */
    if ((rc = bfit_graph_add(g, &c, g->nodes[s].in[0], -1, g->nodes[s].line, g->nodes[s].col)) < 0)
        return rc;
    {
        bfit_node_desc n = g->nodes[g->nnodes - 1];
        memmove(&g->nodes[s + 1], &g->nodes[s], sizeof n * (size_t)(g->nnodes - 1 - s));
        g->nodes[s] = n;
        g->nodes[s].inserted = 1;
    }
    for (int i = s + 1; i < g->nnodes; i++) {
        bfit_node_desc *d = &g->nodes[i];
        for (int k = 0; k < d->nin; k++)
            d->in[k] += d->in[k] > s;
        if (d->cfg.share > s) /* 1-based, of a node before it */
            d->cfg.share++;
    }
    g->nodes[s + 1].in[0] = s + 1;
    return 1;
}
