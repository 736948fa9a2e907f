#!/usr/bin/env python3
"""Run the continuity driver against running threadline endpoints and print the verdict.

    scripts/chaos.py --url http://127.0.0.1:8080 --url http://127.0.0.1:8081 \
        --api-key "$KEY" --conversations 8 --turns 20

Requests go round robin over the URLs (like a Service); every message is retried with the same
id on failure. At the end every thread is read back and judged (tests/chaos/driver.py): the
summary line is printed, the problems too, and the exit status is 1 on any lost, duplicated,
forked or stale turn. Kill or restart replicas by hand meanwhile to see what survives.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from chaos.driver import Driver, DriverConfig, Endpoints


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", action="append", required=True, help="base URL (repeat for several)")
    parser.add_argument(
        "--api-key",
        default=os.environ.get("THREADLINE_API_KEY", ""),
        help="raw API key ($THREADLINE_API_KEY)",
    )
    parser.add_argument("--conversations", type=int, default=4)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--header-timeout", type=float, default=10.0, help="> the server's lease wait")
    parser.add_argument("--stall-timeout", type=float, default=5.0, help="longest silence inside a stream")
    parser.add_argument("--turn-deadline", type=float, default=120.0, help="give a message up after this")
    parser.add_argument("--think", type=float, default=0.0, help="max seconds between turns")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    if not args.api_key:
        parser.error("--api-key or THREADLINE_API_KEY is required")

    config = DriverConfig(
        conversations=args.conversations,
        turns=args.turns,
        api_key=args.api_key,
        header_timeout=args.header_timeout,
        stall_timeout=args.stall_timeout,
        turn_deadline=args.turn_deadline,
        think=(0.0, args.think),
        seed=args.seed,
    )
    driver = Driver(Endpoints(args.url), config, log=lambda m: print(m, file=sys.stderr))

    async def run():
        await driver.run()
        return driver.verdict(await driver.read_back(args.url))

    verdict = asyncio.run(run())
    for problem in verdict.problems:
        print(problem, file=sys.stderr)
    print(verdict.summary())
    return 0 if verdict.ok and verdict.server_errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
