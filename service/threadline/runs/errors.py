"""What the runs/threads layer refuses, by kind; the API maps each kind to one status."""

from __future__ import annotations


class NotFound(Exception):
    """No such assistant, thread, run or checkpoint for this principal (another principal's
    thread or run looks exactly the same)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.message = f"no such {what}"


class Invalid(Exception):
    """The request cannot be run as asked (input that does not fit the graph, a bad combination
    of fields); ``message`` says why and holds no stored data."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Conflict(Exception):
    """The request clashes with the thread's state: it exists already, it is busy and the run
    asked to be rejected, or there is no interrupt to resume."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code)
        self.code, self.message = code, message
