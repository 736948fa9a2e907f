"""The memory session store under an injected clock: sliding and absolute expiry, logout,
the sweep of tokens nobody presents again, and garbage tokens refused on their shape."""

from __future__ import annotations

import pytest

from threadline.auth import ApiKeys, hash_key
from threadline.sessions import MemorySessionStore, new_token, plausible_token

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


async def test_sliding_expiry_within_an_absolute_lifetime(clock):
    store = MemorySessionStore(ttl_seconds=10, max_lifetime_seconds=25, clock=clock)
    token = await store.create("alice", "d" * 64)
    for _ in range(2):  # used every 8 s: each use slides the 10 s idle expiry
        clock.now += 8
        assert (await store.lookup(token)).principal == "alice"
    clock.now += 8  # 24 s after minting, idle 8 s: alive
    assert await store.lookup(token) is not None
    clock.now += 2  # 26 s: past the absolute lifetime, however recently used
    assert await store.lookup(token) is None


async def test_idle_expiry(clock):
    store = MemorySessionStore(ttl_seconds=10, max_lifetime_seconds=100, clock=clock)
    token = await store.create("alice", "d" * 64)
    clock.now += 10
    assert await store.lookup(token) is None


async def test_logout_revokes_at_once(clock):
    store = MemorySessionStore(ttl_seconds=10, max_lifetime_seconds=100, clock=clock)
    token = await store.create("alice", "d" * 64)
    assert await store.revoke(token) is True
    assert await store.lookup(token) is None
    assert await store.revoke(token) is False


async def test_expired_tokens_nobody_presents_are_swept(clock):
    store = MemorySessionStore(ttl_seconds=10, max_lifetime_seconds=100, clock=clock)
    for _ in range(50):
        await store.create("alice", "d" * 64)
    assert len(store) == 50
    clock.now += MemorySessionStore.SWEEP_SECONDS
    kept = await store.create("alice", "d" * 64)
    assert len(store) == 1 and await store.lookup(kept) is not None


async def test_the_session_remembers_the_key_that_minted_it(clock):
    store = MemorySessionStore(ttl_seconds=10, max_lifetime_seconds=100, clock=clock)
    token = await store.create("alice", hash_key("k1"))
    session = await store.lookup(token)
    assert ApiKeys({hash_key("k1"): "alice"}).owner(session.key_digest) == "alice"
    assert ApiKeys({hash_key("k2"): "alice"}).owner(session.key_digest) is None


@pytest.mark.parametrize("token", ["", "x", "a" * 42, "a" * 44, "a" * 42 + "!", "é" * 43, " " + "a" * 42])
def test_tokens_that_cannot_be_ours(token):
    assert not plausible_token(token)


def test_our_tokens_are_plausible():
    assert all(plausible_token(new_token()) for _ in range(200))
