#!/usr/bin/env bash
# Build the service image from service/Dockerfile (context: the repository root).
#
#   scripts/build-image.sh                 # -> threadline:dev
#   IMAGE=threadline:1.2.3 scripts/build-image.sh
#   EXTRAS=openai,anthropic scripts/build-image.sh      # with model provider packages
#
# Docker when a Docker engine answers (`docker info`), else podman. With podman there may be no
# registry to pull a base image from, so the base is made with debootstrap, imported as
# localhost/base:bookworm once and reused (BASE_IMAGE=... overrides it; PULL_BASE=1 uses the
# Dockerfile's public default instead).
#
# pip inside the build must reach the package index this machine uses: its index settings are
# read from `pip config list` and PIP_* and passed as build args (nothing host-specific is
# committed). file:// indexes are skipped: they are not visible inside the build.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-threadline:dev}
BASE_CACHE_TAG=localhost/base:bookworm
PYTHON=${PYTHON:-python3}

# --- pip settings -> build args --------------------------------------------------------------
pip_conf() {  # pip_conf KEY: the value of global./install. KEY from pip config (env wins)
  "$PYTHON" -m pip config list 2>/dev/null |
    sed -n "s/^[^.]*\.$1='\(.*\)'$/\1/p" | tail -n 1
}
http_only() { tr ' ' '\n' | grep -E '^https?://' | paste -sd' ' - || true; }
index_url=${PIP_INDEX_URL:-$(pip_conf index-url)}
extra_index=${PIP_EXTRA_INDEX_URL:-$(pip_conf extra-index-url)}
trusted=${PIP_TRUSTED_HOST:-$(pip_conf trusted-host)}
build_args=()
index_url=$(printf '%s' "$index_url" | http_only)
extra_index=$(printf '%s' "$extra_index" | http_only)
[ -n "$index_url" ] && build_args+=(--build-arg "PIP_INDEX_URL=$index_url")
[ -n "$extra_index" ] && build_args+=(--build-arg "PIP_EXTRA_INDEX_URL=$extra_index")
[ -n "$trusted" ] && build_args+=(--build-arg "PIP_TRUSTED_HOST=$trusted")
[ -n "${EXTRAS:-}" ] && build_args+=(--build-arg "EXTRAS=$EXTRAS")
# Extra build arguments (scripts/release.sh: OCI labels), one `--build-arg` word each.
read -r -a more_args <<<"${BUILD_ARGS:-}"
for arg in "${more_args[@]}"; do build_args+=(--build-arg "$arg"); done

started=$(date +%s)
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  [ -n "${BASE_IMAGE:-}" ] && build_args+=(--build-arg "BASE_IMAGE=$BASE_IMAGE")
  echo "build-image: docker build -t $IMAGE"
  docker build -f service/Dockerfile -t "$IMAGE" "${build_args[@]}" .
else
  command -v podman >/dev/null || { echo "build-image: neither a Docker engine nor podman (run: make install-system)" >&2; exit 1; }
  if [ -z "${BASE_IMAGE:-}" ] && [ "${PULL_BASE:-0}" != 1 ]; then
    BASE_IMAGE=$BASE_CACHE_TAG
    if ! podman image exists "$BASE_IMAGE"; then
      command -v debootstrap >/dev/null || { echo "build-image: debootstrap missing (run: make install-system)" >&2; exit 1; }
      rootfs=$(mktemp -d /tmp/threadline-base.XXXXXX)
      trap 'rm -rf "$rootfs"' EXIT
      echo "build-image: debootstrap bookworm -> $BASE_IMAGE (once; cached in podman's store)"
      debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        bookworm "$rootfs" >/dev/null
      rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
      tar -C "$rootfs" -c . | podman import - "$BASE_IMAGE" >/dev/null
      rm -rf "$rootfs"
      trap - EXIT
    fi
  fi
  [ -n "${BASE_IMAGE:-}" ] && build_args+=(--build-arg "BASE_IMAGE=$BASE_IMAGE")
  # This network's certificate authority: the host's bundle, mounted for the RUN steps only.
  extra=()
  if [ -d /etc/ssl/certs ]; then
    extra+=(-v /etc/ssl/certs:/etc/ssl/certs:ro)
    [ -f /etc/ssl/certs/ca-certificates.crt ] &&
      build_args+=(--build-arg PIP_CERT=/etc/ssl/certs/ca-certificates.crt)
  fi
  echo "build-image: podman build -t $IMAGE (base $BASE_IMAGE)"
  podman build --isolation chroot --network host "${extra[@]}" \
    -f service/Dockerfile -t "$IMAGE" "${build_args[@]}" .
fi
echo "build-image: $IMAGE built in $(( $(date +%s) - started ))s"
