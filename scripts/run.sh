#!/usr/bin/env bash
# run.sh - set up, build, and run the main job: train models/cnn.cfg on
# Fashion-MNIST with batchfit choosing the batch (--batch auto: the effective
# batch for goodput, the micro-batch from the memory plan and measured
# speed), then print the final test accuracy. Extra arguments go to
# `batchfit train`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
mkdir -p out
exec ./build/batchfit train --model models/cnn.cfg --data fashion-mnist \
    --batch auto --lr-ref-batch 64 --epochs 5 --optimizer sgd --lr 0.025 \
    --schedule cosine --weight-decay 5e-4 \
    --save out/cnn.safetensors --log out/train.jsonl "$@"
