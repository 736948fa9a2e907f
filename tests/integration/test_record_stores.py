"""The record store contract, run against both implementations: Redis (a real server) and the
in-process store of the single-process backends."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from threadline.config import QuotaSettings
from threadline.quotas import LocalQuotas, QuotaExceeded, RedisQuotas, RunCharge
from threadline.redis_client import async_client
from threadline.redis_keys import principal_threads_key
from threadline.runs.records import (
    END_EVENT,
    CancelRequested,
    RecordStore,
    RunExists,
    RunRecord,
    RunRejected,
    ThreadRecord,
    now_iso,
    shown_status,
)
from threadline.runs.records_local import LocalRecordStore
from threadline.runs.records_redis import RedisRecordStore

from servers import until

pytestmark = pytest.mark.integration


@pytest.fixture(params=["redis", "local"])
async def store(request, redis_server) -> AsyncIterator[RecordStore]:
    if request.param == "local":
        yield LocalRecordStore()
        return
    client = async_client(redis_server.url(5))
    await client.flushdb()
    yield RedisRecordStore(client, ttl_seconds=60)
    await client.aclose()


async def create(store: RecordStore, run: RunRecord, **options) -> bool:
    """Store and queue ``run`` (its lease not taken); whether it heads its thread's queue."""
    first, _ = await store.create_and_start_run(run, **options)
    return first


def thread(owner: str = "alice", **metadata) -> ThreadRecord:
    now = now_iso()
    return ThreadRecord(str(uuid.uuid4()), owner, now, now, dict(metadata))


def run_on(thread_id: str, owner: str = "alice") -> RunRecord:
    now = now_iso()
    return RunRecord(
        str(uuid.uuid4()), thread_id, owner, "a", now, now, "pending", {}, "enqueue", {"input": 1}
    )


async def test_threads_are_created_once_updated_listed_per_owner_and_deleted(store: RecordStore) -> None:
    mine, other = thread(tag="x"), thread("bob")
    assert await store.create_thread(mine) and await store.create_thread(other)
    assert not await store.create_thread(mine)  # exists: not replaced
    await store.update_thread(mine.thread_id, metadata={"tag": "y"}, status="interrupted")
    got = await store.get_thread(mine.thread_id)
    assert got is not None and got.metadata == {"tag": "y"} and got.status == "interrupted"
    assert [t.thread_id for t in await store.threads_of("alice")] == [mine.thread_id]
    run = run_on(mine.thread_id)
    await create(store, run, reject_if_busy=False)
    await store.delete_thread(mine.thread_id)
    assert await store.get_thread(mine.thread_id) is None
    assert await store.get_run(mine.thread_id, run.run_id) is None
    assert await store.threads_of("alice") == []
    # A late update or a run ending after the delete does not revive anything.
    await store.update_thread(mine.thread_id, status="idle")
    await store.finish_run(mine.thread_id, run.run_id, "success", "idle", b"{}")
    assert await store.get_thread(mine.thread_id) is None
    assert await store.get_run(mine.thread_id, run.run_id) is None
    assert await store.result(mine.thread_id, run.run_id, 0) is None
    assert await store.read_events(mine.thread_id, run.run_id, None, 0) == []


