"""Shared helpers of the Python package's tests: the command line beside the
library under test, Fashion-MNIST as NumPy arrays, a small spec model."""
import gzip
import json
import os
import subprocess

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.normpath(os.path.join(HERE, "..", ".."))
FMNIST = "/usr/share/datasets/fashion-mnist"


def cli_path():
    p = os.environ.get("BATCHFIT_CLI") or os.path.join(SOURCE, "build", "batchfit")
    if not os.path.exists(p):
        pytest.skip(f"the batchfit command is not at {p} (build it, or set BATCHFIT_CLI)")
    return p


def cli(*args, check=True):
    """Run `batchfit ARGS...`: (exit code, stdout, stderr)."""
    r = subprocess.run([cli_path(), *map(str, args)], capture_output=True, text=True, timeout=300)
    if check and r.returncode != 0:
        raise AssertionError(f"batchfit {' '.join(map(str, args))}: exit {r.returncode}\n{r.stderr}")
    return r.returncode, r.stdout, r.stderr


def cli_json(*args, check=True):
    code, out, err = cli(*args, "--json", check=check)
    return code, json.loads(out), err


def read_idx(path):
    with gzip.open(path, "rb") as f:
        b = f.read()
    nd = b[3]
    dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(b, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)


@pytest.fixture(scope="session")
def fmnist():
    """(x_train, y_train, x_test, y_test): uint8 images N x 28 x 28, labels."""
    if not os.path.isdir(FMNIST):
        pytest.skip(f"Fashion-MNIST is not at {FMNIST} (apt-get install dataset-fashion-mnist)")
    return (read_idx(f"{FMNIST}/train-images-idx3-ubyte.gz"), read_idx(f"{FMNIST}/train-labels-idx1-ubyte.gz"),
            read_idx(f"{FMNIST}/t10k-images-idx3-ubyte.gz"), read_idx(f"{FMNIST}/t10k-labels-idx1-ubyte.gz"))


@pytest.fixture
def small_spec(tmp_path):
    """A small model over 64 features: cheap steps on a loaded machine."""
    p = tmp_path / "small.cfg"
    p.write_text("input 64\nlinear 128\nrelu\nlinear 10\n")
    return str(p)


def toy_data(n, features=64, classes=10, seed=0):
    """Samples whose class shows in their features, as float32 and int64 labels."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = rng.normal(size=(n, features)).astype(np.float32)
    x[np.arange(n), y] += 2.0
    return x, y
