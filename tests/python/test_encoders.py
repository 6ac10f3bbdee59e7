"""batchfit.torch on encoders as transformers' examples train them: BERT's masked-LM objective on a corpus
(mask_tokens), a token classifier on a label a token (named entities). Each model is written after
transformers' code in tests/onnx/export.py, trained by batchfit and measured by PyTorch. Skipped without
torch or the ONNX import (test_torch.py's onnx_import)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="batchfit.torch needs PyTorch (python3-torch)")
import batchfit.torch as bt  # noqa: E402
from test_torch import language_model, onnx_import  # noqa: E402,F401  (a fixture, used by name)


def test_a_masked_lm_learns_what_only_the_right_side_tells(onnx_import, tmp_path):
    """BERT's objective (mask_tokens=0.15, mask_id: transformers' DataCollatorForLanguageModeling's draw)
    on a corpus of pairs (b, (b + 3) % 10), one stream of ids: a pair's first token is told only by the token
    after it. BertForMaskedLM in small (export.py's HFBert), trained by batchfit.torch, then measured by
    PyTorch: each first token masked alone, predicted from the model's scores, from chance (10%) to above
    95%, given the corpus as one stream or as a tokenizer's padded rows without labels (each its own sequence).
    The same model trained on the next token (what batchfit did before 2026-12-06 and warns about now) learns
    to copy the token after, which is wrong here: about chance."""
    V, T, MASK = 16, 16, 10
    rng = np.random.default_rng(1)

    def pairs(n):
        b = rng.integers(0, 10, n // 2)
        return np.stack([b, (b + 3) % 10], 1).reshape(-1)

    train, held, test = pairs(100000), pairs(8000), pairs(200 * T).reshape(200, T)

    def accuracy(m):
        m.eval()
        right = 0
        with torch.no_grad():
            for j in range(0, T, 2):
                x = torch.tensor(test, dtype=torch.long)
                x[:, j] = MASK
                right += (m(x)[:, j].argmax(-1).numpy() == test[:, j]).sum()
        return right / (len(test) * T // 2)

    # a tokenizer's output without labels: each row a sequence, 6 to 16 tokens (pairs kept whole), padded
    rows = train[:len(train) // T * T].reshape(-1, T).copy()
    lens = 2 * rng.integers(3, T // 2 + 1, len(rows))
    mask = (np.arange(T)[None, :] < lens[:, None]).astype(np.int64)
    enc = {"input_ids": np.where(mask == 1, rows, 0), "attention_mask": mask}
    got = {}
    for how, data in (("stream", train), ("rows", enc), ("next token", train)):
        m = language_model("HFBert", V=V, T=T, C=32, H=4, L=2, hidden=64, p=0.1, mask_input=False)
        before = accuracy(m)
        opts = {"mask_tokens": 0.15, "mask_id": MASK} if how != "next token" else {}
        bt.train(m, data=data, test_data=held, example_input=torch.zeros(1, T, dtype=torch.long), epochs=4,
                 batch=32, lr=3e-3, optimizer="adamw", memory="512MiB", threads=2, seed=1, **opts)
        got[how] = (before, accuracy(m))
    print(f"masked LM: accuracy before {got['stream'][0]:.3f}, after {got['stream'][1]:.3f} (a stream), "
          f"{got['rows'][1]:.3f} (a tokenizer's rows); trained on the next token: {got['next token'][1]:.3f}")
    assert got["stream"][0] < 0.2 and got["stream"][1] > 0.95 and got["rows"][1] > 0.95, got
    assert got["next token"][1] < 0.3, got


def tagged(n, T, seed):
    """A tokenizer's output for token classification (named entities, as transformers' examples align word
    labels to tokens): random letters, 6 to T tokens a sequence, right-padded; each token's tag is the next
    token's id mod 3 (only its right side tells), -100 (not scored) at every fifth token (a word's later
    pieces), the last and the padding."""
    r = np.random.default_rng(seed)
    ids, mask = np.zeros((n, T), dtype=np.int64), np.zeros((n, T), dtype=np.int64)
    tags = np.full((n, T), -100, dtype=np.int64)
    for k in range(n):
        m = int(r.integers(6, T + 1))
        ids[k, :m], mask[k, :m] = r.integers(97, 123, m), 1
        tags[k, :m - 1] = ids[k, 1:m] % 3
        tags[k, 0:m:5] = -100
    return {"input_ids": ids, "attention_mask": mask, "labels": tags}


def test_a_token_classifier_trains_on_tags(onnx_import, tmp_path):
    """transformers' BertForTokenClassification (export.py's HFBertTok) given a tokenizer's output with a label a
    token (-100 where none counts, as transformers' examples align them): batchfit trains it on the scored
    tokens, each sequence's padding masked. PyTorch's accuracy over the scored tokens of 300 other sequences,
    given their mask, goes from chance (a third) to above 90%, and batchfit's own test accuracy on them is
    PyTorch's (the same tokens counted, the same predictions). Before 2026-12-06 a label a token was refused."""
    T = 24
    m = language_model("HFBertTok", V=128, T=T, C=32, H=4, L=2, hidden=64, p=0.0, classes=3)
    test, train = tagged(300, T, 2), tagged(2000, T, 1)

    def accuracy():
        m.eval()
        with torch.no_grad():
            out = m(torch.tensor(test["input_ids"]), torch.tensor(test["attention_mask"]))
        scored = test["labels"] >= 0
        return (out.argmax(-1).numpy() == test["labels"])[scored].mean()

    before = accuracy()
    bt.train(m, data=train, test_data=test, epochs=6, batch=32, lr=3e-3, optimizer="adamw", memory="512MiB",
             threads=2, seed=1)
    after, theirs = accuracy(), m.batchfit_result.test_accuracy
    print(f"token accuracy before {before:.3f}, after {after:.3f}; batchfit's {theirs:.4f}")
    assert before < 0.45 and after > 0.9, (before, after)
    assert abs(theirs - after) < 2e-3, (theirs, after)