async def test_runs_queue_in_order_reject_a_busy_thread_and_finish_keeping_what_is_asked_for(
    store: RecordStore,
) -> None:
    t = thread()
    await store.create_thread(t)
    with pytest.raises(KeyError):
        await create(store, run_on(str(uuid.uuid4())), reject_if_busy=False)
    first, second = run_on(t.thread_id), run_on(t.thread_id)
    await create(store, first, reject_if_busy=True)
    with pytest.raises(RunRejected):
        await create(store, run_on(t.thread_id), reject_if_busy=True)
    await create(store, second, reject_if_busy=False)
    assert (await store.get_thread(t.thread_id)).status == "busy"
    assert await store.first_active_run(t.thread_id) == first.run_id
    assert [r.run_id for r in await store.runs_of(t.thread_id)] == [second.run_id, first.run_id]

    await store.set_run_status(t.thread_id, first.run_id, "running")
    one = await store.append_event(t.thread_id, first.run_id, "values", b'{"a":1}')
    two = await store.append_event(t.thread_id, first.run_id, "values", b'{"a":2}')
    assert [e.id for e in await store.read_events(t.thread_id, first.run_id, None, 0)] == [one, two]
    assert [e.data for e in await store.read_events(t.thread_id, first.run_id, one, 0)] == [b'{"a":2}']
    assert await store.result(t.thread_id, first.run_id, 0.05) is None

    await store.watch_result(t.thread_id, first.run_id, 5)
    await store.finish_run(
        t.thread_id, first.run_id, "success", "interrupted", b'{"done":1}', keep_events=True
    )
    ended = await store.get_run(t.thread_id, first.run_id)
    assert (ended.status, ended.result) == ("success", None)
    # Left for the joiner on another replica; in one process the executor hands it over.
    assert await store.result(t.thread_id, first.run_id, 1) == (b'{"done":1}' if store.shared else None)
    events = await store.read_events(t.thread_id, first.run_id, two, 0)
    assert [e.event for e in events] == [END_EVENT]  # kept, after the run's own
    # Another run is queued: the thread stays busy until the last one ends.
    assert (await store.get_thread(t.thread_id)).status == "busy"
    assert await store.first_active_run(t.thread_id) == second.run_id
    await store.append_event(t.thread_id, second.run_id, "values", b'{"a":3}')
    failure = b'{"__error__":{"error":"ValueError"}}'
    await store.finish_run(t.thread_id, second.run_id, "error", "error", failure)
    assert (await store.get_thread(t.thread_id)).status == "error"
    assert await store.first_active_run(t.thread_id) is None
    # Nobody asked for its events or waited for its result: its error stays with its record.
    assert (await store.get_run(t.thread_id, second.run_id)).result == failure
    assert await store.read_events(t.thread_id, second.run_id, None, 0) == []
    assert await store.result(t.thread_id, second.run_id, 0) is None


async def test_a_reader_waits_for_events_and_the_end(store: RecordStore) -> None:
    t = thread()
    await store.create_thread(t)
    run = run_on(t.thread_id)
    await create(store, run, reject_if_busy=False)
    reader = asyncio.create_task(store.read_events(t.thread_id, run.run_id, None, 3))
    await store.watch_result(t.thread_id, run.run_id, 5)
    joiner = asyncio.create_task(store.result(t.thread_id, run.run_id, 3))
    await asyncio.sleep(0.1)  # time to return early, were they to
    assert not reader.done() and not joiner.done()
    await store.append_event(t.thread_id, run.run_id, "custom", b"1")
    assert [e.event for e in await reader] == ["custom"]
    await store.finish_run(t.thread_id, run.run_id, "success", "idle", b'{"ok":true}')
    # Woken by the end (not by its 3 s wait running out), the result with it where joiners
    # on other replicas need it.
    done, _ = await asyncio.wait({joiner}, timeout=2)
    assert done and joiner.result() == (b'{"ok":true}' if store.shared else None)


async def test_cancel_requests_reach_the_waiter(store: RecordStore) -> None:
    t = thread()
    await store.create_thread(t)
    run = run_on(t.thread_id)
    await create(store, run, reject_if_busy=False)
    waiter = asyncio.create_task(store.wait_cancel(t.thread_id, run.run_id))
    await asyncio.sleep(0.1)  # time to return early, were it to
    assert not waiter.done()
    await store.request_cancel(t.thread_id, run.run_id, "rollback")
    assert await asyncio.wait_for(waiter, 2) == "rollback"
    await store.request_cancel(t.thread_id, run.run_id, "interrupt")  # the first one counts
    assert await store.wait_cancel(t.thread_id, run.run_id) == "rollback"
    # The record says so at once (the API shows it interrupted), its own status still active.
    record = await store.get_run(t.thread_id, run.run_id)
    assert (record.status, record.cancel, shown_status(record)) == ("pending", "rollback", "interrupted")
    await store.finish_run(t.thread_id, run.run_id, "interrupted", "idle", b"{}")
    assert shown_status(await store.get_run(t.thread_id, run.run_id)) == "interrupted"


