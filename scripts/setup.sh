#!/usr/bin/env bash
# setup.sh - install the Debian packages batchfit needs (as root), only if missing.
#   scripts/setup.sh           what building and testing need
#   scripts/setup.sh --bench   also what bench/run.sh needs (OpenBLAS for the PyTorch peer)
set -euo pipefail
pkgs=(build-essential cmake pkg-config libdnnl-dev zlib1g-dev libcjson-dev libcmocka-dev
      libturbojpeg0-dev libspng-dev # image folders: JPEG (TurboJPEG API) and PNG decoding
      python3-pil # the image tests' oracle (PIL decodes the same files)
      python3 python3-torch dataset-fashion-mnist
      bible-kjv # the King James Bible: the `kjv` token data set (scripts/kjv.sh)
      chromium # chromium: tests/cli/report.sh renders the run report headless
      # the Python package (python/batchfit: ctypes, NumPy arrays) and its tests;
      # the tests build and read ONNX files with python3-onnx, docs/python.md uses torchvision
      python3-numpy python3-pytest python3-onnx python3-torchvision
      libopenmpi-dev openmpi-bin # data-parallel training (mpirun) and its tests (label mpi)
      # scripts/fuzz.sh: clang with libFuzzer's runtime (libclang_rt.fuzzer is in
      # libclang-rt-14-dev) and OpenMP for clang
      clang-14 libclang-rt-14-dev libomp-14-dev)
# libopenblas0-pthread: bench/run.sh runs the PyTorch peer on OpenBLAS as well as
# on the reference BLAS (bench/compare.py selects it for the peer's process only)
bench=(libopenblas0-pthread)
case "${1:-}" in
  --bench) pkgs+=("${bench[@]}") ;;
  "") ;;
  *) echo "setup: error: unknown option '$1' (expected --bench or nothing)" >&2; exit 2 ;;
esac
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# Installing a BLAS makes it the system's libblas.so.3 (a higher priority
# alternative): keep what was selected, so that only the processes that ask
# for OpenBLAS get it.
alts=(libblas.so.3-x86_64-linux-gnu liblapack.so.3-x86_64-linux-gnu)
declare -A was=()
remember_blas() {
  for a in "${alts[@]}"; do
    was[$a]=$(update-alternatives --query "$a" 2>/dev/null | sed -n 's/^Value: //p')
  done
}
restore_blas() {
  for a in "${alts[@]}"; do
    now=$(update-alternatives --query "$a" 2>/dev/null | sed -n 's/^Value: //p')
    if [ -n "${was[$a]}" ] && [ "$now" != "${was[$a]}" ]; then
      update-alternatives --quiet --set "$a" "${was[$a]}"
      echo "setup: kept ${was[$a]} as the system's ${a%%-x86_64*}"
    fi
  done
}

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: error: these packages are missing and installing them needs root: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  remember_blas
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  restore_blas
fi
echo "setup: all packages present"
# the `kjv` token data set's text, made once from bible-kjv
kjv=/usr/local/share/batchfit/kjv.txt
if [ ! -s "$kjv" ]; then
  if [ "$(id -u)" -eq 0 ]; then
    bash "$(dirname "$0")/kjv.sh" "$kjv"
  else
    echo "setup: note: $kjv is missing; scripts/kjv.sh makes it (as root, or give another path and BFIT_KJV)"
  fi
fi
