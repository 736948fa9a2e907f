#!/usr/bin/env bash
# A kind cluster with threadline installed from the chart, for the e2e suite and by hand.
#
#   scripts/kind-up.sh            # cluster + image + chart (idempotent: reuses what exists)
#   scripts/kind-up.sh cluster    # only the kind cluster (tests/e2e/kind-config.yaml)
#   scripts/kind-up.sh image      # build the image (scripts/build-image.sh) and `kind load` it
#   scripts/kind-up.sh install    # helm upgrade --install with charts/threadline/ci/kind-values.yaml
#
# Traffic: http://127.0.0.1:30080 (the Service's NodePort, mapped by the kind config), with the
# header `X-API-Key: $(cat .cache/kind-api-key)`. The e2e suite (tests/e2e) creates the cluster
# itself through pytest-kubernetes and runs only the `install` step of this script, handing it
# KUBECONFIG and API_KEYS, and EXTRA_VALUES (a values file applied after kind-values.yaml; the
# suite's graphs for its LangGraph-API mode). scripts/kind-down.sh deletes the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER=${KIND_CLUSTER:-threadline-e2e}
IMAGE=${IMAGE:-threadline:dev}
RELEASE=${RELEASE:-threadline}
NAMESPACE=${NAMESPACE:-default}
KEY_FILE=${KEY_FILE:-.cache/kind-api-key}
step=${1:-all}

need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { echo "kind-up: $tool is not installed" >&2; exit 1; }
  done
}

cluster() {
  need docker kind kubectl
  docker info >/dev/null 2>&1 || { echo "kind-up: no Docker engine answers (docker info)" >&2; exit 1; }
  if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    echo "kind-up: cluster $CLUSTER exists"
  else
    kind create cluster --name "$CLUSTER" --config tests/e2e/kind-config.yaml --wait 180s
  fi
}

image() {
  need docker kind
  IMAGE=$IMAGE scripts/build-image.sh
  kind load docker-image "$IMAGE" --name "$CLUSTER"
}

install() {
  need helm kubectl
  local api_keys=${API_KEYS:-}
  if [ -z "$api_keys" ]; then
    mkdir -p "$(dirname "$KEY_FILE")"
    [ -s "$KEY_FILE" ] || python3 -c 'import secrets; print(secrets.token_urlsafe(24))' >"$KEY_FILE"
    api_keys="kind:$(tr -d '\n' <"$KEY_FILE" | sha256sum | cut -d' ' -f1)"
  fi
  local extra=()
  [ -z "${EXTRA_VALUES:-}" ] || extra=(-f "$EXTRA_VALUES")
  local context=()
  [ -n "${KUBECONFIG:-}" ] || context=(--kube-context "kind-$CLUSTER")
  helm upgrade --install "$RELEASE" charts/threadline \
    "${context[@]}" --namespace "$NAMESPACE" \
    -f charts/threadline/ci/kind-values.yaml "${extra[@]}" \
    --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" \
    --set-string secret.apiKeys="$api_keys" \
    --wait --timeout 10m
  local kctx=()
  [ -n "${KUBECONFIG:-}" ] || kctx=(--context "kind-$CLUSTER")
  kubectl "${kctx[@]}" --namespace "$NAMESPACE" rollout status "deployment/$RELEASE" --timeout=300s
  echo "kind-up: threadline on http://127.0.0.1:30080"
}

case "$step" in
  cluster) cluster ;;
  image) image ;;
  install) install ;;
  all) cluster; image; install ;;
  *) echo "usage: $0 [cluster|image|install|all]" >&2; exit 2 ;;
esac
