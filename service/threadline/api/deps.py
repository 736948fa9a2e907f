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

# Thread ids are ours (uuid4 hex), but accept any id of this shape so a malformed one is 400.
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


async def get_principal(
    runtime: RuntimeDep,
    authorization: Annotated[str | None, Header()] = None,
    x_api_key: Annotated[str | None, Header()] = None,
) -> str:
    """The caller, from ``X-API-Key`` or a session's ``Authorization: Bearer`` token."""
    if x_api_key:
        principal = runtime.api_keys.principal(x_api_key)
    elif authorization and authorization[:7].lower() == "bearer ":
        principal = await (await get_sessions(runtime)).principal(authorization[7:].strip())
    else:
        raise ApiError(
            401,
            "unauthenticated",
            "send X-API-Key or Authorization: Bearer <session token>",
            {"WWW-Authenticate": "Bearer"},
        )
    if principal is None:
        raise ApiError(
            401, "unauthenticated", "unknown API key or expired session", {"WWW-Authenticate": "Bearer"}
        )
    return principal


Principal = Annotated[str, Depends(get_principal)]


async def get_thread_id(thread_id: Annotated[str, Path()]) -> str:
    if not THREAD_ID.fullmatch(thread_id):
        raise ApiError(400, "invalid_thread_id", "thread ids are 1-64 characters of A-Z a-z 0-9 _ -")
    return thread_id


ThreadId = Annotated[str, Depends(get_thread_id)]


async def get_run_id(run_id: Annotated[str, Path()]) -> str:
    if not THREAD_ID.fullmatch(run_id):
        raise ApiError(404, "not_found", "no such run")
    return run_id


RunId = Annotated[str, Depends(get_run_id)]
