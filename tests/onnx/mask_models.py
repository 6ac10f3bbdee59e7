"""Writes the models with an attention_mask input (a second graph input, [batch, T]: 1 for a token, 0 for
padding, as transformers' exports have it) that tests/cli/onnx.sh reads (run from tests/onnx), exported by
Debian's PyTorch (opset 17, training mode, a dynamic batch, int64 ids and mask):

- hfgpt2_mask.onnx: token_models.py's hfgpt2_text.onnx (transformers' GPT-2 as export.py's HFGPT2 writes it,
  the same weights) with GPT2Model's attention_mask, (1 - mask) * lowest added to the scores of every block:
  cli_onnx trains it on lines padded to --seq-max to hfgpt2_text.onnx's weights, bit for bit;
- hfgpt2_mask_dyn.onnx: the same as transformers.onnx's causal-lm export names and shapes it: inputs
  input_ids and attention_mask, batch and sequence dynamic axes of both (cli_onnx: to the same weights);
- distilbert_text.onnx: transformers' DistilBERT (export.py's DistilBert: bidirectional, the padding's keys
  masked_fill'ed with (mask == 0).view(B, 1, 1, T).expand_as(scores)), a byte vocabulary, 32 tokens, width
  16, 2 heads, 1 block; distilbert_expand.onnx the same weights with the mask made additive first by
  BART's _expand_mask; distilbert_nomask.onnx the same weights without the input: the three train to the
  same weights, bit for bit (batchfit masks the padding's keys of a bidirectional attention itself);
- hfbert_text.onnx: transformers' BERT for masked LM (export.py's HFBert: token types from a buffer of zeros
  expanded over the batch, the extended attention mask, post-norm layers, the MLM head tied), a byte
  vocabulary, 32 tokens, width 16, 2 heads, 1 layer, with the attention_mask input; hfbert_nomask.onnx the
  same weights exported from the ids alone (BertModel then makes an all-ones mask in forward): they train
  to the same weights, bit for bit;
- llama_mask.onnx: export.py's Llama (its second block LLaMA's attention with rotary embeddings) with its
  mask made as transformers 4.36 makes LLaMA's (HFLlamaMask: _make_causal_mask expanded over the batch,
  masked_fill'ed at padding by _expand_mask's), a byte vocabulary, 32 tokens, width 16, 2 heads, 2 blocks;
  llama_nomask.onnx the same weights exported from the ids alone (the causal mask only): they train to the
  same weights, bit for bit;
- llama_pos.onnx: llama_mask.onnx's weights with its rotary tables made as transformers 4.38 makes them, from
  a position_ids input (input, attention_mask, position_ids, as optimum exports LLaMA): to llama_mask.onnx's
  weights, bit for bit;
- tgpt_kpm.onnx: export.py's TGpt (nn.TransformerEncoderLayer blocks under a float and a boolean causal
  mask) given src_key_padding_mask=(attention_mask == 0), a byte vocabulary, 32 tokens, width 16, 2 heads;
  tgpt_nokpm.onnx the same weights without the input: they train to the same weights, bit for bit; so does
  tgpt_kpm_fixed.onnx, exported without dynamic axes at a batch of 4 (the mask's zeros a constant there);
- distilbert_cls.onnx: transformers' DistilBertForSequenceClassification (export.py's DistilBertCls: the first
  token's state through pre_classifier, ReLU, dropout and classifier, 2 classes), a byte vocabulary, 64
  tokens, width 32, 2 heads, 1 block, with the attention_mask input; distilbert_cls_nomask.onnx the same
  weights from the ids alone: on a folder of class folders of texts they train to the same weights, bit for
  bit; hfbert_cls.onnx: BertForSequenceClassification (export.py's HFBertCls: the pooler's tanh on the first
  token), the same size, with the attention_mask input;
- hfbert_cls_inputs.onnx: hfbert_cls.onnx's weights with BertForSequenceClassification's four inputs as
  optimum exports them (input_ids, attention_mask, token_type_ids, position_ids; batch and sequence dynamic
  axes): it trains to hfbert_cls.onnx's weights, bit for bit (batchfit reads the types as one segment, 0 at
  every token, and the positions as 0 .. T-1);
- hfgpt2_pos.onnx: hfgpt2_text.onnx's weights with input_ids, attention_mask and position_ids (optimum's
  GPT-2 export without the cache): to hfgpt2_text.onnx's weights, bit for bit;
- hfgpt2_types.onnx: GPT-2 given token_type_ids, which it looks up in wte itself (refused: a copy of row 0
  would train apart from the word embeddings);
- segment_ids.onnx: hfbert_cls_inputs.onnx with token_type_ids called segment_ids, a name batchfit does not
  know (refused: a second mask, it says what it reads by which names);
- types_1.onnx: hfbert_cls with token_type_ids [batch, 1], one a sequence (refused at the input);
- roberta_cls.onnx: transformers' RobertaForSequenceClassification (export.py's HFRobertaCls: the positions
  made from the ids after padding_idx 1, create_position_ids_from_input_ids), a byte vocabulary, 64 tokens,
  width 32, 2 heads, 1 layer, 2 classes, with the attention_mask input; roberta_reverse.onnx the same with
  its CumSum reversed (refused);
- meanpool_st.onnx: a sentence classifier on DistilBERT's body (export.py's MeanPoolCls) pooling by
  sentence-transformers' mean_pooling (attention_mask.unsqueeze(-1).expand(h.size()).float(), torch.sum(h * m,
  1) / torch.clamp(m.sum(1), min=1e-9)); meanpool_simple.onnx the same weights pooling by (h * m).sum(1) /
  m.sum(1), m = attention_mask[..., None]; meanpool_nomask.onnx the same weights exported from the ids alone
  (h.mean(1)): the three train to the same weights, bit for bit (each the mean of the real tokens);
- gpt2_cls.onnx: transformers' GPT2ForSequenceClassification (export.py's HFGPT2Cls: score on every token, the
  scores of each sequence's last token before its first pad token), a byte vocabulary (the pad token 255),
  64 tokens, width 16, 2 heads, 1 block, 2 classes, with the attention_mask input: read as `select last`;
- gpt2_cls_445.onnx: the same weights picking the token as transformers 4.45 on does (the last token that is
  not the pad token): trains to gpt2_cls.onnx's weights, bit for bit;
- gpt2_cls_nopad.onnx: the same weights picking the token as transformers does without a pad token
  (logits[torch.arange(batch), -1]: the last token of a text given alone): trains to gpt2_cls.onnx's weights,
  bit for bit (batchfit's texts end in padding; their last token is each text's last);
- gpt2_cls_batchaxis.onnx: the same weights indexing the tokens by torch.arange(batch) (refused: a Range over
  the batch is read only as the batch's own order);
- gpt2_cls_first.onnx: the same picking the first pad token's scores (no - 1; refused);
- gpt2_cls_lastpad.onnx: gpt2_cls.onnx with its ArgMax taking the last pad token (select_last_index=1;
  refused);
- llama_442.onnx: llama_nomask.onnx's weights with the causal mask made as transformers 4.42 to 4.44 make
  LLaMA's without an attention_mask (export.py's HFLlamaMask442: [T, T + 1] expanded over the batch by
  expand(B, 1, -1, -1), cut to the keys): trains to llama_nomask.onnx's weights, bit for bit;
- llama_442_mask.onnx: the same with its attention_mask, the padding written into a clone of the causal mask
  by a slice assignment (a ScatterND; refused, saying to export from the ids alone);
- mask_inverted.onnx: the same with src_key_padding_mask=(attention_mask == 1), the tokens hidden instead of
  the padding (refused);
- mask_pool.onnx: hfgpt2_text's model that also multiplies its embeddings by mask.unsqueeze(-1) (refused:
  the mask is read only on the attention's scores);
- mask_query.onnx: the mask on the queries, mask[:, None, :, None] (refused);
- mask_fill0.onnx: DistilBERT's masked_fill with 0.0 (refused: the masked weights would not be 0);
- mask_3d.onnx: a second input [batch, T, 1] (refused at the input)."""
import os
import sys

