"""Resource filters from custom auth (ADR 0013): what they match and how they reach the stores.

A ``@auth.on…`` handler of a ``langgraph.json`` ``auth`` module may return a filter on a
resource's metadata, as LangGraph documents it: ``{"owner": "alice"}`` (equality),
``{"owner": {"$eq": "alice"}}``, ``{"teams": {"$contains": "red"}}`` (a list holding the value,
or every value of a list), and ``$or``/``$and`` of such filters, nested at most twice.
:func:`matches` is langgraph-api's in-memory matcher, rewritten without its HTTP errors.

The filter of the request being served travels in a context variable from the route that ran
the handler (:func:`set_for_request`) to the record store that applies it (:func:`current`): the
threads layer hands :func:`current` to ``RecordStore.get_thread`` and ``threads_of``, which
drop what it excludes as they read, so every route that reads a thread (and through it its
runs, state, history and streams) is filtered, on every replica, without an extra read.
No filter (``None``) means none was returned: ownership alone decides, as without custom auth.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any

Filters = dict[str, Any]

_FILTERS: contextvars.ContextVar[Filters | None] = contextvars.ContextVar(
    "threadline_auth_filters", default=None
)

# langgraph-api's limit on $or/$and nesting.
MAX_NESTING = 2


class InvalidFilter(ValueError):
    """A handler returned a filter that is not one LangGraph documents."""


def current() -> Filters | None:
    """The filter of the request being served, or None."""
    return _FILTERS.get()


@contextlib.contextmanager
def request_scope() -> Iterator[None]:
    """One request: no filter at its start, whatever :func:`set_for_request` set gone at its end
    (the middleware wraps each request, its streamed body included, in this)."""
    token = _FILTERS.set(None)
    try:
        yield
    finally:
        _FILTERS.reset(token)


def set_for_request(filters: Filters | None) -> None:
    """Make ``filters`` the filter of the rest of this request (its task and the tasks it
    starts), combined with one already set by the same request."""
    _FILTERS.set(combine(_FILTERS.get(), filters))


def combine(first: Filters | None, second: Filters | None) -> Filters | None:
    """Both filters must hold."""
    if not first:
        return second or None
    if not second:
        return first
    return {"$and": [first, second]}


def validate(filters: object, depth: int = 0) -> Filters | None:
    """``filters`` checked to be a filter :func:`matches` understands.

    Raises:
        InvalidFilter: naming what is wrong.
    """
    if filters is None or filters == {}:
        return None
    if not isinstance(filters, Mapping):
        raise InvalidFilter(f"a filter is a dict, not a {type(filters).__name__}")
    if depth > MAX_NESTING:
        raise InvalidFilter(f"$or/$and nest at most {MAX_NESTING} deep")
    for key, value in filters.items():
        if key in ("$or", "$and"):
            if not isinstance(value, list) or len(value) < 2:
                raise InvalidFilter(f"{key} takes a list of at least 2 filters")
            for group in value:
                validate(group, depth + 1)
        elif key.startswith("$"):
            raise InvalidFilter(f"unknown operator {key!r} (use $eq, $contains, $or, $and)")
        elif isinstance(value, Mapping):
            if len(value) != 1 or next(iter(value)) not in ("$eq", "$contains"):
                raise InvalidFilter(f"{key!r}: an operator is {{'$eq': v}} or {{'$contains': v}}")
    return dict(filters)


def holds(values: Mapping[str, Any], subset: Mapping[str, Any] | None) -> bool:
    """Whether ``values`` contains ``subset`` (a search's ``metadata`` or ``values``, not a
    custom auth filter): every key present, objects contained key by key, other values equal —
    Postgres's ``@>`` on objects, as langgraph-api's in-memory runtime reads it."""
    for key, value in (subset or {}).items():
        if key not in values:
            return False
        found = values[key]
        if isinstance(value, Mapping) and isinstance(found, Mapping):
            if not holds(found, value):
                return False
        elif found != value:
            return False
    return True


def matches(metadata: Mapping[str, Any], filters: Filters | None) -> bool:
    """Whether ``metadata`` satisfies ``filters`` (a :func:`validate`-d filter)."""
    if not filters:
        return True
    for key, expected in filters.items():
        if key == "$or":
            if not any(matches(metadata, group) for group in expected):
                return False
        elif key == "$and":
            if not all(matches(metadata, group) for group in expected):
                return False
        elif isinstance(expected, Mapping):
            op, value = next(iter(expected.items()))
            if key not in metadata:
                return False
            if op == "$eq":
                if metadata[key] != value:
                    return False
            else:  # $contains, as Postgres' @> on a list
                held = metadata[key]
                if not isinstance(held, list):
                    return False
                wanted = value if isinstance(value, list) else [value]
                if any(item not in held for item in wanted):
                    return False
        elif key not in metadata or metadata[key] != expected:
            return False
    return True
