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
