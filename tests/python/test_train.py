"""batchfit.train: NumPy arrays train to the same weights, bit for bit, as
the command line on a CSV file of the same samples (seed and options the
same); events reach on_event as dicts, every line of the run's log in its
order, with the batch changes' reasons; the weights come back as arrays;
progress is off unless asked for; the GIL is released while the library
works."""
import io
import json
import threading
import time

import batchfit
import numpy as np
import pytest

from conftest import cli_json, toy_data

SPEC784 = "input 784\nlinear 64\nrelu\nlinear 10\n"
OPTS = dict(epochs=1, batch=32, seed=5, lr=0.05, memory="256MiB", threads=2)


def write_csv(path, x, y):
    """Integer pixel values: the text is the float exactly."""
    np.savetxt(path, np.hstack([x.reshape(len(x), -1).astype(np.int64), y.reshape(-1, 1)]), fmt="%d", delimiter=",")


def cli_args(opts):
    out = []
    for k, v in opts.items():
        out += ["--" + k.replace("_", "-"), str(v)]
    return out


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def test_arrays_equal_cli_bit_for_bit(fmnist, tmp_path):
    xtr, ytr, xte, yte = fmnist
    x, y = xtr[:2000].astype(np.float32), ytr[:2000].astype(np.int64)  # 0..255: normalisation does the scaling
    xt, yt = xte[:500].astype(np.float32), yte[:500].astype(np.int64)
    spec = tmp_path / "m784.cfg"
    spec.write_text(SPEC784)
    write_csv(tmp_path / "train.csv", x, y)
    write_csv(tmp_path / "test.csv", xt, yt)
    save = tmp_path / "cli.safetensors"
    _, want, _ = cli_json("train", "--model", spec, "--data", tmp_path / "train.csv", "--test-data",
                          tmp_path / "test.csv", "--save", save, *cli_args(OPTS))
    got = batchfit.train(str(spec), data=(x, y), test_data=(xt, yt), **OPTS)
    cli_w = batchfit.read_weights(save)
    assert sorted(got.weights) == sorted(cli_w) and len(cli_w) == 4
    for name, w in cli_w.items():
        assert got.weights[name].shape == w.shape
        assert np.array_equal(bits(got.weights[name]), bits(w)), name
    for k in ("test_accuracy", "test_loss", "train_loss", "steps", "samples"):
        assert got[k] == want[k], k
    assert got.test_accuracy > 0.6

    # the comparison can fail: the samples in another layout (N x 1 x 28 x 28, float64, int32 labels) train
    # the same, another seed does not
    same = batchfit.train(str(spec), data=(x.reshape(-1, 1, 28, 28).astype(np.float64), y.astype(np.int32)),
                          test_data=(xt, yt), **OPTS)
    assert all(np.array_equal(bits(same.weights[n]), bits(w)) for n, w in cli_w.items())
    other = batchfit.train(str(spec), data=(x, y), test_data=(xt, yt), **dict(OPTS, seed=6))
    assert not all(np.array_equal(bits(other.weights[n]), bits(w)) for n, w in cli_w.items())


def test_events_in_order_with_reasons(small_spec, tmp_path):
    """Memory drops at step 10 and comes back at 20: the micro-batch shrinks
    (memory shrank) and, held at 64, grows back after the hold-off (memory
    freed). on_event sees exactly the log file's lines, in order."""
    x, y = toy_data(64 * 70)
    log = tmp_path / "run.jsonl"
    seen = []
    # a memory whose budget (less the 10% margin) holds 32 but not 64: from
    # the plan, as oneDNN's workspaces differ from CPU to CPU (AVX2, AVX-512)
    peak = batchfit.plan(small_spec, batch=[32, 64], memory="1GiB", threads=2).peak
    kib = int((peak[32] + peak[64]) / 2 / 0.9) // 1024
    r = batchfit.train(small_spec, data=(x, y), batch=64, micro_batch=64, epochs=1, memory="1GiB",
                       memory_schedule="10:%dKiB,20:1GiB" % kib, threads=2, log=str(log), on_event=seen.append)
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert seen == logged and r.events == seen
    names = [e["event"] for e in seen if e["event"] != "monitor"]  # the device's samples come and go with time
    assert names.index("start") < names.index("step") and names[-2:] == ["eval", "end"]
    steps = [e["step"] for e in seen if e["event"] == "step"]
    assert steps == list(range(70))
    changes = [(e["step"], e["reason"], e["prev_m"], e["m"]) for e in seen if e["event"] == "batch_change"]
    assert len(changes) == 2, changes
    (s1, why1, a1, b1), (s2, why2, a2, b2) = changes
    assert (s1, why1, a1) == (10, "memory shrank", 64) and b1 < 64
    assert why2 == "memory freed" and s2 > 20 and (a2, b2) == (b1, 64)
    # each change comes before its step's own event, after the one before
    at = {(e["event"], e.get("step"), e.get("reason")): i for i, e in enumerate(seen)}
    assert at[("step", s1 - 1, None)] < at[("batch_change", s1, why1)] < at[("step", s1, None)]
    caps = [e["capacity"] for e in seen if e["event"] == "memory"]
    assert caps == [kib * 1024, 2**30]


