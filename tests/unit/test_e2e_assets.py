"""The kind suite's assets, checked where the suite itself cannot run (no Docker, no kind):
the e2e tests collect, and the kind config and the GitHub workflow are valid YAML that agree
with the chart's kind values. Its scripts are checked with every other script in
tests/unit/test_scripts.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from e2e.test_kind_chaos import unavailable

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
KIND_CONFIG = ROOT / "tests/e2e/kind-config.yaml"
WORKFLOW = ROOT / ".github/workflows/kind-e2e.yml"
KIND_VALUES = ROOT / "charts/threadline/ci/kind-values.yaml"


def test_e2e_tests_collect() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "e2e", "-p", "no:cacheprovider",
         str(ROOT / "tests/e2e")],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "test_kind_chaos.py::test_force_deleted_pods_keep_every_conversation" in result.stdout
    assert "test_kind_chaos.py::test_force_deleted_pods_keep_every_run_through_the_sdk" in result.stdout


def test_the_sdk_modes_graph_renders_into_the_kind_release(tmp_path: Path) -> None:
    """What the kind suite installs for its LangGraph-API mode: kind-values.yaml plus the
    ``steps`` graph through ``graphs.langgraphJson``/``graphs.files`` (the real helm)."""
    from e2e.test_kind_chaos import STEPS_GRAPH, sdk_graph_values

    from chart.bundle import CHART, RELEASE, helm, load_docs

    extra = tmp_path / "graphs.yaml"
    extra.write_text(yaml.safe_dump(sdk_graph_values()))
    docs = load_docs(helm("template", RELEASE, str(CHART), "-f", str(KIND_VALUES), "-f", str(extra)).stdout)
    (graphs,) = [d for d in docs if d["kind"] == "ConfigMap" and "steps.py" in d.get("data", {})]
    assert graphs["data"]["steps.py"] == STEPS_GRAPH.read_text()
    config = [d for d in docs if d["kind"] == "ConfigMap" and "LANGGRAPH_CONFIG" in d.get("data", {})]
    assert config[0]["data"]["LANGGRAPH_CONFIG"] == "/etc/threadline/graphs/langgraph.json"


def test_kind_config_maps_the_node_port_to_loopback() -> None:
    config = yaml.safe_load(KIND_CONFIG.read_text())
    assert config["kind"] == "Cluster" and config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    mappings = [m for node in config["nodes"] for m in node.get("extraPortMappings", [])]
    assert mappings and all(m["listenAddress"] == "127.0.0.1" for m in mappings)
    from e2e.test_kind_chaos import CLUSTER, NODE_PORT

    assert config["name"] == CLUSTER
    assert {"containerPort": NODE_PORT, "hostPort": NODE_PORT}.items() <= mappings[0].items()
    if KIND_VALUES.exists():  # the chart's kind values expose that same NodePort
        service = yaml.safe_load(KIND_VALUES.read_text())["service"]
        assert service["type"] == "NodePort" and service["nodePort"] == NODE_PORT


def test_workflow_runs_make_kind_test_with_kind() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as True
    assert "pull_request" in triggers
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
    assert any(str(step.get("uses", "")).startswith("helm/kind-action@") for step in steps)
    assert any("make kind-test" in str(step.get("run", "")) for step in steps)
    assert all(job.get("timeout-minutes") for job in workflow["jobs"].values())
    kind_test = next(step for step in steps if "make kind-test" in str(step.get("run", "")))
    assert kind_test.get("env", {}).get("E2E_REQUIRED") == "1", "the kind job must not skip green"


@pytest.mark.skipif(unavailable() is None, reason="Docker and kind are here: the suite would run for real")
def test_required_e2e_fails_without_docker() -> None:
    """With E2E_REQUIRED=1 a machine without Docker/kind fails the suite instead of skipping it."""
    env = {**os.environ, "E2E_REQUIRED": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-m", "e2e", "-p", "no:cacheprovider",
         str(ROOT / "tests/e2e")],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "E2E_REQUIRED=1 but kind e2e cannot run" in result.stdout
