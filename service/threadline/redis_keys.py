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
``tl:{T}:bytes``    STRING  message bytes clients sent to the thread (:mod:`threadline.quotas`)
``tl:session:<h>``  HASH    the session whose token hashes to ``h``: principal, key digest,
                            absolute deadline (:mod:`threadline.sessions`)
``tl:p:{P}:threads`` ZSET   live threads of principal ``P``, scored by last activity (ms)
``tl:p:{P}:items``  ZSET    live store items of principal ``P`` (digests), scored by expiry (ms)
``tl:p:{P}:assistants`` HASH  assistants principal ``P`` created: id → current record
``tl:p:{P}:assistant:<A>`` HASH  versions of assistant ``A`` (:mod:`threadline.runs.assistant_records`)
``tl:{crons}:rec``  HASH    cron id → cron record (:mod:`threadline.runs.cron_records`)
``tl:{crons}:next`` HASH    cron id → its next tick (epoch ms)
``tl:{crons}:due``  ZSET    enabled crons by next tick (ms): what every replica's scheduler reads
``tl:{crons}:p:P``  SET     cron ids of principal ``P`` (quota ``QUOTA_CRONS_PER_PRINCIPAL``)
``tl:{crons}:claim:C`` STRING  the scheduler's claim on cron ``C``'s due tick, PEXPIREd
``tl:{T}:thread``   HASH    LangGraph API thread record (:mod:`threadline.runs.records_redis`)
``tl:{T}:runs``     ZSET    the thread's run ids by creation time (µs)
``tl:{T}:runq``     ZSET    the thread's active (pending, running) run ids, in queue order
``tl:{T}:run:R``    HASH    run record of run ``R``
``tl:{T}:run:R:ev`` STREAM  run ``R``'s events (SSE ids are the entry ids)
``tl:{T}:run:R:end`` STREAM run ``R``'s result, one entry once it ended (what joiners block on)
``tl:{T}:run:R:x``  LIST    cancel request of run ``R`` (its executor polls for it)
``tl:{T}:run:R:hb`` STRING  heartbeat of run ``R``'s executor, PEXPIREd (absent: it died)
``tl:owner:<h>``    ZSET    thread ids of the principal whose name hashes to ``h``, by creation
``tl:threads:ttl``  ZSET    thread ids with a TTL, by expiry (ms): what each replica's TTL
                            sweep claims from (:mod:`threadline.runs.threads`)
``tl:runs:active``  ZSET    ``<T> <R>`` of every pending or running API run, by creation (µs):
                            what each replica's orphan sweep reads (ADR 0010)
``tl:store:{L}:…``  …       long-term memory under root label ``L`` (index ``x``, items
                            ``i:<member>``, vector set ``v``) and ``tl:store:{#}:…`` (the root
                            set): named in :mod:`threadline.store.redis_format` (ADR 0015)
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


def thread_bytes_key(thread_id: str) -> str:
    """The quota counter of message bytes sent to ``thread_id`` (not checkpoint data: the
    saver's ``delete_thread`` leaves it; the quota's ``release_thread`` deletes it)."""
    return f"{thread_tag(thread_id)}:bytes"


def principal_threads_key(principal: str) -> str:
    """The ZSET of ``principal``'s live threads (quota ``QUOTA_THREADS_PER_PRINCIPAL``)."""
    return f"{PREFIX}:p:{{{principal}}}:threads"


def principal_store_items_key(principal: str) -> str:
    """The ZSET of ``principal``'s live store items (quota ``QUOTA_STORE_ITEMS_PER_PRINCIPAL``)."""
    return f"{PREFIX}:p:{{{principal}}}:items"


def principal_assistants_key(principal: str) -> str:
    """The HASH of ``principal``'s assistants (quota ``QUOTA_ASSISTANTS_PER_PRINCIPAL``)."""
    return f"{PREFIX}:p:{{{principal}}}:assistants"


