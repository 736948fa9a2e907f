"""Request bodies of the LangGraph API, as the SDK sends them (``langgraph_sdk/_async``).

Fields the SDK may send and threadline does not act on are accepted and ignored only where
ignoring them changes nothing for the client (tracing, feedback keys).

Every list a body carries is bounded (``MAX_*`` below, in the spec as ``maxItems``), and so is
every number that makes the server wait or keep something (``after_seconds``, a thread's ``ttl``).
"""

from __future__ import annotations

import uuid
from collections.abc import MutableMapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    StringConstraints,
    field_validator,
    model_validator,
)

from threadline.runs.events import StreamMode
from threadline.runs.records import ID_PATTERN, ThreadStatus
from threadline.store.tenant import MAX_TTL_MINUTES

# A delayed run starts at most a day after its creation (its executor waits for it meanwhile).
MAX_AFTER_SECONDS = 86_400
# A thread's TTL: at most a year, in minutes (fractions too, as langgraph-api takes a number).
MAX_THREAD_TTL_MINUTES = 525_600
# Supersteps one thread creation applies, and updates in one superstep.
MAX_SUPERSTEPS = 100
MAX_SUPERSTEP_UPDATES = 100
# Runs one POST /runs/batch creates; threads one POST /threads/prune prunes.
MAX_BATCH_RUNS = 100
MAX_PRUNE_THREADS = 1000

SSE_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "the run's events as server-sent events"}
}


# A URL a run's end is POSTed to; which ones pass is threadline.webhooks' (WEBHOOK_* settings).
WebhookUrl = Annotated[str, StringConstraints(max_length=4096)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


# The fields ``select`` may name (every field of the object) on each search.
AssistantField = Literal[
    "assistant_id", "graph_id", "name", "description", "config", "context", "metadata", "version",
    "created_at", "updated_at",
]  # fmt: skip
ThreadField = Literal[
    "thread_id", "created_at", "updated_at", "state_updated_at", "metadata", "status", "values",
    "interrupts", "config", "context", "error",
]  # fmt: skip
RunField = Literal[
    "run_id", "thread_id", "assistant_id", "created_at", "updated_at", "status", "metadata",
    "multitask_strategy", "kwargs", "cancel_reason",
]  # fmt: skip


def page_of(
    items: list[dict[str, Any]], offset: int, limit: int, headers: MutableMapping[str, str]
) -> list[dict[str, Any]]:
    """``items[offset:offset + limit]``, with langgraph-api's paging headers set in
    ``headers`` (the SDK's ``response_format="object"`` reads ``X-Pagination-Next``)."""
    end = offset + limit
    page = items[offset:end]
    headers.update(paging_headers(offset, len(page), end if end < len(items) else None))
    return page


def paging_headers(offset: int, size: int, next_offset: int | None) -> dict[str, str]:
    """langgraph-api's paging headers of a page of ``size`` items at ``offset``."""
    if next_offset is None:
        return {"X-Pagination-Total": str(offset + size)}
    return {"X-Pagination-Total": str(next_offset + 1), "X-Pagination-Next": str(next_offset)}


def selected(items: list[dict[str, Any]], select: list[str] | None) -> list[dict[str, Any]]:
    """Only the ``select`` fields of each item (all of them without ``select``)."""
    if not select:
        return items
    return [{k: item[k] for k in select if k in item} for item in items]


class CheckpointIn(_Body):
    thread_id: str | None = None
    checkpoint_ns: str = ""
    checkpoint_id: str | None = None
    checkpoint_map: dict[str, Any] | None = None


class CommandIn(_Body):
    update: Any = None
    resume: Any = None
    goto: str | dict[str, Any] | list[str | dict[str, Any]] | None = None


class ThreadTTL(_Body):
    """A thread's time to live: once ``ttl`` minutes have passed since it was set, the thread
    is deleted (``delete``) or pruned to its latest checkpoint (``keep_latest``)."""

    strategy: Literal["delete", "keep_latest"] = "delete"
    ttl: float = Field(gt=0, le=MAX_THREAD_TTL_MINUTES, description="minutes from now")


class SuperstepUpdate(_Body):
    values: dict[str, Any] | list[Any] | None = None
    command: CommandIn | None = None
    as_node: str = Field(min_length=1, max_length=256)


class Superstep(_Body):
    updates: list[SuperstepUpdate] = Field(min_length=1, max_length=MAX_SUPERSTEP_UPDATES)


class ThreadCreate(_Body):
    thread_id: str | None = Field(default=None, pattern=ID_PATTERN)
    metadata: dict[str, Any] | None = None
    if_exists: Literal["raise", "do_nothing"] = "raise"
    ttl: ThreadTTL | None = None
    supersteps: list[Superstep] | None = Field(
        default=None,
        max_length=MAX_SUPERSTEPS,
        description="state updates applied to the new thread, one superstep after another "
        "(as `update_state` with `as_node`); all or nothing: a superstep that does not fit the "
        "graph leaves no thread",
    )


class ThreadPatch(_Body):
    metadata: dict[str, Any] | None = None
    ttl: ThreadTTL | None = None


class ThreadPrune(_Body):
    thread_ids: list[Annotated[str, StringConstraints(pattern=ID_PATTERN)]] = Field(
        max_length=MAX_PRUNE_THREADS
    )
    strategy: Literal["delete", "keep_latest"] = "delete"


class ThreadSearch(_Body):
    metadata: dict[str, Any] | None = None
    values: dict[str, Any] | None = None
    ids: list[str] | None = None
    status: ThreadStatus | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)
    sort_by: Literal["thread_id", "status", "created_at", "updated_at", "state_updated_at"] | None = Field(
        default=None, description="`updated_at` when not given"
    )
    sort_order: Literal["asc", "desc"] | None = Field(default=None, description="`desc` when not given")
    select: list[ThreadField] | None = None


