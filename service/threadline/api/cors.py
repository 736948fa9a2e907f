"""CORS: which browser origins may call the API, as Starlette ``CORSMiddleware`` options.

Two sources, both optional (default: no origin is allowed, and no CORS layer is installed):

* ``CORS_ALLOW_ORIGINS`` (comma-separated; ``*`` is any origin; an entry ending in ``:*`` is
  any port of that scheme and host, e.g. ``http://localhost:*``, which ``make run`` allows);
* ``http.cors`` of the ``langgraph.json`` in LangGraph's format (``allow_origins``,
  ``allow_origin_regex``, ``allow_methods``, ``allow_headers``, ``allow_credentials``,
  ``expose_headers``, ``max_age``).

When both name origins, ``CORS_ALLOW_ORIGINS`` wins: the deployment knows where its UI lives.
The headers the SDKs send (``x-api-key``, ``authorization``, ``content-type``,
``last-event-id``, ``x-auth-scheme``) are always allowed, and the ones they read
(``content-location``, ``location``, ``x-replica``) always exposed, whatever ``http.cors`` lists.
"""

from __future__ import annotations

import re
from typing import Any

from threadline.config import ConfigError, parse_origins

ALLOW_HEADERS = ("x-api-key", "authorization", "content-type", "last-event-id", "x-auth-scheme")
EXPOSE_HEADERS = ("content-location", "location", "x-replica", "x-pagination-total", "x-pagination-next")
ALLOW_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
# Browsers cache a preflight at most 2 h (Chromium) or 24 h (Firefox); 10 min as Starlette.
MAX_AGE_SECONDS = 600

_HTTP_CORS_KEYS = {
    "allow_origins": list,
    "allow_origin_regex": str,
    "allow_methods": list,
    "allow_headers": list,
    "allow_credentials": bool,
    "expose_headers": list,
    "max_age": int,
}
_WHERE = "LANGGRAPH_CONFIG: http.cors"


def _split(origins: list[str]) -> tuple[list[str], str | None]:
    """Exact origins, plus one regex for the ``:*`` (any port) entries."""
    exact = [o for o in origins if not o.endswith(":*")]
    ports = [re.escape(o[:-2]) + r":\d{1,5}" for o in origins if o.endswith(":*")]
    return exact, "|".join(ports) or None


def _checked(http_cors: object) -> dict[str, Any]:
    if not isinstance(http_cors, dict):
        raise ConfigError(f"{_WHERE}: must be an object")
    for key, value in http_cors.items():
        kind = _HTTP_CORS_KEYS.get(key)
        if kind is None:
            raise ConfigError(f"{_WHERE}: unknown key {key!r} (known: {sorted(_HTTP_CORS_KEYS)})")
        if not isinstance(value, kind) or (kind is list and not all(isinstance(v, str) for v in value)):
            wanted = {list: "a list of strings", str: "a string", bool: "true or false", int: "an int"}[kind]
            raise ConfigError(f"{_WHERE}.{key}: must be {wanted}")
    if "allow_origins" in http_cors:
        try:
            parse_origins(",".join(http_cors["allow_origins"]))
        except ValueError as exc:
            raise ConfigError(f"{_WHERE}.allow_origins: {str(exc).partition(': ')[2]}") from None
    return http_cors


def cors_options(allow_origins: str, http_cors: object | None) -> dict[str, Any] | None:
    """``CORSMiddleware`` keyword arguments, or ``None`` when no origin is allowed.

    Args:
        allow_origins: ``CORS_ALLOW_ORIGINS`` as set (validated by the settings).
        http_cors: ``http.cors`` of the ``langgraph.json``, or ``None``.

    Raises:
        ConfigError: ``http.cors`` is malformed (naming the key).
    """
    cors = _checked(http_cors) if http_cors is not None else {}
    origins = parse_origins(allow_origins) or list(cors.get("allow_origins", []))
    exact, port_regex = _split(origins)
    regexes = [r for r in (port_regex, cors.get("allow_origin_regex")) if r]
    if not exact and not regexes:
        return None
    return {
        "allow_origins": exact,
        "allow_origin_regex": "|".join(f"(?:{r})" for r in regexes) or None,
        "allow_methods": list(cors.get("allow_methods") or ALLOW_METHODS),
        "allow_headers": sorted({*ALLOW_HEADERS, *(h.lower() for h in cors.get("allow_headers", []))}),
        # As langgraph-api: credentials (cookies, a custom auth's) unless any origin may call.
        "allow_credentials": cors.get("allow_credentials", "*" not in exact),
        "expose_headers": sorted({*EXPOSE_HEADERS, *(h.lower() for h in cors.get("expose_headers", []))}),
        "max_age": cors.get("max_age", MAX_AGE_SECONDS),
    }
