"""Custom auth (issue 21): a ``langgraph.json`` ``auth`` module decides who calls and what they
see, on real replicas over Redis.

The example (examples/custom_auth) validates RS256 JWTs against a JWKS served here over HTTP;
its handlers stamp ``owner`` metadata and filter on it. A probe module
(tests/integration/auth_probe) misbehaves on request: raises, hangs, returns filters.
"""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest
from jwt_issuer import Issuer, example_env
from langgraph_sdk import get_sync_client

from servers import RedisServer, ServiceProcess, redis_env, wait_until

pytestmark = pytest.mark.integration

PROBE_CONFIG = Path(__file__).parent / "auth_probe" / "langgraph.json"
JS_DRIVER = Path(__file__).parents[1] / "js" / "custom_auth.mjs"


@pytest.fixture(scope="module")
def redis():
    server = RedisServer().start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def issuer(tmp_path_factory):
    issuer = Issuer(tmp_path_factory.mktemp("idp"))
    issuer.url = issuer.serve()
    yield issuer
    issuer.close()


@pytest.fixture(scope="module")
def replicas(redis, issuer, tmp_path_factory):
    """Two replicas of the example on one Redis, with no API_KEYS at all."""
    logs = tmp_path_factory.mktemp("custom-auth")
    env = {**redis_env(redis, API_KEYS=""), **example_env(issuer.url)}
    started = [ServiceProcess(env, name=f"auth-{n}", log_dir=logs).start() for n in "ab"]
    yield started
    for replica in started:
        replica.kill()


@pytest.fixture(scope="module")
def probe(redis, tmp_path_factory):
    calls = tmp_path_factory.mktemp("probe-calls")
    env = redis_env(
        redis,
        API_KEYS="",
        LANGGRAPH_CONFIG=str(PROBE_CONFIG),
        AUTH_TIMEOUT_SECONDS="1",
        PROBE_CALLS_DIR=str(calls),
    )
    replica = ServiceProcess(env, name="auth-probe", log_dir=tmp_path_factory.mktemp("probe")).start()
    replica.calls = calls
    yield replica
    replica.kill()


def _sdk(replica: ServiceProcess, token: str):
    return get_sync_client(url=replica.url, api_key=None, headers={"Authorization": f"Bearer {token}"})


def _http(replica: ServiceProcess, token: str | None = None, **headers: str) -> httpx.Client:
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.Client(base_url=replica.url, headers=headers, timeout=30)


def _hello(issuer: Issuer, name: str) -> str:
    return issuer.token(name, name=name.title(), scope="threads:write")


def test_two_users_see_only_their_own_threads_runs_and_history(replicas, issuer):
    a, b = replicas
    alice, bob = (_hello(issuer, f"{n}-{uuid.uuid4().hex[:6]}") for n in ("alice", "bob"))
    alice_a, alice_b, bob_b = _sdk(a, alice), _sdk(b, alice), _sdk(b, bob)
    thread = alice_a.threads.create(metadata={"topic": "tea"})
    assert thread["metadata"]["owner"].startswith("alice-")  # stamped by the example's handler
    run = alice_a.runs.create(
        thread["thread_id"], "greeter", input={"messages": [{"role": "user", "content": "hi"}]}
    )
    alice_b.runs.join(thread["thread_id"], run["run_id"])  # the other replica answers for it
    bob_thread = bob_b.threads.create()

    mine = alice_b.threads.search(limit=100)
    assert [t["thread_id"] for t in mine] == [thread["thread_id"]]
    assert alice_b.threads.count() == 1 and bob_b.threads.count() == 1
    assert [t["thread_id"] for t in bob_b.threads.search(limit=100)] == [bob_thread["thread_id"]]
    assert bob_b.threads.search(metadata={"topic": "tea"}) == []
    assert len(alice_b.threads.get_history(thread["thread_id"])) >= 2
    assert [r["run_id"] for r in alice_b.runs.list(thread["thread_id"])] == [run["run_id"]]
    for read in (
        lambda: bob_b.threads.get(thread["thread_id"]),
        lambda: bob_b.threads.get_state(thread["thread_id"]),
        lambda: bob_b.threads.get_history(thread["thread_id"]),
        lambda: bob_b.runs.list(thread["thread_id"]),
        lambda: bob_b.runs.get(thread["thread_id"], run["run_id"]),
        lambda: bob_b.runs.join(thread["thread_id"], run["run_id"]),
        lambda: list(bob_b.runs.join_stream(thread["thread_id"], run["run_id"])),
        lambda: bob_b.runs.wait(thread["thread_id"], "greeter", input={"messages": []}),
        lambda: bob_b.threads.update(thread["thread_id"], metadata={"owner": "bob"}),
        lambda: bob_b.threads.delete(thread["thread_id"]),
    ):
        with pytest.raises(httpx.HTTPStatusError) as refused:  # the SDK's NotFoundError, or httpx's own
            read()
        assert refused.value.response.status_code == 404
    assert alice_a.threads.get(thread["thread_id"])["metadata"]["owner"].startswith("alice-")  # untouched


