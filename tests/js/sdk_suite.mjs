// The LangGraph JS SDK (@langchain/langgraph-sdk, as browsers and useStream use it) over every
// endpoint group threadline serves. Run by tests/integration/test_js_sdk.py:
//
//   THREADLINE_URLS=http://a,http://b THREADLINE_API_KEY=… node sdk_suite.mjs
//
// With two URLs (two replicas on one Redis), consecutive calls of a check go to different
// replicas. Prints one JSON line: {"passed": [names], "failed": {name: reason}}.
import assert from "node:assert/strict";
import { Client } from "@langchain/langgraph-sdk";

const urls = process.env.THREADLINE_URLS.split(",");
const apiKey = process.env.THREADLINE_API_KEY;
// No retries: a 5xx must show, not be papered over.
const clients = urls.map((apiUrl) => new Client({ apiUrl, apiKey, callerOptions: { maxRetries: 0 } }));
const [A, B] = [clients[0], clients[clients.length - 1]];
const HI = (text) => ({ messages: [{ role: "user", content: text }] });
const REFUND = { request: "refund please", amount: 250 };

async function raw(path, init = {}) {
  const response = await fetch(urls[urls.length - 1] + path, {
    ...init,
    headers: { "x-api-key": apiKey, ...(init.headers || {}) },
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

async function rejects(promise, status) {
  try {
    await promise;
  } catch (error) {
    assert.equal(error.status, status, `expected HTTP ${status}, got ${error.status}: ${error.message}`);
    return error;
  }
  assert.fail(`expected HTTP ${status}, the call succeeded`);
}

async function collect(stream) {
  const parts = [];
  for await (const part of stream) parts.push(part);
  return parts;
}

const checks = {
  // -- assistants --
  async "assistants: search, get, graph, schemas"() {
    const found = await A.assistants.search({ limit: 100 });
    const ids = found.map((a) => a.graph_id);
    assert.ok(ids.includes("chat") && ids.includes("refunds"), ids.join());
    const refunds = await B.assistants.get(found.find((a) => a.graph_id === "refunds").assistant_id);
    for (const key of ["assistant_id", "graph_id", "config", "context", "created_at", "updated_at", "metadata", "version", "name"])
      assert.ok(key in refunds, key);
    const graph = await A.assistants.getGraph("refunds");
    assert.ok(graph.nodes.some((n) => n.id === "review"));
    const schemas = await B.assistants.getSchemas("refunds");
    assert.ok("amount" in schemas.input_schema.properties);
    await rejects(A.assistants.get("no-such-graph"), 422);
    await rejects(B.assistants.get("00000000-0000-4000-8000-000000000000"), 404);
  },
  async "assistants: select, sortBy, sortOrder"() {
    const asc = await A.assistants.search({ sortBy: "graph_id", sortOrder: "asc", limit: 100 });
    const names = asc.map((a) => a.graph_id);
    assert.deepEqual(names, [...names].sort());
    const desc = await B.assistants.search({ sortBy: "graph_id", sortOrder: "desc", limit: 100 });
    assert.deepEqual(desc.map((a) => a.graph_id), [...names].reverse());
    const picked = await A.assistants.search({ select: ["graph_id"], limit: 2 });
    assert.deepEqual(picked.map((a) => Object.keys(a)), [["graph_id"], ["graph_id"]]);
    assert.equal(await B.assistants.count({ graphId: "chat" }), 1);
  },
  async "assistants: create, update, versions, setLatest, run with its context, delete"() {
    const suite = `js${Date.now()}${Math.random()}`;
    const made = await A.assistants.create({ graphId: "steps", name: "tagger", context: { tag: "x" }, metadata: { suite } });
    assert.equal(made.version, 1);
    assert.deepEqual(made.config.configurable, { tag: "x" });
    const updated = await B.assistants.update(made.assistant_id, { context: { tag: "y" } });
    assert.equal(updated.version, 2);
    assert.equal(updated.name, "tagger");
    const versions = await A.assistants.getVersions(made.assistant_id);
    assert.deepEqual(versions.map((v) => v.version), [2, 1]);
    const latest = await B.assistants.setLatest(made.assistant_id, 1);
    assert.deepEqual([latest.version, latest.context], [1, { tag: "x" }]);
    // The run sees the assistant's context as its configurable tag (graphs/steps.py).
    const thread = await A.threads.create();
    const out = await B.runs.wait(thread.thread_id, made.assistant_id, { input: {} });
    assert.deepEqual(out.done, ["x1"]);
    assert.deepEqual((await A.assistants.search({ metadata: { suite } })).map((a) => a.assistant_id), [made.assistant_id]);
    assert.equal(await B.assistants.count({ metadata: { suite } }), 1);
    await A.assistants.delete(made.assistant_id);
    await rejects(B.assistants.get(made.assistant_id), 404);
    await rejects(A.assistants.update(made.assistant_id, { name: "gone" }), 404);
  },

  // -- threads --
  async "threads: a fresh thread has every typed field, values null"() {
    const thread = await A.threads.create({ metadata: { suite: "fresh" } });
    for (const key of ["thread_id", "created_at", "updated_at", "state_updated_at", "metadata", "status", "values", "interrupts", "error"])
      assert.ok(key in thread, key);
    assert.equal(thread.values, null);
    assert.equal(thread.status, "idle");
    assert.equal(typeof thread.state_updated_at, "string");
    const again = await B.threads.get(thread.thread_id);
    assert.equal(again.thread_id, thread.thread_id);
    assert.equal(again.values, null);
  },
  async "threads: update, search with select, count, copy, delete"() {
    const tag = `t${Date.now()}${Math.random()}`;
    const thread = await A.threads.create({ metadata: { tag } });
    const patched = await B.threads.update(thread.thread_id, { metadata: { colour: "blue" } });
    assert.equal(patched.metadata.colour, "blue");
    const found = await A.threads.search({ metadata: { tag }, select: ["thread_id", "status"] });
    assert.deepEqual(found, [{ thread_id: thread.thread_id, status: "idle" }]);
    assert.equal(await B.threads.count({ metadata: { tag } }), 1);
    const copy = await A.threads.copy(thread.thread_id);
    assert.notEqual(copy.thread_id, thread.thread_id);
    await B.threads.delete(copy.thread_id);
    await rejects(A.threads.get(copy.thread_id), 404);
  },
  async "threads: a malformed id is 422 with detail"() {
    const answer = await raw("/threads/not%20an%20id");
    assert.equal(answer.status, 422);
    assert.equal(typeof answer.body.detail, "string");
    assert.equal(typeof answer.body.error.code, "string");
  },

  // -- runs --
  async "runs: wait, create+join, get, list with select, delete"() {
    const thread = await A.threads.create();
    const result = await B.runs.wait(thread.thread_id, "chat", { input: HI("hello") });
    assert.match(result.messages.at(-1).content, /^turn 1 · history [0-9a-f]{12} · you said: hello$/);
    const run = await A.runs.create(thread.thread_id, "chat", { input: HI("again") });
    const joined = await B.runs.join(thread.thread_id, run.run_id);
    assert.match(joined.messages.at(-1).content, /turn 2 .* you said: again$/);
    const got = await A.runs.get(thread.thread_id, run.run_id);
    for (const key of ["run_id", "thread_id", "assistant_id", "created_at", "updated_at", "status", "metadata", "multitask_strategy"])
      assert.ok(key in got, key);
    assert.equal(got.status, "success");
    const listed = await B.runs.list(thread.thread_id, { select: ["run_id", "status"] });
    assert.equal(listed.length, 2);
    assert.deepEqual(Object.keys(listed[0]).sort(), ["run_id", "status"]);
    await A.runs.delete(thread.thread_id, run.run_id);
    await rejects(B.runs.get(thread.thread_id, run.run_id), 404);
    // What the deleted run checkpointed went with it: the thread is as the first run left it.
    const after = await A.threads.get(thread.thread_id);
    assert.equal(after.values.messages.length, 2);
    assert.ok(after.state_updated_at >= after.created_at);
  },
  async "runs: stateless wait and stream"() {
    const result = await A.runs.wait(null, "chat", { input: HI("stateless") });
    assert.match(result.messages.at(-1).content, /you said: stateless$/);
    const parts = await collect(B.runs.stream(null, "chat", { input: HI("streamed"), streamMode: "values" }));
    assert.equal(parts[0].event, "metadata");
    assert.ok(parts.some((p) => p.event === "values"));
  },
  async "runs: unknown assistant: a name 422, a UUID 404"() {
    const thread = await A.threads.create();
    await rejects(B.runs.wait(thread.thread_id, "no-such-graph", { input: HI("x") }), 422);
    await rejects(A.runs.wait(thread.thread_id, "00000000-0000-4000-8000-000000000000", { input: HI("x") }), 404);
  },
  async "runs: interruptBefore naming no node runs to the end"() {
    const thread = await A.threads.create();
    const result = await B.runs.wait(thread.thread_id, "chat", { input: HI("x"), interruptBefore: ["agent"] });
    assert.match(result.messages.at(-1).content, /you said: x$/);
  },
  async "runs: cancel and join"() {
    const thread = await A.threads.create();
    const run = await A.runs.create(thread.thread_id, "chat", { input: HI("slow one"), streamMode: ["messages-tuple"] });
    await B.runs.cancel(thread.thread_id, run.run_id);
    await A.runs.join(thread.thread_id, run.run_id);
    const ended = await B.runs.get(thread.thread_id, run.run_id);
    assert.ok(!["pending", "running"].includes(ended.status), ended.status);
  },

  // -- streaming --
  async "streaming: values, messages-tuple, updates, custom"() {
    const thread = await A.threads.create();
    const parts = await collect(
      B.runs.stream(thread.thread_id, "chat", { input: HI("stream it"), streamMode: ["values", "messages-tuple", "updates"] }),
    );
    const events = new Set(parts.map((p) => p.event));
    for (const e of ["metadata", "values", "messages", "updates"]) assert.ok(events.has(e), [...events].join());
    const tokens = parts.filter((p) => p.event === "messages").map((p) => p[`data`][0].content).join("");
    assert.match(tokens, /you said: stream it$/);
    const custom = await collect(A.runs.stream(null, "refunds", { input: { request: "a question" }, streamMode: ["custom"] }));
    assert.ok(custom.some((p) => p.event === "custom" && p.data.node === "triage"));
  },
  async "streaming: joinStream with a streamMode filter sends only those modes"() {
    const thread = await A.threads.create();
    // Resumable, so its events are there however soon it ends (one nobody streamed keeps none).
    const options = { input: HI("join me"), streamMode: ["values", "updates"], streamResumable: true };
    const run = await A.runs.create(thread.thread_id, "chat", options);
    const parts = await collect(B.runs.joinStream(thread.thread_id, run.run_id, { streamMode: ["values"] }));
    assert.ok(parts.length > 0);
    assert.deepEqual([...new Set(parts.map((p) => p.event))], ["values"]);
  },
  async "streaming: a text/plain JSON body is read as JSON"() {
    const answer = await raw("/threads/search", {
      method: "POST",
      headers: { "content-type": "text/plain;charset=UTF-8" },
      body: JSON.stringify({ limit: 1 }),
    });
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.ok(Array.isArray(answer.body));
  },

  // -- state and history --
  async "state: getState, updateState answers checkpoint + configurable + checkpoint_id"() {
    const thread = await A.threads.create();
    await B.runs.wait(thread.thread_id, "refunds", { input: { request: "a question" } });
    const state = await A.threads.getState(thread.thread_id);
    for (const key of ["values", "next", "checkpoint", "metadata", "created_at", "parent_checkpoint", "tasks"])
      assert.ok(key in state, key);
    const updated = await B.threads.updateState(thread.thread_id, { values: { answer: "edited" } });
    assert.equal(updated.checkpoint.checkpoint_id, updated.checkpoint_id);
    assert.equal(updated.configurable.checkpoint_id, updated.checkpoint_id);
    assert.equal((await A.threads.getState(thread.thread_id)).values.answer, "edited");
  },
  async "state: updateState on a thread with no graph is 400"() {
    const thread = await A.threads.create();
    const error = await rejects(B.threads.updateState(thread.thread_id, { values: { answer: "x" } }), 400);
    assert.match(error.message, /no assigned graph/);
  },
  async "history: before as a Config, a checkpoint and an id pages back; nonsense is 422"() {
    const thread = await A.threads.create();
    await B.runs.wait(thread.thread_id, "chat", { input: HI("one") });
    await A.runs.wait(thread.thread_id, "chat", { input: HI("two") });
    const all = await B.threads.getHistory(thread.thread_id, { limit: 100 });
    assert.ok(all.length >= 4, String(all.length));
    const [newest] = await A.threads.getHistory(thread.thread_id, { limit: 1 });
    const expected = all.slice(1, 3).map((s) => s.checkpoint.checkpoint_id);
    const byConfig = await B.threads.getHistory(thread.thread_id, {
      limit: 2,
      before: { configurable: { checkpoint_id: newest.checkpoint.checkpoint_id } },
    });
    assert.deepEqual(byConfig.map((s) => s.checkpoint.checkpoint_id), expected);
    for (const before of [newest.checkpoint, newest.checkpoint.checkpoint_id]) {
      const answer = await raw(`/threads/${thread.thread_id}/history`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ limit: 2, before }),
      });
      assert.equal(answer.status, 200);
      assert.deepEqual(answer.body.map((s) => s.checkpoint.checkpoint_id), expected);
    }
    await rejects(A.threads.getHistory(thread.thread_id, { before: { configurable: {} } }), 422);
    await rejects(B.threads.getHistory(thread.thread_id, { before: { tags: ["x"] } }), 422);
  },

  // -- interrupts and commands --
  async "interrupts: resume with an empty input beside the command (agent-chat-ui's Approve)"() {
    const thread = await A.threads.create();
    const stopped = await B.runs.wait(thread.thread_id, "refunds", { input: REFUND });
    assert.ok(stopped.__interrupt__?.length === 1, JSON.stringify(stopped));
    const waiting = await A.threads.get(thread.thread_id);
    assert.equal(waiting.status, "interrupted");
    assert.equal(Object.values(waiting.interrupts).flat()[0].value.amount, 250);
    const answer = await raw(`/threads/${thread.thread_id}/runs/wait`, {
      method: "POST",
      headers: { "content-type": "text/plain;charset=UTF-8" },
      body: JSON.stringify({ assistant_id: "refunds", input: {}, command: { resume: "approve" } }),
    });
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.equal(answer.body.decision, "approved");
  },
  async "interrupts: goto beside a null input"() {
    const thread = await A.threads.create();
    await B.runs.wait(thread.thread_id, "refunds", { input: REFUND });
    // Accepted (no 422 for the null input); what goto does beside a pending interrupt is the
    // runs layer's (langgraph-api stops at the interrupt again).
    const done = await A.runs.wait(thread.thread_id, "refunds", { input: null, command: { goto: "respond", update: { decision: "denied" } } });
    assert.equal(done.decision, "denied");
  },
  async "interrupts: resume after updateState on the interrupted thread runs"() {
    const thread = await A.threads.create();
    await B.runs.wait(thread.thread_id, "refunds", { input: REFUND });
    await A.threads.updateState(thread.thread_id, { values: { amount: 300 } });
    const done = await B.runs.wait(thread.thread_id, "refunds", { command: { resume: "approve" } });
    assert.equal(done.answer, "your refund of 300 is approved");
  },
  async "interrupts: streamed interrupt, then a streamed resume"() {
    const thread = await A.threads.create();
    const first = await collect(A.runs.stream(thread.thread_id, "refunds", { input: REFUND, streamMode: ["updates"] }));
    assert.ok(first.some((p) => p.event === "updates" && "__interrupt__" in p.data));
    const second = await collect(B.runs.stream(thread.thread_id, "refunds", { command: { resume: "deny" }, streamMode: ["values"] }));
    assert.equal(second.filter((p) => p.event === "values").at(-1).data.decision, "denied");
  },

  // -- the built-in model --
  async "builtin model: text content blocks are read as their text"() {
    const thread = await A.threads.create();
    const blocks = { messages: [{ role: "user", content: [{ type: "text", text: "hello " }, { type: "text", text: "blocks" }] }] };
    const result = await B.runs.wait(thread.thread_id, "chat", { input: blocks });
    assert.match(result.messages.at(-1).content, /you said: hello blocks$/);
  },

  // -- what is not served --
  // -- the store (long-term memory) --
  async "store: put, get, search, list namespaces, delete across replicas"() {
    const ns = ["memories", `js-${Date.now()}`];
    await A.store.putItem(ns, "likes", { text: "tea", n: 1 });
    await A.store.putItem(ns, "dislikes", { text: "coffee", n: 2 });
    const item = await B.store.getItem(ns, "likes");
    assert.deepEqual([item.namespace, item.key, item.value], [ns, "likes", { text: "tea", n: 1 }]);
    const found = await B.store.searchItems(ns, { filter: { n: 2 } });
    assert.deepEqual(found.items.map((i) => i.key), ["dislikes"]);
    const listed = await A.store.listNamespaces({ prefix: ["memories"] });
    assert.ok(listed.namespaces.some((n) => n.join() === ns.join()), JSON.stringify(listed));
    await B.store.deleteItem(ns, "likes");
    assert.equal(await A.store.getItem(ns, "likes"), null);
    // What the SDK refuses itself, as another client would send it.
    const bad = { namespace: ["bad.label"], key: "k", value: { v: 1 } };
    const put = await raw("/store/items", { method: "PUT", body: JSON.stringify(bad), headers: { "content-type": "application/json" } });
    assert.equal(put.status, 422);
    assert.ok(put.body.detail, JSON.stringify(put.body));
  },
  async "crons: create on a thread and stateless, search, count, update, delete"() {
    const suite = `js${Date.now()}${Math.random()}`;
    const thread = await A.threads.create();
    // A schedule far off: nothing fires during the check.
    const onThread = await A.crons.createForThread(thread.thread_id, "chat", { schedule: "0 0 1 1 *", input: HI("tick"), metadata: { suite } });
    const stateless = await B.crons.create("chat", { schedule: "0 0 1 1 *", input: HI("tock"), metadata: { suite } });
    assert.equal(onThread.thread_id, thread.thread_id);
    assert.equal(stateless.thread_id, null);
    const found = await A.crons.search({ metadata: { suite }, sortBy: "created_at", sortOrder: "asc" });
    assert.deepEqual(found.map((c) => c.cron_id), [onThread.cron_id, stateless.cron_id]);
    assert.equal(await B.crons.count({ threadId: thread.thread_id }), 1);
    const updated = await B.crons.update(stateless.cron_id, { schedule: "0 0 2 1 *", enabled: false });
    assert.deepEqual([updated.schedule, updated.enabled], ["0 0 2 1 *", false]);
    await A.crons.delete(onThread.cron_id);
    await B.crons.delete(stateless.cron_id);
    assert.equal(await A.crons.count({ metadata: { suite } }), 0);
    await rejects(B.crons.create("chat", { schedule: "not a schedule" }), 422);
  },
};

const passed = [];
const failed = {};
const only = process.env.THREADLINE_CHECKS ? new Set(process.env.THREADLINE_CHECKS.split("|")) : null;
for (const [name, check] of Object.entries(checks)) {
  if (only && !only.has(name)) continue;
  try {
    await check();
    passed.push(name);
  } catch (error) {
    failed[name] = String(error?.stack || error).slice(0, 1500);
  }
}
console.log(JSON.stringify({ passed, failed }));
