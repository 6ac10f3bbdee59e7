"""The shared library, loaded with ctypes from Python's standard library:
the prototypes of include/batchfit.h that the package calls, and where
libbatchfit.so is found. No compiler and no package beyond Python's own are
involved (NumPy only where arrays go in or weights come out).

The library is looked for, in order:
  1. the file the environment's BATCHFIT_LIB names (and only there, if set);
  2. the path `cmake --install` wrote beside the installed package
     (_install.py);
  3. the build tree of a source checkout (build/libbatchfit.so.0 beside
     python/), for the tests and for working in the repository;
  4. the dynamic linker's own search (ldconfig, LD_LIBRARY_PATH).

ctypes releases the GIL for the length of each call (CDLL), as the package
needs: a training call runs on a worker thread while the caller's thread
waits for Ctrl-C, and the event callback takes the GIL back on that worker.
"""
import ctypes
import os
from ctypes import CFUNCTYPE, POINTER, c_char_p, c_double, c_int, c_int64, c_size_t, c_uint64, c_void_p

P = c_void_p  # every library object (bfit_config *, bfit_result *, FILE *, ...) is opaque here
PP = POINTER(c_void_p)
I64P = POINTER(c_int64)
EVENT_FN = CFUNCTYPE(None, c_void_p, c_char_p)  # bfit_event_fn: (void *ud, const char *json)

# name: (return type, argument types), as include/batchfit.h declares them.
# `const char *` results stay addresses (P) so that NULL is told from "",
# and text() reads them.
PROTOTYPES = {
    "bfit_version": (P, []),
    "bfit_version_number": (c_int, []),
    "bfit_errmsg": (P, []),
    "bfit_errfield": (P, []),
    "bfit_strerror": (P, [c_int]),
    "bfit_parse_size": (c_int, [c_char_p, POINTER(c_uint64)]),
    "bfit_format_size": (P, [c_uint64, c_char_p, c_size_t]),
    "bfit_config_new": (P, []),
    "bfit_config_free": (None, [P]),
    "bfit_config_set": (c_int, [P, c_char_p, c_char_p]),
    "bfit_config_set_int": (c_int, [P, c_char_p, c_int64]),
    "bfit_config_set_double": (c_int, [P, c_char_p, c_double]),
    "bfit_config_get": (c_int, [P, c_char_p, c_char_p, c_size_t]),
    "bfit_config_option": (P, [c_int, PP, PP]),
    "bfit_config_check": (c_int, [P, c_char_p]),
    "bfit_config_set_progress": (c_int, [P, P]),
    "bfit_config_set_stop_flag": (c_int, [P, POINTER(c_int)]),  # sig_atomic_t is int on Linux
    "bfit_config_set_callbacks": (c_int, [P, P, P, P, EVENT_FN, P]),
    "bfit_config_set_arrays": (c_int, [P, c_int, P, P, c_int64, c_int64]),
    "bfit_config_set_token_arrays": (c_int, [P, c_int, P, P, c_int64, c_int64]),
    "bfit_config_set_token_stream": (c_int, [P, c_int, P, c_int64]),
    "bfit_config_set_token_tags": (c_int, [P, c_int, P, P, c_int64, c_int64]),
    "bfit_result_free": (None, [P]),
    "bfit_result_json": (P, [P]),
    "bfit_result_print": (c_int, [P, P]),
    "bfit_plan": (c_int, [P, PP]),
    "bfit_find": (c_int, [P, PP]),
    "bfit_train": (c_int, [P, PP]),
    "bfit_evaluate": (c_int, [P, PP]),
    "bfit_report_write": (c_int, [c_char_p, c_char_p]),
    "bfit_checkpoint_find": (c_int, [c_char_p, c_char_p, c_size_t]),
    "bfit_tensors_open": (c_int, [c_char_p, PP]),
    "bfit_tensors_free": (None, [P]),
    "bfit_tensors_count": (c_int, [P]),
    "bfit_tensors_name": (P, [P, c_int]),
    "bfit_tensors_dtype": (P, [P, c_int]),
    "bfit_tensors_shape": (c_int, [P, c_int, I64P, c_int]),
    "bfit_tensors_numel": (c_int64, [P, c_int]),
    "bfit_tensors_read": (c_int, [P, c_int, P, c_int64]),
    "bfit_tensors_meta": (P, [P, c_char_p]),
}

