"""The JSON wire helpers of the LangGraph API (runs/wire.py): what ``dumps`` makes of values
orjson cannot encode by itself, where orjson's own limits still stop it, the error bodies a
client may see, and snapshots of real graphs (LangGraph's ``InMemorySaver``) as ``ThreadState``."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import operator
import uuid
from collections import deque
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any, NamedTuple, TypedDict

import orjson
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.types import Send, interrupt
from pydantic import BaseModel

from threadline.runs import wire

pytestmark = pytest.mark.unit


def round_trip(value: Any) -> Any:
    return wire.loads(wire.dumps(value))


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


@dataclasses.dataclass
class Point:
    x: int
    tags: set[str]


class Pair(NamedTuple):
    left: int
    right: Decimal


class Profile(BaseModel):
    name: str
    joined: date


class Legacy:
    """An object with ``_asdict`` (as some libraries' records have) that is no tuple."""

    def _asdict(self) -> dict[str, Any]:
        return {"kind": "legacy", "when": timedelta(minutes=1)}


class Opaque:
    def __repr__(self) -> str:
        return "<Opaque 7>"


# --- values orjson cannot encode alone ---------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (Send("reply", {"n": 1}), {"node": "reply", "args": {"n": 1}}),
        ({"b", "a"}, None),  # a list, in set order: checked below
        (frozenset({1}), [1]),
        (deque([1, 2, 3]), [1, 2, 3]),
        ((1, "x"), [1, "x"]),
        (Decimal("1.10"), "1.10"),
        (timedelta(seconds=90, microseconds=500_000), 90.5),
        (uuid.UUID(int=5), "00000000-0000-0000-0000-000000000005"),
        (datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), "2024-01-02T03:04:05+00:00"),
        (date(2024, 1, 2), "2024-01-02"),
        (Colour.RED, "red"),
        (Level.HIGH, 3),
        (b"caf\xc3\xa9 \xff", "café \ufffd"),  # bytes as text, undecodable bytes replaced
        (Point(1, {"t"}), {"x": 1, "tags": ["t"]}),
        (Pair(1, Decimal("2.5")), {"left": 1, "right": "2.5"}),  # orjson leaves tuple subclasses
        (Profile(name="ann", joined=date(2020, 5, 1)), {"name": "ann", "joined": "2020-05-01"}),
        (Legacy(), {"kind": "legacy", "when": 60.0}),
        (Opaque(), "<Opaque 7>"),  # anything else: its repr, never an error
        (float("nan"), None),
        (float("inf"), None),
    ],
)
def test_values_take_their_wire_form(value: Any, expected: Any) -> None:
    got = round_trip(value)
    if isinstance(value, set):
        assert sorted(got) == sorted(value)
    else:
        assert got == expected


def test_classes_are_their_repr_not_their_fields() -> None:
    # A dataclass or model *class* has the attributes of an instance's form: not taken for one.
    assert round_trip(Point) == repr(Point)
    assert round_trip(Profile) == repr(Profile)
    assert round_trip(Pair) == repr(Pair)


def test_forms_nest_inside_each_other() -> None:
    value = {
        "send": Send("tool", {"ids": {uuid.UUID(int=1)}}),
        "queue": deque([Decimal("0.1"), b"raw"]),
        "errors": [ValueError("bad input"), OSError("disk")],
        "sets": frozenset({frozenset({timedelta(seconds=2)})}),
    }
    assert round_trip(value) == {
        "send": {"node": "tool", "args": {"ids": ["00000000-0000-0000-0000-000000000001"]}},
        "queue": ["0.1", "raw"],
        "errors": [
            {"error": "ValueError", "message": "bad input"},
            {"error": "OSError", "message": "the run failed; see the replica's log"},
        ],
        "sets": [[2.0]],
    }


