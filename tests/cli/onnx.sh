#!/usr/bin/env bash
# onnx.sh BATCHFIT SOURCE_DIR - ONNX models through the command line, on the
# small files committed for it (fuzz/corpus/onnx, tests/onnx; vit_tiny.onnx and
# vit_attn_dropout.onnx are torchvision's VisionTransformer(image_size=8,
# patch_size=4, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=8,
# num_classes=3), the second with attention_dropout=0.1, exported as
# tests/onnx/export.py does; fuzz/corpus/onnx/vit_tiny_fixed.onnx is the first
# without dynamic_axes): refusals exit
# non-zero saying what and where (an operator batchfit lacks, a truncated
# file, classes the data does not have), and a model plans, trains from its
# file's weights (or drawn ones) and saves them under their PyTorch names.
set -u
bin=$1
src=$2
fails=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
out=$dir/out err=$dir/err

# run CODE CMD ARGS...: run `batchfit CMD ARGS`, check the exit code
run() {
    local want=$1
    shift
    "$bin" "$@" >"$out" 2>"$err"
    local got=$?
    if [ "$got" -ne "$want" ]; then
        echo "FAIL: $*: exit $got, want $want"
        sed 's/^/  stderr: /' "$err" | head -5
        fails=$((fails + 1))
        return 1
    fi
    return 0
}

has() {
    if ! grep -Eq -- "$2" "$1"; then
        echo "FAIL: expected /$2/ in $( [ "$1" = "$out" ] && echo stdout || echo stderr ) of the last run"
        sed 's/^/  | /' "$1" | head -10
        fails=$((fails + 1))
    fi
}

seeds=$src/fuzz/corpus/onnx
# an operator batchfit lacks: its node, op, opset and input shapes (a model that fails to load is a failure, 1,
# not a usage error: the option names a file, the file says what is wrong)
# (nn.Upsample between a Conv2d and a Linear, tests/fixtures/unsupported_resize.py; unsupported_selu.onnx,
# unsupported_prelu.onnx, then unsupported_instancenorm.onnx were the example until batchfit read Selu, PRelu
# and InstanceNormalization)
run 1 plan --model "$seeds/unsupported_resize.onnx" --memory 1GiB &&
  has "$err" "unsupported_resize.onnx: node '/1/Resize' \(Resize, opset 17\) with inputs '/0/Conv_output_0' \[N,2,3,3\], \(none\), '/1/Concat_output_0' \(computed on the host\): batchfit does not support the operator Resize: docs/onnx.md lists"
# nn.InstanceNorm2d's default (affine=False: constants for its scale and bias) is refused at its node, saying so
run 1 plan --model "$seeds/unsupported_instancenorm.onnx" --memory 1GiB &&
  has "$err" "unsupported_instancenorm.onnx: node '/norm/InstanceNormalization' \(InstanceNormalization, opset 17\) with inputs '/conv/Conv_output_0' \[N,2,3,3\], '/norm/Constant_output_0' \[2\] float, '/norm/Constant_1_output_0' \[2\] float: batchfit reads InstanceNormalization of an image \[N,C,H,W\] with a learned scale and bias \(nn.InstanceNorm2d\(C, affine=True\): groupnorm with C groups\); nn.InstanceNorm2d's default affine=False has neither: use affine=True"
# a Linear and a PReLU (unsupported_prelu.onnx until batchfit read PRelu)
run 0 plan --model "$seeds/prelu_head.onnx" --memory 1GiB && has "$out" "largest batch"
# a Linear and a SELU (unsupported_selu.onnx until batchfit read Selu)
run 0 plan --model "$seeds/selu_head.onnx" --memory 1GiB && has "$out" "largest batch"
# a Linear and a Softplus (unsupported_softplus.onnx until batchfit read Softplus)
run 0 plan --model "$seeds/softplus_head.onnx" --memory 1GiB && has "$out" "largest batch"
# a Linear and a Sigmoid (what that file was before batchfit read Sigmoid)
run 0 plan --model "$seeds/sigmoid_head.onnx" --memory 1GiB && has "$out" "largest batch"
# half a file
head -c 1500 "$seeds/resnet_block.onnx" >"$dir/cut.onnx"
run 1 plan --model "$dir/cut.onnx" --memory 1GiB && has "$err" "cut.onnx: byte [0-9]+: model: .*\(truncated\?\)"
# a model of 5 classes on 10-class data
run 1 train --model "$src/tests/onnx/five_classes.onnx" --max-steps 1 --threads 2 &&
  has "$err" "five_classes.onnx: the model has 5 class scores but the data set fashion-mnist has 10 classes"
# nn.MultiheadAttention with dropout on its weights (torchvision's ViT with attention_dropout=0.1): the attention
# layer's dropout (refused until 2026-12-05); it trains
run 0 train --model "$src/tests/onnx/vit_attn_dropout.onnx" --data synthetic --max-steps 2 --batch 8 --threads 2 &&
  has "$out" "test accuracy"
# self-attention written out by hand (tests/onnx/mhsa_refusals.py writes the three files; export.py's mhsa_mini
# has the forms batchfit reads): what the attention layer does not do is refused where it shows, saying what
# (before 2026-12-05 every hand-written attention was refused at its first Reshape or Split)
run 0 train --model "$seeds/mhsa_ok.onnx" --data synthetic --max-steps 2 --batch 8 --threads 2 &&
  has "$out" "test accuracy"
run 1 plan --model "$src/tests/onnx/mhsa_noscale.onnx" --memory 1GiB &&
  has "$err" "mhsa_noscale.onnx: node '/attn/Softmax' \(Softmax, opset 17\) with inputs '/attn/Mul_output_0' \(inside an attention block\): the scores are scaled by 1; batchfit's attention scales them by 1/sqrt\(head size\) = 0.5 \(head size 4\)$"
