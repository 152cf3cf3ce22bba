--[[
glm53.server.routes_openai - the OpenAI-compatible routes (and vLLM's tokenizer routes) of glm53.server:

    POST /v1/chat/completions    chat: reasoning_content, tool_calls, images, streaming deltas
    POST /v1/completions         text completion: echo, logprobs with prompt logprobs, a list of prompts
    GET  /v1/models, /v1/models/{id}
    POST /tokenize, /detokenize  (vLLM's shapes)

    require("glm53.server.routes_openai").register(app)   -- glm53.server does this

Fields beyond OpenAI's follow vLLM's extensions: top_k, min_p, repetition_penalty, stop_token_ids, ignore_eos,
skip_special_tokens, prompt_logprobs, return_token_ids, chat_template_kwargs ({enable_thinking, reasoning_effort,
clear_thinking}); LMDeploy's return_routed_experts (a choice's routed_experts: [token][MoE layer][expert id]) and,
named after it, return_indexer_topk (a choice's indexer_topk: [token][sparse layer][attended position]), in the
last streamed chunk of a choice; and glm53's own: policy (a Lua sampling policy by name) and speculative (MTP
draft depth, or {"k": K, "draft": name}). The generation itself is glm53.server.generation's, shared with the
Anthropic route.
]]
local json = require("glm53.chat.json")
local params = require("glm53.server.params")
local prompt = require("glm53.server.prompt")
local generation = require("glm53.server.generation")
local sse = require("glm53.server.sse")

local null, array = json.null, json.array

local M = {}

local function encode(v) return json.encode(v, { compact = true }) end

-- The streamed chunks of plain deltas (text, or chat content and reasoning, without logprobs, tool calls or
-- capture): byte for byte what sse.event(encode(chunk)) writes for them (sorted keys, compact; no line breaks in
-- compact JSON, so one data line), built from the request's fixed parts. They are most of a stream's chunks, and
-- the generic encoder, which runs in the interpreter (glm53.chat.json), cost more than the rest of a token's work.
-- The per-token functions below call nothing of glm53.chat.json on their common path (a compiled trace that
-- reaches that module is abandoned): text is quoted here, with json.quote's escapes.
local quote, number_repr = json.quote, json.number_repr
local byte, sub, tostring, concat = string.byte, string.sub, tostring, table.concat

-- json.quote's escapes (ensure_ascii off), by byte: the quote, the backslash, the short forms, \u00XX otherwise.
local ESCAPES = { [34] = '\\"', [92] = "\\\\", [10] = "\\n", [13] = "\\r", [9] = "\\t", [8] = "\\b", [12] = "\\f" }
for b = 0, 31 do ESCAPES[b] = ESCAPES[b] or string.format("\\u%04x", b) end

local function quote_text(s)
    local parts, from = nil, 1
    for i = 1, #s do
        local e = ESCAPES[byte(s, i)]
        if e then
            parts = parts or { '"' }
            parts[#parts + 1] = sub(s, from, i - 1)
            parts[#parts + 1] = e
            from = i + 1
        end
    end
    if not parts then return '"' .. s .. '"' end
    parts[#parts + 1] = sub(s, from)
    parts[#parts + 1] = '"'
    return concat(parts)
end

-- A choice index, as number_repr writes a small non-negative integer.
local function index_repr(i) return tostring(i) end

local function chunk_tail(id, created, model, object)
    return "}],\"created\":" .. number_repr(created) .. ",\"id\":" .. quote(id) .. ",\"model\":" .. quote(model) ..
           ",\"object\":" .. quote(object) .. "}\n\n"
end

-- Completions: {"choices":[{"finish_reason":null,"index":I,"logprobs":null,"text":T}], created, id, model, object}
function M.text_chunk(tail, index, text)
    return "data: {\"choices\":[{\"finish_reason\":null,\"index\":" .. index_repr(index) ..
           ",\"logprobs\":null,\"text\":" .. quote_text(text) .. tail
end

-- Chat: {"choices":[{"delta":{"content":C,"reasoning_content":R},"finish_reason":null,"index":I,"logprobs":null}],
-- ...}, either field absent when nil.
function M.delta_chunk(tail, index, content, reasoning)
    local delta
    if content and reasoning then
        delta = "\"content\":" .. quote_text(content) .. ",\"reasoning_content\":" .. quote_text(reasoning)
    elseif content then
        delta = "\"content\":" .. quote_text(content)
    else
        delta = "\"reasoning_content\":" .. quote_text(reasoning)
    end
    return "data: {\"choices\":[{\"delta\":{" .. delta .. "},\"finish_reason\":null,\"index\":" ..
           index_repr(index) .. ",\"logprobs\":null" .. tail
end
M.chunk_tail = chunk_tail

local function request_id(prefix)
    local f = io.open("/dev/urandom", "rb")
    local b = f and f:read(12) or tostring(os.clock())
    if f then f:close() end
    return prefix .. b:gsub(".", function(c) return string.format("%02x", c:byte()) end)
end
M.request_id = request_id

-- The served model name, or a 404 for another one (the field may be left out).
function M.check_model(app, body)
    local name = params.string(body, "model")
    if name ~= nil and name ~= app.served_model_name then
        params.fail(404, "The model '" .. name .. "' does not exist (this server serves '" .. app.served_model_name .. "')",
                    "model", "model_not_found")
    end
end

local function stream_usage(body)
    local so = params.object(body, "stream_options")
    return so and params.boolean(so, "include_usage", { default = false }) or false
end

local function token_ids(list, from)
    local out = array({})
    for i = from or 1, #list do out[#out + 1] = list[i] end
    return out
end

-- return_routed_experts and return_indexer_topk: the research capture (glm53.generation.driver) of every choice.
local function read_capture(body, g)
    local experts = params.boolean(body, "return_routed_experts", { default = false })
    local selection = params.boolean(body, "return_indexer_topk", { default = false })
    if experts or selection then g.capture = { experts = experts, selection = selection } end
end

-- Adds what choice stream s captured for its first n tokens (those the response counts) to the choice object ch.
local function add_capture(ch, s, n)
    for key, list in pairs({ routed_experts = s.routed_experts, indexer_topk = s.indexer_topk }) do
        local per_token = array({})
        for i = 1, n do
            local layers = array({})
            for j, ids in ipairs(list[i]) do layers[j] = array(ids) end
            per_token[i] = layers
        end
        ch[key] = per_token
    end
end

---------------------------------------------------------------------------------------------------------------
-- Chat completions
---------------------------------------------------------------------------------------------------------------
local function chat_logprob(e)
    local top = array({})
    for j, t in ipairs(e.top or {}) do top[j] = { token = t.token, logprob = t.logprob, bytes = array(t.bytes) } end
    return { token = e.token, logprob = e.logprob, bytes = array(e.bytes), top_logprobs = top }
end

local function chat_logprobs(entries)
    local content = array({})
    for i, e in ipairs(entries) do content[i] = chat_logprob(e) end
    return { content = content }
end

local function tool_call_json(index, call)
    return { index = index, id = call.id, type = "function",
             ["function"] = { name = call["function"].name, arguments = call["function"].arguments } }
end

local function check_tools(body)
    local tools = params.array(body, "tools")
    if not tools then return nil end
    for i, t in ipairs(tools) do
        local fn = params.kind_of(t) == "object" and (t["function"] or t) or nil
        if params.kind_of(fn) ~= "object" or type(fn.name) ~= "string" then
            params.fail(400, "tools[" .. (i - 1) .. "] must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                        "tools")
        end
    end
    return tools
end

-- A chat tool ({"type": "function", "function": {"name", "description", "parameters"}}) from a flat tool of the
-- Responses or Anthropic API; parameters: its schema (default: an object without properties).
function M.function_tool(t, parameters)
    local fn = json.ordered({ "name", t.name })
    if t.description ~= nil then json.set(fn, "description", t.description) end
    json.set(fn, "parameters", parameters or json.ordered({ "type", "object", "properties", json.object({}) }))
    return json.ordered({ "type", "function", "function", fn })
end

-- The function names a forced call may take: every tool's for "required", the one named by {"type": "function",
-- "function": {"name": N}} (chat) or {"type": "function", "name": N} (Responses), which must be among the tools;
-- nil for "auto", "none" and no tool_choice. tools: chat tools ({"type": "function", "function": {"name"}}).
function M.forced_call_names(tool_choice, tools)
    if tool_choice == nil or tool_choice == "auto" or tool_choice == "none" then return nil end
    local function tool_name(t) return (t["function"] or t).name end
    if (tool_choice == "required" or params.kind_of(tool_choice) == "object") and not tools then
        params.fail(400, "'tool_choice' forces a tool call, but the request has no 'tools'", "tool_choice")
    end
    if tool_choice == "required" then
        local names = {}
        for i, t in ipairs(tools) do names[i] = tool_name(t) end
        return names
    end
    local is_object = params.kind_of(tool_choice) == "object"
    local fn = is_object and params.value(tool_choice, "function")
    local name = is_object and (params.kind_of(fn) == "object" and params.value(fn, "name") or
                                params.value(tool_choice, "name"))
    if not is_object or params.value(tool_choice, "type") ~= "function" or type(name) ~= "string" then
        params.fail(400, "'tool_choice' must be \"none\", \"auto\", \"required\" or name a function: {\"type\": " ..
                    "\"function\", \"function\": {\"name\": ...}} (chat) or {\"type\": \"function\", \"name\": ...}",
                    "tool_choice")
    end
    for _, t in ipairs(tools) do
        if tool_name(t) == name then return { name } end
    end
    params.fail(400, "'tool_choice' names the function '" .. name .. "', which is not among the 'tools'", "tool_choice")
end

local function chat_completions(req, res, app)
    if not app:ready_or_fail(req, res) then return end
    local body = params.decode(req.body)
    M.check_model(app, body)
    local messages = params.array(body, "messages", { required = true })
    if #messages == 0 then params.fail(400, "'messages' must not be empty", "messages") end
    local tools = check_tools(body)
    local tool_choice = params.value(body, "tool_choice")
    local call_names = M.forced_call_names(tool_choice, tools)
    if tool_choice == "none" then tools = nil end
    local kwargs = params.object(body, "chat_template_kwargs") or {}
    local effort = params.string(body, "reasoning_effort") or params.value(kwargs, "reasoning_effort")
    local thinking = params.value(kwargs, "enable_thinking") ~= false and params.value(kwargs, "thinking") ~= false
    local g = params.generation(app, body)
    read_capture(body, g)
    local want_lp = params.boolean(body, "logprobs", { default = false })
    local top = params.integer(body, "top_logprobs", { min = 0, max = 20 })
    if top and not want_lp then params.fail(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs") end
    if want_lp then g.logprobs = top or 0 end
    -- JSON mode: the json policy (scripts/policies/json.lua) constrains every token from the first, so the
    -- request runs without a thinking block (as enable_thinking = false): the value is the message's content.
    local rf = params.object(body, "response_format")
    if rf and (params.value(rf, "type") == "json_object") and not g.new_policy then
        g.new_policy = app:resolve_policy("json")
        thinking = false
    end
    -- Without a generation prompt the output continues the last message as the template left it (an assistant
    -- message's content: its think block closed), so it starts as content, not reasoning (vLLM's
    -- continue_final_message, which implies add_generation_prompt = false).
    local continue_final = params.boolean(body, "continue_final_message", { default = false })
    local add_generation_prompt = params.boolean(body, "add_generation_prompt", { default = not continue_final })
    if continue_final and add_generation_prompt then
        params.fail(400, "'continue_final_message' and 'add_generation_prompt' cannot both be true",
                    "continue_final_message")
    end
    if continue_final and params.value(messages[#messages], "role") ~= "assistant" then
        params.fail(400, "'continue_final_message' needs an assistant message last", "continue_final_message")
    end
    local reasoning_first = thinking and add_generation_prompt   -- the output starts inside the think block
    if call_names then app:tool_choice_policy(g, call_names, reasoning_first, "tool_choice") end
    local p = prompt.chat(app, messages, {
        tools = tools, reasoning_effort = type(effort) == "string" and effort or nil,
        clear_thinking = params.value(kwargs, "clear_thinking"), thinking = thinking,
        add_generation_prompt = add_generation_prompt,
    })
    g.prompt, g.media, g.boundary = p.ids, p.media, p.boundary
    g.max_tokens = prompt.check_length(app, #p.ids, g.max_tokens, "messages")
    g.parse = { tools = tools, thinking = reasoning_first, tool_calls = tools ~= nil and #tools > 0 }
    local stream = params.boolean(body, "stream", { default = false })
    local include_usage = stream and stream_usage(body)
    local id, created = request_id("chatcmpl-"), os.time()
    local model = app.served_model_name

    local function chunk(choices, usage)
        local t = { id = id, object = "chat.completion.chunk", created = created, model = model, choices = choices }
        if usage then t.usage = usage end
        return sse.event(encode(t))
    end
    local wire = { stream = stream }
    local tail = chunk_tail(id, created, model, "chat.completion.chunk")
    function wire.event(run, ev, send)
        if ev.type ~= "finish" and not ev.first and not ev.tool_calls and not ev.logprobs and
           (ev.content or ev.reasoning) then
            return send(M.delta_chunk(tail, ev.index, ev.content, ev.reasoning))
        end
        local choice = { index = ev.index, finish_reason = null, logprobs = null }
        if ev.type == "finish" then
            choice.delta = {}
            choice.finish_reason = ev.reason
            choice.stop_reason = ev.stop or null
            if g.capture then add_capture(choice, run.job.streams[ev.index + 1], ev.tokens) end
        else
            local delta = {}
            if ev.first then delta.role, delta.content = "assistant", "" end
            if ev.reasoning then delta.reasoning_content = ev.reasoning end
            if ev.content then delta.content = (delta.content or "") .. ev.content end
            if ev.tool_calls then
                local calls = array({})
                for j, tc in ipairs(ev.tool_calls) do calls[j] = tool_call_json(tc.index, tc.call) end
                delta.tool_calls = calls
            end
            choice.delta = delta
            if ev.logprobs then choice.logprobs = chat_logprobs(ev.logprobs) end
        end
        send(chunk(array({ choice })))
    end
    function wire.tail(run, send)
        if include_usage then send(chunk(array({}), run.usage)) end
        send(sse.DONE)
    end
    function wire.error_event(_, status, message, send)
        send(sse.event(encode(app:error_body(req, status, message))))
    end
    function wire.body(run)
        local choices = array({})
        for i, c in ipairs(run.choices) do
            local r = c.result or { reasoning = "", tool_calls = {} }
            local msg = { role = "assistant", content = r.content or null,
                          reasoning_content = (r.reasoning ~= "" and r.reasoning) or null }
            if #r.tool_calls > 0 then
                local calls = array({})
                for j, call in ipairs(r.tool_calls) do
                    calls[j] = tool_call_json(j - 1, call)
                    calls[j].index = nil
                end
                msg.tool_calls = calls
            end
            local ch = { index = i - 1, message = msg, finish_reason = c.reason, stop_reason = c.stop or null,
                         logprobs = g.logprobs and chat_logprobs(c.logprobs) or null }
            if g.return_token_ids then
                ch.token_ids = token_ids(run.job.streams[i].generated)
                for t = #ch.token_ids, c.tokens + 1, -1 do ch.token_ids[t] = nil end
            end
            if g.capture then add_capture(ch, run.job.streams[i], c.tokens) end
            choices[i] = ch
        end
        local out = { id = id, object = "chat.completion", created = created, model = model, choices = choices,
                      usage = run.usage }
        if g.return_token_ids then out.prompt_token_ids = token_ids(g.prompt) end
        return out
    end
    generation.serve(app, req, res, g, wire, {
        route = "chat", body = body, prompt_tokens = #g.prompt, max_tokens = g.max_tokens, n = g.n,
    })
end

---------------------------------------------------------------------------------------------------------------
-- Completions
---------------------------------------------------------------------------------------------------------------
-- The prompts of a completions request: a string, a list of ids, or a list of either (a batch).
local function completion_prompts(app, body)
    local v = params.value(body, "prompt")
    if v == nil then params.fail(400, "'prompt' is required", "prompt") end
    local function one(x, where)
        if type(x) == "string" then
            if x == "" then params.fail(400, where .. " must not be empty", "prompt") end
            return prompt.encode(app, x, "prompt"), x
        end
        local ids = params.token_ids({ p = x }, "p", app.n_valid, "prompt")
        if not ids or #ids == 0 then params.fail(400, where .. " must be a string or a non-empty list of token ids",
                                                 "prompt") end
        return ids, nil
    end
    if type(v) == "string" then
        local ids, text = one(v, "'prompt'")
        return { { ids = ids, text = text } }
    end
    if params.kind_of(v) ~= "array" or #v == 0 then
        params.fail(400, "'prompt' must be a string, a list of token ids, or a list of those", "prompt")
    end
    local first = json.is_number_box(v[1]) and json.tonumber(v[1]) or v[1]
    if type(first) == "number" then
        local ids = one(v, "'prompt'")
        return { { ids = ids } }
    end
    local out = {}
    for i, x in ipairs(v) do
        local ids, text = one(x, "'prompt[" .. (i - 1) .. "]'")
        out[i] = { ids = ids, text = text }
    end
    return out
end

-- OpenAI's legacy logprobs object for a list of entries; offset0 is the text offset of the first.
local function completion_logprobs(entries, offset0, first_null)
    local tokens, lps, tops, offsets = array({}), array({}), array({}), array({})
    local offset = offset0
    for i, e in ipairs(entries) do
        tokens[i] = e.token
        offsets[i] = offset
        offset = offset + #e.token
        if first_null and i == 1 then
            lps[i], tops[i] = null, null
        else
            lps[i] = e.logprob
            local t = {}
            for _, alt in ipairs(e.top or {}) do t[alt.token] = alt.logprob end
            tops[i] = e.top and t or null
        end
    end
    return { tokens = tokens, token_logprobs = lps, top_logprobs = tops, text_offset = offsets }, offset
end

local function completions(req, res, app)
    if not app:ready_or_fail(req, res) then return end
    local body = params.decode(req.body)
    M.check_model(app, body)
    local prompts = completion_prompts(app, body)
    if params.value(body, "suffix") ~= nil then params.fail(400, "'suffix' is not supported", "suffix") end
    local echo = params.boolean(body, "echo", { default = false })
    local lp = params.integer(body, "logprobs", { min = 0, max = 20 })
    local plp = params.integer(body, "prompt_logprobs", { min = 0, max = 20 })
    local g0 = params.generation(app, body, { min_max_tokens = 0, max_tokens_keys = { "max_tokens" } })
    read_capture(body, g0)
    if g0.max_tokens == 0 and not echo then
        params.fail(400, "'max_tokens' = 0 needs 'echo': true (prompt logprobs only)", "max_tokens")
    end
    local stream = params.boolean(body, "stream", { default = false })
    local include_usage = stream and stream_usage(body)
    local id, created, model = request_id("cmpl-"), os.time(), app.served_model_name
    local n = g0.n
    -- One run per prompt, sharing the response: choice index = prompt index * n + choice.
    local runs, done, failed = {}, 0, false
    local usage = { prompt_tokens = 0, completion_tokens = 0, total_tokens = 0 }
    local texts = {}
    local send = function(bytes) if not res.closed and not res.finished then res:write(bytes) end end
    local tail = chunk_tail(id, created, model, "text_completion")
    local function chunk(choices, u)
        local t = { id = id, object = "text_completion", created = created, model = model, choices = choices }
        if u then t.usage = u end
        return sse.event(encode(t))
    end
    local function prompt_entries(run, pi)
        local out = {}
        local ids = prompts[pi].ids
        local plps = run.prompt_logprobs or {}
        for t = 1, #ids do
            out[t] = plps[t] or generation.entry(app.tokenizer, ids[t], { logprob = 0 })
        end
        return out
    end
    local function fail(status, message)
        if failed then return end
        failed = true
        for _, r in ipairs(runs) do r:cancel() end
        if stream and res.head_sent then
            send(sse.event(encode(app:error_body(req, status, message))))
            if not res.closed then res:finish() end
        else
            app:fail(req, res, status, message)
        end
    end
    local function finish_all()
        if stream then
            if include_usage then send(chunk(array({}), usage)) end
            send(sse.DONE)
            if not res.closed then res:finish() end
            return
        end
        local choices = array({})
        for pi, run in ipairs(runs) do
            for ci, c in ipairs(run.choices) do
                local text, entries = c.text, c.logprobs
                local first_null = false
                if echo then
                    text = texts[pi] .. text
                    if lp then
                        local all = prompt_entries(run, pi)
                        for _, e in ipairs(c.logprobs) do all[#all + 1] = e end
                        entries, first_null = all, true
                    end
                end
                local ch = { index = (pi - 1) * n + ci - 1, text = text, finish_reason = c.reason,
                             stop_reason = c.stop or null,
                             logprobs = lp and (completion_logprobs(entries, 0, first_null)) or null }
                if g0.return_token_ids then
                    ch.token_ids = token_ids(run.job.streams[ci].generated)
                    for t = #ch.token_ids, c.tokens + 1, -1 do ch.token_ids[t] = nil end
                    ch.prompt_token_ids = token_ids(prompts[pi].ids)
                end
                if g0.capture then add_capture(ch, run.job.streams[ci], c.tokens) end
                choices[#choices + 1] = ch
            end
        end
        app:send(res, 200, { id = id, object = "text_completion", created = created, model = model,
                             choices = choices, usage = usage })
    end

    for pi, pr in ipairs(prompts) do
        local g = {}
        for k, v in pairs(g0) do g[k] = v end
        g.prompt = pr.ids
        g.max_tokens = prompt.check_length(app, #pr.ids, g0.max_tokens, "prompt")
        if lp then g.logprobs = lp end
        if (echo and lp) or plp then g.prompt_logprobs = math.max(lp or 0, plp or 0) end
        texts[pi] = echo and (pr.text or app.tokenizer:decode(pr.ids) or "") or ""
        local offsets = {}   -- text offset per choice, for streamed logprobs
        g.on_event = function(ev)
            if failed or res.finished then return end
            local run = runs[pi]
            if ev.type == "error" then return fail(ev.status, ev.message) end
            if ev.type == "done" then
                usage.prompt_tokens = usage.prompt_tokens + run.usage.prompt_tokens
                usage.completion_tokens = usage.completion_tokens + run.usage.completion_tokens
                usage.total_tokens = usage.prompt_tokens + usage.completion_tokens
                done = done + 1
                if done == #prompts then finish_all() end
                return
            end
            if not stream then return end
            local index = (pi - 1) * n + ev.index
            if ev.type ~= "finish" and not lp and not (ev.first and echo) then
                local text = ev.text or ""
                offsets[ev.index] = (offsets[ev.index] or 0) + #text
                return send(M.text_chunk(tail, index, text))
            end
            local choice = { index = index, text = "", logprobs = null, finish_reason = null }
            if ev.type == "finish" then
                choice.finish_reason, choice.stop_reason = ev.reason, ev.stop or null
                if g0.capture then add_capture(choice, run.job.streams[ev.index + 1], ev.tokens) end
                -- max_tokens = 0: the echo (and prompt logprobs) come with the finish
                if not offsets[ev.index] and echo then
                    choice.text = texts[pi]
                    if lp then choice.logprobs = (completion_logprobs(prompt_entries(run, pi), 0, true)) end
                end
            else
                local text, entries, first_null = ev.text or "", ev.logprobs, false
                if ev.first and echo then
                    text = texts[pi] .. text
                    if lp then
                        local all = prompt_entries(run, pi)
                        for _, e in ipairs(ev.logprobs or {}) do all[#all + 1] = e end
                        entries, first_null = all, true
                    end
                end
                choice.text = text
                if lp and entries then
                    local obj, next_offset = completion_logprobs(entries, offsets[ev.index] or 0, first_null)
                    choice.logprobs, offsets[ev.index] = obj, next_offset
                else
                    offsets[ev.index] = (offsets[ev.index] or 0) + #text
                end
            end
            send(chunk(array({ choice })))
        end
        app:check_admission({ route = "completions", body = body, prompt_tokens = #pr.ids, max_tokens = g.max_tokens,
                              n = n }, req)
        local run, err, status = generation.start(app, g)
        if not run then return fail(status, err) end
        runs[pi] = run
    end
    res:on_close(function() for _, r in ipairs(runs) do r:cancel() end end)
    if stream and not res.finished then
        res:write_head(200, sse.headers())
        res:write("")
    end
end

---------------------------------------------------------------------------------------------------------------
-- Models and the tokenizer
---------------------------------------------------------------------------------------------------------------
local function model_card(app)
    return { id = app.served_model_name, object = "model", created = app.created, owned_by = "glm53",
             root = app.model_dir, max_model_len = app.max_model_len }
end

local function tokenize(req, res, app)
    if not app:ready_or_fail(req, res) then return end
    local body = params.decode(req.body)
    M.check_model(app, body)
    local ids
    local messages = params.array(body, "messages")
    if messages then
        ids = prompt.chat(app, messages, {
            tools = check_tools(body),
            add_generation_prompt = params.boolean(body, "add_generation_prompt", { default = true }),
        }).ids
    else
        local text = params.string(body, "prompt", { required = true })
        ids = prompt.encode(app, text, "prompt")
    end
    local out = { count = #ids, max_model_len = app.max_model_len, tokens = token_ids(ids) }
    if params.boolean(body, "return_token_strs", { default = false }) then
        local strs = array({})
        for i, id in ipairs(ids) do strs[i] = app.tokenizer:token_string(id) or null end
        out.token_strs = strs
    end
    app:send(res, 200, out)
end

local function detokenize(req, res, app)
    if not app:ready_or_fail(req, res) then return end
    local body = params.decode(req.body)
    M.check_model(app, body)
    local ids = params.token_ids(body, "tokens", app.n_valid)
    if not ids then params.fail(400, "'tokens' is required", "tokens") end
    local text = app.tokenizer:decode(ids)
    app:send(res, 200, { prompt = text })
end

function M.register(app)
    app:route("POST", "/v1/chat/completions", chat_completions)
    app:route("POST", "/v1/completions", completions)
    app:route("GET", "/v1/models", function(_, res)
        app:send(res, 200, { object = "list", data = array({ model_card(app) }) })
    end)
    app:route("GET", "^/v1/models/(.+)$", function(req, res)
        if req.params[1] ~= app.served_model_name then
            return app:fail(req, res, 404, "The model '" .. req.params[1] .. "' does not exist", "model",
                            "model_not_found")
        end
        app:send(res, 200, model_card(app))
    end)
    app:route("POST", "/tokenize", tokenize)
    app:route("POST", "/detokenize", detokenize)
end

return M
