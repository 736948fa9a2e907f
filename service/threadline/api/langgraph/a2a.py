"""``/a2a/{assistant_id}``: an assistant as an A2A agent over JSON-RPC 2.0, as langgraph-api
serves it (ADR 0021), and its agent card.

A message is a run on a thread: ``contextId`` is the thread id (a new thread when absent), a
task is a run, its id ``"{contextId}:{run_id}"``; a message naming an ``input-required`` task
resumes the thread's interrupt with its text (or a data part's ``resume``). Methods:
``message/send`` (the finished task), ``message/stream`` (SSE of JSON-RPC responses: the
submitted task, status updates with the reply so far, the response artifact, the final
status), ``tasks/get``, ``tasks/cancel``, ``agent/getAuthenticatedExtendedCard``; the A2A 1.0
names (``SendMessage``, ``SendStreamingMessage``, ``GetTask``, ``CancelTask``,
``GetExtendedAgentCard``) answer in 1.0's shapes (``ROLE_AGENT``, ``TASK_STATE_COMPLETED``,
``{"task": …}``), the 0.3 names in 0.3's (``agent``, ``completed``), as langgraph-api does.

Runs go through :class:`~threadline.runs.runs.Runs` (durable, ``TURN_TIMEOUT_SECONDS``, a
stream slot while a reply waits); custom auth's handlers apply as to the routes langgraph-api's
A2A server calls: ``assistants.read``, ``threads.create_run``, ``threads.read``,
``threads.update`` (a cancel).
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Header, Request, Response

from threadline.api.deps import (
    THREAD_ID,
    AssistantsDep,
    Authorize,
    CallerDep,
    RunsDep,
    RuntimeDep,
    ThreadsDep,
)
from threadline.api.errors import ApiError
from threadline.api.langgraph import a2a_shapes as shapes
from threadline.api.langgraph import a2a_stream, jsonrpc
from threadline.api.langgraph.assistants import _read
from threadline.api.langgraph.bodies import RunCreate
from threadline.api.langgraph.runs import _create
from threadline.api.openapi import error_responses
from threadline.api.streams import StreamSlot
from threadline.custom_auth import Caller
from threadline.runs.assistants import Assistant, Assistants
from threadline.runs.graph_schemas import graph_schemas
from threadline.runs.records import RunRecord, shown_status
from threadline.runs.runs import Runs
from threadline.runs.threads import Threads

router = APIRouter(tags=["a2a"])

# Runs of a context looked through for a task's latest run (one page of the run records).
TASK_RUN_SCAN = 100

_BODY_DOC = jsonrpc.body_doc(
    "A JSON-RPC 2.0 request: message/send, message/stream, tasks/get, tasks/cancel (or their A2A 1.0 names)",
    {
        "jsonrpc": "2.0",
        "id": "1",
        "method": "message/send",
        "params": {"message": {"role": "user", "parts": [{"kind": "text", "text": "hi"}], "messageId": "m1"}},
    },
)
_RESPONSES = {
    200: {
        "description": "A JSON-RPC response (errors among them); for message/stream, SSE of them",
        "content": {"application/json": {"schema": {"type": "object"}}, "text/event-stream": {}},
    },
    202: {"description": "A JSON-RPC response sent to the server, accepted; no body"},
    400: {"description": "An Accept header without the media type the method answers in"},
    **error_responses(429),
}


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status, media_type="application/json")


@router.post("/a2a/{assistant_id}", openapi_extra=_BODY_DOC, responses=_RESPONSES)
@router.post("/a2a/{assistant_id}/", include_in_schema=False)
async def post(
    assistant_id: str,
    request: Request,
    caller: CallerDep,
    authorize: Authorize,
    assistants: AssistantsDep,
    threads: ThreadsDep,
    runs: RunsDep,
    runtime: RuntimeDep,
    accept: Annotated[
        str, Header(description="text/event-stream for message/stream, else application/json")
    ] = "",
) -> Response:
    """One A2A JSON-RPC request for the assistant (see the module)."""
    try:
        message = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        return _json(shapes.rpc(None, jsonrpc.error(jsonrpc.PARSE_ERROR, "Invalid JSON payload")))
    if not isinstance(message, dict):
        return _json(
            shapes.rpc(
                None, jsonrpc.error(jsonrpc.INVALID_REQUEST, "Invalid message format: expected object")
            )
        )
    id_, method = message.get("id"), message.get("method")
    if id_ is not None and (not isinstance(id_, (str, int, float)) or isinstance(id_, bool)):
        error = jsonrpc.error(jsonrpc.INVALID_REQUEST, "'id' must be a string, number, or null")
        return _json(shapes.rpc(None, error))
    if message.get("jsonrpc") != "2.0":
        error = jsonrpc.error(jsonrpc.INVALID_REQUEST, "missing or invalid jsonrpc version")
        return _json(shapes.rpc(id_, error))
    spec_03 = isinstance(method, str) and method in shapes.ALIASES
    method = shapes.ALIASES.get(method, method) if isinstance(method, str) else method
    if method is not None and method not in shapes.METHODS:
        name = method[:100] if isinstance(method, str) else "method must be a string"
        return _json(shapes.rpc(id_, jsonrpc.error(jsonrpc.METHOD_NOT_FOUND, f"Method not found: {name}")))
    if id_ is None or method is None:
        if id_ is not None and ("result" in message or "error" in message):
            return Response(status_code=202)  # a response sent to us: nothing to answer
        error = jsonrpc.error(jsonrpc.INVALID_REQUEST, "not a JSON-RPC request (an id and a method)")
        return _json(shapes.rpc(id_, error))
    params = message.get("params")
    params = {} if params is None else params
    streaming = method == "SendStreamingMessage"
    wanted = "text/event-stream" if streaming else "application/json"
    if not shapes.accepts(accept, wanted):
        raise ApiError(400, "invalid_request", f"Accept header must include {wanted}")
    try:
        if not isinstance(params, dict):
            raise shapes.Refused(jsonrpc.INVALID_PARAMS, "Invalid params: must be an object")
        try:
            assistant_id = str(uuid.UUID(assistant_id))
        except ValueError:
            raise shapes.Refused(jsonrpc.INVALID_PARAMS, "Invalid assistant ID: must be a UUID") from None
        ctx = _Context(assistant_id, caller, authorize, assistants, threads, runs, runtime, request)
        if streaming:
            return await ctx.stream(params, id_, spec_03)
        handler = {
            "SendMessage": ctx.send,
            "GetTask": ctx.get_task,
            "CancelTask": ctx.cancel_task,
            "GetExtendedAgentCard": ctx.card_result,
            "ListTasks": ctx.list_tasks,
        }[method]
        outcome = await handler(params)
    except shapes.Refused as refused:
        outcome = refused.outcome
    return _json(shapes.rpc(id_, outcome, spec_03))


@router.get("/a2a/{assistant_id}", include_in_schema=False)
@router.get("/a2a/{assistant_id}/", include_in_schema=False)
@router.get("/a2a/{assistant_id}/.well-known/agent-card.json", include_in_schema=False)
@router.get("/a2a/{assistant_id}/.well-known/agent.json", include_in_schema=False)
async def agent_card(
    assistant_id: str, request: Request, caller: CallerDep, authorize: Authorize, assistants: AssistantsDep
) -> Response:
    """The assistant's agent card (a GET of the agent's URL answers it too, as A2A says)."""
    return await _card_response(assistant_id, request, caller, authorize, assistants)


@router.get("/.well-known/agent-card.json", include_in_schema=False)
async def root_agent_card(
    request: Request,
    caller: CallerDep,
    authorize: Authorize,
    assistants: AssistantsDep,
    assistant_id: str | None = None,
) -> Response:
    """The agent card of ``?assistant_id=``."""
    if not assistant_id:
        return _card_error("Missing required query parameter: assistant_id")
    return await _card_response(assistant_id, request, caller, authorize, assistants)


@router.delete("/a2a/{assistant_id}", include_in_schema=False)
async def delete(assistant_id: str, caller: CallerDep) -> Response:
    raise ApiError(405, "method_not_allowed", "A2A has no sessions to end")


def _card_error(message: str) -> Response:
    return _json({"error": {"code": jsonrpc.INVALID_PARAMS, "message": message}}, 400)


async def _card_response(
    assistant_id: str, request: Request, caller: Caller, authorize: Authorize, assistants: Assistants
) -> Response:
    ctx = _Context(assistant_id, caller, authorize, assistants, None, None, None, request)
    try:
        return _json(await ctx.card())
    except shapes.Refused as refused:
        return _card_error(refused.outcome["error"]["message"])


class _Context:
    """One request's handlers, with what they reach (the caller, its handlers, the layers)."""

    def __init__(
        self,
        assistant_id: str,
        caller: Caller,
        authorize: Authorize,
        assistants: Assistants,
        threads: Threads | None,
        runs: Runs | None,
        runtime: Any,
        request: Request,
    ) -> None:
        self.assistant_id, self.caller, self.authorize = assistant_id, caller, authorize
        self.assistants, self.threads, self.runs, self.runtime = assistants, threads, runs, runtime
        self.request = request
        self.principal = caller.identity

    async def _assistant(self) -> Assistant:
        try:
            return await _read(self.authorize, self.assistants, self.principal, self.assistant_id)
        except jsonrpc.REFUSALS as exc:
            jsonrpc.reraise_unavailable(exc)
            raise shapes.Refused(
                jsonrpc.INVALID_PARAMS, f"Assistant '{self.assistant_id[:64]}' not found"
            ) from None

    # -- a message: a run --

    async def _prepare(self, params: dict[str, Any]) -> tuple[RunCreate, str | None, str | None, dict]:
        """The run a message asks for: ``(body, context_id, task_id, message)``.

        Raises:
            shapes.Refused: a message A2A or the assistant cannot take.
        """
        configuration = params.get("configuration") or {}
        if not isinstance(configuration, dict):
            raise shapes.Refused(jsonrpc.INVALID_PARAMS, "Invalid params: 'configuration' must be an object")
        shapes.history_length(configuration.get("historyLength"))
        message = params.get("message")
        if not isinstance(message, dict) or not message:
            raise shapes.Refused(jsonrpc.INVALID_PARAMS, "Missing or invalid 'message' in params")
        message_id, role, parts = message.get("messageId"), message.get("role"), message.get("parts")
        if not message_id or not isinstance(message_id, str):
            raise shapes.Refused(jsonrpc.INVALID_PARAMS, "Missing required 'messageId' in message")
        if not role or not isinstance(role, str):
            raise shapes.Refused(jsonrpc.INVALID_PARAMS, "Missing required 'role' in message")
        if not isinstance(parts, list) or not parts:
            raise shapes.Refused(jsonrpc.INVALID_PARAMS, "Message must contain at least one part")
        context_id, task_id = message.get("contextId"), message.get("taskId")
        if context_id is not None and not (isinstance(context_id, str) and THREAD_ID.fullmatch(context_id)):
            raise shapes.Refused(
                jsonrpc.INVALID_PARAMS, "contextId must be 1-64 characters of A-Z a-z 0-9 _ -"
            )
        if task_id is not None and not isinstance(task_id, str):
            raise shapes.Refused(jsonrpc.INVALID_PARAMS, "taskId must be a string")
        assistant = await self._assistant()
        texts, data = shapes.split_parts(parts)
        if texts:
            schemas = graph_schemas(assistant.graph_id, assistant.graph)
            schema = schemas.get("input_schema") or schemas.get("state_schema") or {}
            if "messages" not in (schema.get("properties") or {}):
                raise shapes.Refused(
                    jsonrpc.INVALID_PARAMS,
                    f"Assistant '{self.assistant_id}' (graph '{assistant.graph_id}') does not support "
                    "A2A conversational messages: its input schema has no 'messages' field",
                )
        metadata: dict[str, Any] = {}
        command = message.get("command")
        if command is not None and not isinstance(command, dict):
            raise shapes.Refused(jsonrpc.INVALID_PARAMS, "command must be an object")
        if task_id is not None:
            task = await self._task(task_id, context_id)
            if task is None:
                raise shapes.Refused(shapes.TASK_NOT_FOUND, f"Task not found: {task_id[:200]}")
            if task[2] in shapes.TERMINAL:
                raise shapes.Refused(
                    shapes.UNSUPPORTED_OPERATION, "A terminal task cannot accept another message"
                )
            context_id = task[0].thread_id
            metadata = {"a2a": {"task_id": task_id}}
            if command is None and task[2] == "TASK_STATE_INPUT_REQUIRED":
                # The answer to the interrupt: a data part's "resume", else the text.
                resumes = [d["resume"] for d in data if "resume" in d]
                if len(resumes) > 1:
                    raise shapes.Refused(
                        jsonrpc.INVALID_PARAMS, "Only one resume value is allowed in data parts"
                    )
                if resumes or texts:
                    command = {"resume": resumes[0] if resumes else "\n".join(texts)}
                    texts, data = [], [{k: v for k, v in d.items() if k != "resume"} for d in data]
        graph_role = "human" if role in ("user", "ROLE_USER") else "assistant"
        payload: dict[str, Any] = {}
        for part in data:
            payload.update(part)
        if texts:
            payload["messages"] = [{"role": graph_role, "content": t, "id": message_id} for t in texts]
        try:
            body = RunCreate(
                assistant_id=self.assistant_id,
                input=(payload or None) if command else payload,
                command=command,
                context=params.get("context"),
                metadata=metadata or None,
                if_not_exists="create",
                stream_mode=["messages", "values"],
            )
        except jsonrpc.REFUSALS as exc:
            raise shapes.Refused.of(exc) from None
        return body, context_id, task_id, message

    async def _start(self, body: RunCreate, context_id: str | None, streamed: bool) -> RunRecord:
        assert self.runs is not None
        try:
            return await _create(
                self.runs,
                self.runtime,
                self.caller,
                self.authorize,
                context_id or str(uuid.uuid4()),
                body,
                streamed,
            )
        except jsonrpc.REFUSALS as exc:
            raise shapes.Refused.of(exc) from None

    async def send(self, params: dict[str, Any]) -> dict[str, Any]:
        """``message/send``: run the message and answer the finished task."""
        body, context_id, task_id, _ = await self._prepare(params)
        history_length = shapes.history_length((params.get("configuration") or {}).get("historyLength"))
        assert self.runs is not None
        with StreamSlot(self.runtime, self.principal).released_on_error() as slot:
            run = await self._start(body, context_id, streamed=False)
            try:
                result = orjson.loads(
                    await self.runs.join(self.principal, run.thread_id, run.run_id, check=False)
                )
            finally:
                slot.release()
        task_id = task_id or f"{run.thread_id}:{run.run_id}"
        task = shapes.finished_task(result, task_id, run.thread_id, history_length, self.assistant_id)
        return {"result": {"task": task}}

    async def stream(self, params: dict[str, Any], rpc_id: Any, spec_03: bool) -> Response:
        """``message/stream``: the run's progress as SSE, each event a JSON-RPC response."""
        slot = StreamSlot(self.runtime, self.principal)
        with slot.released_on_error():
            try:
                body, context_id, task_id, message = await self._prepare(params)
                run = await self._start(body, context_id, streamed=True)
            except shapes.Refused as refused:
                events = a2a_stream.one(refused.outcome)
            else:
                assert self.runs is not None
                task_id = task_id or f"{run.thread_id}:{run.run_id}"
                events = a2a_stream.progress(
                    self.runs, self.principal, self.assistant_id, run, task_id, message
                )
            return slot.sse(a2a_stream.sse(events, rpc_id, spec_03), {})

    # -- tasks --

    async def _task(
        self, task_id: str, context_id: str | None
    ) -> tuple[RunRecord, dict[str, Any], str] | None:
        """``(latest run, thread, state)`` of the task, or None: no such task of this assistant
        for the caller. A task is its first run and the runs that answered its interrupts."""
        assert self.runs is not None and self.threads is not None
        parsed_context, _, anchor = task_id.rpartition(":")
        if parsed_context and context_id and parsed_context != context_id:
            return None
        thread_id = context_id or parsed_context
        if not thread_id or not THREAD_ID.fullmatch(thread_id) or not THREAD_ID.fullmatch(anchor):
            return None
        try:
            await self.authorize("threads", "read", {"thread_id": thread_id, "run_id": anchor})
            run = await self.runs.get(self.principal, thread_id, anchor)
            thread = await self.threads.get(self.principal, thread_id)
            recent = await self.runs.list(self.principal, thread_id, limit=TASK_RUN_SCAN)
        except jsonrpc.REFUSALS as exc:
            jsonrpc.reraise_unavailable(exc)
            return None
        if run.assistant_id != self.assistant_id:
            return None
        # runs_of lists the newest first: the first of the task's runs is its latest.
        latest = next(
            (
                r
                for r in recent
                if r.run_id == anchor or (r.metadata.get("a2a") or {}).get("task_id") == task_id
            ),
            run,
        )
        state = shapes.RUN_STATES.get(shown_status(latest), "TASK_STATE_SUBMITTED")
        newest = recent[0].run_id if recent else None
        if (
            state == "TASK_STATE_COMPLETED"
            and thread.get("status") == "interrupted"
            and newest == latest.run_id
        ):
            state = "TASK_STATE_INPUT_REQUIRED"
        return latest, thread, state

    async def get_task(self, params: dict[str, Any]) -> dict[str, Any]:
        """``tasks/get``: the task's state and the conversation so far."""
        task_id, context_id = shapes.task_ids(params)
        found = await self._task(task_id, context_id)
        if found is None:
            raise shapes.Refused(shapes.TASK_NOT_FOUND, f"Task not found: {task_id[:200]}")
        history_length = shapes.history_length(params.get("historyLength"))
        run, thread, state = found
        task = shapes.stored_task(task_id, run, thread, state, history_length)
        return {"result": task}

    async def cancel_task(self, params: dict[str, Any]) -> dict[str, Any]:
        """``tasks/cancel``: interrupt the task's active run and wait for it to stop."""
        assert self.runs is not None
        task_id, context_id = shapes.task_ids(params)
        found = await self._task(task_id, context_id)
        if found is None:
            raise shapes.Refused(shapes.TASK_NOT_FOUND, f"Task not found: {task_id[:200]}")
        run, _, state = found
        if state in shapes.TERMINAL or run.status not in ("pending", "running"):
            raise shapes.Refused(shapes.TASK_NOT_CANCELABLE, "Task is not cancelable in its current state")
        try:
            await self.authorize(
                "threads", "update", {"thread_id": run.thread_id, "run_id": run.run_id, "action": "interrupt"}
            )
            await self.runs.cancel(self.principal, run.thread_id, run.run_id, "interrupt")
        except jsonrpc.REFUSALS as exc:
            raise shapes.Refused.of(exc) from None
        with StreamSlot(self.runtime, self.principal).released_on_error() as slot:
            try:
                await self.runs.join(self.principal, run.thread_id, run.run_id, check=False)
            finally:
                slot.release()
        status = {
            "state": "TASK_STATE_CANCELED",
            "timestamp": shapes.now(),
            "message": shapes.text_message("ROLE_AGENT", "Task was canceled", task_id),
        }
        return {"result": {"kind": "task", "id": task_id, "contextId": run.thread_id, "status": status}}

    async def list_tasks(self, params: dict[str, Any]) -> dict[str, Any]:
        raise shapes.Refused(
            shapes.UNSUPPORTED_OPERATION, "ListTasks is not served by threadline; use tasks/get"
        )

    # -- the agent card --

    async def card_result(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"result": await self.card()}

    async def card(self) -> dict[str, Any]:
        """The assistant's A2A agent card (langgraph-api's, less the A2UI extension)."""
        try:
            uuid.UUID(self.assistant_id)
        except ValueError:
            raise shapes.Refused(jsonrpc.INVALID_PARAMS, "Invalid assistant ID: must be a UUID") from None
        assistant = await self._assistant()
        schemas = graph_schemas(assistant.graph_id, assistant.graph)
        schema = schemas.get("input_schema") or schemas.get("state_schema") or {}
        name = assistant.as_dict()["name"]
        description = assistant.description or f"{name} assistant"
        url = self.request.url
        scheme = self.request.headers.get("x-forwarded-proto") or url.scheme
        default_port = {"http": 80, "https": 443}.get(scheme)
        host = url.hostname or "localhost"
        base = f"{scheme}://{host}" + (f":{url.port}" if url.port and url.port != default_port else "")
        agent_url = f"{base}/a2a/{self.assistant_id}"
        return shapes.agent_card(self.assistant_id, name, description, schema, agent_url)
