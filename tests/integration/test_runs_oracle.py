"""Runs held to the reference: the same seeded random sequence of run operations (background
runs and their joins, streamed runs in every combination of stream modes, waited runs on a
thread and stateless ones, interrupts and resumes, runs on threads that do not exist with and
without ``if_not_exists``, listing a thread's runs with every filter and page, getting and
deleting runs), on a graph of steps with interrupts and on one with a subgraph, a context and
breakpoints, sent to ``langgraph dev`` and to threadline — two replicas on one Redis, taking
turns, and one SQLite replica — and every answer compared: status, body (each SSE event in
order, for a stream) and paging headers.

Each run ends before the next operation starts (a background run is joined at once), so the
sequence means one thing on both servers: the reference takes a queued run up within a second,
threadline at once, and the order of two runs in flight would be a race. Double texting is
held to the reference by test_langgraph_api.py's examples instead.

Not compared, each for its reason:

- times and ids the servers make (``created_at``, checkpoint and task ids, a subgraph's task id
  in its namespace): their clocks and random sources; a run id is compared as the run's place
  in the sequence (the run listed, got or deleted is the one both servers made at that step);
- a run record's ``metadata`` and ``kwargs``, checkpoint metadata beyond LangGraph's own
  ``source`` and ``step``, the keys each server adds to a run's metadata and ``configurable``:
  docs/compatibility.md says how they differ;
- error texts: the status and the event's name are compared, the words are each server's own.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from client import API_KEY, parse_sse
from reference import answer_of, graphs_config, langgraph_dev, seeded_id

pytestmark = pytest.mark.integration

GRAPHS_DIR = Path(__file__).resolve().parent / "graphs"
GRAPHS = {"steps": f"{GRAPHS_DIR}/steps.py:graph", "nested": f"{GRAPHS_DIR}/nested.py:graph"}
ENV = {"LANGGRAPH_CONFIG": str(GRAPHS_DIR / "langgraph.json")}
CASES = [("redis", 1), ("redis", 2), ("sqlite", 3)]
OPERATIONS = 200
# Made by each server for itself.
UNCOMPARED = {
    "created_at",
    "updated_at",
    "checkpoint_id",
    "parent_checkpoint_id",
    "checkpoint_map",
    "id",
    "timestamp",
}
RUN_FIELDS_APART = ("metadata", "kwargs")
# A run's configurable as its checkpoints show it: what each server adds for itself (the
# reference its request's, threadline the lease's fencing token) and the user (the reference
# runs without auth here).
CONFIGURABLE_APART = {
    "__after_seconds__",
    "__request_start_time_ms__",
    "langgraph_request_id",
    "user_id",
    "fencing_token",
    "langgraph_auth_user",
    "langgraph_auth_user_id",
    "langgraph_auth_permissions",
}
TASK_ID = re.compile(r":[0-9a-f-]{36}")
STREAM_MODES = ["values", "updates", "tasks", "checkpoints", "debug", "custom"]
STATUSES = ["pending", "running", "error", "success", "timeout", "interrupted"]


def _graph_of(thread_id: str) -> str:
    """The graph a thread's runs run: one per thread (their states do not mix)."""
    return "nested" if int(thread_id[:2], 16) % 3 == 0 else "steps"


