"""``/v1/threads``: create, read, converse, list checkpoints, delete."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Response
from pydantic import BaseModel, StrictStr, field_validator
from sse_starlette import EventSourceResponse, ServerSentEvent

from threadline import metrics
from threadline.api.deps import ConversationsDep, Principal, RuntimeDep, ThreadId
from threadline.api.errors import ApiError, described
from threadline.api.openapi import error_responses
from threadline.api.streams import StreamSlot
from threadline.checkpoint import is_store_down
from threadline.turns import RunningTurn, TurnResult, check_message_id

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/threads", tags=["threads"])


class MessageIn(BaseModel):
    content: StrictStr
    # The idempotency key: a retry with the same id never runs the turn twice.
    id: StrictStr | None = None

    @field_validator("id")
    @classmethod
    def _valid_message_id(cls, value: str | None) -> str | None:
        return None if value is None else check_message_id(value)  # the rules are the turns'


class ThreadCreated(BaseModel):
    thread_id: str


def _turn_body(result: TurnResult, replica: str) -> dict[str, Any]:
    return {
        "thread_id": result.thread_id,
        "turn": result.turn,
        "reply": {"id": result.reply_id, "content": result.reply},
        "replica": replica,
    }


@router.post("", status_code=201, responses=error_responses(429))
async def create_thread(principal: Principal, conversations: ConversationsDep) -> ThreadCreated:
    return ThreadCreated(thread_id=await conversations.create_thread(principal))


@router.get("/{thread_id}", responses=error_responses(400, 404))
async def get_thread(thread_id: ThreadId, principal: Principal, conversations: ConversationsDep) -> dict:
    return await conversations.thread(thread_id, principal)


@router.get("/{thread_id}/checkpoints", responses=error_responses(400, 404))
async def list_checkpoints(
    thread_id: ThreadId,
    principal: Principal,
    conversations: ConversationsDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 100,
) -> dict:
    """The thread's checkpoint history, newest first: ids, parent, step, source and time, from
    the checkpoints' metadata (at most 100 per request)."""
    return {
        "thread_id": thread_id,
        "checkpoints": await conversations.checkpoints(thread_id, principal, limit),
    }


@router.delete("/{thread_id}", status_code=204, responses=error_responses(400, 404, 409))
async def delete_thread(
    thread_id: ThreadId, principal: Principal, conversations: ConversationsDep
) -> Response:
    await conversations.delete(thread_id, principal)
    return Response(status_code=204)


@router.post(
    "/{thread_id}/messages",
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "the reply (JSON or SSE)"},
        **error_responses(400, 404, 409, 413, 429, 503, 504),
    },
)
async def post_message(
    thread_id: ThreadId,
    body: MessageIn,
    principal: Principal,
    runtime: RuntimeDep,
    conversations: ConversationsDep,
    accept: Annotated[str, Header()] = "application/json",
):
    """One turn. With ``Accept: text/event-stream`` the reply streams as SSE: ``token`` events,
    then ``done`` with the same body as the JSON answer; ``: keepalive`` comments while the model
    is silent."""
    size = len(body.content.encode())
    limit = runtime.settings.server.max_message_bytes
    if size == 0 or not body.content.strip():
        raise ApiError(413, "content_empty", "content must not be empty")
    if size > limit:
        raise ApiError(413, "content_too_large", f"content is larger than {limit} bytes")
    message_id = body.id or uuid.uuid4().hex

    if "text/event-stream" not in accept:
        result = await conversations.run_turn(thread_id, principal, message_id, body.content)
        return _turn_body(result, runtime.replica)

    # Each stream holds a connection, a task and a model call for its whole length.
    slot = StreamSlot(runtime, principal)
    # Take the lease (and check ownership and idempotency) before answering, so a busy thread
    # or a missing one is an HTTP status, not an event inside a 200 stream.
    turn = RunningTurn(conversations.stream_turn(thread_id, principal, message_id, body.content))
    # Tied to the turn's task, which always ends (done, failed or cancelled), even when the
    # response never starts iterating _events.
    turn.add_done_callback(slot.release)
    try:
        first = await turn.next()
    except BaseException:
        await turn.cancel()
        raise
    server = runtime.settings.server
    return EventSourceResponse(
        _events(first, turn, runtime.replica),
        ping=server.sse_keepalive_seconds,
        ping_message_factory=lambda: ServerSentEvent(comment="keepalive"),
        # On SIGTERM the replica drains first (threadline.server); give streams that long.
        shutdown_grace_period=server.drain_seconds,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _events(
    first: str | TurnResult | None, turn: RunningTurn, replica: str
) -> AsyncIterator[ServerSentEvent]:
    """The SSE stream of one turn. A client that goes away cancels this generator, which
    cancels the turn and with it the model call."""
    metrics.ACTIVE_STREAMS.inc()
    try:
        item = first
        while item is not None:
            if isinstance(item, TurnResult):
                yield ServerSentEvent(json.dumps(_turn_body(item, replica)), event="done")
            else:
                yield ServerSentEvent(json.dumps({"token": item}), event="token")
            item = await turn.next()
    except Exception as exc:
        error = described(exc) or (
            (503, "unavailable", "a store is unreachable; retry") if is_store_down(exc) else None
        )
        if error is None:
            raise
        status, code, message = error
        log.warning("turn failed mid-stream", extra={"error": type(exc).__name__, "status": status})
        yield ServerSentEvent(json.dumps({"error": {"code": code, "message": message}}), event="error")
    finally:
        await turn.cancel()
        metrics.ACTIVE_STREAMS.dec()
