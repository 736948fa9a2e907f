"""The Redis key schema: every key threadline writes, in one place.

Everything of one thread shares the hash tag ``{thread_id}`` (``tl:{T}:…``), so one Lua script
or MULTI may touch all of it, also on Redis Cluster; sessions live under ``tl:session:…``.
The checkpoint saver, the turn lease and the session store all take their keys from here.

==================  ======  ==============================================================
key                 type    holds
==================  ======  ==============================================================
``tl:{T}:idx``      ZSET    checkpoint index (:mod:`threadline.checkpoint.redis`)
``tl:{T}:cp``       HASH    checkpoint records
``tl:{T}:blobs``    HASH    channel values, one per (channel, version), and list items
``tl:{T}:widx``     ZSET    pending-write index
``tl:{T}:w``        HASH    pending-write records
``tl:{T}:lease``    STRING  the turn lease token (:mod:`threadline.lease`), PEXPIREd
``tl:{T}:fence``    STRING  ``INCR`` counter lease tokens are minted from
``tl:session:<h>``  STRING  principal of the session whose token hashes to ``h``
==================  ======  ==============================================================
"""

from __future__ import annotations

from typing import NamedTuple

PREFIX = "tl"


def thread_tag(thread_id: str) -> str:
    """``tl:{thread_id}``: the prefix (and cluster hash tag) of every key of one thread."""
    return f"{PREFIX}:{{{thread_id}}}"


def lease_key(thread_id: str) -> str:
    """The key holding the turn lease token of ``thread_id`` (same hash tag as its data)."""
    return f"{thread_tag(thread_id)}:lease"


def fence_counter_key(thread_id: str) -> str:
    """The ``INCR`` counter lease tokens of ``thread_id`` are minted from."""
    return f"{thread_tag(thread_id)}:fence"


def session_key(token_digest: str) -> str:
    """The key of the session whose token has SHA-256 hex ``token_digest``."""
    return f"{PREFIX}:session:{token_digest}"


class ThreadKeys(NamedTuple):
    """All keys of one thread, in the KEYS order of every saver script; the first five hold
    checkpoint data."""

    idx: str
    cp: str
    blobs: str
    widx: str
    w: str
    lease: str
    fence: str

    @classmethod
    def of(cls, thread_id: str) -> ThreadKeys:
        tag = thread_tag(thread_id)
        return cls(
            f"{tag}:idx",
            f"{tag}:cp",
            f"{tag}:blobs",
            f"{tag}:widx",
            f"{tag}:w",
            lease_key(thread_id),
            fence_counter_key(thread_id),
        )

    @property
    def data(self) -> tuple[str, str, str, str, str]:
        """The checkpoint data keys: what delete_thread removes."""
        return self[:5]


# SCAN pattern of every thread's index key, and how to get the thread id back out of it.
INDEX_KEY_PATTERN = f"{PREFIX}:{{*}}:idx"


def thread_id_of_index_key(key: bytes) -> str:
    return key.decode()[len(PREFIX) + 2 : -len("}:idx")]
