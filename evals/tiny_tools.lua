-- evals/tiny_tools.lua: the tiny model's function calling (evals/data/tiny/tools.jsonl): 2 to 4 tools in the
-- chat template's tool block, then a request that needs one of them (the gold is the call), a second turn that
-- answers from the tool's result, or a question that needs no tool (the gold is the reply).
--
-- The reply after the think block is read by the project's tool-call parser (glm53.chat.parsers: vLLM's glm47
-- rules, with the item's tools for the argument types: a value whose parameter is a "string" is kept as
-- written, any other is read as JSON, then as a Python literal, else kept as a string). Two modes:
--
--   call        (every item) `tool_call` items: the first call, as {"name", "arguments"} JSON with sorted keys,
--               must equal the gold call (same name, same arguments as JSON values: "26" for an integer
--               parameter is 26; order of the arguments does not matter). `text` items: the reply, stripped,
--               must equal the gold reply exactly; a reply that calls a tool is wrong.
--   json-valid  (`tool_call` items only) the reply holds a complete <tool_call>...</tool_call> whose first call
--               is valid against the item's tools: the name is one of them, every required argument is there,
--               no argument is unknown, and each value has its parameter's JSON type (and is one of its enum, if
--               any). The answer is the call's JSON, or nil; the stage says why a call is not valid.
--
-- Items are grouped by answer_type (tool_call, text). The tools list is rendered by the chat template
-- (chat_opts), so key order matters: rows are read with glm53.chat.json (evals/tiny.lua).

local common = require("evals.common")
local json = require("glm53.chat.json")
local parsers = require("glm53.chat.parsers")
local tiny = require("evals.tiny")

local format = string.format

local M = tiny.task({ family = "tools", modes = { "call", "json-valid" }, max_tokens = 128 })

--- Items { id, messages, tools, answer_type ("tool_call" | "text"), answer ({name, arguments} or the reply),
-- group = answer_type }.
function M.load(path, opts)
    return tiny.load(path, opts, "tools", function(row, item)
        if json.kind(row.tools) ~= "array" or #row.tools == 0 then return nil, "field \"tools\": a non-empty list expected" end
        local kind = row.answer_type
        if kind == "tool_call" then
            local a = row.answer
            if json.kind(a) ~= "object" or type(a.name) ~= "string" or json.kind(a.arguments) ~= "object" then
                return nil, "field \"answer\": {\"name\": string, \"arguments\": object} expected for a tool_call item"
            end
        elseif kind == "text" then
            if type(row.answer) ~= "string" then return nil, "field \"answer\": the reply (string) expected" end
        else
            return nil, "field \"answer_type\": \"tool_call\" or \"text\" expected"
        end
        item.tools, item.answer_type, item.group = row.tools, kind, kind
        return item
    end)
end

--- The chat template's options for an item: its tools.
function M.chat_opts(item)
    return { tools = item.tools }
end

--- Whether a mode scores an item: json-valid only scores the items whose gold is a call.
function M.scored(item, mode)
    return mode ~= "json-valid" or item.answer_type == "tool_call"
end

-- A call as JSON text: {"name": ..., "arguments": {...}} with the arguments' keys sorted.
local function call_json(name, arguments)
    return json.encode(json.ordered({ "name", name, "arguments", tiny.canonical(arguments) }))
end

--- The gold text `call` compares with: the call's JSON (see call_json) or the reply.
function M.gold(item)
    if item.answer_type == "tool_call" then return call_json(item.answer.name, item.answer.arguments) end
    return item.answer
end

-- The function schema of the tool named `name` in a tools list (OpenAI wrappers or bare functions), or nil.
local function find_tool(tools, name)
    for _, tool in ipairs(tools or {}) do
        local fn = json.kind(tool) == "object" and (tool["function"] or tool) or nil
        if json.kind(fn) == "object" and fn.name == name then return fn end
    end
    return nil
end

local function is_integer(v)
    if type(v) == "number" then return v == math.floor(v) and v > -math.huge and v < math.huge end
    return json.is_number_box(v) and tostring(v):find("^%-?%d+$") ~= nil   -- an integer beyond 2^53
