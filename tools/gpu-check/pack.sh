#!/bin/bash
# Packs what the GPU check (check.sh) needs to run on a machine that has a CUDA GPU but no Node.js
# and no node_modules: the node binary (xz), the files `kail run/bench/version/profile`, `gen-model`
# and two-models.js load (found by tracing require() here), the addon, and test-cuda / test-expert-stream built with
# CUDA. Run it after `bash tools/setup.sh`, on a machine with nvcc, from the repository root:
#   bash tools/gpu-check/pack.sh [OUT_DIR]       (default .dev, which .git/info/exclude should list)
# then on the GPU machine: bash OUT_DIR/check.sh  (writes OUT_DIR/../check-log.txt, or $OUT/ when set)
set -euo pipefail
ROOT=$(pwd)
DEV=$(realpath -m "${1:-.dev}")
[ -f apps/cli/dist/main.js ] || { echo "pack.sh: build first (bash tools/setup.sh)" >&2; exit 1; }
command -v nvcc > /dev/null || { echo "pack.sh: nvcc not found: the test binaries need a CUDA build" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cat > "$TMP/trace.js" <<JS
process.on('exit', () => require('fs').appendFileSync('$TMP/files.txt', Object.keys(require.cache).join('\n') + '\n'));
JS
K=(node -r "$TMP/trace.js" apps/cli/bin/kail.js)
node -r "$TMP/trace.js" tools/dist/gen-model.js --preset tiny-qwen3moe --type Q4_K --out "$TMP/m.gguf" > /dev/null 2>&1
"${K[@]}" version > /dev/null
"${K[@]}" run -m "$TMP/m.gguf" -p hi -n 2 --data-dir "$TMP/d" --json > /dev/null
"${K[@]}" run -m "$TMP/m.gguf" -p hi -n 2 --data-dir "$TMP/d" --ram 600M --json > /dev/null
"${K[@]}" bench -m "$TMP/m.gguf" -p 4 -n 2 --data-dir "$TMP/d" --ram 600M --parallel 1,2 > /dev/null
"${K[@]}" profile --data-dir "$TMP/d" --file-size 16M --seconds 0.05 > /dev/null 2>&1
node -r "$TMP/trace.js" tools/gpu-check/two-models.js "$TMP/m.gguf" "$TMP/d" 1000000000 600000000 > /dev/null
rm -rf "$DEV" && mkdir -p "$DEV/root" "$DEV/bin"
sort -u "$TMP/files.txt" | grep "^$ROOT/" | while read -r f; do
  r=${f#"$ROOT"/}; mkdir -p "$DEV/root/$(dirname "$r")"; cp "$f" "$DEV/root/$r"
done
cp package.json "$DEV/root/"
mkdir -p "$DEV/root/node_modules/@kailstream"
for p in apps/cli packages/engine packages/core-native packages/proto packages/scheduler tools; do
  mkdir -p "$DEV/root/$p" && cp "$p/package.json" "$DEV/root/$p/"
  ln -s "../../$p" "$DEV/root/node_modules/@kailstream/$(basename "$p")"
done
# Third-party packages the traced files came from, whole.
sort -u "$TMP/files.txt" | grep -o "^$ROOT/.*node_modules/\(@[^/]*/[^/]*\|[^@/][^/]*\)" | sort -u | while read -r d; do
  r=${d#"$ROOT"/}; rm -rf "${DEV:?}/root/$r"; mkdir -p "$DEV/root/$(dirname "$r")"; cp -r "$d" "$DEV/root/$r"
done
xz -T0 -6 -c "$(readlink -f "$(command -v node)")" > "$DEV/node.xz"
cmake -S packages/core-native -B "$TMP/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKAIL_CUDA=ON > /dev/null
cmake --build "$TMP/build" --target test-cuda test-expert-stream > /dev/null
cp "$TMP/build/test-cuda" "$TMP/build/test-expert-stream" "$DEV/bin/"
cp tools/gpu-check/check.sh "$DEV/"
mkdir -p "$DEV/root/tools/gpu-check" && cp tools/gpu-check/two-models.js "$DEV/root/tools/gpu-check/"
echo "packed $(du -sh "$DEV" | cut -f1) into $DEV"
