"""The ``redis`` backend: threadline's checkpoint saver on plain Redis data structures.

============  ==============================================================================
module        holds
============  ==============================================================================
``saver``     :class:`RedisCheckpointSaver`: set-up (clients, scripts), the public methods
``drivers``   the sync and async drivers that perform an operation's steps
``steps``     the I/O steps an operation yields to a driver (script, commands, scan, emit)
``reads``     the read operations (load, get, list, delta history), written once as generators
``writes``    the write operations (put, put_writes) and the memos of what this process wrote
``upkeep``    the upkeep operations (retain, delete a thread or runs, copy a thread, prune)
``scripts``   the Lua scripts, each with its KEYS/ARGV/reply documented
``records``   the record format (netstrings the scripts can read) and field names; no I/O
``lists``     lists stored item by item and dicts of them by reference (their blobs); no I/O
``cache``     the decoded-value cache of one process
============  ==============================================================================

The keys themselves are named in :mod:`threadline.redis_keys`, shared with the lease and the
sessions.
"""

from __future__ import annotations

from threadline.checkpoint.errors import FencedError
from threadline.checkpoint.redis.saver import DEFAULT_CACHE_BYTES, RedisCheckpointSaver

__all__ = ["DEFAULT_CACHE_BYTES", "FencedError", "RedisCheckpointSaver"]
