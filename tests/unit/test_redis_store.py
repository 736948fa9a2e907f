"""What ``RedisStore`` decides without a server: key names and index members (their order, the
ranges a prefix reads), the filter as InMemoryStore evaluates it, list_namespaces conditions,
scores, and the constructor's checks."""

from __future__ import annotations

import asyncio
import random
import string

import pytest
from langgraph.store.base import MatchCondition, PutOp
from langgraph.store.memory import _compare_values, _cosine_similarity, _does_match

from threadline.store import redis_format as fmt
from threadline.store.redis import RedisStore
from threadline.store.redis_search import Budget, _merge

pytestmark = pytest.mark.unit

ALPHABET = "ab\x01 {}%#:é日" + string.digits  # labels hold anything but NUL and "."


def labels(rng: random.Random, n: int) -> tuple[str, ...]:
    return tuple("".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 3))) for _ in range(n))


def slot_tag(key: bytes) -> bytes:
    """The part of a key Redis Cluster hashes (its first non-empty {…})."""
    start = key.find(b"{")
    end = key.find(b"}", start + 1)
    return key[start + 1 : end] if start >= 0 and end > start + 1 else key


def test_members_sort_as_namespace_key_tuples_and_parse_back():
    rng = random.Random(7)
    pairs = set()
    for _ in range(2000):
        ns = ("root", *labels(rng, rng.randint(0, 3)))
        key = "".join(rng.choice(ALPHABET + "\0") for _ in range(rng.randint(0, 3)))
        pairs.add((ns, key))
    by_member = sorted(pairs, key=lambda p: fmt.member(*p))
    assert by_member == sorted(pairs)
    for ns, key in pairs:
        assert fmt.parse_member("root", fmt.member(ns, key)) == (ns, key)


def test_a_prefix_range_holds_exactly_the_members_under_it():
    rng = random.Random(8)
    members = {}
    for _ in range(1500):
        ns = ("root", *labels(rng, rng.randint(0, 3)))
        members[fmt.member(ns, rng.choice("kxy"))] = ns
    for _ in range(200):
        ns = rng.choice(list(members.values()))
        rest = ns[1 : rng.randint(1, len(ns))]
        lo, hi = fmt.prefix_range(rest)
        inside = {m for m in members if _in_lex_range(m, lo, hi)}
        assert inside == {m for m, n in members.items() if n[1 : 1 + len(rest)] == rest}


def _in_lex_range(m: bytes, lo: bytes, hi: bytes) -> bool:
    low = lo == b"-" or (m >= lo[1:] if lo[:1] == b"[" else m > lo[1:])
    high = hi == b"+" or (m <= hi[1:] if hi[:1] == b"[" else m < hi[1:])
    return low and high


def test_every_key_of_a_root_shares_its_cluster_slot_and_roots_cannot_collide():
    keys = fmt.Keys("tl:store")
    for root in ["alice", "{x}", "a}b", "%7D", "#", "}", "{", "日本", "a b"]:
        tags = {slot_tag(k) for k in (keys.index(root), keys.vectors(root), keys.item(root, b"b\0\0k{}"))}
        assert len(tags) == 1, root
        assert tags != {slot_tag(keys.roots)}, root
    assert {slot_tag(k) for k in (keys.roots, keys.gen, keys.meta)} == {b"#"}
    tags = [fmt._tag(r) for r in ["%", "%25", "{", "%7B", "#", "%23"]]
    assert len(set(tags)) == len(tags)  # the escaping is injective


def test_vector_attributes_name_every_prefix_below_the_root():
    attributes = fmt.vector_attributes(("alice", "notes", "work"))
    expected = [fmt.prefix_hash(("notes",)), fmt.prefix_hash(("notes", "work"))]
    assert attributes == f'{{"p": [{expected[0]}, {expected[1]}]}}'.encode()
    assert fmt.vector_attributes(("alice",)) == b'{"p": []}'
    assert all(h < 2**53 for h in expected)  # exact as JSON numbers


