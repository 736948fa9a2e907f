"""Conversations: threads owned by principals, and one turn at a time per thread.

A turn is: owner check → lease → finish the thread's unfinished run, if any → idempotency
check → graph run (tokens streamed) → lease released → reply. The client's message id is the
idempotency key:

* the thread holds that message and its reply → the stored reply is returned;
* it holds the message but no reply (the replica serving it died) → the turn is finished;
* otherwise a new turn runs.

Nothing is answered from uncommitted state: a run whose writes were saved but not committed
by a checkpoint (store failure, lost lease) is resumed first (ADR 0002).

Human messages keep the client's id and replies get ``<id>.reply``; LangGraph's
``add_messages`` merges by id, so even a turn that is run twice cannot add a second copy of
either. The lease's fencing token rides along in the config to every checkpoint write.

``/v1`` is an adapter over the LangGraph API's layers: its threads are :class:`Threads`
(graph ``chat``; one owner model, one lifecycle, listed by the API's thread search), its
errors are the runs layer's kinds, and its graph runs through the same
:func:`~threadline.runs.graph_io.stream_graph` as every run. What stays its own is its
contract: a turn waits for the thread's lease (409 when it stays busy), has a deadline (504)
and is exactly-once by message id. The owner also stays in a ``/v1`` thread's state, which
replicas of the previous release read (ADR 0009).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from langchain_core.messages import AIMessageChunk, BaseMessage, HumanMessage
from langgraph.graph.state import CompiledStateGraph

from threadline import metrics
from threadline.agent.graph import MODEL_NODE, REPLY_SUFFIX
from threadline.checkpoint.errors import FencedError
from threadline.lease import HeldLease, LeaseBusy
from threadline.quotas import QuotaExceeded
from threadline.runs.errors import Conflict, NotFound
from threadline.runs.graph_io import stream_graph
from threadline.runs.thread_checkpoints import thread_config
from threadline.runs.threads import Threads

log = logging.getLogger(__name__)

OWNER_CACHE_SIZE = 100_000

__all__ = [
    "Conversations",
    "LeaseBusy",
    "QuotaExceeded",
    "RunningTurn",
    "TurnResult",
    "TurnTimeout",
    "check_message_id",
]


class TurnTimeout(Exception):
    """The turn ran past ``TURN_TIMEOUT_SECONDS``: its model call was cancelled, its lease
    released, and what it had not committed is finished by the thread's next turn."""


def message_id_reused() -> Conflict:
    return Conflict("message_id_reused", "this message id was already used with different content")


def lease_lost() -> Conflict:
    """The turn's lease expired while it ran (paused or cut-off replica); nothing was written."""
    return Conflict("lease_lost", "the turn lost its lease before it could be stored; retry")


@dataclass(frozen=True)
class TurnResult:
    thread_id: str
    turn: int
    reply_id: str
    reply: str


# A client's message id: the idempotency key of its turn.
MESSAGE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def check_message_id(message_id: str) -> str:
    """Return ``message_id`` if a client may use it for a human message.

    Raises:
        ValueError: not 1-128 characters of ``A-Za-z0-9._:-``, or ending with the reply suffix
            (a human message with a reply's id would replace that reply: messages merge by id).
    """
    if not MESSAGE_ID.fullmatch(message_id):
        raise ValueError("must be 1-128 characters of A-Z a-z 0-9 . _ : -")
    if message_id.endswith(REPLY_SUFFIX):
        raise ValueError(f"must not end with {REPLY_SUFFIX!r} (reserved for replies)")
    return message_id


def _role(message: BaseMessage) -> str:
    return "human" if isinstance(message, HumanMessage) else "ai"


def _turn_of(messages: list[BaseMessage], index: int) -> int:
    """The 1-based turn number of the human message at ``index``."""
    return sum(isinstance(m, HumanMessage) for m in messages[: index + 1])


def _stored_result(
    thread_id: str, messages: list[BaseMessage], message_id: str, content: str
) -> TurnResult | None:
    """The turn of ``message_id`` if the thread holds it with its reply, else None.

    Raises:
        Conflict: ``message_id_reused``, the id was used with different content.
    """
    for i, message in enumerate(messages):
        if message.id == message_id:
            if message.content != content:
                raise message_id_reused()
            if i + 1 < len(messages):
                reply = messages[i + 1]
                return TurnResult(thread_id, _turn_of(messages, i), str(reply.id), str(reply.content))
            return None
    return None


