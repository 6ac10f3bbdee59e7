/* zoo.h - the model zoo: preset networks built in C as graph descriptions
 * (the same nodes a spec would give), and the loader that takes either a
 * preset name or a spec file path, as every --model option does.
 *
 * Presets: mlp (784-1024-1024-10), cnn (models/cnn.cfg), resnet18 and
 * resnet50 (torchvision's, 3x224x224, 1000 classes), vgg16 (torchvision's,
 * without batch norm); transformers over token ids: gpt-nano (4 layers of
 * 128, 4 heads, 128 tokens of 256 byte ids), gpt2 (124M, llm.c's: 12 layers,
 * 12 heads, 768 wide, 1024 tokens, 50257 ids), bert-base (encoder: 12
 * layers, 768, 512 positions, 30522 ids, masked-LM head). */
#ifndef BFIT_ZOO_H
#define BFIT_ZOO_H

#include "nn/graph.h"

/* The preset names, NULL-terminated. */
const char *const *bfit_zoo_names(void);

/* Build preset `name` into g (initialised here; free with bfit_graph_fini).
 * An unknown name is BFIT_EINVAL with a message listing the valid names; on
 * failure g is left empty. */
int bfit_zoo_build(const char *name, bfit_graph_desc *g);

/* 1 if name_or_path is read as a file: it names an existing file, contains
 * '/', or ends in ".cfg" or ".onnx"; 0 if it is taken for a preset name. */
int bfit_model_source_is_file(const char *name_or_path);
/* 1 if it is read as an ONNX model (a file that bfit_onnx_sniff takes). */
int bfit_model_source_is_onnx(const char *name_or_path);

/* Load "a preset name, a spec file or an ONNX file" into g: an ONNX model
 * (bfit_onnx_sniff) goes through bfit_onnx_load_file, another file through
 * bfit_spec_parse_file (BFIT_EIO/BFIT_EFORMAT), anything else through
 * bfit_zoo_build (BFIT_EINVAL for an unknown name, whose message also says
 * how to give a file). seq > 0: the length an ONNX token model whose
 * export left T symbolic is lowered at (bfit_onnx_load_file; 0 refuses
 * such a model, saying to give --seq); other sources ignore it, and a
 * caller that wants their length changed calls bfit_graph_set_seq after.
 * On failure g is left empty. */
int bfit_model_source_load(const char *name_or_path, int seq, bfit_graph_desc *g);

/* A token model's sequence length: the input becomes seq tokens (at most
 * the model's positions). BFIT_EINVAL (field `option`, the name the length
 * was given by: "seq", "seq_max") for a model whose input is not token ids,
 * or a length out of range. */
int bfit_graph_set_seq(bfit_graph_desc *g, int seq, const char *option);
/* Every attention layer lean (1: keep a log-sum-exp per row, recompute the
 * matrix in backward) or stored (0). BFIT_EINVAL (field "attention") when
 * the model has none. */
int bfit_graph_set_attention(bfit_graph_desc *g, int lean);
/* How a run asks for it (the `attention` option): as the model says, or
 * every attention layer stored or lean. */
enum { BFIT_ATTN_MODEL, BFIT_ATTN_STORED, BFIT_ATTN_LEAN };

#endif
