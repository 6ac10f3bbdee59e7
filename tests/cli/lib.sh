# lib.sh - what the command-line test scripts share: sourced after BATCHFIT
# and SRC are read. A scratch folder removed on exit, pass/fail counts, and
# expect; `finish` prints the counts CTest matches and sets the exit code.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { passes=$((passes + 1)); }

# expect CODE PATTERN CMD...: exit code and a pattern in stdout+stderr
expect() {
  local code=$1 pat=$2 out rc
  shift 2
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qE -- "$pat" <<<"$out"; then
    fail "$* -> exit $rc (want $code), output:"
    echo "$out" | head -5
    echo "  (wanted /$pat/)"
  else
    pass
  fi
}

finish() {
  echo "$passes passed, $fails failed"
  [ "$fails" -eq 0 ]
}
