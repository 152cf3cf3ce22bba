-- glm53.chat.template: the GLM-5.3 chat template, rendered natively.
--
--   local chat = require("glm53.chat.template")
--   local prompt = assert(chat.render({ { role = "user", content = "hi" } }, { reasoning_effort = "low" }))
--   -- [gMASK]<sop><|system|>Reasoning Effort: Low<|user|>hi<|assistant|><think>
--   local r = chat.parse(model_output, tools)   -- glm53.chat.parsers.parse
--
-- chat.render(messages, opts) produces, byte for byte, what jinja2 produces
-- from the model's chat_template.jinja under Hugging Face transformers
-- (trim_blocks, lstrip_blocks, loopcontrols, tojson = json.dumps with
-- ensure_ascii=False), with the upstream generation prompt
-- "<|assistant|><think>".  docs/chat.md lists every template behaviour kept
-- here; the references in tests/chat/ pin them.
--
-- Values follow glm53.chat.json's data model: decode request JSON with
-- json.decode(text, {exact = true}) to keep key order and Python number
-- formatting, or pass messages / tools as JSON text and this module decodes
-- them that way.  Where a message field is absent the template sees Undefined;
-- here that is nil.
--
-- The output side (reasoning and tool-call parsing) lives in glm53.chat.parsers;
-- chat.parse and chat.stream are re-exported from there.

-- The renderer is branchy, short-running code: traced, it fills LuaJIT's trace
-- cache and runs slower than interpreted, so this module runs in the interpreter.
if jit then jit.off(true, true) end

local json = require("glm53.chat.json")
local py = require("glm53.chat.pycompat")
local parsers = require("glm53.chat.parsers")

local concat, find, sub = table.concat, string.find, string.sub
local truthy, str, eq = py.truthy, py.str, py.eq
local is_null, is_box = json.is_null, json.is_number_box

local chat = {}

chat.parse = parsers.parse
chat.stream = parsers.stream

------------------------------------------------------------------------------
-- Template-language semantics over JSON-shaped values
------------------------------------------------------------------------------

-- A template failure: jinja2 raises, render returns nil, msg.
local template_error_mt = {}
local function fail(msg) error(setmetatable({ msg = msg }, template_error_mt), 0) end

-- "undefined" (nil), "none", "bool", "number", "string", "list", "dict".
-- Unmarked empty Lua tables count as lists: an empty content-part list is far
-- more likely in a message than an empty mapping.
local function kind(v)
    if v == nil then return "undefined" end
    local t = type(v)
    if t == "string" then return "string" end
    if t == "boolean" then return "bool" end
    if t == "number" or is_box(v) then return "number" end
    if is_null(v) then return "none" end
    if t ~= "table" then fail("unsupported value of Lua type " .. t) end -- functions, cjson.empty_array, ...
    local k = json.kind(v)
    if k == "array" then return "list" end
    if k == "object" then
        if next(v) == nil and json.declared_kind(v) == nil then return "list" end
        return "dict"
    end
    fail("unsupported value")
end

local function typename(v)
    local k = kind(v)
    if k == "undefined" then return "Undefined" end
    if k == "none" then return "NoneType" end
    return k
end

-- x.name in jinja: a mapping's item, Undefined when absent; on any other value
-- Undefined (sandboxed getattr finds no such attribute); on Undefined an error.
local function attr(v, name)
    local k = kind(v)
    if k == "dict" then return v[name] end
    if k == "undefined" then fail("UndefinedError: attribute '" .. name .. "' of an undefined value") end
    return nil
end

-- x.0 in jinja: the first item of a list or the first character of a string;
-- Undefined for other values; an error on Undefined.
local function first_item(v)
    local k = kind(v)
    if k == "list" then return v[1] end
    if k == "string" then
        if v == "" then return nil end
        local _, n = json.utf8_decode(v, 1)
        return sub(v, 1, n or 1)
    end
    if k == "undefined" then fail("UndefinedError: item 0 of an undefined value") end
    return nil
end

-- `for x in v`: lists; Undefined iterates as empty; anything else would
-- iterate differently (dict keys, characters) or raise, and no message shape
-- relies on that, so it is reported as an error.
local function items(v, what)
    local k = kind(v)
    if k == "list" then return v end
    if k == "undefined" then return {} end
    fail(what .. " must be a list, got " .. typename(v))
