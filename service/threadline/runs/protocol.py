"""The v2 streaming protocol of langgraph-api 0.16 (``@langchain/langgraph-sdk``'s
``client.threads.stream()``): commands on a thread, and a thread's events as protocol events.

A v2 run (created by ``run.start`` or ``input.respond``) is a run like any other — queued,
leased, taken over, cancelled as ADR 0009/0010 say — whose graph streams LangGraph's own v3
protocol events (``astream_events(version="v3")``); each is stored as the run's event
``<method>[|<namespace>]``, so any replica reads it. :class:`ThreadProtocolStream` turns the
stored events of the thread's v2 runs, oldest first and then as they come, into the wire's
envelopes as langgraph-api's ``EventStreamingSession`` shapes them:

* ``{"type": "event", "event_id", "seq", "method", "params": {"namespace", "timestamp",
  "data", "node"?}}``;
* ``seq`` numbers every envelope of the stream (before any filter), so the same replay gives
  the same numbers on every replica and a client resumes after one (``since``, or the SSE id
  in ``Last-Event-ID``);
* ``event_id`` is the stored event's id (``<ms>-<n>``, ``.<k>`` for the k-th envelope of one
  event), or ``synth:<run id>:…`` for envelopes the session makes: the root ``lifecycle``
  (``running`` at the start, then ``completed``, ``interrupted`` or ``failed``) and
  ``input.requested`` for each pending interrupt (``{"interrupt_id", "payload"}``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from threadline.runs import wire
from threadline.runs.records import ACTIVE_RUN_STATUSES, FINISHED_EVENTS_TTL_SECONDS, RunRecord

# The channels a client may ask for (and ``custom:<name>``), as langgraph-api's.
CHANNELS = frozenset(
    {"values", "updates", "checkpoints", "messages", "tools", "custom", "lifecycle", "input", "tasks"}
)
# The run kwarg that makes a run stream v3 protocol events.
PROTOCOL_KWARG = "protocol"
PROTOCOL_V2 = "v2"
# Between two looks for the thread's next v2 run while the stream is idle.
IDLE_POLL_SECONDS = 0.5
# A replay covers the v2 runs that ended within this (their events still kept), and active ones.
REPLAY_SECONDS = FINISHED_EVENTS_TTL_SECONDS - 60
_TERMINAL = {"success": "completed", "interrupted": "interrupted", "error": "failed", "timeout": "failed"}


def channel_supported(channel: str) -> bool:
    return channel in CHANNELS or (channel.startswith("custom:") and len(channel) > len("custom:"))


def wants(
    event: dict[str, Any], channels: set[str], namespaces: list[list[str]] | None, depth: int | None
) -> bool:
    """Whether a client that asked for ``channels`` (under ``namespaces``, ``depth`` deep)
    gets ``event`` (langgraph-api's ``_matches_subscription``)."""
    method = event["method"]
    channel = "input" if method == "input.requested" else method
    if channel == "custom":
        data = event["params"].get("data")
        name = data.get("name") if isinstance(data, dict) else None
        if "custom" not in channels and (name is None or f"custom:{name}" not in channels):
            return False
    elif channel not in channels:
        return False
    if not namespaces:
        return True
    ns = event["params"]["namespace"]
    return any(
        _prefix(ns, prefix) and (depth is None or len(ns) - len(prefix) <= depth) for prefix in namespaces
    )


def _prefix(namespace: list[str], prefix: list[str]) -> bool:
    if len(prefix) > len(namespace):
        return False
    for have, want in zip(namespace, prefix, strict=False):
        if have != want and (":" in want or have.split(":")[0] != want):
            return False
    return True


def _expired(run: RunRecord) -> bool:
    """Whether a run ended so long ago that its events may be gone (they live an hour after
    its end on Redis): left out of the replay, which is bounded so, on every backend."""
    if run.status in ACTIVE_RUN_STATUSES:
        return False
    age = datetime.now(UTC) - datetime.fromisoformat(run.updated_at)
    return age.total_seconds() > REPLAY_SECONDS


class ThreadProtocolStream:
    """One client's view of a thread's v2 runs (see the module docstring)."""

    def __init__(self) -> None:
        self.seq = 0

    def envelope(
        self, method: str, namespace: list[str], data: Any, event_id: str, node: str | None = None,
        timestamp: int | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        self.seq += 1
        params: dict[str, Any] = {
            "namespace": namespace,
            "timestamp": timestamp if isinstance(timestamp, int) else int(time.time() * 1000),
            "data": data,
        }
        if node is not None:
            params["node"] = node
        if method.startswith("custom:"):
            params["data"] = {"name": method.removeprefix("custom:"), "payload": data}
            method = "custom"
        method = "input.requested" if method == "input" else method
        return {"type": "event", "event_id": event_id, "seq": self.seq, "method": method, "params": params}

    async def run(self, runs: Any, run: RunRecord, graph_name: str) -> AsyncIterator[dict[str, Any]]:
        """The envelopes of one run, from its start until it ends."""
        rid = run.run_id
        yield self.envelope(
            "lifecycle", [], {"event": "running", "graph_name": graph_name}, f"synth:{rid}:lc||running"
        )
        asked: set[str] = set()
        ended = False
        async for stored in runs.events(run.owner, run.thread_id, rid, None, None, check=False):
            if stored.event == "metadata":
                continue
            if stored.event == "error":
                error = wire.loads(stored.data)
                message = error.get("message", str(error)) if isinstance(error, dict) else str(error)
                ended = True
                yield self.envelope(
                    "lifecycle", [], {"event": "failed", "graph_name": graph_name, "error": message},
                    f"synth:{rid}:lc||failed",
                )  # fmt: skip
                continue
            source = wire.loads(stored.data)
            if not isinstance(source, dict) or not isinstance(source.get("params"), dict):
                continue
            params = source["params"]
            method, namespace = (
                source.get("method") or stored.event.split("|")[0],
                list(params.get("namespace") or []),
            )
            data = params.get("data")
            if method == "values" and isinstance(data, dict) and "__interrupt__" in data:
                data = {k: v for k, v in data.items() if k != "__interrupt__"}
            if method == "values":  # its pending interrupts: input.requested, and the root's end
                fresh = [
                    i
                    for i in params.get("interrupts") or ()
                    if isinstance(i, dict) and i.get("id") not in asked
                ]
                for interrupt in fresh:
                    asked.add(interrupt["id"])
                    request = {"interrupt_id": interrupt["id"], "payload": interrupt.get("value")}
                    yield self.envelope(
                        "input",
                        namespace,
                        request,
                        f"synth:{rid}:input|{'|'.join(namespace)}|{interrupt['id']}",
                    )
                if fresh and not namespace:
                    ended = True  # an interrupt is the root's end: the run waits for input.respond
                    yield self.envelope(
                        "lifecycle", [], {"event": "interrupted", "graph_name": graph_name},
                        f"synth:{rid}:lc||interrupted",
                    )  # fmt: skip
            # After the interrupts it carries, as langgraph-api orders them.
            yield self.envelope(
                method, namespace, data, stored.id, params.get("node"), params.get("timestamp")
            )
        if ended:
            return
        final = await runs.records.get_run(run.thread_id, rid)
        status = _TERMINAL.get(final.status if final is not None else "error", "failed")
        yield self.envelope(
            "lifecycle", [], {"event": status, "graph_name": graph_name}, f"synth:{rid}:lc||{status}"
        )

    async def follow(self, runs: Any, thread_id: str) -> AsyncIterator[dict[str, Any]]:
        """The envelopes of every v2 run of the thread, oldest first, then of each later one as
        it comes, until the thread is deleted (the caller stops when its client goes away)."""
        seen: set[str] = set()
        while True:
            fresh = [
                r
                for r in reversed(await runs.records.runs_of(thread_id))
                if r.run_id not in seen and r.kwargs.get(PROTOCOL_KWARG) == PROTOCOL_V2 and not _expired(r)
            ]
            for run in fresh:
                seen.add(run.run_id)
                async for envelope in self.run(runs, run, runs.assistants.graph_id_of(run)):
                    yield envelope
            if not fresh:
                if await runs.records.get_thread(thread_id) is None:
                    return
                await asyncio.sleep(IDLE_POLL_SECONDS)


__all__ = ["CHANNELS", "PROTOCOL_KWARG", "PROTOCOL_V2", "ThreadProtocolStream", "channel_supported", "wants"]
