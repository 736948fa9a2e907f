"""A real provider model: ``MODEL=openai:gpt-4o-mini`` with the real ``langchain-openai`` (the
`openai` extra, in the test extra too) talking to a local OpenAI-compatible server
(tests/fake_openai.py) through ``OPENAI_BASE_URL`` — /v1 turns, streamed and not, and a
LangGraph API run; and the start-up error when a provider's package is missing."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import httpx
import pytest
from fake_openai import FakeOpenAI

from client import API_KEY, API_KEYS, Client

pytestmark = pytest.mark.integration

PROVIDER_KEY = "sk-fake-provider-key-0123456789"


def provider_env(tmp_path, fake: FakeOpenAI) -> dict[str, str]:
    return {
        "CHECKPOINT_BACKEND": "sqlite",
        "CHECKPOINT_SQLITE_PATH": str(tmp_path / "checkpoints.sqlite"),
        "SESSION_BACKEND": "memory",
        "API_KEYS": API_KEYS,
        "MODEL": "openai:gpt-4o-mini",
        "OPENAI_BASE_URL": fake.base_url,
        "OPENAI_API_KEY": PROVIDER_KEY,
    }


def test_openai_model_answers_turns_through_an_openai_compatible_server(tmp_path, start_replica) -> None:
    with FakeOpenAI() as fake:
        replica = start_replica(provider_env(tmp_path, fake))
        client = Client(replica.url)
        thread = client.new_thread()

        first = client.say(thread, "hello")
        assert first.status_code == 200, first.text
        reply = first.json()["reply"]["content"]
        assert reply.startswith("fake says: hello (messages: "), reply

        streamed = client.stream(thread, "and now stream it")
        done = streamed.done()
        assert done is not None, streamed.events
        tokens = streamed.tokens()
        assert len(tokens) > 3, tokens  # one word per chunk: the provider's stream reached the client
        assert "".join(tokens) == done["reply"]["content"]
        assert done["reply"]["content"].startswith("fake says: and now stream it")

        # What reached the provider: the model named by MODEL, the key, and the whole history.
        calls = [r for r in fake.requests if r["path"] == "/v1/chat/completions"]
        assert len(calls) == 2
        assert {c["model"] for c in calls} == {"gpt-4o-mini"}
        assert {c["authorization"] for c in calls} == {f"Bearer {PROVIDER_KEY}"}
        second = [(m["role"], m["content"]) for m in calls[1]["messages"]]
        assert ("user", "hello") in second and ("assistant", reply) in second
        assert second[-1] == ("user", "and now stream it")

        history = client.thread(thread)["messages"]
        contents = [m["content"] for m in history]
        assert contents == ["hello", reply, "and now stream it", done["reply"]["content"]]
        assert PROVIDER_KEY not in replica.logs()


def test_openai_model_serves_a_langgraph_api_run(tmp_path, start_replica) -> None:
    with FakeOpenAI() as fake:
        replica = start_replica(provider_env(tmp_path, fake))
        http = httpx.Client(base_url=replica.url, headers={"x-api-key": API_KEY}, timeout=30)
        thread = http.post("/threads", json={}).json()["thread_id"]
        run = http.post(
            f"/threads/{thread}/runs/wait",
            json={"assistant_id": "chat", "input": {"messages": [{"role": "human", "content": "hi there"}]}},
        )
        assert run.status_code == 200, run.text
        last = run.json()["messages"][-1]
        assert last["type"] == "ai" and last["content"].startswith("fake says: hi there"), last


def serve_fails(model: str, tmp_path) -> subprocess.CompletedProcess:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "MODEL": model,
        "API_KEYS": API_KEYS,
        "CHECKPOINT_SQLITE_PATH": str(tmp_path / "c.sqlite"),
    }
    return subprocess.run(
        [sys.executable, "-m", "threadline", "serve", "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_missing_provider_package_stops_start_up_naming_it_and_its_extra(tmp_path) -> None:
    # langchain-anthropic is in the `anthropic` extra, not in the test extra this venv has.
    assert importlib.util.find_spec("langchain_anthropic") is None, "needs langchain-anthropic absent"
    done = serve_fails("anthropic:claude-sonnet-4-5", tmp_path)
    assert done.returncode == 2, done.stderr
    assert "MODEL=anthropic:claude-sonnet-4-5 needs the Python package langchain-anthropic" in done.stderr
    assert 'pip install "threadline[anthropic]"' in done.stderr
    assert "make run EXTRAS=anthropic" in done.stderr
    assert "(None)" not in done.stderr


def test_a_provider_without_an_extra_names_its_package(tmp_path) -> None:
    assert importlib.util.find_spec("langchain_mistralai") is None
    done = serve_fails("mistralai:mistral-large-latest", tmp_path)
    assert done.returncode == 2, done.stderr
    wanted = "langchain-mistralai, which is not installed: pip install langchain-mistralai"
    assert wanted in done.stderr
