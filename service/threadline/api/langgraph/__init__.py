"""The LangGraph API (what ``langgraph-sdk`` and ``RemoteGraph`` call) at the root paths: one
router per resource; bodies in :mod:`.bodies`; a run's events as SSE (sse-starlette) in
:mod:`.runs`, their stream slots in :mod:`threadline.api.streams`."""

from threadline.api.langgraph import a2a, assistants, crons, mcp, meta, protocol, runs, store, threads

# The runs first: app.py puts them before every other router (route matching, in order).
ROUTERS = (
    runs.router,
    meta.router,
    assistants.router,
    threads.router,
    crons.router,
    protocol.router,
    store.router,
    mcp.router,
    a2a.router,
)

__all__ = ["ROUTERS"]
