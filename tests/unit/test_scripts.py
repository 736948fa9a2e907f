"""Every shell script in scripts/ is executable and parses (bash -n; shellcheck where installed)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SCRIPTS = sorted((Path(__file__).resolve().parents[2] / "scripts").glob("*.sh"))


def test_the_bundle_and_kind_scripts_are_covered() -> None:
    names = {s.name for s in SCRIPTS}
    assert {"build-image.sh", "image-test.sh", "install-tools.sh", "kind-up.sh", "kind-down.sh"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_parses(script: Path) -> None:
    assert script.stat().st_mode & 0o111, f"{script} is not executable"
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    if shutil.which("shellcheck"):
        lint = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True, check=False)
        assert lint.returncode == 0, lint.stdout


def test_bench_api_parses_and_has_help() -> None:
    """`make bench-api` is a benchmark (not run by the suite): at least it starts and explains itself."""
    script = SCRIPTS[0].parent / "bench_api.py"
    result = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, result.stderr
    for option in (
        "--levels",
        "--runs",
        "--seconds",
        "--servers",
        "--stateless",
        "--workloads",
        "--replicas",
    ):
        assert option in result.stdout
    assert "langgraph dev" in result.stdout and "floor" in result.stdout and "seed" in result.stdout


def test_bench_floor_serves_runs_wait_on_a_thread(tmp_path: Path) -> None:
    """`make bench-api`'s floor (FastAPI + graph.ainvoke + InMemorySaver) answers what the
    benchmark asks: a thread, then runs.wait on it, the chat's state growing."""
    import httpx

    from servers import free_port, wait_for_port

    scripts = SCRIPTS[0].parent
    port = free_port()
    config = scripts / "bench_chat" / "langgraph.json"
    proc = subprocess.Popen(
        [sys.executable, str(scripts / "bench_floor.py"), "--config", str(config), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, timeout=60)
        url = f"http://127.0.0.1:{port}"
        thread = httpx.post(f"{url}/threads", json={}).json()["thread_id"]
        body = {"assistant_id": "chat", "input": {"messages": [{"role": "human", "content": "hi"}]}}
        for turn in (1, 2):
            values = httpx.post(f"{url}/threads/{thread}/runs/wait", json=body, timeout=30).json()
            assert len(values["messages"]) == 2 * turn and values["messages"][-1]["type"] == "ai"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_bench_checkpointers_child_runs_a_conversation_in_its_own_process() -> None:
    """`make bench` runs each backend in a process of its own (`--child`): the protocol the
    parent drives, on the in-memory saver (no server needed)."""
    script = SCRIPTS[0].parent / "bench_checkpointers.py"
    help_ = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, check=False, timeout=60
    )
    assert help_.returncode == 0, help_.stderr
    assert "--interleaved" in help_.stdout and "--only" in help_.stdout
    turns = 12
    commands = ["calibrate", *(f"turn {t}" for t in range(1, turns + 1)), "finish"]
    result = subprocess.run(
        [sys.executable, str(script), "--child", "memory", "--turns", str(turns)],
        input="".join(c + "\n" for c in commands),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines[0] == {"ready": "memory"} and lines[1 : 1 + turns + 1] == [{}] * (turns + 1)
    measured = lines[-1]
    assert len(lines) == len(commands) + 1
    assert len(measured["per_turn"]) == turns and all(t > 0 for t in measured["per_turn"])
    assert set(measured["stored"]) == {"10", "12"} and measured["stored"]["12"] > measured["stored"]["10"]
    assert len(measured["written"]) == turns and measured["spent"] == []
    assert measured["get_ms"] > 0 and measured["max_rss_mb"] > 0


def test_profile_run_timeline_splits_a_run_into_round_trips_and_the_replicas_work() -> None:
    """`profile_run.py`'s timeline (where a run's wall time goes at concurrency 1): the phases
    of the runs in the most common order, averaged; a run in another order (a lease renewal
    in the middle) and marks outside a request are left out."""
    sys.path.insert(0, str(SCRIPTS[0].parent))
    from profile_run import phases

    create = "pipeline[EVALSHA records_redis_scripts.CREATE_RUN, EVALSHA scripts.LOAD]"
    put = "EVALSHA scripts.PUT"

    def run(start: float, work: float, trip: float, renewal: bool = False) -> list[tuple[float, str]]:
        marks = [
            (start, "request"),
            (start + work, f"send {create}"),
            (start + work + trip, f"reply {create}"),
        ]
        at = start + 2 * work + trip
        marks += [(at, f"send {put}"), (at + trip, f"reply {put}")]
        if renewal:
            marks += [
                (at + trip + 0.0001, "send EVALSHA lease.RENEW"),
                (at + trip + 0.0002, "reply EVALSHA lease.RENEW"),
            ]
        return [*marks, (at + trip + work, "response")]

    marks = [(0.0, "send HGETALL"), (0.00001, "reply HGETALL")]  # before any request
    marks += run(1.0, 0.001, 0.0002) + run(2.0, 0.003, 0.0004) + run(3.0, 0.5, 0.5, renewal=True)
    timeline = phases(marks)
    assert timeline is not None and (timeline["runs"], timeline["of"]) == (2, 3)
    labels = [label for label, _ in timeline["phases"]]
    assert labels == [
        "replica: request → CREATE_RUN + LOAD sent",
        "Redis: CREATE_RUN + LOAD",
        "replica: CREATE_RUN + LOAD answered → PUT sent",
        "Redis: PUT",
        "replica: PUT answered → response",
    ]
    seconds = [s for _, s in timeline["phases"]]
    assert seconds == pytest.approx([0.002, 0.0003, 0.002, 0.0003, 0.002])
    assert phases([(0.0, "send HGETALL"), (0.1, "reply HGETALL")]) is None
