"""Run webhooks (issue 23, ADR 0020), driven by the real ``langgraph-sdk`` against two real
replicas on one real Redis, POSTing to a real HTTP receiver on a free loopback port (allowed
through ``WEBHOOK_ALLOWED_HOSTS``, since loopback is refused by default): a successful and a
failed run's end delivered, signed and shaped as langgraph-api's, from every run-creating
route; each run's end delivered once across replicas, also for a run taken over after its
replica was SIGKILLed; retries with back-off, bounded; a receiver that hangs blocks no run nor
other deliveries; a SQLite replica delivers too; and, on a replica without the allow-list,
SSRF refusals as 422s that store nothing."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from langgraph_sdk import get_client

from client import API_KEY
from servers import free_port, redis_env, until

pytestmark = pytest.mark.integration

GRAPHS = Path(__file__).resolve().parent / "graphs"
SECRET = "test-webhook-secret"
ENV = {
    "TURN_LEASE_SECONDS": "1",
    "TURN_LEASE_WAIT_SECONDS": "10",
    "WEBHOOK_ALLOWED_HOSTS": "127.0.0.1",
    "WEBHOOK_SECRET": SECRET,
    "WEBHOOK_RETRY_SECONDS": "0.2",
    "WEBHOOK_RETRIES": "3",
    "WEBHOOK_TIMEOUT_SECONDS": "1",
    "LG_WEBHOOK_TEAM": "blue",
}


@dataclass
class Hit:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def payload(self) -> dict:
        return json.loads(self.body)


class Receiver:
    """A real HTTP server on a free loopback port, in a thread: ``/ok`` answers 200, ``/flaky``
    500 for the first ``fails`` POSTs of a run (query), then 200, ``/hang`` answers only once
    :meth:`release` is called. Every POST is recorded."""

    def __init__(self) -> None:
        self.port = free_port()
        self.hits: list[Hit] = []
        self.released = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                url = urlparse(self.path)
                hit = Hit(url.path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic())
                receiver.hits.append(hit)
                status = 200
                if url.path == "/flaky":
                    fails = int(parse_qs(url.query)["fails"][0])
                    if len(receiver.of(hit.headers["webhook-id"])) <= fails:
                        status = 500
                elif url.path == "/hang":
                    receiver.released.wait(60)
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def of(self, run_id: str) -> list[Hit]:
        return [h for h in self.hits if h.headers.get("webhook-id") == run_id]

    def release(self) -> None:
        self.released.set()

    def close(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.close()


@pytest.fixture
def config(tmp_path) -> Path:
    """The test graphs' langgraph.json plus a ``webhooks`` section: a header from the env."""
    document = json.loads((GRAPHS / "langgraph.json").read_text())
    graphs = {
        gid: str((GRAPHS / path.split(":")[0]).resolve()) + ":" + path.split(":")[1]
        for gid, path in document["graphs"].items()
    }
    path = tmp_path / "langgraph.json"
    path.write_text(
        json.dumps({"graphs": graphs, "webhooks": {"headers": {"x-team": "${{ env.LG_WEBHOOK_TEAM }}"}}})
    )
    return path


@pytest.fixture
def replicas(fresh_redis, start_replica, config):
    def start(*names: str, **extra: str):
        env = redis_env(fresh_redis, LANGGRAPH_CONFIG=str(config), **(ENV | extra))
        procs = [start_replica(env, name) for name in names]
        return procs, [get_client(url=p.url, api_key=API_KEY) for p in procs]

    return start


def verified(hit: Hit) -> bool:
    """The Standard Webhooks signature of ``hit`` checks out with SECRET."""
    message = f"{hit.headers['webhook-id']}.{hit.headers['webhook-timestamp']}.".encode() + hit.body
    expected = base64.b64encode(hmac.new(SECRET.encode(), message, hashlib.sha256).digest()).decode()
    return hit.headers["webhook-signature"] == f"v1,{expected}"


async def metric(url: str, name: str) -> float:
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"{url}/metrics")).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