run 1 plan --model "$src/tests/onnx/mhsa_mask.onnx" --memory 1GiB &&
  has "$err" "mhsa_mask.onnx: node '/attn/Where' \(Where, opset 17\) .*: the mask on the attention's scores is not the causal one \(each token sees itself and the tokens before it: torch.tril\(torch.ones\(T, T\)\), here T = 4\), the only mask batchfit reads there$"
# timm's attn_drop on the weights is the attention layer's dropout (refused until 2026-12-05); a dropout on q is not
run 0 train --model "$src/tests/onnx/mhsa_dropout.onnx" --data synthetic --max-steps 2 --batch 8 --threads 2 &&
  has "$out" "test accuracy"
run 1 plan --model "$src/tests/onnx/mhsa_qdrop.onnx" --memory 1GiB &&
  has "$err" "mhsa_qdrop.onnx: node '/attn/drop/Dropout' \(Dropout, opset 17\) .*: dropout of ratio 0.1 inside the attention, not on its weights \(the softmax's output\): batchfit's attention layer drops only those"
# language models (tests/onnx/token_models.py writes the files; export.py's gpt_mini and tgpt_mini are checked
# against PyTorch): nanoGPT's GPT with a byte vocabulary trains on a text and saves its tables under their
# PyTorch names (the tied head's weight is the token table: saved once); a mask that is not causal, or that
# does not fill with -inf, and position rows used otherwise than added are refused where they show (before
# 2026-12-05 every model of token ids was refused at its input)
for i in $(seq 1 2100); do printf 'line %d: %.*s\n' "$i" $((i * 7 % 41)) "and it was so and it was good"; done >"$dir/lines.txt"
run 0 train --model "$src/tests/onnx/gpt_text.onnx" --data "$dir/lines.txt" --epochs 1 --batch 16 --lr 3e-3 \
  --optimizer adamw --threads 2 --save "$dir/gpt.safetensors" &&
  has "$err" "training .*gpt_text.onnx on .*lines.txt: [0-9,]+ parameters.* of [0-9]+ sequences of 32 tokens" &&
  has "$out" "test loss [0-9.]+ per token"
grep -aq '"wte.weight"' "$dir/gpt.safetensors" && grep -aq '"wpe.weight"' "$dir/gpt.safetensors" &&
  ! grep -aq '"lm_head.weight"' "$dir/gpt.safetensors" ||
  { echo "FAIL: gpt.safetensors: want wte.weight and wpe.weight, and no lm_head.weight (tied)"; fails=$((fails + 1)); }
# a character model (64 ids) trains on a text of bytes below 64 (before 2026-12-05 a text's 256 possible bytes
# were taken as classes the model lacked), and a text with a byte beyond is refused, naming it
for i in $(seq 1 2100); do printf '%d:%d\n' "$i" $((i * 7919 % 1000)); done >"$dir/digits.txt"
run 0 train --model "$src/tests/onnx/gpt_chars.onnx" --data "$dir/digits.txt" --epochs 1 --batch 16 --threads 2 &&
  has "$out" "test loss [0-9.]+ per token"
run 1 train --model "$src/tests/onnx/gpt_chars.onnx" --data "$dir/lines.txt" --epochs 1 --batch 16 --threads 2 &&
  has "$err" "lines.txt \(train part\) holds token id [0-9]+ at position [0-9]+ \(ids counted from 0\), outside the vocabulary \[0, 64\) of the embed of .*gpt_chars.onnx: export it with an nn.Embedding of [0-9]+ rows or more \(the data's largest id is [0-9]+\)$"
# the mask made in forward (torch.tril(torch.ones(T, T)): a Trilu, computed on the host) trains as the buffer's
run 0 train --model "$src/tests/onnx/gpt_trilu.onnx" --data "$dir/lines.txt" --epochs 1 --batch 16 --lr 3e-3 \
  --optimizer adamw --threads 2 --save "$dir/gpt_trilu.safetensors" && has "$out" "test loss [0-9.]+ per token"
# LLaMA's RMSNorm, SwiGLU, attention of separate wq, wk, wv with rotary embeddings (tests/onnx/llama_models.py; export.py's
# llama_mini is checked against PyTorch): the model trains on a text, in f32 and bf16, and saves every weight
# under its PyTorch name (before 2026-12-05 it was refused at the RMSNorm's Cast)
run 0 train --model "$src/tests/onnx/llama_text.onnx" --data "$dir/lines.txt" --epochs 1 --batch 16 --lr 3e-3 \
  --optimizer adamw --threads 2 --save "$dir/llama.safetensors" && has "$out" "test loss [0-9.]+ per token"
for w in wte.weight norms.0.weight norms.1.weight attn.0.c_attn.weight ffn.0.w1.weight ffn.0.w2.weight \
  ffn.0.w3.weight attn.1.wq.weight attn.1.wk.weight attn.1.wv.weight attn.1.wo.weight norm.weight output.weight; do
  grep -aq "\"$w\"" "$dir/llama.safetensors" || { echo "FAIL: llama.safetensors: no $w"; fails=$((fails + 1)); }
done
run 0 train --model "$src/tests/onnx/llama_text.onnx" --data "$dir/lines.txt" --epochs 1 --batch 16 --lr 3e-3 \
  --optimizer adamw --threads 2 --precision bf16 && has "$out" "test loss [0-9.]+ per token"
# Gemma's block (tests/onnx/llama_models.py's gemma_text.onnx; export.py's gemma_mini is checked against
# PyTorch; since 2026-12-06): its (1 + w) RMSNorms trained and saved as the file has them, in f32 and bf16
run 0 train --model "$src/tests/onnx/gemma_text.onnx" --data "$dir/lines.txt" --epochs 1 --batch 16 --lr 3e-3 \
  --optimizer adamw --threads 2 --save "$dir/gemma.safetensors" && has "$out" "test loss [0-9.]+ per token"
