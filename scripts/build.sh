#!/usr/bin/env bash
# build.sh [DIR] [cmake args...] - configure and build (default DIR: build).
# Quiet unless something fails; the full output is in DIR/build.log.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
mkdir -p "$dir"
if ! { cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" && cmake --build "$dir" -j"$(nproc)"; } >"$dir/build.log" 2>&1; then
  tail -n 40 "$dir/build.log" >&2
  echo "build: failed in $dir (full output: $dir/build.log)" >&2
  exit 1
fi
echo "build: $dir ready"
