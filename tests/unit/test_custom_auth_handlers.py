"""Custom auth without a server: filters (threadline.access) and how the handlers of a real
``langgraph_sdk.Auth`` are called (threadline.custom_auth)."""

from __future__ import annotations

import asyncio
import time

import pytest
from langgraph_sdk import Auth

from threadline import access
from threadline.config import ConfigError
from threadline.custom_auth import AuthFailed, Caller, CustomAuth, graph_configurable


@pytest.mark.parametrize(
    ("metadata", "filters", "expected"),
    [
        ({"owner": "a"}, {"owner": "a"}, True),
        ({"owner": "b"}, {"owner": "a"}, False),
        ({}, {"owner": "a"}, False),
        ({"owner": "a"}, {"owner": {"$eq": "a"}}, True),
        ({"owner": None}, {"owner": {"$eq": None}}, True),
        ({"tags": ["x", "y"]}, {"tags": {"$contains": "x"}}, True),
        ({"tags": ["x", "y"]}, {"tags": {"$contains": ["y", "x"]}}, True),
        ({"tags": ["x"]}, {"tags": {"$contains": ["x", "z"]}}, False),
        ({"tags": "x"}, {"tags": {"$contains": "x"}}, False),  # not a list
        ({"a": 1}, {"$or": [{"a": 2}, {"a": 1}]}, True),
        ({"a": 1}, {"$or": [{"a": 2}, {"a": 3}]}, False),
        ({"a": 1, "b": 2}, {"$and": [{"a": 1}, {"b": 2}], "a": 1}, True),
        ({"a": 1, "b": 2}, {"$and": [{"a": 1}, {"b": 3}]}, False),
        ({"a": 1}, None, True),
    ],
)
def test_filters_match_as_langgraph_documents_them(metadata, filters, expected) -> None:
    assert access.matches(metadata, access.validate(filters)) is expected


@pytest.mark.parametrize(
    "bad",
    [["owner"], {"$nor": []}, {"$or": [{"a": 1}]}, {"a": {"$gt": 1}}, {"a": {"$eq": 1, "$contains": 1}},
     {"$or": [{"$or": [{"$or": [{"a": 1}, {"a": 2}]}, {"a": 3}]}, {"a": 4}]}],
)  # fmt: skip
def test_invalid_filters_are_refused(bad) -> None:
    with pytest.raises(access.InvalidFilter):
        access.validate(bad)


def test_filters_of_one_request_combine_and_end_with_it() -> None:
    with access.request_scope():
        access.set_for_request({"a": 1})
        access.set_for_request({"b": 2})
        assert access.current() == {"$and": [{"a": 1}, {"b": 2}]}
    assert access.current() is None


def _auth(result=None, *, sync: bool = False, delay: float = 0.0, raises: Exception | None = None) -> Auth:
    auth = Auth()

    if sync:

        @auth.authenticate
        def authenticate(authorization: str | None, method: str):
            time.sleep(delay)
            if raises:
                raise raises
            return result if result is not None else authorization
    else:

        @auth.authenticate
        async def authenticate(authorization: str | None, method: str):
            await asyncio.sleep(delay)
            if raises:
                raise raises
            return result if result is not None else authorization

    return auth


ARGS = {"authorization": lambda: "tok", "method": lambda: "GET"}


class User:
    def __init__(self) -> None:
        self.identity = "obj"
        self.display_name = "Object"
        self.permissions = ["p"]


@pytest.mark.parametrize(
    ("result", "identity", "permissions"),
    [
        ("alice", "alice", []),
        ({"identity": "bob", "permissions": ["r", "w"], "email": "b@x"}, "bob", ["r", "w"]),
        ((["x"], "carol"), "carol", ["x"]),
        (User(), "obj", ["p"]),
    ],
)
async def test_what_an_authenticate_handler_returns_becomes_the_caller(result, identity, permissions) -> None:
    caller = await CustomAuth(_auth(result), 1).authenticate(ARGS)
    assert caller.identity == identity and caller.permissions == permissions
    assert caller.user.identity == identity and caller.user["identity"] == identity
    configurable = graph_configurable(caller.as_json(), "ignored")
    assert configurable["langgraph_auth_user"].identity == identity
    assert configurable["langgraph_auth_user_id"] == identity
    assert configurable["langgraph_auth_permissions"] == permissions


