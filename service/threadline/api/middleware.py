"""One ASGI middleware for what every response shares: the replica header, HTTP metrics, and
the request-body limits of ADR 0006.

Body limits, in the order they apply:

1. a request that will carry a body to a route that needs credentials is authenticated first,
   from its headers alone: no credentials or bad ones are a 401 before one body byte is read;
2. a ``Content-Length`` above the cap is a 413 before anything is read;
3. the body is counted while it is read (chunked or not): the first chunk past the cap ends the
   request with a 413 at once, as does a body that has not fully arrived within the body
   timeout (408). Either way the connection is closed, so the rest is never read;
4. the whole body is held to the JSON limits (:mod:`threadline.api.json_limits`: nesting
   depth, 64-bit integers) before the route gets its last chunk: a 422 before anything is
   reserved or stored.

The caller found in step 1 is kept in the request scope, so the route's own auth dependency
does not look the session up (or call a custom auth handler) a second time. Each request runs
in :func:`threadline.access.request_scope`: the custom auth filter a route sets lasts as long
as the request, its streamed body included, and no longer.

Every body is read as JSON whatever its ``Content-Type``, as langgraph-api does: agent-chat-ui's
API passthrough labels its JSON ``text/plain``. The label is rewritten before FastAPI sees it,
so such a body is parsed (and validated, and capped) as any other.
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from threadline import access, metrics
from threadline.api import json_limits
from threadline.api.deps import PRINCIPAL_SCOPE_KEY, authenticate
from threadline.api.errors import ApiError, error_response, unavailable
from threadline.checkpoint import is_store_down
from threadline.runtime import Runtime

# Routes that take a body without credentials (the body holds them).
PUBLIC_BODY_PATHS = frozenset({"/v1/sessions"})
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _as_json(scope: Scope) -> None:
    """Label the request's body JSON (every route of this API takes JSON or nothing)."""
    kept = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
    scope["headers"] = [*kept, (b"content-type", b"application/json")]


def _carries_body(scope: Scope, headers: dict[bytes, bytes]) -> bool:
    if scope["method"] not in _BODY_METHODS:
        return False
    if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
        return True
    length = headers.get(b"content-length", b"0")
    return not length.isdigit() or int(length) > 0


class ServiceMiddleware:
    """Replica header, HTTP metrics, auth-before-body and the body cap and deadline.

    Args:
        app: the wrapped app.
        runtime: the replica's runtime (API keys, session store).
        max_body_bytes: bytes a request body may have.
        body_timeout: seconds the whole body has to arrive, counted from the headers.
    """

    def __init__(self, app: ASGIApp, *, runtime: Runtime, max_body_bytes: int, body_timeout: float) -> None:
        self.app = app
        self.runtime = runtime
        self.replica = runtime.replica.encode()
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = 500
        answered = False  # the middleware sent its own response; drop what the app sends after
        headers = dict(scope["headers"])
        has_body = _carries_body(scope, headers)
        if has_body and b"json" not in headers.get(b"content-type", b"application/json").lower():
            _as_json(scope)

        async def send_with_replica(message: Message) -> None:
            nonlocal status
            if answered:
                return
            if message["type"] == "http.response.start":
                status = message["status"]
                sent = list(message.get("headers", []))
                sent.append((b"x-replica", self.replica))
                if has_body and not body_done and all(k.lower() != b"connection" for k, _ in sent):
                    # A route that answers without reading the body: close the connection
                    # rather than let the client go on sending what nobody reads.
                    sent.append((b"connection", b"close"))
                message["headers"] = sent
            await send(message)

        async def refuse(error: ApiError) -> None:
            """Answer ``error`` and close the connection: an unread body stays unread."""
            nonlocal answered
            headers = {**(error.headers or {}), "Connection": "close"}
            response = error_response(error.status, error.code, error.message, headers)
            await response(scope, receive, send_with_replica)
            answered = True

        received = 0
        body_done = False
        chunks: list[bytes] = []  # the body so far (at most max_body_bytes), for the JSON limits
        deadline = started + self.body_timeout

        async def capped_receive() -> Message:
            nonlocal received, body_done
            if answered:
                return {"type": "http.disconnect"}
            if body_done:  # after the body: only http.disconnect (SSE listens), never timed
                return await receive()
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    message = await receive()
            except TimeoutError:
                await refuse(ApiError(408, "body_timeout", "the request body did not arrive in time"))
                return {"type": "http.disconnect"}
            if message["type"] == "http.request":
                chunk = message.get("body", b"")
                received += len(chunk)
                if received > self.max_body_bytes:
                    await refuse(_too_large(self.max_body_bytes))
                    return {"type": "http.disconnect"}
                chunks.append(chunk)
                body_done = not message.get("more_body", False)
                if body_done and (problem := json_limits.problem(b"".join(chunks))):
                    await refuse(ApiError(422, "invalid_request", problem))
                    return {"type": "http.disconnect"}
            return message

        try:
            length = headers.get(b"content-length", b"0")
            if length.isdigit() and int(length) > self.max_body_bytes:
                await refuse(_too_large(self.max_body_bytes))
                return
            if has_body and scope["path"] not in PUBLIC_BODY_PATHS:
                try:
                    scope.setdefault("state", {})[PRINCIPAL_SCOPE_KEY] = await authenticate(
                        self.runtime, scope
                    )
                except ApiError as exc:
                    await refuse(exc)
                    return
                except Exception as exc:
                    if not is_store_down(exc):
                        raise
                    await refuse(unavailable("a store is unreachable; retry shortly"))
                    return
            with access.request_scope():  # the request's custom auth filter, for it alone
                await self.app(scope, capped_receive, send_with_replica)
        finally:
            route = scope.get("route")
            requests, seconds = _http_series(scope["method"], getattr(route, "path", "unmatched"), status)
            requests.inc()
            seconds.observe(time.monotonic() - started)


@functools.cache
def _http_series(method: str, template: str, status: int) -> tuple[Any, Any]:
    """The HTTP metrics' series of a request, looked up once (``labels`` takes a lock each
    call). Bounded: the methods are those uvicorn's parser knows, the templates the routes'."""
    return (
        metrics.HTTP_REQUESTS.labels(method, template, str(status)),
        metrics.HTTP_SECONDS.labels(method, template),
    )


def _too_large(limit: int) -> ApiError:
    return ApiError(413, "content_too_large", f"request body larger than {limit} bytes")
