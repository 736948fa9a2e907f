"""LangGraph API benchmark: one graph served by threadline, by ``langgraph dev`` and by Aegra,
driven by the real ``langgraph-sdk`` (``client.runs.wait``) at several concurrency levels.

The graph is ``examples/refunds`` (from its ``langgraph.json``); every run asks a question, so
it goes triage → respond and ends (two checkpointed steps, custom stream events unread).

* **threadline**: one replica (``python -m threadline serve``) as a real process, ``redis``
  checkpoints and sessions on its own ``redis-server`` (db 1 and 0), ``LANGGRAPH_CONFIG`` the
  example, the SDK's ``x-api-key``.
* **langgraph dev**: ``langgraph-cli[inmem]`` installed into ``.cache/bench-api/langgraph-dev``
  (a venv of its own, made on first use), ``langgraph dev --no-reload`` on the example config.
  It binds another port when the one asked for is taken, so the port is read from its log.
* **Aegra**: ``aegra-api`` in ``.cache/bench-api/aegra`` on a Postgres of its own, when it
  installs and starts here; otherwise the reason it was skipped is printed.

All servers run side by side; at each level they are measured one after another (so a change
in this shared machine's load falls on all of them alike). Each worker owns one thread (created
before the clock starts) and makes run after run on it (``--stateless``: ``runs.wait(None, …)``
instead). Per level: ``--runs`` runs (at most ``--seconds`` seconds) after ``--warmup``
unmeasured ones. Reported per server and level: runs/s, p50/p99 client latency, and the
server's CPU per run (utime+stime of its process tree from /proc; its own store's, Redis or
Postgres, apart), then threadline's ratios to ``langgraph dev`` against the targets (≥ 2× runs/s
at concurrency 32, p50 ≤ 20 ms at 1).

This is a benchmark, not a test: it asserts nothing about time. All traffic stays on 127.0.0.1;
every process it starts is stopped on exit.

    .venv/bin/python scripts/bench_api.py [--levels 1,8,32] [--runs 300] [--seconds 30]
        [--servers threadline,langgraph-dev,aegra] [--stateless]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from bench_service import cpu_seconds, percentile  # noqa: E402  (scripts/ is sys.path[0])

from client import API_KEY, API_KEYS  # noqa: E402
from servers import PostgresServer, RedisServer, ServiceProcess, free_port  # noqa: E402

EXAMPLE = ROOT / "examples" / "refunds" / "langgraph.json"
GRAPH = "refunds"
INPUT = {"request": "where is my parcel?"}
CACHE = ROOT / ".cache" / "bench-api"
TARGET_RATIO_32 = 2.0
TARGET_P50_MS_1 = 20.0


# --- measurements -----------------------------------------------------------------------------


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its live descendants (``langgraph dev`` may fork workers)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = stat.read_text()
            ppid = int(text[text.rindex(")") + 2 :].split()[1])
            children.setdefault(ppid, []).append(int(stat.parent.name))
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        with contextlib.suppress(OSError):
            total += cpu_seconds(current)
        todo += children.get(current, [])
    return total


@dataclass
class Level:
    """One server at one concurrency level."""

    server: str
    concurrency: int
    runs: int = 0
    errors: int = 0
    wall: float = 0.0
    cpu: float = 0.0
    store_cpu: float | None = None
    store_calls: int | None = None
    latencies: list[float] = field(default_factory=list)
    first_error: str = ""

    @property
    def rate(self) -> float:
        return self.runs / self.wall if self.wall else math.nan

    def ms(self, q: float) -> float:
        return percentile(self.latencies, q) * 1000

    @property
    def cpu_ms(self) -> float:
        return self.cpu / self.runs * 1000 if self.runs else math.nan

    @property
    def store_cpu_ms(self) -> float:
        if self.store_cpu is None or not self.runs:
            return math.nan
        return self.store_cpu / self.runs * 1000

    @property
    def calls_per_run(self) -> float:
        if self.store_calls is None or not self.runs:
            return math.nan
        return self.store_calls / self.runs


# --- the servers ------------------------------------------------------------------------------


@dataclass
class Served:
    """A running server: its URL, the pid whose process tree does the work, its API key, and
    the pid of its store (Redis, Postgres) when it has one of its own."""

    name: str
    url: str
    pid: int
    api_key: str | None = None
    store_pid: int | None = None
    redis_url: str | None = None


def redis_calls(url: str) -> int:
    """Commands the Redis at ``url`` has served (``INFO commandstats``, all databases), the
    INFO itself included: read around a level, divided by its runs, the Redis commands per run."""
    from threadline.redis_client import sync_client

    client = sync_client(url)
    try:
        return sum(int(v["calls"]) for v in client.info("commandstats").values())
    finally:
        client.close()


def venv(name: str, packages: list[str], python: str = sys.executable) -> Path:
    """``.cache/bench-api/<name>`` with ``packages`` installed (made once, reused)."""
    path = CACHE / name
    marker = path / ".installed"
    wanted = " ".join(packages) + "\n"
    if not marker.exists() or marker.read_text() != wanted:
        print(f"bench-api: installing {' '.join(packages)} into {path.relative_to(ROOT)} (once)", flush=True)
        if not (path / "bin" / "pip").exists():
            subprocess.run([python, "-m", "venv", str(path)], check=True)
        subprocess.run([str(path / "bin" / "pip"), "install", "-q", *packages], check=True)
        marker.write_text(wanted)
    return path


def wait_ok(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120.0, path: str = "/ok") -> None:
    """Wait until ``url + path`` answers 200 (the LangGraph API's ``/ok``; Aegra has ``/ready``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}:\n{log.read_text(errors='replace')[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}{path}", timeout=1.0).status_code == 200:
                return
        time.sleep(0.2)
    raise TimeoutError(
        f"{url}/ok did not answer within {timeout}s:\n{log.read_text(errors='replace')[-2000:]}"
    )


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the process group, SIGKILL after 10 s."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def server_env() -> dict[str, str]:
    """This process's environment without threadline's own settings: ``LANGGRAPH_CONFIG`` in
    particular means something else to langgraph-api (a JSON object of per-graph configs)."""
    ours = ("LANGGRAPH_CONFIG", "CHECKPOINT_", "SESSION_", "REDIS_", "API_KEYS", "PORT", "HOST")
    env = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
    env.update(LANGSMITH_TRACING="false", LANGCHAIN_TRACING_V2="false", PYTHONUNBUFFERED="1")
    return env


@contextlib.contextmanager
def threadline(work: Path) -> Iterator[Served]:
    redis = RedisServer().start()
    replica = ServiceProcess(
        {
            "CHECKPOINT_BACKEND": "redis",
            "CHECKPOINT_REDIS_URL": redis.url(1),
            "SESSION_BACKEND": "redis",
            "REDIS_URL": redis.url(0),
            "API_KEYS": API_KEYS,
            "LANGGRAPH_CONFIG": str(EXAMPLE),
            "LOG_LEVEL": "WARNING",
        },
        name="bench-api",
        log_dir=work,
    )
    try:
        replica.start(timeout=60)
        assert replica.proc is not None and redis.proc is not None
        yield Served("threadline", replica.url, replica.proc.pid, API_KEY, redis.proc.pid, redis.url(0))
    finally:
        replica.stop()
        redis.close()


# `langgraph dev` prints e.g. "- 🚀 API: http://127.0.0.1:2024" (the URL in colour codes).
_PORT_LINE = re.compile(r"API: (?:\x1b\[[0-9;]*m)?http://127\.0\.0\.1:(\d+)")


@contextlib.contextmanager
def langgraph_dev(work: Path) -> Iterator[Served]:
    path = venv("langgraph-dev", ["langgraph-cli[inmem]"])
    log = work / "langgraph-dev.log"
    asked = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                str(path / "bin" / "langgraph"),
                "dev",
                "--config",
                str(config_copy(work, "langgraph.json")),
                "--host",
                "127.0.0.1",
                "--port",
                str(asked),
                "--no-browser",
                "--no-reload",
            ],
            cwd=work,  # it keeps its in-memory state's snapshots under ./.langgraph_api
            env=server_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        port = None
        while port is None and time.monotonic() < deadline and proc.poll() is None:
            port = next((int(m[1]) for m in _PORT_LINE.finditer(log.read_text(errors="replace"))), None)
            time.sleep(0.2)
        if port is None:
            raise RuntimeError(f"langgraph dev printed no port:\n{log.read_text(errors='replace')[-2000:]}")
        if port != asked:
            print(f"bench-api: langgraph dev took port {port} (asked {asked})", flush=True)
        url = f"http://127.0.0.1:{port}"
        wait_ok(url, proc, log)
        yield Served("langgraph dev", url, proc.pid)
    finally:
        stop(proc)


