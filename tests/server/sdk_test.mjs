// The official OpenAI and Anthropic npm clients against a running glm53 server, streaming and not.
//   node tests/server/sdk_test.mjs http://127.0.0.1:PORT [IDS.json]
// Prints one line per check ("ok <name>" or "FAIL <name>: <why>") and exits 1 if any failed. The server must
// run with --script tests/server/test_app.lua (the "script" policy drives tool calls through whatever the model
// would write). IDS.json, when given, gets the token ids of a greedy and a seeded n = 2 chat request as the client
// received them ({"prompt", "greedy", "seeded"}), which tests/lua/server_clients_spec.lua compares with
// scripts/generate.lua's on the same model.
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";

const base = process.argv[2];
const idsOut = process.argv[3];
if (!base) { console.error("usage: node sdk_test.mjs BASE_URL"); process.exit(2); }
const openai = new OpenAI({ baseURL: base + "/v1", apiKey: "unused", maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: base, apiKey: "unused", maxRetries: 0 });
const messages = [{ role: "user", content: "Tell me about the weather." }];
const TOOL_SCRIPT = "Let me check.</think>Checking.<tool_call>get_weather<arg_key>city</arg_key>" +
  "<arg_value>Paris</arg_value></tool_call>";
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];

let failed = 0;
async function check(name, fn) {
  try { await fn(); console.log("ok " + name); }
  catch (e) { failed++; console.log("FAIL " + name + ": " + (e && e.stack || e)); }
}

let model;
await check("openai models.list", async () => {
  const page = await openai.models.list();
  assert.equal(page.data.length, 1);
  model = page.data[0].id;
  assert.equal((await openai.models.retrieve(model)).id, model);
});

await check("openai chat: non-streaming and streaming greedy outputs agree", async () => {
  const req = { model, messages, max_tokens: 24, temperature: 0 };
  const r = await openai.chat.completions.create(req);
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices[0].message.role, "assistant");
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0 && r.usage.completion_tokens > 0);
  const stream = await openai.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let content = "", reasoning = "", usage = null, finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      content += c.delta.content || "";
      reasoning += c.delta.reasoning_content || "";
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(content, r.choices[0].message.content || "");
  assert.equal(reasoning, r.choices[0].message.reasoning_content || "");
  assert.equal(finish, r.choices[0].finish_reason);
  assert.deepEqual(usage, r.usage);
});

await check("openai chat: seeded sampling is reproducible, n = 2", async () => {
  const req = { model, messages, max_tokens: 16, temperature: 0.8, top_p: 0.9, seed: 11, n: 2 };
  const a = await openai.chat.completions.create(req), b = await openai.chat.completions.create(req);
  assert.equal(a.choices.length, 2);
  assert.deepEqual(a.choices.map(c => c.message), b.choices.map(c => c.message));
});

await check("openai chat: token ids of greedy and seeded requests (return_token_ids)", async () => {
  const g = await openai.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0,
                                                   return_token_ids: true });
  const s = await openai.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0.8, top_p: 0.9,
                                                   seed: 11, n: 2, return_token_ids: true });
  assert.ok(Array.isArray(g.prompt_token_ids) && g.prompt_token_ids.length > 0);
  assert.equal(g.choices[0].token_ids.length, g.usage.completion_tokens);
  assert.equal(s.choices.length, 2);
  if (idsOut) writeFileSync(idsOut, JSON.stringify({ prompt: g.prompt_token_ids, greedy: g.choices[0].token_ids,
                                                     seeded: s.choices.map(c => c.token_ids) }));
});

