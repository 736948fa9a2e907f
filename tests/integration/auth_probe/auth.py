"""A custom auth module whose handlers misbehave on request, for tests/integration/test_custom_auth.py.

Bearer tokens: ``user-<name>`` is <name> (with ``X-Probe-Filtered: 1``, also the permission
``filtered``, whose resource handlers return a filter); ``slow-<seconds>`` sleeps that long
(a sync handler: on the server's auth threads); ``boom`` raises with the token in its text;
``teapot`` raises HTTPException(418); ``garbage`` returns no identity; ``count-<name>`` is
<name>, each call appending a line to ``$PROBE_CALLS_DIR/<name>`` (how often it was called).
"""

import os
import time
from pathlib import Path

from langgraph_sdk import Auth

auth = Auth()

# Threads a `filtered` caller sees: tagged public, or pinned.
VISIBLE = {"$or": [{"tags": {"$contains": "public"}}, {"pinned": {"$eq": True}}]}


@auth.authenticate
def authenticate(authorization: str | None, headers: dict, path: str, method: str, query_params) -> object:
    token = (authorization or "").removeprefix("Bearer ")
    if token.startswith("user-"):
        filtered = headers.get(b"x-probe-filtered") == b"1"
        return {
            "identity": token[5:],
            "display_name": token[5:].title(),
            "permissions": ["filtered"] if filtered else [],
            "seen": f"{method} {path} {query_params.get('probe', '')}",
        }
    if token.startswith("count-"):
        with open(Path(os.environ["PROBE_CALLS_DIR"]) / token[6:], "a") as calls:
            calls.write(f"{method} {path}\n")
        return token[6:]
    if token.startswith("slow-"):
        time.sleep(float(token[5:]))
        return "slowpoke"
    if token == "boom":
        raise RuntimeError(f"cannot parse {authorization}")
    if token == "teapot":
        raise Auth.exceptions.HTTPException(418, "short and stout")
    if token == "garbage":
        return 42
    raise Auth.exceptions.HTTPException(401, "unknown probe token")


@auth.on.threads.create
async def create(ctx: Auth.types.AuthContext, value: dict) -> None:
    if (value.get("metadata") or {}).get("deny"):
        raise Auth.exceptions.HTTPException(403, "deny threads are refused")


@auth.on.threads
async def threads(ctx: Auth.types.AuthContext, value: dict) -> Auth.types.FilterType | None:
    return VISIBLE if "filtered" in ctx.permissions else None


@auth.on.assistants.create
async def create_assistant(ctx: Auth.types.AuthContext, value: dict) -> None:
    """Stamps what the `filtered` callers' filter lets them see; refuses `deny`."""
    if (value.get("metadata") or {}).get("deny"):
        raise Auth.exceptions.HTTPException(403, "deny assistants are refused")
    value["metadata"] = {**(value.get("metadata") or {}), "created_by": "someone"}


@auth.on.assistants
async def assistants(ctx: Auth.types.AuthContext, value: dict) -> Auth.types.FilterType | None:
    # The served graphs' assistants carry {"created_by": "system"}: a `filtered` caller sees none.
    return {"created_by": "someone"} if "filtered" in ctx.permissions else None


@auth.on.store
async def store(ctx: Auth.types.AuthContext, value: dict) -> Auth.types.FilterType | None:
    """Each user's items under their own first label, as LangGraph's docs show; a `filtered`
    caller's searches see only items marked shared."""
    namespace = tuple(value.get("namespace") or ())
    if namespace[:1] == ("forbidden",):
        raise Auth.exceptions.HTTPException(403, "forbidden namespace")
    value["namespace"] = (ctx.user.identity, *namespace)
    return {"shared": True} if "filtered" in ctx.permissions else None


@auth.on.crons.create
async def create_cron(ctx: Auth.types.AuthContext, value: dict) -> None:
    """Stamps crons (unless asked not to) with what the `filtered` callers' filter lets them
    see; refuses `deny`."""
    metadata = value.get("metadata") or {}
    if metadata.get("deny"):
        raise Auth.exceptions.HTTPException(403, "deny crons are refused")
    if not metadata.get("nostamp"):
        value["metadata"] = {**metadata, "stamp": "yes"}


@auth.on.crons
async def crons(ctx: Auth.types.AuthContext, value: dict) -> Auth.types.FilterType | None:
    return {"stamp": "yes"} if "filtered" in ctx.permissions else None
