/* graph.h - a model's structure before it is built: nodes (a layer config
 * and its inputs) in topological order, where each came from in a spec.
 *
 * Values are numbered: 0 is the model input, node i produces value i+1. The
 * softmax cross-entropy loss is not a node: the model adds it after the last
 * node, whose output must be a vector of class scores. */
#ifndef BFIT_GRAPH_H
#define BFIT_GRAPH_H

#include "nn/layer.h"

typedef struct bfit_node_desc {
    bfit_layer_cfg cfg;
    int in[BFIT_LAYER_MAXIN]; /* value ids; unused ones -1 */
    int nin;
    int line, col;   /* where the spec defined it; 0 for graphs built in C */
    int inserted;    /* added by a rewrite (bfit_graph_gather_head): the nodes after it keep their numbers
                        for names, weights and init (bfit_node.id) */
} bfit_node_desc;

struct bfit_wsrc;

typedef struct bfit_graph_desc {
    bfit_shape input;
    bfit_dtype input_dtype;  /* F32 samples, or I32 token ids */
    int input_line, input_col;
    int nnodes, cap;
    bfit_node_desc *nodes;
    char source[256];  /* file name for messages ("" for presets) */
    struct bfit_wsrc *wsrc; /* starting weights from the file (an ONNX model's initializers, nn/wsrc.h), or
                               NULL; the graph holds a reference, released by bfit_graph_fini */
} bfit_graph_desc;

void bfit_graph_init(bfit_graph_desc *g, const char *source);
/* Append a node; returns its value id (> 0) or BFIT_ENOMEM. in1 -1 for a
 * one-input layer. */
int bfit_graph_add(bfit_graph_desc *g, const bfit_layer_cfg *cfg, int in0, int in1, int line, int col);
/* The same with nin (<= BFIT_LAYER_MAXIN) inputs. */
int bfit_graph_add_n(bfit_graph_desc *g, const bfit_layer_cfg *cfg, const int *in, int nin, int line, int col);
/* Turn each relu read only by the max pool after it into the pool then the
 * relu, which compute the same (graph.c); bfit_model_new does so. */
void bfit_graph_pool_before_relu(bfit_node_desc *nodes, int n);
/* A masked LM's head at its masked tokens (head.c): a gather of K rows a
 * sample (BFIT_L_GATHER; cfg.p the share p of masked tokens K was sized for)
 * inserted before the token-wise nodes that end the graph, all reading one
 * value made before them (BERT's: the last layer after its attention's add,
 * and the head). 1: inserted; 0: the graph ends in no such run holding a
 * linear, left as it was; < 0: an error. */
int bfit_graph_gather_head(bfit_graph_desc *g, int K, double p);
void bfit_graph_fini(bfit_graph_desc *g);

#endif