def test_weights_and_result(small_spec, tmp_path):
    x, y = toy_data(640)
    save = tmp_path / "w.safetensors"
    r = batchfit.train(small_spec, data=(x, y), epochs=1, batch=64, memory="64MiB", save=str(save))
    assert r.steps == 10 and r["samples"] == 640
    assert set(r.weights) == set(batchfit.read_weights(save))
    assert r.weights["0.weight"].shape == (128, 64) and r.weights["0.weight"].dtype == np.float32
    assert str(r).startswith("test accuracy ")
    r2 = batchfit.train(small_spec, data=(x, y), epochs=1, batch=64, memory="64MiB", weights=False, keep_events=False)
    assert r2.weights == {} and r2.events == [] and r2.test_accuracy == r.test_accuracy
    # start, the steps, the no-test-split warning, eval, end, and the monitor's samples at the start and end
    assert len(r.events) == 10 + 4 + 2 and [e["event"] for e in r.events].count("monitor") == 2


def test_on_event_exception_stops_the_run(small_spec):
    x, y = toy_data(64 * 50)

    def boom(ev):
        if ev["event"] == "step" and ev["step"] == 3:
            raise RuntimeError("enough")

    with pytest.raises(RuntimeError, match="enough"):
        batchfit.train(small_spec, data=(x, y), epochs=1, batch=64, memory="64MiB", on_event=boom)


def test_progress_only_when_asked(small_spec, capfd):
    x, y = toy_data(256)
    batchfit.train(small_spec, data=(x, y), epochs=1, batch=64, memory="64MiB", weights=False)
    out, err = capfd.readouterr()
    assert out == "" and err == ""  # the library said nothing on its own
    buf = io.StringIO()
    batchfit.train(small_spec, data=(x, y), epochs=1, batch=64, memory="64MiB", weights=False, progress=buf)
    assert "batchfit: training " in buf.getvalue() and "test accuracy" in buf.getvalue()
    batchfit.train(small_spec, data=(x, y), epochs=1, batch=64, memory="64MiB", weights=False, progress=True)
    out, err = capfd.readouterr()
    assert "batchfit: training " in err and out == ""


def test_gil_released():
    """While the library works in one thread, Python runs in another: a
    thread that held the GIL through the call would let the ticks stop."""
    done, ticks = [], []

    def work():
        t0 = time.monotonic()
        # long enough to see ticks during it (about 3 s here; the cnn's
        # took 0.09 s once oneDNN's primitives were made only to run)
        batchfit.plan("resnet50", memory="4GiB", ways=True, threads=2)
        done.append(time.monotonic() - t0)

    t = threading.Thread(target=work)
    t.start()
    while t.is_alive():
        x = 0
        for i in range(20000):  # Python work, which needs the GIL
            x += i
        ticks.append(time.monotonic())
        time.sleep(0.001)
    t.join()
    assert done and done[0] > 0.5
    busy = [b - a for a, b in zip(ticks, ticks[1:])]
    assert len(busy) >= 2, "the main thread did not run during the call"
    # with the GIL held for the whole call, one gap would be the call's length
    assert max(busy) < done[0] / 2, (max(busy), done[0])