def principal_assistant_versions_key(principal: str, assistant_id: str) -> str:
    """The HASH of the versions of ``principal``'s assistant ``assistant_id`` (same hash tag)."""
    return f"{PREFIX}:p:{{{principal}}}:assistant:{assistant_id}"


CRONS_TAG = f"{PREFIX}:{{crons}}"


class CronKeys(NamedTuple):
    """The keys of the crons (one hash tag: every cron script is one slot, also on a Cluster)."""

    records: str
    next: str
    due: str


def cron_keys() -> CronKeys:
    return CronKeys(f"{CRONS_TAG}:rec", f"{CRONS_TAG}:next", f"{CRONS_TAG}:due")


def principal_crons_key(principal: str) -> str:
    """The SET of ``principal``'s cron ids (same hash tag as every cron key)."""
    return f"{CRONS_TAG}:p:{principal}"


def cron_claim_key(cron_id: str) -> str:
    """The scheduler's claim on ``cron_id``'s due tick (:mod:`threadline.runs.crons`)."""
    return f"{CRONS_TAG}:claim:{cron_id}"


def thread_record_key(thread_id: str) -> str:
    """The LangGraph API record (owner, metadata, status) of ``thread_id``."""
    return f"{thread_tag(thread_id)}:thread"


def runs_index_key(thread_id: str) -> str:
    """Every run id of ``thread_id``, scored by creation time in µs."""
    return f"{thread_tag(thread_id)}:runs"


def run_queue_key(thread_id: str) -> str:
    """The active (pending or running) run ids of ``thread_id``, scored by queue order."""
    return f"{thread_tag(thread_id)}:runq"


def run_key(thread_id: str, run_id: str) -> str:
    """The record of run ``run_id`` (same hash tag as its thread)."""
    return f"{thread_tag(thread_id)}:run:{run_id}"


def run_events_key(thread_id: str, run_id: str) -> str:
    """The event stream of run ``run_id``."""
    return f"{run_key(thread_id, run_id)}:ev"


def run_end_key(thread_id: str, run_id: str) -> str:
    """The stream that gets run ``run_id``'s result as its one entry when the run ends, if a
    client on another replica joins it then (:func:`run_join_key`)."""
    return f"{run_key(thread_id, run_id)}:end"


def run_join_key(thread_id: str, run_id: str) -> str:
    """Present (with a short TTL, renewed) while a client on a replica that does not execute
    run ``run_id`` waits for its result."""
    return f"{run_key(thread_id, run_id)}:j"


def run_cancel_key(thread_id: str, run_id: str) -> str:
    """The list a cancel request of run ``run_id`` is pushed to."""
    return f"{run_key(thread_id, run_id)}:x"


def run_watch_key(thread_id: str, run_id: str) -> str:
    """Present (with a short TTL, renewed) while a client streams run ``run_id``'s events from
    a replica that does not execute it."""
    return f"{run_key(thread_id, run_id)}:w"


def thread_watch_key(thread_id: str) -> str:
    """Present (with a short TTL, renewed) while a client follows ``thread_id``'s runs
    (``threads.join_stream``): every run that ends meanwhile keeps its events."""
    return f"{thread_tag(thread_id)}:watch"


def run_heartbeat_key(thread_id: str, run_id: str) -> str:
    """Present while the executor of run ``run_id`` lives (renewed with a short TTL)."""
    return f"{run_key(thread_id, run_id)}:hb"


def thread_expiry_key() -> str:
    """Thread ids with a TTL, scored by when they expire (ms)."""
    return f"{PREFIX}:threads:ttl"


def active_runs_key() -> str:
    """Every pending or running LangGraph API run of the deployment (``"<thread> <run>"``)."""
    return f"{PREFIX}:runs:active"


def owner_threads_key(principal_digest: str) -> str:
    """The thread ids of the principal whose name has SHA-256 hex ``principal_digest``."""
    return f"{PREFIX}:owner:{principal_digest}"


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