async def test_an_accepted_cancel_wins_over_the_runs_own_end(store: RecordStore) -> None:
    """A cancel and the run's end race: whichever the store takes first decides. A run that
    ends on its own after a cancel was accepted is not recorded as ended (its executor
    cancels it); a cancel that comes after the end is refused and stores nothing."""
    t = thread()
    await store.create_thread(t)
    cancelled, finished = run_on(t.thread_id), run_on(t.thread_id)
    for run in (cancelled, finished):
        await create(store, run, reject_if_busy=False)
    assert await store.request_cancel(t.thread_id, cancelled.run_id, "rollback")
    with pytest.raises(CancelRequested) as request:
        await store.finish_run(t.thread_id, cancelled.run_id, "success", "idle", b"{}", unless_cancelled=True)
    assert request.value.action == "rollback"
    assert (await store.get_run(t.thread_id, cancelled.run_id)).status == "pending"
    assert await store.finish_run(t.thread_id, cancelled.run_id, "interrupted", "idle", b"{}")

    assert await store.finish_run(
        t.thread_id, finished.run_id, "success", "idle", b"{}", unless_cancelled=True
    )
    assert not await store.request_cancel(t.thread_id, finished.run_id, "interrupt")
    # A cancel refused for a run that does not exist yet stores nothing: once the run exists,
    # its own end is not taken for a cancelled one.
    later = run_on(t.thread_id)
    assert not await store.request_cancel(t.thread_id, later.run_id, "interrupt")
    await create(store, later, reject_if_busy=False)
    assert await store.finish_run(t.thread_id, later.run_id, "success", "idle", b"{}", unless_cancelled=True)


async def test_a_run_ends_once(store: RecordStore) -> None:
    t = thread()
    await store.create_thread(t)
    run = run_on(t.thread_id)
    await create(store, run, reject_if_busy=False)
    await store.watch_result(t.thread_id, run.run_id, 5)
    assert await store.finish_run(t.thread_id, run.run_id, "success", "idle", b'{"n":1}')
    assert not await store.finish_run(t.thread_id, run.run_id, "error", "error", b'{"n":2}')
    got = await store.get_run(t.thread_id, run.run_id)
    assert got is not None and (got.status, got.result) == ("success", None)
    assert await store.result(t.thread_id, run.run_id, 0) == (b'{"n":1}' if store.shared else None)
    assert (await store.get_thread(t.thread_id)).status == "idle"


async def test_a_run_id_is_created_once(store: RecordStore) -> None:
    """A cron tick's run (ADR 0019): a second creation under its id stores nothing."""
    t = thread()
    await store.create_thread(t)
    run = run_on(t.thread_id)
    assert await create(store, run, reject_if_busy=False)
    with pytest.raises(RunExists):
        await create(store, replace(run, metadata={"again": True}), reject_if_busy=False)
    got = await store.get_run(t.thread_id, run.run_id)
    assert got is not None and got.metadata == {} and len(await store.runs_of(t.thread_id)) == 1
    assert [r.run_id for r in await store.runs_of(t.thread_id)] == [run.run_id]


async def test_a_run_is_stored_only_on_a_thread_of_its_owner(store: RecordStore) -> None:
    """A run on a thread its owner does not own (another principal's, or one recreated by
    another under the same id) is refused as a missing thread, storing nothing: a run that
    skips reading its thread (Threads.owner_known) relies on it."""
    bobs = thread("bob")
    await store.create_thread(bobs)
    with pytest.raises(KeyError):
        await create(store, run_on(bobs.thread_id, owner="alice"), reject_if_busy=False)
    assert await store.runs_of(bobs.thread_id) == []
    assert await store.active_runs() == []
    got = await store.get_thread(bobs.thread_id)
    assert got is not None and got.status == "idle"
    assert await create(store, run_on(bobs.thread_id, owner="bob"), reject_if_busy=False)


