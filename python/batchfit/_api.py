"""The calls: each a thin wrapper of one library call, its keyword arguments
the command line's options (docs/python.md)."""
import collections.abc
import ctypes
import os
import re
import shutil
import tempfile

from . import _errors, _run
from ._config import Config, OPTIONS, default_threads, show
from ._lib import Owned, lib, text
from ._results import Find, Plan, Result, Training, take


def version():
    """The library's version ("0.3.0")."""
    return text(lib.bfit_version())


def options():
    """Every option: {name: (what it takes, the commands that read it)};
    '' takes nothing (a flag: give True)."""
    return dict(OPTIONS)


def parse_size(s):
    """"512MiB", "1.5GiB", "8GB" in bytes."""
    if not isinstance(s, str):
        raise _errors.ArgumentTypeError(f"parse_size: give text such as '8GiB', not {type(s).__name__}")
    out = ctypes.c_uint64()
    _errors.check(lib.bfit_parse_size(s.encode(), ctypes.byref(out)))
    return int(out.value)


def format_size(n):
    """Bytes for people: "1.50 GiB"."""
    import numbers
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise _errors.ArgumentTypeError(f"format_size: give a whole number of bytes, not {type(n).__name__}")
    if not 0 <= n < 2**64:
        raise _errors.InvalidArgumentError(f"format_size: {n} bytes is out of range: expected 0 to 2^64-1")
    buf = ctypes.create_string_buffer(32)
    return text(lib.bfit_format_size(int(n), buf, len(buf)))


def _model(model):
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    if not isinstance(model, str):
        hint = " (an nn.Module goes through batchfit.torch)" if hasattr(model, "state_dict") else ""
        raise _errors.ArgumentTypeError(f"model: give a preset name, a spec file or an ONNX file, not "
                                        f"{type(model).__name__}{hint}", "model", _errors.EINVAL)
    return model


# Options naming a file or folder: a library message that quotes the path
# given, or starts with it, is about that option.
_PATHS = ("data", "test_data", "weights", "init", "save", "log", "report", "checkpoint", "resume", "plot")


def _blame(cfg, field, msg):
    """The option a failure is about: the library's field, else the option
    the message starts with, else the path option whose path it names."""
    if field:
        return field
    head = msg.split(":", 1)[0].strip().lstrip("-").replace("-", "_")
    if head in OPTIONS:
        return head
    for name in _PATHS:
        t = cfg.texts.get(name)
        if t and (msg.startswith(t + ":") or f"'{t}'" in msg):
            return name
    # a file inside the path given (an image of a folder: "image DIR/c/x.png: ..."):
    # the longest such path, so a test folder inside the data's is test_data
    inside = [(len(t), name) for name in _PATHS for t in [cfg.texts.get(name)]
              if t and re.search(r"(^|[\s'(])" + re.escape(t.rstrip("/") or t) + r"([/:'\s)]|$)", msg)]
    return max(inside)[1] if inside else ""


def _failure(cfg, rc, state, res):
    msg = state.get("msg", "")
    return _errors.make(rc, msg, _blame(cfg, state.get("field", ""), msg), res)


def _finish(cfg, rc, r, state, result_cls):
    """The result of a command, or its exception (with the result, where
    the command got far enough to make one)."""
    res = result_cls(*take(r)) if r is not None else None
    if rc != _errors.OK:
        raise _failure(cfg, rc, state, res)
    return res


def _direct(command, cfg, result_cls):
    """A call that runs to its end in this thread (the GIL released meanwhile)."""
    out = ctypes.c_void_p()
    rc = getattr(lib, "bfit_" + command)(cfg.c, ctypes.byref(out))
    state = {}
    if rc != _errors.OK:
        state = {"msg": text(lib.bfit_errmsg()) or text(lib.bfit_strerror(rc)), "field": text(lib.bfit_errfield())}
    return _finish(cfg, rc, out.value, state, result_cls)


