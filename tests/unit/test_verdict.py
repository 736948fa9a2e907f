"""The verdict on hand-built records: each kind of damage is reported as itself, and only so.

The store-level counterpart (tests/integration/test_verdict_store.py) corrupts real threads in Redis.
"""

from __future__ import annotations

import copy

import pytest

from chaos.driver import (
    ConversationRecord,
    expected_reply,
    history_digest,
    judge,
    judge_thread,
    parse_reply,
    simulate,
)

pytestmark = pytest.mark.unit

CONTENTS = ["hello there", "second message", "third one", "fourth", "fifth and last"]


def kinds(found) -> dict[str, int]:
    return {
        k: getattr(found, k) for k in ("lost", "duplicated", "forked", "stale", "other") if getattr(found, k)
    }


def test_builtin_formula_matches_the_brief() -> None:
    assert history_digest([]) == "e3b0c44298fc"  # sha256 of the empty string
    assert expected_reply(1, [], "hi") == "turn 1 · history e3b0c44298fc · you said: hi"
    import hashlib

    h = hashlib.sha256(b"hi\nturn 1 reply\n").hexdigest()[:12]
    assert expected_reply(2, ["hi", "turn 1 reply"], "yo") == f"turn 2 · history {h} · you said: yo"
    assert parse_reply(f"turn 2 · history {h} · you said: a b") == (2, h, "a b")
    assert parse_reply("something else") is None


def test_intact_thread_passes() -> None:
    rec, server = simulate(CONTENTS)
    found = judge_thread(rec, server, len(CONTENTS))
    assert kinds(found) == {} and found.problems == []
    verdict = judge([rec], {rec.thread_id: server}, len(CONTENTS), {"kills": 2})
    assert verdict.ok
    assert verdict.turns == verdict.planned == 5
    assert verdict.replicas_max == 3
    assert "PASS" in verdict.summary() and "kills=2" in verdict.summary()


def test_dropped_turn_is_lost() -> None:
    rec, server = simulate(CONTENTS)
    del server["messages"][4:6]  # turn 3
    server["turns"] = 4
    found = judge_thread(rec, server, 5)
    assert kinds(found) == {"lost": 1}
    assert "turn 3" in found.problems[0]


def test_missing_reply_is_lost() -> None:
    rec, server = simulate(CONTENTS)
    del server["messages"][-1]
    server["turns"] = 4
    assert kinds(judge_thread(rec, server, 5)) == {"lost": 1}


def test_turns_never_sent_are_lost() -> None:
    rec, server = simulate(CONTENTS[:3])
    rec.aborted = "turn 4 gave up"
    found = judge_thread(rec, server, 5)
    assert kinds(found) == {"lost": 2}
    verdict = judge([rec], {rec.thread_id: server}, 5)
    assert not verdict.ok and verdict.turns == 3 and verdict.planned == 5


def test_turns_driven_on_past_the_plan_are_planned_too() -> None:
    # A conversation kept going while the chaos plan ran (Driver.run's keep_going): every
    # turn it sent counts, and one of them left unanswered fails the verdict.
    rec, server = simulate(CONTENTS)
    verdict = judge([rec], {rec.thread_id: server}, 3)
    assert verdict.ok and verdict.turns == verdict.planned == 5
    rec.turns[-1].reply = None
    assert not judge([rec], {rec.thread_id: server}, 3).ok


def test_duplicated_reply_with_a_new_id() -> None:
    rec, server = simulate(CONTENTS)
    copy_ = dict(server["messages"][3], id="r2-again")
    server["messages"].insert(4, copy_)
    assert kinds(judge_thread(rec, server, 5)) == {"duplicated": 1}


def test_duplicated_message_id() -> None:
    rec, server = simulate(CONTENTS)
    server["messages"][4:4] = copy.deepcopy(server["messages"][2:4])  # turn 2 again
    found = judge_thread(rec, server, 5)
    assert found.duplicated == 2  # the human and the reply ids
    assert found.lost == 0 and found.stale == 0


def test_turn_executed_twice_is_duplicated() -> None:
    rec, server = simulate(CONTENTS)
    server["messages"][3]["id"] = "r2-second-run"
    assert kinds(judge_thread(rec, server, 5)) == {"duplicated": 1}


def test_human_without_reply_between_is_forked() -> None:
    rec, server = simulate(CONTENTS)
    intruder = {"id": "x1", "role": "human", "content": "a branch"}
    server["messages"].insert(3, intruder)  # between human 2 and its reply
    found = judge_thread(rec, server, 5)
    assert found.forked >= 1 and found.lost == 0 and found.duplicated == 0
    assert any("follows human" in p for p in found.problems)