@pytest.mark.parametrize(
    "result", [42, {"name": "no identity"}, {"identity": ""}, {"identity": "a", "permissions": "rw"}]
)
async def test_no_identity_is_401(result) -> None:
    with pytest.raises(AuthFailed) as refused:
        await CustomAuth(_auth(result), 1).authenticate(ARGS)
    assert refused.value.status == 401


@pytest.mark.parametrize("sync", [False, True])
async def test_handler_errors_are_statuses_without_their_text(sync) -> None:
    with pytest.raises(AuthFailed) as teapot:
        await CustomAuth(_auth(raises=Auth.exceptions.HTTPException(418, "short")), 1).authenticate(ARGS)
    assert (teapot.value.status, teapot.value.message) == (418, "short")
    with pytest.raises(AuthFailed) as boom:
        await CustomAuth(_auth(raises=ValueError("token tok is bad"), sync=sync), 1).authenticate(ARGS)
    assert boom.value.status == 401 and "tok" not in boom.value.message


@pytest.mark.parametrize("sync", [False, True])
async def test_a_slow_handler_is_503_at_the_deadline(sync) -> None:
    custom = CustomAuth(_auth(delay=2.0, sync=sync), 0.05)
    with pytest.raises(AuthFailed) as slow:
        await custom.authenticate(ARGS)
    assert slow.value.status == 503 and slow.value.headers == {"Retry-After": "1"}
    custom.close()


def test_a_handler_asking_for_an_unknown_parameter_stops_startup() -> None:
    auth = Auth()

    @auth.authenticate
    async def authenticate(token: str):
        return token

    with pytest.raises(ConfigError, match="token"):
        CustomAuth(auth, 1)
    with pytest.raises(ConfigError, match="authenticate"):
        CustomAuth(Auth(), 1)


async def test_the_most_specific_resource_handler_decides() -> None:
    auth = _auth("u")
    calls = []

    @auth.on
    async def everything(ctx, value):
        calls.append("global")
        return {"owner": ctx.user.identity}

    @auth.on.threads
    async def threads(ctx, value):
        calls.append("threads")
        value.setdefault("metadata", {})["stamped"] = True

    @auth.on.threads.delete
    async def delete(ctx, value):
        return False

    @auth.on(actions="search")
    async def searches(ctx, value):
        assert ctx.permissions == [], "permissions are the caller's"
        return {"$or": [{"a": 1}, {"b": 2}]}

    @auth.on.assistants.read
    async def bad(ctx, value):
        return ["not", "a", "filter"]

    custom = CustomAuth(auth, 1)
    caller = Caller.of_principal("u")
    value: dict = {"thread_id": "t"}
    assert await custom.authorize(caller, "threads", "read", value) is None
    assert value["metadata"] == {"stamped": True} and calls == ["threads"]
    assert await custom.authorize(caller, "crons", "read", {}) == {"owner": "u"}
    assert await custom.authorize(caller, "assistants", "search", {}) == {"$or": [{"a": 1}, {"b": 2}]}
    for resource, action in (("threads", "delete"), ("assistants", "read")):
        with pytest.raises(AuthFailed) as refused:
            await custom.authorize(caller, resource, action, {})
        assert refused.value.status == 403


def _config(tmp_path, auth: object, module: str | None = None):
    import json

    if module is not None:
        (tmp_path / "mine.py").write_text(module)
    path = tmp_path / "langgraph.json"
    path.write_text(json.dumps({"dependencies": ["."], "graphs": {"g": "pkg.g:graph"}, "auth": auth}))
    return path


def test_the_auth_module_is_imported_relative_to_langgraph_json(tmp_path) -> None:
    from threadline.agent.registry import import_auth

    module = "from langgraph_sdk import Auth\nauth = Auth()\nnot_auth = 1\n"
    assert isinstance(import_auth(_config(tmp_path, {"path": "./mine.py:auth"}, module)), Auth)
    assert import_auth(_config(tmp_path, {"openapi": {}})) is None  # no path: no custom auth
    for auth, says in (
        ({"path": "./mine.py:not_auth"}, "not a langgraph_sdk.Auth"),
        ({"path": "./missing.py:auth"}, "no such file"),
        ({"path": "./mine.py:nope"}, "'nope' is not defined"),
        ({"path": "no-colon"}, "expected"),
    ):
        with pytest.raises(ConfigError, match=r"auth\.path") as refused:
            import_auth(_config(tmp_path, auth, module))
        assert says in str(refused.value)
