"""What a JSON request body may hold beyond being JSON (ADR 0006): at most :data:`MAX_DEPTH`
levels of nesting, integers that fit 64 bits, and strings that are Unicode (JSON's ``\\ud800``
escapes may spell a lone surrogate, which no store can encode as UTF-8).

Everything a client sends is stored and sent back through orjson, which refuses more than 255
levels and integers outside [-2**63, 2**64) — mid-request, after a thread-quota slot was taken
(issue 18: 8 of 11 bodies nested 256–999 deep or holding a 20-digit integer answered 500).
The middleware checks each whole body here before a route sees it, so such a body is a 422
that changes nothing, on every route.

Cost: two ``bytes.count`` and two regex searches over the body (C speed; the body is at most
``4 × MAX_MESSAGE_BYTES + 4 KiB``); only a body with :data:`MAX_DEPTH` brackets, a run of 19
digits or a surrogate escape is parsed and walked.
"""

from __future__ import annotations

import json
import re

# Levels of nesting a body may have. orjson's limit is 255 and stored values are nested deeper
# than the body (a run's input sits in its record, an event's data in the event, a message in
# the state): 64 leaves room for that and for any real message shape (LangChain's deepest,
# a tool call's arguments inside content blocks, is ~8).
MAX_DEPTH = 64
INT_MIN, INT_MAX = -(2**63), 2**64 - 1

_LONG_NUMBER = re.compile(rb"\d{19}")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def problem(body: bytes) -> str | None:
    """Why ``body`` breaks a JSON limit, or None (also for a body that is not JSON at all: the
    route's own parsing answers that)."""
    brackets = body.count(b"[") + body.count(b"{")
    if brackets < MAX_DEPTH and not _LONG_NUMBER.search(body) and not _SURROGATE_ESCAPE.search(body):
        return None
    try:
        value = json.loads(body)
    except RecursionError:
        return f"body: nested deeper than {MAX_DEPTH} levels"
    except ValueError as exc:  # JSONDecodeError, or an integer past Python's 4300 digits
        if isinstance(exc, json.JSONDecodeError):
            return None
        return "body: an integer does not fit 64 bits"
    return _walk(value)


def _walk(value: object) -> str | None:
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = [*item.values(), *item]
        elif isinstance(item, list):
            children = item
        else:
            if type(item) is int and not INT_MIN <= item <= INT_MAX:
                return "body: an integer does not fit 64 bits"
            if isinstance(item, str) and not _is_unicode(item):
                return "body: a string holds a lone surrogate (\\ud800-\\udfff), which is not Unicode"
            continue
        if depth > MAX_DEPTH:
            return f"body: nested deeper than {MAX_DEPTH} levels"
        stack.extend((child, depth + 1) for child in children)
    return None


def _is_unicode(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True
