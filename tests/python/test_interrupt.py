"""Ctrl-C during batchfit.train, in a child process: the run stops at the
next step boundary, writes the checkpoint asked for, and train raises
KeyboardInterrupt (batchfit.Interrupted, with the result); Python's own
SIGINT handler is back afterwards, and the checkpoint resumes."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import batchfit

CHILD = textwrap.dedent("""
    import json, signal, sys
    import batchfit
    from conftest import toy_data
    spec, ck = sys.argv[1], sys.argv[2]
    x, y = toy_data(64 * 3000)
    def on_event(ev):
        if ev["event"] == "step" and ev["step"] == 5:
            print("READY", flush=True)
    try:
        batchfit.train(spec, data=(x, y), batch=64, epochs=1, memory="64MiB", seed=3, checkpoint=ck,
                       on_event=on_event)
        out = {"outcome": "finished"}
    except KeyboardInterrupt as e:
        r = getattr(e, "result", None)
        out = {"outcome": type(e).__name__, "message": str(e), "steps": r.steps if r else None,
               "checkpoint": r.checkpoint if r else None,
               "handler_back": signal.getsignal(signal.SIGINT) is signal.default_int_handler}
    print(json.dumps(out), flush=True)
""")


def test_ctrl_c_stops_at_a_step_with_a_checkpoint(small_spec, tmp_path):
    ck = tmp_path / "ck"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")]))
    child = subprocess.Popen([sys.executable, "-c", CHILD, small_spec, str(ck)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = child.stdout.readline()
        if line.strip() != "READY":
            child.wait(timeout=60)
            raise AssertionError(f"the child did not start: {line!r}\n{child.stderr.read()}")
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, err
    got = json.loads(out.strip().splitlines()[-1])
    assert got["outcome"] == "Interrupted", got
    assert got["handler_back"] is True
    assert 5 <= got["steps"] < 3000
    assert got["checkpoint"] and os.path.dirname(got["checkpoint"]) == str(ck)
    assert os.path.exists(got["checkpoint"]) and "resume with train(..., resume=" in got["message"]
    assert "0.weight" in batchfit.read_weights(got["checkpoint"])  # a whole file
    # the state resumes: the run goes on from the step it stopped at (stopped again by on_event)
    from conftest import toy_data
    x, y = toy_data(64 * 3000)
    seen = []

    class Enough(Exception):
        pass

    def watch(ev):
        seen.append(ev)
        if ev["event"] == "step":
            raise Enough

    try:
        batchfit.train(small_spec, data=(x, y), batch=64, epochs=1, memory="64MiB", seed=3, resume=str(ck),
                       on_event=watch, weights=False)
    except Enough:
        pass
    assert [e["event"] for e in seen][:2] == ["resume", "start"] or "resume" in [e["event"] for e in seen]
    assert [e["step"] for e in seen if e["event"] == "step"] == [got["steps"]]
