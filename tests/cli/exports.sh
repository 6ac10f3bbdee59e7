#!/usr/bin/env bash
# exports.sh BUILD_DIR SOURCE_DIR - the shared library exports the public
# API and nothing else: every dynamic symbol it defines is a bfit_ function
# declared BFIT_API in include/batchfit.h, and every such declaration is
# exported (a public function left hidden or unimplemented would fail a
# user's link). The CUDA module exports only its entry point.
set -euo pipefail
build=$1
src=$2
lib="$build/libbatchfit.so"
hdr="$src/include/batchfit.h"
[ -f "$lib" ] || { echo "FAIL: $lib is missing" >&2; exit 1; }
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVWi]$/ {print $3}' | grep -v '^_' | sort -u)
declared=$(tr '\n' ' ' <"$hdr" | grep -oE 'BFIT_API [^;{]*\(' | grep -oE 'bfit_[a-z0-9_]+ *\($' | tr -d ' (' | sort -u)
fails=0
bad=$(comm -23 <(echo "$exported") <(echo "$declared"))
if [ -n "$bad" ]; then
  echo "FAIL: exported but not public (internal functions must stay hidden):" >&2
  echo "$bad" | sed 's/^/  /' >&2
  fails=1
fi
missing=$(comm -13 <(echo "$exported") <(echo "$declared"))
if [ -n "$missing" ]; then
  echo "FAIL: declared public but not exported:" >&2
  echo "$missing" | sed 's/^/  /' >&2
  fails=1
fi
if [ -f "$build/libbatchfit_cuda.so" ]; then
  cuda=$(nm -D --defined-only "$build/libbatchfit_cuda.so" | awk '$2 ~ /^[TDBRVWi]$/ {print $3}' | grep -v '^_' | sort -u)
  [ "$cuda" = "bfit_cuda_plugin_open" ] || { echo "FAIL: the CUDA module exports more than its entry point:" >&2; echo "$cuda" >&2; fails=1; }
fi
soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
[ "$soname" = "libbatchfit.so.0" ] || { echo "FAIL: soname '$soname', want libbatchfit.so.0" >&2; fails=1; }
[ $fails -eq 0 ] || exit 1
echo "exports: $(echo "$exported" | wc -l) public functions, all declared in batchfit.h, nothing else; soname $soname"
