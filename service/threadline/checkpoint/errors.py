"""Errors of the checkpoint layer, importable without pulling in any backend's client."""

from __future__ import annotations


class StoreUnavailable(ConnectionError):
    """The checkpoint store cannot be reached (or used) right now.

    Raised by :func:`threadline.checkpoint.open_checkpointer` instead of ever falling back to
    memory. The caller reports not-ready and retries. The message names the backend and the
    redacted target; it never contains a password.

    Attributes:
        backend: the ``CHECKPOINT_BACKEND`` value, e.g. ``"postgres"``.
    """

    def __init__(self, backend: str, detail: str) -> None:
        super().__init__(f"checkpoint backend {backend!r} unavailable: {detail}")
        self.backend = backend


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
