-- fuzz_chat.lua: the Lua half of the chat template fuzz target (tests/fuzz/fuzz_chat.c loads it once and calls
-- the function it returns with each input). It builds a conversation from the bytes, renders it with
-- glm53.chat.template and raises an error starting "FINDING" when a property breaks:
--
--   * render returns a string, or nil and a string message; when it raises, the error value is a string;
--   * rendering is deterministic: the same tables twice give the same result, byte for byte (which also
--     catches a render that changes its arguments);
--   * what a server would pass (messages and tools as JSON text, or the tables json.decode makes of it) never
--     makes render raise: a malformed conversation from a user is a runtime failure, nil and a message (the
--     argument errors that may raise are wrong Lua types: a top-level true or 1 is skipped);
--   * JSON text and its decoded tables render the same, and so do JSON-faithful Lua values and their
--     json.encode text; json.encode(json.decode(text)) == text for that text.
--
-- Input layout: byte 1 picks the mode.
--   mode 0 (byte 1 % 4 == 0): the rest is "<messages JSON>\0<tools JSON>\0<option bytes>", rendered as text
--     (tests/chat/conversations.json in this form are the seeds, see gen_seeds.py);
--   modes 1-3: the rest drives a generator that builds messages, tools and options as Lua values: every role,
--     content as strings / part lists / other values, reasoning_content, tool calls with arguments as mappings
--     or JSON text, tool results with ids and output lists, tool references, tools with nested JSON schemas,
--     thinking flags, template tags and Unicode spaces inside strings, raw and invalid bytes, huge and empty
--     strings, deep nesting, and (flagged as not JSON-faithful) plain Lua tables, cycles, functions, NaN.
-- The C side bounds instructions and memory (a runaway is a finding) and feeds line coverage back to libFuzzer.

local json = require("glm53.chat.json")
local chat = require("glm53.chat.template")

local byte, char, sub, rep = string.byte, string.char, string.sub, string.rep
local concat = table.concat

local function finding(fmt, ...)
    error("FINDING: " .. string.format(fmt, ...), 0)
end

------------------------------------------------------------------------------
-- The byte reader: past the end every read is 0, which every choice below maps to its simplest option.
------------------------------------------------------------------------------

local R = {}
R.__index = R

local function reader(s, i) return setmetatable({ s = s, i = i or 1 }, R) end

function R:u8()
    local b = byte(self.s, self.i)
    if not b then return 0 end
    self.i = self.i + 1
    return b
end

function R:below(n) return self:u8() % n end

function R:raw(n)
    local s = sub(self.s, self.i, self.i + n - 1)
    self.i = self.i + n
    return s
end

------------------------------------------------------------------------------
-- The generator
------------------------------------------------------------------------------

local FRAGMENTS = {
    "", "hi", " ", "\n", "\t", "  x  ", "<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>",
    "</arg_key>", "<arg_value>", "</arg_value>", "<|user|>", "<|assistant|>", "<|system|>", "<|observation|>",
    "<tool_response>", "[gMASK]", "\227\128\128" --[[U+3000]], "\194\160" --[[U+00A0]],
    "\226\128\168" --[[U+2028]], "\194\133" --[[U+0085]], "\239\187\191" --[[BOM]], "caf\195\169",
    "\228\189\160\229\165\189", "\240\159\152\128", "e\204\129", "\0", "{", "}", "[", "]", "\"", "\\", "'",
    "\\u00e9", "\\ud800", "tool_reference", "function", "call_1", "call_2", "1", "-0", "1.0", "1e400", "null",
    "true", "get_weather", "city", "text", "image", "image_url", "video", "audio", "input_audio", "output",
    "type", "name", "arguments", "parameters", "properties", "description", "defer_loading", "strict",
    "{\"city\": \"Paris\"}", "[1, 2]", "{}", "{\"a\": {\"b\": [null, true, 1.5]}}",
}
-- bytes that are not UTF-8 (JSON text cannot hold them; plain Lua strings can)
local INVALID = { "\255", "\192\175", "\237\160\128", "\244\144\128\128", "\226\130", "\128" }

local ROLES = { "user", "assistant", "tool", "system", "developer", "function", "USER", "" }
local PART_TYPES = { "text", "image", "image_url", "video", "video_url", "audio", "audio_url", "input_audio",
    "tool_reference", "file", "" }
