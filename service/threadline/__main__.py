"""``python -m threadline`` (also the ``threadline`` console script).

threadline serve [--host H] [--port P]   run the service
threadline hash-key [KEY]                print the sha256 hex for API_KEYS (KEY or stdin)
threadline smoke --url URL               two-turn conversation check (THREADLINE_API_KEY),
    [--run-assistant ID --run-input JSON]    then one LangGraph API run
threadline smoke --url URL --no-key      readiness and a 401 without credentials
"""

from __future__ import annotations

import argparse
import os
import sys

from threadline import __version__
from threadline.config import ConfigError

DESCRIPTION = """\
threadline: a self-hosted LangGraph server for your own graphs, durable on Kubernetes. It serves
the LangGraph API (langgraph-sdk, RemoteGraph, agent UIs) and its own /v1 chat API, with state in
a pluggable checkpointer (SQLite, Redis, Postgres, ...)."""
EPILOG = """\
Configuration is read from the environment only (CHECKPOINT_BACKEND, API_KEYS, MODEL,
LANGGRAPH_CONFIG, ...; docs/configuration.md lists every variable); no command-line
option or file sets it, except `serve --host/--port`."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="threadline",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"threadline {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP service (configured by the environment)")
    serve.add_argument("--host", help="listen address (default: HOST, else 0.0.0.0)")
    serve.add_argument("--port", type=int, help="listen port (default: PORT, else 8080)")
    hash_key = sub.add_parser("hash-key", help="print sha256 hex of an API key for API_KEYS")
    hash_key.add_argument("key", nargs="?")
    smoke = sub.add_parser("smoke", help="run a two-turn conversation against a running service")
    smoke.add_argument("--url", required=True)
    smoke.add_argument("--any-model", action="store_true", help="check turn numbers only")
    smoke.add_argument("--no-key", action="store_true", help="no API key: readiness and a 401 only")
    smoke.add_argument("--run-assistant", help="then one LangGraph API run (POST /runs/wait) on this graph")
    smoke.add_argument("--run-input", default="{}", help="the run's input, a JSON object")
    smoke.add_argument("--run-expect", default="", help="a key the run's final values must hold")
    args = parser.parse_args(argv)

    if args.command == "hash-key":
        from threadline.auth import hash_key as digest

        key = args.key if args.key is not None else sys.stdin.readline().strip()
        print(digest(key))
        return 0
    if args.command == "smoke":
        import json

        from threadline.smoke import GraphRun, run_keyless_smoke, run_smoke

        if args.no_key:
            return run_keyless_smoke(args.url)
        graph_run = None
        if args.run_assistant:
            try:
                run_input = json.loads(args.run_input)
            except ValueError:
                run_input = None
            if not isinstance(run_input, dict):
                parser.error("--run-input must be a JSON object")
            graph_run = GraphRun(args.run_assistant, run_input, args.run_expect)
        return run_smoke(args.url, os.environ.get("THREADLINE_API_KEY", ""), args.any_model, graph_run)

    from threadline import logs
    from threadline.config import Settings
    from threadline.server import serve as run_server

    try:
        settings = Settings.load()
    except ConfigError as exc:
        print(f"threadline: configuration error: {exc}", file=sys.stderr)
        return 2
    logs.configure(settings.server.log_level, settings.server.replica_name)
    try:
        run_server(settings, args.host or settings.server.host, args.port or settings.server.port)
    except ConfigError as exc:
        print(f"threadline: configuration error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
