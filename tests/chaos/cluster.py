"""A local "Deployment": N threadline replicas as real processes over one real Redis.

Replicas are ``python -m threadline serve`` processes (:class:`servers.ServiceProcess`), or
containers of the built image with ``CHAOS_FROM_IMAGE=1`` (Docker only). A replaced replica is a
new process on a new port with a new name, as a new pod would be; :attr:`LocalCluster.endpoints`
is what the driver round-robins over, swapped when the replacement is ready (like a Service's
endpoints, which lag the pods).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from chaos.driver import Endpoints
from servers import RedisClusterSet, RedisSentinelSet, RedisServer, ServiceProcess, free_port

IMAGE = os.environ.get("CHAOS_IMAGE", "threadline:dev")


class Replica(Protocol):
    name: str

    @property
    def url(self) -> str: ...

    def start(self, wait_ready: bool = True, timeout: float = 30.0) -> Replica: ...
    def signal(self, sig: int) -> None: ...
    def kill(self) -> None: ...
    def alive(self) -> bool: ...
    def logs(self) -> str: ...
    def wait(self, timeout: float) -> int | None: ...


class ProcessReplica(ServiceProcess):
    """A ServiceProcess plus a bounded wait for its exit."""

    def wait(self, timeout: float) -> int | None:
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None


def image_unavailable() -> str | None:
    """Why ``CHAOS_FROM_IMAGE=1`` cannot run here, or None when it can."""
    if not shutil.which("docker"):
        return "CHAOS_FROM_IMAGE=1 needs docker, which is not installed"
    if subprocess.run(["docker", "info"], check=False, capture_output=True).returncode != 0:
        return "CHAOS_FROM_IMAGE=1 needs a Docker engine; `docker info` fails"
    if (
        subprocess.run(["docker", "image", "inspect", IMAGE], check=False, capture_output=True).returncode
        != 0
    ):
        return f"CHAOS_FROM_IMAGE=1: image {IMAGE} not built (scripts/build-image.sh)"
    return None


class ImageReplica(ProcessReplica):
    """The built image under ``docker run --network host``; signals reach the entrypoint."""

    def start(self, wait_ready: bool = True, timeout: float = 60.0) -> ImageReplica:
        env = {"REPLICA_NAME": self.name, "LOG_LEVEL": "INFO", **self.env}
        self.container = f"threadline-chaos-{self.name}-{self.port}"
        args = ["docker", "run", "--rm", "--network", "host", "--name", self.container]
        for key, value in env.items():
            args += ["-e", f"{key}={value}"]
        args += [IMAGE, "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        if wait_ready:
            self.wait_ready(timeout)
        return self

    def signal(self, sig: int) -> None:
        if self.alive():
            subprocess.run(
                ["docker", "kill", "--signal", str(int(sig)), self.container],
                check=False,
                capture_output=True,
                timeout=30,
            )

    def kill(self) -> None:
        self.signal(9)
        if self.proc is not None:
            self.proc.wait(timeout=30)


class LocalCluster:
    """Redis + N replicas sharing it, with an API key of their own.

    Args:
        redis: a started Redis, Sentinel set or Cluster (the test owns it and may kill nodes).
        replicas: how many replicas to keep.
        env: settings on top of the Redis and key settings (lease, token delay ...).
    """

    def __init__(
        self, redis: RedisServer | RedisSentinelSet | RedisClusterSet, replicas: int, env: dict[str, str]
    ) -> None:
        self.redis = redis
        self.size = replicas
        self.api_key = secrets.token_urlsafe(24)
        digest = hashlib.sha256(self.api_key.encode()).hexdigest()
        # A Redis Cluster has db 0 only: sessions and checkpoints share it (key prefixes).
        cluster = isinstance(redis, RedisClusterSet)
        self.env = {
            "CHECKPOINT_BACKEND": "redis",
            "CHECKPOINT_REDIS_URL": redis.url() if cluster else redis.url(1),
            "SESSION_BACKEND": "redis",
            "REDIS_URL": redis.url() if cluster else redis.url(0),
            "API_KEYS": f"chaos:{digest}",
            "MODEL": "builtin",
            **env,
        }
        self.log_dir = Path(tempfile.mkdtemp(prefix="threadline-chaos-"))
        self.replicas: dict[str, ProcessReplica] = {}  # url -> replica
        self.retired: list[ProcessReplica] = []
        self.endpoints = Endpoints([])
        self._names = itertools.count(1)
        self._ports: set[int] = set()
        self._kind = ImageReplica if os.environ.get("CHAOS_FROM_IMAGE") == "1" else ProcessReplica

    def _new(self) -> ProcessReplica:
        replica = self._kind(self.env, name=f"r{next(self._names)}", log_dir=self.log_dir)
        # free_port() says "free now": two replacements started at once (two kills in a row)
        # could both get a port neither has bound yet. Never hand out a port twice.
        while replica.port in self._ports:
            replica.port = free_port()
        self._ports.add(replica.port)
        return replica

    def start(self) -> LocalCluster:
        fresh = [self._new() for _ in range(self.size)]
        for replica in fresh:
            replica.start(wait_ready=False)
        for replica in fresh:
            replica.wait_ready(60)
            self.replicas[replica.url] = replica
            self.endpoints.add(replica.url)
        return self

    def live(self) -> list[ProcessReplica]:
        return [r for r in self.replicas.values() if r.alive()]

    async def replace(self, old: ProcessReplica, timeout: float = 60.0) -> ProcessReplica:
        """Start a new replica and swap it into the endpoints in place of ``old``."""
        new = self._new()
        started = time.monotonic()
        await asyncio.to_thread(new.start, True, timeout)
        self.replicas.pop(old.url, None)
        self.retired.append(old)
        self.replicas[new.url] = new
        if old.url in self.endpoints.urls:
            self.endpoints.replace(old.url, new.url)
        else:
            self.endpoints.add(new.url)
        new.startup_seconds = time.monotonic() - started  # type: ignore[attr-defined]
        return new

    def logs(self, tail: int = 15, width: int = 400) -> str:
        """Warnings and errors of every replica (current and retired): the last ``tail`` per
        replica, each cut to ``width`` characters. The full logs stay in :attr:`log_dir`."""
        out = [f"replica logs: {self.log_dir}"]
        for replica in [*self.retired, *self.replicas.values()]:
            lines = [line[:width] for line in replica.logs().splitlines() if '"level": "INFO"' not in line][
                -tail:
            ]
            if lines:
                out.append(f"--- {replica.name} ({replica.url}) ---\n" + "\n".join(lines))
        return "\n".join(out)

    def close(self) -> None:
        for replica in [*self.replicas.values(), *self.retired]:
            if replica.alive():
                replica.signal(18)  # SIGCONT, in case it is stopped
                replica.kill()


@contextlib.contextmanager
def running_cluster(
    replicas: int, env: dict[str, str], appendfsync: str = "always"
) -> Iterator[LocalCluster]:
    """A Redis of its own (AOF) and ``replicas`` replicas on it; everything stopped after."""
    redis = RedisServer(appendfsync=appendfsync).start()
    cluster = LocalCluster(redis, replicas=replicas, env=env)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()
        redis.close()


__all__ = ["IMAGE", "LocalCluster", "ProcessReplica", "free_port", "image_unavailable", "running_cluster"]
