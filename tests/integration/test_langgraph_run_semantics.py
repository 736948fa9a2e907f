"""Cancelled runs, ``interrupt`` double-texts and rollback as langgraph-api 0.16.7 (``langgraph
dev``) has them, through the real ``langgraph-sdk``, on two replicas on Redis (created on one,
cancelled and read on the other) and on one replica of each single-process backend (SQLite,
the default; memory; Postgres).

What the reference does, seen with the same graph (``graphs/steps.py``) and the same calls: a
cancelled run is ``interrupted`` as soon as the cancel is accepted, streams no ``error`` event,
``join`` answers the thread's values, and the thread is ``interrupted`` (its state has a next
step); the run an ``interrupt`` double-text stops ends the same way. threadline also rolls back
on every backend that can delete a run's checkpoints (docs/compatibility.md, "Runs and the v2
protocol", says where it differs: a rolled-back run's record is kept).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from langgraph_sdk import get_client

from client import API_KEY, API_KEYS
from servers import redis_env, until

pytestmark = pytest.mark.integration

GRAPHS = Path(__file__).resolve().parent / "graphs" / "langgraph.json"
JS_DRIVER = Path(__file__).resolve().parents[1] / "js" / "run_semantics.mjs"
BACKENDS = ("redis", "sqlite", "memory", "postgres")


def _urls(backend: str, request: pytest.FixtureRequest, start_replica, tmp_path: Path) -> list[str]:
    """Two replicas on Redis, or twice the one replica of a single-process backend."""
    extra = {"LANGGRAPH_CONFIG": str(GRAPHS)}
    if backend == "redis":
        env = redis_env(request.getfixturevalue("redis_server"), **extra)
        return [start_replica(env, name).url for name in ("a", "b")]
    env = {"CHECKPOINT_BACKEND": backend, "SESSION_BACKEND": "memory", "API_KEYS": API_KEYS, **extra}
    if backend == "sqlite":
        env["CHECKPOINT_SQLITE_PATH"] = str(tmp_path / "checkpoints.sqlite")
    elif backend == "postgres":
        env["CHECKPOINT_POSTGRES_URL"] = request.getfixturevalue("postgres_url")
    return [start_replica(env, backend).url] * 2


@pytest.fixture(params=BACKENDS)
def clients(request: pytest.FixtureRequest, start_replica, tmp_path: Path):
    """``(a, b)``: SDK clients of two replicas on Redis, or twice the one replica."""
    urls = _urls(request.param, request, start_replica, tmp_path)
    return tuple(get_client(url=url, api_key=API_KEY) for url in urls)


async def _done(client, tid: str) -> list[str]:
    return list((await client.threads.get_state(tid))["values"].get("done") or [])


async def _until_done(client, tid: str, n: int) -> None:
    async def enough() -> bool:
        return len(await _done(client, tid)) >= n

    await until(enough, f"{n} steps done", timeout=20)


async def _events(client, tid: str, run_id: str) -> list[str]:
    """The events of a resumable run, replayed from its first (its ``metadata``) once it ended."""
    events = [p.event async for p in client.runs.join_stream(tid, run_id, last_event_id="-1")]
    assert events[:1] == ["metadata"], events
    return events


async def _long_run(client, tid: str, tag: str = "") -> str:
    # Resumable: _events replays it once it ended (langgraph-api keeps only such runs' events).
    run = await client.runs.create(
        tid, "steps", input={"steps": 40, "delay": 0.2, "tag": tag}, stream_resumable=True
    )
    await _until_done(client, tid, 2)
    return run["run_id"]


async def test_a_cancelled_run_is_interrupted_at_once_with_no_error_and_joins_to_the_values(clients) -> None:
    a, b = clients
    tid = (await a.threads.create())["thread_id"]
    run_id = await _long_run(a, tid)
    await b.runs.cancel(tid, run_id)  # 202: accepted
    # Visible at once, on the other replica too (not after the executor's next cancel poll).
    assert (await b.runs.get(tid, run_id))["status"] == "interrupted"
    assert [r["run_id"] for r in await b.runs.list(tid, status="interrupted")] == [run_id]
    result = await b.runs.join(tid, run_id)
    assert "__error__" not in result
    done = result["done"]
    assert len(done) >= 2 and done == [str(i) for i in range(1, len(done) + 1)]
    assert result == (await b.threads.get_state(tid))["values"]
    events = await _events(b, tid, run_id)
    assert "error" not in events and events[0] == "metadata"
    assert (await b.runs.get(tid, run_id))["status"] == "interrupted"
    # Stopped mid-run: its state has a next step, so the thread is interrupted (as the reference).
    assert (await b.threads.get_state(tid))["next"] == ["step"]
    assert (await b.threads.get(tid))["status"] == "interrupted"
    # ... and the next run continues the thread.
    after = await a.runs.wait(tid, "steps", input={"steps": 1, "tag": "n"})
    assert after["done"] == [*done, "n1"]
    assert (await a.threads.get(tid))["status"] == "idle"


async def test_cancel_wait_answers_the_values_and_wait_of_a_cancelled_run_does_not_fail(clients) -> None:
    a, b = clients
    tid = (await a.threads.create())["thread_id"]
    waiting = asyncio.ensure_future(a.runs.wait(tid, "steps", input={"steps": 40, "delay": 0.2}))
    await _until_done(b, tid, 2)
    (run,) = await b.runs.list(tid)
    answer = await b.runs.cancel(tid, run["run_id"], wait=True)
    assert "__error__" not in answer and len(answer["done"]) >= 2
    assert await waiting == answer  # runs.wait resolves to the values too, instead of an error


async def test_the_run_an_interrupt_double_text_stops_ends_interrupted_with_no_error(clients) -> None:
    a, b = clients
    tid = (await a.threads.create())["thread_id"]
    first = await _long_run(a, tid)
    second = await b.runs.create(tid, "steps", input={"steps": 1, "tag": "n"}, multitask_strategy="interrupt")
    stopped = await b.runs.join(tid, first)
    assert "__error__" not in stopped and len(stopped["done"]) >= 2
    assert "error" not in await _events(a, tid, first)
    assert (await a.runs.get(tid, first))["status"] == "interrupted"
    final = await a.runs.join(tid, second["run_id"])
    assert final["done"] == [*stopped["done"], "n1"]
    assert (await b.runs.get(tid, second["run_id"]))["status"] == "success"
    assert (await b.threads.get(tid))["status"] == "idle"


async def test_rollback_by_cancel_and_by_strategy_deletes_what_the_run_wrote(clients) -> None:
    a, b = clients
    tid = (await a.threads.create())["thread_id"]
    kept = await a.runs.wait(tid, "steps", input={"steps": 1, "tag": "k"})
    assert kept["done"] == ["k1"]
    doomed = await a.runs.create(
        tid, "steps", input={"steps": 40, "delay": 0.2, "tag": "x"}, stream_resumable=True
    )
    await _until_done(b, tid, 3)
    rolled = await b.runs.cancel(tid, doomed["run_id"], wait=True, action="rollback")
    assert rolled["done"] == ["k1"]  # the thread as before the run
    assert "error" not in await _events(b, tid, doomed["run_id"])
    assert await _done(a, tid) == ["k1"]
    assert (await a.threads.get(tid))["status"] == "idle"
    # Kept (langgraph-api deletes it): runs.get still answers for a run a client cancelled.
    assert (await a.runs.get(tid, doomed["run_id"]))["status"] == "interrupted"

    doomed = await a.runs.create(tid, "steps", input={"steps": 40, "delay": 0.2, "tag": "y"})
    await _until_done(b, tid, 3)
    after = await b.runs.wait(tid, "steps", input={"steps": 1, "tag": "z"}, multitask_strategy="rollback")
    assert after["done"] == ["k1", "z1"]
    assert (await a.runs.get(tid, doomed["run_id"]))["status"] == "interrupted"


@pytest.mark.parametrize("backend", ["redis", "sqlite"])
def test_the_js_sdk_sees_cancels_and_double_texts_as_on_the_reference(
    backend: str, request: pytest.FixtureRequest, start_replica, tmp_path: Path
) -> None:
    """``@langchain/langgraph-sdk`` 1.15 under node (``tests/js/run_semantics.mjs``, which
    prints the same against ``langgraph dev``): ``runs.wait`` of a cancelled run resolves
    instead of throwing, ``join`` is the values, no ``error`` event, rollback leaves nothing."""
    node = shutil.which("node")
    assert node, "node is installed by scripts/install-system.sh"
    urls = _urls(backend, request, start_replica, tmp_path)
    done = subprocess.run(
        [node, str(JS_DRIVER), *urls, API_KEY],
        cwd=JS_DRIVER.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    checks = {c["check"]: c["value"] for c in map(json.loads, done.stdout.splitlines())}
    assert checks == {
        "status_at_once": "interrupted",
        "wait": {"error": False, "done": True},
        "join_is_values": True,
        "error_events": 0,
        "thread": "interrupted",
        "double_text": {"first": "interrupted", "first_errors": 0, "second_last": "n1"},
        "rollback": {"values": {}, "thread": "idle"},
    }
