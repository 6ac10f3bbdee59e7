#!/usr/bin/env bash
# isa_portable.sh LIB PROGRAM... - the built library and programs run on any
# x86-64 with AVX2: no AVX-512 instruction (an EVEX prefix, 0x62) outside
# the functions that src/device/cpu_isa.h's dispatch reaches only on an
# AVX-512 CPU (their names end in _avx512, with the compiler's suffixes:
# ._omp_fn.N, .constprop.N, ...). A -march=native build on an AVX-512
# machine fails this.
set -euo pipefail
for f in "$@"; do
  [[ -e $f ]] || { echo "isa_portable: $f: no such file" >&2; exit 1; }
  objdump -d --wide "$f" >/tmp/isa_portable.$$ || { echo "isa_portable: objdump failed on $f" >&2; exit 1; }
  # per instruction line "addr:<TAB>bytes<TAB>mnemonic": the first byte after
  # any address-size or segment prefixes; the function is the last <name>:
  awk -v file="$f" '
    /^[0-9a-f]+ <.*>:$/ { fn = $2; gsub(/[<>:]/, "", fn); next }
    /^ *[0-9a-f]+:\t/ {
      split($0, col, "\t"); n = split(col[2], b, " "); i = 1
      while (i < n && (b[i] == "67" || b[i] == "2e" || b[i] == "3e" || b[i] == "26" || b[i] == "64" || b[i] == "65" || b[i] == "36")) i++
      if (b[i] == "62") { evex++; where[fn]++; if (fn !~ /_avx512($|\.)/) { bad[fn]++; if (!(fn in example)) example[fn] = col[3] } }
    }
    END {
      for (f in bad) { printf "isa_portable: %s: %s has %d AVX-512 instruction(s) outside a dispatched variant, e.g. %s\n", file, f, bad[f], example[f]; nbad++ }
      if (nbad) exit 1
      nvar = 0; for (f in where) nvar++
      printf "isa_portable: %s: %d AVX-512 instructions, all in %d dispatched functions\n", file, evex, nvar
    }' /tmp/isa_portable.$$ || { rm -f /tmp/isa_portable.$$; exit 1; }
  rm -f /tmp/isa_portable.$$
done
