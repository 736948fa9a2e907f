"""Where a LangGraph API run's time goes, per run, at the start of a thread and 45 turns on.

One replica (``python -m threadline serve``, backend ``redis``, under a wrapper of this script
that counts its Redis round trips and can profile it) on a ``redis-server`` of its own; a
one-node MessagesState chat (``scripts/bench_chat``: each run adds a human message and an AI
reply, so the state grows with every run) driven by the real ``langgraph-sdk``:
``client.runs.wait`` ``--runs`` times (60) on one thread (``--concurrency N``: on N threads,
run i of each at the same time). Measured over windows of runs, 1–10 and 46–55
(``--windows``), from right before a window's first runs to right after its last, in passes
of their own, each on new threads:

* **count** — the Redis server's main-thread CPU (``INFO cpu``, less what a read of it costs)
  and bytes in and out, ``INFO commandstats`` deltas (calls and µs per command; a script's
  inner commands are counted under their own names and inside the script's time); the
  replica's round trips to Redis (one per command or pipeline its clients send, by what they
  carry: ``EVALSHA`` by script name), its CPU (``time.process_time`` in it) and its garbage
  collections' time (``gc.callbacks``);
* **slowlog** — every command's own duration from ``SLOWLOG`` (``slowlog-log-slower-than 0``),
  ``EVALSHA`` by script (their SHA1s, from threadline's own modules);
* **monitor** — ``MONITOR``: the commands each script ran;
* **profile** — a cProfile of the replica (its event-loop thread): the top functions by
  cumulative and by own time, per run;
* **timeline** (concurrency 1 only) — where a run's wall time goes, from its request reaching
  the app to its response starting: each round trip to Redis (from its write to its reply)
  and the replica's own work between them, in order (the runs of the window's most common
  order: a lease renewal in the middle of one makes another).

``--repeat N`` runs the count, slowlog and timeline passes N times (medians shown).
``--tree NAME=PATH`` (repeatable) measures other ``service/`` trees (e.g. a ``git archive`` of
the commit before a change), each with its own replica and Redis, the passes taking turns
between them (A B, then B A, …: a change in this shared machine's load falls on both alike),
and prints each figure side by side with its ratio to the first tree's: the A/B of a change.
Without it the tree is this checkout's.

This is a benchmark, not a test: it asserts nothing about time. Everything stays on 127.0.0.1
and every process it starts is stopped on exit.

    PYTHONPATH=service .venv/bin/python scripts/profile_run.py [--runs 60] [--windows 1-10,46-55]
        [--concurrency 1] [--repeat 3] [--tree A=PATH --tree B=PATH] [--no-profile]
        [--no-slowlog] [--no-monitor] [--no-timeline] [--top 30] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import hashlib
import itertools
import json
import os
import pstats
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHAT = ROOT / "scripts" / "bench_chat"
CONFIG = CHAT / "langgraph.json"
GRAPH = "chat"

# --- both sides: naming what is sent ----------------------------------------------------------


def script_names() -> dict[str, str]:
    """SHA1 -> name of every Lua script threadline's loaded modules define (module-level and
    class-level strings that call Redis, and those in dicts such as the saver's SCRIPTS)."""
    names: dict[str, str] = {}

    def add(name: str, value: Any) -> None:
        if isinstance(value, str) and "redis.call" in value:
            names.setdefault(hashlib.sha1(value.encode()).hexdigest(), name)

    for module_name, module in list(sys.modules.items()):
        if not module_name.startswith("threadline") or module is None:
            continue
        short = module_name.rsplit(".", 1)[-1]
        for name, value in list(vars(module).items()):
            add(f"{short}.{name}", value)
            if isinstance(value, type) and value.__module__ == module_name:
                for attr, inner in vars(value).items():
                    add(f"{value.__name__}.{attr}", inner)
        for name, value in list(vars(module).items()):
            if isinstance(value, dict):
                for key, inner in value.items():
                    add(f"{short}.{name}[{key}]", inner)
    return names


def command_label(args: tuple[Any, ...], names: dict[str, str]) -> str:
    """``EVALSHA`` by script name, else the command's name."""
    if not args:
        return "?"
    head = args[0]
    name = (head.decode() if isinstance(head, bytes) else str(head)).upper()
    if name == "EVALSHA" and len(args) > 1:
        sha = args[1].decode() if isinstance(args[1], bytes) else str(args[1])
        return f"EVALSHA {names.get(sha, sha[:10])}"
    return name


