"""Every Redis client threadline opens, built here with one timeout and retry policy.

The policy: connect within 2 s, a command answers within 5 s, one retry after 50 ms (for a
pooled connection Redis dropped; every command threadline sends is safe to repeat), a health
check on connections idle for 15 s. So a stopped Redis is an error within about a second and a
paused one within ~10 s, never a hang; the callers turn those errors into 503 / not-ready.

One URL, three topologies (:func:`threadline.urls.parse_redis_url`):

- ``redis://`` — one Redis (``Redis.from_url``);
- ``redis+sentinel://`` — ``Sentinel(...).master_for(service)``: every new connection asks the
  sentinels where the primary is, and a connection to a demoted primary (``READONLY``) is
  dropped, so the client follows the primary through a failover; until the sentinels promote
  a replica (their ``down-after-milliseconds`` + an election, ~2 s measured) commands fail and
  callers answer 503;
- ``redis+cluster://`` — ``RedisCluster``: routes each command by its key's slot and refreshes
  its slot map on ``MOVED`` or a connection error. threadline keeps every key of a thread in one
  slot (the ``{thread_id}`` hash tag, :mod:`threadline.redis_keys`), so scripts and MULTI work.

The same policy applies to the sentinels' and the cluster nodes' connections.

Every client has a pool of at most ``MAX_CONNECTIONS`` that *waits* up to ``POOL_TIMEOUT`` for
a free connection instead of failing: redis-py's default async pool raised
``MaxConnectionsError`` at 100, so a burst of 300 bogus session lookups made a valid user's
requests fail 3 times out of 5 (issue 10). A wait that runs out is a ``ConnectionError``
(503 with Retry-After).
"""

from __future__ import annotations

import asyncio
import sys
import types
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aioredis
import redis.asyncio.connection as redis_async_connection
import redis.connection
import redis.exceptions
import redis.utils
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import PipelineCommand
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.connection import AbstractConnection as AsyncConnection
from redis.asyncio.retry import Retry as AsyncRetry
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.asyncio.sentinel import SentinelManagedConnection
from redis.backoff import ExponentialBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry
from redis.sentinel import Sentinel

from threadline import urls
from threadline.errors import StoreUnavailable

# What a Redis outage looks like to a caller (answered 503 + Retry-After, never 500): no
# connection or no reply in time (MasterNotFoundError, no primary known to Sentinel, is a
# ConnectionError), and during a failover a Cluster whose failed master's slots are not served
# yet (CLUSTERDOWN, TRYAGAIN, no node for a slot) or a write that reached a primary just demoted
# or a read-only replica (READONLY), and a full Redis (``OOM command not allowed``, maxmemory
# reached under noeviction: ADR 0006 — writes fail until space is freed, reads still work).
# redis-py raises these two with their own types from a command, a script and a pipeline
# alike. :func:`threadline.checkpoint.store_errors` adds these to every backend's own.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
    redis.exceptions.RedisClusterException,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.OutOfMemoryError,
)


def _closed_under_the_write_is_a_connection_error() -> None:
    """Make a write on a connection that is already closed a ``ConnectionError``.

    redis-py 8.1 checks that a connection is open before a command, but the transport can be
    closed under a connection that still looks open (the peer reset it: a Redis failover).
    The write then raises ``RuntimeError`` under uvloop ("the handler is closed") or
    ``AttributeError`` once another task's ``disconnect()`` cleared ``_writer``, which no
    retry layer and no caller takes for an outage (redis-py#4287): the cluster-failover chaos
    test saw both as 500s. As a ``ConnectionError`` it is retried, or answered 503. Every
    connection class (plain, TLS, Sentinel-managed, a cluster node's) inherits the method, and
    the cluster client takes no connection class, hence the patch rather than a subclass.
    """
    write = AsyncConnection._send_packed_command

    async def _send_packed_command(self: AsyncConnection, command: Any) -> None:
        writer = self._writer
        if writer is None or writer.transport.is_closing():  # no await until the write
            raise redis.exceptions.ConnectionError("connection closed before a command was sent")
        await write(self, command)

    AsyncConnection._send_packed_command = _send_packed_command  # type: ignore[method-assign]


_closed_under_the_write_is_a_connection_error()


def _pack_commands_with_hiredis() -> None:
    """Pack async commands with hiredis, as redis-py's sync connections do already.

    redis-py 8.1's async connection packs every command in Python (``pack_command``: ~18 µs for
    a script call of ~25 arguments, against ~2 µs in hiredis, measured); a LangGraph API run
    sends ~15 commands (issue 24). The sync client's packer (``HiredisRespSerializer``: the
    same split of a command name with a space, ``DataError`` for what it cannot pack) is used
    as it is, whenever hiredis is installed.
    """
    if not redis.utils.HIREDIS_AVAILABLE:
        return
    packer = redis.connection.HiredisRespSerializer()

    def pack_command(self: AsyncConnection, *args: Any) -> list[bytes]:
        return packer.pack(*args)

    AsyncConnection.pack_command = pack_command  # type: ignore[method-assign]


