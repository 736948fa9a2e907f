"""The A2A protocol's shapes (ADR 0021): the messages, parts, tasks, artifacts, history and
agent cards ``/a2a`` answers with or reads, the 0.3 spellings of 1.0's answers (``to_spec_03``),
and the JSON-RPC error codes and limits they use. Pure functions: no I/O, no routes (those and
the request context are in :mod:`threadline.api.langgraph.a2a`)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from threadline import __version__
from threadline.api.langgraph import jsonrpc
from threadline.runs import wire

if TYPE_CHECKING:
    from threadline.runs.records import RunRecord

TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
UNSUPPORTED_OPERATION = -32004
CONTENT_TYPE_NOT_SUPPORTED = -32005

# historyLength a request may ask for (langgraph-api's MAX_HISTORY_LENGTH_REQUESTED).
MAX_HISTORY_LENGTH = 10

# 0.3 method names → 1.0's (what the handlers are written in).
ALIASES = {
    "message/send": "SendMessage",
    "message/stream": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/cancel": "CancelTask",
    "agent/getAuthenticatedExtendedCard": "GetExtendedAgentCard",
}
METHODS = {*ALIASES.values(), "ListTasks"}
_ROLES_03 = {"ROLE_USER": "user", "ROLE_AGENT": "agent"}
_STATES_03 = {
    "TASK_STATE_SUBMITTED": "submitted",
    "TASK_STATE_WORKING": "working",
    "TASK_STATE_COMPLETED": "completed",
    "TASK_STATE_FAILED": "failed",
    "TASK_STATE_CANCELED": "canceled",
    "TASK_STATE_INPUT_REQUIRED": "input-required",
    "TASK_STATE_REJECTED": "rejected",
    "TASK_STATE_AUTH_REQUIRED": "auth-required",
}
RUN_STATES = {
    "pending": "TASK_STATE_SUBMITTED",
    "running": "TASK_STATE_WORKING",
    "success": "TASK_STATE_COMPLETED",
    "interrupted": "TASK_STATE_CANCELED",
    "error": "TASK_STATE_FAILED",
    "timeout": "TASK_STATE_FAILED",
}
TERMINAL = {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}


class Refused(Exception):
    """A JSON-RPC error answer, raised from deep in a handler."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.outcome = jsonrpc.error(code, message, data)

    @classmethod
    def of(cls, exc: Exception) -> Refused:
        """The layers' refusal ``exc`` (one of ``jsonrpc.REFUSALS``) as an answer; a 5xx
        ``ApiError`` is re-raised instead."""
        jsonrpc.reraise_unavailable(exc)
        error = jsonrpc.refusal(exc)["error"]
        return cls(error["code"], error["message"], error.get("data"))


def now() -> str:
    return datetime.now(UTC).isoformat()


def to_spec_03(data: Any) -> Any:
    """A 1.0-shaped answer in 0.3's shapes: lowercase roles and states, no ``{"task": …}``."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            if key == "role" and isinstance(value, str):
                out[key] = _ROLES_03.get(value, value)
            elif key == "state" and isinstance(value, str):
                out[key] = _STATES_03.get(value, value)
            elif key == "result" and isinstance(value, dict) and list(value) == ["task"]:
                out[key] = to_spec_03(value["task"])
            else:
                out[key] = to_spec_03(value)
        return out
    if isinstance(data, list):
        return [to_spec_03(item) for item in data]
    return data


def accepts(accept: str, media_type: str) -> bool:
    for part in accept.lower().split(","):
        candidate = part.split(";", 1)[0].strip()
        if candidate in ("*/*", media_type) or (
            candidate.endswith("/*") and media_type.startswith(candidate[:-1])
        ):
            return True
    return False


def rpc(id_: Any, outcome: dict[str, Any], spec_03: bool = False) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": id_, **outcome}
    return to_spec_03(body) if spec_03 else body


def text_message(role: str, text: str, task_id: str | None, context_id: str | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {
        "kind": "message",
        "role": role,
        "parts": [{"kind": "text", "text": text}],
        "messageId": str(uuid.uuid4()),
        "taskId": task_id,
    }
    if context_id is not None:
        found["contextId"] = context_id
    return found


def role_of(message: dict[str, Any]) -> str | None:
    """The A2A role of a LangChain message; None for the graph's own (system, tool)."""
    kind = str(message.get("type") or message.get("role") or "").lower()
    if kind in ("human", "user", "humanmessage", "humanmessagechunk"):
        return "ROLE_USER"
    if kind in ("ai", "assistant", "aimessage", "aimessagechunk"):
        return "ROLE_AGENT"
    return None


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            b if isinstance(b, str) else str(b.get("text", ""))
            for b in content
            if isinstance(b, str) or (isinstance(b, dict) and b.get("type") == "text")
        )
    return "" if content is None else str(content)


