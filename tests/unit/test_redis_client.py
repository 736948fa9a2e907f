"""The one Redis client factory builds the right client for each URL form (no I/O: clients
connect lazily; the behaviour against real servers is in tests/integration/test_redis_ha.py)."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from threadline import redis_client, urls

pytestmark = pytest.mark.unit

PASSWORD = "Du0PmDvmqDWqDTgfGnmi6/SKyuQydi3z7cPTgEQoE+s="


def test_standalone() -> None:
    url = urls.repair_redis_url(f"redis://app:{PASSWORD}@h:6380/3")
    client = redis_client.async_client(url)
    assert type(client) is aioredis.Redis and not redis_client.is_cluster(client)
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["db"], kwargs["password"]) == ("h", 6380, 3, PASSWORD)
    assert kwargs["socket_timeout"] == redis_client.COMMAND_TIMEOUT


def test_sentinel_nodes_and_sentinels_get_their_own_passwords() -> None:
    url = urls.repair_redis_url(f"rediss+sentinel://app:{PASSWORD}@s1,s2:26380/mymaster/2")
    for client in (
        redis_client.async_client(url, sentinel_password="sentinel-pw"),
        redis_client.sync_client(url, sentinel_password="sentinel-pw"),
    ):
        pool = client.connection_pool
        assert pool.service_name == "mymaster" and pool.is_master
        kwargs = pool.connection_kwargs
        assert (kwargs["db"], kwargs["username"], kwargs["password"]) == (2, "app", PASSWORD)
        sentinels = pool.sentinel_manager.sentinels
        assert [s.connection_pool.connection_kwargs["port"] for s in sentinels] == [26379, 26380]
        assert all(s.connection_pool.connection_kwargs["password"] == "sentinel-pw" for s in sentinels)
    assert issubclass(
        redis_client.async_client(url).connection_pool.connection_class,
        redis_client._PrimaryFollowingConnection,
    )


def test_cluster() -> None:
    url = urls.repair_redis_url(f"redis+cluster://:{PASSWORD}@c1:7000,c2:7001")
    client = redis_client.async_client(url)
    assert isinstance(client, AsyncRedisCluster) and redis_client.is_cluster(client)
    assert client.get_connection_kwargs()["password"] == PASSWORD
    seeds = [(n.host, n.port) for n in client.nodes_manager.startup_nodes.values()]
    assert seeds == [("c1", 7000), ("c2", 7001)]
    asyncio.run(client.aclose())
    # (redis-py's sync RedisCluster maps the cluster when it is built: test_redis_ha covers it.)


def test_a_bad_url_is_refused_before_any_client_exists() -> None:
    with pytest.raises(urls.RedisURLError, match="only db 0"):
        redis_client.async_client("redis+cluster://c1:7000/2")


def test_async_commands_are_packed_by_hiredis_as_redis_py_packs_them() -> None:
    """Issue 24: the async connection's packer is the sync one's (hiredis), ~9x faster than
    redis-py's Python packer, and packs byte for byte what that one does."""
    import redis.exceptions
    from redis.asyncio.connection import AbstractConnection, Connection
    from redis.connection import PythonRespSerializer

    connection = Connection()
    python = PythonRespSerializer(connection._buffer_cutoff, connection.encoder.encode)
    assert AbstractConnection.pack_command.__module__ == "threadline.redis_client"
    for args in [
        ("EVALSHA", "a" * 40, 2, "tl:{t}:run", "k", "ü", b"\x00\xff", 12, 1.5, memoryview(b"m")),
        ("CONFIG GET", "maxmemory-policy"),
        (b"SCRIPT LOAD", "return 1"),
        ("SET", "big", b"x" * 100_000),
    ]:
        assert b"".join(connection.pack_command(*args)) == b"".join(python.pack(*args))
    with pytest.raises(redis.exceptions.DataError):
        connection.pack_command("SET", "k", None)