for w in embed_tokens.weight norms.0.weight norms.3.weight attn.0.wq.weight mlp.1.gate_proj.weight norm.weight; do
  grep -aq "\"$w\"" "$dir/gemma.safetensors" || { echo "FAIL: gemma.safetensors: no $w"; fails=$((fails + 1)); }
done
run 0 train --model "$src/tests/onnx/gemma_text.onnx" --data "$dir/lines.txt" --epochs 1 --batch 16 --lr 3e-3 \
  --optimizer adamw --threads 2 --precision bf16 && has "$out" "test loss [0-9.]+ per token"
# rotary embeddings on one projection to 3C, or with tables of other angles, are refused where they show
run 1 plan --model "$src/tests/onnx/rope_fused.onnx" --memory 1GiB &&
  has "$err" "rope_fused.onnx: node '/h.0/attn/Mul' \(Mul, opset 17\) .*: rotary embeddings \(or another product of q or k by heads\) on q and k of one projection to 3C: batchfit reads them on separate projections"
run 1 plan --model "$src/tests/onnx/rope_badsin.onnx" --memory 1GiB &&
  has "$err" "rope_badsin.onnx: node '/attn.1/Mul_1' \(Mul, opset 17\) .*: the sin table is not a rotary embedding's of 32 tokens and 8 columns a head, for any base \(its value at token 1, column 0\)"
# torch.repeat_interleave's export (a Loop over ONNX sequences) is refused, saying what to write instead
run 1 plan --model "$src/tests/onnx/gqa_interleave.onnx" --memory 1GiB &&
  has "$err" "gqa_interleave.onnx: node '/attn.1/SequenceEmpty' \(SequenceEmpty, opset 17\) with inputs \(none\): batchfit does not run ONNX loops and sequences \(SequenceEmpty\), which torch 1.13 exports torch.repeat_interleave as: for grouped-query attention repeat the key and value heads as Hugging Face's repeat_kv does"
# RMSNorm written four ways (tests/onnx/rms_forms.py: LLaMA's code as PyTorch 1.13 exports it, x * x and
# Reciprocal, x / sqrt at opset 18, the opset-23 RMSNormalization) trains to the same weights, bit for bit
for v in rms_torch rms_recip rms_div rms_op23; do
  run 0 train --model "$src/tests/onnx/$v.onnx" --data synthetic --max-steps 2 --batch 8 --threads 2 \
    --save "$dir/$v.safetensors" && has "$out" "test accuracy"
done
run 1 plan --model "$src/tests/onnx/rms_noweight.onnx" --memory 1GiB &&
  has "$err" "rms_noweight.onnx: node '/1/Pow' \(Pow, opset 17\) .*: RMSNorm without its weight \(a Mul by a parameter \[C\] after the norm\): batchfit's rmsnorm learns one"
run 1 plan --model "$src/tests/onnx/rms_batch.onnx" --memory 1GiB &&
  has "$err" "rms_batch.onnx: node '/1/Pow' \(Pow, opset 17\) .*: this squares a tensor and takes a mean, as RMSNorm does, but not over the last dimension alone with keepdim"
run 1 plan --model "$src/tests/onnx/gpt_fill0.onnx" --memory 1GiB &&
  has "$err" "gpt_fill0.onnx: node '/h.0/attn/Where' \(Where, opset 17\) .*: batchfit reads a mask on the attention's scores only as a causal one that fills with -inf"
run 1 plan --model "$src/tests/onnx/gpt_posmul.onnx" --memory 1GiB &&
  has "$err" "gpt_posmul.onnx: node '/Mul' \(Mul, opset 17\) with inputs '/wpe/Gather_output_0' \(rows of a position table\), .*: input 1 is rows of a position table \(a Gather by torch.arange\): batchfit reads them only added to the token embeddings$"
run 1 plan --model "$src/tests/onnx/mha_band.onnx" --memory 1GiB &&
  has "$err" "mha_band.onnx: node '/enc/self_attn/Add_2' \(Add, opset 17\) .*: the attention's attn_mask is not the causal one .*generate_square_subsequent_mask\(32\)\), the only mask batchfit reads$"
# nn.GroupNorm(affine=False) (tests/onnx/norm_refusals.py; export.py's gn_cnn has the forms batchfit reads):
# refused at its Mul by a constant
run 1 plan --model "$src/tests/onnx/gn_noaffine.onnx" --memory 1GiB &&
  has "$err" "gn_noaffine.onnx: node '/1/Mul' \(Mul, opset 17\) .*inside a group norm.*: batchfit reads nn.GroupNorm's export: .*\(affine=True: batchfit's groupnorm learns them\)"
# GELU's tanh approximation (tests/onnx/gelu_tanh.onnx: Flatten, Linear(48, 8), nn.GELU(approximate='tanh'),
# Linear(8, 3), exported as export.py does) loads as `gelu tanh=1` (before 2026-12-05 it was refused where it
# starts, and before 2026-12-04 the x * x was taken as a product of two tensors and a constant's Mul was blamed)
run 0 plan --model "$src/tests/onnx/gelu_tanh.onnx" --memory 1GiB && has "$out" "largest batch"
# ONNX's Gelu operator (opset 20, PyTorch 2.x's export of nn.GELU(); tests/onnx/gelu_op20.py writes the
# files: Flatten, Linear(48, 8), GELU, Linear(8, 3), the same weights): approximate="tanh", the opset-17 chain
# of nn.GELU(approximate='tanh') and minGPT's NewGELU (torch.pow, the factors in another order) are one layer,
# read by what they compute: the same weights after two steps, bit for bit, and not the exact GELU's; a chain
# of the same nodes with another constant (0.05 for 0.044715) is refused, saying where it differs
# (before 2026-12-05 all were refused, before 2026-12-04 every Gelu as an operator batchfit lacks) ...
for v in gelu_op20_tanh gelu_tanh17 gelu_newgelu; do
  run 0 train --model "$src/tests/onnx/$v.onnx" --data synthetic --max-steps 2 --batch 8 --threads 2 \
    --save "$dir/$v.safetensors" && has "$out" "test accuracy"
