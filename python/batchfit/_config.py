"""A library configuration (bfit_config) from keyword arguments named as the
command line's options: `micro_batch=16` is --micro-batch 16, a list
`batch=[1, 32, 64]` is "1,32,64", `augment=True` sets a flag (False leaves
it unset: every flag is off by default), None leaves an option at the
library's default, and an int for a size (`memory=2**30`) is bytes. The
library parses and checks every value as the command line's are, so the
messages (and did-you-mean for a misspelt name) are the command's."""
import ctypes
import math
import numbers
import os
import re
import reprlib

from . import _errors
from ._lib import Owned, lib, text


def _options():
    """name ('_'-spelt) -> what it takes ("" for a flag, "SIZE", "N", ...)."""
    out, i = {}, 0
    takes, cmds = ctypes.c_void_p(), ctypes.c_void_p()
    while True:
        name = lib.bfit_config_option(i, ctypes.byref(takes), ctypes.byref(cmds))
        if name is None:
            return out
        out[text(name).replace("-", "_")] = (text(takes.value), text(cmds.value))
        i += 1


OPTIONS = _options()
# The options that take a list: the table shows one as "M,M,M" or "AT:E,...";
# batch's entry shows one size, but plan reads a list of them (batch=[1, 32]).
LISTS = {n for n, (takes, _) in OPTIONS.items() if "," in takes} | {"batch"}


def show(v):
    """A value in a message: an array by its shape, anything else cut short."""
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        return f"of shape {tuple(v.shape)}"
    return reprlib.repr(v)


def _bad_type(name, value, takes):
    what = "a flag (True or False)" if takes == "" else (takes or "text")
    return _errors.ArgumentTypeError(f"{name}: cannot take {type(value).__name__} {show(value)}: it takes {what}",
                                     name, _errors.EINVAL)


def _bytes(name, v):
    """A float for a size: bytes, when it is a whole number of them."""
    if math.isfinite(v) and v == int(v):
        return f"{int(v)}B"
    raise _errors.InvalidArgumentError(f"{name}: {v!r} is not a whole number of bytes: give an int of bytes "
                                       f"({name}=2**30) or text with a unit ('1.5GiB')", name, _errors.EINVAL)


def _item(name, v, takes):
    """One value (or list item) as the text the command line would give."""
    if isinstance(v, bool):
        raise _bad_type(name, v, takes)
    if isinstance(v, numbers.Integral):
        return f"{int(v)}B" if takes == "SIZE" else str(int(v))
    if isinstance(v, numbers.Real):
        if takes == "SIZE":
            return _bytes(name, float(v))
        return repr(float(v))  # the shortest text that reads back as the same double
    if isinstance(v, os.PathLike):
        v = os.fspath(v)
    if isinstance(v, bytes):
        v = os.fsdecode(v)
    if isinstance(v, str):
        if "\0" in v:
            raise _errors.InvalidArgumentError(f"{name}: the text holds a NUL character", name, _errors.EINVAL)
        return v
    raise _bad_type(name, v, takes)


def _one_or_list(name, value, takes):
    """value, a sequence: refused for an option that takes one value (joined
    with commas it would only get a parse error about the joined text)."""
    if name in LISTS or takes == "?":
        return value
    lists, got = sorted(LISTS), show(value) if isinstance(value, list) else f"{type(value).__name__} {show(value)}"
    raise _errors.ArgumentTypeError(f"{name}: takes one {takes or 'value'}, not a list ({got}); only "
                                    f"{', '.join(lists[:-1])} and {lists[-1]} take lists", name, _errors.EINVAL)


def option_text(name, value):
    """The text for option `name` ('_'-spelt), or None to leave it unset."""
    takes = OPTIONS.get(name, ("?", ""))[0]
    if value is None:
        return None
    if isinstance(value, bool):
        if takes == "?":  # an unknown name: the library says so, with the closest one
            return ""
        if takes == "":  # a flag
            return "" if value else None
        raise _bad_type(name, value, takes)
    if hasattr(value, "ndim") and hasattr(value, "tolist") and getattr(value, "ndim", 0) >= 1:  # NumPy
        _one_or_list(name, value, takes)
        if value.ndim == 1:
            value = value.tolist()
    if "HxW" in takes and isinstance(value, (list, tuple)) and len(value) == 2:  # torchvision's size (h, w)
        return "x".join(_item(name, v, takes) for v in value)
    if isinstance(value, (list, tuple, range)):
        _one_or_list(name, value, takes)
        if not len(value):
            raise _errors.InvalidArgumentError(f"{name}: an empty list: give at least one value", name,
                                               _errors.EINVAL)
        return ",".join(_item(name, v, takes) for v in value)
    return _item(name, value, takes)


def default_threads():
    """The threads a command runs on where `threads` is not given: what the
    command line gets, OMP_NUM_THREADS's first value where the user set one
    (within OMP_THREAD_LIMIT), else the CPUs this process may run on. Not
    this thread's OpenMP setting, which the library would otherwise take:
    another library may have changed it (torch sets its own count when
    imported, 1 on some 2-CPU machines), and plan, find and evaluate run on
    this thread while train runs on another, which keeps libgomp's default;
    a plan sized for one count and a run on another disagree on workspace."""
    def env_int(name):
        v = os.environ.get(name, "").split(",")[0].strip()
        return int(v) if v.isdigit() and int(v) > 0 else 0
    try:
        n = env_int("OMP_NUM_THREADS") or len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    limit = env_int("OMP_THREAD_LIMIT")
    return max(1, min(n, limit or n, 1024))


def _unknown(c, name):
    """Raise the library's message for an unknown name, with the keyword
    spelling of the closest one and the name as the field."""
    rc = lib.bfit_config_set(c, name.encode("utf-8", "surrogateescape"), b"")
    e = _errors.last(rc if rc != _errors.OK else _errors.EINVAL)
    msg = re.sub(r"did you mean '([^']*)'", lambda m: f"did you mean '{m.group(1).replace('-', '_')}'", e.message)
    msg = msg.replace("(bfit_config_option lists them)", "(batchfit.options() lists them)")
    raise type(e)(msg, name, e.code)


class Config:
    """A bfit_config owned by Python; `keep` holds what the library points into
    (arrays, callbacks, the stop flag) for as long as the configuration lives.
    `threads` defaults to default_threads()."""

    def __init__(self, **options):
        p = lib.bfit_config_new()
        if p is None:
            raise _errors.last(_errors.ENOMEM)
        self.c = Owned(p, lib.bfit_config_free)
        self.keep = []
        self.texts = {}  # option -> the text set, to tell which option a library message is about
        for name, value in options.items():
            self.set(name, value)
        if options.get("threads") is None:
            self.set("threads", default_threads())

    def set(self, name, value):
        if not isinstance(name, str):
            raise _errors.ArgumentTypeError(f"option names are text, not {type(name).__name__}", "", _errors.EINVAL)
        if "\0" in name:
            raise _errors.InvalidArgumentError("an option name holds a NUL character", "", _errors.EINVAL)
        if name.replace("-", "_") not in OPTIONS:
            _unknown(self.c, name)
        t = option_text(name.replace("-", "_"), value)
        if t is None:
            return
        _errors.check(lib.bfit_config_set(self.c, name.encode(), t.encode("utf-8", "surrogateescape")))
        self.texts[name.replace("-", "_")] = t

    def get(self, name):
        buf = ctypes.create_string_buffer(4096)
        _errors.check(lib.bfit_config_get(self.c, name.encode(), buf, len(buf)))
        return text(buf)
