"""Structured JSON logs: one object per line with the replica name on every record.

Log calls pass ``extra={"thread_id": ...}``; nothing passes a URL or a credential (URLs go
through :func:`threadline.urls.redact` first).
"""

from __future__ import annotations

import logging
import sys

from pythonjsonlogger.json import JsonFormatter


class _ReplicaFilter(logging.Filter):
    def __init__(self, replica: str) -> None:
        super().__init__()
        self.replica = replica

    def filter(self, record: logging.LogRecord) -> bool:
        record.replica = self.replica
        return True


def configure(level: str, replica: str) -> None:
    """Send every logger (ours, uvicorn's, LangGraph's) to stdout as JSON."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(
        JsonFormatter(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={"levelname": "level", "asctime": "time", "name": "logger"},
        )
    )
    handler.addFilter(_ReplicaFilter(replica))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    # Request lines are counted in metrics; access logs would only repeat them.
    logging.getLogger("uvicorn.access").disabled = True