done
run 1 plan --model "$src/tests/onnx/gelu_notanh.onnx" --memory 1GiB &&
  has "$err" "gelu_notanh.onnx: node '/gelu/Mul' \(Mul, opset 17\) with inputs 'half' \[\] float, 'h' \[N,8\]: the 8 elementwise nodes from here to '/gelu/Mul_3', with a Tanh, look like GELU's tanh approximation but compute something else: -0.00289738 at x = -3, where 0.5 x \(1 \+ tanh\(sqrt\(2/pi\) \(x \+ 0.044715 x\^3\)\)\) is -0.00363739"
# ... and the exact one trains as the opset-17 erf pattern does (which onnx_torch vit_small checks against
# PyTorch): the same weights after two steps, bit for bit; so does it at opset 28, the newest read (21 to 28
# changed none of its operators but their types), while opset 29 is refused, saying what is read and what to do
# (before 2026-12-04 every later opset loaded, unreviewed)
run 1 plan --model "$src/tests/onnx/gelu_op29.onnx" --memory 1GiB &&
  has "$err" "gelu_op29.onnx: opset 29 is newer than batchfit reads \(7 to 28: what later opsets change in the operators it reads has not been gone through\): export the model with torch.onnx.export\(..., opset_version=17\), or another opset from 7 to 28"
for v in gelu_erf gelu_op20 gelu_op28; do
  run 0 train --model "$src/tests/onnx/$v.onnx" --data synthetic --max-steps 2 --batch 8 --threads 2 \
    --save "$dir/$v.safetensors" && has "$out" "test accuracy"
done
run 2 train --model "$seeds/resnet_block.onnx" --init files && has "$err" "--init: expected file or random, got 'files'"

# plans, trains from the file's weights, saves them under the module's names
run 0 plan --model "$seeds/dense_block.onnx" --memory 1GiB --threads 2 &&
  has "$out" "dense_block.onnx \(ONNX file\), input 3x8x8, 3 classes, 323 parameters"
# a vision transformer (torchvision's VisionTransformer: 8x8 images, 4x4 patches, one block of width 8, 2 heads)
run 0 plan --model "$seeds/vit_tiny.onnx" --memory 1GiB --threads 2 &&
  has "$out" "vit_tiny.onnx \(ONNX file\), input 3x8x8, 3 classes, 947 parameters"
for v in vit_tiny vit_tiny_fixed; do
  run 0 train --model "$seeds/$v.onnx" --data synthetic --max-steps 2 --batch 8 --threads 2 --save "$dir/$v.safetensors" &&
    has "$out" "test accuracy"
done
# the batch fixed at 2 in the export does not bind: the same training, the same weights (the tensors after
# the safetensors header, which names the model file)
tensors() { [ -s "$1" ] && tail -c +$((9 + $(od -An -tu8 -N8 "$1"))) "$1"; } # nothing for a missing file
cmp -s <(tensors "$dir/vit_tiny.safetensors") <(tensors "$dir/vit_tiny_fixed.safetensors") ||
  { echo "FAIL: vit_tiny_fixed.onnx trained to other weights than vit_tiny.onnx"; fails=$((fails + 1)); }
# the rotary tables made in forward (Hugging Face's LlamaRotaryEmbedding since transformers 4.38: a MatMul of
# inv_freq by the positions, Cos, Sin, on the host) train as the buffers' do: llama_text.onnx's weights
run 0 train --model "$src/tests/onnx/llama_hfrope.onnx" --data "$dir/lines.txt" --epochs 1 --batch 16 --lr 3e-3 \
  --optimizer adamw --threads 2 --save "$dir/llama_hfrope.safetensors" && has "$out" "test loss [0-9.]+ per token"
cmp -s <(tensors "$dir/llama.safetensors") <(tensors "$dir/llama_hfrope.safetensors") ||
  { echo "FAIL: llama_hfrope.onnx trained to other weights than llama_text.onnx"; fails=$((fails + 1)); }
# the sequence a dynamic axis of the export (dynamic_axes {1: "T"}): lowered at the length --seq gives, the
# same model as the fixed export at 32 (the same weights, bit for bit); a shorter length trains; without a
# length, or past the positions its table or mask buffer holds, refused saying so (before 2026-12-05 every
# such export was refused as "not a fixed size"); plan checks a length as an option (exit 2, as for a fixed T)
run 0 train --model "$src/tests/onnx/gpt_dyn.onnx" --seq 32 --data "$dir/lines.txt" --epochs 1 --batch 16 --lr 3e-3 \
  --optimizer adamw --threads 2 --save "$dir/gpt_dyn.safetensors" &&
  has "$err" "training .*gpt_dyn.onnx on .*lines.txt: .* of [0-9]+ sequences of 32 tokens"
cmp -s <(tensors "$dir/gpt.safetensors") <(tensors "$dir/gpt_dyn.safetensors") ||
  { echo "FAIL: gpt_dyn.onnx at --seq 32 trained to other weights than gpt_text.onnx"; fails=$((fails + 1)); }
run 0 train --model "$src/tests/onnx/llama_dyn.onnx" --seq 32 --data "$dir/lines.txt" --epochs 1 --batch 16 \
  --lr 3e-3 --optimizer adamw --threads 2 --save "$dir/llama_dyn.safetensors" && has "$out" "test loss [0-9.]+ per token"
