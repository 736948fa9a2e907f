"""A streamed ``/v1`` turn kept in one task while an SSE response reads it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import anyio

from threadline.turns import TurnResult


class RunningTurn:
    """A streamed turn running in a task of its own.

    The graph run must start, run and be cancelled in one task: LangGraph binds its step
    machinery to the task that entered it. A streaming response reads the first item in the
    request's task and the rest in the response's task; reading through this queue keeps the
    run in one place, and :meth:`cancel` (client gone) cancels the model call promptly.
    """

    _END = object()

    def __init__(self, turn: AsyncIterator[str | TurnResult]) -> None:
        self._items: asyncio.Queue[object] = asyncio.Queue()
        self._task = asyncio.create_task(self._run(turn), name="turn")

    async def _run(self, turn: AsyncIterator[str | TurnResult]) -> None:
        try:
            async with contextlib.aclosing(turn):
                async for item in turn:
                    self._items.put_nowait(item)
        except Exception as exc:  # handed to the reader, who maps it to a status or event
            self._items.put_nowait(exc)
        finally:
            self._items.put_nowait(self._END)

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the turn's task has ended, however it ended."""
        self._task.add_done_callback(lambda _: callback())

    async def next(self) -> str | TurnResult | None:
        """The next token or the result; None when the turn is over.

        Raises:
            whatever the turn raised.
        """
        item = await self._items.get()
        if item is self._END:
            return None
        if isinstance(item, Exception):
            raise item
        return item  # type: ignore[return-value]

    async def cancel(self) -> None:
        """Stop the turn (if still running) and wait, bounded, for its clean-up."""
        if not self._task.done():
            self._task.cancel()
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
