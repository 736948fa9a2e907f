"""A rolling update: a replica of the release before the LangGraph API (commit da0f40c, /v1
only) and a new replica side by side on one Redis must not corrupt a thread, and threads made
by the old release are visible through the API of the new one."""

from __future__ import annotations

import subprocess
import tarfile
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_sync_client

from client import API_KEY, Client, assert_whole, expected_reply
from servers import redis_env

pytestmark = pytest.mark.integration

OLD_RELEASE = "da0f40c"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def old_service(tmp_path_factory) -> Iterator[Path]:
    """The old release's ``service/`` directory, from git (the replica runs it through
    PYTHONPATH with this venv, whose pinned dependencies it shares)."""
    out = tmp_path_factory.mktemp("old")
    archive = out / "old.tar"
    try:
        subprocess.run(
            ["git", "-C", str(REPO), "archive", "-o", str(archive), OLD_RELEASE, "service/threadline"],
            check=True,
            capture_output=True,
        )
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(
            f"commit {OLD_RELEASE} is needed for the mixed-version test (a shallow clone lacks it: "
            f"git fetch --unshallow): {exc.stderr.decode()}"
        ) from None
    with tarfile.open(archive) as tar:
        tar.extractall(out, filter="data")
    yield out / "service"


def test_old_and_new_replicas_share_threads_without_corrupting_them(
    redis_server, start_replica, old_service: Path
) -> None:
    env = redis_env(redis_server, MODEL_TOKEN_DELAY_MS="20", TURN_LEASE_WAIT_SECONDS="10")
    old = start_replica({**env, "PYTHONPATH": str(old_service)}, "old")
    # The documented rolling update (ADR 0007): new replicas write format 1 until no old one runs.
    new = start_replica({**env, "CHECKPOINT_REDIS_FORMAT": "1"}, "new")
    # The old replica really is the old code: it has no LangGraph API.
    assert httpx.get(f"{old.url}/ok").status_code == 404
    assert httpx.get(f"{new.url}/ok").status_code == 200

    o, n = Client(old.url), Client(new.url)
    made_by_old = o.new_thread()
    for i, client in enumerate([o, n, o, n]):
        assert client.say(made_by_old, f"step {i}").status_code == 200
    assert_whole(n.thread(made_by_old)["messages"], 4)
    made_by_new = n.new_thread()
    assert o.say(made_by_new, "old replica answers").status_code == 200

    # The old thread through the new replica's API, while the old replica takes /v1 turns on it.
    sdk = get_sync_client(url=new.url, api_key=API_KEY)
    assert sdk.threads.get(made_by_old)["metadata"]["graph_id"] == "chat"

    def api_run(i: int) -> dict:
        return sdk.runs.wait(
            made_by_old,
            "chat",
            input={"messages": [{"role": "user", "content": f"api {i}", "id": f"api-{i}"}]},
        )

    def v1_turn(i: int) -> int:
        return o.say(made_by_old, f"v1 {i}", f"v1-{i}").status_code

    with ThreadPoolExecutor(4) as pool:
        runs = [pool.submit(api_run, i) for i in range(3)]
        turns = [pool.submit(v1_turn, i) for i in range(3)]
        assert [t.result() for t in turns] == [200] * 3
        for r in runs:
            r.result()
    messages = o.thread(made_by_old)["messages"]
    assert_whole(messages, 10)  # 4 + 3 API runs + 3 /v1 turns, serialized, none lost or forked

    # An API thread is not a /v1 thread: the old replica cannot see it, let alone write it.
    api_thread = sdk.threads.create()["thread_id"]
    result = sdk.runs.wait(api_thread, "chat", input={"messages": [{"role": "user", "content": "hi"}]})
    assert result["messages"][-1]["content"] == expected_reply(["hi"])
    assert o.http.get(f"/v1/threads/{api_thread}").status_code == 404
    assert o.say(api_thread, "sneak in", uuid.uuid4().hex).status_code == 404
    assert len(sdk.threads.get_state(api_thread)["values"]["messages"]) == 2
