#!/usr/bin/env bash
# Delete the e2e kind cluster (scripts/kind-up.sh made it; KIND_CLUSTER names another).
set -euo pipefail
CLUSTER=${KIND_CLUSTER:-threadline-e2e}
command -v kind >/dev/null || { echo "kind-down: kind is not installed" >&2; exit 1; }
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  kind delete cluster --name "$CLUSTER"
else
  echo "kind-down: no cluster $CLUSTER"
fi
