"""The v2 streaming protocol's HTTP transport, as langgraph-api 0.16.7 serves it and
``@langchain/langgraph-sdk`` 1.15's ``client.threads.stream()`` calls it:

* ``POST /threads/{id}/commands``: one command ``{"id": int, "method", "params"}``, answered
  ``{"type": "success", "id", "result", "meta"}`` or ``{"type": "error", "id", "error",
  "message"}`` (200, as the reference; 400 for a body that is no command). Served:
  ``run.start`` (creates the thread if missing; ``multitaskStrategy``), ``input.respond``
  (``Command(resume=…)`` for one interrupt id or a ``responses`` batch); the subscription
  commands and ``agent.getTree`` answer as the reference's HTTP transport does (a fresh
  subscription id; ``no_such_subscription``; ``no_such_run``).
* ``POST /threads/{id}/stream/events`` (and ``GET``, with ``channels`` as a query list): the
  thread's v2 runs' events as SSE (:mod:`threadline.runs.protocol`), filtered by the body's
  ``channels``/``namespaces``/``depth``, after ``since`` (a ``seq``) — or after
  ``Last-Event-ID``, whose value is the SSE id, the same ``seq`` — on any replica.

Auth as every route; another principal's thread is 404. Each stream takes one of the replica's
``MAX_STREAMS`` slots (503 + Retry-After when none is free; 429 past the principal's
``MAX_STREAMS_PER_PRINCIPAL``).
"""

from __future__ import annotations

import logging
import uuid
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Header, Query, Request, Response
from sse_starlette import EventSourceResponse, ServerSentEvent

from threadline import metrics
from threadline.api.deps import Principal, RunsDep, RuntimeDep, ThreadId, ThreadsDep
from threadline.api.errors import ApiError
from threadline.api.langgraph.bodies import SSE_RESPONSE
from threadline.api.openapi import error_responses
from threadline.api.streams import StreamSlot
from threadline.checkpoint import is_store_down
from threadline.runs.errors import Conflict, Invalid, NotFound
from threadline.runs.protocol import (
    PROTOCOL_KWARG,
    PROTOCOL_V2,
    ThreadProtocolStream,
    channel_supported,
    wants,
)

log = logging.getLogger(__name__)

router = APIRouter(tags=["threads"])

STRATEGIES = ("reject", "rollback", "interrupt", "enqueue")


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def _error(cid: Any, code: str, message: str) -> dict[str, Any]:
    return {"type": "error", "id": cid, "error": code, "message": message}


async def _body(request: Request) -> Any:
    try:
        return orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        raise ApiError(400, "invalid_request", "Invalid JSON body") from None


@router.post("/threads/{thread_id}/commands", responses=error_responses(400, 404))
async def command(
    request: Request, thread_id: ThreadId, principal: Principal, runs: RunsDep, threads: ThreadsDep
) -> Response:
    payload = await _body(request)
    if (
        not isinstance(payload, dict)
        or not isinstance(payload.get("id"), int)
        or not isinstance(payload.get("method"), str)
    ):
        cid = payload.get("id") if isinstance(payload, dict) else None
        return _json(
            _error(
                cid, "invalid_argument", "Protocol commands must include an integer id and string method."
            ),
            400,
        )
    cid, method = payload["id"], payload["method"]
    params = payload.get("params") if isinstance(payload.get("params"), dict) else {}
    # Another principal's thread is 404, whatever the command; run.start may create a new one.
    if not (method == "run.start" and not await threads.exists(thread_id)):
        await threads.record(principal, thread_id)
    meta = {"applied_through_seq": 0}
    try:
        if method == "run.start":
            result = await _run_start(runs, principal, thread_id, params)
        elif method == "input.respond":
            result = await _input_respond(runs, threads, principal, thread_id, params)
        elif method == "subscription.subscribe":
            # Over HTTP a subscription is the stream's own filter: accepted, nothing to replay.
            result = {"subscription_id": str(uuid.uuid4()), "replayed_events": 0}
        elif method == "subscription.unsubscribe":
            return _json(_error(cid, "no_such_subscription", "Unknown subscription"))
        elif method in ("agent.getTree", "subscription.reconnect"):
            # As langgraph-api over HTTP: a command is not bound to a run's session.
            return _json(_error(cid, "no_such_run", "No active run is bound to this thread."))
        else:
            return _json(_error(cid, "unknown_command", f"Unknown protocol command: {method}"))
    except _CommandError as exc:
        return _json(_error(cid, exc.code, exc.message))
    except (Invalid, Conflict, NotFound) as exc:
        return _json(_error(cid, "invalid_argument", str(exc)))
    return _json({"type": "success", "id": cid, "result": result, "meta": meta})


class _CommandError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


async def _start(runs, principal: str, thread_id: str, body: dict[str, Any]) -> str:
    strategy = body.pop("multitaskStrategy", None)
    run = await runs.create(
        principal,
        thread_id,
        body
        | {
            "multitask_strategy": strategy if strategy in STRATEGIES else "enqueue",
            "if_not_exists": "create",
            "on_completion": "keep",
            PROTOCOL_KWARG: PROTOCOL_V2,
        },
    )
    return run.run_id


