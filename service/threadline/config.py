"""Settings, grouped by concern. The only module that reads the environment.

Every group is a pydantic-settings class whose environment names are the contract in the
product brief (``CHECKPOINT_BACKEND``, ``REDIS_URL`` …). Settings are built once at start-up
(:meth:`Settings.load`) and handed down; nothing deeper imports a global settings object.

A misconfiguration raises :class:`ConfigError`, whose message names the environment variable
and never echoes the value (values may hold passwords).
"""

from __future__ import annotations

import base64
import os
import re
import socket
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import AliasChoices, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from threadline import urls
from threadline.hosts import HostList

CheckpointBackend = Literal["memory", "sqlite", "redis", "redis-stack", "postgres"]
SessionBackend = Literal["memory", "redis"]


class ConfigError(ValueError):
    """A setting is missing or invalid; the message names the environment variable."""


_ORIGIN = re.compile(r"https?://[^/\s:*,]+(:(\d{1,5}|\*))?")


def parse_origins(value: str) -> list[str]:
    """The entries of a comma-separated origin list (``CORS_ALLOW_ORIGINS``).

    Raises:
        ValueError: an entry is neither ``*`` nor ``scheme://host[:port|:*]``.
    """
    origins = [o.strip().rstrip("/") for o in value.split(",") if o.strip()]
    for origin in origins:
        if origin != "*" and not _ORIGIN.fullmatch(origin):
            raise ValueError(
                "cors_allow_origins: every entry is `*` or an origin such as https://app.example.com, "
                "http://localhost:3000 or http://localhost:* (any port)"
            )
    return origins


class _Group(BaseSettings):
    """The base of every settings group: ``repr()`` (so any log line of one) without passwords.

    Fields read from an aliased variable (``REDIS_URL`` …) also take their field name as a
    keyword (``populate_by_name``), so ``load(SessionSettings, redis_url=…)`` is not ignored.
    """

    model_config = SettingsConfigDict(populate_by_name=True)

    def __repr_args__(self):  # type: ignore[no-untyped-def]
        for name, value in super().__repr_args__():
            if isinstance(value, str) and name.endswith("redis_url"):
                value = urls.redact(value)
            elif isinstance(value, str) and (name.endswith("_password") or name == "postgres_url"):
                value = "***"  # a Postgres DSN may hold a password in several spellings
            elif name in ("api_keys", "secret") and value:
                value = "***"
            yield name, value