@contextlib.contextmanager
def aegra(work: Path) -> Iterator[Served]:
    """Aegra on a Postgres of its own; raises ``Skipped`` with the reason where it cannot run."""
    try:
        # aegra-api 0.6.0 needs SQLAlchemy's asyncio extra but does not declare it (greenlet).
        path = venv("aegra", ["aegra-api", "greenlet"])
    except subprocess.CalledProcessError as exc:
        raise Skipped(f"`pip install aegra-api` failed ({exc.returncode})") from None
    postgres = PostgresServer().start()
    try:
        database = postgres.create_database("aegra")
        postmaster = int((postgres.data / "postmaster.pid").read_text().split()[0])
        yield from _aegra_server(path, database, work, postmaster)
    finally:
        postgres.close()


def _aegra_server(path: Path, database: str, work: Path, postmaster: int) -> Iterator[Served]:
    # aegra-api 0.6.0 (what Python 3.11 resolves) has no command of its own: its ASGI app under
    # uvicorn, configured by AEGRA_CONFIG and DATABASE_URL, migrating the database at start-up.
    config = config_copy(work, "aegra.json")
    port = free_port()
    env = server_env() | {
        "DATABASE_URL": database.split("?")[0],  # asyncpg takes no sslmode parameter
        "AEGRA_CONFIG": str(config),
        "AUTH_TYPE": "noop",
        "LOG_LEVEL": "WARNING",
    }
    log = work / "aegra.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                str(path / "bin" / "python"),
                "-m",
                "uvicorn",
                "aegra_api.main:app",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            cwd=work,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ok(url, proc, log, timeout=90, path="/ready")
        except (RuntimeError, TimeoutError) as exc:
            lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
            last = lines[-1][:300] if lines else str(exc).splitlines()[0]
            raise Skipped(f"aegra did not start here: {last}") from None
        yield Served("aegra", url, proc.pid, store_pid=postmaster)
    finally:
        stop(proc)