async def test_a_run_for_a_thread_as_read_is_refused_on_one_made_again(store: RecordStore) -> None:
    """``thread_made_at``: the thread as a replica last read it. Deleted and made again under
    the same id and owner (a client-chosen id), it is refused as missing, storing nothing."""
    old = thread()
    await store.create_thread(old)
    again = replace(old, created_at=now_iso())
    await store.delete_thread(old.thread_id)
    await store.create_thread(again)
    with pytest.raises(KeyError):
        await create(store, run_on(old.thread_id), reject_if_busy=False, thread_made_at=old.created_at)
    assert await store.runs_of(old.thread_id) == []
    assert await create(store, run_on(old.thread_id), reject_if_busy=False, thread_made_at=again.created_at)


async def test_a_run_refused_for_its_owner_counts_no_bytes(redis_server) -> None:
    """The owner is checked before the run's charge (RunCharge): another principal's thread
    gets no bytes counted on it by a refused run."""
    client = async_client(redis_server.url(7))
    await client.flushdb()
    store = RedisRecordStore(client, ttl_seconds=60)
    quotas = RedisQuotas(client, QuotaSettings(thread_bytes=100), 60)
    bobs = thread("bob")
    await store.create_thread(bobs)
    with pytest.raises(KeyError):
        charge = quotas.run_charge("alice", bobs.thread_id, 60)
        await create(store, run_on(bobs.thread_id, owner="alice"), reject_if_busy=False, charge=charge)
    assert await quotas.used_bytes(bobs.thread_id) == 0
    await client.aclose()


async def test_a_runs_bytes_are_counted_as_it_is_stored_and_a_refused_run_stores_nothing(
    redis_server,
) -> None:
    """A RunCharge (issue 24): the run's bytes are counted toward its thread's quota in the
    step that stores it. Past QUOTA_THREAD_BYTES nothing is stored but the thread's activity
    mark (as RedisQuotas.add_message_bytes does), and the error names the setting."""
    client = async_client(redis_server.url(7))
    await client.flushdb()
    store = RedisRecordStore(client, ttl_seconds=60)
    quotas = RedisQuotas(client, QuotaSettings(thread_bytes=100), 60, clock=lambda: 1000.0)
    t = thread()
    await store.create_thread(t)

    def charge(n: int) -> RunCharge | None:
        return quotas.run_charge("alice", t.thread_id, n)

    await quotas.reserve_thread("alice", t.thread_id)
    await client.zadd(principal_threads_key("alice"), {t.thread_id: 1})  # active long ago
    first = run_on(t.thread_id)
    assert await create(
        store, first, reject_if_busy=False, charge=quotas.run_charge("alice", t.thread_id, 60)
    )
    assert await quotas.used_bytes(t.thread_id) == 60
    assert await client.zscore(principal_threads_key("alice"), t.thread_id) == 1_000_000  # marked now
    await client.zadd(principal_threads_key("alice"), {t.thread_id: 1})
    refused = run_on(t.thread_id)
    with pytest.raises(QuotaExceeded) as exc:
        await create(store, refused, reject_if_busy=False, charge=charge(41))
    assert (exc.value.setting, exc.value.limit) == ("QUOTA_THREAD_BYTES", 100)
    assert await quotas.used_bytes(t.thread_id) == 60
    assert await store.get_run(t.thread_id, refused.run_id) is None
    assert [r.run_id for r in await store.runs_of(t.thread_id)] == [first.run_id]
    assert (t.thread_id, refused.run_id) not in await store.active_runs()
    assert await client.zscore(principal_threads_key("alice"), t.thread_id) == 1_000_000  # marked still
    second = run_on(t.thread_id)  # what fits still goes, queued behind the first
    assert not await create(
        store, second, reject_if_busy=False, charge=quotas.run_charge("alice", t.thread_id, 40)
    )
    assert await quotas.used_bytes(t.thread_id) == 100
    await client.aclose()


