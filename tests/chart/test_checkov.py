"""checkov (offline) over the rendered chart and overlays: no failed check unless skipped with a
written reason (.checkov.yaml, or a `checkov.io/skipN` annotation on the object)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from chart.bundle import CI_VALUES, OVERLAYS, REPO, helm, kubectl

pytestmark = pytest.mark.chart

CONFIG = REPO / ".checkov.yaml"


def test_every_skip_has_a_reason() -> None:
    lines = CONFIG.read_text().splitlines()
    skips = yaml.safe_load(CONFIG.read_text())["skip-check"]
    assert skips
    for check in skips:
        (index,) = [i for i, line in enumerate(lines) if line.strip() == f"- {check}"]
        assert lines[index - 1].strip().startswith("#"), f"{check} needs a reason above it"


def test_checkov(tmp_path: Path) -> None:
    chart = REPO / "charts" / "threadline"
    helm_out = helm("template", "t", str(chart)).stdout
    (tmp_path / "chart-defaults.yaml").write_text(helm_out)
    for values in CI_VALUES:
        out = helm("template", "t", str(chart), "-f", str(values)).stdout
        (tmp_path / f"chart-{values.name}").write_text(out)
    for overlay in OVERLAYS:
        out = kubectl("kustomize", str(REPO / "deployments" / "overlays" / overlay)).stdout
        (tmp_path / f"kustomize-{overlay}.yaml").write_text(out)
    checkov = Path(sys.executable).with_name("checkov")
    proc = subprocess.run(
        [str(checkov), "-d", str(tmp_path), "--config-file", str(CONFIG), "-o", "json"],
        check=False, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    report = json.loads(proc.stdout)
    reports = report if isinstance(report, list) else [report]
    failed = [
        f"{c['check_id']} {c['check_name']}: {c['resource']} ({Path(c['file_path']).name})"
        for r in reports
        for c in r["results"]["failed_checks"]
    ]
    assert not failed, "\n".join(failed)
    passed = sum(r["summary"]["passed"] for r in reports)
    assert passed > 100, "checkov saw the manifests"
    # per-object skips: `checkov.io/skipN: CHECK_ID=reason`, the reason in words
    for path in tmp_path.glob("*.yaml"):
        for doc in filter(None, yaml.safe_load_all(path.read_text())):
            for key, value in (doc["metadata"].get("annotations") or {}).items():
                if key.startswith("checkov.io/skip"):
                    assert re.fullmatch(r"CKV2?_K8S_\d+=\S.{15,}", value), (
                        path.name,
                        value,
                    )