def history(messages: Any, task_id: str, context_id: str, length: int | None) -> list[dict[str, Any]]:
    """The thread's messages as A2A messages (user and agent ones; the last ``length``)."""
    found = []
    for message in messages if isinstance(messages, list) else []:
        role = role_of(message) if isinstance(message, dict) else None
        if role is None:
            continue
        text = text_of(message.get("content"))
        if role == "ROLE_AGENT" and not text:
            continue  # a tool call with no prose
        found.append(
            {
                "kind": "message",
                "role": role,
                "parts": [{"kind": "text", "text": text}],
                "messageId": message.get("id") or str(uuid.uuid4()),
                "taskId": task_id,
                "contextId": context_id,
            }
        )
    if length is None:
        return found
    return found[-length:] if length else []


def reply_parts(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The response artifact's parts: the last agent message after the last user message."""
    messages = result.get("messages")
    if not isinstance(messages, list) or not messages:
        return [{"kind": "text", "text": str(result)}]
    for message in reversed(messages):
        if not isinstance(message, dict):
            continue
        role = role_of(message)
        if role == "ROLE_USER":
            break
        if role == "ROLE_AGENT" and (text := text_of(message.get("content"))):
            return [{"kind": "text", "text": text}]
    return [{"kind": "text", "text": ""}]


def response_artifact(parts: list[dict[str, Any]], assistant_id: str) -> dict[str, Any]:
    return {
        "artifactId": str(uuid.uuid4()),
        "name": "Assistant Response",
        "description": f"Response from assistant {assistant_id}",
        "parts": parts,
    }


def interrupt_artifact(interrupts: list[Any]) -> dict[str, Any]:
    return {
        "artifactId": str(uuid.uuid4()),
        "name": "Interrupt",
        "description": "Agent requires input to continue",
        "parts": [
            {"kind": "data", "data": {"id": i.get("id"), "value": i.get("value")}}
            for i in interrupts
            if isinstance(i, dict)
        ],
    }


def history_length(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise Refused(jsonrpc.INVALID_PARAMS, "historyLength must be a non-negative integer")
    if value > MAX_HISTORY_LENGTH:
        raise Refused(jsonrpc.INVALID_PARAMS, f"historyLength cannot exceed {MAX_HISTORY_LENGTH}")
    return value


def task_ids(params: dict[str, Any]) -> tuple[str, str | None]:
    task_id, context_id = params.get("id"), params.get("contextId")
    if not task_id:
        raise Refused(jsonrpc.INVALID_PARAMS, "Missing required parameter: id (task_id)")
    if not isinstance(task_id, str) or (context_id is not None and not isinstance(context_id, str)):
        raise Refused(jsonrpc.INVALID_PARAMS, "Task id and contextId must be strings")
    return task_id, context_id


def finished_task(
    result: Any, task_id: str, context_id: str, history_length: int | None, assistant_id: str
) -> dict[str, Any]:
    """The task of a finished ``message/send`` run whose output is ``result``."""
    result = result if isinstance(result, dict) else {"__root__": result}
    task: dict[str, Any] = {"kind": "task", "id": task_id, "contextId": context_id}
    if history_length != 0:
        task["history"] = history(result.get("messages"), task_id, context_id, history_length)
    if "__error__" in result:
        error = result["__error__"]
        text = f"Error executing assistant: {error.get('error') if isinstance(error, dict) else error}"
        task["status"] = {
            "state": "TASK_STATE_FAILED",
            "message": text_message("ROLE_AGENT", text, task_id, context_id),
        }
    elif "__interrupt__" in result:
        task["status"] = {"state": "TASK_STATE_INPUT_REQUIRED", "timestamp": now()}
        task["artifacts"] = [interrupt_artifact(result["__interrupt__"])]
    else:
        task["status"] = {"state": "TASK_STATE_COMPLETED", "timestamp": now()}
        task["artifacts"] = [response_artifact(reply_parts(result), assistant_id)]
    return task


def stored_task(
    task_id: str, run: RunRecord, thread: dict[str, Any], state: str, history_length: int | None
) -> dict[str, Any]:
    """``tasks/get``'s task: its latest ``run``, the ``thread``'s messages, the task's ``state``."""
    status: dict[str, Any] = {"state": state, "timestamp": run.updated_at}
    task = {"kind": "task", "id": task_id, "contextId": run.thread_id, "status": status}
    if history_length != 0:
        values = wire.loads(wire.dumps(thread.get("values")))  # messages as the API shows them
        messages = values.get("messages") if isinstance(values, dict) else None
        task["history"] = history(messages, task_id, run.thread_id, history_length)
    if state == "TASK_STATE_COMPLETED":
        status["message"] = text_message("ROLE_AGENT", "Task completed successfully", task_id)
    elif state == "TASK_STATE_FAILED":
        status["message"] = text_message("ROLE_AGENT", f"Task failed with status: {run.status}", task_id)
    return task


def split_parts(parts: list[Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """A message's parts as ``(texts, data objects)``; any other part is refused."""
    texts, data = [], []
    for part in parts:
        if not isinstance(part, dict):
            raise Refused(CONTENT_TYPE_NOT_SUPPORTED, "Each message part must be an object")
        present = [k for k in ("text", "file", "data") if k in part]
        if len(present) != 1:
            raise Refused(
                CONTENT_TYPE_NOT_SUPPORTED,
                "Each message part must contain exactly one of 'text', 'file', or 'data'",
            )
        if "file" in part:
            raise Refused(CONTENT_TYPE_NOT_SUPPORTED, "file parts are not supported; send text or data")
        if "text" in part:
            if not isinstance(part["text"], str):
                raise Refused(CONTENT_TYPE_NOT_SUPPORTED, "a text part's text must be a string")
            texts.append(part["text"])
        elif not isinstance(part["data"], dict):
            raise Refused(
                CONTENT_TYPE_NOT_SUPPORTED, "DataPart must contain a JSON object in the 'data' field"
            )
        else:
            data.append(part["data"])
    return texts, data


def agent_card(
    assistant_id: str, name: str, description: str, schema: dict[str, Any], agent_url: str
) -> dict[str, Any]:
    """An assistant's A2A agent card (langgraph-api's, less the A2UI extension)."""
    properties = schema.get("properties") or {}
    modes = ["application/json", "text/plain"]
    return {
        "name": name,
        "description": description,
        "url": agent_url,
        "supportedInterfaces": [{"url": agent_url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {"streaming": True, "pushNotifications": False, "stateTransitionHistory": False},
        "defaultInputModes": modes,
        "defaultOutputModes": modes,
        "skills": [
            {
                "id": f"{assistant_id}-main",
                "name": f"{name} Capabilities",
                "description": description,
                "tags": ["assistant", "langgraph"],
                "examples": [],
                "inputModes": modes,
                "outputModes": modes,
                "metadata": {
                    "inputSchema": {
                        "required": schema.get("required") or [],
                        "properties": sorted(properties),
                        "supportsA2A": "messages" in properties,
                    }
                },
            }
        ],
        "version": __version__,
    }
