"""The I/O steps an operation of the ``redis`` saver asks its driver for (sync or async).

An operation (:mod:`~threadline.checkpoint.redis.reads`, :mod:`~threadline.checkpoint.redis.writes`,
:mod:`~threadline.checkpoint.redis.upkeep`) is a generator, an :data:`Op`: it yields a step and
receives the reply; the drivers (:mod:`~threadline.checkpoint.redis.drivers`) of
:class:`~threadline.checkpoint.redis.saver.RedisCheckpointSaver` perform the step, synchronously
or not.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Script:
    """Run one registered Lua script; the driver sends back its reply."""

    name: str
    keys: Sequence[str]
    args: Sequence[Any]


@dataclass(frozen=True, slots=True)
class Commands:
    """Run commands (tuples, or :class:`Script` calls) in one round trip.

    A MULTI/EXEC transaction when ``transaction``. The driver sends back the list of replies.
    """

    commands: Sequence[tuple[Any, ...] | Script]
    transaction: bool = False


@dataclass(frozen=True, slots=True)
class Scan:
    """Every key matching ``pattern``, on every master of a Cluster (SCAN; not for hot paths).

    The driver sends back the list of keys (a key may repeat, as with SCAN)."""

    pattern: str


@dataclass(frozen=True, slots=True)
class Emit:
    """Hand one item to the caller of an iterating operation (``list``)."""

    value: Any


Step = Script | Commands | Scan | Emit
Op = Generator[Step, Any, Any]
