"""The release (.github/workflows/release.yml → scripts/release.sh) as far as it runs here: the
version checks, `helm package`, and the plan of pushes, with `--dry-run --no-build` (the image
build itself is `make release-dry-run`, and `make image-test` builds the same Dockerfile). The
packaged chart's default image is the image the release publishes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from chart.bundle import CHART, REPO, helm, load_docs, one, tool

pytestmark = pytest.mark.chart

VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
WORKFLOW = REPO / ".github" / "workflows" / "release.yml"


def release(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    tool("helm")  # installed into .tools/bin when missing
    return subprocess.run(
        ["scripts/release.sh", "--dry-run", "--no-build", *args],
        cwd=REPO,
        env={**os.environ, "DIST": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_dry_run_packages_the_chart_and_plans_the_pushes(tmp_path: Path) -> None:
    done = release(tmp_path, f"v{VERSION}")
    assert done.returncode == 0, done.stderr
    package = tmp_path / f"threadline-{VERSION}.tgz"
    assert package.is_file()
    image = f"ghcr.io/threadline/threadline:{VERSION}"
    for pushed in (image, f"{image}-providers", "ghcr.io/threadline/threadline:latest"):
        assert f"would run: docker push {pushed}\n" in done.stdout, done.stdout
    assert f"would run: helm push {package} oci://ghcr.io/threadline/charts" in done.stdout
    # The packaged chart, installed as a user would (`helm install ... oci://…`), pulls that image.
    docs = load_docs(helm("template", "t", str(package), "--set", "secret.apiKeys=a:" + "0" * 64).stdout)
    container = one(docs, "Deployment", "t-threadline")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == image


def test_the_tag_defaults_to_the_charts_app_version(tmp_path: Path) -> None:
    done = release(tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"release: v{VERSION} -> image ghcr.io/threadline/threadline:{VERSION}" in done.stdout


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["v9.9.9"], {}, "tag v9.9.9 but charts/threadline/Chart.yaml version is"),
        (["9.9.9"], {}, "is not vX.Y.Z"),
        ([], {"REGISTRY": "ghcr.io/someone"}, "not what this publishes (ghcr.io/someone/threadline)"),
    ],
)
def test_a_release_that_would_publish_the_wrong_thing_stops(tmp_path: Path, args, env, message) -> None:
    done = release(tmp_path, *args, **env)
    assert done.returncode != 0
    assert message in done.stderr
    assert not list(tmp_path.glob("*.tgz"))


def test_a_pre_release_does_not_move_latest(tmp_path: Path) -> None:
    # a copy of what the script reads, whose versions say X.Y.Z-rc.1
    tree = tmp_path / "tree"
    shutil.copytree(CHART, tree / "charts" / "threadline")
    for rel in ("scripts/release.sh", "service/pyproject.toml", "service/threadline/__init__.py"):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, tree / rel)
    for rel in ("charts/threadline/Chart.yaml", "service/pyproject.toml", "service/threadline/__init__.py"):
        path = tree / rel
        path.write_text(
            path.read_text()
            .replace(f'"{VERSION}"', f'"{VERSION}-rc.1"')
            .replace(f"version: {VERSION}", f"version: {VERSION}-rc.1")
        )
    (tree / ".tools").symlink_to(REPO / ".tools")
    done = subprocess.run(
        [str(tree / "scripts/release.sh"), "--dry-run", "--no-build"],
        env={**os.environ, "DIST": str(tmp_path / "dist")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"docker push ghcr.io/threadline/threadline:{VERSION}-rc.1\n" in done.stdout
    assert ":latest" not in done.stdout
    assert (tmp_path / "dist" / f"threadline-{VERSION}-rc.1.tgz").is_file()


def test_the_workflow_runs_the_script_on_a_tag() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    assert workflow[True]["push"]["tags"] == ["v*.*.*"]  # YAML 1.1 reads `on` as True
    steps = workflow["jobs"]["release"]["steps"]
    runs = [step.get("run", "") for step in steps]
    assert any('scripts/release.sh "${GITHUB_REF_NAME}"' in r for r in runs)
    assert any("make release-dry-run" in r for r in runs)
    assert workflow["permissions"]["packages"] == "write"
    script = (REPO / "scripts" / "release.sh").read_text()
    assert "--sbom=true --provenance=mode=max --push" in script
