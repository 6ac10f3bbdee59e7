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
    return g->nnodes;
}

void bfit_graph_fini(bfit_graph_desc *g)
{
    bfit_wsrc_release(g->wsrc);
    free(g->nodes);
    memset(g, 0, sizeof *g);
}
