"""Dependencies shared by the routers, as ``Annotated`` aliases.

All are ``async def``, even those that never await: FastAPI runs a plain ``def`` dependency in
a worker thread, a hop per dependency per request.
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import Depends, Header, Path, Request

from threadline.api.errors import ApiError, unavailable
from threadline.runs.assistants import Assistants
from threadline.runs.runs import Runs
from threadline.runs.threads import Threads
from threadline.runtime import Runtime
from threadline.sessions import SessionStore
from threadline.turns import Conversations

# Thread ids are ours (uuid4 hex), but accept any id of this shape; a malformed one is 400 on
# /v1 (the brief) and 422 on the LangGraph routes (the spec's status for a bad path parameter).
THREAD_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


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


async def get_runs(runtime: RuntimeDep) -> Runs:
    return (await _ready(runtime)).runs  # type: ignore[return-value]


AssistantsDep = Annotated[Assistants, Depends(get_assistants)]
ThreadsDep = Annotated[Threads, Depends(get_threads)]
RunsDep = Annotated[Runs, Depends(get_runs)]


async def get_sessions(runtime: RuntimeDep) -> SessionStore:
    if runtime.stores is None:
        raise unavailable("the session store is not reachable yet; retry shortly")
    return runtime.stores.sessions


ConversationsDep = Annotated[Conversations, Depends(get_conversations)]
SessionsDep = Annotated[SessionStore, Depends(get_sessions)]


# Where the middleware leaves the principal it authenticated before reading the body.
PRINCIPAL_SCOPE_KEY = "threadline.principal"


def unauthenticated(message: str) -> ApiError:
    return ApiError(401, "unauthenticated", message, {"WWW-Authenticate": "Bearer"})


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if authorization and authorization[:7].lower() == "bearer ":
        return authorization[7:].strip()
    return None


async def authenticate(runtime: Runtime, authorization: str | None, x_api_key: str | None) -> str:
    """The caller, from ``X-API-Key`` or a session's ``Authorization: Bearer`` token.

    Raises:
        ApiError: 401 without credentials or with bad ones; 503 while the session store is
            not open. Store errors are raised as they come.
    """
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
    return principal


async def get_principal(
    request: Request,
    runtime: RuntimeDep,
    authorization: Annotated[str | None, Header()] = None,
    x_api_key: Annotated[str | None, Header()] = None,
) -> str:
    """The caller; already known when the middleware authenticated it before the body."""
    known = request.scope.get("state", {}).get(PRINCIPAL_SCOPE_KEY)
    if known is not None:
        return known
    return await authenticate(runtime, authorization, x_api_key)


Principal = Annotated[str, Depends(get_principal)]


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