async def test_the_local_store_takes_no_charge() -> None:
    """Its quotas count in-process on their own (LocalQuotas.run_charge is None)."""
    store, t = LocalRecordStore(), thread()
    await store.create_thread(t)
    assert LocalQuotas(QuotaSettings(thread_bytes=100)).run_charge("alice", t.thread_id, 10) is None
    charge = RunCharge(("b", "p"), (10, 100, 60, t.thread_id, 0, 60_000), 100)
    with pytest.raises(ValueError, match="RunCharge"):
        await create(store, run_on(t.thread_id), reject_if_busy=False, charge=charge)
    assert await store.runs_of(t.thread_id) == []


async def test_a_lapsed_heartbeat_is_claimed_once_and_its_old_executor_can_no_longer_end_the_run(
    redis_server,
) -> None:
    client = async_client(redis_server.url(7))
    await client.flushdb()
    store = RedisRecordStore(client, ttl_seconds=60)
    t = thread()
    await store.create_thread(t)
    run = run_on(t.thread_id)
    assert await store.beat(t.thread_id, run.run_id, 0.2, "old")
    await create(store, run, reject_if_busy=False)
    assert (t.thread_id, run.run_id) in await store.active_runs()
    assert await store.claim(t.thread_id, run.run_id, 5, "new") == 0  # alive: not an orphan

    async def lapsed() -> bool:
        return not await store.alive(t.thread_id, run.run_id)

    await until(lapsed, "the 0.2 s heartbeat to lapse")
    claims = await asyncio.gather(*(store.claim(t.thread_id, run.run_id, 5, f"new{i}") for i in range(5)))
    assert sorted(claims) == [0, 0, 0, 0, 2]  # exactly one claim wins: the run's second attempt
    winner = f"new{claims.index(2)}"
    # The old executor wakes up (a paused replica): it neither renews nor ends the run.
    assert not await store.beat(t.thread_id, run.run_id, 5, "old")
    assert not await store.finish_run(t.thread_id, run.run_id, "error", "error", b"{}", "old")
    assert await store.finish_run(t.thread_id, run.run_id, "success", "idle", b"{}", winner)
    assert await store.claim(t.thread_id, run.run_id, 5, "late") == 0  # ended: nothing to claim
    await store.forget_active(t.thread_id, run.run_id)
    assert await store.active_runs() == []
    await client.aclose()


async def test_the_heartbeat_set_with_a_run_names_its_executor(redis_server) -> None:
    """create_and_start_run sets the heartbeat in the same step as the run (one round trip): it must name
    the executor, so another executor can neither renew it, claim the run, nor end it."""
    client = async_client(redis_server.url(8))
    await client.flushdb()
    store = RedisRecordStore(client, ttl_seconds=60)
    t = thread()
    await store.create_thread(t)
    run = run_on(t.thread_id)
    assert await create(store, run, reject_if_busy=False, alive_seconds=5, executor="mine")
    assert (t.thread_id, run.run_id) in await store.active_runs()
    assert await store.alive(t.thread_id, run.run_id)
    assert not await store.beat(t.thread_id, run.run_id, 5, "other")
    assert await store.claim(t.thread_id, run.run_id, 5, "other") == 0
    assert not await store.finish_run(t.thread_id, run.run_id, "error", "error", b"{}", "other")
    assert await store.beat(t.thread_id, run.run_id, 5, "mine")
    assert await store.finish_run(t.thread_id, run.run_id, "success", "idle", b"{}", "mine")
    await client.aclose()


