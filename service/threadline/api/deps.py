"""Dependencies shared by the routers, as ``Annotated`` aliases.

All are ``async def``, even those that never await: FastAPI runs a plain ``def`` dependency in
a worker thread, a hop per dependency per request.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar

from fastapi import Depends, Header, HTTPException, Path, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.datastructures import QueryParams
from starlette.types import Scope

from threadline import access
from threadline.api.errors import ApiError, unavailable
from threadline.custom_auth import AuthFailed, Caller, CustomAuth
from threadline.runs.assistants import Assistants
from threadline.runs.crons import Crons
from threadline.runs.records import ID_PATTERN
from threadline.runs.runs import Runs
from threadline.runs.thread_upkeep import ThreadUpkeep
from threadline.runs.threads import Threads
from threadline.runtime import Runtime
from threadline.sessions import SessionStore
from threadline.store.tenant import TenantStore
from threadline.turns import Conversations

# A malformed thread id is 400 on /v1 (the brief) and 422 on the LangGraph routes (the spec's
# status for a bad path parameter).
THREAD_ID = re.compile(ID_PATTERN)

B = TypeVar("B", bound=BaseModel)


async def get_runtime(request: Request) -> Runtime:
    return request.app.state.runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


async def get_conversations(runtime: RuntimeDep) -> Conversations:
    if runtime.draining:
        raise unavailable("this replica is draining; retry")
    if runtime.conversations is None:
        raise unavailable("the stores are not reachable yet; retry shortly")
    return runtime.conversations


async def _ready(runtime: Runtime) -> Runtime:
    if runtime.draining:
        raise unavailable("this replica is draining; retry")
    if runtime.stores is None:
        raise unavailable("the stores are not reachable yet; retry shortly")
    return runtime


async def get_assistants(runtime: RuntimeDep) -> Assistants:
    return (await _ready(runtime)).assistants  # type: ignore[return-value]


async def get_threads(runtime: RuntimeDep) -> Threads:
    return (await _ready(runtime)).threads  # type: ignore[return-value]


async def get_thread_upkeep(runtime: RuntimeDep) -> ThreadUpkeep:
    return (await _ready(runtime)).thread_upkeep  # type: ignore[return-value]


async def get_runs(runtime: RuntimeDep) -> Runs:
    return (await _ready(runtime)).runs  # type: ignore[return-value]


async def get_crons(runtime: RuntimeDep) -> Crons:
    return (await _ready(runtime)).crons  # type: ignore[return-value]


AssistantsDep = Annotated[Assistants, Depends(get_assistants)]
CronsDep = Annotated[Crons, Depends(get_crons)]
ThreadsDep = Annotated[Threads, Depends(get_threads)]
ThreadUpkeepDep = Annotated[ThreadUpkeep, Depends(get_thread_upkeep)]
RunsDep = Annotated[Runs, Depends(get_runs)]


async def get_sessions(runtime: RuntimeDep) -> SessionStore:
    if runtime.stores is None:
        raise unavailable("the session store is not reachable yet; retry shortly")
    return runtime.stores.sessions


ConversationsDep = Annotated[Conversations, Depends(get_conversations)]
SessionsDep = Annotated[SessionStore, Depends(get_sessions)]


# Where the middleware leaves the caller it authenticated before reading the body.
PRINCIPAL_SCOPE_KEY = "threadline.principal"


def unauthenticated(message: str) -> ApiError:
    return ApiError(401, "unauthenticated", message, {"WWW-Authenticate": "Bearer"})


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if authorization and authorization[:7].lower() == "bearer ":
        return authorization[7:].strip()
    return None


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1") or None
    return None


async def authenticate(runtime: Runtime, scope: Scope) -> Caller:
    """The caller of the request ``scope``: with custom auth (``auth`` in ``langgraph.json``),
    its authenticate handler decides (an ``X-API-Key`` goes to ``API_KEYS`` when that is set
    too); without it, ``X-API-Key`` or a session's ``Authorization: Bearer`` token.

    Raises:
        ApiError: 401 without credentials or with bad ones; the handler's own status; 503 while
            the session store is not open or past ``AUTH_TIMEOUT_SECONDS``. Store errors are
            raised as they come.
    """
    x_api_key = _header(scope, b"x-api-key")
    if runtime.custom_auth is not None and not (x_api_key and runtime.api_keys.configured):
        return await _custom(runtime.custom_auth, scope)
    authorization = _header(scope, b"authorization")
    if x_api_key:
        principal = runtime.api_keys.principal(x_api_key)
    elif (token := bearer_token(authorization)) is not None:
        session = await (await get_sessions(runtime)).lookup(token)
        # The key that minted the session must still be configured, for the same principal:
        # removing a key from API_KEYS revokes its sessions.
        valid = session is not None and runtime.api_keys.owner(session.key_digest) == session.principal
        principal = session.principal if valid else None
    else:
        raise unauthenticated("send X-API-Key or Authorization: Bearer <session token>")
    if principal is None:
        raise unauthenticated("unknown API key or expired session")
    return Caller.of_principal(principal)


async def _custom(custom: CustomAuth, scope: Scope) -> Caller:
    """The handler's verdict on ``scope``, given the parameters langgraph-api gives it."""
    arguments = {
        "request": lambda: Request(scope),
        "authorization": lambda: _header(scope, b"authorization"),
        "headers": lambda: dict(scope.get("headers", ())),
        "path": lambda: scope["path"],
        "method": lambda: scope["method"],
        "query_params": lambda: QueryParams(scope.get("query_string", b"")),
        "scope": lambda: scope,
        "scopes": list,
        "path_params": dict,
    }
    try:
        return await custom.authenticate(arguments)
    except AuthFailed as exc:
        raise auth_error(exc) from None


