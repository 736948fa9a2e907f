#!/usr/bin/env bash
# Build the image, start its ENTRYPOINT + CMD, and check what Kubernetes will rely on:
#   /readyz answers 200, the server process runs as uid 10001, nothing is written to the root
#   filesystem (it is read-only under the chart), and `python -m threadline smoke` (from the
#   image, as the helm test runs it) passes a two-turn conversation.
# Docker when a Docker engine answers; else buildah (`podman run` fails here: rlimits), with
# `buildah from` + `buildah run --isolation chroot --network host`.
# Then, as a base image: examples/refunds (`FROM ${THREADLINE_IMAGE}`) is built on top of IMAGE,
# started the same way, and must serve its own graph: one LangGraph API run (POST /runs/wait)
# on graph `refunds`, from the smoke tool inside the image.
#   SKIP_BUILD=1 scripts/image-test.sh    # test an image built before
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${IMAGE:-threadline:dev}
EXAMPLE_IMAGE=${EXAMPLE_IMAGE:-threadline-example:dev}
PYTHON=${PYTHON:-python3}
# The example run: a question needs no human, so the run ends with an `answer`.
EXAMPLE_RUN=(--run-assistant refunds --run-input '{"request": "where is my parcel?"}' --run-expect answer)

[ "${SKIP_BUILD:-0}" = 1 ] || scripts/build-image.sh

port=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
api_key=$("$PYTHON" -c 'import secrets; print(secrets.token_urlsafe(24))')
api_hash=$(printf '%s' "$api_key" | sha256sum | cut -d' ' -f1)
work=$(mktemp -d /tmp/threadline-image-test.XXXXXX)
mkdir -p "$work/tmp" "$work/data"
chown 10001:10001 "$work/tmp" "$work/data" 2>/dev/null || chmod 0777 "$work/tmp" "$work/data"
env_args=(
  -e CHECKPOINT_BACKEND=sqlite -e CHECKPOINT_SQLITE_PATH=/data/checkpoints.sqlite
  -e SESSION_BACKEND=memory -e "API_KEYS=image-test:$api_hash" -e "PORT=$port"
  -e HOST=127.0.0.1 -e DRAIN_SECONDS=1 -e REPLICA_NAME=image-test
)
server_pid="" ctr="" docker_ctr="" example_ctr=""
cleanup() {
  set +e
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  [ -n "$ctr" ] && buildah rm "$ctr" >/dev/null
  [ -n "$example_ctr" ] && buildah rm "$example_ctr" >/dev/null
  [ -n "$docker_ctr" ] && docker rm -f "$docker_ctr" >/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "image-test: FAIL: $*" >&2; [ -f "$work/server.log" ] && tail -n 30 "$work/server.log" >&2; exit 1; }

wait_ready() {
  local deadline=$((SECONDS + 60)) code
  while ((SECONDS < deadline)); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz" || true)
    [ "$code" = 200 ] && return 0
    [ -n "$server_pid" ] && ! kill -0 "$server_pid" 2>/dev/null && fail "the server exited"
    sleep 0.5
  done
  fail "/readyz did not answer 200 within 60s (last: ${code:-none})"
}

if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  docker_ctr=$(docker run -d --read-only --network host -v "$work/tmp:/tmp" -v "$work/data:/data" \
    "${env_args[@]}" "$IMAGE")
  wait_ready
  echo "image-test: /readyz 200"
  uid=$(docker exec "$docker_ctr" sh -c 'awk "/^Uid:/{print \$2}" /proc/1/status')
  [ "$uid" = 10001 ] || fail "server runs as uid $uid, want 10001"
  echo "image-test: server uid 10001"
  docker run --rm --read-only --network host -e "THREADLINE_API_KEY=$api_key" --tmpfs /tmp \
    --entrypoint /opt/venv/bin/python "$IMAGE" -m threadline smoke --url "http://127.0.0.1:$port" \
    || fail "smoke"
  docker rm -f "$docker_ctr" >/dev/null
  docker_ctr=""
  # The example's base is a build argument (the published release by default): IMAGE here.
  docker build --build-arg "THREADLINE_IMAGE=$IMAGE" -t "$EXAMPLE_IMAGE" examples/refunds
  docker_ctr=$(docker run -d --read-only --network host -v "$work/tmp:/tmp" -v "$work/data:/data" \
    "${env_args[@]}" "$EXAMPLE_IMAGE")
  wait_ready
  docker run --rm --read-only --network host -e "THREADLINE_API_KEY=$api_key" --tmpfs /tmp \
    --entrypoint /opt/venv/bin/python "$EXAMPLE_IMAGE" -m threadline smoke --url "http://127.0.0.1:$port" \
    "${EXAMPLE_RUN[@]}" || fail "example smoke"
