"""Rollback deletes by run, on the run's own thread (issue 18 bullet 6): its cost does not grow
with the number of threads in Redis. Counted in Redis commands (``INFO commandstats``), not
time: one rollback of a tenant's own run read 1008 hashes in 0.83 s while it scanned them all.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
import redis
from langgraph.checkpoint.base import empty_checkpoint

from threadline.checkpoint import delete_for_runs
from threadline.checkpoint.instrumented import instrument
from threadline.checkpoint.redis import RedisCheckpointSaver

from client import API_KEY
from servers import RedisServer, redis_env, wait_until

pytestmark = pytest.mark.integration

OTHERS = 1000
GRAPHS = Path(__file__).parent / "graphs" / "langgraph.json"


def _commands(client: redis.Redis) -> dict[str, int]:
    """Calls per command since the last CONFIG RESETSTAT (without INFO and CONFIG), the
    commands scripts call included."""
    stats = client.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): int(value["calls"])
        for name, value in stats.items()
        if not name.startswith(("cmdstat_info", "cmdstat_config"))
    }


async def _put(saver, thread_id: str, run_id: str, parent: str | None = None) -> str:
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": [f"from {run_id}"]}
    cp["channel_versions"] = {"messages": saver.get_next_version(None, None)}
    conf = {"thread_id": thread_id, "checkpoint_ns": "", **({"checkpoint_id": parent} if parent else {})}
    meta = {"source": "loop", "step": 1, "run_id": run_id}
    await saver.aput({"configurable": conf}, cp, meta, dict(cp["channel_versions"]))
    return cp["id"]


async def _rollback_commands(server: RedisServer, saver, admin: redis.Redis, thread: str) -> dict[str, int]:
    """A run's two checkpoints on ``thread`` after one of another run, rolled back; the
    commands that took."""
    kept = await _put(saver, thread, "earlier")
    run = str(uuid.uuid4())
    parent = await _put(saver, thread, run, kept)
    await _put(saver, thread, run, parent)
    admin.config_resetstat()
    await delete_for_runs(saver, thread, [run])
    used = _commands(admin)
    left = [t.checkpoint["id"] async for t in saver.alist({"configurable": {"thread_id": thread}})]
    assert left == [kept]
    return used


async def test_rollback_cost_is_independent_of_other_threads():
    server = RedisServer().start()
    try:
        admin = redis.Redis.from_url(server.url(1))
        saver = instrument(RedisCheckpointSaver.from_url(server.url(1), ttl_seconds=3600), "redis")
        await _rollback_commands(server, saver, admin, "warm-up")  # the script loaded once
        alone = await _rollback_commands(server, saver, admin, "lonely")
        for i in range(OTHERS):
            await _put(saver, f"other-{i}", str(uuid.uuid4()))
        crowded = await _rollback_commands(server, saver, admin, "crowded")
        assert crowded == alone, (alone, crowded)
        assert "scan" not in crowded and sum(crowded.values()) < 30, crowded
        assert admin.dbsize() >= OTHERS * 3  # the others are all still there
        # The measure can fail: the unrestricted delete (LangGraph's signature) scans them all.
        run = str(uuid.uuid4())
        await _put(saver, "crowded", run)
        admin.config_resetstat()
        await saver.adelete_for_runs([run])
        scanned = _commands(admin)
        assert scanned["scan"] >= 1 and scanned["hgetall"] > OTHERS, scanned
        await saver.inner.aclose()
    finally:
        server.close()


def test_cancel_with_rollback_does_not_scan_other_threads(fresh_redis, start_replica):
    """Through the API on a real replica, 1000 other threads' checkpoints in its Redis: a
    cancel with action=rollback restores the thread without one SCAN."""
    replica = start_replica(redis_env(fresh_redis, LANGGRAPH_CONFIG=str(GRAPHS)), name="rollback")
    http = httpx.Client(base_url=replica.url, headers={"x-api-key": API_KEY}, timeout=60)
    admin = redis.Redis.from_url(fresh_redis.url(1))
    with admin.pipeline(transaction=False) as pipe:  # other tenants' threads, as SCAN sees them
        for i in range(OTHERS):
            pipe.zadd(f"tl:{{other-{i}}}:idx", {f"\0cp-{i}": 0})
            pipe.hset(f"tl:{{other-{i}}}:cp", f"\0cp-{i}", b"x")
        pipe.execute()
    thread = http.post("/threads", json={}).json()["thread_id"]
    first = {"assistant_id": "steps", "input": {"steps": 1, "tag": "a"}}
    assert http.post(f"/threads/{thread}/runs/wait", json=first).status_code == 200
    before = http.get(f"/threads/{thread}/state").json()
    slow = {"assistant_id": "steps", "input": {"steps": 50, "delay": 0.1, "tag": "b"}}
    run = http.post(f"/threads/{thread}/runs", json=slow).json()["run_id"]
    wait_until(
        lambda: len(http.get(f"/threads/{thread}/state").json()["values"].get("done", [])) >= 3,
        "the slow run to checkpoint a few steps of its own",
    )
    admin.config_resetstat()
    cancelled = http.post(f"/threads/{thread}/runs/{run}/cancel", params={"action": "rollback", "wait": True})
    assert cancelled.status_code in (200, 202, 204), cancelled.text
    http.get(f"/threads/{thread}/runs/{run}/join")
    used = _commands(admin)
    assert "scan" not in used, used
    assert used.get("hgetall", 0) < OTHERS / 10, used
    after = http.get(f"/threads/{thread}/state").json()
    assert after["values"] == before["values"]
    assert admin.zcard("tl:{other-7}:idx") == 1