class CheckpointSettings(_Group):
    """Where conversation state lives (``CHECKPOINT_*``)."""

    model_config = SettingsConfigDict(env_prefix="CHECKPOINT_", extra="ignore")

    backend: CheckpointBackend = "sqlite"
    redis_url: str = "redis://localhost:6379/1"
    # Seconds a thread's checkpoint data lives after its last write (7 days).
    redis_ttl: int = Field(default=604800, gt=0)
    # Budget of the redis saver's decoded-value cache, in MB of serialized values (objects take
    # ~6x that in memory: 16 MB ~ 100 MB of RSS); 0 turns it off.
    redis_cache_mb: int = Field(default=16, ge=0)
    # What the redis saver writes: 3 also stores a step's pending writes by reference to the
    # messages it appended (~half the memory of 2), 2 stores each list item (message) once, 1
    # every value whole as releases before format 2 did. A release reads every format up to
    # its own. Upgrading a running deployment: roll out with the old format, then switch
    # (docs/sizing.md, "Upgrading from format 2").
    redis_format: int = Field(default=3, ge=1, le=3)
    # Checkpoints kept per thread and namespace (never one a pending write or interrupt needs);
    # 0 keeps all.
    keep_last: int = Field(default=0, ge=0)
    sqlite_path: Path = Path("./data/checkpoints.sqlite")
    postgres_url: str | None = None
    # Optional: the Redis password as its own secret, so the URL needs no encoding at all.
    redis_password: str | None = Field(default=None, validation_alias=AliasChoices("REDIS_PASSWORD"))
    # The sentinels' own password (redis+sentinel:// URLs), when they have one.
    redis_sentinel_password: str | None = Field(
        default=None, validation_alias=AliasChoices("REDIS_SENTINEL_PASSWORD")
    )
    # Replicas that must confirm (WAIT) a turn's final checkpoint before it is acknowledged;
    # 0 acknowledges on the primary's word (replication is asynchronous: a failover may lose it).
    redis_wait_replicas: int = Field(default=0, ge=0)
    # How long a turn waits for those replicas before it fails with 503 + Retry-After. On
    # loopback WAIT 1 answers in well under 1 ms; 1 s rides out a replica's fsync or GC pause.
    redis_wait_timeout_ms: int = Field(default=1000, gt=0)

    @field_validator("redis_url")
    @classmethod
    def _valid_redis_url(cls, value: str) -> str:
        return urls.repair_redis_url(value)

    @field_validator("postgres_url")
    @classmethod
    def _valid_postgres_url(cls, value: str | None) -> str | None:
        if value:
            import psycopg.conninfo  # only when Postgres is configured

            try:
                port = str(psycopg.conninfo.conninfo_to_dict(value).get("port", "5432"))
            except psycopg.Error:  # libpq's message repeats the DSN, password included: drop it
                port = ""
            if not all(p.isdigit() for p in port.split(",")):
                raise ValueError(
                    "postgres_url: not a valid Postgres URL or DSN "
                    "(percent-encode special characters of the password in a URL)"
                )
        return value

    @model_validator(mode="after")
    def _rules_across_fields(self) -> CheckpointSettings:
        if self.redis_password is not None:
            self.redis_url = urls.with_password(self.redis_url, self.redis_password)
        if self.keep_last and self.backend != "redis":
            raise ValueError(
                "keep_last: implemented by the redis backend only; "
                "unset it (0 keeps all) for CHECKPOINT_BACKEND=" + self.backend
            )
        if self.backend == "postgres" and not self.postgres_url:
            raise ValueError("postgres_url: required when CHECKPOINT_BACKEND=postgres")
        if self.redis_wait_replicas and self.backend not in ("redis", "redis-stack"):
            raise ValueError("redis_wait_replicas: needs CHECKPOINT_BACKEND=redis (or redis-stack)")
        if self.backend == "redis-stack" and urls.parse_redis_url(self.redis_url).mode != "standalone":
            raise ValueError(
                "redis_url: the redis-stack backend supports one Redis (redis:// or rediss://); "
                "use CHECKPOINT_BACKEND=redis with Sentinel or Cluster"
            )
        if self.backend == "redis-stack" and urls.redis_db(self.redis_url) != 0:
            raise ValueError(
                "redis_url: the redis-stack backend needs db 0 (RediSearch creates its indexes "
                "only in db 0); use CHECKPOINT_BACKEND=redis for any other db"
            )
        return self


class SessionSettings(_Group):
    """Auth sessions (``SESSION_*``, ``REDIS_URL``, ``API_KEYS``)."""

    model_config = SettingsConfigDict(env_prefix="SESSION_", extra="ignore")

    backend: SessionBackend = "memory"
    redis_url: str = Field(default="redis://localhost:6379/0", validation_alias=AliasChoices("REDIS_URL"))
    redis_password: str | None = Field(default=None, validation_alias=AliasChoices("REDIS_PASSWORD"))
    redis_sentinel_password: str | None = Field(
        default=None, validation_alias=AliasChoices("REDIS_SENTINEL_PASSWORD")
    )
    ttl_seconds: int = Field(default=3600, gt=0)
    # A session ends this long after it was minted, however often it is used (ADR 0006).
    max_lifetime_seconds: int = Field(default=86400, gt=0)
    # ``principal:sha256hex`` entries, comma-separated.
    api_keys: str = Field(default="", validation_alias=AliasChoices("API_KEYS"))

    @field_validator("redis_url")
    @classmethod
    def _valid_redis_url(cls, value: str) -> str:
        return urls.repair_redis_url(value)

    @model_validator(mode="after")
    def _apply_password(self) -> SessionSettings:
        if self.redis_password is not None:
            self.redis_url = urls.with_password(self.redis_url, self.redis_password)
        return self

    def api_key_hashes(self) -> dict[str, str]:
        """Parse ``API_KEYS`` into ``{sha256hex: principal}``.

        Raises:
            ConfigError: an entry is not ``principal:<64 hex digits>``.
        """
        hashes: dict[str, str] = {}
        for entry in filter(None, (e.strip() for e in self.api_keys.split(","))):
            principal, _, digest = entry.rpartition(":")
            digest = digest.lower()
            if not principal or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                raise ConfigError(
                    "API_KEYS: every entry must be principal:sha256hex "
                    "(`python -m threadline hash-key` prints one)"
                )
            hashes[digest] = principal
        return hashes


class TurnSettings(_Group):
    """One turn at a time per thread (``TURN_*``)."""

    model_config = SettingsConfigDict(env_prefix="TURN_", extra="ignore")

    lease_seconds: float = Field(default=10.0, gt=0)
    lease_wait_seconds: float = Field(default=5.0, ge=0)
    # A turn (model call included) running longer than this is cancelled and its lease released:
    # a hung provider must not hold a thread forever. 120 s covers long tool-using turns.
    timeout_seconds: float = Field(default=120.0, gt=0)