def _here(options):
    """Options for a call that runs on this thread (plan, find, evaluate):
    threads="auto" means all the cores there (train starts from them and
    changes the count as it runs), not this thread's OpenMP count, which
    the library would take for it and torch may have set to 1."""
    if options.get("threads") == "auto":
        return dict(options, threads=default_threads())
    return options


def plan(model, **options):
    """The memory of a training step of `model` (a preset, a spec file or an
    ONNX file) per category, the peak at the `batch` sizes asked for
    (batch=[1, 32, 64]), and the largest batch that fits `memory`
    ("11GiB"); with ways=True the ways to a larger batch. Options are
    `batchfit plan`'s. Raises OutOfMemoryError (with .result, the Plan)
    when a batch asked for, or the model, does not fit."""
    cfg = Config(model=_model(model), **_here(options))
    return _direct("plan", cfg, Plan)


def _named_data(command, options):
    """find reads a data set by name or path; arrays only train and evaluate read."""
    for field in ("data", "test_data"):
        d = options.get(field)
        if d is not None and not isinstance(d, (str, bytes, os.PathLike)):
            what = f"a {type(d).__name__} of {len(d)}: only train and evaluate read arrays (x, y)" \
                if isinstance(d, (tuple, list)) else f"{type(d).__name__} {show(d)}"
            raise _errors.ArgumentTypeError(f"{field}: {command} reads a data set by name or path, not {what}",
                                            field, _errors.EINVAL)
    return options


def find(model, progress=False, **options):
    """The largest batch that fits (planned, confirmed by real steps) and the
    fastest (measured), with the ladder of sizes measured. Options are
    `batchfit find`'s (memory, data, limit, ...)."""
    cfg = Config(model=_model(model), **_here(_named_data("find", options)))
    p = _run.progress_stream(cfg, progress)
    try:
        return _direct("find", cfg, Find)
    finally:
        if p:
            p.close()


def evaluate(model, weights, progress=False, *, data=None, test_data=None, **options):
    """Test accuracy and loss of saved `weights` (a safetensors file) of
    `model` on the test data: `data`'s test split (a name or path), the
    file test_data names (a text or token file read whole), or the samples
    of arrays (x, y) given as data or test_data, normalised as the weights
    were trained (eval_samples, ...); a language model's ids as a 1-d array
    are scored as the same ids in a token file (as data its test part, as
    test_data whole)."""
    cfg = Config(model=_model(model), weights=weights, **_here(options))
    _set_data(cfg, 0, data)
    _set_data(cfg, 1, test_data)
    p = _run.progress_stream(cfg, progress)
    try:
        return _direct("evaluate", cfg, Result)
    finally:
        if p:
            p.close()


def _path(name, p):
    """A path argument as bytes for the library."""
    if isinstance(p, (str, bytes, os.PathLike)):
        p = os.fsencode(p)
        if b"\0" not in p:
            return p
        raise _errors.InvalidArgumentError(f"{name}: the path holds a NUL character", name, _errors.EINVAL)
    raise _errors.ArgumentTypeError(f"{name}: give a path, not {type(p).__name__}", name, _errors.EINVAL)


def report(log, html):
    """The run report: one self-contained HTML file from a run's JSON-lines
    event log (train's `log` option). Returns the path written."""
    _errors.check(lib.bfit_report_write(_path("log", log), _path("html", html)))
    return os.fsdecode(html)


def read_weights(path):
    """A safetensors file's tensors (weights from `save`, a checkpoint) as
    {name: numpy float32 array}."""
    return _read_tensors(path)[0]


def _numpy():
    """NumPy, which arrays in and weights out need (plan, find and the rest
    do not): its absence named with where it comes from."""
    try:
        import numpy
    except ImportError as e:
        raise ImportError(f"batchfit passes arrays and reads weights with NumPy, which this Python lacks ({e}): "
                          f"install it (Debian: apt-get install python3-numpy; elsewhere: pip install numpy), or "
                          f"give weights=False and data as a file or data set name") from e
    return numpy


