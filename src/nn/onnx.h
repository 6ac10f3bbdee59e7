/* onnx.h - ONNX models (the format torch.onnx.export writes): the file's
 * messages as read (onnx_pb.c), and the graph lowered to batchfit's layers
 * with the file's initializers as the starting weights (onnx.c).
 *
 * The reader is ours, over protobuf's wire format, rather than protobuf-c
 * code generated from onnx.proto: protobuf-c copies every bytes field while
 * unpacking, so a 300 MB model would be in memory twice before its weights
 * reach the device. Here strings and tensor data point into the caller's
 * buffer (a read-only mapping of the file): the initializers are uploaded
 * from the mapping itself. Only the fields batchfit uses are kept; unknown
 * fields are skipped, fields of a wrong wire type are errors.
 */
#ifndef BFIT_ONNX_H
#define BFIT_ONNX_H

#include <stddef.h>
#include <stdint.h>

#include "nn/graph.h"

#define BFIT_ONNX_MAXD 8          /* dimensions of a tensor */
#define BFIT_ONNX_MAXATTR 16      /* values of an ints/floats attribute */
#define BFIT_ONNX_MAXNODES (1 << 20)
#define BFIT_ONNX_MAXIO 4096      /* inputs or outputs of one node, attributes of one node */
#define BFIT_ONNX_MAXNUMEL ((int64_t)1 << 40)

/* TensorProto.DataType */
enum {
    BFIT_ONNX_FLOAT = 1, BFIT_ONNX_UINT8 = 2, BFIT_ONNX_INT8 = 3, BFIT_ONNX_UINT16 = 4, BFIT_ONNX_INT16 = 5,
    BFIT_ONNX_INT32 = 6, BFIT_ONNX_INT64 = 7, BFIT_ONNX_STRING = 8, BFIT_ONNX_BOOL = 9, BFIT_ONNX_FLOAT16 = 10,
    BFIT_ONNX_DOUBLE = 11, BFIT_ONNX_UINT32 = 12, BFIT_ONNX_UINT64 = 13, BFIT_ONNX_BFLOAT16 = 16
};
/* AttributeProto.AttributeType */
enum {
    BFIT_ONNX_A_FLOAT = 1, BFIT_ONNX_A_INT = 2, BFIT_ONNX_A_STRING = 3, BFIT_ONNX_A_TENSOR = 4,
    BFIT_ONNX_A_GRAPH = 5, BFIT_ONNX_A_FLOATS = 6, BFIT_ONNX_A_INTS = 7
};

/* Bytes of the buffer (not NUL-terminated). */
typedef struct bfit_onnx_str {
    const char *p;
    size_t n;
} bfit_onnx_str;

typedef struct bfit_onnx_tensor {
    bfit_onnx_str name;
    int dtype;
    int ndim;
    int64_t dim[BFIT_ONNX_MAXD];
    int64_t numel;
    const uint8_t *raw;           /* raw_data (little-endian), or NULL: the values are in msg's typed fields */
    const uint8_t *msg;           /* the TensorProto's bytes */
    size_t msg_len;
    uint64_t offset;              /* of the message in the file */
} bfit_onnx_tensor;

typedef struct bfit_onnx_attr {
    bfit_onnx_str name;
    int type;
    float f;
    int64_t i;
    bfit_onnx_str s;
    int nints, nfloats;
    int64_t ints[BFIT_ONNX_MAXATTR];
    float floats[BFIT_ONNX_MAXATTR];
    bfit_onnx_tensor *t;          /* TENSOR */
} bfit_onnx_attr;

typedef struct bfit_onnx_node {
    bfit_onnx_str name, op, domain;
    int nin, nout, nattr;
    bfit_onnx_str *in, *out;      /* an empty input name: an optional input left out */
    bfit_onnx_attr *attr;
    uint64_t offset;
} bfit_onnx_node;