else
  ctr=$(buildah from --pull-never "$IMAGE")
  # Exactly what the image runs: ENTRYPOINT + CMD from its config.
  mapfile -t argv < <(buildah inspect --type container \
    --format '{{range .OCIv1.Config.Entrypoint}}{{println .}}{{end}}{{range .OCIv1.Config.Cmd}}{{println .}}{{end}}' "$ctr" | sed '/^$/d')
  echo "image-test: starting ${argv[*]} (uid from the image) on 127.0.0.1:$port"
  buildah run --isolation chroot --network host -v "$work/tmp:/tmp" -v "$work/data:/data" \
    "${env_args[@]}" "$ctr" -- "${argv[@]}" >"$work/server.log" 2>&1 &
  server_pid=$!
  wait_ready
  echo "image-test: /readyz 200"
  # chroot isolation shares the host's PID namespace: read the listener's uid from /proc.
  pid=$(ss -ltnpH "sport = :$port" | grep -o 'pid=[0-9]*' | head -n 1 | cut -d= -f2)
  [ -n "$pid" ] || fail "no process listens on $port"
  uid=$(awk '/^Uid:/{print $2}' "/proc/$pid/status")
  [ "$uid" = 10001 ] || fail "server (pid $pid) runs as uid $uid, want 10001"
  echo "image-test: server uid 10001 (pid $pid)"
  # Exec-form ENTRYPOINT: the listener is python itself, not a shell that would swallow SIGTERM.
  cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline")
  case "$cmd" in /opt/venv/bin/python*) ;; *) fail "the server process is '$cmd', not python" ;; esac
  buildah run --isolation chroot --network host -v "$work/tmp:/tmp" \
    -e "THREADLINE_API_KEY=$api_key" "$ctr" -- \
    /opt/venv/bin/python -m threadline smoke --url "http://127.0.0.1:$port" || fail "smoke"
  # SIGTERM starts the drain (DRAIN_SECONDS=1) and the process exits by itself.
  kill -TERM "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && fail "still running 10s after SIGTERM"
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
  echo "image-test: SIGTERM -> exited within 10s"
  # Read-only root filesystem: the container's writable layer must hold nothing the processes
  # wrote (buildah itself creates the mount points and /etc/hosts-style files listed here).
  root=$(buildah mount "$ctr")
  upper=${root%/merged}/diff
  if [ -d "$upper" ]; then
    written=$(cd "$upper" && find . -mindepth 1 \( -type f -o -type l \) \
      ! -path './etc/hosts' ! -path './etc/resolv.conf' ! -path './etc/hostname' \
      ! -path './run/*' ! -path './dev/*' ! -path './proc/*' ! -path './sys/*' | head -n 20)
    [ -z "$written" ] || fail "wrote to the root filesystem: $written"
    echo "image-test: nothing written outside /tmp and /data"
  fi
  buildah umount "$ctr" >/dev/null

  # --- as a base image: the example graph built on top ---------------------------------------
  extra=()
  [ -d /etc/ssl/certs ] && extra+=(-v /etc/ssl/certs:/etc/ssl/certs:ro)
  echo "image-test: building $EXAMPLE_IMAGE from examples/refunds on $IMAGE"
  # The example's base is a build argument (the published release by default): IMAGE here.
  podman build --isolation chroot --network host "${extra[@]}" --pull=never --build-arg "THREADLINE_IMAGE=$IMAGE" \
    -t "$EXAMPLE_IMAGE" examples/refunds >"$work/example-build.log" 2>&1 \
    || { tail -n 20 "$work/example-build.log" >&2; fail "example build"; }
  example_ctr=$(buildah from --pull-never "$EXAMPLE_IMAGE")
  config=$(buildah inspect --type container --format '{{range .OCIv1.Config.Env}}{{println .}}{{end}}' "$example_ctr" |
    sed -n 's/^LANGGRAPH_CONFIG=//p')
  [ "$config" = /graphs/refunds/langgraph.json ] || fail "the example image sets LANGGRAPH_CONFIG=$config"
  # A graph's own requirements install with the image's pip (as root, in a RUN step).
  buildah run --isolation chroot --user 0:0 "$example_ctr" -- /opt/venv/bin/python -m pip --version >/dev/null \
    || fail "no pip in the image for a graph's requirements"
  rm -rf "$work/data" && mkdir -p "$work/data"
  chown 10001:10001 "$work/data" 2>/dev/null || chmod 0777 "$work/data"
  buildah run --isolation chroot --network host -v "$work/tmp:/tmp" -v "$work/data:/data" \
    "${env_args[@]}" "$example_ctr" -- "${argv[@]}" >"$work/server.log" 2>&1 &
  server_pid=$!
  wait_ready
  echo "image-test: example /readyz 200 (LANGGRAPH_CONFIG=$config)"
  buildah run --isolation chroot --network host -v "$work/tmp:/tmp" \
    -e "THREADLINE_API_KEY=$api_key" "$example_ctr" -- \
    /opt/venv/bin/python -m threadline smoke --url "http://127.0.0.1:$port" "${EXAMPLE_RUN[@]}" \
    || fail "example smoke"
fi
echo "image-test: smoke passed (two turns, second saw the first)"
echo "image-test: example graph served from an image built FROM $IMAGE (one LangGraph API run)"
echo "image-test: OK"
