"""Writes the small RMSNorm models tests/cli/onnx.sh reads (run from tests/onnx).

Each is Flatten, Linear(48, 8), RMSNorm(8, eps=1e-6), Linear(8, 3) on [N, 3, 4, 4] images, with the same
weights (drawn with seed 0), differing only in how the RMSNorm is written:

- rms_torch.onnx: opset 17, LLaMA's code as PyTorch 1.13 exports it (x.float(), x.pow(2).mean(-1,
  keepdim=True), + eps, torch.rsqrt as Sqrt and Div(1, .), * x, .type_as(x) as a Cast, * weight);
- rms_recip.onnx: opset 17, x * x for the square, Reciprocal for 1 / sqrt, the weight first in its Mul;
- rms_div.onnx: opset 18 (ReduceMean's axes an input), x / sqrt(...) at once;
- rms_op23.onnx: opset 23, the RMSNormalization operator;
all read as one `rmsnorm` layer: cli_onnx trains them to the same weights, bit for bit;
- rms_noweight.onnx: rms_torch.onnx without the Mul by the weight (refused: batchfit's rmsnorm learns one);
- rms_batch.onnx: the mean over axis 0, the batch (refused: not RMSNorm).

Built with onnx.helper (onnx 1.12, whose checker stops at opset 17: the files are written without it).
"""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def weights():
    rng = np.random.default_rng(0)
    init = [("0.weight", (8, 48), 48), ("0.bias", (8,), 48), ("2.weight", (3, 8), 8), ("2.bias", (3,), 8)]
    # nn.Linear's default draw: uniform in +-1/sqrt(fan_in); the norm's weight in [0.5, 1.5)
    w = [numpy_helper.from_array(rng.uniform(-1, 1, s).astype(np.float32) / np.float32(np.sqrt(f)), n)
         for n, s, f in init]
    return w + [numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "1.weight")]


def const(name, value, dtype=np.float32):
    return helper.make_node("Constant", [], [name], name=name, value=numpy_helper.from_array(np.array(value, dtype)))


def rms_nodes(form):
    mk = helper.make_node
    if form == "op23":
        return [mk("RMSNormalization", ["h", "1.weight"], ["g"], name="/1/RMSNormalization", axis=-1,
                   epsilon=1e-6)]
    sq = [const("two", 2.0), mk("Pow", ["x", "two"], ["x2"], name="/1/Pow")] if form != "recip" else \
        [mk("Mul", ["x", "x"], ["x2"], name="/1/Mul_sq")]
    if form == "div":  # opset 18: the axes an input
        mean = [const("axes", [-1], np.int64), mk("ReduceMean", ["x2", "axes"], ["ms"], name="/1/ReduceMean")]
    else:
        mean = [mk("ReduceMean", ["x2"], ["ms"], name="/1/ReduceMean", axes=[0 if form == "batch" else -1],
                   keepdims=1)]
    root = [const("eps", 1e-6), mk("Add", ["ms", "eps"], ["a"], name="/1/Add"),
            mk("Sqrt", ["a"], ["s"], name="/1/Sqrt")]
    if form == "div":
        scale = [mk("Div", ["x", "s"], ["n"], name="/1/Div")]
    elif form == "recip":
        scale = [mk("Reciprocal", ["s"], ["r"], name="/1/Reciprocal"), mk("Mul", ["r", "x"], ["n"], name="/1/Mul")]
    else:
        scale = [const("one", 1.0), mk("Div", ["one", "s"], ["r"], name="/1/Div"),
                 mk("Mul", ["x", "r"], ["n0"], name="/1/Mul"), mk("Cast", ["n0"], ["n"], name="/1/Cast_1", to=1)]
    cast = [mk("Cast", ["h"], ["x"], name="/1/Cast", to=1)] if form != "recip" else \
        [mk("Identity", ["h"], ["x"], name="/1/Identity")]
    if form == "noweight":
        return cast + sq + mean + root + scale + [mk("Identity", ["n"], ["g"], name="/1/Identity_1")]
    w = [mk("Mul", ["1.weight", "n"] if form == "recip" else ["n", "1.weight"], ["g"], name="/1/Mul_1")]
    return cast + sq + mean + root + scale + w


def model(form, opset):
    nodes = ([helper.make_node("Flatten", ["input"], ["f"], name="/flat/Flatten", axis=1),
              helper.make_node("Gemm", ["f", "0.weight", "0.bias"], ["h"], name="/0/Gemm", transB=1)] +
             rms_nodes(form) +
             [helper.make_node("Gemm", ["g", "2.weight", "2.bias"], ["logits"], name="/2/Gemm", transB=1)])
    init = weights()
    if form == "noweight":
        init = init[:-1]
    graph = helper.make_graph(nodes, "rms", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                          ["batch", 3, 4, 4])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
                              initializer=init)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="rms_forms.py")
    m.ir_version = 10 if opset >= 21 else 8
    return m


if __name__ == "__main__":
    for name, form, opset in [("rms_torch", "torch", 17), ("rms_recip", "recip", 17), ("rms_div", "div", 18),
                              ("rms_op23", "op23", 23), ("rms_noweight", "noweight", 17),
                              ("rms_batch", "batch", 17)]:
        onnx.save(model(form, opset), name + ".onnx")
