"""The routes that start a run read their body and caller themselves (``deps.run_start``)
instead of declaring them as FastAPI parameters. The oracle is FastAPI itself: a route of the
same app declared the old way (thread id and caller dependencies, header parameters, the body
model) must answer every malformed request exactly as the real route does, in the same order
(a body that is no JSON, the thread id, the caller, the body's fields). The real app on SQLite,
in-process."""

from __future__ import annotations

import asyncio
from typing import Annotated

import httpx
import pytest
from fastapi import Depends, Header, Request
from fastapi.responses import Response

from threadline.api.deps import CallerDep, RunsDep, ThreadId
from threadline.api.langgraph.bodies import RunBatch, RunCreate
from threadline.app import create_app
from threadline.config import SessionSettings, Settings

from client import API_KEY, API_KEYS

pytestmark = pytest.mark.unit

JSON = {"content-type": "application/json"}
AUTH = {"x-api-key": API_KEY, **JSON}


async def _declared(
    runs: RunsDep,
    caller: CallerDep,
    authorization: Annotated[str | None, Header()] = None,
    x_api_key: Annotated[str | None, Header()] = None,
) -> None:
    """What the run routes declared before: the runs (503 unless served) and the caller."""


Declared = Annotated[None, Depends(_declared)]


@pytest.fixture
async def http(tmp_path, monkeypatch):
    monkeypatch.setenv("CHECKPOINT_SQLITE_PATH", str(tmp_path / "c.sqlite"))
    settings = Settings.load()
    settings.session = SessionSettings(api_keys=API_KEYS)
    app = create_app(settings)

    @app.post("/oracle/threads/{thread_id}/runs/wait")
    async def on_thread(thread_id: ThreadId, body: RunCreate, _: Declared) -> Response:
        return Response(b"{}")

    @app.post("/oracle/runs/wait")
    async def stateless(body: RunCreate, _: Declared) -> Response:
        return Response(b"{}")

    @app.post("/oracle/runs/batch")
    async def batch(body: RunBatch, _: Declared, request: Request) -> Response:
        return Response(b"{}")

    async with app.router.lifespan_context(app):
        while app.state.runtime.stores is None:
            await asyncio.sleep(0.01)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            yield client


MALFORMED = [
    pytest.param(b'{"assistant_id":', AUTH, id="not-json"),
    pytest.param(b"\xff\xfe\x00{", AUTH, id="not-utf8"),
    pytest.param(b"", AUTH, id="empty"),
    pytest.param(b"", JSON, id="empty-no-credentials"),
    pytest.param(b'{"assistant_id": "chat"}', {"x-api-key": "wrong", **JSON}, id="bad-key"),
    pytest.param(b"[]", AUTH, id="a-list"),
    pytest.param(b'{"assistant_id": 5}', AUTH, id="wrong-type"),
    pytest.param(b'{"assistant_id": "chat", "multitask_strategy": "nope"}', AUTH, id="bad-strategy"),
    pytest.param(b'{"assistant_id": "chat", "after_seconds": -1}', AUTH, id="negative-delay"),
    pytest.param(b'{"assistant_id": "chat", "stream_mode": ["nope"]}', AUTH, id="bad-mode"),
]


def _answer(response: httpx.Response) -> tuple[int, object]:
    return response.status_code, response.json()


@pytest.mark.parametrize("body, headers", MALFORMED)
@pytest.mark.parametrize("thread_id", ["t-1", "not a thread id!"])
async def test_a_run_on_a_thread_is_refused_as_fastapi_refused_it(http, body, headers, thread_id):
    path = f"/threads/{thread_id}/runs/wait"
    real = await http.post(path, content=body, headers=headers)
    oracle = await http.post(f"/oracle{path}", content=body, headers=headers)
    assert oracle.status_code != 200
    assert _answer(real) == _answer(oracle)


@pytest.mark.parametrize("body, headers", MALFORMED)
async def test_a_stateless_run_is_refused_as_fastapi_refused_it(http, body, headers):
    real = await http.post("/runs/wait", content=body, headers=headers)
    oracle = await http.post("/oracle/runs/wait", content=body, headers=headers)
    assert oracle.status_code != 200
    assert _answer(real) == _answer(oracle)


@pytest.mark.parametrize(
    "body", [b"[]", b"{}", b'[{"assistant_id": 5}]', b'[{"assistant_id": "chat"}, {"surprise": 1}]']
)
async def test_a_batch_is_refused_as_fastapi_refused_it(http, body):
    real = await http.post("/runs/batch", content=body, headers=AUTH)
    oracle = await http.post("/oracle/runs/batch", content=body, headers=AUTH)
    assert oracle.status_code == 422
    assert _answer(real) == _answer(oracle)


WELL_FORMED = b'{"assistant_id": "chat", "input": {"messages": [{"role": "user", "content": "hi"}]}}'


async def test_a_well_formed_run_gets_past_the_checks(http):
    assert (
        await http.post("/oracle/threads/t-1/runs/wait", content=WELL_FORMED, headers=AUTH)
    ).status_code == 200
    missing = await http.post("/threads/t-1/runs/wait", content=WELL_FORMED, headers=AUTH)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "thread_not_found"


async def test_a_body_without_a_content_type_is_read_as_json(http):
    """Where the run routes differ from FastAPI on purpose: every body is JSON (the middleware's
    rule, as langgraph-api reads them); FastAPI took one without a Content-Type for bytes."""
    headers = {"x-api-key": API_KEY}
    assert (await http.post("/oracle/runs/wait", content=WELL_FORMED, headers=headers)).status_code == 422
    answered = await http.post("/runs/wait", content=WELL_FORMED, headers=headers)
    assert answered.status_code == 200, answered.text
