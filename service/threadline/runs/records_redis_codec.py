"""How the Redis record store (:mod:`threadline.runs.records_redis`) writes a record: thread and
run records as hash fields and back, the scores that order runs and threads, the digest that
names a principal's thread index, the stored cancel action. No I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import orjson

from threadline.runs.records import RunRecord, ThreadRecord


def owner_digest(owner: str) -> str:
    """What names a principal's thread index (``owner_threads_key``)."""
    return hashlib.sha256(owner.encode()).hexdigest()


def text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def score(iso: str) -> int:
    """Microseconds since the epoch: the sort order of runs and threads (ms would tie)."""
    return int(datetime.fromisoformat(iso).timestamp() * 1_000_000)


def cancel_action(stored: bytes) -> str:
    # "1": a request from a replica of an earlier release, which only interrupted.
    return "rollback" if text(stored) == "rollback" else "interrupt"


# The hash fields of a record, in the order they are written; the JSON ones are dumped, the
# others stored as they are (text).
THREAD_FIELDS = ("owner", "created_at", "updated_at", "status", "metadata", "ttl")
RUN_FIELDS = (
    "run_id", "thread_id", "owner", "assistant_id", "created_at", "updated_at", "status",
    "metadata", "multitask_strategy", "kwargs",
)  # fmt: skip
JSON_FIELDS = frozenset({"metadata", "kwargs", "ttl"})


def encode_fields(pairs: Iterable[tuple[str, Any]]) -> list[Any]:
    """``(field, value)`` pairs as HSET takes them, one flat list."""
    out: list[Any] = []
    for name, value in pairs:
        out += [name, orjson.dumps(value) if name in JSON_FIELDS else value]
    return out


def thread_fields(record: ThreadRecord) -> list[Any]:
    return encode_fields((name, getattr(record, name)) for name in THREAD_FIELDS)


def run_fields(run: RunRecord) -> list[Any]:
    return encode_fields((name, getattr(run, name)) for name in RUN_FIELDS)


def decode_thread(thread_id: str, row: dict[bytes, bytes]) -> ThreadRecord | None:
    if not row or b"owner" not in row:
        return None
    return ThreadRecord(
        thread_id=thread_id,
        owner=row[b"owner"].decode(),
        created_at=row[b"created_at"].decode(),
        updated_at=row[b"updated_at"].decode(),
        metadata=orjson.loads(row[b"metadata"]),
        status=row[b"status"].decode(),
        ttl=orjson.loads(row[b"ttl"]) if b"ttl" in row else None,  # absent before issue 23
    )


def decode_run(row: dict[bytes, bytes]) -> RunRecord | None:
    if not row or b"run_id" not in row:
        return None
    fields = {k.decode(): v for k, v in row.items()}
    return RunRecord(
        run_id=fields["run_id"].decode(),
        thread_id=fields["thread_id"].decode(),
        owner=fields["owner"].decode(),
        assistant_id=fields["assistant_id"].decode(),
        created_at=fields["created_at"].decode(),
        updated_at=fields["updated_at"].decode(),
        status=fields["status"].decode(),
        metadata=orjson.loads(fields["metadata"]),
        multitask_strategy=fields["multitask_strategy"].decode(),
        kwargs=orjson.loads(fields["kwargs"]),
        cancel=cancel_action(fields["cancel"]) if "cancel" in fields else None,
        result=fields.get("result"),
    )
