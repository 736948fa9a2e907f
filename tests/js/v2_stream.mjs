// The v2 streaming protocol (POST /threads/{id}/commands, POST /threads/{id}/stream/events) as
// @langchain/langgraph-sdk 1.15's client.threads.stream() drives it, against the server(s)
// named by the command line. Prints one JSON line per check; exits 1 on the first failure.
//
//   node v2_stream.mjs <url A> <url B> <api key> <mode>
//
// mode "run": a thread's run started through A (run.start), its events read by the SDK's
// ThreadStream through B; then an interrupt answered with input.respond.
// mode "raw": the wire itself through fetch: a run started on A, its events read on B, the
// connection cut and resumed with Last-Event-ID and with `since`.
import { Client } from "@langchain/langgraph-sdk";

const [, , urlA, urlB, apiKey, mode] = process.argv;
const headers = apiKey ? { "x-api-key": apiKey } : {};
const out = (check, value) => console.log(JSON.stringify({ check, value }));
const debug = process.env.V2_DEBUG ? (...a) => console.error(...a) : () => {};

function fail(message) {
  console.error(message);
  process.exit(1);
}

async function command(url, threadId, body) {
  const res = await fetch(`${url}/threads/${threadId}/commands`, {
    method: "POST",
    headers: { ...headers, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}

// Reads SSE events from `url`'s thread stream until `stop(event)` or `limit` events.
async function readEvents(url, threadId, body, { lastEventId, stop, limit = 10000 } = {}) {
  const ac = new AbortController();
  const res = await fetch(`${url}/threads/${threadId}/stream/events`, {
    method: "POST",
    headers: {
      ...headers,
      "content-type": "application/json",
      accept: "text/event-stream",
      ...(lastEventId ? { "last-event-id": lastEventId } : {}),
    },
    body: JSON.stringify(body),
    signal: ac.signal,
  });
  if (res.status !== 200) return { status: res.status, events: [], text: await res.text() };
  const events = [];
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for await (const chunk of res.body) {
      buffer += decoder.decode(chunk, { stream: true }).replace(/\r\n?/g, "\n");
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const frame = { id: null, data: "" };
        for (const line of block.split(/\r?\n/)) {
          if (line.startsWith("id:")) frame.id = line.slice(3).trim();
          else if (line.startsWith("data:")) frame.data += line.slice(5).trimStart();
        }
        if (!frame.data) continue;
        const event = JSON.parse(frame.data);
        event.sse_id = frame.id;
        events.push(event);
        if (events.length >= limit || (stop && stop(event))) {
          ac.abort();
          return { status: 200, events };
        }
      }
    }
  } catch (err) {
    if (err.name !== "AbortError") throw err;
  }
  return { status: 200, events };
}

const rootEnd = (e) =>
  e.method === "lifecycle" &&
  e.params.namespace.length === 0 &&
  ["completed", "failed", "interrupted"].includes(e.params.data.event);

if (mode === "raw") {
  const a = new Client({ apiUrl: urlA, apiKey });
  const thread = await a.threads.create();
  const tid = thread.thread_id;
  const start = await command(urlA, tid, {
    id: 1,
    method: "run.start",
    params: { assistant_id: "steps", input: { steps: 6, delay: 0.15, tag: "v" } },
  });
  out("run.start", { status: start.status, type: start.body.type, has_run_id: !!start.body.result?.run_id });
  if (start.body.type !== "success") fail(JSON.stringify(start.body));
  // On B, while A executes the run: the first few events, then the connection is cut.
  const channels = ["values", "updates", "lifecycle", "input"];
  const first = await readEvents(urlB, tid, { channels }, { limit: 4 });
  debug("first", first.events.length);
  const cutAt = first.events[first.events.length - 1];
  // Resumed after the last event seen, with Last-Event-ID (the SSE id) and with `since`.
  const byHeader = await readEvents(urlB, tid, { channels }, { lastEventId: cutAt.sse_id, stop: rootEnd });
  const bySince = await readEvents(urlA, tid, { channels, since: cutAt.seq }, { stop: rootEnd });
  const whole = await readEvents(urlA, tid, { channels }, { stop: rootEnd });
  const ids = (events) => events.map((e) => e.event_id);
  out("resume", {
    first: first.events.length,
    header_continues: JSON.stringify(ids([...first.events, ...byHeader.events])) === JSON.stringify(ids(whole.events)),
    since_continues: JSON.stringify(ids([...first.events, ...bySince.events])) === JSON.stringify(ids(whole.events)),
    seqs_increase: whole.events.every((e, i) => i === 0 || e.seq > whole.events[i - 1].seq),
    sse_id_is_seq: whole.events.every((e) => e.sse_id === String(e.seq)),
  });
  out("methods", [...new Set(whole.events.map((e) => e.method))].sort());
  out("lifecycle", whole.events.filter((e) => e.method === "lifecycle" && e.params.namespace.length === 0).map((e) => e.params.data.event));
  const lastValues = whole.events.filter((e) => e.method === "values" && e.params.namespace.length === 0).pop();
  out("last_values_done", lastValues?.params?.data?.done);
  const onlyUpdates = await readEvents(urlB, tid, { channels: ["updates", "lifecycle"] }, { stop: rootEnd });
  out("filtered", [...new Set(onlyUpdates.events.map((e) => e.method))].sort());
  const bad = await readEvents(urlB, tid, { channels: ["nonsense"] });
  out("bad_channel", bad.status);
  const unknown = await command(urlB, tid, { id: 7, method: "nope.nope", params: {} });
  out("unknown_command", { status: unknown.status, type: unknown.body.type, error: unknown.body.error });
} else if (mode === "run") {
  const client = new Client({ apiUrl: urlB, apiKey, defaultHeaders: headers });
  const starter = new Client({ apiUrl: urlA, apiKey, defaultHeaders: headers });
  const tid = (await starter.threads.create()).thread_id;
  const thread = client.threads.stream(tid, { assistantId: "steps" });
  // Started through A's commands route, read through B's event stream.
  const startThread = starter.threads.stream(tid, { assistantId: "steps" });
  const seen = [];
  const sub = await thread.subscribe({ channels: ["values", "lifecycle", "input"] });
  const reading = (async () => {
    for await (const event of sub) {
      seen.push(event);
      if (rootEnd(event)) break;
    }
  })();
  await startThread.run.start({ input: { steps: 3, delay: 0.05, tag: "s", ask: "ok?" } });
  await Promise.race([reading, new Promise((_, r) => setTimeout(() => r(new Error("no terminal lifecycle")), 20000))]);
  debug("seen", JSON.stringify(seen.map((e) => [e.method, e.seq, e.event_id])));
  const interrupts = seen.filter((e) => e.method === "input.requested");
  out("asked", interrupts.map((e) => e.params.data.payload?.question ?? e.params.data));
  out("ended", seen.filter(rootEnd).map((e) => e.params.data.event));
  const interruptId = interrupts[0]?.params?.data?.interrupt_id;
  if (!interruptId) fail("no input.requested event");
  const resumed = await command(urlA, tid, {
    id: 9,
    method: "input.respond",
    params: { interrupt_id: interruptId, response: "yes", namespace: [] },
  });
  out("respond", resumed.body.type);
  const resumeEnd = await readEvents(urlB, tid, { channels: ["values", "lifecycle"] }, {
    stop: (e) => rootEnd(e) && e.params.data.event === "completed",
  });
  const last = resumeEnd.events.filter((e) => e.method === "values").pop();
  out("answers", last?.params?.data?.answers);
  await thread.close();
  await startThread.close();
}
process.exit(0);
