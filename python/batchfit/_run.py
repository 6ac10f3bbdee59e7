"""A training run from Python: the library call made on a worker thread
while the calling thread waits, so that Ctrl-C reaches Python at once.

The first Ctrl-C (SIGINT) sets the library's stop flag: the run stops at
the next micro-step boundary, writes a checkpoint when one was asked for,
and the call raises batchfit.Interrupted, a KeyboardInterrupt. A second
Ctrl-C raises KeyboardInterrupt at once, as the command line exits at once;
the run still ends at its boundary on the worker thread. Events reach
`on_event` as dicts on the worker thread, in order; an exception raised
there stops the run and is raised by the call. The library's progress
lines go through a pipe to sys.stderr (or the given stream) only when asked
for."""
import ctypes
import json
import os
import signal
import sys
import threading

from . import _errors
from ._lib import EVENT_FN, lib, libc, text


class _Progress:
    """The library's progress stream: a pipe whose lines a thread copies to `out`
    (a notebook shows sys.stderr's lines; the library's own stream could not)."""

    def __init__(self, out):
        self.out = out
        r, w = os.pipe()
        self.f = libc.fdopen(w, b"w")
        if self.f is None:
            os.close(r)
            os.close(w)
            raise _errors.FileError("progress: cannot open a stream for the progress lines", "progress")
        libc.setvbuf(self.f, None, 1, 0)  # _IOLBF: a line at a time
        self.t = threading.Thread(target=self._copy, args=(r,), name="batchfit-progress", daemon=True)
        self.t.start()

    def _copy(self, r):
        with os.fdopen(r, "r", encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    self.out.write(line)
                    self.out.flush()
                except Exception:  # a closed or odd stream must not end the run
                    pass

    def close(self):
        if self.f is not None:
            libc.fclose(self.f)  # the pipe's end: the copying thread sees it and ends
            self.f = None
            self.t.join()


def progress_stream(cfg, progress):
    """Set the configuration's progress stream for `progress` (False/None:
    quiet, True: sys.stderr, or a writable text stream); returns what to close."""
    if not progress:
        return None
    out = sys.stderr if progress is True else progress
    if not hasattr(out, "write"):
        raise _errors.ArgumentTypeError(f"progress: give True, False or a writable stream, not "
                                        f"{type(progress).__name__}", "progress", _errors.EINVAL)
    _check_writable(out)
    p = _Progress(out)
    rc = lib.bfit_config_set_progress(cfg.c, p.f)
    if rc != _errors.OK:
        p.close()
        _errors.check(rc)
    return p


def _check_writable(out):
    """Refuse a closed or read-only stream now: the lines would be lost in
    silence (the copying thread cannot raise)."""
    name = getattr(out, "name", type(out).__name__)
    if getattr(out, "closed", False) is True:
        raise _errors.InvalidArgumentError(f"progress: the stream {name!r} is closed: give an open, writable "
                                           f"one (or True for sys.stderr)", "progress", _errors.EINVAL)
    writable = getattr(out, "writable", None)
    if callable(writable) and not writable():
        raise _errors.InvalidArgumentError(f"progress: the stream {name!r} is not writable (opened for reading?): "
                                           f"give one opened for writing (or True for sys.stderr)", "progress",
                                           _errors.EINVAL)


class _Events:
    """The on_event callback: each log line as a dict, kept and handed on."""

    def __init__(self, user, flag, keep=True):
        if user is not None and not callable(user):
            raise _errors.ArgumentTypeError(f"on_event: give a function of one dict, not {type(user).__name__}",
                                            "on_event", _errors.EINVAL)
        self.user, self.flag, self.keep = user, flag, keep
        self.events, self.error = [], None
        self.cb = EVENT_FN(self._on_event)

    def _on_event(self, ud, line):
        try:
            ev = json.loads(line.decode("utf-8", "replace"))
            if self.keep:
                self.events.append(ev)
            if self.user is not None and self.error is None:
                self.user(ev)
        except BaseException as e:  # stop the run and raise it from the call
            if self.error is None:
                self.error = e
            self.flag.value = 1


def _wait(worker, flag):
    """Wait for the worker; returns whether Ctrl-C asked it to stop."""
    asked = []

    def on_sigint(signum, frame):
        if asked:
            raise KeyboardInterrupt("batchfit: a second Ctrl-C: not waiting for the run to stop")
        asked.append(signum)
        flag.value = 1

    old = None
    if threading.current_thread() is threading.main_thread():
        cur = signal.getsignal(signal.SIGINT)
        if cur is not signal.SIG_IGN:
            old = signal.signal(signal.SIGINT, on_sigint)
    try:
        worker.start()
        while worker.is_alive():
            worker.join(0.1)
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)
    return bool(asked)


def call(cfg, command, on_event=None, stoppable=False, keep_events=True):
    """lib.bfit_<command>(cfg) on a worker thread: returns (rc, result or
    None, its message and field, the events, whether Ctrl-C stopped it)."""
    flag = ctypes.c_int(0)  # the library's volatile sig_atomic_t
    ev = _Events(on_event, flag, keep_events)
    cfg.keep += [flag, ev]
    _errors.check(lib.bfit_config_set_callbacks(cfg.c, None, None, None, ev.cb, None))
    if stoppable:
        _errors.check(lib.bfit_config_set_stop_flag(cfg.c, ctypes.byref(flag)))
    out = ctypes.c_void_p()
    state = {}

    def work():
        rc = getattr(lib, "bfit_" + command)(cfg.c, ctypes.byref(out))
        state["rc"] = rc
        if rc != _errors.OK:  # the message is this thread's
            state["msg"] = text(lib.bfit_errmsg()) or text(lib.bfit_strerror(rc))
            state["field"] = text(lib.bfit_errfield())

    worker = threading.Thread(target=work, name="batchfit-" + command, daemon=True)
    interrupted = _wait(worker, flag)
    rc = state.get("rc", _errors.ESTATE)
    return rc, out.value, state, ev, interrupted
