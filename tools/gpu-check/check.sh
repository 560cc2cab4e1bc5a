#!/bin/bash
# The VRAM tier on a real GPU (packed by pack.sh): the C++ device tests, memcheck, then kail on a
# 4-layer Qwen3-30B-A3B-shaped Q4_K model written there: the same tokens in RAM, streaming with a
# VRAM tier (given, and the profile's default) and streaming from storage alone, two streaming
# models sharing the profiled GPU in one engine (two-models.js), and decode speeds.
#   bash .dev/check.sh [THREADS]     (default 8)
cd "$(dirname "$0")/root" || exit 1
LOG=${OUT:-$(pwd)/..}
T=${1:-8}
exec > >(tee "$LOG/check-log.txt") 2>&1
s() { echo; echo "=== $* ($(date +%T))"; }
s machine; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('../node.xz'), open('/tmp/kail-node','wb'))" && chmod +x /tmp/kail-node
s test-cuda; ../bin/test-cuda; echo "rc $?"
s test-expert-stream; timeout 90 ../bin/test-expert-stream 2>&1 | tail -3; echo "rc ${PIPESTATUS[0]}"
if command -v compute-sanitizer > /dev/null; then s memcheck; timeout 120 compute-sanitizer --tool memcheck ../bin/test-cuda 2>&1 | tail -2; echo "rc ${PIPESTATUS[0]}"; fi
K="/tmp/kail-node apps/cli/bin/kail.js"
M=/tmp/kail-gpu-check.gguf
s gen; /tmp/kail-node tools/dist/gen-model.js --preset bench-qwen3-30b-a3b-shaped --layers 4 --type Q4_K --out $M 2>&1 | tail -1
s profile; timeout 90 $K profile --data-dir /tmp/kail-check-profile 2>&1 | grep -E "^(gpus|default --vram)"
P="Once upon a time in a land far away"
for c in "ram:" "vram:--ram 1G --vram 4G" "storage:--ram 1G" "profiled:--ram 1G"; do
  n=${c%%:*}; s "run $n"; timeout 90 $K run -m $M -p "$P" -n 48 -t "$T" --data-dir /tmp/kail-check-$([ $n = profiled ] && echo profile || echo $n) ${c#*:} --json > "$LOG/run-$n.json"; echo "rc $?"
done
python3 - "$LOG" <<'PY'
import json, os, sys
o = sys.argv[1]
r = {}
for n in ['ram', 'vram', 'storage', 'profiled']:
    try:
        r[n] = json.load(open(os.path.join(o, f'run-{n}.json')))
    except ValueError:
        print(n, 'gave no result (its error is above)')
for n in [x for x in ['vram', 'storage', 'profiled'] if x in r and 'ram' in r]:
    st = r[n]['stream']
    print(n, 'same tokens as in RAM:', r[n]['tokens'] == r['ram']['tokens'], '| tg t/s', round(r[n]['timings']['gen_tps'], 2),
          '| storage reads', st['reads'], '| VRAM fills', st['vramReads'], f"({st['vramBytes'] / 1e9:.2f} GB in {st['vramSeconds']:.3f} s)", f"| VRAM tier {st['vramCapacityBytes'] / 2**30:.2f} GiB")
PY
# Two streaming models in one engine, the profile's GPU memory cut to 2 GiB: the first tier holds
# every expert (1.27 GiB), the second what is left.
s "two models"; timeout 120 /tmp/kail-node tools/gpu-check/two-models.js $M /tmp/kail-check-profile $((2 << 30)) $((1 << 30)) "$T"; echo "rc $?"
for c in "ram:" "vram:--ram 1G --vram 4G" "storage:--ram 1G"; do
  s "bench ${c%%:*}"; timeout 150 $K bench -m $M -p 16 -n 32 -t "$T" --feed random --parallel 1,4,16 --data-dir /tmp/kail-check-bench ${c#*:} 2>&1 | tail -4
done
rm -f $M
s end
