"""``/ok`` and ``/info`` (no credentials, as langgraph-api), and a clear 404 for the cron
endpoints, which threadline does not serve yet."""

from __future__ import annotations

import langgraph.version
from fastapi import APIRouter

from threadline import __version__
from threadline.api.errors import ApiError

router = APIRouter(tags=["meta"])
unserved = APIRouter(tags=["meta"], include_in_schema=False)


@router.get("/ok")
async def ok() -> dict[str, bool]:
    return {"ok": True}


@router.get("/info")
async def info() -> dict:
    return {
        "version": __version__,
        "server": "threadline",
        "langgraph_py_version": langgraph.version.__version__,
        "flags": {"assistants": True, "crons": False, "langsmith": False, "store": True},
    }


def _unserved(what: str):
    async def endpoint() -> None:
        raise ApiError(404, "not_served", f"the {what} endpoints are not served by threadline")

    return endpoint


_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
unserved.add_api_route("/runs/crons", _unserved("cron"), methods=_METHODS)
unserved.add_api_route("/runs/crons/{rest:path}", _unserved("cron"), methods=_METHODS)
unserved.add_api_route("/threads/{thread_id}/runs/crons", _unserved("cron"), methods=_METHODS)
