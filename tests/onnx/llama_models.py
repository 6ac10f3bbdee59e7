"""Writes the LLaMA-style language models tests/cli/onnx.sh and test_cuda_ops read (run from tests/onnx),
exported by Debian's PyTorch as token_models.py exports its GPTs (opset 17, training mode, a dynamic batch,
int64 token ids [batch, 32]):

- llama_text.onnx: export.py's Llama (RMSNorm, SwiGLU, no position embedding, an untied head; the first
  block's attention nanoGPT's, the second's LLaMA's own with wq, wk, wv, rotary embeddings, one key and
  value head for its two query heads (multi-query attention) and the mask made in forward) with a
  byte vocabulary (256 ids), 32 tokens of context, width 16, 2 heads, 2 blocks, a SwiGLU of 32: what
  cli_onnx trains on a text;
- ../../fuzz/corpus/onnx/llama_ok.onnx: the same file, the fuzzer's seed, which test_cuda_ops trains on the
  GPU against the CPU.

- llama_dyn.onnx: llama_text.onnx exported with the sequence a dynamic axis too: at --seq 32 it trains to
  llama_text.onnx's weights bit for bit; past its mask buffer's 32 positions it is refused saying so;
- llama_hfrope.onnx: llama_text.onnx with the rotary tables made in forward as Hugging Face's
  LlamaRotaryEmbedding makes them since transformers 4.38 (a MatMul of inv_freq by the positions, Cos and
  Sin, on the host): the same weights, which cli_onnx trains to llama_text.onnx's bit for bit;
- gqa_interleave.onnx: llama_text.onnx with its key and value heads repeated by torch.repeat_interleave,
  which torch 1.13 exports as a Loop over ONNX sequences (refused, saying to write repeat_kv's expand and
  reshape, which give the same heads in the same order);
- rope_fused.onnx: nanoGPT's GPT (one projection c_attn to 3C) with rotary embeddings on its q and k
  (refused: batchfit reads them on separate projections);
- rope_badsin.onnx: llama_text.onnx with a sin table of twice the angles (refused at its Mul, naming the
  first position that differs);
- gemma_text.onnx: export.py's HFGemma (transformers' GemmaForCausalLM in small: (1 + w) RMSNorms, GeGLU,
  embeddings scaled by sqrt(C) and tied to the head, one key and value head) with a byte vocabulary, 32
  tokens, width 16, 2 heads, 2 blocks, a GeGLU of 32: what cli_onnx trains on a text, in f32 and bf16;
  ../../fuzz/corpus/onnx/gemma_ok.onnx the same file, a fuzz seed test_cuda_ops trains on the GPU.

export.py's llama_mini is the same structure checked against PyTorch (onnx_torch)."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export import GPT, CausalSelfAttention, HFGemma, Llama, Rotary, apply_rotary_pos_emb  # noqa: E402
from token_models import export  # noqa: E402


class FusedRope(CausalSelfAttention):
    """nanoGPT's attention (q, k, v split from one projection) with rotary embeddings on q and k."""

    def __init__(self, C, H, T):
        super().__init__(C, H, T, True, bias=False)
        self.rotary = Rotary(C // H, T)

    def forward(self, x):
        import math
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        cos, sin = self.rotary(T)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = torch.nn.functional.softmax(att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf")), dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))


def interleave():
    import export as E
    kv = E.repeat_kv
    E.repeat_kv = lambda x, n: x if n == 1 else torch.repeat_interleave(x, n, dim=1)
    torch.manual_seed(0)
    export(Llama(V=256, T=32, C=16, H=2, L=2, hidden=32, kv_heads=1), "gqa_interleave.onnx")
    E.repeat_kv = kv


def main():
    for path in ("llama_text.onnx", "../../fuzz/corpus/onnx/llama_ok.onnx"):
        torch.manual_seed(0)
        export(Llama(V=256, T=32, C=16, H=2, L=2, hidden=32, kv_heads=1), path)
    torch.manual_seed(0)
    export(Llama(V=256, T=32, C=16, H=2, L=2, hidden=32, kv_heads=1), "llama_dyn.onnx", dynamic_t=True)
    torch.manual_seed(0)
    m = Llama(V=256, T=32, C=16, H=2, L=2, hidden=32, rope="hf", kv_heads=1)
    export(m, "llama_hfrope.onnx")
    interleave()
    torch.manual_seed(0)
    m = GPT(V=256, T=32, C=16, H=2, L=1, bias=False)
    m.h[0].attn = FusedRope(16, 2, 32)
    export(m, "rope_fused.onnx")
    torch.manual_seed(0)
    m = Llama(V=256, T=32, C=16, H=2, L=2, hidden=32, kv_heads=1)
    r = m.attn[1].rotary
    r.sin_cached.copy_(torch.sin(2 * torch.atan2(r.sin_cached, r.cos_cached)))
    export(m, "rope_badsin.onnx")
    torch.manual_seed(0)
    for path in ("gemma_text.onnx", "../../fuzz/corpus/onnx/gemma_ok.onnx"):
        torch.manual_seed(0)
        export(HFGemma(V=256, T=32, C=16, H=2, L=2, hidden=32, kv_heads=1), path)


if __name__ == "__main__":
    main()
