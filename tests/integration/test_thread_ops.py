"""The remaining thread and run operations of langgraph-api (issue 23 item 5), driven by the real
``langgraph-sdk`` against two real replicas on one real Redis and against one SQLite replica:
delayed runs (``after_seconds``) that start no earlier than asked, also when the replica that
took them is SIGKILLed first; thread TTLs (``ttl``, ``include=ttl``) swept on any replica;
``supersteps`` on create, all or nothing; ``POST /threads/prune``; ``POST /runs/batch``;
``GET /threads/{id}/storage``; each principal's own, and bad input a 4xx that stores nothing.

TTLs are in minutes, as langgraph-api's, and fractions are taken: the tests use 0.02 minutes
(1.2 s) with ``THREAD_TTL_SWEEP_SECONDS=0.2``, and wait on the thread's state, not the clock.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client

from client import API_KEY, OTHER_KEY
from servers import redis_env, until

pytestmark = pytest.mark.integration

GRAPHS = Path(__file__).resolve().parent / "graphs" / "langgraph.json"
PROBE_CONFIG = Path(__file__).parent / "auth_probe" / "langgraph.json"
# A 1 s lease: a killed replica's run is taken over about a second later.
ENV = {
    "LANGGRAPH_CONFIG": str(GRAPHS),
    "TURN_LEASE_SECONDS": "1",
    "TURN_LEASE_WAIT_SECONDS": "10",
    "THREAD_TTL_SWEEP_SECONDS": "0.2",
    "DRAIN_SECONDS": "20",
}
TINY_TTL = 0.02  # minutes: 1.2 s


def _status(exc: pytest.ExceptionInfo) -> int:
    return exc.value.response.status_code


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


@pytest.fixture
def replicas(sdk_replicas):
    """Two replicas on one Redis, or (``"sqlite"``) one replica on a SQLite file: the processes
    and alice's clients."""
    return lambda backend="redis": sdk_replicas(backend, **ENV)


def _http(proc, key: str = API_KEY) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=proc.url, headers={"x-api-key": key}, timeout=30)


async def _gone(client, thread_id: str) -> bool:
    try:
        await client.threads.get(thread_id)
    except httpx.HTTPStatusError as exc:
        return exc.response.status_code == 404
    return False


# -- after_seconds --


async def test_a_delayed_run_starts_no_earlier_than_asked_and_survives_its_replica(replicas) -> None:
    procs, (a, b) = replicas("redis")
    thread = await a.threads.create()
    asked = time.time()
    run = await a.runs.create(thread["thread_id"], "steps", input={"steps": 1, "tag": "d"}, after_seconds=2)
    # Its record holds its not-before time (as langgraph-api's created_at); pending until then.
    assert _ts(run["created_at"]) >= asked + 2
    assert run["status"] == "pending" and run["kwargs"]["after_seconds"] == 2
    assert (await b.runs.get(thread["thread_id"], run["run_id"]))["status"] == "pending"
    assert (await b.threads.get(thread["thread_id"]))["status"] == "busy"
    procs[0].kill()  # the replica that took it dies before its time

    async def ended() -> dict | None:
        got = await b.runs.get(thread["thread_id"], run["run_id"])
        return got if got["status"] not in ("pending", "running") else None

    done = await until(ended, "the delayed run to end on the other replica", timeout=30)
    assert done["status"] == "success"
    state = await b.threads.get_state(thread["thread_id"])
    assert state["values"]["done"] == ["d1"]  # ran once
    history = await b.threads.get_history(thread["thread_id"], limit=100)
    # Its first checkpoint was written when it started: no earlier than asked.
    assert min(_ts(s["created_at"]) for s in history) >= asked + 2


