#!/usr/bin/env bash
# images.sh BATCHFIT SRC PYTHON - training on image folders through the CLI:
# a cnn on Fashion-MNIST JPEGs for a few steps (the log's data-wait share,
# the class names in the weights, eval on a test folder), a small colour
# model with the random resized crop and the flip, bad files as errors
# naming them and skipped with --skip-bad-images, find's loader verdict.
set -u
bf=$1
src=$2
py=${3:-/usr/bin/python3}
. "$(dirname "$0")/lib.sh"

gen="$py $src/scripts/img_folders.py"
$gen fmnist "$tmp/fm" --per-class 30 --format jpg || exit 1
$gen fmnist "$tmp/fm_test" --per-class 10 --format png --split test || exit 1
$gen colour "$tmp/col" --per-class 12 || exit 1
$gen bad "$tmp/bad" || exit 1

# a cnn on 28x28 gray JPEGs: steps log the data wait
expect 0 "test accuracy" "$bf" train --model cnn --data "$tmp/fm" --test-data "$tmp/fm_test" --batch 32 \
  --max-steps 6 --loader-threads 2 --log "$tmp/fm.jsonl" --save "$tmp/fm.safetensors"
expect 0 '"data_share":[0-9.]+' grep -m1 '"event":"step"' "$tmp/fm.jsonl"
expect 0 '"images_skipped":0' grep -m1 '"event":"step"' "$tmp/fm.jsonl"
# ... and the rate the loader threads made samples at, which the batch controller is told
expect 0 '"loader_rate":[0-9]' grep '"event":"step"' "$tmp/fm.jsonl"
# the class names travel with the weights, in the folders' sorted order
expect 0 'Ankle_boot,Bag,Coat,Dress,Pullover,Sandal,Shirt,Sneaker,T-shirt_top,Trouser' "$py" -c "
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
n, = struct.unpack('<Q', b[:8])
print(','.join(json.loads(json.loads(b[8:8 + n])['__metadata__']['classes'])))" "$tmp/fm.safetensors"
expect 0 "accuracy" "$bf" eval --model cnn --weights "$tmp/fm.safetensors" --data "$tmp/fm_test"

# colour images of odd sizes to a 3x32x32 model: random resized crop + flip
cat >"$tmp/col.cfg" <<'SPEC'
input 3x32x32
conv 8 k=3 pad=1
relu
maxpool 2
flatten
linear 3
SPEC
expect 0 "test accuracy" "$bf" train --model "$tmp/col.cfg" --data "$tmp/col" --batch 8 --max-steps 4 \
  --random-resized-crop 32 --augment --mean 0.5,0.5,0.5 --std 0.25,0.25,0.25 --log "$tmp/col.jsonl"
expect 0 '"data_share"' grep -m1 '"event":"step"' "$tmp/col.jsonl"
expect 1 "takes inputs of 3x32x32; a crop of 24x24 would not be: give the model's size, 32" "$bf" train \
  --model "$tmp/col.cfg" --data "$tmp/col" --max-steps 1 --random-resized-crop 24
# a model that is not square takes its crops as HxW (torchvision's (h, w))
printf 'input 3x24x40\nconv 4 k=3 pad=1\nrelu\nmaxpool 2\nflatten\nlinear 3\n' >"$tmp/wide.cfg"
expect 0 "test accuracy" "$bf" train --model "$tmp/wide.cfg" --data "$tmp/col" --batch 8 --max-steps 4 \
  --random-resized-crop 24x40 --center-crop 24x40 --augment --mean 0.5,0.5,0.5 --std 0.25,0.25,0.25
expect 1 "random-resized-crop: .*wide.cfg takes inputs of 3x24x40; a crop of 40x24 would not be: give the model's size, \
24x40 \(height x width\)" "$bf" train --model "$tmp/wide.cfg" --data "$tmp/col" --max-steps 1 --random-resized-crop 40x24
expect 1 "center-crop: .*a crop of 24x24 would not be: give the model's size, 24x40" "$bf" train \
  --model "$tmp/wide.cfg" --data "$tmp/col" --max-steps 1 --center-crop 24
expect 2 "center-crop: '24x40x3' is not N or HxW \(e.g. 224 or 224x320\): '40x3' is not a whole number" "$bf" train \
  --model "$tmp/wide.cfg" --data "$tmp/col" --max-steps 1 --center-crop 24x40x3