_pack_commands_with_hiredis()


async def _cancellable_wait_for(awaitable: Any, timeout: float | None) -> Any:  # noqa: ASYNC109 (its signature)
    """Python 3.12's ``asyncio.wait_for``: a timeout scope in the caller's task.

    3.11's runs the awaitable in a task of its own and, when the caller is cancelled just as
    that task completes, returns its result instead of raising ``CancelledError`` (CPython
    gh-86296, fixed in 3.12). redis-py wraps every command's write in it, so a task cancelled
    while it talks to Redis often goes on: measured here, a loop of GETs ignored 994 of 2000
    cancels. That left a lease renewer running after its turn had ended (the turn waited for
    it forever, holding the thread), cancel pollers and heartbeats running after their run, and
    a cancelled run going on to its end. The image's Python is Debian bookworm's 3.11, hence
    the fix here rather than a newer Python.
    """
    async with asyncio.timeout(timeout):
        return await awaitable


if sys.version_info < (3, 12):
    # redis-py's connection module sees an ``asyncio`` whose only difference is ``wait_for``; a
    # namespace (not a ``__getattr__`` proxy), as it looks ``asyncio.*`` up on every command.
    redis_async_connection.asyncio = types.SimpleNamespace(  # type: ignore[assignment]
        **{**vars(asyncio), "wait_for": _cancellable_wait_for}
    )


CONNECT_TIMEOUT = 2.0
COMMAND_TIMEOUT = 5.0
HEALTH_CHECK_INTERVAL = 15
RETRIES = 1
# Connections per client (per process). A session lookup holds one for ~0.1 ms on loopback, so
# 64 serve tens of thousands of lookups a second; a burst past that queues for a moment.
MAX_CONNECTIONS = 64
POOL_TIMEOUT = COMMAND_TIMEOUT

AsyncClient = aioredis.Redis | AsyncRedisCluster
SyncClient = redis.Redis | RedisCluster


def _options() -> dict[str, object]:
    return {
        "socket_connect_timeout": CONNECT_TIMEOUT,
        "socket_timeout": COMMAND_TIMEOUT,
        "health_check_interval": HEALTH_CHECK_INTERVAL,
        "decode_responses": False,
    }


def _backoff() -> ExponentialBackoff:
    return ExponentialBackoff(cap=0.25, base=0.05)


def _node_options(target: urls.RedisTarget) -> dict[str, Any]:
    """Connection options of the Redis nodes (not the sentinels) for a non-``redis://`` URL."""
    options: dict[str, Any] = {**_options(), "username": target.username, "password": target.password}
    if target.tls:
        options["ssl"] = True
    return options


def _sentinel_options(target: urls.RedisTarget, sentinel_password: str | None) -> dict[str, Any]:
    options: dict[str, Any] = {
        "socket_connect_timeout": CONNECT_TIMEOUT,
        "socket_timeout": COMMAND_TIMEOUT,
        "password": sentinel_password,
    }
    if target.tls:
        options["ssl"] = True
    return options


class _PrimaryFollowingConnection(SentinelManagedConnection):
    """A Sentinel-managed connection that asks the sentinels where the primary is on *every*
    reconnect. redis-py 8.1 does so only when a connection is taken from the pool; a pipeline
    whose connection dropped (the primary died under it) reconnects through
    ``send_packed_command`` to the host it had, which after a failover is the dead primary:
    one more refused request per pooled connection (``test_a_turn_that_saw_the_primary_change_
    is_not_acknowledged`` fails without this). A reconnect through ``connect_to`` asks twice:
    reconnects are rare, a sentinel query is ~0.1 ms."""

    async def connect_check_health(
        self, check_health: bool = True, retry_socket_connect: bool = True
    ) -> None:
        if not self.is_connected and self.connection_pool.is_master:
            self.host, self.port = await self.connection_pool.get_master_address()
        await super().connect_check_health(
            check_health=check_health, retry_socket_connect=retry_socket_connect
        )


@dataclass(frozen=True)
class _Flavor:
    """redis-py's classes for one I/O model: the async and the sync client are built alike."""

    redis: Any
    pool: Any
    sentinel: Any
    cluster: Any
    node: Any
    retry: Any
    sentinel_connection: Any = None


_ASYNC = _Flavor(
    aioredis.Redis,
    aioredis.BlockingConnectionPool,
    AsyncSentinel,
    AsyncRedisCluster,
    AsyncClusterNode,
    AsyncRetry,
    _PrimaryFollowingConnection,
)
_SYNC = _Flavor(redis.Redis, redis.BlockingConnectionPool, Sentinel, RedisCluster, ClusterNode, Retry)