cmp -s <(tensors "$dir/llama.safetensors") <(tensors "$dir/llama_dyn.safetensors") ||
  { echo "FAIL: llama_dyn.onnx at --seq 32 trained to other weights than llama_text.onnx"; fails=$((fails + 1)); }
run 0 train --model "$src/tests/onnx/gpt_dyn.onnx" --seq 16 --data "$dir/lines.txt" --epochs 1 --batch 16 --threads 2 &&
  has "$err" "of [0-9]+ sequences of 16 tokens" && has "$out" "test loss [0-9.]+ per token"
run 0 plan --model "$src/tests/onnx/llama_dyn.onnx" --seq 8 --memory 1GiB && has "$out" "input 8 tokens"
run 1 plan --model "$src/tests/onnx/gpt_dyn.onnx" --memory 1GiB &&
  has "$err" "gpt_dyn.onnx: the sequence length of the input 'input' \(dimension 1, 'T'\) is not fixed in the export \(a dynamic axis\): give the length to train and plan at with --seq N"
run 1 train --model "$src/tests/onnx/gpt_dyn.onnx" --seq 33 --data "$dir/lines.txt" --epochs 1 --threads 2 &&
  has "$err" "node '/wpe/Gather' .*: the positions 0 .. 32 run past the 32 rows of the position table: the model has 32 positions, the longest sequence it takes \(--seq at most 32\)"
run 1 plan --model "$src/tests/onnx/llama_dyn.onnx" --seq 100000 --memory 1GiB &&
  has "$err" "a host value of 10000000000 elements in 2 dimensions is more than batchfit computes on the host \(4194304\) \(a token model's masks grow with its length, 100000 tokens here: a shorter --seq makes them smaller\)$"
run 1 plan --model "$src/tests/onnx/llama_dyn.onnx" --seq 64 --memory 1GiB &&
  has "$err" "the mask on the attention's scores is 32 x 32 for 64 tokens: the model's mask \(a buffer cut to the sequence\) has 32 positions, the longest sequence it takes \(--seq at most 32\)"
# the PyTorch Transformer tutorial's model (embeddings times sqrt(C), a sinusoidal position buffer): it trains,
# and the buffer comes back as it was: its checksum after 1 step and after an epoch the same, the token
# table's not (before 2026-12-05 refused at the Mul by sqrt(C))
crc() { head -c 4096 "$1" | grep -a -o "\"crc32\.$2\":\"[0-9a-f]*\"" | cut -d'"' -f4; }
run 0 train --model "$src/tests/onnx/tut_text.onnx" --data "$dir/lines.txt" --epochs 1 --batch 16 --lr 3e-3 \
  --optimizer adamw --threads 2 --save "$dir/tut.safetensors" && has "$out" "test loss [0-9.]+ per token"
run 0 train --model "$src/tests/onnx/tut_text.onnx" --data "$dir/lines.txt" --max-steps 1 --batch 16 --lr 3e-3 \
  --optimizer adamw --threads 2 --save "$dir/tut1.safetensors" && has "$out" "test loss [0-9.]+ per token"
# the tutorial's model as published, [T, batch] throughout (nn.Transformer's default layout; refused before
# 2026-12-05): the same module in the other layout, so the same training, bit for bit
run 0 train --model "$src/tests/onnx/tut_seqfirst.onnx" --data "$dir/lines.txt" --epochs 1 --batch 16 --lr 3e-3 \
  --optimizer adamw --threads 2 --save "$dir/tut_seqfirst.safetensors" && has "$out" "test loss [0-9.]+ per token"
cmp -s <(tensors "$dir/tut.safetensors") <(tensors "$dir/tut_seqfirst.safetensors") ||
  { echo "FAIL: tut_seqfirst.onnx ([T, batch]) trained to other weights than tut_text.onnx"; fails=$((fails + 1)); }
[ -n "$(crc "$dir/tut.safetensors" pos_encoder.pe)" ] &&
  [ "$(crc "$dir/tut.safetensors" pos_encoder.pe)" = "$(crc "$dir/tut1.safetensors" pos_encoder.pe)" ] &&
  [ "$(crc "$dir/tut.safetensors" embedding.weight)" != "$(crc "$dir/tut1.safetensors" embedding.weight)" ] ||
  { echo "FAIL: tut_text.onnx: pos_encoder.pe trained, or missing, or embedding.weight not trained"; fails=$((fails + 1)); }
# transformers' GPT-2 as its code writes it (Conv1D: x.view(-1, C), addmm by a weight [in, out], viewed back;
# the attention's torch.where with float32's lowest number; dropout 0.1): it trains and saves each Conv1D
# weight [in, out] under GPT2LMHeadModel's name, lm_head tied (before 2026-12-05 refused at the ids' Reshape);
# the rows used otherwise than by a Conv1D are refused
run 0 train --model "$src/tests/onnx/hfgpt2_text.onnx" --data "$dir/lines.txt" --epochs 1 --batch 16 --lr 3e-3 \
  --optimizer adamw --threads 2 --save "$dir/hfgpt2.safetensors" && has "$out" "test loss [0-9.]+ per token"
for w in 'transformer.h.0.attn.c_attn.weight":{"dtype":"F32","shape":\[16,48\]' \
  'transformer.h.0.mlp.c_fc.weight":{"dtype":"F32","shape":\[16,64\]' \
  'transformer.h.0.mlp.c_proj.weight":{"dtype":"F32","shape":\[64,16\]' 'transformer.wte.weight"'; do
  head -c 4096 "$dir/hfgpt2.safetensors" | grep -aq "\"$w" || { echo "FAIL: hfgpt2.safetensors: no $w"; fails=$((fails + 1)); }
done
! head -c 4096 "$dir/hfgpt2.safetensors" | grep -aq '"lm_head.weight"' ||
  { echo "FAIL: hfgpt2.safetensors holds lm_head.weight (tied to transformer.wte.weight)"; fails=$((fails + 1)); }
