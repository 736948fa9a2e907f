#!/usr/bin/env python3
"""The figures of docs/reliability.md, "Reliability and security" (issue 10, ADR 0006), measured on one
replica (a real process, ``python -m threadline serve``) over a real Redis on loopback:

1. RSS growth while four clients each send a 300 MB chunked body at once, with and without
   credentials (target <= 64 MB; before: +2.1 GB);
2. peak RSS growth during three concurrent ``GET /v1/threads/{id}/checkpoints?limit=100`` on a
   40-turn thread of 32 KB messages (target <= 64 MB; before: +561 MB);
3. a valid user's success rate during 5 bursts of 300 requests with bogus bearer tokens
   (target 100 %; before: 2 of 5);
4. issue 18's quotas and edges (:func:`quotas_and_edges`): JSON edges (before: 8 of 11 answered
   500), a copy chain in a 1 MiB quota (before: 2.86 MB), runs queued on one thread (before: 2000
   of 2000), the Redis commands of one rollback among 1000 other threads (before: a SCAN and 1008
   hashes read), a full Redis (before: 500 everywhere, login included);
5. issue 18's bounded LangGraph API reads (:func:`api_reads`): peak RSS of three concurrent
   ``history`` ``limit=1000`` of a thread at its 1 MiB quota (before: +334 MB) and of one
   ``threads/search`` ``limit=1000`` over 40 such threads (before: +228 MB), and how long a
   stream of a finished run past its end stays open (before: forever);
6. issue 18's run records (:func:`chat_storage`): what a 300-turn chat driven through
   ``runs.wait`` holds in Redis, by kind of key, beside the sizing (docs/sizing.md) of the same
   conversation (before: 148 MB, 38 MB of it for 7 days).

    .venv/bin/python scripts/bench_abuse.py

RSS is read from /proc (VmRSS; VmHWM after a ``clear_refs`` reset for peaks), so Linux only.
"""

from __future__ import annotations

import asyncio
import secrets
import socket
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from client import API_KEY
from servers import RedisServer, ServiceProcess, redis_env, thread_memory

MB = 2**20


def rss(pid: int, field: str = "VmRSS") -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith(field + ":"))


def reset_peak(pid: int) -> None:
    with open(f"/proc/{pid}/clear_refs", "w") as clear:
        clear.write("5")


