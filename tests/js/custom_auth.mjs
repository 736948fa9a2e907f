// Custom auth through the LangGraph JS SDK (tests/integration/test_custom_auth.py): two users,
// each with their identity provider's JWT as `Authorization: Bearer`, on two replicas.
// Reads {"urls": [a, b], "alice": token, "bob": token} on stdin; prints what each saw as JSON.
import { Client } from "@langchain/langgraph-sdk";

const input = JSON.parse(await new Promise((resolve) => {
  let data = "";
  process.stdin.on("data", (chunk) => (data += chunk));
  process.stdin.on("end", () => resolve(data));
}));
const [a, b] = input.urls;
const as = (url, token) =>
  new Client({ apiUrl: url, apiKey: null, defaultHeaders: token ? { Authorization: `Bearer ${token}` } : {} });
const status = async (promise) => {
  try {
    const value = await promise;
    if (value && typeof value[Symbol.asyncIterator] === "function") for await (const _ of value);
    return 200;
  } catch (error) {
    if (error?.status) return error.status;
    throw error;
  }
};

const aliceA = as(a, input.alice);
const aliceB = as(b, input.alice);
const bobB = as(b, input.bob);
const thread = await aliceA.threads.create({ metadata: { via: "js" } });
const values = await aliceB.runs.wait(thread.thread_id, "greeter", {
  input: { messages: [{ role: "user", content: "from js" }] },
});
const run = (await aliceA.runs.list(thread.thread_id))[0];
const out = {
  thread_id: thread.thread_id,
  reply: values.messages.at(-1).content,
  alice_search: (await aliceB.threads.search({ limit: 100 })).map((t) => t.thread_id),
  alice_history: (await aliceB.threads.getHistory(thread.thread_id)).length,
  bob_search: (await bobB.threads.search({ limit: 100 })).map((t) => t.thread_id),
  bob_count: await bobB.threads.count(),
  bob_get_status: await status(bobB.threads.get(thread.thread_id)),
  bob_history_status: await status(bobB.threads.getHistory(thread.thread_id)),
  bob_stream_status: await status(bobB.runs.joinStream(thread.thread_id, run.run_id)),
  no_token_status: await status(as(a, null).threads.search({})),
};
process.stdout.write(JSON.stringify(out));