def config_copy(work: Path, name: str) -> Path:
    """The example's langgraph.json with its graph file made absolute: ``langgraph dev`` reads
    ``./graph.py`` relative to its working directory, not to the json file."""
    path = work / name
    path.write_text(EXAMPLE.read_text().replace('"./graph.py', f'"{EXAMPLE.parent}/graph.py'))
    return path


class Skipped(Exception):
    """A server that cannot run on this machine; the message says why."""


SERVERS: dict[str, Callable[[Path], contextlib.AbstractContextManager[Served]]] = {
    "threadline": threadline,
    "langgraph-dev": langgraph_dev,
    "aegra": aegra,
}


# --- the driver -------------------------------------------------------------------------------


async def measure(client, served: Served, concurrency: int, args: argparse.Namespace) -> Level:
    """``concurrency`` workers, each on a thread of its own, until ``args.runs`` runs or time;
    the server's CPU is read around the measured window only (not the warm-up)."""
    threads: list[str | None] = [None] * concurrency
    if not args.stateless:
        threads = [(await client.threads.create())["thread_id"] for _ in range(concurrency)]
    level = Level(served.name, concurrency)

    async def run(thread: str | None, measured: bool) -> None:
        started = time.perf_counter()
        try:
            result = await client.runs.wait(thread, GRAPH, input=INPUT)
            if not isinstance(result, dict) or "answer" not in result:
                raise RuntimeError(f"unexpected result {str(result)[:200]}")
        except Exception as exc:  # counted and shown; the benchmark goes on
            level.errors += measured
            level.first_error = level.first_error or f"{type(exc).__name__}: {str(exc)[:200]}"
            return
        if measured:
            level.latencies.append(time.perf_counter() - started)
            level.runs += 1

    rounds = max(1, args.warmup // concurrency)
    await asyncio.gather(*(run(t, False) for t in threads for _ in range(rounds)))
    deadline, left = time.monotonic() + args.seconds, args.runs

    async def worker(thread: str | None) -> None:
        nonlocal left
        while left > 0 and time.monotonic() < deadline:
            left -= 1
            await run(thread, True)

    store = served.store_pid
    calls = served.redis_url and redis_calls(served.redis_url)
    cpu, store_cpu, wall = tree_cpu(served.pid), store and tree_cpu(store), time.perf_counter()
    await asyncio.gather(*(worker(t) for t in threads))
    level.wall, level.cpu = time.perf_counter() - wall, tree_cpu(served.pid) - cpu
    if store:
        level.store_cpu = tree_cpu(store) - store_cpu
    if served.redis_url:
        level.store_calls = redis_calls(served.redis_url) - calls - 1
    return level


async def drive(servers: list[Served], levels: list[int], args: argparse.Namespace) -> list[Level]:
    """Level by level, the servers one after another at each level: all of them are up (idle
    when not measured), so a change in this machine's load during the benchmark falls on every
    server alike rather than on whichever ran last."""
    from langgraph_sdk import get_client

    timeout = httpx.Timeout(120.0)
    clients = [get_client(url=s.url, api_key=s.api_key, timeout=timeout) for s in servers]
    results = []
    try:
        for concurrency in levels:
            for served, client in zip(servers, clients, strict=True):
                level = await measure(client, served, concurrency, args)
                results.append(level)
                error = f"  first error: {level.first_error}" if level.errors else ""
                print(
                    f"bench-api: {served.name:<13} c={concurrency:<3} {level.runs:>5} runs"
                    f"  {level.rate:8.1f} runs/s  p50 {level.ms(50):8.1f} ms  p99 {level.ms(99):8.1f} ms"
                    f"  cpu {level.cpu_ms:6.1f} ms/run (+ store {level.store_cpu_ms:.1f})"
                    + (f"  redis {level.calls_per_run:.0f} cmd/run" if level.store_calls is not None else "")
                    + f"  errors {level.errors}{error}",
                    flush=True,
                )
    finally:
        for client in clients:
            await client.aclose()
    return results


def report(results: list[Level], skipped: dict[str, str], levels: list[int]) -> None:
    print("\n| server | concurrency | runs/s | p50 ms | p99 ms | server CPU ms/run | its store's | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for level in results:
        store = "—" if math.isnan(level.store_cpu_ms) else f"{level.store_cpu_ms:.1f}"
        print(
            f"| {level.server} | {level.concurrency} | {level.rate:.1f} | {level.ms(50):.1f} | "
            f"{level.ms(99):.1f} | {level.cpu_ms:.1f} | {store} | {level.errors} |"
        )
    for name, why in skipped.items():
        print(f"\n{name}: skipped: {why}")
    ours = {lv.concurrency: lv for lv in results if lv.server == "threadline"}
    for other in sorted({lv.server for lv in results} - {"threadline"}):
        theirs = {lv.concurrency: lv for lv in results if lv.server == other}
        shared = [c for c in levels if c in ours and c in theirs]
        if not shared:
            continue
        print(f"\nthreadline / {other}:")
        for c in shared:
            rate, p50 = ours[c].rate / theirs[c].rate, ours[c].ms(50) / theirs[c].ms(50)
            cpu = ours[c].cpu_ms / theirs[c].cpu_ms
            print(f"  c={c}: runs/s ×{rate:.2f}, p50 ×{p50:.3f}, CPU/run ×{cpu:.2f}")
        if other == "langgraph dev" and 32 in shared:
            ratio = ours[32].rate / theirs[32].rate
            verdict = "met" if ratio >= TARGET_RATIO_32 else "NOT met"
            print(f"  target runs/s at 32 ≥ {TARGET_RATIO_32}× langgraph dev: {ratio:.2f}× — {verdict}")
    if 1 in ours:
        p50 = ours[1].ms(50)
        verdict = "met" if p50 <= TARGET_P50_MS_1 else "NOT met"
        print(f"target p50 ≤ {TARGET_P50_MS_1} ms at concurrency 1: {p50:.1f} ms — {verdict}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--levels", default="1,8,32", help="concurrency levels, comma-separated")
    parser.add_argument("--runs", type=int, default=300, help="measured runs per level (at most)")
    parser.add_argument("--seconds", type=float, default=30.0, help="time limit per level")
    parser.add_argument("--warmup", type=int, default=8, help="unmeasured runs before each level")
    parser.add_argument("--servers", default="threadline,langgraph-dev,aegra", help=f"of {','.join(SERVERS)}")
    parser.add_argument(
        "--stateless", action="store_true", help="runs.wait(None, …) instead of a thread per worker"
    )
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",")]
    names = [s.strip() for s in args.servers.split(",") if s.strip()]
    unknown = set(names) - set(SERVERS)
    if unknown:
        parser.error(f"unknown servers: {', '.join(sorted(unknown))}")
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp, contextlib.ExitStack() as stack:
        servers = []
        for name in names:
            work = Path(tmp) / name
            work.mkdir()
            try:
                servers.append(stack.enter_context(SERVERS[name](work)))
            except Skipped as exc:
                skipped[name] = str(exc)
                print(f"bench-api: {name}: skipped: {exc}", flush=True)
        results = asyncio.run(drive(servers, levels, args))
    report(results, skipped, levels)
    return 0


if __name__ == "__main__":
    sys.exit(main())