def test_a_node_sees_the_user_it_runs_for(replicas, issuer):
    a, b = replicas
    token = issuer.token("dora", name="Dora", scope="threads:write store:read")
    thread = _sdk(a, token).threads.create()
    out = _sdk(b, token).runs.wait(
        thread["thread_id"],
        "greeter",
        input={"messages": [{"role": "user", "content": "hi"}]},
        # A client cannot claim to be someone else: the server's user wins.
        config={
            "configurable": {
                "langgraph_auth_user": {"identity": "mallory"},
                "langgraph_auth_user_id": "mallory",
            }
        },
    )
    reply = out["messages"][-1]["content"]
    assert reply == "hello Dora (dora; server_info dora; id dora; permissions threads:write,store:read): hi"
    run = _sdk(a, token).runs.list(thread["thread_id"])[0]
    assert "langgraph_auth" not in run["kwargs"]  # the stored user is not part of the Run


def test_expired_forged_and_missing_tokens_are_401(replicas, issuer):
    from cryptography.hazmat.primitives.asymmetric import rsa

    a, _ = replicas
    forger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cases = {
        "expired": issuer.token("eve", expires_in=-60),
        "forged": issuer.token("eve", key=forger),
        "unknown key": issuer.token("eve", key=forger, kid="nope"),
        "wrong audience": issuer.token("eve", aud="someone-else"),
        "not a jwt": "not-a-jwt",
    }
    for case, token in cases.items():
        response = _http(a, token).post("/threads/search", json={})
        assert response.status_code == 401, (case, response.text)
        assert token not in response.text and response.headers["www-authenticate"].startswith("Bearer")
    assert "expired" in _http(a, cases["expired"]).get("/threads/x").text
    assert _http(a).get("/threads/x").status_code == 401
    # API_KEYS is unset: an API key is not a way in, and sessions are not minted.
    assert _http(a, **{"X-API-Key": "anything"}).post("/threads/search", json={}).status_code == 401
    assert _http(a).post("/v1/sessions", json={"api_key": "x"}).status_code == 404


def test_v1_takes_the_same_identity(replicas, issuer):
    a, b = replicas
    frank, grace = issuer.token("frank"), issuer.token("grace")
    created = _http(a, frank).post("/v1/threads")
    assert created.status_code == 201, created.text
    thread_id = created.json()["thread_id"]
    said = _http(b, frank).post(f"/v1/threads/{thread_id}/messages", json={"content": "hello"})
    assert said.status_code == 200, said.text
    assert _http(b, grace).get(f"/v1/threads/{thread_id}").status_code == 404
    assert _http(b, grace).post(f"/v1/threads/{thread_id}/messages", json={"content": "x"}).status_code == 404
    assert _http(a, frank).get(f"/v1/threads/{thread_id}").json()["turns"] == 1
    # The LangGraph API: grace's identity does not own it there either. (Frank's own read goes
    # through the example's owner filter, which /v1 — no resource handlers — never stamped.)
    assert _http(a, grace).get(f"/threads/{thread_id}").status_code == 404