def test_crop_as_height_width(tmp_path):
    """A crop for a model that is not square is torchvision's (h, w) pair:
    passed as HxW; the model's size the other way round is refused."""
    from PIL import Image
    rng = np.random.default_rng(3)
    for c in ("a", "b"):
        (tmp_path / "img" / c).mkdir(parents=True)
        for i in range(4):
            px = rng.integers(0, 255, size=(int(rng.integers(30, 60)), int(rng.integers(45, 90)), 3), dtype=np.uint8)
            Image.fromarray(px).save(tmp_path / "img" / c / f"{i}.png")
    spec = tmp_path / "wide.cfg"
    spec.write_text("input 3x24x40\nconv 4 k=3 pad=1\nrelu\nflatten\nlinear 2\n")
    res = batchfit.train(str(spec), data=str(tmp_path / "img"), batch=4, max_steps=2, random_resized_crop=(24, 40),
                         center_crop=[24, 40], mean="0.5,0.5,0.5", std="0.25,0.25,0.25")
    assert res.steps == 2
    with pytest.raises(ValueError) as e:
        batchfit.train(str(spec), data=str(tmp_path / "img"), max_steps=1, random_resized_crop=(40, 24))
    assert "a crop of 40x24 would not be: give the model's size, 24x40" in str(e.value)


def test_start_from_saved_weights(small_spec, tmp_path):
    """weights="FILE" is train --weights: the run starts from those weights
    (at lr 1e-12 they stay put, so the new run evaluates as the first), and
    the new weights still come back."""
    x, y = toy_data(256)
    first = batchfit.train(small_spec, data=(x, y), test_data=(x, y), batch=32, epochs=2, save=str(tmp_path / "a.st"))
    again = batchfit.train(small_spec, data=(x, y), test_data=(x, y), batch=32, max_steps=1, lr=1e-12,
                           weights=str(tmp_path / "a.st"))
    drawn = batchfit.train(small_spec, data=(x, y), test_data=(x, y), batch=32, max_steps=1, lr=1e-12)
    assert again.json["test_loss"] == pytest.approx(first.json["test_loss"], rel=1e-6)
    assert drawn.json["test_loss"] != pytest.approx(first.json["test_loss"], rel=1e-3)
    assert set(again.weights) == set(first.weights)


def test_an_export_with_a_dynamic_sequence_takes_seq(tmp_path):
    """An ONNX language model exported with the sequence a dynamic axis (tests/onnx/gpt_dyn.onnx) trains at the
    length seq gives; without one it is refused, saying to give it. Before 2026-12-05 it was refused as an
    input of no fixed size."""
    import os
    model = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "onnx", "gpt_dyn.onnx")
    text = tmp_path / "lines.txt"
    text.write_text("".join(f"line {i}: {'and it was so and it was good'[:i * 7 % 41]}\n" for i in range(1, 2101)))
    r = batchfit.train(model=model, data=str(text), seq=16, epochs=1, batch=16, lr=3e-3, optimizer="adamw",
                       memory="256MiB", threads=2)
    assert r.steps > 0 and np.isfinite(r["test_loss"]), r.json
    assert r.weights["wpe.weight"].shape == (32, 16)  # the model's 32 positions, trained at 16
    with pytest.raises(ValueError, match=r"dimension 1, 'T'\) is not fixed in the export .*--seq N"):
        batchfit.train(model=model, data=str(text), epochs=1, batch=16, memory="256MiB", threads=2)


CLS_SPEC = """input tokens=32
embed 16 vocab=256 positions=32
residual {
  layernorm
  linear 48
  attention 2 causal=0
  linear 16
}
layernorm
gap
linear 2
"""


def texts_and_ids(root, per_class, seed, T=32):
    """root/a and root/b: per_class texts each (a few words of the class's own, some longer than T bytes),
    and the same texts as a classifier's arrays in the folder's order (class a's by name, then b's): ids
    [n, T] of their first T bytes, -1 after a text's last byte, and their classes."""
    import random
    r = random.Random(seed)
    words = {"a": "cat dog horse otter badger heron".split(), "b": "saw drill hammer chisel wrench plane".split()}
    ids, labels = [], []
    for c, name in enumerate("ab"):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            b = (" ".join(r.choice(words[name]) for _ in range(r.randint(1, 9))) + "\n").encode()
            (root / name / f"{i:02d}.txt").write_bytes(b)
            ids.append(list(b[:T]) + [-1] * (T - len(b[:T])))
            labels.append(c)
    return np.array(ids, dtype=np.int64), np.array(labels)


