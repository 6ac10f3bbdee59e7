"""The shared library, loaded with cffi in ABI mode: the declarations of
include/batchfit.h that the package calls, and where libbatchfit.so is
found. No compiler is involved on the user's side.

The library is looked for, in order:
  1. the file the environment's BATCHFIT_LIB names (and only there, if set);
  2. the path `cmake --install` wrote beside the installed package
     (_install.py);
  3. the build tree of a source checkout (build/libbatchfit.so.0 beside
     python/), for the tests and for working in the repository;
  4. the dynamic linker's own search (ldconfig, LD_LIBRARY_PATH).
"""
import os
import re

try:
    import cffi
except ImportError as _e:  # name the package and where it comes from, not only the module
    raise ImportError(f"batchfit loads libbatchfit with cffi, which this Python lacks ({_e}): install it "
                      f"(Debian: apt-get install python3-cffi; elsewhere: pip install cffi)") from _e

# The public declarations the package uses, as include/batchfit.h has them
# (structs the package only passes through are left incomplete).
CDEF = r"""
typedef int sig_atomic_t;
typedef struct _IO_FILE FILE;

const char *bfit_version(void);
int bfit_version_number(void);
const char *bfit_errmsg(void);
const char *bfit_errfield(void);
const char *bfit_strerror(int code);
int bfit_parse_size(const char *text, uint64_t *out);
char *bfit_format_size(uint64_t bytes, char *buf, size_t len);

typedef struct bfit_config bfit_config;
bfit_config *bfit_config_new(void);
void bfit_config_free(bfit_config *c);
int bfit_config_set(bfit_config *c, const char *name, const char *value);
int bfit_config_set_int(bfit_config *c, const char *name, int64_t value);
int bfit_config_set_double(bfit_config *c, const char *name, double value);
int bfit_config_get(const bfit_config *c, const char *name, char *buf, size_t len);
const char *bfit_config_option(int i, const char **takes, const char **commands);
int bfit_config_check(const bfit_config *c, const char *command);
int bfit_config_set_progress(bfit_config *c, FILE *human);
int bfit_config_set_stop_flag(bfit_config *c, volatile sig_atomic_t *flag);

struct bfit_step_info;
struct bfit_eval_info;
struct bfit_batch_decision;
typedef void (*bfit_step_fn)(void *ud, const struct bfit_step_info *s);
typedef void (*bfit_eval_fn)(void *ud, const struct bfit_eval_info *e);
typedef void (*bfit_change_fn)(void *ud, const struct bfit_batch_decision *d, int64_t step);
typedef void (*bfit_event_fn)(void *ud, const char *json);
int bfit_config_set_callbacks(bfit_config *c, bfit_step_fn on_step, bfit_eval_fn on_eval,
                              bfit_change_fn on_batch_change, bfit_event_fn on_event, void *ud);
int bfit_config_set_arrays(bfit_config *c, int which, const float *x, const int32_t *labels, int64_t n,
                           int64_t sample_floats);

typedef struct bfit_result bfit_result;
void bfit_result_free(bfit_result *r);
const char *bfit_result_json(const bfit_result *r);
int bfit_result_print(const bfit_result *r, FILE *f);

int bfit_plan(const bfit_config *c, bfit_result **out);
int bfit_find(const bfit_config *c, bfit_result **out);
int bfit_train(const bfit_config *c, bfit_result **out);
int bfit_evaluate(const bfit_config *c, bfit_result **out);
int bfit_report_write(const char *log_path, const char *html_path);
int bfit_checkpoint_find(const char *file_or_dir, char *path, size_t len);

typedef struct bfit_tensors bfit_tensors;
int bfit_tensors_open(const char *path, bfit_tensors **out);
void bfit_tensors_free(bfit_tensors *t);
int bfit_tensors_count(const bfit_tensors *t);
const char *bfit_tensors_name(const bfit_tensors *t, int i);
const char *bfit_tensors_dtype(const bfit_tensors *t, int i);
int bfit_tensors_shape(const bfit_tensors *t, int i, int64_t *dims, int max);
int64_t bfit_tensors_numel(const bfit_tensors *t, int i);
int bfit_tensors_read(const bfit_tensors *t, int i, float *out, int64_t n);
const char *bfit_tensors_meta(const bfit_tensors *t, const char *key);
"""

# From the C library: a stream for the library's progress lines, and one
# that gathers a result's text in memory.
LIBC_CDEF = r"""
FILE *fdopen(int fd, const char *mode);
FILE *open_memstream(char **ptr, size_t *sizeloc);
int setvbuf(FILE *stream, char *buf, int mode, size_t size);
int fclose(FILE *stream);
void free(void *p);
"""

SONAME = "libbatchfit.so.0"
HERE = os.path.dirname(os.path.abspath(__file__))

ffi = cffi.FFI()
ffi.cdef(CDEF)
ffi.cdef(LIBC_CDEF)


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
            return ffi.dlopen(path), path
        except OSError as e:
            tried.append(f"{path} ({why}): {e}")
    raise ImportError("batchfit: cannot load the shared library libbatchfit.so; tried:\n  " + "\n  ".join(tried) +
                      "\nBuild it (scripts/build.sh build), install it (cmake --install build), or set "
                      "BATCHFIT_LIB to the file")


lib, LIBRARY_PATH = _load_quiet_waits()
libc = ffi.dlopen(None)

# Everything the package calls must be there: a library older than the
# package fails here, by name, rather than in the middle of a call.
_missing = []
_names = re.findall(r"\b(bfit_\w+)\(", CDEF)
for _name in _names:
    try:
        getattr(lib, _name)
    except AttributeError:
        _missing.append(_name)
if "bfit_version" in _missing:  # not even the version: another library under the name
    raise ImportError(f"batchfit: {LIBRARY_PATH} is not libbatchfit: it lacks bfit_version and {len(_missing) - 1} "
                      f"more of the {len(_names)} functions the package calls; point BATCHFIT_LIB at "
                      f"libbatchfit.so.0 (scripts/build.sh build makes build/libbatchfit.so.0)")
if _missing:
    raise ImportError(f"batchfit: {LIBRARY_PATH} lacks {', '.join(_missing)}: it is older than this package "
                      f"(library {ffi.string(lib.bfit_version()).decode()}); rebuild or reinstall it")


def text(p):
    """A C string from the library as str ('' for NULL)."""
    return ffi.string(p).decode("utf-8", "replace") if p != ffi.NULL else ""
