"""Reads of the LangGraph API hold a bounded amount of memory whatever is stored (issue 18
bullet 2), measured as a real replica's peak RSS (``VmHWM`` after a ``clear_refs`` reset, so
Linux only) over a real Redis: three concurrent ``history`` with ``limit=1000`` of a thread
filled to its 1 MiB quota, and one ``threads/search`` with ``limit=1000`` over 40 such threads,
each stay within +64 MB (before: +631 MB and +314 MB in the issue's runs). The answers stay
whole: every state of the history and every thread of the search, in order.
"""

from __future__ import annotations

import concurrent.futures

import httpx
import pytest
import redis

from client import API_KEY
from servers import redis_env

pytestmark = pytest.mark.integration

MB = 2**20
CONTENT = 30 * 1024  # under MAX_MESSAGE_BYTES (32 KiB)
RUNS = 30  # ~0.9 MiB of messages: the thread's QUOTA_THREAD_BYTES is 1 MiB


def _peak_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


def _reset_peak(pid: int) -> None:
    with open(f"/proc/{pid}/clear_refs", "w") as clear:
        clear.write("5")


def _growth_mb(pid: int, work) -> tuple[float, list]:
    """Peak RSS growth (MB) of ``pid`` while ``work()`` runs, and what it returned."""
    with open(f"/proc/{pid}/status") as status:
        before = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    _reset_peak(pid)
    answers = work()
    return (_peak_kb(pid) - before) / 1024, answers


@pytest.fixture(scope="module")
def full_thread(redis_server, tmp_path_factory):
    from servers import ServiceProcess

    env = redis_env(redis_server, QUOTA_THREAD_BYTES=str(MB))
    proc = ServiceProcess(env, name="read-bounds", log_dir=tmp_path_factory.mktemp("reads")).start()
    http = httpx.Client(base_url=proc.url, headers={"x-api-key": API_KEY}, timeout=120)
    thread = http.post("/threads", json={}).json()["thread_id"]
    for i in range(RUNS):
        text = str(i) * CONTENT if i < 10 else chr(ord("a") + i % 26) * CONTENT
        body = {"assistant_id": "chat", "input": {"messages": [{"role": "user", "content": text}]}}
        done = http.post(f"/threads/{thread}/runs/wait", json=body)
        assert done.status_code == 200, done.text
    yield proc, http, thread
    proc.stop()


def test_three_histories_of_a_full_thread_stay_within_64_mb(full_thread):
    proc, http, thread = full_thread
    expected = len(http.post(f"/threads/{thread}/history", json={"limit": 1000}).json())
    assert expected > RUNS  # several checkpoints per run, each holding the state of its time

    def three() -> list:
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            jobs = [
                pool.submit(http.post, f"/threads/{thread}/history", json={"limit": 1000}) for _ in range(3)
            ]
            return [job.result() for job in jobs]

    growth, answers = _growth_mb(proc.proc.pid, three)
    for answer in answers:
        assert answer.status_code == 200
        states = answer.json()
        assert len(states) == expected
        assert len(states[0]["values"]["messages"]) == 2 * RUNS  # newest first, whole
    assert growth <= 64, f"+{growth:.0f} MB"


def test_a_search_over_forty_full_threads_stays_within_64_mb(full_thread):
    proc, http, thread = full_thread
    copies = set()
    for _ in range(40):
        copied = http.post(f"/threads/{thread}/copy")
        assert copied.status_code == 200, copied.text
        copies.add(copied.json()["thread_id"])

    def search() -> list:
        return [http.post("/threads/search", json={"limit": 1000})]

    growth, (answer,) = _growth_mb(proc.proc.pid, search)
    assert answer.status_code == 200
    found = answer.json()
    assert copies <= {t["thread_id"] for t in found}
    changed = [t["updated_at"] for t in found]
    assert changed == sorted(changed, reverse=True), "last changed first, as langgraph-api lists them"
    assert all(len(t["values"]["messages"]) == 2 * RUNS for t in found if t["thread_id"] in copies)
    assert growth <= 64, f"+{growth:.0f} MB"


def test_a_run_listing_reads_its_page_not_every_run(full_thread, redis_server):
    """Before: ``GET …/runs?limit=1`` read every run record of the thread (1.1 s with 200)."""
    _, http, thread = full_thread
    every = http.get(f"/threads/{thread}/runs", params={"limit": 1000}).json()
    assert len(every) == RUNS
    for offset, limit in ((0, 1), (3, 5), (RUNS - 2, 10), (RUNS, 3)):
        page = http.get(f"/threads/{thread}/runs", params={"limit": limit, "offset": offset}).json()
        assert page == every[offset : offset + limit]
    success = http.get(f"/threads/{thread}/runs", params={"status": "success", "offset": 2, "limit": 4})
    assert success.json() == [r for r in every if r["status"] == "success"][2:6]
    db = redis.Redis.from_url(redis_server.url(1))
    db.config_resetstat()
    assert len(http.get(f"/threads/{thread}/runs", params={"limit": 1}).json()) == 1
    hashes_read = db.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0)
    assert hashes_read <= 3, hashes_read  # the thread record, its one run (and a session)
