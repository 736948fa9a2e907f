"""Errors of the checkpoint layer, importable without pulling in any backend's client (a store
that cannot be reached raises :class:`threadline.errors.StoreUnavailable`)."""

from __future__ import annotations


class FencedError(RuntimeError):
    """A checkpoint write carried a fencing token that no longer holds the thread's lease.

    Nothing was written. The message names the thread, never a token.

    Attributes:
        thread_id: the thread whose write was refused.
    """

    def __init__(self, thread_id: str) -> None:
        super().__init__(
            f"checkpoint write to thread {thread_id!r} refused: the turn lease is held by "
            "another turn (stale fencing token)"
        )
        self.thread_id = thread_id
