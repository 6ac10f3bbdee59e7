#!/usr/bin/env bash
# setup.sh - install the Debian packages batchfit needs (as root), only if missing.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libdnnl-dev zlib1g-dev libcjson-dev libcmocka-dev
      python3 python3-torch dataset-fashion-mnist
      chromium) # chromium: tests/cli/report.sh renders the run report headless
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: error: these packages are missing and installing them needs root: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup: all packages present"