async def test_a_runs_end_is_posted_signed_from_every_route_once(replicas, receiver) -> None:
    (pa, _), (a, b) = replicas("a", "b")
    hook = receiver.url("/ok")
    tid = (await a.threads.create())["thread_id"]
    runs = [await a.runs.create(tid, "steps", input={"steps": 2}, webhook=hook, metadata={"n": 1})]
    await a.runs.join(tid, runs[0]["run_id"])
    runs.append(await b.runs.create(None, "steps", input={"steps": 1}, webhook=hook))
    waited = await b.runs.wait(tid, "steps", input={"steps": 1, "tag": "w"}, webhook=hook)
    assert waited["done"] == ["1", "2", "w1"]
    await b.runs.wait(None, "steps", input={"steps": 1}, webhook=hook)
    [_ async for _ in a.runs.stream(tid, "steps", input={"steps": 1, "tag": "s"}, webhook=hook)]
    [_ async for _ in a.runs.stream(None, "steps", input={"steps": 1}, webhook=hook)]
    await until(lambda: len(receiver.hits) >= 6, "six webhooks")

    first = receiver.of(runs[0]["run_id"])[0]
    payload = first.payload
    assert payload["status"] == "success" and payload["thread_id"] == tid
    assert payload["metadata"] == {"n": 1} and payload["assistant_id"] == runs[0]["assistant_id"]
    assert payload["kwargs"]["webhook"] == hook and payload["kwargs"]["input"] == {"steps": 2}
    assert payload["values"]["done"] == ["1", "2"] and "error" not in payload
    assert payload["created_at"] <= payload["run_started_at"] <= payload["run_ended_at"]
    assert payload["run_ended_at"] <= payload["webhook_sent_at"]
    assert first.headers["content-type"] == "application/json"
    assert first.headers["x-team"] == "blue"  # langgraph.json webhooks.headers, from the env
    assert first.headers["host"] == f"127.0.0.1:{receiver.port}"
    assert all(verified(hit) for hit in receiver.hits)
    assert abs(int(first.headers["webhook-timestamp"]) - time.time()) < 60
    # One POST per run, whichever route made it (six runs, six ids).
    assert len({h.headers["webhook-id"] for h in receiver.hits}) == 6 == len(receiver.hits)
    assert {h.payload["status"] for h in receiver.hits} == {"success"}
    assert await metric(pa.url, 'threadline_webhook_deliveries_total{outcome="delivered"}') >= 1
    # The secret is nowhere in what the replica logs.
    assert SECRET not in pa.logs()


async def test_a_crons_runs_deliver_its_webhook_and_a_refused_one_stores_no_cron(replicas, receiver) -> None:
    _, (a, b) = replicas("a", "b", CRON_SCHEDULER_SLEEP_TIME="0.2")
    tid = (await a.threads.create())["thread_id"]
    refused = await a.http.client.post(
        f"/threads/{tid}/runs/crons",
        json={"assistant_id": "steps", "schedule": "* * * * * *", "webhook": "http://169.254.169.254/"},
    )
    assert refused.status_code == 422 and "169.254.169.254" in refused.json()["detail"]
    assert await a.crons.count(thread_id=tid) == 0
    cron = await b.crons.create_for_thread(
        tid, "steps", schedule="* * * * * *", input={"steps": 1}, webhook=receiver.url("/cron")
    )
    (hit, *_) = await until(lambda: receiver.hits, "a tick's webhook", timeout=20)
    await a.crons.delete(cron["cron_id"])
    assert hit.payload["thread_id"] == tid and hit.payload["status"] == "success"
    assert hit.payload["kwargs"]["webhook"] == receiver.url("/cron") and verified(hit)


async def test_a_failed_runs_end_carries_its_error(replicas, receiver) -> None:
    _, (a,) = replicas("a")
    tid = (await a.threads.create())["thread_id"]
    # A delay that is not a number fails the graph's step.
    run = await a.runs.create(tid, "steps", input={"steps": 1, "delay": "soon"}, webhook=receiver.url("/ok"))
    await a.runs.join(tid, run["run_id"])
    (hit,) = await until(lambda: receiver.of(run["run_id"]), "the failed run's webhook")
    assert hit.payload["status"] == "error"
    assert hit.payload["error"]["error"] == "TypeError"
    assert verified(hit)


async def test_a_sqlite_replica_delivers_too(sdk_replicas, receiver, config) -> None:
    _, (client,) = sdk_replicas("sqlite", **ENV, LANGGRAPH_CONFIG=str(config))
    out = await client.runs.wait(None, "steps", input={"steps": 2}, webhook=receiver.url("/ok"))
    assert out["done"] == ["1", "2"]
    (hit,) = await until(lambda: receiver.hits, "the webhook")
    assert hit.payload["status"] == "success" and hit.payload["values"]["done"] == ["1", "2"]
    assert verified(hit)


async def test_each_end_is_delivered_once_across_replicas_also_after_a_takeover(replicas, receiver) -> None:
    (doomed, _, _), (d, a, b) = replicas("doomed", "a", "b")
    hook = receiver.url("/ok")
    tid = (await d.threads.create())["thread_id"]
    taken = await d.runs.create(tid, "steps", input={"steps": 6, "delay": 0.3}, webhook=hook)

    async def two_steps() -> bool:
        return len((await a.threads.get_state(tid))["values"].get("done") or []) >= 2

    await until(two_steps, "two steps checkpointed")
    doomed.kill()  # SIGKILL mid-run: its replica records nothing and sends nothing
    result = await b.runs.join(tid, taken["run_id"])
    assert result["done"] == [str(i) for i in range(1, 7)]
    # More runs, created on both survivors, ending on either; the last one ends after all.
    others = []
    for i in range(6):
        client = (a, b)[i % 2]
        others.append(await client.runs.create(None, "steps", input={"steps": 1}, webhook=hook))
    for i, run in enumerate(others):
        await (a, b)[i % 2].runs.join(run["thread_id"], run["run_id"])
    last = await a.runs.wait(tid, "steps", input={"steps": 1, "tag": "z"}, webhook=hook)
    assert last["done"][-1] == "z1"
    await until(lambda: len(receiver.hits) >= 8, "eight webhooks")
    (hit,) = receiver.of(taken["run_id"])
    assert hit.payload["status"] == "success" and hit.payload["values"]["done"][-1] == "6"
    for run in others:
        assert len(receiver.of(run["run_id"])) == 1
    assert len(receiver.hits) == 8


