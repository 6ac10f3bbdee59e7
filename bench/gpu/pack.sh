#!/usr/bin/env bash
# pack.sh - what a bare GPU machine needs to run the proof kit, in one
# archive: a CUDA build made here, the Debian libraries it links that such
# a machine lacks (oneDNN, cJSON, cmocka, Open MPI's, zlib), and the data
# sets the tests read. CUDA's own
# libraries (cuBLAS, cuDNN, NCCL) are not packed: the machine has them
# (bench/gpu/device.sh finds them).
#
#   bench/gpu/pack.sh [BUILD] [ARCHIVE]   defaults: build-gpu, .gpu/kit.tar.xz
#
# BUILD is configured with CUDA on, for the H100/H200 (sm_90) and PTX for
# others, and built first. The archive keeps BUILD's path relative to the
# source tree, and the tests' absolute paths: device.sh links the source
# tree there to this one's path.
set -euo pipefail
cd "$(dirname "$0")/../.."
b=${1:-build-gpu}
arc=${2:-.gpu/kit.tar.xz}
cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=Release -DBFIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="80-virtual;90-real" >/dev/null
cmake --build "$b" -j"$(nproc)" >/dev/null
mkdir -p "$(dirname "$arc")" .gpu/lib
# the shared libraries outside the C library and CUDA that the programs need
bins=("$b/batchfit" "$b/libbatchfit.so.0" "$b/libbatchfit_cuda.so" "$b/tests/test_cuda_ops" "$b/tests/bfit_gpu")
[ -x "$b/bench/bfit_cotenant" ] && bins+=("$b/bench/bfit_cotenant")
ldd "${bins[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -v -E "/$b/|/cuda|lib(c|m|dl|pthread|rt|gcc_s|stdc\+\+)\.so" | while read -r l; do
    cp -L "$l" .gpu/lib/
  done
# the data sets the tests read where setup.sh installs them (Fashion-MNIST,
# the KJV text), which device.sh puts in place there
mkdir -p .gpu/data
[ -d /usr/share/datasets/fashion-mnist ] && cp -r /usr/share/datasets/fashion-mnist .gpu/data/
[ -f /usr/local/share/batchfit/kjv.txt ] && cp /usr/local/share/batchfit/kjv.txt .gpu/data/
echo "$PWD" >.gpu/srcdir
# not the ONNX model zoo's exports and references (bench/onnx writes them
# into BUILD/onnx, about 1 GB): the kit stays under the device tool's 64 MiB;
# the static library is in it (0.45 MB compressed): isa_portable reads it
tar --exclude='*.o' --exclude='*.o.d' --exclude="$b/onnx" --exclude="$b/tests/optim_oracle_out" -C . -cf - "$b" .gpu/lib .gpu/data .gpu/srcdir | xz -T0 -6 >"$arc"
rm -rf .gpu/lib .gpu/data
echo "pack.sh: $arc, $(du -h "$arc" | cut -f1) ($b from $(git rev-parse --short HEAD))"
