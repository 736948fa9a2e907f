"""Streams and joins of the LangGraph API are bounded by settings (issue 18 bullet 1), against
real replicas on a real Redis: a stream of an ended run, or one whose ``Last-Event-ID`` is past
its end, ends at once; ``MAX_STREAMS`` and ``MAX_STREAMS_PER_PRINCIPAL`` cover SSE and joins
(503 and 429, each with Retry-After, and the slots come back); and a hundred of one
principal's open streams and joins do not starve another principal's requests, because their
blocking reads have a pool of their own.

The deadlines are far above what the paths take (a few ms): they catch a request that waits
for a pooled connection (5 s before) or a stream that never ends, not a slow machine.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from client import API_KEY, OTHER_KEY
from servers import redis_env, until, wait_until

pytestmark = pytest.mark.integration

GRAPHS = Path(__file__).parent / "graphs" / "langgraph.json"
SLOW = {"assistant_id": "steps", "input": {"steps": 1, "delay": 30}}


def _http(replica, key: str = API_KEY) -> httpx.Client:
    return httpx.Client(base_url=replica.url, headers={"x-api-key": key}, timeout=30)


def _finished_run(http: httpx.Client) -> tuple[str, str]:
    thread = http.post("/threads", json={}).json()["thread_id"]
    # Resumable: its events stay after its end, for the replays below.
    hello = {
        "assistant_id": "chat",
        "input": {"messages": [{"role": "user", "content": "hi"}]},
        "stream_resumable": True,
    }
    done = http.post(f"/threads/{thread}/runs/wait", json=hello)
    assert done.status_code == 200, done.text
    run = http.get(f"/threads/{thread}/runs").json()[0]["run_id"]
    return thread, run


async def _drain(url: str, path: str, headers: dict[str, str]) -> list[str]:
    async with (
        httpx.AsyncClient(base_url=url, headers={"x-api-key": API_KEY, **headers}, timeout=30) as http,
        http.stream("GET", path) as response,
    ):
        assert response.status_code == 200
        return [line async for line in response.aiter_lines() if line.startswith("event:")]


def _env(fresh_redis) -> dict[str, str]:
    return redis_env(
        fresh_redis, LANGGRAPH_CONFIG=str(GRAPHS), MAX_STREAMS="150", MAX_STREAMS_PER_PRINCIPAL="110"
    )


@pytest.fixture
def replica(fresh_redis, start_replica):
    return start_replica(_env(fresh_redis), name="stream-bounds")


def test_a_stream_of_an_ended_run_ends_at_once_even_past_its_end(replica):
    thread, run = _finished_run(_http(replica))
    path = f"/threads/{thread}/runs/{run}/stream"
    replay = asyncio.run(asyncio.wait_for(_drain(replica.url, path, {}), 20))
    assert "event: values" in replay  # from the start: the run's events, then the end
    # Past its end (before: one 4 s blocking read after another, for ever).
    past = asyncio.run(asyncio.wait_for(_drain(replica.url, path, {"Last-Event-ID": "99999999999999-0"}), 20))
    assert past == []


def test_streams_and_joins_take_slots_per_principal_and_per_replica(fresh_redis, start_replica):
    env = redis_env(fresh_redis, LANGGRAPH_CONFIG=str(GRAPHS), MAX_STREAMS="3", MAX_STREAMS_PER_PRINCIPAL="2")
    one = start_replica(env, name="stream-slots")
    alice, bob = _http(one), _http(one, OTHER_KEY)
    thread = alice.post("/threads", json={}).json()["thread_id"]
    run = alice.post(f"/threads/{thread}/runs", json=SLOW).json()["run_id"]
    with (
        alice.stream("GET", f"/threads/{thread}/runs/{run}/stream") as first,
        alice.stream("GET", f"/threads/{thread}/runs/{run}/join") as second,
    ):
        assert first.status_code == second.status_code == 200
        # Alice's third (a join, an SSE stream or a wait) is hers to retry: 429, nothing created.
        runs_before = len(alice.get(f"/threads/{thread}/runs").json())
        for refused in (
            alice.get(f"/threads/{thread}/runs/{run}/join"),
            alice.get(f"/threads/{thread}/runs/{run}/stream"),
            alice.post("/runs/wait", json={"assistant_id": "chat", "input": {}}),
        ):
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["code"] == "too_many_streams", refused.text
            assert "MAX_STREAMS_PER_PRINCIPAL=2" in refused.json()["error"]["message"]
            assert refused.headers["retry-after"]
        assert len(alice.get(f"/threads/{thread}/runs").json()) == runs_before
        # Bob takes the replica's last slot; then the replica is full for everyone: 503.
        bobs = bob.post("/threads", json={}).json()["thread_id"]
        with bob.stream("POST", f"/threads/{bobs}/runs/stream", json=SLOW) as third:
            assert third.status_code == 200
            full = bob.post("/runs/wait", json={"assistant_id": "chat", "input": {}})
            assert full.status_code == 503 and full.json()["error"]["code"] == "unavailable", full.text
            assert full.headers["retry-after"]
    # Every slot came back once the clients went away.
    wait_until(
        lambda: alice.post("/runs/wait", json={"assistant_id": "chat", "input": {}}).status_code == 200,
        "the slots to come back once the clients went away",
        10,
        interval=0.1,
    )


async def _hold_open(url: str, key: str, path: str, n: int, opened: asyncio.Event) -> None:
    """``n`` streams or joins of ``path`` kept open until cancelled."""
    async with httpx.AsyncClient(
        base_url=url, headers={"x-api-key": key}, timeout=60, limits=httpx.Limits(max_connections=n)
    ) as http:
        ready = 0

        async def one() -> None:
            nonlocal ready
            async with http.stream("GET", path) as response:
                assert response.status_code == 200, await response.aread()
                ready += 1
                if ready == n:
                    opened.set()
                async for _ in response.aiter_bytes():
                    pass

        await asyncio.gather(*(one() for _ in range(n)))


def test_a_hundred_open_streams_and_joins_leave_another_principal_its_requests(fresh_redis, start_replica):
    """Before: 100 such streams held the pool that leases, quotas and records share; another
    principal's GET /threads/{id} took 5 s and then 503, and their runs.wait got 503. Bob's run
    executes on the other replica, so every one of his streams and joins here reads Redis."""
    replica, executor = (start_replica(_env(fresh_redis), name=f"starve-{n}") for n in "ab")
    bob = _http(executor, OTHER_KEY)
    bobs = bob.post("/threads", json={}).json()["thread_id"]
    slow = bob.post(f"/threads/{bobs}/runs", json=SLOW).json()["run_id"]
    alice = _http(replica)
    thread = alice.post("/threads", json={}).json()["thread_id"]

    async def scenario() -> list[tuple[int, float]]:
        opened = (asyncio.Event(), asyncio.Event())
        holders = [
            asyncio.create_task(
                _hold_open(replica.url, OTHER_KEY, f"/threads/{bobs}/runs/{slow}/stream", 50, opened[0])
            ),
            asyncio.create_task(
                _hold_open(replica.url, OTHER_KEY, f"/threads/{bobs}/runs/{slow}/join", 50, opened[1])
            ),
        ]
        await asyncio.wait_for(asyncio.gather(*(o.wait() for o in opened)), 30)
        redis = fresh_redis.client()
        await until(
            lambda: redis.info("clients")["blocked_clients"] >= 100, "each of the 100 in its blocking read"
        )
        redis.close()
        answers = []
        async with httpx.AsyncClient(
            base_url=replica.url, headers={"x-api-key": API_KEY}, timeout=30
        ) as http:
            for i in range(10):
                start = time.monotonic()
                if i % 2:
                    response = await http.get(f"/threads/{thread}")
                else:
                    body = {
                        "assistant_id": "chat",
                        "input": {"messages": [{"role": "user", "content": "hi"}]},
                    }
                    response = await http.post(f"/threads/{thread}/runs/wait", json=body)
                answers.append((response.status_code, time.monotonic() - start))
        for holder in holders:
            holder.cancel()
        await asyncio.gather(*holders, return_exceptions=True)
        return answers

    answers = asyncio.run(scenario())
    assert [status for status, _ in answers] == [200] * 10, answers
    assert max(seconds for _, seconds in answers) < 1.0, answers
    # Bob's slow run was never taken over (its heartbeats kept their connections).
    assert bob.get(f"/threads/{bobs}/runs/{slow}").json()["status"] == "running"
    assert "taking over a run" not in replica.logs() + executor.logs()