async def test_a_delayed_run_does_not_hold_a_drain_and_is_handed_over(replicas) -> None:
    procs, (a, b) = replicas("redis")
    thread_id = (await a.threads.create())["thread_id"]
    asked = time.time()
    run = await a.runs.create(thread_id, "steps", input={"steps": 1, "tag": "h"}, after_seconds=12)
    stopping = time.monotonic()
    procs[0].stop()  # SIGTERM: drained at once (DRAIN_SECONDS is 20), not at the run's time
    assert time.monotonic() - stopping < 8

    async def ended() -> dict | None:
        got = await b.runs.get(thread_id, run["run_id"])
        return got if got["status"] not in ("pending", "running") else None

    assert (await until(ended, "the handed-over run to end", timeout=30))["status"] == "success"
    history = await b.threads.get_history(thread_id, limit=100)
    assert min(_ts(s["created_at"]) for s in history) >= asked + 12


@pytest.mark.parametrize("backend", ["redis", "sqlite"])
async def test_a_delayed_run_keeps_its_place_and_can_be_cancelled(replicas, backend: str) -> None:
    _, clients = replicas(backend)
    a = clients[0]
    thread_id = (await a.threads.create())["thread_id"]
    asked = time.time()
    await a.runs.create(thread_id, "steps", input={"steps": 1, "tag": "late"}, after_seconds=1)
    # A run created after it waits behind it (a thread's runs start in the order they came).
    then = await a.runs.create(thread_id, "steps", input={"steps": 1, "tag": "then"})
    await a.runs.join(thread_id, then["run_id"])
    assert (await a.threads.get_state(thread_id))["values"]["done"] == ["late1", "then1"]
    history = await a.threads.get_history(thread_id, limit=100)
    assert min(_ts(s["created_at"]) for s in history) >= asked + 1

    # A delayed run cancelled before its time never runs.
    doomed = await a.runs.create(thread_id, "steps", input={"steps": 1, "tag": "x"}, after_seconds=60)
    await a.runs.cancel(thread_id, doomed["run_id"])

    async def interrupted() -> bool:
        return (await a.runs.get(thread_id, doomed["run_id"]))["status"] == "interrupted"

    await until(interrupted, "the delayed run to be cancelled")
    await until(lambda: _idle(a, thread_id), "the thread to be idle")
    assert (await a.threads.get_state(thread_id))["values"]["done"] == ["late1", "then1"]


async def test_a_threads_follower_sees_a_delayed_run_and_the_runs_queued_behind_it(replicas) -> None:
    _, (a, b) = replicas("redis")
    thread_id = (await a.threads.create())["thread_id"]
    first = await a.runs.create(thread_id, "steps", input={"steps": 1, "tag": "f", "delay": 0.3})
    seen: list[str] = []

    async def follow() -> None:
        async for part in await b.threads.join_stream(thread_id):
            if part.event == "metadata" and part.data["run_id"] not in seen:
                seen.append(part.data["run_id"])
            if len(seen) == 3:
                return

    following = asyncio.create_task(follow())
    await until(lambda: first["run_id"] in seen, "the follower to follow the first run")
    late = await a.runs.create(thread_id, "steps", input={"steps": 1, "tag": "l"}, after_seconds=2)
    await until(lambda: _ended(a, thread_id, first["run_id"]), "the first run to end")
    # Created while the delayed run waits (before its created_at), queued behind it.
    then = await a.runs.create(thread_id, "steps", input={"steps": 1, "tag": "t"})
    await asyncio.wait_for(following, 30)
    assert seen == [first["run_id"], late["run_id"], then["run_id"]]


async def _ended(client, thread_id: str, run_id: str) -> bool:
    return (await client.runs.get(thread_id, run_id))["status"] == "success"


async def _idle(client, thread_id: str) -> bool:
    return (await client.threads.get(thread_id))["status"] == "idle"


async def test_after_seconds_out_of_bounds_is_422_and_stores_nothing(replicas) -> None:
    procs, (a, _) = replicas("redis")
    thread_id = (await a.threads.create())["thread_id"]
    async with _http(procs[0]) as http:
        for after in (-1, 86_401, "soon"):
            body = {"assistant_id": "steps", "input": {"steps": 1}, "after_seconds": after}
            assert (await http.post(f"/threads/{thread_id}/runs", json=body)).status_code == 422
    assert await a.runs.list(thread_id) == []
    assert (await a.threads.get(thread_id))["status"] == "idle"


# -- ttl --