import torch
from torch.onnx import TrainingMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export import (HFGPT2, HFGPT2Cls, DistilBert, DistilBertCls, HFBert, HFBertCls, HFLlamaMask,  # noqa: E402
                    HFLlamaMask442, HFRobertaCls, MeanPoolCls, TGpt, implied)


class MaskPool(HFGPT2):
    def forward(self, input_ids, attention_mask):
        tr = self.transformer
        pos = torch.arange(0, input_ids.size(1), dtype=torch.long).unsqueeze(0)
        h = (tr.wte(input_ids) + tr.wpe(pos)) * attention_mask.unsqueeze(-1).to(torch.float32)
        for blk in tr.h:
            h = blk(h)
        return self.lm_head(tr.ln_f(h))


class MaskQuery(HFGPT2):
    def forward(self, input_ids, attention_mask):
        tr = self.transformer
        pos = torch.arange(0, input_ids.size(1), dtype=torch.long).unsqueeze(0)
        m = (1.0 - attention_mask[:, None, :, None].to(torch.float32)) * torch.finfo(torch.float32).min
        h = tr.wte(input_ids) + tr.wpe(pos)
        for blk in tr.h:
            h = blk(h, m)
        return self.lm_head(tr.ln_f(h))


class MaskInverted(TGpt):
    def forward(self, idx, attention_mask):
        return super().forward(idx, 1 - attention_mask)