class Conversations:
    """``/v1`` threads and turns: one turn at a time per thread, over the API's threads.

    Args:
        threads: the LangGraph API's threads layer (records, owners, quotas, the turn lease).
        graph: the compiled chat graph (its checkpointer is the threads').
        turn_timeout: seconds a turn may run (lease wait included) before it is cancelled.
    """

    def __init__(self, threads: Threads, graph: CompiledStateGraph, turn_timeout: float = 120.0) -> None:
        self.threads = threads
        self.graph = graph
        self.lease = threads.lease
        self.turn_timeout = turn_timeout
        self.checkpointer = graph.checkpointer
        self.in_flight = 0
        self.idle = asyncio.Event()  # set while no turn runs; a drain waits on it
        self.idle.set()
        # Owners never change, so a replica remembers them: a turn then needs no record read
        # before its lease. Bounded; a miss costs one read.
        self._owners: OrderedDict[str, str] = OrderedDict()

    def _remember_owner(self, thread_id: str, owner: str) -> None:
        self._owners[thread_id] = owner
        self._owners.move_to_end(thread_id)
        if len(self._owners) > OWNER_CACHE_SIZE:
            self._owners.popitem(last=False)

    async def _check_owner(self, thread_id: str, principal: str) -> None:
        """Refuse a thread the principal does not own, before taking its lease (so requests
        for unknown threads never write a lease key).

        Raises:
            NotFound: no such thread, or another principal's.
        """
        owner = self._owners.get(thread_id)
        if owner is None:
            owner = (await self.threads.record(principal, thread_id)).owner
            self._remember_owner(thread_id, owner)
        if owner != principal:
            raise NotFound("thread")

    async def _state(self, thread_id: str, token: str | None = None):
        """The thread's state; NotFound once it is deleted (the owner may be cached)."""
        state = await self.graph.aget_state(thread_config(thread_id, token=token))
        if not state.values:
            raise NotFound("thread")
        return state

    async def create_thread(self, principal: str) -> str:
        """A new thread owned by ``principal``.

        Raises:
            QuotaExceeded: the principal has ``QUOTA_THREADS_PER_PRINCIPAL`` threads.
        """
        thread_id = uuid.uuid4().hex
        await self.threads.create(principal, thread_id, server_metadata={"graph_id": "chat"})
        try:
            # The owner in the thread's state too, for replicas of the previous release.
            await self.graph.aupdate_state(thread_config(thread_id), {"owner": principal}, as_node=MODEL_NODE)
        except BaseException:
            with contextlib.suppress(Exception):  # best effort: else the records' TTL collects it
                await asyncio.shield(self.threads.delete(principal, thread_id))
            raise
        self._remember_owner(thread_id, principal)
        return thread_id

    async def thread(self, thread_id: str, principal: str) -> dict[str, Any]:
        await self._check_owner(thread_id, principal)
        messages = (await self._state(thread_id)).values.get("messages", [])
        return {
            "thread_id": thread_id,
            "messages": [{"id": m.id, "role": _role(m), "content": m.content} for m in messages],
            "turns": sum(not isinstance(m, HumanMessage) for m in messages),
            "pending": bool(messages) and isinstance(messages[-1], HumanMessage),
        }

    async def checkpoints(self, thread_id: str, principal: str, limit: int) -> list[dict[str, Any]]:
        """The thread's newest ``limit`` checkpoints, newest first, from their metadata.

        One checkpoint is read at a time and only its id, parent, metadata and timestamp are
        kept: a checkpoint carries the whole message list, so reading 100 of them at once (as
        ``aget_state_history`` does) took a replica from 117 MB to 420 MB on a 40-turn thread of
        32 KB messages (issue 10).
        """
        await self._check_owner(thread_id, principal)
        history: list[dict[str, Any]] = []
        config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        before = None
        while len(history) < limit:
            page = [t async for t in self.checkpointer.alist(config, before=before, limit=1)]
            if not page:
                break
            found = page.pop()
            metadata = found.metadata or {}
            history.append(
                {
                    "checkpoint_id": found.checkpoint["id"],
                    "parent_checkpoint_id": (found.parent_config or {})
                    .get("configurable", {})
                    .get("checkpoint_id"),
                    "step": metadata.get("step"),
                    "source": metadata.get("source"),
                    "created_at": found.checkpoint.get("ts"),
                }
            )
            before = found.config
            del found  # drop the decoded values before the next read
        if not history:  # every thread has its creation checkpoint: deleted (the owner was cached)
            raise NotFound("thread")
        return history

    async def delete(self, thread_id: str, principal: str) -> None:
        await self.threads.delete(principal, thread_id)  # under the lease, as every thread's
        self._owners.pop(thread_id, None)

    async def run_turn(self, thread_id: str, principal: str, message_id: str, content: str) -> TurnResult:
        """One turn, to completion. See :meth:`stream_turn`."""
        result = None
        # Drain the generator: its last step releases the lease.
        turn = self.stream_turn(thread_id, principal, message_id, content, tokens=False)
        async with contextlib.aclosing(turn):
            async for item in turn:
                if isinstance(item, TurnResult):
                    result = item
        assert result is not None, "stream_turn ended without a result"
        return result

    async def stream_turn(
        self, thread_id: str, principal: str, message_id: str, content: str, tokens: bool = True
    ) -> AsyncIterator[str | TurnResult]:
        """Yield the reply's tokens as the model produces them, then the :class:`TurnResult`.

        A stored reply (idempotent retry) yields no tokens, only the result; so does every
        turn with ``tokens=False`` (which skips LangChain's per-token callbacks).

        Raises:
            NotFound, LeaseBusy, TurnTimeout, QuotaExceeded; Conflict (``lease_lost``,
            ``message_id_reused``); store errors as raised.
        """
        started = time.monotonic()
        await self._check_owner(thread_id, principal)
        outcome = "error"
        self.in_flight += 1
        self.idle.clear()
        # The deadline covers the lease wait, finishing an interrupted run and the model call;
        # cancelling releases the lease (lease.hold's clean-up is shielded).
        deadline = asyncio.timeout(self.turn_timeout)
        try:
            async with deadline, self.lease.hold(thread_id) as held:
                config = thread_config(thread_id, token=held.token)
                state = await self._state(thread_id, held.token)
                if state.tasks:
                    # A run that did not finish: its replica died or lost its lease, or the store
                    # failed between a step's writes and the checkpoint that commits them.
                    # Finish it first (LangGraph reuses the writes that were saved and runs only
                    # what is missing), so nobody is answered from uncommitted state.
                    log.info("finishing interrupted run", extra={"thread_id": thread_id})
                    async for _ in self._stream_graph(config, None, held, tokens=False):
                        pass
                    state = await self._state(thread_id, held.token)

                messages = state.values.get("messages", [])
                result = _stored_result(thread_id, messages, message_id, content)
                if result is not None:
                    outcome = "stored"
                else:
                    quotas = self.threads.quotas
                    if quotas is not None and not any(m.id == message_id for m in messages):
                        await quotas.add_message_bytes(principal, thread_id, len(content.encode()))
                    final: dict[str, Any] = {}
                    human = HumanMessage(content=content, id=message_id)
                    async for item in self._stream_graph(config, {"messages": [human]}, held, tokens):
                        if isinstance(item, str):
                            yield item
                        else:
                            final = item
                    result = _stored_result(thread_id, final["messages"], message_id, content)
                    outcome = "ok"
            # Answer once the lease is released: a client that hangs up as soon as it has the
            # reply must not leave the lease held until it expires.
            assert result is not None, "the graph run stored no reply"
            yield result
        except TimeoutError:
            if not deadline.expired():  # a store's own timeout: a store error, as raised
                raise
            outcome = "timeout"
            metrics.MODEL_CANCELLED.inc()
            log.warning("turn timed out", extra={"thread_id": thread_id, "seconds": self.turn_timeout})
            raise TurnTimeout(thread_id) from None
        except QuotaExceeded:
            outcome = "quota"
            raise
        except FencedError:
            outcome = "fenced"
            metrics.LEASE_LOST.inc()
            raise lease_lost() from None
        except LeaseBusy:
            outcome = "busy"
            raise
        finally:
            self.in_flight -= 1
            if not self.in_flight:
                self.idle.set()
            metrics.TURN_SECONDS.labels(outcome).observe(time.monotonic() - started)
            log.info("turn", extra={"thread_id": thread_id, "outcome": outcome})

    async def _stream_graph(
        self, config: dict[str, Any], graph_input: dict[str, Any] | None, held: HeldLease, tokens: bool
    ) -> AsyncIterator[str | dict]:
        """Run the graph as every run does (``graph_input`` None resumes an unfinished run);
        yield token strings (if ``tokens``), then the final state values."""
        final: dict[str, Any] = {}
        parts = stream_graph(self.graph, graph_input, config, {}, ["messages"] if tokens else [])
        async for _ns, mode, data in parts:
            if held.lost.is_set():
                raise FencedError(config["configurable"]["thread_id"])
            if mode == "values":
                final = data
            elif mode == "messages":
                chunk, meta = data
                # Only the model's streamed chunks; the node's final message repeats them whole.
                if (
                    isinstance(chunk, AIMessageChunk)
                    and chunk.content
                    and meta.get("langgraph_node") == MODEL_NODE
                ):
                    yield str(chunk.content)
        yield final