run 1 plan --model "$src/tests/onnx/rows_relu.onnx" --memory 1GiB &&
  has "$err" "rows_relu.onnx: node '/Relu' \(Relu, opset 17\) with inputs '/Reshape_output_0' \[N\*32,16\]: input 1 is tokens flattened into rows \[N\*T, C\] \(x.view\(-1, C\)\): batchfit reads them only as transformers' Conv1D does"
# an attention_mask input, transformers' exports' second (tests/onnx/mask_models.py; before 2026-12-05 refused
# as a second input): read to the scores and checked to mask the padding's keys, which batchfit does itself
# from each sequence's length, so on lines padded to --seq-max GPT-2 with it (also with the sequence a dynamic
# axis, as transformers.onnx exports it) trains to GPT-2's weights without it, DistilBERT's masked_fill, BART's
# _expand_mask and no mask to one another's, nn.TransformerEncoder given src_key_padding_mask to itself
# without it, BERT exported from the ids alone (its all-ones mask made in forward) to BERT with the mask,
# and LLaMA with transformers 4.36's 4-d mask, and LLaMA's causal mask as transformers 4.42 makes it from the
# ids alone ([T, T + 1] expanded over the batch by expand(B, 1, -1, -1), cut to the keys; since 2026-12-06), to
# LLaMA with its causal mask alone, bit for bit (TGpt adds its learned positions [1, 32, 16] whole, so it takes no other length: each
# micro-batch runs at 32, padded; before 2026-12-05 --seq-max failed on such a model at its first shorter one)
for v in hfgpt2_text hfgpt2_mask hfgpt2_mask_dyn hfgpt2_pos distilbert_text distilbert_expand distilbert_nomask tgpt_kpm \
  tgpt_nokpm hfbert_text hfbert_nomask llama_mask llama_nomask llama_pos llama_442; do
  run 0 train --model "$src/tests/onnx/$v.onnx" --data "$dir/lines.txt" --seq-max 32 --epochs 1 --batch 16 \
    --max-steps 40 --lr 3e-3 --optimizer adamw --threads 2 --save "$dir/$v-pad.safetensors" &&
    has "$out" "per token .*padding [0-9.]+% of the positions computed"
done
for v in hfgpt2_mask:hfgpt2_text hfgpt2_mask_dyn:hfgpt2_text hfgpt2_pos:hfgpt2_text distilbert_expand:distilbert_text distilbert_nomask:distilbert_text \
  tgpt_kpm:tgpt_nokpm hfbert_nomask:hfbert_text llama_mask:llama_nomask llama_pos:llama_mask llama_442:llama_nomask; do
  cmp -s <(tensors "$dir/${v%%:*}-pad.safetensors") <(tensors "$dir/${v##*:}-pad.safetensors") ||
    { echo "FAIL: ${v%%:*}.onnx trained to other weights than ${v##*:}.onnx on padded lines"; fails=$((fails + 1)); }
done
# with its attention_mask, transformers 4.42 writes the padding into a clone of that mask by a slice assignment
# (a ScatterND): refused, saying to export from the ids alone
run 1 plan --model "$src/tests/onnx/llama_442_mask.onnx" --memory 1GiB &&
  has "$err" "llama_442_mask.onnx: node '/Add' \(Add, opset 17\) with inputs '/Slice_output_0' \(computed on the host\), '/Cast_3_output_0' \(the attention mask, or made from it\): the attention_mask added to a causal mask made on the host: .*export the model from input_ids alone \(no attention_mask\)"
# sequence classifiers (transformers' DistilBertForSequenceClassification and BertForSequenceClassification,
# tests/onnx/mask_models.py) on a folder of class folders of texts, each text padded with -1 to 64 tokens:
# DistilBERT with its attention_mask and without it train to the same weights (batchfit masks the padding's
# keys from each text's length), and the class names come back with the weights
for c in short long; do
  mkdir -p "$dir/cls/$c"
  for i in $(seq 1 60); do
    if [ $c = short ]; then printf 'a %.*s\n' $((i % 9)) "bbbbbbbbb"; else printf 'c %.*s and more\n' $((i % 40 + 9)) \
      "ddddddddddddddddddddddddddddddddddddddddddddddddd"; fi >"$dir/cls/$c/$i.txt"
  done
done
for v in distilbert_cls distilbert_cls_nomask hfbert_cls; do
  run 0 train --model "$src/tests/onnx/$v.onnx" --data "$dir/cls" --epochs 1 --batch 8 --max-steps 20 --lr 3e-3 \
    --optimizer adamw --threads 2 --save "$dir/$v.safetensors" && has "$out" "test accuracy [0-9.]+% after"
done
cmp -s <(tensors "$dir/distilbert_cls.safetensors") <(tensors "$dir/distilbert_cls_nomask.safetensors") ||
  { echo "FAIL: distilbert_cls.onnx trained to other weights than distilbert_cls_nomask.onnx"; fails=$((fails + 1)); }
head -c 8192 "$dir/hfbert_cls.safetensors" | grep -aq '"classes":"\[\\"long\\",\\"short\\"\]"' ||
  { echo "FAIL: hfbert_cls.safetensors: no classes [long, short]"; fails=$((fails + 1)); }
# GPT2ForSequenceClassification (tests/onnx/mask_models.py; since 2026-12-05): the scores of each sequence's last
# token before its first pad token, read as `select last` (each text's last byte), and as transformers 4.45 on
# picks it (the last token that is not the pad token) to the same weights; picking the first pad token's
# scores instead (no - 1), or the last pad token's, is refused. Without a pad token (logits[torch.arange(B), -1]:
# each text's last token, as PyTorch picks it on the text alone) to the same weights too
for v in gpt2_cls gpt2_cls_445 gpt2_cls_nopad; do
  run 0 train --model "$src/tests/onnx/$v.onnx" --data "$dir/cls" --epochs 1 --batch 8 --max-steps 20 --lr 3e-3 \
    --optimizer adamw --threads 2 --save "$dir/$v.safetensors" &&
    has "$out" "test accuracy [0-9.]+% after 1 epoch\(s\), 15 steps"