def test_token_arrays_train_as_their_folder(tmp_path):
    """A classifier's token ids as NumPy arrays (x integer [n, T], -1 after each sequence's last token, y a
    class each) train to the same weights, bit for bit, as the same texts in a folder of class folders of texts
    (19 a class: every text in the train part), and another seed does not. Before 2026-12-05 arrays held float
    samples only ("give its token data as a file")."""
    spec = tmp_path / "cls.cfg"
    spec.write_text(CLS_SPEC)
    x, y = texts_and_ids(tmp_path / "train", 19, 1)
    xt, yt = texts_and_ids(tmp_path / "test", 10, 2)
    opts = dict(epochs=2, batch=8, seed=3, lr=3e-3, optimizer="adamw", memory="256MiB", threads=2)
    want = batchfit.train(str(spec), data=str(tmp_path / "train"), test_data=str(tmp_path / "test"), **opts)
    got = batchfit.train(str(spec), data=(x, y), test_data=(xt, yt), **opts)
    assert sorted(got.weights) == sorted(want.weights)
    for name, w in want.weights.items():
        assert np.array_equal(bits(got.weights[name]), bits(w)), name
    for k in ("test_accuracy", "test_loss", "train_loss", "steps", "samples"):
        assert got[k] == want[k], k
    other = batchfit.train(str(spec), data=(x, y), test_data=(xt, yt), **dict(opts, seed=4))
    assert not all(np.array_equal(bits(other.weights[n]), bits(w)) for n, w in want.weights.items())


def test_a_tokenizers_output_trains_as_its_arrays(tmp_path):
    """A tokenizer's output with labels ({"input_ids", "attention_mask", "token_type_ids", "labels"}, as
    transformers' BatchEncoding right-padded with a pad id, the types all 0) trains to the same weights, bit
    for bit, as the token arrays padded with -1; left padding and other keys are refused, and token type 1
    where the model has no token types."""
    spec = tmp_path / "cls.cfg"
    spec.write_text(CLS_SPEC)
    x, y = texts_and_ids(tmp_path / "train", 19, 1)
    mask = (x >= 0).astype(np.int64)
    enc = {"input_ids": np.where(x >= 0, x, 7).astype(np.int64), "attention_mask": mask,
           "token_type_ids": np.zeros_like(mask), "labels": y}
    opts = dict(epochs=1, batch=8, seed=3, lr=3e-3, optimizer="adamw", memory="256MiB", threads=2)
    want = batchfit.train(str(spec), data=(x, y), test_data=(x, y), **opts)
    got = batchfit.train(str(spec), data=enc, test_data=enc, **opts)
    for name, w in want.weights.items():
        assert np.array_equal(bits(got.weights[name]), bits(w)), name
    assert got["test_accuracy"] == want["test_accuracy"]
    left = dict(enc, attention_mask=mask[:, ::-1].copy())
    with pytest.raises(batchfit.InvalidArgumentError, match="data: sequence [0-9]+ has a token at position [0-9]+ after "
                                                           "padding: batchfit pads after a sequence's tokens"):
        batchfit.train(str(spec), data=left, max_steps=1, threads=2)
    pair = dict(enc, token_type_ids=mask.copy())  # a model without token types: sentence pairs refused
    with pytest.raises(batchfit.InvalidArgumentError, match="data: \\(arrays\\) holds a token of type 1 at position 0 "
                                                           "\\(ids counted from 0; sentence pairs\\), but .*cls.cfg "
                                                           "has no token types"):
        batchfit.train(str(spec), data=pair, max_steps=1, threads=2)
    with pytest.raises(batchfit.InvalidArgumentError, match=r"test_data: a tokenizer's output takes input_ids \(and "
                                                           r".*labels\); got \['input_ids', 'special_tokens_mask'\]"):
        batchfit.train(str(spec), data=enc, test_data={"input_ids": x, "special_tokens_mask": mask}, max_steps=1,
                       threads=2)
    # without labels: a masked LM's sequences, refused for anything else
    with pytest.raises(batchfit.InvalidArgumentError, match=r"test_data: \(test arrays\) holds token sequences "
                                                           r"without labels, which train a masked LM: give "
                                                           r"mask_tokens and mask_id"):
        batchfit.train(str(spec), data=enc, test_data={"input_ids": x, "attention_mask": mask}, max_steps=1,
                       threads=2)


LM_SPEC = ("input tokens=8\nembed 16 vocab=24 positions=8\nresidual {\n linear 48\n attention 2\n linear 16\n}\n"
           "layernorm\nlinear 24\n")


def token_file(path, ids):
    """ids as llm.c's token file (uint16, the header's vocabulary 0: the largest id + 1)."""
    head = np.zeros(256, dtype="<i4")
    head[:4] = (20240520, 1, ids.size, 0)
    path.write_bytes(head.tobytes() + ids.astype("<u2").tobytes())


