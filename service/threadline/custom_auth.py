"""LangGraph custom auth: a ``langgraph.json`` ``auth`` module's handlers, called as
langgraph-api calls them (ADR 0013).

``"auth": {"path": "./auth.py:auth"}`` names a ``langgraph_sdk.Auth``. Its
``@auth.authenticate`` handler decides who every request is (:meth:`CustomAuth.authenticate`);
its ``@auth.on…`` handlers authorize each action on a resource, may change the action's value
(stamp ``owner`` metadata) and may return a filter (:meth:`CustomAuth.authorize`). The handler
chosen for ``(resource, action)`` is the most specific one, as langgraph-api's
``_get_handler``: ``on.<resource>.<action>``, ``on.<resource>``, ``on(actions=…)``, ``on``.

Handlers are the deployment's own code, so they are held to a deadline
(``AUTH_TIMEOUT_SECONDS``): past it the request is answered 503 (the identity provider or the
handler is slow; retry), and a sync handler runs on a small pool of its own whose queue never
grows past :data:`SYNC_THREADS`, so a hung handler can neither wedge the event loop nor pile
up work. Whatever a handler raises becomes a 401 (403 from resource handlers) naming only the
exception's type: its text may hold the token. ``Auth.exceptions.HTTPException`` keeps its
status and detail, as in langgraph-api.

Nothing here knows HTTP: the API layer hands :meth:`CustomAuth.authenticate` the parameters
the handler asked for (:attr:`CustomAuth.parameters`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph_sdk import Auth

from threadline import access
from threadline.config import ConfigError

log = logging.getLogger(__name__)

# What an authenticate handler may ask for (langgraph-api's SUPPORTED_PARAMETERS that exist
# before a route runs; ``path_params`` is {} and ``scopes`` [] there too).
PARAMETERS = frozenset(
    {
        "request",
        "authorization",
        "headers",
        "path",
        "method",
        "query_params",
        "scope",
        "scopes",
        "path_params",
    }
)
# Sync authenticate handlers run on this many threads of their own, at most this many at once.
SYNC_THREADS = 8

RESOURCES = ("threads", "assistants", "crons", "store")


class AuthFailed(Exception):
    """The request is refused: ``status`` (401, 403, 404, 503 …) with ``message``."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers) if headers else None


class AuthUser(Mapping[str, Any]):
    """The authenticated user as LangGraph hands it to graphs and handlers: attribute access
    (``user.identity``) and dict access (``user["identity"]``), like langgraph-api's
    ``ProxyUser``; it implements ``langgraph_sdk.auth.types.BaseUser``."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = {"is_authenticated": True, "display_name": data["identity"], "permissions": [], **data}

    @property
    def identity(self) -> str:
        return self._data["identity"]

    @property
    def display_name(self) -> str:
        return self._data["display_name"]

    @property
    def is_authenticated(self) -> bool:
        return bool(self._data["is_authenticated"])

    @property
    def permissions(self) -> Sequence[str]:
        return self._data["permissions"]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_data"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def dict(self) -> dict[str, Any]:
        return dict(self._data)

    def model_dump(self, **_: Any) -> dict[str, Any]:
        return dict(self._data)

    def __repr__(self) -> str:
        return f"AuthUser(identity={self.identity!r})"


@dataclass(frozen=True)
class Caller:
    """Who a request is: the principal (``identity``) that owns threads and runs and counts
    toward quotas, and the user and permissions handlers and graphs see."""

    identity: str
    user: AuthUser
    permissions: list[str] = field(default_factory=list)

    @classmethod
    def of_principal(cls, principal: str) -> Caller:
        """An ``API_KEYS`` principal (no custom auth)."""
        return cls(principal, AuthUser({"identity": principal}))

    def as_json(self) -> dict[str, Any]:
        """What a run record keeps, so any replica executing the run hands the graph the user."""
        return {"user": _jsonable(self.user.dict()), "permissions": list(self.permissions)}


def graph_configurable(saved: Mapping[str, Any] | None, principal: str) -> dict[str, Any]:
    """``langgraph_auth_user``, ``langgraph_auth_user_id`` and ``langgraph_auth_permissions``
    for a run's config, from :meth:`Caller.as_json` (the principal alone for older runs)."""
    saved = saved or {}
    user = AuthUser(saved.get("user") or {"identity": principal})
    permissions = list(saved.get("permissions") or [])
    return {
        "langgraph_auth_user": user,
        "langgraph_auth_user_id": user.identity,
        "langgraph_auth_permissions": permissions,
    }


