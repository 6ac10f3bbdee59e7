#!/usr/bin/env bash
# embed.sh BUILD_DIR SOURCE_DIR - the library as a user gets it: install
# into a fresh prefix, build examples/embed.c and the command line itself
# (src/cli) against it with pkg-config (only the public header), run them,
# and check that the internal headers are not reachable.
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
libdir=$(ls -d "$tmp"/prefix/lib*/pkgconfig | head -n 1)
libdir=${libdir%/pkgconfig}
export PKG_CONFIG_PATH="$libdir/pkgconfig"
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cc -std=c11 -Wall -Wextra -Werror "$src/examples/embed.c" $(pkg-config --cflags --libs batchfit) -o "$tmp/embed"
cc -std=c11 -Wall -Wextra -Werror "$src/examples/auto.c" $(pkg-config --cflags --libs batchfit) -o "$tmp/auto"
# the command line is a user of the library like any other: its sources and
# the installed header and library are all it needs
cc -std=gnu11 -Wall -Wextra -Werror "$src"/src/cli/*.c $(pkg-config --cflags --libs batchfit) -o "$tmp/batchfit"
"$tmp/batchfit" plan --model mlp --memory 1GiB --batch 1,64 >"$tmp/plan.txt"
grep -q '^largest batch: ' "$tmp/plan.txt" || { echo "FAIL: the CLI built from the installed library did not plan" >&2; exit 1; }
"$tmp/prefix/bin/batchfit" --version | grep -q '^batchfit [0-9]' || { echo "FAIL: the installed batchfit has no --version" >&2; exit 1; }
# the public header is the whole API: an internal one must not be found
printf '#include "nn/model.h"\nint main(void) { return 0; }\n' >"$tmp/internal.c"
if cc $(pkg-config --cflags batchfit) -c "$tmp/internal.c" -o "$tmp/internal.o" 2>/dev/null; then
  echo "FAIL: an internal header is reachable through the installed flags" >&2
  exit 1
fi
cd "$tmp"
out=$("$tmp/embed" 2000)
echo "$out"
grep -q '^trained: 16 steps, test accuracy' <<<"$out" || { echo "FAIL: no training summary" >&2; exit 1; }
acc=$(sed -n 's/^trained: .*test accuracy \([0-9.]*\)%.*/\1/p' <<<"$out")
re=$(sed -n 's/^reloaded: test accuracy \([0-9.]*\)%.*/\1/p' <<<"$out")
[ "$acc" = "$re" ] || { echo "FAIL: reloaded weights give $re%, training ended at $acc%" >&2; exit 1; }
awk -v a="$acc" 'BEGIN { exit !(a > 50) }' || { echo "FAIL: accuracy $acc% after 16 steps" >&2; exit 1; }
test -s embed.safetensors
# auto mode with every other default the library's: it starts at the
# batch the lr is for and trains
out=$("$tmp/auto" 3000)
echo "$out"
grep -q '"event":"start"' <<<"$out" || { echo "FAIL: auto: no start event" >&2; exit 1; }
grep -q '^test accuracy [0-9.]*% after 1 epoch' <<<"$out" || { echo "FAIL: auto: no summary" >&2; exit 1; }
grep -q '^last batch [0-9]*, micro-batch [0-9]*' <<<"$out" || { echo "FAIL: auto: no last batch" >&2; exit 1; }
echo "embed: installed library, public header only, trained and reloaded ($acc%)"