local KEYS = { "type", "text", "name", "id", "tool_call_id", "content", "output", "role", "function",
    "arguments", "parameters", "description", "properties", "required", "enum", "items", "defer_loading",
    "strict", "image_url", "url", "a", "b", "" }

local G = {}
G.__index = G

local function generator(r)
    -- exotic: something JSON cannot say (plain Lua tables, cycles, functions, NaN, ...); then the JSON
    -- comparison is skipped
    -- budget: values left to make; room: bytes left for huge strings
    return setmetatable({ r = r, exotic = false, budget = 4000, room = 2 ^ 16 }, G)
end

-- Appends key k and value v to an ordered list (json.ordered's input), nothing when v is nil (the key absent).
local function put(list, k, v)
    if v == nil then return end
    list[#list + 1] = k
    list[#list + 1] = v
end

function G:str()
    local r = self.r
    local b = r:u8()
    local mode = b % 16
    if mode <= 6 then return FRAGMENTS[1 + r:below(#FRAGMENTS)] end
    if mode == 7 then return r:raw(r:below(40)) end   -- bytes of the input: anything at all
    if mode == 8 then
        local parts = {}
        for i = 1, 2 + r:below(4) do parts[i] = self:str() end
        return concat(parts)
    end
    if mode == 9 then   -- huge: up to 2^14 repetitions, 64 KiB in all
        local f = FRAGMENTS[1 + r:below(#FRAGMENTS)]
        local n = math.min(2 ^ r:below(15), math.floor(self.room / math.max(#f, 1)))
        self.room = self.room - n * #f
        return rep(f, n)
    end
    if mode == 10 then return INVALID[1 + r:below(#INVALID)] end
    if mode == 11 then return char(r:u8(), r:u8()) end
    if mode == 12 then return rep(" ", r:below(64)) .. self:str() .. rep("\n", r:below(8)) end
    return KEYS[1 + r:below(#KEYS)]
end

function G:number()
    local r = self.r
    local k = r:below(12)
    if k == 0 then return 0 end
    if k == 1 then return r:u8() - 128 end
    if k == 2 then return json.float(r:u8() - 64) end      -- an integral float: written 1.0
    if k == 3 then return (r:u8() - 128) / 8 end
    if k == 4 then return 2 ^ 53 + r:u8() end
    if k == 5 then return -0.0 end
    if k == 6 then return 1e300 * (r:u8() + 1) end
    if k == 7 then return json.number(2 ^ 63, "9223372036854775808") end
    if k == 8 then return 1 / (r:u8() + 3) end
    if k == 9 then   -- NaN and the infinities: json.encode writes them, json.decode refuses them
        self.exotic = true
        local w = r:below(3)
        return w == 0 and 0 / 0 or w == 1 and math.huge or -math.huge
    end
    if k == 10 then return 2 ^ 63 end
    return r:u8() * 1000003
end

-- An object with keys in order (json.ordered), from n key/value pairs.
function G:object(depth, n, keyf, valf)
    local list = {}
    for _ = 1, n do
        list[#list + 1] = keyf and keyf() or (self.r:below(4) == 0 and self:str() or KEYS[1 + self.r:below(#KEYS)])
        list[#list + 1] = valf and valf() or self:value(depth + 1)
    end
    return json.ordered(list)
end

function G:value(depth)
    local r = self.r
    self.budget = self.budget - 1
    local k = r:below(20)
    if depth > 6 or self.budget <= 0 then k = k % 6 end
    if k == 0 then return json.null end
    if k == 1 then return r:below(2) == 1 end
    if k == 2 or k == 3 then return self:number() end
    if k == 4 or k == 5 then return self:str() end
    if k <= 8 then
        local a = json.array({})
        for i = 1, r:below(5) do a[i] = self:value(depth + 1) end
        return a
    end
    if k <= 12 then return self:object(depth, r:below(5)) end
    if k == 13 then   -- a plain Lua table: kind inferred, keys sorted
        self.exotic = true
        local t = {}
        for i = 1, r:below(4) do
            if r:below(3) == 0 then t[i] = self:value(depth + 1) else t[self:str()] = self:value(depth + 1) end
        end
        return t
    end
    if k == 14 then   -- deep nesting, built without recursion
        local v = self:value(7)
        for _ = 1, r:u8() * 8 do v = r:below(2) == 0 and json.array({ v }) or json.ordered({ "k", v }) end
        return v
    end
    if k == 15 then   -- values JSON has no word for
        self.exotic = true
        local w = r:below(5)
        if w == 0 then local t = json.array({}); t[1] = t; return t end   -- a cycle
        if w == 1 then return function() end end
        if w == 2 then
            local ok, cjson = pcall(require, "cjson")
            local v = ok and (r:below(2) == 0 and cjson.null or cjson.empty_array) or nil   -- empty_array: 2.1.0.9+
            if v == nil then return json.null end
            return v
        end
        if w == 3 then local t = json.ordered({}); json.set(t, 1, "numeric key"); return t end
        -- a mapping whose absent keys raise (the renderer may pass the caller's error on: it is a string here)
        return setmetatable({ role = "user", type = "text" }, { __index = function() error("metamethod", 0) end })
    end
    if k == 16 then return json.array({}) end
    if k == 17 then return json.object({}, {}) end
    if k == 18 then return r:below(2) == 0 and "" or rep("x", r:u8() * 97) end
    return self:str()
end

-- Tool names: mostly from a few, so that calls and references meet the tools they name.
local NAMES = { "get_weather", "search", "a", "" }

function G:name()
    local k = self.r:below(8)
    if k < 5 then return NAMES[1 + k % #NAMES] end
    if k == 5 then return self:number() end   -- the template compares names with Python ==
    if k == 6 then return self:value(4) end
    return self:str()
end

-- A JSON schema, as tools carry them.
function G:schema(depth)
    local r = self.r
    local types = { "object", "string", "integer", "number", "boolean", "array", "null" }
    local ty = types[1 + r:below(#types)]
    local list = { "type", ty }
    if r:below(2) == 0 then put(list, "description", self:str()) end
    if ty == "object" and depth < 5 then
        local props, required = {}, json.array({})
        for _ = 1, r:below(4) do
            local name = r:below(3) == 0 and self:str() or KEYS[1 + r:below(#KEYS)]
            props[#props + 1] = name
            props[#props + 1] = self:schema(depth + 1)
            if r:below(2) == 0 then required[#required + 1] = name end
        end
        put(list, "properties", json.ordered(props))
        put(list, "required", required)
    elseif ty == "array" and depth < 5 then
        put(list, "items", self:schema(depth + 1))
    elseif ty == "string" and r:below(3) == 0 then
        put(list, "enum", json.array({ self:str(), self:str() }))
    end
    if r:below(8) == 0 then put(list, self:str(), self:value(depth + 1)) end
    return json.ordered(list)
end

function G:tool()
    local r = self.r
    local k = r:below(10)
    if k == 9 then return self:value(3) end   -- not a mapping, or anything
    local fn = { "name", self:name() }
    if r:below(2) == 0 then put(fn, "description", self:str()) end
    if r:below(5) ~= 0 then put(fn, "parameters", self:schema(0)) end
    if r:below(4) == 0 then put(fn, "defer_loading", self:value(5)) end
    if r:below(6) == 0 then put(fn, "strict", r:below(2) == 0) end
    if r:below(8) == 0 then put(fn, self:str(), self:value(3)) end
    local f = json.ordered(fn)
    if k <= 5 then return json.ordered({ "type", "function", "function", f }) end
    if k == 6 then return json.ordered({ "type", "function", "function", f, "defer_loading", self:value(5) }) end
    return f   -- bare
end

function G:tools()
    local r = self.r
    local k = r:below(8)
    if k == 0 then return nil end
    if k == 1 then return json.array({}) end
    if k == 2 then return self:value(2) end   -- not a list
    local t = json.array({})
    for i = 1, 1 + r:below(4) do t[i] = self:tool() end
    if k == 3 then return json.encode(t) end   -- as JSON text (exotic values raise here: caught below)
    return t
end

function G:part()
    local r = self.r
    local k = r:below(10)
    if k == 0 then return self:str() end
    if k == 1 then return self:value(3) end
    local ty = PART_TYPES[1 + r:below(#PART_TYPES)]
    local list = { "type", ty }
    if ty == "text" or r:below(4) == 0 then put(list, "text", r:below(4) == 0 and self:value(3) or self:str()) end
    if ty == "image_url" then put(list, "image_url", json.ordered({ "url", self:str() })) end
    if ty == "tool_reference" or r:below(6) == 0 then put(list, "name", self:name()) end
    return json.ordered(list)
end

function G:content(role)
    local r = self.r
    local k = r:below(12)
    if k <= 4 then return self:str() end
    if k == 5 then return nil end
    if k == 6 then return json.null end
    if k <= 9 then
        local parts = json.array({})
        for i = 1, r:below(5) do parts[i] = self:part() end
        return parts
    end
    if k == 10 and role == "tool" then   -- a list of results, each with its own id
        local out = json.array({})
        for i = 1, 1 + r:below(3) do
            local e = {}
            put(e, "output", r:below(3) == 0 and self:content("user") or self:str())
            if r:below(4) ~= 0 then put(e, "tool_call_id", self:id()) end
            if r:below(5) == 0 then put(e, "id", self:id()) end
            out[i] = json.ordered(e)
        end
        return out
    end
    return self:value(2)
end

local IDS = { "call_1", "call_2", "call_3", "", "1" }

function G:id()
    local r = self.r
    local k = r:below(8)
    if k <= 4 then return IDS[1 + k] end
    if k == 5 then return r:below(3) end   -- a number: matched as text
    if k == 6 then return self:str() end
    return self:value(4)
end

function G:arguments()
    local r = self.r
    local k = r:below(8)
    if k <= 3 then return self:object(2, r:below(4), function() return self:str() end) end
    if k == 4 then   -- JSON text, as the OpenAI API sends it
        local ok, s = pcall(json.encode, self:object(2, r:below(4)))
        return ok and s or "{}"
    end
    if k == 5 then return self:str() end   -- text, maybe not JSON
    return self:value(2)
end

function G:tool_call()
    local r = self.r
    local k = r:below(8)
    local fn = json.ordered({ "name", self:name(), "arguments", self:arguments() })
    if k <= 4 then
        local list = { "type", "function", "function", fn }
        if r:below(4) ~= 0 then put(list, "id", self:id()) end
        return json.ordered(list)
    end
    if k == 5 then return fn end   -- bare
    if k == 6 then return json.ordered({ "id", self:id(), "function", self:value(3) }) end
    return self:value(3)
end

function G:message()
    local r = self.r
    local k = r:below(16)
    if k == 15 then return self:value(2) end   -- not a mapping
    local role = k < 5 and "user" or k < 9 and "assistant" or k < 12 and "tool" or k < 14 and "system"
        or ROLES[1 + r:below(#ROLES)]
    local list = { "role", role }
    if r:below(8) == 0 then list[2] = self:value(4) end
    if r:below(10) ~= 0 then put(list, "content", self:content(role)) end
    if role == "assistant" then
        if r:below(3) == 0 then put(list, "reasoning_content", r:below(4) == 0 and self:value(3) or self:str()) end
        if r:below(2) == 0 then
            local calls = json.array({})
            for i = 1, r:below(4) do calls[i] = self:tool_call() end
            put(list, "tool_calls", r:below(10) == 0 and self:value(2) or calls)
        end
    elseif role == "tool" or r:below(8) == 0 then
        if r:below(5) ~= 0 then put(list, "tool_call_id", self:id()) end
        if r:below(4) == 0 then put(list, "id", self:id()) end
    end
    if r:below(10) == 0 then put(list, self:str(), self:value(3)) end
    return json.ordered(list)
end

local EFFORTS = { "low", "high", "max", "medium", "LOW", "", "High" }

-- Options besides tools; their values are never JSON-transformed, so both renderings see the same ones.
function G:options()
    local r = self.r
    local opts = {}
    local flags = r:u8()
    if flags % 2 == 1 then opts.reasoning_effort = EFFORTS[1 + r:below(#EFFORTS)] end
    if flags % 4 >= 2 then
        local v = { true, false, json.null, 0, 1, "", "no", json.array({}) }
        opts.clear_thinking = v[1 + r:below(#v)]
    end
    if flags % 8 >= 4 then
        local v = { false, true, json.null, 0, "", "yes" }
        opts.add_generation_prompt = v[1 + r:below(#v)]
    end
    if flags % 16 >= 8 then opts.thinking = r:below(2) == 0 end
    if flags % 32 >= 16 then opts.enable_thinking = r:below(2) == 0 end
    if flags % 64 >= 32 then opts.reasoning_effort = self:value(5) end
    return opts
end

function G:conversation()
    local msgs = json.array({})
    local n = self.r:below(12)
    for i = 1, n do msgs[i] = self:message() end
    local opts = self:options()
    local ok, tools = pcall(self.tools, self)
    if ok then opts.tools = tools else self.exotic = true end
    return msgs, opts
end

------------------------------------------------------------------------------
-- Rendering and the properties
------------------------------------------------------------------------------

-- "ok", prompt | "err", message | "raise", message
local function render(messages, opts)
    local ok, a, b = pcall(chat.render, messages, opts)
    if not ok then
        if type(a) ~= "string" then finding("render raised a %s, not a string: %s", type(a), tostring(a)) end
        return "raise", a
    end
    if type(a) == "string" and b == nil then return "ok", a end
    if a == nil and type(b) == "string" then return "err", b end
    finding("render returned %s, %s (want a string, or nil and a string)", type(a), type(b))
end

local function show(s) return string.format("%q", #s > 300 and sub(s, 1, 300) .. "..." or s) end

-- Renders twice and checks that both agree; returns the outcome.
local function render_twice(messages, opts, what)
    local k1, v1 = render(messages, opts)
    local k2, v2 = render(messages, opts)
    if k1 ~= k2 or (k1 ~= "raise" and v1 ~= v2) then
        finding("%s: rendering is not deterministic: %s %s, then %s %s", what, k1, show(v1), k2, show(v2))
    end
    return k1, v1
end

local function copy(t)
    local c = {}
    for k, v in pairs(t) do c[k] = v end
    return c
end

-- What a server passes (JSON text, or the tables json.decode made of it) must not make render raise.
local function no_raise(k, v, what)
    if k == "raise" then finding("%s: render raised (want nil, message): %s", what, v) end
end

local function same(k1, v1, k2, v2, what, context)
    if k1 ~= k2 or (k1 == "ok" and v1 ~= v2) then
        finding("%s render differently:\n  %s %s\n  %s %s\n  %s", what, k1, show(v1), k2, show(v2), context)
    end
end

-- JSON text of v, or nil when v has no faithful JSON form (encode raises, or decode refuses what it wrote:
-- NaN, invalid UTF-8). Also checks that the codec's round trip is exact.
local function json_text(v)
    local ok, text = pcall(json.encode, v)
    if not ok then return nil end
    local back = json.decode(text, { exact = true })
    if back == nil then return nil end
    local again = json.encode(back)
    if again ~= text then finding("json.encode(json.decode(t)) ~= t:\n  %s\n  %s", show(text), show(again)) end
    return text
end

-- Generator mode: the Lua values twice; when they are JSON-faithful, their JSON text once more, which must
-- render the same.
local function run_structural(r)
    local g = generator(r)
    local msgs, opts = g:conversation()
    local k, v = render_twice(msgs, opts, "Lua values")
    if g.exotic then return end
    local mt = json_text(msgs)
    if not mt then return end
    local opts2 = copy(opts)
    if type(opts.tools) == "table" then
        opts2.tools = json_text(opts.tools)
        if not opts2.tools then return end
    end
    no_raise(k, v, "JSON-faithful Lua values")
    local k2, v2 = render(mt, opts2)
    no_raise(k2, v2, "JSON text")
    same(k, v, k2, v2, "Lua values and their JSON text", "messages: " .. show(mt))
end

-- Text mode: the JSON text once, then the tables json.decode makes of it twice (render must not change them).
local function run_text(r, s)
    local a = string.find(s, "\0", 2, true) or (#s + 1)
    local b = string.find(s, "\0", a + 1, true) or (#s + 1)
    local messages_text = sub(s, 2, a - 1)
    local tools_text = sub(s, a + 1, b - 1)
    r.i = b + 1
    local opts = generator(r):options()
    if tools_text ~= "" then opts.tools = tools_text end
    local k, v = render(messages_text, opts)
    no_raise(k, v, "JSON text")
    local msgs = json.decode(messages_text, { exact = true })
    if type(msgs) ~= "table" then return end   -- nothing, text again, or a Lua type render rejects as an argument
    local opts2 = copy(opts)
    if tools_text ~= "" then
        opts2.tools = json.decode(tools_text, { exact = true })
        if opts2.tools == nil then return end
        if type(opts2.tools) == "string" then return end   -- a string is JSON text again
    end
    local k2, v2 = render_twice(msgs, opts2, "decoded JSON")
    no_raise(k2, v2, "decoded JSON")
    same(k, v, k2, v2, "JSON text and its decoded tables", "messages: " .. show(messages_text))
end

return function(s)
    local r = reader(s, 2)
    if (byte(s, 1) or 0) % 4 == 0 then run_text(r, s) else run_structural(r) end
end