def _read_tensors(path):
    """The floating tensors of a safetensors file, and its normalisation
    statistics ({"mean": [...], "std": [...]}, or None)."""
    np = _numpy()
    tp = ctypes.c_void_p()
    _errors.check(lib.bfit_tensors_open(_path("path", path), ctypes.byref(tp)))
    t = Owned(tp.value, lib.bfit_tensors_free)  # freed when the call's last reference goes
    out = {}
    dims = (ctypes.c_int64 * 8)()
    for i in range(lib.bfit_tensors_count(t)):
        name = text(lib.bfit_tensors_name(t, i))
        dtype = text(lib.bfit_tensors_dtype(t, i))
        if dtype not in ("F32", "F64", "BF16", "F16"):
            continue  # counters and the like: not weights
        nd = lib.bfit_tensors_shape(t, i, dims, 8)
        if nd < 0 or nd > 8:
            raise _errors.FormatError(f"{path}: tensor {name} has {nd} dimensions")
        a = np.empty([dims[k] for k in range(nd)], dtype=np.float32)
        _errors.check(lib.bfit_tensors_read(t, i, a.ctypes.data, a.size))
        out[name] = a
    mean, std = (text(lib.bfit_tensors_meta(t, k)) for k in (b"normalize_mean", b"normalize_std"))
    norm = {"mean": [float(v) for v in mean.split(",")], "std": [float(v) for v in std.split(",")]} \
        if mean and std else None
    return out, norm


TOKEN_TYPE_SHIFT = 24  # batchfit.h's BFIT_TOKEN_TYPE_SHIFT: a token's segment in its id's high bits


def _from_tokenizer(field, enc):
    """A tokenizer's output ({"input_ids", "attention_mask", "labels"}: transformers'
    BatchEncoding plus the classes) as token arrays (x, y): the ids where the mask is 1, -1 after (batchfit
    pads after a sequence's tokens, as a tokenizer with padding_side="right" does); token_type_ids (sentence
    pairs) in each id's high bits, id | type << TOKEN_TYPE_SHIFT."""
    np = _numpy()
    known = {"input_ids", "attention_mask", "labels", "token_type_ids"}
    if "input_ids" not in enc or set(enc) - known:
        raise _errors.InvalidArgumentError(f"{field}: a tokenizer's output takes input_ids (and attention_mask, "
                                           f"token_type_ids, labels); got {sorted(enc)}", field, _errors.EINVAL)
    ids = np.asarray(enc["input_ids"])
    mask = np.asarray(enc["attention_mask"]) if "attention_mask" in enc else np.ones(ids.shape, dtype=bool)
    if ids.ndim != 2 or mask.shape != ids.shape or ids.dtype.kind not in "iu":
        raise _errors.InvalidArgumentError(f"{field}: input_ids must be integer ids [n, T] and attention_mask of "
                                           f"their shape; got {ids.dtype} {ids.shape} and {mask.shape}", field,
                                           _errors.EINVAL)
    mask = mask != 0
    late = np.argwhere(mask[:, 1:] & ~mask[:, :-1])  # a token after padding
    if late.size:
        r, t = late[0]
        raise _errors.InvalidArgumentError(f"{field}: sequence {r} has a token at position {t + 1} after padding: "
                                           f"batchfit pads after a sequence's tokens (a tokenizer's "
                                           f"padding_side=\"right\")", field, _errors.EINVAL)
    types = np.asarray(enc.get("token_type_ids", np.zeros(mask.shape, dtype=np.int64)))
    if types.shape != mask.shape or types.dtype.kind not in "iub":
        raise _errors.InvalidArgumentError(f"{field}: token_type_ids must be integers of input_ids' shape "
                                           f"{mask.shape}; got {types.dtype} {types.shape}", field, _errors.EINVAL)
    ids = np.where(mask, ids, -1)
    if (types[mask] != 0).any():  # sentence pairs: each token's segment in its id's high bits
        bad = np.argwhere(mask & ((types < 0) | (types > 127) | (ids >= 1 << TOKEN_TYPE_SHIFT)))
        if bad.size:
            r, t = bad[0]
            raise _errors.InvalidArgumentError(f"{field}: sequence {r}, position {t}: id {ids[r, t]} of type "
                                               f"{types[r, t]}: with token types, ids are below 2^24 and types 0 "
                                               f"to 127", field, _errors.EINVAL)
        ids = np.where(mask, ids | types.astype(np.int64) << TOKEN_TYPE_SHIFT, -1)
    return ids.astype(np.int32), enc.get("labels")  # None: a masked LM's sequences


