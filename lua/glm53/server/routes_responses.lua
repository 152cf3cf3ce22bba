--[[
glm53.server.routes_responses - OpenAI's Responses API of glm53.server (what the openai clients'
`responses.create` and agent frameworks built on it call):

    POST /v1/responses   input in, a response out: a reasoning item (GLM's thinking), a message with output_text,
                         function_call items; stream: true sends the named events (response.created,
                         response.output_item.added, response.output_text.delta, ..., response.completed)

    require("glm53.server.routes_responses").register(app)   -- glm53.server does this

The request becomes the OpenAI-shaped chat messages the template takes: `instructions` a system message first;
`input` a string (one user message) or a list of items: messages (roles user, assistant, system, developer;
content a string or input_text / input_image / output_text parts), function_call items (an assistant message's
tool calls) and function_call_output items (tool messages); reasoning items are dropped (the template keeps
only the last turn's thinking anyway). tools are function tools ({"type": "function", "name", "description",
"parameters"}); tool_choice "auto", "none", "required" or {"type": "function", "name": N} as on the chat route;
reasoning.effort as reasoning_effort; max_output_tokens; text.format "text" or "json_object" (the json policy);
the sampling fields as on the chat route. Nothing is stored: previous_response_id is refused (400), store is
ignored. A response whose output hit max_output_tokens has status "incomplete" (incomplete_details.reason
"max_output_tokens"). Errors come in OpenAI's shape.
]]
local json = require("glm53.chat.json")
local params = require("glm53.server.params")
local prompt = require("glm53.server.prompt")
local generation = require("glm53.server.generation")
local routes_openai = require("glm53.server.routes_openai")

local null, array, ordered = json.null, json.array, json.ordered

local M = {}

local function encode(v) return json.encode(v, { compact = true }) end

