"""The incident, replayed against a real Redis whose ``requirepass`` is the incident password.

A raw password with ``/ + =`` in ``CHECKPOINT_REDIS_URL`` broke redis-py ("Port could not be
cast to integer value"). After repair the same URL connects, authenticates and lands in db 1.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from threadline import config, urls
from threadline.checkpoint import StoreUnavailable, open_checkpointer
from threadline.config import CheckpointSettings, SessionSettings

from servers import RedisServer

pytestmark = pytest.mark.integration

INCIDENT = "Du0PmDvmqDWqDTgfGnmi6/SKyuQydi3z7cPTgEQoE+s="
# Every character that needs care, in one password (RedisServer passes it as one argv item).
# No %XX sequence: that one is read as already encoded (the rule in urls.py).
NASTY = "p/+= @:#?%x end"


@pytest.fixture(scope="module")
def incident_redis() -> Iterator[RedisServer]:
    server = RedisServer(password=INCIDENT).start()
    yield server
    server.close()


def raw_url(server: RedisServer, password: str, db: int = 1, user: str = "") -> str:
    return server.url(db).replace("redis://", f"redis://{user}:{password}@")


def connected_db(url: str) -> int:
    with redis.Redis.from_url(url) as client:
        assert client.ping()
        client.set("threadline:url-test", "1")
        return int(client.client_info()["db"])


def test_the_raw_incident_url_fails_without_repair(incident_redis: RedisServer) -> None:
    with pytest.raises(ValueError, match="Port could not be cast"):
        redis.Redis.from_url(raw_url(incident_redis, INCIDENT))


@pytest.mark.parametrize("user", ["", "default"])
def test_the_repaired_incident_url_connects_to_db_1(incident_redis: RedisServer, user: str) -> None:
    repaired = urls.repair_redis_url(raw_url(incident_redis, INCIDENT, user=user))
    assert connected_db(repaired) == 1


def test_the_incident_url_through_the_environment(
    incident_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REDIS_PASSWORD", raising=False)
    monkeypatch.setenv("CHECKPOINT_REDIS_URL", raw_url(incident_redis, INCIDENT, db=1))
    monkeypatch.setenv("REDIS_URL", raw_url(incident_redis, INCIDENT, db=0))
    assert connected_db(config.load(CheckpointSettings).redis_url) == 1
    assert connected_db(config.load(SessionSettings).redis_url) == 0


def test_redis_password_on_its_own(incident_redis: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHECKPOINT_REDIS_URL", incident_redis.url(1))
    monkeypatch.setenv("REDIS_PASSWORD", INCIDENT)
    assert connected_db(config.load(CheckpointSettings).redis_url) == 1


def test_every_awkward_character_survives_repair() -> None:
    server = RedisServer(password=NASTY).start()
    try:
        for scheme_url in (
            raw_url(server, NASTY),
            raw_url(server, NASTY, user="default"),
        ):
            assert connected_db(urls.repair_redis_url(scheme_url)) == 1
    finally:
        server.close()


async def test_a_wrong_password_is_store_unavailable_without_the_password(
    incident_redis: RedisServer,
) -> None:
    wrong = INCIDENT[::-1]
    settings = config.load(CheckpointSettings, backend="redis", redis_url=raw_url(incident_redis, wrong))
    with pytest.raises(StoreUnavailable) as caught:
        async with open_checkpointer(settings):
            pass
    text = f"{caught.value} {caught.value.__cause__!r}"
    assert caught.value.backend == "redis"
    assert wrong not in text and urls.repair_redis_url(raw_url(incident_redis, wrong)) not in text
    assert "redis://:***@127.0.0.1" in str(caught.value)


async def test_open_checkpointer_with_the_incident_password(
    incident_redis: RedisServer,
) -> None:
    settings = config.load(CheckpointSettings, backend="redis", redis_url=raw_url(incident_redis, INCIDENT))
    async with open_checkpointer(settings) as saver:
        assert await saver.aget_tuple({"configurable": {"thread_id": "none-yet"}}) is None
