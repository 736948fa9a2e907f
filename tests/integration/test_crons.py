"""Crons (issue 23), driven by the real ``langgraph-sdk`` against real replicas on one real
Redis: CRUD, search, count, sort and select; each tick fired once across two replicas; a
replica SIGKILLed holding a tick's claim loses no run and fires none twice; end_time; each
principal's own; bad input and the quota refused with nothing stored.

Ticks come from croniter's 6-field (seconds) schedules, which langgraph-api accepts too, and a
0.2 s scheduler pass (CRON_SCHEDULER_SLEEP_TIME): no test waits for a minute boundary."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import redis
from langgraph_sdk import get_client

from threadline.redis_keys import cron_claim_key, cron_keys
from threadline.runs.crons import tick_ids

from client import API_KEY, OTHER_KEY
from servers import redis_env, until

pytestmark = pytest.mark.integration

GRAPHS = Path(__file__).resolve().parent / "graphs" / "langgraph.json"
ENV = {
    "LANGGRAPH_CONFIG": str(GRAPHS),
    "TURN_LEASE_SECONDS": "1",
    "CRON_SCHEDULER_SLEEP_TIME": "0.2",
    "QUOTA_CRONS_PER_PRINCIPAL": "4",
}
EVERY_SECOND = "* * * * * *"
NEVER_SOON = "0 0 1 1 *"
HELLO = {"messages": [{"role": "user", "content": "tick"}]}


def _status(exc: pytest.ExceptionInfo) -> int:
    return exc.value.response.status_code


@pytest.fixture
def start_sqlite(sdk_replicas):
    return lambda: sdk_replicas("sqlite", **ENV)[1][0]


@pytest.fixture
def start(fresh_redis, start_replica):
    def start(*names: str):
        procs = [start_replica(redis_env(fresh_redis, **ENV), name) for name in names]
        return procs, [get_client(url=p.url, api_key=API_KEY) for p in procs]

    return start


async def _ticks_ran(client, thread_id: str, cron_id: str) -> tuple[list[dict], int]:
    """The thread's runs (each a tick's: its id derived from the tick) and how many times the
    chat graph ran on it (two messages a run)."""
    runs = await client.runs.list(thread_id, limit=1000)
    state = await client.threads.get_state(thread_id)
    return runs, len((state["values"] or {}).get("messages", [])) // 2


async def test_crud_search_count_select_and_refusals(start) -> None:
    procs, (a, b) = start("a", "b")
    thread = await a.threads.create()
    tid = thread["thread_id"]
    end = datetime(2030, 1, 1, tzinfo=UTC)
    made = await a.crons.create(
        "nested", schedule=NEVER_SOON, input={"topic": "x"}, metadata={"team": "red"}, end_time=end
    )
    cid = made["cron_id"]
    assert made["thread_id"] is None and made["on_run_completed"] == "delete" and made["enabled"] is True
    assert made["schedule"] == NEVER_SOON and made["metadata"] == {"team": "red"}
    assert made["payload"]["input"] == {"topic": "x"} and made["payload"]["config"]["configurable"] == {
        "cron_id": cid
    }
    assert datetime.fromisoformat(made["end_time"]) == end and made["next_run_date"].startswith("20")
    # Every replica sees it at once.
    assert await b.http.get(f"/runs/crons/{cid}") == made
    # With a context: the cron's own cron_id in configurable does not count as the client's.
    on_thread = await b.crons.create_for_thread(
        tid, "nested", schedule=NEVER_SOON, input={"topic": "y"}, context={"style": "bold"}
    )
    assert on_thread["thread_id"] == tid and on_thread["on_run_completed"] is None

    found = await a.crons.search()
    assert [c["cron_id"] for c in found] == [on_thread["cron_id"], cid]  # newest first
    assert [c["cron_id"] for c in await a.crons.search(thread_id=tid)] == [on_thread["cron_id"]]
    assert [c["cron_id"] for c in await a.crons.search(sort_by="created_at", sort_order="asc")] == [
        cid,
        on_thread["cron_id"],
    ]
    assert await a.crons.search(select=["cron_id", "enabled"], limit=1) == [
        {"cron_id": on_thread["cron_id"], "enabled": True}
    ]
    assert await b.crons.count() == 2
    assert await b.crons.count(metadata={"team": "red"}) == 1

    changed = await b.crons.update(cid, metadata={"tier": 2}, enabled=False, end_time=None)
    assert changed["metadata"] == {"team": "red", "tier": 2} and changed["enabled"] is False
    assert changed["end_time"] is None and changed["updated_at"] >= made["updated_at"]
    assert [c["cron_id"] for c in await a.crons.search(enabled=False)] == [cid]
    rescheduled = await a.crons.update(cid, schedule="0 0 1 6 *")
    assert rescheduled["next_run_date"] != made["next_run_date"]

    # Another principal's crons are not there for bob.
    bob = get_client(url=procs[0].url, api_key=OTHER_KEY)
    for call in (
        bob.http.get(f"/runs/crons/{cid}"),
        bob.crons.update(cid, enabled=True),
        bob.crons.delete(cid),
    ):
        with pytest.raises(httpx.HTTPStatusError) as exc:
            await call
        assert _status(exc) == 404
    assert await bob.crons.count() == 0
    with pytest.raises(httpx.HTTPStatusError) as exc:
        await bob.crons.create_for_thread(tid, "nested", schedule=NEVER_SOON)
    assert _status(exc) == 404

    # Bad input: a clear 4xx, nothing stored.
    async with httpx.AsyncClient(base_url=procs[1].url, headers={"x-api-key": API_KEY}) as http:
        for body, status in (
            ({"assistant_id": "nested", "schedule": "every minute"}, 422),
            ({"assistant_id": "nested", "schedule": NEVER_SOON, "timezone": "Mars/Olympus"}, 422),
            ({"assistant_id": "nested"}, 422),
            ({"assistant_id": "nope", "schedule": NEVER_SOON}, 422),
            ({"assistant_id": str(uuid.uuid4()), "schedule": NEVER_SOON}, 404),
            ({"assistant_id": "nested", "schedule": NEVER_SOON, "on_run_completed": "drop"}, 422),
            ({"assistant_id": "nested", "schedule": NEVER_SOON, "webhook": "http://x"}, 422),
        ):
            response = await http.post("/runs/crons", json=body)
            assert response.status_code == status, (body, response.text)
        assert (await http.get("/runs/crons/not-a-uuid")).status_code == 422
        assert (await http.patch(f"/runs/crons/{cid}", json={})).status_code == 400
        assert (await http.patch(f"/runs/crons/{cid}", json={"metadata": None})).status_code == 400
        assert (await http.patch(f"/runs/crons/{cid}", json={"schedule": "0 0 31 2 *"})).status_code == 422
        assert (await http.patch(f"/runs/crons/{cid}", json={"schedule": "nope"})).status_code == 422
        assert (await http.post("/runs/crons/search", json={"limit": 5000})).status_code == 422
        assert (await http.post("/runs/crons/search", json={"sort_by": "schedule"})).status_code == 422
    assert await a.crons.count() == 2
    assert (await a.http.get(f"/runs/crons/{cid}"))["schedule"] == "0 0 1 6 *"

    # The quota (4 per principal): the fifth is 429, nothing stored.
    await a.crons.create("nested", schedule=NEVER_SOON)
    await a.crons.create("nested", schedule=NEVER_SOON)
    with pytest.raises(httpx.HTTPStatusError) as exc:
        await a.crons.create("nested", schedule=NEVER_SOON)
    assert _status(exc) == 429 and await a.crons.count() == 4

    await b.crons.delete(cid)
    with pytest.raises(httpx.HTTPStatusError) as exc:
        await a.http.get(f"/runs/crons/{cid}")
    assert _status(exc) == 404
    assert await a.crons.count() == 3

    # As langgraph-api: a deleted thread's crons go with it, and a deleted assistant's.
    await a.threads.delete(tid)
    assert await b.crons.count() == 2
    made_assistant = await a.assistants.create("nested")
    await b.crons.create(made_assistant["assistant_id"], schedule=NEVER_SOON)
    assert await a.crons.count(assistant_id=made_assistant["assistant_id"]) == 1
    await b.assistants.delete(made_assistant["assistant_id"])
    assert await a.crons.count() == 2


async def test_each_tick_fires_once_across_two_replicas_and_end_time_stops_it(start) -> None:
    _, (a, b) = start("a", "b")
    tid = (await a.threads.create())["thread_id"]
    cron = await a.crons.create_for_thread(tid, "chat", schedule=EVERY_SECOND, input=HELLO)
    cid = cron["cron_id"]

    async def fired(n: int):
        runs, ran = await _ticks_ran(b, tid, cid)
        return len(runs) >= n and all(r["status"] == "success" for r in runs) and (runs, ran)

    await until(lambda: fired(4), "four ticks fired", timeout=30)
    await a.crons.update(cid, enabled=False)
    await until(lambda: fired(4), "the last tick's run ended", timeout=30)
    runs, ran = await _ticks_ran(b, tid, cid)
    assert ran == len(runs)  # the graph ran once per run: no tick fired twice
    assert len({r["run_id"] for r in runs}) == len(runs)
    assert all(r["metadata"] is not None for r in runs)

    # A stateless cron that ends two seconds from now: its runs stop; with "keep" their threads
    # stay (each tick on a new thread, found by the cron's metadata).
    tag = uuid.uuid4().hex
    end = datetime.now(UTC) + timedelta(seconds=2)
    stateless = await b.crons.create(
        "chat",
        schedule=EVERY_SECOND,
        input=HELLO,
        metadata={"tag": tag},
        end_time=end,
        on_run_completed="keep",
    )
    await until(lambda: _past(end, 1.5), "the end time passed", timeout=10)
    threads = await until(
        lambda: a.threads.search(metadata={"tag": tag}, limit=100), "the cron's threads", timeout=10
    )
    assert 1 <= len(threads) <= 3
    after_end = len(threads)
    await until(lambda: _past(end, 2.5), "a second more", timeout=10)
    assert len(await a.threads.search(metadata={"tag": tag}, limit=100)) == after_end
    assert (await a.http.get(f"/runs/crons/{stateless['cron_id']}"))["enabled"] is True


async def test_a_ticks_run_has_the_crons_context_and_its_cron_id_in_configurable(start) -> None:
    # As langgraph-api: a context does not go with a configurable in a request, yet the run of a
    # cron with one sees the cron's id in its configurable (LangGraph copies it into every
    # checkpoint's metadata), and the context as given.
    _, (a,) = start("a")
    tid = (await a.threads.create())["thread_id"]
    cron = await a.crons.create_for_thread(
        tid, "nested", schedule=EVERY_SECOND, input={"topic": "y"}, context={"style": "bold"}
    )

    async def first_ran():
        runs = await a.runs.list(tid)  # newest first
        return runs and runs[-1]["status"] == "success" and runs[-1]

    first = await until(first_ran, "the first tick's run ended", timeout=30)
    await a.crons.delete(cron["cron_id"])
    assert "bold y" in (await a.threads.get_state(tid))["values"]["notes"]
    history = await a.threads.get_history(tid, limit=100)
    assert {
        h["metadata"].get("cron_id") for h in history if h["metadata"].get("run_id") == first["run_id"]
    } == {cron["cron_id"]}
    assert "langgraph_cron_id" not in first["kwargs"]


def _past(when: datetime, seconds: float) -> bool:
    return datetime.now(UTC) >= when + timedelta(seconds=seconds)


async def test_a_replica_killed_holding_a_tick_loses_no_run_and_fires_none_twice(start, fresh_redis) -> None:
    (a,), (ca,) = start("a")
    tid = (await ca.threads.create())["thread_id"]
    cron = await ca.crons.create_for_thread(tid, "chat", schedule=EVERY_SECOND, input=HELLO)
    cid = cron["cron_id"]
    store = redis.Redis.from_url(redis_env(fresh_redis)["CHECKPOINT_REDIS_URL"])
    # Killed the moment it holds a claim on a tick (between claiming and advancing).
    until_claimed = 0
    while not store.exists(cron_claim_key(cid)):
        until_claimed += 1
        assert until_claimed < 200_000, "replica a never claimed a tick"
    a.kill()
    claimed = store.exists(cron_claim_key(cid))
    tick = int(store.hget(cron_keys().next, cid))
    _, (cb,) = start("b")
    if claimed:  # a died before advancing: b fires that very tick, once it may
        run_id = tick_ids(cid, tick)[0]
        await until(lambda: _has_run(cb, tid, run_id), "the killed replica's tick fired", timeout=30)
    runs_then = len(await cb.runs.list(tid, limit=1000))
    await until(lambda: _more_runs(cb, tid, runs_then + 2), "b firing the ticks after it", timeout=30)
    await cb.crons.update(cid, enabled=False)

    async def settled():
        runs, ran = await _ticks_ran(cb, tid, cid)
        return all(r["status"] in ("success", "error") for r in runs) and (runs, ran)

    runs, ran = await until(settled, "every run ended", timeout=60)
    assert ran == len(runs) and len({r["run_id"] for r in runs}) == len(runs)


async def _has_run(client, thread_id: str, run_id: str) -> bool:
    return run_id in {r["run_id"] for r in await client.runs.list(thread_id, limit=1000)}


async def _more_runs(client, thread_id: str, n: int) -> bool:
    return len(await client.runs.list(thread_id, limit=1000)) >= n


async def test_one_sqlite_replica_keeps_and_fires_crons_in_process(start_sqlite) -> None:
    client = start_sqlite()
    tid = (await client.threads.create())["thread_id"]
    cron = await client.crons.create_for_thread(tid, "chat", schedule=EVERY_SECOND, input=HELLO)
    assert (await client.http.get(f"/runs/crons/{cron['cron_id']}"))["thread_id"] == tid
    await until(lambda: _more_runs(client, tid, 2), "two ticks fired", timeout=30)
    await client.crons.delete(cron["cron_id"])
    assert await client.crons.count() == 0

    async def settled():
        runs, ran = await _ticks_ran(client, tid, cron["cron_id"])
        return all(r["status"] == "success" for r in runs) and (runs, ran)

    runs, ran = await until(settled, "every run ended", timeout=30)
    assert ran == len(runs) >= 2
