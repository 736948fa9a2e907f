"""A run's first checkpoint read, made ahead in the round trip that creates the run (issue 24).

A LangGraph run starts by reading its thread's latest checkpoint. Where the record store and
the saver share one batcher (:mod:`threadline.checkpoint.redis.pipelining`), the executor
queues that read right behind the run's creation, which takes the thread's turn lease: Redis
runs the two in order, so the read sees the thread as the run would, and no one writes the
thread's checkpoints without that lease meanwhile. One round trip of a run's six.

The read is handed to the run through a context variable; the run's first checkpoint read
takes it, if it asks for the same thing (the thread's latest checkpoint, root namespace), and
drops it either way: no later read of the run can get it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

Made = TypeVar("Made")


class _Ahead:
    __slots__ = ("found", "thread_id")

    def __init__(self, thread_id: str, found: CheckpointTuple | None) -> None:
        self.thread_id: str | None = thread_id
        self.found = found


# Mutable, so a read in a copied context (a task LangGraph starts) takes it for every context.
_AHEAD: ContextVar[_Ahead | None] = ContextVar("threadline_read_ahead", default=None)


@contextlib.contextmanager
def read_ahead(thread_id: str, found: CheckpointTuple | None) -> Iterator[None]:
    """Within: the first checkpoint read takes ``found``, the thread's latest checkpoint as
    read ahead, if it asks for that."""
    token = _AHEAD.set(_Ahead(thread_id, found))
    try:
        yield
    finally:
        _AHEAD.reset(token)


def take(config: dict[str, Any]) -> tuple[bool, CheckpointTuple | None]:
    """``(True, tuple)`` if ``config`` asks for what was read ahead (then never again); else
    ``(False, None)``, and what was read ahead is dropped."""
    ahead = _AHEAD.get()
    if ahead is None or ahead.thread_id is None:
        return False, None
    thread_id, ahead.thread_id = ahead.thread_id, None
    configurable = config.get("configurable") or {}
    if (
        configurable.get("thread_id") != thread_id
        or configurable.get("checkpoint_ns", "")
        or configurable.get("checkpoint_id")
    ):
        return False, None
    return True, ahead.found


async def made_with(
    creation: Awaitable[Made], saver: BaseCheckpointSaver, thread_id: str, kept: Callable[[Made], bool]
) -> tuple[Made, tuple[CheckpointTuple | None] | None]:
    """``creation``'s result, and the thread's latest checkpoint read in its batch (in a tuple:
    it may be None) if ``kept(result)`` says the read is the run's (the creation took the
    thread's lease); else, or if the read failed, None (the run then reads for itself).

    Two tasks, which make their calls on the loop's next iteration one after the other, so they
    go in one batch, the creation's first (a read made by a task beside an awaited creation
    could miss the batch the creation went in).
    """
    creating = asyncio.ensure_future(creation)
    ahead = asyncio.ensure_future(
        saver.aget_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    )
    try:
        made = await creating
    except BaseException:
        creating.cancel()
        ahead.cancel()
        raise
    if not kept(made):
        ahead.cancel()
        return made, None
    try:
        return made, (await ahead,)
    except Exception:
        return made, None