# --- the replica's side: a wrapper around `python -m threadline serve` ------------------------


def serve_wrapped(control: Path, argv: list[str]) -> int:
    """Run threadline with its Redis round trips counted. SIGUSR1 starts a window (counts
    reset; a cProfile too when ``control/mode`` says ``profile``, the runs' timeline when it
    says ``timeline``), SIGUSR2 ends it and writes ``control/window.json`` (and
    ``control/window.pstats``)."""
    import redis.asyncio.client as aclient
    import redis.client as sclient
    from fastapi import FastAPI

    trips: Counter[str] = Counter()
    state: dict[str, Any] = {"names": {}, "profile": None, "cpu": 0.0, "wall": 0.0, "marks": None}
    collecting = {"since": 0.0, "seconds": 0.0}

    def gc_timed(phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            collecting["since"] = time.perf_counter()
        else:
            collecting["seconds"] += time.perf_counter() - collecting["since"]

    gc.callbacks.append(gc_timed)

    def mark(what: str) -> None:
        if state["marks"] is not None:
            state["marks"].append((time.perf_counter(), what))

    async def timed(label: str, call: Any) -> Any:
        """``await call``, its write and its reply marked on the timeline."""
        mark("send " + label)
        try:
            return await call
        finally:
            mark("reply " + label)

    def label_pipeline(stack: list[Any]) -> str:
        parts = Counter(command_label(tuple(c[0]), state["names"]) for c in stack)
        return "pipeline[" + ", ".join(f"{n}×{k}" if k > 1 else n for n, k in sorted(parts.items())) + "]"

    def patch(module: Any, asynchronous: bool) -> None:
        command, execute = module.Redis.execute_command, module.Pipeline.execute
        prefix = "" if asynchronous else "sync "
        if asynchronous:

            async def counted_command(self, *args, **options):  # type: ignore[no-untyped-def]
                label = command_label(args, state["names"])
                trips[prefix + label] += 1
                return await timed(label, command(self, *args, **options))

            async def counted_execute(self, *args, **kwargs):  # type: ignore[no-untyped-def]
                if not self.command_stack:
                    return await execute(self, *args, **kwargs)
                label = label_pipeline(self.command_stack)
                trips[prefix + label] += 1
                return await timed(label, execute(self, *args, **kwargs))
        else:

            def counted_command(self, *args, **options):  # type: ignore[no-untyped-def]
                trips[prefix + command_label(args, state["names"])] += 1
                return command(self, *args, **options)

            def counted_execute(self, *args, **kwargs):  # type: ignore[no-untyped-def]
                if self.command_stack:
                    trips[prefix + label_pipeline(self.command_stack)] += 1
                return execute(self, *args, **kwargs)

        module.Redis.execute_command = counted_command
        module.Pipeline.execute = counted_execute

    patch(aclient, True)
    patch(sclient, False)
    # The batcher's own round trips (threadline's, since it writes batches without redis-py's
    # Pipeline); a tree from before that has none to count here.
    from threadline.checkpoint.redis.pipelining import ScriptPipelining

    if hasattr(ScriptPipelining, "_round_trip"):
        round_trip = ScriptPipelining._round_trip

        def unpacked(command: Any) -> tuple[Any, ...]:
            """A command's name and first argument, from the RESP the batcher packed them in
            (``(name, bytes)``), or the command itself (a tree from before)."""
            if len(command) == 2 and isinstance(command[1], bytes) and command[1][:1] == b"*":
                return tuple(command[1].split(b"\r\n")[2:5:2])
            return tuple(command)

        async def counted_round_trip(self, commands):  # type: ignore[no-untyped-def]
            one = command_label(unpacked(commands[0]), state["names"]) if len(commands) == 1 else None
            label = one or label_pipeline([(unpacked(command),) for command in commands])
            trips[label] += 1
            return await timed(label, round_trip(self, commands))

        ScriptPipelining._round_trip = counted_round_trip  # type: ignore[method-assign]

    app_call = FastAPI.__call__

    async def marked_call(self, scope, receive, send):  # type: ignore[no-untyped-def]
        """A run's request reaching the app and its response starting, on the timeline."""
        if scope["type"] != "http" or not scope["path"].endswith("/runs/wait"):
            return await app_call(self, scope, receive, send)
        mark("request")

        async def marked_send(message):  # type: ignore[no-untyped-def]
            if message["type"] == "http.response.start":
                mark("response")
            await send(message)

        return await app_call(self, scope, receive, marked_send)

    FastAPI.__call__ = marked_call  # type: ignore[method-assign]

    def write(path: Path, text: str) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.rename(path)

    def start(_sig: int, _frame: Any) -> None:
        state["names"] = script_names()
        trips.clear()
        mode = (control / "mode").read_text().strip()
        state["marks"] = [] if mode == "timeline" else None
        if mode == "profile":
            state["profile"] = cProfile.Profile()
            state["profile"].enable()
        state["cpu"], state["wall"] = time.process_time(), time.perf_counter()
        collecting["seconds"] = 0.0
        write(control / "started", "1")

    def stop(_sig: int, _frame: Any) -> None:
        cpu, wall = time.process_time() - state["cpu"], time.perf_counter() - state["wall"]
        profile, state["profile"] = state["profile"], None
        if profile is not None:
            profile.disable()
            profile.dump_stats(str(control / "window.pstats"))
        marks, state["marks"] = state["marks"], None
        timeline = phases(marks) if marks is not None else None
        write(
            control / "window.json",
            json.dumps(
                {"trips": trips, "cpu": cpu, "wall": wall, "gc": collecting["seconds"], "timeline": timeline}
            ),
        )

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    from threadline.__main__ import main

    return main(argv)


def phases(marks: list[tuple[float, str]]) -> dict[str, Any] | None:
    """The timeline of the runs of the most common order (``marks``: ``(time, what)``, every
    run's from ``request`` to ``response``, one run at a time): each phase's label and its
    mean seconds; and how many runs had that order, of how many."""
    runs: list[list[tuple[float, str]]] = []
    current: list[tuple[float, str]] | None = None
    for at, what in marks:
        if what == "request":
            current = []
        if current is None:
            continue
        current.append((at, what))
        if what == "response":
            runs.append(current)
            current = None
    orders = Counter(tuple(what for _, what in run) for run in runs)
    if not orders:
        return None
    order, count = orders.most_common(1)[0]
    labels = [phase_label(a, b) for a, b in itertools.pairwise(order)]
    seconds = [0.0] * len(labels)
    for run in runs:
        if tuple(what for _, what in run) == order:
            for i, ((t0, _), (t1, _)) in enumerate(itertools.pairwise(run)):
                seconds[i] += (t1 - t0) / count
    return {"phases": list(zip(labels, seconds, strict=True)), "runs": count, "of": len(runs)}


def phase_label(before: str, after: str) -> str:
    """What happened between two marks: a round trip (its write to its reply), or the
    replica's own work from one mark to the next."""
    if before.startswith("send ") and after.startswith("reply "):
        return "Redis: " + short(before.removeprefix("send "))
    return f"replica: {mark_name(before)} → {mark_name(after)}"


def mark_name(what: str) -> str:
    kind, _, label = what.partition(" ")
    return what if not label else short(label) + (" sent" if kind == "send" else " answered")


def short(label: str) -> str:
    """A round trip's label for the timeline: ``pipeline[EVALSHA scripts.PUT×2, HGET]`` is
    ``PUT×2 + HGET``."""
    parts = label.removeprefix("pipeline[").removesuffix("]").split(", ")
    return " + ".join(part.removeprefix("EVALSHA ").rpartition(".")[2] for part in parts)


# --- the driver's side ------------------------------------------------------------------------


@dataclass
class Tree:
    """A ``service/`` tree under test and what runs it."""

    name: str
    service: Path
    redis: Any = None
    replica: Any = None
    control: Path | None = None
    probe: Any = None
    names: dict[str, str] = field(default_factory=dict)


class Probe:
    """Reads one Redis server's CPU and command stats on a connection of its own (named, so
    its commands are left out of the slowlog); :meth:`calibrate` measures what a read costs."""

    def __init__(self, redis_server: Any) -> None:
        import redis

        self.client = redis.Redis.from_url(redis_server.url(0))
        self.client.client_setname("profile-probe")
        self.overhead = 0.0

    def sample(self) -> dict[str, Any]:
        return dict(self.client.execute_command("INFO", "stats", "cpu", "commandstats"))

    @staticmethod
    def cpu(sample: dict[str, Any]) -> float:
        main = ("used_cpu_user_main_thread", "used_cpu_sys_main_thread")
        keys = main if main[0] in sample else ("used_cpu_user", "used_cpu_sys")
        return sum(float(sample[k]) for k in keys)

    def calibrate(self, n: int = 31) -> None:
        samples = [self.sample() for _ in range(n)]
        self.overhead = statistics.median(self.cpu(b) - self.cpu(a) for a, b in itertools.pairwise(samples))

    def close(self) -> None:
        self.client.close()


@dataclass
class Window:
    """What one window of runs cost, summed over its runs."""

    first: int
    last: int
    runs: int = 0
    latency: list[float] = field(default_factory=list)
    redis_cpu: float = 0.0  # s, main thread, from right before the window to right after
    net_in: int = 0  # bytes Redis read (INFO stats), the probe's own included
    net_out: int = 0
    commands: dict[str, list[float]] = field(default_factory=dict)  # name -> [calls, usec]
    slowlog: dict[str, list[float]] = field(default_factory=dict)  # label -> [calls, usec]
    trips: dict[str, int] = field(default_factory=dict)
    # script label -> inner command -> calls (MONITOR: what each script ran)
    inner: dict[str, dict[str, int]] = field(default_factory=dict)
    server_cpu: float = 0.0  # s, the replica's process over the window
    gc_pauses: float = 0.0  # s, the replica's garbage collections (gc.callbacks)
    profile: pstats.Stats | None = None
    timeline: dict[str, Any] | None = None  # phases(): a timeline pass's

    def add_commands(self, before: dict[str, Any], after: dict[str, Any]) -> None:
        for key, value in after.items():
            if not key.startswith("cmdstat_") or key == "cmdstat_info":  # the probe's own INFO
                continue
            calls0, usec0 = (before[key]["calls"], before[key]["usec"]) if key in before else (0, 0)
            if value["calls"] > calls0:
                row = self.commands.setdefault(key.removeprefix("cmdstat_").upper(), [0, 0.0])
                row[0] += value["calls"] - calls0
                row[1] += value["usec"] - usec0


def parse_windows(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        out.append((int(first), int(last or first)))
    return out


def start_tree(tree: Tree, work: Path) -> None:
    from client import API_KEYS
    from servers import RedisServer, ServiceProcess

    tree.redis = RedisServer().start()
    tree.control = work / f"control-{tree.name}"
    tree.control.mkdir()
    (tree.control / "mode").write_text("count")
    env = {
        "PYTHONPATH": str(tree.service),
        "CHECKPOINT_BACKEND": "redis",
        "CHECKPOINT_REDIS_URL": tree.redis.url(1),
        "SESSION_BACKEND": "redis",
        "REDIS_URL": tree.redis.url(0),
        "API_KEYS": API_KEYS,
        "LANGGRAPH_CONFIG": str(CONFIG),
        "LOG_LEVEL": "WARNING",
    }
    program = [sys.executable, str(Path(__file__).resolve()), "--serve", str(tree.control), "--"]
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(tree.service)  # ServiceProcess passes PYTHONPATH through
    try:
        tree.replica = ServiceProcess(env, name=f"profile-{tree.name}", log_dir=work, program=program)
        tree.replica.start(timeout=90)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    tree.probe = Probe(tree.redis)
    tree.probe.calibrate()
    tree.names = names_of_tree(tree.service)


def names_of_tree(service: Path) -> dict[str, str]:
    """The script names of another tree: computed by a child on its PYTHONPATH."""
    import subprocess

    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import threadline.app; "
        "import threadline.checkpoint.redis, threadline.sessions, threadline.quotas; "
        "from profile_run import script_names; print(json.dumps(script_names()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).resolve().parent)],
        env={**os.environ, "PYTHONPATH": str(service)},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def stop_tree(tree: Tree) -> None:
    with contextlib.suppress(Exception):
        if tree.probe is not None:
            tree.probe.close()
    if tree.replica is not None:
        tree.replica.stop()
    if tree.redis is not None:
        tree.redis.close()


def signal_window(tree: Tree, sig: int, mode: str = "count") -> dict[str, Any] | None:
    """Start (SIGUSR1) or end (SIGUSR2) a window in the replica; the end's figures."""
    assert tree.control is not None and tree.replica is not None
    started, ended = tree.control / "started", tree.control / "window.json"
    if sig == signal.SIGUSR1:
        (tree.control / "mode").write_text(mode)
        started.unlink(missing_ok=True)
        ended.unlink(missing_ok=True)
        (tree.control / "window.pstats").unlink(missing_ok=True)
    tree.replica.signal(sig)
    target = started if sig == signal.SIGUSR1 else ended
    deadline = time.monotonic() + 30
    while not target.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the replica did not answer signal {sig}")
        time.sleep(0.002)
    return json.loads(ended.read_text()) if sig == signal.SIGUSR2 else None


async def one_pass(
    tree: Tree, mode: str, runs: int, windows: list[tuple[int, int]], concurrency: int = 1
) -> list[Window]:
    """``runs`` runs on each of ``concurrency`` new threads, run ``i`` of every thread at the
    same time (then the next); the windows measured as ``mode`` says, from right before their
    first runs to right after their last."""
    from langgraph_sdk import get_client

    from client import API_KEY

    sys.path.insert(0, str(CHAT))
    import httpx
    from graph import INPUT  # scripts/bench_chat/graph.py

    client = get_client(url=tree.replica.url, api_key=API_KEY, timeout=httpx.Timeout(60.0))
    redis = tree.probe.client
    out = [Window(a, b) for a, b in windows]

    async def run(thread: str, i: int) -> float:
        started = time.perf_counter()
        result = await client.runs.wait(thread, GRAPH, input=INPUT)
        elapsed = time.perf_counter() - started
        if not isinstance(result, dict) or len(result.get("messages") or ()) != 2 * i:
            raise RuntimeError(f"run {i}: unexpected result {str(result)[:300]}")
        return elapsed

    try:
        threads = [(await client.threads.create())["thread_id"] for _ in range(concurrency)]
        # Warm: the graph, the connections.
        await asyncio.gather(*(client.runs.wait(None, GRAPH, input=INPUT) for _ in range(concurrency)))
        before: dict[str, Any] = {}
        for i in range(1, runs + 1):
            window = next((w for w in out if w.first <= i <= w.last), None)
            if window is not None and i == window.first:
                signal_window(tree, signal.SIGUSR1, mode if mode in ("profile", "timeline") else "count")
                if mode == "monitor":
                    monitor = Monitor(tree)
                if mode == "slowlog":
                    redis.config_set("slowlog-log-slower-than", 0)
                    redis.config_set("slowlog-max-len", 100_000)
                    redis.slowlog_reset()
                before = tree.probe.sample()
            elapsed = await asyncio.gather(*(run(t, i) for t in threads))
            if window is None:
                continue
            window.runs += len(threads)
            window.latency += elapsed
            if i < window.last:
                continue
            after = tree.probe.sample()
            if mode == "count":
                window.redis_cpu = Probe.cpu(after) - Probe.cpu(before) - tree.probe.overhead
                window.net_in = int(after["total_net_input_bytes"]) - int(before["total_net_input_bytes"])
                window.net_out = int(after["total_net_output_bytes"]) - int(before["total_net_output_bytes"])
                window.add_commands(before, after)
            if mode == "monitor":
                window.inner = monitor.stop()
            if mode == "slowlog":
                entries = redis.slowlog_get(100_000)
                redis.config_set("slowlog-log-slower-than", 10_000)
                for entry in entries:
                    if (entry.get("client_name") or b"") in (b"profile-probe", "profile-probe"):
                        continue
                    label = command_label(tuple(entry["command"].split()), tree.names)
                    row = window.slowlog.setdefault(label, [0, 0.0])
                    row[0] += 1
                    row[1] += entry["duration"]
            figures = signal_window(tree, signal.SIGUSR2)
            assert figures is not None
            window.trips, window.server_cpu = figures["trips"], figures["cpu"]
            window.timeline, window.gc_pauses = figures["timeline"], figures["gc"]
            if mode == "profile":
                assert tree.control is not None
                window.profile = pstats.Stats(str(tree.control / "window.pstats"))
    finally:
        await client.aclose()
    return out


class Monitor:
    """``MONITOR`` in a thread of its own: the commands each script ran, by script."""

    def __init__(self, tree: Tree) -> None:
        import threading

        import redis

        self.names = tree.names
        self.client = redis.Redis.from_url(tree.redis.url(0))
        self.monitor = self.client.monitor()
        self.monitor.__enter__()
        self.lines: list[dict[str, Any]] = []
        self.thread = threading.Thread(target=self._listen, daemon=True)
        self.thread.start()

    def _listen(self) -> None:
        with contextlib.suppress(Exception):
            for line in self.monitor.listen():
                self.lines.append(line)

    def stop(self) -> dict[str, dict[str, int]]:
        time.sleep(0.05)
        with contextlib.suppress(Exception):
            self.monitor.connection.disconnect()
        self.thread.join(timeout=2)
        self.client.close()
        out: dict[str, dict[str, int]] = {}
        current = None
        for line in self.lines:
            words = line["command"].split()
            if not words:
                continue
            if line["client_type"] == "lua":
                if current is not None:
                    name = words[0].upper()
                    out[current][name] = out[current].get(name, 0) + 1
                continue
            label = command_label(tuple(words), self.names)
            current = label if label.startswith("EVAL") else None
            if current is not None:
                out.setdefault(current, {})
                out[current]["(calls)"] = out[current].get("(calls)", 0) + 1
        return out


# --- the report -------------------------------------------------------------------------------


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def per_run(windows: list[Window], get) -> float:  # type: ignore[no-untyped-def]
    """The median over repeats of ``get(window) / runs``."""
    return median([get(w) / w.runs for w in windows if w.runs])


def table_rows(
    results: dict[str, dict[str, list[list[Window]]]], trees: list[Tree], spans: list[str]
) -> list[tuple[str, list[float]]]:
    """The summary figures, one list of values per (tree, window)."""
    rows: list[tuple[str, Any]] = [
        ("p50 latency, ms", lambda ws: median([statistics.median(w.latency) * 1000 for w in ws])),
        ("server CPU, ms/run", lambda ws: per_run(ws, lambda w: w.server_cpu * 1000)),
        ("of which garbage collection, µs/run", lambda ws: per_run(ws, lambda w: w.gc_pauses * 1e6)),
        ("Redis CPU (main thread), µs/run", lambda ws: per_run(ws, lambda w: w.redis_cpu * 1e6)),
        (
            "Redis command time (commandstats, top level), µs/run",
            lambda ws: per_run(ws, lambda w: top_level_usec(w)),
        ),
        ("commands run by Redis (with scripts' inner), /run", lambda ws: per_run(ws, total_calls)),
        ("round trips, /run", lambda ws: per_run(ws, lambda w: sum(w.trips.values()))),
        ("bytes to Redis, KB/run", lambda ws: per_run(ws, lambda w: w.net_in / 1000)),
        ("bytes from Redis, KB/run", lambda ws: per_run(ws, lambda w: w.net_out / 1000)),
    ]
    out = []
    for label, get in rows:
        values = []
        for tree in trees:
            for index in range(len(spans)):
                values.append(get([r[index] for r in results[tree.name]["count"]]))
        out.append((label, values))
    return out


def total_calls(w: Window) -> float:
    return sum(c for c, _ in w.commands.values())


def top_level_usec(w: Window) -> float:
    """commandstats µs of what the replica sent: EVALSHA holds its inner commands' time, so
    those (names a script calls but the replica never sends alone, prorated otherwise) are
    left out using the trip labels' counts."""
    sent: Counter[str] = Counter()
    for label, n in w.trips.items():
        if label.startswith("pipeline["):
            for part in label[len("pipeline[") : -1].split(", "):
                name, _, k = part.partition("×")
                sent[name.split()[0]] += n * int(k or 1)
        else:
            sent[label.removeprefix("sync ").split()[0]] += n
    total = 0.0
    for name, (calls, usec) in w.commands.items():
        if name in ("EVALSHA", "EVAL", "EXEC"):
            total += usec
        elif sent[name]:
            total += usec * min(1.0, sent[name] / calls)
    return total


def fmt(v: float, digits: int = 1) -> str:
    return "—" if v != v else f"{v:,.{digits}f}"


Results = dict[str, dict[str, list[list[Window]]]]  # tree -> pass mode -> repeats -> windows


def print_table(title: str, head: list[str], rows: list[list[str]]) -> None:
    print(f"\n### {title}\n")
    print("| " + " | ".join(head) + " |")
    print("|---" * len(head) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def by_size(repeats: list[list[Window]], spans: int, get) -> list[str]:  # type: ignore[no-untyped-def]
    """The keys ``get(window)`` (a dict) holds in any window, largest per-run value first."""
    keys = {k for r in repeats for w in r for k in get(w)}

    def size(key: str) -> float:
        return max(
            per_run([r[i] for r in repeats], lambda w: value(get(w).get(key, 0))) for i in range(spans)
        )

    return sorted(keys, key=lambda k: -size(k))


def value(v: Any, index: int = 1) -> float:
    """A row's figure: a number, or the ``index`` of a [calls, usec] pair."""
    return v[index] if isinstance(v, list) else v


def report(results: Results, trees: list[Tree], args: argparse.Namespace) -> None:
    windows = parse_windows(args.windows)
    spans = [f"{a}–{b}" for a, b in windows]
    n = len(spans)
    head = ["figure"] + [f"{t.name} {s}" for t in trees for s in spans]
    head += [f"{t.name}/{trees[0].name} {s}" for t in trees[1:] for s in spans]
    rows = []
    for label, values in table_rows(results, trees, spans):
        cells = [label] + [fmt(v) for v in values]
        for t in range(1, len(trees)):
            for i in range(n):
                base, v = values[i], values[t * n + i]
                cells.append(f"×{v / base:.2f}" if base else "—")
        rows.append(cells)
    print(f"\n## per run, medians of {args.repeat} pass(es), concurrency {args.concurrency}")
    print_table("summary", head, rows)
    for tree in trees:
        report_tree(results[tree.name], tree, spans, args.top)


def report_tree(results: dict[str, list[list[Window]]], tree: Tree, spans: list[str], top: int) -> None:
    n = len(spans)
    count = results["count"]
    rows = []
    for name in by_size(count, n, lambda w: w.commands):
        cells = [name]
        for i in range(n):
            ws = [r[i] for r in count]
            cells += [
                fmt(per_run(ws, lambda w, k=name, j=j: value(w.commands.get(k, [0, 0]), j)), d)
                for j, d in ((0, 2), (1, 1))
            ]
        rows.append(cells)
    head = ["command"] + [f"{what} {s}" for s in spans for what in ("calls", "µs")]
    print_table(
        f"{tree.name}: Redis commands per run (commandstats; scripts' inner commands under their names)",
        head,
        rows,
    )
    if slow := results.get("slowlog"):
        rows = []
        for name in by_size(slow, n, lambda w: w.slowlog):
            cells = [name]
            for i in range(n):
                ws = [r[i] for r in slow]
                calls = per_run(ws, lambda w, k=name: w.slowlog.get(k, [0, 0])[0])
                usec = per_run(ws, lambda w, k=name: w.slowlog.get(k, [0, 0])[1])
                cells += [fmt(calls, 2), fmt(usec), fmt(usec / calls if calls else float("nan"))]
            rows.append(cells)
        head = ["command"] + [f"{what} {s}" for s in spans for what in ("calls", "µs", "µs/call")]
        print_table(f"{tree.name}: each command's own duration (SLOWLOG; per run)", head, rows)
    rows = [
        [name]
        + [fmt(per_run([r[i] for r in count], lambda w, k=name: w.trips.get(k, 0)), 2) for i in range(n)]
        for name in by_size(count, n, lambda w: w.trips)
    ]
    print_table(
        f"{tree.name}: round trips per run (the replica's commands and pipelines)",
        ["round trip", *spans],
        rows,
    )
    if timelines := results.get("timeline"):
        print_timeline(tree.name, timelines)
    for window in (results.get("monitor") or [[]])[0]:
        rows = []
        for script, inner in sorted(window.inner.items()):
            calls = inner.get("(calls)", 0)
            ran = sorted(((k, c) for k, c in inner.items() if k != "(calls)"), key=lambda x: -x[1])
            rows.append(
                [
                    script,
                    f"{calls / window.runs:.1f}",
                    ", ".join(f"{k} {c / window.runs:.1f}" for k, c in ran),
                ]
            )
        title = f"{tree.name}: what each script ran, runs {window.first}–{window.last} (MONITOR; per run)"
        print_table(title, ["script", "calls", "its commands"], rows)
    for window in (results.get("profile") or [[]])[0]:
        if window.profile is not None:
            title = (
                f"{tree.name}: cProfile of the replica, runs {window.first}–{window.last} (ms per run; the "
                "profiler's own cost inflates every figure: compare them, do not add them)"
            )
            print_profile(title, window.profile, window.runs, top)


def print_timeline(name: str, repeats: list[list[Window]]) -> None:
    """Each window's timeline: every phase's median over the passes that had the first
    pass's order (µs), and its total split into the replica's work and Redis's round trips."""
    for i, first in enumerate(repeats[0]):
        if first.timeline is None:
            continue
        labels = [label for label, _ in first.timeline["phases"]]
        same = [
            r[i].timeline
            for r in repeats
            if r[i].timeline is not None and [label for label, _ in r[i].timeline["phases"]] == labels
        ]
        us = [median([t["phases"][j][1] * 1e6 for t in same]) for j in range(len(labels))]
        redis = sum(v for label, v in zip(labels, us, strict=True) if label.startswith("Redis: "))
        rows = [[label, fmt(v)] for label, v in zip(labels, us, strict=True)]
        rows += [
            ["**request to response**", f"**{fmt(sum(us))}**"],
            ["of which the replica's work", fmt(sum(us) - redis)],
            [
                f"of which {sum(label.startswith('Redis: ') for label in labels)} round trips to Redis",
                fmt(redis),
            ],
        ]
        runs = sum(t["runs"] for t in same)
        title = (
            f"{name}: a run's wall time, runs {first.first}–{first.last} (µs, in order; medians of "
            f"{len(same)} pass(es), {runs} of {sum(t['of'] for t in same)} runs in this order)"
        )
        print_table(title, ["phase", "µs"], rows)


def print_profile(title: str, stats: pstats.Stats, runs: int, top: int) -> None:
    rows = []
    for (file, line, func), (_cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append((ct, tt, nc, f"`{short_path(file)}:{line}({func})`"))
    head = ["cumulative ms", "own ms", "calls", "function"]

    def cells(ct: float, tt: float, nc: int, name: str) -> list[str]:
        return [f"{ct / runs * 1000:.3f}", f"{tt / runs * 1000:.3f}", f"{nc / runs:.1f}", name]

    print_table(title + ", by cumulative time", head, [cells(*r) for r in sorted(rows, reverse=True)[:top]])
    print_table(title + ", by own time", head, [cells(*r) for r in sorted(rows, key=lambda r: -r[1])[:top]])


def short_path(file: str) -> str:
    for marker in ("/site-packages/", "/service/", "/lib/python3"):
        if marker in file:
            return file.split(marker, 1)[1]
    return file


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"]:
        control, rest = Path(argv[1]), argv[3:] if argv[2:3] == ["--"] else argv[2:]
        return serve_wrapped(control, rest)
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=60, help="runs on each pass's thread")
    parser.add_argument("--windows", default="1-10,46-55", help="runs measured, e.g. 1-10,46-55")
    parser.add_argument("--concurrency", type=int, default=1, help="threads run side by side")
    parser.add_argument("--repeat", type=int, default=1, help="count and slowlog passes per tree")
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH of a service/ tree")
    parser.add_argument("--no-profile", action="store_true", help="skip the cProfile pass")
    parser.add_argument("--no-monitor", action="store_true", help="skip the MONITOR pass")
    parser.add_argument("--no-slowlog", action="store_true", help="skip the SLOWLOG pass")
    parser.add_argument("--no-timeline", action="store_true", help="skip the timeline pass (concurrency 1)")
    parser.add_argument("--top", type=int, default=30, help="cProfile rows")
    parser.add_argument("--json", type=Path, help="also write the summary figures here")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests"))
    trees = [Tree(*t.split("=", 1)) for t in args.tree] or [Tree("this", ROOT / "service")]
    for tree in trees:
        tree.service = Path(tree.service).resolve()
    windows = parse_windows(args.windows)
    if max(b for _, b in windows) > args.runs:
        parser.error("a window ends after the last run")
    modes = ["count"] + ([] if args.no_slowlog else ["slowlog"])
    if args.concurrency == 1 and not args.no_timeline:  # at 1 a run's phases do not overlap
        modes.append("timeline")
    results: dict[str, dict[str, list[list[Window]]]] = {t.name: {} for t in trees}
    with tempfile.TemporaryDirectory(prefix="profile-run-") as tmp, contextlib.ExitStack() as stack:
        for tree in trees:
            stack.callback(stop_tree, tree)
            start_tree(tree, Path(tmp))
        for rep in range(args.repeat):
            for mode in modes:
                for tree in trees if rep % 2 == 0 else trees[::-1]:
                    got = asyncio.run(one_pass(tree, mode, args.runs, windows, args.concurrency))
                    results[tree.name].setdefault(mode, []).append(got)
                    print(f"profile-run: {tree.name} {mode} {rep + 1}/{args.repeat}", file=sys.stderr)
        if not args.no_monitor:
            for tree in trees:
                got = asyncio.run(one_pass(tree, "monitor", args.runs, windows, args.concurrency))
                results[tree.name]["monitor"] = [got]
        if not args.no_profile:
            for tree in trees:
                got = asyncio.run(one_pass(tree, "profile", args.runs, windows, args.concurrency))
                results[tree.name]["profile"] = [got]
    report(results, trees, args)
    if args.json:
        spans = [f"{a}–{b}" for a, b in windows]
        rows = dict(table_rows(results, trees, spans))
        args.json.write_text(json.dumps({"trees": [t.name for t in trees], "windows": spans, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
