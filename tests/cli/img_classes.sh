#!/usr/bin/env bash
# img_classes.sh BATCHFIT SRC PYTHON - a test folder's classes through the
# CLI: one holding some of the training classes is labelled by name as the
# model learned them (eval and train --test-data), one of other names is
# refused naming them; list files that go wrong say so at file:line, not as
# CSV; a class folder whose name is not UTF-8 is refused.
set -u
bf=$1
src=$2
py=${3:-/usr/bin/python3}
. "$(dirname "$0")/lib.sh"

gen="$py $src/scripts/img_folders.py"
$gen fmnist "$tmp/fm" --per-class 10 --format png || exit 1
$gen fmnist "$tmp/fm_test" --per-class 5 --format png --split test || exit 1
expect 0 "test accuracy" "$bf" train --model cnn --data "$tmp/fm" --batch 32 --max-steps 4 --save "$tmp/w.safetensors"

# two of the ten classes: Bag and Trouser are classes 1 and 9 of the training folder
mkdir "$tmp/sub" "$tmp/renamed"
ln -s "$tmp/fm_test/Bag" "$tmp/sub/Bag" && ln -s "$tmp/fm_test/Trouser" "$tmp/sub/Trouser"
ln -s "$tmp/fm_test/Bag" "$tmp/renamed/x" && ln -s "$tmp/fm_test/Trouser" "$tmp/renamed/y"
for f in "$tmp"/fm_test/Bag/*.png; do echo "$f,1"; done >"$tmp/idx.lst"
for f in "$tmp"/fm_test/Trouser/*.png; do echo "$f,9"; done >>"$tmp/idx.lst"
# the folder's figures are those of the same images listed with their training indices
"$bf" eval --model cnn --weights "$tmp/w.safetensors" --data "$tmp/idx.lst" >"$tmp/idx.out" 2>&1
expect 0 "^$(grep -o 'test loss.*' "$tmp/idx.out")\$" "$bf" eval --model cnn --weights "$tmp/w.safetensors" \
  --data "$tmp/sub"
expect 0 "on 10 samples" cat "$tmp/idx.out"
expect 1 "renamed: classes x, y are not among the 10 classes of the weights .*w.safetensors.*: Ankle_boot, Bag" \
  "$bf" eval --model cnn --weights "$tmp/w.safetensors" --data "$tmp/renamed"
expect 0 "test accuracy .*\(10 samples\)" "$bf" train --model cnn --data "$tmp/fm" --test-data "$tmp/sub" \
  --batch 32 --max-steps 1
expect 1 "renamed: classes x, y are not among the 10 classes of the training data" "$bf" train --model cnn \
  --data "$tmp/fm" --test-data "$tmp/renamed" --batch 32 --max-steps 1

# list files that go wrong: list errors at file:line, whatever the first line or the file's name
printf '%s\n' "$tmp/fm/Bag/readme.txt,0" "$tmp/fm/Bag/00000.png,0" >"$tmp/firstbad.csv"
expect 1 "firstbad.csv:1: .*readme.txt is not a .jpg, .jpeg or .png file" "$bf" eval --model cnn \
  --weights "$tmp/w.safetensors" --data "$tmp/firstbad.csv"
printf '%s\n' "$tmp/fm/Bag/00000.png,Bag,extra" >"$tmp/three.lst"
expect 1 "three.lst:1: 3 fields" "$bf" eval --model cnn --weights "$tmp/w.safetensors" --data "$tmp/three.lst"
printf '# nothing yet\n' >"$tmp/empty.txt"
expect 1 "empty.txt lists no images" "$bf" eval --model cnn --weights "$tmp/w.safetensors" --data "$tmp/empty.txt"

# a class folder's name that is not UTF-8 cannot go into the weights' JSON
mkdir "$tmp/latin1" && ln -s "$tmp/fm/Bag" "$tmp/latin1/ok" && ln -s "$tmp/fm/Coat" "$tmp/latin1/$(printf 'caf\xe9')"
expect 1 "class folder 'caf\\\\xe9' has a name that is not UTF-8" "$bf" train --model cnn --data "$tmp/latin1" \
  --max-steps 1 --save "$tmp/latin1.safetensors"
expect 0 "no weights" bash -c "test ! -e \"\$1\" && echo no weights" _ "$tmp/latin1.safetensors"

finish
