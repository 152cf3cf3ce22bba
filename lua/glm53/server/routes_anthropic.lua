--[[
glm53.server.routes_anthropic - the Anthropic Messages API of glm53.server:

    POST /v1/messages                messages in, a message out (thinking, text and tool_use blocks); stream: true
                                     sends message_start, content_block_start/delta/stop, message_delta,
                                     message_stop as named SSE events
    POST /v1/messages/count_tokens   {"input_tokens": N}

    require("glm53.server.routes_anthropic").register(app)   -- glm53.server does this

Requests are turned into the OpenAI-shaped messages the chat template takes (system -> a system message, image
blocks -> image_url parts with data URLs, tool_use -> tool_calls, tool_result -> tool messages, thinking ->
reasoning_content; tools' input_schema -> parameters) and run by the generation core the OpenAI routes use.
"thinking": {"type": "enabled"} returns GLM's reasoning as thinking blocks; without it the prompt closes the think
block ("</think>"), so the model answers without reasoning, as Claude does without extended thinking. Errors come
in Anthropic's shape ({"type": "error", "error": {"type", "message"}}). stop_reason: end_turn, max_tokens,
stop_sequence, tool_use.
]]
local json = require("glm53.chat.json")
local params = require("glm53.server.params")
local prompt = require("glm53.server.prompt")
local generation = require("glm53.server.generation")
local routes_openai = require("glm53.server.routes_openai")

local null, array, ordered = json.null, json.array, json.ordered

local M = {}

local function encode(v) return json.encode(v, { compact = true }) end

local function event(name, value)
    return "event: " .. name .. "\ndata: " .. encode(value) .. "\n\n"
end

-- Text of a string or a list of text blocks.
local function block_text(v, where)
    if type(v) == "string" then return v end
    if params.kind_of(v) ~= "array" then params.fail(400, where .. " must be a string or a list of blocks", "messages") end
    local out = {}
    for _, b in ipairs(v) do
        if params.kind_of(b) == "object" and b.type == "text" and type(b.text) == "string" then out[#out + 1] = b.text end
    end
    return table.concat(out)
end

local function image_part(b, where)
    local src = b.source
    if params.kind_of(src) ~= "object" then params.fail(400, where .. ".source must be an object", "messages") end
    local url
    if src.type == "base64" then
        if type(src.data) ~= "string" or type(src.media_type) ~= "string" then
            params.fail(400, where .. ".source needs media_type and data", "messages")
        end
        url = "data:" .. src.media_type .. ";base64," .. src.data
    elseif src.type == "url" and type(src.url) == "string" then
        url = src.url
    else
        params.fail(400, where .. ".source.type must be 'base64' or 'url'", "messages")
    end
    return ordered({ "type", "image_url", "image_url", ordered({ "url", url }) })
end

-- Anthropic messages (and system) -> OpenAI-shaped messages for the chat template.
local function to_openai(body)
    local out = array({})
    local system = params.value(body, "system")
    if system ~= nil then
        out[#out + 1] = ordered({ "role", "system", "content", block_text(system, "'system'") })
    end
    local messages = params.array(body, "messages", { required = true })
    if #messages == 0 then params.fail(400, "'messages' must not be empty", "messages") end
    for i, msg in ipairs(messages) do
        local where = "messages[" .. (i - 1) .. "]"
        if params.kind_of(msg) ~= "object" then params.fail(400, where .. " must be an object", "messages") end
        local role = msg.role
        if role ~= "user" and role ~= "assistant" then
            params.fail(400, where .. ".role must be 'user' or 'assistant'", "messages")
        end
        local content = msg.content
        if type(content) == "string" then
            out[#out + 1] = ordered({ "role", role, "content", content })
        elseif params.kind_of(content) == "array" then
            local parts, calls, reasoning, text_only = array({}), array({}), nil, true
            for j, b in ipairs(content) do
                local bw = where .. ".content[" .. (j - 1) .. "]"
                if params.kind_of(b) ~= "object" or type(b.type) ~= "string" then
                    params.fail(400, bw .. " must be a content block", "messages")
                end
                local function need(key)
                    if type(b[key]) ~= "string" then
                        params.fail(400, bw .. "." .. key .. " must be a string", "messages")
                    end
                end
                if b.type == "text" then
                    need("text")
                    parts[#parts + 1] = ordered({ "type", "text", "text", b.text })
                elseif b.type == "image" then
                    parts[#parts + 1] = image_part(b, bw)
                    text_only = false
                elseif b.type == "tool_use" and role == "assistant" then
                    need("id")
                    need("name")
                    calls[#calls + 1] = ordered({ "id", b.id, "type", "function", "function",
                                                  ordered({ "name", b.name, "arguments", b.input or json.object({}) }) })
                elseif b.type == "thinking" and role == "assistant" then
                    reasoning = (reasoning or "") .. tostring(b.thinking or "")
                elseif b.type == "tool_result" and role == "user" then
                    need("tool_use_id")
                    out[#out + 1] = ordered({ "role", "tool", "tool_call_id", b.tool_use_id,
                                              "content", block_text(b.content or "", bw .. ".content") })
                elseif b.type ~= "redacted_thinking" then
                    params.fail(400, bw .. ": unsupported block type '" .. b.type .. "'", "messages")
                end
            end
            if #parts > 0 or #calls > 0 or reasoning then
                local m = ordered({ "role", role })
                if text_only then
                    local t = {}
                    for _, p in ipairs(parts) do t[#t + 1] = p.text end
                    json.set(m, "content", table.concat(t))
                else
                    json.set(m, "content", parts)
                end
                if reasoning then json.set(m, "reasoning_content", reasoning) end
                if #calls > 0 then json.set(m, "tool_calls", calls) end
                out[#out + 1] = m
            end
        else
            params.fail(400, where .. ".content must be a string or a list of blocks", "messages")
        end
    end
    return out
end

local function to_openai_tools(body)
    local tools = params.array(body, "tools")
    if not tools or #tools == 0 then return nil end
    local tc = params.object(body, "tool_choice")
    if tc and tc.type == "none" then return nil end
    local out = array({})
    for i, t in ipairs(tools) do
        if params.kind_of(t) ~= "object" or type(t.name) ~= "string" then
            params.fail(400, "tools[" .. (i - 1) .. "] needs a name", "tools")
        end
        out[#out + 1] = routes_openai.function_tool(t, t.input_schema)
    end
    return out
end

-- The function names a forced call may take: every tool's for {"type": "any"}, the one of {"type": "tool", "name":
-- N} (among the tools); nil for "auto", "none" and no tool_choice. tools: the request's, as OpenAI tools.
local function forced_call_names(body, tools)
    local tc = params.object(body, "tool_choice")
    local kind = tc and params.value(tc, "type")
    if kind == nil or kind == "auto" or kind == "none" then return nil end
    if kind == "any" then return routes_openai.forced_call_names("required", tools) end
    if kind == "tool" then
        return routes_openai.forced_call_names({ type = "function", name = params.value(tc, "name") }, tools)
    end
    params.fail(400, "tool_choice.type must be \"auto\", \"any\", \"tool\" or \"none\"", "tool_choice")
end

local function thinking_enabled(body)
    local t = params.object(body, "thinking")
    return t ~= nil and t.type == "enabled"
end

local function build(app, body)
    routes_openai.check_model(app, body)
    local tools = to_openai_tools(body)
    local thinking = thinking_enabled(body)
    local p = prompt.chat(app, to_openai(body), { tools = tools, thinking = thinking })
    return p, tools, thinking
end

local STOP_REASON = { length = "max_tokens", tool_calls = "tool_use" }

local function tool_use_block(call)
    local input = json.decode(call["function"].arguments, { exact = true }) or json.object({})
    return { type = "tool_use", id = (call.id:gsub("^chatcmpl%-tool%-", "toolu_")), name = call["function"].name,
             input = input }
end

local function messages(req, res, app)
    if not app:ready_or_fail(req, res) then return end
    local body = params.decode(req.body)
    local g = params.generation(app, body, { max_tokens_keys = { "max_tokens" }, max_tokens_required = true,
                                             stop_key = "stop_sequences", max_temperature = 1 })
    g.n = 1
    local p, tools, thinking = build(app, body)
    local call_names = forced_call_names(body, tools)
    if call_names then app:tool_choice_policy(g, call_names, thinking, "tool_choice") end
    g.prompt, g.media, g.boundary = p.ids, p.media, p.boundary
    g.max_tokens = prompt.check_length(app, #p.ids, g.max_tokens, "messages")
    g.parse = { tools = tools, thinking = thinking, tool_calls = tools ~= nil }
    local stream = params.boolean(body, "stream", { default = false })
    local id = routes_openai.request_id("msg_")
    local model = app.served_model_name

    local function stop_reason(c)
        if c.stopped then return "stop_sequence" end
        return STOP_REASON[c.reason] or "end_turn"
    end
    local wire = { stream = stream }
    -- streaming state: the open block (index, kind)
    local index, open = -1, nil
    local function close(send)
        if open then send(event("content_block_stop", { type = "content_block_stop", index = index })) end
        open = nil
    end
    local function begin(kind, block, send)
        if open == kind and kind ~= "tool_use" then return end
        close(send)
        index, open = index + 1, kind
        send(event("content_block_start", { type = "content_block_start", index = index, content_block = block }))
    end
    function wire.begin(run, send)
        send(event("message_start", { type = "message_start", message = {
            id = id, type = "message", role = "assistant", model = model, content = array({}), stop_reason = null,
            stop_sequence = null, usage = { input_tokens = run.prompt_tokens, output_tokens = 0 } } }))
        send(event("ping", { type = "ping" }))
    end
    function wire.event(run, ev, send)
        if ev.type == "finish" then
            close(send)
            local c = run.choices[1]
            send(event("message_delta", { type = "message_delta",
                delta = { stop_reason = stop_reason(c), stop_sequence = c.stopped and c.stop or null },
                usage = { output_tokens = ev.tokens } }))
            return
        end
        if ev.reasoning and thinking then
            begin("thinking", { type = "thinking", thinking = "", signature = "" }, send)
            send(event("content_block_delta", { type = "content_block_delta", index = index,
                                                delta = { type = "thinking_delta", thinking = ev.reasoning } }))
        end
        if ev.content then
            begin("text", { type = "text", text = "" }, send)
            send(event("content_block_delta", { type = "content_block_delta", index = index,
                                                delta = { type = "text_delta", text = ev.content } }))
        end
        for _, tc in ipairs(ev.tool_calls or {}) do
            local block = tool_use_block(tc.call)
            local input = block.input
            block.input = json.object({})
            begin("tool_use", block, send)
            send(event("content_block_delta", { type = "content_block_delta", index = index,
                                                delta = { type = "input_json_delta", partial_json = encode(input) } }))
        end
    end
    function wire.tail(_, send)
        send(event("message_stop", { type = "message_stop" }))
    end
    function wire.error_event(_, status, message, send)
        send(event("error", app:error_body(req, status, message)))
    end
    function wire.body(run)
        local c = run.choices[1]
        local r = c.result or { reasoning = "", tool_calls = {} }
        local content = array({})
        if thinking and r.reasoning ~= "" then
            content[#content + 1] = { type = "thinking", thinking = r.reasoning, signature = "" }
        end
        if r.content then content[#content + 1] = { type = "text", text = r.content } end
        for _, call in ipairs(r.tool_calls) do content[#content + 1] = tool_use_block(call) end
        if #content == 0 then content[1] = { type = "text", text = "" } end
        return { id = id, type = "message", role = "assistant", model = model, content = content,
                 stop_reason = stop_reason(c), stop_sequence = c.stopped and c.stop or null,
                 usage = { input_tokens = run.usage.prompt_tokens, output_tokens = run.usage.completion_tokens } }
    end
    generation.serve(app, req, res, g, wire, {
        route = "messages", body = body, prompt_tokens = #g.prompt, max_tokens = g.max_tokens, n = 1,
    })
end

local function count_tokens(req, res, app)
    if not app:ready_or_fail(req, res) then return end
    local body = params.decode(req.body)
    local p = build(app, body)
    app:send(res, 200, { input_tokens = #p.ids })
end

function M.register(app)
    app:route("POST", "/v1/messages", messages)
    app:route("POST", "/v1/messages/count_tokens", count_tokens)
end

return M
