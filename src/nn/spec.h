/* spec.h - the model spec: a small text format, one layer per line, parsed
 * into a graph description (docs/model-spec.md has the grammar).
 *
 * Every error is BFIT_EFORMAT (BFIT_EIO for a file that cannot be read) with
 * bfit_errmsg() = "source:line:col: message", col 1-based, counted in
 * characters, pointing at the offending token.
 */
#ifndef BFIT_SPEC_H
#define BFIT_SPEC_H

#include <stddef.h>

#include "nn/graph.h"

#define BFIT_SPEC_MAXLINE 1024          /* bytes in a line, without the newline */
#define BFIT_SPEC_MAXBYTES (16u << 20)  /* a spec file larger than this is refused */
#define BFIT_SPEC_MAXINT (1 << 24)      /* largest number a spec may hold */
#define BFIT_SPEC_MAXNODES 100000
#define BFIT_SPEC_MAXDEPTH 64           /* nested residual blocks */

/* Parse len bytes of text (need not be NUL-terminated) into g, which this
 * initialises. Syntax only: shapes are not checked (bfit_spec_check_shapes).
 * Single-input nodes have in[1] = -1; a residual block becomes its body
 * nodes, its shortcut nodes, then an add node placed at the `residual`
 * keyword. On failure g is left empty (bfit_graph_fini is still safe). */
int bfit_spec_parse(const char *text, size_t len, const char *source_name, bfit_graph_desc *g);

/* Run shape inference (each layer's init, no device) node by node and
 * report the first mismatch at the node's line and column, with the shapes
 * involved and what would fix it. The last node must give a vector (the
 * class scores the loss needs). */
int bfit_spec_check_shapes(const bfit_graph_desc *g);

/* Read path, parse it (messages name path) and check its shapes: the whole
 * of loading a model spec. On failure g is left empty. */
int bfit_spec_parse_file(const char *path, bfit_graph_desc *g);

#endif
