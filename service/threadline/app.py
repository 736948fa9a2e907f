"""The app factory and its lifespan.

Start order: model (at build time, so a bad ``MODEL`` stops start-up) → stores (retried in
the background until they answer; the app is up but not ready meanwhile) → graph. Stop order
is the reverse. Draining (SIGTERM) is driven by :mod:`threadline.server`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from threadline import __version__
from threadline.api import errors, health, openapi, sessions, threads
from threadline.api.cors import cors_options
from threadline.api.langgraph import ROUTERS as LANGGRAPH_ROUTERS
from threadline.api.middleware import ServiceMiddleware
from threadline.config import ConfigError, Settings
from threadline.runtime import Runtime

log = logging.getLogger(__name__)


def _stop_on_failure(runtime: Runtime) -> Callable[[asyncio.Task], None]:
    """A store that is down is retried; anything else opening the stores is a bug or a
    misconfiguration (a store that cannot give what ``langgraph.json`` asks): say so and stop,
    rather than sit not-ready forever. A ConfigError is kept as ``runtime.fatal``, for the
    command line to report as one and exit 2."""

    def stop(task: asyncio.Task) -> None:
        if task.cancelled() or (exc := task.exception()) is None:
            return
        if isinstance(exc, ConfigError):
            runtime.fatal = exc
            log.critical("configuration error: %s", exc)
        else:
            log.critical("cannot open the stores", exc_info=exc)
        os.kill(os.getpid(), signal.SIGINT)

    return stop


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app. With no settings, reads the environment (``ConfigError`` on mistakes)."""
    runtime = Runtime(settings or Settings.load())

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            connector = asyncio.create_task(runtime.connect(stack), name="open-stores")
            connector.add_done_callback(_stop_on_failure(runtime))
            try:
                yield
            finally:
                connector.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await connector
                if runtime.custom_auth is not None:
                    runtime.custom_auth.close()  # queued sync auth calls are dropped

    server = runtime.settings.server
    docs = {} if server.docs_enabled else {"docs_url": None, "redoc_url": None, "openapi_url": None}
    app = FastAPI(
        title="threadline",
        version=__version__,
        summary="LangGraph conversations whose state survives anything",
        lifespan=lifespan,
        **docs,
    )
    app.state.runtime = runtime
    errors.install(app, runtime.settings.checkpoint.backend)
    openapi.install(app)
    # A request tries the routers in order (~10 µs each): the LangGraph runs first, then /v1's
    # turns, as most requests are one or the other.
    runs_router, *langgraph_routers = LANGGRAPH_ROUTERS
    for router in (runs_router, threads.router, sessions.router, *langgraph_routers, health.router):
        app.include_router(router)
    if server.metrics_port is None:
        app.include_router(health.metrics_router)
    app.add_middleware(
        ServiceMiddleware,
        runtime=runtime,
        max_body_bytes=4 * server.max_message_bytes + 4096,
        body_timeout=server.http_body_timeout_seconds,
    )
    # Outermost, so preflights are answered before auth and every answer (a 401, a 413 from
    # the layer above) carries the CORS headers a browser needs to read it.
    deployment = runtime.deployment
    cors = cors_options(server.cors_allow_origins, deployment.cors if deployment else None)
    if cors is not None:
        app.add_middleware(CORSMiddleware, **cors)
    return app
