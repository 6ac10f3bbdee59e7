"""An ONNX file's initializers rewritten in place, without the onnx package:
batchfit.torch puts a module's own buffers back into the file its export
wrote (the export's forward changed them). A buffer keeps its shape and
type, so its bytes keep their length: the new bytes overwrite the old
ones in the protobuf, and nothing else in the file moves.

Protobuf's wire format (protobuf.dev, "Encoding"): a field is a varint key
(number << 3 | wire type) and its value. ModelProto's field 7 is the graph,
GraphProto's 5 its initializers (TensorProto), TensorProto's 8 the name and
9 raw_data (little-endian, as the exporter writes them)."""
import os
import tempfile

MODEL_GRAPH, GRAPH_INITIALIZER, TENSOR_NAME, TENSOR_RAW = 7, 5, 8, 9


def _varint(b, i):
    out = shift = 0
    while True:
        if i >= len(b) or shift > 63:
            raise ValueError(f"a varint runs past byte {i}")
        c = b[i]
        i += 1
        out |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return out, i


def _fields(b, start, end):
    """(number, start, end) of each length-delimited field in b[start:end]
    (the others are stepped over)."""
    i = start
    while i < end:
        key, i = _varint(b, i)
        wt = key & 7
        if wt == 0:
            _, i = _varint(b, i)
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        elif wt == 2:
            n, i = _varint(b, i)
            if i + n > end:
                raise ValueError(f"field {key >> 3} at byte {i} runs past its message's end ({end})")
            yield key >> 3, i, i + n
            i += n
        else:
            raise ValueError(f"wire type {wt} at byte {i} is not one an ONNX file uses")
    if i != end:
        raise ValueError(f"a field runs past its message's end ({end})")


def _one(b, start, end, number):
    """The last field `number` in b[start:end] (protobuf's rule), or None."""
    found = None
    for f, s, e in _fields(b, start, end):
        if f == number:
            found = (s, e)
    return found


def _initializers(b):
    """{name: (start, end) of raw_data or None} of the graph's initializers."""
    graph = _one(b, 0, len(b), MODEL_GRAPH)
    if graph is None:
        raise ValueError("no graph (ModelProto field 7)")
    out = {}
    for f, s, e in _fields(b, *graph):
        if f != GRAPH_INITIALIZER:
            continue
        name = _one(b, s, e, TENSOR_NAME)
        if name is not None:
            out[bytes(b[name[0]:name[1]]).decode("utf-8", "replace")] = _one(b, s, e, TENSOR_RAW)
    return out


def rewrite(path, tensors):
    """Overwrite the initializers named in `tensors` ({name: bytes}) in the
    ONNX file at path; a name the file does not hold is left alone. The file
    is replaced whole (a temporary beside it, then a rename) or not at all.
    Raises ValueError when the file cannot be read so or a tensor's bytes
    differ in length from the file's."""
    with open(path, "rb") as f:
        b = bytearray(f.read())
    try:
        inits = _initializers(b)
    except (ValueError, IndexError) as e:
        raise ValueError(f"{path}: not an ONNX file this reads: {e}") from None
    changed = False
    for name, data in tensors.items():
        if name not in inits:
            continue
        where = inits[name]
        if where is None:
            raise ValueError(f"{path}: initializer {name} has no raw_data in the file (kept elsewhere, or as typed "
                             f"values): it cannot be rewritten in place")
        s, e = where
        if e - s != len(data):
            raise ValueError(f"{path}: initializer {name} holds {e - s} bytes, the tensor to write {len(data)}")
        if b[s:e] != data:
            b[s:e] = data
            changed = True
    if not changed:
        return False
    mode = os.stat(path).st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(prefix=".batchfit-", suffix=".onnx", dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(b)
        os.chmod(tmp, mode)  # the export's own permissions, not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return True