expect 2 "random-resized-crop: '24x0' is not N or HxW .*0 is out of range" "$bf" train --model "$tmp/wide.cfg" \
  --data "$tmp/col" --max-steps 1 --random-resized-crop 24x0
expect 1 "mean.*3 channels" "$bf" train --model "$tmp/col.cfg" --data "$tmp/col" --max-steps 1 --mean 0.5 --std 0.2
# eval's --mean/--std are applied, not the statistics saved with the weights
# (before 2026-12-04 they were ignored, silently): mean 0 and std 1 score
# as --no-normalize does, to the bit
"$bf" train --model "$tmp/col.cfg" --data "$tmp/col" --batch 8 --max-steps 2 --save "$tmp/col.st" --quiet \
  >/dev/null 2>&1
plain=$("$bf" eval --model "$tmp/col.cfg" --weights "$tmp/col.st" --data "$tmp/col" --no-normalize --json 2>/dev/null)
expect 0 "^$(sed 's/[.{}]/\\&/g' <<<"$plain")\$" "$bf" eval --model "$tmp/col.cfg" --weights "$tmp/col.st" \
  --data "$tmp/col" --mean 0,0,0 --std 1,1,1 --json

# a folder of images with one subfolder (a user pointing at a class's folder)
# would train on that subfolder alone: said, with the images not read
mkdir -p "$tmp/flat/sub" && cp "$tmp/col/$(ls "$tmp/col" | head -1)"/* "$tmp/flat/" && cp "$tmp/flat"/*.* "$tmp/flat/sub/"
expect 0 "flat: [1-9][0-9]* .jpg/.jpeg/.png file\(s\) directly in it are not read: only the images in its class \
folders \(one folder per class\); 1 class only \('sub'\): a classifier needs 2 or more" "$bf" train \
  --model "$tmp/col.cfg" --data "$tmp/flat" --batch 4 --max-steps 1 --mean 0.5,0.5,0.5 --std 0.25,0.25,0.25

# a bad file: an error naming it and the ways out, or skipped and counted
way_out="\(remove the file, or give --skip-bad-images to go past unreadable images\)\$"
for f in truncated.jpg badcrc.png huge.jpg notimage.jpg; do
  rm -rf "$tmp/mixed" && mkdir -p "$tmp/mixed/a" "$tmp/mixed/b"
  cp "$tmp/bad/good.jpg" "$tmp/mixed/a/" && cp "$tmp/bad/good.png" "$tmp/mixed/b/" && cp "$tmp/bad/$f" "$tmp/mixed/b/"
  expect 1 "mixed/b/$f.* $way_out" "$bf" train --model "$tmp/col.cfg" --data "$tmp/mixed" --batch 3 --max-steps 2 \
    --mean 0.5,0.5,0.5 --std 0.25,0.25,0.25
  # ... also met first by the normalisation statistics, and by eval
  expect 1 "mixed/b/$f.* $way_out" "$bf" train --model "$tmp/col.cfg" --data "$tmp/mixed" --batch 3 --max-steps 2
  expect 0 "test accuracy" "$bf" train --model "$tmp/col.cfg" --data "$tmp/mixed" --batch 3 --max-steps 2 \
    --mean 0.5,0.5,0.5 --std 0.25,0.25,0.25 --skip-bad-images --log "$tmp/mixed.jsonl"
  expect 0 '"images_skipped":[1-9]' grep '"event":"step"' "$tmp/mixed.jsonl"
done

# skipped images are said at the end, and the measured normalisation is the
# readable images' alone (the same figures as without the bad file)
rm -rf "$tmp/mixed" && mkdir -p "$tmp/mixed/a" "$tmp/mixed/b"
cp "$tmp/bad/good.jpg" "$tmp/mixed/a/" && cp "$tmp/bad/good.png" "$tmp/mixed/b/"
"$bf" train --model "$tmp/col.cfg" --data "$tmp/mixed" --batch 2 --max-steps 1 --save "$tmp/clean.st" --quiet \
  >/dev/null 2>&1
cp "$tmp/bad/truncated.jpg" "$tmp/mixed/b/"
expect 0 "[1-9][0-9]* unreadable image read\(s\) skipped \(--skip-bad-images\)" "$bf" train --model "$tmp/col.cfg" \
  --data "$tmp/mixed" --batch 2 --max-steps 1 --skip-bad-images --save "$tmp/skip.st"
expect 0 "same normalisation" "$py" -c "
import json, struct, sys
def meta(p):
    b = open(p, 'rb').read()
    m = json.loads(b[8:8 + struct.unpack('<Q', b[:8])[0]])['__metadata__']
    return m['normalize_mean'], m['normalize_std']
a, b = meta(sys.argv[1]), meta(sys.argv[2])
assert a == b, (a, b)
print('same normalisation', a)" "$tmp/clean.st" "$tmp/skip.st"

# an evaluation leaves a bad test image out of its scores: the same loss and
# accuracy, to the bit, as the folder without it (before 2026-12-04 the next
# readable image was scored in its place, twice); micro-batches of 1, so the
# two runs compute every image alike
rm -rf "$tmp/fm_bad" && cp -r "$tmp/fm_test" "$tmp/fm_bad" && cp "$tmp/bad/badcrc.png" "$tmp/fm_bad/Bag/"
"$bf" eval --model cnn --weights "$tmp/fm.safetensors" --data "$tmp/fm_test" --eval-batch 1 --json \
  >"$tmp/ev_clean.json" 2>/dev/null
expect 0 "on 100 samples \(1 unreadable image skipped: not scored\)" "$bf" eval --model cnn \
  --weights "$tmp/fm.safetensors" --data "$tmp/fm_bad" --eval-batch 1 --skip-bad-images
"$bf" eval --model cnn --weights "$tmp/fm.safetensors" --data "$tmp/fm_bad" --eval-batch 1 --skip-bad-images \
  --json >"$tmp/ev_bad.json" 2>/dev/null
expect 0 "same scores" "$py" -c "
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert (a['loss'], a['accuracy'], a['samples']) == (b['loss'], b['accuracy'], b['samples']), (a, b)
assert b['images_skipped'] == 1 and 'images_skipped' not in a, (a, b)
print('same scores', a)" "$tmp/ev_clean.json" "$tmp/ev_bad.json"
expect 1 "fm_bad/Bag/badcrc.png: .* $way_out" "$bf" eval --model cnn --weights "$tmp/fm.safetensors" \
  --data "$tmp/fm_bad"
# ... and a run's evaluations alike
expect 0 "test accuracy [0-9.]+% \(100 samples, 1 unreadable image skipped: not scored\)" "$bf" train --model cnn \
  --data "$tmp/fm" --test-data "$tmp/fm_bad" --batch 32 --max-steps 2 --skip-bad-images

# find measures the loader and says which side bounds the speed
expect 0 "loader: 1 thread makes [0-9,]+ samples/s alone.*the (loader|device) bounds the speed" "$bf" find --model cnn --data "$tmp/fm" --limit 32 --repeats 2 \
  --loader-threads 1

# ... and its JSON has the same figures: the loader's rate, the compute's, and which bounds
"$bf" find --model cnn --data "$tmp/fm" --limit 32 --repeats 2 --loader-threads 1 --json >"$tmp/find.json" 2>"$tmp/find.err"
expect 0 "loader ok: 1 thread, [0-9]+ samples/s, compute [0-9]+ at [0-9]+, bounds (True|False)" "$py" -c "
import json, sys
j = json.load(open(sys.argv[1]))
l = j['loader']
assert l['threads'] == 1 and l['samples_per_s'] > 0 and l['compute_samples_per_s'] > 0, l
assert l['at_batch'] == j['fastest']['recommended'], (l, j['fastest'])
# the verdict follows from the figures: the loader slower than the compute, or the steps waiting for data
assert l['bounds'] == (l['samples_per_s'] < l['compute_samples_per_s'] or j['fastest']['data_bound']), l
print('loader ok: %d thread, %.0f samples/s, compute %.0f at %d, bounds %s' % (l['threads'], l['samples_per_s'],
      l['compute_samples_per_s'], l['at_batch'], l['bounds']))" "$tmp/find.json"
# data held in memory (Fashion-MNIST's IDX files) has no loader figures
"$bf" find --model cnn --limit 32 --repeats 2 --json >"$tmp/find_mem.json" 2>/dev/null
expect 0 "no loader" "$py" -c "
import json, sys
assert 'loader' not in json.load(open(sys.argv[1]))
print('no loader')" "$tmp/find_mem.json"

finish