done
for v in gpt2_cls_445 gpt2_cls_nopad; do
  cmp -s <(tensors "$dir/gpt2_cls.safetensors") <(tensors "$dir/$v.safetensors") ||
    { echo "FAIL: $v.onnx trained to other weights than gpt2_cls.onnx"; fails=$((fails + 1)); }
done
run 1 plan --model "$src/tests/onnx/gpt2_cls_batchaxis.onnx" --memory 1GiB &&
  has "$err" "gpt2_cls_batchaxis.onnx: node '/Gather_3' \(Gather, opset 17\) with inputs '/score/MatMul_output_0' \[N,64,2\], '/Range_1_output_0' \(torch.arange\(batch\)\): torch.arange\(batch\) as the indices of a Gather along axis 1: batchfit reads it only as the batch in its own order"
run 1 plan --model "$src/tests/onnx/gpt2_cls_first.onnx" --memory 1GiB &&
  has "$err" "gpt2_cls_first.onnx: node '/Mod' \(Mod, opset 17\) with inputs '/ArgMax_output_0' \(made by comparing the ids with the pad token\), '/Gather_output_0' \(computed on the host\): input 1 is part of picking each sequence's last token \(its place so far\), read here otherwise: batchfit reads each sequence's last token as transformers' GPT2ForSequenceClassification picks it"
run 1 plan --model "$src/tests/onnx/gpt2_cls_lastpad.onnx" --memory 1GiB &&
  has "$err" "gpt2_cls_lastpad.onnx: node '/ArgMax' \(ArgMax, opset 17\) with inputs '/Cast_3_output_0' \(made by comparing the ids with the pad token\): ArgMax of the pad token's places with axis -1, keepdims 0, select_last_index 1: batchfit reads"
# RobertaForSequenceClassification (since 2026-12-05): its positions, made from the ids after padding_idx, read as
# the position table's rows from padding_idx + 1 on; the cumulative sum reversed is refused
run 0 train --model "$src/tests/onnx/roberta_cls.onnx" --data "$dir/cls" --epochs 1 --batch 8 --max-steps 20 \
  --lr 3e-3 --optimizer adamw --threads 2 && has "$out" "test accuracy [0-9.]+% after 1 epoch\(s\), 15 steps"
run 1 plan --model "$src/tests/onnx/roberta_reverse.onnx" --memory 1GiB &&
  has "$err" "roberta_reverse.onnx: node '/CumSum' \(CumSum, opset 17\) .*: a CumSum of the real tokens other than over the tokens, inclusive and forward"
# a mean of the tokens weighted by the attention_mask (since 2026-12-05), as sentence-transformers' mean_pooling
# writes it and without its expand and clamp, trains to the weights of the mean exported from the ids alone
for v in meanpool_st meanpool_simple meanpool_nomask; do
  run 0 train --model "$src/tests/onnx/$v.onnx" --data "$dir/cls" --epochs 1 --batch 8 --max-steps 20 --lr 3e-3 \
    --optimizer adamw --threads 2 --save "$dir/$v.safetensors" && has "$out" "test accuracy [0-9.]+% after"
done
for v in meanpool_st meanpool_simple; do
  cmp -s <(tensors "$dir/$v.safetensors") <(tensors "$dir/meanpool_nomask.safetensors") ||
    { echo "FAIL: $v.onnx trained to other weights than meanpool_nomask.onnx"; fails=$((fails + 1)); }
done
# BertForSequenceClassification's four inputs as optimum exports them (input_ids, attention_mask,
# token_type_ids, position_ids, the sequence a dynamic axis; since 2026-12-05) train to the weights of the file
# with the mask alone: batchfit reads the types as one segment and the positions as 0 .. T-1 (hfgpt2_pos,
# GPT-2 given position_ids, above); GPT-2 looking its token types up in wte itself, and token_type_ids of
# another shape, and an input of a name batchfit does not know beside the mask, are refused
run 0 train --model "$src/tests/onnx/hfbert_cls_inputs.onnx" --seq 64 --data "$dir/cls" --epochs 1 --batch 8 \
  --max-steps 20 --lr 3e-3 --optimizer adamw --threads 2 --save "$dir/hfbert_cls_inputs.safetensors" &&
  has "$out" "test accuracy [0-9.]+% after"
cmp -s <(tensors "$dir/hfbert_cls_inputs.safetensors") <(tensors "$dir/hfbert_cls.safetensors") ||
  { echo "FAIL: hfbert_cls_inputs.onnx trained to other weights than hfbert_cls.onnx"; fails=$((fails + 1)); }
run 1 plan --model "$src/tests/onnx/hfgpt2_types.onnx" --seq 32 --memory 1GiB &&
  has "$err" "hfgpt2_types.onnx: node '/Add_1' \(Add, opset 17\) with inputs '/Add_output_0' \[N,32,16\], '/wte_1/Gather_output_0' \(row 0 of a table for every token\): the token types are rows of the token table itself \(GPT-2's wte\(token_type_ids\)\)"
run 1 plan --model "$src/tests/onnx/segment_ids.onnx" --seq 64 --memory 1GiB &&
  has "$err" "segment_ids.onnx: the inputs 'attention_mask' and 'segment_ids' besides the token ids: batchfit reads one attention mask \(attention_mask, 1 for a token and 0 for padding\) and token_type_ids and position_ids by those names"
run 1 plan --model "$src/tests/onnx/types_1.onnx" --memory 1GiB &&
  has "$err" "types_1.onnx: the input 'token_type_ids' is int64 \[batch, 1\]: batchfit reads token_type_ids as integers \[batch, 64\], as the token ids 'input' of a batch-first model \(one segment: 0 at every token\)"