await check("openai chat: tool calls (non-streaming, and the stream helper's final completion)", async () => {
  const req = { model, messages, tools, max_tokens: 100, policy: { name: "script", text: TOOL_SCRIPT } };
  const r = await openai.chat.completions.create(req);
  const call = r.choices[0].message.tool_calls[0];
  assert.equal(r.choices[0].finish_reason, "tool_calls");
  assert.equal(call.function.name, "get_weather");
  assert.deepEqual(JSON.parse(call.function.arguments), { city: "Paris" });
  assert.equal(r.choices[0].message.content, "Checking.");
  const runner = openai.chat.completions.stream(req);
  const final = await runner.finalChatCompletion();
  const scall = final.choices[0].message.tool_calls[0];
  assert.equal(scall.function.name, "get_weather");
  assert.deepEqual(JSON.parse(scall.function.arguments), { city: "Paris" });
  assert.equal(final.choices[0].message.content, "Checking.");
});

await check("openai chat: logprobs", async () => {
  const r = await openai.chat.completions.create({ model, messages, max_tokens: 4, temperature: 0, logprobs: true,
                                                   top_logprobs: 2 });
  assert.equal(r.choices[0].logprobs.content.length, 4);
  for (const e of r.choices[0].logprobs.content) assert.equal(e.top_logprobs.length, 2);
});

await check("openai completions: non-streaming and streaming agree; echo with logprobs", async () => {
  const req = { model, prompt: "The weather today", max_tokens: 12, temperature: 0 };
  const r = await openai.completions.create(req);
  assert.equal(r.object, "text_completion");
  let text = "";
  for await (const chunk of await openai.completions.create({ ...req, stream: true })) text += chunk.choices[0].text;
  assert.equal(text, r.choices[0].text);
  const e = await openai.completions.create({ ...req, max_tokens: 0, echo: true, logprobs: 1 });
  assert.equal(e.choices[0].text, "The weather today");
  assert.equal(e.choices[0].logprobs.token_logprobs[0], null);
});

