"""A thread's checkpoints: the config addressing them, the owner key every write carries, the
status they show, and their copy into another thread."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import StateSnapshot

# Checkpoint metadata key naming the thread's owner (written by every run and state update).
OWNER_KEY = "threadline_owner"


def thread_config(thread_id: str, checkpoint: dict[str, Any] | None = None, token: str | None = None):
    """The runnable config that addresses ``thread_id`` (at ``checkpoint``, when given)."""
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    for key in ("checkpoint_ns", "checkpoint_id", "checkpoint_map"):
        if checkpoint and checkpoint.get(key) is not None:
            configurable[key] = checkpoint[key]
    if token is not None:
        configurable["fencing_token"] = token
    return {"configurable": configurable}


def thread_status_of(state: StateSnapshot | None) -> str:
    """``interrupted`` when the thread waits at an interrupt or a breakpoint, else ``idle``."""
    if state is not None and (state.interrupts or state.next):
        return "interrupted"
    return "idle"


async def copy_checkpoints(saver: BaseCheckpointSaver, source: str, target: str) -> None:
    """Every checkpoint and pending write of ``source`` into ``target``.

    Uses the saver's own ``acopy_thread`` where it has one (the Redis saver: one script);
    otherwise replays the history oldest first through ``aput``/``aput_writes``.
    """
    try:
        await saver.acopy_thread(source, target)
        return
    except NotImplementedError:
        pass
    saved = [t async for t in saver.alist({"configurable": {"thread_id": source}})]
    for item in reversed(saved):
        source_conf = item.config["configurable"]
        parent_id = (item.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        config = thread_config(target, {"checkpoint_ns": source_conf.get("checkpoint_ns", "")})
        if parent_id:
            config["configurable"]["checkpoint_id"] = parent_id
        written = await saver.aput(
            config, item.checkpoint, item.metadata, dict(item.checkpoint.get("channel_versions", {}))
        )
        by_task: dict[str, list[tuple[str, Any]]] = defaultdict(list)
        for task_id, channel, value in item.pending_writes or []:
            by_task[task_id].append((channel, value))
        for task_id, writes in by_task.items():
            await saver.aput_writes(written, writes, task_id)