class QuotaSettings(_Group):
    """Per-tenant limits on what is stored (``QUOTA_*``, ADR 0006); 0 turns a limit off."""

    model_config = SettingsConfigDict(env_prefix="QUOTA_", extra="ignore")

    # Live threads per principal (a thread stops counting when deleted or expired).
    threads_per_principal: int = Field(default=1000, ge=0)
    # Bytes of the messages clients send to one thread (UTF-8). The redis saver stores each
    # message once (format 2 and later, issue 12), so a thread's Redis memory grows linearly with
    # its length: with format 3 (the default) its message bytes plus ~3.7 KB a turn, ~6.8 KB
    # through the LangGraph API (docs/sizing.md). Format 1 stored the whole list again at every
    # turn (issue 10: 40 turns of 32 KB grew Redis by 123 MiB).
    thread_bytes: int = Field(default=1024 * 1024, ge=0)
    # Pending and running LangGraph API runs queued on one thread (issue 18: 2000 runs queued
    # on one thread took Redis from 4 to 11,102 commands/s and another tenant's p50 from 32 ms
    # to 1.7 s). A client double-texting queues one or two.
    queued_runs_per_thread: int = Field(default=10, ge=0)
    # Events one run may emit (stream parts: a token, a state, an update); the run ends as an
    # error past it. A 2000-token reply streamed in messages mode is ~2000.
    max_events_per_run: int = Field(default=10_000, ge=0, validation_alias=AliasChoices("MAX_EVENTS_PER_RUN"))
    # The most steps a run may take, whatever recursion_limit its client asks (lower is kept):
    # each step writes a checkpoint, and LangGraph's own default (10,007) let a looping graph
    # run with 20 bytes of input fill a 160 MB Redis in 41 s (issue 18). A tool call costs two.
    max_recursion_limit: int = Field(default=100, ge=0, validation_alias=AliasChoices("MAX_RECURSION_LIMIT"))
    # Long-term memory (the LangGraph Store): live items per principal, through the API and
    # from its runs' graphs (an item stops counting when deleted or expired) ...
    store_items_per_principal: int = Field(default=10_000, ge=0)
    # ... and the JSON bytes of one item's value, so a principal holds at most the product
    # (640 MiB by default; lower either for a small Redis).
    store_item_bytes: int = Field(default=64 * 1024, ge=0)
    # Assistants a principal may create (built-ins do not count), the versions kept of each
    # (older ones are dropped as new ones come), and the JSON bytes of one (config, context,
    # metadata, name, description): a principal holds at most their product in Redis
    # (16 MiB by default).
    assistants_per_principal: int = Field(default=100, ge=0)
    assistant_versions: int = Field(default=10, ge=1)
    assistant_bytes: int = Field(default=16 * 1024, ge=0)
    # Crons a principal may create; each fires its runs on the principal's quotas.
    crons_per_principal: int = Field(default=100, ge=0)


class ModelSettings(_Group):
    """The chat model (``MODEL``, ``MODEL_TOKEN_DELAY_MS``)."""

    model_config = SettingsConfigDict(env_prefix="MODEL_", extra="ignore")

    name: str = Field(default="builtin", validation_alias=AliasChoices("MODEL"))
    token_delay_ms: float = Field(default=0.0, ge=0)

    @field_validator("name")
    @classmethod
    def _provider_form(cls, value: str) -> str:
        if value != "builtin" and ":" not in value:
            raise ValueError("name: must be `builtin` or `<provider>:<model>`")
        return value


