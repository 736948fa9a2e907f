"""Liveness, readiness and the Prometheus endpoint."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from threadline.api.deps import RuntimeDep
from threadline.api.errors import RETRY_AFTER_SECONDS, error_response
from threadline.api.openapi import error_responses
from threadline.checkpoint import is_store_down

router = APIRouter(tags=["health"])
# Mounted on the API port only when METRICS_PORT is unset (threadline.server serves it there).
metrics_router = APIRouter(tags=["health"])


@router.get("/livez")
async def livez() -> dict[str, str]:
    """The process runs its event loop. Says nothing about the stores (that is readiness)."""
    return {"status": "ok"}


@router.get("/readyz", responses=error_responses(503))
async def readyz(runtime: RuntimeDep) -> JSONResponse:
    """200 when every store answers and the replica is not draining; else 503."""
    retry = {"Retry-After": str(RETRY_AFTER_SECONDS)}
    if runtime.draining:
        return error_response(503, "draining", "this replica is shutting down", retry)
    if runtime.stores is None:
        return error_response(503, "stores_unavailable", "the stores are not reachable yet", retry)
    try:
        await runtime.stores.ping()
    except Exception as exc:
        if not is_store_down(exc):
            raise
        return error_response(
            503, "stores_unavailable", f"a store did not answer ({type(exc).__name__})", retry
        )
    return JSONResponse({"status": "ready", "replica": runtime.replica})


@metrics_router.get("/metrics", include_in_schema=False)
async def prometheus_metrics() -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
