#!/usr/bin/env luajit
--[[
tokenize.lua - batch tokenisation from the command line, for checks that compare glm53 with other tokenizers.

    luajit scripts/tokenize.lua --tokenizer FILE --input IN.json --out OUT.json
    luajit scripts/tokenize.lua --tokenizer FILE --input IN.json --out OUT.json --decode [--skip-special-tokens]

FILE is a tokenizer.json or a tiktoken rank file. Without --decode, IN is a JSON array of strings and OUT a JSON
array of id arrays, one per string (no special tokens added; special tokens written in the text are matched).
An element of IN may also be {"b64": "<base64>"}: raw bytes, for text that is not valid UTF-8 (which JSON
cannot carry); invalid sequences are encoded as U+FFFD, as HF gets them from Python's
bytes.decode("utf-8", "replace"). With --decode, IN is a JSON array of id arrays and OUT a JSON array of the
decoded strings (invalid UTF-8 repaired to U+FFFD as HF does; special tokens kept unless
--skip-special-tokens). Exit status 0 on success, 1 with a message on stderr otherwise.
]]
local here = arg[0]:match("^(.*)/scripts/[^/]*$") or "."
package.path = here .. "/lua/?.lua;" .. here .. "/lua/?/init.lua;" .. package.path

local cjson = require("cjson")
local base64 = require("glm53.util.base64")
local tokenizer = require("glm53.engine.tokenizer")
local file = require("glm53.util.file")

local function fail(msg)
    io.stderr:write("tokenize.lua: ", msg, "\n")
    os.exit(1)
end

local opts = {}
local i = 1
while i <= #arg do
    local a = arg[i]
    if a == "--decode" or a == "--skip-special-tokens" then
        opts[a:sub(3)] = true
        i = i + 1
    elseif a == "--tokenizer" or a == "--input" or a == "--out" then
        if not arg[i + 1] then fail(a .. " needs a value") end
        opts[a:sub(3)] = arg[i + 1]
        i = i + 2
    else
        fail("unknown argument " .. a .. " (usage: --tokenizer FILE --input IN.json --out OUT.json [--decode])")
    end
end
if not (opts.tokenizer and opts.input and opts.out) then
    fail("usage: --tokenizer FILE --input IN.json --out OUT.json [--decode [--skip-special-tokens]]")
end

local function read(path)
    local s, err = file.read_file(path)
    if not s then fail(err) end
    return s
end

local function b64decode(s)
    local bytes, err = base64.decode(s)
    if not bytes then fail("bad base64 in input: " .. err) end
    return bytes
end

local ok, input = pcall(cjson.decode, read(opts.input))
if not ok or type(input) ~= "table" then fail(opts.input .. ": not a JSON array") end
local tok, err = tokenizer.load(opts.tokenizer)
if not tok then fail(err) end

local out = {}
for k, item in ipairs(input) do
    if opts.decode then
        if type(item) ~= "table" then fail(("element %d is not an id array"):format(k)) end
        local text, derr = tok:decode(item, { skip_special_tokens = opts["skip-special-tokens"] })
        if not text then fail(("element %d: %s"):format(k, derr)) end
        out[k] = cjson.encode(text)
    else
        local text = item
        if type(item) == "table" and type(item.b64) == "string" then text = b64decode(item.b64) end
        if type(text) ~= "string" then fail(("element %d is neither a string nor {\"b64\": ...}"):format(k)) end
        local ids, n = tok:encode_buffer(text)
        if not ids then fail(("element %d: %s"):format(k, n)) end
        local t = {}
        for j = 0, n - 1 do t[j + 1] = ids[j] end
        out[k] = "[" .. table.concat(t, ",") .. "]"
    end
end
tok:free()

local written, werr = file.write_file(opts.out, "[" .. table.concat(out, ",") .. "]\n")
if not written then fail(werr) end
