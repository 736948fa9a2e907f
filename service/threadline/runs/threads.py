"""Threads of the LangGraph API: records (owner, metadata, status) plus the graph's state.

A thread's owner is its record's ``owner``. A thread made through ``/v1`` before this release
has no record, only checkpoints whose state holds its ``owner``: the first API request that
names it adopts it (writes the record), so it is visible and searchable from then on.

A thread's time to live and its sweep, pruning, supersteps and storage are
:mod:`threadline.runs.thread_upkeep`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable
from typing import Any, NamedTuple

import orjson
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.errors import InvalidUpdateError
from langgraph.types import StateSnapshot

from threadline import access
from threadline.lease import TurnLease
from threadline.quotas import Quotas, RunCharge
from threadline.runs import wire
from threadline.runs.assistants import Assistant, Assistants
from threadline.runs.errors import Conflict, Invalid, NotFound
from threadline.runs.records import RecordStore, ThreadRecord, now_iso
from threadline.runs.thread_checkpoints import OWNER_KEY, copy_checkpoints, thread_config, thread_status_of
from threadline.runs.thread_upkeep import apply_supersteps, check_supersteps, epoch, record_ttl

log = logging.getLogger(__name__)

# The fields of a run's body its record keeps, sized by the client (QUOTA_THREAD_BYTES).
RUN_STORED_FIELDS = ("input", "command", "config", "context", "metadata")
# Threads a replica remembers for the runs on them (Threads.known): the most recently run,
# ~300 bytes each.
KNOWN_THREADS = 10_000


class ThreadPage(NamedTuple):
    """A page of a thread search: its threads (each read when iterated), how many, and the
    offset of the next page (None: this is the last)."""

    threads: AsyncIterator[dict[str, Any]]
    size: int
    next_offset: int | None


class Threads:
    """Create, read, search, copy and delete threads; read and update their state.

    Args:
        records: the record store.
        assistants: the served graphs (a thread's state is read with its graph).
        lease: the turn lease; every write to a thread's checkpoints happens under it.
        checkpointer: the saver every graph was compiled with.
        quotas: the per-principal quotas (ADR 0006) threads and run inputs count toward, as
            ``/v1`` threads and messages do.
    """

    def __init__(
        self,
        records: RecordStore,
        assistants: Assistants,
        lease: TurnLease,
        checkpointer: BaseCheckpointSaver,
        quotas: Quotas | None = None,
    ) -> None:
        self.quotas = quotas
        self.records = records
        self.assistants = assistants
        self.lease = lease
        self.checkpointer = checkpointer
        self._known: OrderedDict[str, tuple[str, str]] = OrderedDict()  # id -> owner, created_at

    # -- records --

    def known(self, principal: str, thread_id: str) -> str | None:
        """The thread's ``created_at`` if a run on it may skip reading its record: this
        replica read it as ``principal``'s, with its graph stamped (:meth:`remember`), and no
        custom auth filter applies to this request. The run's creation checks in its own step
        that the thread is still that one (``create_and_start_run``'s ``thread_made_at``); a
        thread deleted since, or made again, fails there and is read anew."""
        if access.current() is not None or (self.quotas is not None and not self.quotas.defers_run_charges):
            return None  # (without a deferred charge, the run's bytes are counted before that check)
        owner, made_at = self._known.get(thread_id, ("", ""))
        return made_at if owner == principal else None

    def remember(self, record: ThreadRecord) -> None:
        """See :meth:`known`; the last :data:`KNOWN_THREADS` threads."""
        if access.current() is None and "graph_id" in record.metadata:
            self._known[record.thread_id] = (record.owner, record.created_at)
            self._known.move_to_end(record.thread_id)
            if len(self._known) > KNOWN_THREADS:
                self._known.popitem(last=False)

    def forget(self, thread_id: str) -> None:
        self._known.pop(thread_id, None)

    async def record(self, principal: str, thread_id: str) -> ThreadRecord:
        """The thread's record if ``principal`` owns it (adopting a ``/v1`` thread).

        Raises:
            NotFound: no such thread, or another principal's.
        """
        # A custom auth filter of this request (threadline.access) is applied by the store: a
        # thread it excludes is as absent as another principal's.
        filters = access.current()
        record = await self.records.get_thread(thread_id, filters)
        if record is None:
            record = await self._adopt(thread_id, filters)
        if record is None or record.owner != principal:
            raise NotFound("thread")
        return record

    async def _adopt(self, thread_id: str, filters: access.Filters | None = None) -> ThreadRecord | None:
        """A record for a thread that has checkpoints but no record: made through ``/v1``
        (owner in its state), or whose record was lost (a process-local record store after a
        restart; the owner is in the checkpoint's metadata)."""
        saved = await self.checkpointer.aget_tuple(thread_config(thread_id))
        if saved is None:
            return None
        metadata = saved.metadata or {}
        owner = metadata.get(OWNER_KEY) or saved.checkpoint["channel_values"].get("owner")
        if not isinstance(owner, str):
            return None
        graph_id = metadata.get("graph_id") or "chat"
        created = saved.checkpoint.get("ts") or now_iso()
        record = ThreadRecord(thread_id, owner, created, now_iso(), {"graph_id": graph_id}, "idle")
        record.status = thread_status_of(await self._state(record))
        await self.records.create_thread(record)
        return await self.records.get_thread(thread_id, filters)

    async def exists(self, thread_id: str) -> bool:
        """A record or checkpoints exist under ``thread_id`` (anyone's)."""
        if await self.records.get_thread(thread_id) is not None:
            return True
        return await self.checkpointer.aget_tuple(thread_config(thread_id)) is not None

    async def create(
        self,
        principal: str,
        thread_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        if_exists: str = "raise",
        server_metadata: dict[str, Any] | None = None,
        ttl: dict[str, Any] | None = None,
        supersteps: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """A new thread (``if_exists``: ``raise`` → Conflict, ``do_nothing`` → the existing one).
        Its ``metadata`` counts toward its ``QUOTA_THREAD_BYTES``, ``server_metadata`` (set by
        the server, not the client) does not; a creation that fails after its thread slot was
        taken gives the slot back. ``ttl`` (``{"strategy", "ttl"}``, minutes) makes it expire;
        ``supersteps`` (``[{"updates": [{"values"|"command", "as_node"}]}]``) are applied to the
        new thread, all or none: a thread they do not fit is deleted again.

        Raises:
            Conflict: the principal has a thread with this id (``if_exists=raise``).
            NotFound: another principal has a thread with this id: answered as a read of it
                would be (ADR 0006), so a create is no existence oracle, and nothing is taken.
            QuotaExceeded: nothing stored.
            Invalid: ``ttl`` strategy ``keep_latest`` on a checkpointer that cannot prune, or
                ``supersteps`` that do not fit the thread's graph: nothing stored.
        """
        thread_id = thread_id or str(uuid.uuid4())
        now = now_iso()
        record = ThreadRecord(
            thread_id, principal, now, now, {**(metadata or {}), **(server_metadata or {})}, "idle"
        )
        record.ttl = record_ttl(self, ttl)
        if supersteps:
            check_supersteps(self, record, supersteps)
        if not await self.exists(thread_id):
            await self._reserve(principal, thread_id)  # QuotaExceeded: nothing stored
            try:
                await self.count_bytes(principal, thread_id, metadata or None, supersteps)
                if record.ttl is not None:  # indexed first: a record never expires unindexed
                    await self.records.expire_thread(thread_id, epoch(record.ttl["expires_at"]))
                created = await self.records.create_thread(record)
            except BaseException:
                await self.discard_slot(principal, thread_id)
                raise
            if created:
                if supersteps:
                    await apply_supersteps(self, record, supersteps)
                return await self.as_dict(record)
            await self._release(principal, thread_id)  # created meanwhile by someone else
        existing = await self.record(principal, thread_id)  # NotFound: another principal's
        if if_exists == "do_nothing":
            return await self.as_dict(existing)
        raise Conflict("thread_exists", "a thread with this id exists")

    async def discard_slot(self, principal: str, thread_id: str) -> None:
        """Give back the quota slot of a thread whose creation failed (best effort: a store
        that is away now leaves it to expire with the checkpoint TTL)."""
        with contextlib.suppress(Exception):
            await asyncio.shield(self._release(principal, thread_id))

    async def get(self, principal: str, thread_id: str, include_ttl: bool = False) -> dict[str, Any]:
        """The API's ``Thread``; with ``include_ttl`` also its ``ttl`` (null: none)."""
        record = await self.record(principal, thread_id)
        thread = await self.as_dict(record)
        if include_ttl:
            thread["ttl"] = record.ttl
        return thread

    async def update(
        self,
        principal: str,
        thread_id: str,
        metadata: dict[str, Any] | None,
        ttl: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Merge ``metadata`` into the thread's; ``ttl`` (when given) replaces its TTL, counted
        from now. The thread's ``updated_at`` is now, whatever changed.

        Raises:
            Invalid: ``ttl`` strategy ``keep_latest`` on a checkpointer that cannot prune.
        """
        record = await self.record(principal, thread_id)
        fields: dict[str, Any] = {}
        if ttl is not None:
            fields["ttl"] = record_ttl(self, ttl)
            await self.records.expire_thread(thread_id, epoch(fields["ttl"]["expires_at"]))
        if metadata:
            await self.count_bytes(principal, thread_id, metadata)
            record.metadata.update(metadata)
            fields["metadata"] = record.metadata
        # Always a write: a patch is a change of the thread (its updated_at), as on langgraph-api.
        await self.records.update_thread(thread_id, **fields)
        return await self.get(principal, thread_id)

    async def delete(self, principal: str, thread_id: str) -> None:
        """The thread, its checkpoints, runs and events are gone. Under the lease, so no run is
        half-way through writing it."""
        await self.record(principal, thread_id)
        self.forget(thread_id)
        async with self.lease.hold(thread_id):
            await self.checkpointer.adelete_thread(thread_id)
            await self.records.delete_thread(thread_id)
        await self._release(principal, thread_id)

    async def count_bytes(self, principal: str, thread_id: str, *values: Any) -> None:
        """Count what a client makes the server store on the thread toward its
        ``QUOTA_THREAD_BYTES``: the JSON size of each value that is not None or ``{}`` (as ``/v1``
        counts a message's content; the routes fill an absent metadata with ``{}``).

        Raises:
            QuotaExceeded: nothing counted.
        """
        if self.quotas is not None and (n := _json_bytes(values)):
            await self.quotas.add_message_bytes(principal, thread_id, n)

    async def count_run(
        self, principal: str, thread_id: str, payload: dict[str, Any], deferred: bool = False
    ) -> RunCharge | None:
        """Count a run's share toward the thread's ``QUOTA_THREAD_BYTES``: what its record
        keeps from the client (input, command, config, context, metadata; the run's and the
        config's metadata also go into each checkpoint the run writes, at most
        ``MAX_RECURSION_LIMIT`` + 1 of them). ``deferred``: returned as a charge for the run's
        creation to count in its own step, where the quotas can (:class:`RunCharge`); else
        (or with None returned) counted now.

        Raises:
            QuotaExceeded: nothing counted.
        """
        n = _json_bytes(payload.get(k) for k in RUN_STORED_FIELDS)
        if self.quotas is None or not n:
            return None
        if deferred and (charge := self.quotas.run_charge(principal, thread_id, n)) is not None:
            return charge
        await self.quotas.add_message_bytes(principal, thread_id, n)
        return None

    async def _reserve(self, principal: str, thread_id: str) -> None:
        if self.quotas is not None:
            await self.quotas.reserve_thread(principal, thread_id)

    async def _release(self, principal: str, thread_id: str) -> None:
        if self.quotas is not None:
            await self.quotas.release_thread(principal, thread_id)

    async def search(
        self,
        principal: str,
        *,
        metadata: dict[str, Any] | None = None,
        values: dict[str, Any] | None = None,
        ids: list[str] | None = None,
        status: str | None = None,
        limit: int = 10,
        offset: int = 0,
        sort_by: str | None = None,
        sort_order: str | None = None,
    ) -> ThreadPage:
        """The principal's threads that match every filter (never another principal's), a
        page of them read one at a time: a search holds one thread's state at once, however
        many match (issue 18: ``limit=1000`` over 41 threads added 314 MB).

        Sorted as langgraph-api sorts: by ``updated_at``, newest first, unless told otherwise
        (an agent UI's thread list puts the conversation last continued on top), threads of
        equal keys in the order they were made, whichever the direction (so pages do not
        overlap). A ``values`` filter reads the states of the threads up to one past the page
        (to know whether there is a next one), and those on the page again when it is sent.
        """
        found = await self._sorted(
            await self._filtered(principal, metadata, ids, status),
            sort_by or "updated_at",
            sort_order or "desc",
        )
        if values:
            matched = []
            async with contextlib.aclosing(self._matching(found, values)) as matching:
                async for record, _ in matching:
                    matched.append(record)
                    if len(matched) > offset + limit:
                        break
            found = matched
        page = found[offset : offset + limit]
        next_offset = offset + limit if len(found) > offset + limit else None
        return ThreadPage((await self.as_dict(record) for record in page), len(page), next_offset)

    async def _sorted(self, found: list[ThreadRecord], sort_by: str, sort_order: str) -> list[ThreadRecord]:
        found.sort(key=lambda r: (r.created_at, r.thread_id))
        if sort_by == "state_updated_at":
            # When each thread's state last changed: one checkpoint read a thread, as a
            # ``values`` filter reads (at most QUOTA_THREADS_PER_PRINCIPAL).
            keys = {r.thread_id: await self._state_updated_at(r) for r in found}
            found.sort(key=lambda r: keys[r.thread_id], reverse=sort_order == "desc")
        else:
            found.sort(key=lambda r: getattr(r, sort_by), reverse=sort_order == "desc")
        return found

    async def _state_updated_at(self, record: ThreadRecord) -> str:
        """When the thread's latest checkpoint was written (its creation before any): its
        ``state_updated_at``."""
        latest = await self.checkpointer.aget_tuple(thread_config(record.thread_id))
        return latest.checkpoint["ts"] if latest is not None else record.created_at

    async def _matching(
        self, found: list[ThreadRecord], values: dict[str, Any] | None
    ) -> AsyncIterator[tuple[ThreadRecord, StateSnapshot | None]]:
        """``found`` whose state matches ``values`` (all when None), with the state when read."""
        for record in found:
            if not values:
                yield record, None
            elif (state := await self._state(record)) and access.holds(state.values, values):
                yield record, state

    async def count(
        self,
        principal: str,
        *,
        metadata: dict[str, Any] | None = None,
        values: dict[str, Any] | None = None,
        status: str | None = None,
    ) -> int:
        found = await self._filtered(principal, metadata, None, status)
        return sum([1 async for _ in self._matching(found, values)])

    async def _filtered(
        self, principal: str, metadata: dict[str, Any] | None, ids: list[str] | None, status: str | None
    ) -> list[ThreadRecord]:
        records = await self.records.threads_of(principal, access.current())
        wanted = set(ids) if ids else None
        return [
            r
            for r in records
            if (wanted is None or r.thread_id in wanted)
            and (status is None or r.status == status)
            and access.holds(r.metadata, metadata)
        ]

    async def copy(self, principal: str, thread_id: str) -> dict[str, Any]:
        """A new thread of the principal with the same metadata and checkpoint history."""
        source = await self.record(principal, thread_id)
        target = str(uuid.uuid4())
        await self._reserve(principal, target)
        now = now_iso()
        record = ThreadRecord(target, principal, now, now, dict(source.metadata), "idle")
        try:
            # The copy holds what its source holds: it starts from the source's byte count
            # (a copy must not reset the counter: copy, fill, copy, fill passed the quota).
            if self.quotas is not None:
                used = await self.quotas.used_bytes(thread_id)
                await self.quotas.add_message_bytes(principal, target, used)
            async with self.lease.hold(thread_id):
                await copy_checkpoints(self.checkpointer, thread_id, target)
            await self.records.create_thread(record)
        except BaseException:
            await self.discard_slot(principal, target)
            raise
        state = await self._state(record)
        await self.records.update_thread(target, status=thread_status_of(state))
        return await self.get(principal, target)

    # -- state --

    def assistant_of(self, record: ThreadRecord) -> Assistant:
        return self.assistants.for_thread(record.metadata)

    async def _state(
        self, record: ThreadRecord, checkpoint: dict[str, Any] | None = None, subgraphs: bool = False
    ) -> StateSnapshot | None:
        graph = self.assistant_of(record).graph
        state = await graph.aget_state(thread_config(record.thread_id, checkpoint), subgraphs=subgraphs)
        # LangGraph answers a missing checkpoint with an empty snapshot (no creation time).
        return state if state.created_at is not None else None

    async def as_dict(self, record: ThreadRecord, state: StateSnapshot | None = None) -> dict[str, Any]:
        """The API's ``Thread``: the record plus the current values and interrupts. A thread
        without state has ``values`` null (as langgraph-api); ``state_updated_at`` is when its
        latest checkpoint was written (its creation before any)."""
        state = state or await self._state(record)
        return {
            "thread_id": record.thread_id,
            "created_at": record.created_at,
            "updated_at": record.updated_at,
            "state_updated_at": (state.created_at if state else None) or record.created_at,
            "metadata": record.metadata,
            "status": record.status,
            "values": state.values if state else None,
            "interrupts": wire.interrupts_by_task(state) if state else {},
            "config": {},
            "error": None,
        }

    async def state(
        self,
        principal: str,
        thread_id: str,
        checkpoint: dict[str, Any] | None = None,
        subgraphs: bool = False,
    ) -> dict[str, Any]:
        """The thread's state (at ``checkpoint``, when given) as the API's ``ThreadState``.

        Raises:
            NotFound: no such thread, or no such checkpoint.
        """
        record = await self.record(principal, thread_id)
        state = await self._state(record, checkpoint, subgraphs)
        if state is None:
            if checkpoint and checkpoint.get("checkpoint_id"):
                raise NotFound("checkpoint")
            return _empty_state()
        return wire.snapshot_dict(state)

    async def update_state(
        self,
        principal: str,
        thread_id: str,
        values: Any,
        as_node: str | None = None,
        checkpoint: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Write ``values`` as if ``as_node`` had (a new checkpoint), under the lease.

        Raises:
            NotFound: thread or checkpoint; Invalid: ``as_node`` is not a node of the graph.
        """
        record = await self.record(principal, thread_id)
        if "graph_id" not in record.metadata:
            # No run yet, so no graph to write through: guessing one (the default) would store
            # state no graph of the thread's later runs may read. langgraph-api refuses too.
            raise Invalid(
                f"thread {thread_id!r} has no assigned graph ID: make a run on it first, or set "
                "`graph_id` in its metadata",
                status=400,
            )
        graph = self.assistant_of(record).graph
        if as_node is not None and as_node not in graph.nodes:
            raise Invalid(  # 400, as langgraph-api answers it (and a superstep's)
                f"as_node: {as_node!r} is not a node of graph {self.assistant_of(record).graph_id!r}",
                status=400,
            )
        if checkpoint and checkpoint.get("checkpoint_id") and await self._state(record, checkpoint) is None:
            raise NotFound("checkpoint")
        await self.count_bytes(principal, thread_id, values)
        async with self.lease.hold(thread_id) as held:
            try:
                config = thread_config(thread_id, checkpoint, held.token)
                config["metadata"] = {OWNER_KEY: principal, "graph_id": self.assistant_of(record).graph_id}
                written = await graph.aupdate_state(config, values, as_node=as_node)
            except (ValueError, TypeError, KeyError, InvalidUpdateError) as exc:
                # LangGraph's refusal of an update that does not fit the graph (unknown node,
                # ambiguous writer, bad channel): the caller's mistake, nothing was written.
                raise Invalid(f"values do not fit the graph: {exc}") from None
            state = await graph.aget_state(thread_config(thread_id))
        await self.records.update_thread(thread_id, status=thread_status_of(state))
        # The SDK's type is a Config; langgraph-api also answers the checkpoint and its id.
        checkpoint_written = wire.checkpoint_of(written)
        return {
            "checkpoint": checkpoint_written,
            "configurable": dict(checkpoint_written or {}),
            "checkpoint_id": (checkpoint_written or {}).get("checkpoint_id"),
        }

    async def history(
        self,
        principal: str,
        thread_id: str,
        limit: int = 10,
        before: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        checkpoint: dict[str, Any] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """After checking the thread is the principal's: its states, newest first, one at a
        time (issue 18: three ``limit=1000`` histories of a within-quota thread, each held
        whole, added 631 MB).

        Raises:
            NotFound: no such thread of the principal.
        """
        record = await self.record(principal, thread_id)
        graph = self.assistant_of(record).graph
        states = graph.aget_state_history(
            thread_config(thread_id, checkpoint),
            limit=limit,
            before=thread_config(thread_id, before) if before else None,
            filter=metadata or None,
        )
        return (wire.snapshot_dict(state) async for state in states)


def _empty_state() -> dict[str, Any]:
    """The state of a thread without checkpoints, as langgraph-api answers it."""
    return {
        "values": {},
        "next": [],
        "tasks": [],
        "metadata": None,
        "created_at": None,
        "checkpoint": None,
        "parent_checkpoint": None,
        "interrupts": [],
        "checkpoint_id": None,
        "parent_checkpoint_id": None,
    }


def _json_bytes(values: Iterable[Any]) -> int:
    """What ``values`` take as JSON, those that are None or ``{}`` left out."""
    return sum(len(orjson.dumps(v)) for v in values if v not in (None, {}))
