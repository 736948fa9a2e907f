"""The v2 streaming protocol (``POST /threads/{id}/commands``, ``POST|GET
/threads/{id}/stream/events``) driven by the real ``@langchain/langgraph-sdk`` 1.15 under node
(``tests/js/v2_stream.mjs``: its ``client.threads.stream()`` and the wire through ``fetch``),
against two replicas on Redis — a run started on A, its events read on B while A executes it,
the connection cut and resumed with ``Last-Event-ID`` and with ``since`` — and against the
SQLite default. The same driver passes against ``langgraph dev`` (langgraph-api 0.16.7), but
for ``Last-Event-ID``, which it ignores on this POST route (threadline resumes with either)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from client import API_KEY, API_KEYS, OTHER_KEY
from servers import redis_env, wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "tests" / "js" / "v2_stream.mjs"
GRAPHS = Path(__file__).resolve().parent / "graphs" / "langgraph.json"


def drive(mode: str, url_a: str, url_b: str) -> dict:
    """Run the node driver; its checks by name."""
    node = shutil.which("node")
    assert node, "node is installed by scripts/install-system.sh"
    done = subprocess.run(
        [node, str(DRIVER), url_a, url_b, API_KEY, mode],
        cwd=DRIVER.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return {c["check"]: c["value"] for c in map(json.loads, done.stdout.splitlines())}


@pytest.fixture(params=["redis", "sqlite"])
def urls(request: pytest.FixtureRequest, start_replica, tmp_path: Path) -> tuple[str, str]:
    extra = {"LANGGRAPH_CONFIG": str(GRAPHS), "MAX_STREAMS": "3"}
    if request.param == "redis":
        env = redis_env(request.getfixturevalue("redis_server"), **extra)
        return start_replica(env, "a").url, start_replica(env, "b").url
    env = {
        "CHECKPOINT_BACKEND": "sqlite",
        "CHECKPOINT_SQLITE_PATH": str(tmp_path / "checkpoints.sqlite"),
        "SESSION_BACKEND": "memory",
        "API_KEYS": API_KEYS,
        **extra,
    }
    url = start_replica(env, "sqlite").url
    return url, url


def test_events_of_a_run_read_on_another_replica_resume_after_a_cut(urls) -> None:
    checks = drive("raw", *urls)
    assert checks["run.start"] == {"status": 200, "type": "success", "has_run_id": True}
    assert checks["resume"] == {
        "first": 4,
        "header_continues": True,
        "since_continues": True,
        "seqs_increase": True,
        "sse_id_is_seq": True,
    }
    assert checks["lifecycle"] == ["running", "completed"]
    assert checks["last_values_done"] == [f"v{i}" for i in range(1, 7)]
    assert checks["filtered"] == ["lifecycle"]  # updates asked for; the v3 stream has none here
    assert checks["bad_channel"] == 400
    assert checks["unknown_command"] == {"status": 200, "type": "error", "error": "unknown_command"}


def test_the_sdks_thread_stream_sees_an_interrupt_and_its_answer(urls) -> None:
    checks = drive("run", *urls)
    assert checks == {
        "asked": ["ok?"],
        "ended": ["interrupted"],
        "respond": "success",
        "answers": ["ok?=yes"],
    }


def test_another_principals_thread_is_404_and_streams_are_bounded(urls) -> None:
    url = urls[1]
    alice = httpx.Client(base_url=url, headers={"x-api-key": API_KEY}, timeout=10)
    bob = httpx.Client(base_url=url, headers={"x-api-key": OTHER_KEY}, timeout=10)
    tid = alice.post("/threads", json={}).json()["thread_id"]
    start = {"id": 1, "method": "run.start", "params": {"assistant_id": "steps", "input": {"steps": 1}}}
    assert bob.post(f"/threads/{tid}/commands", json=start).status_code == 404
    assert bob.post(f"/threads/{tid}/stream/events", json={"channels": ["values"]}).status_code == 404
    assert alice.post(f"/threads/{tid}/commands", json={"method": "run.start"}).status_code == 400
    tree = alice.post(f"/threads/{tid}/commands", json={"id": 2, "method": "agent.getTree"}).json()
    assert (tree["type"], tree["id"], tree["error"]) == ("error", 2, "no_such_run")  # as the reference
    sub = {"id": 3, "method": "subscription.subscribe", "params": {"channels": ["values"]}}
    assert alice.post(f"/threads/{tid}/commands", json=sub).json()["result"]["replayed_events"] == 0
    assert httpx.post(f"{url}/threads/{tid}/commands", json=start).status_code == 401
    # MAX_STREAMS=3: three open streams take the replica's slots; a fourth is 503 + Retry-After.
    path = f"/threads/{tid}/stream/events"
    with alice.stream("POST", path, json={"channels": ["values"]}) as one:
        with alice.stream("GET", path, params={"channels": "values"}) as two:
            with alice.stream("POST", path, json={"channels": ["lifecycle"]}) as three:
                assert [one.status_code, two.status_code, three.status_code] == [200, 200, 200]
                refused = alice.post(f"/threads/{tid}/stream/events", json={"channels": ["values"]})
                assert refused.status_code == 503 and "retry-after" in refused.headers

    def a_slot_is_free() -> bool:
        with alice.stream("POST", path, json={"channels": ["values"]}) as again:
            return again.status_code == 200

    # Closed streams give their slots back (within the server's noticing the disconnect).
    wait_until(a_slot_is_free, "the closed streams' slots to come back", timeout=5, interval=0.1)
