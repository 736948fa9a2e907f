"""The metrics wrapper: one class around any ``BaseCheckpointSaver``; the only checkpoint timer.

Every delegated call counts ``threadline_checkpoint_operations_total{backend,op}``, counts
``threadline_checkpoint_errors_total{backend,op}`` when it raises (cancellation is not an
error), and observes its duration in the read histogram (``get_tuple``, ``list``,
``get_delta_channel_history``) or the write histogram (``put``, ``put_writes``, ``delete_*``,
``copy_thread``, ``prune``). ``op`` is the sync method name for both twins (``aput`` → ``put``).
``threadline_checkpoint_busy_seconds_total`` adds the wall time during which at least one
operation was in flight (overlapping operations counted once).
``threadline_checkpoint_written_bytes_total{backend,op}`` adds the bytes a write sent to the
store, for savers that count them in a ``written_bytes`` mapping (op → bytes so far; the
``redis`` saver does).

``list``/``alist`` are iterators: one call is one observation of the time spent *inside the
inner iterator* (summed over its items until it is exhausted or closed), not the time the
consumer spends between items.

Capability detection (the conformance suite, and anyone else) looks at the wrapper's *type*:
a method overridden there counts as implemented. So the extended methods (``delete_for_runs``,
``copy_thread``, ``prune`` and their async twins) exist only on a per-inner-type subclass made
by :func:`instrument`, and only when the inner type overrides them.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterator
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.serde.base import SerializerProtocol
from prometheus_client import Histogram

from threadline.checkpoint import read_ahead
from threadline.metrics import (
    CHECKPOINT_BUSY_SECONDS,
    CHECKPOINT_ERRORS,
    CHECKPOINT_OPERATIONS,
    CHECKPOINT_READ_SECONDS,
    CHECKPOINT_WRITE_SECONDS,
    CHECKPOINT_WRITTEN_BYTES,
)

_EXTENDED = ("delete_for_runs", "copy_thread", "prune")


def _delegate(op: str, histogram: Histogram, *, is_async: bool) -> Callable[..., Any]:
    """The method ``op`` (or its async twin ``a<op>``): calls the inner one, timed."""
    name = f"a{op}" if is_async else op
    if is_async:

        async def method(self: InstrumentedSaver, *args: Any, **kwargs: Any) -> Any:
            start = self._busy.start()
            try:
                return await getattr(self._inner, name)(*args, **kwargs)
            except Exception:
                CHECKPOINT_ERRORS.labels(self._backend, op).inc()
                raise
            finally:
                self._observe(op, histogram, start)

    else:

        def method(self: InstrumentedSaver, *args: Any, **kwargs: Any) -> Any:
            start = self._busy.start()
            try:
                return getattr(self._inner, name)(*args, **kwargs)
            except Exception:
                CHECKPOINT_ERRORS.labels(self._backend, op).inc()
                raise
            finally:
                self._observe(op, histogram, start)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``inner.{name}``, timed."
    return method


class InstrumentedSaver(BaseCheckpointSaver):
    """Delegates every saver method to ``inner`` and records checkpoint metrics.

    Build it with :func:`instrument`, which picks the subclass that exposes exactly the inner
    saver's extended capabilities.

    Args:
        inner: the saver doing the work; also reachable as :attr:`inner`.
        backend: the ``backend`` label (the ``CHECKPOINT_BACKEND`` value).
    """

    def __init__(self, inner: BaseCheckpointSaver, backend: str) -> None:
        # No super().__init__(): serde belongs to the inner saver (see the property below).
        self._inner = inner
        self._backend = backend
        self._busy = _busy_clock(backend)
        # What the inner saver's written_bytes held at the last report, per op.
        self._written_seen: dict[str, int] = {}
        self._written_lock = threading.Lock()

    @property
    def inner(self) -> BaseCheckpointSaver:
        return self._inner

    @property
    def backend(self) -> str:
        return self._backend

    # --- what the LangGraph runtime uses besides the I/O methods -------------------------

    @property  # type: ignore[override]
    def serde(self) -> SerializerProtocol:
        return self._inner.serde

    @serde.setter
    def serde(self, value: SerializerProtocol) -> None:
        self._inner.serde = value

    @property
    def config_specs(self) -> list:
        return self._inner.config_specs

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self._inner.get_next_version(current, channel)

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> BaseCheckpointSaver:
        inner = self._inner.with_allowlist(extra_allowlist)
        return self if inner is self._inner else instrument(inner, self._backend)

    # --- I/O (list/alist below: they are iterators) ---------------------------------------

    get_tuple = _delegate("get_tuple", CHECKPOINT_READ_SECONDS, is_async=False)
    _aget_tuple = _delegate("get_tuple", CHECKPOINT_READ_SECONDS, is_async=True)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """``inner.aget_tuple``, timed; or a run's first read, made ahead (:mod:`read_ahead`)."""
        taken, found = read_ahead.take(config)
        return found if taken else await self._aget_tuple(config)

    get_delta_channel_history = _delegate(
        "get_delta_channel_history", CHECKPOINT_READ_SECONDS, is_async=False
    )
    aget_delta_channel_history = _delegate(
        "get_delta_channel_history", CHECKPOINT_READ_SECONDS, is_async=True
    )
    put = _delegate("put", CHECKPOINT_WRITE_SECONDS, is_async=False)
    aput = _delegate("put", CHECKPOINT_WRITE_SECONDS, is_async=True)
    put_writes = _delegate("put_writes", CHECKPOINT_WRITE_SECONDS, is_async=False)
    aput_writes = _delegate("put_writes", CHECKPOINT_WRITE_SECONDS, is_async=True)
    delete_thread = _delegate("delete_thread", CHECKPOINT_WRITE_SECONDS, is_async=False)
    adelete_thread = _delegate("delete_thread", CHECKPOINT_WRITE_SECONDS, is_async=True)

    # --- timing ----------------------------------------------------------------------------

    def _observe(self, op: str, histogram: Histogram, start: float) -> None:
        """One call of ``op`` that began at ``start`` has ended (on the hot path: a few per
        step, so the labelled children are looked up once, not per call)."""
        seconds, operations = _children(self._backend, op, histogram)
        seconds.observe(self._busy.stop() - start)
        operations.inc()
        self._report_written(op)

    def _report_written(self, op: str) -> None:
        written = getattr(self._inner, "written_bytes", None)
        if not isinstance(written, dict) or op not in written:
            return
        with self._written_lock:  # overlapping writes: each byte is reported once
            now = written[op]
            delta = now - self._written_seen.get(op, 0)
            self._written_seen[op] = now
        if delta > 0:
            _written_series(self._backend, op).inc(delta)

    def list(self, config: Any, **kwargs: Any) -> Iterator[CheckpointTuple]:
        spent = 0.0
        items = self._inner.list(config, **kwargs)
        try:
            while True:
                start = self._busy.start()
                try:
                    item = next(items)
                except StopIteration:
                    return
                except Exception:
                    CHECKPOINT_ERRORS.labels(self._backend, "list").inc()
                    raise
                finally:
                    spent += self._busy.stop() - start
                yield item
        finally:
            _close_sync(items)
            CHECKPOINT_READ_SECONDS.labels(self._backend).observe(spent)
            CHECKPOINT_OPERATIONS.labels(self._backend, "list").inc()

    async def alist(self, config: Any, **kwargs: Any) -> AsyncIterator[CheckpointTuple]:
        spent = 0.0
        items = self._inner.alist(config, **kwargs)
        try:
            while True:
                start = self._busy.start()
                try:
                    item = await anext(items)
                except StopAsyncIteration:
                    return
                except Exception:
                    CHECKPOINT_ERRORS.labels(self._backend, "list").inc()
                    raise
                finally:
                    spent += self._busy.stop() - start
                yield item
        finally:
            aclose = getattr(items, "aclose", None)
            if aclose is not None:
                await aclose()
            CHECKPOINT_READ_SECONDS.labels(self._backend).observe(spent)
            CHECKPOINT_OPERATIONS.labels(self._backend, "list").inc()


