// Loaded by the page tests/integration/test_browser.py serves (from its own origin, not the
// API's): the LangGraph JS SDK in the browser streams a run, resumes an interrupt the way
// agent-chat-ui does, and cancels a run. window.scenario resolves to what each step saw.
import { Client } from "@langchain/langgraph-sdk/client";

window.scenario = async (apiUrl, apiKey) => {
  const client = new Client({ apiUrl, apiKey, callerOptions: { maxRetries: 0 } });
  const seen = { origin: location.origin };
  const thread = await client.threads.create({ metadata: { from: "browser" } });
  // 1. A streamed run: tokens as they come.
  let tokens = "";
  for await (const part of client.runs.stream(thread.thread_id, "chat", {
    input: { messages: [{ role: "user", content: [{ type: "text", text: "hello browser" }] }] },
    streamMode: ["messages-tuple", "values"],
  })) {
    if (part.event === "messages" && part.data[0].type === "AIMessageChunk") tokens += part.data[0].content;
  }
  seen.streamed = tokens;
  // 2. An interrupt, then Approve as agent-chat-ui sends it (an empty input beside the command).
  const refund = await client.threads.create();
  const stopped = await client.runs.wait(refund.thread_id, "refunds", { input: { request: "refund please", amount: 250 } });
  seen.interrupt = stopped.__interrupt__?.[0]?.value ?? null;
  const resumed = await client.runs.wait(refund.thread_id, "refunds", { input: {}, command: { resume: "approve" } });
  seen.resumed = resumed.answer;
  // 3. A cancel of a run that streams slowly.
  const slow = await client.threads.create();
  const run = await client.runs.create(slow.thread_id, "chat", {
    input: { messages: [{ role: "user", content: "a long answer please" }] },
    streamMode: ["messages-tuple"],
  });
  await client.runs.cancel(slow.thread_id, run.run_id);
  try {
    await client.runs.join(slow.thread_id, run.run_id);
  } catch (error) {
    seen.joinError = String(error);
  }
  seen.cancelled = (await client.runs.get(slow.thread_id, run.run_id)).status;
  return seen;
};
window.ready = true;
