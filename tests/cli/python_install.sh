#!/usr/bin/env bash
# python_install.sh BUILD_DIR PYTHON - the Python package as a user gets it:
# `cmake --install` into a fresh prefix puts it in PREFIX/lib/python3.X/
# dist-packages with _install.py naming the installed library, which it
# loads with no BATCHFIT_LIB and no build tree in sight (run from elsewhere).
set -euo pipefail
build=$1
py=$2
"$py" -c 'import ctypes' 2>/dev/null || { echo "python_install: skipped: $py lacks ctypes"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
site=$(ls -d "$tmp"/prefix/lib/python3*/dist-packages | head -n 1)
[ -f "$site/batchfit/__init__.py" ] || { echo "FAIL: no package under $tmp/prefix/lib" >&2; exit 1; }
cd "$tmp"
out=$(env -u BATCHFIT_LIB PYTHONPATH="$site" "$py" -c '
import batchfit
print(batchfit.LIBRARY_PATH)
print(batchfit.plan("mlp", memory="1GiB", batch=[1, 64]).largest_batch)')
echo "$out"
lib=$(sed -n 1p <<<"$out")
[ "$lib" = "$tmp/prefix/lib/libbatchfit.so.0" ] || [ "$lib" = "$(ls "$tmp"/prefix/lib*/libbatchfit.so.0 | head -n 1)" ] ||
  { echo "FAIL: the installed package loaded $lib, not the installed library" >&2; exit 1; }
[ "$(sed -n 2p <<<"$out")" -gt 0 ] || { echo "FAIL: no plan" >&2; exit 1; }