@pytest.mark.parametrize("backend", ["redis", "sqlite"])
async def test_a_thread_past_its_ttl_is_deleted(replicas, backend: str) -> None:
    _, clients = replicas(backend)
    a, b = clients[0], clients[-1]
    short = await a.threads.create(ttl=TINY_TTL)
    long = await a.threads.create(ttl={"ttl": 600, "strategy": "delete"})
    patched = await a.threads.create(metadata={"k": 1})
    plain = await a.threads.create()
    shown = await b.threads.get(short["thread_id"], include=["ttl"])
    assert shown["ttl"]["strategy"] == "delete" and shown["ttl"]["ttl_minutes"] == TINY_TTL
    assert _ts(shown["ttl"]["expires_at"]) == pytest.approx(_ts(short["created_at"]) + 1.2, abs=1)
    assert "ttl" not in await b.threads.get(short["thread_id"])  # only with include=ttl
    assert (await b.threads.get(plain["thread_id"], include=["ttl"]))["ttl"] is None
    # A TTL set by a patch counts from then.
    updated = await b.threads.update(patched["thread_id"], metadata={"k": 2}, ttl=TINY_TTL)
    assert updated["metadata"] == {"k": 2}

    await until(lambda: _gone(b, short["thread_id"]), "the short-lived thread to be deleted")
    await until(lambda: _gone(a, patched["thread_id"]), "the patched thread to be deleted")
    # The others stay.
    assert (await a.threads.get(long["thread_id"], include=["ttl"]))["ttl"]["ttl_minutes"] == 600
    assert (await a.threads.get(plain["thread_id"]))["thread_id"] == plain["thread_id"]


async def test_keep_latest_ttl_prunes_to_the_latest_checkpoint_on_redis(replicas) -> None:
    _, (a, b) = replicas("redis")
    thread_id = (await a.threads.create())["thread_id"]
    for tag in ("x", "y"):
        await a.runs.wait(thread_id, "steps", input={"steps": 1, "tag": tag})
    before = len(await a.threads.get_history(thread_id, limit=100))
    await b.threads.update(thread_id, metadata={}, ttl={"ttl": TINY_TTL, "strategy": "keep_latest"})
    # Pruned once, then its TTL is spent; the thread and its state stay.
    await until(lambda: _ttl_spent(b, thread_id), "its TTL to be carried out")
    assert len(await a.threads.get_history(thread_id, limit=100)) < before
    assert (await b.threads.get_state(thread_id))["values"]["done"] == ["x1", "y1"]


async def _ttl_spent(client, thread_id: str) -> bool:
    return (await client.threads.get(thread_id, include=["ttl"]))["ttl"] is None


async def test_ttl_refusals_are_422_and_store_nothing(replicas) -> None:
    procs, (a,) = replicas("sqlite")
    before = await a.threads.count()
    async with _http(procs[0]) as http:
        for ttl in ({"ttl": 0}, {"ttl": -1}, {"ttl": 525_601}, {"strategy": "archive", "ttl": 1}, {}):
            assert (await http.post("/threads", json={"ttl": ttl})).status_code == 422, ttl
        # keep_latest needs a checkpointer that prunes (the redis backend).
        refused = await http.post("/threads", json={"ttl": {"ttl": 1, "strategy": "keep_latest"}})
        assert refused.status_code == 422 and "keep_latest" in refused.json()["detail"]
        thread_id = (await a.threads.create())["thread_id"]
        assert (await http.patch(f"/threads/{thread_id}", json={"ttl": {"ttl": 0}})).status_code == 422
        # Unknown include names are ignored, as langgraph-api does.
        shown = await http.get(f"/threads/{thread_id}", params={"include": "secrets, ttl"})
        assert shown.status_code == 200 and shown.json()["ttl"] is None and "secrets" not in shown.json()
    assert await a.threads.count() == before + 1
    assert (await a.threads.get(thread_id, include=["ttl"]))["ttl"] is None


# -- supersteps --