# the same exported at a fixed batch of 4 (no dynamic axes: the mask's zeros_like a constant [8, 1, 32])
for v in tgpt_kpm tgpt_kpm_fixed; do
  run 0 train --model "$src/tests/onnx/$v.onnx" --data "$dir/lines.txt" --seq-max 32 --epochs 1 --batch 4 \
    --max-steps 40 --lr 3e-3 --optimizer adamw --threads 2 --save "$dir/$v-4.safetensors" && has "$out" "per token"
done
cmp -s <(tensors "$dir/tgpt_kpm-4.safetensors") <(tensors "$dir/tgpt_kpm_fixed-4.safetensors") ||
  { echo "FAIL: tgpt_kpm_fixed.onnx (a fixed batch) trained to other weights than tgpt_kpm.onnx"; fails=$((fails + 1)); }
km="batchfit reads a model's attention_mask \(1 for a token, 0 for padding, \[batch, T\]\) only as the mask of the padding's keys"
run 1 plan --model "$src/tests/onnx/mask_pool.onnx" --memory 1GiB &&
  has "$err" "mask_pool.onnx: node '/Mul' \(Mul, opset 17\) with inputs '/Add_output_0' \[N,32,16\], '/Cast_2_output_0' \(the attention mask, or made from it\): batchfit reads an attention_mask unsqueezed after the tokens only as the weights of a mean over the real tokens, .* \(here the tokens times the mask are read by another node than their sum over the tokens\)$"
run 1 plan --model "$src/tests/onnx/mask_query.onnx" --memory 1GiB &&
  has "$err" "mask_query.onnx: node '/Unsqueeze_2' \(Unsqueeze, opset 17\).*: $km.* \(here a dimension inserted after the tokens"
run 1 plan --model "$src/tests/onnx/mask_fill0.onnx" --memory 1GiB &&
  has "$err" "mask_fill0.onnx: node '/layer.0/attention/Where' \(Where, opset 17\).*: $km.* \(here the fill leaves the padding's weights above 0: fill with -inf or a number at most -1e4\)$"
run 1 plan --model "$src/tests/onnx/mask_inverted.onnx" --memory 1GiB &&
  has "$err" "mask_inverted.onnx: node '/pre/layers.0/self_attn/Where_1' \(Where, opset 17\).*: $km.* \(here the fill is where the mask is 1: it would hide the tokens and keep the padding\)$"
run 1 plan --model "$src/tests/onnx/mask_3d.onnx" --memory 1GiB &&
  has "$err" "mask_3d.onnx: the second input 'attention_mask' is int64 of 3 dimensions: besides the token ids \('input' \[batch, 32\]\) batchfit reads one input, the attention mask \(attention_mask: int64, int32, bool or float \[batch, 32\], 1 for a token and 0 for padding\) of a batch-first model$"
for v in rms_recip rms_div rms_op23; do
  cmp -s <(tensors "$dir/rms_torch.safetensors") <(tensors "$dir/$v.safetensors") ||
    { echo "FAIL: $v.onnx trained to other weights than rms_torch.onnx"; fails=$((fails + 1)); }
done
cmp -s <(tensors "$dir/gelu_erf.safetensors") <(tensors "$dir/gelu_op20.safetensors") ||
  { echo "FAIL: gelu_op20.onnx (the Gelu operator) trained to other weights than gelu_erf.onnx"; fails=$((fails + 1)); }
cmp -s <(tensors "$dir/gelu_erf.safetensors") <(tensors "$dir/gelu_op28.safetensors") ||
  { echo "FAIL: gelu_op28.onnx (opset 28) trained to other weights than gelu_erf.onnx"; fails=$((fails + 1)); }
cmp -s <(tensors "$dir/gpt.safetensors") <(tensors "$dir/gpt_trilu.safetensors") ||
  { echo "FAIL: gpt_trilu.onnx (its mask made in forward) trained to other weights than gpt_text.onnx"; fails=$((fails + 1)); }
for v in gelu_tanh17 gelu_newgelu; do
  cmp -s <(tensors "$dir/gelu_op20_tanh.safetensors") <(tensors "$dir/$v.safetensors") ||
    { echo "FAIL: $v.onnx trained to other weights than gelu_op20_tanh.onnx (Gelu, approximate='tanh')"; fails=$((fails + 1)); }
done
cmp -s <(tensors "$dir/gelu_erf.safetensors") <(tensors "$dir/gelu_op20_tanh.safetensors") &&
  { echo "FAIL: gelu_op20_tanh.onnx trained to the exact GELU's weights (gelu_erf.onnx)"; fails=$((fails + 1)); }
for init in file random; do
  run 0 train --model "$seeds/resnet_block.onnx" --data synthetic --max-steps 2 --batch 8 --threads 2 --init $init \
    --save "$dir/$init.safetensors" && has "$out" "test accuracy"
  grep -aq '"c1.weight"' "$dir/$init.safetensors" && grep -aq '"b2.running_var"' "$dir/$init.safetensors" ||
    { echo "FAIL: $init.safetensors lacks the state_dict names c1.weight, b2.running_var"; fails=$((fails + 1)); }
done
# the drawn weights are not the file's
cmp -s "$dir/file.safetensors" "$dir/random.safetensors" &&
  { echo "FAIL: --init random saved the same weights as --init file"; fails=$((fails + 1)); }
run 0 eval --model "$seeds/resnet_block.onnx" --weights "$dir/file.safetensors" --data synthetic --threads 2 &&
  has "$out" "accuracy"

if [ "$fails" -ne 0 ]; then
  echo "$fails ONNX CLI check(s) failed"
  exit 1
fi
echo "all ONNX CLI checks passed"