def test_messages_are_their_model_dump() -> None:
    messages = [
        HumanMessage("hi", id="h1"),
        AIMessage("", id="a1", tool_calls=[{"name": "f", "args": {"x": 1}, "id": "c1"}]),
        ToolMessage("42", tool_call_id="c1", id="t1"),
    ]
    got = round_trip({"messages": messages})["messages"]
    assert got == [orjson.loads(orjson.dumps(m.model_dump())) for m in messages]
    assert [(m["type"], m["content"], m["id"]) for m in got] == [
        ("human", "hi", "h1"),
        ("ai", "", "a1"),
        ("tool", "42", "t1"),
    ]
    assert got[1]["tool_calls"][0]["args"] == {"x": 1}


# --- keys ---------------------------------------------------------------------------------------


def test_non_str_keys_become_strings() -> None:
    value = {
        7: "int",
        2.5: "float",
        True: "bool",
        None: "none",
        uuid.UUID(int=3): "uuid",
        date(2024, 1, 1): "date",
        Colour.RED: "enum",
    }
    assert round_trip(value) == {
        "7": "int",
        "2.5": "float",
        "true": "bool",
        "null": "none",
        "00000000-0000-0000-0000-000000000003": "uuid",
        "2024-01-01": "date",
        "red": "enum",
    }


@pytest.mark.parametrize("key", [(1, 2), b"raw", frozenset({1}), 2**64])
def test_keys_orjson_cannot_write_raise_a_type_error(key: Any) -> None:
    # The default hook sees values, never keys: these are orjson's limits, not absorbed here.
    with pytest.raises(orjson.JSONEncodeError) as caught:
        wire.dumps({key: 1})
    assert isinstance(caught.value, TypeError)


# --- orjson's limits ----------------------------------------------------------------------------


@pytest.mark.parametrize("number", [2**64 - 1, -(2**63), 0, 2**63, -1])
def test_integers_within_64_bits_are_exact(number: int) -> None:
    assert wire.dumps(number) == str(number).encode()
    assert round_trip({"n": [number]}) == {"n": [number]}


@pytest.mark.parametrize("number", [2**64, -(2**63) - 1, 10**40])
def test_integers_past_64_bits_raise_a_type_error_the_client_may_read(number: int) -> None:
    """The module's fallback ("never fail a stream on a value we cannot encode") does not reach
    them: orjson refuses them before the default hook. The error is a TypeError, one of
    SHOWN_ERRORS, so a run that fails on it tells its client why."""
    for value in (number, {"deep": [number]}, {number}, Send("n", number)):
        with pytest.raises(orjson.JSONEncodeError, match="64-bit") as caught:
            wire.dumps(value)
        assert wire.error_body(caught.value) == {
            "error": "TypeError",
            "message": "Integer exceeds 64-bit range",
        }


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_nesting_up_to_orjsons_limit_round_trips() -> None:
    deepest = _nested(254)  # 254 levels of lists
    assert round_trip(deepest) == deepest
    assert round_trip({"a": _nested(253)}) == {"a": _nested(253)}


@pytest.mark.parametrize("depth", [255, 1000])
def test_nesting_past_orjsons_limit_raises(depth: int) -> None:
    with pytest.raises(orjson.JSONEncodeError, match="Recursion limit"):
        wire.dumps(_nested(depth))


def test_a_cycle_raises_instead_of_hanging() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(orjson.JSONEncodeError, match="Recursion limit"):
        wire.dumps({"state": loop})


def test_loads_reads_what_dumps_wrote_and_refuses_what_is_not_json() -> None:
    value = {"text": "é ✓ \u2028", "n": [2**64 - 1, -(2**63), 1.5], "none": None}
    assert wire.loads(wire.dumps(value)) == value
    for bad in (b"", b"{", b"NaN", b"[1,]", b'"\\ud800"'):
        with pytest.raises(orjson.JSONDecodeError):
            wire.loads(bad)


# --- error bodies -------------------------------------------------------------------------------


class GraphAuthorError(ValueError):
    pass


@pytest.mark.parametrize(
    ("exc", "message"),
    [
        (ValueError("bad input"), "bad input"),
        (GraphAuthorError("subclass of ValueError"), "subclass of ValueError"),
        (TypeError("wrong type"), "wrong type"),
        (KeyError("k"), "'k'"),
        (RuntimeError("stop"), "stop"),
        (RecursionError("deep"), "deep"),  # a RuntimeError
        (
            UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid"),
            "'utf-8' codec can't decode byte 0xff in position 0: invalid",
        ),
    ],
)
def test_the_graph_authors_own_errors_are_shown(exc: BaseException, message: str) -> None:
    assert wire.error_body(exc) == {"error": type(exc).__name__, "message": message}


