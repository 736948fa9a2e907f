"""A principal's view of the store (threadline.store.tenant) against the oracle: for each
principal, a TenantStore over one shared store must answer exactly as a store of its own
would (LangGraph's InMemoryStore), over long seeded random sequences in which other principals
write the same namespaces and keys; and what it stores is counted and bounded."""

from __future__ import annotations

import random

import pytest
from langgraph.store.memory import InMemoryStore

from threadline.config import QuotaSettings
from threadline.quotas import LocalQuotas, QuotaExceeded
from threadline.store.tenant import ItemTooLarge, Tenancy, principal_label

pytestmark = pytest.mark.unit

PRINCIPALS = ("alice", "bob", "carol")
LABELS = ("a", "b", "c", "memories", "x")
KEYS = tuple(f"k{i}" for i in range(8))


def a_namespace(rng: random.Random) -> tuple[str, ...]:
    return tuple(rng.choice(LABELS) for _ in range(rng.randint(1, 4)))


def shape(result):
    """Results as comparable data (timestamps differ between two stores)."""
    if isinstance(result, list):
        return [shape(r) for r in result]
    if result is None or isinstance(result, tuple):
        return result
    return (result.namespace, result.key, result.value)


async def one_step(rng: random.Random, store, oracle) -> None:
    """One random operation on both; their answers must agree."""
    kind = rng.choice(["put", "put", "put", "get", "delete", "search", "list"])
    if kind == "put":
        ns, key, value = a_namespace(rng), rng.choice(KEYS), {"n": rng.randint(0, 5), "tag": rng.choice("pq")}
        assert await store.aput(ns, key, value) == await oracle.aput(ns, key, value)
    elif kind == "get":
        ns, key = a_namespace(rng), rng.choice(KEYS)
        assert shape(await store.aget(ns, key)) == shape(await oracle.aget(ns, key))
    elif kind == "delete":
        ns, key = a_namespace(rng), rng.choice(KEYS)
        await store.adelete(ns, key)
        await oracle.adelete(ns, key)
    elif kind == "search":
        prefix = a_namespace(rng)[: rng.randint(0, 2)]
        filter_ = rng.choice([None, {"n": rng.randint(0, 5)}, {"tag": "p"}, {"n": {"$gte": 3}}])
        limit, offset = rng.randint(1, 30), rng.randint(0, 10)
        got = await store.asearch(prefix, filter=filter_, limit=limit, offset=offset)
        want = await oracle.asearch(prefix, filter=filter_, limit=limit, offset=offset)
        assert shape(got) == shape(want), (prefix, filter_, limit, offset)
    else:
        prefix = a_namespace(rng)[: rng.randint(0, 2)] or None
        suffix = rng.choice([None, (rng.choice(LABELS),), ("*", rng.choice(LABELS))])
        depth, limit, offset = rng.choice([None, 1, 2, 3]), rng.randint(1, 50), rng.randint(0, 5)
        got = await store.alist_namespaces(
            prefix=prefix, suffix=suffix, max_depth=depth, limit=limit, offset=offset
        )
        want = await oracle.alist_namespaces(
            prefix=prefix, suffix=suffix, max_depth=depth, limit=limit, offset=offset
        )
        assert got == want, (prefix, suffix, depth, limit, offset)


@pytest.mark.parametrize("seed", range(8))
async def test_each_principal_sees_a_store_of_its_own(seed: int) -> None:
    rng = random.Random(seed)
    tenancy = Tenancy(InMemoryStore(), None, 0, scoped=True)
    views = {p: tenancy.of(p) for p in PRINCIPALS}
    oracles = {p: InMemoryStore() for p in PRINCIPALS}
    for _ in range(1500):
        principal = rng.choice(PRINCIPALS)
        await one_step(rng, views[principal], oracles[principal])
    # And underneath, every item sits under its owner's label.
    labels = {ns[0] for ns in await tenancy.store.alist_namespaces(max_depth=1, limit=100)}
    assert labels <= {principal_label(p) for p in PRINCIPALS}


async def test_with_custom_auth_namespaces_are_stored_as_given() -> None:
    base = InMemoryStore()
    await Tenancy(base, None, 0, scoped=False).of("alice").aput(("users", "u1"), "k", {"v": 1})
    assert (await base.aget(("users", "u1"), "k")).value == {"v": 1}


async def test_items_count_toward_the_principals_quota_until_deleted() -> None:
    quotas = LocalQuotas(QuotaSettings(store_items_per_principal=2))
    tenancy = Tenancy(InMemoryStore(), quotas, 0, scoped=True)
    alice, bob = tenancy.of("alice"), tenancy.of("bob")
    await alice.aput(("n",), "a", {"v": 1})
    await alice.aput(("n",), "b", {"v": 1})
    await alice.aput(("n",), "a", {"v": 2})  # the same item again: no new slot
    with pytest.raises(QuotaExceeded) as refused:
        await alice.aput(("n",), "c", {"v": 1})
    assert refused.value.setting == "QUOTA_STORE_ITEMS_PER_PRINCIPAL"
    assert await alice.aget(("n",), "c") is None  # nothing stored
    await bob.aput(("n",), "c", {"v": 1})  # another principal's count
    await alice.adelete(("n",), "b")
    await alice.aput(("n",), "c", {"v": 1})


async def test_an_item_past_the_byte_limit_is_refused_and_not_stored() -> None:
    tenancy = Tenancy(InMemoryStore(), None, 64, scoped=True)
    alice = tenancy.of("alice")
    with pytest.raises(ItemTooLarge) as refused:
        await alice.aput(("n",), "big", {"text": "x" * 64})
    assert "QUOTA_STORE_ITEM_BYTES=64" in refused.value.message
    assert await alice.aget(("n",), "big") is None


async def test_expired_items_stop_counting() -> None:
    now = [1000.0]
    quotas = LocalQuotas(QuotaSettings(store_items_per_principal=1), clock=lambda: now[0])
    await quotas.reserve_store_item("alice", "a", expires_at=1060.0)
    with pytest.raises(QuotaExceeded):
        await quotas.reserve_store_item("alice", "b", expires_at=None)
    now[0] = 1061.0
    await quotas.reserve_store_item("alice", "b", expires_at=None)