async def _run_start(runs, principal: str, thread_id: str, params: dict[str, Any]) -> dict[str, Any]:
    assistant_id = params.get("assistant_id")
    if not isinstance(assistant_id, str) or not assistant_id:
        raise _CommandError("invalid_argument", "run.start requires an assistant_id.")
    config = params.get("config") if isinstance(params.get("config"), dict) else {}
    body: dict[str, Any] = {"assistant_id": assistant_id, "input": params.get("input"), "config": config}
    checkpoint_id = (config.get("configurable") or {}).get("checkpoint_id")
    if checkpoint_id:  # a fork: the run starts from that checkpoint
        body["checkpoint_id"] = checkpoint_id
    if isinstance(params.get("metadata"), dict):
        body["metadata"] = params["metadata"]
    if isinstance(params.get("multitaskStrategy"), str):
        body["multitaskStrategy"] = params["multitaskStrategy"]
    return {"run_id": await _start(runs, principal, thread_id, body)}


async def _input_respond(
    runs, threads, principal: str, thread_id: str, params: dict[str, Any]
) -> dict[str, Any]:
    batch = params.get("responses")
    entries = batch if isinstance(batch, list) else [params]
    if not entries or not all(
        isinstance(e, dict) and isinstance(e.get("interrupt_id"), str) for e in entries
    ):
        raise _CommandError("invalid_argument", "input.respond requires an interrupt_id.")
    state = await threads.state(principal, thread_id)
    pending = {i["id"] for task in state.get("tasks") or () for i in task.get("interrupts") or ()}
    unknown = [e["interrupt_id"] for e in entries if e["interrupt_id"] not in pending]
    if unknown:
        raise _CommandError("no_such_interrupt", f"Unknown or already-consumed interrupt: {unknown[0]}")
    record = await threads.record(principal, thread_id)
    assistant_id = record.metadata.get("assistant_id")
    if not isinstance(assistant_id, str):
        raise _CommandError("no_such_run", "No interrupted run is bound to this thread.")
    command: dict[str, Any] = {"resume": {e["interrupt_id"]: e.get("response") for e in entries}}
    for key in ("update", "goto"):
        if params.get(key) is not None:
            command[key] = params[key]
    body = {"assistant_id": assistant_id, "command": command}
    if isinstance(params.get("config"), dict):
        body["config"] = params["config"]
    await _start(runs, principal, thread_id, body)
    return {}


def _channels(raw: Any) -> list[str]:
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "invalid_request", "channels is required and must be a non-empty array")
    bad = [
        repr(c) if not isinstance(c, str) else c
        for c in raw
        if not isinstance(c, str) or not channel_supported(c)
    ]
    if bad:
        raise ApiError(
            400,
            "invalid_request",
            f"channels contains unsupported entries: {', '.join(bad[:5])}. Allowed: values, updates, "
            "messages, tools, custom, lifecycle, input, tasks, checkpoints, or any `custom:<name>`.",
        )
    return raw


def _since(body_since: Any, last_event_id: str | None) -> int | None:
    if last_event_id:
        if not last_event_id.isdigit() or len(last_event_id) > 18:
            raise ApiError(422, "invalid_request", "Last-Event-ID: not a seq of this stream")
        return int(last_event_id)
    if isinstance(body_since, int) and not isinstance(body_since, bool) and body_since >= 0:
        return body_since
    return None


async def _events(
    request: Request,
    thread_id: str,
    principal: str,
    runs,
    threads,
    runtime,
    filters: dict[str, Any],
    last_event_id,
) -> EventSourceResponse:
    channels = set(_channels(filters.get("channels")))
    namespaces = filters.get("namespaces")
    namespaces = (
        [n for n in namespaces if isinstance(n, list) and all(isinstance(s, str) for s in n)]
        if isinstance(namespaces, list)
        else None
    )
    depth = filters.get("depth")
    depth = depth if isinstance(depth, int) and not isinstance(depth, bool) and depth >= 0 else None
    since = _since(filters.get("since"), last_event_id)
    await threads.record(principal, thread_id)  # 404 for another principal's thread
    slot = StreamSlot(runtime, principal)
    stream = ThreadProtocolStream()

    async def body():
        metrics.ACTIVE_STREAMS.inc()
        try:
            async for envelope in stream.follow(runs, thread_id):
                if since is not None and envelope["seq"] <= since:
                    continue
                if wants(envelope, channels, namespaces or None, depth):
                    yield ServerSentEvent(
                        orjson.dumps(envelope).decode(), event=envelope["method"], id=str(envelope["seq"])
                    )
        except Exception as exc:
            if not is_store_down(exc):
                raise
            log.warning("protocol stream cut by a store error", extra={"error": type(exc).__name__})
        finally:
            metrics.ACTIVE_STREAMS.dec()

    return slot.sse(body(), {})


@router.post(
    "/threads/{thread_id}/stream/events", responses={**SSE_RESPONSE, **error_responses(400, 404, 503)}
)
async def stream_events(
    request: Request,
    thread_id: ThreadId,
    principal: Principal,
    runs: RunsDep,
    threads: ThreadsDep,
    runtime: RuntimeDep,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse:
    filters = await _body(request)
    if not isinstance(filters, dict):
        raise ApiError(400, "invalid_request", "channels is required and must be a non-empty array")
    return await _events(request, thread_id, principal, runs, threads, runtime, filters, last_event_id)


@router.get(
    "/threads/{thread_id}/stream/events", responses={**SSE_RESPONSE, **error_responses(400, 404, 503)}
)
async def stream_events_get(
    request: Request,
    thread_id: ThreadId,
    principal: Principal,
    runs: RunsDep,
    threads: ThreadsDep,
    runtime: RuntimeDep,
    channels: Annotated[list[str] | None, Query()] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse:
    """For a browser's ``EventSource`` (GET only, resumes with ``Last-Event-ID`` by itself)."""
    return await _events(
        request, thread_id, principal, runs, threads, runtime, {"channels": channels}, last_event_id
    )