async def test_a_finished_runs_kept_events_and_result_expire_sooner_than_its_record(redis_server) -> None:
    from threadline.redis_keys import run_end_key, run_events_key, run_key
    from threadline.runs.records import FINISHED_EVENTS_TTL_SECONDS

    client = async_client(redis_server.url(6))
    store = RedisRecordStore(client, ttl_seconds=FINISHED_EVENTS_TTL_SECONDS * 24)
    t = thread()
    await store.create_thread(t)
    run = run_on(t.thread_id)
    await create(store, run, reject_if_busy=False)
    await store.append_event(t.thread_id, run.run_id, "values", b"{}")
    await store.watch_result(t.thread_id, run.run_id, 5)
    await store.finish_run(t.thread_id, run.run_id, "success", "idle", b"{}", keep_events=True)
    assert 0 < await client.ttl(run_events_key(t.thread_id, run.run_id)) <= FINISHED_EVENTS_TTL_SECONDS
    assert await client.ttl(run_key(t.thread_id, run.run_id)) > FINISHED_EVENTS_TTL_SECONDS
    assert 0 < await client.ttl(run_end_key(t.thread_id, run.run_id)) <= FINISHED_EVENTS_TTL_SECONDS
    await client.aclose()


@pytest.mark.parametrize("watching", ["nobody", "the run", "its thread"])
async def test_a_run_keeps_its_events_only_while_a_client_on_any_replica_can_ask_for_them(
    redis_server, watching: str
) -> None:
    """Issue 18 bullet 4: the executor does not know of a client streaming the run, or its
    thread, from another replica; the store's end looks for their watch keys. Without one, the
    run's events and its result go with its end: only its record stays."""
    from threadline.redis_keys import run_end_key, run_events_key, run_key

    client = async_client(redis_server.url(6))
    store = RedisRecordStore(client, ttl_seconds=60)
    t = thread()
    await store.create_thread(t)
    run = run_on(t.thread_id)
    await create(store, run, reject_if_busy=False, event=("metadata", b"{}"))
    if watching == "the run":
        await store.watch_events(t.thread_id, run.run_id, 5)
    elif watching == "its thread":
        await store.watch_thread(t.thread_id, 5)
    await store.append_event(t.thread_id, run.run_id, "values", b'{"a":1}')
    assert await store.finish_run(
        t.thread_id, run.run_id, "success", "idle", b'{"a":2}', events=[("values", b'{"a":2}')]
    )
    events = [(e.event, e.data) for e in await store.read_events(t.thread_id, run.run_id, None, 0)]
    if watching == "nobody":
        assert events == []
        assert not await client.exists(run_events_key(t.thread_id, run.run_id))
    else:
        assert events == [("values", b'{"a":1}'), ("values", b'{"a":2}'), (END_EVENT, b"")]
    assert not await client.exists(run_end_key(t.thread_id, run.run_id))  # nobody joined it
    assert await client.exists(run_key(t.thread_id, run.run_id))
    await client.aclose()