await check("openai errors: a 400 and a 404 arrive as the client's error classes", async () => {
  await assert.rejects(openai.chat.completions.create({ model, messages, temperature: -1 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === "temperature");
  await assert.rejects(openai.chat.completions.create({ model: "nope", messages }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
});

await check("openai responses: greedy output_text equals the chat route's; streamed events add up to it", async () => {
  const chat = await openai.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0 });
  const req = { model, input: messages[0].content, max_output_tokens: 24, temperature: 0 };
  const r = await openai.responses.create(req);
  assert.equal(r.object, "response");
  assert.equal(r.status, chat.choices[0].finish_reason === "length" ? "incomplete" : "completed");
  assert.equal(r.output_text, chat.choices[0].message.content || "");
  const reasoning = r.output.filter((o) => o.type === "reasoning").map((o) => o.content[0].text).join("");
  assert.equal(reasoning, chat.choices[0].message.reasoning_content || "");
  assert.equal(r.usage.input_tokens, chat.usage.prompt_tokens);
  assert.equal(r.usage.output_tokens, chat.usage.completion_tokens);
  const stream = await openai.responses.create({ ...req, stream: true });
  let text = "", rtext = "", last = -1, final = null;
  const types = [];
  for await (const ev of stream) {
    assert.equal(ev.sequence_number, last + 1);
    last = ev.sequence_number;
    types.push(ev.type);
    if (ev.type === "response.output_text.delta") text += ev.delta;
    if (ev.type === "response.reasoning_text.delta") rtext += ev.delta;
    if (ev.type === "response.completed" || ev.type === "response.incomplete") final = ev.response;
  }
  assert.equal(types[0], "response.created");
  assert.equal(text, r.output_text);
  assert.equal(rtext, reasoning);
  assert.deepEqual(final.output.map((o) => o.type), r.output.map((o) => o.type));
  assert.deepEqual(final.usage, r.usage);
  // the client's stream helper rebuilds the response from the events (content parts, deltas) and agrees
  const helper = openai.responses.stream(req);
  const rebuilt = await helper.finalResponse();
  assert.equal(rebuilt.output_text, r.output_text);
  assert.deepEqual(rebuilt.output.map((o) => o.type), r.output.map((o) => o.type));
});

await check("openai responses: function tools, a forced call, and the call's output sent back", async () => {
  const rtools = [{ type: "function", name: "get_weather", description: "Weather in a city",
                    parameters: tools[0].function.parameters }];
  const r = await openai.responses.create({ model, input: "What is the weather in Paris?", tools: rtools,
                                            tool_choice: "required", max_output_tokens: 200, temperature: 0 });
  const call = r.output.find((o) => o.type === "function_call");
  assert.ok(call, JSON.stringify(r.output));
  assert.equal(call.name, "get_weather");
  const streamed = await openai.responses.stream({ model, input: "What is the weather in Paris?", tools: rtools,
    tool_choice: "required", max_output_tokens: 200, temperature: 0 }).finalResponse();
  assert.deepEqual(streamed.output.find((o) => o.type === "function_call").arguments, call.arguments);
  const r2 = await openai.responses.create({ model, tools: rtools, max_output_tokens: 16, temperature: 0,
    input: [{ role: "user", content: "What is the weather in Paris?" }, call,
            { type: "function_call_output", call_id: call.call_id, output: "18 C and sunny" }] });
  assert.equal(r2.object, "response");
  assert.ok(r2.output.length > 0);
  await assert.rejects(openai.responses.create({ model, input: "hi", previous_response_id: r.id }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400);
});

await check("anthropic messages: non-streaming and streaming agree", async () => {
  const req = { model, max_tokens: 20, temperature: 0, messages: [{ role: "user", content: "hi" }] };
  const r = await anthropic.messages.create(req);
  assert.equal(r.type, "message");
  assert.equal(r.content[0].type, "text");
  assert.ok(["end_turn", "max_tokens", "stop_sequence"].includes(r.stop_reason));
  const stream = anthropic.messages.stream(req);
  let text = "";
  stream.on("text", (t) => { text += t; });
  const final = await stream.finalMessage();
  assert.equal(text, r.content[0].text);
  assert.deepEqual(final.content, r.content);
  assert.equal(final.stop_reason, r.stop_reason);
  assert.equal(final.usage.output_tokens, r.usage.output_tokens);
  const raw = await anthropic.messages.create({ ...req, stream: true });
  const kinds = [];
  for await (const ev of raw) kinds.push(ev.type);
  assert.equal(kinds[0], "message_start");
  assert.equal(kinds[kinds.length - 1], "message_stop");
});

await check("anthropic messages: system prompt, thinking and tool_use, streamed and not", async () => {
  const req = { model, max_tokens: 2000, system: "You are brief.", thinking: { type: "enabled", budget_tokens: 1024 },
    tools: [{ name: "get_weather", description: "Weather", input_schema: { type: "object",
      properties: { city: { type: "string" } } } }],
    messages: [{ role: "user", content: "Weather in Paris?" }],
    policy: { name: "script", text: TOOL_SCRIPT } };
  const r = await anthropic.messages.create(req);
  assert.equal(r.content[0].type, "thinking");
  assert.equal(r.content[0].thinking, "Let me check.");
  assert.equal(r.content[1].type, "text");
  assert.equal(r.content[1].text, "Checking.");
  assert.equal(r.content[2].type, "tool_use");
  assert.deepEqual(r.content[2].input, { city: "Paris" });
  assert.equal(r.stop_reason, "tool_use");
  const final = await anthropic.messages.stream(req).finalMessage();
  assert.deepEqual(final.content.map(b => b.type), ["thinking", "text", "tool_use"]);
  assert.deepEqual(final.content[2].input, { city: "Paris" });
  assert.equal(final.stop_reason, "tool_use");
});

await check("anthropic errors: a 400 arrives as BadRequestError", async () => {
  await assert.rejects(anthropic.messages.create({ model, max_tokens: 5, temperature: 5,
                                                   messages: [{ role: "user", content: "hi" }] }),
    (e) => e instanceof Anthropic.BadRequestError && e.status === 400 && e.error.type === "error");
});

console.log(failed === 0 ? "all passed" : failed + " failed");
process.exit(failed === 0 ? 0 : 1);
