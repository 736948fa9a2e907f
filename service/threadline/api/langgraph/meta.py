"""``/ok`` and ``/info`` (no credentials, as langgraph-api)."""

from __future__ import annotations

import langgraph.version
from fastapi import APIRouter

from threadline import __version__

router = APIRouter(tags=["meta"])


@router.get("/ok")
async def ok() -> dict[str, bool]:
    return {"ok": True}


@router.get("/info")
async def info() -> dict:
    return {
        "version": __version__,
        "server": "threadline",
        "langgraph_py_version": langgraph.version.__version__,
        "flags": {"assistants": True, "crons": True, "langsmith": False, "store": True},
    }