@pytest.mark.parametrize(
    "asking", ["nobody", "a failed run's reader", "a streamer", "a follower", "a joiner"]
)
async def test_a_run_sends_its_events_and_result_with_its_end_only_when_a_client_can_ask_for_them(
    redis_server, asking: str
) -> None:
    """Issue 24: a run's events (``values``: whole states) and its result are most of what a
    run nobody streams sends Redis, and its end drops them. So they go only to a client that
    can ask for them: one on another replica streaming the run or its thread, or waiting for
    its result (their keys), makes the store send them in a second call; a failed run's
    result, kept with its record, always goes."""
    from threadline.redis_keys import run_end_key, run_events_key

    client = async_client(redis_server.url(6))
    store = RedisRecordStore(client, ttl_seconds=60)
    t = thread()
    await store.create_thread(t)
    run = run_on(t.thread_id)
    await create(store, run, reject_if_busy=False)
    if asking == "a streamer":
        await store.watch_events(t.thread_id, run.run_id, 5)
    elif asking == "a follower":
        await store.watch_thread(t.thread_id, 5)
    elif asking == "a joiner":
        await store.watch_result(t.thread_id, run.run_id, 5)
    sent: list[int] = []
    script = store._script

    async def counted(name, keys, args):  # the bytes of each FINISH_RUN's ARGV
        sent.append(sum(len(a) for a in args if isinstance(a, bytes)))
        return await script(name, keys, args)

    store._script = counted
    state = b'{"messages":"' + b"x" * 20_000 + b'"}'
    status = "error" if asking == "a failed run's reader" else "success"
    assert await store.finish_run(
        t.thread_id, run.run_id, status, "idle", state, events=[("values", state), ("values", state)]
    )
    events = [(e.event, e.data) for e in await store.read_events(t.thread_id, run.run_id, None, 0)]
    result = await store.result(t.thread_id, run.run_id, 0)
    if asking == "nobody":
        assert sent == [sent[0]] and sent[0] < 1000
    elif asking == "a failed run's reader":
        assert sent == [sent[0]] and 20_000 < sent[0] < 40_000  # the result, not the events
        assert (await store.get_run(t.thread_id, run.run_id)).result == state
    else:
        assert len(sent) == 2 and sent[0] < 1000 and sent[1] > 60_000
    if asking in ("a streamer", "a follower"):
        assert events == [("values", state), ("values", state), (END_EVENT, b"")]
    else:
        assert events == [] and not await client.exists(run_events_key(t.thread_id, run.run_id))
    if asking == "a joiner":
        assert result == state
    else:
        assert result is None and not await client.exists(run_end_key(t.thread_id, run.run_id))
    await client.aclose()


async def test_a_run_deleted_with_its_thread_is_not_set_running(store: RecordStore) -> None:
    """The executor marks its run running only if it still exists: a thread deleted between
    the run's creation and its start must not come back through the run's first write."""
    t = thread()
    await store.create_thread(t)
    run = run_on(t.thread_id)
    assert await create(store, run, reject_if_busy=False, alive_seconds=5)  # heads the queue
    second = run_on(t.thread_id)
    assert not await create(store, second, reject_if_busy=False)  # queued behind it
    assert await store.alive(t.thread_id, run.run_id)
    event_id = await store.set_run_status(t.thread_id, run.run_id, "running", ("metadata", b"{}"))
    assert [e.id for e in await store.read_events(t.thread_id, run.run_id, None, 0)] == [event_id]
    await store.delete_thread(t.thread_id)
    with pytest.raises(KeyError):
        await store.set_run_status(t.thread_id, second.run_id, "running", ("metadata", b"{}"))
    assert await store.get_run(t.thread_id, second.run_id) is None
    assert await store.read_events(t.thread_id, second.run_id, None, 0) == []


