"""One ASGI middleware for what every response shares: the replica header, HTTP metrics and
a cap on request bodies (checked on Content-Length before anything is read)."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from threadline import metrics
from threadline.api.errors import error_response


class ServiceMiddleware:
    def __init__(self, app: ASGIApp, *, replica: str, max_body_bytes: int) -> None:
        self.app = app
        self.replica = replica.encode()
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = 500

        async def send_with_replica(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-replica", self.replica)]
            await send(message)

        try:
            length = dict(scope["headers"]).get(b"content-length", b"0")
            if length.isdigit() and int(length) > self.max_body_bytes:
                response = error_response(413, "content_too_large", "request body too large")
                await response(scope, receive, send_with_replica)
                return
            await self.app(scope, receive, send_with_replica)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", "unmatched")
            metrics.HTTP_REQUESTS.labels(scope["method"], template, str(status)).inc()
            metrics.HTTP_SECONDS.labels(scope["method"], template).observe(time.monotonic() - started)
