"""The LangGraph API (what ``langgraph-sdk`` and ``RemoteGraph`` call) at the root paths: one
router per resource; bodies in :mod:`.bodies`; SSE in :mod:`.sse`."""

from threadline.api.langgraph import assistants, meta, protocol, runs, threads

ROUTERS = (meta.router, assistants.router, threads.router, runs.router, protocol.router, meta.unserved)

__all__ = ["ROUTERS"]
