"""The record store on the checkpoint Redis (keys in :mod:`threadline.redis_keys`).

Every key of a thread's records shares the thread's ``{thread_id}`` hash tag, so the two
scripts below touch them atomically (also on Redis Cluster) and they carry the checkpoint
TTL. The per-principal thread index is the one key outside a thread's tag: it is written in a
second command after the thread record and cleaned lazily (an id whose record is gone is
dropped when the index is read).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
import redis.asyncio as aioredis

from threadline import access
from threadline.access import Filters
from threadline.lease import HeldLease, RedisTurnLease
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
    thread_record_key,
    thread_watch_key,
)
from threadline.runs.records import (
    END_EVENT,
    EVENTS_PAGE,
    FAILED_RUN_STATUSES,
    FINISHED_EVENTS_TTL_SECONDS,
    CancelRequested,
    QueueFull,
    RunEvent,
    RunRecord,
    RunRejected,
    ThreadRecord,
    now_iso,
)

# Blocking reads stay under the client's 5 s command timeout (threadline.redis_client).
MAX_BLOCK_SECONDS = 4.0
# Between two looks for a cancel request of a running run (and for a client streaming it).
CANCEL_POLL_SECONDS = 0.2


def _owner_digest(owner: str) -> str:
    return hashlib.sha256(owner.encode()).hexdigest()


def _text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


class RedisRecordStore:
    """Thread records, run records and run events in Redis.

    Args:
        client: the checkpoint Redis.
        ttl_seconds: TTL of every key, refreshed on each write (the checkpoint TTL).
    """

    shared = True

    # KEYS[1] thread; ARGV[1] ttl, ARGV[2..] field/value pairs. Returns 1 if created, 0 if the
    # thread exists.
    CREATE_THREAD = """
    if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
    redis.call('HSET', KEYS[1], unpack(ARGV, 2))
    redis.call('EXPIRE', KEYS[1], ARGV[1])
    return 1
    """
    # KEYS[1] thread; ARGV[1] ttl, ARGV[2..] field/value pairs. Only an existing record: an
    # update racing a delete must not revive the thread. Returns 1 if updated.
    UPDATE_THREAD = """
    if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
    redis.call('HSET', KEYS[1], unpack(ARGV, 2))
    redis.call('EXPIRE', KEYS[1], ARGV[1])
    return 1
    """
    # KEYS[1] thread, KEYS[2] runs index, KEYS[3] run queue, KEYS[4] run, KEYS[5] heartbeat,
    # KEYS[6] events, KEYS[7] lease, KEYS[8] fence counter, KEYS[9] (not on Redis Cluster) the
    # active-run index; ARGV[1] 'reject' (multitask_strategy=reject) or the most active runs
    # the thread may have before this one (0: no cap), ARGV[2] run id, ARGV[3] created µs, ARGV[4] ttl,
    # ARGV[5] now, ARGV[6] heartbeat ms (0: none), ARGV[7] executor (the heartbeat's value, as
    # in BEAT), ARGV[8] lease ms (0: do not take the lease), ARGV[9] first event's name,
    # ARGV[10] its data, ARGV[11] the run's active-index member, ARGV[12..] run fields.
    # Returns -1 no such thread, 0 rejected (thread has an active run), -2 the queue is full
    # (QUOTA_QUEUED_RUNS_PER_THREAD), 1 queued behind another
    # run, 2 queued at the head (its turn now); or, when it heads the queue, ARGV[8] is not 0
    # and the thread's lease is free: the lease's new token, the lease taken (as
    # RedisTurnLease would) and the run "running" with its first event — one round trip for
    # what took three. The heartbeat is set with the run, naming its executor: nobody may take
    # it for an orphan before its executor starts. The active-run index is written before the
    # run is queued (same step here; before it, on Cluster, where it is another slot).
    CREATE_RUN = (
        RedisTurnLease.ACQUIRE_FUNCTION
        + """
    if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
    if ARGV[1] == 'reject' then
      if redis.call('ZCARD', KEYS[3]) > 0 then return 0 end
    elseif tonumber(ARGV[1]) > 0 and redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[1]) then
      return -2
    end
    if KEYS[9] then redis.call('ZADD', KEYS[9], ARGV[3], ARGV[11]) end
    local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
    redis.call('HSET', KEYS[4], unpack(ARGV, 12))
    redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
    redis.call('ZADD', KEYS[3], seq, ARGV[2])
    redis.call('HSET', KEYS[1], 'status', 'busy', 'updated_at', ARGV[5])
    for i = 1, 4 do redis.call('EXPIRE', KEYS[i], ARGV[4]) end
    if ARGV[6] ~= '0' then redis.call('SET', KEYS[5], ARGV[7], 'PX', ARGV[6]) end
    if redis.call('ZCARD', KEYS[3]) ~= 1 then return 1 end
    if ARGV[8] == '0' then return 2 end
    local token = acquire_lease(KEYS[7], KEYS[8], ARGV[8], ARGV[4])
    if not token then return 2 end
    redis.call('HSET', KEYS[4], 'status', 'running')
    redis.call('XADD', KEYS[6], '*', 'e', ARGV[9], 'd', ARGV[10])
    redis.call('EXPIRE', KEYS[6], ARGV[4])
    return token
    """
    )
    # KEYS[1] thread, KEYS[2] run queue, KEYS[3] run, KEYS[4] events, KEYS[5] end,
    # KEYS[6] heartbeat, KEYS[7] cancel requests, KEYS[8] lease, KEYS[9] the run's watch key,
    # KEYS[10] the thread's, KEYS[11] the run's join key, KEYS[12] (not on Redis Cluster) the
    # active-run index; ARGV[1] run id, ARGV[2] run status, ARGV[3] thread status, ARGV[4] now,
    # ARGV[5] ttl, ARGV[6] result, ARGV[7] end event name, ARGV[8] TTL of kept events and of a
    # result left for a joiner, ARGV[9] executor ('' : any), ARGV[10] '1': not if a cancel was
    # requested, ARGV[11] the executor's lease token ('': none), ARGV[12] the run's active-index
    # member, ARGV[13] '1': keep the events (a client can ask for them), ARGV[14] '1': the run
    # failed (its result stays with its record), ARGV[15..] events the executor has not
    # appended yet (name, data, …).
    # First the lease is released if it is still the token's (what the executor did in a round
    # trip of its own just before: a refused end changes nothing about it). A deleted or ended
    # run is left as it is, and so is a run another executor took over (returns 0; their
    # events are dropped); else the events are appended if they are kept (ARGV[13], or a
    # client on another replica streams the run or its thread), then, with ARGV[10], a run a
    # cancel was requested for is left running (returns the cancel's action). Else the status
    # is written before the end event: a client that sees the end and then reads the run sees
    # it finished; events not kept are deleted, the result is left on the end stream only for
    # a joiner that waits (KEYS[11]); and the run leaves the active-run index (on Cluster the
    # caller does that).
    FINISH_RUN = (
        RedisTurnLease.RELEASE_FUNCTION
        + """
    if ARGV[11] ~= '' then release_lease(KEYS[8], ARGV[11]) end
    local st = redis.call('HGET', KEYS[3], 'status')
    if not st then
      redis.call('ZREM', KEYS[2], ARGV[1])
      if KEYS[12] then redis.call('ZREM', KEYS[12], ARGV[12]) end
      return 0
    end
    if st ~= 'pending' and st ~= 'running' then return 0 end
    local hb = redis.call('GET', KEYS[6])
    if ARGV[9] ~= '' and hb and hb ~= ARGV[9] then return 0 end
    local keep = ARGV[13] == '1' or redis.call('EXISTS', KEYS[9], KEYS[10]) > 0
    if keep and #ARGV > 14 then
      for i = 15, #ARGV, 2 do redis.call('XADD', KEYS[4], '*', 'e', ARGV[i], 'd', ARGV[i + 1]) end
      redis.call('EXPIRE', KEYS[4], ARGV[5])
    end
    if ARGV[10] == '1' then
      local action = redis.call('LINDEX', KEYS[7], 0)
      if action then return action end
    end
    redis.call('ZREM', KEYS[2], ARGV[1])
    redis.call('HSET', KEYS[3], 'status', ARGV[2], 'updated_at', ARGV[4])
    if ARGV[14] == '1' then redis.call('HSET', KEYS[3], 'result', ARGV[6]) end
    if redis.call('EXISTS', KEYS[1]) == 1 then
      if redis.call('ZCARD', KEYS[2]) == 0 then redis.call('HSET', KEYS[1], 'status', ARGV[3]) end
      redis.call('HSET', KEYS[1], 'updated_at', ARGV[4])
    end
    if keep then
      redis.call('XADD', KEYS[4], '*', 'e', ARGV[7], 'd', '')
      redis.call('EXPIRE', KEYS[4], ARGV[8])
    else
      redis.call('DEL', KEYS[4])
    end
    if redis.call('EXISTS', KEYS[11]) == 1 then
      redis.call('XADD', KEYS[5], '*', 'd', ARGV[6])
      redis.call('EXPIRE', KEYS[5], ARGV[8])
    end
    for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ARGV[5]) end
    if KEYS[12] then redis.call('ZREM', KEYS[12], ARGV[12]) end
    return 1
    """
    )

    # KEYS[1] run, KEYS[2] cancel requests; ARGV[1] action, ARGV[2] ttl. Only while the run is
    # active: a cancel either comes before the run's end (which FINISH_RUN then refuses) or is
    # refused itself (returns 0). The run's 'cancel' field (its first action) shows it
    # cancelled to readers at once. Returns 1 if requested.
    REQUEST_CANCEL = """
    local st = redis.call('HGET', KEYS[1], 'status')
    if st ~= 'pending' and st ~= 'running' then return 0 end
    redis.call('HSETNX', KEYS[1], 'cancel', ARGV[1])
    redis.call('RPUSH', KEYS[2], ARGV[1])
    redis.call('EXPIRE', KEYS[2], ARGV[2])
    return 1
    """
    # KEYS[1] run, KEYS[2] events; ARGV[1] status, ARGV[2] now, ARGV[3] ttl, ARGV[4] event name
    # ('' for none), ARGV[5] event data. Only an existing run (a run deleted with its thread
    # must not come back). Returns the event's id, '' without an event, false if no such run.
    SET_RUN_STATUS = """
    if redis.call('EXISTS', KEYS[1]) == 0 then return false end
    redis.call('HSET', KEYS[1], 'status', ARGV[1], 'updated_at', ARGV[2])
    redis.call('EXPIRE', KEYS[1], ARGV[3])
    if ARGV[4] == '' then return '' end
    local id = redis.call('XADD', KEYS[2], '*', 'e', ARGV[4], 'd', ARGV[5])
    redis.call('EXPIRE', KEYS[2], ARGV[3])
    return id
    """

    # KEYS[1] heartbeat; ARGV[1] executor, ARGV[2] ttl ms. Renews (or sets, if it lapsed) the
    # heartbeat unless another executor holds it. Returns 1 if it is this executor's.
    BEAT = """
    local hb = redis.call('GET', KEYS[1])
    if hb and hb ~= ARGV[1] then return 0 end
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return 1
    """
    # KEYS[1] heartbeat, KEYS[2] run; ARGV[1] executor, ARGV[2] ttl ms. Takes over a run whose
    # heartbeat lapsed. Returns its attempt number (>= 2), 0 if alive or no longer active.
    CLAIM = """
    local st = redis.call('HGET', KEYS[2], 'status')
    if st ~= 'pending' and st ~= 'running' then return 0 end
    if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
    return redis.call('HINCRBY', KEYS[2], 'attempt', 1) + 1
    """

    def __init__(
        self, client: aioredis.Redis, *, ttl_seconds: int, readers: aioredis.Redis | None = None
    ) -> None:
        self._client = client
        # Blocking reads (a stream's or a join's wait) go here, apart from the client of
        # leases and heartbeats (issue 18: 100 streams starved them into takeovers).
        self._readers = readers if readers is not None else client
        self._ttl = ttl_seconds
        # On one Redis (or Sentinel) the global active-run index goes in the run scripts; on a
        # Cluster it lives in another slot, so it costs a command of its own.
        self._cluster = is_cluster(client)
        self._cancel_waits: dict[tuple[str, str], _CancelWait] = {}
        self._cancel_poller: asyncio.Task[None] | None = None
        self._create_thread = client.register_script(self.CREATE_THREAD)
        self._update_thread = client.register_script(self.UPDATE_THREAD)
        self._create_run = client.register_script(self.CREATE_RUN)
        self._finish_run = client.register_script(self.FINISH_RUN)
        self._request_cancel = client.register_script(self.REQUEST_CANCEL)
        self._set_run_status = client.register_script(self.SET_RUN_STATUS)
        self._beat = client.register_script(self.BEAT)
        self._claim = client.register_script(self.CLAIM)

    async def ping(self) -> None:
        await self._client.ping()

    # -- threads --

    async def create_thread(self, record: ThreadRecord) -> bool:
        fields = [
            "owner", record.owner,
            "created_at", record.created_at,
            "updated_at", record.updated_at,
            "status", record.status,
            "metadata", orjson.dumps(record.metadata),
        ]  # fmt: skip
        created = await self._create_thread(
            keys=[thread_record_key(record.thread_id)], args=[self._ttl, *fields]
        )
        if created:
            index = owner_threads_key(_owner_digest(record.owner))
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.zadd(index, {record.thread_id: _score(record.created_at)})
                pipe.expire(index, self._ttl)
                await pipe.execute()
        return bool(created)

    async def get_thread(self, thread_id: str, filters: Filters | None = None) -> ThreadRecord | None:
        record = _thread(thread_id, await self._client.hgetall(thread_record_key(thread_id)))
        return record if record is not None and access.matches(record.metadata, filters) else None

    async def update_thread(self, thread_id: str, **fields: Any) -> None:
        args: list[Any] = [self._ttl, "updated_at", now_iso()]
        for name, value in fields.items():
            args += [name, orjson.dumps(value) if name == "metadata" else value]
        await self._update_thread(keys=[thread_record_key(thread_id)], args=args)

    async def delete_thread(self, thread_id: str) -> None:
        record = await self.get_thread(thread_id)
        run_ids = [_text(r) for r in await self._client.zrange(runs_index_key(thread_id), 0, -1)]
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
        if record is not None:
            await self._client.zrem(owner_threads_key(_owner_digest(record.owner)), thread_id)

    async def threads_of(self, owner: str, filters: Filters | None = None) -> list[ThreadRecord]:
        index = owner_threads_key(_owner_digest(owner))
        ids = [_text(t) for t in await self._client.zrevrange(index, 0, -1)]
        if not ids:
            return []
        async with self._client.pipeline(transaction=False) as pipe:
            for thread_id in ids:
                pipe.hgetall(thread_record_key(thread_id))
            rows = await pipe.execute()
        records, gone = [], []
        for thread_id, row in zip(ids, rows, strict=True):
            record = _thread(thread_id, row)
            if record is None or record.owner != owner:
                gone.append(thread_id)
            elif access.matches(record.metadata, filters):  # read in the one pipeline above
                records.append(record)
        if gone:  # expired or deleted threads: drop them from the index
            await self._client.zrem(index, *gone)
        return records

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
    ) -> tuple[bool, str | None]:
        member = f"{run.thread_id} {run.run_id}"
        if self._cluster:
            # Indexed before it is queued (a crash in between leaves an index entry the sweep
            # drops, never a queued run no sweep can find).
            await self._client.zadd(active_runs_key(), {member: _score(run.created_at)})
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
        ]
        created = await self._create_run(
            keys=keys,
            args=[
                "reject" if reject_if_busy else max_queued,
                run.run_id,
                _score(run.created_at),
                self._ttl,
                run.created_at,
                int(alive_seconds * 1000) if alive_seconds else 0,
                executor,
                lease_ms,
                *event,
                member,
                *_run_fields(run),
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
        return created == 2, None

    async def get_run(self, thread_id: str, run_id: str) -> RunRecord | None:
        return _run(await self._client.hgetall(run_key(thread_id, run_id)))

    async def runs_of(self, thread_id: str, start: int = 0, count: int | None = None) -> list[RunRecord]:
        end = -1 if count is None else start + count - 1
        ids = await self._client.zrevrange(runs_index_key(thread_id), start, end)
        return await self._runs_by_id(thread_id, ids)

    async def runs_since(self, thread_id: str, created_after: str) -> list[RunRecord]:
        index = runs_index_key(thread_id)
        ids = await self._client.zrangebyscore(index, f"({_score(created_after)}", "+inf")
        return await self._runs_by_id(thread_id, ids)

    async def _runs_by_id(self, thread_id: str, ids: list[bytes]) -> list[RunRecord]:
        """The records of runs ``ids`` in one round trip, in that order (deleted ones left out)."""
        if not ids:
            return []
        async with self._client.pipeline(transaction=False) as pipe:
            for run_id in ids:
                pipe.hgetall(run_key(thread_id, _text(run_id)))
            rows = await pipe.execute()
        return [run for row in rows if (run := _run(row)) is not None]

    async def first_active_run(self, thread_id: str) -> str | None:
        head = await self._client.zrange(run_queue_key(thread_id), 0, 0)
        return _text(head[0]) if head else None

    async def set_run_status(
        self, thread_id: str, run_id: str, status: str, event: tuple[str, bytes] | None = None
    ) -> str | None:
        name, data = event or ("", b"")
        entry = await self._set_run_status(
            keys=[run_key(thread_id, run_id), run_events_key(thread_id, run_id)],
            args=[status, now_iso(), self._ttl, name, data],
        )
        if entry is None:
            raise KeyError(run_id)
        return _text(entry) or None

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
        events: list[tuple[str, bytes]] | None = None,
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
        finished = await self._finish_run(
            keys=keys,
            args=[
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
                "1" if status in FAILED_RUN_STATUSES else "0",
                *(part for event in events or () for part in event),
            ],
        )
        if token:
            lease.released_by_store()  # type: ignore[union-attr]
        if isinstance(finished, bytes):
            raise CancelRequested(_cancel_action(finished))
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
        return _text(entry_id)

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
        return [RunEvent(_text(eid), _text(f[b"e"]), f[b"d"]) for eid, f in entries]

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
        return bool(await self._beat(keys=[key], args=[executor, int(ttl_seconds * 1000)]))

    async def claim(self, thread_id: str, run_id: str, ttl_seconds: float, executor: str) -> int:
        keys = [run_heartbeat_key(thread_id, run_id), run_key(thread_id, run_id)]
        return int(await self._claim(keys=keys, args=[executor, int(ttl_seconds * 1000)]))

    async def active_runs(self) -> list[tuple[str, str]]:
        members = await self._client.zrange(active_runs_key(), 0, -1)
        return [tuple(_text(m).split(" ", 1)) for m in members]  # type: ignore[misc]

    async def forget_active(self, thread_id: str, run_id: str) -> None:
        await self._client.zrem(active_runs_key(), f"{thread_id} {run_id}")

    async def alive(self, thread_id: str, run_id: str) -> bool:
        return bool(await self._client.exists(run_heartbeat_key(thread_id, run_id)))

    # -- cancel --

    async def request_cancel(self, thread_id: str, run_id: str, action: str = "interrupt") -> bool:
        keys = [run_key(thread_id, run_id), run_cancel_key(thread_id, run_id)]
        return bool(await self._request_cancel(keys=keys, args=[action, self._ttl]))

    async def wait_cancel(
        self, thread_id: str, run_id: str, on_watched: Callable[[], None] | None = None
    ) -> str:
        # Polled, not BLPOPed: a run ends by cancelling this wait, and cancelling a blocking
        # command makes redis-py drop its connection (a reconnect per run). One poller per
        # process looks for every waiting run's request (and, for a run with ``on_watched``,
        # for a client streaming it) in one round trip every CANCEL_POLL_SECONDS: with a
        # command per run, runs that outlived one interval (all of them at concurrency 32 in
        # make bench-api, where a run takes ~200 ms) cost a round trip each per interval. A
        # cancel, or a client, is seen within CANCEL_POLL_SECONDS.
        loop = asyncio.get_running_loop()
        key = (thread_id, run_id)
        wait = self._cancel_waits.get(key)
        if wait is None or wait.found.get_loop() is not loop:
            wait = self._cancel_waits[key] = _CancelWait(loop.create_future())
        wait.waiters += 1
        if on_watched is not None:
            wait.on_watched.append(on_watched)
        poller = self._cancel_poller
        if poller is None or poller.done() or poller.get_loop() is not loop:
            self._cancel_poller = loop.create_task(self._poll_cancels(), name="run-cancel-poller")
        try:
            # Shielded: one waiter going away must not cancel the others' future.
            return await asyncio.shield(wait.found)
        finally:
            wait.waiters -= 1
            if on_watched is not None and on_watched in wait.on_watched:
                wait.on_watched.remove(on_watched)
            if not wait.waiters and self._cancel_waits.get(key) is wait:
                del self._cancel_waits[key]

    async def _poll_cancels(self) -> None:
        """Until no run waits: every CANCEL_POLL_SECONDS, the first cancel request of every
        waiting run, and whether a client streams the runs that want to know, in one pipeline.
        A store that fails is waited out (the runs go on)."""
        while self._cancel_waits:
            await asyncio.sleep(CANCEL_POLL_SECONDS)
            waits = [
                (key, wait, bool(wait.on_watched))
                for key, wait in self._cancel_waits.items()
                if not wait.found.done()
            ]
            if not waits:
                continue
            try:
                async with self._client.pipeline(transaction=False) as pipe:
                    for (thread_id, run_id), _, asks in waits:
                        pipe.lindex(run_cancel_key(thread_id, run_id), 0)
                        if asks:
                            pipe.exists(run_watch_key(thread_id, run_id))
                    replies = iter(await pipe.execute())
            except Exception:  # Redis away (restarting): the next poll may get through
                continue
            for _, wait, asks in waits:
                action = next(replies)
                if asks and next(replies):
                    watched, wait.on_watched = wait.on_watched, []
                    for tell in watched:
                        tell()
                if action is not None and not wait.found.done():
                    wait.found.set_result(_cancel_action(action))

    async def watch_events(self, thread_id: str, run_id: str, ttl_seconds: float) -> None:
        await self._client.set(run_watch_key(thread_id, run_id), b"1", px=int(ttl_seconds * 1000))

    async def watch_thread(self, thread_id: str, ttl_seconds: float) -> None:
        await self._client.set(thread_watch_key(thread_id), b"1", px=int(ttl_seconds * 1000))


@dataclass
class _CancelWait:
    """Runs waiting for one run's cancel request: the action once found, and how many wait."""

    found: asyncio.Future[str]
    waiters: int = 0
    # Told once when a client streams the run (then dropped): see RedisRecordStore.wait_cancel.
    on_watched: list[Callable[[], None]] = field(default_factory=list)