class ThreadCount(_Body):
    metadata: dict[str, Any] | None = None
    values: dict[str, Any] | None = None
    status: ThreadStatus | None = None


class StateUpdate(_Body):
    values: dict[str, Any] | list[Any] | None = None
    as_node: str | None = None
    checkpoint_id: str | None = None
    checkpoint: CheckpointIn | None = None


class StateAt(_Body):
    checkpoint: CheckpointIn
    subgraphs: bool = False


class HistoryQuery(_Body):
    limit: int = Field(default=1, ge=1, le=1000)  # 1, as langgraph-api (the SDKs send 10)
    before: CheckpointIn | None = Field(
        default=None, description="a checkpoint id, a checkpoint, or a config naming a checkpoint_id"
    )
    metadata: dict[str, Any] | None = None
    checkpoint: CheckpointIn | None = None

    @field_validator("before", mode="before")
    @classmethod
    def _before(cls, value: Any) -> Any:
        """Every form a client sends (the JS SDK a ``Config``, the Python SDK a checkpoint or an
        id) as a checkpoint; one that names no checkpoint is refused, never read as "from the
        newest" (which would restart a client's paging)."""
        if value is None:
            return None
        if isinstance(value, str):
            value = {"checkpoint_id": value}
        elif isinstance(value, dict) and isinstance(value.get("configurable"), dict):
            value = value["configurable"]
        if (
            not isinstance(value, dict)
            or not isinstance(value.get("checkpoint_id"), str)
            or not value["checkpoint_id"]
        ):
            raise ValueError("a checkpoint id, a checkpoint or a config naming a checkpoint_id")
        return value


class AssistantSearch(_Body):
    metadata: dict[str, Any] | None = None
    graph_id: str | None = None
    name: str | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)
    # No sort_by: newest first, whatever sort_order says (as langgraph-api).
    sort_by: Literal["assistant_id", "graph_id", "name", "created_at", "updated_at"] | None = None
    sort_order: Literal["asc", "desc"] = "desc"
    select: list[AssistantField] | None = None


class AssistantCreate(_Body):
    graph_id: str = Field(min_length=1, max_length=256)
    assistant_id: uuid.UUID | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    if_exists: Literal["raise", "do_nothing"] = "raise"
    name: str | None = Field(default=None, max_length=1024)
    description: str | None = Field(default=None, max_length=8192)


