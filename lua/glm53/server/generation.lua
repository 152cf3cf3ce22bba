--[[
glm53.server.generation - the generation core the OpenAI and Anthropic routes share: a normalised request goes to
the scheduler; what comes back per choice is text (stop strings applied, held back while they could still match),
reasoning, content and tool calls (glm53.chat.parsers, chat requests only), logprobs, and a finish reason.

    local generation = require("glm53.server.generation")
    local run = generation.start(app, {
        prompt = ids, n = 1, max_tokens = 64, seed = 7, sampling = { temperature = 0.8, top_p = 0.9 },
        stop = { "\n\n" }, stop_ids = app.stop_ids, logprobs = 2,           -- logprobs: top alternatives per token
        parse = { tools = tools, thinking = true },                         -- chat: reasoning and tool calls
        on_event = function(ev) ... end,
    })
    run:cancel()                                                            -- client gone

Events (ev.type):
  "delta"   ev.index (0-based choice), and what it brought: ev.text (completions), or ev.reasoning, ev.content,
            ev.tool_calls ({ {index, call = {id, type, function = {name, arguments}}} }) for chat; ev.logprobs (a
            list of token entries), ev.first (the choice's first delta)
  "finish"  ev.index, ev.reason ("stop" | "length" | "tool_calls"), ev.stop (the stop string or token id, or a
            policy's reason), ev.tokens (completion tokens of the choice)
  "done"    ev.usage = { prompt_tokens, completion_tokens, total_tokens }; then nothing more
  "error"   ev.status, ev.message; then nothing more
A token entry is { id, token (text, lossy UTF-8), bytes (list), logprob, top = { entries without top } }.
run.choices[i] (1-based) accumulates: text, result (the parser's, chat), logprobs, tokens, reason, stop;
run.prompt_logprobs lists the prompt's entries (the first is nil) when prompt_logprobs was asked for.

Other request fields: media and boundary go to the scheduler (glm53.server.scheduler), k / new_policy / new_draft
per choice (speculative decoding, a Lua policy, a draft policy), skip_special_tokens (default true), prompt_logprobs
(top alternatives per prompt token), capture ({experts, selection}: the research capture of glm53.generation.driver;
run.job.streams[i].routed_experts / .indexer_topk hold it per generated token). Choice i samples with seed + i - 1,
as vLLM's n > 1 does. Returns run, or nil, message, status (429 when the queue is full).
]]
local parsers = require("glm53.chat.parsers")
local tokenizer = require("glm53.engine.tokenizer")
local params = require("glm53.server.params")

local concat = table.concat

local M = {}

local Run = {}
Run.__index = Run

-- A token entry of a logprobs list.
local function entry(tok, id, logprob)
    local piece = tok:piece(id) or ""
    local bytes = {}
    for i = 1, #piece do bytes[i] = piece:byte(i) end
    return { id = id, token = tokenizer.utf8_lossy(piece), bytes = bytes, logprob = logprob }
end

local function full_entry(tok, id, lp)
    local e = entry(tok, id, lp.logprob)
    if lp.top then
        e.top = {}
        for j, t in ipairs(lp.top) do e.top[j] = entry(tok, t[1], t[2]) end
    end
    return e
end

M.entry = full_entry

-- Text of a choice through its parser (chat) or as is; adds the pieces to the delta being built.
local function feed(run, c, text, delta)
    if text == "" then return end
    c.text[#c.text + 1] = text
    if not c.parser then
        delta.text[#delta.text + 1] = text
        return
    end
    for _, ev in ipairs(c.parser:push(text)) do
        if ev.type == "reasoning" then delta.reasoning[#delta.reasoning + 1] = ev.text
        elseif ev.type == "content" then delta.content[#delta.content + 1] = ev.text
        else delta.tool_calls[#delta.tool_calls + 1] = { index = ev.index, call = ev.tool_call } end
    end
end

local function new_delta()
    return { text = {}, reasoning = {}, content = {}, tool_calls = {}, logprobs = {} }
end

-- Sends a delta event when it holds anything.
local function flush(run, i, c, delta)
    local ev = { type = "delta", index = i - 1 }
    local any = false
    for _, key in ipairs({ "text", "reasoning", "content" }) do
        if #delta[key] > 0 then ev[key], any = concat(delta[key]), true end
    end
    if #delta.tool_calls > 0 then ev.tool_calls, any = delta.tool_calls, true end
    if #delta.logprobs > 0 then ev.logprobs, any = delta.logprobs, true end
    if not any and c.sent_first then return end
    ev.first = not c.sent_first
    c.sent_first = true
    run.on_event(ev)
end

-- The prompt's logprob entries, once the first choice's prefill has computed them.
local function prompt_list(run, s)
    if run.prompt_logprobs or not s.prompt_logprobs then return end
    local list = {}
    for p = 2, s.prompt_len do
        local lp = s.prompt_logprobs[p]
        if lp then list[p] = full_entry(run.tok, s.all[p], lp) end
    end
    run.prompt_logprobs = list
end

-- The common case of on_tokens, without the delta tables: plain text (no parser, no logprobs) after the first
-- delta; one event with the text of the new tokens, when they bring any.
local function on_plain_tokens(run, job, i, s, c, from, to)
    local text
    for t = from, to do
        local id = s.generated[t]
        c.tokens = t
        if not run.stop_ids[id] then
            local piece, stopped, which = c.detok:push(id)
            if piece ~= nil and piece ~= "" then
                c.text[#c.text + 1] = piece
                text = text and text .. piece or piece
            end
            if stopped then
                c.stopped, c.stop = true, which
                job:end_choice(i, "stop")
                break
            end
        end
    end
    if text then run.on_event({ type = "delta", index = i - 1, text = text, first = false }) end
end

local function on_tokens(run, job, i, s, from, to)
    local c = run.choices[i]
    if i == 1 then prompt_list(run, s) end
    if c.stopped then return end
    if c.sent_first and not c.parser and not s.logprobs then return on_plain_tokens(run, job, i, s, c, from, to) end
    local delta = new_delta()
    local tok = run.tok
    for t = from, to do
        local id = s.generated[t]
        c.tokens = t
        if s.logprobs and s.logprobs[t] then
            local e = full_entry(tok, id, s.logprobs[t])
            c.logprobs[#c.logprobs + 1] = e
            delta.logprobs[#delta.logprobs + 1] = e
        end
        if not run.stop_ids[id] then
            local text, stopped, which = c.detok:push(id)
            if text == nil then text = "" end
            feed(run, c, text, delta)
            if stopped then
                c.stopped, c.stop = true, which
                job:end_choice(i, "stop")
                break
            end
        end
    end
    flush(run, i, c, delta)
end

local function on_finish(run, job, i, s)
    local c = run.choices[i]
    if i == 1 then prompt_list(run, s) end
    local delta = new_delta()
    if not c.stopped then feed(run, c, (c.detok:finish()), delta) end
    if c.parser then
        for _, ev in ipairs(c.parser:finish()) do
            if ev.type == "reasoning" then delta.reasoning[#delta.reasoning + 1] = ev.text
            elseif ev.type == "content" then delta.content[#delta.content + 1] = ev.text end
        end
        c.result = c.parser:result()
    end
    flush(run, i, c, delta)
    c.text = concat(c.text)
    local why = s.finish_reason
    if c.stopped then
        c.reason = "stop"
    elseif why == "length" then
        c.reason = "length"
    elseif why == "stop" then
        c.reason, c.stop = "stop", s.generated[#s.generated]
    else                                   -- a policy ended the stream: its reason
        c.reason, c.stop = "stop", why
    end
    if c.result and #c.result.tool_calls > 0 and c.reason == "stop" then c.reason = "tool_calls" end
    if i == 1 then job.finish_reason = c.reason end
    run.on_event({ type = "finish", index = i - 1, reason = c.reason, stop = c.stop, tokens = c.tokens })
end

-- Starts a request (see the header). Returns the run, or nil, message, status.
function M.start(app, g)
    if (g.min_tokens or 0) > g.max_tokens then
        params.fail(400, "'min_tokens' (" .. g.min_tokens .. ") must not exceed the output limit (" .. g.max_tokens ..
                    ")", "min_tokens")
    end
    local tok = app.tokenizer
    local stop_ids = {}
    for _, id in ipairs(g.stop_ids or {}) do stop_ids[id] = true end
    local run = setmetatable({ app = app, tok = tok, on_event = g.on_event, choices = {}, stop_ids = stop_ids,
                               prompt_tokens = #g.prompt }, Run)
    local choices = {}
    for i = 1, g.n or 1 do
        local c = {
            text = {}, logprobs = {}, tokens = 0,
            detok = tok:stream({ skip_special_tokens = g.skip_special_tokens ~= false, stop = g.stop,
                                 stop_after = g.min_tokens, include_stop = g.include_stop }),
        }
        if g.parse then
            c.parser = parsers.stream(g.parse.tools, { tool_calls = g.parse.tool_calls })
            if g.parse.thinking == false then c.parser:push("</think>") end   -- the prompt closed the think block
        end
        run.choices[i] = c
        choices[i] = {
            max_new = g.max_tokens, min_new = g.min_tokens, seed = g.seed and g.seed + i - 1 or nil,
            sampling = g.sampling, stop_ids = g.stop_ids, k = g.k, new_policy = g.new_policy, new_draft = g.new_draft,
            logprobs = g.logprobs, capture = g.capture,
        }
    end
    local job, err = app.scheduler:submit({
        prompt = g.prompt, media = g.media, boundary = g.boundary, prompt_logprobs = g.prompt_logprobs,
        choices = choices,
        on_tokens = function(job, i, s, from, to) on_tokens(run, job, i, s, from, to) end,
        on_finish = function(job, i, s) on_finish(run, job, i, s) end,
        on_done = function()
            local completion = 0
            for _, c in ipairs(run.choices) do completion = completion + c.tokens end
            run.usage = { prompt_tokens = run.prompt_tokens, completion_tokens = completion,
                          total_tokens = run.prompt_tokens + completion }
            run.on_event({ type = "done", usage = run.usage })
        end,
        on_error = function(_, status, message)
            run.on_event({ type = "error", status = status or 500, message = message })
        end,
    })
    if not job then return nil, "the server is busy: " .. err .. " (retry later)", 429 end
    run.job = job
    return run
end

function Run:cancel()
    if self.job then self.job:cancel() end
end

-- Answers an HTTP request with a run: the admission hooks, the start, cancellation when the client goes away,
-- and the framing the route's wire format gives:
--   wire.stream          SSE or one JSON body
--   wire.begin(run, send)            streaming: once, before any event (Anthropic's message_start)
--   wire.event(run, ev, send)        streaming: each delta and finish event
--   wire.tail(run, send)             streaming: after "done" (usage, [DONE], message_stop)
--   wire.error_event(run, status, message, send)   streaming: an error after the head went out
--   wire.body(run)       non-streaming: the response object once "done"
-- send(bytes) writes to the client (nothing once it is gone). job describes the request for app:admit hooks.
function M.serve(app, req, res, g, wire, job)
    app:check_admission(job, req)
    local send = function(bytes) if not res.closed and not res.finished then res:write(bytes) end end
    local run, err, status
    g.on_event = function(ev)
        if res.finished then return end
        if ev.type == "error" then
            if wire.stream and res.head_sent then
                wire.error_event(run, ev.status, ev.message, send)
                if not res.closed then res:finish() end
            else
                app:fail(req, res, ev.status, ev.message)
            end
        elseif wire.stream then
            if ev.type == "done" then
                wire.tail(run, send)
                if not res.closed then res:finish() end
            else
                wire.event(run, ev, send)
            end
        elseif ev.type == "done" then
            if not res.closed then app:send(res, 200, wire.body(run)) end
        end
    end
    run, err, status = M.start(app, g)
    if not run then return app:fail(req, res, status, err) end
    res:on_close(function() run:cancel() end)
    if wire.stream then
        local sse = require("glm53.server.sse")
        res:write_head(200, sse.headers())
        if wire.begin then wire.begin(run, send) else res:write("") end
    end
    return run
end

return M
