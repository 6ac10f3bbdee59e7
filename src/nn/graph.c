/* graph.c - building a graph description node by node. */
#include "base/err.h"
#include "nn/graph.h"
#include "nn/wsrc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bfit_graph_init(bfit_graph_desc *g, const char *source)
{
    memset(g, 0, sizeof *g);
    snprintf(g->source, sizeof g->source, "%s", source ? source : "");
}

int bfit_graph_add(bfit_graph_desc *g, const bfit_layer_cfg *cfg, int in0, int in1, int line, int col)
{
    int in[2] = {in0, in1};
    return bfit_graph_add_n(g, cfg, in, in1 >= 0 ? 2 : 1, line, col);
}

int bfit_graph_add_n(bfit_graph_desc *g, const bfit_layer_cfg *cfg, const int *in, int nin, int line, int col)
{
    bfit_node_desc *n;

    if (nin < 1 || nin > BFIT_LAYER_MAXIN)
        return bfit_fail(BFIT_EINVAL, "graph: a node takes 1 to %d inputs, got %d", BFIT_LAYER_MAXIN, nin);
    if (g->nnodes == g->cap) {
        int cap = g->cap ? g->cap * 2 : 16;
        bfit_node_desc *p = realloc(g->nodes, (size_t)cap * sizeof *p);
        if (!p)
            return bfit_fail(BFIT_ENOMEM, "graph: out of host memory");
        g->nodes = p;
        g->cap = cap;
    }
    n = &g->nodes[g->nnodes++];
    n->cfg = *cfg;
    n->nin = nin;
    for (int k = 0; k < BFIT_LAYER_MAXIN; k++)
        n->in[k] = k < nin ? in[k] : -1;
    n->line = line;
    n->col = col;
    n->inserted = 0;
    return g->nnodes;
}

/* relu then max pool computes max pool then relu: a maximum commutes with a
 * nondecreasing function, and backward sends a window's gradient to the
 * same element, its first maximum, or nowhere where that is not positive
 * (relu's mask). Swapped, the relu and its saved mask cover the pool's
 * output, a quarter of the elements under a 2x2 pool, and the relu's full
 * size output is never made (docs/memory.md). Only where the pool alone
 * reads the relu, and not after a batch norm, whose lean pairing with its
 * relu (store.c) keeps less (ResNet-50's stem swapped too: bf16 + recompute
 * auto in 9.21 GiB 783 -> 746 samples, lean f32 and bf16 the same). One
 * difference: a NaN with its sign bit set
 * (x86's default NaN), which relu zeroes and a max pool lets win, gives
 * the pool's window 0 here where it gave the window's other maximum. */
void bfit_graph_pool_before_relu(bfit_node_desc *nodes, int n)
{
    for (int i = 0; i + 1 < n; i++) {
        bfit_node_desc *r = &nodes[i], *p = &nodes[i + 1], t;
        int u = r->in[0], readers = 0;
        if (r->cfg.kind != BFIT_L_RELU || r->nin != 1 || p->cfg.kind != BFIT_L_MAXPOOL || p->nin != 1 ||
            p->in[0] != i + 1 || (u > 0 && nodes[u - 1].cfg.kind == BFIT_L_BATCHNORM))
            continue;
        for (int j = i + 1; j < n; j++)
            for (int k = 0; k < nodes[j].nin; k++)
                readers += nodes[j].in[k] == i + 1;
        if (readers != 1)
            continue;
        t = *r;
        *r = *p;
        *p = t;
        r->in[0] = u;     /* the pool reads what the relu read */
        p->in[0] = i + 1; /* the relu the pool's output; readers of value i + 2 now get the relu's */
        i++;
    }
}

void bfit_graph_fini(bfit_graph_desc *g)
{
    bfit_wsrc_release(g->wsrc);
    free(g->nodes);
    memset(g, 0, sizeof *g);
}