# From the C library: a stream for the library's progress lines, and one
# that gathers a result's text in memory.
LIBC_PROTOTYPES = {
    "fdopen": (P, [c_int, c_char_p]),
    "open_memstream": (P, [PP, POINTER(c_size_t)]),
    "setvbuf": (c_int, [P, P, c_int, c_size_t]),
    "fclose": (c_int, [P]),
    "free": (None, [P]),
}

SONAME = "libbatchfit.so.0"
HERE = os.path.dirname(os.path.abspath(__file__))


def _candidates():
    """(path, why) in the order they are tried."""
    env = os.environ.get("BATCHFIT_LIB")
    if env:
        yield env, "BATCHFIT_LIB"
        return
    try:
        from . import _install  # written by cmake --install
        yield _install.LIBRARY, "the installed package's _install.py"
    except ImportError:
        pass
    yield os.path.normpath(os.path.join(HERE, "..", "..", "build", SONAME)), "the source checkout's build tree"
    yield SONAME, "the dynamic linker's search path"


def _gomp_loaded():
    try:
        with open("/proc/self/maps") as f:
            return "libgomp" in f.read()
    except OSError:
        return True


def _load_quiet_waits():
    """Load the library with OpenMP's sleeping waits, as the CLI runs: libgomp
    reads its policy once, when it is loaded, and by default a waiting thread
    spins, which beside another CPU-bound job made steps 4-37 times slower
    (docs/performance.md, "A loaded machine"). The environment is restored
    after; a user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT wins, and a libgomp
    already loaded (torch imported first) keeps what it read."""
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ or _gomp_loaded():
        return _load()
    os.environ["OMP_WAIT_POLICY"] = "passive"
    try:
        return _load()
    finally:
        del os.environ["OMP_WAIT_POLICY"]


def _load():
    tried = []
    for path, why in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(f"{path} ({why}): no such file")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append(f"{path} ({why}): {e}")
    raise ImportError("batchfit: cannot load the shared library libbatchfit.so; tried:\n  " + "\n  ".join(tried) +
                      "\nBuild it (scripts/build.sh build), install it (cmake --install build), or set "
                      "BATCHFIT_LIB to the file")


def _declare(handle, prototypes):
    """Set each function's types; returns the names the library lacks."""
    missing = []
    for name, (res, args) in prototypes.items():
        try:
            f = getattr(handle, name)
        except AttributeError:
            missing.append(name)
            continue
        f.restype, f.argtypes = res, args
    return missing


def text(p):
    """A C string from the library (an address, bytes or a char buffer) as
    str ('' for NULL)."""
    if p is None:
        return ""
    if isinstance(p, int):
        p = ctypes.string_at(p)
    elif not isinstance(p, bytes):
        p = p.value
    return p.decode("utf-8", "replace")


lib, LIBRARY_PATH = _load_quiet_waits()
libc = ctypes.CDLL(None)
_declare(libc, LIBC_PROTOTYPES)

# Everything the package calls must be there: a library older than the
# package fails here, by name, rather than in the middle of a call.
_missing = _declare(lib, PROTOTYPES)
if "bfit_version" in _missing:  # not even the version: another library under the name
    raise ImportError(f"batchfit: {LIBRARY_PATH} is not libbatchfit: it lacks bfit_version and {len(_missing) - 1} "
                      f"more of the {len(PROTOTYPES)} functions the package calls; point BATCHFIT_LIB at "
                      f"libbatchfit.so.0 (scripts/build.sh build makes build/libbatchfit.so.0)")
if _missing:
    raise ImportError(f"batchfit: {LIBRARY_PATH} lacks {', '.join(_missing)}: it is older than this package "
                      f"(library {text(lib.bfit_version())}); rebuild or reinstall it")


class Owned:
    """A library object freed with `free` when the last reference goes (or at
    close()); passes as its address to the prototypes above."""

    def __init__(self, address, free):
        self._as_parameter_ = address
        self._free = free

    def close(self):
        if self._as_parameter_ is not None:
            self._free(self._as_parameter_)
            self._as_parameter_ = None

    def __del__(self):
        self.close()