class Mask3d(HFGPT2):
    def forward(self, input_ids, attention_mask):
        return super().forward(input_ids, attention_mask[:, :, 0])


def export(model, path, mask=True, mask_shape=None, dynamic_t=False, fixed=0, T=32, more=()):
    """more: the inputs after the mask forward also takes, by name (export.py's implied: token_type_ids zeros,
    position_ids 0 .. T-1), or (name, tensor) pairs."""
    x = torch.zeros(fixed or 2, T, dtype=torch.long)
    ax = {0: "batch", 1: "sequence"} if dynamic_t else {0: "batch"}
    ids = "input_ids" if dynamic_t else "input"
    names, args, axes = [ids], x, {ids: ax, "logits": ax}
    if mask:
        m = torch.ones(mask_shape or tuple(x.shape), dtype=torch.long)
        names, args, axes["attention_mask"] = names + ["attention_mask"], (x, m), ax
    if more:
        kw = dict(n if isinstance(n, tuple) else (n, implied(n, x)) for n in more)
        args, names = args + (kw,), names + list(kw)
        axes.update({n: ax for n in kw})
    if fixed:
        axes = None
    torch.onnx.export(model.train(), args, path, opset_version=17, training=TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=names, output_names=["logits"], dynamic_axes=axes)


class GPT2ClsFirst(HFGPT2Cls):
    """GPT2ForSequenceClassification's pick without its - 1: the scores of each sequence's first pad token."""

    def forward(self, input_ids, attention_mask=None):
        logits = self.score(self.body(input_ids, attention_mask))
        first = torch.eq(input_ids, self.pad_id).int().argmax(-1) % input_ids.shape[-1]
        return logits[torch.arange(input_ids.shape[0]), first]


def with_attr(src, path, op, name, value):
    """src with every op node's attribute name set to value (gpt2_cls_lastpad.onnx: the ArgMax's
    select_last_index=1, the last pad token's place)."""
    import onnx
    m = onnx.load(src)
    for nd in m.graph.node:
        if nd.op_type == op:
            kept = [a for a in nd.attribute if a.name != name]
            del nd.attribute[:]
            nd.attribute.extend(kept + [onnx.helper.make_attribute(name, value)])
    onnx.save(m, path)


def renamed(src, path, old, new):
    """src with its input old called new (a name batchfit does not know)."""
    import onnx
    m = onnx.load(src)
    for v in list(m.graph.input):
        if v.name == old:
            v.name = new
    for nd in m.graph.node:
        nd.input[:] = [new if i == old else i for i in nd.input]
    onnx.save(m, path)