def chunked_body(port: int, headers: str, total: int, sent: list[int]) -> None:
    """POST ``total`` bytes chunked until the server closes; record what got out."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    out = 0
    try:
        sock.sendall(
            b"POST /v1/threads/abc/messages HTTP/1.1\r\nHost: b\r\nTransfer-Encoding: chunked\r\n"
            + headers.encode()
            + b"\r\n"
        )
        piece = b"10000\r\n" + b"x" * 65536 + b"\r\n"
        while out < total:
            sock.sendall(piece)
            out += 65536
    except OSError:
        pass
    finally:
        sent.append(out)
        sock.close()


def bodies(replica: ServiceProcess, headers: str) -> tuple[float, float]:
    """(RSS growth in MB at the peak, MB the four clients got out)."""
    pid = replica.proc.pid
    reset_peak(pid)
    before = rss(pid)
    sent: list[int] = []
    clients = [
        threading.Thread(target=chunked_body, args=(replica.port, headers, 300 * MB, sent)) for _ in range(4)
    ]
    for client in clients:
        client.start()
    for client in clients:
        client.join()
    return (rss(pid, "VmHWM") - before) / MB, sum(sent) / MB


def history(replica: ServiceProcess) -> float:
    """Peak RSS growth (MB) of three concurrent 100-checkpoint history requests."""
    http = httpx.Client(base_url=replica.url, headers={"X-API-Key": API_KEY}, timeout=300)
    thread = http.post("/v1/threads").json()["thread_id"]
    for turn in range(40):
        content = f"{turn:02d}" + "x" * (32 * 1024 - 2)
        http.post(f"/v1/threads/{thread}/messages", json={"content": content}).raise_for_status()
    pid = replica.proc.pid
    reset_peak(pid)
    before = rss(pid)
    listed: list[int] = []

    def read() -> None:
        got = http.get(f"/v1/threads/{thread}/checkpoints", params={"limit": 100}).raise_for_status()
        listed.append(len(got.json()["checkpoints"]))

    readers = [threading.Thread(target=read) for _ in range(3)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join()
    assert listed == [100, 100, 100], listed
    return (rss(pid, "VmHWM") - before) / MB


async def flood(url: str, bursts: int = 5, size: int = 300) -> tuple[int, int, dict[int, int]]:
    """(valid requests that succeeded, valid requests, the attacker's statuses)."""
    limits = httpx.Limits(max_connections=size + 10, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        token = (await http.post("/v1/sessions", json={"api_key": API_KEY})).json()["session_token"]
        ok, attacker = 0, {}
        for _ in range(bursts):
            bogus = [
                http.get("/v1/threads/abc", headers={"Authorization": f"Bearer {secrets.token_urlsafe(32)}"})
                for _ in range(size)
            ]
            valid = http.post("/v1/threads", headers={"Authorization": f"Bearer {token}"})
            results = await asyncio.gather(*bogus[: size // 2], valid, *bogus[size // 2 :])
            ok += results[size // 2].status_code == 201
            for i, response in enumerate(results):
                if i != size // 2:
                    attacker[response.status_code] = attacker.get(response.status_code, 0) + 1
        return ok, bursts, attacker


def quotas_and_edges(redis: RedisServer) -> None:
    """Issue 18 bullets 3, 5, 6, 7 on a replica with the default quotas: JSON edges, a copy
    chain against QUOTA_THREAD_BYTES, runs queued on one thread, one rollback among 1000 other
    threads (Redis commands, INFO commandstats), and a full Redis."""
    import redis as redis_py

    replica = ServiceProcess(redis_env(redis), name="bench-quotas").start()
    try:
        http = httpx.Client(base_url=replica.url, headers={"x-api-key": API_KEY}, timeout=60)
        deep = ["[" * n + "]" * n for n in (256, 300, 400, 500, 600, 700, 800, 999)]
        cases = [*deep, "18446744073709551616", "-9223372036854775809", "1" + "0" * 30]
        statuses: dict[int, int] = {}
        for value in cases:
            code = http.post("/threads", content=f'{{"metadata": {{"x": {value}}}}}').status_code
            statuses[code] = statuses.get(code, 0) + 1
        print(f"JSON edges ({len(cases)} bodies: nesting 256-999, integers past 64 bits): {statuses}")

        fill = {"assistant_id": "chat", "input": {"messages": [{"role": "user", "content": "f" * 100_000}]}}
        thread, stored = http.post("/threads", json={}).json()["thread_id"], 0
        for _ in range(30):  # fill, copy, fill the copy, …
            if http.post(f"/threads/{thread}/runs/wait", json=fill).status_code != 200:
                break
            stored += 100_000
            thread = http.post(f"/threads/{thread}/copy").json()["thread_id"]
        print(f"copy, fill, copy, fill in a 1 MiB QUOTA_THREAD_BYTES: {stored / MB:.2f} MB accepted")

        queued = http.post("/threads", json={}).json()["thread_id"]
        accepted = sum(
            http.post(f"/threads/{queued}/runs", json={"assistant_id": "chat", "input": None}).status_code
            == 200
            for _ in range(200)
        )
        print(f"200 runs sent back to back to one thread: {accepted} accepted (at most 10 active at once)")

        admin = redis_py.Redis.from_url(redis.url(1))
        with admin.pipeline(transaction=False) as pipe:
            for i in range(1000):
                pipe.zadd(f"tl:{{bench-other-{i}}}:idx", {f"\0cp-{i}": 0})
                pipe.hset(f"tl:{{bench-other-{i}}}:cp", f"\0cp-{i}", b"x")
            pipe.execute()
        target = http.post("/threads", json={}).json()["thread_id"]
        slow = {"assistant_id": "chat", "input": {"messages": [{"role": "user", "content": "x " * 400}]}}
        run = http.post(f"/threads/{target}/runs", json=slow).json()["run_id"]
        admin.config_resetstat()
        http.post(f"/threads/{target}/runs/{run}/cancel", params={"action": "rollback", "wait": True})
        stats = admin.info("commandstats")
        scans = stats.get("cmdstat_scan", {}).get("calls", 0)
        reads = stats.get("cmdstat_hgetall", {}).get("calls", 0)
        print(f"one rollback among 1000 other threads: {scans} SCAN, {reads} HGETALL (all replica traffic)")

        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", str(int(admin.info("memory")["used_memory"]) // 2))
        codes = {
            "POST /threads": http.post("/threads", json={}).status_code,
            "POST /v1/threads": http.post("/v1/threads").status_code,
            "POST /runs/wait": http.post("/runs/wait", json=slow).status_code,
            "POST /v1/sessions": httpx.post(
                f"{replica.url}/v1/sessions", json={"api_key": API_KEY}
            ).status_code,
        }
        admin.config_set("maxmemory", "0")
        print(f"full Redis (maxmemory below use, noeviction): {codes}")
    finally:
        replica.kill()


def api_reads(redis: RedisServer) -> None:
    """Bullet 2: history and search of full threads through a real replica's RSS, and a
    stream past a finished run's end."""
    replica = ServiceProcess(redis_env(redis, QUOTA_THREAD_BYTES=str(MB)), name="bench-reads").start()
    try:
        http = httpx.Client(base_url=replica.url, headers={"x-api-key": API_KEY}, timeout=300)
        thread = http.post("/threads", json={}).json()["thread_id"]
        for i in range(30):  # 30 x 30 KiB: the thread at its 1 MiB quota
            content = chr(ord("a") + i % 26) * 30 * 1024
            body = {"assistant_id": "chat", "input": {"messages": [{"role": "user", "content": content}]}}
            http.post(f"/threads/{thread}/runs/wait", json=body).raise_for_status()
        pid = replica.proc.pid

        def peak(work) -> float:
            before = rss(pid)
            reset_peak(pid)
            work()
            return (rss(pid, "VmHWM") - before) / MB

        def histories() -> None:
            readers = [
                threading.Thread(
                    target=http.post, args=(f"/threads/{thread}/history",), kwargs={"json": {"limit": 1000}}
                )
                for _ in range(3)
            ]
            for reader in readers:
                reader.start()
            for reader in readers:
                reader.join()

        print(f"3 x history limit=1000 of a thread at its 1 MiB quota: peak RSS +{peak(histories):.1f} MB")
        for _ in range(40):
            http.post(f"/threads/{thread}/copy").raise_for_status()
        searched = peak(lambda: http.post("/threads/search", json={"limit": 1000}).raise_for_status())
        print(f"threads/search limit=1000 over 40 full threads: peak RSS +{searched:.1f} MB")
        run_id = http.get(f"/threads/{thread}/runs", params={"limit": 1}).json()[0]["run_id"]
        started = time.monotonic()
        http.get(f"/threads/{thread}/runs/{run_id}/stream", headers={"Last-Event-ID": "99999999999999-0"})
        print(f"a stream of a finished run past its end: closed after {time.monotonic() - started:.2f} s")
    finally:
        replica.kill()


# The conversation of the Redis sizing (docs/sizing.md, scripts/bench_checkpointers.py): a
# 240-character question, the built-in model's answer; 3.7 KB a turn plus its message text.
QUESTION = "Tell me more about this, in some detail please. " * 5
SIZING_PER_TURN = 3.7 * 1000


def chat_storage(redis: RedisServer, turns: int = 300) -> None:
    """Bullet 4: the Redis memory of a ``turns``-turn chat through ``runs.wait``
    (``MEMORY USAGE`` of the thread's keys, by kind) beside the sizing (docs/sizing.md)."""
    import redis as redis_py

    replica = ServiceProcess(redis_env(redis, QUOTA_THREAD_BYTES="0"), name="bench-chat").start()
    try:
        http = httpx.Client(base_url=replica.url, headers={"x-api-key": API_KEY}, timeout=60)
        thread = http.post("/threads", json={}).json()["thread_id"]
        body = {"assistant_id": "chat", "input": {"messages": [{"role": "user", "content": QUESTION}]}}
        for _ in range(turns):
            answer = http.post(f"/threads/{thread}/runs/wait", json=body)
            assert answer.status_code == 200, answer.text
        text = sum(len(m["content"]) for m in answer.json()["messages"])
        held = thread_memory(redis_py.Redis.from_url(redis.url(1)), thread)
        total = sum(held.values())
        sizing = turns * SIZING_PER_TURN + text
        kinds = ", ".join(f"{kind} {size / MB:.2f}" for kind, size in sorted(held.items()))
        print(
            f"{turns}-turn chat through runs.wait: Redis holds {total / MB:.2f} MB ({kinds}); "
            f"docs/sizing.md sizing {sizing / MB:.2f} MB: x{total / sizing:.2f}"
        )
    finally:
        replica.kill()


def main() -> int:
    redis = RedisServer().start()
    started: list[ServiceProcess] = []
    try:
        replica = ServiceProcess(redis_env(redis, QUOTA_THREAD_BYTES="0"), name="bench-abuse").start()
        started.append(replica)
        time.sleep(1)  # let the process settle before the first RSS reading
        print(f"replica RSS at start: {rss(replica.proc.pid) / MB:.0f} MB")
        growth, sent = bodies(replica, "")
        print(f"4 x 300 MB chunked, no credentials: RSS +{growth:.1f} MB ({sent:.1f} MB got out)")
        growth, sent = bodies(replica, f"X-API-Key: {API_KEY}\r\n")
        print(f"4 x 300 MB chunked, valid key:      RSS +{growth:.1f} MB ({sent:.1f} MB got out)")
        print(f"3 x history (40 turns x 32 KB, limit 100): peak RSS +{history(replica):.1f} MB")
        ok, sent_valid, attacker = asyncio.run(flood(replica.url))
        print(
            f"bogus-token flood (5 x 300, well-shaped random tokens): valid user {ok}/{sent_valid} "
            f"({100 * ok / sent_valid:.0f} %); attacker got {attacker}"
        )
        quotas_and_edges(redis)
        api_reads(redis)
        chat_storage(redis)
    finally:
        for proc in started:
            proc.kill()
        redis.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