@pytest.mark.parametrize("backend", ["redis", "sqlite"])
async def test_supersteps_apply_on_create_all_or_nothing(replicas, backend: str) -> None:
    procs, clients = replicas(backend)
    a, b = clients[0], clients[-1]
    steps = [
        {"updates": [{"values": {"done": ["s1"]}, "as_node": "step"}]},
        {"updates": [{"values": {"done": ["s2"], "tag": "s"}, "as_node": "step"}]},
    ]
    made = await a.threads.create(graph_id="steps", supersteps=steps)
    assert made["values"]["done"] == ["s1", "s2"] and made["values"]["tag"] == "s"
    state = await b.threads.get_state(made["thread_id"])
    assert state["values"]["done"] == ["s1", "s2"] and state["metadata"]["source"] == "update"
    assert len(await b.threads.get_history(made["thread_id"], limit=10)) == 2  # one per superstep
    # The thread goes on from there.
    out = await b.runs.wait(made["thread_id"], "steps", input={"steps": 1, "tag": "s"})
    assert out["done"] == ["s1", "s2", "s3"]

    before = await a.threads.count()
    async with _http(procs[0]) as http:
        tid = str(uuid.uuid4())
        bad_node = [steps[0], {"updates": [{"values": {}, "as_node": "nowhere"}]}]
        cases = [
            ({"metadata": {"graph_id": "steps"}, "supersteps": bad_node}, 400),
            ({"supersteps": steps}, 400),  # no graph to apply them through
            ({"metadata": {"graph_id": "nope"}, "supersteps": steps}, 422),
            ({"metadata": {"graph_id": "steps"}, "supersteps": [{"updates": []}]}, 422),
            ({"metadata": {"graph_id": "steps"}, "supersteps": steps * 51}, 422),  # past 100
            ({"metadata": {"graph_id": "steps"}, "supersteps": [{"updates": [{"values": {}}]}]}, 422),
            # An update LangGraph refuses (a reducer channel given a number): the thread goes again.
            (
                {
                    "metadata": {"graph_id": "steps"},
                    "supersteps": [{"updates": [{"values": {"done": 5}, "as_node": "step"}]}],
                },
                422,
            ),
        ]
        for body, status in cases:
            got = await http.post("/threads", json={"thread_id": tid, **body})
            assert got.status_code == status, (body, got.text)
            assert (await http.get(f"/threads/{tid}")).status_code == 404
    assert await a.threads.count() == before


# -- prune --


@pytest.mark.parametrize("backend", ["redis", "sqlite"])
async def test_prune_deletes_only_the_callers_threads(replicas, backend: str) -> None:
    procs, clients = replicas(backend)
    a = clients[0]
    bob = get_client(url=procs[-1].url, api_key=OTHER_KEY)
    mine = [(await a.threads.create())["thread_id"] for _ in range(2)]
    kept = (await a.threads.create())["thread_id"]
    theirs = (await bob.threads.create())["thread_id"]
    await a.runs.wait(mine[0], "steps", input={"steps": 1})
    result = await a.threads.prune([*mine, theirs, str(uuid.uuid4()), mine[0]])
    assert result == {"pruned_count": 2}
    for thread_id in mine:
        assert await _gone(a, thread_id)
    assert (await bob.threads.get(theirs))["thread_id"] == theirs
    assert (await a.threads.get(kept))["thread_id"] == kept
    assert await a.threads.prune([]) == {"pruned_count": 0}

    async with _http(procs[0]) as http:
        for body in (
            {"thread_ids": [kept], "strategy": "archive"},
            {"thread_ids": ["not a uuid!"]},
            {"thread_ids": [str(uuid.uuid4()) for _ in range(1001)]},
            {"strategy": "delete"},
        ):
            assert (await http.post("/threads/prune", json=body)).status_code == 422
        if backend == "sqlite":  # keep_latest needs a checkpointer that prunes
            refused = await http.post(
                "/threads/prune", json={"thread_ids": [kept], "strategy": "keep_latest"}
            )
            assert refused.status_code == 422
    assert (await a.threads.get(kept))["thread_id"] == kept


