// Cancelled runs and interrupt double-texts as @langchain/langgraph-sdk 1.15 sees them, against
// the servers named by the command line (the run is created on A, cancelled and read on B).
// Prints one JSON line per check; exits 1 when a call throws.
//
//   node run_semantics.mjs <url A> <url B> <api key>
import { Client } from "@langchain/langgraph-sdk";

const [, , urlA, urlB, apiKey] = process.argv;
const a = new Client({ apiUrl: urlA, apiKey });
const b = new Client({ apiUrl: urlB, apiKey });
const out = (check, value) => console.log(JSON.stringify({ check, value }));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function stepsDone(client, tid, n) {
  for (let i = 0; i < 400; i += 1) {
    const state = await client.threads.getState(tid);
    if ((state.values?.done ?? []).length >= n) return;
    await sleep(50);
  }
  throw new Error(`never ${n} steps done`);
}

async function events(client, tid, runId) {
  const seen = [];
  for await (const part of client.runs.joinStream(tid, runId, { lastEventId: "-1" })) seen.push(part.event);
  return seen;
}

try {
  // A cancel: runs.wait on A resolves to the thread's values instead of throwing.
  let tid = (await a.threads.create()).thread_id;
  const waiting = a.runs.wait(tid, "steps", { input: { steps: 40, delay: 0.2 } });
  await stepsDone(b, tid, 2);
  const [run] = await b.runs.list(tid);
  await b.runs.cancel(tid, run.run_id);
  out("status_at_once", (await b.runs.get(tid, run.run_id)).status);
  const waited = await waiting;
  out("wait", { error: "__error__" in waited, done: (waited.done ?? []).length >= 2 });
  const joined = await b.runs.join(tid, run.run_id);
  out("join_is_values", JSON.stringify(joined) === JSON.stringify((await b.threads.getState(tid)).values));
  out("error_events", (await events(b, tid, run.run_id)).filter((e) => e === "error").length);
  out("thread", (await b.threads.get(tid)).status);

  // An interrupt double-text: the first run's stream ends without an error event.
  tid = (await a.threads.create()).thread_id;
  const first = await a.runs.create(tid, "steps", { input: { steps: 40, delay: 0.2 } });
  await stepsDone(b, tid, 2);
  const second = await b.runs.wait(tid, "steps", {
    input: { steps: 1, tag: "n" },
    multitaskStrategy: "interrupt",
  });
  out("double_text", {
    first: (await a.runs.get(tid, first.run_id)).status,
    first_errors: (await events(a, tid, first.run_id)).filter((e) => e === "error").length,
    second_last: second.done[second.done.length - 1],
  });

  // Rollback by cancel: what the run wrote is gone.
  tid = (await a.threads.create()).thread_id;
  const doomed = await a.runs.create(tid, "steps", { input: { steps: 40, delay: 0.2, tag: "x" } });
  await stepsDone(b, tid, 2);
  const rolled = await b.runs.cancel(tid, doomed.run_id, true, "rollback");
  out("rollback", { values: rolled, thread: (await a.threads.get(tid)).status });
} catch (err) {
  console.error(err?.stack ?? String(err));
  process.exit(1);
}
process.exit(0);
