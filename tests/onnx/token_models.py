"""Writes the language models tests/cli/onnx.sh reads (run from tests/onnx), exported by Debian's PyTorch
(opset 17, training mode, a dynamic batch, int64 token ids [batch, T]):

- gpt_text.onnx: nanoGPT's GPT (export.py's GPT) with a byte vocabulary (256 ids), 32 tokens of context,
  width 16, 2 heads, 1 block: what batchfit trains on a text (cli_onnx); with 2 blocks (the second's
  attention in timm's unbind form, its GELU minGPT's NewGELU) it is the fuzzer's seed
  fuzz/corpus/onnx/gpt_ok.onnx, which test_cuda_ops trains on the GPU against the CPU;
- gpt_trilu.onnx: the same with its mask made in forward, torch.tril(torch.ones(T, T)) (a Trilu on the
  host; cli_onnx trains it to gpt_text.onnx's weights, bit for bit);
- gpt_dyn.onnx: gpt_text.onnx exported with the sequence a dynamic axis too (dynamic_axes {1: "T"}): it
  loads at the length --seq gives (cli_onnx trains it at 32 to gpt_text.onnx's weights, bit for bit), and
  without one, or past its 32 positions, it is refused saying so (also the fuzzer's seed
  fuzz/corpus/onnx/gpt_dyn.onnx, which fuzz_onnx loads at 8 tokens);
- gpt_chars.onnx: the same with a vocabulary of 64 ids (a character model): it trains on a text whose
  bytes are all below 64 and refuses one with a byte beyond, naming it;
- gpt_fill0.onnx: the same with masked_fill(mask, 0.0) (refused: the masked weights would not be 0);
- gpt_posmul.onnx: the position rows scaled before the Add (refused at the Mul: batchfit adds them to
  the token embeddings only);
- tut_text.onnx: the PyTorch Transformer tutorial's language model (export.py's TutorialLM, its dropout 0.2: embeddings times
  sqrt(C), the sinusoidal PositionalEncoding buffer and its dropout, an nn.TransformerEncoderLayer under a
  causal mask) with a byte vocabulary, 32 tokens, width 16, 2 heads, 1 layer: it trains on a text, and its
  sinusoids come back as they were (a buffer);
- tut_seqfirst.onnx: the tutorial's model as published (export.py's TutorialSeqFirst: batch_first=False, ids
  [T, batch], pe [max_len, 1, C], dropout 0.2), the batch a dynamic axis in dimension 1: it trains on a text;
- hfgpt2_text.onnx: transformers' GPT-2 as its code writes it (export.py's HFGPT2: Conv1D layers, the
  attention's torch.where with float32's lowest number, dropout 0.1, lm_head tied) with a byte vocabulary,
  32 tokens, width 16, 2 heads, 1 block: it trains on a text, its Conv1D weights saved [in, out] under
  GPT2LMHeadModel's names;
- rows_relu.onnx: gpt_text's model with a ReLU on its embeddings flattened into rows (refused: rows are
  read only into a Conv1D's addmm);
- mha_band.onnx: an nn.TransformerEncoderLayer whose attn_mask lets a token see one token after it too
  (refused at the mask's Add: only the causal mask is read).

export.py's gpt_mini and tgpt_mini are the forms batchfit reads, checked against PyTorch (onnx_torch)."""
import os
import sys

import torch
import torch.nn as nn
from torch.onnx import TrainingMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export import GPT, HFGPT2, TutorialLM, TutorialSeqFirst  # noqa: E402


class Fill0(GPT):
    def __init__(self):
        super().__init__(V=256, T=32, C=16, H=2, L=1)
        for blk in self.h:
            blk.attn.fill = 0.0


class TriluInForward(GPT):
    def __init__(self):
        super().__init__(V=256, T=32, C=16, H=2, L=1)
        for blk in self.h:
            blk.attn.tril_in_forward = True


class PosMul(GPT):
    def forward(self, idx):
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.wte(idx) + 2 * self.wpe(pos)
        for blk in self.h:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


class RowsRelu(GPT):
    """gpt_text's model with a ReLU on the embeddings flattened into rows, x.view(-1, C), viewed back: refused
    (rows are read only into a Conv1D's addmm)."""

    def forward(self, idx):
        B, T = idx.shape
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        x = torch.relu(x.view(-1, x.size(-1))).view(B, T, -1)
        for blk in self.h:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


class Band(nn.Module):
    def __init__(self, V=256, T=32, C=16):
        super().__init__()
        self.wte, self.pos = nn.Embedding(V, C), nn.Parameter(torch.zeros(1, T, C))
        self.enc = nn.TransformerEncoderLayer(C, 2, 2 * C, dropout=0.0, batch_first=True)
        self.head = nn.Linear(C, V)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(T + 1)[1:, :T])

    def forward(self, idx):
        return self.head(self.enc(self.wte(idx) + self.pos, src_mask=self.mask))


def export(model, path, dynamic_t=False):
    """dynamic_t: the sequence a dynamic axis too ('T'), as exports for variable lengths write it; a model whose
    seq_first is set takes [T, batch] ids, the batch dimension 1."""
    seq_first = getattr(model, "seq_first", False)
    axes = {0: "batch", 1: "T"} if dynamic_t else {1: "batch"} if seq_first else {0: "batch"}
    x = torch.zeros(32, 2, dtype=torch.long) if seq_first else torch.zeros(2, 32, dtype=torch.long)
    torch.onnx.export(model.train(), x, path, opset_version=17,
                      training=TrainingMode.TRAINING, do_constant_folding=False, input_names=["input"],
                      output_names=["logits"], dynamic_axes={"input": axes, "logits": axes})


def main():
    torch.manual_seed(0)
    export(GPT(V=256, T=32, C=16, H=2, L=1), "gpt_text.onnx")
    torch.manual_seed(0)  # gpt_text.onnx's weights
    export(TriluInForward(), "gpt_trilu.onnx")
    for path in ("gpt_dyn.onnx", "../../fuzz/corpus/onnx/gpt_dyn.onnx"):
        torch.manual_seed(0)
        export(GPT(V=256, T=32, C=16, H=2, L=1), path, dynamic_t=True)
    export(Fill0(), "gpt_fill0.onnx")
    export(PosMul(V=256, T=32, C=16, H=2, L=1), "gpt_posmul.onnx")
    export(Band(), "mha_band.onnx")
    torch.manual_seed(0)
    export(GPT(V=256, T=32, C=16, H=2, L=2), "../../fuzz/corpus/onnx/gpt_ok.onnx")
    export(GPT(V=64, T=32, C=16, H=2, L=1), "gpt_chars.onnx")
    torch.manual_seed(0)
    export(TutorialLM(V=256, T=32, C=16, H=2, L=1, dropout=0.2), "tut_text.onnx")
    torch.manual_seed(0)
    export(TutorialSeqFirst(V=256, T=32, C=16, H=2, L=1), "tut_seqfirst.onnx")
    torch.manual_seed(0)
    export(HFGPT2(V=256, T=32, C=16, H=2, L=1, p=0.1), "hfgpt2_text.onnx")
    torch.manual_seed(0)
    export(RowsRelu(V=256, T=32, C=16, H=2, L=1), "rows_relu.onnx")
    return 0


if __name__ == "__main__":
    import warnings
    warnings.filterwarnings("ignore")
    sys.exit(main())
