#!/usr/bin/env bash
# Builds no-repack-shim.so (see no-repack-shim.c) into $1 (default: this directory's build/).
# The llama.h comes from the llama.cpp source node-llama-cpp bundles (a git bundle), so the struct
# layout matches the binaries it ships.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
out="${1:-$here/build}"
mkdir -p "$out"
src="$out/llama.cpp"
if [ ! -f "$src/include/llama.h" ]; then
  rm -rf "$src"
  git clone -q "$root/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$src"
fi
cc -O2 -shared -fPIC -I"$src/include" -I"$src/ggml/include" "$here/no-repack-shim.c" -o "$out/no-repack-shim.so" -ldl
echo "$out/no-repack-shim.so"