def _client(
    flavor: _Flavor, url: str, sentinel_password: str | None, max_connections: int = MAX_CONNECTIONS
) -> Any:
    target = urls.parse_redis_url(url)
    retry = flavor.retry(_backoff(), retries=RETRIES)
    if target.mode == "standalone":
        pool = flavor.pool.from_url(
            url, max_connections=max_connections, timeout=POOL_TIMEOUT, retry=retry, **_options()
        )
        return flavor.redis.from_pool(pool)
    if target.mode == "sentinel":
        sentinel = flavor.sentinel(
            list(target.hosts),
            sentinel_kwargs=_sentinel_options(target, sentinel_password),
            retry=retry,
            db=target.db,
            **_node_options(target),
        )
        extra = {"connection_class": flavor.sentinel_connection} if flavor.sentinel_connection else {}
        return sentinel.master_for(target.service_name, **extra)
    return flavor.cluster(
        startup_nodes=[flavor.node(host, port) for host, port in target.hosts],
        retry=retry,
        **_node_options(target),
    )


def async_client(
    url: str, *, sentinel_password: str | None = None, max_connections: int = MAX_CONNECTIONS
) -> AsyncClient:
    """An asyncio client for ``url`` (any of the three forms) under the policy above.

    Connects lazily. ``sentinel_password`` (``REDIS_SENTINEL_PASSWORD``) is used only to talk
    to the sentinels of a ``redis+sentinel://`` URL. ``max_connections`` sizes the pool of a
    ``redis://`` URL (the sentinel and cluster pools are redis-py's, unbounded).
    """
    return _client(_ASYNC, url, sentinel_password, max_connections)


def sync_client(url: str, *, sentinel_password: str | None = None) -> SyncClient:
    """A blocking client for ``url`` (the saver's sync driver) under the same policy.

    Unlike the others, redis-py's sync ``RedisCluster`` maps the cluster when it is built (a
    few ms; ``RedisClusterException``, a store error, when no seed answers).
    """
    return _client(_SYNC, url, sentinel_password)


def is_cluster(client: Any) -> bool:
    """Whether ``client`` talks to a Redis Cluster (commands without a key need a node)."""
    return isinstance(client, AsyncRedisCluster | RedisCluster)


async def on_one_connection(
    client: AsyncClient, key: str, *commands: tuple[Any, ...], transaction: bool = False
) -> list[Any]:
    """Send ``commands`` back to back on one connection to the node that owns ``key``.

    For commands whose meaning depends on the connection, like ``WAIT`` (it waits for the
    replication of the writes made *on that connection*), and for MULTI/EXEC on a Cluster:
    redis-py 8.1's asyncio cluster pipeline with ``transaction=True`` runs every queued command
    in a thread of its own with a new event loop (``TransactionStrategy.execute_command``), so
    its connections belong to loops that are closed a moment later; here MULTI, the commands
    and EXEC go to the slot's node in one write, and each reply gets redis-py's usual parsing.

    Returns:
        One reply per command. Without ``transaction`` a reply that is an error is returned as
        the exception; with it the first error is raised (as a pipeline would).
    """
    if not isinstance(client, AsyncRedisCluster):
        pipe = client.pipeline(transaction=transaction)
        for command in commands:
            pipe.execute_command(*command)
        return await pipe.execute(raise_on_error=transaction)
    await client.initialize()
    node = client.get_node_from_key(key)
    sent = [("MULTI",), *commands, ("EXEC",)] if transaction else list(commands)
    stack = [PipelineCommand(i, *command) for i, command in enumerate(sent)]
    await node.execute_pipeline(stack)
    if not transaction:
        return [command.result for command in stack]
    for command in stack:  # a refused MULTI, a queueing error (MOVED …) or EXECABORT
        if isinstance(command.result, Exception):
            if isinstance(command.result, redis.exceptions.MovedError | redis.exceptions.ClusterDownError):
                await client.nodes_manager.initialize()  # the slot moved: remap for the retry
            raise command.result
    replies = []
    for command, reply in zip(commands, stack[-1].result, strict=True):
        if isinstance(reply, Exception):
            raise reply
        callback = node.response_callbacks.get(str(command[0]).upper())
        replies.append(callback(reply) if callback else reply)
    return replies


async def ping(
    url: str, *, backend: str, sentinel_password: str | None = None, store: str | None = None
) -> None:
    """One ``PING`` on a short-lived client (which also checks the password), so a down or
    misaddressed Redis fails at open, not mid-turn. ``store``: see :class:`StoreUnavailable`.

    Raises:
        StoreUnavailable: no connection, a refused password, or a timeout; the message holds
            the redacted URL and the error's class name, never the password.
    """
    client = async_client(url, sentinel_password=sentinel_password)
    try:
        await client.ping()
    # RedisError covers a refused password and no master known to the sentinels; a cluster
    # that cannot be mapped raises RedisClusterException (not a RedisError).
    except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException, OSError) as exc:
        raise StoreUnavailable(backend, f"{urls.redact(url)}: {type(exc).__name__}", store) from exc
    finally:
        await client.aclose()