class AssistantPatch(_Body):
    graph_id: str | None = Field(default=None, min_length=1, max_length=256)
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    name: str | None = Field(default=None, max_length=1024)
    description: str | None = Field(default=None, max_length=8192)


class AssistantVersions(_Body):
    metadata: dict[str, Any] | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)


class AssistantLatest(_Body):
    version: int = Field(ge=1)


class AssistantCount(_Body):
    metadata: dict[str, Any] | None = None
    graph_id: str | None = None
    name: str | None = None


def checked_config(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """A run's ``config`` (of a run or a cron), refused with ValueError when malformed."""
    if value is not None and not isinstance(value.get("configurable", {}), dict):
        raise ValueError("config.configurable must be an object")
    limit = (value or {}).get("recursion_limit")
    if limit is not None and (type(limit) is not int or limit < 1):
        # A ceiling applies on top (MAX_RECURSION_LIMIT); this is only its type.
        raise ValueError("config.recursion_limit must be an integer of at least 1")
    return value


class _Durable(_Body):
    """A run's durability (threadline's default, None, is ``"sync"``: ADR 0002)."""

    durability: Literal["sync", "async", "exit"] | None = None
    # The SDKs' older name, deprecated there: read as langgraph-api reads it when no durability
    # is given (true is "async", false "exit"), and not kept.
    checkpoint_during: bool | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _checkpoint_during(self) -> Self:
        if self.durability is None and self.checkpoint_during is not None:
            self.durability = "async" if self.checkpoint_during else "exit"
        return self


class RunCreate(_Durable):
    assistant_id: str = Field(min_length=1, max_length=128)
    input: Any = None
    command: CommandIn | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    stream_mode: StreamMode | list[StreamMode] = Field(default="values", validate_default=True)
    stream_subgraphs: bool = False
    stream_resumable: bool = False
    interrupt_before: Literal["*"] | list[str] | None = None
    interrupt_after: Literal["*"] | list[str] | None = None
    checkpoint: CheckpointIn | None = None
    checkpoint_id: str | None = None
    multitask_strategy: Literal["reject", "interrupt", "rollback", "enqueue"] | None = None
    if_not_exists: Literal["create", "reject"] | None = None
    on_disconnect: Literal["cancel", "continue"] = "continue"
    on_completion: Literal["delete", "keep"] | None = None
    webhook: WebhookUrl | None = None
    after_seconds: float | None = Field(
        default=None,
        ge=0,
        le=MAX_AFTER_SECONDS,
        description="seconds to wait before starting the run (it stays pending until then)",
    )

    @field_validator("stream_mode")
    @classmethod
    def _as_list(cls, value: str | list[str]) -> list[str]:
        return [value] if isinstance(value, str) else list(dict.fromkeys(value)) or ["values"]

    @field_validator("config")
    @classmethod
    def _config(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return checked_config(value)

    @model_validator(mode="after")
    def _command_wins(self) -> RunCreate:
        # agent-chat-ui's Approve sends {"input": {}, "command": {"resume": …}}: an empty input
        # beside a command is no input, as langgraph-api reads it.
        if self.command is not None and (self.input is None or self.input == {}):
            self.input = None
        return self

    def payload(self) -> dict[str, Any]:
        """The fields the runs layer reads (plain JSON values)."""
        payload = self.model_dump(exclude_none=True)
        if not payload.get("after_seconds"):
            payload.pop("after_seconds", None)
        return payload


class RunBatch(RootModel[list[RunCreate]]):
    """Stateless background runs, created together (``POST /runs/batch``)."""

    root: list[RunCreate] = Field(min_length=1, max_length=MAX_BATCH_RUNS)


class RunsCancel(_Body):
    thread_id: str | None = Field(default=None, pattern=ID_PATTERN)
    run_ids: list[str] | None = Field(default=None, max_length=MAX_BATCH_RUNS * 10)
    status: Literal["pending", "running", "all"] | None = None
    assistant_id: str | None = Field(default=None, min_length=1, max_length=128)


# -- the store (/store/*) --

# A namespace label: what LangGraph's stores accept (non-empty, no period, no NUL), bounded.
NamespaceLabel = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^[^.\x00]*$")]
Namespace = Annotated[list[NamespaceLabel], Field(max_length=32)]
StoreKey = Annotated[str, StringConstraints(min_length=1, max_length=1024)]


class StorePut(_Body):
    namespace: Annotated[list[NamespaceLabel], Field(min_length=1, max_length=32)]
    key: StoreKey
    value: dict[str, Any]
    index: Literal[False] | list[str] | None = None
    ttl: float | None = Field(default=None, gt=0, le=MAX_TTL_MINUTES)  # minutes


class StoreDelete(_Body):
    namespace: Annotated[list[NamespaceLabel], Field(min_length=1, max_length=32)]
    key: StoreKey


class StoreSearch(_Body):
    namespace_prefix: Namespace | None = None
    filter: dict[str, Any] | None = None
    limit: int = Field(default=10, ge=1)
    offset: int = Field(default=0, ge=0)
    query: Annotated[str, StringConstraints(max_length=4096)] | None = None
    refresh_ttl: bool | None = None


class StoreNamespaces(_Body):
    prefix: Namespace | None = None
    suffix: Namespace | None = None
    max_depth: int | None = Field(default=None, ge=1)
    limit: int = Field(default=100, ge=1)
    offset: int = Field(default=0, ge=0)


# -- crons (/runs/crons) --

CronField = Literal[
    "cron_id", "assistant_id", "thread_id", "on_run_completed", "end_time", "schedule", "timezone",
    "created_at", "updated_at", "user_id", "payload", "next_run_date", "metadata", "enabled",
]  # fmt: skip


class _CronRun(_Durable):
    """The run fields of a cron, checked as a run's (the same types, the same refusals)."""

    input: Any = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    stream_mode: StreamMode | list[StreamMode] | None = None
    stream_subgraphs: bool | None = None
    stream_resumable: bool | None = None
    interrupt_before: Literal["*"] | list[str] | None = None
    interrupt_after: Literal["*"] | list[str] | None = None
    webhook: WebhookUrl | None = None
    timezone: str | None = Field(default=None, max_length=64)

    @field_validator("config")
    @classmethod
    def _config(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return checked_config(value)

    def fields(self) -> dict[str, Any]:
        """The fields the client sent (as langgraph-api keeps a cron's payload), ``end_time``
        in UTC (one without a zone read as UTC)."""
        fields = self.model_dump(exclude_unset=True)
        end = getattr(self, "end_time", None)
        if "end_time" in fields and end is not None:
            fields["end_time"] = (end if end.tzinfo else end.replace(tzinfo=UTC)).astimezone(UTC).isoformat()
        return fields


class CronCreate(_CronRun):
    schedule: str = Field(min_length=1, max_length=256)
    assistant_id: str = Field(min_length=1, max_length=128)
    end_time: datetime | None = None
    on_run_completed: Literal["delete", "keep"] = "delete"
    enabled: bool = True


class ThreadCronCreate(_CronRun):
    schedule: str = Field(min_length=1, max_length=256)
    assistant_id: str = Field(min_length=1, max_length=128)
    end_time: datetime | None = None
    multitask_strategy: Literal["reject", "interrupt", "rollback", "enqueue"] | None = None
    enabled: bool = True


class CronPatch(_CronRun):
    schedule: str | None = Field(default=None, min_length=1, max_length=256)
    end_time: datetime | None = None
    on_run_completed: Literal["delete", "keep"] | None = None
    enabled: bool | None = None


class CronSearch(_Body):
    assistant_id: uuid.UUID | None = None
    thread_id: uuid.UUID | None = None
    enabled: bool | None = None
    metadata: dict[str, Any] | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)
    sort_by: Literal[
        "cron_id", "assistant_id", "thread_id", "next_run_date", "end_time", "created_at", "updated_at"
    ] = "created_at"  # fmt: skip
    sort_order: Literal["asc", "desc"] = "desc"
    select: list[CronField] | None = None


class CronCount(_Body):
    assistant_id: uuid.UUID | None = None
    thread_id: uuid.UUID | None = None
    metadata: dict[str, Any] | None = None
