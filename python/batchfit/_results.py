"""What a command found, as Python objects: the library's result JSON as a
read-only mapping (`.json` is the dict itself, with every field
docs/embedding.md lists), the figures people ask for first as attributes,
and `str()` / `repr()` giving the text the command line prints (`.text`:
exactly, with its last newline, which print() adds)."""
import collections.abc
import ctypes
import json

from ._lib import lib, libc, text

CATEGORIES = ("params", "grads", "optimizer", "statistics", "activations", "act_grads", "workspace", "input")


def take(r):
    """The JSON (a dict) and the text of a library result; frees it."""
    try:
        data = json.loads(text(lib.bfit_result_json(r)))
        ptr, size = ctypes.c_void_p(), ctypes.c_size_t()
        f = libc.open_memstream(ctypes.byref(ptr), ctypes.byref(size))
        out = ""
        if f is not None:
            lib.bfit_result_print(r, f)
            libc.fclose(f)
            if ptr.value is not None:
                out = ctypes.string_at(ptr.value, size.value).decode("utf-8", "replace")
                libc.free(ptr)
        return data, out
    finally:
        lib.bfit_result_free(r)


class Result(collections.abc.Mapping):
    """A command's result: a mapping over its JSON fields."""

    def __init__(self, data, text_=""):
        self.json = data
        self.text = text_

    def __getitem__(self, key):
        return self.json[key]

    def __iter__(self):
        return iter(self.json)

    def __len__(self):
        return len(self.json)

    def __str__(self):  # print() adds the last newline back
        return self.text.rstrip("\n")

    def __repr__(self):
        return self.text.rstrip("\n") if self.text else f"{type(self).__name__}({self.json!r})"


class Plan(Result):
    """batchfit.plan's result: the memory of a training step per category.

    fixed          bytes per category that do not grow with the batch, and "total"
    per_sample     bytes per category per sample, and the affine fit's figures
    bytes          {batch: {category: bytes}} at the batches planned
    peak           {batch: peak bytes} at the batches planned
    largest_batch  the largest batch within the memory less the margin
                   (largest_batch_all: in all of the memory)
    ways           the ways to a larger batch (with ways=True), else None
    fits           whether every batch asked for fits
    """

    @property
    def fixed(self):
        return dict(self.json.get("fixed", {}))

    @property
    def per_sample(self):
        return dict(self.json.get("per_sample", {}))

    @property
    def bytes(self):
        return {p["m"]: {k: p[k] for k in CATEGORIES if k in p} for p in self.json.get("plans", [])}

    @property
    def peak(self):
        return {p["m"]: p["peak"] for p in self.json.get("plans", [])}

    @property
    def largest_batch(self):
        mb = self.json.get("max_batch")
        if mb:
            return mb["with_margin"]
        ways = self.json.get("ways")
        return ways[0]["batch"] if ways else None

    @property
    def largest_batch_all(self):
        mb = self.json.get("max_batch")
        return mb["without_margin"] if mb else None

    @property
    def ways(self):
        return self.json.get("ways")

    @property
    def fits(self):
        return self.json.get("fits", True)


class Find(Result):
    """batchfit.find's result.

    largest   the largest batch that fits (planned, confirmed by a real step)
    fastest   the batch recommended for speed (the smallest within the
              tolerance of the best samples/s); best: the best measured
    ladder    the measured sizes: [{"batch", "samples_per_s", ...}, ...]
    """

    @property
    def largest(self):
        return self.json["largest"]["batch"]

    @property
    def fastest(self):
        f = self.json.get("fastest")
        return f["recommended"] if f else None

    @property
    def best(self):
        f = self.json.get("fastest")
        return f["best"] if f else None

    @property
    def ladder(self):
        return list(self.json.get("ladder", []))


class Training(Result):
    """batchfit.train's result.

    weights        {name: numpy.ndarray} the trained weights (float32)
    normalization  {"mean": [...], "std": [...]} per input channel: what the
                   samples were standardised by (None with no_normalize)
    events         every event of the run's log, as dicts, in order
    test_accuracy, steps, checkpoint  and every other field as a mapping
    """

    def __init__(self, data, text_="", weights=None, events=None):
        super().__init__(data, text_)
        self.weights = weights if weights is not None else {}
        self.events = events if events is not None else []
        self.normalization = None

    @property
    def test_accuracy(self):
        return self.json.get("test_accuracy")

    @property
    def steps(self):
        return self.json.get("steps")

    @property
    def checkpoint(self):
        return self.json.get("checkpoint") or None
