"""OpenMP's wait policy in a process that imports batchfit, and threads="auto"
through the package (last test). The package loads
the library with sleeping waits (libgomp's spin count 0, which
OMP_DISPLAY_ENV=verbose prints) and puts the environment back; a policy or
spin count the user set wins; a libgomp loaded before batchfit keeps what it
read. Then the thread count where none is given: the command line's, the
same for plan and train, whatever another library set (torch sets its own
count when imported). Each case is a fresh interpreter: libgomp reads its
settings once."""
import os
import subprocess
import sys

import pytest

CHILD = "import os, batchfit; print('after', os.environ.get('OMP_WAIT_POLICY'))"


def child(code=CHILD, **set_env):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS", "OMP_THREAD_LIMIT")}
    env.update(set_env, OMP_DISPLAY_ENV="verbose")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr


def test_sleeping_waits_and_the_environment_back():
    out, err = child()
    assert "GOMP_SPINCOUNT = '0'" in err
    assert "after None" in out


def test_the_users_policy_wins():
    out, err = child(OMP_WAIT_POLICY="active")
    assert "OMP_WAIT_POLICY = 'ACTIVE'" in err and "after active" in out
    _, err = child(GOMP_SPINCOUNT="1000")
    assert "GOMP_SPINCOUNT = '1000'" in err


def test_a_libgomp_loaded_first_keeps_its_settings():
    gomp = "import ctypes; ctypes.CDLL('libgomp.so.1'); "
    out, err = child(gomp + CHILD)
    assert "GOMP_SPINCOUNT = '300000'" in err and "GOMP_SPINCOUNT = '0'" not in err
    assert "after None" in out


def test_threads_auto_changes_the_count_mid_run():
    """threads="auto" from Python: the run starts on 2 threads and, with the
    test control forcing a change after step 2, goes on with 1 (a `threads`
    event), its ops made again, and trains to the end."""
    code = ("import json, batchfit; ev = []\n"
            "r = batchfit.train('mlp', epoch_samples=640, eval_samples=200, batch=64, threads='auto',\n"
            "                   on_event=lambda e: ev.append(e if isinstance(e, dict) else json.loads(e)))\n"
            "th = [e for e in ev if e['event'] == 'threads']\n"
            "st = [e for e in ev if e['event'] == 'start'][0]\n"
            "print('start', st['threads'], st['threads_auto'])\n"
            "print('changes', [(e['was'], e['threads']) for e in th])\n"
            "print('acc', r.test_accuracy)\n")
    out, err = child(code, OMP_NUM_THREADS="2", BFIT_TEST_THREADS_AT="2")
    assert "start 2 1" in out, out + err
    assert "changes [(2, 1)]" in out, out + err
    acc = float(out.split("acc ")[1].split()[0])
    assert acc > 0.5, out


# plan (on the calling thread) and train (on the package's worker thread)
# with no threads given, after this thread's OpenMP count was set to 1 as
# importing torch does on some machines; prints the plan's, train's and the
# CPUs' counts
COUNTS = ("import ctypes, json, os\n"
          "ctypes.CDLL('libgomp.so.1').omp_set_num_threads(1)\n"
          "import batchfit\n"
          "p = batchfit.plan('cnn', memory='1GiB', batch=[8]{kw})\n"
          "ev = []\n"
          "batchfit.train('mlp', epoch_samples=256, eval_samples=100, batch=64, weights=False{kw},\n"
          "               on_event=lambda e: ev.append(e if isinstance(e, dict) else json.loads(e)))\n"
          "st = [e for e in ev if e['event'] == 'start'][0]\n"
          "print('counts', p['threads'], st['threads'], len(os.sched_getaffinity(0)))\n")


def counts(kw="", **set_env):
    out, err = child(COUNTS.format(kw=kw), **set_env)
    return [int(v) for v in out.split("counts ")[1].split()[:3]]


def test_the_default_count_is_the_command_lines_not_the_threads():
    plan, train, cpus = counts()
    if cpus < 2:
        pytest.skip("one CPU: every count is 1")
    assert plan == train == cpus, (plan, train, cpus)


def test_omp_num_threads_and_an_explicit_count_win():
    assert counts(OMP_NUM_THREADS="1")[:2] == [1, 1]
    assert counts(OMP_NUM_THREADS="3,1")[:2] == [3, 3]  # the outer level of a nested list
    assert counts(OMP_NUM_THREADS="3", OMP_THREAD_LIMIT="2")[:2] == [2, 2]
    assert counts(kw=", threads=2", OMP_NUM_THREADS="1")[:2] == [2, 2]


def test_threads_auto_plans_for_all_the_cores():
    """threads="auto": train starts from all the cores, and plan (on a thread
    whose OpenMP count is 1) sizes the workspaces for as many."""
    plan, train, cpus = counts(kw=", threads='auto'")
    if cpus < 2:
        pytest.skip("one CPU: every count is 1")
    assert plan == train == cpus, (plan, train, cpus)
