"""The turn rules that need no store: message ids, idempotent replay, turn numbering.
(Turns against real stores: tests/integration/test_api.py, test_replicas.py, tests/chaos.)"""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from threadline.agent.graph import reply_id_for
from threadline.runs.errors import Conflict
from threadline.turns import _stored_result, _turn_of, check_message_id

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("good", ["m1", "a" * 128, "client:42.retry_2-x"])
def test_message_ids_a_client_may_use(good: str) -> None:
    assert check_message_id(good) == good


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("", "1-128"),
        ("a" * 129, "1-128"),
        ("has space", "1-128"),
        ("slash/", "1-128"),
        ("m1.reply", "reserved for replies"),
    ],
)
def test_message_ids_refused(bad: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        check_message_id(bad)


def test_a_reply_id_is_never_a_valid_message_id() -> None:
    with pytest.raises(ValueError):
        check_message_id(reply_id_for("m1"))


def conversation() -> list:
    return [
        HumanMessage("one", id="m1"),
        AIMessage("turn 1", id=reply_id_for("m1")),
        HumanMessage("two", id="m2"),
        AIMessage("turn 2", id=reply_id_for("m2")),
        HumanMessage("three", id="m3"),  # its turn never finished
    ]


def test_a_stored_reply_is_replayed_with_its_turn_number() -> None:
    result = _stored_result("t", conversation(), "m2", "two")
    assert result is not None
    assert (result.turn, result.reply_id, result.reply) == (2, reply_id_for("m2"), "turn 2")


def test_an_unfinished_or_unknown_message_has_no_stored_result() -> None:
    assert _stored_result("t", conversation(), "m3", "three") is None
    assert _stored_result("t", conversation(), "m9", "nine") is None


def test_an_id_reused_with_other_content_is_a_conflict() -> None:
    with pytest.raises(Conflict) as conflict:
        _stored_result("t", conversation(), "m1", "not one")
    assert conflict.value.code == "message_id_reused"


def test_turns_count_human_messages() -> None:
    assert [_turn_of(conversation(), i) for i in range(5)] == [1, 1, 2, 2, 3]