async def test_prune_keep_latest_keeps_the_thread_and_its_state(replicas) -> None:
    _, (a, b) = replicas("redis")
    thread_id = (await a.threads.create())["thread_id"]
    for tag in ("p", "q"):
        await a.runs.wait(thread_id, "steps", input={"steps": 2, "tag": tag})
    before = len(await a.threads.get_history(thread_id, limit=100))
    assert await b.threads.prune([thread_id], strategy="keep_latest") == {"pruned_count": 1}
    # The latest checkpoint and what its channels need (the redis saver's keep_latest).
    assert len(await a.threads.get_history(thread_id, limit=100)) < before
    assert (await a.threads.get_state(thread_id))["values"]["done"] == ["p1", "p2", "q1", "q2"]
    out = await b.runs.wait(thread_id, "steps", input={"steps": 1, "tag": "p"})
    assert out["done"][-1] == "p3"


# -- batch --


@pytest.mark.parametrize("backend", ["redis", "sqlite"])
async def test_a_batch_of_stateless_runs_is_created_whole_or_not_at_all(replicas, backend: str) -> None:
    procs, clients = replicas(backend)
    a = clients[0]
    made = await a.runs.create_batch(
        [
            {"assistant_id": "steps", "input": {"steps": 1, "tag": "one"}},
            {"assistant_id": "steps", "input": {"steps": 1, "tag": "two"}, "after_seconds": 1},
        ]
    )
    # The first may be running already (it takes its idle thread as it is stored); the delayed one waits.
    assert made[0]["status"] in ("pending", "running") and made[1]["status"] == "pending"
    assert len({r["thread_id"] for r in made}) == 2
    for run, tag in zip(made, ("one", "two"), strict=True):
        assert (await a.runs.join(run["thread_id"], run["run_id"]))["done"] == [f"{tag}1"]

    before = await a.threads.count()
    async with _http(procs[0]) as http:
        good = {"assistant_id": "steps", "input": {"steps": 1}}
        for body, status in (
            ([good, {"assistant_id": str(uuid.uuid4()), "input": {}}], 404),  # no such assistant
            ([good, {"assistant_id": "steps", "input": {"nope": 1}}], 422),  # input not the graph's
            ([good, {"assistant_id": "steps", "after_seconds": -1}], 422),
            ([good] * 101, 422),
            ([], 422),
            (good, 422),
        ):
            got = await http.post("/runs/batch", json=body)
            assert got.status_code == status, got.text
    assert await a.threads.count() == before


# -- storage --


@pytest.mark.parametrize("backend", ["redis", "sqlite"])
async def test_storage_reports_what_a_threads_checkpoints_hold(replicas, backend: str) -> None:
    procs, clients = replicas(backend)
    a = clients[0]
    thread_id = (await a.threads.create())["thread_id"]
    await a.runs.wait(thread_id, "steps", input={"steps": 2, "tag": "s"})
    history = await a.threads.get_history(thread_id, limit=100)
    async with _http(procs[-1]) as http:
        got = await http.get(f"/threads/{thread_id}/storage")
        assert got.status_code == 200
        report = got.json()
        assert report["thread_id"] == thread_id
        assert report["checkpoints"]["count"] == len(history)
        channels = report["channel_values"]
        assert channels["by_channel"]["done"]["versions"] >= 2 and channels["by_channel"]["done"]["bytes"] > 0
        assert channels["count"] == sum(c["versions"] for c in channels["by_channel"].values())
        parts = report["checkpoints"]["bytes"] + channels["bytes"] + report["pending_writes"]["bytes"]
        assert report["total_bytes"] == parts > 0
        empty = (await a.threads.create())["thread_id"]
        assert (await http.get(f"/threads/{empty}/storage")).json()["total_bytes"] == 0
    async with _http(procs[0], OTHER_KEY) as bob:
        assert (await bob.get(f"/threads/{thread_id}/storage")).status_code == 404
        assert (await bob.get(f"/threads/{thread_id}", params={"include": "ttl"})).status_code == 404
        assert (await bob.patch(f"/threads/{thread_id}", json={"ttl": {"ttl": 1}})).status_code == 404
    assert (await a.threads.get(thread_id, include=["ttl"]))["ttl"] is None


# -- custom auth --