def _set_stream(cfg, which, field, ids):
    """A language model's token ids, one stream (a tokenizer's ids of a corpus, concatenated): read as a
    token file's, copied into int32 once (the library copies the part it trains on when the run starts)."""
    np = _numpy()
    if ids.size and (ids.min() < 0 or ids.max() > 2**31 - 2):
        bad = int(np.argmax((ids < 0) | (ids > 2**31 - 2)))
        raise _errors.InvalidArgumentError(f"{field}: token id {ids[bad]} at position {bad}: ids are 0 to "
                                           f"{2**31 - 2}", field, _errors.EINVAL)
    ids = np.ascontiguousarray(ids, dtype=np.int32)
    cfg.keep.append(ids)
    _errors.check(lib.bfit_config_set_token_stream(cfg.c, which, ids.ctypes.data, ids.size))


def _set_tags(cfg, which, field, x, y):
    """Token ids [n, T] (-1 after each sequence's last token) and a class a token [n, T] (a token classifier's
    tags; -100, or any negative number, where a token is not scored, as transformers writes them)."""
    np = _numpy()
    if x.ndim != 2 or y.shape != x.shape or y.dtype.kind not in "iu":
        raise _errors.InvalidArgumentError(f"{field}: a token classifier's tags are integers of the ids' shape "
                                           f"[n, T], a class a token; got ids {x.shape}, tags {y.dtype} {y.shape}",
                                           field, _errors.EINVAL)
    if x.size and (x.min() < -1 or x.max() > 2**31 - 1):
        raise _errors.InvalidArgumentError(f"{field}: token ids are from 0, and -1 after a sequence's last token; "
                                           f"got {x.min()} to {x.max()}", field, _errors.EINVAL)
    x = np.ascontiguousarray(x, dtype=np.int32)
    y = np.ascontiguousarray(np.clip(y, -1, 2**31 - 1), dtype=np.int32)  # -100: not scored, as any negative
    cfg.keep += [x, y]
    _errors.check(lib.bfit_config_set_token_tags(cfg.c, which, x.ctypes.data, y.ctypes.data, x.shape[0],
                                                 x.shape[1]))


