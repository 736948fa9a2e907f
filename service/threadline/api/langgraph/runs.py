"""``/threads/{id}/runs…`` and stateless ``/runs…``: create, stream, wait, get, list, join,
join-stream, cancel, delete.

Every response about a run names it in ``Content-Location`` (``/threads/{t}/runs/{r}``, from
which the SDK's ``on_run_created`` reads the ids) and, for streams and waits, ``Location`` (where
the SDK reconnects: the run's ``/stream`` or ``/join``). SSE events carry their id in the run's
event log, so a reconnect with ``Last-Event-ID`` resumes on any replica.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Header, Query, Request, Response
from sse_starlette import EventSourceResponse

from threadline.api.deps import (
    Authorize,
    Principal,
    RunId,
    RunsDep,
    RunStart,
    RuntimeDep,
    ThreadId,
    run_start,
)
from threadline.api.errors import ApiError
from threadline.api.langgraph.bodies import (
    SSE_RESPONSE,
    RunBatch,
    RunCreate,
    RunField,
    RunsCancel,
    selected,
)
from threadline.api.langgraph.run_replies import (
    cancel_quietly,
    json_response,
    stream_events,
    thread_sse,
    wait_response,
    where,
)
from threadline.api.openapi import error_responses, read_by_route
from threadline.api.streams import StreamSlot
from threadline.custom_auth import Caller
from threadline.runs.events import STREAM_MODES
from threadline.runs.graph_io import AUTH_KWARG
from threadline.runs.records import RunRecord, event_id_valid
from threadline.runs.runs import Runs, run_dict
from threadline.runtime import Runtime

router = APIRouter(tags=["runs"])


async def _create(
    runs: Runs,
    runtime: Runtime,
    caller: Caller,
    authorize: Authorize,
    thread_id: str | None,
    body: RunCreate,
    streamed: bool = False,
) -> RunRecord:
    """A run, once its webhook's URL passed the checks (a 422 naming why not) and the custom auth
    ``threads.create_run`` handler let it (and maybe stamped its metadata); the run keeps its
    caller's user for the graph (``langgraph_auth_user``). ``streamed``: the caller streams its
    events from the start."""
    if body.webhook is not None:
        assert runtime.webhooks is not None  # the runs are there: so are their webhooks
        await runtime.webhooks.check(body.webhook)
    payload = body.payload()
    value = {
        "thread_id": thread_id,
        "assistant_id": payload.get("assistant_id"),
        "run_id": None,
        "status": "pending",
        "metadata": dict(payload.get("metadata") or {}),
        "prevent_insert_if_inflight": True,
        "multitask_strategy": payload.get("multitask_strategy") or "enqueue",
        "if_not_exists": payload.get("if_not_exists") or "reject",
        "after_seconds": payload.get("after_seconds") or 0,
        "kwargs": payload,
    }
    value = await authorize("threads", "create_run", value)
    payload["metadata"] = value.get("metadata") or {}
    payload[AUTH_KWARG] = caller.as_json()
    return await runs.create(caller.identity, thread_id, payload, streamed)


async def _stream_reply(start: RunStart[RunCreate], thread_id: str | None) -> EventSourceResponse:
    """A new run's events as SSE, its stream slot taken before the run is created."""
    runs, runtime, caller, authorize, body = (
        start.runs,
        start.runtime,
        start.caller,
        start.authorize,
        start.body,
    )
    principal = caller.identity
    with StreamSlot(runtime, principal).released_on_error() as slot:
        run = await _create(runs, runtime, caller, authorize, thread_id, body, streamed=True)
        cancel = body.on_disconnect == "cancel"
        events = stream_events(runs, principal, run, after=None, modes=None, cancel_on_disconnect=cancel)
        return slot.sse(events, where(run, "stream"))


async def _wait_reply(start: RunStart[RunCreate], thread_id: str | None) -> Response:
    """A new run's result, its stream slot taken before the run is created."""
    runs, runtime, caller, authorize, body = (
        start.runs,
        start.runtime,
        start.caller,
        start.authorize,
        start.body,
    )
    principal = caller.identity
    with StreamSlot(runtime, principal).released_on_error() as slot:
        run = await _create(runs, runtime, caller, authorize, thread_id, body)
        return await wait_response(runs, slot, principal, run, body.on_disconnect == "cancel")


# -- on a thread --


# The routes that start a run read their body and caller themselves (deps.RunStart says why).
READS_RUN = read_by_route(RunCreate)


@router.post(
    "/threads/{thread_id}/runs", responses=error_responses(400, 404, 409, 429), openapi_extra=READS_RUN
)
async def create(request: Request, thread_id: str) -> Response:
    start = await run_start(request, RunCreate, thread_id)
    run = await _create(start.runs, start.runtime, start.caller, start.authorize, thread_id, start.body)
    return json_response(run_dict(run), where(run))


@router.post(
    "/threads/{thread_id}/runs/stream",
    responses={**SSE_RESPONSE, **error_responses(400, 404, 409, 429)},
    openapi_extra=READS_RUN,
)
async def stream(request: Request, thread_id: str) -> EventSourceResponse:
    return await _stream_reply(await run_start(request, RunCreate, thread_id), thread_id)


