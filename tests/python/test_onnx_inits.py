"""batchfit.torch's in-place rewrite of an ONNX file's initializers
(python/batchfit/_onnx_inits.py), checked against the onnx package reading
the result: the named tensors hold the new bytes, everything else in the
model is as it was, and a file it cannot rewrite is left untouched with
a message saying why. Skipped without the onnx package (the oracle)."""
import os

import numpy as np
import pytest

from batchfit import _onnx_inits

onnx = pytest.importorskip("onnx", reason="the oracle is the onnx package (python3-onnx)")
from onnx import helper, numpy_helper, TensorProto  # noqa: E402


def model_file(path, inits):
    """A graph Y = X + A with initializers `inits` ({name: array}), saved."""
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])
    g = helper.make_graph([helper.make_node("Add", ["X", "a"], ["Y"])], "g", [x], [y],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    onnx.save(helper.make_model(g, producer_name="test"), str(path))
    return str(path)


def read(path):
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}


def test_rewrites_the_named_tensors(tmp_path):
    old = {"a": np.array([1.5, -2.0], np.float32), "bn.running_var": np.arange(7, dtype=np.float32),
           "bn.num_batches_tracked": np.array(3, np.int64), "keep": np.ones((2, 3), np.float32)}
    path = model_file(tmp_path / "m.onnx", old)
    os.chmod(path, 0o640)
    before = onnx.load(path)
    new = {"bn.running_var": np.linspace(0.5, 2, 7, dtype=np.float32), "bn.num_batches_tracked": np.array(0, np.int64),
           "a": np.array([0.25, 4.0], np.float32), "absent": np.zeros(3, np.float32)}
    assert _onnx_inits.rewrite(path, {k: v.tobytes() for k, v in new.items()})
    got = read(path)
    assert sorted(got) == sorted(old)
    for k in old:
        want = new[k] if k in new else old[k]
        assert got[k].dtype == want.dtype and np.array_equal(got[k], want), k
    after = onnx.load(path)
    assert after.graph.node == before.graph.node and after.producer_name == "test"
    assert os.stat(path).st_mode & 0o777 == 0o640
    assert [f for f in os.listdir(tmp_path) if f != "m.onnx"] == []  # no temporary left
    assert not _onnx_inits.rewrite(path, {k: v.tobytes() for k, v in new.items()})  # nothing to change: no write


def test_refusals_leave_the_file(tmp_path):
    path = model_file(tmp_path / "m.onnx", {"a": np.array([1.0, 2.0], np.float32)})
    with open(path, "rb") as f:
        start = f.read()
    with pytest.raises(ValueError, match="initializer a holds 8 bytes, the tensor to write 12"):
        _onnx_inits.rewrite(path, {"a": np.zeros(3, np.float32).tobytes()})
    typed = tmp_path / "typed.onnx"  # values as float_data, not raw_data
    t = helper.make_tensor("a", TensorProto.FLOAT, [2], [1.0, 2.0])
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])
    onnx.save(helper.make_model(helper.make_graph([helper.make_node("Add", ["X", "a"], ["Y"])], "g", [x],
                                                  [x], [t])), str(typed))
    with pytest.raises(ValueError, match="initializer a has no raw_data"):
        _onnx_inits.rewrite(str(typed), {"a": np.zeros(2, np.float32).tobytes()})
    for cut in (len(start) - 3, len(start) // 2, 1):
        bad = tmp_path / f"cut{cut}.onnx"
        bad.write_bytes(start[:cut])
        with pytest.raises(ValueError, match="not an ONNX file this reads"):
            _onnx_inits.rewrite(str(bad), {"a": np.zeros(2, np.float32).tobytes()})
        assert bad.read_bytes() == start[:cut]
    with open(path, "rb") as f:
        assert f.read() == start