async def test_retries_back_off_and_are_bounded(replicas, receiver) -> None:
    (pa,), (a,) = replicas("a", WEBHOOK_RETRIES="2")
    tid = (await a.threads.create())["thread_id"]
    run = await a.runs.wait(tid, "steps", input={"steps": 1}, webhook=receiver.url("/flaky?fails=2"))
    assert run["done"] == ["1"]
    hits = await until(lambda: len(receiver.hits) >= 3 and receiver.hits, "a third attempt")
    assert [h.path for h in hits] == ["/flaky"] * 3
    assert len({h.headers["webhook-id"] for h in hits}) == 1 and all(verified(h) for h in hits)
    # Back-off from WEBHOOK_RETRY_SECONDS (0.2 s), doubling, ±20 %.
    first, second = hits[1].at - hits[0].at, hits[2].at - hits[1].at
    assert first >= 0.15 and second >= 0.3, (first, second)
    delivered = 'threadline_webhook_deliveries_total{outcome="delivered"}'
    await until(lambda: _at_least(pa.url, delivered, 1), "the delivery counted")
    assert await metric(pa.url, 'threadline_webhook_attempt_failures_total{reason="5xx"}') == 2

    # A receiver that keeps failing gets 1 + WEBHOOK_RETRIES attempts, then the delivery fails.
    tid = (await a.threads.create())["thread_id"]
    run = await a.runs.create(tid, "steps", input={"steps": 1}, webhook=receiver.url("/flaky?fails=100"))
    failed = 'threadline_webhook_deliveries_total{outcome="failed"}'
    await until(lambda: _at_least(pa.url, failed, 1), "the delivery given up")
    assert len(receiver.of(run["run_id"])) == 3


async def _at_least(url: str, name: str, value: float) -> bool:
    return await metric(url, name) >= value


async def test_a_receiver_that_hangs_blocks_no_run_and_no_other_delivery(replicas, receiver) -> None:
    _, (a,) = replicas("a", WEBHOOK_TIMEOUT_SECONDS="30", WEBHOOK_MAX_IN_FLIGHT="3")
    tid = (await a.threads.create())["thread_id"]
    started = time.monotonic()
    for _ in range(2):
        out = await a.runs.wait(tid, "steps", input={"steps": 1}, webhook=receiver.url("/hang"))
        assert out["done"]
    await until(lambda: len(receiver.hits) == 2, "both hanging receivers reached")
    # The runs ended and answered while their receivers hang; a third run's webhook arrives.
    ok = await a.runs.wait(None, "steps", input={"steps": 1}, webhook=receiver.url("/ok"))
    assert ok["done"] == ["1"]
    await until(lambda: any(h.path == "/ok" for h in receiver.hits), "the other run's webhook")
    assert not receiver.released.is_set() and time.monotonic() - started < 20
    receiver.release()


REFUSED = [
    ("http://127.0.0.1:{port}/ok", "loopback"),
    ("http://localhost:{port}/ok", "loopback"),
    ("http://[::1]:{port}/ok", "loopback"),
    ("http://10.1.2.3/hook", "private"),
    ("http://192.168.0.10/hook", "private"),
    ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
    ("http://169.254.1.1/hook", "link-local"),
    ("http://[fe80::1]/hook", "link-local"),
    ("http://0.0.0.0/hook", "unspecified"),
    ("http://224.0.0.1/hook", "multicast"),
    ("http://240.0.0.1/hook", "reserved"),
    ("ftp://example.com/hook", "http(s)"),
]


async def test_refused_addresses_are_422s_that_store_nothing(fresh_redis, start_replica, receiver) -> None:
    # No WEBHOOK_ALLOWED_HOSTS: the defaults.
    strict = start_replica(redis_env(fresh_redis, WEBHOOK_SECRET=SECRET), "strict")
    client = get_client(url=strict.url, api_key=API_KEY)
    tid = (await client.threads.create())["thread_id"]
    paths = [f"/threads/{tid}/runs", f"/threads/{tid}/runs/wait", f"/threads/{tid}/runs/stream"]
    paths += ["/runs", "/runs/wait", "/runs/stream"]
    async with httpx.AsyncClient(base_url=strict.url, headers={"x-api-key": API_KEY}) as http:
        for url, reason in REFUSED:
            hook = url.format(port=receiver.port)
            body = {"assistant_id": "chat", "input": {"messages": []}, "webhook": hook}
            for path in paths:
                response = await http.post(path, json=body)
                assert response.status_code == 422, (path, hook, response.text)
                message = response.json()["error"]["message"]
                assert message.startswith("webhook:") and reason in message, (hook, message)
                assert SECRET not in response.text
    # Nothing stored: no run on the thread, no thread made for a stateless run.
    assert await client.runs.list(tid) == []
    assert [t["thread_id"] for t in await client.threads.search()] == [tid]
    assert receiver.hits == []