@router.post(
    "/threads/{thread_id}/runs/wait", responses=error_responses(400, 404, 409, 429), openapi_extra=READS_RUN
)
async def wait(request: Request, thread_id: str) -> Response:
    return await _wait_reply(await run_start(request, RunCreate, thread_id), thread_id)


@router.get("/threads/{thread_id}/runs", responses=error_responses(400, 404))
async def list_runs(
    thread_id: ThreadId,
    principal: Principal,
    authorize: Authorize,
    runs: RunsDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 10,
    offset: Annotated[int, Query(ge=0)] = 0,
    status: Annotated[
        str | None, Query(pattern="^(pending|running|error|success|timeout|interrupted)$")
    ] = None,
    select: Annotated[list[RunField] | None, Query()] = None,
) -> list[dict[str, Any]]:
    await authorize("threads", "read", {"thread_id": thread_id})
    return selected(
        [run_dict(r) for r in await runs.list(principal, thread_id, limit, offset, status)], select
    )


@router.get("/threads/{thread_id}/runs/{run_id}", responses=error_responses(400, 404))
async def get(
    thread_id: ThreadId, run_id: RunId, principal: Principal, authorize: Authorize, runs: RunsDep
) -> Response:
    await authorize("threads", "read", {"thread_id": thread_id, "run_id": run_id})
    run = await runs.get(principal, thread_id, run_id)
    return json_response(run_dict(run), where(run))


@router.delete(
    "/threads/{thread_id}/runs/{run_id}", status_code=204, responses=error_responses(400, 404, 409)
)
async def delete(
    thread_id: ThreadId, run_id: RunId, principal: Principal, authorize: Authorize, runs: RunsDep
) -> Response:
    await authorize("threads", "delete", {"thread_id": thread_id, "run_id": run_id})
    await runs.delete(principal, thread_id, run_id)
    return Response(status_code=204)


@router.get("/threads/{thread_id}/runs/{run_id}/join", responses=error_responses(400, 404))
async def join(
    thread_id: ThreadId,
    run_id: RunId,
    principal: Principal,
    authorize: Authorize,
    runs: RunsDep,
    runtime: RuntimeDep,
    cancel_on_disconnect: bool = False,
) -> Response:
    await authorize("threads", "read", {"thread_id": thread_id, "run_id": run_id})
    run = await runs.get(principal, thread_id, run_id)
    return await wait_response(runs, StreamSlot(runtime, principal), principal, run, cancel_on_disconnect)


