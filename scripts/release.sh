#!/usr/bin/env bash
# A release, as .github/workflows/release.yml runs it on a tag `vX.Y.Z`:
#   1. check that the tag, the chart's version and appVersion, pyproject's version and
#      threadline.__version__ all say X.Y.Z (and that the chart's default image is what this
#      publishes);
#   2. build the image twice: REGISTRY/threadline:X.Y.Z (the runtime; the chart's default) and
#      REGISTRY/threadline:X.Y.Z-providers (with every model provider extra), each also tagged
#      :latest / :latest-providers for a final release; pushed with an SBOM and provenance
#      attestation (docker buildx --sbom --provenance);
#   3. `helm package` the chart and push it to oci://REGISTRY/charts (threadline-X.Y.Z.tgz).
#
#   scripts/release.sh --dry-run [vX.Y.Z]              # everything but the pushes: local builds
#                                                      # (scripts/build-image.sh: docker or podman),
#                                                      # local tags, dist/threadline-X.Y.Z.tgz
#   scripts/release.sh --dry-run --no-build [vX.Y.Z]   # checks and the chart only (make test)
#   scripts/release.sh vX.Y.Z                          # CI: push (needs docker buildx and a login
#                                                      # to REGISTRY for docker and helm)
# The tag defaults to v<the chart's appVersion>. REGISTRY defaults to ghcr.io/threadline.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PWD/.tools/bin:$PATH

dry_run=0 build=1 tag=""
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry_run=1 ;;
    --no-build) build=0 ;;
    -*) echo "release: unknown option $arg" >&2; exit 2 ;;
    *) tag=$arg ;;
  esac
done
REGISTRY=${REGISTRY:-ghcr.io/threadline}
DIST=${DIST:-dist}
PYTHON=${PYTHON:-python3}
PROVIDERS=openai,anthropic,google-genai,ollama

chart_field() { sed -n "s/^$1: *\"\{0,1\}\([^\"]*\)\"\{0,1\}$/\1/p" charts/threadline/Chart.yaml; }
chart_version=$(chart_field version)
app_version=$(chart_field appVersion)
py_version=$(sed -n 's/^version = "\(.*\)"$/\1/p' service/pyproject.toml)
pkg_version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' service/threadline/__init__.py)
tag=${tag:-v$app_version}
version=${tag#v}

fail() { echo "release: $*" >&2; exit 1; }
[[ $tag =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || fail "tag $tag is not vX.Y.Z[-pre]"
for pair in "charts/threadline/Chart.yaml version=$chart_version" \
            "charts/threadline/Chart.yaml appVersion=$app_version" \
            "service/pyproject.toml version=$py_version" \
            "service/threadline/__init__.py __version__=$pkg_version"; do
  [ "${pair##*=}" = "$version" ] || fail "tag $tag but ${pair%=*} is ${pair##*=}: bump it first"
done
repository=$(sed -n 's/^  repository: *//p' charts/threadline/values.yaml | head -n 1)
[ "$repository" = "$REGISTRY/threadline" ] ||
  fail "the chart's image.repository is $repository, not what this publishes ($REGISTRY/threadline)"

image=$REGISTRY/threadline
final=1
[[ $version == *-* ]] && final=0   # a pre-release does not move :latest
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
labels=(VERSION="$version" REVISION="$revision")

run() {  # run CMD...: run it, or print it in a dry run
  if ((dry_run)); then printf 'release: would run:'; printf ' %q' "$@"; printf '\n'; else "$@"; fi
}

echo "release: $tag -> image $image:$version (+ -providers), chart oci://$REGISTRY/charts/threadline:$version"

# --- image ------------------------------------------------------------------------------------
for variant in "" "-providers"; do
  extras=""
  [ -n "$variant" ] && extras=$PROVIDERS
  tags=("$image:$version$variant")
  ((final)) && tags+=("$image:latest$variant")
  if ((dry_run)); then
    if ((build)); then
      IMAGE=${tags[0]} EXTRAS=$extras BUILD_ARGS="${labels[*]}" scripts/build-image.sh
      for extra_tag in "${tags[@]:1}"; do
        if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
          docker tag "${tags[0]}" "$extra_tag"
        else
          podman tag "${tags[0]}" "$extra_tag"
        fi
      done
      echo "release: built ${tags[*]}"
    fi
    for t in "${tags[@]}"; do run docker push "$t"; done
  else
    command -v docker >/dev/null && docker buildx version >/dev/null ||
      fail "a push needs docker buildx (the workflow sets it up)"
    tag_args=()
    for t in "${tags[@]}"; do tag_args+=(-t "$t"); done
    docker buildx build -f service/Dockerfile --platform "${PLATFORMS:-linux/amd64,linux/arm64}" \
      --build-arg "EXTRAS=$extras" --build-arg "VERSION=$version" --build-arg "REVISION=$revision" \
      --sbom=true --provenance=mode=max --push "${tag_args[@]}" .
  fi
done

# --- chart ------------------------------------------------------------------------------------
mkdir -p "$DIST"
helm lint --strict charts/threadline >/dev/null
helm package charts/threadline --version "$version" --app-version "$version" -d "$DIST" >/dev/null
chart=$DIST/threadline-$version.tgz
[ -f "$chart" ] || fail "helm package wrote no $chart"
echo "release: packaged $chart"
run helm push "$chart" "oci://$REGISTRY/charts"
echo "release: $tag done$( ((dry_run)) && echo ' (dry run: nothing pushed)')"