end

-- Whether a JSON value has a JSON-schema type name (Python's json types: 1.0 is a number, not an integer).
local TYPE_CHECK = {
    string = function(v) return type(v) == "string" end,
    integer = is_integer,
    number = function(v) return type(v) == "number" or json.is_number_box(v) end,
    boolean = function(v) return type(v) == "boolean" end,
    object = function(v) return json.kind(v) == "object" end,
    array = function(v) return json.kind(v) == "array" end,
    null = function(v) return json.is_null(v) end,
}

-- nil when value fits the parameter schema `schema`, else why not.
local function check_value(key, value, schema)
    if json.kind(schema) ~= "object" then return nil end
    local types = schema.type
    if type(types) == "string" then types = { types } end
    if json.kind(types) == "array" and #types > 0 then
        local fits = false
        for _, t in ipairs(types) do
            local check = TYPE_CHECK[t]
            if check and check(value) then fits = true end
        end
        if not fits then return format("argument %s: %s expected", key, table.concat(types, " or ")) end
    end
    if json.kind(schema.enum) == "array" then
        local want = json.encode(tiny.canonical(value))
        for _, allowed in ipairs(schema.enum) do
            if json.encode(tiny.canonical(allowed)) == want then return nil end
        end
        return format("argument %s: not one of the schema's enum", key)
    end
    return nil
end

--- Whether a parsed call (name, arguments as a JSON value) is valid against tools: true, or false and why.
function M.valid_call(name, arguments, tools)
    local fn = find_tool(tools, name)
    if not fn then return false, format("unknown tool %q", tostring(name)) end
    if json.kind(arguments) ~= "object" then return false, "the arguments are not an object" end
    local params = json.kind(fn.parameters) == "object" and fn.parameters or json.object({})
    local props = json.kind(params.properties) == "object" and params.properties or json.object({})
    for _, key in ipairs(json.keys(arguments)) do
        if props[key] == nil then return false, format("unknown argument %s", tostring(key)) end
        local why = check_value(key, arguments[key], props[key])
        if why then return false, why end
    end
    for _, key in ipairs(json.kind(params.required) == "array" and params.required or {}) do
        if arguments[key] == nil then return false, format("argument %s is missing", tostring(key)) end
    end
    return true
end

-- The calls of a reply (the text after the think block), read by the project's parser with the item's tools.
local function parse_calls(output, tools)
    -- parsers.parse reads a whole output: text before </think> is reasoning. The reply is content only.
    local r = parsers.parse("</think>" .. output, tools, { tool_calls = true, id = function() return "call" end })
    return r.tool_calls, r.content
end

--- call: the first call's JSON (see gold) or, with no call, the stripped reply (nil for a tool_call item).
--- json-valid: the first call's JSON when it is valid, else nil; second, the stage: "valid", "no call" or why
--- the call is not valid.
function M.extract(output, mode, item)
    common.argcheck(type(output) == "string", 1, "extract", "output string expected")
    common.argcheck(type(item) == "table" and item.answer_type ~= nil, 3, "extract", "the item is needed")
    mode = tiny.check_mode(M, mode, "extract")
    local calls, content = parse_calls(output, item.tools)
    local call = calls[1]
    local name, arguments
    if call then
        name = call["function"].name
        arguments = json.decode(call["function"].arguments, { exact = true })
    end
    if mode == "json-valid" then
        if not call then return nil, "no call" end
        local ok, why = M.valid_call(name, arguments, item.tools)
        if not ok then return nil, why end
        return call_json(name, arguments), "valid"
    end
    if call then return call_json(name, arguments) end
    if item.answer_type == "tool_call" then return nil end
    return common.strip(content or "")
end

--- call: the same text (calls are compared as their sorted-key JSON); json-valid: a valid call was written.
M.match = common.matcher(function(answer, gold, mode)
    if mode == "json-valid" then return answer ~= nil end
    return answer == gold
end)

return M