def _cancel_action(stored: bytes) -> str:
    # "1": a request from a replica of an earlier release, which only interrupted.
    return "rollback" if _text(stored) == "rollback" else "interrupt"


def _score(iso: str) -> int:
    """Microseconds since the epoch: the sort order of runs and threads (ms would tie)."""
    return int(datetime.fromisoformat(iso).timestamp() * 1_000_000)


def _run_fields(run: RunRecord) -> list[Any]:
    return [
        "run_id", run.run_id,
        "thread_id", run.thread_id,
        "owner", run.owner,
        "assistant_id", run.assistant_id,
        "created_at", run.created_at,
        "updated_at", run.updated_at,
        "status", run.status,
        "metadata", orjson.dumps(run.metadata),
        "multitask_strategy", run.multitask_strategy,
        "kwargs", orjson.dumps(run.kwargs),
    ]  # fmt: skip


def _thread(thread_id: str, row: dict[bytes, bytes]) -> ThreadRecord | None:
    if not row or b"owner" not in row:
        return None
    return ThreadRecord(
        thread_id=thread_id,
        owner=row[b"owner"].decode(),
        created_at=row[b"created_at"].decode(),
        updated_at=row[b"updated_at"].decode(),
        metadata=orjson.loads(row[b"metadata"]),
        status=row[b"status"].decode(),
    )


def _run(row: dict[bytes, bytes]) -> RunRecord | None:
    if not row or b"run_id" not in row:
        return None
    text = {k.decode(): v for k, v in row.items()}
    return RunRecord(
        run_id=text["run_id"].decode(),
        thread_id=text["thread_id"].decode(),
        owner=text["owner"].decode(),
        assistant_id=text["assistant_id"].decode(),
        created_at=text["created_at"].decode(),
        updated_at=text["updated_at"].decode(),
        status=text["status"].decode(),
        metadata=orjson.loads(text["metadata"]),
        multitask_strategy=text["multitask_strategy"].decode(),
        kwargs=orjson.loads(text["kwargs"]),
        cancel=_cancel_action(text["cancel"]) if "cancel" in text else None,
        result=text.get("result"),
    )