end

local function tojson(v)
    local ok, s = pcall(json.encode, v)
    if not ok then fail("tojson: " .. tostring(s)) end
    return s
end

------------------------------------------------------------------------------
-- Template macros
------------------------------------------------------------------------------

local IMAGE = "<|begin_of_image|><|image|><|end_of_image|>"
local VIDEO = "<|begin_of_video|><|video|><|end_of_video|>"
local AUDIO = "<|begin_of_audio|><|end_of_audio|>"

local MEDIA = {
    image = IMAGE, image_url = IMAGE,
    video = VIDEO, video_url = VIDEO,
    audio = AUDIO, audio_url = AUDIO, input_audio = AUDIO,
}

-- Text of a content value: strings as they are; lists concatenate text parts
-- and bare strings and write media placeholders; other values via str().
local function visible_text(content)
    local k = kind(content)
    if k == "string" then return content end
    if k == "list" then
        local out = {}
        for i = 1, #content do
            local item = content[i]
            local ik = kind(item)
            if ik == "dict" then
                local ty = item.type
                if ty == "text" then
                    out[#out + 1] = str(item.text)
                elseif type(ty) == "string" and MEDIA[ty] then
                    out[#out + 1] = MEDIA[ty]
                end
            elseif ik == "string" then
                out[#out + 1] = item
            end
        end
        return concat(out)
    end
    if k == "undefined" or k == "none" then return "" end
    return str(content)
end

-- The tool object as the template writes it: its keys in order without
-- defer_loading and strict; keys unescaped, values through tojson.
local function tool_to_json(tool)
    if kind(tool) ~= "dict" then fail("tool definition must be a mapping, got " .. typename(tool)) end
    local out = {}
    local keys = json.keys(tool)
    for i = 1, #keys do
        local k = keys[i]
        if k ~= "defer_loading" and k ~= "strict" then
            out[#out + 1] = '"' .. str(k) .. '": ' .. tojson(tool[k])
        end
    end
    return "{" .. concat(out, ", ") .. "}"
end

local function unwrap_tool(tool)
    if kind(tool) == "dict" and tool["function"] ~= nil then return tool["function"] end
    return tool
end

local function tool_response(text) return "<tool_response>" .. text .. "</tool_response>" end

-- Parts of type tool_reference re-emit the referenced tools' schemas.  The
-- template defines this macro only when tools are given.
local function tool_references(refs, tools)
    if not truthy(tools) then fail("UndefinedError: 'tool_references_to_response' is undefined (no tools)") end
    local out = { "<tool_response><tools>\n" }
    local rs = items(refs, "tool_reference list")
    for i = 1, #rs do
        local tr = rs[i]
        for j = 1, #tools do
            local tool = unwrap_tool(tools[j])
            if eq(attr(tool, "name"), attr(tr, "name")) then
                out[#out + 1] = tool_to_json(tool) .. "\n"
            end
        end
    end
    out[#out + 1] = "</tools></tool_response>"
    return concat(out)
end

-- `v and v is not string/mapping and v.0.type == "tool_reference"` for a
-- value already known to be iterable-or-truthy.
local function is_reference_list(v)
    local k = kind(v)
    if k == "list" and #v > 0 then
        return eq(attr(v[1], "type"), "tool_reference")
    end
    return false
end

-- `m.content and m.content.0.output is defined`
local function is_list_of_outputs(m)
    local c = attr(m, "content")
    if not truthy(c) then return false end
    local first = first_item(c)
    if first == nil and kind(c) ~= "list" and kind(c) ~= "string" then
        fail("UndefinedError: " .. typename(c) .. " object has no element 0")
    end
    return kind(first) == "dict" and first.output ~= nil
end

local function render_output(output, tools)
    -- `output is iterable and not string and not mapping and output and output.0.type == ...`
    local k = kind(output)
    if (k == "list") and is_reference_list(output) then return tool_references(output, tools) end
    return tool_response(visible_text(output))
end

local function render_tool_response(m, tools)
    local c = attr(m, "content")
    local k = kind(c)
    if k == "string" then return tool_response(c) end
    if truthy(c) and k ~= "dict" then
        local first = first_item(c)
        if first == nil and k ~= "list" then
            fail("UndefinedError: " .. typename(c) .. " object has no element 0")
        end
        if eq(attr(first, "type"), "tool_reference") then return tool_references(c, tools) end
    end
    if is_list_of_outputs(m) then
        local out = {}
        for i = 1, #c do
            out[#out + 1] = render_output(attr(c[i], "output"), tools)
        end
        return concat(out)
    end
    return tool_response(visible_text(c))
end

-- The id the template matches results by: tool_call_id, else id, as text.
local function id_of(obj)
    local v = attr(obj, "tool_call_id")
    if truthy(v) then return str(v) end
    v = attr(obj, "id")
    if truthy(v) then return str(v) end
    return ""
end

------------------------------------------------------------------------------
-- Messages
------------------------------------------------------------------------------

local function role_of(m) return attr(m, "role") end

-- Tool-call arguments: a mapping, or JSON text holding one (decoded here as an
-- OpenAI-compatible server does before applying the template).
local function call_arguments(tc)
    local args = attr(tc, "arguments")
    if type(args) == "string" then
        local v, err = json.decode(args, { exact = true })
        if v == nil then fail("tool call arguments are not valid JSON: " .. err) end
        args = v
    end
    if kind(args) ~= "dict" then
        fail("tool call arguments must be a mapping, got " .. typename(args))
    end
    return args
end

local function render_assistant(out, m, index, last_user, clear_thinking)
    out[#out + 1] = "<|assistant|>"
    local content = visible_text(attr(m, "content"))
    local reasoning
    local rc = attr(m, "reasoning_content")
    if type(rc) == "string" then
        reasoning = rc
    elseif find(content, "</think>", 1, true) then
        local before = sub(content, 1, find(content, "</think>", 1, true) - 1)
        -- text after the last <think> of that prefix
        local last = 0
        local p = find(before, "<think>", 1, true)
        while p do
            last = p
            p = find(before, "<think>", p + 1, true)
        end
        reasoning = last > 0 and sub(before, last + #"<think>") or before
        -- text after the last </think>
        local tail_start
        local q = find(content, "</think>", 1, true)
        while q do
            tail_start = q + #"</think>"
            q = find(content, "</think>", q + 1, true)
        end
        content = sub(content, tail_start)
    end
    if (not truthy(clear_thinking) or index > last_user) and reasoning ~= nil then
        out[#out + 1] = "<think>" .. reasoning .. "</think>"
    else
        out[#out + 1] = "<think></think>"
    end
    local stripped = py.strip(content)
    if stripped ~= "" then out[#out + 1] = stripped end

    local calls = attr(m, "tool_calls")
    if truthy(calls) then
        calls = items(calls, "tool_calls")
        for i = 1, #calls do
            local tc = calls[i]
            local fn = attr(tc, "function")
            if truthy(fn) then tc = fn end
            out[#out + 1] = "<tool_call>" .. str(attr(tc, "name"))
            local args = call_arguments(tc)
            local keys = json.keys(args)
            for j = 1, #keys do
                local k, v = keys[j], args[keys[j]]
                out[#out + 1] = "<arg_key>" .. str(k) .. "</arg_key><arg_value>"
                    .. (type(v) == "string" and v or tojson(v)) .. "</arg_value>"
            end
            out[#out + 1] = "</tool_call>"
        end
    end
end

-- Results in a block, each with the id it is matched by.  Messages whose
-- content is a list of {output=...} entries contribute one result per entry.
local function block_results(messages, first, last)
    local results = {}
    for k = first, last do
        local m = messages[k]
        if is_list_of_outputs(m) then
            local c = attr(m, "content")
            for i = 1, #c do
                results[#results + 1] = { id = id_of(c[i]), entry = c[i] }
            end
        else
            results[#results + 1] = { id = id_of(m), message = m }
        end
    end
    return results
end

-- Whether the template re-sorts a block into the assistant's call order: every
-- result id non-empty, unique in the block and among the calls' ids; every call
-- id non-empty and unique.
local function can_sort(results, calls)
    if not truthy(calls) then return false end
    local count = {}
    for i = 1, #results do
        local id = results[i].id
        count[id] = (count[id] or 0) + 1
    end
    local call_ids = {}
    for i = 1, #calls do
        local id = id_of(calls[i])
        if id == "" or call_ids[id] then return false end
        call_ids[id] = true
    end
    for i = 1, #results do
        local id = results[i].id
        if id == "" or count[id] > 1 or not call_ids[id] then return false end
    end
    return true
end

local function render_result(r, tools)
    if r.entry then return render_output(attr(r.entry, "output"), tools) end
    return render_tool_response(r.message, tools)
end

local function render_tool_block(out, messages, first, tools)
    out[#out + 1] = "<|observation|>"
    local last = first
    while last + 1 <= #messages and role_of(messages[last + 1]) == "tool" do last = last + 1 end
    local calls
    if first > 1 then
        local prev = messages[first - 1]
        if role_of(prev) == "assistant" and truthy(attr(prev, "tool_calls")) then
            calls = attr(prev, "tool_calls")
        end
    end
    local results = block_results(messages, first, last)
    if can_sort(results, calls) then
        for i = 1, #calls do
            local id = id_of(calls[i])
            for j = 1, #results do
                if results[j].id == id then out[#out + 1] = render_result(results[j], tools) end
            end
        end
    else
        for k = first, last do
            out[#out + 1] = render_tool_response(messages[k], tools)
        end
    end
end

local function render_tools(out, tools)
    out[#out + 1] = "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        .. "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    for i = 1, #tools do
        local tool = unwrap_tool(tools[i])
        if kind(tools[i]) ~= "dict" then fail("tools[" .. i .. "] must be a mapping, got " .. typename(tools[i])) end
        if not truthy(attr(tool, "defer_loading")) then
            out[#out + 1] = tool_to_json(tool) .. "\n"
        end
    end
    out[#out + 1] = "</tools>\n\nFor each function call, output the function name and arguments within the "
        .. "following XML format:\n<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>"
        .. "{arg-value-1}</arg_value><arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>"
        .. "...</tool_call>"
end

local function render(messages, tools, opts)
    local out = { "[gMASK]<sop>" }
    local effort = opts.reasoning_effort
    local label = (effort == "low" and "Low") or (effort == "high" and "High") or "Max"
    out[#out + 1] = "<|system|>Reasoning Effort: " .. label

    if truthy(tools) then
        tools = items(tools, "tools")
        render_tools(out, tools)
    end

    messages = items(messages, "messages")
    local last_user = 0 -- 1-based index of the last user message, 0 when none
    for i = 1, #messages do
        if role_of(messages[i]) == "user" then last_user = i end
    end

    for i = 1, #messages do
        local m = messages[i]
        local role = role_of(m)
        if role == "user" then
            out[#out + 1] = "<|user|>" .. visible_text(attr(m, "content"))
        elseif role == "assistant" then
            render_assistant(out, m, i, last_user, opts.clear_thinking)
        elseif role == "tool" then
            if i == 1 or role_of(messages[i - 1]) ~= "tool" then
                render_tool_block(out, messages, i, tools)
            end
        elseif role == "system" then
            out[#out + 1] = "<|system|>" .. visible_text(attr(m, "content"))
        end
    end

    local agp = opts.add_generation_prompt
    if agp == nil or truthy(agp) then out[#out + 1] = "<|assistant|><think>" end
    return concat(out)
end

--- Render a conversation to the prompt string.
--- messages: list of OpenAI-shaped messages, or its JSON text.
--- opts: tools (list, or JSON text), reasoning_effort ("low" | "high"; anything
---   else renders Max), clear_thinking (default false), add_generation_prompt
---   (default true).
--- Returns the prompt, or nil and a message where the template would raise.
function chat.render(messages, opts)
    opts = opts or {}
    if type(opts) ~= "table" then error("chat.render: opts must be a table", 2) end
    if type(messages) == "string" then
        local v, err = json.decode(messages, { exact = true })
        if v == nil then return nil, "messages: " .. err end
        messages = v
    elseif type(messages) ~= "table" then
        error("chat.render: messages must be a list or JSON text, got " .. type(messages), 2)
    end
    local tools = opts.tools
    if type(tools) == "string" then
        local v, err = json.decode(tools, { exact = true })
        if v == nil then return nil, "tools: " .. err end
        tools = v
    end
    local ok, res = pcall(render, messages, tools, opts)
    if ok then return res end
    if getmetatable(res) == template_error_mt then return nil, res.msg end
    error(res, 0)
end

return chat
