"""Stream slots: every SSE reply and run join holds one of the replica's ``MAX_STREAMS`` (at
most ``MAX_STREAMS_PER_PRINCIPAL`` per principal) for as long as it lasts (ADR 0006 decision 9).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from functools import partial
from typing import Any, TypeVar

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.background import BackgroundTask

from threadline.api.errors import RETRY_AFTER_SECONDS, ApiError, unavailable
from threadline.runtime import Runtime

T = TypeVar("T")

# A stream whose client has not taken one event (or keep-alive) for this long is closed.
SEND_TIMEOUT_SECONDS = 30.0


class StreamSlot:
    """One of the replica's ``MAX_STREAMS`` slots (at most ``MAX_STREAMS_PER_PRINCIPAL`` per
    principal), held by an SSE reply or a run join for as long as it lasts: each holds a
    connection, a task and store reads, so their number is bounded by settings (ADR 0006).

    Raises (on creation):
        ApiError: 503 + Retry-After when the replica has no slot free (another replica, or a
            moment later, will do); 429 + Retry-After when the principal holds its share.
    """

    def __init__(self, runtime: Runtime, principal: str) -> None:
        refused = runtime.open_stream(principal)
        if refused == "MAX_STREAMS":
            raise unavailable("this replica streams as many replies as it may; retry")
        if refused is not None:
            limit = runtime.settings.server.max_streams_per_principal
            raise ApiError(
                429,
                "too_many_streams",
                f"too many streams and joins open: {refused}={limit}",
                {"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        self._close: Any = partial(runtime.close_stream, principal)
        self._server = runtime.settings.server

    def release(self) -> None:
        """Give the slot back (once; later calls do nothing)."""
        close, self._close = self._close, None
        if close is not None:
            close()

    @contextlib.contextmanager
    def released_on_error(self) -> Iterator[StreamSlot]:
        """Give the slot back if the block raises (the request got no stream)."""
        try:
            yield self
        except BaseException:
            self.release()
            raise

    async def holding(self, body: AsyncIterator[T]) -> AsyncIterator[T]:
        """``body``, giving the slot back when it ends, fails or is closed."""
        try:
            async for item in body:
                yield item
        finally:
            self.release()

    def sse(self, body: AsyncIterator[ServerSentEvent], headers: dict[str, str]) -> EventSourceResponse:
        """``body`` as SSE, holding the slot until it ends (or, if it never starts, until the
        response is done). A client that reads nothing for ``SEND_TIMEOUT_SECONDS`` is cut off:
        its reply waits in at most one page of events (``EVENTS_PAGE``) and the socket buffer."""
        return EventSourceResponse(
            self.holding(body),
            background=BackgroundTask(self.release),
            ping=self._server.sse_keepalive_seconds,
            ping_message_factory=lambda: ServerSentEvent(comment="heartbeat"),
            send_timeout=SEND_TIMEOUT_SECONDS,
            shutdown_grace_period=self._server.drain_seconds,
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no", **headers},
        )