def test_two_continuations_are_forked() -> None:
    rec, server = simulate(CONTENTS)
    other = expected_reply(3, rec.history(3), "another continuation")
    server["messages"].insert(6, {"id": "r3b", "role": "ai", "content": other})
    found = judge_thread(rec, server, 5)
    assert found.forked == 1 and found.duplicated == 0 and found.lost == 0


def test_store_differs_from_what_the_client_received_is_forked() -> None:
    rec, server = simulate(CONTENTS)
    rec.turns[1].reply = "something the client saw"
    rec.turns[1].expected = rec.turns[1].reply
    # later expectations follow the client's record; rebuild them to keep the test focused
    for t in rec.turns[2:]:
        t.expected = t.reply = expected_reply(t.index, rec.history(t.index), t.content)
    found = judge_thread(rec, server, 5)
    assert found.forked >= 1


def test_reply_from_a_shorter_history_is_stale() -> None:
    rec, server = simulate(CONTENTS)
    short = expected_reply(4, rec.history(4)[:-2], CONTENTS[3])
    server["messages"][7]["content"] = short
    found = judge_thread(rec, server, 5)
    assert kinds(found) == {"stale": 1}
    assert "turn 4" in found.problems[0]


def test_wrong_turn_number_is_stale() -> None:
    rec, server = simulate(CONTENTS)
    server["messages"][9]["content"] = expected_reply(4, rec.history(5), CONTENTS[4])
    assert kinds(judge_thread(rec, server, 5)) == {"stale": 1}


def test_pending_and_miscounted_are_reported() -> None:
    rec, server = simulate(CONTENTS)
    server["pending"] = "m6"
    server["turns"] = 7
    assert kinds(judge_thread(rec, server, 5)) == {"other": 2}


def test_unreadable_thread_fails() -> None:
    rec, _ = simulate(CONTENTS)
    found = judge_thread(rec, None, 5)
    assert found.other == 1 and found.lost == 5


def test_client_mismatch_fails_the_verdict() -> None:
    rec, server = simulate(CONTENTS)
    rec.turns[0].expected = "what the client computed"
    verdict = judge([rec], {rec.thread_id: server}, 5)
    assert verdict.client_mismatches == 1 and not verdict.ok


def test_recovery_and_figures() -> None:
    from chaos.driver import Attempt

    rec, server = simulate(CONTENTS)
    turn = rec.turns[2]
    turn.attempts = [
        Attempt("http://a", started=10.0, ended=10.2, outcome="reset"),
        Attempt("http://b", started=10.3, ended=11.0, outcome="http", status=409),
        Attempt("http://c", started=11.1, ended=11.5, outcome="ok", status=200),
    ]
    turn.completed_at = 11.5
    verdict = judge([rec, ConversationRecord("t-empty")], {rec.thread_id: server}, 5)
    assert verdict.recovery == [pytest.approx(1.3)]
    assert verdict.failures == {"reset": 1, "http": 1}
    assert verdict.statuses == {409: 1, 200: 1}
    assert not verdict.ok  # the empty conversation lost 5 turns
    assert "FAIL" in verdict.summary()


def test_recovery_is_split_by_what_it_followed() -> None:
    from chaos.driver import Attempt, ChaosEvent, recovery_cause

    rec, server = simulate(CONTENTS)
    one, two = rec.turns[1], rec.turns[3]
    one.attempts = [
        Attempt("http://a", started=10.0, ended=10.2, outcome="reset"),
        Attempt("http://b", started=10.2, ended=11.4, outcome="ok", status=200),
    ]
    one.completed_at = 11.4
    two.attempts = [
        Attempt("http://a", started=20.0, ended=20.1, outcome="reset"),
        Attempt("http://b", started=20.1, ended=20.9, outcome="http", status=503),
        Attempt("http://c", started=21.0, ended=22.0, outcome="ok", status=200),
    ]
    two.completed_at = 22.0
    events = [
        ChaosEvent(10.1, "kill", "http://a"),
        ChaosEvent(19.9, "kill", "http://a"),  # just before the attempt ends
        ChaosEvent(20.5, "redis", None),
        ChaosEvent(21.5, "kill", "http://z"),  # elsewhere: not this turn's
    ]
    assert recovery_cause(one, events) == "kill"
    assert recovery_cause(two, events) == "kill+redis"
    verdict = judge([rec], {rec.thread_id: server}, 5, events=events)
    assert verdict.recovery_by == {
        "kill": [pytest.approx(1.2)],
        "kill+redis": [pytest.approx(1.9)],
    }
    assert verdict.recovery_percentile("kill", 99) == pytest.approx(1.2)
    assert "kill-recovery p50=1.20s" in verdict.summary()
