"""batchfit.find: the largest batch the command line finds, and the ladder
of measured sizes; progress lines only when asked for."""
import io

import batchfit

from conftest import cli_json


def test_largest_equals_cli():
    _, want, _ = cli_json("find", "--model", "mlp", "--memory", "64MiB", "--largest-only", "--threads", "2")
    f = batchfit.find("mlp", memory="64MiB", largest_only=True, threads=2)
    assert f.largest == want["largest"]["batch"] and f["largest"] == want["largest"]
    assert f["largest"]["plan_agrees"] is True and f.fastest is None and f.ladder == []
    assert str(f).startswith("batchfit find: mlp")


def test_ladder(small_spec):
    buf = io.StringIO()
    f = batchfit.find(small_spec, data="synthetic", memory="16MiB", limit=64, repeats=2, threads=2, progress=buf)
    assert f.largest == 64  # the limit
    batches = [row["batch"] for row in f.ladder]
    assert batches[0] == 1 and batches[-1] == 64 and batches == sorted(batches)
    assert all(row["samples_per_s"] > 0 for row in f.ladder)
    assert f.fastest in batches and f.best in batches
    assert "fastest" in str(f)
