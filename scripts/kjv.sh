#!/usr/bin/env bash
# kjv.sh - the King James Bible as plain text, for the `kjv` token data set:
# one verse a line ("3 And God said, Let there be light: ..."), each chapter
# under its heading ("Genesis 1"), 4,236,035 bytes, from Debian's bible-kjv
# (the text of 1611, out of copyright; scripts/setup.sh installs it).
#   scripts/kjv.sh [OUT]   (default /usr/local/share/batchfit/kjv.txt)
set -euo pipefail
out=${1:-/usr/local/share/batchfit/kjv.txt}
command -v bible >/dev/null || { echo "kjv: error: 'bible' not found: apt-get install bible-kjv" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
tmp=$(mktemp "$out.XXXXXX")
# -l100000: no wrapping, a verse is a line; leading blanks dropped
bible -l100000 "gen1:1-rev22:21" 2>/dev/null | sed 's/^ *//' > "$tmp"
bytes=$(wc -c < "$tmp")
if [ "$bytes" -lt 4000000 ]; then
  rm -f "$tmp"
  echo "kjv: error: bible printed $bytes bytes, expected about 4.2 MB" >&2
  exit 1
fi
chmod 644 "$tmp"
mv "$tmp" "$out"
echo "kjv: $out ($bytes bytes)"
