"""The service middleware in-process (an ASGI app behind it, no server): credentials before
any body byte, the body cap while reading, the replica header. Over real sockets (chunked
300 MB bodies, slow clients): tests/integration/test_limits.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from threadline.api.middleware import ServiceMiddleware
from threadline.config import ServerSettings, SessionSettings, Settings
from threadline.runtime import Runtime

from client import API_KEY, API_KEYS

pytestmark = pytest.mark.unit

CAP = 1000


@pytest.fixture
def app_and_reads(tmp_path, monkeypatch):
    monkeypatch.setenv("CHECKPOINT_SQLITE_PATH", str(tmp_path / "c.sqlite"))
    settings = Settings.load()
    settings.session = SessionSettings(api_keys=API_KEYS)
    settings.server = ServerSettings(replica_name="unit-replica")
    reads: list[int | str] = []

    async def echo(request: Request) -> JSONResponse:
        try:
            body = await request.body()
        except ClientDisconnect:  # what a route sees once the middleware has refused the body
            reads.append("disconnect")
            return JSONResponse({}, 499)
        reads.append(len(body))
        return JSONResponse({"bytes": len(body)})

    inner = Starlette(routes=[Route("/v1/threads", echo, methods=["POST"])])
    app = ServiceMiddleware(inner, runtime=Runtime(settings), max_body_bytes=CAP, body_timeout=5)
    return app, reads


async def chunks(total: int, size: int = 100) -> AsyncIterator[bytes]:
    for _ in range(total // size):
        yield b"x" * size


async def post(app, **kwargs) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        return await http.post("/v1/threads", **kwargs)


async def test_a_body_within_the_cap_reaches_the_route_with_the_replica_header(app_and_reads):
    app, reads = app_and_reads
    response = await post(app, content=b"x" * CAP, headers={"x-api-key": API_KEY})
    assert response.status_code == 200 and response.json() == {"bytes": CAP}
    assert response.headers["x-replica"] == "unit-replica"
    assert reads == [CAP]


async def test_no_credentials_no_body_read(app_and_reads):
    app, reads = app_and_reads
    response = await post(app, content=chunks(100_000))
    assert response.status_code == 401 and response.json()["error"]["code"] == "unauthenticated"
    assert reads == []


async def test_a_chunked_body_past_the_cap_is_413_while_read(app_and_reads):
    app, reads = app_and_reads
    response = await post(app, content=chunks(100_000), headers={"x-api-key": API_KEY})
    assert response.status_code == 413 and response.json()["error"]["code"] == "content_too_large"
    assert reads == ["disconnect"]  # the route never saw a byte past the cap


async def test_a_declared_length_past_the_cap_is_413(app_and_reads):
    app, reads = app_and_reads
    response = await post(app, content=b"x" * (CAP + 1), headers={"x-api-key": API_KEY})
    assert response.status_code == 413
    assert reads == []


async def test_a_text_plain_body_is_relabelled_json_and_still_capped(app_and_reads):
    # agent-chat-ui's passthrough labels its JSON text/plain; the route sees application/json,
    # and the cap applies as to any body (issue 19).
    app, reads = app_and_reads
    seen: list[str] = []
    plain = {"x-api-key": API_KEY, "content-type": "text/plain;charset=UTF-8"}
    ok = await post(app, content=b'{"a": 1}', headers=plain)
    assert ok.status_code == 200 and reads == [8]
    wrapped = ServiceMiddleware(
        _LabelSpy(app.app, seen), runtime=app.runtime, max_body_bytes=CAP, body_timeout=5
    )
    await post(wrapped, content=b"{}", headers=plain)
    assert seen == ["application/json"]
    too_big = await post(app, content=chunks(100_000), headers=plain)
    assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "content_too_large"


class _LabelSpy:
    """The app behind the middleware, noting the Content-Type it is handed."""

    def __init__(self, app, seen: list[str]) -> None:
        self.app, self.seen = app, seen

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            self.seen.append(dict(scope["headers"]).get(b"content-type", b"").decode())
        await self.app(scope, receive, send)
