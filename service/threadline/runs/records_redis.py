"""The record store on the checkpoint Redis (keys in :mod:`threadline.redis_keys`):
:class:`RedisRecordStore`, the :class:`~threadline.runs.records.RecordStore` any replica reads.

Every key of a thread's records shares the thread's ``{thread_id}`` hash tag, so its scripts
(:mod:`threadline.runs.records_redis_scripts`) touch them atomically (also on Redis Cluster)
and they carry the checkpoint TTL. The per-principal thread index is the one key outside a
thread's tag: it is written in a second command after the thread record and cleaned lazily (an
id whose record is gone is dropped when the index is read). How a record is stored is
:mod:`threadline.runs.records_redis_codec`; the cancel requests runs wait for are polled by
:mod:`threadline.runs.records_redis_cancels`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import redis.asyncio as aioredis

from threadline import access
from threadline.access import Filters
from threadline.checkpoint.redis import pipelining
from threadline.lease import HeldLease
from threadline.quotas import THREAD_BYTES, QuotaExceeded, RunCharge
from threadline.redis_client import is_cluster
from threadline.redis_keys import (
    active_runs_key,
    fence_counter_key,
    lease_key,
    owner_threads_key,
    run_cancel_key,
    run_end_key,
    run_events_key,
    run_heartbeat_key,
    run_join_key,
    run_key,
    run_queue_key,
    run_watch_key,
    runs_index_key,
    thread_expiry_key,
    thread_record_key,
    thread_watch_key,
)
from threadline.runs import records_redis_codec as codec
from threadline.runs import records_redis_scripts as scripts
from threadline.runs.records import (
    END_EVENT,
    EVENTS_PAGE,
    FAILED_RUN_STATUSES,
    FINISHED_EVENTS_TTL_SECONDS,
    CancelRequested,
    QueueFull,
    RunEvent,
    RunExists,
    RunRecord,
    RunRejected,
    ThreadRecord,
    now_iso,
)
from threadline.runs.records_redis_cancels import CancelPoller

# Blocking reads stay under the client's 5 s command timeout (threadline.redis_client).
MAX_BLOCK_SECONDS = 4.0


class RedisRecordStore:
    """Thread records, run records and run events in Redis.

    Args:
        client: the checkpoint Redis.
        ttl_seconds: TTL of every key, refreshed on each write (the checkpoint TTL).
        readers: the client of blocking reads (default: ``client``).
        reads_ahead: ``client`` is the ``redis`` saver's own (one batcher): see the attribute.
    """

    shared = True

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        ttl_seconds: int,
        readers: aioredis.Redis | None = None,
        reads_ahead: bool = False,
    ) -> None:
        self._client = client
        # Blocking reads (a stream's or a join's wait) go here, apart from the client of
        # leases and heartbeats (issue 18: 100 streams starved them into takeovers).
        self._readers = readers if readers is not None else client
        self._ttl = ttl_seconds
        # On one Redis (or Sentinel) the global active-run index goes in the run scripts; on a
        # Cluster it lives in another slot, so it costs a command of its own.
        self._cluster = is_cluster(client)
        self._cancels = CancelPoller(client)
        self._scripts = {name: client.register_script(text) for name, text in scripts.SCRIPTS.items()}
        # Script calls and record reads of one event-loop iteration (concurrent runs' starts
        # and ends, the quotas') share a round trip, as the saver's do (not on a Cluster,
        # whose pipelines split by slot).
        self._pipelining = pipelining.shared(client)
        self.reads_ahead = reads_ahead and self._pipelining is not None

    async def _script(self, name: str, keys: list[Any], args: list[Any]) -> Any:
        if self._pipelining is not None:
            return await self._pipelining.run(self._scripts[name], keys, args)
        return await self._scripts[name](keys=keys, args=args)

    async def _command(self, *args: Any) -> Any:
        """A read that is safe to repeat, with the batch when there is a batcher."""
        if self._pipelining is not None:
            return await self._pipelining.command(*args)
        return await self._client.execute_command(*args)

    async def ping(self) -> None:
        await self._client.ping()

    # -- threads --

    async def create_thread(self, record: ThreadRecord) -> bool:
        created = await self._script(
            "create_thread", [thread_record_key(record.thread_id)], [self._ttl, *codec.thread_fields(record)]
        )
        if created:
            index = owner_threads_key(codec.owner_digest(record.owner))
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.zadd(index, {record.thread_id: codec.score(record.created_at)})
                pipe.expire(index, self._ttl)
                await pipe.execute()
        return bool(created)

    async def get_thread(self, thread_id: str, filters: Filters | None = None) -> ThreadRecord | None:
        record = codec.decode_thread(thread_id, await self._command("HGETALL", thread_record_key(thread_id)))
        return record if record is not None and access.matches(record.metadata, filters) else None

    async def update_thread(self, thread_id: str, **fields: Any) -> None:
        args = [self._ttl, "updated_at", now_iso(), *codec.encode_fields(fields.items())]
        await self._script("update_thread", [thread_record_key(thread_id)], args)

    async def delete_thread(self, thread_id: str) -> None:
        record = await self.get_thread(thread_id)
        run_ids = [codec.text(r) for r in await self._client.zrange(runs_index_key(thread_id), 0, -1)]
        keys = [thread_record_key(thread_id), runs_index_key(thread_id), run_queue_key(thread_id)]
        for run_id in run_ids:
            keys += [
                run_key(thread_id, run_id),
                run_events_key(thread_id, run_id),
                run_cancel_key(thread_id, run_id),
                run_end_key(thread_id, run_id),
                run_heartbeat_key(thread_id, run_id),
            ]
        await self._client.delete(*keys)
        await self._client.zrem(thread_expiry_key(), thread_id)
        if record is not None:
            await self._client.zrem(owner_threads_key(codec.owner_digest(record.owner)), thread_id)

    async def threads_of(self, owner: str, filters: Filters | None = None) -> list[ThreadRecord]:
        index = owner_threads_key(codec.owner_digest(owner))
        ids = [codec.text(t) for t in await self._client.zrevrange(index, 0, -1)]
        if not ids:
            return []
        async with self._client.pipeline(transaction=False) as pipe:
            for thread_id in ids:
                pipe.hgetall(thread_record_key(thread_id))
            rows = await pipe.execute()
        records, gone = [], []
        for thread_id, row in zip(ids, rows, strict=True):
            record = codec.decode_thread(thread_id, row)
            if record is None or record.owner != owner:
                gone.append(thread_id)
            elif access.matches(record.metadata, filters):  # read in the one pipeline above
                records.append(record)
        if gone:  # expired or deleted threads: drop them from the index
            await self._client.zrem(index, *gone)
        return records

    async def expire_thread(self, thread_id: str, at: float | None) -> None:
        if at is None:
            await self._client.zrem(thread_expiry_key(), thread_id)
        else:
            await self._client.zadd(thread_expiry_key(), {thread_id: int(at * 1000)})

    async def expired_threads(self, now: float, limit: int, retry_seconds: float) -> list[str]:
        args = [int(now * 1000), int(retry_seconds * 1000), limit]
        due = await self._scripts["claim_expired"](keys=[thread_expiry_key()], args=args)
        return [codec.text(t) for t in due]  # type: ignore[misc]

    # -- runs --

    async def create_and_start_run(
        self,
        run: RunRecord,
        reject_if_busy: bool,
        alive_seconds: float | None = None,
        executor: str = "",
        lease_ms: int = 0,
        event: tuple[str, bytes] = ("", b""),
        max_queued: int = 0,
        token_suffix: str = "",
        charge: RunCharge | None = None,
        thread_made_at: str = "",
    ) -> tuple[bool, str | None]:
        member = f"{run.thread_id} {run.run_id}"
        if self._cluster:
            # Indexed before it is queued (a crash in between leaves an index entry the sweep
            # drops, never a queued run no sweep can find).
            await self._client.zadd(active_runs_key(), {member: codec.score(run.created_at)})
        keys = [
            thread_record_key(run.thread_id),
            runs_index_key(run.thread_id),
            run_queue_key(run.thread_id),
            run_key(run.thread_id, run.run_id),
            run_heartbeat_key(run.thread_id, run.run_id),
            run_events_key(run.thread_id, run.run_id),
            lease_key(run.thread_id),
            fence_counter_key(run.thread_id),
            *([] if self._cluster else [active_runs_key()]),
            *(charge.keys if charge else ()),
        ]
        created = await self._script(
            "create_run",
            keys,
            args=[
                "reject" if reject_if_busy else max_queued,
                run.run_id,
                codec.score(run.created_at),
                self._ttl,
                run.created_at,
                int(alive_seconds * 1000) if alive_seconds else 0,
                executor,
                lease_ms,
                *event,
                member,
                token_suffix,
                *(charge.args if charge else (0, "", "", "", "", "")),
                run.owner,
                thread_made_at,
                *codec.run_fields(run),
            ],
        )
        if isinstance(created, bytes):
            return True, created.decode()
        if created == -1:
            raise KeyError(run.thread_id)
        if created == 0:
            raise RunRejected(run.thread_id)
        if created == -2:
            raise QueueFull(run.thread_id)
        if created == -3:
            raise RunExists(run.run_id)
        if created == -4:
            assert charge is not None
            raise QuotaExceeded(THREAD_BYTES, charge.limit)
        return created == 2, None

    async def get_run(self, thread_id: str, run_id: str) -> RunRecord | None:
        return codec.decode_run(await self._client.hgetall(run_key(thread_id, run_id)))

    async def runs_of(self, thread_id: str, start: int = 0, count: int | None = None) -> list[RunRecord]:
        end = -1 if count is None else start + count - 1
        ids = await self._client.zrevrange(runs_index_key(thread_id), start, end)
        return await self._runs_by_id(thread_id, ids)

    async def runs_since(self, thread_id: str, created_after: str) -> list[RunRecord]:
        index = runs_index_key(thread_id)
        ids = await self._client.zrangebyscore(index, f"({codec.score(created_after)}", "+inf")
        return await self._runs_by_id(thread_id, ids)

    async def _runs_by_id(self, thread_id: str, ids: list[bytes]) -> list[RunRecord]:
        """The records of runs ``ids`` in one round trip, in that order (deleted ones left out)."""
        if not ids:
            return []
        async with self._client.pipeline(transaction=False) as pipe:
            for run_id in ids:
                pipe.hgetall(run_key(thread_id, codec.text(run_id)))
            rows = await pipe.execute()
        return [run for row in rows if (run := codec.decode_run(row)) is not None]

    async def first_active_run(self, thread_id: str) -> str | None:
        head = await self._client.zrange(run_queue_key(thread_id), 0, 0)
        return codec.text(head[0]) if head else None

    async def set_run_status(
        self, thread_id: str, run_id: str, status: str, event: tuple[str, bytes] | None = None
    ) -> str | None:
        name, data = event or ("", b"")
        entry = await self._script(
            "set_run_status",
            [run_key(thread_id, run_id), run_events_key(thread_id, run_id)],
            args=[status, now_iso(), self._ttl, name, data],
        )
        if entry is None:
            raise KeyError(run_id)
        return codec.text(entry) or None

    async def finish_run(
        self,
        thread_id: str,
        run_id: str,
        status: str,
        thread_status: str,
        result: bytes,
        executor: str | None = None,
        unless_cancelled: bool = False,
        *,
        events: Collection[tuple[str, bytes]] | None = None,
        lease: HeldLease | None = None,
        keep_events: bool = False,
    ) -> bool:
        member = f"{thread_id} {run_id}"
        keys = [
            thread_record_key(thread_id),
            run_queue_key(thread_id),
            run_key(thread_id, run_id),
            run_events_key(thread_id, run_id),
            run_end_key(thread_id, run_id),
            run_heartbeat_key(thread_id, run_id),
            run_cancel_key(thread_id, run_id),
            lease_key(thread_id),
            run_watch_key(thread_id, run_id),
            thread_watch_key(thread_id),
            run_join_key(thread_id, run_id),
            *([] if self._cluster else [active_runs_key()]),
        ]
        token = lease.token_to_release() if lease is not None else ""
        failed = status in FAILED_RUN_STATUSES
        args = [
            run_id,
            status,
            thread_status,
            now_iso(),
            self._ttl,
            result,
            END_EVENT,
            min(self._ttl, FINISHED_EVENTS_TTL_SECONDS),
            executor or "",
            "1" if unless_cancelled else "0",
            token,
            member,
            "1" if keep_events else "0",
            "1" if failed else "0",
        ]
        if keep_events:
            finished = await self._script("finish_run", keys, [*args, "0", *_flat(events)])
        else:
            # Sent only if a client on another replica asks for them (the script says so):
            # the events and the result of a run nobody asks for are whole states, most of
            # the bytes a run sends and of the script's time (issue 24).
            withheld = args if failed else [*args[:5], b"", *args[6:]]
            finished = await self._script("finish_run", keys, [*withheld, "1"])
            if finished == -1:
                finished = await self._script("finish_run", keys, [*args, "0", *_flat(events)])
        if token:
            lease.released_by_store()  # type: ignore[union-attr]
        if isinstance(finished, bytes):
            raise CancelRequested(codec.cancel_action(finished))
        if finished and self._cluster:
            await self.forget_active(thread_id, run_id)
        return bool(finished)

    async def delete_run(self, thread_id: str, run_id: str) -> None:
        await self._client.delete(
            run_key(thread_id, run_id),
            run_events_key(thread_id, run_id),
            run_cancel_key(thread_id, run_id),
            run_end_key(thread_id, run_id),
            run_heartbeat_key(thread_id, run_id),
            run_watch_key(thread_id, run_id),
            run_join_key(thread_id, run_id),
        )
        await self._client.zrem(runs_index_key(thread_id), run_id)

    # -- events --

    async def append_event(self, thread_id: str, run_id: str, event: str, data: bytes) -> str:
        key = run_events_key(thread_id, run_id)
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.xadd(key, {"e": event, "d": data})
            pipe.expire(key, self._ttl)
            entry_id, _ = await pipe.execute()
        return codec.text(entry_id)

    async def append_events(self, thread_id: str, run_id: str, events: list[tuple[str, bytes]]) -> None:
        key = run_events_key(thread_id, run_id)
        async with self._client.pipeline(transaction=False) as pipe:
            for event, data in events:
                pipe.xadd(key, {"e": event, "d": data})
            pipe.expire(key, self._ttl)
            await pipe.execute()

    async def read_events(
        self, thread_id: str, run_id: str, after: str | None, wait_seconds: float
    ) -> list[RunEvent]:
        key = run_events_key(thread_id, run_id)
        block = int(min(wait_seconds, MAX_BLOCK_SECONDS) * 1000)
        client = self._readers if block else self._client
        answer = await client.xread({key: after or "0-0"}, count=EVENTS_PAGE, block=block or None)
        if not answer:
            return []
        _, entries = answer[0]
        return [RunEvent(codec.text(eid), codec.text(f[b"e"]), f[b"d"]) for eid, f in entries]

    async def watch_result(self, thread_id: str, run_id: str, ttl_seconds: float) -> None:
        await self._client.set(run_join_key(thread_id, run_id), b"1", px=int(ttl_seconds * 1000))

    async def result(self, thread_id: str, run_id: str, wait_seconds: float) -> bytes | None:
        # One blocking read on a stream that gets one entry, at the end: a joiner costs one
        # command per run instead of one per event (and never transfers the events).
        block = int(min(wait_seconds, MAX_BLOCK_SECONDS) * 1000)
        client = self._readers if block else self._client
        answer = await client.xread({run_end_key(thread_id, run_id): "0-0"}, count=1, block=block or None)
        return answer[0][1][0][1][b"d"] if answer else None

    # -- liveness --

    async def beat(self, thread_id: str, run_id: str, ttl_seconds: float, executor: str = "") -> bool:
        key = run_heartbeat_key(thread_id, run_id)
        return bool(await self._script("beat", [key], [executor, int(ttl_seconds * 1000)]))

    async def claim(self, thread_id: str, run_id: str, ttl_seconds: float, executor: str) -> int:
        keys = [run_heartbeat_key(thread_id, run_id), run_key(thread_id, run_id)]
        return int(await self._script("claim", keys, [executor, int(ttl_seconds * 1000)]))

    async def active_runs(self) -> list[tuple[str, str]]:
        members = await self._client.zrange(active_runs_key(), 0, -1)
        return [tuple(codec.text(m).split(" ", 1)) for m in members]  # type: ignore[misc]

    async def forget_active(self, thread_id: str, run_id: str) -> None:
        await self._client.zrem(active_runs_key(), f"{thread_id} {run_id}")

    async def alive(self, thread_id: str, run_id: str) -> bool:
        return bool(await self._command("EXISTS", run_heartbeat_key(thread_id, run_id)))

    # -- cancel --

    async def request_cancel(self, thread_id: str, run_id: str, action: str = "interrupt") -> bool:
        keys = [run_key(thread_id, run_id), run_cancel_key(thread_id, run_id)]
        return bool(await self._script("request_cancel", keys, [action, self._ttl]))

    async def wait_cancel(
        self, thread_id: str, run_id: str, on_watched: Callable[[], None] | None = None
    ) -> str:
        # Every waiting run's request in one round trip: see records_redis_cancels.
        return await self._cancels.wait(thread_id, run_id, on_watched)

    async def watch_events(self, thread_id: str, run_id: str, ttl_seconds: float) -> None:
        await self._client.set(run_watch_key(thread_id, run_id), b"1", px=int(ttl_seconds * 1000))

    async def watch_thread(self, thread_id: str, ttl_seconds: float) -> None:
        await self._client.set(thread_watch_key(thread_id), b"1", px=int(ttl_seconds * 1000))


def _flat(events: Collection[tuple[str, bytes]] | None) -> list[Any]:
    """Events as a script's ARGV takes them: name, data, name, data, …"""
    return [part for event in events or () for part in event]
