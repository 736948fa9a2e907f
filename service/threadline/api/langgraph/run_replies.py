"""The replies of the runs routes (:mod:`threadline.api.langgraph.runs`): a run's events as SSE
(a run's, or a thread's runs'), its result once it ends (kept alive while it runs), and the
``Content-Location``/``Location`` headers naming the run."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import Response
from fastapi.responses import StreamingResponse
from sse_starlette import ServerSentEvent
from starlette.background import BackgroundTask

from threadline import metrics
from threadline.api.streams import StreamSlot
from threadline.checkpoint import is_store_down
from threadline.runs.records import RunEvent, RunRecord
from threadline.runs.runs import Runs

# The routes' logger: a cut stream is logged as the runs routes', as before this module.
log = logging.getLogger("threadline.api.langgraph.runs")

# Bytes sent while a /wait or /join has nothing to say yet, so proxies keep the connection
# (leading whitespace is ignored by JSON parsers); every 5 s like langgraph-api.
WAIT_KEEPALIVE_SECONDS = 5.0


def where(run: RunRecord, tail: str | None = None) -> dict[str, str]:
    base = f"/threads/{run.thread_id}/runs/{run.run_id}"
    headers = {"Content-Location": base}
    if tail:
        headers["Location"] = f"{base}/{tail}"
    return headers


async def cancel_quietly(runs: Runs, principal: str, run: RunRecord) -> None:
    with contextlib.suppress(Exception):
        await runs.cancel(principal, run.thread_id, run.run_id)


def _store_error(exc: Exception) -> ServerSentEvent:
    """The last event of a stream cut by a store error."""
    log.warning("run stream cut by a store error", extra={"error": type(exc).__name__})
    error = {"error": "StoreUnavailable", "message": "a store is unreachable; reconnect with Last-Event-ID"}
    return ServerSentEvent(orjson.dumps(error).decode(), event="error")


async def stream_events(
    runs: Runs,
    principal: str,
    run: RunRecord,
    *,
    after: str | None,
    modes: list[str] | None,
    cancel_on_disconnect: bool,
) -> AsyncIterator[ServerSentEvent]:
    """The run's events as SSE. The generator is closed when the client goes away; then, with
    ``cancel_on_disconnect``, the run is cancelled."""
    finished = False
    metrics.ACTIVE_STREAMS.inc()
    try:
        async for event in runs.events(principal, run.thread_id, run.run_id, after, modes, check=False):
            yield ServerSentEvent(event.data.decode(), event=event.event, id=event.id)
        finished = True
    except Exception as exc:
        if not is_store_down(exc):
            raise
        yield _store_error(exc)
    finally:
        metrics.ACTIVE_STREAMS.dec()
        if not finished and cancel_on_disconnect:
            await asyncio.shield(cancel_quietly(runs, principal, run))


async def _result_body(
    runs: Runs, principal: str, run: RunRecord, cancel_on_disconnect: bool
) -> AsyncIterator[bytes]:
    """The run's result once it ends, after keep-alive newlines while it runs. The route has
    checked the run is the principal's (it created or read it)."""
    join = asyncio.ensure_future(runs.join(principal, run.thread_id, run.run_id, check=False))
    try:
        while True:
            done, _ = await asyncio.wait({join}, timeout=WAIT_KEEPALIVE_SECONDS)
            if done:
                yield join.result()
                return
            yield b"\n"
    finally:
        if not join.done():
            join.cancel()
            if cancel_on_disconnect:
                await asyncio.shield(cancel_quietly(runs, principal, run))


async def wait_response(
    runs: Runs, slot: StreamSlot, principal: str, run: RunRecord, cancel_on_disconnect: bool
) -> Response:
    """The run's result, holding ``slot`` while it waits. A run that ends before the first
    keep-alive is due (most do) is answered as one plain response: a streamed one costs a task
    group and a disconnect listener per request, ~0.5 ms of CPU per run in ``make bench-api``.
    Not when the run is to be cancelled on disconnect: only a streamed response notices the
    client leaving."""
    with slot.released_on_error():
        if not cancel_on_disconnect:
            join = asyncio.ensure_future(runs.join(principal, run.thread_id, run.run_id, check=False))
            try:
                done, _ = await asyncio.wait({join}, timeout=WAIT_KEEPALIVE_SECONDS)
            finally:
                if not join.done():
                    join.cancel()
            if done:
                slot.release()
                return Response(join.result(), media_type="application/json", headers=where(run, "join"))
        return StreamingResponse(
            slot.holding(_result_body(runs, principal, run, cancel_on_disconnect)),
            background=BackgroundTask(slot.release),
            media_type="application/json",
            headers=where(run, "join"),
        )


async def thread_sse(events: AsyncIterator[tuple[str, RunEvent]]) -> AsyncIterator[ServerSentEvent]:
    metrics.ACTIVE_STREAMS.inc()
    try:
        async for run_id, event in events:
            yield ServerSentEvent(event.data.decode(), event=event.event, id=f"{run_id}/{event.id}")
    except Exception as exc:
        if not is_store_down(exc):
            raise
        yield _store_error(exc)
    finally:
        metrics.ACTIVE_STREAMS.dec()


def json_response(body: Any, headers: dict[str, str]) -> Response:
    return Response(orjson.dumps(body), media_type="application/json", headers=headers)
