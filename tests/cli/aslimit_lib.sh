# aslimit_lib.sh - sourced by aslimit.sh and aslimit_cnn.sh (with bin and
# src set): lib.sh, and runs under an address-space limit.
. "$src/tests/cli/lib.sh"

# limited KB CODE PATTERN ARGS...: `batchfit ARGS` under ulimit -v KB
limited() {
  local kb=$1 code=$2 pat=$3
  shift 3
  expect "$code" "$pat" bash -c 'ulimit -v "$0" && exec "$@"' "$kb" "$bin" "$@"
}

# a refusal that names the limit
limit_msg="out of host memory: .*address-space limit \\(ulimit -v\\) of [0-9.]+ [KMG]iB leaves .*raise ulimit -v"
