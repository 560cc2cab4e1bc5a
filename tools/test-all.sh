#!/usr/bin/env bash
# Every test of the project: generated-code and boundary checks, the native core's CTest suite
# (plain and under AddressSanitizer), type checks, and every jest suite. Ends with one line
# "tests: N passed, N failed, N skipped" summing all of them.
set -uo pipefail
cd "$(dirname "$0")/.."
export NX_DAEMON=false NX_NO_CLOUD=true NEXT_TELEMETRY_DISABLED=1 NODE_LLAMA_CPP_SKIP_DOWNLOAD=true
rm -rf .test-results && mkdir -p .test-results
# The suites write the same small models many times: the GGUF writer keeps one copy of each recipe
# here for this run only (tools/src/models/file-cache.ts), emptied now and when the run ends.
export KAIL_TEST_MODEL_CACHE="$PWD/.test-results/model-cache"
trap 'rm -rf "$KAIL_TEST_MODEL_CACHE"' EXIT
status=0
step() {
  printf '\n\033[1m== %s\033[0m\n' "$1"
  shift
  "$@" || { echo "FAILED: $*"; status=1; }
}
step "generated gRPC code matches proto/" npx nx run proto:check-generated --outputStyle=static
step "dependency boundaries" npx nx run tools:check-boundaries --outputStyle=static
step "native core: CTest" bash -c 'npx nx run core-native:test-native --outputStyle=static 2>&1 | tee .test-results/ctest.log'
step "native core: CTest under AddressSanitizer" bash -c 'npx nx run core-native:test-native-asan --outputStyle=static 2>&1 | tee .test-results/ctest-asan.log'
step "type checks" npx nx run-many -t typecheck --outputStyle=static
step "jest suites" npx nx run-many -t test --outputStyle=static --parallel=1
node tools/scripts/test-summary.js .test-results || status=1
exit $status
