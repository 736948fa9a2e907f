"""uvicorn with a drain and connection limits.

Drain: SIGTERM turns readiness 503 at once, lets in-flight turns and streams finish for up to
``DRAIN_SECONDS``, then shuts down. A second signal exits at once.

Limits (ADR 0006): at most ``HTTP_MAX_CONNECTIONS`` open connections (uvicorn answers 503 past
it); a connection must deliver its request line and headers within
``HTTP_HEADER_TIMEOUT_SECONDS`` and ``HTTP_MAX_HEADER_BYTES`` (uvicorn has no such limit with
httptools: an idle socket or a header sent a byte at a time stayed open indefinitely); idle
keep-alive connections close after ``HTTP_KEEPALIVE_SECONDS``. Body limits are the app's
(:mod:`threadline.api.middleware`).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from types import FrameType

import prometheus_client
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from threadline.app import create_app
from threadline.config import Settings

log = logging.getLogger(__name__)


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, settings: Settings) -> None:
        super().__init__(config)
        self.settings = settings
        self.loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets=None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        runtime = self.config.app.state.runtime if hasattr(self.config.app, "state") else None
        if sig != signal.SIGTERM or runtime is None or runtime.draining or self.loop is None:
            super().handle_exit(sig, frame)
            return
        runtime.draining = True
        log.info("draining", extra={"drain_seconds": self.settings.server.drain_seconds})
        self.loop.call_soon_threadsafe(self.loop.create_task, self._drain_then_exit(sig, frame))

    async def _drain_then_exit(self, sig: int, frame: FrameType | None) -> None:
        await self.config.app.state.runtime.drain(self.settings.server.drain_seconds)
        super().handle_exit(sig, frame)


class HeaderLimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline and a byte cap on each request's headers.

    The deadline runs from the connection's start for its first request, and from the first
    bytes of each later one, until that request's headers are complete; the bytes counted are
    those that arrived before. Between a response and the next request's first bytes the idle
    connection is uvicorn's keep-alive timeout's (``HTTP_KEEPALIVE_SECONDS``): had the deadline
    run from the response, it would cut an idle connection with an unsolicited 408 at
    ``HTTP_HEADER_TIMEOUT_SECONDS`` however long the keep-alive, and a proxy reusing it then
    would get that 408 as the answer to its request.
    """

    header_timeout: float = 10.0
    max_header_bytes: int = 64 * 1024

    _TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
    _TOO_LARGE = (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
    )

    def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def, override]
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._await_headers()
        self._start_header_timer()

    def _await_headers(self) -> None:
        self._awaiting_headers = True
        self._header_bytes = 0

    def _start_header_timer(self) -> None:
        self._header_timer = self.loop.call_later(self.header_timeout, self._refuse, self._TIMED_OUT)

    def _stop_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _refuse(self, response: bytes) -> None:
        self._stop_header_timer()
        if self._awaiting_headers and not self.transport.is_closing():
            self.transport.write(response)
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        awaiting = self._awaiting_headers
        if awaiting and self._header_timer is None:  # a kept-alive connection's next request
            self._start_header_timer()
        super().data_received(data)
        if awaiting and self._awaiting_headers:  # this chunk did not complete the headers
            self._header_bytes += len(data)
            if self._header_bytes > self.max_header_bytes:
                self._refuse(self._TOO_LARGE)

    def on_headers_complete(self) -> None:
        self._awaiting_headers = False
        self._stop_header_timer()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)  # its headers are in: super() starts it
        super().on_response_complete()
        if not pipelined and not self.transport.is_closing():
            self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_timer()
        super().connection_lost(exc)


def uvicorn_config(app, settings: Settings, host: str, port: int) -> uvicorn.Config:  # type: ignore[no-untyped-def]
    """The uvicorn configuration of the service: its limits come from ``settings.server``."""
    server = settings.server
    protocol = type(
        "HeaderLimitedProtocol",
        (HeaderLimitedProtocol,),
        {
            "header_timeout": server.http_header_timeout_seconds,
            "max_header_bytes": server.http_max_header_bytes,
        },
    )
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol,
        log_config=None,  # threadline.logs configured the loggers
        # A backstop after our own drain: streams still open by then are closed.
        timeout_graceful_shutdown=max(1, int(server.drain_seconds)),
        timeout_keep_alive=server.http_keepalive_seconds,
        limit_concurrency=server.http_max_connections,
    )


# Objects allocated since the last collection that trigger the next one (CPython's default is
# 700). A run allocates thousands of short-lived containers, and at concurrency 32 the young
# generation's survivors are the runs in flight, which every collection walks again: with the
# default, collections cost ~0.5 ms of CPU per LangGraph API run (8 % at concurrency 32 in
# `make bench-api`); with 10,000, 146 µs; with 50,000, 10 µs (`scripts/profile_run.py`, 1,920
# runs, one collection of ~25 ms every ~1,000 runs). Cyclic garbage waits longer to be freed:
# ~25,000 objects found per collection, +7 MB of peak RSS at concurrency 32.
GC_YOUNG_THRESHOLD = 50_000


def settle_the_heap() -> None:
    """Once start-up is done: move what it allocated (modules, the graphs; ~150,000 objects)
    out of the collector's sight, since it lives as long as the process, and collect the young
    generation less often (:data:`GC_YOUNG_THRESHOLD`)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def serve(settings: Settings, host: str, port: int) -> None:
    app = create_app(settings)
    settle_the_heap()
    if settings.server.metrics_port is not None:
        # Its own port, so the API port (and an Ingress routing `/` to it) never exposes it.
        prometheus_client.start_http_server(settings.server.metrics_port, addr=host)
        log.info("metrics served", extra={"port": settings.server.metrics_port})
    try:
        DrainingServer(uvicorn_config(app, settings, host, port), settings).run()
    except KeyboardInterrupt:  # the stop of threadline.app when opening the stores failed
        if app.state.runtime.fatal is None:
            raise
    if (fatal := app.state.runtime.fatal) is not None:  # a misconfiguration found opening them
        raise fatal