async def test_a_run_on_an_idle_thread_starts_with_the_lease_and_ends_releasing_it(redis_server) -> None:
    """One round trip each way: ``create_and_start_run`` takes the thread's turn lease (a token
    the saver's fencing accepts: the lease's own format) and marks the run running with its
    first event; ``finish_run`` releases the lease and appends the run's last events before
    its end. A run queued behind it gets no lease, and a lease that is not free is not taken."""
    from threadline.lease import HeldLease, RedisTurnLease
    from threadline.redis_keys import active_runs_key, lease_key

    client = async_client(redis_server.url(5))
    await client.flushdb()
    store = RedisRecordStore(client, ttl_seconds=60)
    lease = RedisTurnLease(client, lease_seconds=5, wait_seconds=0.2, counter_ttl_seconds=60)
    try:
        t = thread()
        await store.create_thread(t)
        run, second = run_on(t.thread_id), run_on(t.thread_id)
        suffix = lease.token_suffix()
        first, token = await store.create_and_start_run(
            run,
            False,
            5,
            "exec",
            lease_ms=lease.lease_ms,
            event=("metadata", b'{"attempt":1}'),
            token_suffix=suffix,
        )
        assert first and token is not None and token.split(".")[1] == suffix
        assert (await client.get(lease_key(t.thread_id))).decode() == token
        assert (await store.get_run(t.thread_id, run.run_id)).status == "running"
        assert [e.event for e in await store.read_events(t.thread_id, run.run_id, None, 0)] == ["metadata"]
        assert await store.create_and_start_run(second, False, 5, "other", lease_ms=lease.lease_ms) == (
            False,
            None,
        )
        members = {m.decode() for m in await client.zrange(active_runs_key(), 0, -1)}
        assert members == {f"{t.thread_id} {run.run_id}", f"{t.thread_id} {second.run_id}"}

        held = HeldLease(t.thread_id, token, handed_off=True)
        events = [("values", b'{"a":1}'), ("values", b'{"a":2}')]
        assert await store.finish_run(
            t.thread_id,
            run.run_id,
            "success",
            "idle",
            b'{"a":2}',
            "exec",
            events=events,
            lease=held,
            keep_events=True,
        )
        assert held.released and await client.get(lease_key(t.thread_id)) is None
        logged = await store.read_events(t.thread_id, run.run_id, None, 0)
        assert [(e.event, e.data) for e in logged][1:] == [*events, (END_EVENT, b"")]
        assert {m.decode() for m in await client.zrange(active_runs_key(), 0, -1)} == {
            f"{t.thread_id} {second.run_id}"
        }

        async with lease.hold(t.thread_id):  # a /v1 turn holds the lease: nothing is taken
            other = thread()
            await store.create_thread(other)
            busy = run_on(other.thread_id)
            await client.set(lease_key(other.thread_id), "someone", px=5000)
            assert await store.create_and_start_run(busy, False, 5, "x", lease_ms=lease.lease_ms) == (
                True,
                None,
            )
            assert (await store.get_run(other.thread_id, busy.run_id)).status == "pending"
    finally:
        await client.aclose()


async def test_a_custom_auth_filter_is_applied_as_the_store_reads(store: RecordStore) -> None:
    owner = f"filtered-{uuid.uuid4().hex[:6]}"
    public, pinned, hidden = (
        thread(owner, tags=["public"]),
        thread(owner, pinned=True),
        thread(owner, tags=["x"]),
    )
    for record in (public, pinned, hidden):
        assert await store.create_thread(record)
    visible = {"$or": [{"tags": {"$contains": "public"}}, {"pinned": {"$eq": True}}]}
    assert {t.thread_id for t in await store.threads_of(owner, visible)} == {
        public.thread_id,
        pinned.thread_id,
    }
    assert len(await store.threads_of(owner)) == 3
    assert await store.get_thread(hidden.thread_id, visible) is None
    assert (await store.get_thread(public.thread_id, visible)).thread_id == public.thread_id
    assert await store.get_thread(hidden.thread_id) is not None  # no filter: the record as it is


async def test_expired_threads_are_claimed_once_until_retried_and_keep_their_ttl(store: RecordStore) -> None:
    due, later, gone = thread(), thread(), thread()
    due.ttl = {"strategy": "delete", "ttl_minutes": 1, "expires_at": now_iso()}
    for record in (due, later, gone):
        await store.create_thread(record)
    now = 1_000_000.0
    await store.expire_thread(due.thread_id, now - 1)
    await store.expire_thread(later.thread_id, now + 60)
    await store.expire_thread(gone.thread_id, now - 2)
    await store.delete_thread(gone.thread_id)  # leaves the index with its thread
    got = await store.get_thread(due.thread_id)
    assert got is not None and got.ttl == due.ttl  # the record holds the TTL
    # One sweep claims what is due; another sweep meanwhile gets nothing, until the retry.
    assert await store.expired_threads(now, 10, 30) == [due.thread_id]
    assert await store.expired_threads(now + 29, 10, 30) == []
    assert await store.expired_threads(now + 30, 10, 30) == [due.thread_id]
    await store.expire_thread(due.thread_id, None)
    assert await store.expired_threads(now + 100, 10, 30) == [later.thread_id]
    await store.update_thread(later.thread_id, ttl=None)
    got = await store.get_thread(later.thread_id)
    assert got is not None and got.ttl is None