-- Text of an item's content: a string, or the text of its input_text / output_text / text parts.
local function content_parts(content, where)
    if type(content) == "string" then return content, true end
    if params.kind_of(content) ~= "array" then params.fail(400, where .. " must be a string or a list of parts", "input") end
    local parts, text_only = array({}), true
    for j, p in ipairs(content) do
        local pw = where .. "[" .. (j - 1) .. "]"
        if params.kind_of(p) ~= "object" then params.fail(400, pw .. " must be an object", "input") end
        if p.type == "input_text" or p.type == "output_text" or p.type == "text" then
            if type(p.text) ~= "string" then params.fail(400, pw .. ".text must be a string", "input") end
            parts[#parts + 1] = ordered({ "type", "text", "text", p.text })
        elseif p.type == "input_image" then
            local url = p.image_url
            if type(url) ~= "string" then params.fail(400, pw .. ".image_url must be a (data) URL", "input") end
            parts[#parts + 1] = ordered({ "type", "image_url", "image_url", ordered({ "url", url }) })
            text_only = false
        else
            params.fail(400, pw .. ": unsupported part type '" .. tostring(p.type) .. "'", "input")
        end
    end
    if not text_only then return parts, false end
    local t = {}
    for _, p in ipairs(parts) do t[#t + 1] = p.text end
    return table.concat(t), true
end

-- instructions and input -> OpenAI-shaped chat messages.
local function to_messages(body)
    local out = array({})
    local instructions = params.string(body, "instructions")
    if instructions then out[#out + 1] = ordered({ "role", "system", "content", instructions }) end
    local input = params.value(body, "input")
    if type(input) == "string" then
        out[#out + 1] = ordered({ "role", "user", "content", input })
        return out
    end
    if params.kind_of(input) ~= "array" or #input == 0 then
        params.fail(400, "'input' must be a string or a non-empty list of items", "input")
    end
    local calls   -- the open assistant message that function_call items add to
    for i, item in ipairs(input) do
        local where = "input[" .. (i - 1) .. "]"
        if params.kind_of(item) ~= "object" then params.fail(400, where .. " must be an object", "input") end
        local kind = item.type or "message"
        if kind == "message" then
            local role = item.role
            if role ~= "user" and role ~= "assistant" and role ~= "system" and role ~= "developer" then
                params.fail(400, where .. ".role must be user, assistant, system or developer", "input")
            end
            local content = content_parts(item.content, where .. ".content")
            out[#out + 1] = ordered({ "role", role == "developer" and "system" or role, "content", content })
            calls = nil
        elseif kind == "function_call" then
            for _, key in ipairs({ "call_id", "name", "arguments" }) do
                if type(item[key]) ~= "string" then params.fail(400, where .. "." .. key .. " must be a string", "input") end
            end
            local args = json.decode(item.arguments, { exact = true })
            if params.kind_of(args) ~= "object" then
                params.fail(400, where .. ".arguments must be a JSON object in a string", "input")
            end
            if not calls then
                calls = array({})
                out[#out + 1] = ordered({ "role", "assistant", "content", "", "tool_calls", calls })
            end
            calls[#calls + 1] = ordered({ "id", item.call_id, "type", "function", "function",
                                          ordered({ "name", item.name, "arguments", args }) })
        elseif kind == "function_call_output" then
            if type(item.call_id) ~= "string" then params.fail(400, where .. ".call_id must be a string", "input") end
            local output = item.output
            if type(output) ~= "string" then output = content_parts(output, where .. ".output") end
            if type(output) ~= "string" then params.fail(400, where .. ".output must be text", "input") end
            out[#out + 1] = ordered({ "role", "tool", "tool_call_id", item.call_id, "content", output })
            calls = nil
        elseif kind ~= "reasoning" then
            params.fail(400, where .. ": unsupported item type '" .. tostring(kind) .. "'", "input")
        end
    end
    return out
end

-- Function tools -> chat tools (nil when there are none).
local function to_chat_tools(body)
    local tools = params.array(body, "tools")
    if not tools or #tools == 0 then return nil end
    local out = array({})
    for i, t in ipairs(tools) do
        if params.kind_of(t) ~= "object" or t.type ~= "function" or type(t.name) ~= "string" then
            params.fail(400, "tools[" .. (i - 1) .. "] must be {\"type\": \"function\", \"name\": ...} (only function " ..
                        "tools are served)", "tools")
        end
        out[#out + 1] = routes_openai.function_tool(t, t.parameters)
    end
    return out
end

local function responses(req, res, app)
    if not app:ready_or_fail(req, res) then return end
    local body = params.decode(req.body)
    routes_openai.check_model(app, body)
    if params.value(body, "previous_response_id") ~= nil then
        params.fail(400, "'previous_response_id' is not supported: this server stores no responses; send the " ..
                    "conversation in 'input'", "previous_response_id")
    end
    local g = params.generation(app, body, { max_tokens_keys = { "max_output_tokens" } })
    g.n = 1
    local messages = to_messages(body)
    local tools = to_chat_tools(body)
    local tool_choice = params.value(body, "tool_choice")
    local call_names = routes_openai.forced_call_names(tool_choice, tools)
    if tool_choice == "none" then tools = nil end
    local reasoning = params.object(body, "reasoning")
    local effort = reasoning and params.string(reasoning, "effort")
    local thinking = true
    local text = params.object(body, "text")
    local format = text and params.object(text, "format")
    local format_type = format and params.value(format, "type") or "text"
    if format_type == "json_object" then
        if not g.new_policy then g.new_policy = app:resolve_policy("json") end
        thinking = false   -- the value is the message, as on the chat route
    elseif format_type ~= "text" then
        params.fail(400, "text.format.type '" .. tostring(format_type) .. "' is not supported (text or json_object)",
                    "text")
    end
    if call_names then app:tool_choice_policy(g, call_names, thinking, "tool_choice") end
    local p = prompt.chat(app, messages, { tools = tools, thinking = thinking,
                                           reasoning_effort = type(effort) == "string" and effort or nil })
    g.prompt, g.media, g.boundary = p.ids, p.media, p.boundary
    g.max_tokens = prompt.check_length(app, #p.ids, g.max_tokens, "input")
    g.parse = { tools = tools, thinking = thinking, tool_calls = tools ~= nil }
    local stream = params.boolean(body, "stream", { default = false })
    local id, created = routes_openai.request_id("resp_"), os.time()
    local model = app.served_model_name

    -- The response object: status "in_progress" (no output yet), "completed" or "incomplete" (max_output_tokens).
    local function response(status, output, usage)
        return ordered({
            "id", id, "object", "response", "created_at", created, "status", status, "error", null,
            "incomplete_details", status == "incomplete" and { reason = "max_output_tokens" } or null,
            "instructions", params.string(body, "instructions") or null, "max_output_tokens", g.max_tokens,
            "model", model, "output", output or array({}), "parallel_tool_calls", true,
            "temperature", params.value(body, "temperature") or 1, "top_p", params.value(body, "top_p") or 1,
            "tool_choice", tool_choice or "auto", "tools", params.value(body, "tools") or array({}),
            "text", { format = { type = format_type } }, "reasoning", { effort = effort or null, summary = null },
            "usage", usage or null,
        })
    end
    local function usage_of(run)
        local c = run.choices[1]
        local reasoning_tokens = 0
        if c.result and c.result.reasoning ~= "" then reasoning_tokens = #(app.tokenizer:encode(c.result.reasoning) or {}) end
        return { input_tokens = run.usage.prompt_tokens, input_tokens_details = { cached_tokens = 0 },
                 output_tokens = run.usage.completion_tokens,
                 output_tokens_details = { reasoning_tokens = reasoning_tokens },
                 total_tokens = run.usage.total_tokens }
    end
    local function finished(run, output)
        return response(run.choices[1].reason == "length" and "incomplete" or "completed", output, usage_of(run))
    end
    -- Output items (the streamed ones and those of a finished run share ids). A reasoning or message item holds
    -- one content part, a reasoning_text or an output_text; text nil: an item just opened, without it.
    local ids = { reasoning = routes_openai.request_id("rs_"), message = routes_openai.request_id("msg_") }
    local function part_of(kind, text_)
        if kind == "reasoning" then return ordered({ "type", "reasoning_text", "text", text_ }) end
        return ordered({ "type", "output_text", "text", text_, "annotations", array({}) })
    end
    local function item_of(kind, text_, status)
        local content = text_ == nil and array({}) or array({ part_of(kind, text_) })
        if kind == "reasoning" then
            return ordered({ "id", ids.reasoning, "type", "reasoning", "summary", array({}), "content", content })
        end
        return ordered({ "id", ids.message, "type", "message", "status", status, "role", "assistant",
                         "content", content })
    end
    local function call_item(call, status)
        return ordered({ "id", "fc_" .. call.id:gsub("^chatcmpl%-tool%-", ""), "type", "function_call", "status", status,
                         "call_id", call.id:gsub("^chatcmpl%-tool%-", "call_"), "name", call["function"].name,
                         "arguments", call["function"].arguments })
    end
    local function output_of(run)
        local r = run.choices[1].result or { reasoning = "", tool_calls = {} }
        local out = array({})
        if thinking and r.reasoning ~= "" then out[#out + 1] = item_of("reasoning", r.reasoning) end
        if r.content and r.content ~= "" then out[#out + 1] = item_of("message", r.content, "completed") end
        for _, call in ipairs(r.tool_calls) do out[#out + 1] = call_item(call, "completed") end
        if #out == 0 then out[1] = item_of("message", "", "completed") end   -- nothing was said: an empty message
        return out
    end

    local wire = { stream = stream }
    local seq = -1
    local function event(value)
        seq = seq + 1
        json.set(value, "sequence_number", seq)
        return "event: " .. value.type .. "\ndata: " .. encode(value) .. "\n\n"
    end
    local TEXT_EVENT = { reasoning = "response.reasoning_text", message = "response.output_text" }
    local items = array({})   -- the items streamed so far, done ones final
    local open                -- the open reasoning or message item: { kind, index, pieces }
    local function close(send)
        if not open then return end
        local kind, index, text_ = open.kind, open.index, table.concat(open.pieces)
        send(event(ordered({ "type", TEXT_EVENT[kind] .. ".done", "item_id", ids[kind], "output_index", index,
                             "content_index", 0, "text", text_ })))
        send(event(ordered({ "type", "response.content_part.done", "item_id", ids[kind], "output_index", index,
                             "content_index", 0, "part", part_of(kind, text_) })))
        items[index + 1] = item_of(kind, text_, "completed")
        send(event(ordered({ "type", "response.output_item.done", "output_index", index, "item", items[index + 1] })))
        open = nil
    end
    -- Opens an item of kind (closing another), with its empty content part (the client's accumulator adds the
    -- deltas to it).
    local function begin(kind, send)
        if open and open.kind == kind then return end
        close(send)
        open = { kind = kind, index = #items, pieces = {} }
        items[#items + 1] = item_of(kind, nil, "in_progress")
        send(event(ordered({ "type", "response.output_item.added", "output_index", open.index, "item", items[#items] })))
        send(event(ordered({ "type", "response.content_part.added", "item_id", ids[kind], "output_index", open.index,
                             "content_index", 0, "part", part_of(kind, "") })))
    end
    local function add(kind, delta, send)
        begin(kind, send)
        open.pieces[#open.pieces + 1] = delta
        local ev = ordered({ "type", TEXT_EVENT[kind] .. ".delta", "item_id", ids[kind], "output_index", open.index,
                             "content_index", 0, "delta", delta })
        if kind == "message" then json.set(ev, "logprobs", array({})) end
        send(event(ev))
    end
    function wire.begin(_, send)
        send(event(ordered({ "type", "response.created", "response", response("in_progress") })))
        send(event(ordered({ "type", "response.in_progress", "response", response("in_progress") })))
    end
    function wire.event(_, ev, send)
        if ev.type == "finish" then return close(send) end
        if ev.reasoning and thinking then add("reasoning", ev.reasoning, send) end
        if ev.content then add("message", ev.content, send) end
        for _, tc in ipairs(ev.tool_calls or {}) do
            close(send)
            local index = #items
            local item = call_item(tc.call, "in_progress")
            local args = item.arguments
            json.set(item, "arguments", "")
            items[index + 1] = item
            send(event(ordered({ "type", "response.output_item.added", "output_index", index, "item", item })))
            send(event(ordered({ "type", "response.function_call_arguments.delta", "item_id", item.id,
                                 "output_index", index, "delta", args })))
            send(event(ordered({ "type", "response.function_call_arguments.done", "item_id", item.id,
                                 "output_index", index, "arguments", args })))
            local done = call_item(tc.call, "completed")
            items[index + 1] = done
            send(event(ordered({ "type", "response.output_item.done", "output_index", index, "item", done })))
        end
    end
    function wire.tail(run, send)
        close(send)
        if #items == 0 then   -- nothing was said: an empty message, as the non-streamed response has
            begin("message", send)
            close(send)
        end
        local final = finished(run, items)
        send(event(ordered({ "type", "response." .. final.status, "response", final })))
    end
    function wire.error_event(_, status, message, send)
        send(event(ordered({ "type", "error", "code", tostring(status), "message", message, "param", null })))
    end
    function wire.body(run) return finished(run, output_of(run)) end
    generation.serve(app, req, res, g, wire, {
        route = "responses", body = body, prompt_tokens = #g.prompt, max_tokens = g.max_tokens, n = 1,
    })
end

function M.register(app)
    app:route("POST", "/v1/responses", responses)
end

return M
