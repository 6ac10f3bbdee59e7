/* graph.c - building a graph description node by node. */
#include "base/err.h"
#include "nn/graph.h"

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
    bfit_node_desc *n;
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
    n->in[0] = in0;
    n->in[1] = in1;
    n->line = line;
    n->col = col;
    return g->nnodes;
}

void bfit_graph_fini(bfit_graph_desc *g)
{
    free(g->nodes);
    memset(g, 0, sizeof *g);
}
