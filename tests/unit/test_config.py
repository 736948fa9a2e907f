"""Settings: defaults match the brief; every misconfiguration names its variable, no password."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from threadline import config
from threadline.config import (
    CheckpointSettings,
    ConfigError,
    ModelSettings,
    QuotaSettings,
    ServerSettings,
    SessionSettings,
    TurnSettings,
    load,
)

pytestmark = pytest.mark.unit

PASSWORD = "Du0PmDvmqDWqDTgfGnmi6/SKyuQydi3z7cPTgEQoE+s="
ENCODED = "Du0PmDvmqDWqDTgfGnmi6%2FSKyuQydi3z7cPTgEQoE%2Bs%3D"
_OURS = (
    "CHECKPOINT_",
    "SESSION_",
    "REDIS_",
    "TURN_",
    "MODEL",
    "API_KEYS",
    "PORT",
    "HOST",
    "QUOTA_",
    "METRICS_",
    "HTTP_",
    "MAX_STREAMS",
    "DOCS_",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith(_OURS):
            monkeypatch.delenv(name)


def fails(group: type, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> str:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as caught:
        load(group)
    message = str(caught.value)
    assert PASSWORD not in message and ENCODED not in message
    assert "SKyuQydi3z7" not in message  # not even a part of it
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    return message


def test_checkpoint_defaults_match_the_brief() -> None:
    settings = load(CheckpointSettings)
    assert settings.backend == "sqlite"
    assert settings.redis_url == "redis://localhost:6379/1"
    assert settings.redis_ttl == 604800
    assert settings.sqlite_path == Path("./data/checkpoints.sqlite")
    assert settings.postgres_url is None


def test_other_defaults_match_the_brief() -> None:
    session, model, turn = (
        load(SessionSettings),
        load(ModelSettings),
        load(TurnSettings),
    )
    assert session.backend == "memory"
    assert session.redis_url == "redis://localhost:6379/0"
    assert model.name == "builtin" and model.token_delay_ms == 0
    assert turn.lease_seconds == 10
    # ADR 0006's documented defaults.
    assert turn.timeout_seconds == 120
    quota = load(QuotaSettings)
    assert quota.threads_per_principal == 1000 and quota.thread_bytes == 1024 * 1024
    server = load(ServerSettings)
    assert server.metrics_port is None and server.docs_enabled is True
    assert (server.http_max_connections, server.max_streams) == (1000, 200)
    assert session.max_lifetime_seconds == 86400


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"CHECKPOINT_BACKEND": "mongodb"}, "CHECKPOINT_BACKEND"),
        (
            {"CHECKPOINT_REDIS_URL": f"http://:{PASSWORD}@h:6379/1"},
            "CHECKPOINT_REDIS_URL",
        ),
        (
            {"CHECKPOINT_REDIS_URL": f"redis://:{PASSWORD}@h:port/1"},
            "CHECKPOINT_REDIS_URL",
        ),
        (
            {"CHECKPOINT_REDIS_URL": f"redis://:{PASSWORD}@h:6379/one"},
            "CHECKPOINT_REDIS_URL",
        ),
        ({"CHECKPOINT_REDIS_URL": f"redis://:{PASSWORD}@/1"}, "CHECKPOINT_REDIS_URL"),
        ({"CHECKPOINT_REDIS_TTL": "0"}, "CHECKPOINT_REDIS_TTL"),
        ({"CHECKPOINT_REDIS_TTL": "a week"}, "CHECKPOINT_REDIS_TTL"),
        ({"CHECKPOINT_BACKEND": "postgres"}, "CHECKPOINT_POSTGRES_URL"),
        ({"CHECKPOINT_POSTGRES_URL": f"postgresql://app:{PASSWORD}@pg/app"}, "CHECKPOINT_POSTGRES_URL"),
        ({"CHECKPOINT_POSTGRES_URL": f"mysql://app:{PASSWORD}@db/app"}, "CHECKPOINT_POSTGRES_URL"),
        ({"CHECKPOINT_POSTGRES_URL": f"host=pg password={PASSWORD} port=x"}, "CHECKPOINT_POSTGRES_URL"),
        (
            {
                "CHECKPOINT_BACKEND": "redis-stack",
                "CHECKPOINT_REDIS_URL": f"redis://:{PASSWORD}@h/1",
            },
            "CHECKPOINT_REDIS_URL",
        ),
    ],
)
def test_checkpoint_misconfiguration_names_the_variable(
    env: dict[str, str], variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    message = fails(CheckpointSettings, env, monkeypatch)
    assert message.startswith(f"{variable}: ")


def test_redis_stack_default_url_is_db_1_so_it_needs_an_explicit_db_0(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    message = fails(CheckpointSettings, {"CHECKPOINT_BACKEND": "redis-stack"}, monkeypatch)
    assert "db 0" in message and "CHECKPOINT_BACKEND=redis" in message
    monkeypatch.setenv("CHECKPOINT_REDIS_URL", "redis://h:6379/0")
    assert load(CheckpointSettings).backend == "redis-stack"
    monkeypatch.setenv("CHECKPOINT_REDIS_URL", "redis://h:6379")  # no db means db 0
    assert load(CheckpointSettings).backend == "redis-stack"


@pytest.mark.parametrize(
    ("group", "env", "variable"),
    [
        (SessionSettings, {"REDIS_URL": f"redis://:{PASSWORD}@h:x/0"}, "REDIS_URL"),
        (SessionSettings, {"SESSION_BACKEND": "postgres"}, "SESSION_BACKEND"),
        (ModelSettings, {"MODEL": "gpt-4o"}, "MODEL"),
        (ModelSettings, {"MODEL_TOKEN_DELAY_MS": "-1"}, "MODEL_TOKEN_DELAY_MS"),
        (TurnSettings, {"TURN_LEASE_SECONDS": "0"}, "TURN_LEASE_SECONDS"),
        (TurnSettings, {"TURN_TIMEOUT_SECONDS": "0"}, "TURN_TIMEOUT_SECONDS"),
        (QuotaSettings, {"QUOTA_THREADS_PER_PRINCIPAL": "-1"}, "QUOTA_THREADS_PER_PRINCIPAL"),
        (QuotaSettings, {"QUOTA_THREAD_BYTES": "lots"}, "QUOTA_THREAD_BYTES"),
        (SessionSettings, {"SESSION_MAX_LIFETIME_SECONDS": "0"}, "SESSION_MAX_LIFETIME_SECONDS"),
        (ServerSettings, {"METRICS_PORT": "8080"}, "METRICS_PORT"),
        (ServerSettings, {"HTTP_MAX_CONNECTIONS": "0"}, "HTTP_MAX_CONNECTIONS"),
        (ServerSettings, {"MAX_STREAMS": "0"}, "MAX_STREAMS"),
        (ServerSettings, {"DOCS_ENABLED": "maybe"}, "DOCS_ENABLED"),
    ],
)
def test_other_misconfiguration_names_the_variable(
    group: type, env: dict[str, str], variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert fails(group, env, monkeypatch).startswith(f"{variable}: ")


def test_raw_password_in_the_url_is_repaired(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHECKPOINT_REDIS_URL", f"redis://:{PASSWORD}@redis:6379/1")
    assert load(CheckpointSettings).redis_url == f"redis://:{ENCODED}@redis:6379/1"


def test_valid_postgres_dsns_pass() -> None:
    for dsn in (
        "postgresql://app:Du0P%2Fm%2B%3D@pg:5432/app?sslmode=require",
        "postgres://pg/app",
        "host=pg port=5432 dbname=app user=app password=x/y+z=",
        "postgresql://app@pg1:5432,pg2:5433/app",
    ):
        assert load(CheckpointSettings, backend="postgres", postgres_url=dsn).postgres_url == dsn


def test_redis_password_variable_needs_no_encoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REDIS_PASSWORD", PASSWORD)
    monkeypatch.setenv("CHECKPOINT_REDIS_URL", "redis://:old@redis:6379/1")
    monkeypatch.setenv("REDIS_URL", "rediss://default@redis:6380/0")
    assert load(CheckpointSettings).redis_url == f"redis://:{ENCODED}@redis:6379/1"
    assert load(SessionSettings).redis_url == f"rediss://default:{ENCODED}@redis:6380/0"


def test_overrides_by_field_name_reach_aliased_fields() -> None:
    # REDIS_URL and REDIS_PASSWORD are aliases; overrides use the field names.
    session = load(SessionSettings, redis_url="redis://other:6379/0")
    assert session.redis_url == "redis://other:6379/0"
    checkpoint = load(CheckpointSettings, redis_password=PASSWORD)
    assert checkpoint.redis_url == f"redis://:{ENCODED}@localhost:6379/1"


def test_settings_repr_holds_no_password() -> None:
    checkpoint = load(
        CheckpointSettings,
        redis_url=f"redis://:{PASSWORD}@redis:6379/1",
        postgres_url=f"postgresql://app:{ENCODED}@pg/app",
    )
    session = load(SessionSettings, redis_password=PASSWORD)
    for text in (repr(checkpoint), str(checkpoint), repr(session), str(session)):
        assert PASSWORD not in text and ENCODED not in text
    assert "redis://:***@redis:6379/1" in repr(checkpoint)


def test_cache_default_is_the_savers() -> None:
    from threadline.checkpoint.redis import DEFAULT_CACHE_BYTES

    assert load(CheckpointSettings).redis_cache_mb * 2**20 == DEFAULT_CACHE_BYTES


def test_redis_format_defaults_to_the_savers_and_refuses_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    from threadline.checkpoint.redis.saver import LATEST_FORMAT

    assert load(CheckpointSettings).redis_format == LATEST_FORMAT == 3
    monkeypatch.setenv("CHECKPOINT_REDIS_FORMAT", "1")
    assert load(CheckpointSettings).redis_format == 1
    monkeypatch.setenv("CHECKPOINT_REDIS_FORMAT", "4")
    with pytest.raises(ConfigError, match="CHECKPOINT_REDIS_FORMAT"):
        load(CheckpointSettings)


def test_keep_last_only_where_implemented(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load(CheckpointSettings).keep_last == 0
    monkeypatch.setenv("CHECKPOINT_KEEP_LAST", "20")
    with pytest.raises(ConfigError, match="CHECKPOINT_KEEP_LAST"):
        load(CheckpointSettings)  # sqlite
    monkeypatch.setenv("CHECKPOINT_BACKEND", "redis")
    assert load(CheckpointSettings).keep_last == 20
    monkeypatch.setenv("CHECKPOINT_KEEP_LAST", "-1")
    with pytest.raises(ConfigError, match="CHECKPOINT_KEEP_LAST"):
        load(CheckpointSettings)


def test_env_name_of_every_checkpoint_field() -> None:
    names = {config.env_name(CheckpointSettings, f) for f in CheckpointSettings.model_fields}
    assert names == {
        "CHECKPOINT_BACKEND",
        "CHECKPOINT_REDIS_URL",
        "CHECKPOINT_REDIS_TTL",
        "CHECKPOINT_REDIS_CACHE_MB",
        "CHECKPOINT_REDIS_FORMAT",
        "CHECKPOINT_KEEP_LAST",
        "CHECKPOINT_SQLITE_PATH",
        "CHECKPOINT_REDIS_WAIT_REPLICAS",
        "CHECKPOINT_REDIS_WAIT_TIMEOUT_MS",
        "REDIS_SENTINEL_PASSWORD",
        "CHECKPOINT_POSTGRES_URL",
        "REDIS_PASSWORD",
    }


# --- Sentinel and Cluster URLs (issue 13) ----------------------------------------------------


@pytest.mark.parametrize("variable", ["CHECKPOINT_REDIS_URL", "REDIS_URL"])
def test_a_db_number_in_a_cluster_url_stops_start_up_naming_the_variable(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = CheckpointSettings if variable.startswith("CHECKPOINT_") else SessionSettings
    message = fails(group, {variable: f"redis+cluster://:{PASSWORD}@a:7000,b:7001/1"}, monkeypatch)
    assert message.startswith(f"{variable}: ") and "only db 0" in message
    monkeypatch.setenv(variable, "redis+cluster://a:7000,b:7001/0")  # db 0 spelt out is fine
    assert load(group).redis_url == "redis+cluster://a:7000,b:7001/0"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            f"redis+sentinel://:{PASSWORD}@s1,s2:26380/mymaster/1",
            f"redis+sentinel://:{ENCODED}@s1,s2:26380/mymaster/1",
        ),
        (
            f"rediss+cluster://app:{PASSWORD}@c1:6379,c2:6379",
            f"rediss+cluster://app:{ENCODED}@c1:6379,c2:6379",
        ),
    ],
)
def test_sentinel_and_cluster_urls_are_repaired_like_any_other(
    url: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHECKPOINT_REDIS_URL", url)
    monkeypatch.setenv("REDIS_URL", url)
    assert load(CheckpointSettings).redis_url == expected
    assert load(SessionSettings).redis_url == expected


def test_a_sentinel_url_needs_its_service_name(monkeypatch: pytest.MonkeyPatch) -> None:
    message = fails(SessionSettings, {"REDIS_URL": f"redis+sentinel://:{PASSWORD}@s1:26379"}, monkeypatch)
    assert message.startswith("REDIS_URL: ") and "service name" in message


def test_redis_stack_refuses_sentinel_and_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"CHECKPOINT_BACKEND": "redis-stack", "CHECKPOINT_REDIS_URL": "redis+cluster://a:7000"}
    message = fails(CheckpointSettings, env, monkeypatch)
    assert message.startswith("CHECKPOINT_REDIS_URL: ") and "CHECKPOINT_BACKEND=redis" in message


def test_sentinel_password_and_wait_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_SENTINEL_PASSWORD", PASSWORD)
    monkeypatch.setenv("CHECKPOINT_REDIS_WAIT_REPLICAS", "1")
    monkeypatch.setenv("CHECKPOINT_BACKEND", "redis")
    checkpoint, session = load(CheckpointSettings), load(SessionSettings)
    assert checkpoint.redis_sentinel_password == session.redis_sentinel_password == PASSWORD
    assert checkpoint.redis_wait_replicas == 1 and checkpoint.redis_wait_timeout_ms == 1000
    for text in (repr(checkpoint), repr(session)):
        assert PASSWORD not in text
    message = fails(CheckpointSettings, {"CHECKPOINT_REDIS_WAIT_REPLICAS": "-1"}, monkeypatch)
    assert message.startswith("CHECKPOINT_REDIS_WAIT_REPLICAS: ")
    env = {
        "CHECKPOINT_REDIS_WAIT_REPLICAS": "1",
        "CHECKPOINT_BACKEND": "postgres",
        "CHECKPOINT_POSTGRES_URL": "postgres://pg/app",
    }
    message = fails(CheckpointSettings, env, monkeypatch)
    assert message.startswith("CHECKPOINT_REDIS_WAIT_REPLICAS: ")


def test_wait_replicas_defaults_to_0() -> None:
    assert load(CheckpointSettings).redis_wait_replicas == 0
