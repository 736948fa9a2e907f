"""One error shape for every failure: ``{"detail": message, "error": {"code", "message"}}``.

``detail`` is what the LangGraph API's spec requires of every error body (and what
langgraph-api and the SDKs' error classes show); ``error.code`` is threadline's own, stable for
programs to branch on.

Messages are written here, never taken from an exception's text: exception text can hold a
URL, a password or a stack detail.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from threadline.checkpoint import store_errors
from threadline.lease import LeaseBusy
from threadline.quotas import QuotaExceeded
from threadline.runs.errors import Conflict, Invalid, NotFound
from threadline.store.tenant import ItemTooLarge
from threadline.turns import TurnTimeout

log = logging.getLogger(__name__)

# Seconds a client should wait before retrying a 503 (store away, replica draining).
RETRY_AFTER_SECONDS = 1


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(code)
        self.status, self.code, self.message, self.headers = status, code, message, headers


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"detail": message, "error": {"code": code, "message": message}}, status, headers=headers
    )


def unavailable(message: str) -> ApiError:
    return ApiError(503, "unavailable", message, {"Retry-After": str(RETRY_AFTER_SECONDS)})


# Domain exceptions → (status, code, message).
DOMAIN_ERRORS: dict[type[Exception], tuple[int, str, str]] = {
    LeaseBusy: (409, "thread_busy", "another turn is running on this thread; retry"),
    TurnTimeout: (
        504,
        "turn_timeout",
        "the turn took longer than TURN_TIMEOUT_SECONDS and was cancelled; retry with the same id",
    ),
}


def quota_error(exc: QuotaExceeded) -> ApiError:
    """429 ``quota_exceeded`` naming the limit (its variable and value)."""
    return ApiError(429, "quota_exceeded", f"quota exceeded: {exc.setting}={exc.limit}")


def described(exc: Exception) -> tuple[int, str, str] | None:
    """``(status, code, message)`` of a domain error (the runs layer's kinds, a busy lease, a
    turn's timeout); None for any other exception."""
    if isinstance(exc, NotFound):
        return 404, exc.code, exc.message
    if isinstance(exc, Conflict):
        return 409, exc.code, exc.message
    if isinstance(exc, Invalid):
        return exc.status, "invalid_request", exc.message
    if isinstance(exc, ItemTooLarge):
        return 413, "item_too_large", exc.message
    return DOMAIN_ERRORS.get(type(exc))


def install(app: FastAPI, backend: str) -> None:
    """The error handlers; ``backend`` (``CHECKPOINT_BACKEND``) decides which store errors
    are answered 503 (:func:`threadline.checkpoint.store_errors`)."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        # Field locations and messages only; pydantic's input echo could hold a secret.
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}" for e in exc.errors()
        )
        return error_response(422, "invalid_request", problems or "invalid request")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and isinstance(exc.__cause__, UnicodeDecodeError):
            # FastAPI's answer to a body that is not UTF-8; like any malformed JSON, a 422.
            return error_response(422, "invalid_request", "body: not valid UTF-8 JSON")
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail), getattr(exc, "headers", None))

    @app.exception_handler(QuotaExceeded)
    async def _quota(_: Request, exc: QuotaExceeded) -> JSONResponse:
        err = quota_error(exc)
        return error_response(err.status, err.code, err.message)

    # The runs/threads layer writes these messages itself (never from stored data or a driver).
    async def _domain(_: Request, exc: Exception) -> JSONResponse:
        status, code, message = described(exc) or (500, "internal", "internal error")
        return error_response(status, code, message)

    for exc_type in (NotFound, Invalid, Conflict, ItemTooLarge, *DOMAIN_ERRORS):
        app.add_exception_handler(exc_type, _domain)

    for exc_type in store_errors(backend):

        async def _store(_: Request, exc: Exception) -> JSONResponse:
            log.warning("store unavailable", extra={"error": type(exc).__name__})
            err = unavailable("a store is unreachable; retry shortly")
            return error_response(err.status, err.code, err.message, err.headers)

        app.add_exception_handler(exc_type, _store)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", extra={"error": type(exc).__name__})
        return error_response(500, "internal", "internal error")
