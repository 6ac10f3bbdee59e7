/* head.c - a masked LM's head at its masked tokens only. BERT's head (a
 * linear, GELU and layer norm, then the decoder over the vocabulary) works
 * token by token after the encoder's last layer, and so does that layer
 * after its attention's residual add (a layer norm, the feed-forward and its
 * add, post-norm); the loss scores 15% of the tokens: gathering those rows
 * after the last attention skips the rest of that work and memory (NVIDIA's
 * BERT gathers its masked_lm_positions before the head). The nodes
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

/* The one value the nodes from s on read besides their own outputs (a
 * value v is node v - 1's output), or -1 if they read none or several. */
static int region_input(const bfit_graph_desc *g, int s)
{
    int u = -1;
    for (int i = s; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) {
            int v = g->nodes[i].in[k];
            if (v > s) /* made in the region */
                continue;
            if (u >= 0 && v != u)
                return -1;
            u = v;
        }
    return u;
}

/* The first node of the head: the earliest s from which every node works
 * token by token (adds and products of such values too) and all of them
 * read one value made before s, *u: the add after the last attention (in a
 * post-norm encoder, BERT's, the last layer norms and the feed-forward, its
 * residual add reading the normed rows twice, come after it). -1 where no
 * such run holds a linear (nothing worth skipping). */
static int head_start(const bfit_graph_desc *g, int *u)
{
    int best = -1, linear = 0;
    for (int s = g->nnodes - 1; s >= 0; s--) {
        bfit_layer_kind k = g->nodes[s].cfg.kind;
        int v;
        if (!row_wise(k) && k != BFIT_L_ADD && k != BFIT_L_MUL)
            break;
        linear |= k == BFIT_L_LINEAR;
        if ((v = region_input(g, s)) >= 1 && linear) {
            best = s;
            *u = v;
        }
    }
    return best;
}

int bfit_graph_gather_head(bfit_graph_desc *g, int K, double p)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_GATHER);
    int s, u = -1, rc;

    if (K < 1)
        return bfit_fail(BFIT_EINVAL, "graph: a head gathers at least 1 row, got %d", K);
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].cfg.kind == BFIT_L_GATHER)
            return bfit_fail(BFIT_ESTATE, "graph: the head gathers its rows already");
    if ((s = head_start(g, &u)) < 0)
        return 0;
    c.units = K;
    c.p = (float)p;
    /* appended, then moved to before node s: values from s + 1 on move up one */
    if ((rc = bfit_graph_add(g, &c, u, -1, g->nodes[s].line, g->nodes[s].col)) < 0)
        return rc;
    {
        bfit_node_desc n = g->nodes[g->nnodes - 1];
        memmove(&g->nodes[s + 1], &g->nodes[s], sizeof n * (size_t)(g->nnodes - 1 - s));
        g->nodes[s] = n;
        g->nodes[s].inserted = 1;
    }
    for (int i = s + 1; i < g->nnodes; i++) { /* the head reads u gathered */
        bfit_node_desc *d = &g->nodes[i];
        for (int k = 0; k < d->nin; k++)
            d->in[k] = d->in[k] == u ? s + 1 : d->in[k] + (d->in[k] > s);
        if (d->cfg.share > s) /* 1-based, of a node before it */
            d->cfg.share++;
    }
    return 1;
}