def main():
    torch.manual_seed(0)  # token_models.py's hfgpt2_text.onnx
    export(HFGPT2(V=256, T=32, C=16, H=2, L=1, p=0.1), "hfgpt2_mask.onnx")
    torch.manual_seed(0)
    export(HFGPT2(V=256, T=32, C=16, H=2, L=1, p=0.1), "hfgpt2_mask_dyn.onnx", dynamic_t=True)
    for path, form in (("distilbert_text.onnx", {}), ("distilbert_expand.onnx", {"expand_mask": True}),
                       ("distilbert_nomask.onnx", None)):
        torch.manual_seed(1)
        export(DistilBert(V=256, T=32, C=16, H=2, L=1, hidden=32, p=0.1, **(form or {})), path, form is not None)
    for path, mask in (("hfbert_text.onnx", True), ("hfbert_nomask.onnx", False)):
        torch.manual_seed(3)
        export(HFBert(V=256, T=32, C=16, H=2, L=1, hidden=32, p=0.1, mask_input=mask), path, mask)
    for path, mask in (("llama_mask.onnx", True), ("llama_nomask.onnx", False)):
        torch.manual_seed(4)
        export(HFLlamaMask(V=256, T=32, C=16, H=2, L=2, hidden=32, mask_input=mask), path, mask)
    torch.manual_seed(4)
    export(HFLlamaMask(V=256, T=32, C=16, H=2, L=2, hidden=32, rope="hf"), "llama_pos.onnx", more=("position_ids",))
    for path, mask in (("llama_442.onnx", False), ("llama_442_mask.onnx", True)):
        torch.manual_seed(4)
        export(HFLlamaMask442(V=256, T=32, C=16, H=2, L=2, hidden=32, mask_input=mask), path, mask)
    for path, mask, fixed in (("tgpt_kpm.onnx", True, 0), ("tgpt_nokpm.onnx", False, 0), ("tgpt_kpm_fixed.onnx", True, 4)):
        torch.manual_seed(2)
        export(TGpt(V=256, T=32, C=16, H=2, mask_input=mask), path, mask, fixed=fixed)
    for path, mask in (("distilbert_cls.onnx", True), ("distilbert_cls_nomask.onnx", False)):
        torch.manual_seed(5)
        export(DistilBertCls(V=256, T=64, C=32, H=2, L=1, hidden=64, p=0.1, classes=2), path, mask, T=64)
    torch.manual_seed(6)
    export(HFBertCls(V=256, T=64, C=32, H=2, L=1, hidden=64, p=0.1, classes=2), "hfbert_cls.onnx", T=64)
    torch.manual_seed(6)
    export(HFBertCls(V=256, T=64, C=32, H=2, L=1, hidden=64, p=0.1, classes=2), "hfbert_cls_inputs.onnx", T=64,
           dynamic_t=True, more=("token_type_ids", "position_ids"))
    renamed("hfbert_cls_inputs.onnx", "segment_ids.onnx", "token_type_ids", "segment_ids")
    torch.manual_seed(0)
    export(HFGPT2(V=256, T=32, C=16, H=2, L=1, p=0.1), "hfgpt2_pos.onnx", dynamic_t=True, more=("position_ids",))
    torch.manual_seed(0)
    export(HFGPT2(V=256, T=32, C=16, H=2, L=1, p=0.1), "hfgpt2_types.onnx", dynamic_t=True, more=("token_type_ids",))
    torch.manual_seed(6)
    export(HFBertCls(V=256, T=64, C=32, H=2, L=1, hidden=64, p=0.1, classes=2), "types_1.onnx", T=64,
           more=(("token_type_ids", torch.zeros(2, 1, dtype=torch.long)),))
    torch.manual_seed(7)
    export(HFGPT2Cls(V=256, T=64, C=16, H=2, L=1, p=0.1, classes=2), "gpt2_cls.onnx", T=64)
    with_attr("gpt2_cls.onnx", "gpt2_cls_lastpad.onnx", "ArgMax", "select_last_index", 1)
    torch.manual_seed(9)
    export(HFRobertaCls(V=256, T=64, C=32, H=2, L=1, hidden=64, p=0.1, classes=2), "roberta_cls.onnx", T=64)
    with_attr("roberta_cls.onnx", "roberta_reverse.onnx", "CumSum", "reverse", 1)
    for path, mask, simple in (("meanpool_st.onnx", True, False), ("meanpool_simple.onnx", True, True),
                               ("meanpool_nomask.onnx", False, False)):
        torch.manual_seed(8)
        model = MeanPoolCls(V=256, T=64, C=32, H=2, L=1, hidden=64, p=0.1, classes=2)
        model.simple_pool = simple
        export(model, path, mask, T=64)
    torch.manual_seed(7)
    model = HFGPT2Cls(V=256, T=64, C=16, H=2, L=1, p=0.1, classes=2)
    model.since_445 = True
    export(model, "gpt2_cls_445.onnx", T=64)
    torch.manual_seed(7)
    model = HFGPT2Cls(V=256, T=64, C=16, H=2, L=1, p=0.1, classes=2)
    model.no_pad = True
    export(model, "gpt2_cls_nopad.onnx", T=64)
    torch.manual_seed(7)
    model = HFGPT2Cls(V=256, T=64, C=16, H=2, L=1, p=0.1, classes=2)
    model.batch_tokens = True
    export(model, "gpt2_cls_batchaxis.onnx", T=64)
    torch.manual_seed(7)
    export(GPT2ClsFirst(V=256, T=64, C=16, H=2, L=1, p=0.1, classes=2), "gpt2_cls_first.onnx", T=64)
    torch.manual_seed(2)
    export(MaskInverted(V=256, T=32, C=16, H=2, mask_input=True), "mask_inverted.onnx")
    torch.manual_seed(0)
    export(MaskPool(V=256, T=32, C=16, H=2, L=1), "mask_pool.onnx")
    torch.manual_seed(0)
    export(MaskQuery(V=256, T=32, C=16, H=2, L=1), "mask_query.onnx")
    torch.manual_seed(1)
    model = DistilBert(V=256, T=32, C=16, H=2, L=1, hidden=32)
    model.distilbert.transformer.layer[0].attention.fill = 0.0
    export(model, "mask_fill0.onnx")
    torch.manual_seed(0)
    export(Mask3d(V=256, T=32, C=16, H=2, L=1), "mask_3d.onnx", mask_shape=(2, 32, 1))
    return 0


if __name__ == "__main__":
    import warnings
    warnings.filterwarnings("ignore")
    sys.exit(main())