async def test_custom_auth_handlers_apply_to_prune_and_supersteps(fresh_redis, start_replica) -> None:
    env = redis_env(fresh_redis, API_KEYS="", LANGGRAPH_CONFIG=str(PROBE_CONFIG))
    proc = start_replica(env, "probe")
    name = f"user-ops{uuid.uuid4().hex[:6]}"
    plain = httpx.AsyncClient(base_url=proc.url, headers={"Authorization": f"Bearer {name}"}, timeout=30)
    filtered = httpx.AsyncClient(
        base_url=proc.url, headers={"Authorization": f"Bearer {name}", "X-Probe-Filtered": "1"}, timeout=30
    )
    async with plain, filtered:
        public = (await plain.post("/threads", json={"metadata": {"pinned": True}})).json()["thread_id"]
        hidden = (await plain.post("/threads", json={"metadata": {"tags": ["private"]}})).json()["thread_id"]
        # The filter excludes one: 404 and nothing pruned (as langgraph-api).
        refused = await filtered.post("/threads/prune", json={"thread_ids": [public, hidden]})
        assert refused.status_code == 404
        assert (await plain.get(f"/threads/{public}")).status_code == 200
        assert (await filtered.post("/threads/prune", json={"thread_ids": [public]})).json() == {
            "pruned_count": 1
        }
        assert (await plain.get(f"/threads/{public}")).status_code == 404
        assert (await plain.get(f"/threads/{hidden}")).status_code == 200
        # threads.create refuses: no thread, no supersteps.
        tid = str(uuid.uuid4())
        steps = [{"updates": [{"values": {"messages": []}, "as_node": "__start__"}]}]
        body = {"thread_id": tid, "metadata": {"deny": True, "graph_id": "greeter"}, "supersteps": steps}
        assert (await plain.post("/threads", json=body)).status_code == 403
        assert (await plain.get(f"/threads/{tid}")).status_code == 404


async def test_cancel_many_across_threads_by_status_and_assistant(replicas) -> None:
    """``POST /runs/cancel`` without a thread: by status (pending, then all) and by assistant,
    across the caller's threads on either replica; another principal's runs go on; a body that
    names nothing to cancel by, or a status beside a thread, is 422."""
    (pa, pb), (a, b) = replicas("redis")
    slow = {"steps": 1, "delay": 30}
    t1, t2 = (await a.threads.create())["thread_id"], (await b.threads.create())["thread_id"]
    running = await a.runs.create(t1, "steps", input=slow)
    queued = await b.runs.create(t1, "steps", input=slow)  # enqueued behind it: pending
    mine = await a.assistants.create(graph_id="steps", name="slow")
    other = await b.runs.create(t2, mine["assistant_id"], input=slow)
    bob = get_client(url=pa.url, api_key=OTHER_KEY)
    bobs_thread = (await bob.threads.create())["thread_id"]
    bobs = await bob.runs.create(bobs_thread, "steps", input=slow)
    await until(lambda: _status_is(a, t1, running["run_id"], "running"), "the first run running")

    await b.runs.cancel_many(status="pending")
    await until(lambda: _status_is(a, t1, queued["run_id"], "interrupted"), "the queued run cancelled")
    assert (await a.runs.get(t1, running["run_id"]))["status"] == "running"

    async with httpx.AsyncClient(base_url=pb.url, headers={"x-api-key": API_KEY}) as http:
        by_assistant = await http.post("/runs/cancel", json={"assistant_id": mine["assistant_id"]})
        assert by_assistant.status_code == 204
        await until(lambda: _status_is(a, t2, other["run_id"], "interrupted"), "the assistant's run ended")
        assert (await a.runs.get(t1, running["run_id"]))["status"] == "running"
        for body in ({}, {"status": "all", "thread_id": t1}):
            assert (await http.post("/runs/cancel", json=body)).status_code == 422, body
    await a.runs.cancel_many(status="all")
    await until(lambda: _status_is(a, t1, running["run_id"], "interrupted"), "the running run cancelled")
    assert (await bob.runs.get(bobs_thread, bobs["run_id"]))["status"] in ("pending", "running")
    await bob.runs.cancel(bobs_thread, bobs["run_id"])


async def _status_is(client, thread_id: str, run_id: str, status: str) -> bool:
    return (await client.runs.get(thread_id, run_id))["status"] == status
