--[[
glm53.server.page - the one-page chat client GET / serves: plain HTML and JavaScript, no build step. It streams
from POST /v1/chat/completions (fetch and a reader over the SSE body), shows the reasoning apart from the answer,
keeps the conversation, and sends the API key from its settings field when the server wants one.

    res:finish(require("glm53.server.page").html(app))
]]
local M = {}

local PAGE = [==[<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>glm53 chat</title>
<style>
  :root { font-family: system-ui, sans-serif; color: #1d1d1f; background: #f4f4f6; }
  body { margin: 0; display: flex; flex-direction: column; height: 100vh; }
  header { padding: 10px 16px; background: #20232a; color: #fff; display: flex; gap: 12px; align-items: center; }
  header b { font-size: 15px; }
  header input { width: 70px; }
  header label { font-size: 12px; color: #ccc; }
  #status { margin-left: auto; font-size: 12px; color: #9f9; }
  #log { flex: 1; overflow-y: auto; padding: 16px; display: flex; flex-direction: column; gap: 10px; }
  .msg { max-width: 80%; padding: 8px 12px; border-radius: 10px; white-space: pre-wrap; word-break: break-word; }
  .user { align-self: flex-end; background: #0a84ff; color: #fff; }
  .assistant { align-self: flex-start; background: #fff; border: 1px solid #ddd; }
  .reasoning { color: #777; font-style: italic; border-left: 3px solid #ccc; padding-left: 8px; margin-bottom: 6px; }
  .reasoning:empty { display: none; }
  .meta { font-size: 11px; color: #999; margin-top: 4px; }
  form { display: flex; gap: 8px; padding: 12px 16px; background: #fff; border-top: 1px solid #ddd; }
  textarea { flex: 1; height: 48px; font: inherit; padding: 6px; }
  button { font: inherit; padding: 0 18px; }
</style>
</head>
<body>
<header>
  <b id="model">glm53</b>
  <label>temperature <input id="temperature" type="number" step="0.1" min="0" value="0.7"></label>
  <label>max tokens <input id="max_tokens" type="number" min="1" value="256"></label>
  <label>API key <input id="key" type="password" placeholder="none"></label>
  <span id="status">connecting</span>
</header>
<div id="log"></div>
<form id="form">
  <textarea id="input" placeholder="Say something (Enter sends, Shift+Enter for a new line)"></textarea>
  <button id="send" type="submit">Send</button>
</form>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const history = [];
let model = null, busy = null;
$("key").value = localStorage.getItem("glm53-key") || "";
$("key").onchange = () => localStorage.setItem("glm53-key", $("key").value);

function headers() {
  const h = { "Content-Type": "application/json" };
  if ($("key").value) h["Authorization"] = "Bearer " + $("key").value;
  return h;
}

async function connect() {
  try {
    const health = await fetch("/health");
    if (health.status !== 200) { $("status").textContent = "loading the model..."; return setTimeout(connect, 500); }
    const r = await fetch("/v1/models", { headers: headers() });
    const j = await r.json();
    model = j.data[0].id;
    $("model").textContent = model;
    $("status").textContent = "ready";
  } catch (e) {
    $("status").textContent = "server unreachable"; setTimeout(connect, 1000);
  }
}

function bubble(role) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  if (role === "assistant") {
    div.innerHTML = '<div class="reasoning"></div><div class="content"></div><div class="meta"></div>';
  }
  $("log").appendChild(div);
  return div;
}

async function send(text) {
  history.push({ role: "user", content: text });
  bubble("user").textContent = text;
  const out = bubble("assistant");
  const reasoning = out.querySelector(".reasoning"), content = out.querySelector(".content");
  const meta = out.querySelector(".meta");
  busy = new AbortController();
  $("send").textContent = "Stop";
  const t0 = performance.now();
  let answer = "", tokens = 0, finish = "";
  try {
    const r = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), signal: busy.signal,
      body: JSON.stringify({ model, messages: history, stream: true, stream_options: { include_usage: true },
                             temperature: Number($("temperature").value), max_tokens: Number($("max_tokens").value) }),
    });
    if (!r.ok) { const e = await r.json(); throw new Error(e.error ? e.error.message : r.statusText); }
    const reader = r.body.getReader(), decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const ev = buf.slice(0, cut); buf = buf.slice(cut + 2);
        const data = ev.split("\n").filter(l => l.startsWith("data: ")).map(l => l.slice(6)).join("\n");
        if (!data || data === "[DONE]") continue;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        if (chunk.usage) tokens = chunk.usage.completion_tokens;
        for (const c of chunk.choices || []) {
          if (c.delta.reasoning_content) reasoning.textContent += c.delta.reasoning_content;
          if (c.delta.content) { answer += c.delta.content; content.textContent = answer; }
          if (c.finish_reason) finish = c.finish_reason;
        }
        $("log").scrollTop = $("log").scrollHeight;
      }
    }
    meta.textContent = tokens + " tokens, " + ((performance.now() - t0) / 1000).toFixed(2) + " s, " + finish;
  } catch (e) {
    meta.textContent = e.name === "AbortError" ? "stopped" : "error: " + e.message;
  }
  history.push({ role: "assistant", content: answer, reasoning_content: reasoning.textContent });
  busy = null;
  $("send").textContent = "Send";
}

$("form").onsubmit = (e) => {
  e.preventDefault();
  if (busy) { busy.abort(); return; }
  const text = $("input").value.trim();
  if (!text) return;
  $("input").value = "";
  send(text);
};
$("input").onkeydown = (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("form").requestSubmit(); }
};
connect();
</script>
</body>
</html>
]==]

function M.html() return PAGE end

return M
