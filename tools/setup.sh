#!/usr/bin/env bash
# One-time (and idempotent) set-up for a fresh clone: system packages, npm packages, native build,
# TypeScript builds. The README's two commands both start with this.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

# --- system packages (Debian) -------------------------------------------------------------------
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
command -v make >/dev/null || need+=(make)
command -v python3 >/dev/null || need+=(python3)
# The HTTPS tests make a self-signed certificate with openssl.
command -v openssl >/dev/null || need+=(openssl)
# The web console's end-to-end test drives Debian's Chromium (playwright-core, executablePath /usr/bin/chromium).
[ -x /usr/bin/chromium ] || need+=(chromium)
node_prefix=$(dirname "$(dirname "$(command -v node)")")
[ -f "$node_prefix/include/node/node_api.h" ] || [ -n "${npm_config_nodedir:-}" ] || need+=(libnode-dev)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing Debian packages: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "[setup] missing system packages: ${need[*]} (install them with your package manager)" >&2
    exit 1
  fi
fi

# Optional: Debian's gRPC for Python, used by tools/clients/python and its test (which skips,
# saying so, without them). Installed only where apt-get runs as root; never fails the set-up.
if command -v dpkg >/dev/null && ! { dpkg -s python3-grpcio && dpkg -s python3-grpc-tools; } >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing Debian packages: python3-grpcio python3-grpc-tools"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-grpcio python3-grpc-tools; } >/dev/null ||
      echo "[setup] could not install python3-grpcio/python3-grpc-tools; the Python client test will skip" >&2
  else
    echo "[setup] note: python3-grpcio and python3-grpc-tools are not installed; the Python client test will skip" >&2
  fi
fi

# --- npm packages --------------------------------------------------------------------------------
# node-llama-cpp (the parity reference) ships its prebuilt llama.cpp inside npm packages; its
# download step must stay off (no network beyond the registry).
export NODE_LLAMA_CPP_SKIP_DOWNLOAD=true
export NX_DAEMON=false NX_NO_CLOUD=true NEXT_TELEMETRY_DISABLED=1
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  # `npm install` rather than `npm ci`: node-llama-cpp lists optional per-platform packages that
  # the registry does not serve for every platform, which `npm ci` reports as a lock mismatch.
  # The lock file still pins every package that is installed.
  # better-sqlite3 (the API key store) compiles SQLite from source during the install (no prebuilt
  # binary can be downloaded here): at -O1 it takes half the time of its default -O3 (80 s against
  # 167 s on a 2-core machine), and the key store runs a few small queries per request. The CFLAGS
  # of node-gyp's Makefile come after the package's own flags, so they win; a CFLAGS set by the
  # caller is kept.
  say "npm install (from package-lock.json)"
  CFLAGS="${CFLAGS:--O1}" npm install --no-audit --no-fund --loglevel=error
fi

# --- better-sqlite3 (API key store): npm runs no install scripts here and prebuild-install cannot
# download, so its native module is built from source with npm's own node-gyp and the local Node
# headers (the same --nodedir packages/core-native/scripts/build-native.js uses).
if ! node -e "require('better-sqlite3')(':memory:').close()" >/dev/null 2>&1; then
  say "building better-sqlite3 from source (node-gyp, Node headers in $node_prefix)"
  gyp=""
  for c in "$(npm root -g)/npm/node_modules/node-gyp/bin/node-gyp.js" \
           "$(dirname "$(readlink -f "$(command -v npm)")")/../node_modules/node-gyp/bin/node-gyp.js" \
           node_modules/node-gyp/bin/node-gyp.js; do
    [ -f "$c" ] && { gyp="$c"; break; }
  done
  [ -n "$gyp" ] || { echo "[setup] node-gyp not found (it ships with npm); cannot build better-sqlite3" >&2; exit 1; }
  nodedir="${npm_config_nodedir:-$node_prefix}"
  (cd node_modules/better-sqlite3 && CFLAGS="${CFLAGS:--O1}" node "$gyp" rebuild --release --nodedir="$nodedir" -j "$(nproc)" --loglevel=warn)
  node -e "require('better-sqlite3')(':memory:').close()"
fi

# --- builds (Nx caches them; native first since everything that computes depends on it) --------
say "building (native core, TypeScript packages, web console)"
npx nx run-many -t build --outputStyle=static
say "ready"