def _set_data(cfg, which, data):
    """data (which 0) or test_data (1): a name or path, arrays (x, y), or a
    tokenizer's output (with labels; without, a masked LM's sequences)."""
    field = "test_data" if which else "data"
    if data is None:
        return
    if isinstance(data, (str, os.PathLike)):
        cfg.set(field, data)
        return
    if isinstance(data, collections.abc.Mapping):
        data = _from_tokenizer(field, data)
    if getattr(data, "ndim", None) == 1 and getattr(getattr(data, "dtype", None), "kind", "f") in "iu":
        _set_stream(cfg, which, field, data)
        return
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise _errors.ArgumentTypeError(f"{field}: give a data set name, a path, or arrays (x, y), not "
                                        f"{type(data).__name__}", field, _errors.EINVAL)
    np = _numpy()
    ids = getattr(getattr(data[0], "dtype", None), "kind", "f") in "iu"  # token ids: a classifier's sequences
    if ids and data[1] is None:  # sequences without labels: a masked LM's (mask_tokens)
        x = np.asarray(data[0])
        if x.ndim != 2 or (x.size and (x.min() < -1 or x.max() > 2**31 - 1)):
            raise _errors.InvalidArgumentError(f"{field}: token ids must be [n, T], from 0, and -1 after a "
                                               f"sequence's last token; got {x.shape}", field, _errors.EINVAL)
        x = np.ascontiguousarray(x, dtype=np.int32)
        cfg.keep.append(x)
        _errors.check(lib.bfit_config_set_token_arrays(cfg.c, which, x.ctypes.data, None, x.shape[0], x.shape[1]))
        return

    try:
        x = np.asarray(data[0]) if ids else np.ascontiguousarray(data[0], dtype=np.float32)  # no copy if float32
        y = np.asarray(data[1])
    except (TypeError, ValueError) as e:
        raise _errors.ArgumentTypeError(f"{field}: the arrays (x, y) must be numeric: {e}", field,
                                        _errors.EINVAL) from None
    if y.dtype.kind not in "iufcb":
        raise _errors.ArgumentTypeError(f"{field}: labels y must be integers (class indices), not {y.dtype}", field,
                                        _errors.EINVAL)
    if ids and y.ndim == 2:  # a class a token: a token classifier's tags
        _set_tags(cfg, which, field, x, y)
        return
    if y.dtype.kind not in "iub":
        raise _errors.InvalidArgumentError(f"{field}: labels y must be integers (class indices), not {y.dtype}",
                                           field, _errors.EINVAL)
    if x.ndim < 2 or y.ndim != 1 or x.shape[0] != y.shape[0] or x.shape[0] == 0:
        raise _errors.InvalidArgumentError(f"{field}: x must hold n samples (shape (n, ...)) and y their n labels "
                                           f"(shape (n,)); got x {x.shape}, y {y.shape}", field, _errors.EINVAL)
    if y.size and (y.min() < 0 or y.max() > 2**31 - 1):
        raise _errors.InvalidArgumentError(f"{field}: labels are class indices from 0; got {y.min()} to "
                                           f"{y.max()}", field, _errors.EINVAL)
    y = np.ascontiguousarray(y, dtype=np.int32)
    n = x.shape[0]
    if ids:  # [n, T] int32, -1 after each sequence's last token
        if x.ndim != 2 or (x.size and (x.min() < -1 or x.max() > 2**31 - 1)):
            raise _errors.InvalidArgumentError(f"{field}: token ids x must be [n, T] (a sequence a row), ids from 0 "
                                               f"and -1 after a sequence's last token (padding); got shape {x.shape}"
                                               + (f", ids {x.min()} to {x.max()}" if x.size else ""), field,
                                               _errors.EINVAL)
        x = np.ascontiguousarray(x, dtype=np.int32)
        cfg.keep += [x, y]
        _errors.check(lib.bfit_config_set_token_arrays(cfg.c, which, x.ctypes.data, y.ctypes.data, n, x.shape[1]))
        return
    cfg.keep += [x, y]  # the library reads them in place until the run ends
    _errors.check(lib.bfit_config_set_arrays(cfg.c, which, x.ctypes.data, y.ctypes.data, n, x.size // n))


def train(model, data=None, *, test_data=None, on_event=None, progress=False, weights=True, keep_events=True,
          **options):
    """Train `model` (a preset, a spec file or an ONNX file) on `data`: a data
    set name ("fashion-mnist", the default), a path, or NumPy arrays (x, y)
    read in place (x float32 samples in the model's input layout, y integer
    labels), shuffled and normalised exactly as a file of them would be; for
    a classifier of token ids x is integer ids [n, T], each sequence padded
    with -1 after its last token (as a folder of class folders of texts), or
    a tokenizer's output with the labels, {"input_ids", "attention_mask",
    "labels"} (transformers' BatchEncoding, right-padded: the ids where the
    mask is 1); for a language model a 1-d integer array of token ids, one
    stream cut into windows of the model's T, exactly as the same ids in a
    token file (as the training data its train part, every 20th block of
    4096 ids held out for the test unless test_data is given); for an
    encoder trained as BERT (mask_tokens=0.15, mask_id=, special_ids=) that
    stream, or a tokenizer's output without labels (each row a sequence);
    for a token classifier a tokenizer's output whose labels are [n, T], a
    class a token, -100 where none counts (or arrays (ids, tags)). Options are
    `batchfit train`'s (batch="auto", epochs, lr, seed, checkpoint, log,
    save, ...). on_event gets each event of the run's log
    as a dict (start, step, batch_change with its reason, eval, memory,
    end, ...), in order. progress=True prints the library's progress lines.
    Returns a Training result with the weights as {name: numpy array}
    (weights=False: not read) and every event (keep_events=False: none
    kept, for very long runs). weights="w.safetensors" (a path: `train
    --weights`) starts the run from those saved weights, to train more
    after a finished run or fine-tune, and reads the new ones back. Ctrl-C
    stops the run at the next step boundary, writes the checkpoint asked
    for, and raises batchfit.Interrupted (a KeyboardInterrupt)."""
    if isinstance(weights, (str, bytes, os.PathLike)):  # the starting weights, not whether to read them
        options["weights"], weights = weights, True
    if weights:
        _numpy()  # before the run, not after it: a finished training is not thrown away for want of it
    cfg = Config(model=_model(model), **options)
    _set_data(cfg, 0, data)
    _set_data(cfg, 1, test_data)
    made, p, ok = [], None, False  # made: the folders this call made, none left behind by a failure
    try:
        p = _run.progress_stream(cfg, progress)
        _weights_path(cfg, options, weights, made)
        rc, r, state, ev, interrupted = _run.call(cfg, "train", on_event, stoppable=True, keep_events=keep_events)
        if p:
            p.close()
            p = None
        res = Training(*take(r), events=ev.events) if r is not None else None
        if ev.error is not None:
            raise ev.error
        if rc == _errors.ESTOPPED and interrupted:
            raise _errors.Interrupted(_stopped_message(res), res)
        if rc != _errors.OK:
            raise _failure(cfg, rc, state, res)
        if weights:
            res.weights, res.normalization = _read_tensors(cfg.get("save"))
        ok = True
        return res
    finally:
        if p:
            p.close()
        _remove(made, ok)


def _remove(made, ok):
    """The temporary folder always; a checkpoint folder made for a run that
    failed, where it stayed empty."""
    for path, temporary in reversed(made):
        if temporary:
            shutil.rmtree(path, ignore_errors=True)
        elif not ok:
            try:
                os.rmdir(path)  # only an empty one: what the run wrote stays
            except OSError:
                pass


def _makedirs(path, made):
    """os.makedirs, noting each folder it makes."""
    path = os.path.abspath(path)
    missing = []
    while path and not os.path.exists(path):
        missing.append(path)
        path = os.path.dirname(path) if os.path.dirname(path) != path else ""
    for d in reversed(missing):
        os.mkdir(d)
        made.append((d, False))


def _weights_path(cfg, options, weights, made):
    """Where the weights come back through when `save` is not given: a run
    with checkpoints keeps them beside its checkpoints (DIR/weights.safetensors),
    since a checkpoint records the path and its run, resumed later, writes
    there; other runs use a temporary directory (noted in `made`)."""
    if options.get("save") is not None:
        return
    if options.get("checkpoint") is not None:
        ck = os.fsdecode(_path("checkpoint", options["checkpoint"]))  # not a path: the message, not a TypeError
        try:
            _makedirs(ck, made)  # the library checks the save path's directory before it makes DIR
        except (OSError, ValueError):
            pass  # the library says what is wrong with the path
        cfg.set("save", os.path.join(ck, "weights.safetensors"))
        return
    if options.get("resume") is not None:  # the checkpoint's run may have recorded a path: say where, afresh
        found = ctypes.create_string_buffer(4096)
        _errors.check(lib.bfit_checkpoint_find(_path("resume", options["resume"]), found, len(found)))
        cfg.set("save", os.path.join(os.path.dirname(text(found)), "weights.safetensors"))
        return
    if weights:
        tmp = tempfile.mkdtemp(prefix="batchfit-")
        made.append((tmp, True))
        cfg.set("save", os.path.join(tmp, "weights.safetensors"))


def _stopped_message(res):
    steps = res.steps if res else "?"
    ck = res.checkpoint if res else None
    if ck:
        return (f"batchfit: stopped by Ctrl-C at step {steps}; the run's state is in {ck}: resume with "
                f"train(..., resume={os.path.dirname(ck)!r})")
    return f"batchfit: stopped by Ctrl-C at step {steps}; no checkpoint was written (give checkpoint=DIR to resume)"