class RunningTurn:
    """A streamed turn running in a task of its own.

    The graph run must start, run and be cancelled in one task: LangGraph binds its step
    machinery to the task that entered it. A streaming response reads the first item in the
    request's task and the rest in the response's task; reading through this queue keeps the
    run in one place, and :meth:`cancel` (client gone) cancels the model call promptly.
    """

    _END = object()

    def __init__(self, turn: AsyncIterator[str | TurnResult]) -> None:
        self._items: asyncio.Queue[object] = asyncio.Queue()
        self._task = asyncio.create_task(self._run(turn), name="turn")

    async def _run(self, turn: AsyncIterator[str | TurnResult]) -> None:
        try:
            async with contextlib.aclosing(turn):
                async for item in turn:
                    self._items.put_nowait(item)
        except Exception as exc:  # handed to the reader, who maps it to a status or event
            self._items.put_nowait(exc)
        finally:
            self._items.put_nowait(self._END)

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the turn's task has ended, however it ended."""
        self._task.add_done_callback(lambda _: callback())

    async def next(self) -> str | TurnResult | None:
        """The next token or the result; None when the turn is over.

        Raises:
            whatever the turn raised.
        """
        item = await self._items.get()
        if item is self._END:
            return None
        if isinstance(item, Exception):
            raise item
        return item  # type: ignore[return-value]

    async def cancel(self) -> None:
        """Stop the turn (if still running) and wait, bounded, for its clean-up."""
        if not self._task.done():
            self._task.cancel()
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
