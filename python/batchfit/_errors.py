"""The library's failures as Python exceptions.

Every exception the package raises for a failure of the library, or for an
argument it refuses, is a batchfit.Error carrying the library's message,
the option it names (`field`, spelt with '_' as the keyword argument is)
and the status code; each kind is also the built-in exception Python code
expects for it (ValueError for a bad argument, FileNotFoundError/OSError
for the file system, MemoryError when the model does not fit).
"""
import errno as _errno

from ._lib import lib, text

OK, ENOMEM, EINVAL, EIO, EFORMAT, EDEVICE, ESTATE, ESTOPPED, EPEER = 0, -1, -2, -3, -4, -5, -6, -7, -8


class Error(Exception):
    """A failure of batchfit: `message` (the library's), `field` (the option
    it is about, '' if none), `code` (the library's BFIT_E* status) and, where
    the command got that far, `result` (what it found: a plan of a model that
    does not fit says by how much)."""

    def __init__(self, message, field="", code=0, result=None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.code = code
        self.result = result

    def __str__(self):
        return self.message

    def __reduce__(self):  # picklable with its fields (multiprocessing, concurrent.futures)
        return (self.__class__, (self.message, self.field, self.code, None))


class InvalidArgumentError(Error, ValueError):
    """A bad option, value or input (BFIT_EINVAL)."""


class ArgumentTypeError(Error, TypeError):
    """A value of a type the option cannot take (a dict for `batch`)."""


class FileError(Error, OSError):
    """The file system (BFIT_EIO)."""

    def __init__(self, message, field="", code=EIO, result=None, errno=None):
        Error.__init__(self, message, field, code, result)
        self.errno = errno
        self.strerror = message


class FileNotFound(FileError, FileNotFoundError):
    """A file or data set that is not there (BFIT_EIO)."""


class MissingFileArgument(InvalidArgumentError, FileNotFound):
    """An option naming a file that is not there (the model): a bad argument
    (BFIT_EINVAL) and a missing file both."""

    def __init__(self, message, field="", code=EINVAL, result=None, errno=_errno.ENOENT):
        FileNotFound.__init__(self, message, field, code, result, errno)


class FormatError(Error, ValueError):
    """Malformed file contents (BFIT_EFORMAT): the message names the file and where."""


class OutOfMemoryError(Error, MemoryError):
    """Device or host memory (BFIT_ENOMEM): the message says by how much and what would fit."""


class DeviceError(Error, RuntimeError):
    """A backend failure (BFIT_EDEVICE)."""


class StateError(Error, RuntimeError):
    """A call not valid in the object's state (BFIT_ESTATE)."""


class StoppedError(Error, RuntimeError):
    """A run stopped on request, not by Ctrl-C (BFIT_ESTOPPED)."""


class PeerError(Error, RuntimeError):
    """Data-parallel: another process of the group failed (BFIT_EPEER)."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped a training run at a step boundary: `result` holds what it
    did (steps, and "checkpoint", the file written when one was asked for)."""

    def __init__(self, message, result=None):
        super().__init__(message)
        self.result = result


_KINDS = {ENOMEM: OutOfMemoryError, EINVAL: InvalidArgumentError, EFORMAT: FormatError, EDEVICE: DeviceError,
          ESTATE: StateError, ESTOPPED: StoppedError, EPEER: PeerError}


def make(code, message, field="", result=None):
    """The exception for a library status with its message."""
    if code == EIO:
        missing = "No such file or directory" in message or " not found" in message or "no such file" in message
        cls = FileNotFound if missing else FileError
        return cls(message, field, code, result, errno=_errno.ENOENT if missing else _errno.EIO)
    if code == EINVAL and ": no such file" in message:
        return MissingFileArgument(message, field, code, result)
    return _KINDS.get(code, Error)(message, field, code, result)


def last(code, result=None):
    """The exception for a failed call on this thread (bfit_errmsg is per thread)."""
    msg = text(lib.bfit_errmsg()) or text(lib.bfit_strerror(code))
    return make(code, msg, text(lib.bfit_errfield()), result)


def check(code):
    """Raise for a failed library call made on this thread."""
    if code != OK:
        raise last(code)


for _c in (Error, InvalidArgumentError, ArgumentTypeError, FileError, FileNotFound, MissingFileArgument, FormatError,
           OutOfMemoryError, DeviceError, StateError, StoppedError, PeerError, Interrupted):
    _c.__module__ = "batchfit"  # tracebacks say batchfit.InvalidArgumentError, as users spell it
