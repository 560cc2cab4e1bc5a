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

# --- npm packages --------------------------------------------------------------------------------
# node-llama-cpp (the parity reference) ships its prebuilt llama.cpp inside npm packages; its
# download step must stay off (no network beyond the registry).
export NODE_LLAMA_CPP_SKIP_DOWNLOAD=true
export NX_DAEMON=false NX_NO_CLOUD=true NEXT_TELEMETRY_DISABLED=1
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  # `npm install` rather than `npm ci`: node-llama-cpp lists optional per-platform packages that
  # the registry does not serve for every platform, which `npm ci` reports as a lock mismatch.
  # The lock file still pins every package that is installed.
  say "npm install (from package-lock.json)"
  npm install --no-audit --no-fund --loglevel=error
fi

# --- builds (Nx caches them; native first since everything that computes depends on it) --------
say "building (native core, TypeScript packages, web console)"
npx nx run-many -t build --outputStyle=static
say "ready"
