"""What the runs/threads layer refuses, by kind; the API maps each kind to one status."""

from __future__ import annotations


class NotFound(Exception):
    """No such assistant, thread, run or checkpoint for this principal (another principal's
    thread or run looks exactly the same)."""

    def __init__(self, what: str, message: str | None = None) -> None:
        super().__init__(what)
        self.code, self.message = f"{what}_not_found", message or f"{what.replace('_', ' ')} not found"


class Invalid(Exception):
    """The request cannot be run as asked (input that does not fit the graph, a bad combination
    of fields); ``message`` says why and holds no stored data. ``status`` is the HTTP status
    the API answers it with: 422, or 400 where the LangGraph spec documents that."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.message, self.status = message, status


class Conflict(Exception):
    """The request clashes with the thread's state: it exists already, it is busy and the run
    asked to be rejected, or there is no interrupt to resume."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code)
        self.code, self.message = code, message
