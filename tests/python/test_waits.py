"""OpenMP's wait policy in a process that imports batchfit: the package loads
the library with sleeping waits (libgomp's spin count 0, which
OMP_DISPLAY_ENV=verbose prints) and puts the environment back; a policy or
spin count the user set wins; a libgomp loaded before batchfit keeps what it
read. Each case is a fresh interpreter: libgomp reads its settings once."""
import os
import subprocess
import sys

CHILD = "import os, batchfit; print('after', os.environ.get('OMP_WAIT_POLICY'))"


def child(code=CHILD, **set_env):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
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