class CustomAuth:
    """The handlers of one ``Auth`` object.

    Args:
        auth: the ``langgraph_sdk.Auth`` of the config's ``auth.path``.
        timeout_seconds: ``AUTH_TIMEOUT_SECONDS``, the deadline of every handler call.

    Raises:
        ConfigError: no authenticate handler, or one asking for a parameter that does not exist.
    """

    def __init__(self, auth: Auth, timeout_seconds: float) -> None:
        handler = auth._authenticate_handler
        if handler is None:
            raise ConfigError(
                "LANGGRAPH_CONFIG: `auth.path` names an Auth without an @auth.authenticate handler"
            )
        self._auth = auth
        self._handler = handler
        self.timeout = timeout_seconds
        signature = inspect.signature(handler)
        unknown = [
            name
            for name, p in signature.parameters.items()
            if name not in PARAMETERS and p.default is inspect.Parameter.empty
        ]
        if unknown:
            raise ConfigError(
                f"LANGGRAPH_CONFIG: the authenticate handler asks for {', '.join(unknown)}; "
                f"it may take {', '.join(sorted(PARAMETERS))}"
            )
        self.parameters = frozenset(signature.parameters) & PARAMETERS
        self._async = inspect.iscoroutinefunction(handler)
        self._pool = concurrent.futures.ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="auth")
        self._slots = asyncio.Semaphore(SYNC_THREADS)

    async def authenticate(self, arguments: Mapping[str, Callable[[], Any]]) -> Caller:
        """The caller, from the handler given the parameters it asked for.

        Args:
            arguments: parameter name → a function making its value (called only if asked).

        Raises:
            AuthFailed: 401 (the handler refused or failed), its own status for an
                ``Auth.exceptions.HTTPException``, 503 past ``AUTH_TIMEOUT_SECONDS``.
        """
        kwargs = {name: arguments[name]() for name in self.parameters}
        try:
            async with asyncio.timeout(self.timeout):
                result = await (self._handler(**kwargs) if self._async else self._in_thread(kwargs))
        except TimeoutError:
            log.warning("authenticate handler timed out", extra={"timeout": self.timeout})
            raise _timed_out("authentication", self.timeout) from None
        except Auth.exceptions.HTTPException as exc:
            raise AuthFailed(exc.status_code, str(exc.detail), exc.headers) from None
        except AuthFailed:
            raise
        except Exception as exc:
            # The text may quote the token (a JWT library's error, say): only the type is told.
            log.warning("authenticate handler failed", extra={"error": type(exc).__name__})
            raise AuthFailed(401, f"authentication failed ({type(exc).__name__})") from None
        return _caller(result)

    async def _in_thread(self, kwargs: dict[str, Any]) -> Any:
        # The slot is given back when the thread is done, not when the caller gave up: at most
        # SYNC_THREADS calls are ever queued, however long a hung handler hangs.
        await self._slots.acquire()
        try:
            future = self._pool.submit(self._handler, **kwargs)
        except BaseException:
            self._slots.release()
            raise
        loop = asyncio.get_running_loop()

        def release(_: object) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed while the thread hung
                loop.call_soon_threadsafe(self._slots.release)

        future.add_done_callback(release)
        return await asyncio.wrap_future(future)

    def handler_for(self, resource: str, action: str) -> Callable[..., Any] | None:
        """The most specific ``@auth.on…`` handler for ``(resource, action)``, or None."""
        handlers = self._auth._handlers
        for key in ((resource, action), (resource, "*"), ("*", action), ("*", "*")):
            if key in handlers:
                return handlers[key][-1]
        return self._auth._global_handlers[-1] if self._auth._global_handlers else None

    async def authorize(
        self, caller: Caller, resource: str, action: str, value: dict[str, Any]
    ) -> access.Filters | None:
        """Run the handler for ``(resource, action)`` on ``value`` (which it may change).

        Returns:
            The filter it returned (validated), or None.

        Raises:
            AuthFailed: 403 when it returns False or fails an assertion; its own status for an
                ``Auth.exceptions.HTTPException``; 403 for anything else it raises or returns,
                and 503 past ``AUTH_TIMEOUT_SECONDS``.
        """
        handler = self.handler_for(resource, action)
        if handler is None:
            return None
        ctx = Auth.types.AuthContext(
            user=caller.user, permissions=list(caller.permissions), resource=resource, action=action
        )
        try:
            async with asyncio.timeout(self.timeout):
                result = await handler(ctx=ctx, value=value)
        except TimeoutError:
            raise _timed_out("authorization", self.timeout) from None
        except Auth.exceptions.HTTPException as exc:
            raise AuthFailed(exc.status_code, str(exc.detail), exc.headers) from None
        except AssertionError as exc:
            raise AuthFailed(403, str(exc) or "forbidden") from None
        except Exception as exc:
            log.warning("auth handler failed", extra={"error": type(exc).__name__, "resource": resource})
            raise AuthFailed(403, f"authorization failed ({type(exc).__name__})") from None
        if result is None or result is True:
            return None
        if result is False:
            raise AuthFailed(403, "forbidden")
        try:
            return access.validate(result)
        except access.InvalidFilter as exc:
            raise AuthFailed(
                403, f"the {resource}.{action} auth handler returned an invalid filter: {exc}"
            ) from None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _timed_out(what: str, timeout: float) -> AuthFailed:
    return AuthFailed(
        503, f"{what} did not answer within AUTH_TIMEOUT_SECONDS={timeout:g}; retry", {"Retry-After": "1"}
    )