class ServerSettings(_Group):
    """HTTP serving, limits and drain."""

    model_config = SettingsConfigDict(extra="ignore")

    host: str = "0.0.0.0"
    port: int = Field(default=8080, ge=1, le=65535)
    # Seconds in-flight turns get to finish after SIGTERM.
    drain_seconds: float = Field(default=20.0, ge=0)
    sse_keepalive_seconds: float = Field(default=15.0, gt=0)
    max_message_bytes: int = Field(default=32 * 1024, gt=0)
    # Names the process or pod in replies; the pod name under Kubernetes.
    replica_name: str = Field(
        default_factory=lambda: os.environ.get("HOSTNAME") or f"{socket.gethostname()}-{os.getpid()}"
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # Serve /metrics on this port instead of the API port (the chart sets it: 9090).
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    # /docs, /redoc and /openapi.json; the chart turns them off.
    docs_enabled: bool = True
    # Abuse limits (ADR 0006). Open connections per replica before uvicorn answers 503.
    http_max_connections: int = Field(default=1000, gt=0)
    # A connection must deliver its request line and headers within this, and at most
    # http_max_header_bytes of them; else it is closed (slowloris).
    http_header_timeout_seconds: float = Field(default=10.0, gt=0)
    http_max_header_bytes: int = Field(default=64 * 1024, ge=4096)
    # The whole request body must arrive within this (the cap is ~135 KB: 13.5 KB/s suffices).
    http_body_timeout_seconds: float = Field(default=10.0, gt=0)
    # Idle keep-alive connections are closed after this.
    http_keepalive_seconds: int = Field(default=5, gt=0)
    # Concurrent SSE replies and run joins (runs/wait, join) per replica; one more is 503.
    max_streams: int = Field(default=200, gt=0)
    # Of those, at most this many per principal; one more is 429 (one tenant cannot take them all).
    max_streams_per_principal: int = Field(default=50, gt=0)
    # Items or namespaces one store search or listing may return (a larger `limit` is 422):
    # with QUOTA_STORE_ITEM_BYTES, what one response holds.
    max_store_results: int = Field(default=100, gt=0)
    # Candidates one search of the `redis` backend's store examines at most (filters and
    # exact semantic search are evaluated on them; ADR 0015).
    max_store_scan: int = Field(default=10_000, gt=0)
    # Between two sweeps of expired threads (a thread `ttl`) on each replica, jittered ±50 %:
    # a thread is deleted within this (x 1.5) after it expires.
    thread_ttl_sweep_seconds: float = Field(default=60.0, gt=0, le=3600)
    # Browser origins allowed to call the API (CORS), comma-separated: `*` is any origin, an
    # entry ending in `:*` any port (`http://localhost:*`); empty allows none. See api/cors.py.
    cors_allow_origins: str = ""
    # Seconds between two passes of each replica's cron scheduler (langgraph-api's name and
    # default): a tick fires at most this late.
    cron_scheduler_sleep_time: float = Field(default=5.0, gt=0)

    @field_validator("cors_allow_origins")
    @classmethod
    def _valid_origins(cls, value: str) -> str:
        parse_origins(value)  # ValueError naming the field
        return value

    @model_validator(mode="after")
    def _metrics_port_apart(self) -> ServerSettings:
        if self.metrics_port is not None and self.metrics_port == self.port:
            raise ValueError("metrics_port: must differ from PORT (unset it to serve /metrics on PORT)")
        return self


class GraphSettings(_Group):
    """The graphs served (``LANGGRAPH_CONFIG``); see :mod:`threadline.agent.registry`."""

    model_config = SettingsConfigDict(extra="ignore")

    # A langgraph.json (the LangGraph CLI format) whose ``graphs`` are served beside the
    # built-in ``chat`` graph; unset serves ``chat`` alone.
    config_path: Path | None = Field(default=None, validation_alias=AliasChoices("LANGGRAPH_CONFIG"))
    # Deadline of each call of the config's custom auth handlers (`auth` in langgraph.json):
    # past it a request is 503 + Retry-After. A JWKS fetch over a WAN is ~0.1-0.5 s; 5 s
    # rides out a slow identity provider without letting a hung one hold requests.
    auth_timeout_seconds: float = Field(default=5.0, gt=0)

    @field_validator("config_path", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if value == "" else value  # a chart renders an unset value as ""


class WebhookSettings(_Group):
    """Run webhooks (``WEBHOOK_*``, ADR 0020; see :mod:`threadline.webhooks`)."""

    model_config = SettingsConfigDict(env_prefix="WEBHOOK_", extra="ignore")

    # Hosts (`hooks.internal`, `*.corp.example`) and networks (`10.0.0.0/8`, `127.0.0.1`) a
    # webhook may reach although they are loopback, link-local, private or reserved (refused
    # otherwise, against SSRF), comma-separated.
    allowed_hosts: str = ""
    # Refuse http:// webhooks.
    require_https: bool = False
    # Signs each POST (HMAC-SHA256, Standard Webhooks headers); unset sends them unsigned.
    secret: str | None = None
    # One attempt (connect, send, answer) ends within this; a receiver that hangs holds one of
    # WEBHOOK_MAX_IN_FLIGHT slots at most this long per attempt.
    timeout_seconds: float = Field(default=10.0, gt=0)
    # Attempts after the first, on a network error, a timeout, a 408, 429 or 5xx; waits double
    # from retry_seconds (jittered, up to 60 s): 1+2+4 s by default.
    retries: int = Field(default=3, ge=0, le=20)
    retry_seconds: float = Field(default=1.0, gt=0)
    # POSTs under way at once per replica, and deliveries held (waiting, in flight or between
    # attempts, each with its payload: a thread's values) before new ones are dropped.
    max_in_flight: int = Field(default=20, gt=0)
    max_pending: int = Field(default=1000, gt=0)

    @field_validator("allowed_hosts")
    @classmethod
    def _valid_hosts(cls, value: str) -> str:
        HostList.parse(value.split(","), "allowed_hosts")  # ValueError naming the field
        return value

    @field_validator("secret")
    @classmethod
    def _valid_secret(cls, value: str | None) -> str | None:
        if value and value.startswith("whsec_"):
            try:
                base64.b64decode(value[6:], validate=True)
            except ValueError:
                raise ValueError("secret: a whsec_ secret is base64 after its prefix") from None
        return value


# Environment prefix of each group, for naming the variable in error messages.
_PREFIXES: dict[type[BaseSettings], str] = {
    CheckpointSettings: "CHECKPOINT_",
    SessionSettings: "SESSION_",
    TurnSettings: "TURN_",
    ModelSettings: "MODEL_",
    ServerSettings: "",
    QuotaSettings: "QUOTA_",
    GraphSettings: "",
    WebhookSettings: "WEBHOOK_",
}
_ALIASES = {
    (SessionSettings, "redis_url"): "REDIS_URL",
    (SessionSettings, "api_keys"): "API_KEYS",
    (SessionSettings, "redis_password"): "REDIS_PASSWORD",
    (CheckpointSettings, "redis_password"): "REDIS_PASSWORD",
    (SessionSettings, "redis_sentinel_password"): "REDIS_SENTINEL_PASSWORD",
    (CheckpointSettings, "redis_sentinel_password"): "REDIS_SENTINEL_PASSWORD",
    (ModelSettings, "name"): "MODEL",
    (GraphSettings, "config_path"): "LANGGRAPH_CONFIG",
    (QuotaSettings, "max_events_per_run"): "MAX_EVENTS_PER_RUN",
    (QuotaSettings, "max_recursion_limit"): "MAX_RECURSION_LIMIT",
}

S = TypeVar("S", bound=BaseSettings)


def env_name(group: type[BaseSettings], field: str) -> str:
    """The environment variable that sets ``field`` of ``group``."""
    return _ALIASES.get((group, field), _PREFIXES[group] + field.upper())


def load(group: type[S], **overrides: object) -> S:
    """Build one settings group from the environment (``overrides`` win).

    Raises:
        ConfigError: naming the variable; the offending value is never repeated.
    """
    try:
        return group(**overrides)
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_input=False, include_url=False):
            field = str(error["loc"][0]) if error["loc"] else ""
            message = str(error["msg"]).removeprefix("Value error, ")
            # Validators above prefix their message with the field they are about.
            named, sep, rest = message.partition(": ")
            if sep and named in group.model_fields:
                field, message = named, rest
            # pydantic names an aliased field (REDIS_URL …) by its alias: already the variable.
            variable = env_name(group, field) if field in group.model_fields else field.upper()
            problems.append(f"{variable}: {message}")
        raise ConfigError("; ".join(problems)) from None


class Settings:
    """All settings of one process, built once at start-up."""

    def __init__(
        self,
        checkpoint: CheckpointSettings,
        session: SessionSettings,
        turn: TurnSettings,
        model: ModelSettings,
        server: ServerSettings,
        quota: QuotaSettings | None = None,
        graph: GraphSettings | None = None,
        webhook: WebhookSettings | None = None,
    ) -> None:
        self.checkpoint = checkpoint
        self.session = session
        self.turn = turn
        self.model = model
        self.server = server
        self.quota = quota or QuotaSettings()
        self.graph = graph or GraphSettings(config_path=None)
        self.webhook = webhook or WebhookSettings()

    @classmethod
    def load(cls) -> Settings:
        """Read every group from the environment.

        Raises:
            ConfigError: a setting is invalid; the message names the variable.
        """
        settings = cls(
            checkpoint=load(CheckpointSettings),
            session=load(SessionSettings),
            turn=load(TurnSettings),
            model=load(ModelSettings),
            server=load(ServerSettings),
            quota=load(QuotaSettings),
            graph=load(GraphSettings),
            webhook=load(WebhookSettings),
        )
        settings.session.api_key_hashes()  # validate API_KEYS now, not on first request
        return settings