def auth_error(exc: AuthFailed) -> ApiError:
    """The API's answer to a refusal of the custom auth handlers (a status that is not an
    error status, from an ``HTTPException(200)`` say, is a 401: the request is not let through)."""
    if exc.status == 401 or not 400 <= exc.status <= 599:
        return ApiError(
            401, "unauthenticated", exc.message, {"WWW-Authenticate": "Bearer", **(exc.headers or {})}
        )
    code = {403: "forbidden", 404: "not_found", 503: "unavailable"}.get(exc.status, "auth_refused")
    return ApiError(exc.status, code, exc.message, exc.headers)


async def get_caller(
    request: Request,
    runtime: RuntimeDep,
    # Read from the scope by authenticate(); declared so the OpenAPI document says which
    # operations need credentials (threadline.api.openapi answers them 401).
    authorization: Annotated[str | None, Header()] = None,
    x_api_key: Annotated[str | None, Header()] = None,
) -> Caller:
    """The caller; already known when the middleware authenticated it before the body."""
    known = request.scope.get("state", {}).get(PRINCIPAL_SCOPE_KEY)
    if known is not None:
        return known
    return await authenticate(runtime, request.scope)


CallerDep = Annotated[Caller, Depends(get_caller)]


async def get_principal(caller: CallerDep) -> str:
    """The caller's identity: the principal that owns threads and runs and takes quotas."""
    return caller.identity


Principal = Annotated[str, Depends(get_principal)]


async def get_store(runtime: RuntimeDep, principal: Principal) -> TenantStore:
    """The caller's view of the store (:mod:`threadline.store.tenant`)."""
    return (await _ready(runtime)).tenancy.of(principal)  # type: ignore[union-attr]


StoreDep = Annotated[TenantStore, Depends(get_store)]


class Authorizer:
    """The request's custom auth resource handlers (a no-op without custom auth).

    ``await authorize("threads", "read", {"thread_id": …})`` runs the handler for the action
    on the value (which it may change) and makes the filter it returns the request's filter
    (:mod:`threadline.access`), applied by the record stores to whatever the request reads.
    """

    def __init__(self, custom: CustomAuth | None, caller: Caller) -> None:
        self.custom = custom
        self.caller = caller

    async def __call__(self, resource: str, action: str, value: dict[str, Any]) -> dict[str, Any]:
        """Threads, runs, assistants: the value, and the filter set for the request's reads."""
        access.set_for_request(await self.check(resource, action, value))
        return value

    async def check(self, resource: str, action: str, value: dict[str, Any]) -> access.Filters | None:
        """Run the handler for ``(resource, action)`` on ``value`` (changed in place) and return
        its filter, without making it the request's: for the store (``/store/*``), whose
        caller applies the filter to the items it reads (``access.matches`` on their values).

        Raises:
            ApiError: the handler refused (403, or its own status) or timed out (503).
        """
        if self.custom is None:
            return None
        try:
            return await self.custom.authorize(self.caller, resource, action, value)
        except AuthFailed as exc:
            raise auth_error(exc) from None


async def get_authorizer(runtime: RuntimeDep, caller: CallerDep) -> Authorizer:
    return Authorizer(runtime.custom_auth, caller)


Authorize = Annotated[Authorizer, Depends(get_authorizer)]


@dataclass(frozen=True, slots=True)
class RunStart(Generic[B]):
    """What a route that starts a run needs, read by the route itself (:func:`run_start`)
    instead of declared as FastAPI parameters: these routes carry most of the traffic, and
    FastAPI solving their parameters (a thread id and a caller dependency, two headers, the
    body model) cost ~48 µs more per run (91 against 43 µs on an app of the same shape,
    measured). Their OpenAPI entries are declared with :func:`openapi.read_by_route`."""

    runs: Runs
    runtime: Runtime
    caller: Caller
    authorize: Authorizer
    body: B


async def run_start(request: Request, model: type[B], thread_id: str | None = None) -> RunStart[B]:
    """A run route's :class:`RunStart`, with the answers FastAPI gave when these were its
    parameters, in its order: a body that is no JSON (422), the thread id (422), the caller
    (401) and whether this replica serves (503), then the body's fields (422, as
    ``RequestValidationError``)."""
    raw = await request.body()
    try:
        value = json.loads(raw) if raw else None
    except json.JSONDecodeError as exc:
        error = {"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error", "input": {}}
        raise RequestValidationError([error]) from exc
    except ValueError as exc:  # not UTF-8
        raise HTTPException(400, "There was an error parsing the body") from exc
    if thread_id is not None:
        await get_thread_id(request, thread_id)
    runtime = await get_runtime(request)
    runs = await get_runs(runtime)
    caller = await get_caller(request, runtime)
    if value is None:
        raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required"}])
    try:
        body = model.model_validate(value, from_attributes=True)  # as FastAPI validates a body
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in errors]) from None
    return RunStart(runs, runtime, caller, Authorizer(runtime.custom_auth, caller), body)


async def get_thread_id(request: Request, thread_id: Annotated[str, Path()]) -> str:
    if not THREAD_ID.fullmatch(thread_id):
        status = 400 if request.url.path.startswith("/v1/") else 422
        raise ApiError(status, "invalid_thread_id", "thread ids are 1-64 characters of A-Z a-z 0-9 _ -")
    return thread_id


ThreadId = Annotated[str, Depends(get_thread_id)]


async def get_run_id(run_id: Annotated[str, Path()]) -> str:
    if not THREAD_ID.fullmatch(run_id):
        raise ApiError(404, "not_found", "no such run")
    return run_id


RunId = Annotated[str, Depends(get_run_id)]
