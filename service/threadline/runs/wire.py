"""LangGraph values as the JSON the LangGraph API speaks: messages, interrupts, snapshots."""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections import deque
from datetime import date, datetime, timedelta
from decimal import Decimal
from enum import Enum
from typing import Any

import orjson
from langgraph.types import Interrupt, Send, StateSnapshot

# Exceptions whose text is the graph author's own message (not a driver's, which could hold a
# URL or a password): shown to the client. Every other error is reported by its type only.
SHOWN_ERRORS: tuple[type[BaseException], ...] = (ValueError, TypeError, KeyError, RuntimeError)


def _default(obj: Any) -> Any:
    if isinstance(obj, Send):
        return {"node": obj.node, "args": obj.arg}
    if hasattr(obj, "model_dump") and not isinstance(obj, type):
        return obj.model_dump()
    if hasattr(obj, "_asdict") and not isinstance(obj, type):
        return obj._asdict()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, (set, frozenset, deque, tuple)):
        return list(obj)
    if isinstance(obj, BaseException):
        return error_body(obj)
    if isinstance(obj, (uuid.UUID, Decimal)):
        return str(obj)
    if isinstance(obj, timedelta):
        return obj.total_seconds()
    if isinstance(obj, (datetime, date)):
        return obj.isoformat()
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, bytes):
        return obj.decode(errors="replace")
    return repr(obj)  # never fail a stream on a value we cannot encode


def dumps(value: Any) -> bytes:
    """JSON bytes of ``value`` (messages, interrupts, snapshots …)."""
    return orjson.dumps(value, default=_default, option=orjson.OPT_NON_STR_KEYS)


def loads(data: bytes) -> Any:
    return orjson.loads(data)


def error_body(exc: BaseException) -> dict[str, str]:
    """``{"error": type, "message": …}``: the message only for :data:`SHOWN_ERRORS`."""
    if isinstance(exc, SHOWN_ERRORS):
        return {"error": type(exc).__name__, "message": str(exc)}
    return {"error": type(exc).__name__, "message": "the run failed; see the replica's log"}


def stored_error(text: str) -> str:
    """A task error read back from a checkpoint, where LangGraph keeps its repr
    (``OSError('redis://:password@…')``): whole for the :data:`SHOWN_ERRORS` (a graph author's
    own), else only its type, as :func:`error_body` does with a live one."""
    name = found.group(0) if (found := re.match(r"[A-Za-z_]\w*", text)) else "Error"
    return text if name in {e.__name__ for e in SHOWN_ERRORS} else name


def interrupt_dict(interrupt: Interrupt) -> dict[str, Any]:
    """An interrupt of a state or thread, as langgraph-api shows it: its ``response_schema``
    (what the graph expects to be resumed with) only when the graph gave one."""
    shown = {"value": interrupt.value, "id": interrupt.id}
    if (schema := getattr(interrupt, "response_schema", None)) is not None:
        shown["response_schema"] = schema
    return shown


def checkpoint_of(config: dict[str, Any] | None) -> dict[str, Any] | None:
    """The API's ``Checkpoint`` of a runnable config (None when it names no checkpoint)."""
    configurable = (config or {}).get("configurable") or {}
    if not configurable.get("checkpoint_id"):
        return None
    checkpoint = {
        "thread_id": configurable.get("thread_id"),
        "checkpoint_ns": configurable.get("checkpoint_ns") or "",
        "checkpoint_id": configurable["checkpoint_id"],
    }
    if "checkpoint_map" in configurable:  # a subgraph's: its parents' checkpoints, as given
        checkpoint["checkpoint_map"] = configurable["checkpoint_map"]
    return checkpoint


def debug_checkpoint(payload: dict[str, Any]) -> dict[str, Any]:
    """A ``debug`` event's checkpoint payload as langgraph-api streams it: its ``checkpoint`` and
    ``parent_checkpoint`` beside the configs, and each task's ``state`` config as ``checkpoint``."""
    tasks = [
        {**{k: v for k, v in task.items() if k != "state"}, "checkpoint": task["state"]["configurable"]}
        if (task.get("state") or {}).get("configurable")
        else task
        for task in payload.get("tasks") or []
    ]
    return {
        **payload,
        "checkpoint": checkpoint_of(payload.get("config")),
        "parent_checkpoint": checkpoint_of(payload.get("parent_config")),
        "tasks": tasks,
    }


def snapshot_dict(state: StateSnapshot) -> dict[str, Any]:
    """A ``StateSnapshot`` as the API's ``ThreadState``."""
    checkpoint = checkpoint_of(state.config)
    parent = checkpoint_of(state.parent_config)
    return {
        "values": state.values,
        "next": list(state.next),
        "tasks": [
            {
                "id": task.id,
                "name": task.name,
                "path": list(task.path),
                "error": None
                if task.error is None
                else error_body(task.error)
                if isinstance(task.error, BaseException)
                else stored_error(str(task.error)),
                "interrupts": [interrupt_dict(i) for i in task.interrupts],
                "checkpoint": task.state["configurable"]
                if task.state is not None and not isinstance(task.state, StateSnapshot)
                else None,
                "state": snapshot_dict(task.state) if isinstance(task.state, StateSnapshot) else None,
                "result": task.result,
            }
            for task in state.tasks
        ],
        "metadata": state.metadata or {},
        "created_at": state.created_at,
        "checkpoint": checkpoint,
        "parent_checkpoint": parent,
        "interrupts": [interrupt_dict(i) for i in state.interrupts],
        "checkpoint_id": checkpoint["checkpoint_id"] if checkpoint else None,
        "parent_checkpoint_id": parent["checkpoint_id"] if parent else None,
    }


def interrupts_by_task(state: StateSnapshot) -> dict[str, list[dict[str, Any]]]:
    """The thread's ``interrupts`` field: task id → its pending interrupts."""
    return {t.id: [interrupt_dict(i) for i in t.interrupts] for t in state.tasks if t.interrupts}