def test_quotas_count_per_token_identity(redis, issuer, start_replica):
    env = {**redis_env(redis, API_KEYS="", QUOTA_THREADS_PER_PRINCIPAL="2"), **example_env(issuer.url)}
    a, b = start_replica(env, name="quota-a"), start_replica(env, name="quota-b")
    henry, ida = issuer.token(f"henry-{uuid.uuid4().hex[:6]}"), issuer.token(f"ida-{uuid.uuid4().hex[:6]}")
    assert _http(a, henry).post("/threads", json={}).status_code == 200
    assert _http(b, henry).post("/v1/threads").status_code == 201
    refused = _http(b, henry).post("/threads", json={})
    assert refused.status_code == 429 and "QUOTA_THREADS_PER_PRINCIPAL=2" in refused.text
    assert _http(a, ida).post("/threads", json={}).status_code == 200  # another user is not affected


def test_the_js_sdk_sees_only_its_users_threads(replicas, issuer):
    a, b = replicas
    alice, bob = (issuer.token(f"{n}-js-{uuid.uuid4().hex[:6]}") for n in ("alice", "bob"))
    done = subprocess.run(
        ["node", str(JS_DRIVER)],
        input=json.dumps({"urls": [a.url, b.url], "alice": alice, "bob": bob}),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=JS_DRIVER.parent,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    assert seen["alice_search"] == [seen["thread_id"]]
    assert seen["bob_search"] == [] and seen["bob_count"] == 0
    assert seen["bob_get_status"] == 404 and seen["bob_history_status"] == 404
    assert seen["bob_stream_status"] == 404
    assert seen["alice_history"] >= 2
    assert seen["reply"].startswith("hello ")
    assert seen["no_token_status"] == 401


# -- the probe: handlers that raise, hang, filter --


def test_a_handler_that_raises_gets_its_status(probe):
    assert _http(probe, "teapot").post("/threads", json={}).status_code == 418
    boom = _http(probe, "boom").post("/threads", json={})
    assert boom.status_code == 401 and "RuntimeError" in boom.text and "boom" not in boom.text
    assert _http(probe, "garbage").get("/threads/x").status_code == 401
    denied = _http(probe, "user-jack").post("/threads", json={"metadata": {"deny": True}})
    assert denied.status_code == 403 and "deny threads are refused" in denied.text
    assert _http(probe, "user-jack").post("/threads/search", json={"metadata": {"deny": True}}).json() == []


def test_a_handler_filter_holds_on_search_count_history_and_streams(probe):
    name = f"user-kate{uuid.uuid4().hex[:6]}"
    plain, filtered = _http(probe, name), _http(probe, name, **{"X-Probe-Filtered": "1"})
    public = plain.post("/threads", json={"metadata": {"tags": ["public", "x"]}}).json()["thread_id"]
    pinned = plain.post("/threads", json={"metadata": {"pinned": True}}).json()["thread_id"]
    hidden = plain.post("/threads", json={"metadata": {"tags": ["private"]}}).json()["thread_id"]
    body = {"assistant_id": "greeter", "input": {"messages": [{"role": "user", "content": "hi"}]}}
    run = plain.post(f"/threads/{hidden}/runs/wait", json=body)
    assert run.status_code == 200
    run_id = plain.get(f"/threads/{hidden}/runs").json()[0]["run_id"]

    found = {t["thread_id"] for t in filtered.post("/threads/search", json={"limit": 100}).json()}
    assert found == {public, pinned}
    assert filtered.post("/threads/count", json={}).json() == 2
    assert len(plain.post("/threads/search", json={"limit": 100}).json()) == 3  # the filter is the handler's
    assert filtered.post(f"/threads/{public}/history", json={}).status_code == 200
    for method, path in (
        ("GET", f"/threads/{hidden}"),
        ("POST", f"/threads/{hidden}/history"),
        ("GET", f"/threads/{hidden}/state"),
        ("GET", f"/threads/{hidden}/runs/{run_id}"),
        ("GET", f"/threads/{hidden}/runs/{run_id}/stream"),
        ("GET", f"/threads/{hidden}/runs/{run_id}/join"),
        ("GET", f"/threads/{hidden}/stream"),
    ):
        assert filtered.request(method, path, json={} if method == "POST" else None).status_code == 404, path
    assert filtered.post(f"/threads/{hidden}/runs/stream", json=body).status_code == 404
    with filtered.stream("POST", f"/threads/{public}/runs/stream", json=body) as streamed:
        assert streamed.status_code == 200
        assert "hello" in "".join(streamed.iter_text())


def test_a_slow_handler_cannot_wedge_the_replica(probe):
    """Sync handlers that hang (more of them than the auth threads) are answered 503 within
    AUTH_TIMEOUT_SECONDS=1 each; health answers meanwhile; once they return, requests pass."""
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        slow = [pool.submit(_http(probe, "slow-4").get, "/threads/x") for _ in range(12)]
        assert httpx.get(f"{probe.url}/livez", timeout=5).status_code == 200
        assert httpx.get(f"{probe.url}/readyz", timeout=5).status_code == 200
        for future in slow:
            response = future.result(timeout=20)  # bounded: never the handler's 4 s per caller in turn
            assert response.status_code == 503 and response.headers["retry-after"] == "1"
            assert "AUTH_TIMEOUT_SECONDS=1" in response.text

    def passes() -> bool:
        answer = _http(probe, "user-liam").post("/threads", json={})
        assert answer.status_code in (200, 503), answer.text
        return answer.status_code == 200

    # The hung calls end after 4 s; then the threads are free again.
    wait_until(passes, "the hung handlers to end and a request to pass", 10, interval=0.1)


def test_an_assistants_filter_hides_the_graphs(probe):
    plain, filtered = _http(probe, "user-mia"), _http(probe, "user-mia", **{"X-Probe-Filtered": "1"})
    assert {a["graph_id"] for a in plain.post("/assistants/search", json={}).json()} >= {"greeter", "chat"}
    assert filtered.post("/assistants/search", json={}).json() == []
    assert filtered.post("/assistants/count", json={}).json() == 0
    assert plain.get("/assistants/greeter").status_code == 200
    assert filtered.get("/assistants/greeter").status_code == 404
    assert filtered.get("/assistants/greeter/schemas").status_code == 404


def test_assistant_handlers_stamp_created_assistants_and_their_filters_apply(probe):
    plain, filtered = _http(probe, "user-noa"), _http(probe, "user-noa", **{"X-Probe-Filtered": "1"})
    made = plain.post("/assistants", json={"graph_id": "greeter", "metadata": {"mine": 1}}).json()
    assert made["metadata"] == {"mine": 1, "created_by": "someone"}
    aid = made["assistant_id"]
    # The filtered view holds the stamped assistant and none of the built-ins.
    assert [a["assistant_id"] for a in filtered.post("/assistants/search", json={}).json()] == [aid]
    assert filtered.patch(f"/assistants/{aid}", json={"name": "renamed"}).json()["version"] == 2
    refused = plain.post("/assistants", json={"graph_id": "greeter", "metadata": {"deny": True}})
    assert refused.status_code == 403
    assert plain.post("/assistants/count", json={"graph_id": "greeter"}).json() == 2  # built-in + one
    # Another user does not see noa's assistant, whatever their filter.
    assert _http(probe, "user-ada").get(f"/assistants/{aid}").status_code == 404


def test_authenticate_runs_once_per_request(probe):
    """Whether the middleware authenticates (a body) or the route's dependency does (no body),
    and however many dependencies of the route need the caller."""
    name = f"nina{uuid.uuid4().hex[:6]}"
    client = _http(probe, f"count-{name}")
    thread_id = client.post("/threads", json={}).json()["thread_id"]
    body = {"assistant_id": "greeter", "input": {"messages": [{"role": "user", "content": "hi"}]}}
    assert client.post(f"/threads/{thread_id}/runs/wait", json=body).status_code == 200
    assert client.get(f"/threads/{thread_id}").status_code == 200
    assert client.get(f"/threads/{thread_id}/history").status_code == 200
    seen = (probe.calls / name).read_text().splitlines()
    assert seen == [
        "POST /threads",
        f"POST /threads/{thread_id}/runs/wait",
        f"GET /threads/{thread_id}",
        f"GET /threads/{thread_id}/history",
    ]


def test_store_handlers_place_and_filter_each_users_items(probe):
    """``@auth.on.store`` sees each store request first, as on langgraph-api: it puts jack's
    items under his own label (which he sees, as the reference shows it), refuses a
    namespace, and its filter narrows a search."""
    jack, jill = _sdk(probe, "user-jack").store, _sdk(probe, "user-jill").store
    jack.put_item(["notes"], "a", {"text": "mine", "shared": False})
    jack.put_item(["notes"], "b", {"text": "ours", "shared": True})
    assert jack.get_item(["notes"], "a")["namespace"] == ["jack", "notes"]
    assert jill.get_item(["notes"], "a") is None
    assert sorted(i["key"] for i in jack.search_items(["notes"])["items"]) == ["a", "b"]
    assert jack.list_namespaces()["namespaces"] == [["jack", "notes"]]
    with _http(probe, "user-jack", **{"X-Probe-Filtered": "1"}) as filtered:
        found = filtered.post("/store/items/search", json={"namespace_prefix": ["notes"]}).json()
        assert [i["key"] for i in found["items"]] == ["b"]
    refused = _http(probe, "user-jack").put(
        "/store/items", json={"namespace": ["forbidden"], "key": "k", "value": {}}
    )
    assert refused.status_code == 403 and "forbidden namespace" in refused.text
    assert (
        _http(probe, "user-jack")
        .get("/store/items", params={"namespace": "forbidden", "key": "k"})
        .status_code
        == 403
    )


def test_cron_handlers_stamp_refuse_and_filter(probe):
    """``@auth.on.crons`` as on langgraph-api: create stamps (or refuses, storing nothing), the
    filter of read, update, delete and search narrows to the stamped ones; another user sees
    none of them."""
    plain, filtered = _http(probe, "user-ivy"), _http(probe, "user-ivy", **{"X-Probe-Filtered": "1"})
    body = {"assistant_id": "greeter", "schedule": "0 0 1 1 *"}
    stamped = plain.post("/runs/crons", json={**body, "metadata": {"mine": 1}}).json()
    assert stamped["metadata"] == {"mine": 1, "stamp": "yes"}
    bare = plain.post("/runs/crons", json={**body, "metadata": {"nostamp": True}}).json()
    assert plain.post("/runs/crons", json={**body, "metadata": {"deny": True}}).status_code == 403
    assert plain.post("/runs/crons/count", json={}).json() == 2
    assert [c["cron_id"] for c in filtered.post("/runs/crons/search", json={}).json()] == [stamped["cron_id"]]
    assert filtered.post("/runs/crons/count", json={}).json() == 1
    assert filtered.get(f"/runs/crons/{stamped['cron_id']}").status_code == 200
    for response in (
        filtered.get(f"/runs/crons/{bare['cron_id']}"),
        filtered.patch(f"/runs/crons/{bare['cron_id']}", json={"enabled": False}),
        filtered.delete(f"/runs/crons/{bare['cron_id']}"),
        _http(probe, "user-ada").get(f"/runs/crons/{stamped['cron_id']}"),
    ):
        assert response.status_code == 404
    assert plain.delete(f"/runs/crons/{bare['cron_id']}").status_code == 204
    assert plain.post("/runs/crons/count", json={}).json() == 1
