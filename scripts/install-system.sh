#!/usr/bin/env bash
# System packages the tests need: Redis, PostgreSQL, the image tools (podman, buildah,
# debootstrap), node and Debian's chromium for the JavaScript-client and browser tests, zsh for
# the README's snippets.
# Installs only what is missing; a no-op on a machine that has them. It never starts, stops or
# disables a service: the tests start their own Redis and PostgreSQL on free ports, and a Redis
# or PostgreSQL you already run is left alone. Packages it installs are kept from starting their
# servers (a policy-rc.d for the length of the apt-get call, where none exists).
set -euo pipefail

need=()
command -v redis-server >/dev/null || need+=(redis-server)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)
command -v podman >/dev/null || need+=(podman)
command -v buildah >/dev/null || need+=(buildah)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v runuser >/dev/null || need+=(util-linux)
command -v node >/dev/null || need+=(nodejs npm)
command -v chromium >/dev/null || need+=(chromium)
command -v zsh >/dev/null || need+=(zsh)   # the README's snippets are run in zsh too (macOS's shell)

if ((${#need[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing: ${need[*]}"
  policy=/usr/sbin/policy-rc.d
  if [ ! -e "$policy" ]; then
    # exit 101: "action forbidden" to invoke-rc.d, so the new packages' servers are not started
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
    $sudo chmod 0755 "$policy"
    trap '$sudo rm -f "$policy"' EXIT
  fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The JavaScript clients the tests drive (tests/js/package.json, pinned by its lock file).
# --ignore-scripts: puppeteer-core drives Debian's chromium and must not fetch a browser of its own.
js=$(dirname "$0")/../tests/js
if [ ! -d "$js/node_modules" ] || [ "$js/package-lock.json" -nt "$js/node_modules" ]; then
  (cd "$js" && npm ci --no-audit --no-fund --ignore-scripts --silent && touch node_modules)
fi