@pytest.mark.parametrize(
    "exc",
    [
        OSError("redis://:hunter2@db:6379/1"),
        ConnectionError("postgresql://app:hunter2@pg/app"),
        TimeoutError("hunter2"),
        asyncio.CancelledError("hunter2"),
        Exception("hunter2"),
        ArithmeticError("hunter2"),
    ],
)
def test_other_errors_show_their_type_only(exc: BaseException) -> None:
    body = wire.error_body(exc)
    assert body == {"error": type(exc).__name__, "message": "the run failed; see the replica's log"}
    assert b"hunter2" not in wire.dumps({"error": exc})


# --- checkpoints and snapshots of real graphs ---------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        None,
        {},
        {"configurable": None},
        {"configurable": {"thread_id": "t"}},
        {"configurable": {"checkpoint_id": ""}},
    ],
)
def test_a_config_without_a_checkpoint_id_names_no_checkpoint(config: Any) -> None:
    assert wire.checkpoint_of(config) is None


def test_checkpoint_of_is_the_configs_checkpoint_as_langgraph_api_shows_it() -> None:
    assert wire.checkpoint_of(
        {"configurable": {"thread_id": "t", "checkpoint_id": "c", "checkpoint_ns": None}}
    ) == {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c"}  # a root's: no checkpoint_map
    full = {"thread_id": "t", "checkpoint_ns": "child:1", "checkpoint_id": "c", "checkpoint_map": {"": "p"}}
    assert wire.checkpoint_of({"configurable": {**full, "other": 1}}) == full


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def ask(state: State) -> dict[str, Any]:
    return {"log": [interrupt({"question": "name?"})]}


def fine(state: State) -> dict[str, Any]:
    return {"log": ["fine"]}


def graph_of(checkpointer: Any = None, **nodes: Any) -> Any:
    """A graph whose nodes all run in its first step."""
    builder = StateGraph(State)
    for name, node in nodes.items():
        builder.add_node(name, node)
        builder.add_edge(START, name)
    return builder.compile(checkpointer=checkpointer)


def test_an_interrupted_snapshot_as_thread_state() -> None:
    g = graph_of(InMemorySaver(), ask=ask, fine=fine)
    config = {"configurable": {"thread_id": "one"}}
    g.invoke({"log": ["in"]}, config)
    state = g.get_state(config)
    body = wire.snapshot_dict(state)
    assert body["values"] == {"log": ["in", "fine"]}
    assert body["next"] == ["ask"]
    by_name = {t["name"]: t for t in body["tasks"]}
    (interrupt_,) = state.interrupts
    expected_interrupt = {"value": {"question": "name?"}, "id": interrupt_.id}
    assert by_name["ask"]["interrupts"] == [expected_interrupt]
    assert by_name["ask"]["path"] == ["__pregel_pull", "ask"] and by_name["ask"]["error"] is None
    assert by_name["fine"]["result"] == {"log": ["fine"]} and by_name["fine"]["interrupts"] == []
    assert body["interrupts"] == [expected_interrupt]
    assert body["checkpoint"] == {
        "thread_id": "one",
        "checkpoint_ns": "",
        "checkpoint_id": state.config["configurable"]["checkpoint_id"],
    }
    assert body["checkpoint_id"] == state.config["configurable"]["checkpoint_id"]
    assert body["parent_checkpoint_id"] == state.parent_config["configurable"]["checkpoint_id"]
    assert body["parent_checkpoint"]["checkpoint_id"] == body["parent_checkpoint_id"]
    assert body["metadata"]["step"] == state.metadata["step"] and body["created_at"] == state.created_at
    assert wire.interrupts_by_task(state) == {by_name["ask"]["id"]: [expected_interrupt]}
    assert round_trip(body) == body, "the body is JSON as it is"


def test_an_interrupt_shows_the_schema_it_is_resumed_with_when_the_graph_gave_one() -> None:
    schema = {"type": "object", "properties": {"approve": {"type": "boolean"}}}

    def approve(state: State) -> dict[str, Any]:
        return {"log": [str(interrupt({"question": "ok?"}, response_schema=schema))]}

    g = graph_of(InMemorySaver(), approve=approve, ask=ask)
    config = {"configurable": {"thread_id": "schemas"}}
    g.invoke({"log": []}, config)
    body = wire.snapshot_dict(g.get_state(config))
    by_question = {i["value"]["question"]: i for i in body["interrupts"]}
    assert by_question["ok?"]["response_schema"] == schema
    assert "response_schema" not in by_question["name?"], "none given: none shown, as langgraph-api"


def test_a_fresh_thread_has_an_empty_state() -> None:
    g = graph_of(InMemorySaver(), fine=fine)
    state = g.get_state({"configurable": {"thread_id": "never-run"}})
    body = wire.snapshot_dict(state)
    assert body["values"] == {} and body["next"] == [] and body["tasks"] == []
    assert body["checkpoint"] is None and body["checkpoint_id"] is None
    assert body["parent_checkpoint"] is None and body["parent_checkpoint_id"] is None
    assert body["metadata"] == {} and body["interrupts"] == []
    assert wire.interrupts_by_task(state) == {}


def test_a_subgraph_task_is_its_checkpoint_or_its_whole_state() -> None:
    g = graph_of(InMemorySaver(), child=graph_of(ask=ask))
    config = {"configurable": {"thread_id": "nested"}}
    g.invoke({"log": []}, config)
    shallow = wire.snapshot_dict(g.get_state(config))
    (task,) = shallow["tasks"]
    assert task["state"] is None
    assert task["checkpoint"]["thread_id"] == "nested"
    assert task["checkpoint"]["checkpoint_ns"].startswith("child:")
    deep = wire.snapshot_dict(g.get_state(config, subgraphs=True))
    (task,) = deep["tasks"]
    assert task["checkpoint"] is None
    assert task["state"]["next"] == ["ask"]
    assert task["state"]["checkpoint"]["checkpoint_ns"].startswith("child:")
    assert task["state"]["tasks"][0]["interrupts"][0]["value"] == {"question": "name?"}
    assert deep["interrupts"] == shallow["interrupts"] == task["state"]["interrupts"]


def test_a_failed_task_shows_a_graph_authors_error() -> None:
    def refuse(state: State) -> dict[str, Any]:
        raise ValueError("no such city")

    g = graph_of(InMemorySaver(), refuse=refuse)
    config = {"configurable": {"thread_id": "fails"}}
    with pytest.raises(ValueError):
        g.invoke({"log": []}, config)
    (task,) = wire.snapshot_dict(g.get_state(config))["tasks"]
    assert task["name"] == "refuse" and "no such city" in task["error"]


def test_a_live_task_error_is_an_error_body() -> None:
    # A snapshot built in memory carries the exception itself (a checkpoint, its text).
    from langgraph.types import PregelTask, StateSnapshot

    state = StateSnapshot(
        values={},
        next=("x",),
        config={"configurable": {"thread_id": "t", "checkpoint_id": "c"}},
        metadata=None,
        created_at=None,
        parent_config=None,
        tasks=(PregelTask("i", "x", ("__pregel_pull", "x"), error=OSError("redis://:hunter2@h")),),
        interrupts=(),
    )
    (task,) = wire.snapshot_dict(state)["tasks"]
    assert task["error"] == {"error": "OSError", "message": "the run failed; see the replica's log"}


def test_a_stored_task_error_outside_shown_errors_hides_its_message() -> None:
    def connect(state: State) -> dict[str, Any]:
        raise OSError("redis://:hunter2@db:6379/1 unreachable")

    g = graph_of(InMemorySaver(), connect=connect)
    config = {"configurable": {"thread_id": "leaks"}}
    with pytest.raises(OSError):
        g.invoke({"log": []}, config)
    body = wire.snapshot_dict(g.get_state(config))
    assert b"hunter2" not in wire.dumps(body)
