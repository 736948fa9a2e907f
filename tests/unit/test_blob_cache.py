"""The redis saver's decoded-blob cache, on its own (the saver's use of it is tested on a real
Redis in tests/integration/test_redis_saver.py)."""

from __future__ import annotations

import pytest

from threadline.checkpoint.redis.cache import MISS, NO_VALUE, BlobCache

pytestmark = pytest.mark.unit


def field(channel: str, version: int, ns: str = "") -> bytes:
    return f"{ns}\x00{channel}\x00{version:032}.0.5".encode()


def test_holds_a_value_by_its_exact_field() -> None:
    cache = BlobCache(1000)
    cache.put("t", field("messages", 1), ["a"], 10)
    assert cache.get("t", field("messages", 1)) == ["a"]
    assert cache.get("t", field("messages", 2)) is MISS, "another version is not this one"
    assert cache.get("other", field("messages", 1)) is MISS, "fields are per thread"
    assert cache.get("t", field("messages", 1, ns="sub")) is MISS, "and per namespace"


def test_a_newer_version_replaces_the_older_one() -> None:
    cache = BlobCache(1000)
    cache.put("t", field("messages", 1), ["a"], 10)
    cache.put("t", field("messages", 2), ["a", "b"], 20)
    cache.put("t", field("owner", 1), "alice", 5)
    assert cache.get("t", field("messages", 1)) is MISS
    assert cache.get("t", field("messages", 2)) == ["a", "b"]
    assert (len(cache), cache.bytes) == (2, 25)


def test_containers_are_copies_both_ways() -> None:
    cache = BlobCache(1000)
    given = ["a"]
    cache.put("t", field("messages", 1), given, 10)
    given.append("changed after the put")
    got = cache.get("t", field("messages", 1))
    got.append("changed by a reader")
    assert cache.get("t", field("messages", 1)) == ["a"]


def test_an_empty_blob_is_remembered_as_no_value() -> None:
    cache = BlobCache(1000)
    cache.put("t", field("__start__", 3), NO_VALUE, 6)
    assert cache.get("t", field("__start__", 3)) is NO_VALUE


def test_evicts_least_recently_used_threads_past_the_budget() -> None:
    cache = BlobCache(100)
    cache.put("old", field("messages", 1), ["x"], 40)
    cache.put("used", field("messages", 1), ["y"], 40)
    assert cache.get("old", field("messages", 1)) == ["x"]  # now "used" is the older one
    cache.put("new", field("messages", 1), ["z"], 40)
    assert cache.get("used", field("messages", 1)) is MISS
    assert cache.get("old", field("messages", 1)) == ["x"]
    assert cache.get("new", field("messages", 1)) == ["z"]
    assert cache.bytes == 80


def test_a_value_larger_than_the_budget_is_not_kept() -> None:
    cache = BlobCache(100)
    cache.put("t", field("messages", 1), ["x"], 101)
    assert cache.get("t", field("messages", 1)) is MISS
    assert cache.bytes == 0


def test_budget_zero_keeps_nothing() -> None:
    cache = BlobCache(0)
    cache.put("t", field("owner", 1), "alice", 5)
    assert cache.get("t", field("owner", 1)) is MISS


def test_drop_forgets_a_thread() -> None:
    cache = BlobCache(1000)
    cache.put("t", field("messages", 1), ["a"], 10)
    cache.put("u", field("messages", 1), ["b"], 10)
    cache.drop("t")
    cache.drop("never seen")
    assert cache.get("t", field("messages", 1)) is MISS
    assert (len(cache), cache.bytes) == (1, 10)
