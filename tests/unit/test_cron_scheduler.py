"""The cron scheduler's tick logic with an injected clock (no sleep, no wall-clock boundary):
each tick fired once by whichever scheduler claims it, a claimer that dies before or after
creating the run leaves the tick to the next claimer (the same run, once), end_time and
disabling stop it, missed ticks coalesce into one (as langgraph-api)."""

from __future__ import annotations

from typing import Any

import pytest

from threadline.api.langgraph.bodies import CronCreate
from threadline.runs.cron_records import LocalCronRecords
from threadline.runs.crons import Crons, CronScheduler, next_tick, run_payload, tick_ids
from threadline.runs.errors import Invalid, NotFound
from threadline.runs.graph_io import CRON_KWARG


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Fired:
    """Runs by id, created at most once (as fire_with: a run that exists is found, not made)."""

    def __init__(self, die_after_create: bool = False, die_before_create: bool = False) -> None:
        self.runs: dict[str, dict[str, Any]] = {}
        self.created = 0
        self.die_after, self.die_before = die_after_create, die_before_create

    async def __call__(self, cron: dict[str, Any], run_id: str, thread_id: str) -> None:
        if self.die_before:
            raise SystemExit("killed before the run was created")
        if run_id not in self.runs:
            self.runs[run_id] = {"thread_id": thread_id, "payload": run_payload(cron)}
            self.created += 1
        if self.die_after:
            raise SystemExit("killed after the run was created")


class FakeAssistants:
    async def get(self, owner: str, assistant_id: str, filters=None):
        from types import SimpleNamespace

        return SimpleNamespace(assistant_id="a" * 8, graph_id="g", graph=SimpleNamespace(input_channels="x"))


@pytest.fixture
def setup(monkeypatch):
    monkeypatch.setattr("threadline.runs.crons.check_input", lambda assistant, payload: None)
    clock = Clock(1_000_000.0)  # a whole second
    records = LocalCronRecords()
    crons = Crons(FakeAssistants(), records, per_principal=5, clock=clock)  # type: ignore[arg-type]
    return clock, records, crons


async def test_every_tick_fires_once_across_two_schedulers(setup) -> None:
    clock, _, crons = setup
    cron = await crons.create("alice", None, {"schedule": "* * * * * *", "assistant_id": "g", "input": {}})
    fired = Fired()
    a, b = (CronScheduler(crons, fired, interval=1, claim_seconds=5, clock=clock) for _ in range(2))
    assert await a.run_once() + await b.run_once() == 0  # not due yet
    for _ in range(5):
        clock.now += 1
        assert await a.run_once() + await b.run_once() == 1
    ticks = [int((1_000_001 + i) * 1000) for i in range(5)]
    assert set(fired.runs) == {tick_ids(cron["cron_id"], t)[0] for t in ticks}
    # A stateless cron: each tick on a thread of its own.
    assert len({r["thread_id"] for r in fired.runs.values()}) == 5


async def test_a_claimer_killed_at_the_tick_loses_nothing_and_fires_nothing_twice(setup) -> None:
    clock, records, crons = setup
    cron = await crons.create("alice", None, {"schedule": "* * * * * *", "assistant_id": "g"})
    for die in ({"die_before_create": True}, {"die_after_create": True}):
        clock.now += 1
        tick = next_tick("* * * * * *", clock.now - 1)
        dead = CronScheduler(crons, Fired(**die), interval=1, claim_seconds=5, clock=clock)
        with pytest.raises(SystemExit):
            await dead.run_once()
        survivor_fired = Fired()
        survivor = CronScheduler(crons, survivor_fired, interval=1, claim_seconds=5, clock=clock)
        records._claims[cron["cron_id"]] = (records._claims[cron["cron_id"]][0], 0.0)  # claim expired
        assert await survivor.run_once() == 1
        assert list(survivor_fired.runs) == [tick_ids(cron["cron_id"], tick)[0]]
        assert await survivor.run_once() == 0  # advanced: the tick is done


async def test_the_same_run_after_a_claimer_died_past_creating_it(setup) -> None:
    clock, records, crons = setup
    cron = await crons.create("alice", "t1", {"schedule": "* * * * * *", "assistant_id": "g"})
    fired = Fired(die_after_create=True)
    clock.now += 1
    with pytest.raises(SystemExit):
        await CronScheduler(crons, fired, interval=1, claim_seconds=5, clock=clock).run_once()
    # While the dead claimer's claim lives, nobody else fires the tick.
    fired.die_after = False
    other = CronScheduler(crons, fired, interval=1, claim_seconds=5, clock=clock)
    assert await other.run_once() == 0
    records._claims[cron["cron_id"]] = (records._claims[cron["cron_id"]][0], 0.0)
    assert await other.run_once() == 1
    assert fired.created == 1 and [r["thread_id"] for r in fired.runs.values()] == ["t1"]


