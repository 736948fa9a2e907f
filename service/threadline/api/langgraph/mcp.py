"""``/mcp``: the caller's assistants as MCP tools, over the Streamable HTTP transport as
langgraph-api serves it (ADR 0021): stateless (no ``Mcp-Session-Id``), one JSON-RPC message per
POST answered as ``application/json``; GET (a server stream) 405, DELETE (end a session) 404.

``tools/list`` lists what ``/assistants/search`` shows the caller, a page of
:data:`PAGE_SIZE` at a time, each tool's ``inputSchema`` its graph's input schema with
LangChain message lists turned into one string; ``tools/call`` runs the assistant as a
stateless run through :class:`~threadline.runs.runs.Runs` (durable, bounded by
``TURN_TIMEOUT_SECONDS``, holding a stream slot while it waits) and answers its result.
Custom auth's handlers apply as langgraph-api applies them, whose MCP server calls its own API:
``assistants.search`` and ``assistants.read`` for a list, ``threads.create_run`` for a call.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Header, Request, Response

from threadline import __version__
from threadline.api.deps import AssistantsDep, Authorize, CallerDep, RunsDep, RuntimeDep
from threadline.api.errors import ApiError
from threadline.api.langgraph import jsonrpc
from threadline.api.langgraph.assistants import _read, _searched
from threadline.api.langgraph.bodies import AssistantSearch, RunCreate
from threadline.api.langgraph.runs import _create
from threadline.api.openapi import error_responses
from threadline.api.streams import StreamSlot
from threadline.runs.assistants import Assistant, Assistants
from threadline.runs.graph_schemas import graph_schemas

log = logging.getLogger(__name__)

router = APIRouter(tags=["mcp"])

# Tools per tools/list page, and assistants a tools/call looks through for its name: those of
# langgraph-api (its DEFAULT_PAGE_SIZE, MAX_ASSISTANTS); a principal has at most
# QUOTA_ASSISTANTS_PER_PRINCIPAL besides the built-ins anyway.
PAGE_SIZE = 100
MAX_ASSISTANTS = 1000

SUPPORTED_PROTOCOL_VERSIONS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})
LATEST_PROTOCOL_VERSION = "2025-11-25"

# MCP tool names: ^[a-zA-Z0-9_\-.]{1,128}$ (the 2025-11-25 spec).
_INVALID_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_\-.]")
_MESSAGE_TYPES = {
    f"{kind}Message{chunk}"
    for kind in ("AI", "Human", "Chat", "System", "Function", "Tool")
    for chunk in ("", "Chunk")
}
_LANGCHAIN_DEFS = _MESSAGE_TYPES | {
    "ToolCall", "ToolCallChunk", "InvalidToolCall", "UsageMetadata", "InputTokenDetails",
    "OutputTokenDetails",
}  # fmt: skip

_BODY_DOC = jsonrpc.body_doc(
    "A JSON-RPC 2.0 request, notification, or response object.",
    {
        "jsonrpc": "2.0",
        "id": "1",
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}},
    },
)
_OK = {
    200: {
        "description": "The JSON-RPC response (a JSON-RPC error among them)",
        "content": {"application/json": {"schema": {"type": "object"}}},
    },
    202: {"description": "A notification or response, accepted; no body"},
}
_BAD = {400: {"description": "Not JSON, not a JSON-RPC message, or an Accept without application/json"}}


def normalize_name(name: str) -> str:
    """An assistant's name as an MCP tool name (what langgraph-api makes of it)."""
    return _INVALID_NAME_CHARS.sub("", re.sub(r"\s+", "_", name.strip()))[:128]