@router.get(
    "/threads/{thread_id}/runs/{run_id}/stream", responses={**SSE_RESPONSE, **error_responses(400, 404)}
)
async def join_stream(
    request: Request,
    thread_id: ThreadId,
    run_id: RunId,
    principal: Principal,
    authorize: Authorize,
    runs: RunsDep,
    runtime: RuntimeDep,
    cancel_on_disconnect: bool = False,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse:
    """The run's events: from the start, or after ``Last-Event-ID``; only the modes in
    ``stream_mode`` (repeated, or a JSON list) when given."""
    await authorize("threads", "read", {"thread_id": thread_id, "run_id": run_id})
    if last_event_id in ("-1", "0"):  # what JS clients send to replay a run from its start
        last_event_id = None
    if last_event_id is not None and not event_id_valid(last_event_id):
        raise ApiError(422, "invalid_request", "Last-Event-ID: not an event id of this API")
    run = await runs.get(principal, thread_id, run_id)
    modes = _stream_modes(request.query_params.getlist("stream_mode"))
    events = stream_events(
        runs,
        principal,
        run,
        after=last_event_id or None,
        modes=modes,
        cancel_on_disconnect=cancel_on_disconnect,
    )
    return StreamSlot(runtime, principal).sse(events, where(run, "stream"))


@router.get("/threads/{thread_id}/stream", responses={**SSE_RESPONSE, **error_responses(400, 404)})
async def join_thread_stream(
    thread_id: ThreadId,
    principal: Principal,
    authorize: Authorize,
    runs: RunsDep,
    runtime: RuntimeDep,
    stream_mode: Annotated[list[str] | None, Query()] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse:
    """The thread's runs' events as they execute, one run after another, until the client goes
    away (the SDK's ``threads.join_stream``). Each event's id is ``<run id>/<event id>``, so a
    reconnect with ``Last-Event-ID`` resumes after it, on any replica. ``stream_mode``: only
    ``run_modes`` (each run's own modes, the SDK's default)."""
    await authorize("threads", "read", {"thread_id": thread_id})
    unsupported = sorted(set(filter(None, stream_mode or [])) - {"run_modes"})
    if unsupported:
        raise ApiError(422, "invalid_request", f"stream_mode: {unsupported} not supported; use run_modes")
    after = None
    if last_event_id:
        run_id, _, event_id = last_event_id.partition("/")
        if not _is_uuid(run_id) or not event_id_valid(event_id):
            raise ApiError(422, "invalid_request", "Last-Event-ID: not an event id of this thread stream")
        after = (run_id, event_id)
    events = await runs.thread_events(principal, thread_id, after)
    return StreamSlot(runtime, principal).sse(thread_sse(events), {})


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


@router.post("/threads/{thread_id}/runs/{run_id}/cancel", responses=error_responses(202, 400, 404))
async def cancel(
    thread_id: ThreadId,
    run_id: RunId,
    principal: Principal,
    authorize: Authorize,
    runs: RunsDep,
    runtime: RuntimeDep,
    wait: bool = False,
    action: Annotated[str, Query(pattern="^(interrupt|rollback)$")] = "interrupt",
) -> Response:
    await authorize("threads", "update", {"thread_id": thread_id, "run_id": run_id, "action": action})
    run = await runs.cancel(principal, thread_id, run_id, action)
    if not wait:
        return Response(status_code=202)
    return await wait_response(runs, StreamSlot(runtime, principal), principal, run, False)


# -- stateless --


@router.post("/runs", responses=error_responses(404, 409, 429), openapi_extra=READS_RUN)
async def create_stateless(request: Request) -> Response:
    start = await run_start(request, RunCreate)
    run = await _create(start.runs, start.runtime, start.caller, start.authorize, None, start.body)
    return json_response(run_dict(run), where(run))


@router.post("/runs/batch", responses=error_responses(404, 409, 429), openapi_extra=read_by_route(RunBatch))
async def create_batch(request: Request) -> Response:
    """Stateless background runs, one per item. Every item is checked (assistant, input) before
    any run is stored; a run refused after others were created (a quota, a custom auth
    handler) cancels those, so a batch is created whole or not at all."""
    start = await run_start(request, RunBatch)
    runs, runtime, caller, authorize, body = (
        start.runs,
        start.runtime,
        start.caller,
        start.authorize,
        start.body,
    )
    for item in body.root:
        await runs.check(caller.identity, item.payload())
    created: list[RunRecord] = []
    try:
        for item in body.root:
            created.append(await _create(runs, runtime, caller, authorize, None, item))
    except BaseException:
        for run in created:
            await cancel_quietly(runs, caller.identity, run)
        raise
    return json_response([run_dict(run) for run in created], {})


@router.post(
    "/runs/stream", responses={**SSE_RESPONSE, **error_responses(404, 409, 429)}, openapi_extra=READS_RUN
)
async def stream_stateless(request: Request) -> EventSourceResponse:
    return await _stream_reply(await run_start(request, RunCreate), None)


@router.post("/runs/wait", responses=error_responses(404, 409, 429), openapi_extra=READS_RUN)
async def wait_stateless(request: Request) -> Response:
    return await _wait_reply(await run_start(request, RunCreate), None)


@router.post("/runs/cancel", status_code=204, responses=error_responses(404))
async def cancel_many(
    body: RunsCancel,
    principal: Principal,
    authorize: Authorize,
    runs: RunsDep,
    action: Annotated[str, Query(pattern="^(interrupt|rollback)$")] = "interrupt",
) -> Response:
    """Runs by ``thread_id`` and ``run_ids``, or across the caller's threads by ``status`` and/or
    ``assistant_id``, as langgraph-api takes them."""
    if body.status is not None and (body.thread_id is not None or body.run_ids is not None):
        raise ApiError(
            422, "invalid_request", "status: give thread_id and run_ids, or a status across threads, not both"
        )
    if body.thread_id is None:
        if body.status is None and body.assistant_id is None:
            raise ApiError(
                422,
                "invalid_request",
                "Must provide either a status, an assistant_id, or both 'thread_id' and 'run_ids'",
            )
        value = {"thread_id": None, "action": action, "metadata": {"status": body.status}}
        filters = await authorize.check("threads", "update", value)
        statuses = ("pending", "running") if body.status in (None, "all") else (body.status,)
        await runs.cancel_matching(principal, statuses, body.assistant_id, action, filters)
        return Response(status_code=204)
    await authorize("threads", "update", {"thread_id": body.thread_id, "action": action})
    for run in await runs.list(principal, body.thread_id, limit=10**6):
        wanted = body.run_ids is None or run.run_id in body.run_ids
        if wanted and (body.assistant_id is None or run.assistant_id == body.assistant_id):
            await runs.cancel(principal, run.thread_id, run.run_id, action)
    return Response(status_code=204)


def _stream_modes(raw: list[str]) -> list[str] | None:
    modes: list[str] = []
    for value in filter(None, raw):  # the SDK sends an empty stream_mode= for "all of them"
        if value.startswith("["):
            try:
                parsed = orjson.loads(value)
            except orjson.JSONDecodeError:
                raise ApiError(422, "invalid_request", "stream_mode: not a JSON list") from None
            modes += [str(m) for m in parsed] if isinstance(parsed, list) else []
        else:
            modes.append(value)
    bad = [m for m in modes if m not in STREAM_MODES]
    if bad:
        raise ApiError(422, "invalid_request", f"stream_mode: unknown modes {bad}")
    return modes or None