def _caller(result: Any) -> Caller:
    """A :class:`Caller` from what an authenticate handler returned: an identity string, a dict
    with ``identity`` (and ``permissions``, ``display_name`` …), an object with ``identity``
    (a ``BaseUser``), or ``(permissions, user)`` — as langgraph-api normalizes it."""
    permissions: Any = None
    if isinstance(result, tuple) and len(result) == 2:
        permissions, result = result
    if isinstance(result, str):
        data: dict[str, Any] = {"identity": result}
    elif isinstance(result, Mapping):
        data = dict(result)
    elif hasattr(result, "identity"):
        data = _object_fields(result)
    else:
        raise AuthFailed(401, "authentication failed (the authenticate handler returned no identity)")
    if permissions is None:
        permissions = data.get("permissions") or []
    identity = data.get("identity")
    if not isinstance(identity, str) or not identity:
        raise AuthFailed(401, "authentication failed (the authenticate handler returned no identity)")
    if isinstance(permissions, str) or not all(isinstance(p, str) for p in permissions):
        raise AuthFailed(401, "authentication failed (permissions must be a list of strings)")
    data["permissions"] = list(permissions)
    return Caller(identity, AuthUser(data), list(permissions))


def _object_fields(user: Any) -> dict[str, Any]:
    for dump in ("model_dump", "dict"):
        if callable(getattr(user, dump, None)):
            try:
                data = dict(getattr(user, dump)())
                break
            except Exception:  # a user object without a usable dump: its properties alone
                continue
    else:
        data = {}
    data["identity"] = user.identity
    for name in ("display_name", "is_authenticated", "permissions"):
        try:
            data.setdefault(name, getattr(user, name))
        except (AttributeError, NotImplementedError):
            pass
    return data


def _jsonable(value: Any) -> Any:
    """``value`` with what JSON cannot hold turned into text (a user dict may hold a datetime)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)
