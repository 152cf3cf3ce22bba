#!/usr/bin/env luajit
--[[
render_chat.lua - renders conversations with glm53's Lua chat renderer (byte-equal to jinja2 with the model's
chat template), for training/tests: the Python renderer in training/chat.py is checked against it.

    luajit training/render_chat.lua IN.json OUT.json

IN is a JSON array of {"messages": [...], "tools": [...] or absent, "add_generation_prompt": true|false};
OUT a JSON array of {"text": "..."} or {"error": "..."}, one per input. An input {"parse": TEXT, "tools": [...]}
is model output instead (what follows the prompt's "<think>"), read back by glm53's output parser (vLLM's glm45
reasoning and glm47 tool-call rules): {"reasoning", "content", "tool_calls": [{"function": {"name",
"arguments"}}]}.

The Lua package is being reorganised on another branch; the module names live in REQUIRE below, the one place
to change them.
]]
local here = arg[0]:match("^(.*)/training/[^/]*$") or "."
package.path = here .. "/lua/?.lua;" .. here .. "/lua/?/init.lua;" .. package.path

local REQUIRE = {
    chat = { "glm53.chat", "glm53.chat.template" },     -- a module with render(messages, opts)
    parsers = { "glm53.parsers", "glm53.chat.parsers" }, -- a module with parse(text, tools)
    json = { "glm53.json", "glm53.chat.json" },         -- decode(text, {exact = true}) and encode(value)
}

local function load(names, want)
    local errs = {}
    for _, name in ipairs(names) do
        local ok, m = pcall(require, name)
        if ok and type(m) == "table" and type(m[want]) == "function" then return m end
        errs[#errs + 1] = name .. ": " .. tostring(m)
    end
    io.stderr:write("render_chat.lua: no module with ." .. want .. " among " .. table.concat(names, ", ") ..
                    "\n  " .. table.concat(errs, "\n  ") .. "\n")
    os.exit(2)
end

local chat = load(REQUIRE.chat, "render")
local json = load(REQUIRE.json, "decode")
local parsers = nil

if not (arg[1] and arg[2]) then
    io.stderr:write("usage: luajit training/render_chat.lua IN.json OUT.json\n")
    os.exit(2)
end
local f = assert(io.open(arg[1], "rb"))
local items, err = json.decode(f:read("*a"), { exact = true })
f:close()
if items == nil then
    io.stderr:write("render_chat.lua: " .. arg[1] .. ": " .. tostring(err) .. "\n")
    os.exit(1)
end

local out = {}
local function obj(...)   -- an ordered JSON object from key, value pairs
    local args = { ... }
    if json.ordered then return json.ordered(args) end
    local t = {}
    for k = 1, #args, 2 do t[args[k]] = args[k + 1] end
    return t
end

for i, item in ipairs(items) do
    if item.parse ~= nil then
        parsers = parsers or load(REQUIRE.parsers, "parse")
        local r = parsers.parse(item.parse, item.tools)
        local calls = {}
        for k, tc in ipairs(r.tool_calls or {}) do
            calls[k] = obj("function", obj("name", tc["function"].name, "arguments", tc["function"].arguments))
        end
        out[i] = obj("reasoning", r.reasoning or "", "content", r.content or json.null, "tool_calls",
                     json.array and json.array(calls) or calls)
        goto continue
    end
    local agp = item.add_generation_prompt
    if agp == nil then agp = true end
    local text, rerr = chat.render(item.messages, { tools = item.tools, add_generation_prompt = agp })
    if text then out[i] = json.ordered and json.ordered{ "text", text } or { text = text }
    else out[i] = json.ordered and json.ordered{ "error", tostring(rerr) } or { error = tostring(rerr) } end
    ::continue::
end
local o = assert(io.open(arg[2], "wb"))
o:write(json.encode(out))
o:close()
