"""The helm test's LangGraph API run, as the chart configures it (values.yaml and
ci/example-values.yaml ``tests.run``), made by the smoke tool against a real replica serving
the example graph: it passes on a good run and fails on a bad one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from client import API_KEY, API_KEYS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "refunds" / "langgraph.json"
CHART = ROOT / "charts" / "threadline"


def run_args(values: dict) -> list[str]:
    """The smoke arguments the chart's test pod adds for ``tests.run`` (templates/tests/pod.yaml)."""
    run = values["tests"]["run"]
    args = ["--run-assistant", run["assistant"], "--run-input", run["input"]]
    return args + (["--run-expect", run["expectKey"]] if run.get("expectKey") else [])


def smoke(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "THREADLINE_API_KEY": API_KEY}
    return subprocess.run(
        [sys.executable, "-m", "threadline", "smoke", "--url", url, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def replica(start_replica, tmp_path: Path):
    return start_replica(
        {
            "CHECKPOINT_BACKEND": "sqlite",
            "CHECKPOINT_SQLITE_PATH": str(tmp_path / "checkpoints.sqlite"),
            "SESSION_BACKEND": "memory",
            "API_KEYS": API_KEYS,
            "LANGGRAPH_CONFIG": str(EXAMPLE),
        },
        "helm-test",
    )


def test_the_default_run_on_chat_and_the_example_run_pass(replica) -> None:
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    example = yaml.safe_load((CHART / "ci" / "example-values.yaml").read_text())
    for values, graph in ((defaults, "chat"), (example, "refunds")):
        done = smoke(replica.url, *run_args(values))
        assert done.returncode == 0, done.stderr
        assert f"smoke: run on '{graph}' finished with keys" in done.stdout


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        # A name that is no graph is 422 naming the graphs, as langgraph-api answers it.
        (["--run-assistant", "no-such-graph"], 'answered 422: {"detail":"assistant_id: neither'),
        (
            ["--run-assistant", "refunds", "--run-input", '{"request": "hi"}', "--run-expect", "nope"],
            "did not finish",
        ),
        (["--run-assistant", "refunds", "--run-input", '{"unknown": 1}'], "answered 422"),
    ],
    ids=["unknown-graph", "missing-key", "bad-input"],
)
def test_a_bad_run_fails_the_helm_test(replica, args: list[str], reason: str) -> None:
    done = smoke(replica.url, *args)
    assert done.returncode == 1
    assert reason in done.stderr


def test_a_run_input_that_is_not_a_json_object_is_a_usage_error(replica) -> None:
    done = smoke(replica.url, "--run-assistant", "chat", "--run-input", "[1, 2]")
    assert done.returncode == 2 and "--run-input must be a JSON object" in done.stderr