/* A graph input or output: its element type and shape as declared. */
typedef struct bfit_onnx_vi {
    bfit_onnx_str name;
    int elem;                     /* 0: not given */
    int ndim;                     /* -1: no shape given */
    int64_t dim[BFIT_ONNX_MAXD];  /* -1: a symbolic or unknown dimension */
    bfit_onnx_str dim_name[BFIT_ONNX_MAXD]; /* a symbolic one's dim_param ("batch", "T"), or empty */
} bfit_onnx_vi;

/* The default domain's opsets read: from 7 to the newest one whose changes
 * to the operators batchfit reads have been gone through (onnx/onnx's
 * docs/Changelog.md to opset 28: from 21 on only new types, the float-8
 * rules of Cast-24, and MaxPool-22 and AveragePool-22 saying that a
 * ceil_mode window starting in the right padding is dropped, as batchfit
 * drops it; docs/onnx.md). A later opset may redefine one of them. */
#define BFIT_ONNX_OPSET_MIN 7
#define BFIT_ONNX_OPSET_MAX 28

typedef struct bfit_onnx_model {
    int64_t ir_version;
    int64_t opset;                /* of the default domain; 0: none imported */
    bfit_onnx_str producer, producer_version;
    int nnodes, ninit, ninputs, noutputs;
    bfit_onnx_node *nodes;
    bfit_onnx_tensor *init;
    bfit_onnx_vi *inputs, *outputs;
    char source[256];             /* for messages */
} bfit_onnx_model;

/* Read a ModelProto from buf[0, len) (which must outlive the model: strings
 * and tensor data point into it). BFIT_EFORMAT naming the source, the byte
 * offset and the message path for truncation, a wrong wire type, a
 * dimension that is negative or overflows, data whose size disagrees with
 * the shape, data kept in an external file; BFIT_ENOMEM. */
int bfit_onnx_parse(const void *buf, size_t len, const char *source, bfit_onnx_model **out);
void bfit_onnx_model_free(bfit_onnx_model *m);

/* Element bytes of an ONNX data type (0: not a numeric type we read). */
size_t bfit_onnx_dtype_size(int dtype);
const char *bfit_onnx_dtype_name(int dtype);
/* The tensor's values converted to f32 / f64 / int64 (numel of them); f64
 * keeps a double tensor's values whole. */
int bfit_onnx_tensor_f32(const bfit_onnx_tensor *t, float *out);
int bfit_onnx_tensor_f64(const bfit_onnx_tensor *t, double *out);
int bfit_onnx_tensor_i64(const bfit_onnx_tensor *t, int64_t *out);

/* s as a C string in buf (truncated to fit). */
const char *bfit_onnx_cstr(bfit_onnx_str s, char *buf, size_t len);
int bfit_onnx_streq(bfit_onnx_str s, const char *c);

/* ---- loading (onnx.c) ------------------------------------------------------- */

/* Load an ONNX model file into g: the file is mapped, not read; the graph
 * keeps the mapping (g->wsrc) for the starting weights. On failure g is
 * left empty. BFIT_EIO, BFIT_EFORMAT (the file), BFIT_EINVAL (an operator
 * or a combination batchfit does not support, named with its node, its
 * inputs' shapes and the opset). seq > 0: the length a token model's T
 * takes where the export left it symbolic (dynamic_axes); such a model
 * without one is refused, saying to give it. A T fixed in the file stays
 * (bfit_graph_set_seq changes it after). */
int bfit_onnx_load_file(const char *path, int seq, bfit_graph_desc *g);
/* The same from len bytes in memory (copied: the caller's buffer may go). */
int bfit_onnx_load_buffer(const void *buf, size_t len, const char *source, int seq, bfit_graph_desc *g);
/* Whether the file at path is an ONNX model: its name ends in .onnx, or its
 * first bytes are a ModelProto's (field 1, ir_version). */
int bfit_onnx_sniff(const char *path);

#endif