VALUES = [
    0,
    1,
    2,
    5,
    -3,
    1.0,
    2.5,
    True,
    False,
    "1",
    "a",
    "b",
    None,
    [1, 2],
    [2, 1],
    {"a": 1},
    {"a": 2, "b": "x"},
]
FILTERS = [0, 1, 2.5, True, "a", None, [1, 2], {"a": 1}, {"b": "x"}]
OPERATORS = ["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]


def test_the_filter_is_inmemorystores_where_it_answers_and_no_match_where_it_raises():
    rng = random.Random(9)
    raised = 0
    for _ in range(5000):
        value = {f: rng.choice(VALUES) for f in rng.sample("xyz", rng.randint(0, 3))}
        filter = {}
        for field in rng.sample("xyz", rng.randint(1, 2)):
            if rng.random() < 0.5:
                filter[field] = rng.choice(FILTERS)
            else:
                filter[field] = {
                    op: rng.choice([0, 1, 2, "a", 2.5]) for op in rng.sample(OPERATORS, rng.randint(1, 2))
                }
        try:
            expected = all(_compare_values(value.get(k), v) for k, v in filter.items())
        except (TypeError, ValueError):  # float() of a missing, list or non-numeric value
            raised += 1
            assert fmt.matches(value, filter) is False, (value, filter)
            continue
        assert fmt.matches(value, filter) == expected, (value, filter)
    assert 100 < raised < 4000


def test_nested_operators_and_unknown_ones():
    assert fmt.matches({"a": {"b": 3}}, {"a": {"b": {"$gt": 2}}})
    assert not fmt.matches({"a": {"b": "x"}}, {"a": {"b": {"$gt": 2}}})
    assert fmt.matches({"n": "3"}, {"n": {"$gte": 3}})  # float("3"), as InMemoryStore
    with pytest.raises(ValueError, match="Unsupported operator: \\$in"):
        fmt.check_filter({"a": {"b": {"$in": [1]}}})
    fmt.check_filter({"a": {"b": 1}, "c": [{"$gt": 1}], "d": {"$ne": 1}})


def test_merged_conditions_match_what_inmemorystore_matches():
    rng = random.Random(10)
    words = ["a", "b", "c", "*"]
    for _ in range(3000):
        conditions = [
            MatchCondition(
                rng.choice(["prefix", "suffix"]), tuple(rng.choice(words) for _ in range(rng.randint(0, 3)))
            )
            for _ in range(rng.randint(1, 3))
        ]
        namespace = tuple(rng.choice("abc") for _ in range(rng.randint(1, 4)))
        expected = all(_does_match(c, namespace) for c in conditions)
        merged = _merge(conditions)
        got = merged is not None and all(
            _does_match(MatchCondition(kind, tuple(path)), namespace)
            for kind, path in zip(("prefix", "suffix"), merged, strict=True)
        )
        assert got == expected, (conditions, namespace)


def test_cosine_is_inmemorystores_max_over_an_items_vectors():
    rng = random.Random(11)
    for _ in range(200):
        query = [rng.uniform(-1, 1) for _ in range(6)]
        vectors = [[rng.uniform(-1, 1) for _ in range(6)] for _ in range(rng.randint(1, 3))]
        packed = fmt.unpack_vectors(b"".join(fmt.pack_vectors(vectors, 6)), 6)
        assert fmt.cosine(query, packed) == pytest.approx(max(_cosine_similarity(query, vectors)), abs=1e-6)
    assert fmt.cosine([1.0, 0.0], [(0.0, 0.0)]) == 0.0  # a zero vector scores 0, as there
    with pytest.raises(ValueError, match="3 dimensions"):
        fmt.pack_vectors([[1.0, 2.0, 3.0]], 2)


def test_ttls_timestamps_and_values():
    assert fmt.ttl_ms(None) == 0
    assert fmt.ttl_ms(1 / 60) == 1000
    assert fmt.ttl_ms(1e-9) == 1  # never 0, which means none
    assert fmt.timestamp(b"1700000000123456").isoformat() == "2023-11-14T22:13:20.123456+00:00"
    assert fmt.encode_value({"é": [1, 2.0, None]}) == '{"é":[1,2.0,null]}'.encode()


def test_budget_counts_down_and_says_when_it_ran_out():
    budget = Budget(5)
    assert budget.take(3) == 3 and budget.take(3) == 2 and not budget.hit
    assert budget.take(1) == 0 and budget.hit


class _Client:  # what the constructor looks at
    pass


def test_constructor_and_setup_checks():
    with pytest.raises(ValueError, match="max_scan"):
        RedisStore(_Client(), max_scan=0)
    store = RedisStore(_Client(), index={"dims": 4, "embed": lambda texts: [[1.0] * 4 for _ in texts]})
    assert store.dims == 4 and store.mode == "" and store.supports_ttl
    with pytest.raises(RuntimeError, match="setup"):
        store.batch([PutOp(("a",), "k", {"v": 1})])
    with pytest.raises(RuntimeError, match="setup"):
        asyncio.run(store.run([("PING",)]))


def test_an_empty_namespace_is_refused_for_a_put():
    store = RedisStore(_Client())
    store._shas = {"put": "x"}
    with pytest.raises(ValueError, match="empty"):
        asyncio.run(store.abatch([PutOp((), "k", {"v": 1})]))
