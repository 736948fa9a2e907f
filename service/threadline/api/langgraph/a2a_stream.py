"""``message/stream`` of the A2A server (:mod:`threadline.api.langgraph.a2a`): a run's
progress as JSON-RPC outcomes, and their SSE encoding."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
from sse_starlette import ServerSentEvent

from threadline.api.langgraph import a2a_shapes as shapes
from threadline.api.langgraph import jsonrpc
from threadline.checkpoint import is_store_down
from threadline.runs.records import RunRecord, shown_status
from threadline.runs.runs import Runs


async def sse(
    events: AsyncIterator[dict[str, Any]], rpc_id: Any, spec_03: bool
) -> AsyncIterator[ServerSentEvent]:
    """``events`` as SSE, each a JSON-RPC response to ``rpc_id``."""
    async for outcome in _store_errors_answered(events):
        data = orjson.dumps(shapes.rpc(rpc_id, outcome, spec_03)).decode()
        # U+2028/2029 and U+0085 end a line for some SSE readers.
        data = data.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").replace("\x85", "\\u0085")
        yield ServerSentEvent(data, event="message")


async def progress(
    runs: Runs, principal: str, assistant_id: str, run: RunRecord, task_id: str, message: dict[str, Any]
) -> AsyncIterator[dict]:
    """The outcomes ``message/stream`` sends of ``run``: the submitted task, status updates with
    the reply so far, the response (or interrupt) artifact, the final status."""
    context_id = run.thread_id
    update = {"taskId": task_id, "contextId": context_id}
    submitted = {
        "kind": "task",
        "id": task_id,
        "contextId": context_id,
        "history": [{**message, "kind": "message", "taskId": task_id, "contextId": context_id}],
        "status": {"state": "TASK_STATE_SUBMITTED", "timestamp": shapes.now()},
    }
    yield {"result": {"task": submitted}}
    result: Any = None
    error: Any = None
    async for event in runs.events(principal, context_id, run.run_id, check=False):
        data = orjson.loads(event.data)
        if event.event == "error":
            error = data
        elif event.event == "values":
            error, result = None, data
        elif event.event.startswith("messages") and isinstance(data, list):
            text = "".join(
                shapes.text_of(m.get("content"))
                for m in data
                if isinstance(m, dict) and shapes.role_of(m) == "ROLE_AGENT"
            )
            if text:
                status = {
                    "state": "TASK_STATE_WORKING",
                    "message": shapes.text_message("ROLE_AGENT", text, task_id, context_id),
                    "timestamp": shapes.now(),
                }
                yield {"result": {**update, "kind": "status-update", "status": status, "final": False}}
    final: dict[str, Any] = {"timestamp": shapes.now()}
    ended = await runs.get(principal, context_id, run.run_id)
    if shown_status(ended) == "interrupted":  # cancelled (tasks/cancel, a newer run's strategy)
        final.update(
            state="TASK_STATE_CANCELED",
            message=shapes.text_message("ROLE_AGENT", "Task was canceled", task_id),
        )
    elif error is not None:
        text = (error.get("message") or error.get("error")) if isinstance(error, dict) else error
        final.update(
            state="TASK_STATE_FAILED",
            message=shapes.text_message("ROLE_AGENT", str(text or ""), task_id, context_id),
        )
    elif isinstance(result, dict) and "__interrupt__" in result:
        final["state"] = "TASK_STATE_INPUT_REQUIRED"
        artifact = shapes.interrupt_artifact(result["__interrupt__"])
        yield {"result": {**update, "kind": "artifact-update", "artifact": artifact}}
    else:
        final["state"] = "TASK_STATE_COMPLETED"
        parts = (
            shapes.reply_parts(result)
            if isinstance(result, dict)
            else [{"kind": "text", "text": str(result)}]
        )
        artifact = shapes.response_artifact(parts, assistant_id)
        yield {
            "result": {
                **update,
                "kind": "artifact-update",
                "artifact": artifact,
                "append": False,
                "lastChunk": True,
            }
        }
    yield {"result": {**update, "kind": "status-update", "status": final, "final": True}}


async def _store_errors_answered(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    """``events``, ended by a JSON-RPC error when a store becomes unreachable midway."""
    try:
        async for outcome in events:
            yield outcome
    except Exception as exc:
        if not is_store_down(exc):
            raise
        yield jsonrpc.error(jsonrpc.INTERNAL_ERROR, "a store is unreachable; ask tasks/get later")


async def one(outcome: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """``outcome`` alone, as a stream (a message refused before its run)."""
    yield outcome