def simplify_schema(schema: dict[str, Any]) -> None:
    """A graph's input schema made for a model to fill in, in place: LangChain's message
    definitions dropped and a list of messages becomes one string (the user's message)."""
    defs = schema.get("$defs")
    if not defs or not set(defs) & _MESSAGE_TYPES:
        return
    for name in _LANGCHAIN_DEFS:
        defs.pop(name, None)
    if not defs:
        del schema["$defs"]
    for key, prop in schema.get("properties", {}).items():
        items = prop.get("items", {}) if prop.get("type") == "array" else {}
        refs = [c.get("$ref", "") for c in items.get("oneOf") or items.get("anyOf") or []]
        if any(r.startswith("#/$defs/") and r[8:] in _MESSAGE_TYPES for r in refs):
            schema["properties"][key] = {
                "type": "string",
                "title": prop.get("title", key),
                "description": "The user message to send to the agent.",
            }


@router.post("/mcp", openapi_extra=_BODY_DOC, responses={**_OK, **_BAD, **error_responses(429)})
@router.post("/mcp/", include_in_schema=False)
async def post(
    request: Request,
    caller: CallerDep,
    authorize: Authorize,
    assistants: AssistantsDep,
    runs: RunsDep,
    runtime: RuntimeDep,
    accept: Annotated[str, Header(description="must include application/json or text/event-stream")] = "",
) -> Response:
    """One JSON-RPC message (Streamable HTTP transport, stateless): ``initialize``, ``ping``,
    ``tools/list``, ``tools/call``."""
    try:
        message = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        raise ApiError(400, "invalid_request", "Invalid JSON") from None
    if "application/json" not in accept and "text/event-stream" not in accept:
        raise ApiError(
            400, "invalid_request", "Accept header must include application/json or text/event-stream"
        )
    if not isinstance(message, dict):
        raise ApiError(400, "invalid_request", "Invalid message format.")
    if message.get("jsonrpc") != "2.0":
        raise ApiError(
            400, "invalid_request", "Invalid JSON-RPC message. Missing or invalid jsonrpc version."
        )
    id_, method = message.get("id"), message.get("method")
    if id_ is None or not method:
        if id_ is None and not method:
            raise ApiError(
                400, "invalid_request", "Invalid message format: not a request, response or notification"
            )
        return Response(status_code=202)  # a notification, or a response to us: nothing to say
    if not isinstance(id_, (str, int, float)) or isinstance(id_, bool):
        raise ApiError(400, "invalid_request", "Invalid JSON-RPC message: id must be a string or a number")
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    principal = caller.identity
    if method == "initialize":
        outcome = _initialize(params)
    elif method == "ping":
        outcome = {"result": {}}
    elif method == "tools/list":
        outcome = await _tools_list(params, principal, authorize, assistants)
    elif method == "tools/call":
        outcome = await _tools_call(params, caller, authorize, assistants, runs, runtime)
    else:
        outcome = jsonrpc.error(jsonrpc.METHOD_NOT_FOUND, f"Method not found: {str(method)[:100]}")
    body = {"jsonrpc": "2.0", "id": id_, **outcome}
    return Response(orjson.dumps(body), media_type="application/json")


@router.get(
    "/mcp", status_code=405, responses={405: {"description": "No server stream (the server is stateless)"}}
)
async def get(caller: CallerDep) -> Response:
    raise ApiError(405, "method_not_allowed", "this MCP server is stateless: no server-sent stream")


@router.delete(
    "/mcp", status_code=404, responses={404: {"description": "No such session (the server keeps none)"}}
)
async def delete(caller: CallerDep) -> Response:
    raise ApiError(404, "not_found", "no such session: this MCP server keeps none")


def _initialize(params: dict[str, Any]) -> dict[str, Any]:
    requested = params.get("protocolVersion")
    version = requested if requested in SUPPORTED_PROTOCOL_VERSIONS else LATEST_PROTOCOL_VERSION
    return {
        "result": {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "LangGraph", "version": __version__},
        }
    }


async def _visible(
    principal: str, authorize: Authorize, assistants: Assistants, offset: int, limit: int
) -> list[Assistant]:
    """The caller's assistants as ``/assistants/search`` pages them (newest first)."""
    found = await _searched(authorize, assistants, principal, AssistantSearch(limit=limit, offset=offset))
    found.sort(key=lambda a: a.created_at, reverse=True)
    return found[offset : offset + limit]