def test_a_token_stream_trains_as_its_token_file(tmp_path):
    """A language model's token ids as one 1-d integer array (a tokenizer's ids of a corpus) train as the same
    ids in a token file: alone, split into a train and a test part as the file is; beside test ids, each read
    whole. The same weights, bit for bit, and the same test loss. Before 2026-12-06 a language model's ids had
    to be written to a file first. An id below 0 is refused, naming its position."""
    spec = tmp_path / "lm.cfg"
    spec.write_text(LM_SPEC)
    i = np.arange(20 * 4096 + 100)
    ids = ((i * 7 + i // 13) % 24).astype(np.int64)
    token_file(tmp_path / "ids.bin", ids)
    token_file(tmp_path / "test.bin", ids[:3000])
    opts = dict(epochs=1, max_steps=30, batch=16, seed=5, lr=3e-3, optimizer="adamw", memory="256MiB", threads=2)
    for test, ftest in ((None, None), (ids[:3000], "test.bin")):
        want = batchfit.train(str(spec), data=str(tmp_path / "ids.bin"),
                              test_data=str(tmp_path / ftest) if ftest else None, **opts)
        got = batchfit.train(str(spec), data=ids, test_data=test, **opts)
        for name, w in want.weights.items():
            assert np.array_equal(bits(got.weights[name]), bits(w)), (ftest, name)
        assert got["test_loss"] == want["test_loss"] and got["samples"] == want["samples"], ftest
    # evaluate: the stream as data its test part, as test_data whole, each as its file
    w = tmp_path / "w.safetensors"
    batchfit.train(str(spec), data=ids, save=str(w), **opts)
    for kw, fkw in (({"data": ids}, {"data": str(tmp_path / "ids.bin")}),
                    ({"test_data": ids[:3000]}, {"test_data": str(tmp_path / "test.bin")})):
        got, want = batchfit.evaluate(str(spec), str(w), **kw), batchfit.evaluate(str(spec), str(w), **fkw)
        assert got["loss"] == want["loss"] and got["samples"] == want["samples"] > 0, sorted(kw)
    bad = ids.copy()
    bad[4097] = -3
    with pytest.raises(batchfit.InvalidArgumentError, match="data: token id -3 at position 4097: ids are 0 to"):
        batchfit.train(str(spec), data=bad, max_steps=1, threads=2)
    with pytest.raises(batchfit.InvalidArgumentError, match="a token stream is a language model's data, but mlp takes "
                                                           "samples of floats"):
        batchfit.train("mlp", data=ids, max_steps=1, threads=2)


def test_token_arrays_refused(tmp_path):
    """What token arrays may not hold, named: -1 before a token, a sequence of padding alone, ids below -1, a
    language model given one class a sequence, a float model given ids."""
    spec = tmp_path / "cls.cfg"
    spec.write_text(CLS_SPEC)
    x, y = texts_and_ids(tmp_path / "train", 5, 1)
    bad = x.copy()
    bad[3, 2] = -1
    with pytest.raises(batchfit.InvalidArgumentError, match="sequence 3 holds id -1 at position 2: ids are from 0, "
                                                           "and -1 pads a sequence only after its last token"):
        batchfit.train(str(spec), data=(bad, y), max_steps=1, threads=2)
    bad = x.copy()
    bad[4, :] = -1
    with pytest.raises(batchfit.InvalidArgumentError, match="sequence 4 is padding alone"):
        batchfit.train(str(spec), data=(bad, y), max_steps=1, threads=2)
    bad[4, 0] = -2
    with pytest.raises(batchfit.InvalidArgumentError, match="ids from 0 and -1 after a sequence's last token"):
        batchfit.train(str(spec), data=(bad, y), max_steps=1, threads=2)
    with pytest.raises(batchfit.InvalidArgumentError, match="gpt-nano scores every token \\(a language model\\), "
                                                           "but \\(arrays\\) holds one class a sequence"):
        batchfit.train("gpt-nano", data=(np.zeros((4, 128), dtype=np.int64), np.zeros(4, dtype=int)), max_steps=1, threads=2)
    with pytest.raises(batchfit.InvalidArgumentError, match="arrays hold token ids, but .* takes samples of floats"):
        batchfit.train("mlp", data=(x, y), max_steps=1, threads=2)
    with pytest.raises(batchfit.InvalidArgumentError, match="arrays hold float samples, but .*cls.cfg takes token ids: "
                                                           "give a classifier's ids as int32 arrays"):
        batchfit.train(str(spec), data=(x.astype(np.float32), y), max_steps=1, threads=2)
