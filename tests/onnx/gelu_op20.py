"""Writes the small GELU models tests/cli/onnx.sh reads (run from tests/onnx).

Each is Flatten, Linear(48, 8), GELU, Linear(8, 3) on [N, 3, 4, 4] images,
with the same weights (drawn with seed 0), differing only in how the GELU
is written:

- gelu_erf.onnx: opset 17, x * 0.5 * (1 + Erf(x / sqrt 2)), the pattern
  PyTorch 1.13 exports nn.GELU() as;
- gelu_op20.onnx: opset 20, the Gelu operator (approximate absent), as
  PyTorch 2.x exports nn.GELU() at opset_version=20;
- gelu_op20_tanh.onnx: opset 20, Gelu with approximate="tanh"
  (nn.GELU(approximate='tanh'));
- gelu_tanh17.onnx: opset 17, nn.GELU(approximate='tanh') as PyTorch 1.13 exports it (x * x * x, then
  Muls, an Add, Tanh), and gelu_newgelu.onnx: the same function as minGPT's NewGELU and Hugging Face's
  gelu_new write it (0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * torch.pow(x, 3.0))))): both
  read as the tanh GELU, as gelu_op20_tanh.onnx is;
- gelu_notanh.onnx: gelu_newgelu.onnx with 0.05 for 0.044715: the nodes, not the function (refused);
- gelu_op28.onnx: gelu_op20.onnx at opset 28, the newest batchfit reads
  (opsets 21 to 28 changed none of these operators but their types);
- gelu_op29.onnx: the same at opset 29, which batchfit refuses (not
  reviewed).

Built with onnx.helper (onnx 1.12, whose checker stops at opset 17: the
files are written without it).
"""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def weights():
    rng = np.random.default_rng(0)
    init = [("0.weight", (8, 48), 48), ("0.bias", (8,), 48), ("2.weight", (3, 8), 8), ("2.bias", (3,), 8)]
    # nn.Linear's default draw: uniform in +-1/sqrt(fan_in)
    return [numpy_helper.from_array(rng.uniform(-1, 1, s).astype(np.float32) / np.float32(np.sqrt(f)), n)
            for n, s, f in init]


def const(name, value):
    return helper.make_node("Constant", [], [name], name=name,
                            value=numpy_helper.from_array(np.array(value, np.float32)))


def gelu_nodes(form):
    if form == "erf":
        return [const("sqrt2", np.sqrt(2.0)), const("one", 1.0), const("half", 0.5),
                helper.make_node("Div", ["h", "sqrt2"], ["d"], name="/gelu/Div"),
                helper.make_node("Erf", ["d"], ["e"], name="/gelu/Erf"),
                helper.make_node("Add", ["e", "one"], ["a"], name="/gelu/Add"),
                helper.make_node("Mul", ["h", "a"], ["m"], name="/gelu/Mul"),
                helper.make_node("Mul", ["m", "half"], ["g"], name="/gelu/Mul_1")]
    if form == "tanh17":  # torch.onnx's nn.GELU(approximate='tanh') at opset 17
        return [const("c0", 0.044715), const("c1", np.sqrt(2 / np.pi)), const("one", 1.0), const("half", 0.5),
                helper.make_node("Mul", ["h", "h"], ["x2"], name="/gelu/Mul"),
                helper.make_node("Mul", ["x2", "h"], ["x3"], name="/gelu/Mul_1"),
                helper.make_node("Mul", ["x3", "c0"], ["k"], name="/gelu/Mul_2"),
                helper.make_node("Add", ["h", "k"], ["s"], name="/gelu/Add"),
                helper.make_node("Mul", ["s", "c1"], ["u"], name="/gelu/Mul_3"),
                helper.make_node("Tanh", ["u"], ["t"], name="/gelu/Tanh"),
                helper.make_node("Add", ["t", "one"], ["a"], name="/gelu/Add_1"),
                helper.make_node("Mul", ["h", "a"], ["m"], name="/gelu/Mul_4"),
                helper.make_node("Mul", ["m", "half"], ["g"], name="/gelu/Mul_5")]
    if form in ("newgelu", "notanh"):  # minGPT's NewGELU: torch.pow, the factors in its order
        return [const("half", 0.5), const("three", 3.0), const("c0", 0.044715 if form == "newgelu" else 0.05),
                const("c1", np.sqrt(2 / np.pi)), const("one", 1.0),
                helper.make_node("Mul", ["half", "h"], ["hx"], name="/gelu/Mul"),
                helper.make_node("Pow", ["h", "three"], ["x3"], name="/gelu/Pow"),
                helper.make_node("Mul", ["c0", "x3"], ["k"], name="/gelu/Mul_1"),
                helper.make_node("Add", ["h", "k"], ["s"], name="/gelu/Add"),
                helper.make_node("Mul", ["c1", "s"], ["u"], name="/gelu/Mul_2"),
                helper.make_node("Tanh", ["u"], ["t"], name="/gelu/Tanh"),
                helper.make_node("Add", ["one", "t"], ["a"], name="/gelu/Add_1"),
                helper.make_node("Mul", ["hx", "a"], ["g"], name="/gelu/Mul_3")]
    attrs = {"approximate": "tanh"} if form == "tanh" else {}
    return [helper.make_node("Gelu", ["h"], ["g"], name="/gelu/Gelu", **attrs)]


def model(form, opset):
    nodes = ([helper.make_node("Flatten", ["input"], ["f"], name="/flat/Flatten", axis=1),
              helper.make_node("Gemm", ["f", "0.weight", "0.bias"], ["h"], name="/0/Gemm", transB=1)] +
             gelu_nodes(form) +
             [helper.make_node("Gemm", ["g", "2.weight", "2.bias"], ["logits"], name="/2/Gemm", transB=1)])
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                           ["batch", 3, 4, 4])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
                              initializer=weights())
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="gelu_op20.py")
    m.ir_version = 10 if opset >= 21 else 9 if opset >= 20 else 8
    return m


if __name__ == "__main__":
    for name, form, opset in [("gelu_erf", "erf", 17), ("gelu_op20", "none", 20), ("gelu_op20_tanh", "tanh", 20),
                              ("gelu_op28", "none", 28), ("gelu_op29", "none", 29), ("gelu_tanh17", "tanh17", 17),
                              ("gelu_newgelu", "newgelu", 17), ("gelu_notanh", "notanh", 17)]:
        onnx.save(model(form, opset), name + ".onnx")
