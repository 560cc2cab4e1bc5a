#!/usr/bin/env bash
# Builds mtp-ref (see mtp-ref.cpp), or with $2 another reference program of tools/src/parity
# (NAME/NAME.cpp, e.g. cvec-ref), into $1 (default: this directory's build/) against the llama.cpp
# binaries node-llama-cpp ships. The headers (include/llama.h, ggml/include, and src/llama-ext.h,
# which declares the MTP calls) come from the llama.cpp source node-llama-cpp bundles (a git
# bundle), so struct layouts match those binaries. MTP_REF_LLAMA_BINS overrides the binaries' dir.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
out="${1:-$here/build}"
name="${2:-mtp-ref}"
source="$here/../$name/$name.cpp"
[ -f "$source" ] || { echo "build: $source not found" >&2; exit 1; }
bins="${MTP_REF_LLAMA_BINS:-$root/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64}"
bundle="$root/node_modules/node-llama-cpp/llama/gitRelease.bundle"
for f in libllama.v0.5.0.so libggml.v0.5.0.so libggml-base.so; do
  if [ ! -f "$bins/$f" ]; then
    echo "mtp-ref build: $bins/$f not found (node-llama-cpp's linux-x64 prebuilt; run npm install, or set MTP_REF_LLAMA_BINS)" >&2
    exit 1
  fi
done
if [ ! -f "$bundle" ]; then
  echo "mtp-ref build: $bundle not found (node-llama-cpp's bundled llama.cpp source)" >&2
  exit 1
fi
command -v g++ >/dev/null || { echo "mtp-ref build: g++ not found" >&2; exit 1; }
mkdir -p "$out"
src="$out/llama-headers"
if [ ! -f "$src/src/llama-ext.h" ]; then
  # Only the headers are needed: check those out of the bundle, then drop the clone.
  rm -rf "$src" "$out/llama.cpp.clone"
  git clone -q --no-checkout "$bundle" "$out/llama.cpp.clone"
  git -C "$out/llama.cpp.clone" checkout -q HEAD -- include ggml/include src/llama-ext.h
  mkdir -p "$src/src" "$src/ggml"
  mv "$out/llama.cpp.clone/include" "$src/include"
  mv "$out/llama.cpp.clone/ggml/include" "$src/ggml/include"
  mv "$out/llama.cpp.clone/src/llama-ext.h" "$src/src/llama-ext.h"
  rm -rf "$out/llama.cpp.clone"
fi
g++ -std=c++17 -O2 -Wall -Wno-deprecated-declarations \
  -I"$src/include" -I"$src/ggml/include" -I"$src/src" -I"$here/.." \
  "$source" -o "$out/$name.tmp" \
  -L"$bins" -Wl,-rpath,"$bins" -l:libllama.v0.5.0.so -l:libggml.v0.5.0.so -l:libggml-base.so -ldl
mv "$out/$name.tmp" "$out/$name"
echo "$out/$name"
