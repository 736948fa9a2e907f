"""Errors every layer raises, importable without pulling in any store's client."""

from __future__ import annotations


class StoreUnavailable(ConnectionError):
    """A store (the checkpointer, Redis for sessions, leases and records) cannot be reached
    (or used) right now.

    Raised by :func:`threadline.checkpoint.open_checkpointer` instead of ever falling back to
    memory, and by the Redis clients. The caller reports not-ready and retries. The message
    names the backend and the redacted target; it never contains a password.

    Attributes:
        backend: the ``CHECKPOINT_BACKEND`` value, e.g. ``"postgres"`` (``SESSION_BACKEND``'s
            for the session store, which ``store`` then names).
    """

    def __init__(self, backend: str, detail: str, store: str | None = None) -> None:
        # ``store`` names another store than the checkpointer, with its setting.
        super().__init__(f"{store or f'checkpoint backend {backend!r}'} unavailable: {detail}")
        self.backend = backend
