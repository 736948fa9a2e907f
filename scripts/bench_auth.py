"""Custom auth benchmark: what authenticating and authorizing costs a request.

One Redis and two replicas on loopback: one without custom auth, one serving the custom auth
example (examples/custom_auth: RS256 JWTs against a JWKS file, an ``@auth.on`` owner filter).
Each is driven one request at a time with ``GET /threads/{id}`` (a record read plus the
thread's state) and reported as the median client latency over ``--requests``:

* no custom auth, ``X-API-Key`` (the baseline);
* custom auth on, ``X-API-Key`` (API_KEYS beside it; the owner handler still runs);
* custom auth on, ``Authorization: Bearer <JWT>`` (the example's sync handler on the auth
  threads: RS256 verification, claims, then the owner handler and its filter).

This is a benchmark, not a test: it asserts nothing about time. Every process it starts is
stopped on exit.

    .venv/bin/python scripts/bench_auth.py [--requests 1000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from jwt_issuer import Issuer, example_env  # noqa: E402

from client import API_KEY  # noqa: E402
from servers import RedisServer, ServiceProcess, redis_env  # noqa: E402


def median_ms(url: str, headers: dict[str, str], requests: int) -> float:
    with httpx.Client(base_url=url, headers=headers) as client:
        thread_id = client.post("/threads", json={}).raise_for_status().json()["thread_id"]
        for _ in range(50):  # warm-up (imports, JWKS parse, connection)
            client.get(f"/threads/{thread_id}").raise_for_status()
        took = []
        for _ in range(requests):
            started = time.perf_counter()
            client.get(f"/threads/{thread_id}").raise_for_status()
            took.append(time.perf_counter() - started)
    return statistics.median(took) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    args = parser.parse_args()
    redis = RedisServer().start()
    issuer = Issuer(Path(tempfile.mkdtemp(prefix="bench-auth-")))
    plain = ServiceProcess(redis_env(redis), name="plain").start()
    custom = ServiceProcess({**redis_env(redis), **example_env(str(issuer.jwks_file))}, name="custom").start()
    try:
        rows = [
            ("no custom auth, X-API-Key", plain.url, {"X-API-Key": API_KEY}),
            ("custom auth, X-API-Key", custom.url, {"X-API-Key": API_KEY}),
            ("custom auth, RS256 JWT", custom.url, {"Authorization": f"Bearer {issuer.token('bench')}"}),
        ]
        for name, url, headers in rows:
            print(f"{name:28} GET /threads/{{id}} p50 {median_ms(url, headers, args.requests):6.2f} ms")
    finally:
        plain.kill()
        custom.kill()
        redis.close()


if __name__ == "__main__":
    main()