async def test_end_time_disabling_and_missed_ticks(setup) -> None:
    clock, _, crons = setup
    end = "1970-01-12T13:46:43+00:00"  # 1_000_003 s
    cron = await crons.create(
        "alice", None, {"schedule": "* * * * * *", "assistant_id": "g", "end_time": end}
    )
    fired = Fired()
    scheduler = CronScheduler(crons, fired, interval=1, claim_seconds=5, clock=clock)
    for _ in range(6):
        clock.now += 1
        await scheduler.run_once()
    assert fired.created == 3  # 1_000_001..1_000_003, none after end_time

    other = await crons.create("alice", None, {"schedule": "* * * * * *", "assistant_id": "g"})
    clock.now += 10  # ten ticks missed (every scheduler was down): one run, then on from now
    assert await scheduler.run_once() == 1
    assert (await crons.get("alice", other["cron_id"]))["next_run_date"] == "1970-01-12T13:46:57+00:00"
    await crons.patch("alice", other["cron_id"], {"enabled": False})
    clock.now += 5
    assert await scheduler.run_once() == 0
    assert cron["on_run_completed"] == "delete"


def test_a_ticks_run_takes_the_run_fields_and_keep() -> None:
    cron = {
        "payload": {"assistant_id": "a", "schedule": "* * * * *", "enabled": True, "input": {"x": 1},
                    "stream_mode": "updates", "metadata": {"run": 1},
                    "config": {"configurable": {"cron_id": "c"}}, "context": {"k": 1}},
        "metadata": {"cron": 1, "run": 0},
        "on_run_completed": "keep",
    }  # fmt: skip
    assert run_payload(cron) == {
        "assistant_id": "a",
        "input": {"x": 1},
        "stream_mode": ["updates"],
        "metadata": {"cron": 1, "run": 1},
        "config": {"configurable": {}},
        "context": {"k": 1},
        "on_completion": "keep",
        CRON_KWARG: "c",  # back in the graph's configurable (graph_io.run_config)
    }
    assert "on_completion" not in run_payload({**cron, "on_run_completed": "delete"})  # deleted


async def test_refusals_store_nothing(setup) -> None:
    _, _, crons = setup
    with pytest.raises(Invalid):
        await crons.create("alice", None, {"schedule": "not a cron", "assistant_id": "g"})
    with pytest.raises(Invalid):
        await crons.create(
            "alice", None, {"schedule": "* * * * *", "assistant_id": "g", "timezone": "Mars/X"}
        )
    assert await crons.search("alice") == []


async def test_a_store_outage_leaves_the_tick_and_a_draining_replica_fires_none(setup) -> None:
    clock, records, crons = setup
    cron = await crons.create("alice", None, {"schedule": "* * * * * *", "assistant_id": "g"})
    clock.now += 1

    async def store_down(*_):
        raise ConnectionError("redis went away")

    with pytest.raises(ConnectionError):
        await CronScheduler(crons, store_down, interval=1, claim_seconds=5, clock=clock).run_once()
    records._claims[cron["cron_id"]] = (records._claims[cron["cron_id"]][0], 0.0)
    draining = Fired()
    paused = CronScheduler(crons, draining, interval=1, claim_seconds=5, clock=clock, paused=lambda: True)
    assert await paused.run_once() == 0 and draining.created == 0
    fired = Fired()
    assert await CronScheduler(crons, fired, interval=1, claim_seconds=5, clock=clock).run_once() == 1
    assert list(fired.runs) == [tick_ids(cron["cron_id"], int(clock.now * 1000))[0]]


async def test_a_refused_run_skips_its_tick_and_the_cron_goes_on(setup) -> None:
    clock, _, crons = setup
    await crons.create("alice", None, {"schedule": "* * * * * *", "assistant_id": "g"})

    async def refused(*_):
        raise NotFound("assistant")

    scheduler = CronScheduler(crons, refused, interval=1, claim_seconds=5, clock=clock)
    for _ in range(3):
        clock.now += 1
        assert await scheduler.run_once() == 0
    assert len(await crons.due(clock.now, 10)) == 0  # advanced each time, never stuck


async def test_a_thread_cron_whose_thread_is_gone_goes_with_it(setup) -> None:
    clock, _, crons = setup
    cron = await crons.create("alice", "t1", {"schedule": "* * * * * *", "assistant_id": "g"})

    async def thread_gone(*_):
        raise NotFound("thread")

    clock.now += 1
    assert await CronScheduler(crons, thread_gone, interval=1, claim_seconds=5, clock=clock).run_once() == 0
    assert await crons.search("alice") == [] and await crons.stored(cron["cron_id"]) is None


@pytest.mark.parametrize(
    ("sent", "durability"),
    [({}, None), ({"checkpoint_during": False}, "exit"), ({"checkpoint_during": True}, "async"),
     ({"checkpoint_during": False, "durability": "sync"}, "sync")],
)  # fmt: skip
def test_a_crons_runs_keep_its_durability_and_its_older_name_checkpoint_during(
    sent: dict[str, Any], durability: str | None
) -> None:
    body = CronCreate.model_validate({"assistant_id": "chat", "schedule": "* * * * *", **sent})
    fields = body.fields()
    assert "checkpoint_during" not in fields
    assert run_payload({"payload": fields}).get("durability") == durability