class Operations:
    """A seeded random sequence of run operations as (method, path, body); a run named by its
    place in its thread (``{run:N}`` in the path), for each server to fill in with its own id."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.threads: list[str] = []
        self.runs: dict[str, int] = {}  # thread -> runs made on it so far (deleted ones too)
        self.waiting: set[str] = set()  # threads at an interrupt, as the reference answered

    def _thread(self) -> str:
        if self.threads and self.rng.random() < 0.92:
            return self.rng.choice(self.threads)
        return seeded_id(self.rng)

    def _run_body(self, thread_id: str | None) -> dict[str, Any]:
        r = self.rng
        waiting = thread_id in self.waiting and r.random() < 0.6
        if _graph_of(thread_id or seeded_id(self.rng)) == "nested":
            # A subgraph, a custom stream writer, a context, and breakpoints to stop between.
            body: dict[str, Any] = {
                "assistant_id": "nested",
                "input": None if waiting else {"topic": r.choice("xyz")},
            }
            if r.random() < 0.4:
                body["stream_subgraphs"] = True
            if r.random() < 0.3:
                body["context"] = {"style": r.choice(["bold", "plain"])}
            if r.random() < 0.2:  # the same through configurable (with a context too: a 400)
                body["config"] = {"configurable": {"style": r.choice(["bold", "plain"])}}
            if r.random() < 0.3:
                key = r.choice(["interrupt_before", "interrupt_after"])
                body[key] = r.sample(["prepare", "inner", "finish"], r.randint(1, 2))
        elif waiting:
            body = {"assistant_id": "steps", "command": {"resume": r.choice(["yes", "no"])}}
        else:
            steps: Any = r.choice([1, 1, 2, 3]) if r.random() < 0.95 else "many"  # a graph error
            body = {"assistant_id": "steps", "input": {"steps": steps, "tag": r.choice("ab")}}
            if r.random() < 0.3:
                body["input"]["ask"] = "q"
        if r.random() < 0.2:
            body["metadata"] = {r.choice("ab"): r.choice([1, "x", None])}
        if r.random() < 0.2:
            body.setdefault("config", {})["tags"] = [r.choice("xy")]
        if thread_id is not None and r.random() < 0.2:
            body["multitask_strategy"] = r.choice(["reject", "interrupt", "rollback", "enqueue"])
        if thread_id is not None and thread_id not in self.threads and r.random() < 0.6:
            body["if_not_exists"] = r.choice(["create", "reject"])
        return body

    def _run(self, thread_id: str) -> str:
        made = self.runs.get(thread_id, 0)
        return (
            f"{{run:{self.rng.randrange(made)}}}" if made and self.rng.random() < 0.9 else seeded_id(self.rng)
        )

    def next(self) -> tuple[str, str, dict[str, Any] | None]:
        r = self.rng
        kinds = ["thread", "background", "stream", "wait", "stateless", "list", "get", "delete"]
        kind = r.choices(kinds, [2, 4, 5, 3, 1, 3, 2, 1])[0]
        if kind == "thread" or not self.threads:
            thread_id = seeded_id(self.rng)
            return "POST", "/threads", {"thread_id": thread_id}
        if kind == "stateless":
            body = self._run_body(None)
            if r.random() < 0.5:
                body["on_completion"] = r.choice(["delete", "keep"])
            return "POST", "/runs/wait", body
        thread_id = self._thread()
        if kind in ("background", "stream", "wait"):
            body = self._run_body(thread_id)
            if kind == "stream" and r.random() < 0.8:
                body["stream_mode"] = r.sample(STREAM_MODES, r.randint(1, 3))
            path = {"background": "runs", "stream": "runs/stream", "wait": "runs/wait"}[kind]
            return "POST", f"/threads/{thread_id}/{path}", body
        if kind == "list":
            params = []
            if r.random() < 0.7:
                params.append(f"limit={r.randint(1, 5)}")
            if r.random() < 0.5:
                params.append(f"offset={r.randint(0, 4)}")
            if r.random() < 0.3:
                params.append(f"status={r.choice(STATUSES)}")
            if r.random() < 0.2:
                params += [
                    f"select={f}" for f in r.sample(["run_id", "status", "thread_id"], r.randint(1, 2))
                ]
            return "GET", f"/threads/{thread_id}/runs" + ("?" + "&".join(params) if params else ""), None
        path = f"/threads/{thread_id}/runs/{self._run(thread_id)}"
        return ("GET" if kind == "get" else "DELETE"), path, None

    def answered(self, path: str, answer: Answer) -> None:
        """Learn from the reference's answer which threads and runs exist, and which threads
        wait at an interrupt."""
        if path == "/threads" and answer.compared == 200:
            self.threads.append(answer.thread_id)  # type: ignore[arg-type]
        if answer.outcome is None or answer.thread_id is None:
            return
        thread_id = answer.thread_id
        if thread_id not in self.threads:
            self.threads.append(thread_id)  # made by if_not_exists
        self.runs[thread_id] = self.runs.get(thread_id, 0) + 1
        self.waiting.discard(thread_id)
        if answer.outcome == "interrupted":
            self.waiting.add(thread_id)


def _server_made(key: str) -> bool:
    """A run metadata key a server adds for itself (langgraph-api its versions, host and
    attempt; threadline the thread's owner)."""
    return key.startswith("langgraph_") or key in ("created_by", "run_attempt", "threadline_owner")


def _comparable(value: Any) -> Any:
    if isinstance(value, str):  # a subgraph's checkpoint_ns names its task (an id)
        return TASK_ID.sub(":<task>", value)
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    if not isinstance(value, dict):
        return value
    if isinstance(value.get("configurable"), dict):
        configurable = {k: v for k, v in value["configurable"].items() if k not in CONFIGURABLE_APART}
        value = {**value, "configurable": configurable}
    if "triggers" in value and isinstance(value.get("metadata"), dict):  # a debug event's task
        metadata = {k: v for k, v in value["metadata"].items() if not _server_made(k)}
        value = {**value, "metadata": metadata}
    if "run_id" in value and "assistant_id" in value:  # a run record
        value = {k: v for k, v in value.items() if k not in RUN_FIELDS_APART}
    if "next" in value and "values" in value:  # a state or a checkpoint
        metadata = value.get("metadata")
        value = {**value, "metadata": metadata and {k: metadata.get(k) for k in ("source", "step")}}
    return {k: _comparable(v) for k, v in value.items() if k not in UNCOMPARED}


@dataclasses.dataclass(frozen=True)
class Answer:
    compared: Any  # what is held to the reference
    thread_id: str | None = None  # the thread made, or the one a run ran on
    outcome: str | None = None  # the run's status once it ended, when one ran on a thread


class Server:
    """One side of the comparison: its clients (taking turns) and the runs it made, by thread."""

    def __init__(self, clients: list[httpx.Client]) -> None:
        self.clients = clients
        self.runs: dict[str, list[str | None]] = {}  # thread -> its runs (None: deleted)
        self.names: dict[str, str] = {}  # run id -> "run N", N its place among all runs
        self.sent = 0

    def request(self, method: str, path: str, body: dict[str, Any] | None) -> Answer:
        """The answer, each run id in it named by the run's place in the sequence."""
        answer = self._request(method, path, body)
        return dataclasses.replace(answer, compared=self._named(answer.compared))

    def _named(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.names.get(value, value)
        if isinstance(value, (list, tuple)):
            return type(value)(self._named(v) for v in value)
        if isinstance(value, dict):
            return {k: self._named(v) for k, v in value.items()}
        return value

    def _request(self, method: str, path: str, body: dict[str, Any] | None) -> Answer:
        thread_id = path.split("/")[2] if path.startswith("/threads/") else None
        if "{run:" in path:
            index = int(path.split("{run:")[1].split("}")[0])
            run_id = self.runs[thread_id][index] or str(uuid.uuid4())  # type: ignore[index]
            path = path.replace(f"{{run:{index}}}", run_id)
        http = self.clients[self.sent % len(self.clients)]
        self.sent += 1
        if path.endswith("/runs/stream"):
            return self._stream(http, path, body, thread_id)  # type: ignore[arg-type]
        response = http.request(method, path, json=body)
        compared = answer_of(response, _comparable)
        if path == "/threads":  # held to the reference by test_threads_oracle.py
            return Answer(response.status_code, body["thread_id"])  # type: ignore[index]
        if method == "DELETE" and response.status_code == 204:
            runs = self.runs[thread_id]  # type: ignore[index]
            runs[runs.index(path.split("/")[-1])] = None
        if not response.is_success or method != "POST" or thread_id is None:
            return Answer(compared)
        if path.endswith("/runs/wait"):
            run_id = response.headers["content-location"].split("/")[-1]
            return Answer(compared, thread_id, self._ended(http, thread_id, run_id))
        run_id = response.json()["run_id"]  # a background run: joined at once
        joined = answer_of(http.get(f"/threads/{thread_id}/runs/{run_id}/join"), _comparable)
        return Answer((compared, joined), thread_id, self._ended(http, thread_id, run_id))

    def _stream(self, http: httpx.Client, path: str, body: Any, thread_id: str) -> Answer:
        with http.stream("POST", path, json=body) as response:
            if not response.is_success:
                response.read()
                return Answer(answer_of(response, _comparable))
            events = parse_sse(response.iter_lines()).events
        run_id = json.loads(events[0][1])["run_id"]  # the metadata event
        # A subgraph's events name it by its task id (``values|inner:<id>``), made by each server.
        streamed = [
            (TASK_ID.sub(":<task>", event), None if event == "error" else _comparable(json.loads(data)))
            for event, data in events
        ]
        return Answer((response.status_code, streamed), thread_id, self._ended(http, thread_id, run_id))

    def _ended(self, http: httpx.Client, thread_id: str, run_id: str) -> str:
        self.runs.setdefault(thread_id, []).append(run_id)
        self.names[run_id] = f"run {len(self.names)}"
        return http.get(f"/threads/{thread_id}/runs/{run_id}").json()["status"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    with langgraph_dev(graphs_config(tmp_path_factory.mktemp("reference"), GRAPHS)) as served:
        yield served.url


@pytest.mark.parametrize(("backend", "seed"), CASES)
def test_run_operations_answer_as_the_reference(reference, replicas_on, backend: str, seed: int) -> None:
    replicas = replicas_on(backend, **ENV)
    ours = Server(
        [httpx.Client(base_url=r.url, headers={"x-api-key": API_KEY}, timeout=30) for r in replicas]
    )
    theirs = Server([httpx.Client(base_url=reference, timeout=30)])
    operations = Operations(seed)
    for n in range(OPERATIONS):
        method, path, body = operations.next()
        answered = theirs.request(method, path, body)
        operations.answered(path, answered)
        got = ours.request(method, path, body)
        assert got.compared == answered.compared, f"operation {n}: {method} {path} {body}"
