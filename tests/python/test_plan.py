"""batchfit.plan: the same figures as `batchfit plan --json` for every preset
(a batch that does not fit comes back as OutOfMemoryError carrying the same
plan), the figures by name, and str() the command's text."""
import os

import batchfit
import pytest

from conftest import cli, cli_json

PRESETS = ["mlp", "cnn", "resnet18", "resnet50", "vgg16", "gpt-nano", "gpt2", "bert-base"]


@pytest.mark.parametrize("preset", PRESETS)
def test_plan_equals_cli(preset):
    code, want, err = cli_json("plan", "--model", preset, "--memory", "11GiB", "--batch", "1,32,64", "--threads", "2",
                               check=False)
    try:
        got = batchfit.plan(preset, memory="11GiB", batch=[1, 32, 64], threads=2)
        assert code == 0, err
    except batchfit.OutOfMemoryError as e:  # gpt2 and bert-base at 64 in 11 GiB
        assert code == 1
        assert isinstance(e, MemoryError) and e.result is not None
        assert f"batchfit: error: {e}" in err  # the command's message, word for word
        got = e.result
        assert got.fits is False and got["why"] == str(e)
    assert got.json == want
    for row in want["plans"]:
        assert got.peak[row["m"]] == row["peak"]
        for cat in ("params", "grads", "optimizer", "activations", "act_grads", "workspace", "input"):
            assert got.bytes[row["m"]][cat] == row[cat]
    assert sorted(got.peak) == [1, 32, 64]
    assert got.largest_batch == want["max_batch"]["with_margin"]
    assert got.largest_batch_all == want["max_batch"]["without_margin"]
    assert got.fixed == want["fixed"]
    assert got.per_sample == want["per_sample"]


def test_text_is_the_commands(capsys):
    _, out, _ = cli("plan", "--model", "mlp", "--memory", "2GiB", "--batch", "8,16", "--optimizer", "adamw",
                    "--precision", "bf16", "--threads", "2")
    p = batchfit.plan("mlp", memory="2GiB", batch=(8, 16), optimizer="adamw", precision="bf16", threads=2)
    assert p.text == out
    assert str(p) == repr(p) == out.rstrip("\n")
    print(p)
    assert capsys.readouterr().out == out  # no blank line after it
    assert p["optimizer"] == "adamw" and p["precision"] == "BF16"


def test_precision_auto():
    """precision="auto" plans in bf16 where this CPU computes it natively (AVX512_BF16 or AMX in
    /proc/cpuinfo, and oneDNN not capped below them by ONEDNN_MAX_CPU_ISA, as scripts/test.sh caps it
    to AVX2 for some passes), else in f32, and says so."""
    capped = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper() in (
        "SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI")
    with open("/proc/cpuinfo") as f:
        native = not capped and any(w in ("avx512_bf16", "amx_bf16") for w in f.read().split())
    p = batchfit.plan("cnn", memory="1GiB", batch=(8,), precision="auto", threads=2)
    assert p["precision"] == ("BF16" if native else "F32"), p["precision"]
    assert ("(precision auto: native here)" if native else "(precision auto: no native bf16 here)") in p.text


def test_ways_and_flags():
    _, want, _ = cli_json("plan", "--model", "cnn", "--memory", "1GiB", "--ways", "--threads", "2")
    p = batchfit.plan("cnn", memory=2**30, ways=True, threads=2)  # an int for a size is bytes
    assert p.json == want
    assert p.ways == want["ways"] and len(p.ways) >= 5
    assert p.largest_batch == want["ways"][0]["batch"]
    _, want, _ = cli_json("plan", "--model", "cnn", "--memory", "1GiB", "--eval", "--threads", "2")
    assert batchfit.plan("cnn", memory="1GiB", eval=True, threads=2, no_lean=False).json == want


def test_option_names_and_values():
    opts = batchfit.options()
    assert opts["micro_batch"][0] == "auto|N" and "train" in opts["micro_batch"][1]
    assert opts["augment"][0] == ""  # a flag
    assert batchfit.parse_size("1.5GiB") == 3 * 2**29
    assert batchfit.format_size(3 * 2**29) == "1.50 GiB"
    assert batchfit.version() == batchfit.__version__ and batchfit.version().count(".") == 2
