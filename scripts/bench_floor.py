"""The yardsticks ``make bench-api`` holds threadline against: a graph of a ``langgraph.json``
under FastAPI, each run one ``graph.ainvoke`` on a checkpointer, and nothing else — no thread
or run records, events, leases, queues, quotas or auth.

Every graph of the ``langgraph.json`` is served, by its id as the assistant id.

* ``--saver memory``: LangGraph's ``InMemorySaver``, the **floor** (what any server of the
  LangGraph API costs at least: HTTP, the graph, its checkpoints in the process);
* ``--saver redis-stack``: ``langgraph-checkpoint-redis``'s ``AsyncRedisSaver`` on Redis with
  RedisJSON and RediSearch (``--redis-url``), the **seed design** this project started from:
  durable checkpoints, nothing around them.

It serves the part of the LangGraph API the benchmark drives (``langgraph-sdk``'s
``threads.create`` and ``runs.wait``): ``POST /threads``, ``POST /threads/{id}/runs/wait``,
``POST /runs/wait`` (a thread of its own), ``GET /ok``. A run's answer is its final values as
JSON, messages by their ``model_dump``, as langgraph-api answers. A run's ``durability`` goes to
``ainvoke`` (none: LangGraph's default, ``"async"``, as on langgraph-api).

    python scripts/bench_floor.py --config langgraph.json --port 8123 [--saver memory]
        [--redis-url redis://127.0.0.1:6379/0]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response


def load_graphs(config: Path) -> dict[str, Any]:
    """The graphs of a ``langgraph.json`` (``"./file.py:attr"``, relative to it), by id."""
    graphs = {}
    for graph_id, where in json.loads(config.read_text())["graphs"].items():
        path, _, attr = where.partition(":")
        file = (config.parent / path).resolve()
        module_spec = importlib.util.spec_from_file_location(f"bench_graph_{graph_id}", file)
        assert module_spec is not None and module_spec.loader is not None
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        graphs[graph_id] = getattr(module, attr or "graph")
    return graphs


JSON = "application/json"


def _default(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump()
    return repr(obj)


def dumps(value: Any) -> bytes:
    return orjson.dumps(value, default=_default, option=orjson.OPT_NON_STR_KEYS)


@contextlib.asynccontextmanager
async def open_saver(kind: str, redis_url: str | None) -> AsyncIterator[Any]:
    if kind == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        yield InMemorySaver()
        return
    from langgraph.checkpoint.redis.aio import AsyncRedisSaver

    async with AsyncRedisSaver.from_conn_string(redis_url, ttl={"default_ttl": 60}) as saver:
        await saver.asetup()
        yield saver


def create_app(config: Path, kind: str, redis_url: str | None) -> FastAPI:
    graphs = load_graphs(config)
    served: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with open_saver(kind, redis_url) as saver:
            served.update({name: g.copy(update={"checkpointer": saver}) for name, g in graphs.items()})
            yield

    app = FastAPI(lifespan=lifespan)

    @app.get("/ok")
    async def ok() -> dict[str, bool]:
        return {"ok": True}

    @app.post("/threads")
    async def create_thread(request: Request) -> Response:
        thread_id = str(uuid.uuid4())
        return Response(dumps({"thread_id": thread_id, "metadata": {}, "status": "idle"}), media_type=JSON)

    async def run(thread_id: str, request: Request) -> Response:
        body = orjson.loads(await request.body())
        graph = served.get(body.get("assistant_id"))
        if graph is None:
            return Response(b'{"detail":"no such assistant"}', status_code=404, media_type=JSON)
        config = {"configurable": {"thread_id": thread_id}}
        values = await graph.ainvoke(body.get("input"), config, durability=body.get("durability"))
        return Response(dumps(values), media_type=JSON)

    @app.post("/threads/{thread_id}/runs/wait")
    async def wait(thread_id: str, request: Request) -> Response:
        return await run(thread_id, request)

    @app.post("/runs/wait")
    async def wait_stateless(request: Request) -> Response:
        return await run(str(uuid.uuid4()), request)

    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, required=True, help="a langgraph.json")
    parser.add_argument("--saver", choices=("memory", "redis-stack"), default="memory")
    parser.add_argument("--redis-url", help="with --saver redis-stack")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    app = create_app(args.config.resolve(), args.saver, args.redis_url)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
