"""uvicorn with a drain: SIGTERM turns readiness 503 at once, lets in-flight turns and streams
finish for up to ``DRAIN_SECONDS``, then shuts down. A second signal exits at once."""

from __future__ import annotations

import asyncio
import logging
import signal
from types import FrameType

import uvicorn

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


def serve(settings: Settings, host: str, port: int) -> None:
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,  # threadline.logs configured the loggers
        # A backstop after our own drain: streams still open by then are closed.
        timeout_graceful_shutdown=max(1, int(settings.server.drain_seconds)),
        timeout_keep_alive=5,
    )
    DrainingServer(config, settings).run()