async def _tools_list(
    params: dict[str, Any], principal: str, authorize: Authorize, assistants: Assistants
) -> dict[str, Any]:
    try:
        cursor = max(0, int(params.get("cursor") or 0))
    except (TypeError, ValueError):
        cursor = 0
    page = await _visible(principal, authorize, assistants, cursor, PAGE_SIZE)
    named: dict[str, Assistant] = {}
    for assistant in page:  # the first of a name wins, as on langgraph-api
        name = normalize_name(assistant.as_dict()["name"])
        if name in named:
            log.warning("two assistants with one MCP tool name; the newer is listed", extra={"tool": name})
            continue
        named[name] = assistant
    tools = await asyncio.gather(*(_tool(n, a, principal, authorize, assistants) for n, a in named.items()))
    result: dict[str, Any] = {"tools": [t for t in tools if t is not None]}
    if len(page) == PAGE_SIZE:
        result["nextCursor"] = str(cursor + PAGE_SIZE)
    return {"result": result}


async def _tool(
    name: str, assistant: Assistant, principal: str, authorize: Authorize, assistants: Assistants
) -> dict[str, Any] | None:
    """The tool of one assistant; None when its input schema cannot be had (the assistant is
    left out of the list, as langgraph-api does)."""
    try:
        readable = await _read(authorize, assistants, principal, assistant.assistant_id)
    except jsonrpc.REFUSALS as exc:
        jsonrpc.reraise_unavailable(exc)
        return None
    schema = graph_schemas(readable.graph_id, readable.graph).get("input_schema")
    if schema is None:
        return None
    simplify_schema(schema)
    schema.setdefault("type", "object")
    title = readable.as_dict()["name"]
    return {
        "name": name,
        "title": title,
        "description": readable.description or f"Tool based on the {title} assistant",
        "inputSchema": schema,
        "annotations": {
            "readOnlyHint": False,
            "destructiveHint": False,
            "idempotentHint": False,
            "openWorldHint": True,
        },
    }


async def _tools_call(
    params: dict[str, Any],
    caller: CallerDep,
    authorize: Authorize,
    assistants: Assistants,
    runs: RunsDep,
    runtime: RuntimeDep,
) -> dict[str, Any]:
    """Run the named tool's assistant (a stateless run) and answer its result."""
    name = params.get("name")
    if not name or not isinstance(name, str):
        return jsonrpc.error(jsonrpc.INVALID_PARAMS, f"Unknown tool: {name}")
    principal = caller.identity
    matching = [
        a
        for a in await _visible(principal, authorize, assistants, 0, MAX_ASSISTANTS)
        if normalize_name(a.as_dict()["name"]) == name
    ]
    if not matching:
        return jsonrpc.error(jsonrpc.INVALID_PARAMS, f"Unknown tool: {name[:128]}")
    if len(matching) > 1:
        return jsonrpc.error(jsonrpc.INVALID_PARAMS, "Multiple tools found with the same name.")
    # A stream slot (MAX_STREAMS_PER_PRINCIPAL) while the call waits, as a /runs/wait holds.
    with StreamSlot(runtime, principal).released_on_error() as slot:
        try:
            body = RunCreate(
                assistant_id=matching[0].assistant_id,
                input=params.get("arguments") or {},
                context=params.get("context"),
            )
            run = await _create(runs, runtime, caller, authorize, None, body)
        except jsonrpc.REFUSALS as exc:
            jsonrpc.reraise_unavailable(exc)
            slot.release()
            return jsonrpc.refusal(exc)
        try:
            value = orjson.loads(await runs.join(principal, run.thread_id, run.run_id, check=False))
        finally:
            slot.release()
    if isinstance(value, dict) and "__error__" in value:  # the run failed: the tool's error
        error = value["__error__"]
        text = error.get("error", "Error") if isinstance(error, dict) else str(error)
        return {"result": {"isError": True, "content": [{"type": "text", "text": text}]}}
    # langgraph-api answers the run's values as Python's repr of them; so does threadline.
    return {"result": {"content": [{"type": "text", "text": repr(value)}]}}