class _BusyClock:
    """Counts the wall time during which at least one operation is in flight."""

    def __init__(self, counter: Any) -> None:
        self._counter = counter
        self._in_flight = 0
        self._since = 0.0
        self._lock = threading.Lock()  # sync twins may run in worker threads

    def start(self) -> float:
        """One operation begins; returns the time, for its own duration."""
        with self._lock:
            now = time.perf_counter()
            if not self._in_flight:
                self._since = now
            self._in_flight += 1
            return now

    def stop(self) -> float:
        """One operation ends; returns the time."""
        with self._lock:
            now = time.perf_counter()
            self._in_flight -= 1
            if not self._in_flight:
                self._counter.inc(now - self._since)
            return now


@functools.cache
def _children(backend: str, op: str, histogram: Histogram) -> tuple[Any, Any]:
    """The duration histogram's and the operations counter's series of ``backend`` and ``op``."""
    return histogram.labels(backend), CHECKPOINT_OPERATIONS.labels(backend, op)


@functools.cache
def _written_series(backend: str, op: str) -> Any:
    """The written-bytes counter's series (looked up once: ``labels`` takes a lock each call)."""
    return CHECKPOINT_WRITTEN_BYTES.labels(backend, op)


@functools.cache
def _busy_clock(backend: str) -> _BusyClock:
    # One per backend, shared by every wrapper of it (with_allowlist makes more).
    return _BusyClock(CHECKPOINT_BUSY_SECONDS.labels(backend))


def _close_sync(items: Iterator[Any]) -> None:
    close = getattr(items, "close", None)
    if close is not None:
        close()


def _overrides(inner_type: type, name: str) -> bool:
    return getattr(inner_type, name, None) is not getattr(BaseCheckpointSaver, name)


@functools.cache
def _class_for(inner_type: type[BaseCheckpointSaver]) -> type[InstrumentedSaver]:
    extras = {
        method.__name__: method
        for op in _EXTENDED
        for method in (
            _delegate(op, CHECKPOINT_WRITE_SECONDS, is_async=False),
            _delegate(op, CHECKPOINT_WRITE_SECONDS, is_async=True),
        )
        if _overrides(inner_type, method.__name__)
    }
    if not extras:
        return InstrumentedSaver
    return type(f"InstrumentedSaver[{inner_type.__name__}]", (InstrumentedSaver,), extras)


def instrument(inner: BaseCheckpointSaver, backend: str) -> InstrumentedSaver:
    """Wrap ``inner`` once (an already wrapped saver is returned as it is).

    Args:
        inner: any saver.
        backend: the ``backend`` label.

    Returns:
        An :class:`InstrumentedSaver` (subclass) exposing the methods ``inner``'s type
        implements.
    """
    if isinstance(inner, InstrumentedSaver):
        return inner
    return _class_for(type(inner))(inner, backend)
